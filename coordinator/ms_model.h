/* ms_model: a bound Kimi K3 model (trunk + routed experts) and its per-sequence forward pass. */
#ifndef MS_MODEL_H
#define MS_MODEL_H

#include <stdint.h>

#include "ms_cfg.h"
#include "ms_expert.h"
#include "ms_layer.h"
#include "ms_pool.h"
#include "ms_st.h"

/* A tensor as a weight source presents it: borrowed data, valid while the source lives. */
typedef struct {
    ms_dtype dtype;
    int ndim;
    int64_t shape[MS_ST_MAX_DIMS];
    const void *data;
    const char *file; /* where it lives, for messages */
} ms_tview;

/* Where weights come from, by released tensor name (spec §4.3). find returns 1 and fills *out
 * if the tensor exists, else 0. */
typedef struct {
    int (*find)(void *ctx, const char *name, ms_tview *out);
    void *ctx;
    const char *what; /* e.g. the checkpoint directory, for messages */
} ms_tsrc;

typedef struct ms_model ms_model;

/* Open DIR (config.json + safetensors, single or sharded) and bind every tensor the config
 * implies, checking presence, dtype and shape; the first problems are reported by tensor and
 * file name. n_threads <= 0: one per CPU. Returns NULL with ms_err set (class MS_EXIT_MODEL or
 * MS_EXIT_IO) on failure. */
ms_model *ms_model_load(const char *dir, int n_threads);

/* Bind from any weight source. cfg is copied (deep); src must outlive the model. */
ms_model *ms_model_bind(const ms_cfg *cfg, const ms_tsrc *src, int n_threads);

void ms_model_free(ms_model *m); /* accepts NULL */

const ms_cfg *ms_model_cfg(const ms_model *m);
ms_pool *ms_model_pool(ms_model *m);
/* Replace the routed-expert provider (default: the in-process table bound at load). */
void ms_model_set_experts(ms_model *m, ms_experts ex);
ms_experts ms_model_local_experts(ms_model *m);

/* Per-sequence state: KDA states, MLA caches, position. */
typedef struct ms_seq ms_seq;
ms_seq *ms_seq_new(const ms_model *m);
void ms_seq_free(ms_seq *s); /* accepts NULL */
int64_t ms_seq_pos(const ms_seq *s);

/* Optional observer of routing: called once per MoE layer and call with ids[T][k]. */
typedef void (*ms_route_fn)(void *ctx, int layer, int64_t T, int k, const int32_t *ids);
void ms_model_set_route_observer(ms_model *m, ms_route_fn fn, void *ctx);

/* Run T tokens through the model, continuing the sequence (incremental: the state carries the
 * prefix, nothing is recomputed). logits: float[T][V] for every row if all_rows, else
 * float[V] for the last row only. Returns 0, or -1 with ms_err set (an id out of range, expert
 * failure); the sequence must then be discarded. */
int ms_model_forward(ms_model *m, ms_seq *s, const int32_t *ids, int64_t T, int all_rows, float *logits);

#endif
