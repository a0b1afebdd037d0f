/* ms_cli_grammar: --grammar / --json-schema FILE -> ms_grammar. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_cli.h"
#include "ms_cli_grammar.h"
#include "ms_err.h"
#include "ms_jschema.h"

ms_grammar *ms_cli_grammar_load(const char *path, int json_schema)
{
    size_t gl = 0;
    char *gt = ms_cli_read_file(path, &gl);
    if (!gt) return NULL;
    const char *opt = json_schema ? "--json-schema" : "--grammar";
    if (json_schema) {
        json_error_t je;
        json_t *sc = json_loadb(gt, gl, JSON_REJECT_DUPLICATES, &je);
        char why[600] = "";
        free(gt);
        gt = sc ? ms_jschema_grammar(sc, why, sizeof why) : NULL;
        if (!sc) snprintf(why, sizeof why, "not JSON: line %d: %s", je.line, je.text);
        json_decref(sc);
        if (!gt) {
            ms_err_set("%s %s: %s", opt, path, why);
            ms_err_set_code(MS_EXIT_INPUT);
            return NULL;
        }
        gl = strlen(gt);
    }
    ms_grammar *g = ms_grammar_parse(gt, gl);
    free(gt);
    if (!g) ms_err_wrap("%s %s", opt, path);
    return g;
}
