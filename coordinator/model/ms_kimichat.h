/* ms_kimichat: Kimi's chat format, shared by Kimi K3 and Kimi K2 (the DeepSeek-V3 family): a list of messages -> prompt token ids with the tokenizer's special tokens. */
#ifndef MS_KIMICHAT_H
#define MS_KIMICHAT_H

#include <stddef.h>
#include <stdint.h>

#include "ms_family.h"

/* The prompt of a chat (Kimi's format, as in the Kimi K2 chat template): each message as
 *     <|im_system|>system<|im_middle|>CONTENT<|im_end|>        (role "system")
 *     <|im_user|>user<|im_middle|>CONTENT<|im_end|>            (role "user")
 *     <|im_assistant|>assistant<|im_middle|>CONTENT<|im_end|>  (role "assistant")
 * back to back (no newlines between), then the generation prompt
 *     <|im_assistant|>assistant<|im_middle|>
 * The <|...|> markers are the tokenizer's special ids (looked up by content in its
 * tokenizer_config.json, never hard-coded); role names and contents are encoded as plain text, so
 * a marker written inside a content is text, never a control token. No default system message
 * is added. The same ids as ms_tok_encode of that string with allow_special = 1 when no content
 * holds a marker. Through ms_kimichat.encode also Kimi K2's tool turns: the request's tools first
 * (<|im_system|>tool_declare<|im_middle|>TOOLS<|im_end|>, compact tojson), an assistant's call
 * after its content (<|tool_calls_section_begin|><|tool_call_begin|>ID<|tool_call_argument_begin|>
 * ARGS<|tool_call_end|><|tool_calls_section_end|>), a tool result as
 * <|im_system|>NAME<|im_middle|>## Return of ID\nCONTENT<|im_end|>; a message's "name" is the role
 * name written.
 * On success *ids is malloc'ed (*n ids) and 0 is returned; -1 with ms_err set (MS_EXIT_INPUT)
 * on no messages, an unknown role (naming the message's index), invalid UTF-8, or a tokenizer
 * without the markers. */
int ms_kimichat_encode(const ms_tok *t, const ms_chat_msg *msgs, int n, int32_t **ids, size_t *n_ids);

/* Id of <|im_end|> (the end of an assistant turn: generation stops there), or -1. */
int32_t ms_kimichat_end_id(const ms_tok *t);

/* The format as the family registry holds it. */
extern const ms_chatfmt ms_kimichat;

#endif
