/* ms_tok_hf: the tokenizer from a Hugging Face tokenizer.json (byte-level BPE, a Split regex pre-tokenizer or a Sequence of them, an NFC normaliser, added tokens, merges kept or ignored), as gpt-oss, Qwen3 and DeepSeek-V3 ship it. */
#define PCRE2_CODE_UNIT_WIDTH 8

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_file.h"
#include "ms_ident.h"
#include "ms_sbuf.h"
#include "ms_xxh.h"
#include "ms_tok_int.h"

/* tokenizer.json of o200k is 27.9 MB; a larger vocabulary stays far below this. */
#define HF_MAX_FILE ((uint64_t)512 << 20)

#define hf_fail ms_err_fail

/* GPT-2's byte-level alphabet: byte b is written as code point cp[b] (printable bytes as
 * themselves, the others as 256 + their order among them). */
void ms_tok_byte_level_map(uint32_t cp[256], int16_t inv[324])
{
    int n = 0;
    for (int i = 0; i < 324; i++) inv[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        cp[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
        inv[cp[b]] = (int16_t)b;
    }
}

/* The bytes a byte-level token string stands for, into out (at most n bytes: one per
 * character); the count, or -1 if a character is not in the alphabet. */
static long byte_level_decode(const int16_t *inv, const char *s, size_t n, uint8_t *out)
{
    long o = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        uint32_t cpt;
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + (size_t)len > n) return -1;
        cpt = len == 1 ? c : (uint32_t)(c & (0x7f >> len));
        for (int k = 1; k < len; k++) cpt = (cpt << 6) | ((unsigned char)s[i + (size_t)k] & 0x3f);
        if (cpt >= 324 || inv[cpt] < 0) return -1;
        out[o++] = (uint8_t)inv[cpt];
        i += (size_t)len;
    }
    return o;
}

/* The Split pattern for PCRE2: \s and \S spelled as White_Space (the Rust regex semantics the
 * tokenizers library has). \s inside a class adds the White_Space characters to it; \S inside
 * a class has no such spelling and is refused. */
static char *translate(const char *pat, const char *path)
{
    size_t n = strlen(pat), cap = n * 8 + 64 * 8, o = 0;
    char *out = ms_malloc(cap);
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        if (o + 128 >= cap) out = ms_realloc(out, cap *= 2);
        char c = pat[i];
        if (c == '\\' && i + 1 < n) {
            char d = pat[i + 1];
            if (d == 's' || d == 'S') {
                if (in_class && d == 'S') {
                    free(out);
                    hf_fail(MS_EXIT_INPUT, "%s: pre_tokenizer pattern: \\S inside a character class is not supported", path);
                    return NULL;
                }
                o += (size_t)sprintf(out + o, in_class ? "%s" : (d == 's' ? "[%s]" : "[^%s]"), TOK_WS);
            } else {
                out[o++] = c;
                out[o++] = d;
            }
            i++;
            continue;
        }
        if (c == '[' && !in_class) in_class = 1;
        else if (c == ']' && in_class) in_class = 0;
        out[o++] = c;
    }
    out[o] = 0;
    return out;
}

static json_t *field(json_t *o, const char *key) { return json_is_object(o) ? json_object_get(o, key) : NULL; }
static int is_type(json_t *o, const char *type)
{
    const char *t = json_string_value(field(o, "type"));
    return t && !strcmp(t, type);
}

/* One Split pre-tokenizer's regex (pattern.Regex, behavior Isolated, not inverted), or NULL. */
static const char *split_regex(json_t *split)
{
    const char *re = json_string_value(field(field(split, "pattern"), "Regex"));
    const char *beh = json_string_value(field(split, "behavior"));
    return re && beh && !strcmp(beh, "Isolated") && !json_is_true(field(split, "invert")) ? re : NULL;
}

/* The pre-tokenizer: a Split, or a Sequence of up to MS_TOK_MAX_SPLITS Splits (each applied to
 * the pieces of the one before, DeepSeek-V3's three) and a ByteLevel without its own regex or
 * prefix space. The regexes (borrowed) into re[], their count returned; -1 after a problem. */
