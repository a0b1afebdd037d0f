/* ms_gptoss_chat: the harmony chat format of gpt-oss, rendered as its released chat_template.jinja renders it. */
#ifndef MS_GPTOSS_CHAT_H
#define MS_GPTOSS_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "ms_family.h"

/* The prompt of a chat as the template renders it (ms_chat_opts: date, reasoning effort, model
 * identity, OpenAI tools, built-in browser/python, the generation prompt): a system message
 * (identity, knowledge cutoff, date, reasoning, built-in tools, channels); a first system or
 * developer message as the developer's "# Instructions", with the functions of `tools`; user
 * turns; earlier assistant turns as their final channel (reasoning dropped); an assistant turn
 * with a tool call as <|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>
 * ARGS<|call|> (its thinking first, as analysis, unless a later turn answers); a tool message as
 * the JSON-quoted result from functions.NAME; then <|start|>assistant, or, with
 * no_generation_prompt, a last assistant turn's analysis and final ending in <|return|>.
 * -1 with ms_err set (MS_EXIT_INPUT, naming the message or tools[i]) on what the template cannot
 * render: a system or developer message after the first, a tool message with no call before
 * it, more than one call in a message, <|channel|> tags in an assistant turn, an unknown
 * reasoning effort, a tool it cannot write, invalid UTF-8.
 * render: the text (markers as their strings), malloc'ed in *text (*len bytes). */
int ms_gptoss_chat_render(const ms_chat_msg *msgs, int n, const ms_chat_opts *o, char **text, size_t *len);
/* The same as ids (ms_chatfmt.encode): markers are the tokenizer's special ids, every other
 * piece is encoded as text (a marker written in a content stays text). */
int ms_gptoss_chat_encode(const ms_tok *t, const ms_chat_msg *msgs, int n, const ms_chat_opts *o, int32_t **ids,
                          size_t *n_ids);

/* The answer in generated ids (ms_chatfmt.answer): the last final-channel message as content,
 * the analysis messages as reasoning (NULL if none), a message addressed to=functions.NAME (in
 * its role or channel header) as the tool call (its body the arguments), without markers;
 * generated text without any message is the content with its markers dropped. */
int ms_gptoss_chat_answer(const ms_tok *t, const int32_t *ids, size_t n, ms_chat_answer *a);

/* Streaming: where generated id goes (ms_chatfmt.route): text of a final message is content, of
 * analysis messages reasoning; markers, headers (text before the first channel included),
 * other channels and tool calls nowhere. */
int ms_gptoss_chat_route(const ms_tok *t, ms_chat_stream *s, int32_t id);

/* The format as the family registry holds it. */
extern const ms_chatfmt ms_gptoss_chat;

#endif
