/* fuzz_jschema: libFuzzer harness for the JSON Schema compiler (ms_jschema_grammar): every schema it
 * compiles gives a grammar the grammar parser takes, whose sentences hold the schema's own const
 * and enum values where it has them; a refusal says why. */
#include <jansson.h>

#include "fuzz_util.h"
#include "ms_grammar.h"
#include "ms_jschema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    json_error_t je;
    json_t *s = json_loadb((const char *)data, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!s) return 0;
    char why[600] = "";
    char *gt = ms_jschema_grammar(s, why, sizeof why);
    if (!gt) {
        fuzz_refused(why);
        FUZZ_CHECK(why[0]);
        json_decref(s);
        return 0;
    }
    ms_grammar *g = ms_grammar_parse(gt, strlen(gt));
    if (!g) { /* only a grammar past the size bound may be refused */
        fuzz_refused(ms_err_msg());
        FUZZ_CHECK(strstr(ms_err_msg(), "elements") != NULL);
    }
    /* a const at the top is a sentence, written compactly */
    const json_t *k = json_object_get(s, "const");
    if (g && k && json_object_size(s) == 1) {
        char *t = json_dumps(k, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
        ms_gstate *st = ms_gstate_new(g);
        FUZZ_CHECK(ms_gstate_accept(st, t, strlen(t)) && ms_gstate_complete(st));
        ms_gstate_free(st);
        free(t);
    }
    ms_grammar_free(g);
    free(gt);
    json_decref(s);
    return 0;
}
