/* ms_tok: the Kimi tiktoken tokenizer (rank file, special tokens, Kimi split regex, byte-pair merging). */
#define PCRE2_CODE_UNIT_WIDTH 8

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pcre2.h>
#include <utf8proc.h>

#include "ms_err.h"
#include "ms_tok.h"
#include "ms_tok_int.h"

#define tok_fail ms_err_fail

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
int32_t ms_tok_table_find(const ms_tok *t, const uint8_t *p, size_t n)
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

int32_t ms_tok_table_insert(ms_tok *t, uint32_t r)
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

/* Compile the built-in split pattern; JIT when available (falls back to the interpreter). */
pcre2_code *ms_tok_regex_compile(int *jit) { return ms_tok_regex_compile_pattern(tok_pattern, jit); }

pcre2_code *ms_tok_regex_compile_pattern(const char *pattern, int *jit)
{
    int errcode;
    PCRE2_SIZE erroff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &errcode,
                                   &erroff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errcode, msg, sizeof msg);
        tok_fail(MS_EXIT_INPUT, "tokenizer split pattern does not compile at offset %zu: %s", (size_t)erroff,
                 (const char *)msg);
        return NULL;
    }
    *jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    return re;
}

int ms_tok_n_vocab(const ms_tok *t)
{
    return t->n_vocab;
}

int ms_tok_is_special(const ms_tok *t, int32_t id) { return id >= t->n_ranks; }

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

static uint64_t merge_key(uint32_t l, uint32_t r) { return ((uint64_t)l << 32 | r) + 1; }
static size_t merge_slot(uint64_t key) { return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17); }

void ms_tok_merges_index(ms_tok *t, uint32_t *pairs, uint32_t n)
{
    size_t cap = 1024;
    while (cap < 2 * (size_t)n) cap *= 2;
    t->n_merges = n;
    t->merge_pairs = pairs;
    t->merge_keys = ms_calloc(cap, sizeof *t->merge_keys);
    t->merge_prio = ms_malloc(cap * sizeof *t->merge_prio);
    t->merge_mask = cap - 1;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t k = merge_key(pairs[2 * i], pairs[2 * i + 1]);
        size_t j = merge_slot(k) & t->merge_mask;
        while (t->merge_keys[j] && t->merge_keys[j] != k) j = (j + 1) & t->merge_mask;
        if (t->merge_keys[j]) continue; /* listed twice: the first listing counts */
        t->merge_keys[j] = k;
        t->merge_prio[j] = i;
    }
}

/* The list index of merge (l, r), or -1 when it is not listed. */
static int64_t merge_find(const ms_tok *t, uint32_t l, uint32_t r)
{
    uint64_t k = merge_key(l, r);
    for (size_t j = merge_slot(k) & t->merge_mask; t->merge_keys[j]; j = (j + 1) & t->merge_mask)
        if (t->merge_keys[j] == k) return t->merge_prio[j];
    return -1;
}

/* The pair of parts [left, mid) and [mid, end) as a candidate: by its merge's place in the list
 * (merges only), else by the rank of the token they make. */
static void tok_try_pair(const ms_tok *t, tok_scratch *s, size_t *hn, const uint8_t *p, uint32_t left, uint32_t mid,
                         uint32_t end)
{
    if (t->n_merges) {
        int32_t a = ms_tok_table_find(t, p + left, mid - left), b = a >= 0 ? ms_tok_table_find(t, p + mid, end - mid) : -1;
        int64_t m = b >= 0 ? merge_find(t, (uint32_t)a, (uint32_t)b) : -1;
        if (m >= 0) tok_heap_push(s, hn, (tok_pair){(uint32_t)m, left, end});
        return;
    }
    int32_t r = ms_tok_table_find(t, p + left, end - left);
    if (r >= 0) tok_heap_push(s, hn, (tok_pair){(uint32_t)r, left, end});
}

