/* ms_k3_tensors: Kimi K3's released tensor list (spec §4.3), the one place that spells it. */
#include <stddef.h>
#include <stdio.h>

#include "ms_err.h"
#include "ms_k3_tensors.h"
#include "ms_k3_experts.h"
#include "ms_k3_int.h"

#define LW(f) offsetof(ms_layer_w, f)
#define MW(f) offsetof(k3_model, f)
#define D(a, b, c) {MS_K3_D##a, MS_K3_D##b, MS_K3_D##c}

static const ms_k3_tensor table[] = {
    {"input_layernorm.weight", MS_K3_ALL, MS_K3_NORM, MS_DT_BF16, 1, D(E, 1, 1), LW(in_norm)},
    {"post_attention_layernorm.weight", MS_K3_ALL, MS_K3_NORM, MS_DT_BF16, 1, D(E, 1, 1), LW(post_norm)},
    {"self_attention_res_norm.weight", MS_K3_ALL, MS_K3_NORM, MS_DT_BF16, 1, D(E, 1, 1), LW(sa_norm)},
    {"self_attention_res_proj.weight", MS_K3_ALL, MS_K3_RESPROJ, MS_DT_BF16, 2, D(1, E, 1), LW(sa_proj)},
    {"mlp_res_norm.weight", MS_K3_ALL, MS_K3_NORM, MS_DT_BF16, 1, D(E, 1, 1), LW(mlp_norm)},
    {"mlp_res_proj.weight", MS_K3_ALL, MS_K3_RESPROJ, MS_DT_BF16, 2, D(1, E, 1), LW(mlp_proj)},
    /* KDA (spec §3.5) */
    {"self_attn.q_proj.weight", MS_K3_KDA, MS_K3_MAT, MS_DT_BF16, 2, D(P, E, 1), LW(kda.q)},
    {"self_attn.k_proj.weight", MS_K3_KDA, MS_K3_MAT, MS_DT_BF16, 2, D(P, E, 1), LW(kda.k)},
    {"self_attn.v_proj.weight", MS_K3_KDA, MS_K3_MAT, MS_DT_BF16, 2, D(P, E, 1), LW(kda.v)},
    {"self_attn.g_proj.weight", MS_K3_KDA, MS_K3_MAT, MS_DT_BF16, 2, D(P, E, 1), LW(kda.g)},
    {"self_attn.o_proj.weight", MS_K3_KDA, MS_K3_MAT, MS_DT_BF16, 2, D(E, P, 1), LW(kda.o)},
    {"self_attn.q_conv1d.weight", MS_K3_KDA, MS_K3_CONV, MS_DT_F32, 3, D(P, 1, K), LW(kda.q_conv)},
    {"self_attn.k_conv1d.weight", MS_K3_KDA, MS_K3_CONV, MS_DT_F32, 3, D(P, 1, K), LW(kda.k_conv)},
    {"self_attn.v_conv1d.weight", MS_K3_KDA, MS_K3_CONV, MS_DT_F32, 3, D(P, 1, K), LW(kda.v_conv)},
    {"self_attn.f_a_proj.weight", MS_K3_KDA, MS_K3_MAT, MS_DT_BF16, 2, D(D, E, 1), LW(kda.fa)},
    {"self_attn.f_b_proj.weight", MS_K3_KDA, MS_K3_MAT, MS_DT_BF16, 2, D(P, D, 1), LW(kda.fb)},
    {"self_attn.b_proj.weight", MS_K3_KDA, MS_K3_MAT, MS_DT_BF16, 2, D(HK, E, 1), LW(kda.b)},
    {"self_attn.A_log", MS_K3_KDA, MS_K3_ALOG, MS_DT_F32, 1, D(NA, 1, 1), LW(kda.A_log)},
    {"self_attn.dt_bias", MS_K3_KDA, MS_K3_DTBIAS, MS_DT_F32, 1, D(P, 1, 1), LW(kda.dt_bias)},
    {"self_attn.o_norm.weight", MS_K3_KDA, MS_K3_NORM, MS_DT_F32, 1, D(D, 1, 1), LW(kda.o_norm)},
    /* MLA (spec §3.6) */
    {"self_attn.q_a_proj.weight", MS_K3_MLA, MS_K3_MAT, MS_DT_BF16, 2, D(RQ, E, 1), LW(mla.qa)},
    {"self_attn.q_a_layernorm.weight", MS_K3_MLA, MS_K3_NORM, MS_DT_BF16, 1, D(RQ, 1, 1), LW(mla.qa_norm)},
    {"self_attn.q_b_proj.weight", MS_K3_MLA, MS_K3_MAT, MS_DT_BF16, 2, D(QB, RQ, 1), LW(mla.qb)},
    {"self_attn.kv_a_proj_with_mqa.weight", MS_K3_MLA, MS_K3_MAT, MS_DT_BF16, 2, D(KVA, E, 1), LW(mla.kva)},
    {"self_attn.kv_a_layernorm.weight", MS_K3_MLA, MS_K3_NORM, MS_DT_BF16, 1, D(RKV, 1, 1), LW(mla.kva_norm)},
    {"self_attn.kv_b_proj.weight", MS_K3_MLA, MS_K3_MAT, MS_DT_BF16, 2, D(KVB, RKV, 1), LW(mla.kvb)},
    {"self_attn.o_proj.weight", MS_K3_MLA, MS_K3_MAT, MS_DT_BF16, 2, D(E, HV, 1), LW(mla.o)},
    {"self_attn.g_proj.weight", MS_K3_MLA_GATE, MS_K3_MAT, MS_DT_BF16, 2, D(HV, E, 1), LW(mla.g)},
    /* dense MLP (layer 0) */
    {"mlp.gate_proj.weight", MS_K3_DENSE, MS_K3_MAT, MS_DT_BF16, 2, D(ID, E, 1), LW(dgate)},
    {"mlp.up_proj.weight", MS_K3_DENSE, MS_K3_MAT, MS_DT_BF16, 2, D(ID, E, 1), LW(dup)},
    {"mlp.down_proj.weight", MS_K3_DENSE, MS_K3_MAT, MS_DT_BF16, 2, D(E, ID, 1), LW(ddown)},
    /* latent MoE trunk (spec §3.8); routed experts follow these in the files */
    {"block_sparse_moe.gate.weight", MS_K3_MOE, MS_K3_MAT, MS_DT_BF16, 2, D(NE, E, 1), LW(moe.gate)},
    {"block_sparse_moe.gate.e_score_correction_bias", MS_K3_MOE, MS_K3_RBIAS, MS_DT_F32, 1, D(NE, 1, 1),
     LW(moe.bias)},
    {"block_sparse_moe.routed_expert_down_proj.weight", MS_K3_MOE, MS_K3_MAT, MS_DT_BF16, 2, D(L, E, 1),
     LW(moe.down)},
    {"block_sparse_moe.routed_expert_up_proj.weight", MS_K3_MOE, MS_K3_MAT, MS_DT_BF16, 2, D(E, L, 1), LW(moe.up)},
    {"block_sparse_moe.routed_expert_norm.weight", MS_K3_MOE, MS_K3_NORM, MS_DT_BF16, 1, D(L, 1, 1), LW(moe.norm)},
    {"block_sparse_moe.shared_experts.gate_proj.weight", MS_K3_MOE, MS_K3_MAT, MS_DT_BF16, 2, D(SI, E, 1),
     LW(moe.sg)},
    {"block_sparse_moe.shared_experts.up_proj.weight", MS_K3_MOE, MS_K3_MAT, MS_DT_BF16, 2, D(SI, E, 1), LW(moe.su)},
    {"block_sparse_moe.shared_experts.down_proj.weight", MS_K3_MOE, MS_K3_MAT, MS_DT_BF16, 2, D(E, SI, 1),
     LW(moe.sd)},
    /* model level */
    {MS_K3_PFX "embed_tokens.weight", MS_K3_MODEL, MS_K3_EMBED, MS_DT_BF16, 2, D(V, E, 1), MW(embed)},
    {MS_K3_PFX "norm.weight", MS_K3_MODEL, MS_K3_NORM, MS_DT_BF16, 1, D(E, 1, 1), MW(final_norm)},
    {MS_K3_PFX "output_attn_res_norm.weight", MS_K3_MODEL, MS_K3_NORM, MS_DT_BF16, 1, D(E, 1, 1), MW(out_norm)},
    {MS_K3_PFX "output_attn_res_proj.weight", MS_K3_MODEL, MS_K3_RESPROJ, MS_DT_BF16, 2, D(1, E, 1), MW(out_proj)},
    {"language_model.lm_head.weight", MS_K3_MODEL, MS_K3_MAT, MS_DT_BF16, 2, D(V, E, 1), MW(lm_head)},
};

