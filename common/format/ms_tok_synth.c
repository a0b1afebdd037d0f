/* ms_tok_synth: writes a small tiktoken-format tokenizer (BPE ranks trained on a built-in English
 * sample, plus the Kimi special tokens) for synthetic checkpoints. */
#define PCRE2_CODE_UNIT_WIDTH 8

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <jansson.h>
#include <pcre2.h>

#include "ms_err.h"
#include "ms_tok.h"
#include "ms_tok_int.h"

/* dir/name, malloc'ed. */
static char *tok_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = ms_malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static void tok_b64_encode(const uint8_t *p, size_t n, char *out)
{
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)p[i] << 16;
        if (i + 1 < n) w |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n) w |= p[i + 2];
        out[o++] = al[(w >> 18) & 63];
        out[o++] = al[(w >> 12) & 63];
        out[o++] = i + 1 < n ? al[(w >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? al[w & 63] : '=';
    }
    out[o] = 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The synthetic tokenizer. */

/* English sample for the merge training: plain prose about computers and weather. */
static const char tok_sample[] =
    "Computers are machines that follow instructions. A computer reads a program, stores data in its "
    "memory, and performs calculations much faster than any person could. The first electronic computers "
    "filled entire rooms, used thousands of vacuum tubes, and consumed as much power as a small town. "
    "Today a phone in your pocket is millions of times faster, and it runs on a battery that lasts all day.\n"
    "Inside every computer there is a processor, some memory, and storage. The processor executes "
    "instructions one after another, although modern processors can work on several instructions at the "
    "same time. Memory holds the program and the data it is working on, while storage keeps files when the "
    "power is off. When you open a document, the computer copies it from storage into memory, and when "
    "you save it, the computer writes it back.\n"
    "Programs are written by people in programming languages. A programmer describes what the computer "
    "should do, step by step, and a compiler translates that description into the simple operations the "
    "processor understands. Good programs are tested carefully, because a single mistake can make the "
    "whole system stop working. It's often said that computers don't make mistakes; people do, and "
    "they're usually the ones who wrote the program.\n"
    "Networks connect computers to each other. The internet is a network of networks that lets a computer "
    "in one country send a message to a computer in another country in less than a second. Data travels "
    "in small packets, and each packet finds its own way through routers and cables under the sea.\n\n"
    "The weather changes every day. In the morning the sky may be clear and blue, by the afternoon clouds "
    "can gather, and in the evening it might rain. Weather is the state of the atmosphere at a given place "
    "and time: the temperature, the wind, the humidity, the clouds and the rain or snow. Climate, on the "
    "other hand, describes the average weather over many years.\n"
    "The sun heats the surface of the earth unevenly. Warm air rises, cool air sinks, and the difference "
    "in pressure makes the wind blow. When warm, moist air rises and cools, the water vapour in it "
    "condenses into tiny droplets, and clouds form. If the droplets grow large enough, they fall as rain; "
    "if the air is cold enough, they fall as snow.\n"
    "Weather forecasters use computers to predict the weather. They collect measurements of temperature, "
    "pressure, wind and humidity from thousands of weather stations, balloons, ships, aircraft and "
    "satellites. Then a computer model divides the atmosphere into a grid of small boxes and calculates "
    "how the air in each box will change over the next few minutes, again and again, until it reaches "
    "the next day or the next week. The forecast for tomorrow is usually very good; the forecast for ten "
    "days from now is much less certain, because small errors grow over time.\n"
    "On a cold winter morning in 2023 the temperature fell to -12 degrees, and the wind speed reached 85 "
    "kilometres per hour. The forecast said: \"Snow in the north, rain in the south, and strong winds "
    "everywhere.\" People stayed at home, read the news on their computers, and watched the snow fall "
    "outside the window. By the evening the storm had passed, the sky was clear again, and the stars "
    "were shining over the quiet, white town.\n"
    "Computers and weather have a long history together. Some of the very first computer programs were "
    "written to calculate the weather, and today the largest computers in the world still spend much of "
    "their time on weather and climate models. The better the computers become, the better the forecasts "
    "we get, and the more time people have to prepare for storms, floods and heat waves.\n";

typedef struct {
    int32_t *tok; /* token ids of this distinct piece */
    int n;        /* number of tokens */
    int count;    /* how often the piece occurs in the sample */
} tok_word;

static int tok_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Write the whole synthetic vocabulary; vocab bytes in pool via off/len. */
static int tok_synth_write_files(const char *dir, const uint8_t *pool, const size_t *off, const size_t *len,
                                 int n_ranks, int with_tools)
{
    char *path = tok_path(dir, "tiktoken.model");
    FILE *f = fopen(path, "wb");
    if (!f) {
        ms_err_fail(MS_EXIT_IO, "%s: cannot write: %s", path, strerror(errno));
        free(path);
        return -1;
    }
    char b64[256];
    for (int r = 0; r < n_ranks; r++) {
        MS_ASSERT(len[r] * 4 / 3 + 8 < sizeof b64);
        tok_b64_encode(pool + off[r], len[r], b64);
        fprintf(f, "%s %d\n", b64, r);
    }
    if (fclose(f) != 0) {
        ms_err_fail(MS_EXIT_IO, "%s: write failed: %s", path, strerror(errno));
        free(path);
        return -1;
    }
    free(path);

    /* The ten specials of the workspace's Kimi tokenizer surrogate, in its order: the chat
     * format (ms_chat) needs the <|im_*|> ones. */
    static const char *names[MS_TOK_SYNTH_SPECIALS + MS_TOK_SYNTH_TOOL_SPECIALS] = {
        "[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|start_header_id|>", "<|end_header_id|>",
        "[EOT]", "<|im_system|>", "<|im_middle|>",
        /* with_tools: Kimi's tool-call markers */
        "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>", "<|tool_call_end|>"};
    int n_specials = MS_TOK_SYNTH_SPECIALS + (with_tools ? MS_TOK_SYNTH_TOOL_SPECIALS : 0);
    json_t *root = json_object();
    json_t *dec = json_object();
    for (int i = 0; i < n_specials; i++) {
        char key[32];
        snprintf(key, sizeof key, "%d", n_ranks + i);
        json_t *e = json_object();
        json_object_set_new(e, "content", json_string(names[i]));
        json_object_set_new(e, "special", json_true());
        json_object_set_new(e, "lstrip", json_false());
        json_object_set_new(e, "rstrip", json_false());
        json_object_set_new(e, "normalized", json_false());
        json_object_set_new(e, "single_word", json_false());
        json_object_set_new(dec, key, e);
    }
    json_object_set_new(root, "tokenizer_class", json_string("TikTokenTokenizer"));
    json_object_set_new(root, "bos_token", json_string("[BOS]"));
    json_object_set_new(root, "eos_token", json_string("[EOS]"));
    json_object_set_new(root, "added_tokens_decoder", dec);
    path = tok_path(dir, "tokenizer_config.json");
    int rc = json_dump_file(root, path, JSON_INDENT(1) | JSON_SORT_KEYS);
    json_decref(root);
    if (rc != 0) {
        ms_err_fail(MS_EXIT_IO, "%s: cannot write", path);
        free(path);
        return -1;
    }
    free(path);
    return 0;
}

/* The synthetic vocabulary: n_ranks byte strings (token r is pool[off[r] .. off[r] + len[r])),
 * all malloc'ed. Returns 0, or -1 with ms_err set. */
static int tok_synth_vocab(int n_ranks, uint8_t **pool_out, size_t **off_out, size_t **len_out)
{
    int jit;
    pcre2_code *re = ms_tok_regex_compile(&jit);
    if (!re) return -1;

    /* vocabulary under construction: byte strings by rank */
    size_t pool_cap = 4096, pool_len = 0;
    uint8_t *pool = ms_malloc(pool_cap);
    size_t *off = ms_malloc((size_t)n_ranks * sizeof *off);
    size_t *len = ms_malloc((size_t)n_ranks * sizeof *len);
    int nv = 0;
    for (int b = 0; b < 256; b++) {
        pool[pool_len] = (uint8_t)b;
        off[nv] = pool_len++;
        len[nv++] = 1;
    }

    /* split the sample into distinct pieces with counts */
    int n_words = 0, cap_words = 256;
    tok_word *words = ms_calloc((size_t)cap_words, sizeof *words);
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    MS_ASSERT(md != NULL);
    const uint8_t *smp = (const uint8_t *)tok_sample;
    size_t slen = sizeof tok_sample - 1, pos = 0;
    while (pos < slen) {
        int rc = pcre2_match(re, smp, slen, pos, 0, md, NULL);
        MS_ASSERT(rc > 0);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        MS_ASSERT(ov[0] == pos && ov[1] > pos);
        size_t a = ov[0], b = ov[1];
        pos = b;
        int w;
        for (w = 0; w < n_words; w++) {
            if ((size_t)words[w].n != b - a) continue;
            int same = 1;
            for (int k = 0; k < words[w].n && same; k++) same = words[w].tok[k] == smp[a + (size_t)k];
            if (same) break;
        }
        if (w < n_words) {
            words[w].count++;
            continue;
        }
        if (n_words == cap_words) {
            cap_words *= 2;
            words = ms_realloc(words, (size_t)cap_words * sizeof *words);
        }
        tok_word *nw = &words[n_words++];
        nw->n = (int)(b - a);
        nw->count = 1;
        nw->tok = ms_malloc((size_t)nw->n * sizeof *nw->tok);
        for (int k = 0; k < nw->n; k++) nw->tok[k] = smp[a + (size_t)k];
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    MS_ASSERT(n_words < 65536); /* the word index lives in 16 bits of the pair key below */

    /* Greedy BPE training: merge the most frequent adjacent pair (ties: smallest (left, right)
     * ids) while pairs and ranks remain; pairs seen once come last, so they only complete rare
     * words of the sample. */
    size_t total = 0;
    for (int w = 0; w < n_words; w++) total += (size_t)words[w].n;
    uint64_t *pairs = ms_malloc((total ? total : 1) * sizeof *pairs);
    while (nv < n_ranks) {
        size_t np = 0;
        for (int w = 0; w < n_words; w++)
            for (int k = 0; k + 1 < words[w].n; k++)
                pairs[np++] = ((uint64_t)words[w].tok[k] << 40) | ((uint64_t)words[w].tok[k + 1] << 16) | (uint64_t)w;
        if (np == 0) break;
        qsort(pairs, np, sizeof *pairs, tok_cmp_u64);
        uint64_t best = 0;
        long best_count = 0;
        for (size_t i = 0; i < np;) {
            uint64_t key = pairs[i] >> 16;
            long c = 0;
            size_t j = i;
            for (; j < np && (pairs[j] >> 16) == key; j++) c += words[pairs[j] & 0xffff].count;
            if (c > best_count) {
                best_count = c;
                best = key;
            }
            i = j;
        }
        int32_t lt = (int32_t)(best >> 24), rt = (int32_t)(best & 0xffffff);
        size_t nl = len[lt] + len[rt];
        /* the concatenation may already be a token reached by another pair */
        int32_t id = -1;
        for (int r = 256; r < nv && id < 0; r++)
            if (len[r] == nl && memcmp(pool + off[r], pool + off[lt], len[lt]) == 0 &&
                memcmp(pool + off[r] + len[lt], pool + off[rt], len[rt]) == 0)
                id = r;
        if (id < 0) {
            if (pool_len + nl > pool_cap) {
                while (pool_len + nl > pool_cap) pool_cap *= 2;
                pool = ms_realloc(pool, pool_cap);
            }
            memcpy(pool + pool_len, pool + off[lt], len[lt]);
            memcpy(pool + pool_len + len[lt], pool + off[rt], len[rt]);
            off[nv] = pool_len;
            len[nv] = nl;
            pool_len += nl;
            id = nv++;
        }
        for (int w = 0; w < n_words; w++) {
            int o = 0;
            for (int k = 0; k < words[w].n; k++) {
                if (k + 1 < words[w].n && words[w].tok[k] == lt && words[w].tok[k + 1] == rt) {
                    words[w].tok[o++] = id;
                    k++;
                } else {
                    words[w].tok[o++] = words[w].tok[k];
                }
            }
            words[w].n = o;
        }
    }
    free(pairs);
    int n_trained = nv;
    for (int w = 0; w < n_words; w++) free(words[w].tok);
    free(words);

    /* Fill any remaining ranks with unused lowercase-letter strings (two letters, then three, ...)
     * so that every requested rank exists; they are ordinary, realistic-looking tokens. */
    for (size_t width = 2; nv < n_ranks; width++) {
        size_t combos = 1;
        for (size_t k = 0; k < width && combos < (size_t)n_ranks * 64; k++) combos *= 26;
        for (size_t c = 0; c < combos && nv < n_ranks; c++) {
            uint8_t s[16];
            size_t v = c;
            for (size_t k = width; k-- > 0;) {
                s[k] = (uint8_t)('a' + v % 26);
                v /= 26;
            }
            int dup = 0;
            for (int r = 256; r < n_trained && !dup; r++) dup = len[r] == width && memcmp(pool + off[r], s, width) == 0;
            if (dup) continue;
            if (pool_len + width > pool_cap) {
                while (pool_len + width > pool_cap) pool_cap *= 2;
                pool = ms_realloc(pool, pool_cap);
            }
            memcpy(pool + pool_len, s, width);
            off[nv] = pool_len;
            len[nv++] = width;
            pool_len += width;
        }
    }

    *pool_out = pool;
    *off_out = off;
    *len_out = len;
    return 0;
}

static int tok_synth_begin(const char *dir, int n_ranks)
{
    if (n_ranks < 256 + 16 || n_ranks > (1 << 24))
        return ms_err_fail(MS_EXIT_USAGE, "tokenizer synth: n_ranks %d out of range (272..%d)", n_ranks, 1 << 24);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return ms_err_fail(MS_EXIT_IO, "%s: cannot create directory: %s", dir, strerror(errno));
    return 0;
}

int ms_tok_write_synth(const char *dir, int n_ranks) { return ms_tok_write_synth_kimi(dir, n_ranks, 0); }

int ms_tok_write_synth_kimi(const char *dir, int n_ranks, int with_tools)
{
    uint8_t *pool;
    size_t *off, *len;
    if (tok_synth_begin(dir, n_ranks) != 0 || tok_synth_vocab(n_ranks, &pool, &off, &len) != 0) return -1;
    int rc = tok_synth_write_files(dir, pool, off, len, n_ranks, with_tools);
    free(pool);
    free(off);
    free(len);
    return rc;
}

/* ---- the same vocabulary as a Hugging Face tokenizer.json ---- */

/* token bytes as byte-level characters (UTF-8), NUL-terminated into out (room: 2 * n + 1) */
static void byte_level(const uint32_t *cp, const uint8_t *p, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = cp[p[i]];
        if (c < 0x80) {
            out[o++] = (char)c;
        } else {
            out[o++] = (char)(0xC0 | (c >> 6));
            out[o++] = (char)(0x80 | (c & 0x3F));
        }
    }
    out[o] = 0;
}

typedef struct {
    int32_t merged, left, right;
} tok_merge;

static int tok_cmp_merge(const void *a, const void *b)
{
    const tok_merge *x = a, *y = b;
    if (x->merged != y->merged) return x->merged < y->merged ? -1 : 1;
    if (x->left != y->left) return x->left < y->left ? -1 : 1;
    return (x->right > y->right) - (x->right < y->right);
}

int ms_tok_write_synth_hf(const char *dir, int n_ranks, const char *pattern, const char *const *specials,
                          int n_specials)
{
    uint8_t *pool;
    size_t *off, *len;
    if (tok_synth_begin(dir, n_ranks) != 0 || tok_synth_vocab(n_ranks, &pool, &off, &len) != 0) return -1;
    /* a lookup of token bytes, to list every split (l, r) of a token into two tokens, ordered by
     * the rank of the token, then l, then r: merging by these priorities is rank BPE */
    ms_tok t;
    memset(&t, 0, sizeof t);
    size_t total = 0, cap = 1024;
    for (int r = 0; r < n_ranks; r++) total += len[r];
    while (cap < 2 * (size_t)n_ranks) cap *= 2;
    t.pool = pool;
    t.tok_off = ms_malloc(sizeof *t.tok_off * (size_t)n_ranks);
    t.tok_len = ms_malloc(sizeof *t.tok_len * (size_t)n_ranks);
    t.slots = ms_calloc(cap, sizeof *t.slots);
    t.tags = ms_malloc(cap * sizeof *t.tags);
    t.cap_mask = cap - 1;
    t.n_ranks = n_ranks;
    for (int r = 0; r < n_ranks; r++) {
        t.tok_off[r] = (uint32_t)off[r];
        t.tok_len[r] = (uint32_t)len[r];
        MS_ASSERT(ms_tok_table_insert(&t, (uint32_t)r) < 0);
    }
    size_t nm = 0, cm = 1024;
    tok_merge *mg = ms_malloc(sizeof *mg * cm);
    for (int r = 256; r < n_ranks; r++)
        for (size_t k = 1; k < len[r]; k++) {
            int32_t l = ms_tok_table_find(&t, pool + off[r], k), rr = ms_tok_table_find(&t, pool + off[r] + k, len[r] - k);
            if (l < 0 || rr < 0) continue;
            if (nm == cm) mg = ms_realloc(mg, sizeof *mg * (cm *= 2));
            mg[nm++] = (tok_merge){r, l, rr};
        }
    qsort(mg, nm, sizeof *mg, tok_cmp_merge);
    uint32_t cpm[256];
    int16_t inv[324];
    ms_tok_byte_level_map(cpm, inv);
    char *buf = ms_malloc(2 * total + 64), *b2 = ms_malloc(2 * total + 64);
    json_t *vocab = json_object(), *merges = json_array(), *added = json_array();
    for (int r = 0; r < n_ranks; r++) {
        byte_level(cpm, pool + off[r], len[r], buf);
        json_object_set_new(vocab, buf, json_integer(r));
    }
    for (size_t i = 0; i < nm; i++) {
        byte_level(cpm, pool + off[mg[i].left], len[mg[i].left], buf);
        byte_level(cpm, pool + off[mg[i].right], len[mg[i].right], b2);
        json_array_append_new(merges, json_pack("[s,s]", buf, b2));
    }
    for (int i = 0; i < n_specials; i++)
        json_array_append_new(added, json_pack("{s:i,s:s,s:b,s:b,s:b,s:b,s:b}", "id", n_ranks + i, "content", specials[i],
                                               "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special",
                                               strncmp(specials[i], "<|", 2) == 0));
    json_t *root = json_pack(
        "{s:s,s:n,s:n,s:o,s:n,s:{s:s,s:[{s:s,s:{s:s},s:s,s:b},{s:s,s:b,s:b,s:b}]},s:n,s:{s:s,s:b,s:b,s:b},"
        "s:{s:s,s:n,s:n,s:n,s:n,s:b,s:b,s:b,s:o,s:o}}",
        "version", "1.0", "truncation", "padding", "added_tokens", added, "normalizer", "pre_tokenizer", "type", "Sequence",
        "pretokenizers", "type", "Split", "pattern", "Regex", pattern, "behavior", "Isolated", "invert", 0, "type",
        "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 0, "post_processor", "decoder", "type",
        "ByteLevel", "add_prefix_space", 1, "trim_offsets", 1, "use_regex", 1, "model", "type", "BPE", "dropout",
        "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0,
        "ignore_merges", 1, "vocab", vocab, "merges", merges);
    char *path = tok_path(dir, "tokenizer.json");
    int rc = json_dump_file(root, path, JSON_COMPACT | JSON_PRESERVE_ORDER) == 0
                 ? 0
                 : ms_err_fail(MS_EXIT_IO, "%s: cannot write: %s", path, strerror(errno));
    free(path);
    json_decref(root);
    free(buf);
    free(b2);
    free(mg);
    free(t.tok_off);
    free(t.tok_len);
    free(t.slots);
    free(t.tags);
    free(pool);
    free(off);
    free(len);
    return rc;
}