/* Byte-pair encode one piece (spec 5.5). Lazy-deletion heap: O(n log n) for long pieces,
 * and the same result as repeatedly merging the lowest-rank adjacent pair, leftmost on ties. */
static int tok_bpe(const ms_tok *t, tok_scratch *s, const uint8_t *p, size_t len, tok_ids *out)
{
    int32_t whole = t->n_merges ? -1 : ms_tok_table_find(t, p, len);
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
    for (uint32_t i = 0; i + 1 < n; i++) tok_try_pair(t, s, &hn, p, i, i + 1, i + 2);
    while (hn) {
        tok_pair e = tok_heap_pop(s, &hn);
        uint32_t l = e.left;
        if (!s->alive[l] || s->nxt[l] >= n || s->nxt[s->nxt[l]] != e.end) continue; /* stale */
        uint32_t r = s->nxt[l];
        s->alive[r] = 0;
        s->nxt[l] = e.end;
        if (e.end < n) s->prv[e.end] = l;
        if (l > 0) tok_try_pair(t, s, &hn, p, s->prv[l], l, e.end);
        if (e.end < n) tok_try_pair(t, s, &hn, p, l, e.end, s->nxt[e.end]);
    }
    for (uint32_t i = 0; i < n; i = s->nxt[i]) {
        int32_t r = ms_tok_table_find(t, p + i, s->nxt[i] - i);
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
static int tok_next_match(const pcre2_code *re, tok_matcher *m, const uint8_t *subj, size_t n, size_t pos, size_t *ms,
                          size_t *me)
{
    /* Each call may take steps linear in what is left of the text (the built-in patterns repeat
     * single classes); a pattern from a tokenizer.json that backtracks exponentially, like
     * (a+)+$, reaches the limit and the text is refused instead of running for hours. */
    pcre2_set_match_limit(m->mctx, (uint32_t)(n - pos > (1u << 22) ? UINT32_MAX : 10000000u + 256u * (n - pos)));
    int rc = pcre2_match(re, subj, n, pos, PCRE2_NO_UTF_CHECK, m->md, m->mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* the interpreter's frames are on the heap, bounded below */
        rc = pcre2_match(re, subj, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, m->md, m->mctx);
    if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
        rc == PCRE2_ERROR_JIT_STACKLIMIT)
        return tok_fail(MS_EXIT_INPUT, "tokenizer: the split pattern backtracks too much on this text (PCRE2 %s limit "
                                       "at byte %zu): the tokenizer's pre_tokenizer regex is not one a text can be "
                                       "split with in bounded time",
                        rc == PCRE2_ERROR_MATCHLIMIT ? "match" : rc == PCRE2_ERROR_DEPTHLIMIT ? "depth" : "memory", pos);
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

/* A Sequence's earlier split `level` (of t->n_pre) over p[0..n): its matches and the text
 * between them (an Isolated split keeps both) are each split by the next level, the last by
 * t->re in tok_encode_ordinary. */
static int tok_encode_ordinary(const ms_tok *t, tok_matcher *m, tok_scratch *s, const uint8_t *p, size_t n,
                               tok_ids *out);
static int tok_encode_level(const ms_tok *t, int level, tok_matcher *m, tok_scratch *s, const uint8_t *p, size_t n,
                            tok_ids *out)
{
    size_t pos = 0;
    while (pos < n) {
        size_t a = n, b = n;
        int rc = tok_next_match(t->pre[level], m, p, n, pos, &a, &b);
        if (rc < 0) return -1;
        if (rc == 0) a = b = n;
        if (b == a && rc == 1) { /* an empty match splits nothing: step over one code point */
            b = a + 1;
            while (b < n && (p[b] & 0xc0) == 0x80) b++;
            a = b;
        }
        for (int k = 0; k < 2; k++) { /* the gap before the match, then the match */
            size_t x = k ? a : pos, y = k ? b : a;
            if (y <= x) continue;
            int r2 = level + 1 < t->n_pre ? tok_encode_level(t, level + 1, m, s, p + x, y - x, out)
                                          : tok_encode_ordinary(t, m, s, p + x, y - x, out);
            if (r2 != 0) return -1;
        }
        if (rc == 0) break;
        pos = b;
    }
    return 0;
}

/* Tokenize ordinary text (no special-token handling) like tiktoken's find_iter + BPE. */
static int tok_encode_ordinary(const ms_tok *t, tok_matcher *m, tok_scratch *s, const uint8_t *p, size_t n,
                               tok_ids *out)
{
    size_t pos = 0;
    while (pos < n) {
        size_t a = 0, b = 0;
        int rc = tok_next_match(t->re, m, p, n, pos, &a, &b);
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

/* Earliest added-token occurrence in p[from..n) (special ones only when allowed), longest at
 * that position: index or -1. */
static int tok_find_special(const ms_tok *t, const uint8_t *p, size_t n, size_t from, size_t *at, int allow_special)
{
    for (size_t i = from; i < n; i++) {
        if (!t->spec_first[p[i]]) continue;
        for (int k = 0; k < t->n_special; k++) {
            const tok_special *sp = &t->spec[t->spec_match[k]];
            if ((allow_special || sp->plain) && sp->len <= n - i && memcmp(p + i, sp->content, sp->len) == 0) {
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
    pcre2_set_depth_limit(m.mctx, 100000);
    if (t->jit) {
        m.jstack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
        if (m.jstack) pcre2_jit_stack_assign(m.mctx, NULL, m.jstack);
    }

    size_t pos = 0;
    while (pos < len) {
        size_t at = len;
        int k = t->n_special ? tok_find_special(t, p, len, pos, &at, allow_special) : -1;
        if (k < 0) at = len;
        if (at > pos && t->nfc) { /* the normaliser: NFC of the text between added tokens */
            utf8proc_uint8_t *nfc = NULL;
            utf8proc_ssize_t nl = utf8proc_map(p + pos, (utf8proc_ssize_t)(at - pos), &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            int rc = nl < 0 ? (ms_err_set("tokenizer: NFC: %s", utf8proc_errmsg(nl)), -1)
                            : t->n_pre ? tok_encode_level(t, 0, &m, &s, nfc, (size_t)nl, &out)
                                       : tok_encode_ordinary(t, &m, &s, nfc, (size_t)nl, &out);
            free(nfc);
            if (rc != 0) goto fail;
        } else if (at > pos && (t->n_pre ? tok_encode_level(t, 0, &m, &s, p + pos, at - pos, &out)
                                         : tok_encode_ordinary(t, &m, &s, p + pos, at - pos, &out)) != 0) {
            goto fail;
        }
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

static int decode(const ms_tok *t, const int32_t *ids, size_t n, int skip_special, char **text, size_t *len);

int ms_tok_decode(const ms_tok *t, const int32_t *ids, size_t n, char **text, size_t *len)
{
    return decode(t, ids, n, 0, text, len);
}

int ms_tok_decode_text(const ms_tok *t, const int32_t *ids, size_t n, int skip_special, char **text, size_t *len)
{
    return decode(t, ids, n, skip_special, text, len);
}

static int decode(const ms_tok *t, const int32_t *ids, size_t n, int skip_special, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id >= 0 && id < t->n_ranks) {
            total += t->tok_len[id];
        } else if (id >= t->n_ranks && id < t->n_vocab && t->spec_by_id[id - t->n_ranks] >= 0) {
            const tok_special *sp = &t->spec[t->spec_by_id[id - t->n_ranks]];
            if (!skip_special || sp->plain) total += sp->len;
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
            if (skip_special && !sp->plain) continue;
            memcpy(buf + o, sp->content, sp->len);
            o += sp->len;
        }
    }
    buf[o] = 0;
    *text = buf;
    *len = o;
    return 0;
}
