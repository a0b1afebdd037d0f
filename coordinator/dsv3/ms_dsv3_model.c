/* ms_dsv3_model: DeepSeek-V3 / Kimi K2 behind the family interface: binding of the Hugging Face layout (FP8 or BF16), sequences of MLA caches, sizes, opening. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_dsv3_experts.h"
#include "ms_dsv3_int.h"
#include "ms_dsv3_model.h"
#include "ms_err.h"
#include "ms_xfams.h"

static ds_model *ds(ms_model *m) { return (ds_model *)m; }
static const ds_model *dsc(const ms_model *m) { return (const ds_model *)m; }

/* ---- binding ---- */

static const float *vec(ms_model *m, const char *name, int64_t n)
{
    int64_t s[1] = {n};
    return ms_mrt_vec(m, name, n, 1, s);
}

/* Layer l's tensors into w (the MTP layer's too: l = N). */
static void bind_layer(ds_model *g, int l, ds_layer *w)
{
    ms_model *m = &g->base;
    const ms_dsv3_cfg *c = &g->cfg;
    int64_t H = c->hidden, dq = c->qk_nope + c->qk_rope, nh = c->n_heads, SI = (int64_t)c->n_shared * c->moe_inter;
    char n[256];
    int n_refs0 = m->n_refs;
#define NAME(fmt) (snprintf(n, sizeof n, "model.layers.%d." fmt, l), n)
    w->in_norm = vec(m, NAME("input_layernorm.weight"), H);
    ms_mrt_mat(m, &w->mla.qa, NAME("self_attn.q_a_proj.weight"), c->q_lora, H);
    w->mla.qa_norm = vec(m, NAME("self_attn.q_a_layernorm.weight"), c->q_lora);
    ms_mrt_mat(m, &w->mla.qb, NAME("self_attn.q_b_proj.weight"), nh * dq, c->q_lora);
    ms_mrt_mat(m, &w->mla.kva, NAME("self_attn.kv_a_proj_with_mqa.weight"), c->kv_lora + c->qk_rope, H);
    w->mla.kva_norm = vec(m, NAME("self_attn.kv_a_layernorm.weight"), c->kv_lora);
    ms_mrt_mat(m, &w->mla.kvb, NAME("self_attn.kv_b_proj.weight"), nh * (c->qk_nope + c->v_head), c->kv_lora);
    ms_mrt_mat(m, &w->mla.o, NAME("self_attn.o_proj.weight"), H, nh * c->v_head);
    w->mla.kvb_buf = &g->kvb_buf;
    w->post_norm = vec(m, NAME("post_attention_layernorm.weight"), H);
    if (l < c->n_dense) {
        ms_mrt_mat(m, &w->gate, NAME("mlp.gate_proj.weight"), c->inter, H);
        ms_mrt_mat(m, &w->up, NAME("mlp.up_proj.weight"), c->inter, H);
        ms_mrt_mat(m, &w->down, NAME("mlp.down_proj.weight"), H, c->inter);
    } else {
        ms_mrt_mat(m, &w->router, NAME("mlp.gate.weight"), c->n_experts, H);
        w->select_bias = vec(m, NAME("mlp.gate.e_score_correction_bias"), c->n_experts);
        if (SI > 0) {
            ms_mrt_mat(m, &w->sgate, NAME("mlp.shared_experts.gate_proj.weight"), SI, H);
            ms_mrt_mat(m, &w->sup, NAME("mlp.shared_experts.up_proj.weight"), SI, H);
            ms_mrt_mat(m, &w->sdown, NAME("mlp.shared_experts.down_proj.weight"), H, SI);
        }
    }
#undef NAME
    ms_mrt_refs_layer(m, n_refs0, l);
    if (l >= c->n_dense) ms_mrt_bind_experts(m, l);
}

/* The MTP layer (layer N) as the draft head: its matrices read whole now (a draft runs between
 * passes, outside the trunk's schedule), its experts the store's layer N. */
static void bind_mtp(ds_model *g)
{
    ms_model *m = &g->base;
    const ms_dsv3_cfg *c = &g->cfg;
    int64_t H = c->hidden;
    int N = c->n_layers;
    char n[256];
    m->bind_resident = 1;
    bind_layer(g, N, &g->mtp.layer);
#define NAME(fmt) (snprintf(n, sizeof n, "model.layers.%d." fmt, N), n)
    g->mtp.enorm = vec(m, NAME("enorm.weight"), H);
    g->mtp.hnorm = vec(m, NAME("hnorm.weight"), H);
    ms_mrt_mat(m, &g->mtp.eh_proj, NAME("eh_proj.weight"), H, 2 * H);
    g->mtp.head_norm = vec(m, NAME("shared_head.norm.weight"), H);
#undef NAME
    m->bind_resident = 0;
}

