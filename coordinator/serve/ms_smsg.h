/* ms_smsg: the Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens): its request
 * bodies as the chat requests serve answers, and answers as message objects and typed events. */
#ifndef MS_SMSG_H
#define MS_SMSG_H

#include <jansson.h>
#include <stddef.h>

#include "ms_family.h"

/* An Anthropic Messages body -> the equivalent /v1/chat/completions body: "system" (a string or
 * text blocks) as the first system message; "messages" with string or block contents: text
 * blocks joined, an assistant's "thinking" block as its reasoning_content, "tool_use" blocks as
 * tool_calls (input as the arguments' JSON text), a user's "tool_result" blocks as tool
 * messages (tool_call_id, the function's name from the call it answers, content as text) before
 * the user's text; "max_tokens" (required unless count_only), "stop_sequences" -> "stop",
 * "temperature", "top_p", "top_k", "stream", "tools" ({name, description, input_schema} ->
 * functions), "tool_choice" ({"type": "auto" | "any" | "tool" | "none"} -> "auto" | "required" |
 * a named function | "none", which the chat request then takes or refuses), "metadata" (ignored:
 * nothing is stored). Anything else (images, documents, "thinking", unknown fields and block
 * types) is refused, naming it. count_only: /v1/messages/count_tokens (no max_tokens). Returns
 * the new body (the caller owns it), or NULL with why[n] and *param (the field at fault) set. */
json_t *ms_smsg_to_chat(const char *body, size_t len, int count_only, char *why, size_t n, const char **param);

/* {"type": "error", "error": {"type", "message"}}, the type by status (400
 * invalid_request_error, 401 authentication_error, 404 not_found_error, 405 invalid_request_error,
 * 413 request_too_large, 429 rate_limit_error, 503 overloaded_error, else api_error), newline
 * ended. malloc'ed, *len bytes. */
char *ms_smsg_error_json(int status, const char *message, size_t *len);

/* A new message id "msg_..." into id[64]. */
void ms_smsg_id_new(char id[64]);

/* stop_reason of an answer: "tool_use" (it ends with a call), "stop_sequence" (stop_seq not
 * NULL), "end_turn" (finish "stop"), "max_tokens" (finish "length"). */
const char *ms_smsg_stop_reason(const ms_chat_answer *a, const char *finish, const char *stop_seq);

/* The whole answer: {"id", "type": "message", "role": "assistant", "model", "content": [a thinking
 * block (the reasoning), a text block (the content, when there is text or nothing else), a
 * tool_use block (the call: its input the arguments parsed, when they are a JSON object; else
 * the call stays text in the content)], "stop_reason", "stop_sequence", "usage": {"input_tokens",
 * "output_tokens"}}. malloc'ed, *len bytes. */
char *ms_smsg_message(const char *id, const char *model, const ms_chat_answer *a, const char *finish, const char *stop_seq,
                      size_t input_tokens, size_t output_tokens, size_t *len);

/* A streamed answer's events ("event: TYPE\ndata: {...}\n\n"), in the order Anthropic sends
 * them: message_start and a ping; content_block_start / _delta / _stop per block (thinking
 * text, then text, then a tool_use whose input comes as one input_json_delta); message_delta
 * (stop_reason, output_tokens) and message_stop. The state of one answer: */
typedef struct {
    int index;                   /* the open block's index (-1 before the first) */
    int open;                    /* 0 none, 1 text, 2 thinking */
    size_t content_sent;         /* content bytes sent */
} ms_smsg_stream;
/* message_start (usage: the prompt's tokens) and a ping; *s reset. */
char *ms_smsg_stream_start(ms_smsg_stream *s, const char *id, const char *model, size_t input_tokens, size_t *len);
/* New reasoning and content text (either may be empty; UTF-8 whole): deltas, opening and closing
 * blocks as the kind of text changes. NULL (*len 0) when there is nothing to send. */
char *ms_smsg_stream_text(ms_smsg_stream *s, const char *reasoning, size_t rlen, const char *content, size_t clen,
                          size_t *len);
/* The end: the open block closed, the answer's content when none was streamed (a format that
 * found no message), its tool call as a tool_use block, message_delta and message_stop. */
char *ms_smsg_stream_end(ms_smsg_stream *s, const ms_chat_answer *a, const char *finish, const char *stop_seq,
                         size_t output_tokens, size_t *len);
/* An error after the status line went out: "event: error" with ms_smsg_error_json's object. */
char *ms_smsg_stream_error(int status, const char *message, size_t *len);

#endif
