/* ms_dsv3_synth: deterministic random DeepSeek-V3 / Kimi K2 checkpoints in the Hugging Face release layout (config, shards + index, tokenizer), FP8 block-scaled. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "ms_dsv3_model.h"
#include "ms_err.h"
#include "ms_fp8.h"
#include "ms_msynth.h"
#include "ms_tok.h"

typedef struct {
    int n_layers, n_dense, hidden, inter, moe_inter, n_heads, q_lora, kv_lora, nope, rope, v_head;
    int n_experts, top_k, n_shared, n_group, topk_group, vocab, n_mtp, n_shards, kimi;
    float routed_scale, theta, factor, beta_fast;
    int int4;       /* K2-Thinking's form: a BF16 trunk, INT4 routed experts (compressed-tensors) */
    int mtp_agrees; /* the tiny -mtp preset: layers that add little, an MTP layer that passes the
                       next token's embedding to the same head (it predicts what the model does) */
} ds_shape;

static int preset(const char *name, ds_shape *s)
{
    if (!strcmp(name, "deepseek-v3-tiny") || !strcmp(name, "deepseek-v3-tiny-mtp") || !strcmp(name, "deepseek-v3-tiny-int4"))
        /* a few MB: one dense layer, then MoE with 4 groups; an MTP layer (-mtp: one that agrees;
         * -int4: a BF16 trunk and INT4 experts, K2-Thinking's form) */
        *s = (ds_shape){3, 1, 256, 320, 96, 4, 192, 128, 32, 16, 32, 16, 4, 1, 4, 2, 600, 1, 1, 0, 2.5f, 10000, 40, 32,
                        !strcmp(name, "deepseek-v3-tiny-int4"), !strcmp(name, "deepseek-v3-tiny-mtp")};
    else if (!strcmp(name, "kimi-k2-tiny"))
        /* the tiny shape in Kimi K2's form: no expert groups, no MTP layer, Kimi's tokenizer (its
         * chat format and tool-call markers) */
        *s = (ds_shape){3, 1, 256, 320, 96, 4, 192, 128, 32, 16, 32, 16, 4, 1, 1, 1, 600, 0, 1, 1, 2.827f, 50000, 32, 1, 0, 0};
    else if (!strcmp(name, "deepseek-v3")) /* the released 671B: 641 GiB (use with --sparse) */
        *s = (ds_shape){61, 3, 7168, 18432, 2048, 128, 1536, 512, 128, 64, 128, 256, 8, 1, 8, 4, 129280, 1, 163, 0, 2.5f,
                        10000, 40, 32, 0, 0};
    else if (!strcmp(name, "deepseek-v3-slice"))
        /* the release's widths and routing in 16 layers (3 dense, 13 MoE) of 16 experts, no MTP layer:
         * 18 GB of real bytes, to measure whether reads overlap compute (tests/bench/deepseek.sh) */
        *s = (ds_shape){16, 3, 7168, 18432, 2048, 128, 1536, 512, 128, 64, 128, 16, 8, 1, 8, 4, 129280, 0, 8, 0, 2.5f,
                        10000, 40, 32, 0, 0};
    else if (!strcmp(name, "kimi-k2") || !strcmp(name, "kimi-k2-thinking"))
        /* the released Kimi K2 1T: 958 GiB; K2-Thinking: its experts INT4, 594 GB (use with --sparse) */
        *s = (ds_shape){61, 1, 7168, 18432, 2048, 64, 1536, 512, 128, 64, 128, 384, 8, 1, 1, 1, 163840, 0, 62, 1, 2.827f,
                        50000, 32, 1, !strcmp(name, "kimi-k2-thinking"), 0};
    else {
        ms_err_set("unknown DeepSeek-V3 synth preset '%s' (known: deepseek-v3-tiny, deepseek-v3-tiny-mtp, "
                   "deepseek-v3-tiny-int4, kimi-k2-tiny, deepseek-v3, deepseek-v3-slice, kimi-k2, kimi-k2-thinking)", name);
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    return 0;
}

static int write_config(const char *dir, const ds_shape *s, int bos, int eos)
{
    json_t *c = json_object();
    json_object_set_new(c, "architectures", json_pack("[s]", "DeepseekV3ForCausalLM"));
    json_object_set_new(c, "attention_bias", json_false());
    json_object_set_new(c, "attention_dropout", json_real(0.0));
    json_object_set_new(c, "aux_loss_alpha", json_real(0.001));
    json_object_set_new(c, "bos_token_id", json_integer(bos));
    json_object_set_new(c, "eos_token_id", json_integer(eos));
    json_object_set_new(c, "ep_size", json_integer(1));
    json_object_set_new(c, "first_k_dense_replace", json_integer(s->n_dense));
    json_object_set_new(c, "hidden_act", json_string("silu"));
    json_object_set_new(c, "hidden_size", json_integer(s->hidden));
    json_object_set_new(c, "initializer_range", json_real(0.02));
    json_object_set_new(c, "intermediate_size", json_integer(s->inter));
    json_object_set_new(c, "kv_lora_rank", json_integer(s->kv_lora));
    json_object_set_new(c, "max_position_embeddings", json_integer(s->kimi ? 131072 : 163840));
    json_object_set_new(c, "model_type", json_string(s->kimi ? "kimi_k2" : "deepseek_v3"));
    json_object_set_new(c, "moe_intermediate_size", json_integer(s->moe_inter));
    json_object_set_new(c, "moe_layer_freq", json_integer(1));
    json_object_set_new(c, "n_group", json_integer(s->n_group));
    json_object_set_new(c, "n_routed_experts", json_integer(s->n_experts));
    json_object_set_new(c, "n_shared_experts", json_integer(s->n_shared));
    json_object_set_new(c, "norm_topk_prob", json_true());
    json_object_set_new(c, "num_attention_heads", json_integer(s->n_heads));
    json_object_set_new(c, "num_experts_per_tok", json_integer(s->top_k));
    json_object_set_new(c, "num_hidden_layers", json_integer(s->n_layers));
    json_object_set_new(c, "num_key_value_heads", json_integer(s->n_heads));
    json_object_set_new(c, "num_nextn_predict_layers", json_integer(s->n_mtp));
    json_object_set_new(c, "q_lora_rank", json_integer(s->q_lora));
    json_object_set_new(c, "qk_nope_head_dim", json_integer(s->nope));
    json_object_set_new(c, "qk_rope_head_dim", json_integer(s->rope));
    if (s->int4) /* compressed-tensors' pack-quantized experts, everything else BF16 */
        json_object_set_new(
            c, "quantization_config",
            json_pack("{s:{s:{s:n,s:n,s:[s],s:{s:n,s:b,s:i,s:i,s:s,s:s,s:b,s:s}}},s:s,s:[s],s:n,s:s,s:s}", "config_groups",
                      "group_0", "input_activations", "output_activations", "targets", "Linear", "weights", "actorder",
                      "dynamic", 0, "group_size", 32, "num_bits", 4, "observer", "minmax", "strategy", "group",
                      "symmetric", 1, "type", "int", "format", "pack-quantized", "ignore", "lm_head", "kv_cache_scheme",
                      "quant_method", "compressed-tensors", "quantization_status", "compressed"));
    else
        json_object_set_new(c, "quantization_config",
                            json_pack("{s:s,s:s,s:s,s:[i,i]}", "activation_scheme", "dynamic", "fmt", "e4m3", "quant_method",
                                      "fp8", "weight_block_size", 128, 128));
    json_object_set_new(c, "rms_norm_eps", json_real(1e-6));
    json_object_set_new(c, "rope_scaling",
                        json_pack("{s:f,s:f,s:f,s:f,s:f,s:i,s:s}", "beta_fast", (double)s->beta_fast, "beta_slow", 1.0,
                                  "factor", (double)s->factor, "mscale", 1.0, "mscale_all_dim", 1.0,
                                  "original_max_position_embeddings", 4096, "type", "yarn"));
    json_object_set_new(c, "rope_theta", json_real(s->theta));
    json_object_set_new(c, "routed_scaling_factor", json_real(s->routed_scale));
    json_object_set_new(c, "scoring_func", json_string("sigmoid"));
    json_object_set_new(c, "tie_word_embeddings", json_false());
    json_object_set_new(c, "topk_group", json_integer(s->topk_group));
    json_object_set_new(c, "topk_method", json_string("noaux_tc"));
    json_object_set_new(c, "torch_dtype", json_string("bfloat16"));
    json_object_set_new(c, "v_head_dim", json_integer(s->v_head));
    json_object_set_new(c, "vocab_size", json_integer(s->vocab));
    return ms_syn_write_config(dir, c, 1);
}

static void vec(ms_syn_list *l, const char *name, int64_t n, ms_syn_kind k)
{
    int64_t sh[1] = {n};
    ms_syn_add(l, name, MS_DT_BF16, 1, sh, k, 0.0f);
}

static void bf16(ms_syn_list *l, const char *name, int64_t rows, int64_t cols, float amp)
{
    int64_t sh[2] = {rows, cols};
    ms_syn_add(l, name, MS_DT_BF16, 2, sh, MS_SYN_UNIFORM, amp);
}

/* An FP8 projection [rows, cols] and its F32 weight_scale_inv grid, std about gain/sqrt(cols). */
static void fp8g(ms_syn_list *l, const char *name, int64_t rows, int64_t cols, float gain)
{
    int64_t sh[2] = {rows, cols}, g[2] = {ms_fp8_blocks(rows), ms_fp8_blocks(cols)};
    char sn[300];
    ms_syn_add(l, name, MS_DT_F8_E4M3, 2, sh, MS_SYN_FP8, 0.0f);
    snprintf(sn, sizeof sn, "%s_scale_inv", name);
    ms_syn_add(l, sn, MS_DT_F32, 2, g, MS_SYN_POSITIVE, gain * ms_syn_amp(cols) / 1.7f);
}

/* A trunk projection: FP8 as DeepSeek-V3 and Kimi K2 release it, BF16 in K2-Thinking. */
static void proj(ms_syn_list *l, const ds_shape *s, const char *name, int64_t rows, int64_t cols, float gain)
{
    if (s->int4)
        bf16(l, name, rows, cols, gain * ms_syn_amp(cols));
    else
        fp8g(l, name, rows, cols, gain);
}

/* A routed expert's matrix NAME (".weight" stripped): FP8, or compressed-tensors' INT4 (packed
 * words, BF16 scales per 32 columns, the shape). */
static void expert_mat(ms_syn_list *l, const ds_shape *s, const char *name, int64_t rows, int64_t cols, float gain)
{
    char n[300];
    if (!s->int4) {
        snprintf(n, sizeof n, "%s.weight", name);
        fp8g(l, n, rows, cols, gain);
        return;
    }
    int64_t pk[2] = {rows, cols / 8}, sc[2] = {rows, cols / 32}, two[1] = {2};
    snprintf(n, sizeof n, "%s.weight_packed", name);
    ms_syn_add(l, n, MS_DT_I32, 2, pk, MS_SYN_PACKED, 0.0f);
    snprintf(n, sizeof n, "%s.weight_scale", name);
    ms_syn_add(l, n, MS_DT_BF16, 2, sc, MS_SYN_POSITIVE, gain * ms_syn_amp(cols) / 4.6f); /* (u - 8) has std 4.6 */
    snprintf(n, sizeof n, "%s.weight_shape", name);
    ms_syn_add(l, n, MS_DT_I32, 1, two, MS_SYN_DIMS, (float)rows)->valid = (int)cols;
}

/* A norm's gains: drawn, or ones where the MTP layer is to agree with the model. */
static void norm(ms_syn_list *l, const ds_shape *s, const char *name, int64_t n)
{
    int64_t sh[1] = {n};
    ms_syn_add(l, name, MS_DT_BF16, 1, sh, s->mtp_agrees ? MS_SYN_EYE : MS_SYN_GAIN, 1.0f);
}

/* Decoder layer i (the MTP layer too: its block is a MoE decoder layer). */
static void layer(ms_syn_list *l, const ds_shape *s, int i)
{
    char n[200];
    int64_t H = s->hidden, dq = s->nope + s->rope, SI = (int64_t)s->n_shared * s->moe_inter;
    float out = s->mtp_agrees ? 0.02f : 1.0f; /* what a block adds to the residual stream */
#define NM(fmt) (snprintf(n, sizeof n, "model.layers.%d." fmt, i), n)
    vec(l, NM("input_layernorm.weight"), H, MS_SYN_GAIN);
    proj(l, s, NM("self_attn.q_a_proj.weight"), s->q_lora, H, 1.0f);
    vec(l, NM("self_attn.q_a_layernorm.weight"), s->q_lora, MS_SYN_GAIN);
    proj(l, s, NM("self_attn.q_b_proj.weight"), (int64_t)s->n_heads * dq, s->q_lora, 1.0f);
    proj(l, s, NM("self_attn.kv_a_proj_with_mqa.weight"), s->kv_lora + s->rope, H, 1.0f);
    vec(l, NM("self_attn.kv_a_layernorm.weight"), s->kv_lora, MS_SYN_GAIN);
    proj(l, s, NM("self_attn.kv_b_proj.weight"), (int64_t)s->n_heads * (s->nope + s->v_head), s->kv_lora, 1.0f);
    proj(l, s, NM("self_attn.o_proj.weight"), H, (int64_t)s->n_heads * s->v_head, out);
    vec(l, NM("post_attention_layernorm.weight"), H, MS_SYN_GAIN);
    if (i < s->n_dense) {
        proj(l, s, NM("mlp.gate_proj.weight"), s->inter, H, 1.0f);
        proj(l, s, NM("mlp.up_proj.weight"), s->inter, H, 1.0f);
        proj(l, s, NM("mlp.down_proj.weight"), H, s->inter, out);
        return;
    }
    bf16(l, NM("mlp.gate.weight"), s->n_experts, H, ms_syn_amp(H));
    int64_t e[1] = {s->n_experts};
    ms_syn_add(l, NM("mlp.gate.e_score_correction_bias"), MS_DT_F32, 1, e, MS_SYN_UNIFORM, 0.05f);
    if (SI > 0) {
        proj(l, s, NM("mlp.shared_experts.gate_proj.weight"), SI, H, 1.0f);
        proj(l, s, NM("mlp.shared_experts.up_proj.weight"), SI, H, 1.0f);
        proj(l, s, NM("mlp.shared_experts.down_proj.weight"), H, SI, out);
    }
#undef NM
    for (int x = 0; x < s->n_experts; x++) {
        static const char *const which[3] = {"gate_proj", "up_proj", "down_proj"};
        for (int k = 0; k < 3; k++) {
            snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%d.%s", i, x, which[k]);
            expert_mat(l, s, n, k < 2 ? s->moe_inter : H, k < 2 ? H : s->moe_inter, k < 2 ? 1.0f : out);
        }
    }
}

/* DeepSeek-V3's pre-tokenizer (digits in runs of up to three, CJK runs, words): one Split here */
static const char ds_split[] = "\\p{N}{1,3}|[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+|"
                               "[!-/:-~]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *const ds_specials[] = {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                                          "<think>", "</think>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
                                          "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>",
                                          "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>",
                                          "<｜tool▁output▁end｜>"};