/* Whether to bind the MTP layer: asked for, in the config, and in the checkpoint. */
static int mtp_wanted(const ms_dsv3_cfg *c, const ms_tsrc *src, const ms_run_opts *o)
{
    if (!o || !o->draft_head || c->n_mtp < 1) return 0;
    char n[256];
    ms_tview tv;
    snprintf(n, sizeof n, "model.layers.%d.eh_proj.weight", c->n_layers);
    return src->find(src->ctx, n, &tv);
}

/* The config's depth and experts against the checkpoint, before anything is sized from them. */
static int check_counts(const ms_dsv3_cfg *c, const ms_tsrc *src)
{
    char n[256];
    ms_tview tv;
    snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", c->n_layers - 1);
    if (!src->find(src->ctx, n, &tv)) {
        ms_err_set("%s: config says num_hidden_layers = %d, but the checkpoint has no tensor %s", src->what,
                   c->n_layers, n);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%d.gate_proj.weight%s", c->n_dense, c->n_experts,
             c->xenc == MS_XENC_INT4_G32 ? "_packed" : "");
    if (src->find(src->ctx, n, &tv)) {
        ms_err_set("%s: config says n_routed_experts = %d, but the checkpoint has tensor %s", src->what, c->n_experts, n);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    return 0;
}

/* ---- sizes ---- */

static size_t ds_op_work_floats(const ms_model *m, int64_t R, int64_t out_rows) { return ds_work_floats(dsc(m), R, out_rows); }

static uint64_t ds_state_bytes(const ms_model *m, int64_t positions, int64_t spec_rows)
{
    (void)spec_rows; /* the caches keep every position: rejected rows are overwritten */
    ms_mla_cfg mc = ds_mla_cfg(dsc(m));
    return ms_mla_cache_bytes(&mc, positions) * (uint64_t)dsc(m)->cfg.n_layers + ds_mtp_state_bytes(dsc(m), positions);
}

static uint64_t ds_fixed_bytes(const ms_model *m, int threads, int64_t positions)
{
    ms_mla_cfg mc = ds_mla_cfg(dsc(m));
    return (uint64_t)threads * ms_mla_thread_bytes(&mc, positions);
}

/* ---- sequences ---- */

static ms_seq *ds_seq_new(ms_model *m)
{
    const ms_dsv3_cfg *c = &ds(m)->cfg;
    ms_mla_cfg mc = ds_mla_cfg(ds(m));
    ds_seq *s = ms_calloc(1, sizeof *s);
    s->base.m = m;
    s->kv = ms_calloc((size_t)c->n_layers, sizeof *s->kv);
    for (int l = 0; l < c->n_layers; l++) {
        ms_mla_cache_init(&s->kv[l]);
        if (m->opts.max_positions > 0) ms_mla_cache_reserve(&s->kv[l], &mc, m->opts.max_positions);
    }
    ds_mtp_seq_init(ds(m), s);
    return &s->base;
}

static void ds_seq_free(ms_seq *base)
{
    ds_seq *s = (ds_seq *)base;
    for (int l = 0; l < ds(base->m)->cfg.n_layers; l++) ms_mla_cache_free(&s->kv[l]);
    free(s->kv);
    ds_mtp_seq_free(s);
    free(s);
}

static ms_seq *ds_seq_clone(const ms_seq *base)
{
    const ds_seq *s = (const ds_seq *)base;
    ms_mla_cfg mc = ds_mla_cfg(ds(base->m));
    int n = ds(base->m)->cfg.n_layers;
    ds_seq *d = ms_calloc(1, sizeof *d);
    d->base = *base;
    d->kv = ms_calloc((size_t)n, sizeof *d->kv);
    for (int l = 0; l < n; l++) ms_mla_cache_copy(&d->kv[l], &s->kv[l], &mc);
    d->mtp_f = s->mtp_f;
    d->mtp_lost = s->mtp_lost;
    ds_mtp_seq_copy(ds(base->m), d, s);
    return &d->base;
}

static void ds_seq_save(const ms_seq *base, ms_sbuf *out)
{
    const ds_seq *s = (const ds_seq *)base;
    ms_mla_cfg mc = ds_mla_cfg(ds(base->m));
    for (int l = 0; l < ds(base->m)->cfg.n_layers; l++) ms_mla_cache_save(&s->kv[l], &mc, out);
    ds_mtp_seq_save(ds(base->m), s, out);
}

static int ds_seq_load(ms_seq *base, ms_reader *in)
{
    ds_seq *s = (ds_seq *)base;
    ms_mla_cfg mc = ds_mla_cfg(ds(base->m));
    for (int l = 0; l < ds(base->m)->cfg.n_layers; l++) {
        int rc = ms_mla_cache_load(&s->kv[l], &mc, base->pos, in);
        if (rc == -2) {
            ms_err_set("the sequence state holds a non-finite value (NaN or infinity) in layer %d, at byte %zu", l, in->at);
            return -1;
        }
        if (rc != 0) {
            ms_err_set("the sequence state does not fit this model (layer sizes differ, or it was cut short)");
            return -1;
        }
    }
    return ds_mtp_seq_load(ds(base->m), s, in);
}

/* Rejected rows: the caches' positions past the kept ones are never read and are overwritten next. */
static void ds_seq_keep(ms_seq *base, int64_t keep)
{
    ds_seq *s = (ds_seq *)base;
    int64_t drop = base->spec_rows - keep;
    for (int l = 0; l < ds(base->m)->cfg.n_layers; l++) {
        MS_ASSERT(s->kv[l].n >= drop);
        s->kv[l].n -= drop;
    }
    base->pos -= drop;
    base->spec_rows = 0;
}

/* ---- opening ---- */

static void ds_free(ms_model *m)
{
    ds_model *g = ds(m);
    free(g->layers);
    ms_rope_free(&g->rope);
    ms_mat_buf_free(&g->kvb_buf);
}

static const ms_model_ops ds_ops = {
    .free = ds_free,
    .pass = &ds_pass,
    .seq_new = ds_seq_new,
    .seq_free = ds_seq_free,
    .seq_keep = ds_seq_keep,
    .seq_clone = ds_seq_clone,
    .seq_save = ds_seq_save,
    .seq_load = ds_seq_load,
    .work_floats = ds_op_work_floats,
    .state_bytes = ds_state_bytes,
    .fixed_bytes = ds_fixed_bytes,
    .seq_draft = ds_mtp_draft,
};

void ms_dsv3_info_of_cfg(const ms_dsv3_cfg *c, ms_model_info *in)
{
    in->family = ms_dsv3_experts.name;
    in->vocab = c->vocab;
    in->hidden = c->hidden;
    in->n_layers = c->n_layers;
    in->first_moe = c->n_dense;
    in->n_experts = c->n_experts;
    in->top_k = c->top_k;
    in->bos_id = c->bos_id; /* the chat templates begin with it */
    in->eos_id = c->eos_id;
    in->max_context = c->max_positions;
}

ms_model *ms_dsv3_model_bind(const ms_dsv3_cfg *cfg, const ms_tsrc *src, const ms_run_opts *o, int enc)
{
    if (check_counts(cfg, src) != 0) return NULL;
    ds_model *g = ms_calloc(1, sizeof *g);
    ms_model *m = &g->base;
    g->cfg = *cfg;
    const ms_dsv3_cfg *c = &g->cfg;
    ms_model_info *in = &m->info;
    ms_dsv3_info_of_cfg(c, in);
    g->mtp_on = mtp_wanted(c, src, o);
    in->draft_layers = g->mtp_on;
    in->have_xfmt = ms_dsv3_experts_fmt(c->hidden, c->moe_inter, enc, &in->xfmt) == 0;
    if (!in->have_xfmt) snprintf(in->why_no_xfmt, sizeof in->why_no_xfmt, "%s", ms_err_msg());
    if (ms_rope_init_deepseek_yarn(&g->rope, c->qk_rope, c->rope_theta, c->yarn_factor, c->yarn_orig_ctx,
                                   c->yarn_beta_fast, c->yarn_beta_slow) != 0) {
        free(g);
        return NULL;
    }
    int64_t pos = o && o->max_positions > 0 ? o->max_positions : 4096;
    in->state_bytes = ds_state_bytes(m, pos, 0);
    in->scratch_row_bytes = 4 * (ds_work_floats(g, 1, 1) - ds_work_floats(g, 0, 0));
    m->embed = &g->embed;
    if (ms_mrt_init(m, &ds_ops, src, o, MS_XACT_SWIGLU, NULL, c->hidden) != 0) {
        ms_model_free(m);
        return NULL;
    }
    ms_mrt_mat(m, &g->embed, "model.embed_tokens.weight", c->vocab, c->hidden);
    g->layers = ms_calloc((size_t)c->n_layers, sizeof *g->layers);
    for (int l = 0; l < c->n_layers && m->n_errors <= 8; l++) bind_layer(g, l, &g->layers[l]);
    if (g->mtp_on && m->n_errors <= 8) bind_mtp(g);
    int64_t s1[1] = {c->hidden};
    g->final_norm = ms_mrt_vec(m, "model.norm.weight", c->hidden, 1, s1);
    ms_mrt_mat(m, &g->lm_head, "lm_head.weight", c->vocab, c->hidden);
    if (ms_mrt_bind_done(m) != 0) {
        ms_model_free(m);
        return NULL;
    }
    return m;
}

static ms_model *bind_refined(const void *cfg, const ms_tsrc *src, const ms_run_opts *o, const ms_xfmt *f)
{
    return ms_dsv3_model_bind(cfg, src, o, f->mat[0].enc);
}

ms_model *ms_dsv3_model_open(const char *dir, const ms_run_opts *o)
{
    char path[4096];
    ms_dsv3_cfg cfg;
    ms_xfmt f;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (ms_dsv3_cfg_load(path, &cfg) != 0 ||
        ms_dsv3_experts_fmt(cfg.hidden, cfg.moe_inter, cfg.xenc, &f) != 0)
        return NULL;
    return ms_mrt_open_dir(dir, o, &f, cfg.n_dense, bind_refined, &cfg);
}