static int split_patterns(json_t *root, const char *path, const char **re)
{
    json_t *pt = field(root, "pre_tokenizer");
    int n = 0;
    if (is_type(pt, "Sequence")) {
        json_t *l = field(pt, "pretokenizers");
        for (size_t i = 0; i < json_array_size(l); i++) {
            json_t *p = json_array_get(l, i);
            if (is_type(p, "Split") && n < MS_TOK_MAX_SPLITS && (re[n] = split_regex(p))) {
                n++;
                continue;
            }
            if (!is_type(p, "ByteLevel") || json_is_true(field(p, "use_regex")) || json_is_true(field(p, "add_prefix_space")))
                return hf_fail(MS_EXIT_INPUT, "%s: pre_tokenizer.pretokenizers[%zu] is not one this loader reads "
                                              "(up to %d Splits by a regex, behavior Isolated, then ByteLevel without "
                                              "its own regex or prefix space)",
                               path, i, MS_TOK_MAX_SPLITS);
        }
    } else if (is_type(pt, "Split") && (re[0] = split_regex(pt))) {
        n = 1;
    }
    if (n == 0)
        return hf_fail(MS_EXIT_INPUT, "%s: pre_tokenizer must split by a regex (Split, pattern.Regex, behavior "
                                      "Isolated, invert false), as byte-level BPE tokenizers do",
                       path);
    return n;
}

/* Ranks from model.vocab (id = rank, 0..n-1, each a distinct byte string), then the merges,
 * which follow the ranks of what they make. ignore_merges true (o200k): the encoder merges by
 * rank, tiktoken's BPE, and takes a piece that is a token whole. false (Qwen3): only listed
 * pairs join, the earliest listed first (the merges are kept for that), as Hugging Face's BPE. */
