/* ms_qwen3_synth: deterministic random Qwen3-MoE checkpoints in the Hugging Face release layout (config, shards + index, tokenizer.json), BF16 or FP8. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "ms_err.h"
#include "ms_fp8.h"
#include "ms_msynth.h"
#include "ms_qwen3_model.h"
#include "ms_tok.h"

typedef struct {
    int n_layers, hidden, inter, moe_inter, n_heads, n_kv, head_dim, n_experts, top_k, vocab, tok_ranks, n_shards;
    int dense;   /* the first `dense` layers are mlp_only_layers */
    float theta;
    int fp8;     /* 1: FP8 projections with F32 scale grids; 2: with BF16 grids */
} qw_shape;

/* Qwen's 26 added tokens, in the release's order (151643..151668 there). */
static const char *const added[26] = {
    "<|endoftext|>",     "<|im_start|>",     "<|im_end|>",     "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>",     "<|box_end|>",      "<|quad_start|>", "<|quad_end|>",         "<|vision_start|>",
    "<|vision_end|>",    "<|vision_pad|>",   "<|image_pad|>",  "<|video_pad|>",        "<tool_call>",
    "</tool_call>",      "<|fim_prefix|>",   "<|fim_middle|>", "<|fim_suffix|>",       "<|fim_pad|>",
    "<|repo_name|>",     "<|file_sep|>",     "<tool_response>", "</tool_response>",    "<think>",
    "</think>"};

