/* fuzz_tok_load: libFuzzer harness for the tokenizer files (tiktoken.model, then a NUL byte, then tokenizer_config.json) through ms_tok_load. */
#include "fuzz_util.h"
#include "ms_tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    const uint8_t *nul = memchr(data, 0, len);
    size_t a = nul ? (size_t)(nul - data) : len;
    fuzz_write(fuzz_path(0, "tiktoken.model"), data, a);
    fuzz_write(fuzz_path(1, "tokenizer_config.json"), nul ? nul + 1 : (const uint8_t *)"", nul ? len - a - 1 : 0);
    ms_tok *t = ms_tok_load(fuzz_dir());
    if (!t) {
        fuzz_refused(ms_err_msg());
        FUZZ_CHECK(ms_err_msg()[0] != 0);
        return 0;
    }
    /* Loaded: every id decodes (or is refused as unassigned); a text encodes (or is refused for a byte without a token)
     * and decodes back to itself. */
    int nv = ms_tok_n_vocab(t);
    FUZZ_CHECK(nv >= 1);
    char *text = NULL;
    size_t tl = 0;
    for (int32_t id = 0; id < nv; id++) { /* ids between the ranks and the specials may be unassigned */
        if (ms_tok_decode(t, &id, 1, &text, &tl) == 0) {
            FUZZ_CHECK(tl >= 1);
            free(text);
        } else {
            FUZZ_CHECK(strstr(ms_err_msg(), "unassigned") != NULL);
        }
    }
    static const char sample[] = "Hello, world! 123 caf\xc3\xa9  \n\t<|im_end|>";
    int32_t *ids = NULL;
    size_t n = 0;
    for (int special = 0; special < 2; special++) {
        if (ms_tok_encode(t, sample, sizeof sample - 1, special, &ids, &n) != 0) {
            FUZZ_CHECK(strstr(ms_err_msg(), "has no token") != NULL);
            continue;
        }
        for (size_t i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < nv);
        FUZZ_CHECK(ms_tok_decode(t, ids, n, &text, &tl) == 0);
        FUZZ_CHECK(tl == sizeof sample - 1 && memcmp(text, sample, tl) == 0);
        free(text);
        free(ids);
    }
    ms_tok_free(t);
    return 0;
}
