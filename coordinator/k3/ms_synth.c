/* ms_synth: deterministic random K3 checkpoints (BF16 trunk, F32 small tensors, MXFP4 experts). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ms_err.h"
#include "ms_msynth.h"
#include "ms_kern.h"
#include "ms_progress.h"
#include "ms_size.h"
#include "ms_st.h"
#include "ms_synth.h"
#include "ms_k3_tensors.h"
#include "ms_tok.h"

int ms_synth_preset(const char *name, ms_synth_shape *sh)
{
    memset(sh, 0, sizeof *sh);
    if (!strcmp(name, "tiny")) {
        *sh = (ms_synth_shape){.hidden = 64, .n_layers = 6, .vocab = 512, .kda_heads = 2, .kda_head_dim = 16,
                               .conv_k = 4, .mla_heads = 2, .q_lora = 32, .kv_lora = 16, .qk_nope = 16,
                               .qk_rope = 8, .v_head = 16, .n_experts = 8, .top_k = 2, .n_shared = 1,
                               .latent = 32, .moe_inter = 32, .dense_inter = 96, .attn_res_block = 2,
                               .n_full_attn = 3, .full_attn = {3, 5, 6}, .tok_ranks = 502, .n_shards = 2,
                               .router_bf16 = 1};
        return 0;
    }
    if (!strcmp(name, "small")) {
        /* A few hundred MB, most of it in many routed experts: for streaming tests. */
        *sh = (ms_synth_shape){.hidden = 256, .n_layers = 5, .vocab = 4096, .kda_heads = 4, .kda_head_dim = 32,
                               .conv_k = 4, .mla_heads = 4, .q_lora = 128, .kv_lora = 64, .qk_nope = 32,
                               .qk_rope = 16, .v_head = 32, .n_experts = 512, .top_k = 8, .n_shared = 1,
                               .latent = 256, .moe_inter = 768, .dense_inter = 512, .attn_res_block = 2,
                               .n_full_attn = 2, .full_attn = {4, 5}, .tok_ranks = 4086, .n_shards = 3,
                               .router_bf16 = 1};
        return 0;
    }
    if (!strcmp(name, "k3-slice")) {
        /* The released Kimi K3 widths (spec §1.1) with few layers; ms_synth_set_layers picks N. */
        *sh = (ms_synth_shape){.hidden = 7168, .n_layers = 3, .vocab = 163840, .kda_heads = 96, .kda_head_dim = 128,
                               .conv_k = 4, .mla_heads = 96, .q_lora = 1536, .kv_lora = 512, .qk_nope = 128,
                               .qk_rope = 64, .v_head = 128, .n_experts = 896, .top_k = 16, .n_shared = 2,
                               .latent = 3584, .moe_inter = 3072, .dense_inter = 33792, .attn_res_block = 12,
                               .tok_ranks = 163830, .router_bf16 = 1};
        ms_synth_set_layers(sh, 3);
        return 0;
    }
    if (!strcmp(name, "k3-full")) {
        /* The whole released text path, one shard per layer as released (spec §4.2). */
        if (ms_synth_preset("k3-slice", sh) != 0) return -1;
        ms_synth_set_layers(sh, 93);
        sh->name_total = 96;
        return 0;
    }
    ms_err_set("unknown synth preset '%s' (known: tiny, small, k3-slice, k3-full)", name);
    return ms_err_set_code(MS_EXIT_USAGE);
}

void ms_synth_set_layers(ms_synth_shape *sh, int n)
{
    MS_ASSERT(n >= 1 && n <= MS_SYNTH_MAX_LAYERS);
    sh->n_layers = n;
    /* The released layer map cut to n layers: MLA at every 4th one-based layer and the last. */
    sh->n_full_attn = 0;
    for (int i = 1; i <= n; i++)
        if (i % 4 == 0 || (i == n && n > 1)) sh->full_attn[sh->n_full_attn++] = i;
    sh->n_shards = n + 1;
    sh->name_total = 0; /* not the release's shard count any more */
}

