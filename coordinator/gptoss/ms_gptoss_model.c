/* ms_gptoss_model: gpt-oss behind the family interface: config, binding of the Hugging Face layout, sequences, sizes, opening. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_gptoss_int.h"
#include "ms_gptoss_model.h"
#include "ms_gptoss_experts.h"
#include "ms_xfams.h"

static go_model *go(ms_model *m) { return (go_model *)m; }
static const go_model *goc(const ms_model *m) { return (const go_model *)m; }

/* ---- binding ---- */

static const float *vec(ms_model *m, const char *name, int64_t n)
{
    int64_t s[1] = {n};
    return ms_mrt_vec(m, name, n, 1, s);
}

static void bind_layer(go_model *g, int l)
{
    ms_model *m = &g->base;
    const ms_gptoss_cfg *c = &g->cfg;
    go_layer *w = &g->layers[l];
    int64_t H = c->hidden, qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv * c->head_dim;
    char n[256];
    int n_refs0 = m->n_refs;
#define NAME(fmt) (snprintf(n, sizeof n, "model.layers.%d." fmt, l), n)
    w->in_norm = vec(m, NAME("input_layernorm.weight"), H);
    ms_mrt_mat(m, &w->attn.q, NAME("self_attn.q_proj.weight"), qd, H);
    w->attn.bq = vec(m, NAME("self_attn.q_proj.bias"), qd);
    ms_mrt_mat(m, &w->attn.k, NAME("self_attn.k_proj.weight"), kvd, H);
    w->attn.bk = vec(m, NAME("self_attn.k_proj.bias"), kvd);
    ms_mrt_mat(m, &w->attn.v, NAME("self_attn.v_proj.weight"), kvd, H);
    w->attn.bv = vec(m, NAME("self_attn.v_proj.bias"), kvd);
    ms_mrt_mat(m, &w->attn.o, NAME("self_attn.o_proj.weight"), H, qd);
    w->attn.bo = vec(m, NAME("self_attn.o_proj.bias"), H);
    w->attn.sinks = vec(m, NAME("self_attn.sinks"), c->n_heads);
    w->post_norm = vec(m, NAME("post_attention_layernorm.weight"), H);
    ms_mrt_mat(m, &w->router, NAME("mlp.router.weight"), c->n_experts, H);
    w->router_b = vec(m, NAME("mlp.router.bias"), c->n_experts);
#undef NAME
    ms_mrt_refs_layer(m, n_refs0, l);
    ms_mrt_bind_experts(m, l);
}

/* The config's counts against the checkpoint, before anything is sized from them: the last
 * layer exists and each layer's expert tensors hold exactly num_local_experts experts. */
