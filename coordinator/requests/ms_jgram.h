/* ms_jgram: what a chat request holds its answer to (response_format, tool_choice, strict tools) -> one grammar, in its family's chat format. */
#ifndef MS_JGRAM_H
#define MS_JGRAM_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "ms_family.h"
#include "ms_tok.h"

/* The grammar (ms_grammar's text) the answer to body is held to, under the chat format fmt and
 * tokenizer t, into *grammar (a new string; NULL when nothing constrains it: no response_format
 * but text, tool_choice absent or "auto" and no strict tool). Read:
 *   "response_format": text | json_object | json_schema ({"name", "schema", "strict"}): the
 *     content (ms_jschema; keywords it cannot hold a text to refused, naming them);
 *   "tool_choice": "auto" (the content or a call), "none" (no call can begin), "required" (one
 *     call), {"type": "function", "function": {"name": NAME}} (one call to NAME);
 *   "tools": [{"type": "function", "function": {"name", "parameters", "strict"}}]: a call's
 *     arguments are a JSON object; a strict tool's validate against its parameters.
 * The format writes the rest (its reasoning block first, its call syntax: ms_chatfmt.rules);
 * prompt[n_prompt], the chat's rendered prompt, tells whether it opened the answer's reasoning.
 * 0, or -1 with why[n] saying what to change and *param the field ("tool_choice", "tools",
 * "response_format"). */
int ms_jgram_chat(const json_t *body, const ms_chatfmt *fmt, const ms_tok *t, const int32_t *prompt, size_t n_prompt,
                  char **grammar, char *why, size_t n, const char **param);

#endif
