/* ms_dsv3_int: the DeepSeek-V3 / Kimi K2 model and sequence structs, shared by its binder (ms_dsv3_model.c) and its pass (ms_dsv3_pass.c). Not a public header. */
#ifndef MS_DSV3_INT_H
#define MS_DSV3_INT_H

#include "ms_dsv3_cfg.h"
#include "ms_mla.h"
#include "ms_mrt.h"

/* One layer's weights (borrowed views; vectors widened to F32 by the binder). */
typedef struct {
    const float *in_norm, *post_norm;   /* [H] input_layernorm, post_attention_layernorm */
    ms_mla_w mla;                       /* q_a, q_b, kv_a_with_mqa, kv_b, o; the two lora norms */
    ms_mat gate, up, down;              /* [Id, H], [Id, H], [H, Id] dense layers' MLP */
    ms_mat router;                      /* [E, H] MoE layers: mlp.gate.weight */
    const float *select_bias;           /* [E] e_score_correction_bias (the choice only) */
    ms_mat sgate, sup, sdown;           /* [S*Im, H], [S*Im, H], [H, S*Im] the shared expert */
} ds_layer;

typedef struct {
    ms_model base;
    ms_dsv3_cfg cfg;
    ds_layer *layers;                   /* [N] */
    ms_mat embed;                       /* [V, H] */
    ms_mat lm_head;                     /* [V, H] */
    const float *final_norm;            /* [H] */
    ms_rope rope;                       /* DeepSeek's YaRN, interleaved pairs (float32 tables) */
    ms_mat_buf kvb_buf;                 /* where a streamed kv_b is pulled whole (one at a time) */
} ds_model;

typedef struct {
    ms_seq base;
    ms_mla_cache *kv;                   /* [N] a layer's latents and rope keys at every position */
} ds_seq;

/* The attention shape of the model (every layer's). */
ms_mla_cfg ds_mla_cfg(const ds_model *g);

extern const ms_pass_ops ds_pass; /* the family's layers and tail (ms_dsv3_pass.c) */
/* Scratch floats of a pass of R rows asking for out_rows logits rows. */
size_t ds_work_floats(const ds_model *g, int64_t R, int64_t out_rows);

#endif
