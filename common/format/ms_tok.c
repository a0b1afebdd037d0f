/* ms_tok: the Kimi tiktoken tokenizer (rank file, special tokens, Kimi split regex, byte-pair merging). */
#define PCRE2_CODE_UNIT_WIDTH 8

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <jansson.h>
#include <pcre2.h>

#include "ms_err.h"
#include "ms_file.h"
#include "ms_tok.h"
#include "ms_tok_int.h"

/* ------------------------------------------------------------------------------------------ */
/* The Kimi pre-tokenizer, rewritten for PCRE2 (spec 5.4).
 *
 * The original uses fancy-regex syntax: `&&` class intersection and Rust's `\s`. PCRE2 10.42
 * has neither, so:
 *   [X&&[^\p{Han}]]   ->  [^<complement of X>\p{Han}]: the general categories partition the code
 *                         points, so X is the complement of the other categories, and X minus Han
 *                         is one negated class, e.g. [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]
 *                         = [^\p{Ll}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{Han}] (checked equal on every code
 *                         point against the lookahead form (?:(?!\p{Han})[X])). It must stay a
 *                         single class: a repeated group costs PCRE2 one backtracking frame per
 *                         character, and a 10 MB word then failed with "matching depth limit
 *                         exceeded"; a repeated class backtracks in place, in constant depth.
 *   \s                ->  [WS] with WS the Unicode White_Space property spelled out (Rust's \s is
 *                         White_Space; PCRE2's UCP \s omits U+0085), \S -> [^WS].
 * \p{Han} is Script_Extensions=Han in both engines. Alternation order is preserved, and PCRE2 is
 * a backtracking engine, so leftmost-first semantics are the same as fancy-regex's. Every
 * alternative is a sequence of class repeats (each backtracking step O(1)), so a match costs time
 * linear in its length and constant stack. */
#define TOK_WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define TOK_UPPER "[^\\p{Ll}\\p{N}\\p{P}\\p{S}\\p{Z}\\p{C}\\p{Han}]"
#define TOK_LOWER "[^\\p{Lu}\\p{Lt}\\p{N}\\p{P}\\p{S}\\p{Z}\\p{C}\\p{Han}]"
#define TOK_CONTR "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
#define TOK_PREFIX "[^\\r\\n\\p{L}\\p{N}]?"

static const char tok_pattern[] =
    "[\\p{Han}]+"                                             /* 1 Han run */
    "|" TOK_PREFIX TOK_UPPER "*" TOK_LOWER "+" TOK_CONTR      /* 2 word, lower tail */
    "|" TOK_PREFIX TOK_UPPER "+" TOK_LOWER "*" TOK_CONTR      /* 3 word, upper head */
    "|\\p{N}{1,3}"                                            /* 4 digits */
    "| ?[^" TOK_WS "\\p{L}\\p{N}]+[\\r\\n]*"                  /* 5 punctuation/symbols */
    "|[" TOK_WS "]*[\\r\\n]+"                                 /* 6 whitespace up to a newline */
    "|[" TOK_WS "]+(?![^" TOK_WS "])"                         /* 7 whitespace not before text */
    "|[" TOK_WS "]+";                                         /* 8 any other whitespace */

/* Largest gap allowed between the last rank and the highest special id (guards allocation). */
#define TOK_MAX_SPECIAL_SPAN (1 << 20)

typedef struct {
    char *content; /* NUL-terminated copy; len bytes (may in theory contain NUL) */
    size_t len;
    int32_t id;
} tok_special;

