/* ms_qwen3_model: Qwen3-MoE behind the family interface: binding of the Hugging Face layout (BF16 or FP8), sequences, sizes, opening. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_qwen3_experts.h"
#include "ms_qwen3_int.h"
#include "ms_qwen3_model.h"
#include "ms_xfams.h"

static qw_model *qw(ms_model *m) { return (qw_model *)m; }
static const qw_model *qwc(const ms_model *m) { return (const qw_model *)m; }

/* ---- binding ---- */

static const float *vec(ms_model *m, const char *name, int64_t n)
{
    int64_t s[1] = {n};
    return ms_mrt_vec(m, name, n, 1, s);
}

static void bind_layer(qw_model *g, int l)
{
    ms_model *m = &g->base;
    const ms_qwen3_cfg *c = &g->cfg;
    qw_layer *w = &g->layers[l];
    int64_t H = c->hidden, qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv * c->head_dim;
    char n[256];
    int n_refs0 = m->n_refs;
#define NAME(fmt) (snprintf(n, sizeof n, "model.layers.%d." fmt, l), n)
    w->in_norm = vec(m, NAME("input_layernorm.weight"), H);
    ms_mrt_mat(m, &w->attn.q, NAME("self_attn.q_proj.weight"), qd, H);
    ms_mrt_mat(m, &w->attn.k, NAME("self_attn.k_proj.weight"), kvd, H);
    ms_mrt_mat(m, &w->attn.v, NAME("self_attn.v_proj.weight"), kvd, H);
    ms_mrt_mat(m, &w->attn.o, NAME("self_attn.o_proj.weight"), H, qd);
    w->attn.q_norm = vec(m, NAME("self_attn.q_norm.weight"), c->head_dim);
    w->attn.k_norm = vec(m, NAME("self_attn.k_norm.weight"), c->head_dim);
    w->post_norm = vec(m, NAME("post_attention_layernorm.weight"), H);
    if (l < c->first_moe) {
        ms_mrt_mat(m, &w->gate, NAME("mlp.gate_proj.weight"), c->inter, H);
        ms_mrt_mat(m, &w->up, NAME("mlp.up_proj.weight"), c->inter, H);
        ms_mrt_mat(m, &w->down, NAME("mlp.down_proj.weight"), H, c->inter);
    } else {
        ms_mrt_mat(m, &w->router, NAME("mlp.gate.weight"), c->n_experts, H);
    }
#undef NAME
    ms_mrt_refs_layer(m, n_refs0, l);
    if (l >= c->first_moe) ms_mrt_bind_experts(m, l);
}

