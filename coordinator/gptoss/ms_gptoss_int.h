/* ms_gptoss_int: the gpt-oss model and sequence structs, shared by its binder (ms_gptoss_model.c) and its pass (ms_gptoss_pass.c). Not a public header. */
#ifndef MS_GPTOSS_INT_H
#define MS_GPTOSS_INT_H

#include "ms_gptoss_cfg.h"
#include "ms_mrt.h"

/* One layer's weights (borrowed views; vectors widened to F32 by the binder). */
typedef struct {
    const float *in_norm, *post_norm;   /* [H] input_layernorm, post_attention_layernorm */
    ms_mat q, k, v, o;                  /* [nh*d, H], [nkv*d, H], [nkv*d, H], [H, nh*d] */
    const float *bq, *bk, *bv, *bo;     /* [nh*d], [nkv*d], [nkv*d], [H] */
    const float *sinks;                 /* [nh] one learned logit per query head */
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
    float *inv_freq;                    /* [d/2] YaRN inverse frequencies (float32, as the reference) */
    float concentration;                /* 0.1 ln(factor) + 1 */
} go_model;

/* One layer's keys and values of a sequence: position p at row p (full attention) or p % ring
 * (sliding: the last `window` positions and room for a speculative pass's rows). */
typedef struct {
    float *k, *v;                       /* [alloc][nkv*d] rotated keys, values */
    int64_t alloc;                      /* rows allocated (grown up to ring for sliding layers) */
    int64_t ring;                       /* 0: full attention (grows), else the ring's rows */
} go_kv;

typedef struct {
    ms_seq base;
    go_kv *kv;                          /* [N] */
} go_seq;

/* Rows of a sliding layer's ring for speculative passes of up to spec_rows rows. */
static inline int64_t go_ring_rows(const ms_gptoss_cfg *c, int64_t spec_rows) { return (int64_t)c->window + spec_rows; }

/* Make room in kv for position p (growing it; a ring never beyond its rows). */
void go_kv_reserve(go_kv *kv, int64_t p, int64_t width);

/* The pass (ms_gptoss_pass.c): ms_model_ops.forward_batch and its scratch size. */
extern const ms_pass_ops go_pass; /* the family's layers and tail (ms_gptoss_pass.c) */
size_t go_work_floats(const ms_gptoss_cfg *c, int64_t R, int64_t out_rows);
/* Bytes of attention scores one thread allocates for sequences of up to `positions`. */
uint64_t go_thread_bytes(const ms_gptoss_cfg *c, int64_t positions);

#endif
