/* fuzz_tok_decode: libFuzzer harness for ms_tok_decode on arbitrary ids (the input read as little-endian int32s). */
#include "fuzz_tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    const ms_tok *t = fuzz_tok();
    size_t n = len / 4;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) abort();
    int nv = ms_tok_n_vocab(t), all_in = 1;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)data[4 * i] | (uint32_t)data[4 * i + 1] << 8 | (uint32_t)data[4 * i + 2] << 16 |
                     (uint32_t)data[4 * i + 3] << 24;
        ids[i] = (int32_t)v;
        if (ids[i] < 0 || ids[i] >= nv) all_in = 0;
    }
    char *text = NULL;
    size_t tl = 0;
    int rc = ms_tok_decode(t, ids, n, &text, &tl);
    /* Decoding succeeds exactly when every id is in the vocabulary. */
    FUZZ_CHECK((rc == 0) == all_in);
    if (rc == 0) {
        FUZZ_CHECK(text != NULL && text[tl] == 0);
        /* Each id is one token of 1..(longest token) bytes: the text is never shorter than the ids. */
        FUZZ_CHECK(tl >= n);
        free(text);
    } else {
        fuzz_refused(ms_err_msg());
        FUZZ_CHECK(ms_err_msg()[0] != 0);
    }
    free(ids);
    return 0;
}