int ms_dsv3_synth(const char *dir, const char *name, int layers, int sparse, uint64_t seed)
{
    ds_shape s = {0};
    if (preset(name, &s) != 0) return -1;
    if (layers < 0 || layers > 1024) {
        ms_err_set("--layers %d: 1..1024", layers);
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    if (layers) s.n_layers = layers;
    if (s.n_dense >= s.n_layers) s.n_dense = s.n_layers - 1;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        ms_err_set("cannot create %s: %s", dir, strerror(errno));
        return ms_err_set_code(MS_EXIT_IO);
    }
    /* DeepSeek: bos 0 and eos 1 at the start of its tokenizer.json's ids; Kimi K2: the tiktoken
     * surrogate's [BOS] and [EOS] after its ranks */
    int ranks = s.kimi ? s.vocab - 256 - MS_TOK_SYNTH_SPECIALS : s.vocab - 6 - 200;
    if (s.vocab < 1000) ranks = s.kimi ? 400 : s.vocab - 6 - 40;
    int bos = ranks, eos = bos + 1;
    if (write_config(dir, &s, bos, eos) != 0) return -1;
    ms_syn_list l = {NULL, 0, 0, ms_syn_mix(seed), 0};
    int total = s.n_layers + s.n_mtp;
    int64_t emb[2] = {s.vocab, s.hidden};
    ms_syn_add(&l, "model.embed_tokens.weight", MS_DT_BF16, 2, emb, MS_SYN_UNIFORM, 1.0f);
    for (int i = 0; i < total; i++) {
        l.shard = s.n_shards > 1 ? (int)((int64_t)i * (s.n_shards - 1) / total) : 0;
        layer(&l, &s, i);
        if (i < s.n_layers) continue;
        /* the MTP layer's own parts (spec §3.8): copies of the embedding and head, its norms, eh_proj */
        char n[200];
        snprintf(n, sizeof n, "model.layers.%d.embed_tokens.weight", i);
        ms_syn_add(&l, n, MS_DT_BF16, 2, emb, MS_SYN_UNIFORM, 1.0f);
        snprintf(n, sizeof n, "model.layers.%d.enorm.weight", i);
        norm(&l, &s, n, s.hidden);
        snprintf(n, sizeof n, "model.layers.%d.hnorm.weight", i);
        norm(&l, &s, n, s.hidden);
        snprintf(n, sizeof n, "model.layers.%d.eh_proj.weight", i);
        if (s.mtp_agrees) { /* the embedding half through as it is: u = enorm(embedding) */
            int64_t eh[2] = {s.hidden, 2 * (int64_t)s.hidden};
            ms_syn_add(&l, n, MS_DT_BF16, 2, eh, MS_SYN_EYE, 1.0f);
        } else {
            bf16(&l, n, s.hidden, 2 * (int64_t)s.hidden, ms_syn_amp(2 * (int64_t)s.hidden));
        }
        snprintf(n, sizeof n, "model.layers.%d.shared_head.norm.weight", i);
        norm(&l, &s, n, s.hidden);
        snprintf(n, sizeof n, "model.layers.%d.shared_head.head.weight", i);
        bf16(&l, n, s.vocab, s.hidden, ms_syn_amp(s.hidden));
    }
    l.shard = s.n_shards - 1;
    norm(&l, &s, "model.norm.weight", s.hidden);
    bf16(&l, "lm_head.weight", s.vocab, s.hidden, ms_syn_amp(s.hidden));
    /* the release's shard names: one-based, a six-digit total */
    ms_syn_files f = {s.n_shards, 1, 0, 6, sparse};
    int rc = ms_syn_write(dir, &l, &f);
    if (rc == 0) rc = s.kimi ? ms_tok_write_synth_kimi(dir, ranks, 1) : ms_tok_write_synth_hf(dir, ranks, ds_split, ds_specials, 15);
    return rc;
}