/* The config a synthetic shape stands for (what ms_k3_tensors needs of it); is_mla[n_layers]. */
static ms_k3_cfg shape_cfg(const ms_synth_shape *s, uint8_t *is_mla)
{
    ms_k3_cfg c;
    memset(&c, 0, sizeof c);
    c.hidden = s->hidden;
    c.n_layers = s->n_layers;
    c.vocab = s->vocab;
    c.kda_heads = s->kda_heads;
    c.kda_head_dim = s->kda_head_dim;
    c.conv_k = s->conv_k;
    c.mla_heads = s->mla_heads;
    c.q_lora = s->q_lora;
    c.kv_lora = s->kv_lora;
    c.qk_nope = s->qk_nope;
    c.qk_rope = s->qk_rope;
    c.v_head = s->v_head;
    c.mla_out_gate = 1;
    c.n_experts = s->n_experts;
    c.n_shared = s->n_shared;
    c.latent = s->latent;
    c.moe_inter = s->moe_inter;
    c.dense_inter = s->dense_inter;
    c.first_dense = 1;
    for (int i = 0; i < s->n_layers; i++) {
        is_mla[i] = 0;
        for (int j = 0; j < s->n_full_attn; j++) is_mla[i] |= s->full_attn[j] == i + 1;
    }
    c.is_mla = is_mla;
    return c;
}

/* One table entry of ms_k3_tensors with its random draw. */
static void add_entry(ms_syn_list *l, const ms_synth_shape *s, const ms_k3_cfg *c, const ms_k3_tensor *t, int layer)
{
    char nm[256];
    int64_t d[3] = {0, 0, 0};
    for (int j = 0; j < t->ndim; j++) d[j] = ms_k3_dim_value(c, t->dim[j]);
    ms_k3_tensor_name(t, layer, nm, sizeof nm);
    ms_dtype dt = t->dtype;
    switch (t->kind) {
    case MS_K3_MAT:
        if (t->dim[0] == MS_K3_DNE && !s->router_bf16) dt = MS_DT_F32; /* the router gate */
        ms_syn_add(l, nm, dt, t->ndim, d, MS_SYN_UNIFORM, ms_syn_amp(d[1]));
        break;
    case MS_K3_EMBED: ms_syn_add(l, nm, dt, t->ndim, d, MS_SYN_UNIFORM, 1.0f); break;
    case MS_K3_NORM: ms_syn_add(l, nm, dt, t->ndim, d, MS_SYN_GAIN, 0); break;
    case MS_K3_RESPROJ: ms_syn_add(l, nm, dt, t->ndim, d, MS_SYN_UNIFORM, 0.2f); break;
    case MS_K3_CONV:
    case MS_K3_DTBIAS: ms_syn_add(l, nm, dt, t->ndim, d, MS_SYN_UNIFORM, 0.5f); break;
    case MS_K3_RBIAS: ms_syn_add(l, nm, dt, t->ndim, d, MS_SYN_UNIFORM, 0.02f); break;
    case MS_K3_ALOG: ms_syn_add(l, nm, dt, t->ndim, d, MS_SYN_ALOG, 0)->valid = s->kda_heads; break;
    }
}

static void build_specs(const ms_synth_shape *s, ms_syn_list *l)
{
    uint8_t is_mla[MS_SYNTH_MAX_LAYERS];
    MS_ASSERT(s->n_layers <= MS_SYNTH_MAX_LAYERS);
    ms_k3_cfg c = shape_cfg(s, is_mla);
    int nt;
    const ms_k3_tensor *tab = ms_k3_tensors(&nt);
    int64_t L = s->latent, I = s->moe_inter;
    for (int i = 0; i < s->n_layers; i++) {
        l->shard = s->n_shards > 1 ? (int)((int64_t)i * (s->n_shards - 1) / s->n_layers) : 0;
        for (int j = 0; j < nt; j++)
            if (ms_k3_in_layer(&tab[j], &c, i)) add_entry(l, s, &c, &tab[j], i);
        if (ms_k3_cfg_is_dense(&c, i)) continue;
        /* One expert is one contiguous run: w1, w2, w3, each packed then scale (spec §4.5). */
        for (int e = 0; e < s->n_experts; e++)
            for (int w = 0; w < 3; w++) {
                char nm[256];
                int64_t rows = w == 1 ? L : I, cols = w == 1 ? I : L;
                ms_k3_expert_name(i, e, w, 0, nm, sizeof nm);
                int64_t sp[2] = {rows, cols / 2}, ss[2] = {rows, cols / 32};
                ms_syn_add(l, nm, MS_DT_U8, 2, sp, MS_SYN_PACKED, 0);
                ms_k3_expert_name(i, e, w, 1, nm, sizeof nm);
                ms_syn_add(l, nm, MS_DT_U8, 2, ss, MS_SYN_SCALE, ms_syn_scale_byte(cols));
            }
    }
    l->shard = s->n_shards - 1;
    for (int j = 0; j < nt; j++)
        if (tab[j].where == MS_K3_MODEL) add_entry(l, s, &c, &tab[j], -1);
}