/* The config's depth against the checkpoint, before anything is sized from it. */
static int check_counts(const ms_qwen3_cfg *c, const ms_tsrc *src)
{
    char n[256];
    ms_tview tv;
    snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", c->n_layers - 1);
    if (!src->find(src->ctx, n, &tv)) {
        ms_err_set("%s: config says num_hidden_layers = %d, but the checkpoint has no tensor %s", src->what,
                   c->n_layers, n);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%d.gate_proj.weight", c->first_moe, c->n_experts);
    if (src->find(src->ctx, n, &tv)) {
        ms_err_set("%s: config says num_experts = %d, but the checkpoint has tensor %s", src->what, c->n_experts, n);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    return 0;
}

/* ---- sizes ---- */

static size_t qw_op_work_floats(const ms_model *m, int64_t R, int64_t out_rows)
{
    return qw_work_floats(&qwc(m)->cfg, R, out_rows);
}

static uint64_t qw_state_bytes(const ms_model *m, int64_t positions, int64_t spec_rows)
{
    (void)spec_rows; /* the caches keep every position: rejected rows are overwritten */
    const ms_qwen3_cfg *c = &qwc(m)->cfg;
    return 2 * 4 * (uint64_t)c->n_kv * (uint64_t)c->head_dim * (uint64_t)positions * (uint64_t)c->n_layers;
}

static uint64_t qw_fixed_bytes(const ms_model *m, int threads, int64_t positions)
{
    ms_gqa a = qw_gqa(&qwc(m)->cfg);
    return (uint64_t)threads * ms_gqa_thread_bytes(&a, positions);
}

/* ---- sequences ---- */

static ms_seq *qw_seq_new(ms_model *m)
{
    const ms_qwen3_cfg *c = &qw(m)->cfg;
    qw_seq *s = ms_calloc(1, sizeof *s);
    s->base.m = m;
    s->kv = ms_calloc((size_t)c->n_layers, sizeof *s->kv);
    for (int l = 0; l < c->n_layers; l++) {
        ms_kv_init(&s->kv[l], (int64_t)c->n_kv * c->head_dim, 0);
        if (m->opts.max_positions > 0) ms_kv_reserve(&s->kv[l], m->opts.max_positions - 1); /* the plan's */
    }
    return &s->base;
}

static void qw_seq_free(ms_seq *base)
{
    qw_seq *s = (qw_seq *)base;
    for (int l = 0; l < qw(base->m)->cfg.n_layers; l++) ms_kv_free(&s->kv[l]);
    free(s->kv);
    free(s);
}

static ms_seq *qw_seq_clone(const ms_seq *base)
{
    const qw_seq *s = (const qw_seq *)base;
    const ms_qwen3_cfg *c = &qw(base->m)->cfg;
    qw_seq *d = ms_calloc(1, sizeof *d);
    d->base = *base;
    d->kv = ms_calloc((size_t)c->n_layers, sizeof *d->kv);
    for (int l = 0; l < c->n_layers; l++) ms_kv_copy(&d->kv[l], &s->kv[l]);
    return &d->base;
}

static void qw_seq_save(const ms_seq *base, ms_sbuf *out)
{
    const qw_seq *s = (const qw_seq *)base;
    for (int l = 0; l < qw(base->m)->cfg.n_layers; l++) ms_kv_save(&s->kv[l], base->pos, 0, out);
}

static int qw_seq_load(ms_seq *base, ms_reader *in)
{
    qw_seq *s = (qw_seq *)base;
    for (int l = 0; l < qw(base->m)->cfg.n_layers; l++)
        if (ms_kv_load(&s->kv[l], base->pos, 0, in, l) != 0) return -1;
    return 0;
}

/* Rejected rows: positions past the kept ones are never read again and are overwritten next. */
static void qw_seq_keep(ms_seq *s, int64_t keep)
{
    s->pos -= s->spec_rows - keep;
    s->spec_rows = 0;
}

/* ---- opening ---- */

static void qw_free(ms_model *m)
{
    qw_model *g = qw(m);
    free(g->layers);
    ms_rope_free(&g->rope);
}

static const ms_model_ops qw_ops = {
    .free = qw_free,
    .pass = &qw_pass,
    .seq_new = qw_seq_new,
    .seq_free = qw_seq_free,
    .seq_keep = qw_seq_keep,
    .seq_clone = qw_seq_clone,
    .seq_save = qw_seq_save,
    .seq_load = qw_seq_load,
    .work_floats = qw_op_work_floats,
    .state_bytes = qw_state_bytes,
    .fixed_bytes = qw_fixed_bytes,
};

void ms_qwen3_info_of_cfg(const ms_qwen3_cfg *c, ms_model_info *in)
{
    in->family = ms_qwen3_experts.name;
    in->vocab = c->vocab;
    in->hidden = c->hidden;
    in->n_layers = c->n_layers;
    in->first_moe = c->first_moe;
    in->n_experts = c->n_experts;
    in->top_k = c->top_k;
    in->bos_id = -1; /* Qwen's tokenizer adds no BOS (add_bos_token false) */
    in->eos_id = c->eos_id;
    in->max_context = c->max_positions;
}

ms_model *ms_qwen3_model_bind(const ms_qwen3_cfg *cfg, const ms_tsrc *src, const ms_run_opts *o, int enc)
{
    if (check_counts(cfg, src) != 0) return NULL;
    qw_model *g = ms_calloc(1, sizeof *g);
    ms_model *m = &g->base;
    g->cfg = *cfg;
    const ms_qwen3_cfg *c = &g->cfg;
    ms_model_info *in = &m->info;
    ms_qwen3_info_of_cfg(c, in);
    in->have_xfmt = ms_qwen3_experts_fmt(c->hidden, c->moe_inter, enc, &in->xfmt) == 0;
    if (!in->have_xfmt) snprintf(in->why_no_xfmt, sizeof in->why_no_xfmt, "%s", ms_err_msg());
    int64_t pos = o && o->max_positions > 0 ? o->max_positions : 4096;
    in->state_bytes = qw_state_bytes(m, pos, 0);
    in->scratch_row_bytes = 4 * (qw_work_floats(c, 1, 1) - qw_work_floats(c, 0, 0));
    m->embed = &g->embed;
    if (ms_mrt_init(m, &qw_ops, src, o, MS_XACT_SWIGLU, NULL, c->hidden) != 0 ||
        ms_rope_init_plain(&g->rope, c->head_dim, c->rope_theta) != 0) {
        ms_model_free(m);
        return NULL;
    }
    ms_mrt_mat(m, &g->embed, "model.embed_tokens.weight", c->vocab, c->hidden);
    g->layers = ms_calloc((size_t)c->n_layers, sizeof *g->layers);
    for (int l = 0; l < c->n_layers && m->n_errors <= 8; l++) bind_layer(g, l);
    int64_t s1[1] = {c->hidden};
    g->final_norm = ms_mrt_vec(m, "model.norm.weight", c->hidden, 1, s1);
    if (c->tied)
        ms_mrt_mat(m, &g->lm_head, "model.embed_tokens.weight", c->vocab, c->hidden);
    else
        ms_mrt_mat(m, &g->lm_head, "lm_head.weight", c->vocab, c->hidden);
    if (ms_mrt_bind_done(m) != 0) {
        ms_model_free(m);
        return NULL;
    }
    return m;
}

static ms_model *bind_refined(const void *cfg, const ms_tsrc *src, const ms_run_opts *o, const ms_xfmt *f)
{
    return ms_qwen3_model_bind(cfg, src, o, f->mat[0].enc);
}

ms_model *ms_qwen3_model_open(const char *dir, const ms_run_opts *o)
{
    char path[4096];
    ms_qwen3_cfg cfg;
    ms_xfmt f;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (ms_qwen3_cfg_load(path, &cfg) != 0 ||
        ms_qwen3_experts_fmt(cfg.hidden, cfg.moe_inter, cfg.fp8 ? MS_XENC_FP8 : MS_XENC_BF16, &f) != 0)
        return NULL;
    return ms_mrt_open_dir(dir, o, &f, cfg.first_moe, bind_refined, &cfg);
}