static int load_model(ms_tok *t, json_t *model, const char *path)
{
    if (!is_type(model, "BPE")) return hf_fail(MS_EXIT_INPUT, "%s: model.type must be \"BPE\"", path);
    if (json_is_true(field(model, "byte_fallback")))
        return hf_fail(MS_EXIT_INPUT, "%s: model.byte_fallback is not supported (byte-level BPE has no unknowns)", path);
    json_t *im = field(model, "ignore_merges");
    if (im && !json_is_boolean(im)) return hf_fail(MS_EXIT_INPUT, "%s: model.ignore_merges must be a boolean", path);
    int keep_merges = !json_is_true(im);
    json_t *vocab = field(model, "vocab"), *merges = field(model, "merges");
    size_t n = json_object_size(vocab);
    if (!json_is_object(vocab) || n == 0 || n > (size_t)INT32_MAX / 4)
        return hf_fail(MS_EXIT_INPUT, "%s: model.vocab must be a non-empty object", path);
    uint32_t cp[256];
    int16_t inv[324];
    ms_tok_byte_level_map(cp, inv);
    size_t pool = 0;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) pool += strlen(key);
    t->n_ranks = (int)n;
    t->pool = ms_malloc(pool + 1);
    t->tok_off = ms_malloc(n * sizeof *t->tok_off);
    t->tok_len = ms_calloc(n, sizeof *t->tok_len);
    uint8_t *seen = ms_calloc(n, 1);
    size_t cap = 1024;
    while (cap < 2 * n) cap *= 2;
    t->slots = ms_calloc(cap, sizeof *t->slots);
    t->tags = ms_malloc(cap * sizeof *t->tags);
    t->cap_mask = cap - 1;
    size_t used = 0;
    int rc = 0;
    json_object_foreach(vocab, key, val)
    {
        json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
        if (id < 0 || (size_t)id >= n || seen[id]) {
            rc = hf_fail(MS_EXIT_INPUT, "%s: model.vocab[\"%.40s\"]: ids must be 0..%zu, each once (got %lld)", path, key,
                         n - 1, (long long)id);
            break;
        }
        long nb = byte_level_decode(inv, key, strlen(key), t->pool + used);
        if (nb <= 0) {
            rc = hf_fail(MS_EXIT_INPUT, "%s: model.vocab[\"%.40s\"] is not a byte-level token", path, key);
            break;
        }
        seen[id] = 1;
        t->tok_off[id] = (uint32_t)used;
        t->tok_len[id] = (uint32_t)nb;
        used += (size_t)nb;
        int32_t dup = ms_tok_table_insert(t, (uint32_t)id);
        if (dup >= 0) {
            rc = hf_fail(MS_EXIT_INPUT, "%s: model.vocab ids %lld and %d are the same bytes", path, (long long)id, dup);
            break;
        }
    }
    free(seen);
    /* every text encodes: each byte has a token of its own; said at load, not when a text
     * first holds the byte (tiktoken.model vocabularies may lack some: their encode says so) */
    if (rc || ms_tok_check_bytes(t, path) != 0) return -1;
    /* the merges: pairs of vocabulary tokens whose result is one, in non-decreasing rank of it */
    size_t nm = json_array_size(merges), most = 0, longest = 1;
    if (!json_is_array(merges)) return hf_fail(MS_EXIT_INPUT, "%s: model.merges must be an array", path);
    for (size_t r = 0; r < n; r++) {
        most += t->tok_len[r] - 1; /* a token of L bytes can be made L - 1 ways */
        if (t->tok_len[r] > longest) longest = t->tok_len[r];
    }
    if (nm > most)
        return hf_fail(MS_EXIT_INPUT, "%s: model.merges has %zu entries; the vocabulary's tokens can be made in at most "
                                      "%zu ways (repeated merges?)",
                       path, nm, most);
    uint8_t *seen_split = ms_calloc(longest + 1, 1); /* the split points seen for the id being made */
    uint8_t *buf = ms_malloc(1024);
    size_t bcap = 1024;
    int32_t last = -1;
    uint32_t *pairs = keep_merges ? ms_malloc(sizeof *pairs * (2 * nm + 1)) : NULL; /* [nm][left, right] */
    for (size_t i = 0; i < nm && rc == 0; i++) {
        json_t *m = json_array_get(merges, i);
        const char *l, *r;
        size_t ll, rl;
        char *sp = NULL;
        if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
            json_is_string(json_array_get(m, 1))) {
            l = json_string_value(json_array_get(m, 0));
            r = json_string_value(json_array_get(m, 1));
            ll = json_string_length(json_array_get(m, 0));
            rl = json_string_length(json_array_get(m, 1));
        } else if (json_is_string(m) && (sp = strchr(json_string_value(m), ' ')) != NULL) { /* older files: "a b" */
            l = json_string_value(m);
            ll = (size_t)(sp - l);
            r = sp + 1;
            rl = strlen(r);
        } else {
            rc = hf_fail(MS_EXIT_INPUT, "%s: model.merges[%zu] must be a pair of strings", path, i);
            break;
        }
        if (ll + rl > bcap) buf = ms_realloc(buf, bcap = 2 * (ll + rl));
        long a = byte_level_decode(inv, l, ll, buf), b = a > 0 ? byte_level_decode(inv, r, rl, buf + a) : -1;
        int32_t id = b > 0 ? ms_tok_table_find(t, buf, (size_t)(a + b)) : -1;
        if (id < 0 || ms_tok_table_find(t, buf, (size_t)a) < 0 || ms_tok_table_find(t, buf + a, (size_t)b) < 0)
            rc = hf_fail(MS_EXIT_INPUT, "%s: model.merges[%zu] joins tokens that are not in the vocabulary", path, i);
        else if (id == last && seen_split[a])
            rc = hf_fail(MS_EXIT_INPUT, "%s: model.merges[%zu] repeats a merge (id %d split after byte %ld again)", path,
                         i, id, a);
        else if (id < last)
            rc = hf_fail(MS_EXIT_INPUT, "%s: model.merges[%zu] makes id %d after a merge made id %d: merges out of "
                                        "rank order are not supported (this encoder merges by rank)",
                         path, i, id, last);
        if (rc == 0 && id != last) memset(seen_split, 0, t->tok_len[id] + 1u); /* merges making one id are adjacent */
        if (rc == 0) seen_split[a] = 1;
        if (rc == 0 && pairs) {
            pairs[2 * i] = (uint32_t)ms_tok_table_find(t, buf, (size_t)a);
            pairs[2 * i + 1] = (uint32_t)ms_tok_table_find(t, buf + a, (size_t)b);
        }
        last = id;
    }
    free(buf);
    free(seen_split);
    if (rc == 0 && pairs)
        ms_tok_merges_index(t, pairs, (uint32_t)nm);
    else
        free(pairs);
    return rc;
}

