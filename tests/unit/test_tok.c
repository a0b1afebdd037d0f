/* test_tok: tokenizer parity with tiktoken (shared cases), synthetic tokenizer, BPE rules and error paths. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "ms_err.h"
#include "ms_clock.h"
#include "ms_test.h"
#include "ms_tok.h"

static int write_file(const char *dir, const char *name, const char *data, size_t n)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

static int write_str(const char *dir, const char *name, const char *s)
{
    return write_file(dir, name, s, strlen(s));
}

/* encode then decode; 1 if the bytes come back unchanged */
static int round_trip(const ms_tok *t, const char *s, size_t n, int allow_special, size_t *n_ids)
{
    int32_t *ids = NULL;
    size_t ni = 0;
    if (ms_tok_encode(t, s, n, allow_special, &ids, &ni) != 0) {
        fprintf(stderr, "encode failed: %s\n", ms_err_msg());
        return 0;
    }
    char *back = NULL;
    size_t bn = 0;
    int ok = ms_tok_decode(t, ids, ni, &back, &bn) == 0 && bn == n && memcmp(back, s, n) == 0 && back[bn] == 0;
    if (n_ids) *n_ids = ni;
    free(ids);
    free(back);
    return ok;
}

/* Encode a NUL-terminated string; returns a malloc'ed array (count in *n) or NULL. */
static int32_t *enc(const ms_tok *t, const char *s, int allow_special, size_t *n)
{
    int32_t *ids = NULL;
    if (ms_tok_encode(t, s, strlen(s), allow_special, &ids, n) != 0) return NULL;
    return ids;
}

static int ids_eq(const int32_t *got, size_t ng, const int32_t *want, size_t nw)
{
    return got && ng == nw && (nw == 0 || memcmp(got, want, nw * sizeof *want) == 0);
}

/* ---------------------------------------------------------------------------------------- */
/* Parity with the official tiktoken core on the shared surrogate tokenizer. */

