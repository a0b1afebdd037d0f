/* ms_k3_cfg: strict config.json reader for Kimi K3 (nested release shape and flat fixture shape). */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_jcfg.h"
#include "ms_k3_cfg.h"

/* Field table: name, flat alias, type, scope (1: linear_attn_config in the nested shape),
 * optional (bools: absent = true), field, [min, max] (INT_MIN / INT_MAX: checked below). */
#define F(n, a, t, k, o, m, lo, hi) {n, a, t, k, o, offsetof(ms_k3_cfg, m), lo, hi, NULL}
#define P 1 /* every count and width must be positive */
static const ms_jfield fields[] = {
    F("hidden_size", NULL, MS_JF_INT, 0, 0, hidden, P, 1 << 16),
    F("num_hidden_layers", NULL, MS_JF_INT, 0, 0, n_layers, P, MS_K3_CFG_MAX_LAYERS),
    F("vocab_size", NULL, MS_JF_INT, 0, 0, vocab, P, 1 << 22),
    F("rms_norm_eps", NULL, MS_JF_FLOAT, 0, 0, eps, 0, 0),
    F("num_heads", "kda_num_heads", MS_JF_INT, 1, 0, kda_heads, P, 1024),
    F("head_dim", "kda_head_dim", MS_JF_INT, 1, 0, kda_head_dim, P, 4096),
    F("short_conv_kernel_size", NULL, MS_JF_INT, 1, 0, conv_k, P, 64),
    F("gate_lower_bound", NULL, MS_JF_FLOAT, 1, 0, gate_lb, 0, 0),
    F("num_attention_heads", NULL, MS_JF_INT, 0, 0, mla_heads, P, 1024),
    {"q_lora_rank", NULL, MS_JF_INT, 0, 0, offsetof(ms_k3_cfg, q_lora), P, 1 << 16,
     "is null (a direct q_proj without a low-rank query is not supported; Kimi K3 uses q_lora_rank = 1536)"},
    F("kv_lora_rank", NULL, MS_JF_INT, 0, 0, kv_lora, P, 1 << 16),
    F("qk_nope_head_dim", NULL, MS_JF_INT, 0, 0, qk_nope, P, 4096),
    F("qk_rope_head_dim", NULL, MS_JF_INT, 0, 0, qk_rope, P, 4096),
    F("v_head_dim", NULL, MS_JF_INT, 0, 0, v_head, P, 4096),
    F("mla_use_output_gate", NULL, MS_JF_BOOL, 0, 1, mla_out_gate, 0, 0),
    F("num_experts", NULL, MS_JF_INT, 0, 0, n_experts, P, MS_K3_CFG_MAX_EXPERTS),
    F("num_experts_per_token", NULL, MS_JF_INT, 0, 0, top_k, P, INT_MAX),
    F("num_shared_experts", NULL, MS_JF_INT, 0, 0, n_shared, P, 64),
    F("routed_expert_hidden_size", NULL, MS_JF_INT, 0, 0, latent, P, 1 << 18),
    F("moe_intermediate_size", NULL, MS_JF_INT, 0, 0, moe_inter, P, 1 << 18),
    F("routed_scaling_factor", NULL, MS_JF_FLOAT, 0, 0, routed_scale, 0, 0),
    F("moe_renormalize", NULL, MS_JF_BOOL, 0, 1, renorm, 0, 0),
    F("latent_moe_use_norm", NULL, MS_JF_BOOL, 0, 1, latent_norm, 0, 0),
    F("first_k_dense_replace", NULL, MS_JF_INT, 0, 0, first_dense, INT_MIN, MS_K3_CFG_MAX_LAYERS),
    F("intermediate_size", NULL, MS_JF_INT, 0, 0, dense_inter, P, 1 << 18),
    F("attn_res_block_size", NULL, MS_JF_INT, 0, 0, attn_res_block, P, MS_K3_CFG_MAX_LAYERS),
    F("activation_situ_beta", "situ_beta", MS_JF_FLOAT, 0, 0, situ_b1, 0, 0),
    F("activation_situ_linear_beta", "situ_linear_beta", MS_JF_FLOAT, 0, 0, situ_b2, 0, 0),
};
#undef P
#undef F
#define NFIELDS (sizeof fields / sizeof fields[0])

/* Where K3 keys are: in the nested (released) shape, KDA keys come from linear_attn_config
 * alone (a same-named text_config key such as head_dim must not shadow it, trap 5), others
 * from text_config, then linear_attn_config, then the root; in the flat shape from
 * linear_attn_config when there is one, then the root, preferring the KDA-specific spelling
 * (kda_head_dim) when there is no such block. Scope 0: other keys, 1: KDA keys. */
