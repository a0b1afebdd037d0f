/* ms_sresp: OpenAI's Responses API (POST /v1/responses): request bodies (with the stored turns a
 * previous_response_id names) as the chat requests serve answers, answers as response objects and
 * typed events, and the store of earlier turns. */
#ifndef MS_SRESP_H
#define MS_SRESP_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "ms_family.h"
#include "ms_sbuf.h"

/* The turns of stored responses, in memory (lost at exit), the cap most recent kept: each as the
 * chat messages it ended with (its input, the earlier turns it followed, its answer), without
 * instructions (a follow-up's own "instructions" apply, as OpenAI's do). Thread-safe. */
typedef struct ms_sresp_store ms_sresp_store;
#define MS_SRESP_KEEP 1024 /* the turns serve keeps */
ms_sresp_store *ms_sresp_store_new(int cap);
void ms_sresp_store_free(ms_sresp_store *s); /* accepts NULL */

/* What a request asked that its response object repeats, and the ids of its output. */
typedef struct {
    char id[64];                 /* resp_... */
    char msg_id[64], rs_id[64], fc_id[64], call_id[64];
    int64_t created;
    char model[128];
    json_t *echo;                /* instructions, previous_response_id, tools, tool_choice, temperature,
                                    top_p, max_output_tokens, store, metadata, user, reasoning (owned) */
    json_t *history;             /* this turn's chat messages without instructions (owned) */
    int store;                   /* keep the turn (default true) */
} ms_sresp_req;
void ms_sresp_req_clear(ms_sresp_req *r); /* accepts a zeroed one */

/* A Responses body -> the chat body to answer: "instructions" as the first system message, the
 * stored turns of "previous_response_id", then "input" (a string: one user message; or items:
 * messages with string or input_text / output_text parts, function_call and
 * function_call_output items, reasoning items whose text goes with the next assistant turn),
 * "max_output_tokens" -> max_tokens, "temperature", "top_p", "stream", function "tools",
 * "tool_choice", "reasoning.effort" -> reasoning_effort, "text.format" text only. Fields of the
 * API with nothing to do here ("store", "metadata", "user", "parallel_tool_calls", "truncation":
 * "disabled", "include": [], "service_tier", "prompt_cache_key", "safety_identifier",
 * "background": false) are taken; anything else is refused naming it. Returns the chat body
 * (the caller owns it) and fills *r; or NULL with *status (400, or 404 for an unknown
 * previous_response_id), why[n] and *param set. */
json_t *ms_sresp_to_chat(const char *body, size_t len, ms_sresp_store *st, const char *default_model, ms_sresp_req *r,
                         int *status, char *why, size_t n, const char **param);

/* The whole answer: a response object ("status" completed, or incomplete with
 * incomplete_details max_output_tokens; output: a reasoning item, a message item with one
 * output_text part, a function_call item; usage). malloc'ed, *len bytes. */
char *ms_sresp_response(const ms_sresp_req *r, const ms_chat_answer *a, const char *finish, size_t input_tokens,
                        size_t output_tokens, size_t *len);

/* Keep the turn (when r->store): r->history and the answer as an assistant message whose call
 * has r->call_id. */
void ms_sresp_store_put(ms_sresp_store *st, const ms_sresp_req *r, const ms_chat_answer *a);

/* A streamed answer's events ("event: T\ndata: {...}\n\n" with sequence numbers), as OpenAI sends
 * them: response.created, response.in_progress; per output item output_item.added,
 * content_part.added, the deltas (reasoning_text / output_text / function_call_arguments), their
 * .done events, output_item.done; response.completed (or response.incomplete). */
typedef struct {
    int seq;                     /* the next sequence_number */
    int open;                    /* 0 none, 1 the message, 2 the reasoning */
    int index;                   /* the open item's output_index (-1 before the first) */
    int rs_index, msg_index;     /* where each item went (-1: none) */
    ms_sbuf content, reasoning;  /* sent so far */
} ms_sresp_stream;
char *ms_sresp_stream_start(ms_sresp_stream *s, const ms_sresp_req *r, size_t *len);
char *ms_sresp_stream_text(ms_sresp_stream *s, const ms_sresp_req *r, const char *reasoning, size_t rlen,
                           const char *content, size_t clen, size_t *len); /* NULL when nothing to send */
char *ms_sresp_stream_end(ms_sresp_stream *s, const ms_sresp_req *r, const ms_chat_answer *a, const char *finish,
                          size_t input_tokens, size_t output_tokens, size_t *len);
/* A failure after the status line: response.failed with the error. */
char *ms_sresp_stream_error(ms_sresp_stream *s, const ms_sresp_req *r, const char *message, size_t *len);
void ms_sresp_stream_clear(ms_sresp_stream *s);

#endif