struct ms_tok {
    int n_ranks;        /* ranks 0..n_ranks-1, token id = rank */
    int n_vocab;        /* one more than the largest id */
    uint8_t *pool;      /* all rank token bytes, back to back */
    uint32_t *tok_off;  /* [n_ranks] offset of token r in pool */
    uint32_t *tok_len;  /* [n_ranks] byte length of token r */
    uint32_t *slots;    /* [cap] hash table: rank+1, 0 = empty */
    uint32_t *tags;     /* [cap] high 32 bits of the key hash, to skip most memcmp calls */
    size_t cap_mask;    /* cap - 1, cap a power of two */
    int n_special;
    tok_special *spec;        /* [n_special] sorted by id */
    int *spec_match;          /* [n_special] indices into spec, longest content first */
    int *spec_by_id;          /* [n_vocab - n_ranks] index into spec or -1 */
    uint8_t spec_first[256];  /* 1 if some special content starts with this byte */
    pcre2_code *re;
    int jit; /* 1 if JIT compilation succeeded */
};

/* ------------------------------------------------------------------------------------------ */
/* Hashing of byte strings. */

static uint64_t tok_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static uint64_t tok_hash(const uint8_t *p, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)n * 0x100000001b3ULL);
    while (n >= 8) {
        uint64_t k;
        memcpy(&k, p, 8);
        k *= 0x87c37b91114253d5ULL;
        k = (k << 31) | (k >> 33);
        h = (h ^ k) * 0x4cf5ad432745937fULL;
        h = (h << 27) | (h >> 37);
        p += 8;
        n -= 8;
    }
    uint64_t t = 0;
    for (size_t i = 0; i < n; i++) t |= (uint64_t)p[i] << (8 * i);
    h ^= t * 0x87c37b91114253d5ULL;
    return tok_mix(h);
}

/* Rank of the byte string p[0..n), or -1. */
static int32_t tok_lookup(const ms_tok *t, const uint8_t *p, size_t n)
{
    uint64_t h = tok_hash(p, n);
    uint32_t tag = (uint32_t)(h >> 32);
    size_t i = (size_t)h & t->cap_mask;
    for (;;) {
        uint32_t s = t->slots[i];
        if (s == 0) return -1;
        uint32_t r = s - 1;
        if (t->tags[i] == tag && t->tok_len[r] == n && memcmp(t->pool + t->tok_off[r], p, n) == 0)
            return (int32_t)r;
        i = (i + 1) & t->cap_mask;
    }
}

/* Insert rank r; returns the rank already holding the same bytes, or -1 if inserted. */
static int32_t tok_insert(ms_tok *t, uint32_t r)
{
    const uint8_t *p = t->pool + t->tok_off[r];
    size_t n = t->tok_len[r];
    uint64_t h = tok_hash(p, n);
    uint32_t tag = (uint32_t)(h >> 32);
    size_t i = (size_t)h & t->cap_mask;
    for (;;) {
        uint32_t s = t->slots[i];
        if (s == 0) {
            t->slots[i] = r + 1;
            t->tags[i] = tag;
            return -1;
        }
        uint32_t q = s - 1;
        if (t->tags[i] == tag && t->tok_len[q] == n && memcmp(t->pool + t->tok_off[q], p, n) == 0)
            return (int32_t)q;
        i = (i + 1) & t->cap_mask;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Small helpers. */

#define tok_fail ms_err_fail

static char *tok_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = ms_malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* tiktoken.model and tokenizer_config.json of K3 are a few MiB. */
#define TOK_MAX_FILE ((uint64_t)256 << 20)

/* Read a whole file; NULL with ms_err set (naming it) on failure. */
static uint8_t *tok_read_file(const char *path, size_t *len)
{
    /* Regular files only (a FIFO is refused without blocking), bounded. */
    return (uint8_t *)ms_file_read_all(path, "tokenizer file", 0, TOK_MAX_FILE, MS_EXIT_INPUT, len);
}

static int tok_b64_value(uint8_t c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Decode standard padded base64 s[0..n) into out; returns the byte count or -1. */
static long tok_b64_decode(const uint8_t *s, size_t n, uint8_t *out)
{
    if (n == 0 || n % 4 != 0) return -1;
    long o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            uint8_t c = s[i + k];
            if (c == '=') {
                /* padding only in the last quad, only in its last two places, only trailing */
                if (i + 4 != n || k < 2) return -1;
                pad++;
                v[k] = 0;
            } else {
                if (pad) return -1;
                v[k] = tok_b64_value(c);
                if (v[k] < 0) return -1;
            }
        }
        uint32_t w = ((uint32_t)v[0] << 18) | ((uint32_t)v[1] << 12) | ((uint32_t)v[2] << 6) | (uint32_t)v[3];
        out[o++] = (uint8_t)(w >> 16);
        if (pad < 2) out[o++] = (uint8_t)(w >> 8);
        if (pad < 1) out[o++] = (uint8_t)w;
    }
    return o;
}

/* Compile the built-in split pattern; JIT when available (falls back to the interpreter). */
pcre2_code *ms_tok_regex_compile(int *jit)
{
    int errcode;
    PCRE2_SIZE erroff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)tok_pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                   &errcode, &erroff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errcode, msg, sizeof msg);
        tok_fail(MS_EXIT_RUNTIME, "tokenizer split pattern does not compile at offset %zu: %s", (size_t)erroff,
                 (const char *)msg);
        return NULL;
    }
    *jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    return re;
}

