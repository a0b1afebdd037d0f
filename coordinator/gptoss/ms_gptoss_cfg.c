/* ms_gptoss_cfg: strict reader of gpt-oss's released config.json: every field of the math, the layer map, YaRN, the quantization. */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_gptoss_cfg.h"
#include "ms_jcfg.h"

#define P 1 /* counts and widths are positive */
#define F(n, t, m, lo, hi) {n, NULL, t, 0, 0, offsetof(ms_gptoss_cfg, m), lo, hi, NULL}
static const ms_jfield fields[] = {
    F("num_hidden_layers", MS_JF_INT, n_layers, P, 1024),
    F("hidden_size", MS_JF_INT, hidden, P, 1 << 16),
    F("intermediate_size", MS_JF_INT, inter, P, 1 << 18),
    F("num_attention_heads", MS_JF_INT, n_heads, P, 1024),
    F("num_key_value_heads", MS_JF_INT, n_kv, P, 1024),
    F("head_dim", MS_JF_INT, head_dim, P, 4096),
    F("num_local_experts", MS_JF_INT, n_experts, P, 16384),
    F("experts_per_token", MS_JF_INT, top_k, P, MS_GPTOSS_MAX_TOPK),
    F("vocab_size", MS_JF_INT, vocab, P, 1 << 22),
    F("rms_norm_eps", MS_JF_FLOAT, eps, 0, 0),
    F("sliding_window", MS_JF_INT, window, P, 1 << 24),
    F("rope_theta", MS_JF_FLOAT, rope_theta, 0, 0),
    F("swiglu_limit", MS_JF_FLOAT, swiglu_limit, 0, 0),
    F("initial_context_length", MS_JF_INT, yarn_orig_ctx, P, INT_MAX),
    F("max_position_embeddings", MS_JF_INT, max_positions, P, INT_MAX),
    F("pad_token_id", MS_JF_INT, pad_id, 0, INT_MAX),
};
/* rope_scaling's numbers */
static const ms_jfield yarn_fields[] = {
    {"factor", NULL, MS_JF_FLOAT, 0, 0, offsetof(ms_gptoss_cfg, yarn_factor), 0, 0, NULL},
    {"beta_fast", NULL, MS_JF_FLOAT, 0, 0, offsetof(ms_gptoss_cfg, yarn_beta_fast), 0, 0, NULL},
    {"beta_slow", NULL, MS_JF_FLOAT, 0, 0, offsetof(ms_gptoss_cfg, yarn_beta_slow), 0, 0, NULL},
};
#undef F
#undef P

static void read_layer_types(ms_jcfg *j, json_t *root, ms_gptoss_cfg *c, int n_layers)
{
    json_t *lt = json_object_get(root, "layer_types");
    if (!lt) {
        ms_jcfg_missing(j, "layer_types");
        return;
    }
    if (!json_is_array(lt)) {
        ms_jcfg_problem(j, "layer_types must be an array of \"sliding_attention\" / \"full_attention\"");
        return;
    }
    if (n_layers > 0 && json_array_size(lt) != (size_t)n_layers) {
        ms_jcfg_problem(j, "layer_types has %zu entries for num_hidden_layers = %d", json_array_size(lt), n_layers);
        return;
    }
    if (n_layers <= 0) return;
    c->sliding = ms_calloc((size_t)n_layers, 1);
    for (int i = 0; i < n_layers; i++) {
        const char *s = json_string_value(json_array_get(lt, (size_t)i));
        if (s && !strcmp(s, "sliding_attention"))
            c->sliding[i] = 1;
        else if (!s || strcmp(s, "full_attention"))
            ms_jcfg_problem(j, "layer_types[%d] must be \"sliding_attention\" or \"full_attention\"", i);
    }
}

