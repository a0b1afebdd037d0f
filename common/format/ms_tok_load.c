/* ms_tok_load: reading the tokenizer's files: the tiktoken rank file (base64 token, rank per line)
 * and the special tokens of tokenizer_config.json. */
#define PCRE2_CODE_UNIT_WIDTH 8

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <jansson.h>

#include "ms_err.h"
#include "ms_file.h"
#include "ms_tok.h"
#include "ms_tok_int.h"

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
        int32_t dup = ms_tok_table_insert(t, (uint32_t)rank);
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
    }
    rc = ms_tok_specials_index(t, path);
out:
    json_decref(root);
    return rc;
}

int ms_tok_check_bytes(const ms_tok *t, const char *what)
{
    for (int b = 0; b < 256; b++) {
        uint8_t one = (uint8_t)b;
        if (ms_tok_table_find(t, &one, 1) < 0) {
            ms_err_set("%s: byte 0x%02x has no token of its own: a byte-level vocabulary needs all 256", what, b);
            return ms_err_set_code(MS_EXIT_INPUT);
        }
    }
    return 0;
}

int ms_tok_specials_index(ms_tok *t, const char *what)
{
    int32_t max_id = t->n_ranks - 1;
    for (int i = 0; i < t->n_special; i++)
        if (t->spec[i].id > max_id) max_id = t->spec[i].id;
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
            return tok_fail(MS_EXIT_INPUT, "%s: special token id %d is listed twice", what, (int)t->spec[i].id);
        }
        t->spec_by_id[t->spec[i].id - t->n_ranks] = i;
        keys[i] = (tok_match_key){t->spec[i].len, t->spec[i].id, i};
        t->spec_first[(uint8_t)t->spec[i].content[0]] = 1;
    }
    /* longest content first so that the first hit at a position is the longest; then by id */
    qsort(keys, (size_t)t->n_special, sizeof *keys, tok_cmp_match);
    for (int i = 0; i < t->n_special; i++) t->spec_match[i] = keys[i].idx;
    free(keys);
    return 0;
}

static int regular(const char *dir, const char *name)
{
    char *p = tok_path(dir, name);
    struct stat st;
    int ok = stat(p, &st) == 0 && S_ISREG(st.st_mode);
    free(p);
    return ok;
}

int ms_tok_present(const char *dir) { return regular(dir, "tiktoken.model") || regular(dir, "tokenizer.json"); }

ms_tok *ms_tok_load(const char *dir)
{
    ms_tok *t = ms_calloc(1, sizeof *t);
    int rc;
    if (!regular(dir, "tiktoken.model") && regular(dir, "tokenizer.json")) { /* Hugging Face's format */
        char *p = tok_path(dir, "tokenizer.json");
        rc = ms_tok_hf_load(t, p);
        free(p);
    } else {
        char *p = tok_path(dir, "tiktoken.model");
        rc = tok_load_ranks(t, p);
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
    ms_tok_reset(t);
    free(t);
}

void ms_tok_reset(ms_tok *t)
{
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
    for (int i = 0; i < t->n_pre; i++) pcre2_code_free(t->pre[i]);
    free(t->merge_pairs);
    free(t->merge_keys);
    free(t->merge_prio);
    memset(t, 0, sizeof *t);
}

