/* ms_dsv3_cfg: strict reader of DeepSeek-V3's and Kimi K2's released config.json: MLA, the routers, YaRN, the FP8 quantization. */
#include <limits.h>
#include <stddef.h>
#include <string.h>

#include "ms_dsv3_cfg.h"
#include "ms_err.h"
#include "ms_jcfg.h"
#include "ms_xfp8.h"

#define P 1
#define F(n, t, m, lo, hi) {n, NULL, t, 0, 0, offsetof(ms_dsv3_cfg, m), lo, hi, NULL}
static const ms_jfield fields[] = {
    F("num_hidden_layers", MS_JF_INT, n_layers, P, 1024),
    F("first_k_dense_replace", MS_JF_INT, n_dense, 0, 1024),
    F("hidden_size", MS_JF_INT, hidden, P, 1 << 16),
    F("intermediate_size", MS_JF_INT, inter, P, 1 << 18),
    F("moe_intermediate_size", MS_JF_INT, moe_inter, P, 1 << 18),
    F("num_attention_heads", MS_JF_INT, n_heads, P, 1024),
    F("kv_lora_rank", MS_JF_INT, kv_lora, P, 1 << 16),
    F("qk_nope_head_dim", MS_JF_INT, qk_nope, P, 4096),
    F("qk_rope_head_dim", MS_JF_INT, qk_rope, P, 4096),
    F("v_head_dim", MS_JF_INT, v_head, P, 4096),
    F("n_routed_experts", MS_JF_INT, n_experts, P, 16384),
    F("num_experts_per_tok", MS_JF_INT, top_k, P, 64),
    F("n_shared_experts", MS_JF_INT, n_shared, 0, 64),
    F("n_group", MS_JF_INT, n_group, P, 1024),
    F("topk_group", MS_JF_INT, topk_group, P, 1024),
    F("routed_scaling_factor", MS_JF_FLOAT, routed_scale, 0, 0),
    F("rms_norm_eps", MS_JF_FLOAT, eps, 0, 0),
    F("rope_theta", MS_JF_FLOAT, rope_theta, 0, 0),
    F("vocab_size", MS_JF_INT, vocab, P, 1 << 22),
    F("max_position_embeddings", MS_JF_INT, max_positions, P, INT_MAX),
    F("num_nextn_predict_layers", MS_JF_INT, n_mtp, 0, 8),
    F("bos_token_id", MS_JF_INT, bos_id, 0, INT_MAX),
    F("eos_token_id", MS_JF_INT, eos_id, 0, INT_MAX),
};
static const ms_jfield yarn_fields[] = {
    F("factor", MS_JF_FLOAT, yarn_factor, 0, 0),
    F("beta_fast", MS_JF_FLOAT, yarn_beta_fast, 0, 0),
    F("beta_slow", MS_JF_FLOAT, yarn_beta_slow, 0, 0),
    F("mscale_all_dim", MS_JF_FLOAT, yarn_mscale, 0, 0),
    F("original_max_position_embeddings", MS_JF_INT, yarn_orig_ctx, P, INT_MAX),
};
#undef F
#undef P

static void read_yarn(ms_jcfg *j, json_t *root, ms_dsv3_cfg *c, unsigned char *valid)
{
    json_t *rs = ms_jcfg_object(j, root, "rope_scaling", "rope_scaling");
    if (!json_object_get(root, "rope_scaling")) ms_jcfg_missing(j, "rope_scaling");
    if (!rs) return;
    ms_jscope ys = {{rs}, {"rope_scaling."}, 1, 0, "rope_scaling.", 0};
    ms_jcfg_fields(j, yarn_fields, sizeof yarn_fields / sizeof yarn_fields[0], &ys, c, valid);
    json_t *ty = json_object_get(rs, "type");
    if (!ty) ty = json_object_get(rs, "rope_type");
    if (!json_is_string(ty) || strcmp(json_string_value(ty), "yarn"))
        ms_jcfg_problem(j, "rope_scaling.type must be \"yarn\"");
    float ms;
    json_t *m = json_object_get(rs, "mscale");
    if (!m)
        ms_jcfg_missing(j, "rope_scaling.mscale");
    else if (ms_jcfg_as_float(m, &ms) != 0 || (valid[offsetof(ms_dsv3_cfg, yarn_mscale)] && ms != c->yarn_mscale))
        ms_jcfg_problem(j, "rope_scaling.mscale must equal mscale_all_dim (%g): cos and sin would be scaled otherwise",
                        c->yarn_mscale);
    if (valid[offsetof(ms_dsv3_cfg, yarn_factor)] && !(c->yarn_factor >= 1))
        ms_jcfg_problem(j, "rope_scaling.factor must be >= 1, got %g", c->yarn_factor);
}

