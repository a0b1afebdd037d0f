/* ms_moe: the Stable LatentMoE block (router, latent down/up projections, shared experts). */
#ifndef MS_MOE_H
#define MS_MOE_H

#include "ms_k3_cfg.h"
#include "ms_expert.h"
#include "ms_kern.h"
#include "ms_arena.h"
#include "ms_pool.h"
#include "ms_moe_block.h"

/* Borrowed trunk weights of one MoE layer (routed experts live behind ms_experts). */
typedef struct {
    ms_mat gate;          /* [Ne, E] router */
    const float *bias;    /* [Ne] e_score_correction_bias */
    ms_mat down;          /* [L, E] routed_expert_down_proj */
    ms_mat up;            /* [E, L] routed_expert_up_proj */
    const float *norm;    /* [L] routed_expert_norm */
    ms_mat sg, su;        /* [Ns*I, E] shared gate / up */
    ms_mat sd;            /* [E, Ns*I] shared down */
} ms_moe_w;

/* The layer's gate as the shared MoE block takes it: sigmoid scores with the correction bias,
 * optionally renormalised, times routed_scaling_factor (spec §3.7). Borrows w. */
ms_moe_gate ms_moe_gate_of(const ms_k3_cfg *c, const ms_moe_w *w);

/* LatentMoE (spec §3.8) for T rows: x: float[T][E] (post_attention_layernorm output),
 * y: float[T][E]. Routed experts are computed by one call to ex->compute for all T rows.
 * ids_out (int32[T][k]) receives the chosen experts when non-NULL. Returns 0, or -1 with
 * ms_err set when the experts failed (y is then undefined). */
int ms_moe_forward(const ms_k3_cfg *c, int layer, const ms_moe_w *w, const ms_experts *ex, const float *x, int64_t T,
                   float *y, int32_t *ids_out, ms_pool *pool);
/* The same with the caller's scratch arena (ms_moe_work_floats(c, T) floats, returned on exit). */
int ms_moe_forward_ws(const ms_k3_cfg *c, int layer, const ms_moe_w *w, const ms_experts *ex, const float *x, int64_t T,
                      float *y, int32_t *ids_out, ms_arena *ar, ms_pool *pool);
size_t ms_moe_work_floats(const ms_k3_cfg *c, int64_t T);

#endif
