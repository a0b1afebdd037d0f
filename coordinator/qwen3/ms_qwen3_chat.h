/* ms_qwen3_chat: Qwen3's ChatML chat format with thinking and tool calls, rendered as its released chat_template.jinja renders it. */
#ifndef MS_QWEN3_CHAT_H
#define MS_QWEN3_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "ms_family.h"

/* The prompt of a chat as the Qwen3-30B-A3B / 235B-A22B template renders it (spec §6): with
 * tools, a system turn holding the first system message's content, the tools as JSON lines in
 * <tools></tools> and the call instructions; each user (and later system) message as
 * <|im_start|>ROLE\nCONTENT<|im_end|>\n; assistant turns before the last user query without
 * their reasoning, after it with <think>\nREASONING\n</think>\n\n (the last turn always); a tool
 * call as <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>; consecutive tool
 * results as <tool_response> blocks in one user turn; then <|im_start|>assistant\n and, with
 * chat_template_kwargs.enable_thinking false, an empty <think>\n\n</think>\n\n. A "developer"
 * message is rendered as a system message (the template would drop it). -1 with ms_err set
 * (MS_EXIT_INPUT, naming the message) for an unknown role, more than one tool call in a
 * message, invalid UTF-8. render: the text (markers as their strings), malloc'ed. */
int ms_qwen3_chat_render(const ms_chat_msg *msgs, int n, const ms_chat_opts *o, char **text, size_t *len);
/* The format as the family registry holds it: stops at <|im_end|> and <|endoftext|>; an answer's
 * <think> block is its reasoning (leading newlines dropped) and the text after </think> (leading
 * newlines dropped) its content, up to the first <tool_call>, whose JSON {"name", "arguments"}
 * is the tool call (text that does not parse as one stays content). */
extern const ms_chatfmt ms_qwen3_chat;

#endif