const ms_k3_tensor *ms_k3_tensors(int *n)
{
    *n = (int)(sizeof table / sizeof table[0]);
    return table;
}

int ms_k3_in_layer(const ms_k3_tensor *t, const ms_k3_cfg *c, int layer)
{
    int mla = c->is_mla[layer], dense = ms_k3_cfg_is_dense(c, layer);
    switch (t->where) {
    case MS_K3_MODEL: return 0;
    case MS_K3_ALL: return 1;
    case MS_K3_KDA: return !mla;
    case MS_K3_MLA: return mla;
    case MS_K3_MLA_GATE: return mla && c->mla_out_gate;
    case MS_K3_DENSE: return dense;
    case MS_K3_MOE: return !dense;
    }
    return 0;
}

int64_t ms_k3_dim_value(const ms_k3_cfg *c, ms_k3_dim d)
{
    int64_t P = (int64_t)c->kda_heads * c->kda_head_dim;
    switch (d) {
    case MS_K3_D1: return 1;
    case MS_K3_DE: return c->hidden;
    case MS_K3_DP: return P;
    case MS_K3_DD: return c->kda_head_dim;
    case MS_K3_DHK: return c->kda_heads;
    case MS_K3_DK: return c->conv_k;
    case MS_K3_DNA: return c->kda_head_dim > c->kda_heads ? c->kda_head_dim : c->kda_heads;
    case MS_K3_DRQ: return c->q_lora;
    case MS_K3_DQB: return (int64_t)c->mla_heads * (c->qk_nope + c->qk_rope);
    case MS_K3_DKVA: return (int64_t)c->kv_lora + c->qk_rope;
    case MS_K3_DRKV: return c->kv_lora;
    case MS_K3_DKVB: return (int64_t)c->mla_heads * (c->qk_nope + c->v_head);
    case MS_K3_DHV: return (int64_t)c->mla_heads * c->v_head;
    case MS_K3_DID: return c->dense_inter;
    case MS_K3_DNE: return c->n_experts;
    case MS_K3_DL: return c->latent;
    case MS_K3_DSI: return (int64_t)c->n_shared * c->moe_inter;
    case MS_K3_DV: return c->vocab;
    }
    return 0;
}

