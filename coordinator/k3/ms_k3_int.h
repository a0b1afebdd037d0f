/* ms_k3_int: the K3 model's struct, shared by its binder (ms_k3_model.c) and its tensor table (ms_k3_tensors.c). Not a public header. */
#ifndef MS_K3_INT_H
#define MS_K3_INT_H

#include "ms_k3_cfg.h"
#include "ms_layer.h"
#include "ms_mrt.h"

/* The K3 model: the runtime's base first, then K3's config and weights. */
typedef struct {
    ms_model base;
    ms_k3_cfg cfg;
    ms_layer_w *layers;        /* [N] */
    ms_mat embed;              /* [V, E] */
    ms_mat lm_head;            /* [V, E] */
    const float *final_norm;   /* [E] */
    float *out_fold;           /* [E] output_attn_res norm * proj */
    const float *out_norm, *out_proj; /* [E] output_attn_res_norm / _proj as bound */
    ms_mat_buf kvb_buf;        /* a streamed kv_b pulled whole (the planner's fixed memory counts it) */
    float *snaps;              /* [R][smax][E] the pass's AttnRes snapshots (from its arena) */
    int n_snap;                /* snapshots taken so far in the pass */
} k3_model;

#endif
