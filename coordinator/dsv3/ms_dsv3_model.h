/* ms_dsv3_model: DeepSeek-V3 / R1 / V3.1 and Kimi K2 as a model family: open or bind a checkpoint into an ms_model (the family interface). */
#ifndef MS_DSV3_MODEL_H
#define MS_DSV3_MODEL_H

#include "ms_dsv3_cfg.h"
#include "ms_family.h"
#include "ms_model.h"

/* Open DIR as released on Hugging Face (config.json, shards + index), bind every tensor of the
 * main model the config implies (FP8 with their scale grids, or BF16), checking presence, dtype
 * and shape, plan the budget, pin and stream as the runtime does. The MTP layer is bound as the
 * draft head only when o->draft_head asks (ms_seq_draft). NULL with ms_err set (MS_EXIT_MODEL, MS_EXIT_IO, MS_EXIT_BUDGET) on failure. */
ms_model *ms_dsv3_model_open(const char *dir, const ms_run_opts *o);
/* Bind from any weight source; cfg is copied; enc: the experts' encoding as the source stores
 * them (MS_XENC_FP8, MS_XENC_FP8_BF16S, MS_XENC_BF16). */
ms_model *ms_dsv3_model_bind(const ms_dsv3_cfg *cfg, const ms_tsrc *src, const ms_run_opts *o, int enc);
/* The parts of ms_model_info the config alone gives. */
void ms_dsv3_info_of_cfg(const ms_dsv3_cfg *c, ms_model_info *in);
/* Write a synthetic checkpoint of preset name (deepseek-v3-tiny, deepseek-v3-tiny-mtp, deepseek-v3, kimi-k2: the
 * released config fields and layout, FP8 weights with their scale grids, random values, a
 * tokenizer) into dir; layers > 0 overrides the depth; sparse: headers only. 0, or -1 with
 * ms_err set (MS_EXIT_USAGE for an unknown preset, MS_EXIT_IO). */
int ms_dsv3_synth(const char *dir, const char *name, int layers, int sparse, uint64_t seed);
/* DeepSeek-V3's own chat format (ms_dsv3_chat.c; Kimi K2 chats in Kimi's, ms_kimichat). */
extern const ms_chatfmt ms_dsv3_chat;
/* The text of the prompt it renders (markers as their text), for tests. *text malloc'ed; 0, or
 * -1 with ms_err set (MS_EXIT_INPUT) as encode's. */
int ms_dsv3_chat_render(const ms_chat_msg *msgs, int n, const ms_chat_opts *o, char **text, size_t *len);
/* The family as the registry lists it (ms_dsv3_family.c). */
extern const ms_family ms_dsv3_family;

#endif
