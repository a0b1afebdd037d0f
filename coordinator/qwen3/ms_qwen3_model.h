/* ms_qwen3_model: Qwen3-MoE (30B-A3B, 235B-A22B; BF16 and FP8) as a model family: open or bind a checkpoint into an ms_model (the family interface). */
#ifndef MS_QWEN3_MODEL_H
#define MS_QWEN3_MODEL_H

#include "ms_family.h"
#include "ms_model.h"
#include "ms_qwen3_cfg.h"

/* Open DIR as released on Hugging Face (config.json, model.safetensors or shards + index),
 * bind every tensor the config implies, checking presence, dtype and shape, plan the budget,
 * pin and stream as the runtime does. NULL with ms_err set (MS_EXIT_MODEL, MS_EXIT_IO,
 * MS_EXIT_BUDGET) on failure. Free with ms_model_free. */
ms_model *ms_qwen3_model_open(const char *dir, const ms_run_opts *o);
/* Bind from any weight source; cfg is copied; enc: the experts' encoding as the source stores
 * them (MS_XENC_BF16, MS_XENC_FP8, MS_XENC_FP8_BF16S). */
ms_model *ms_qwen3_model_bind(const ms_qwen3_cfg *cfg, const ms_tsrc *src, const ms_run_opts *o, int enc);
/* The parts of ms_model_info the config alone gives. */
void ms_qwen3_info_of_cfg(const ms_qwen3_cfg *c, ms_model_info *in);
/* Write a synthetic checkpoint of preset name (qwen3-moe-tiny, qwen3-30b-a3b, qwen3-235b-a22b,
 * each also "-fp8": the released config fields and layout, random weights, a tokenizer.json with
 * Qwen's added tokens) into dir; layers > 0 overrides the depth; sparse: headers only. 0, or -1
 * with ms_err set (MS_EXIT_USAGE for an unknown preset, MS_EXIT_IO). */
int ms_qwen3_synth(const char *dir, const char *name, int layers, int sparse, uint64_t seed);
/* The family as the registry lists it (ms_qwen3_family.c). */
extern const ms_family ms_qwen3_family;

#endif