static int check_counts(const ms_gptoss_cfg *c, const ms_tsrc *src)
{
    char n[256];
    ms_tview tv;
    snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", c->n_layers - 1);
    if (!src->find(src->ctx, n, &tv)) {
        ms_err_set("%s: config says num_hidden_layers = %d, but the checkpoint has no tensor %s", src->what,
                   c->n_layers, n);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    for (int l = 0; l < c->n_layers; l++) {
        snprintf(n, sizeof n, "model.layers.%d.mlp.experts.gate_up_proj_blocks", l);
        if (src->find(src->ctx, n, &tv) && tv.ndim >= 1 && tv.shape[0] != c->n_experts) {
            ms_err_set("%s: config says num_local_experts = %d, but tensor %s holds %lld", src->what, c->n_experts, n,
                       (long long)tv.shape[0]);
            return ms_err_set_code(MS_EXIT_MODEL);
        }
    }
    return 0;
}

/* ---- sizes ---- */

static size_t k_work_floats(const ms_model *m, int64_t R, int64_t out_rows)
{
    return go_work_floats(&goc(m)->cfg, R, out_rows);
}

static uint64_t k_state_bytes(const ms_model *m, int64_t positions, int64_t spec_rows)
{
    const ms_gptoss_cfg *c = &goc(m)->cfg;
    uint64_t row = 2 * 4 * (uint64_t)c->n_kv * (uint64_t)c->head_dim, total = 0; /* a key and a value */
    int64_t ring = go_ring_rows(c, spec_rows);
    for (int l = 0; l < c->n_layers; l++)
        total += row * (uint64_t)(c->sliding[l] && ring < positions ? ring : positions);
    return total;
}

static uint64_t k_fixed_bytes(const ms_model *m, int threads, int64_t positions)
{
    ms_gqa a = go_gqa(&goc(m)->cfg, 0);
    return (uint64_t)threads * ms_gqa_thread_bytes(&a, positions);
}

/* ---- sequences ---- */

static int64_t spec_rows_of(const ms_model *m) { return m->opts.spec_window > 0 ? 1 + m->opts.spec_window : 0; }

static ms_seq *k_seq_new(ms_model *m)
{
    const ms_gptoss_cfg *c = &go(m)->cfg;
    go_seq *s = ms_calloc(1, sizeof *s);
    s->base.m = m;
    s->kv = ms_calloc((size_t)c->n_layers, sizeof *s->kv);
    int64_t kvd = (int64_t)c->n_kv * c->head_dim;
    for (int l = 0; l < c->n_layers; l++) {
        ms_kv_init(&s->kv[l], kvd, c->sliding[l] ? go_ring_rows(c, spec_rows_of(m)) : 0);
        if (m->opts.max_positions > 0) ms_kv_reserve(&s->kv[l], m->opts.max_positions - 1); /* the plan's */
    }
    return &s->base;
}

static void k_seq_free(ms_seq *base)
{
    go_seq *s = (go_seq *)base;
    for (int l = 0; l < go(base->m)->cfg.n_layers; l++) ms_kv_free(&s->kv[l]);
    free(s->kv);
    free(s);
}

static ms_seq *k_seq_clone(const ms_seq *base)
{
    const go_seq *s = (const go_seq *)base;
    const ms_gptoss_cfg *c = &go(base->m)->cfg;
    go_seq *d = ms_calloc(1, sizeof *d);
    d->base = *base;
    d->kv = ms_calloc((size_t)c->n_layers, sizeof *d->kv);
    for (int l = 0; l < c->n_layers; l++) ms_kv_copy(&d->kv[l], &s->kv[l]);
    return &d->base;
}

/* Saved state: per layer what ms_kv_save writes (a sliding layer: the last `window` positions,
 * all attention can still read), so that a run with another ring size (speculation) places
 * them itself. */
static void k_seq_save(const ms_seq *base, ms_sbuf *out)
{
    const go_seq *s = (const go_seq *)base;
    const ms_gptoss_cfg *c = &go(base->m)->cfg;
    for (int l = 0; l < c->n_layers; l++) ms_kv_save(&s->kv[l], base->pos, c->window, out);
}

static int k_seq_load(ms_seq *base, ms_reader *in)
{
    go_seq *s = (go_seq *)base;
    const ms_gptoss_cfg *c = &go(base->m)->cfg;
    for (int l = 0; l < c->n_layers; l++)
        if (ms_kv_load(&s->kv[l], base->pos, c->window, in, l) != 0) return -1;
    return 0;
}

/* Rejected rows: positions past the kept ones are never read again and are overwritten next; a
 * ring has room for a whole speculative pass, so nothing it still needs was overwritten. */
static void k_seq_keep(ms_seq *s, int64_t keep)
{
    s->pos -= s->spec_rows - keep;
    s->spec_rows = 0;
}

/* ---- opening ---- */

static void k_free(ms_model *m)
{
    go_model *g = go(m);
    free(g->layers);
    ms_rope_free(&g->rope);
    ms_gptoss_cfg_free(&g->cfg);
}

static const ms_model_ops go_ops = {
    .free = k_free,
    .pass = &go_pass,
    .seq_new = k_seq_new,
    .seq_free = k_seq_free,
    .seq_keep = k_seq_keep,
    .seq_clone = k_seq_clone,
    .seq_save = k_seq_save,
    .seq_load = k_seq_load,
    .work_floats = k_work_floats,
    .state_bytes = k_state_bytes,
    .fixed_bytes = k_fixed_bytes,
};

void ms_gptoss_info_of_cfg(const ms_gptoss_cfg *c, ms_model_info *in)
{
    in->family = ms_gptoss_experts.name;
    in->vocab = c->vocab;
    in->hidden = c->hidden;
    in->n_layers = c->n_layers;
    in->first_moe = 0;
    in->n_experts = c->n_experts;
    in->top_k = c->top_k;
    in->bos_id = -1;
    in->eos_id = c->eos_id;
    in->max_context = c->max_positions;
}

ms_model *ms_gptoss_model_bind(const ms_gptoss_cfg *cfg, const ms_tsrc *src, const ms_run_opts *o, int bias_dtype)
{
    if (check_counts(cfg, src) != 0) return NULL;
    go_model *g = ms_calloc(1, sizeof *g);
    ms_model *m = &g->base;
    g->cfg = *cfg;
    g->cfg.sliding = ms_malloc((size_t)cfg->n_layers);
    memcpy(g->cfg.sliding, cfg->sliding, (size_t)cfg->n_layers);
    const ms_gptoss_cfg *c = &g->cfg;
    ms_model_info *in = &m->info;
    ms_gptoss_info_of_cfg(c, in);
    in->have_xfmt = ms_gptoss_experts_fmt(c->hidden, c->inter, c->swiglu_limit, bias_dtype, &in->xfmt) == 0;
    if (!in->have_xfmt) snprintf(in->why_no_xfmt, sizeof in->why_no_xfmt, "%s", ms_err_msg());
    int64_t pos = o && o->max_positions > 0 ? o->max_positions : 4096;
    in->state_bytes = k_state_bytes(m, pos, o && o->spec_window > 0 ? 1 + o->spec_window : 0);
    in->scratch_row_bytes = 4 * (go_work_floats(c, 1, 1) - go_work_floats(c, 0, 0));
    m->embed = &g->embed;
    if (ms_mrt_init(m, &go_ops, src, o, MS_XACT_SWIGLU_CLAMP, in->xfmt.param, c->hidden) != 0) {
        ms_model_free(m);
        return NULL;
    }
    if (ms_rope_init_yarn(&g->rope, c->head_dim, c->rope_theta, c->yarn_factor, c->yarn_orig_ctx, c->yarn_beta_fast,
                          c->yarn_beta_slow) != 0) {
        ms_model_free(m);
        return NULL;
    }
    ms_mrt_mat(m, &g->embed, "model.embed_tokens.weight", c->vocab, c->hidden);
    g->layers = ms_calloc((size_t)c->n_layers, sizeof *g->layers);
    for (int l = 0; l < c->n_layers && m->n_errors <= 8; l++) bind_layer(g, l);
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
    return ms_gptoss_model_bind(cfg, src, o, f->mat[0].bias_dtype);
}

ms_model *ms_gptoss_model_open(const char *dir, const ms_run_opts *o)
{
    char path[4096];
    ms_gptoss_cfg cfg;
    ms_xfmt f; /* the biases' dtype as this checkpoint stores them, once refined */
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (ms_gptoss_cfg_load(path, &cfg) != 0) return NULL;
    ms_model *m = ms_gptoss_experts_fmt(cfg.hidden, cfg.inter, cfg.swiglu_limit, MS_DT_BF16, &f) == 0
                      ? ms_mrt_open_dir(dir, o, &f, 0, bind_refined, &cfg)
                      : NULL;
    ms_gptoss_cfg_free(&cfg);
    return m;
}

const ms_gptoss_cfg *ms_gptoss_model_cfg(const ms_model *m)
{
    MS_ASSERT(m->ops == &go_ops);
    return &goc(m)->cfg;
}
