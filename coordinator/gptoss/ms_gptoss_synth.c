/* ms_gptoss_synth: deterministic random gpt-oss checkpoints in the Hugging Face release layout (config, shards + index, tokenizer.json). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "ms_err.h"
#include "ms_gptoss_model.h"
#include "ms_msynth.h"
#include "ms_tok.h"

typedef struct {
    int n_layers, hidden, inter, n_heads, n_kv, head_dim, n_experts, top_k, vocab, window, tok_ranks, n_shards;
} go_shape;

/* The 21 specials of o200k_harmony at ids tok_ranks.. (the release: 199998..200018). */
static const char *const specials[21] = {
    "<|startoftext|>",     "<|endoftext|>",       "<|reserved_200000|>", "<|reserved_200001|>", "<|return|>",
    "<|constrain|>",       "<|reserved_200004|>", "<|channel|>",         "<|start|>",           "<|end|>",
    "<|message|>",         "<|reserved_200009|>", "<|reserved_200010|>", "<|reserved_200011|>", "<|call|>",
    "<|reserved_200013|>", "<|reserved_200014|>", "<|reserved_200015|>", "<|reserved_200016|>", "<|reserved_200017|>",
    "<|endofprompt|>"};

/* tiktoken's o200k pre-tokenizer pattern, as the release's tokenizer.json carries it */
static const char o200k[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static int preset(const char *name, go_shape *s)
{
    if (!strcmp(name, "gpt-oss-tiny")) { /* a few MB; a window of 32 so short runs cross it */
        *s = (go_shape){4, 128, 128, 8, 2, 16, 8, 4, 512, 32, 491, 1};
        return 0;
    }
    if (!strcmp(name, "gpt-oss-20b")) { /* the released widths and depth: 13 GiB of random weights */
        *s = (go_shape){24, 2880, 2880, 64, 8, 64, 32, 4, 201088, 128, 199998, 3};
        return 0;
    }
    if (!strcmp(name, "gpt-oss-120b")) { /* 61 GiB: with --sparse, the layout as holes */
        *s = (go_shape){36, 2880, 2880, 64, 8, 64, 128, 4, 201088, 128, 199998, 15};
        return 0;
    }
    ms_err_set("unknown gpt-oss synth preset '%s' (known: gpt-oss-tiny, gpt-oss-20b, gpt-oss-120b)", name);
    return ms_err_set_code(MS_EXIT_USAGE);
}

static int write_config(const char *dir, const go_shape *s)
{
    json_t *lt = json_array();
    for (int i = 0; i < s->n_layers; i++) json_array_append_new(lt, json_string(i % 2 ? "full_attention" : "sliding_attention"));
    json_t *q = json_pack("{s:[s,s,s,s],s:s}", "modules_to_not_convert", "model.layers.*.self_attn",
                          "model.layers.*.mlp.router", "model.embed_tokens", "lm_head", "quant_method", "mxfp4");
    json_t *rs = json_pack("{s:f,s:f,s:f,s:i,s:s,s:b}", "beta_fast", 32.0, "beta_slow", 1.0, "factor", 32.0,
                           "original_max_position_embeddings", 4096, "rope_type", "yarn", "truncate", 0);
    json_t *c = json_object();
    json_object_set_new(c, "architectures", json_pack("[s]", "GptOssForCausalLM"));
    json_object_set_new(c, "attention_bias", json_true());
    json_object_set_new(c, "attention_dropout", json_real(0.0));
    json_object_set_new(c, "eos_token_id", json_integer(s->tok_ranks + 4)); /* <|return|> */
    json_object_set_new(c, "experts_per_token", json_integer(s->top_k));
    json_object_set_new(c, "head_dim", json_integer(s->head_dim));
    json_object_set_new(c, "hidden_act", json_string("silu"));
    json_object_set_new(c, "hidden_size", json_integer(s->hidden));
    json_object_set_new(c, "initial_context_length", json_integer(4096));
    json_object_set_new(c, "initializer_range", json_real(0.02));
    json_object_set_new(c, "intermediate_size", json_integer(s->inter));
    json_object_set_new(c, "layer_types", lt);
    json_object_set_new(c, "max_position_embeddings", json_integer(131072));
    json_object_set_new(c, "model_type", json_string("gpt_oss"));
    json_object_set_new(c, "num_attention_heads", json_integer(s->n_heads));
    json_object_set_new(c, "num_experts_per_tok", json_integer(s->top_k));
    json_object_set_new(c, "num_hidden_layers", json_integer(s->n_layers));
    json_object_set_new(c, "num_key_value_heads", json_integer(s->n_kv));
    json_object_set_new(c, "num_local_experts", json_integer(s->n_experts));
    json_object_set_new(c, "output_router_logits", json_false());
    json_object_set_new(c, "pad_token_id", json_integer(s->tok_ranks + 1)); /* <|endoftext|> */
    json_object_set_new(c, "quantization_config", q);
    json_object_set_new(c, "rms_norm_eps", json_real(1e-5));
    json_object_set_new(c, "rope_scaling", rs);
    json_object_set_new(c, "rope_theta", json_integer(150000));
    json_object_set_new(c, "router_aux_loss_coef", json_real(0.9));
    json_object_set_new(c, "sliding_window", json_integer(s->window));
    json_object_set_new(c, "swiglu_limit", json_real(7.0));
    json_object_set_new(c, "tie_word_embeddings", json_false());
    json_object_set_new(c, "transformers_version", json_string("4.55.0.dev0"));
    json_object_set_new(c, "use_cache", json_true());
    json_object_set_new(c, "vocab_size", json_integer(s->vocab));
    return ms_syn_write_config(dir, c, 0);
}

static void mat(ms_syn_list *l, const char *name, int64_t rows, int64_t cols)
{
    int64_t sh[2] = {rows, cols};
    ms_syn_add(l, name, MS_DT_BF16, 2, sh, MS_SYN_UNIFORM, ms_syn_amp(cols));
}

static void vec(ms_syn_list *l, const char *name, int64_t n, ms_syn_kind k, float amp)
{
    int64_t sh[1] = {n};
    ms_syn_add(l, name, MS_DT_BF16, 1, sh, k, amp);
}

/* One layer's experts: [E, rows, cols/32, 16] blocks, [E, rows, cols/32] scales, [E, rows] bias. */
static void experts(ms_syn_list *l, int layer, const char *which, int64_t E, int64_t rows, int64_t cols)
{
    char n[200];
    int64_t b[4] = {E, rows, cols / 32, 16}, s[3] = {E, rows, cols / 32}, bias[2] = {E, rows};
    snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%s_blocks", layer, which);
    ms_syn_add(l, n, MS_DT_U8, 4, b, MS_SYN_PACKED, 0);
    snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%s_scales", layer, which);
    ms_syn_add(l, n, MS_DT_U8, 3, s, MS_SYN_SCALE, ms_syn_scale_byte(cols));
    snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%s_bias", layer, which);
    ms_syn_add(l, n, MS_DT_BF16, 2, bias, MS_SYN_UNIFORM, 0.02f);
}

int ms_gptoss_synth(const char *dir, const char *name, int layers, int sparse, uint64_t seed)
{
    go_shape s = {0};
    if (preset(name, &s) != 0) return -1;
    if (layers < 0 || layers > 1024) {
        ms_err_set("--layers %d: 1..1024", layers);
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    if (layers) s.n_layers = layers;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        ms_err_set("cannot create %s: %s", dir, strerror(errno));
        return ms_err_set_code(MS_EXIT_IO);
    }
    if (write_config(dir, &s) != 0) return -1;
    ms_syn_list l = {NULL, 0, 0, ms_syn_mix(seed), 0};
    int64_t H = s.hidden, I = s.inter, qd = (int64_t)s.n_heads * s.head_dim, kvd = (int64_t)s.n_kv * s.head_dim;
    char n[200];
    for (int i = 0; i < s.n_layers; i++) {
        l.shard = s.n_shards > 1 ? (int)((int64_t)i * (s.n_shards - 1) / s.n_layers) : 0;
#define NM(fmt) (snprintf(n, sizeof n, "model.layers.%d." fmt, i), n)
        vec(&l, NM("input_layernorm.weight"), H, MS_SYN_GAIN, 0);
        mat(&l, NM("self_attn.q_proj.weight"), qd, H);
        vec(&l, NM("self_attn.q_proj.bias"), qd, MS_SYN_UNIFORM, 0.02f);
        mat(&l, NM("self_attn.k_proj.weight"), kvd, H);
        vec(&l, NM("self_attn.k_proj.bias"), kvd, MS_SYN_UNIFORM, 0.02f);
        mat(&l, NM("self_attn.v_proj.weight"), kvd, H);
        vec(&l, NM("self_attn.v_proj.bias"), kvd, MS_SYN_UNIFORM, 0.02f);
        mat(&l, NM("self_attn.o_proj.weight"), H, qd);
        vec(&l, NM("self_attn.o_proj.bias"), H, MS_SYN_UNIFORM, 0.02f);
        vec(&l, NM("self_attn.sinks"), s.n_heads, MS_SYN_UNIFORM, 1.0f);
        vec(&l, NM("post_attention_layernorm.weight"), H, MS_SYN_GAIN, 0);
        mat(&l, NM("mlp.router.weight"), s.n_experts, H);
        vec(&l, NM("mlp.router.bias"), s.n_experts, MS_SYN_UNIFORM, 0.02f);
#undef NM
        experts(&l, i, "gate_up_proj", s.n_experts, 2 * I, H);
        experts(&l, i, "down_proj", s.n_experts, H, I);
    }
    l.shard = s.n_shards - 1;
    int64_t emb[2] = {s.vocab, H};
    ms_syn_add(&l, "model.embed_tokens.weight", MS_DT_BF16, 2, emb, MS_SYN_UNIFORM, 1.0f);
    vec(&l, "model.norm.weight", H, MS_SYN_GAIN, 0);
    mat(&l, "lm_head.weight", s.vocab, H);
    /* the release's shard names: zero-based, "of" the last index, five digits */
    ms_syn_files f = {s.n_shards, 0, -1, 5, sparse};
    int rc = ms_syn_write(dir, &l, &f);
    if (rc == 0) rc = ms_tok_write_synth_hf(dir, s.tok_ranks, o200k, specials, 21);
    return rc;
}