static void test_shared_cases(void)
{
    const char *p = ms_t_shared("fixtures/tokenizer/kimi-o200k/tiktoken.model");
    if (!p) return;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", p);
    *strrchr(dir, '/') = 0;
    char path[4200];

    /* independent expectations from the files themselves */
    size_t mlen = 0;
    char *model = ms_t_read_file(p, &mlen);
    T_CHECK(model != NULL, "read %s", p);
    long lines = 0;
    for (size_t i = 0; model && i < mlen;) {
        size_t e = i;
        while (e < mlen && model[e] != '\n') e++;
        if (e > i && !(e == i + 1 && model[i] == '\r')) lines++;
        i = e + 1;
    }
    free(model);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    json_error_t jerr;
    json_t *cfg = json_load_file(path, 0, &jerr);
    T_CHECK(cfg != NULL, "parse %s", path);
    json_t *dec = json_object_get(cfg, "added_tokens_decoder");
    long max_id = lines - 1;
    const char *key;
    json_t *val;
    json_object_foreach(dec, key, val) if (atol(key) > max_id) max_id = atol(key);

    /* Load time is reported, not asserted: speed is measured by benchmarks, never unit tests. */
    double t0 = ms_now();
    ms_tok *t = ms_tok_load(dir);
    double t_load = ms_now() - t0;
    T_CHECK(t != NULL, "load %s: %s", dir, ms_err_msg());
    if (!t) {
        json_decref(cfg);
        return;
    }
    printf("tokenizer: loaded %ld ranks in %.3f s\n", lines, t_load);
    T_CHECK(ms_tok_n_vocab(t) == max_id + 1, "n_vocab %d, files say %ld", ms_tok_n_vocab(t), max_id + 1);
    int n_spec = 0;
    json_object_foreach(dec, key, val)
    {
        const char *content = json_string_value(json_object_get(val, "content"));
        T_CHECK(content && ms_tok_special_id(t, content) == atoi(key), "special %s has id %d, config says %s",
                content ? content : "?", content ? ms_tok_special_id(t, content) : -1, key);
        n_spec++;
    }
    T_CHECK(n_spec > 0, "the shared config lists special tokens");
    T_CHECK(ms_tok_special_id(t, "<|not a special|>") == -1, "unknown special content gives -1");
    json_decref(cfg);

    snprintf(path, sizeof path, "%s/cases.jsonl", dir);
    size_t clen = 0;
    char *cases = ms_t_read_file(path, &clen);
    T_CHECK(cases != NULL, "read %s", path);
    int n_cases = 0, n_enc_bad = 0, n_dec_bad = 0, n_special_cases = 0;
    size_t all_cap = 1 << 16, all_len = 0;
    char *all = malloc(all_cap);
    for (char *line = cases; cases && line < cases + clen;) {
        char *nl = memchr(line, '\n', (size_t)(cases + clen - line));
        size_t ll = nl ? (size_t)(nl - line) : (size_t)(cases + clen - line);
        char *next = nl ? nl + 1 : cases + clen;
        if (ll == 0) {
            line = next;
            continue;
        }
        json_t *c = json_loadb(line, ll, 0, &jerr);
        line = next;
        n_cases++;
        json_t *jt = json_object_get(c, "text"), *jids = json_object_get(c, "ids");
        if (!json_is_string(jt) || !json_is_array(jids)) {
            T_CHECK(0, "case %d malformed", n_cases);
            json_decref(c);
            continue;
        }
        int allow = json_is_true(json_object_get(c, "allow_special"));
        n_special_cases += allow;
        const char *text = json_string_value(jt);
        size_t tl = json_string_length(jt);
        size_t nw = json_array_size(jids);
        int32_t *want = malloc((nw ? nw : 1) * sizeof *want);
        for (size_t i = 0; i < nw; i++) want[i] = (int32_t)json_integer_value(json_array_get(jids, i));
        if (!allow) {
            while (all_len + tl + 1 > all_cap) all = realloc(all, all_cap *= 2);
            memcpy(all + all_len, text, tl);
            all_len += tl;
            all[all_len++] = '\n';
        }

        int32_t *got = NULL;
        size_t ng = 0;
        int rc = ms_tok_encode(t, text, tl, allow, &got, &ng);
        if (rc != 0 || !ids_eq(got, ng, want, nw)) {
            if (++n_enc_bad <= 5) {
                size_t d = 0;
                while (rc == 0 && d < ng && d < nw && got[d] == want[d]) d++;
                fprintf(stderr,
                        "case %d%s: text \"%s\"\n  want [%s]\n  got  [%s]%s%s (first difference at index %zu)\n",
                        n_cases, allow ? " (allow_special)" : "", ms_t_show(text, tl), ms_t_show_ids(want, nw),
                        rc == 0 ? ms_t_show_ids(got, ng) : "", rc == 0 ? "" : "error: ", rc == 0 ? "" : ms_err_msg(), d);
            }
        }
        free(got);
        char *back = NULL;
        size_t bl = 0;
        rc = ms_tok_decode(t, want, nw, &back, &bl);
        if (rc != 0 || bl != tl || memcmp(back, text, tl) != 0) {
            if (++n_dec_bad <= 5)
                fprintf(stderr, "case %d: decode of [%s] gives \"%s\", want \"%s\"%s\n", n_cases, ms_t_show_ids(want, nw),
                        rc == 0 ? ms_t_show(back, bl) : ms_err_msg(), ms_t_show(text, tl), rc == 0 ? "" : " (error)");
        }
        free(back);
        free(want);
        json_decref(c);
    }
    free(cases);
    printf("tokenizer: %d shared cases (%d with allow_special): %d encode and %d decode mismatches\n", n_cases,
           n_special_cases, n_enc_bad, n_dec_bad);
    T_CHECK(n_cases == 359, "expected 359 cases in cases.jsonl, read %d", n_cases);
    T_CHECK(n_special_cases > 0, "some cases use allow_special");
    T_CHECK(n_enc_bad == 0, "%d of %d cases encode differently from tiktoken", n_enc_bad, n_cases);
    T_CHECK(n_dec_bad == 0, "%d of %d cases do not decode to their text", n_dec_bad, n_cases);

    /* a long document: all ordinary case texts, repeated to make a document well over 100 KB */
    for (size_t base = all_len; all_len < 150000;) {
        while (all_len + base > all_cap) all = realloc(all, all_cap *= 2);
        memcpy(all + all_len, all, base);
        all_len += base;
    }
    size_t n_all = 0;
    t0 = ms_now();
    int ok = round_trip(t, all, all_len, 0, &n_all);
    double t_enc = ms_now() - t0;
    printf("tokenizer: %zu bytes -> %zu ids, encode+decode %.3f s\n", all_len, n_all, t_enc);
    T_CHECK(ok, "all case texts concatenated round-trip");
    T_CHECK(all_len > 100000, "speed document has %zu bytes", all_len);

    /* A letter run far longer than any case (exercises the long-piece paths of the regex and BPE). */
    size_t big = 300000;
    char *run = malloc(big);
    for (size_t i = 0; i < big; i++) run[i] = (char)('a' + (i * 7 + i / 13) % 26);
    t0 = ms_now();
    ok = round_trip(t, run, big, 0, &n_all);
    printf("tokenizer: one %zu-letter piece -> %zu ids in %.3f s\n", big, n_all, ms_now() - t0);
    T_CHECK(ok && n_all > 0 && n_all < big, "a %zu-byte letter run round-trips with merges (%zu ids)", big, n_all);
    free(run);
    free(all);
    ms_tok_free(t);
}

/* ---------------------------------------------------------------------------------------- */
/* Long words (issue 12, defect 5): a 10 MB word used to fail with "matching depth limit
 * exceeded". Expected ids come from a naive transcription of tiktoken's byte-pair merge (spec
 * 5.5: whole-piece lookup, then repeatedly merge the lowest-rank adjacent pair, leftmost on ties)
 * over ranks read straight from tiktoken.model, applied to words the split pattern keeps whole. */

