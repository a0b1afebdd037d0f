/* ms_qwen3_cfg: the strict Qwen3-MoE config.json reader (the released Hugging Face Qwen3MoeConfig, read as is). */
#ifndef MS_QWEN3_CFG_H
#define MS_QWEN3_CFG_H

#include <stdint.h>

/* Every field of the math required (a missing one is an error, never the config class's
 * default); the newer spellings (num_local_experts, rope_parameters) taken too. Spec §2. */
typedef struct {
    int n_layers;            /* num_hidden_layers */
    int hidden;              /* H  hidden_size */
    int inter;               /* Id intermediate_size (a dense layer's MLP) */
    int moe_inter;           /* Im moe_intermediate_size (one expert's inner width) */
    int n_heads;             /* nh num_attention_heads */
    int n_kv;                /* nkv num_key_value_heads */
    int head_dim;            /* hd head_dim (not H / nh) */
    int n_experts;           /* E  num_experts (or num_local_experts) */
    int top_k;               /* k  num_experts_per_tok */
    int norm_topk;           /* norm_topk_prob: the k weights divided by their sum */
    int sparse_step;         /* decoder_sparse_step */
    int first_moe;           /* the first MoE layer; layers [first_moe, n_layers) route */
    int vocab;               /* V  vocab_size */
    float eps;               /* rms_norm_eps */
    float rope_theta;        /* rope_theta (or rope_parameters.rope_theta) */
    int tied;                /* tie_word_embeddings: the LM head is the embedding */
    int max_positions;       /* max_position_embeddings */
    int bos_id, eos_id;      /* bos_token_id (never prepended), eos_token_id */
    int fp8;                 /* quantization_config: fine-grained FP8 (e4m3, 128 x 128 blocks) */
} ms_qwen3_cfg;

/* Parse and validate path into *c (zeroed first): every missing or invalid field listed in one
 * message (MS_EXIT_MODEL), MS_EXIT_IO when the file cannot be read. */
int ms_qwen3_cfg_load(const char *path, ms_qwen3_cfg *c);

#endif