/* ------------------------------------------------------------------------------------------ */
/* Loading. */

static int tok_load_ranks(ms_tok *t, const char *path)
{
    size_t flen;
    uint8_t *buf = tok_read_file(path, &flen);
    if (!buf) return -1;
    if (flen >= UINT32_MAX) {
        free(buf);
        return tok_fail(MS_EXIT_INPUT, "%s: file too large", path);
    }

    /* Pass 1: count non-blank lines; with no duplicates allowed, ranks must be 0..count-1. */
    size_t n_lines = 0;
    for (size_t i = 0; i < flen;) {
        size_t e = i;
        while (e < flen && buf[e] != '\n') e++;
        size_t le = e;
        if (le > i && buf[le - 1] == '\r') le--;
        if (le > i) n_lines++;
        i = e + 1;
    }
    if (n_lines == 0) {
        free(buf);
        return tok_fail(MS_EXIT_INPUT, "%s: no tokens", path);
    }
    if (n_lines > (size_t)INT32_MAX / 2) {
        free(buf);
        return tok_fail(MS_EXIT_INPUT, "%s: too many tokens", path);
    }

    t->n_ranks = (int)n_lines;
    t->pool = ms_malloc(flen + 1);
    t->tok_off = ms_malloc(n_lines * sizeof *t->tok_off);
    t->tok_len = ms_malloc(n_lines * sizeof *t->tok_len);
    uint32_t *line_of = ms_calloc(n_lines, sizeof *line_of); /* line number per rank, 0 = unseen */
    size_t cap = 1024;
    while (cap < 2 * n_lines) cap *= 2;
    t->slots = ms_calloc(cap, sizeof *t->slots);
    t->tags = ms_malloc(cap * sizeof *t->tags);
    t->cap_mask = cap - 1;

    size_t pool_len = 0, line = 0;
    int rc = -1;
    for (size_t i = 0; i < flen;) {
        size_t e = i;
        while (e < flen && buf[e] != '\n') e++;
        size_t le = e;
        line++;
        if (le > i && buf[le - 1] == '\r') le--;
        size_t s = i;
        i = e + 1;
        if (le == s) continue;

        size_t sp = s;
        while (sp < le && buf[sp] != ' ') sp++;
        if (sp == le) {
            tok_fail(MS_EXIT_INPUT, "%s:%zu: expected '<base64> <rank>', found no space", path, line);
            goto out;
        }
        if (sp + 1 == le) {
            tok_fail(MS_EXIT_INPUT, "%s:%zu: missing rank after the base64 token", path, line);
            goto out;
        }
        uint64_t rank = 0;
        for (size_t k = sp + 1; k < le; k++) {
            if (buf[k] < '0' || buf[k] > '9' || rank > (uint64_t)INT32_MAX) {
                tok_fail(MS_EXIT_INPUT, "%s:%zu: rank is not a decimal number", path, line);
                goto out;
            }
            rank = rank * 10 + (uint64_t)(buf[k] - '0');
        }
        long nb = tok_b64_decode(buf + s, sp - s, t->pool + pool_len);
        if (nb <= 0) {
            tok_fail(MS_EXIT_INPUT, "%s:%zu: bad base64 token '%.*s'", path, line, (int)(sp - s > 64 ? 64 : sp - s),
                     (const char *)buf + s);
            goto out;
        }
        if (rank >= n_lines) {
            tok_fail(MS_EXIT_INPUT, "%s:%zu: rank %llu out of range (the file has %zu tokens, so ranks must be 0..%zu)",
                     path, line, (unsigned long long)rank, n_lines, n_lines - 1);
            goto out;
        }
        if (line_of[rank]) {
            tok_fail(MS_EXIT_INPUT, "%s:%zu: duplicate rank %llu (already on line %u)", path, line,
                     (unsigned long long)rank, line_of[rank]);
            goto out;
        }
        line_of[rank] = (uint32_t)line;
        t->tok_off[rank] = (uint32_t)pool_len;
        t->tok_len[rank] = (uint32_t)nb;
        pool_len += (size_t)nb;
        int32_t dup = tok_insert(t, (uint32_t)rank);
        if (dup >= 0) {
            tok_fail(MS_EXIT_INPUT, "%s:%zu: token bytes of rank %llu duplicate rank %d (line %u)", path, line,
                     (unsigned long long)rank, dup, line_of[dup]);
            goto out;
        }
    }
    rc = 0;
out:
    free(line_of);
    free(buf);
    return rc;
}