static void scopes_of(json_t *root, json_t *tc, json_t *lac, ms_jscope sc[2])
{
    memset(sc, 0, 2 * sizeof *sc);
    const char *lab = tc ? "text_config.linear_attn_config." : "linear_attn_config.";
    if (tc) {
        sc[0] = (ms_jscope){{tc, lac, root}, {"text_config.", lab, ""}, 3, 0, "text_config.", 1};
        sc[1] = (ms_jscope){{lac}, {lab}, 1, 0, "text_config.linear_attn_config.", 0};
    } else {
        sc[0] = (ms_jscope){{lac, root}, {lab, ""}, 2, 0, "", 2};
        if (lac)
            sc[1] = (ms_jscope){{lac}, {lab}, 1, 0, "", 2};
        else
            sc[1] = (ms_jscope){{root}, {""}, 1, 1, "", 2};
    }
}

/* The K3 config from a parsed config.json: every field, then the checks that relate them. */
static int from_jcfg(ms_jcfg *j, ms_k3_cfg *cfg)
{
    json_t *root = ms_jcfg_root(j);
    char label[256];
    json_t *tc = ms_jcfg_object(j, root, "text_config", "text_config");
    if (tc) cfg->nested = 1;
    json_t *lac = ms_jcfg_object(j, tc ? tc : root, "linear_attn_config",
                                 tc ? "text_config.linear_attn_config" : "linear_attn_config");
    ms_jscope sc[2];
    scopes_of(root, tc, lac, sc);

    /* valid[offsetof(ms_k3_cfg, f)] marks fields that were read successfully. */
    unsigned char valid[sizeof(ms_k3_cfg)];
    memset(valid, 0, sizeof valid);
#define VALID(m) valid[offsetof(ms_k3_cfg, m)]
    ms_jcfg_fields(j, fields, NFIELDS, sc, cfg, valid);

    if (VALID(n_layers) && VALID(n_experts) && (int64_t)cfg->n_layers * cfg->n_experts > MS_K3_CFG_MAX_LAYER_EXPERTS)
        ms_jcfg_problem(j, "num_hidden_layers x num_experts = %d x %d is beyond the supported maximum of %d",
                        cfg->n_layers, cfg->n_experts, MS_K3_CFG_MAX_LAYER_EXPERTS);
    if (VALID(eps) && !(cfg->eps > 0)) ms_jcfg_problem(j, "rms_norm_eps must be > 0, got %g", cfg->eps);
    if (VALID(routed_scale) && !(cfg->routed_scale > 0))
        ms_jcfg_problem(j, "routed_scaling_factor must be > 0, got %g", cfg->routed_scale);
    if (VALID(situ_b1) && !(cfg->situ_b1 > 0))
        ms_jcfg_problem(j, "%s must be > 0, got %g", tc ? "activation_situ_beta" : "situ_beta", cfg->situ_b1);
    if (VALID(situ_b2) && !(cfg->situ_b2 > 0))
        ms_jcfg_problem(j, "%s must be > 0, got %g", tc ? "activation_situ_linear_beta" : "situ_linear_beta",
                        cfg->situ_b2);
    if (VALID(top_k)) {
        if (VALID(n_experts) && cfg->top_k > cfg->n_experts)
            ms_jcfg_problem(j, "num_experts_per_token = %d exceeds num_experts = %d", cfg->top_k, cfg->n_experts);
        if (cfg->top_k > MS_K3_CFG_MAX_TOPK)
            ms_jcfg_problem(j, "num_experts_per_token = %d exceeds the supported maximum of %d", cfg->top_k,
                            MS_K3_CFG_MAX_TOPK);
    }
    int N = VALID(n_layers) ? cfg->n_layers : 0;
    if (VALID(first_dense) && N > 0 && (cfg->first_dense < 0 || cfg->first_dense > N))
        ms_jcfg_problem(j, "first_k_dense_replace = %d is outside 0..%d", cfg->first_dense, N);
    else if (VALID(first_dense) && cfg->first_dense < 0)
        ms_jcfg_problem(j, "first_k_dense_replace = %d is negative", cfg->first_dense);
    /* AttnRes mixes one snapshot per block of layers (plus the running state): bounded, so that
     * a valid config never overruns the forward pass's source table mid-pass */
    if (VALID(attn_res_block) && cfg->attn_res_block > 0 && N > 0 &&
        (N - 1) / cfg->attn_res_block + 1 > MS_K3_CFG_MAX_SNAPSHOTS)
        ms_jcfg_problem(j,
                        "attn_res_block_size = %d makes %d AttnRes snapshots over %d layers, more than the supported "
                        "%d (use blocks of at least %d layers)",
                        cfg->attn_res_block, (N - 1) / cfg->attn_res_block + 1, N, MS_K3_CFG_MAX_SNAPSHOTS,
                        (N - 1) / MS_K3_CFG_MAX_SNAPSHOTS + 1);
#undef VALID

    /* The layer map. */
    int *fa = NULL, nfa = -1;
    json_t *v = ms_jcfg_find(&sc[1], "full_attn_layers", NULL, label, sizeof label);
    if (!v) {
        ms_jcfg_missing_name(&sc[1], "full_attn_layers", NULL, label, sizeof label);
        ms_jcfg_missing(j, "%s", label);
    } else {
        /* Empty is allowed: a model of KDA layers only (a one-layer slice of the release). */
        nfa = ms_jcfg_index_list(j, v, label, N, &fa);
        if (nfa > 0 && N > 0 && nfa >= N)
            ms_jcfg_problem(j, "%s lists %d layers: every one of the %d layers would be MLA", label, nfa, N);
    }
    v = ms_jcfg_find(&sc[1], "kda_layers", NULL, label, sizeof label);
    if (v) {
        int *kl = NULL;
        int nk = ms_jcfg_index_list(j, v, label, N, &kl);
        if (nk >= 0 && nfa >= 0 && N > 0) {
            /* kda_layers must be exactly the complement of full_attn_layers. */
            unsigned char *mark = ms_calloc((size_t)N + 1, 1);
            for (int i = 0; i < nfa; i++) mark[fa[i]] = 1;
            for (int i = 0; i < nk; i++) {
                if (mark[kl[i]] == 1) ms_jcfg_problem(j, "layer %d is in both full_attn_layers and %s", kl[i], label);
                mark[kl[i]] |= 2;
            }
            for (int l = 1; l <= N; l++)
                if (!mark[l]) ms_jcfg_problem(j, "layer %d is in neither full_attn_layers nor %s", l, label);
            free(mark);
        }
        free(kl);
    }
    if (ms_jcfg_finish(j) != 0) {
        free(fa);
        memset(cfg, 0, sizeof *cfg);
        return -1;
    }

    cfg->n_full_attn = nfa;
    cfg->full_attn = fa;
    cfg->is_mla = ms_calloc((size_t)N, 1);
    for (int i = 0; i < nfa; i++) cfg->is_mla[fa[i] - 1] = 1; /* one-based list, zero-based layers */

    /* Optional token ids: integers only, else -1. */
    cfg->bos_id = cfg->eos_id = -1;
    const char *ids[2] = {"bos_token_id", "eos_token_id"};
    int *dst[2] = {&cfg->bos_id, &cfg->eos_id};
    for (int k = 0; k < 2; k++) {
        json_t *t = tc ? json_object_get(tc, ids[k]) : NULL;
        if (!t) t = json_object_get(root, ids[k]);
        int x;
        if (t && json_is_integer(t) && ms_jcfg_as_int(t, &x) == 0 && x >= 0) *dst[k] = x;
    }
    return 0;
}

int ms_k3_cfg_parse(const char *json_text, const char *what, ms_k3_cfg *cfg)
{
    MS_ASSERT(json_text && cfg);
    memset(cfg, 0, sizeof *cfg);
    ms_jcfg *j = ms_jcfg_parse(json_text, what);
    if (!j) return -1;
    int rc = from_jcfg(j, cfg);
    ms_jcfg_free(j);
    return rc;
}

int ms_k3_cfg_load(const char *path, ms_k3_cfg *cfg)
{
    MS_ASSERT(path && cfg);
    memset(cfg, 0, sizeof *cfg);
    ms_jcfg *j = ms_jcfg_load(path, MS_K3_CFG_MAX_BYTES);
    if (!j) return -1;
    int rc = from_jcfg(j, cfg);
    ms_jcfg_free(j);
    return rc;
}

void ms_k3_cfg_free(ms_k3_cfg *cfg)
{
    if (!cfg) return;
    free(cfg->full_attn);
    free(cfg->is_mla);
    cfg->full_attn = NULL;
    cfg->is_mla = NULL;
    cfg->n_full_attn = 0;
}
