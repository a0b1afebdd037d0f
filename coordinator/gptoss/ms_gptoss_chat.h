/* ms_gptoss_chat: the harmony chat format of gpt-oss, rendered as its released chat_template.jinja renders it. */
#ifndef MS_GPTOSS_CHAT_H
#define MS_GPTOSS_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "ms_family.h"

/* The template's variables. NULL members take its defaults. */
typedef struct {
    const char *date;             /* "YYYY-MM-DD" (Current date:); NULL: today, UTC */
    const char *reasoning_effort; /* "low" | "medium" | "high"; NULL: "medium" */
    const char *model_identity;   /* NULL: "You are ChatGPT, a large language model trained by OpenAI." */
} ms_harmony_opts;

/* The prompt of a chat with the generation prompt (<|start|>assistant): a system message (identity,
 * knowledge cutoff, date, reasoning, channels); a first system or developer message as the
 * developer's "# Instructions"; user turns; earlier assistant turns as their final channel.
 * Roles: system or developer (first only), user, assistant; no tools yet (a tool role, a system
 * or developer message after the first, an assistant content with <|channel|>, an unknown
 * reasoning effort or invalid UTF-8: -1 with ms_err set, MS_EXIT_INPUT, naming the message).
 * render: the text (markers as their strings), malloc'ed in *text (*len bytes). */
int ms_gptoss_chat_render(const ms_chat_msg *msgs, int n, const ms_harmony_opts *o, char **text, size_t *len);
/* The same as ids: markers are the tokenizer's special ids, every other piece is encoded as
 * text (a marker written in a content stays text). */
int ms_gptoss_chat_encode_opts(const ms_tok *t, const ms_chat_msg *msgs, int n, const ms_harmony_opts *o,
                               int32_t **ids, size_t *n_ids);

/* The answer in generated ids: the last final-channel message as content, the analysis
 * messages as reasoning (NULL if none), without markers; generated text without any channel is
 * the content with its markers dropped. */
int ms_gptoss_chat_answer(const ms_tok *t, const int32_t *ids, size_t n, char **content, size_t *clen, char **reasoning,
                          size_t *rlen);

/* Streaming: where generated id goes (ms_chatfmt.route): text before any channel and of a
 * final message is content, of analysis messages reasoning, markers, channel names and other
 * channels nowhere. */
int ms_gptoss_chat_route(const ms_tok *t, ms_chat_stream *s, int32_t id);

/* The format as the family registry holds it (ms_chat_opts: date, reasoning effort). */
extern const ms_chatfmt ms_gptoss_chat;

#endif
