/* ms_tok_int: what the tokenizer (ms_tok.c), its loader (ms_tok_load.c) and its synthetic writer
 * (ms_tok_synth.c) share. Not public. */
#ifndef MS_TOK_INT_H
#define MS_TOK_INT_H

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <stddef.h>
#include <stdint.h>

#include "ms_tok.h"

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

/* Insert rank r into t's hash table (t->pool, tok_off, tok_len set for r); returns the rank
 * already holding the same bytes, or -1 if inserted. */
int32_t ms_tok_table_insert(ms_tok *t, uint32_t r);

/* The Kimi split pattern compiled (JIT when available: *jit = 1). NULL with ms_err set. The
 * caller frees it with pcre2_code_free. */
pcre2_code *ms_tok_regex_compile(int *jit);

#endif