void ms_k3_tensor_name(const ms_k3_tensor *t, int layer, char *buf, size_t n)
{
    if (t->where == MS_K3_MODEL)
        snprintf(buf, n, "%s", t->suffix);
    else
        snprintf(buf, n, MS_K3_PFX "layers.%d.%s", layer, t->suffix);
}

void ms_k3_expert_name(int layer, int expert, int m, int p, char *buf, size_t n)
{
    static const char *mat[3] = {"w1", "w2", "w3"};
    static const char *part[3] = {"weight_packed", "weight_scale", "weight"};
    char suffix[32];
    snprintf(suffix, sizeof suffix, "%s.%s", mat[m], part[p]);
    ms_k3_experts_tensor(layer, expert, suffix, buf, n); /* the one spelling, shared with shard and the worker */
}

int ms_k3_trunk_matrices(const ms_k3_cfg *c, const ms_st *st, const ms_st_tensor ***out)
{
    int nt;
    const ms_k3_tensor *tab = ms_k3_tensors(&nt);
    const ms_st_tensor **v = ms_malloc(sizeof *v * (size_t)(nt * (c->n_layers + 1) + 1));
    int n = 0;
    char name[512];
    for (int l = 0; l <= c->n_layers; l++)
        for (int i = 0; i < nt; i++) {
            const ms_k3_tensor *t = &tab[i];
            if (t->kind != MS_K3_MAT) continue;
            if (l < c->n_layers ? !ms_k3_in_layer(t, c, l) : t->where != MS_K3_MODEL) continue;
            if (l < c->n_layers && t->where == MS_K3_MODEL) continue;
            ms_k3_tensor_name(t, l, name, sizeof name);
            const ms_st_tensor *s = ms_st_find(st, name);
            if (s && s->dtype == MS_DT_BF16 && s->ndim == 2 && s->numel > 0) v[n++] = s;
        }
    *out = v;
    return n;
}