typedef struct {
    char **bytes; /* [cap] token bytes or NULL */
    size_t *len;
    int32_t *rank;
    size_t cap;
} ref_vocab;

static size_t ref_hash(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 1099511628211ULL;
    return (size_t)h;
}

static int32_t ref_rank(const ref_vocab *v, const char *p, size_t n)
{
    for (size_t i = ref_hash(p, n) & (v->cap - 1);; i = (i + 1) & (v->cap - 1)) {
        if (!v->bytes[i]) return -1;
        if (v->len[i] == n && memcmp(v->bytes[i], p, n) == 0) return v->rank[i];
    }
}

static int b64v(int c);

/* Parse tiktoken.model ("<base64> <rank>" lines) independently of ms_tok. */
static int ref_load(ref_vocab *v, const char *path)
{
    size_t ml = 0;
    char *m = ms_t_read_file(path, &ml);
    if (!m) return -1;
    v->cap = 1 << 20;
    v->bytes = calloc(v->cap, sizeof *v->bytes);
    v->len = calloc(v->cap, sizeof *v->len);
    v->rank = calloc(v->cap, sizeof *v->rank);
    for (char *s = m; s < m + ml;) {
        char *nl = memchr(s, '\n', (size_t)(m + ml - s));
        char *e = nl ? nl : m + ml;
        char *sp = memchr(s, ' ', (size_t)(e - s));
        if (sp) {
            char *tok = malloc((size_t)(sp - s));
            size_t n = 0;
            for (char *q = s; q + 3 < sp; q += 4) {
                uint32_t w = ((uint32_t)b64v(q[0]) << 18) | ((uint32_t)b64v(q[1]) << 12) |
                             ((uint32_t)b64v(q[2]) << 6) | (uint32_t)b64v(q[3]);
                tok[n++] = (char)(w >> 16);
                if (q[2] != '=') tok[n++] = (char)(w >> 8);
                if (q[3] != '=') tok[n++] = (char)w;
            }
            size_t i = ref_hash(tok, n) & (v->cap - 1);
            while (v->bytes[i]) i = (i + 1) & (v->cap - 1);
            v->bytes[i] = tok;
            v->len[i] = n;
            v->rank[i] = atoi(sp + 1);
        }
        s = e + 1;
    }
    free(m);
    return 0;
}

static void ref_free(ref_vocab *v)
{
    for (size_t i = 0; v->bytes && i < v->cap; i++) free(v->bytes[i]);
    free(v->bytes);
    free(v->len);
    free(v->rank);
}

/* tiktoken's _byte_pair_merge, O(n^2): parts[i] = start of part i, ranks[i] = rank of parts i and i+1 merged. */
static int32_t *ref_bpe(const ref_vocab *v, const char *p, size_t n, size_t *n_out)
{
    int32_t whole = ref_rank(v, p, n);
    if (whole >= 0) {
        int32_t *r = malloc(sizeof *r);
        *r = whole;
        *n_out = 1;
        return r;
    }
    size_t np = n + 1; /* part starts, the last one is n */
    size_t *parts = malloc(np * sizeof *parts);
    int64_t *ranks = malloc(np * sizeof *ranks);
    for (size_t i = 0; i < np; i++) parts[i] = i;
    for (size_t i = 0; i < np; i++) {
        int32_t r = i + 2 < np ? ref_rank(v, p + parts[i], parts[i + 2] - parts[i]) : -1;
        ranks[i] = r < 0 ? INT64_MAX : r;
    }
    for (;;) {
        size_t best = np;
        int64_t best_rank = INT64_MAX;
        for (size_t i = 0; i + 1 < np; i++)
            if (ranks[i] < best_rank) {
                best_rank = ranks[i];
                best = i;
            }
        if (best_rank == INT64_MAX) break;
        memmove(parts + best + 1, parts + best + 2, (np - best - 2) * sizeof *parts);
        memmove(ranks + best + 1, ranks + best + 2, (np - best - 2) * sizeof *ranks);
        np--;
        for (size_t i = best ? best - 1 : 0; i <= best; i++) {
            int32_t r = i + 2 < np ? ref_rank(v, p + parts[i], parts[i + 2] - parts[i]) : -1;
            ranks[i] = r < 0 ? INT64_MAX : r;
        }
    }
    int32_t *out = malloc(np * sizeof *out);
    for (size_t i = 0; i + 1 < np; i++) out[i] = ref_rank(v, p + parts[i], parts[i + 1] - parts[i]);
    *n_out = np - 1;
    free(parts);
    free(ranks);
    return out;
}

