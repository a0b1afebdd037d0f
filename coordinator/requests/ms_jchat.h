/* ms_jchat: a chat request's "messages", "tools" and template options (OpenAI shape) -> what a family's chat format renders. */
#ifndef MS_JCHAT_H
#define MS_JCHAT_H

#include <jansson.h>
#include <stddef.h>

#include "ms_family.h"

/* The messages and options of one request. Borrows the strings of the body it was read from
 * (keep the body alive while using it); owns msgs and the rendered tool-call arguments. */
typedef struct {
    ms_chat_msg *msgs;        /* [n] */
    int n;
    ms_chat_opts opts;        /* tools and vars borrowed from the body */
    char **owned;             /* [n_owned] text this struct allocated */
    int n_owned;
} ms_jchat;

/* Read body's chat: "messages" (role, content: a string, or null / absent for an assistant
 * turn with "tool_calls"; "thinking" or "reasoning_content": an assistant's reasoning;
 * "tool_calls": [{"type": "function", "function": {"name", "arguments"}}], arguments as a
 * JSON-text string (OpenAI's form, parsed and re-written as the template's tojson writes an
 * object) or an object), "tools" (tool_choice and strict are ms_jgram's), "reasoning_effort",
 * and "chat_template_kwargs": "add_generation_prompt" and the variables fmt (the family's chat
 * format; NULL: none) reads (ms_chatfmt.var; harmony: "reasoning_effort", "model_identity",
 * "builtin_tools"), checked and passed on as they are (opts.vars), any other refused. date: what the system message carries (NULL: today).
 * render_only: 1 lets add_generation_prompt be false (tokenize --chat); serve and jobs refuse it.
 * 0, or -1 with the reason in why[n] (what the client must change, naming the field) and *param
 * the offending request field ("messages", "tools", ...). On failure c holds nothing. */
int ms_jchat_read(json_t *body, const ms_chatfmt *fmt, const char *date, int render_only, ms_jchat *c, char *why, size_t n,
                  const char **param);
void ms_jchat_clear(ms_jchat *c); /* accepts a zeroed struct */

/* What the request readers share: a refusal (why[n] from fmt, *param = field; returns -1), and
 * a body's member k unless it is absent or null (borrowed). */
int ms_jchat_refuse(char *why, size_t n, const char **param, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
const json_t *ms_jchat_field(const json_t *o, const char *k);

#endif
