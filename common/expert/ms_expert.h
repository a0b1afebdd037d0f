/* ms_expert: the routed-expert interface (compute these experts for these rows of this layer). */
#ifndef MS_EXPERT_H
#define MS_EXPERT_H

#include <stdint.h>

#include "ms_kern.h"
#include "ms_pool.h"
#include "ms_xfmt.h"

/* Weights of one routed expert by role (ms_xrole): e.g. gate, up [I, L] and down [L, I], each
 * with its bias [rows] or NULL. MXFP4 in released checkpoints, F32 in the fp32 oracle. Borrowed
 * views. */
typedef struct {
    ms_mat w[MS_XROLE_N];
    const float *bias[MS_XROLE_N];
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
    /* Optional (NULL: nothing to start early). begin(ctx, layer, n_rows, k, ids) starts the work
     * of the compute call that follows with the same layer, n_rows, k and ids (the expert store
     * issues its first reads) and returns at once, so the caller can do other work meanwhile
     * (K3: the shared experts) while the disk reads. It reports nothing: compute checks and
     * reports everything as without it, and a begin whose compute never comes, or comes with
     * other ids, is undone by the next call. Outputs never depend on it. */
    void (*begin)(void *ctx, int layer, int64_t n_rows, int k, const int32_t *ids);
    /* Optional (NULL: no use for predictions). prefetch(ctx, layer, n_rows, k, ids) is told, before
     * the layer's router has run, the experts it is predicted to choose (its router applied to the
     * residual stream before the layer's attention), most likely first per row, and may start
     * reading them; it returns at once and reports nothing. The begin and compute that follow
     * use what was read of the experts they need and drop the rest. Outputs never depend on it. */
    void (*prefetch)(void *ctx, int layer, int64_t n_rows, int k, const int32_t *ids);
    /* Optional (NULL: not counted): routes[layer * routes_n + expert] += 1 for every row routed
     * to the expert (ms_moe_block_run counts; the model owns the array). */
    uint32_t *routes;
    int routes_n;
    /* Optional (NULL: compute only). compute_placed(ctx, layer, n_rows, z, k, ids, slot, out) is
     * compute with item i's output at out[slot[i]] instead of out[i] (slot: [n_rows * k], a
     * permutation). ms_moe_block_run places a span's items in their grouped order (experts by
     * first appearance, rows increasing), so each expert's outputs land together: a span's
     * outputs (4,096 rows x 16 experts x 3,584 floats: 940 MB for a K3 layer) can exceed the
     * memory that caches its scratch file, where writes scattered over all of it read back a
     * page for nearly every write. */
    int (*compute_placed)(void *ctx, int layer, int64_t n_rows, const float *z, int k, const int32_t *ids,
                          const int64_t *slot, float *out);
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
    int scratch;       /* the arrays are the calling thread's scratch pieces (ms_xgroup_build_scratch) */
} ms_xgroup;

/* Group n items whose experts are expert[0..n) (each in [0, n_experts)). Returns 0, or -1 with
 * ms_err set naming the first expert id out of range (g is then empty). */
int ms_xgroup_build(ms_xgroup *g, int64_t n, const uint32_t *expert, int n_experts);
/* The same in the calling thread's scratch (ms_scratch.h): for a group freed on the same thread
 * before any piece pushed after it is popped (the per-token expert calls). */
int ms_xgroup_build_scratch(ms_xgroup *g, int64_t n, const uint32_t *expert, int n_experts);
/* The same for items that arrive grouped already (each expert's items consecutive, as the
 * protocol requires of a compute request): no reordering (item = NULL: the identity). Returns 0, or -1 with
 * ms_err set naming the item whose expert appeared before in another run or is out of range. */
int ms_xgroup_runs(ms_xgroup *g, int64_t n, const uint32_t *expert, int n_experts);
void ms_xgroup_free(ms_xgroup *g); /* accepts a zeroed or freed group */
/* The t-th item in grouped order. */
static inline int64_t ms_xgroup_item(const ms_xgroup *g, int64_t t) { return g->item ? g->item[t] : t; }

/* One expert of format f on m rows: z [m][f->latent] -> out [m][f->latent]. part[i] holds the
 * bytes of f->part[i] (its shape, row-major). The matrices by role, then ms_expert_apply. */
void ms_expert_run(const ms_xfmt *f, const uint8_t *const *part, const float *z, int64_t m, float *out,
                   ms_pool *pool);
/* The weights by role of one expert whose parts (format f) are part[i]: views into the parts,
 * biases widened to F32 into widened[i] (malloc'ed, NULL for other parts; the caller frees them
 * after the last use of w). */
void ms_expert_w_of_parts(const ms_xfmt *f, const uint8_t *const *part, ms_expert_w *w, float **widened);
/* The one expert computation (the worker's, the store's and the in-process table's): the
 * activation act with its constants params (ms_xfmt.param) over the weights by role, z [m][L]
 * -> out [m][L], bit-identical whatever m is. SiTU-GLU: down . SiTU(gate z, up z). */
void ms_expert_apply(ms_xact act, const float *params, const ms_expert_w *w, const float *z, int64_t m, float *out,
                     ms_pool *pool);

/* Check that the outputs of one expert on m rows are finite (NaN or Inf would silently spoil
 * every later token): out [m][L], computed from z [m][L] (z may be NULL). Returns 0, or -1 with
 * ms_err set (class `code`) naming `who` (e.g. "worker tcp://..."; may be NULL), the layer, the
 * expert, and whether that row's input was already not finite. */
int ms_expert_check_finite(const char *who, int code, int layer, int expert, const float *z, const float *out,
                           int64_t m, int64_t L);

/* In-process expert table: one ms_expert_w per (layer, expert). */
typedef struct ms_expert_table ms_expert_table;

/* A table for n_layers x n_experts experts of latent width L computing activation act with its
 * constants params (copied; ms_xfmt_act_n_params of them). Entries start empty. pool may be
 * NULL; it is borrowed. */
ms_expert_table *ms_expert_table_new(int n_layers, int n_experts, int latent, ms_xact act, const float *params,
                                     ms_pool *pool);
void ms_expert_table_free(ms_expert_table *t); /* accepts NULL */
/* Set the weights of (layer, expert). */
void ms_expert_table_set(ms_expert_table *t, int layer, int expert, const ms_expert_w *w);
/* The ms_experts interface served by this table. */
ms_experts ms_expert_table_iface(ms_expert_table *t);

#endif
