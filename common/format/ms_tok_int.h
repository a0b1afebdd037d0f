/* ms_tok_int: what the tokenizer shares with its synthetic writer (ms_tok_synth.c). Not public. */
#ifndef MS_TOK_INT_H
#define MS_TOK_INT_H

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

/* The Kimi split pattern compiled (JIT when available: *jit = 1). NULL with ms_err set. The
 * caller frees it with pcre2_code_free. */
pcre2_code *ms_tok_regex_compile(int *jit);

#endif