/* Append code point c as UTF-8. */
static size_t put_utf8(char *b, uint32_t c)
{
    if (c < 0x80) {
        b[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        b[0] = (char)(0xc0 | (c >> 6));
        b[1] = (char)(0x80 | (c & 63));
        return 2;
    }
    b[0] = (char)(0xe0 | (c >> 12));
    b[1] = (char)(0x80 | ((c >> 6) & 63));
    b[2] = (char)(0x80 | (c & 63));
    return 3;
}

/* A word of about n bytes that the split pattern keeps in one piece:
 *   kind 0: lowercase ASCII (alternative 2, all in the lower class)
 *   kind 1: one letter 'a' repeated
 *   kind 2: uppercase ASCII (alternative 2 fails, alternative 3 takes the whole run)
 *   kind 3: lowercase, Thai (Lo) and combining acute (Mn) mixed, starting lowercase (alternative 2)
 *   kind 4: Han ideographs (alternative 1) */
static char *make_word(int kind, size_t n, size_t *len)
{
    char *w = malloc(n + 4);
    size_t o = 0;
    uint32_t x = 12345u + (uint32_t)kind;
    while (o < n) {
        x = x * 1103515245u + 12345u;
        uint32_t r = (x >> 16) & 0x7fff;
        uint32_t c;
        switch (kind) {
        case 0: c = 'a' + r % 26; break;
        case 1: c = 'a'; break;
        case 2: c = 'A' + r % 26; break;
        case 3: c = o == 0 || r % 3 == 0 ? 'a' + r % 26 : r % 3 == 1 ? 0x0e01 + r % 46 : (r & 1 ? 0x0301 : 'e'); break;
        default: c = 0x4e00 + r % 64; break;
        }
        o += put_utf8(w + o, c);
    }
    *len = o;
    return w;
}

static void test_long_words(void)
{
    const char *p = ms_t_shared("fixtures/tokenizer/kimi-o200k/tiktoken.model");
    if (!p) return;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", p);
    *strrchr(dir, '/') = 0;
    ms_tok *t = ms_tok_load(dir);
    ref_vocab v = {0};
    T_CHECK(t && ref_load(&v, p) == 0, "load %s: %s", dir, ms_err_msg());
    if (!t || !v.bytes) {
        ms_tok_free(t);
        ref_free(&v);
        return;
    }
    static const char *kinds[] = {"lowercase", "one letter", "uppercase", "latin/Thai/marks", "Han"};
    for (int kind = 0; kind < 5; kind++) {
        size_t wl = 0;
        char *w = make_word(kind, 6000, &wl);
        size_t ng = 0, nw = 0;
        int32_t *got = NULL;
        int rc = ms_tok_encode(t, w, wl, 0, &got, &ng);
        int32_t *want = ref_bpe(&v, w, wl, &nw);
        size_t d = 0;
        while (rc == 0 && d < ng && d < nw && got[d] == want[d]) d++;
        T_CHECK(rc == 0 && ids_eq(got, ng, want, nw),
                "%zu-byte %s word: %zu ids, the reference merge gives %zu (first difference at %zu): %s", wl,
                kinds[kind], ng, nw, d, rc == 0 ? "" : ms_err_msg());
        free(got);
        free(want);
        free(w);
    }

    /* 10 MiB in one word (10.5 million code points, one piece): encodes (no regex depth limit),
     * merges, and decodes to the same bytes (2 MiB under the sanitizers: the same paths, at a
     * fifth of their 5x slower time) */
#if defined(__SANITIZE_ADDRESS__)
    const size_t word_bytes = 2u << 20;
#else
    const size_t word_bytes = 10u << 20;
#endif
    size_t big = 0;
    char *w = make_word(0, word_bytes, &big);
    double t0 = ms_now();
    size_t n_ids = 0;
    int ok = round_trip(t, w, big, 0, &n_ids);
    printf("tokenizer: one %zu-byte word -> %zu ids in %.2f s\n", big, n_ids, ms_now() - t0);
    T_CHECK(ok && n_ids > 0 && n_ids < big, "a %zu-byte word encodes and round-trips (%zu ids): %s", big, n_ids,
            ok ? "" : ms_err_msg());
    free(w);
    ref_free(&v);
    ms_tok_free(t);
}

/* ---------------------------------------------------------------------------------------- */
/* The synthetic tokenizer. */

static int b64v(int c)
{
    const char *al = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char *q = c ? strchr(al, c) : NULL;
    return q ? (int)(q - al) : (c == '=' ? 0 : -1);
}

static void test_synth(void)
{
    const char *d = ms_t_tmpdir("tok_synth");
    char dir[4096], dir2[4200], path[4300];
    snprintf(dir, sizeof dir, "%s", d);
    snprintf(dir2, sizeof dir2, "%s/again", dir);
    const int n_ranks = 600;

    T_CHECK(ms_tok_present(dir) == 0, "empty dir has no tokenizer");
    T_CHECK(ms_tok_write_synth(dir, n_ranks) == 0, "write synth: %s", ms_err_msg());
    T_CHECK(ms_tok_present(dir) == 1, "synth dir has a tokenizer");
    T_CHECK(ms_tok_write_synth(dir2, n_ranks) == 0, "write synth again: %s", ms_err_msg());

    /* file-level invariants: deterministic, n_ranks lines, ranks 0..255 are the bytes in order */
    snprintf(path, sizeof path, "%s/tiktoken.model", dir);
    size_t l1 = 0, l2 = 0;
    char *f1 = ms_t_read_file(path, &l1);
    snprintf(path, sizeof path, "%s/tiktoken.model", dir2);
    char *f2 = ms_t_read_file(path, &l2);
    T_CHECK(f1 && f2 && l1 == l2 && memcmp(f1, f2, l1) == 0, "synth output is deterministic");
    int line = 0, bytes_ok = 1, ranks_ok = 1, multi = 0;
    for (char *s = f1; f1 && s < f1 + l1; line++) {
        char *nl = strchr(s, '\n');
        char *sp = strchr(s, ' ');
        if (!nl || !sp || sp > nl) {
            ranks_ok = 0;
            break;
        }
        if (atoi(sp + 1) != line) ranks_ok = 0;
        size_t bl = (size_t)(sp - s) / 4 * 3 - (sp[-1] == '=') - (sp[-2] == '=');
        if (line < 256) {
            int v = (b64v(s[0]) << 2) | (b64v(s[1]) >> 4);
            if (bl != 1 || v != line) bytes_ok = 0;
        } else if (bl > 1) {
            multi++;
        }
        s = nl + 1;
    }
    T_CHECK(line == n_ranks, "tiktoken.model has %d lines, want %d", line, n_ranks);
    T_CHECK(ranks_ok, "ranks are 0..n-1 in order");
    T_CHECK(bytes_ok, "ranks 0..255 are the single bytes in byte order");
    T_CHECK(multi == n_ranks - 256, "all ranks above 255 are multi-byte (%d)", multi);
    free(f1);
    free(f2);

    ms_tok *t = ms_tok_load(dir);
    T_CHECK(t != NULL, "load synth: %s", ms_err_msg());
    if (!t) return;
    T_CHECK(ms_tok_n_vocab(t) == n_ranks + MS_TOK_SYNTH_SPECIALS, "synth n_vocab %d", ms_tok_n_vocab(t));
    T_CHECK(ms_tok_special_id(t, "[BOS]") == n_ranks, "[BOS] id");
    T_CHECK(ms_tok_special_id(t, "[EOS]") == n_ranks + 1, "[EOS] id");
    T_CHECK(ms_tok_special_id(t, "<|im_end|>") == n_ranks + 2, "<|im_end|> id");
    /* the chat specials at the surrogate's places (fixtures/tokenizer/kimi-o200k) */
    T_CHECK(ms_tok_special_id(t, "<|im_user|>") == n_ranks + 3 && ms_tok_special_id(t, "<|im_assistant|>") == n_ranks + 4 &&
                ms_tok_special_id(t, "<|im_system|>") == n_ranks + 8 && ms_tok_special_id(t, "<|im_middle|>") == n_ranks + 9,
            "chat special ids");

    static const char *texts[] = {
        "",
        "The weather computer said it's going to rain tomorrow.",
        "I'm sure they'll say we've done it; DON'T you THINK so? He'd've",
        "    indented\n\n\tcode(x) {\r\n  return y;\r\n}\r\n",
        "trailing spaces   ",
        "   ",
        "\n\n\n",
        "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c, \xe6\xbc\xa2\xe5\xad\x97 and \xe3\x81\x8b\xe3\x81\xaa",
        "emoji \xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd "
        "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7",
        "mixed\xc2\xa0nbsp\xe2\x80\x83" "em\xe3\x80\x80ideo\xc2\x85" "nel",
        "numbers 1 12 123 1234 3.14159 -42",
        "caf\xc3\xa9 na\xc3\xafve \xc3\x9c\x62\x65r \xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82",
        "a\xcc\x88 combining \xcc\x81 alone",
        "[BOS] not special here <|im_end|>",
        "x",
    };
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        size_t tl = strlen(texts[i]);
        int ok = round_trip(t, texts[i], tl, 0, NULL) && round_trip(t, texts[i], tl, 1, NULL);
        T_CHECK(ok, "synth round trip of \"%s\"", ms_t_show(texts[i], strlen(texts[i])));
    }
    /* the embedded NUL byte is ordinary text */
    T_CHECK(round_trip(t, "a\0b", 3, 0, NULL), "text with a NUL byte round-trips");

    /* merges learnt from English make English text shorter than its bytes */
    const char *eng = "The computer predicts the weather for tomorrow.";
    size_t ne = 0;
    int32_t *ids = enc(t, eng, 0, &ne);
    T_CHECK(ids && ne > 0 && ne < strlen(eng) / 2, "English text uses merged tokens (%zu ids for %zu bytes)", ne,
            strlen(eng));
    free(ids);

    /* specials: recognised only with allow_special */
    const char *sp = "a[BOS]b<|im_end|>[EOS]";
    size_t n = 0;
    ids = enc(t, sp, 1, &n);
    int has_bos = 0, has_end = 0, has_eos = 0, n_high = 0;
    for (size_t i = 0; ids && i < n; i++) {
        has_bos += ids[i] == n_ranks;
        has_eos += ids[i] == n_ranks + 1;
        has_end += ids[i] == n_ranks + 2;
        n_high += ids[i] >= n_ranks;
    }
    T_CHECK(ids && has_bos == 1 && has_eos == 1 && has_end == 1 && n_high == 3 && ids[n - 1] == n_ranks + 1,
            "allow_special emits the three special ids: [%s]", ids ? ms_t_show_ids(ids, n) : "error");
    T_CHECK(ids && n == 5 && ids[0] == 'a' && ids[2] == 'b', "ordinary text between specials: [%s]",
            ids ? ms_t_show_ids(ids, n) : "error");
    free(ids);
    ids = enc(t, sp, 0, &n);
    n_high = 0;
    for (size_t i = 0; ids && i < n; i++) n_high += ids[i] >= n_ranks;
    T_CHECK(ids && n_high == 0, "without allow_special no special ids appear");
    free(ids);
    T_CHECK(round_trip(t, sp, strlen(sp), 1, NULL) && round_trip(t, sp, strlen(sp), 0, NULL),
            "specials round-trip both ways");

    /* decode: special ids give their content, out-of-range ids fail naming the id */
    int32_t dids[3] = {'h', n_ranks + 2, 'i'};
    char *txt = NULL;
    size_t tl = 0;
    T_CHECK(ms_tok_decode(t, dids, 3, &txt, &tl) == 0 && tl == 12 && strcmp(txt, "h<|im_end|>i") == 0,
            "decode with a special id");
    free(txt);
    int32_t bad_ids[2][2] = {{'a', n_ranks + MS_TOK_SYNTH_SPECIALS}, {-1, 'a'}};
    for (int k = 0; k < 2; k++) {
        char want[32];
        snprintf(want, sizeof want, "%d", bad_ids[k][k == 0 ? 1 : 0]);
        txt = NULL;
        int rc = ms_tok_decode(t, bad_ids[k], 2, &txt, &tl);
        T_CHECK(rc == -1 && txt == NULL && strstr(ms_err_msg(), want) && ms_err_code() == MS_EXIT_INPUT,
                "decode of out-of-range id %s fails naming it: %s", want, ms_err_msg());
        free(txt);
    }

    /* invalid UTF-8 is refused with its byte offset */
    static const struct {
        const char *s;
        size_t n;
        size_t off;
    } bad[] = {
        {"ab\xff", 3, 2},
        {"abc\xc0\xaf", 5, 3},                 /* overlong */
        {"x\xed\xa0\x80y", 5, 1},              /* surrogate */
        {"hello \xe4\xbd", 8, 6},              /* truncated */
        {"\xf4\x90\x80\x80", 4, 0},            /* above U+10FFFF */
        {"ok \xe4\xbd\xa0 \x80", 8, 7},        /* stray continuation byte */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int32_t *bi = NULL;
        size_t bn = 0;
        char want[48];
        snprintf(want, sizeof want, "offset %zu", bad[i].off);
        int rc = ms_tok_encode(t, bad[i].s, bad[i].n, 0, &bi, &bn);
        T_CHECK(rc == -1 && bi == NULL && strstr(ms_err_msg(), want), "invalid UTF-8 case %zu refused at %s: %s", i,
                want, ms_err_msg());
        free(bi);
    }
    ms_tok_free(t);
    ms_tok_free(NULL);

    /* bad arguments */
    T_CHECK(ms_tok_write_synth(dir, 271) == -1, "n_ranks 271 refused");
    T_CHECK(ms_tok_write_synth("/proc/no-such-dir/tok", 300) == -1 && strstr(ms_err_msg(), "/proc/no-such-dir"),
            "unwritable dir refused: %s", ms_err_msg());
    snprintf(path, sizeof path, "%s/tiktoken.model", dir);
    T_CHECK(ms_tok_write_synth(path, 300) == -1, "a regular file as the dir is refused: %s", ms_err_msg());

    /* a size that needs more ranks than the sample's merges provide still works */
    snprintf(dir2, sizeof dir2, "%s/large", dir);
    T_CHECK(ms_tok_write_synth(dir2, 5000) == 0, "write synth 5000: %s", ms_err_msg());
    t = ms_tok_load(dir2);
    T_CHECK(t && ms_tok_n_vocab(t) == 5000 + MS_TOK_SYNTH_SPECIALS, "synth 5000 loads with 5010 ids");
    if (t) T_CHECK(round_trip(t, texts[1], strlen(texts[1]), 0, NULL), "synth 5000 round trip");
    ms_tok_free(t);
}

