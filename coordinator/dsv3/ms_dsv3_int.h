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

/* The MTP layer as the draft head (spec §3.8), resident; the embedding and LM head are the
 * model's (the release's copies in the layer are equal to them: README_WEIGHTS). */
typedef struct {
    ds_layer layer;                     /* attention, router, shared expert of layer N */
    const float *enorm, *hnorm;         /* [H] the embedding's and the hidden state's norms */
    ms_mat eh_proj;                     /* [H, 2H] BF16 */
    const float *head_norm;             /* [H] shared_head.norm */
} ds_mtp;

typedef struct {
    ms_model base;
    ms_dsv3_cfg cfg;
    int mtp_on;                         /* 1: the MTP layer is bound (run option draft_head) */
    ds_mtp mtp;
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
    /* the draft head's state (mtp_on): */
    ms_mla_cache mtp_kv;                /* the MTP layer's cache: positions [0, mtp_f) */
    int64_t mtp_f;                      /* the first position not yet through the head */
    float *pend;                        /* [cap_pend][H] final-normed hidden states of positions
                                           [mtp_f, pos), waiting for their next tokens */
    int64_t cap_pend;
    int mtp_lost;                       /* 1: loaded from a state without the head's part */
} ds_seq;

/* The attention shape of the model (every layer's). */
ms_mla_cfg ds_mla_cfg(const ds_model *g);

/* A MoE layer's gate (w NULL: the shape alone, for sizes). */
#include "ms_moe_block.h"
ms_moe_gate ds_gate(const ds_model *g, const ds_layer *w);

/* ---- the MTP draft head (ms_dsv3_mtp.c) ---- */
void ds_mtp_pass_end(ms_model *m, ms_pass *p);         /* ms_pass_ops.pass_end */
int ds_mtp_draft(ms_seq *const *s, int k, const int32_t *const *toks, const size_t *n, float *logits,
                 int *ok); /* ms_model_ops.seq_draft */
size_t ds_mtp_work_floats(const ds_model *g, int64_t R, int64_t k);
void ds_mtp_seq_init(ds_model *g, ds_seq *s);
void ds_mtp_seq_free(ds_seq *s);
void ds_mtp_seq_copy(const ds_model *g, ds_seq *d, const ds_seq *s);
void ds_mtp_seq_save(const ds_model *g, const ds_seq *s, ms_sbuf *out);
int ds_mtp_seq_load(const ds_model *g, ds_seq *s, ms_reader *in);
uint64_t ds_mtp_state_bytes(const ds_model *g, int64_t positions);

extern const ms_pass_ops ds_pass; /* the family's layers and tail (ms_dsv3_pass.c) */
/* Scratch floats of a pass of R rows asking for out_rows logits rows. */
size_t ds_work_floats(const ds_model *g, int64_t R, int64_t out_rows);

#endif
