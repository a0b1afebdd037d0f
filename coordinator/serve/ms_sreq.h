/* ms_sreq: the JSON of serve's completion endpoints: request bodies -> checked job specs (the
 * checks of `jobs` lines plus the HTTP-only fields), completion objects, SSE chunks, errors. */
#ifndef MS_SREQ_H
#define MS_SREQ_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "ms_jobfile.h"

/* One parsed request. Owns its members. */
typedef struct {
    ms_jobspec spec;             /* prompt ids, sampling, stops (as a jobs line's body) */
    ms_jobspec *more;            /* [n_more] a completion's further prompts ("prompt": [p0, p1, ...]):
                                    each a spec of its own, choices indexed after the ones before */
    int n_more;
    int chat;                    /* /v1/chat/completions */
    int stream, include_usage;   /* "stream": true; "stream_options": {"include_usage": true} */
    /* A refused body: the HTTP status (400) and the OpenAI-style error code and message. */
    int status;
    const char *code;            /* static */
    char *message;
    const char *param;           /* the field at fault (static, or param_own), or NULL */
    char param_own[64];          /* an unknown field's name, as sent (truncated) */
} ms_sreq;

/* Parse a body of len bytes for the completions (chat = 0) or chat endpoint. Fields outside the
 * supported set, n other than 1, mistyped fields, bad prompts and limits are refused. Returns 0,
 * or -1 with status, code and message set. */
int ms_sreq_parse(const char *body, size_t len, int chat, const ms_jobfile_limits *lim, ms_sreq *r);
void ms_sreq_clear(ms_sreq *r); /* accepts a zeroed request */

/* {"error": {"message", "type", "param", "code"}} (malloc'ed, *len bytes). type is
 * "invalid_request_error" for 4xx statuses, else "server_error"; param is the request field at
 * fault, or null when param is NULL. */
char *ms_sreq_error_json(int status, const char *code, const char *message, const char *param, size_t *len);

/* GET /v1/models (id NULL: the list of the one model) or /v1/models/{id} (the model object, or
 * 404 model_not_found with *status set): each object has id, object, created, owned_by and the
 * context length (context_length, and vLLM's max_model_len). malloc'ed, *len bytes. */
char *ms_sreq_models_json(const char *model, int64_t max_context, const char *id, int *status, size_t *len);

/* The identity of one answer: its id ("cmpl-..." or "chatcmpl-..."), model name, creation time. */
typedef struct {
    char id[64];
    const char *model;
    int64_t created;
} ms_sreq_ident;
void ms_sreq_ident_new(const ms_sreq *r, const char *default_model, ms_sreq_ident *id);

/* The non-streamed answer: a text_completion or chat.completion object with choices[0] (text or
 * message, logprobs (taken; NULL: null), finish_reason, token_ids) and usage. text may hold any bytes (invalid UTF-8 becomes
 * U+FFFD). malloc'ed, *len bytes. */
char *ms_sreq_completion(const ms_sreq *r, const ms_sreq_ident *id, const int32_t *tok, size_t n_tok, const char *text,
                         size_t text_len, const char *finish, size_t prompt_tokens, json_t *logprobs, size_t *len);
/* One choice object (index, text or message, logprobs (taken; NULL: null), finish_reason,
 * token_ids) of an answer, and the answer of several (choices taken; usage: the prompt once,
 * completion_tokens over every choice). */
json_t *ms_sreq_choice(const ms_sreq *r, int index, const int32_t *tok, size_t n_tok, const ms_chat_answer *a,
                       const char *finish, json_t *logprobs);
char *ms_sreq_completion_choices(const ms_sreq *r, const ms_sreq_ident *id, json_t *choices, size_t prompt_tokens,
                                 size_t completion_tokens, size_t *len);
/* The same for a chat whose format separated the answer: its message as ms_jobfile_message_json
 * makes it (content, reasoning_content, tool_calls), finish_reason by ms_jobfile_finish. */
char *ms_sreq_chat_completion(const ms_sreq *r, const ms_sreq_ident *id, const int32_t *tok, size_t n_tok,
                              const ms_chat_answer *a, const char *finish, size_t prompt_tokens, json_t *logprobs,
                              size_t *len);
/* One SSE event "data: {chunk}\n\n" with choice index's new tokens and text (finish NULL while
 * running; first: the chat delta carries the role). usage: the last event of include_usage (empty
 * choices, usage set; tok/text ignored). malloc'ed, *len bytes. */
/* A chat chunk whose delta carries reasoning text (harmony's analysis) as "reasoning_content"
 * beside its content (either may be empty). */
char *ms_sreq_chat_chunk(const ms_sreq *r, const ms_sreq_ident *id, int index, const int32_t *tok, size_t n_tok,
                         const char *text, size_t text_len, const char *reasoning, size_t rlen, const char *finish,
                         int first, json_t *logprobs, size_t *len);
char *ms_sreq_chunk(const ms_sreq *r, const ms_sreq_ident *id, int index, const int32_t *tok, size_t n_tok,
                    const char *text, size_t text_len, const char *finish, int first, json_t *logprobs, size_t *len);
/* The last events of a streamed answer that ends with a tool call, as OpenAI sends them: a
 * delta with the call's id, type, name and empty arguments, one with the arguments, then one
 * with finish_reason "tool_calls" alone (three SSE events in one string). */
char *ms_sreq_tool_chunk(const ms_sreq *r, const ms_sreq_ident *id, int index, const ms_chat_answer *a, int first,
                         size_t *len);
char *ms_sreq_usage_chunk(const ms_sreq *r, const ms_sreq_ident *id, size_t prompt_tokens, size_t completion_tokens,
                          size_t *len);

/* Bytes of text[len] that can be turned into JSON now without changing the result of turning
 * the whole text into JSON later: everything but a UTF-8 character that the next bytes may
 * complete. */
size_t ms_sreq_utf8_ready(const char *text, size_t len);

#endif
