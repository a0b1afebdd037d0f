/* ms_gptoss_cfg: the strict gpt-oss config.json reader (the released Hugging Face GptOssConfig, read as is). */
#ifndef MS_GPTOSS_CFG_H
#define MS_GPTOSS_CFG_H

#include <stdint.h>

/* Every field required (a missing one is an error, never a default). Spec §2. */
typedef struct {
    int n_layers;            /* num_hidden_layers */
    int hidden;              /* H  hidden_size */
    int inter;               /* I  intermediate_size (one expert's inner width) */
    int n_heads;             /* nh num_attention_heads */
    int n_kv;                /* nkv num_key_value_heads */
    int head_dim;            /* d  head_dim */
    int n_experts;           /* E  num_local_experts */
    int top_k;               /* experts_per_token (= num_experts_per_tok when both are given) */
    int vocab;               /* V  vocab_size */
    float eps;               /* rms_norm_eps */
    int window;              /* sliding_window */
    uint8_t *sliding;        /* [n_layers] 1: sliding_attention, 0: full_attention (layer_types), owned */
    float rope_theta;        /* rope_theta */
    float yarn_factor;       /* rope_scaling.factor (> 1) */
    float yarn_beta_fast, yarn_beta_slow;     /* rope_scaling.beta_fast / beta_slow */
    int yarn_orig_ctx;       /* rope_scaling.original_max_position_embeddings (= initial_context_length) */
    float swiglu_limit;      /* swiglu_limit */
    int max_positions;       /* max_position_embeddings */
    int eos_id, pad_id;      /* eos_token_id (the first, when a list), pad_token_id */
} ms_gptoss_cfg;

#define MS_GPTOSS_MAX_TOPK 64

/* Parse and validate path into *c (zeroed first): every missing or invalid field listed in one
 * message (MS_EXIT_MODEL), MS_EXIT_IO when the file cannot be read. */
int ms_gptoss_cfg_load(const char *path, ms_gptoss_cfg *c);
/* Free owned arrays; accepts NULL. */
void ms_gptoss_cfg_free(ms_gptoss_cfg *c);

#endif
