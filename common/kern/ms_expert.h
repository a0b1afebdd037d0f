/* ms_expert: the routed-expert interface (compute these experts for these rows of this layer). */
#ifndef MS_EXPERT_H
#define MS_EXPERT_H

#include <stdint.h>

#include "ms_kern.h"
#include "ms_pool.h"

/* Weights of one routed expert (spec §3.8): w1 (gate), w3 (up): [I, L]; w2 (down): [L, I].
 * MXFP4 in released checkpoints, F32 in the fp32 oracle. Borrowed views. */
typedef struct {
    ms_mat w1, w2, w3;
} ms_expert_w;

/* The one narrow interface between the trunk and routed experts; an in-process table, and
 * later a remote worker, implement it.
 * compute(ctx, layer, n_rows, z, k, ids, out):
 *   z:   float[n_rows][L]   latent activations of the rows
 *   ids: int32[n_rows][k]   experts chosen per row, in canonical (selection) order
 *   out: float[n_rows][k][L] expert e_{r,j}(z_r) for each row r and rank j
 * Each output must be bit-identical whatever the grouping of rows (one canonical dot order).
 * Returns 0, or -1 with ms_err set naming the layer/expert that failed; never partial output
 * reported as success. */
typedef struct {
    int (*compute)(void *ctx, int layer, int64_t n_rows, const float *z, int k, const int32_t *ids, float *out);
    void *ctx;
} ms_experts;

/* In-process expert table: one ms_expert_w per (layer, expert). */
typedef struct ms_expert_table ms_expert_table;

/* A table for n_layers x n_experts experts with SiTU constants b1, b2 and latent width L.
 * Entries start empty (w1.data == NULL). pool may be NULL; it is borrowed. */
ms_expert_table *ms_expert_table_new(int n_layers, int n_experts, int latent, float b1, float b2, ms_pool *pool);
void ms_expert_table_free(ms_expert_table *t); /* accepts NULL */
/* Set the weights of (layer, expert). */
void ms_expert_table_set(ms_expert_table *t, int layer, int expert, const ms_expert_w *w);
/* The ms_experts interface served by this table. */
ms_experts ms_expert_table_iface(ms_expert_table *t);

#endif
