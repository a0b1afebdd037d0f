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
    int plain;     /* an added token that is not special (Qwen3's <think>): matched in any text,
                      its text kept when special tokens are skipped */
} tok_special;

#define MS_TOK_MAX_SPLITS 4 /* Split pre-tokenizers in a tokenizer.json Sequence */

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
    pcre2_code *re;           /* the split regex (of a Sequence of splits, the last) */
    int jit; /* 1 if JIT compilation succeeded */
    pcre2_code *pre[MS_TOK_MAX_SPLITS - 1]; /* a tokenizer.json Sequence's earlier Split regexes:
                                               each splits the pieces of the one before (DeepSeek-V3) */
    int n_pre;
    int nfc; /* 1: text between added tokens is put in Unicode NFC before it is split (a
                tokenizer.json normalizer NFC) */
    /* Merges only (a tokenizer.json BPE with ignore_merges false): two adjacent parts join only
     * when their pair is a listed merge, the earliest listed first, and a piece that is a token
     * is not taken whole. n_merges 0: tiktoken's rule (any two parts that make a token, lowest
     * rank first; a piece that is a token is one token). */
    uint32_t n_merges;
    uint32_t *merge_pairs;    /* [2 * n_merges] left, right rank, in the list's order */
    uint64_t *merge_keys;     /* [merge_mask + 1] hash of (left, right) + 1; 0 = empty */
    uint32_t *merge_prio;     /* [merge_mask + 1] the pair's index in the list */
    size_t merge_mask;
};

/* Index the merges t->merge_pairs[0 .. 2 * n) (owned by t from now on) for lookup. */
void ms_tok_merges_index(ms_tok *t, uint32_t *pairs, uint32_t n);

/* Insert rank r into t's hash table (t->pool, tok_off, tok_len set for r); returns the rank
 * already holding the same bytes, or -1 if inserted. */
int32_t ms_tok_table_insert(ms_tok *t, uint32_t r);

/* The rank of the token with bytes p[n], or -1. */
int32_t ms_tok_table_find(const ms_tok *t, const uint8_t *p, size_t n);

/* The Kimi split pattern compiled (JIT when available: *jit = 1). NULL with ms_err set. The
 * caller frees it with pcre2_code_free. */
pcre2_code *ms_tok_regex_compile(int *jit);
/* The same for a pattern in PCRE2 syntax (UTF, UCP). */
pcre2_code *ms_tok_regex_compile_pattern(const char *pattern, int *jit);

/* The White_Space property spelled out for a PCRE2 class (Rust's and tiktoken's \s; PCRE2's
 * UCP \s omits U+0085). */
#define TOK_WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* After ranks and specials (t->spec[0..n_special) with ids above the ranks) are set: sort them,
 * index them by id and by match order, and set n_vocab. 0, or -1 with ms_err set (MS_EXIT_INPUT)
 * naming `what` for an id listed twice. */
int ms_tok_specials_index(ms_tok *t, const char *what);
/* 0 when each of the 256 bytes has a token of its own, else -1 with ms_err set (MS_EXIT_INPUT)
 * naming `what` and the byte. */
int ms_tok_check_bytes(const ms_tok *t, const char *what);
/* Free what t holds and zero it (t itself stays). */
void ms_tok_reset(ms_tok *t);

/* GPT-2's byte-level alphabet (tokenizer.json): byte b is code point cp[b]; inv[cp] is the byte
 * of a code point below 324, or -1. */
void ms_tok_byte_level_map(uint32_t cp[256], int16_t inv[324]);

/* Tokenizers from tokenizer.json (ms_tok_hf.c): fill t (zeroed) from the file at path. 0, or -1
 * with ms_err set (MS_EXIT_INPUT) naming the file and the field. */
int ms_tok_hf_load(ms_tok *t, const char *path);

#endif
