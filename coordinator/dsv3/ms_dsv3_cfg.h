/* ms_dsv3_cfg: the strict DeepSeek-V3 / Kimi K2 config.json reader (DeepseekV3Config as released, model_type deepseek_v3 or kimi_k2). */
#ifndef MS_DSV3_CFG_H
#define MS_DSV3_CFG_H

/* Every field of the math required (spec §2): a missing one is an error, never a default. */
typedef struct {
    int n_layers;            /* L  num_hidden_layers (the MTP layers come after them) */
    int n_dense;         /* first_k_dense_replace: layers [0, n_dense) are dense MLPs */
    int hidden;              /* H  hidden_size */
    int inter;               /* dense MLP intermediate_size */
    int moe_inter;           /* one expert's width, moe_intermediate_size */
    int n_heads;             /* num_attention_heads */
    int q_lora, kv_lora;     /* q_lora_rank, kv_lora_rank */
    int qk_nope, qk_rope, v_head; /* qk_nope_head_dim, qk_rope_head_dim, v_head_dim */
    int n_experts, top_k;    /* n_routed_experts, num_experts_per_tok */
    int n_shared;            /* n_shared_experts: one shared MLP of n_shared * moe_inter */
    int n_group, topk_group; /* group-limited routing (1, 1: none) */
    float routed_scale;      /* routed_scaling_factor */
    float eps;               /* rms_norm_eps */
    float rope_theta;
    float yarn_factor, yarn_beta_fast, yarn_beta_slow, yarn_mscale; /* rope_scaling (mscale = mscale_all_dim) */
    int yarn_orig_ctx;       /* rope_scaling.original_max_position_embeddings */
    int vocab;               /* vocab_size (embedding rows) */
    int max_positions;       /* max_position_embeddings */
    int n_mtp;               /* num_nextn_predict_layers */
    int bos_id, eos_id;
    int xenc;                /* the routed experts' encoding quantization_config names:
                                MS_XENC_BF16 (none), _FP8 (fine-grained FP8), _INT4_G32
                                (compressed-tensors' pack-quantized: K2-Thinking) */
    int kimi;                /* model_type kimi_k2 */
} ms_dsv3_cfg;

/* Parse and validate path into *c (zeroed first): every missing or invalid field listed in one
 * message (MS_EXIT_MODEL), MS_EXIT_IO when the file cannot be read. */
int ms_dsv3_cfg_load(const char *path, ms_dsv3_cfg *c);

#endif