static int from_jcfg(ms_jcfg *j, ms_gptoss_cfg *c)
{
    json_t *root = ms_jcfg_root(j);
    ms_jscope sc = {{root}, {""}, 1, 0, "", 0};
    unsigned char valid[sizeof *c];
    memset(valid, 0, sizeof valid);
    ms_jcfg_fields(j, fields, sizeof fields / sizeof fields[0], &sc, c, valid);
#define VALID(m) valid[offsetof(ms_gptoss_cfg, m)]
    /* experts_per_token and its alias num_experts_per_tok must agree when both are there */
    json_t *alias = json_object_get(root, "num_experts_per_tok");
    int k2;
    if (alias && (ms_jcfg_as_int(alias, &k2) != 0 || (VALID(top_k) && k2 != c->top_k)))
        ms_jcfg_problem(j, "num_experts_per_tok must equal experts_per_token (%d)", c->top_k);
    if (VALID(top_k) && VALID(n_experts) && c->top_k > c->n_experts)
        ms_jcfg_problem(j, "experts_per_token = %d exceeds num_local_experts = %d", c->top_k, c->n_experts);
    if (VALID(n_heads) && VALID(n_kv) && c->n_heads % c->n_kv)
        ms_jcfg_problem(j, "num_attention_heads = %d is not a multiple of num_key_value_heads = %d", c->n_heads, c->n_kv);
    if (VALID(head_dim) && c->head_dim % 2) ms_jcfg_problem(j, "head_dim = %d is odd (RoPE rotates pairs)", c->head_dim);
    if (VALID(hidden) && c->hidden % 32)
        ms_jcfg_problem(j, "hidden_size = %d is not a multiple of 32 (MXFP4 blocks)", c->hidden);
    if (VALID(inter) && c->inter % 32)
        ms_jcfg_problem(j, "intermediate_size = %d is not a multiple of 32 (MXFP4 blocks)", c->inter);
    if (VALID(eps) && !(c->eps > 0)) ms_jcfg_problem(j, "rms_norm_eps must be > 0, got %g", c->eps);
    if (VALID(rope_theta) && !(c->rope_theta > 1)) ms_jcfg_problem(j, "rope_theta must be > 1, got %g", c->rope_theta);
    if (VALID(swiglu_limit) && !(c->swiglu_limit > 0))
        ms_jcfg_problem(j, "swiglu_limit must be > 0, got %g", c->swiglu_limit);
    read_layer_types(j, root, c, VALID(n_layers) ? c->n_layers : 0);

    /* rope_scaling: YaRN as the reference computes it */
    json_t *rs = ms_jcfg_object(j, root, "rope_scaling", "rope_scaling");
    if (!json_object_get(root, "rope_scaling")) ms_jcfg_missing(j, "rope_scaling");
    if (rs) {
        ms_jscope ys = {{rs}, {"rope_scaling."}, 1, 0, "rope_scaling.", 0};
        ms_jcfg_fields(j, yarn_fields, sizeof yarn_fields / sizeof yarn_fields[0], &ys, c, valid);
        ms_jcfg_want_string(j, rs, "rope_type", "rope_scaling.rope_type", "yarn");
        ms_jcfg_want_bool(j, rs, "truncate", "rope_scaling.truncate", 0, "gpt-oss has no other");
        json_t *o = json_object_get(rs, "original_max_position_embeddings");
        int L0;
        if (!o)
            ms_jcfg_missing(j, "rope_scaling.original_max_position_embeddings");
        else if (ms_jcfg_as_int(o, &L0) != 0 || (VALID(yarn_orig_ctx) && L0 != c->yarn_orig_ctx))
            ms_jcfg_problem(j, "rope_scaling.original_max_position_embeddings must equal initial_context_length (%d)",
                            c->yarn_orig_ctx);
        if (VALID(yarn_factor) && !(c->yarn_factor > 1))
            ms_jcfg_problem(j, "rope_scaling.factor must be > 1, got %g", c->yarn_factor);
        if (VALID(yarn_beta_fast) && VALID(yarn_beta_slow) && !(c->yarn_beta_fast > c->yarn_beta_slow && c->yarn_beta_slow > 0))
            ms_jcfg_problem(j, "rope_scaling: beta_fast (%g) must be above beta_slow (%g) > 0", c->yarn_beta_fast,
                            c->yarn_beta_slow);
    }
    ms_jcfg_want_bool(j, root, "attention_bias", "attention_bias", 1, "gpt-oss has no other");
    ms_jcfg_want_bool(j, root, "tie_word_embeddings", "tie_word_embeddings", 0, "gpt-oss has no other");
    json_t *q = ms_jcfg_object(j, root, "quantization_config", "quantization_config");
    if (!json_object_get(root, "quantization_config")) ms_jcfg_missing(j, "quantization_config");
    if (q) ms_jcfg_want_string(j, q, "quant_method", "quantization_config.quant_method", "mxfp4");
    /* eos: an id or a list of ids (the first ends generation here; the list is the tokenizer's) */
    json_t *eos = json_object_get(root, "eos_token_id");
    c->eos_id = -1;
    if (!eos)
        ms_jcfg_missing(j, "eos_token_id");
    else if (json_is_array(eos) && json_array_size(eos) > 0)
        ms_jcfg_as_int(json_array_get(eos, 0), &c->eos_id);
    else
        ms_jcfg_as_int(eos, &c->eos_id);
    if (eos && (c->eos_id < 0 || (VALID(vocab) && c->eos_id >= c->vocab)))
        ms_jcfg_problem(j, "eos_token_id must be an id of the vocabulary");
#undef VALID
    if (ms_jcfg_finish(j) != 0) {
        ms_gptoss_cfg_free(c);
        memset(c, 0, sizeof *c);
        return -1;
    }
    return 0;
}

int ms_gptoss_cfg_load(const char *path, ms_gptoss_cfg *c)
{
    memset(c, 0, sizeof *c);
    ms_jcfg *j = ms_jcfg_load(path, 16u << 20);
    if (!j) return -1;
    int rc = from_jcfg(j, c);
    ms_jcfg_free(j);
    return rc;
}

void ms_gptoss_cfg_free(ms_gptoss_cfg *c)
{
    if (!c) return;
    free(c->sliding);
    c->sliding = NULL;
}