static int from_jcfg(ms_jcfg *j, ms_dsv3_cfg *c)
{
    json_t *root = ms_jcfg_root(j);
    ms_jscope sc = {{root}, {""}, 1, 0, "", 0};
    unsigned char valid[sizeof *c];
    memset(valid, 0, sizeof valid);
    ms_jcfg_fields(j, fields, sizeof fields / sizeof fields[0], &sc, c, valid);
#define VALID(m) valid[offsetof(ms_dsv3_cfg, m)]
    const char *mt = json_string_value(json_object_get(root, "model_type"));
    c->kimi = mt && !strcmp(mt, "kimi_k2");
    json_t *ql = json_object_get(root, "q_lora_rank");
    if (!ql)
        ms_jcfg_missing(j, "q_lora_rank");
    else if (json_is_null(ql))
        ms_jcfg_problem(j, "q_lora_rank is null (a plain q_proj, as DeepSeek-V2-Lite): not read");
    else if (ms_jcfg_as_int(ql, &c->q_lora) != 0 || c->q_lora < 1)
        ms_jcfg_problem(j, "q_lora_rank must be a positive integer");
    int freq;
    json_t *mf = json_object_get(root, "moe_layer_freq");
    if (!mf)
        ms_jcfg_missing(j, "moe_layer_freq");
    else if (ms_jcfg_as_int(mf, &freq) != 0 || freq != 1)
        ms_jcfg_problem(j, "moe_layer_freq must be 1 (every layer from first_k_dense_replace routes)");
    ms_jcfg_want_string(j, root, "topk_method", "topk_method", "noaux_tc");
    ms_jcfg_want_string(j, root, "scoring_func", "scoring_func", "sigmoid");
    ms_jcfg_want_bool(j, root, "norm_topk_prob", "norm_topk_prob", 1, "the reference normalises the sigmoid weights");
    ms_jcfg_want_bool(j, root, "tie_word_embeddings", "tie_word_embeddings", 0, "the releases keep lm_head apart");
    read_yarn(j, root, c, valid);
    if (VALID(qk_rope) && c->qk_rope % 2) ms_jcfg_problem(j, "qk_rope_head_dim = %d is odd (RoPE turns pairs)", c->qk_rope);
    if (VALID(n_experts) && VALID(n_group) && c->n_experts % c->n_group)
        ms_jcfg_problem(j, "n_routed_experts = %d is not a multiple of n_group = %d", c->n_experts, c->n_group);
    else if (VALID(n_experts) && VALID(n_group) && c->n_group > 1 && c->n_experts / c->n_group < 2)
        ms_jcfg_problem(j, "n_group = %d leaves fewer than 2 experts a group (a group's score is its best two)", c->n_group);
    if (VALID(n_group) && VALID(topk_group) && c->topk_group > c->n_group)
        ms_jcfg_problem(j, "topk_group = %d exceeds n_group = %d", c->topk_group, c->n_group);
    if (VALID(n_group) && VALID(topk_group) && VALID(n_experts) && VALID(top_k) &&
        c->topk_group * (c->n_experts / c->n_group) < c->top_k)
        ms_jcfg_problem(j, "the kept groups hold fewer experts than num_experts_per_tok = %d", c->top_k);
    if (VALID(n_dense) && VALID(n_layers) && c->n_dense >= c->n_layers)
        ms_jcfg_problem(j, "first_k_dense_replace = %d leaves no MoE layer of %d", c->n_dense, c->n_layers);
    if (VALID(eps) && !(c->eps > 0)) ms_jcfg_problem(j, "rms_norm_eps must be > 0, got %g", c->eps);
    if (VALID(rope_theta) && !(c->rope_theta > 1)) ms_jcfg_problem(j, "rope_theta must be > 1, got %g", c->rope_theta);
    if (VALID(routed_scale) && !(c->routed_scale > 0))
        ms_jcfg_problem(j, "routed_scaling_factor must be > 0, got %g", c->routed_scale);
    if (VALID(vocab) && VALID(eos_id) && c->eos_id >= c->vocab) ms_jcfg_problem(j, "eos_token_id must be an id of the vocabulary");
    if (VALID(n_mtp) && c->n_mtp > 1) ms_jcfg_problem(j, "num_nextn_predict_layers = %d: one MTP layer is read", c->n_mtp);
    c->xenc = ms_xquant_config_enc(j, root);
#undef VALID
    if (ms_jcfg_finish(j) != 0) {
        memset(c, 0, sizeof *c);
        return -1;
    }
    return 0;
}

int ms_dsv3_cfg_load(const char *path, ms_dsv3_cfg *c)
{
    memset(c, 0, sizeof *c);
    ms_jcfg *j = ms_jcfg_load(path, 16u << 20);
    if (!j) return -1;
    int rc = from_jcfg(j, c);
    ms_jcfg_free(j);
    return rc;
}