static int load_added(ms_tok *t, json_t *added, const char *path)
{
    size_t n = json_array_size(added);
    t->spec = ms_calloc(n ? n : 1, sizeof *t->spec);
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(added, i), *c = field(a, "content"), *id = field(a, "id");
        if (!json_is_string(c) || json_string_length(c) == 0 || !json_is_integer(id))
            return hf_fail(MS_EXIT_INPUT, "%s: added_tokens[%zu] needs \"id\" and a non-empty \"content\"", path, i);
        json_int_t v = json_integer_value(id);
        if (v < t->n_ranks || v - t->n_ranks >= TOK_MAX_SPECIAL_SPAN)
            return hf_fail(MS_EXIT_INPUT, "%s: added_tokens[%zu]: id %lld must be above the vocabulary (0..%d) and "
                                          "near it",
                           path, i, (long long)v, t->n_ranks - 1);
        if (json_is_true(field(a, "normalized")) || json_is_true(field(a, "single_word")) ||
            json_is_true(field(a, "lstrip")) || json_is_true(field(a, "rstrip")))
            return hf_fail(MS_EXIT_INPUT, "%s: added_tokens[%zu] (%s): normalized, single_word, lstrip and rstrip are "
                                          "not supported (an added token is matched as its exact text)",
                           path, i, json_string_value(c));
        tok_special *sp = &t->spec[t->n_special++];
        sp->plain = !json_is_true(field(a, "special"));
        sp->len = json_string_length(c);
        sp->content = ms_malloc(sp->len + 1);
        memcpy(sp->content, json_string_value(c), sp->len + 1);
        sp->id = (int32_t)v;
    }
    return ms_tok_specials_index(t, path);
}

/* The entries of model.vocab (an object) and model.merges (an array) in the JSON text, counted
 * by a scan of its tokens before it is parsed: the parsed tree takes some 25 times the text, so
 * what it may hold is bounded first. Counts of what is absent are 0. */
static void count_model(const char *s, size_t n, size_t *n_vocab, size_t *n_merges)
{
    int depth = 0, which = 0, any = 0;
    size_t count = 0, kl = 0;
    const char *key = NULL, *k1 = NULL, *k2 = NULL;
    size_t k1l = 0, k2l = 0;
    *n_vocab = *n_merges = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != '"') j += s[j] == '\\' ? 2 : 1;
            key = s + i + 1;
            kl = j - i - 1;
            if (which && depth >= 3) any = 1;
            i = j;
        } else if (c == ':') {
            if (depth == 1) k1 = key, k1l = kl;
            if (depth == 2) k2 = key, k2l = kl;
        } else if (c == '{' || c == '[') {
            depth++;
            if (depth == 3 && k1 && k1l == 5 && !memcmp(k1, "model", 5) && k2 &&
                ((c == '{' && k2l == 5 && !memcmp(k2, "vocab", 5)) || (c == '[' && k2l == 6 && !memcmp(k2, "merges", 6)))) {
                which = c == '{' ? 1 : 2;
                count = 0;
                any = 0;
            } else if (which && depth > 3) {
                any = 1;
            }
        } else if (c == '}' || c == ']') {
            if (depth == 3 && which) {
                *(which == 1 ? n_vocab : n_merges) = any ? count + 1 : 0;
                which = 0;
            }
            depth--;
        } else if (c == ',') {
            if (depth == 3 && which) count++;
        } else if (which && depth >= 3 && c != ' ' && c != '\n' && c != '\r' && c != '\t') {
            any = 1;
        }
    }
}

