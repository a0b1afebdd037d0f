/* ms_gptoss_int: the gpt-oss model and sequence structs, shared by its binder (ms_gptoss_model.c) and its pass (ms_gptoss_pass.c). Not a public header. */
#ifndef MS_GPTOSS_INT_H
#define MS_GPTOSS_INT_H

#include "ms_gptoss_cfg.h"
#include "ms_gqa.h"
#include "ms_mrt.h"

/* One layer's weights (borrowed views; vectors widened to F32 by the binder). */
typedef struct {
    const float *in_norm, *post_norm;   /* [H] input_layernorm, post_attention_layernorm */
    ms_gqa_w attn;                      /* q, k, v, o with their biases, sinks [nh] (no q/k norms) */
    ms_mat router;                      /* [E, H] */
    const float *router_b;              /* [E] */
} go_layer;

typedef struct {
    ms_model base;
    ms_gptoss_cfg cfg;
    go_layer *layers;                   /* [N] */
    ms_mat embed;                       /* [V, H] */
    ms_mat lm_head;                     /* [V, H] */
    const float *final_norm;            /* [H] */
    ms_rope rope;                       /* YaRN (float32, as the reference) */
} go_model;

typedef struct {
    ms_seq base;
    ms_kv *kv;                          /* [N] a layer's keys and values: all positions, or a ring
                                           of the window and a speculative pass's rows (sliding) */
} go_seq;

/* Rows of a sliding layer's ring for speculative passes of up to spec_rows rows. */
static inline int64_t go_ring_rows(const ms_gptoss_cfg *c, int64_t spec_rows) { return (int64_t)c->window + spec_rows; }

/* Layer l's attention shape. */
ms_gqa go_gqa(const ms_gptoss_cfg *c, int l);

/* The pass (ms_gptoss_pass.c): ms_model_ops.forward_batch and its scratch size. */
extern const ms_pass_ops go_pass; /* the family's layers and tail (ms_gptoss_pass.c) */
size_t go_work_floats(const ms_gptoss_cfg *c, int64_t R, int64_t out_rows);

#endif