/* ---------------------------------------------------------------------------------------- */
/* BPE rules on a hand-made vocabulary (expected ids worked out from spec 5.5 by hand). */

static void test_bpe_rules(void)
{
    const char *dir = ms_t_tmpdir("tok_rules");
    /* ranks 0..255: the bytes; extra tokens chosen to probe each rule */
    size_t cap = 256 * 16 + 1024, o = 0;
    char *m = malloc(cap);
    const char *al = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int b = 0; b < 256; b++)
        o += (size_t)snprintf(m + o, cap - o, "%c%c== %d\n", al[b >> 2], al[(b & 3) << 4], b);
    /* 256 "bc", 257 "ab", 258 "abcd", 259 "aa", 260 "a b", 261 "xy", 262 "xyz" */
    o += (size_t)snprintf(m + o, cap - o, "YmM= 256\nYWI= 257\nYWJjZA== 258\nYWE= 259\nYSBi 260\neHk= 261\neHl6 262\n");
    T_CHECK(write_file(dir, "tiktoken.model", m, o) == 0, "write rules vocab");
    free(m);
    ms_tok *t = ms_tok_load(dir);
    T_CHECK(t != NULL, "load rules vocab (no tokenizer_config.json): %s", ms_err_msg());
    if (!t) return;
    T_CHECK(ms_tok_n_vocab(t) == 263, "no config: only ranks (%d)", ms_tok_n_vocab(t));
    T_CHECK(ms_tok_special_id(t, "[BOS]") == -1, "no config: no specials");
    static const struct {
        const char *text;
        int32_t ids[8];
        size_t n;
        const char *why;
    } cases[] = {
        {"abc", {'a', 256}, 2, "lowest rank wins: bc (256) before ab (257)"},
        {"abcd", {258}, 1, "whole-piece lookup before merging"},
        {"abcde", {'a', 256, 'd', 'e'}, 4, "no whole match: merge by rank"},
        {"aaa", {259, 'a'}, 2, "leftmost on equal rank"},
        {"aaaa", {259, 259}, 2, "repeated leftmost merges"},
        {"a b", {'a', ' ', 'b'}, 3, "\"a\" and \" b\" are separate pieces, so \"a b\" is never used"},
        {"xyz", {262}, 1, "whole piece"},
        {"xyzw", {262, 'w'}, 2, "xy merges, then the concatenation xy+z is a token"},
        {"wxyz", {'w', 262}, 2, "same merges inside a longer piece"},
        {"q", {'q'}, 1, "single byte"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t n = 0;
        int32_t *ids = enc(t, cases[i].text, 0, &n);
        T_CHECK(ids_eq(ids, n, cases[i].ids, cases[i].n), "\"%s\": got [%s], want [%s] (%s)", cases[i].text,
                ids ? ms_t_show_ids(ids, n) : ms_err_msg(), ms_t_show_ids(cases[i].ids, cases[i].n), cases[i].why);
        free(ids);
    }
    ms_tok_free(t);

    /* a vocabulary that lacks some single bytes must fail loudly on text that needs them */
    T_CHECK(write_str(dir, "tiktoken.model", "YQ== 0\nYg== 1\nYWI= 2\n") == 0, "write tiny vocab");
    t = ms_tok_load(dir);
    T_CHECK(t != NULL, "tiny vocab loads: %s", ms_err_msg());
    if (t) {
        size_t n = 0;
        int32_t *ids = enc(t, "ab", 0, &n);
        T_CHECK(ids && n == 1 && ids[0] == 2, "tiny vocab encodes \"ab\"");
        free(ids);
        ids = enc(t, "abc", 0, &n);
        T_CHECK(ids == NULL && strstr(ms_err_msg(), "0x63"), "missing byte 'c' is an error: %s", ms_err_msg());
        free(ids);
    }
    ms_tok_free(t);

    /* special-token matching: earliest occurrence, longest at a position */
    T_CHECK(write_str(dir, "tokenizer_config.json",
                      "{\"added_tokens_decoder\": {\"3\": {\"content\": \"<a>\"}, \"4\": {\"content\": \"<a>b\"},"
                      " \"6\": {\"content\": \"b\"}}}") == 0,
            "write specials config");
    t = ms_tok_load(dir);
    T_CHECK(t != NULL, "tiny vocab with specials loads: %s", ms_err_msg());
    if (t) {
        T_CHECK(ms_tok_n_vocab(t) == 7, "n_vocab from the highest special id (%d)", ms_tok_n_vocab(t));
        size_t n = 0;
        int32_t *ids = enc(t, "a<a>bb<a>", 1, &n);
        int32_t want[] = {0, 4, 6, 3};
        T_CHECK(ids_eq(ids, n, want, 4), "longest special at the earliest position: [%s]",
                ids ? ms_t_show_ids(ids, n) : ms_err_msg());
        free(ids);
        int32_t gap = 5;
        char *txt = NULL;
        size_t tl = 0;
        T_CHECK(ms_tok_decode(t, &gap, 1, &txt, &tl) == -1 && strstr(ms_err_msg(), "5"), "unassigned id 5 fails: %s",
                ms_err_msg());
        free(txt);
    }
    ms_tok_free(t);
}

