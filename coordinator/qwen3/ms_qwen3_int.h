/* ms_qwen3_int: the Qwen3-MoE model and sequence structs, shared by its binder (ms_qwen3_model.c) and its pass (ms_qwen3_pass.c). Not a public header. */
#ifndef MS_QWEN3_INT_H
#define MS_QWEN3_INT_H

#include "ms_gqa.h"
#include "ms_mrt.h"
#include "ms_qwen3_cfg.h"

/* One layer's weights (borrowed views; vectors widened to F32 by the binder). */
typedef struct {
    const float *in_norm, *post_norm;   /* [H] input_layernorm, post_attention_layernorm */
    ms_gqa_w attn;                      /* q, k, v, o; q_norm, k_norm [hd]; no biases, no sinks */
    ms_mat router;                      /* [E, H] mlp.gate (MoE layers) */
    ms_mat gate, up, down;              /* [Id, H], [Id, H], [H, Id] the dense MLP (dense layers) */
} qw_layer;

typedef struct {
    ms_model base;
    ms_qwen3_cfg cfg;
    qw_layer *layers;                   /* [N] */
    ms_mat embed;                       /* [V, H] */
    ms_mat lm_head;                     /* [V, H] (the embedding's view when tied) */
    const float *final_norm;            /* [H] */
    ms_rope rope;                       /* plain, half split (float32 tables, as the reference) */
} qw_model;

typedef struct {
    ms_seq base;
    ms_kv *kv;                          /* [N] a layer's keys and values at every position */
} qw_seq;

/* Layer l's attention shape. */
ms_gqa qw_gqa(const ms_qwen3_cfg *c);

extern const ms_pass_ops qw_pass; /* the family's layers and tail (ms_qwen3_pass.c) */
/* Scratch floats of a pass of R rows asking for out_rows logits rows. */
size_t qw_work_floats(const ms_qwen3_cfg *c, int64_t R, int64_t out_rows);

#endif
