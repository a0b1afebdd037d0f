/* ms_tok: the Kimi tiktoken tokenizer: byte-pair ranks, special tokens and the Kimi pre-tokenizer. */
#ifndef MS_TOK_H
#define MS_TOK_H

#include <stddef.h>
#include <stdint.h>

typedef struct ms_tok ms_tok;

/* 1 if dir holds tiktoken.model (the tokenizer is then required to load). */
int ms_tok_present(const char *dir);

/* Load DIR/tiktoken.model (one "base64 rank" per line) and the special tokens of
 * DIR/tokenizer_config.json (added_tokens_decoder: id string -> {"content", ...}); the split
 * pattern is the Kimi pre-tokenizer, built in. Returns NULL with ms_err set (class
 * MS_EXIT_INPUT) naming the file and line on failure. */
ms_tok *ms_tok_load(const char *dir);
void ms_tok_free(ms_tok *t); /* accepts NULL */

/* Encode len bytes of UTF-8 text. With allow_special = 0 special-token strings are plain text.
 * On success *ids is a malloc'ed array the caller frees and *n its length; returns 0.
 * Returns -1 with ms_err set on invalid UTF-8 or an internal regex failure. */
int ms_tok_encode(const ms_tok *t, const char *text, size_t len, int allow_special, int32_t **ids, size_t *n);

/* Decode ids into bytes (rank tokens give their raw bytes, special ids their content string).
 * *text is malloc'ed and NUL-terminated, *len excludes the NUL. Returns -1 with ms_err set if
 * an id is out of range. */
int ms_tok_decode(const ms_tok *t, const int32_t *ids, size_t n, char **text, size_t *len);
/* The same with skip_special = 1 leaving special ids out (the text a reader is shown). */
int ms_tok_decode_text(const ms_tok *t, const int32_t *ids, size_t n, int skip_special, char **text, size_t *len);

/* Number of ids (ranks + specials; one more than the largest id). */
int ms_tok_n_vocab(const ms_tok *t);
/* Id of a special token by content, or -1. */
int ms_tok_special_id(const ms_tok *t, const char *content);
/* 1 if id is one of the special tokens (or any id above the ranks), else 0. */
int ms_tok_is_special(const ms_tok *t, int32_t id);

/* Write a small deterministic tiktoken tokenizer to DIR (tiktoken.model with all 256 single
 * bytes plus byte-pair merges learnt from a built-in English sample, up to n_ranks ranks in
 * total, and tokenizer_config.json with MS_TOK_SYNTH_SPECIALS specials after them, in this
 * order: "[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>",
 * "<|start_header_id|>", "<|end_header_id|>", "[EOT]", "<|im_system|>", "<|im_middle|>" (the
 * workspace's surrogate of the Kimi tokenizer). n_ranks >= 256 + 16. Total ids = n_ranks +
 * MS_TOK_SYNTH_SPECIALS. Returns 0 or -1 with ms_err set. */
#define MS_TOK_SYNTH_SPECIALS 10
int ms_tok_write_synth(const char *dir, int n_ranks);
/* The same; with_tools: MS_TOK_SYNTH_TOOL_SPECIALS more specials after those, Kimi's tool-call
 * markers "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
 * "<|tool_call_argument_begin|>", "<|tool_call_end|>" (Kimi K2's tokenizer has them). */
#define MS_TOK_SYNTH_TOOL_SPECIALS 5
int ms_tok_write_synth_kimi(const char *dir, int n_ranks, int with_tools);
/* The same vocabulary as dir/tokenizer.json (Hugging Face byte-level BPE: every split of a token
 * into two tokens as a merge, in rank order; the Split pre-tokenizer `pattern`; the n_specials
 * specials as added tokens from id n_ranks on: "special" true for those spelt "<|...", false for
 * others such as Qwen's "<think>", matched whole all the same), for families that ship that format. */
int ms_tok_write_synth_hf(const char *dir, int n_ranks, const char *pattern, const char *const *specials,
                          int n_specials);

#endif
