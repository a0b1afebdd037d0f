/* ms_expert: the routed-expert interface (compute these experts for these rows of this layer). */
#ifndef MS_EXPERT_H
#define MS_EXPERT_H

#include <stdint.h>

#include "ms_kern.h"
#include "ms_pool.h"
#include "ms_xfmt.h"

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

/* Work items (row, expert) grouped by expert: the one grouping of the expert paths (the
 * in-process table, the expert store, the coordinator packing requests per worker). Each
 * expert's weights are then read and decoded once for all its rows; every output is still one
 * canonical computation per (row, expert), so grouping never changes a bit. */
typedef struct {
    int nd;            /* distinct experts */
    int32_t *dexp;     /* [nd] expert ids, in order of first appearance */
    int64_t *start;    /* [nd + 1] group d is item[start[d] .. start[d + 1]) */
    int64_t *item;     /* [n] item indices grouped by expert, increasing within a group; NULL
                        * for the identity (ms_xgroup_runs): use ms_xgroup_item */
    int64_t max_m;     /* items of the largest group */
} ms_xgroup;

/* Group n items whose experts are expert[0..n) (each in [0, n_experts)). Returns 0, or -1 with
 * ms_err set naming the first expert id out of range (g is then empty). */
int ms_xgroup_build(ms_xgroup *g, int64_t n, const uint32_t *expert, int n_experts);
/* The same for items that arrive grouped already (each expert's items consecutive, as the
 * protocol requires of a compute request): no reordering (item = NULL: the identity). Returns 0, or -1 with
 * ms_err set naming the item whose expert appeared before in another run or is out of range. */
int ms_xgroup_runs(ms_xgroup *g, int64_t n, const uint32_t *expert, int n_experts);
void ms_xgroup_free(ms_xgroup *g); /* accepts a zeroed or freed group */
/* The t-th item in grouped order. */
static inline int64_t ms_xgroup_item(const ms_xgroup *g, int64_t t) { return g->item ? g->item[t] : t; }

/* One expert of format f on m rows: z [m][f->latent] -> out [m][f->latent]. part[i] holds the
 * bytes of f->part[i] (its shape, row-major). The format's activation decides the math
 * (SiTU-GLU: w2 . SiTU(w1 z, w3 z)), bit-identical to the in-process table's for the same
 * weights whatever m is. */
void ms_expert_run(const ms_xfmt *f, const uint8_t *const *part, const float *z, int64_t m, float *out,
                   ms_pool *pool);

/* Check that the outputs of one expert on m rows are finite (NaN or Inf would silently spoil
 * every later token): out [m][L], computed from z [m][L] (z may be NULL). Returns 0, or -1 with
 * ms_err set (class `code`) naming `who` (e.g. "worker tcp://..."; may be NULL), the layer, the
 * expert, and whether that row's input was already not finite. */
int ms_expert_check_finite(const char *who, int code, int layer, int expert, const float *z, const float *out,
                           int64_t m, int64_t L);

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