/* ---- the compiled form, cached ----
 * Parsing the JSON and checking its merges takes about a second for o200k; what the encoder
 * uses (the ranks' bytes, the specials, the translated pattern) is kept in the user's private
 * cache directory under the XXH3-128 of the file's bytes, so the same file loads again in a few
 * milliseconds. Little-endian: "MSTOKHF1", u32 version, u32 flags, u32 ranks, u64 pool bytes, the pool,
 * u32 length per rank, u32 added tokens, per added token (i32 id, u32 length, u32 plain, bytes), u32 pattern
 * length, pattern, then u64 XXH3-64 of all before. A cache file that is wrong in any way is
 * not used (and is written again). */
#define HF_CACHE_MAGIC "MSTOKHF1"
#define HF_CACHE_VERSION 3u /* 3: the split patterns as a count and each (length, bytes); 2: u32 flags (bit 0: NFC, bit 1: merges kept) after the version; per added
                              token a u32 plain flag; the merges' rank pairs after the added tokens */

static void cache_path(const char *text, size_t len, char *out, size_t cap)
{
    char dir[4096];
    out[0] = 0;
    if (ms_ident_cache_dir(dir, sizeof dir) != 0) return;
    XXH128_hash_t h = XXH3_128bits(text, len);
    snprintf(out, cap, "%.4000s/tok-%016llx%016llx.bin", dir, (unsigned long long)h.high64,
             (unsigned long long)h.low64);
}

typedef struct {
    const uint8_t *p;
    size_t n, at;
} crd;

static int crd_take(crd *r, void *dst, size_t n)
{
    if (n > r->n - r->at) return -1;
    memcpy(dst, r->p + r->at, n);
    r->at += n;
    return 0;
}

