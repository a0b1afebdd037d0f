/* ms_gptoss_model: OpenAI gpt-oss (120b, 20b) as a model family: open or bind a checkpoint into an ms_model (the family interface). */
#ifndef MS_GPTOSS_MODEL_H
#define MS_GPTOSS_MODEL_H

#include "ms_family.h"
#include "ms_gptoss_cfg.h"
#include "ms_model.h"

/* Open DIR as released on Hugging Face (config.json, model.safetensors or shards + index),
 * bind every tensor the config implies, checking presence, dtype and shape, plan the budget,
 * pin and stream as the runtime does. NULL with ms_err set (MS_EXIT_MODEL, MS_EXIT_IO,
 * MS_EXIT_BUDGET) on failure. Free with ms_model_free. */
ms_model *ms_gptoss_model_open(const char *dir, const ms_run_opts *o);
/* Bind from any weight source; cfg is copied; bias_dtype is the experts' bias dtype (F32 or
 * BF16) as the source stores it. */
ms_model *ms_gptoss_model_bind(const ms_gptoss_cfg *cfg, const ms_tsrc *src, const ms_run_opts *o, int bias_dtype);
/* The config of a gpt-oss model (asserts that m is one). */
const ms_gptoss_cfg *ms_gptoss_model_cfg(const ms_model *m);
/* The parts of ms_model_info the config alone gives. */
void ms_gptoss_info_of_cfg(const ms_gptoss_cfg *c, ms_model_info *in);

/* Write a synthetic checkpoint of preset name (gpt-oss-tiny, gpt-oss-20b, gpt-oss-120b: the
 * released config fields and layout, random weights, a tokenizer.json with the harmony
 * specials) into dir; layers > 0 overrides the depth; sparse: headers only. 0, or -1 with
 * ms_err set (MS_EXIT_USAGE for an unknown preset, MS_EXIT_IO). */
int ms_gptoss_synth(const char *dir, const char *name, int layers, int sparse, uint64_t seed);

/* The family as the registry lists it (ms_gptoss_family.c). */
extern const ms_family ms_gptoss_family;

#endif
