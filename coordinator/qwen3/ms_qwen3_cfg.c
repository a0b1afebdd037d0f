/* ms_qwen3_cfg: strict reader of Qwen3-MoE's released config.json: the math's fields, the layer kinds, RoPE, the FP8 quantization. */
#include <limits.h>
#include <stddef.h>
#include <string.h>

#include "ms_err.h"
#include "ms_jcfg.h"
#include "ms_qwen3_cfg.h"
#include "ms_qwen3_experts.h"
#include "ms_xfp8.h"

#define P 1 /* counts and widths are positive */
#define F(n, a, t, m, lo, hi) {n, a, t, 0, 0, offsetof(ms_qwen3_cfg, m), lo, hi, NULL}
static const ms_jfield fields[] = {
    F("num_hidden_layers", NULL, MS_JF_INT, n_layers, P, 1024),
    F("hidden_size", NULL, MS_JF_INT, hidden, P, 1 << 16),
    F("intermediate_size", NULL, MS_JF_INT, inter, P, 1 << 18),
    F("moe_intermediate_size", NULL, MS_JF_INT, moe_inter, P, 1 << 18),
    F("num_attention_heads", NULL, MS_JF_INT, n_heads, P, 1024),
    F("num_key_value_heads", NULL, MS_JF_INT, n_kv, P, 1024),
    F("head_dim", NULL, MS_JF_INT, head_dim, P, 4096),
    F("num_experts", "num_local_experts", MS_JF_INT, n_experts, P, 16384),
    F("num_experts_per_tok", NULL, MS_JF_INT, top_k, P, 64),
    F("decoder_sparse_step", NULL, MS_JF_INT, sparse_step, P, 1024),
    F("vocab_size", NULL, MS_JF_INT, vocab, P, 1 << 22),
    F("rms_norm_eps", NULL, MS_JF_FLOAT, eps, 0, 0),
    F("max_position_embeddings", NULL, MS_JF_INT, max_positions, P, INT_MAX),
    F("bos_token_id", NULL, MS_JF_INT, bos_id, 0, INT_MAX),
    F("eos_token_id", NULL, MS_JF_INT, eos_id, 0, INT_MAX),
};
#undef F
#undef P

/* A field whose only value the math has (anything else is refused, never ignored). */
static void want_false(ms_jcfg *j, json_t *root, const char *key, const char *why)
{
    int b = 0;
    json_t *v = json_object_get(root, key);
    if (v && (ms_jcfg_as_bool(v, &b) != 0 || b)) ms_jcfg_problem(j, "%s must be false (%s)", key, why);
}

/* rope_theta, or newer re-saves' rope_parameters {rope_theta, rope_type: "default"}; no scaling. */
static void read_rope(ms_jcfg *j, json_t *root, ms_qwen3_cfg *c, unsigned char *valid)
{
    json_t *rp = json_object_get(root, "rope_parameters"), *t = json_object_get(root, "rope_theta");
    const char *label = "rope_theta";
    if (!t && json_is_object(rp)) {
        const char *ty = json_string_value(json_object_get(rp, "rope_type"));
        if (ty && strcmp(ty, "default"))
            ms_jcfg_problem(j, "rope_parameters.rope_type is \"%s\"; only \"default\" RoPE is read", ty);
        t = json_object_get(rp, "rope_theta");
        label = "rope_parameters.rope_theta";
    }
    if (!t)
        ms_jcfg_missing(j, "rope_theta (or rope_parameters.rope_theta)");
    else if (ms_jcfg_as_float(t, &c->rope_theta) != 0 || !(c->rope_theta > 1))
        ms_jcfg_problem(j, "%s must be a number > 1", label);
    else
        valid[offsetof(ms_qwen3_cfg, rope_theta)] = 1;
    json_t *rs = json_object_get(root, "rope_scaling");
    if (rs && !json_is_null(rs))
        ms_jcfg_problem(j, "rope_scaling must be null (the releases' RoPE; YaRN set by editing it is not read)");
}

static int from_jcfg(ms_jcfg *j, ms_qwen3_cfg *c)
{
    json_t *root = ms_jcfg_root(j);
    ms_jscope sc = {{root}, {""}, 1, 0, "", 1};
    unsigned char valid[sizeof *c];
    memset(valid, 0, sizeof valid);
    ms_jcfg_fields(j, fields, sizeof fields / sizeof fields[0], &sc, c, valid);
#define VALID(m) valid[offsetof(ms_qwen3_cfg, m)]
    ms_jcfg_read_bool(j, root, "norm_topk_prob", &c->norm_topk);
    ms_jcfg_read_bool(j, root, "tie_word_embeddings", &c->tied);
    read_rope(j, root, c, valid);
    want_false(j, root, "attention_bias", "Qwen3-MoE has no biases");
    want_false(j, root, "use_sliding_window", "every release attends to all positions");
    const char *act = json_string_value(json_object_get(root, "hidden_act"));
    if (!json_object_get(root, "hidden_act"))
        ms_jcfg_missing(j, "hidden_act");
    else if (!act || strcmp(act, "silu"))
        ms_jcfg_problem(j, "hidden_act must be \"silu\"");
    if (VALID(top_k) && VALID(n_experts) && c->top_k > c->n_experts)
        ms_jcfg_problem(j, "num_experts_per_tok = %d exceeds num_experts = %d", c->top_k, c->n_experts);
    if (VALID(n_heads) && VALID(n_kv) && c->n_heads % c->n_kv)
        ms_jcfg_problem(j, "num_attention_heads = %d is not a multiple of num_key_value_heads = %d", c->n_heads, c->n_kv);
    if (VALID(head_dim) && c->head_dim % 2) ms_jcfg_problem(j, "head_dim = %d is odd (RoPE rotates pairs)", c->head_dim);
    if (VALID(eps) && !(c->eps > 0)) ms_jcfg_problem(j, "rms_norm_eps must be > 0, got %g", c->eps);
    if (VALID(vocab) && VALID(eos_id) && c->eos_id >= c->vocab) ms_jcfg_problem(j, "eos_token_id must be an id of the vocabulary");
    if (VALID(vocab) && VALID(bos_id) && c->bos_id >= c->vocab) ms_jcfg_problem(j, "bos_token_id must be an id of the vocabulary");
    c->fp8 = ms_xfp8_config_enc(j, root) == MS_XENC_FP8;
    /* the layer kinds: the experts' row reads the same fields (dense layers first, then MoE) */
    if (VALID(n_layers) && VALID(n_experts) && VALID(sparse_step) && ms_jcfg_n_problems(j) == 0) {
        ms_xmodel xm;
        memset(&xm, 0, sizeof xm);
        if (ms_qwen3_experts.describe(j, &xm) == 0) c->first_moe = xm.first_moe;
    }
#undef VALID
    if (ms_jcfg_finish(j) != 0) {
        memset(c, 0, sizeof *c);
        return -1;
    }
    return 0;
}

int ms_qwen3_cfg_load(const char *path, ms_qwen3_cfg *c)
{
    memset(c, 0, sizeof *c);
    ms_jcfg *j = ms_jcfg_load(path, 16u << 20);
    if (!j) return -1;
    int rc = from_jcfg(j, c);
    ms_jcfg_free(j);
    return rc;
}