/* t (zeroed) from the cache file at cpath; 0, or -1 (t reset) when it is missing or wrong. */
static int cache_load(ms_tok *t, const char *cpath, const char *path)
{
    size_t n = 0;
    char *b = cpath[0] ? ms_file_read_all(cpath, "tokenizer cache", 0, HF_MAX_FILE, MS_EXIT_IO, &n) : NULL;
    if (!b) {
        ms_err_clear();
        return -1;
    }
    crd r = {(const uint8_t *)b, n, 0};
    uint32_t ver = 0, flags = 0, nr = 0, ns = 0, pl = 0;
    uint64_t pool = 0, sum = 0;
    int ok = n >= 16 && !memcmp(b, HF_CACHE_MAGIC, 8) && (memcpy(&sum, b + n - 8, 8), XXH3_64bits(b, n - 8) == sum);
    r.n = ok ? n - 8 : 0;
    r.at = 8;
    ok = ok && crd_take(&r, &ver, 4) == 0 && ver == HF_CACHE_VERSION && crd_take(&r, &flags, 4) == 0 && flags <= 3 &&
         crd_take(&r, &nr, 4) == 0 && nr > 0 &&
         nr <= (uint32_t)INT32_MAX / 4 && crd_take(&r, &pool, 8) == 0 && pool <= r.n - r.at;
    if (ok) {
        t->n_ranks = (int)nr;
        t->nfc = (int)(flags & 1);
        t->pool = ms_malloc((size_t)pool + 1);
        t->tok_off = ms_malloc(sizeof *t->tok_off * nr);
        t->tok_len = ms_malloc(sizeof *t->tok_len * nr);
        ok = crd_take(&r, t->pool, (size_t)pool) == 0 && crd_take(&r, t->tok_len, sizeof *t->tok_len * nr) == 0;
        uint64_t at = 0;
        for (uint32_t i = 0; ok && i < nr; i++) {
            t->tok_off[i] = (uint32_t)at;
            at += t->tok_len[i];
            ok = t->tok_len[i] > 0 && at <= pool;
        }
        ok = ok && at == pool;
    }
    if (ok) {
        size_t cap = 1024;
        while (cap < 2 * (size_t)nr) cap *= 2;
        t->slots = ms_calloc(cap, sizeof *t->slots);
        t->tags = ms_malloc(cap * sizeof *t->tags);
        t->cap_mask = cap - 1;
        for (uint32_t i = 0; ok && i < nr; i++) ok = ms_tok_table_insert(t, i) < 0;
        ok = ok && crd_take(&r, &ns, 4) == 0 && ns <= (r.n - r.at) / 8;
    }
    if (ok) {
        t->spec = ms_calloc(ns ? ns : 1, sizeof *t->spec);
        for (uint32_t i = 0; ok && i < ns; i++) {
            int32_t id;
            uint32_t l, plain;
            ok = crd_take(&r, &id, 4) == 0 && crd_take(&r, &l, 4) == 0 && crd_take(&r, &plain, 4) == 0 && plain <= 1 &&
                 l > 0 && l <= r.n - r.at && id >= (int32_t)nr && id - (int32_t)nr < TOK_MAX_SPECIAL_SPAN;
            if (!ok) break;
            tok_special *sp = &t->spec[t->n_special++];
            sp->content = ms_malloc((size_t)l + 1);
            crd_take(&r, sp->content, l);
            sp->content[l] = 0;
            sp->len = l;
            sp->id = id;
            sp->plain = (int)plain;
        }
        uint32_t nmg = 0;
        if (ok && (flags & 2)) {
            ok = crd_take(&r, &nmg, 4) == 0 && nmg > 0 && nmg <= (r.n - r.at) / 8;
            uint32_t *pairs = ok ? ms_malloc(sizeof *pairs * 2 * (size_t)nmg) : NULL;
            ok = ok && crd_take(&r, pairs, sizeof *pairs * 2 * (size_t)nmg) == 0;
            for (uint32_t i = 0; ok && i < 2 * nmg; i++) ok = pairs[i] < nr;
            if (ok)
                ms_tok_merges_index(t, pairs, nmg);
            else
                free(pairs);
        }
        ok = ok && ms_tok_specials_index(t, path) == 0 && ms_tok_check_bytes(t, path) == 0;
    }
    uint32_t np = 0;
    ok = ok && crd_take(&r, &np, 4) == 0 && np >= 1 && np <= MS_TOK_MAX_SPLITS;
    for (uint32_t k = 0; ok && k < np; k++) {
        char *pat = NULL;
        ok = crd_take(&r, &pl, 4) == 0 && pl <= r.n - r.at && (k + 1 < np || r.at + pl == r.n);
        if (ok) {
            pat = ms_malloc((size_t)pl + 1);
            crd_take(&r, pat, pl);
            pat[pl] = 0;
            int jit = 0;
            pcre2_code *re = ms_tok_regex_compile_pattern(pat, &jit);
            if (k + 1 < np) t->pre[t->n_pre++] = re;
            else t->re = re, t->jit = jit;
            ok = re != NULL;
        }
        free(pat);
    }
    ok = ok && t->re;
    free(b);
    if (!ok) {
        ms_tok_reset(t);
        ms_err_clear();
        return -1;
    }
    return 0;
}

static void put32(ms_sbuf *b, uint32_t v) { ms_sbuf_add(b, (const char *)&v, 4); }

/* Keep what t holds (loaded from path; its split pattern translated as pat) at cpath. Best
 * effort: a cache that cannot be written is not an error. */
