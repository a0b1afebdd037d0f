/* fuzz_tok: the synthetic tokenizer the tokenizer harnesses share, written and loaded once. */
#ifndef FUZZ_TOK_H
#define FUZZ_TOK_H

#include "fuzz_util.h"
#include "ms_tok.h"

static inline const ms_tok *fuzz_tok(void)
{
    static ms_tok *t;
    if (t) return t;
    const char *dir = fuzz_dir();
    if (ms_tok_write_synth(dir, 1024) != 0 || !(t = ms_tok_load(dir))) {
        fprintf(stderr, "fuzz_tok: %s\n", ms_err_msg());
        abort();
    }
    return t;
}

#endif