/* Qwen2/3's pre-tokenizer pattern, as the release's tokenizer.json carries it (single digits). */
static const char qwen_split[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static int preset(const char *name, qw_shape *s)
{
    char base[64];
    size_t n = strlen(name);
    int fp8 = n > 4 && !strcmp(name + n - 4, "-fp8") ? 1 : n > 10 && !strcmp(name + n - 10, "-fp8-bf16s") ? 2 : 0;
    snprintf(base, sizeof base, "%.*s", (int)(fp8 == 2 ? n - 10 : fp8 ? n - 4 : n), name);
    if (!strcmp(base, "qwen3-moe-tiny")) /* a few MB: one dense layer first, then MoE; 8 experts, top 4 */
        *s = (qw_shape){4, 128, 192, 64, 4, 2, 64, 8, 4, 512, 485, 1, 1, 1e6f, 0};
    else if (!strcmp(base, "qwen3-30b-a3b")) /* the released widths and depth */
        *s = (qw_shape){48, 2048, 6144, 768, 32, 4, 128, 128, 8, 151936, 151643, 16, 0, 1e6f, 0};
    else if (!strcmp(base, "qwen3-235b-a22b"))
        *s = (qw_shape){94, 4096, 12288, 1536, 64, 4, 128, 128, 8, 151936, 151643, 118, 0, 1e6f, 0};
    else {
        ms_err_set("unknown Qwen3-MoE synth preset '%s' (known: qwen3-moe-tiny, qwen3-30b-a3b, qwen3-235b-a22b, each also "
                   "with -fp8, or -fp8-bf16s for BF16 scale grids)", name);
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    s->fp8 = fp8;
    return 0;
}

static int write_config(const char *dir, const qw_shape *s)
{
    json_t *c = json_object(), *only = json_array();
    for (int l = 0; l < s->dense; l++) json_array_append_new(only, json_integer(l));
    json_object_set_new(c, "architectures", json_pack("[s]", "Qwen3MoeForCausalLM"));
    json_object_set_new(c, "attention_bias", json_false());
    json_object_set_new(c, "attention_dropout", json_real(0.0));
    json_object_set_new(c, "bos_token_id", json_integer(s->tok_ranks));      /* <|endoftext|> */
    json_object_set_new(c, "decoder_sparse_step", json_integer(1));
    json_object_set_new(c, "eos_token_id", json_integer(s->tok_ranks + 2));  /* <|im_end|> */
    json_object_set_new(c, "head_dim", json_integer(s->head_dim));
    json_object_set_new(c, "hidden_act", json_string("silu"));
    json_object_set_new(c, "hidden_size", json_integer(s->hidden));
    json_object_set_new(c, "initializer_range", json_real(0.02));
    json_object_set_new(c, "intermediate_size", json_integer(s->inter));
    json_object_set_new(c, "max_position_embeddings", json_integer(40960));
    json_object_set_new(c, "max_window_layers", json_integer(s->n_layers));
    json_object_set_new(c, "mlp_only_layers", only);
    json_object_set_new(c, "model_type", json_string("qwen3_moe"));
    json_object_set_new(c, "moe_intermediate_size", json_integer(s->moe_inter));
    json_object_set_new(c, "norm_topk_prob", json_true());
    json_object_set_new(c, "num_attention_heads", json_integer(s->n_heads));
    json_object_set_new(c, "num_experts", json_integer(s->n_experts));
    json_object_set_new(c, "num_experts_per_tok", json_integer(s->top_k));
    json_object_set_new(c, "num_hidden_layers", json_integer(s->n_layers));
    json_object_set_new(c, "num_key_value_heads", json_integer(s->n_kv));
    json_object_set_new(c, "output_router_logits", json_false());
    if (s->fp8) {
        json_t *keep = json_array();
        json_array_append_new(keep, json_string("lm_head"));
        for (int l = 0; l < s->n_layers; l++) {
            char n[96];
            static const char *const what[3] = {"input_layernorm", "mlp.gate", "post_attention_layernorm"};
            for (int i = 0; i < 3; i++) {
                snprintf(n, sizeof n, "model.layers.%d.%s", l, what[i]);
                json_array_append_new(keep, json_string(n));
            }
        }
        json_object_set_new(c, "quantization_config",
                            json_pack("{s:s,s:s,s:o,s:s,s:[i,i]}", "activation_scheme", "dynamic", "fmt", "e4m3",
                                      "modules_to_not_convert", keep, "quant_method", "fp8", "weight_block_size", 128, 128));
    }
    json_object_set_new(c, "rms_norm_eps", json_real(1e-6));
    json_object_set_new(c, "rope_scaling", json_null());
    json_object_set_new(c, "rope_theta", json_real(s->theta));
    json_object_set_new(c, "router_aux_loss_coef", json_real(0.001));
    json_object_set_new(c, "sliding_window", json_null());
    json_object_set_new(c, "tie_word_embeddings", json_false());
    json_object_set_new(c, "torch_dtype", json_string("bfloat16"));
    json_object_set_new(c, "transformers_version", json_string("4.51.0"));
    json_object_set_new(c, "use_cache", json_true());
    json_object_set_new(c, "use_sliding_window", json_false());
    json_object_set_new(c, "vocab_size", json_integer(s->vocab));
    return ms_syn_write_config(dir, c, 1);
}

static void vec(ms_syn_list *l, const char *name, int64_t n, ms_syn_kind k)
{
    int64_t sh[1] = {n};
    ms_syn_add(l, name, MS_DT_BF16, 1, sh, k, 0.0f);
}

/* A projection [rows, cols]: BF16, or (fp8) F8_E4M3 codes and their weight_scale_inv grid (F32,
 * or BF16 when fp8 is 2: the same values), scaled so that either has a standard deviation about
 * 1/sqrt(cols). */
static void proj(ms_syn_list *l, const char *name, int64_t rows, int64_t cols, int fp8)
{
    int64_t sh[2] = {rows, cols};
    if (!fp8) {
        ms_syn_add(l, name, MS_DT_BF16, 2, sh, MS_SYN_UNIFORM, ms_syn_amp(cols));
        return;
    }
    ms_syn_add(l, name, MS_DT_F8_E4M3, 2, sh, MS_SYN_FP8, 0.0f);
    char sn[300];
    int64_t g[2] = {ms_fp8_blocks(rows), ms_fp8_blocks(cols)};
    snprintf(sn, sizeof sn, "%s_scale_inv", name);
    ms_syn_add(l, sn, fp8 == 2 ? MS_DT_BF16 : MS_DT_F32, 2, g, MS_SYN_POSITIVE, ms_syn_amp(cols) / 1.7f); /* E4M3 codes here: rms about 1 */
}

int ms_qwen3_synth(const char *dir, const char *name, int layers, int sparse, uint64_t seed)
{
    qw_shape s = {0};
    if (preset(name, &s) != 0) return -1;
    if (layers < 0 || layers > 1024) {
        ms_err_set("--layers %d: 1..1024", layers);
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    if (layers) s.n_layers = layers;
    if (s.dense >= s.n_layers) s.dense = 0;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        ms_err_set("cannot create %s: %s", dir, strerror(errno));
        return ms_err_set_code(MS_EXIT_IO);
    }
    if (write_config(dir, &s) != 0) return -1;
    ms_syn_list l = {NULL, 0, 0, ms_syn_mix(seed), 0};
    int64_t H = s.hidden, qd = (int64_t)s.n_heads * s.head_dim, kvd = (int64_t)s.n_kv * s.head_dim;
    char n[200];
    int64_t emb[2] = {s.vocab, H};
    ms_syn_add(&l, "model.embed_tokens.weight", MS_DT_BF16, 2, emb, MS_SYN_UNIFORM, 1.0f);
    for (int i = 0; i < s.n_layers; i++) {
        l.shard = s.n_shards > 1 ? (int)((int64_t)i * s.n_shards / s.n_layers) : 0;
#define NM(fmt) (snprintf(n, sizeof n, "model.layers.%d." fmt, i), n)
        vec(&l, NM("input_layernorm.weight"), H, MS_SYN_GAIN);
        proj(&l, NM("self_attn.q_proj.weight"), qd, H, s.fp8);
        proj(&l, NM("self_attn.k_proj.weight"), kvd, H, s.fp8);
        proj(&l, NM("self_attn.v_proj.weight"), kvd, H, s.fp8);
        proj(&l, NM("self_attn.o_proj.weight"), H, qd, s.fp8);
        vec(&l, NM("self_attn.q_norm.weight"), s.head_dim, MS_SYN_GAIN);
        vec(&l, NM("self_attn.k_norm.weight"), s.head_dim, MS_SYN_GAIN);
        vec(&l, NM("post_attention_layernorm.weight"), H, MS_SYN_GAIN);
        if (i < s.dense) {
            proj(&l, NM("mlp.gate_proj.weight"), s.inter, H, s.fp8);
            proj(&l, NM("mlp.up_proj.weight"), s.inter, H, s.fp8);
            proj(&l, NM("mlp.down_proj.weight"), H, s.inter, s.fp8);
            continue;
        }
        int64_t g[2] = {s.n_experts, H};
        ms_syn_add(&l, NM("mlp.gate.weight"), MS_DT_BF16, 2, g, MS_SYN_UNIFORM, ms_syn_amp(H));
#undef NM
        for (int e = 0; e < s.n_experts; e++) {
            static const char *const which[3] = {"gate_proj", "up_proj", "down_proj"};
            for (int k = 0; k < 3; k++) {
                snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%d.%s.weight", i, e, which[k]);
                proj(&l, n, k < 2 ? s.moe_inter : H, k < 2 ? H : s.moe_inter, s.fp8);
            }
        }
    }
    l.shard = s.n_shards - 1;
    vec(&l, "model.norm.weight", H, MS_SYN_GAIN);
    int64_t lm[2] = {s.vocab, H};
    ms_syn_add(&l, "lm_head.weight", MS_DT_BF16, 2, lm, MS_SYN_UNIFORM, ms_syn_amp(H));
    /* the release's shard names: one-based, "of" the count, five digits */
    ms_syn_files f = {s.n_shards, 1, 0, 5, sparse};
    int rc = ms_syn_write(dir, &l, &f);
    if (rc == 0) rc = ms_tok_write_synth_hf(dir, s.tok_ranks, qwen_split, added, 26);
    return rc;
}
