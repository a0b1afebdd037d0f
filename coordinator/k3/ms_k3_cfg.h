/* ms_k3_cfg: the strict Kimi K3 config.json reader (flat fixture shape and nested release shape). */
#ifndef MS_K3_CFG_H
#define MS_K3_CFG_H

#include <stdint.h>

/* Every field is required unless marked optional (ARCHITECTURE invariant 2: a missing field is
 * an error, never a default). Names in comments are the flat spellings (spec §2.2). */
typedef struct {
    int hidden;          /* E  hidden_size */
    int n_layers;        /* N  num_hidden_layers */
    int vocab;           /* V  vocab_size */
    float eps;           /* rms_norm_eps */
    int kda_heads;       /* Hk num_heads / kda_num_heads */
    int kda_head_dim;    /* D  head_dim / kda_head_dim */
    int conv_k;          /* K  short_conv_kernel_size */
    float gate_lb;       /* gate_lower_bound */
    int mla_heads;       /* H  num_attention_heads */
    int q_lora;          /* Rq q_lora_rank */
    int kv_lora;         /* Rkv kv_lora_rank */
    int qk_nope;         /* dn */
    int qk_rope;         /* dr */
    int v_head;          /* dv */
    int mla_out_gate;    /* mla_use_output_gate (optional, default 1) */
    int n_experts;       /* Ne */
    int top_k;           /* k  num_experts_per_token */
    int n_shared;        /* Ns num_shared_experts */
    int latent;          /* L  routed_expert_hidden_size */
    int moe_inter;       /* I  moe_intermediate_size */
    float routed_scale;  /* routed_scaling_factor */
    int renorm;          /* moe_renormalize (optional, default 1) */
    int latent_norm;     /* latent_moe_use_norm (optional, default 1) */
    int first_dense;     /* first_k_dense_replace */
    int dense_inter;     /* Id intermediate_size */
    int attn_res_block;  /* B  attn_res_block_size */
    float situ_b1;       /* activation_situ_beta / situ_beta */
    float situ_b2;       /* activation_situ_linear_beta / situ_linear_beta */
    int n_full_attn;     /* entries of full_attn_layers */
    int *full_attn;      /* [n_full_attn] ONE-based MLA layer numbers, owned */
    uint8_t *is_mla;     /* [n_layers] 1 if zero-based layer i is MLA, owned */
    int nested;          /* 1 if read from the nested (released) shape */
    int bos_id, eos_id;  /* optional token ids, -1 when absent */
} ms_k3_cfg;

#define MS_K3_CFG_MAX_TOPK 64
/* Sane bounds on sizes, checked before anything is allocated from them; each is far above
 * Kimi K3's (93 layers, 896 experts). The other widths are bounded in ms_k3_cfg.c's field table. */
#define MS_K3_CFG_MAX_LAYERS 1024
/* AttnRes snapshots ((layers - 1) / attn_res_block_size + 1; K3: 8), bounded by the forward pass */
#define MS_K3_CFG_MAX_SNAPSHOTS 64
#define MS_K3_CFG_MAX_EXPERTS 16384
#define MS_K3_CFG_MAX_LAYER_EXPERTS (1 << 18) /* layers x experts: per-expert tables */
#define MS_K3_CFG_MAX_BYTES ((uint64_t)16 << 20) /* config.json itself */

/* Parse and validate config.json at path into *cfg (zeroed first). On failure returns -1 with
 * ms_err set (class MS_EXIT_MODEL) naming the file and listing EVERY missing or invalid field
 * (including sizes beyond the bounds above) in one message; *cfg is left empty. A file that
 * cannot be opened or read, or is not a regular file (a FIFO is refused without blocking), is
 * class MS_EXIT_IO. */
int ms_k3_cfg_load(const char *path, ms_k3_cfg *cfg);
/* Same from a JSON text held in memory; `what` names it in messages. If the root object has a
 * "config" key holding an object (fixture files), that object is used. */
int ms_k3_cfg_parse(const char *json_text, const char *what, ms_k3_cfg *cfg);
/* Free owned arrays. Accepts NULL. */
void ms_k3_cfg_free(ms_k3_cfg *cfg);

/* Derived helpers. */
static inline int ms_k3_cfg_is_dense(const ms_k3_cfg *c, int layer) { return layer < c->first_dense; }
static inline int ms_k3_cfg_is_boundary(const ms_k3_cfg *c, int layer) { return layer % c->attn_res_block == 0; }

#endif
