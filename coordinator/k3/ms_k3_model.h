/* ms_k3_model: Kimi K3 as a model family: open or bind a checkpoint into an ms_model (the family interface). */
#ifndef MS_K3_MODEL_H
#define MS_K3_MODEL_H

#include "ms_family.h"
#include "ms_k3_cfg.h"
#include "ms_model.h"

/* Open DIR (config.json + safetensors, single or sharded), bind every tensor the config
 * implies, checking presence, dtype and shape (the first problems are reported by tensor and
 * file name), plan the memory budget, read the pinned trunk and set up streaming and the
 * expert store. o may be NULL (defaults). Returns NULL with ms_err set (class MS_EXIT_MODEL,
 * MS_EXIT_IO or MS_EXIT_BUDGET) on failure. Free with ms_model_free. */
ms_model *ms_k3_model_open(const char *dir, const ms_run_opts *o);

/* Bind from any weight source. cfg is copied (deep); src must outlive the model. With file
 * locations in src (paths set), the model streams as planned; otherwise every tensor is used
 * in place from memory. */
ms_model *ms_k3_model_bind(const ms_k3_cfg *cfg, const ms_tsrc *src, const ms_run_opts *o);

/* The config of a K3 model (asserts that m is one). */
const ms_k3_cfg *ms_k3_model_cfg(const ms_model *m);

/* The parts of ms_model_info the config alone gives (family, vocabulary, widths, layers,
 * experts, special ids); the rest is left as it was. */
void ms_k3_info_of_cfg(const ms_k3_cfg *c, ms_model_info *in);

/* Scratch floats of one pass of R rows asking for out_rows logits rows: the model's buffers
 * and the widest layer's (ms_layer_work_floats). The one size the arena and the planner use. */
size_t ms_k3_work_floats(const ms_k3_cfg *c, int64_t R, int64_t out_rows);

/* The family as the registry (coordinator/families/) lists it (ms_k3_family.c). */
extern const ms_family ms_k3_family;

#endif