/* ---------------------------------------------------------------------------------------- */
/* Malformed files are refused with file and line. */

static void expect_refused(const char *dir, const char *model, const char *config, const char *want1,
                           const char *want2, const char *what)
{
    T_CHECK(write_str(dir, "tiktoken.model", model) == 0, "write model");
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    remove(path);
    if (config) T_CHECK(write_str(dir, "tokenizer_config.json", config) == 0, "write config");
    ms_err_clear();
    ms_tok *t = ms_tok_load(dir);
    const char *msg = ms_err_msg();
    T_CHECK(t == NULL && strstr(msg, want1) && (!want2 || strstr(msg, want2)) && ms_err_code() == MS_EXIT_INPUT,
            "%s refused naming \"%s\"%s%s: got \"%s\"", what, want1, want2 ? " and " : "", want2 ? want2 : "", msg);
    ms_tok_free(t);
}

static void test_malformed(void)
{
    const char *dir = ms_t_tmpdir("tok_bad");
    const char *good = "YQ== 0\nYg== 1\nYWI= 2\n";
    expect_refused(dir, "YQ== 0\nYg== 1\nY!I= 2\n", NULL, "tiktoken.model:3", "base64", "bad base64 character");
    expect_refused(dir, "YQ== 0\nYg== 1\nYWI 2\n", NULL, "tiktoken.model:3", "base64", "base64 without padding");
    expect_refused(dir, "YQ== 0\nYg==\nYWI= 2\n", NULL, "tiktoken.model:2", NULL, "missing rank");
    expect_refused(dir, "YQ== 0\nYg== \nYWI= 2\n", NULL, "tiktoken.model:2", "rank", "empty rank");
    expect_refused(dir, "YQ== 0\nYg== x1\nYWI= 2\n", NULL, "tiktoken.model:2", "rank", "non-numeric rank");
    expect_refused(dir, "YQ== 0\nYg== 0\nYWI= 2\n", NULL, "tiktoken.model:2", "duplicate rank", "duplicate rank");
    expect_refused(dir, "YQ== 0\nYg== 1\nYQ== 2\n", NULL, "tiktoken.model:3", "duplicate", "duplicate bytes");
    expect_refused(dir, "YQ== 0\nYg== 1\nYWI= 7\n", NULL, "tiktoken.model:3", "out of range", "rank gap");
    expect_refused(dir, "", NULL, "tiktoken.model", "no tokens", "empty file");
    expect_refused(dir, good, "{\"added_tokens_decoder\": {\"3\": ", "tokenizer_config.json", NULL, "truncated JSON");
    expect_refused(dir, good, "{\"added_tokens_decoder\": {\"3\": {\"special\": true}}}", "tokenizer_config.json",
                   "content", "special without content");
    expect_refused(dir, good, "{\"added_tokens_decoder\": {\"1\": {\"content\": \"<x>\"}}}", "tokenizer_config.json",
                   "collides", "special id colliding with a rank");
    expect_refused(dir, good, "{\"added_tokens_decoder\": {\"x3\": {\"content\": \"<x>\"}}}", "tokenizer_config.json",
                   "x3", "non-numeric special id");
    expect_refused(dir, good, "{\"added_tokens_decoder\": [1, 2]}", "tokenizer_config.json", "added_tokens_decoder",
                   "added_tokens_decoder not an object");

    /* missing directory */
    ms_tok *t = ms_tok_load("/nonexistent-tok-dir");
    T_CHECK(t == NULL && strstr(ms_err_msg(), "/nonexistent-tok-dir/tiktoken.model") && ms_err_code() == MS_EXIT_IO,
            "missing dir: an I/O error (class %d): %s", ms_err_code(), ms_err_msg());
    T_CHECK(ms_tok_present("/nonexistent-tok-dir") == 0, "missing dir: not present");

    /* tolerated: CRLF line ends, blank lines, a config without added_tokens_decoder */
    T_CHECK(write_str(dir, "tiktoken.model", "YQ== 0\r\n\r\nYg== 1\r\n\nYWI= 2") == 0, "write crlf model");
    T_CHECK(write_str(dir, "tokenizer_config.json", "{\"bos_token\": \"[BOS]\"}") == 0, "write plain config");
    t = ms_tok_load(dir);
    T_CHECK(t && ms_tok_n_vocab(t) == 3, "CRLF, blank lines and a missing final newline are accepted: %s",
            ms_err_msg());
    if (t) {
        size_t n = 0;
        int32_t *ids = enc(t, "abba", 0, &n);
        int32_t want[] = {2, 1, 0};
        T_CHECK(ids_eq(ids, n, want, 3), "CRLF vocab encodes \"abba\" as [2,1,0]: [%s]", ids ? ms_t_show_ids(ids, n) : "");
        free(ids);
    }
    ms_tok_free(t);
}

int main(void)
{
    test_shared_cases();
    test_long_words();
    test_synth();
    test_bpe_rules();
    test_malformed();
    return ms_t_done();
}