static json_t *int_array(const int *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

static int write_config(const char *dir, const ms_synth_shape *s)
{
    json_t *root = json_object(), *tc = json_object(), *lac = json_object();
    int kda[MS_SYNTH_MAX_LAYERS], nk = 0;
    for (int i = 1; i <= s->n_layers && nk < MS_SYNTH_MAX_LAYERS; i++) {
        int mla = 0;
        for (int j = 0; j < s->n_full_attn; j++) mla |= s->full_attn[j] == i;
        if (!mla) kda[nk++] = i;
    }
    json_object_set_new(root, "architectures", json_pack("[s]", "KimiK3ForConditionalGeneration"));
    json_object_set_new(root, "model_type", json_string("kimi_k3"));
    json_object_set_new(root, "tie_word_embeddings", json_false());
    json_object_set_new(lac, "full_attn_layers", int_array(s->full_attn, s->n_full_attn));
    json_object_set_new(lac, "kda_layers", int_array(kda, nk));
    json_object_set_new(lac, "gate_lower_bound", json_real(-5.0));
    json_object_set_new(lac, "head_dim", json_integer(s->kda_head_dim));
    json_object_set_new(lac, "num_heads", json_integer(s->kda_heads));
    json_object_set_new(lac, "short_conv_kernel_size", json_integer(s->conv_k));
    json_object_set_new(lac, "use_full_rank_gate", json_true());
    json_object_set_new(tc, "activation_situ_beta", json_real(4.0));
    json_object_set_new(tc, "activation_situ_linear_beta", json_real(25.0));
    json_object_set_new(tc, "attn_res_block_size", json_integer(s->attn_res_block));
    json_object_set_new(tc, "first_k_dense_replace", json_integer(1));
    json_object_set_new(tc, "hidden_size", json_integer(s->hidden));
    json_object_set_new(tc, "intermediate_size", json_integer(s->dense_inter));
    json_object_set_new(tc, "kv_lora_rank", json_integer(s->kv_lora));
    json_object_set_new(tc, "latent_moe_use_norm", json_true());
    json_object_set_new(tc, "linear_attn_config", lac);
    json_object_set_new(tc, "mla_use_output_gate", json_true());
    json_object_set_new(tc, "model_type", json_string("kimi_linear"));
    json_object_set_new(tc, "moe_intermediate_size", json_integer(s->moe_inter));
    json_object_set_new(tc, "moe_renormalize", json_true());
    json_object_set_new(tc, "num_attention_heads", json_integer(s->mla_heads));
    json_object_set_new(tc, "num_experts", json_integer(s->n_experts));
    json_object_set_new(tc, "num_experts_per_token", json_integer(s->top_k));
    json_object_set_new(tc, "num_hidden_layers", json_integer(s->n_layers));
    json_object_set_new(tc, "num_shared_experts", json_integer(s->n_shared));
    json_object_set_new(tc, "q_lora_rank", json_integer(s->q_lora));
    json_object_set_new(tc, "qk_nope_head_dim", json_integer(s->qk_nope));
    json_object_set_new(tc, "qk_rope_head_dim", json_integer(s->qk_rope));
    json_object_set_new(tc, "rms_norm_eps", json_real(1e-5));
    json_object_set_new(tc, "routed_expert_hidden_size", json_integer(s->latent));
    json_object_set_new(tc, "routed_scaling_factor", json_real(1.0));
    json_object_set_new(tc, "v_head_dim", json_integer(s->v_head));
    json_object_set_new(tc, "vocab_size", json_integer(s->vocab));
    if (s->tok_ranks > 0) {
        json_object_set_new(tc, "bos_token_id", json_integer(s->tok_ranks));
        json_object_set_new(tc, "eos_token_id", json_integer(s->tok_ranks + 1));
    }
    json_object_set_new(root, "text_config", tc);
    return ms_syn_write_config(dir, root, 1);
}

int ms_synth_write(const char *dir, const ms_synth_shape *sh, uint64_t seed)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        ms_err_set("cannot create %s: %s", dir, strerror(errno));
        return ms_err_set_code(MS_EXIT_IO);
    }
    if (write_config(dir, sh) != 0) return -1;
    ms_syn_list l = {NULL, 0, 0, ms_syn_mix(seed), 0};
    build_specs(sh, &l);
    ms_syn_files f = {sh->n_shards, 1, sh->name_total, 6, sh->sparse};
    int rc = ms_syn_write(dir, &l, &f);
    if (rc == 0 && sh->tok_ranks > 0) rc = ms_tok_write_synth(dir, sh->tok_ranks);
    return rc;
}
