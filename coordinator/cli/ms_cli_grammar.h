/* ms_cli_grammar: run's --grammar and --json-schema files read into a compiled grammar. */
#ifndef MS_CLI_GRAMMAR_H
#define MS_CLI_GRAMMAR_H

#include "ms_grammar.h"

/* The grammar of FILE: grammar text (json_schema 0) or a JSON Schema compiled by ms_jschema
 * (json_schema 1). NULL with ms_err set naming the file (MS_EXIT_IO: unreadable; MS_EXIT_INPUT:
 * not JSON, a schema keyword it cannot hold a text to, a grammar error with its line and column). */
ms_grammar *ms_cli_grammar_load(const char *path, int json_schema);

#endif
