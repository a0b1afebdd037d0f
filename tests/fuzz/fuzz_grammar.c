/* fuzz_grammar: libFuzzer harness for the grammar parser (ms_grammar_parse) and its matcher: the
 * input is a grammar, a NUL byte, then a text fed to the grammar in pieces; the mask over a small
 * vocabulary must agree with each token tried alone (special tokens too: a grammar's <TEXT>). */
#include "fuzz_tok.h"
#include "ms_grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    const char *s = (const char *)data, *nul = memchr(s, 0, len);
    size_t gl = nul ? (size_t)(nul - s) : len;
    ms_grammar *g = ms_grammar_parse(s, gl);
    if (!g) {
        fuzz_refused(ms_err_msg());
        FUZZ_CHECK(ms_err_code() == MS_EXIT_INPUT && ms_err_msg()[0]);
        return 0;
    }
    const char *text = nul ? nul + 1 : "";
    size_t tl = nul ? len - gl - 1 : 0;
    ms_gstate *st = ms_gstate_new(g);
    for (size_t i = 0; i < tl; i += 3) { /* pieces of 3 bytes: a refused one leaves the state as it was */
        int c0 = ms_gstate_complete(st), o0 = ms_gstate_open(st);
        size_t k = tl - i < 3 ? tl - i : 3;
        if (!ms_gstate_accept(st, text + i, k)) FUZZ_CHECK(ms_gstate_complete(st) == c0 && ms_gstate_open(st) == o0);
    }
    /* the mask = each token alone (a vocabulary of 1024 + 10 ids) */
    static ms_gvocab *v;
    const ms_tok *tok = fuzz_tok();
    if (!v) v = ms_gvocab_new(tok);
    int64_t V = ms_tok_n_vocab(tok);
    uint8_t *m = ms_malloc((size_t)V);
    int64_t c = ms_gstate_mask(st, v, m), n = 0;
    for (int32_t id = 0; id < V; id++) {
        size_t bl;
        const char *b = ms_gvocab_bytes(v, id, &bl);
        int ok = 0;
        ms_gstate *x = ms_gstate_clone(st);
        if (bl) {
            ok = ms_gstate_accept(x, b, bl);
        } else { /* a special token: only through its terminal */
            ok = ms_gstate_accept_id(x, v, id);
        }
        ms_gstate_free(x);
        FUZZ_CHECK(ok == m[id]);
        n += ok;
    }
    FUZZ_CHECK(n == c);
    free(m);
    ms_gstate_free(st);
    ms_grammar_free(g);
    return 0;
}
