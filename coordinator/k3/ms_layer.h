/* ms_layer: one Kimi K3 decoder layer with AttnRes wiring (spec §3.11). */
#ifndef MS_LAYER_H
#define MS_LAYER_H

#include "ms_k3_cfg.h"
#include "ms_expert.h"
#include "ms_kda.h"
#include "ms_mla.h"
#include "ms_model.h"
#include "ms_moe.h"

/* Borrowed weights of one layer (fold vectors are owned by whoever built the struct). */
typedef struct {
    int is_mla, is_dense;
    const float *in_norm, *post_norm;   /* [E] input_layernorm, post_attention_layernorm */
    const float *sa_fold, *mlp_fold;    /* [E] res_norm * res_proj, precomputed */
    const float *sa_norm, *sa_proj;     /* [E] self_attention_res_norm / _proj as bound */
    const float *mlp_norm, *mlp_proj;   /* [E] mlp_res_norm / _proj as bound */
    ms_kda_w kda;                       /* when !is_mla */
    ms_mla_w mla;                       /* when is_mla */
    ms_mat dgate, dup, ddown;           /* dense MLP when is_dense: [Id,E], [Id,E], [E,Id] */
    ms_moe_w moe;                       /* when !is_dense */
} ms_layer_w;

/* Per-sequence state of one layer. */
typedef struct {
    ms_kda_state kda;
    ms_mla_cache mla;
} ms_layer_state;

/* Number of AttnRes snapshots that exist after layer `layer` has run (every boundary
 * 0, B, 2B, ... <= layer pushes one). */
int ms_layer_snaps_after(const ms_k3_cfg *c, int layer);

/* K3's MLA as the shared block takes it: gated (mla_out_gate), no rotary, scores / sqrt(dq). */
ms_mla_cfg ms_k3_mla_cfg(const ms_k3_cfg *c);

/* Run layer `layer` on T consecutive tokens of one sequence.
 * h:     float[T][E]            in: previous layer output (the embedding for layer 0);
 *                               out: this layer's output prefix sum
 * snaps: float[T][smax][E]      per-token snapshots; the first *n_snap are valid on entry (0 for
 *                               layer 0, else ms_layer_snaps_after(layer-1) in a whole model);
 *                               a boundary layer appends one and increments *n_snap
 * smax:  capacity of snaps per token
 * ids_out: int32[T][k] routed experts chosen (MoE layers), may be NULL.
 * Returns 0, or -1 with ms_err set if the routed experts failed. */
int ms_layer_forward(const ms_k3_cfg *c, int layer, const ms_layer_w *w, ms_layer_state *st, const ms_experts *ex,
                     float *h, float *snaps, int smax, int *n_snap, int64_t T, int32_t *ids_out, ms_pool *pool);

/* The same layer for a batched pass of R rows made of n_seg sequences: segment s is rows
 * seg[s] and continues the state st[s] (see ms_rows.h). h, snaps and ids_out are as above with
 * R rows. Every matmul of the layer runs once over all R rows and the routed experts are asked
 * once for all rows; each row's result is bit-identical to running its sequence alone. Scratch
 * comes from ar (see ms_layer_work_floats). */
int ms_layer_forward_batch(const ms_k3_cfg *c, int layer, const ms_layer_w *w, ms_layer_state *const *st,
                           const ms_rows *seg, int n_seg, const ms_experts *ex, float *h, float *snaps, int smax,
                           int *n_snap, int64_t R, int32_t *ids_out, ms_arena *ar, ms_pool *pool);
/* Scratch floats ms_layer_forward_batch takes from its arena for R rows, for the widest layer
 * of the model (returned on exit). */
size_t ms_layer_work_floats(const ms_k3_cfg *c, int64_t R);

#endif