static void cache_save(const ms_tok *t, char *const *pat, int np, const char *cpath)
{
    if (!cpath[0]) return;
    ms_sbuf b = {0};
    uint64_t pool = 0;
    for (int i = 0; i < t->n_ranks; i++) pool += t->tok_len[i];
    ms_sbuf_add(&b, HF_CACHE_MAGIC, 8);
    put32(&b, HF_CACHE_VERSION);
    put32(&b, (uint32_t)t->nfc | (t->n_merges ? 2u : 0u));
    put32(&b, (uint32_t)t->n_ranks);
    ms_sbuf_add(&b, (const char *)&pool, 8);
    for (int i = 0; i < t->n_ranks; i++) ms_sbuf_add(&b, (const char *)t->pool + t->tok_off[i], t->tok_len[i]);
    ms_sbuf_add(&b, (const char *)t->tok_len, sizeof *t->tok_len * (size_t)t->n_ranks);
    put32(&b, (uint32_t)t->n_special);
    for (int i = 0; i < t->n_special; i++) {
        put32(&b, (uint32_t)t->spec[i].id);
        put32(&b, (uint32_t)t->spec[i].len);
        put32(&b, (uint32_t)t->spec[i].plain);
        ms_sbuf_add(&b, t->spec[i].content, t->spec[i].len);
    }
    if (t->n_merges) {
        put32(&b, t->n_merges);
        ms_sbuf_add(&b, (const char *)t->merge_pairs, sizeof *t->merge_pairs * 2 * (size_t)t->n_merges);
    }
    put32(&b, (uint32_t)np);
    for (int k = 0; k < np; k++) {
        put32(&b, (uint32_t)strlen(pat[k]));
        ms_sbuf_adds(&b, pat[k]);
    }
    uint64_t sum = XXH3_64bits(b.s, b.n);
    ms_sbuf_add(&b, (const char *)&sum, 8);
    char tmp[4200];
    int fd = ms_file_tmp_create(cpath, "tokenizer cache", 0600, tmp, sizeof tmp);
    if (fd >= 0) ms_file_tmp_commit(fd, tmp, cpath, "tokenizer cache", ms_file_write_all(fd, b.s, b.n) != 0);
    ms_err_clear();
    ms_sbuf_free(&b);
}

int ms_tok_hf_load(ms_tok *t, const char *path)
{
    size_t len = 0;
    char *text = ms_file_read_all(path, "tokenizer", 0, HF_MAX_FILE, MS_EXIT_INPUT, &len);
    if (!text) return -1;
    char cpath[4200];
    cache_path(text, len, cpath, sizeof cpath);
    if (cache_load(t, cpath, path) == 0) {
        free(text);
        return 0;
    }
    size_t nv, nm;
    count_model(text, len, &nv, &nm);
    if (nm > 16 * nv + 256) { /* o200k: 2.2 merges a token; the exact bound is checked once the vocabulary is read */
        free(text);
        return hf_fail(MS_EXIT_INPUT, "%s: model.merges has %zu entries for %zu vocabulary tokens: far more than a "
                                      "vocabulary can be made with (repeated merges?)",
                       path, nm, nv);
    }
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    free(text);
    if (!root) return hf_fail(MS_EXIT_INPUT, "%s:%d: bad JSON: %s", path, je.line, je.text);
    int rc = -1, np = 0;
    const char *pat[MS_TOK_MAX_SPLITS];
    if (!json_is_object(root)) {
        hf_fail(MS_EXIT_INPUT, "%s: top level is not a JSON object", path);
    } else if (!json_is_null(field(root, "normalizer")) && field(root, "normalizer") &&
               !is_type(field(root, "normalizer"), "NFC")) {
        hf_fail(MS_EXIT_INPUT, "%s: normalizer: only NFC is supported (or none)", path);
    } else if (!is_type(field(root, "decoder"), "ByteLevel")) {
        hf_fail(MS_EXIT_INPUT, "%s: decoder must be ByteLevel", path);
    } else if ((np = split_patterns(root, path, pat)) > 0 && load_model(t, field(root, "model"), path) == 0 &&
               load_added(t, field(root, "added_tokens"), path) == 0) {
        t->nfc = is_type(field(root, "normalizer"), "NFC");
        char *p[MS_TOK_MAX_SPLITS] = {0};
        rc = 0;
        for (int k = 0; k < np && rc == 0; k++) {
            int jit = 0;
            pcre2_code *re = (p[k] = translate(pat[k], path)) ? ms_tok_regex_compile_pattern(p[k], &jit) : NULL;
            if (p[k] && !re) ms_err_wrap("%s: pre_tokenizer pattern %d", path, k);
            if (!re) rc = -1;
            else if (k + 1 < np) t->pre[t->n_pre++] = re;
            else t->re = re, t->jit = jit;
        }
        if (rc == 0) cache_save(t, p, np, cpath);
        for (int k = 0; k < np; k++) free(p[k]);
    }
    json_decref(root);
    return rc;
}