static int tok_cmp_spec_id(const void *a, const void *b)
{
    const tok_special *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

typedef struct {
    size_t len;
    int32_t id;
    int idx;
} tok_match_key;

static int tok_cmp_match(const void *a, const void *b)
{
    const tok_match_key *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int tok_load_specials(ms_tok *t, const char *path)
{
    struct stat st;
    t->n_vocab = t->n_ranks;
    if (stat(path, &st) != 0 && errno == ENOENT) return 0; /* no config: no specials */

    json_error_t jerr;
    size_t tlen = 0;
    char *text = ms_file_read_all(path, "tokenizer config", 0, TOK_MAX_FILE, MS_EXIT_INPUT, &tlen);
    if (!text) return -1;
    json_t *root = json_loadb(text, tlen, 0, &jerr);
    free(text);
    if (!root) return tok_fail(MS_EXIT_INPUT, "%s:%d: bad JSON: %s", path, jerr.line, jerr.text);
    int rc = -1;
    if (!json_is_object(root)) {
        tok_fail(MS_EXIT_INPUT, "%s: top level is not a JSON object", path);
        goto out;
    }
    json_t *dec = json_object_get(root, "added_tokens_decoder");
    if (!dec) {
        rc = 0;
        goto out;
    }
    if (!json_is_object(dec)) {
        tok_fail(MS_EXIT_INPUT, "%s: added_tokens_decoder is not an object", path);
        goto out;
    }
    size_t n = json_object_size(dec);
    t->spec = ms_calloc(n ? n : 1, sizeof *t->spec);
    const char *key;
    json_t *val;
    int64_t max_id = t->n_ranks - 1;
    json_object_foreach(dec, key, val)
    {
        int64_t id = 0;
        const char *k = key;
        if (!*k) {
            tok_fail(MS_EXIT_INPUT, "%s: added_tokens_decoder has an empty id", path);
            goto out;
        }
        for (; *k; k++) {
            if (*k < '0' || *k > '9' || id > INT32_MAX) {
                tok_fail(MS_EXIT_INPUT, "%s: added_tokens_decoder id '%s' is not a decimal number", path, key);
                goto out;
            }
            id = id * 10 + (*k - '0');
        }
        if (id > INT32_MAX) {
            tok_fail(MS_EXIT_INPUT, "%s: added_tokens_decoder id '%s' is too large", path, key);
            goto out;
        }
        json_t *c = json_is_object(val) ? json_object_get(val, "content") : NULL;
        if (!json_is_string(c)) {
            tok_fail(MS_EXIT_INPUT, "%s: added_tokens_decoder[\"%s\"].content is missing or not a string", path, key);
            goto out;
        }
        if (json_string_length(c) == 0) {
            tok_fail(MS_EXIT_INPUT, "%s: added_tokens_decoder[\"%s\"].content is empty", path, key);
            goto out;
        }
        if (id < t->n_ranks) {
            tok_fail(MS_EXIT_INPUT, "%s: special token id %s collides with a rank of tiktoken.model (0..%d)", path,
                     key, t->n_ranks - 1);
            goto out;
        }
        if (id - t->n_ranks >= TOK_MAX_SPECIAL_SPAN) {
            tok_fail(MS_EXIT_INPUT, "%s: special token id %s is implausibly far above the last rank %d", path, key,
                     t->n_ranks - 1);
            goto out;
        }
        tok_special *sp = &t->spec[t->n_special++];
        sp->len = json_string_length(c);
        sp->content = ms_malloc(sp->len + 1);
        memcpy(sp->content, json_string_value(c), sp->len + 1);
        sp->id = (int32_t)id;
        if (id > max_id) max_id = id;
    }
    qsort(t->spec, (size_t)t->n_special, sizeof *t->spec, tok_cmp_spec_id);
    t->n_vocab = (int)(max_id + 1);
    size_t span = (size_t)(t->n_vocab - t->n_ranks);
    t->spec_by_id = ms_malloc((span ? span : 1) * sizeof *t->spec_by_id);
    for (size_t i = 0; i < span; i++) t->spec_by_id[i] = -1;
    t->spec_match = ms_malloc((size_t)(t->n_special ? t->n_special : 1) * sizeof *t->spec_match);
    tok_match_key *keys = ms_malloc((size_t)(t->n_special ? t->n_special : 1) * sizeof *keys);
    for (int i = 0; i < t->n_special; i++) {
        if (t->spec_by_id[t->spec[i].id - t->n_ranks] >= 0) {
            free(keys);
            tok_fail(MS_EXIT_INPUT, "%s: special token id %d is listed twice", path, (int)t->spec[i].id);
            goto out;
        }
        t->spec_by_id[t->spec[i].id - t->n_ranks] = i;
        keys[i] = (tok_match_key){t->spec[i].len, t->spec[i].id, i};
        t->spec_first[(uint8_t)t->spec[i].content[0]] = 1;
    }
    /* longest content first so that the first hit at a position is the longest; then by id */
    qsort(keys, (size_t)t->n_special, sizeof *keys, tok_cmp_match);
    for (int i = 0; i < t->n_special; i++) t->spec_match[i] = keys[i].idx;
    free(keys);
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int ms_tok_present(const char *dir)
{
    char *p = tok_path(dir, "tiktoken.model");
    struct stat st;
    int ok = stat(p, &st) == 0 && S_ISREG(st.st_mode);
    free(p);
    return ok;
}

ms_tok *ms_tok_load(const char *dir)
{
    ms_tok *t = ms_calloc(1, sizeof *t);
    char *p = tok_path(dir, "tiktoken.model");
    int rc = tok_load_ranks(t, p);
    free(p);
    if (rc == 0) {
        p = tok_path(dir, "tokenizer_config.json");
        rc = tok_load_specials(t, p);
        free(p);
    }
    if (rc == 0) {
        t->re = ms_tok_regex_compile(&t->jit);
        if (!t->re) rc = -1;
    }
    if (rc != 0) {
        int code = ms_err_code();
        ms_tok_free(t);
        ms_err_set_code(code);
        return NULL;
    }
    return t;
}

void ms_tok_free(ms_tok *t)
{
    if (!t) return;
    free(t->pool);
    free(t->tok_off);
    free(t->tok_len);
    free(t->slots);
    free(t->tags);
    for (int i = 0; i < t->n_special; i++) free(t->spec[i].content);
    free(t->spec);
    free(t->spec_match);
    free(t->spec_by_id);
    if (t->re) pcre2_code_free(t->re);
    free(t);
}

int ms_tok_n_vocab(const ms_tok *t)
{
    return t->n_vocab;
}

int ms_tok_special_id(const ms_tok *t, const char *content)
{
    size_t n = strlen(content);
    for (int i = 0; i < t->n_special; i++)
        if (t->spec[i].len == n && memcmp(t->spec[i].content, content, n) == 0) return t->spec[i].id;
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Encoding. */

typedef struct {
    int32_t *ids;
    size_t n, cap;
} tok_ids;

static void tok_ids_push(tok_ids *v, int32_t id)
{
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 256;
        v->ids = ms_realloc(v->ids, v->cap * sizeof *v->ids);
    }
    v->ids[v->n++] = id;
}

/* A candidate merge: parts [left, mid) and [mid, end) with rank of [left, end). */
typedef struct {
    uint32_t rank, left, end;
} tok_pair;

typedef struct {
    tok_pair *heap;   /* binary min-heap by (rank, left) */
    size_t heap_cap;
    uint32_t *nxt;    /* [len] start of the next part (len for the last) */
    uint32_t *prv;    /* [len] start of the previous part */
    uint8_t *alive;   /* [len] 1 where a part starts */
    size_t cap;       /* capacity of nxt/prv/alive */
} tok_scratch;

static int tok_pair_less(const tok_pair *a, const tok_pair *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void tok_heap_push(tok_scratch *s, size_t *hn, tok_pair p)
{
    if (*hn == s->heap_cap) {
        s->heap_cap = s->heap_cap ? s->heap_cap * 2 : 64;
        s->heap = ms_realloc(s->heap, s->heap_cap * sizeof *s->heap);
    }
    size_t i = (*hn)++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!tok_pair_less(&p, &s->heap[up])) break;
        s->heap[i] = s->heap[up];
        i = up;
    }
    s->heap[i] = p;
}

static tok_pair tok_heap_pop(tok_scratch *s, size_t *hn)
{
    tok_pair top = s->heap[0], last = s->heap[--(*hn)];
    size_t i = 0, n = *hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && tok_pair_less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!tok_pair_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

static void tok_try_pair(const ms_tok *t, tok_scratch *s, size_t *hn, const uint8_t *p, uint32_t left, uint32_t end)
{
    int32_t r = tok_lookup(t, p + left, end - left);
    if (r >= 0) tok_heap_push(s, hn, (tok_pair){(uint32_t)r, left, end});
}

/* Byte-pair encode one piece (spec 5.5). Lazy-deletion heap: O(n log n) for long pieces,
 * and the same result as repeatedly merging the lowest-rank adjacent pair, leftmost on ties. */
static int tok_bpe(const ms_tok *t, tok_scratch *s, const uint8_t *p, size_t len, tok_ids *out)
{
    int32_t whole = tok_lookup(t, p, len);
    if (whole >= 0) {
        tok_ids_push(out, whole);
        return 0;
    }
    if (len > UINT32_MAX - 1) return tok_fail(MS_EXIT_INPUT, "tokenizer: piece of %zu bytes is too long", len);
    if (len > s->cap) {
        s->cap = len;
        s->nxt = ms_realloc(s->nxt, len * sizeof *s->nxt);
        s->prv = ms_realloc(s->prv, len * sizeof *s->prv);
        s->alive = ms_realloc(s->alive, len);
    }
    uint32_t n = (uint32_t)len;
    size_t hn = 0;
    for (uint32_t i = 0; i < n; i++) {
        s->nxt[i] = i + 1;
        s->prv[i] = i ? i - 1 : 0;
        s->alive[i] = 1;
    }
    for (uint32_t i = 0; i + 1 < n; i++) tok_try_pair(t, s, &hn, p, i, i + 2);
    while (hn) {
        tok_pair e = tok_heap_pop(s, &hn);
        uint32_t l = e.left;
        if (!s->alive[l] || s->nxt[l] >= n || s->nxt[s->nxt[l]] != e.end) continue; /* stale */
        uint32_t r = s->nxt[l];
        s->alive[r] = 0;
        s->nxt[l] = e.end;
        if (e.end < n) s->prv[e.end] = l;
        if (l > 0) tok_try_pair(t, s, &hn, p, s->prv[l], e.end);
        if (e.end < n) tok_try_pair(t, s, &hn, p, l, s->nxt[e.end]);
    }
    for (uint32_t i = 0; i < n; i = s->nxt[i]) {
        int32_t r = tok_lookup(t, p + i, s->nxt[i] - i);
        if (r < 0) {
            /* only possible for a single byte missing from the vocabulary */
            return tok_fail(MS_EXIT_INPUT, "tokenizer: byte 0x%02x has no token in tiktoken.model", p[i]);
        }
        tok_ids_push(out, r);
    }
    return 0;
}

/* Offset of the first invalid UTF-8 sequence in s[0..n), or n if valid. */
static size_t tok_utf8_check(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint32_t cp, min;
        if (c >= 0xc2 && c <= 0xdf) {
            k = 1;
            cp = c & 0x1f;
            min = 0x80;
        } else if (c >= 0xe0 && c <= 0xef) {
            k = 2;
            cp = c & 0x0f;
            min = 0x800;
        } else if (c >= 0xf0 && c <= 0xf4) {
            k = 3;
            cp = c & 0x07;
            min = 0x10000;
        } else {
            return i;
        }
        if (n - i <= k) return i;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return i;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
        i += k + 1;
    }
    return n;
}

typedef struct {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;
} tok_matcher;

/* Next match at or after pos in subj[0..n): 1 with [*ms, *me), 0 for none, -1 on error. */
static int tok_next_match(const ms_tok *t, tok_matcher *m, const uint8_t *subj, size_t n, size_t pos, size_t *ms,
                          size_t *me)
{
    int rc = pcre2_match(t->re, subj, n, pos, PCRE2_NO_UTF_CHECK, m->md, m->mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_MATCHLIMIT) {
        /* not expected with this pattern (constant backtracking depth); the interpreter is a safety net */
        rc = pcre2_match(t->re, subj, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, m->md, m->mctx);
    }
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return tok_fail(MS_EXIT_RUNTIME, "tokenizer: split regex failed at byte %zu: %s", pos, (const char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

/* Tokenize ordinary text (no special-token handling) like tiktoken's find_iter + BPE. */
static int tok_encode_ordinary(const ms_tok *t, tok_matcher *m, tok_scratch *s, const uint8_t *p, size_t n,
                               tok_ids *out)
{
    size_t pos = 0;
    while (pos < n) {
        size_t a = 0, b = 0;
        int rc = tok_next_match(t, m, p, n, pos, &a, &b);
        if (rc < 0) return -1;
        if (rc == 0) a = b = n;
        /* The pattern matches every code point, so gaps cannot occur; if they did, keep the
         * bytes (tiktoken would drop them) so that decode(encode(x)) == x still holds. */
        if (a > pos && tok_bpe(t, s, p + pos, a - pos, out) != 0) return -1;
        if (rc == 0) break;
        if (b == a) {
            /* an empty match cannot happen either; step over one code point */
            b = a + 1;
            while (b < n && (p[b] & 0xc0) == 0x80) b++;
        }
        if (tok_bpe(t, s, p + a, b - a, out) != 0) return -1;
        pos = b;
    }
    return 0;
}

/* Earliest special-token occurrence in p[from..n), longest at that position: index or -1. */
static int tok_find_special(const ms_tok *t, const uint8_t *p, size_t n, size_t from, size_t *at)
{
    for (size_t i = from; i < n; i++) {
        if (!t->spec_first[p[i]]) continue;
        for (int k = 0; k < t->n_special; k++) {
            const tok_special *sp = &t->spec[t->spec_match[k]];
            if (sp->len <= n - i && memcmp(p + i, sp->content, sp->len) == 0) {
                *at = i;
                return t->spec_match[k];
            }
        }
    }
    return -1;
}

int ms_tok_encode(const ms_tok *t, const char *text, size_t len, int allow_special, int32_t **ids, size_t *n)
{
    *ids = NULL;
    *n = 0;
    const uint8_t *p = (const uint8_t *)(text ? text : "");
    if (!text) len = 0;
    size_t bad = tok_utf8_check(p, len);
    if (bad < len) return tok_fail(MS_EXIT_INPUT, "tokenizer: input is not valid UTF-8 at byte offset %zu", bad);

    tok_ids out = {0};
    tok_scratch s = {0};
    tok_matcher m = {0};
    m.md = pcre2_match_data_create(1, NULL);
    m.mctx = pcre2_match_context_create(NULL);
    if (!m.md || !m.mctx) {
        ms_err_set("tokenizer: out of memory creating regex match data");
        goto fail;
    }
    /* The pattern only repeats single classes, so backtracking needs a constant number of frames
     * whatever the piece length: a small heap limit suffices for the interpreter; the match limit
     * counts backtracking steps, which grow linearly with a long piece, so it is lifted. */
    pcre2_set_heap_limit(m.mctx, 16u << 10); /* KiB = 16 MiB */
    pcre2_set_match_limit(m.mctx, UINT32_MAX);
    if (t->jit) {
        m.jstack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
        if (m.jstack) pcre2_jit_stack_assign(m.mctx, NULL, m.jstack);
    }

    size_t pos = 0;
    while (pos < len) {
        size_t at = len;
        int k = (allow_special && t->n_special) ? tok_find_special(t, p, len, pos, &at) : -1;
        if (k < 0) at = len;
        if (at > pos && tok_encode_ordinary(t, &m, &s, p + pos, at - pos, &out) != 0) goto fail;
        if (k < 0) break;
        tok_ids_push(&out, t->spec[k].id);
        pos = at + t->spec[k].len;
    }
    pcre2_match_data_free(m.md);
    pcre2_match_context_free(m.mctx);
    if (m.jstack) pcre2_jit_stack_free(m.jstack);
    free(s.heap);
    free(s.nxt);
    free(s.prv);
    free(s.alive);
    *ids = out.ids ? out.ids : ms_malloc(sizeof(int32_t));
    *n = out.n;
    return 0;
fail:
    if (m.md) pcre2_match_data_free(m.md);
    if (m.mctx) pcre2_match_context_free(m.mctx);
    if (m.jstack) pcre2_jit_stack_free(m.jstack);
    free(s.heap);
    free(s.nxt);
    free(s.prv);
    free(s.alive);
    free(out.ids);
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Decoding. */

int ms_tok_decode(const ms_tok *t, const int32_t *ids, size_t n, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id >= 0 && id < t->n_ranks) {
            total += t->tok_len[id];
        } else if (id >= t->n_ranks && id < t->n_vocab && t->spec_by_id[id - t->n_ranks] >= 0) {
            total += t->spec[t->spec_by_id[id - t->n_ranks]].len;
        } else {
            return tok_fail(MS_EXIT_INPUT,
                            "tokenizer: token id %d at position %zu is out of range (vocabulary has %d ids%s)",
                            (int)id, i, t->n_vocab, id >= 0 && id < t->n_vocab ? ", and this one is unassigned" : "");
        }
    }
    char *buf = ms_malloc(total + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < t->n_ranks) {
            memcpy(buf + o, t->pool + t->tok_off[id], t->tok_len[id]);
            o += t->tok_len[id];
        } else {
            const tok_special *sp = &t->spec[t->spec_by_id[id - t->n_ranks]];
            memcpy(buf + o, sp->content, sp->len);
            o += sp->len;
        }
    }
    buf[o] = 0;
    *text = buf;
    *len = o;
    return 0;
}
