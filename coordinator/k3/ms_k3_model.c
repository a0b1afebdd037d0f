/* ms_k3_model: Kimi K3 behind the family interface: binds a checkpoint's tensors to layer weights and runs the forward pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_k3_ops.h"
#include "ms_k3_int.h"
#include "ms_k3_model.h"
#include "ms_k3_tensors.h"
#include "ms_layer.h"
#include "ms_mrt.h"
#include "ms_ops.h"
#include "ms_k3_experts.h"

typedef struct {
    ms_seq base;
    ms_layer_state *ls;        /* [N] */
} k3_seq;

static k3_model *k3(ms_model *m) { return (k3_model *)m; }
static const k3_model *k3c(const ms_model *m) { return (const k3_model *)m; }
static k3_seq *k3s(ms_seq *s) { return (k3_seq *)s; }

static int64_t numel(const ms_tview *tv)
{
    int64_t n = 1;
    for (int i = 0; i < tv->ndim; i++) n *= tv->shape[i];
    return n;
}

static const float *vec1(ms_model *m, const char *name, int64_t n)
{
    int64_t s[1] = {n};
    return ms_mrt_vec(m, name, n, 1, s);
}

/* AttnRes projections are [1, E] as released; [E] is accepted too. */
static const float *vec_row(ms_model *m, const char *name, int64_t n)
{
    ms_tview tv;
    if (m->src.find(m->src.ctx, name, &tv) && tv.ndim == 1) return vec1(m, name, n);
    int64_t s[2] = {1, n};
    return ms_mrt_vec(m, name, n, 2, s);
}

static float *fold(ms_model *m, const float *norm, const float *proj, int64_t E)
{
    if (!norm || !proj) return NULL;
    float *f = ms_mrt_own(m, ms_malloc(sizeof(float) * (size_t)E));
    for (int64_t i = 0; i < E; i++) f[i] = norm[i] * proj[i];
    return f;
}

/* Bind one entry of the K3 tensor table into base (a layer's weights, or the model). */
static void bind_entry(ms_model *m, const ms_k3_tensor *t, int layer, void *base)
{
    const ms_k3_cfg *c = &k3(m)->cfg;
    char n[512];
    int64_t shape[3], count = 1;
    ms_k3_tensor_name(t, layer, n, sizeof n);
    for (int j = 0; j < t->ndim; j++) count *= (shape[j] = ms_k3_dim_value(c, t->dim[j]));
    void *dst = (char *)base + t->field;
    switch (t->kind) {
    case MS_K3_MAT:
    case MS_K3_EMBED: ms_mrt_mat(m, (ms_mat *)dst, n, shape[0], shape[1]); break;
    case MS_K3_RESPROJ: *(const float **)dst = vec_row(m, n, shape[1]); break;
    case MS_K3_ALOG: {
        ms_tview tv;
        int64_t Hk = c->kda_heads;
        if (!m->src.find(m->src.ctx, n, &tv))
            ms_mrt_error(m, "tensor %s is missing from %s", n, m->src.what);
        else if (numel(&tv) < Hk)
            ms_mrt_error(m, "tensor %s in %s has %lld values, fewer than the %lld KDA heads", n, tv.file,
                         (long long)numel(&tv), (long long)Hk);
        else
            *(const float **)dst = ms_mrt_widen(m, n, &tv, Hk); /* only the first Hk values are heads (spec §4.3) */
        break;
    }
    default: *(const float **)dst = ms_mrt_vec(m, n, count, t->ndim, shape); break;
    }
}

/* Routed expert e of layer i: MXFP4 as released (the expert format's parts: into the on-disk
 * store or the in-memory table), or dense weights (the fp32 oracle), used in place. */
static void bind_expert(ms_model *m, int i, int e)
{
    const ms_k3_cfg *c = &k3(m)->cfg;
    if (m->info.have_xfmt) {
        int rc = ms_mrt_expert(m, &m->info.xfmt, i, e);
        if (rc != 0) return;
    }
    char n[512];
    ms_tview tv;
    ms_k3_expert_name(i, e, 0, 2, n, sizeof n);
    if (!m->src.find(m->src.ctx, n, &tv)) {
        if (!m->info.have_xfmt) ms_mrt_error(m, "%s: %s", n, m->info.why_no_xfmt);
        ms_k3_expert_name(i, e, 0, 0, n, sizeof n);
        ms_mrt_error(m, "tensor %s is missing from %s", n, m->src.what);
        return;
    }
    ms_expert_w w;
    memset(&w, 0, sizeof w);
    static const ms_xrole roles[3] = {MS_XROLE_GATE, MS_XROLE_DOWN, MS_XROLE_UP}; /* w1, w2, w3 */
    int saved = m->files;
    m->files = 0; /* dense experts are used in place (only the fp32 oracle has them) */
    for (int j = 0; j < 3; j++) {
        ms_k3_expert_name(i, e, j, 2, n, sizeof n);
        int64_t rows = j == 1 ? c->latent : c->moe_inter, cols = j == 1 ? c->moe_inter : c->latent;
        ms_mrt_mat(m, &w.w[roles[j]], n, rows, cols);
    }
    m->files = saved;
    if (w.w[MS_XROLE_GATE].data && w.w[MS_XROLE_DOWN].data && w.w[MS_XROLE_UP].data) ms_mrt_expert_set(m, i, e, &w);
}

static void bind_layer(ms_model *m, int i)
{
    k3_model *k = k3(m);
    const ms_k3_cfg *c = &k->cfg;
    ms_layer_w *w = &k->layers[i];
    int n_refs0 = m->n_refs, nt;
    const ms_k3_tensor *tab = ms_k3_tensors(&nt);
    w->is_mla = c->is_mla[i];
    w->is_dense = ms_k3_cfg_is_dense(c, i);
    for (int j = 0; j < nt; j++)
        if (ms_k3_in_layer(&tab[j], c, i)) bind_entry(m, &tab[j], i, w);
    w->sa_fold = fold(m, w->sa_norm, w->sa_proj, c->hidden);
    w->mlp_fold = fold(m, w->mlp_norm, w->mlp_proj, c->hidden);
    if (!w->is_dense && !m->opts.remote_experts)
        for (int x = 0; x < c->n_experts && m->n_errors <= 8; x++) bind_expert(m, i, x);
    ms_mrt_refs_layer(m, n_refs0, i);
}

/* Before anything is sized from the config: its layer and expert counts must match the
 * checkpoint (the last layer and the last routed expert exist), so a wrong config is refused
 * at once instead of after allocating per-layer and per-expert tables. */
static int check_counts(const ms_k3_cfg *c, const ms_tsrc *src, const ms_run_opts *o)
{
    char n[512];
    ms_tview tv;
    snprintf(n, sizeof n, MS_K3_PFX "layers.%d.input_layernorm.weight", c->n_layers - 1);
    if (!src->find(src->ctx, n, &tv)) {
        ms_err_set("%s: config says num_hidden_layers = %d, but the checkpoint has no tensor %s", src->what,
                   c->n_layers, n);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    if ((o && o->remote_experts) || c->first_dense >= c->n_layers) return 0;
    ms_k3_expert_name(c->n_layers - 1, c->n_experts - 1, 0, 2, n, sizeof n); /* dense (fp32 oracle) */
    if (src->find(src->ctx, n, &tv)) return 0;
    ms_k3_expert_name(c->n_layers - 1, c->n_experts - 1, 0, 0, n, sizeof n); /* MXFP4 as released */
    if (src->find(src->ctx, n, &tv)) return 0;
    ms_err_set("%s: config says num_experts = %d, but the checkpoint has no tensor %s", src->what, c->n_experts, n);
    return ms_err_set_code(MS_EXIT_MODEL);
}

/* ---- sizes (the planner's hooks) ---- */

static size_t k3_work_floats(const ms_model *m, int64_t R, int64_t out_rows)
{
    return ms_k3_work_floats(&k3c(m)->cfg, R, out_rows);
}

static uint64_t k3_state_bytes(const ms_model *m, int64_t positions, int64_t spec_rows)
{
    const ms_k3_cfg *c = &k3c(m)->cfg;
    const ms_mla_cfg mc = ms_k3_mla_cfg(c);
    uint64_t total = 0;
    for (int i = 0; i < c->n_layers; i++) {
        if (c->is_mla[i]) {
            total += ms_mla_cache_bytes(&mc, positions);
        } else {
            total += ms_kda_state_bytes(c);
            /* undoing rejected speculative rows: the state before the pass + per-row inputs */
            if (spec_rows > 0) total += ms_kda_spec_bytes(c, spec_rows);
        }
    }
    return total;
}

static uint64_t k3_fixed_bytes(const ms_model *m, int threads, int64_t positions)
{
    const k3_model *k = k3c(m);
    const ms_k3_cfg *c = &k->cfg;
    const ms_mla_cfg mc = ms_k3_mla_cfg(c);
    uint64_t kvb = 0; /* kv_b, pulled whole when streamed */
    for (int i = 0; i < c->n_layers; i++)
        if (k->layers[i].is_mla) kvb = ms_mat_bytes(&k->layers[i].mla.kvb);
    return kvb + (uint64_t)threads * ms_mla_thread_bytes(&mc, positions) + ms_kda_fixed_bytes(c);
}

size_t ms_k3_work_floats(const ms_k3_cfg *c, int64_t R, int64_t out_rows)
{
    size_t r = (size_t)R, o = (size_t)out_rows, E = (size_t)c->hidden;
    size_t smax = (size_t)ms_layer_snaps_after(c, c->n_layers - 1);
    return MS_ARENA_SPAN(r * E) + MS_ARENA_SPAN(r * smax * E) + MS_ARENA_SPAN(r * (size_t)c->top_k) +
           MS_ARENA_SPAN(o * E) + MS_ARENA_SPAN(o * (size_t)c->vocab) + ms_layer_work_floats(c, R);
}

/* ---- sequences ---- */

static ms_seq *k3_seq_new(ms_model *m)
{
    const ms_k3_cfg *c = &k3(m)->cfg;
    const ms_mla_cfg mc = ms_k3_mla_cfg(c);
    k3_seq *s = ms_calloc(1, sizeof *s);
    s->base.m = m;
    s->ls = ms_calloc((size_t)c->n_layers, sizeof *s->ls);
    for (int i = 0; i < c->n_layers; i++) {
        if (c->is_mla[i]) {
            ms_mla_cache_init(&s->ls[i].mla);
            if (m->opts.max_positions > 0) ms_mla_cache_reserve(&s->ls[i].mla, &mc, m->opts.max_positions);
        } else {
            ms_kda_state_init(&s->ls[i].kda, c);
            if (m->opts.spec_window > 0) ms_kda_spec_reserve(&s->ls[i].kda, c, 1 + m->opts.spec_window);
        }
    }
    return &s->base;
}

static void k3_seq_free(ms_seq *base)
{
    k3_seq *s = k3s(base);
    for (int i = 0; i < k3(base->m)->cfg.n_layers; i++) {
        ms_kda_state_free(&s->ls[i].kda);
        ms_mla_cache_free(&s->ls[i].mla);
    }
    free(s->ls);
    free(s);
}

static ms_seq *k3_seq_clone(const ms_seq *base)
{
    const k3_seq *s = (const k3_seq *)base;
    ms_model *m = base->m;
    const ms_k3_cfg *c = &k3(m)->cfg;
    const ms_mla_cfg mc = ms_k3_mla_cfg(c);
    k3_seq *d = ms_calloc(1, sizeof *d);
    d->base = *base;
    d->ls = ms_calloc((size_t)c->n_layers, sizeof *d->ls);
    for (int i = 0; i < c->n_layers; i++) {
        if (c->is_mla[i]) {
            ms_mla_cache_copy(&d->ls[i].mla, &s->ls[i].mla, &mc);
        } else {
            ms_kda_state_copy(&d->ls[i].kda, &s->ls[i].kda, c);
            if (m->opts.spec_window > 0) ms_kda_spec_reserve(&d->ls[i].kda, c, 1 + m->opts.spec_window);
        }
    }
    return &d->base;
}

/* Saved state: per layer in order, an MLA layer's positions (int64) then its latents and rope
 * keys, a KDA layer's recurrent state S and its convolutions' history. */
static void k3_seq_save(const ms_seq *base, ms_sbuf *out)
{
    const k3_seq *s = (const k3_seq *)base;
    const ms_k3_cfg *c = &k3c(base->m)->cfg;
    size_t P = (size_t)c->kda_heads * (size_t)c->kda_head_dim, H = (size_t)(c->conv_k - 1);
    const ms_mla_cfg mc = ms_k3_mla_cfg(c);
    for (int i = 0; i < c->n_layers; i++) {
        if (c->is_mla[i]) {
            ms_mla_cache_save(&s->ls[i].mla, &mc, out);
        } else {
            const ms_kda_state *st = &s->ls[i].kda;
            ms_sbuf_add(out, (const char *)st->S, sizeof(float) * P * (size_t)c->kda_head_dim);
            ms_sbuf_add(out, (const char *)st->hq, sizeof(float) * P * H);
            ms_sbuf_add(out, (const char *)st->hk, sizeof(float) * P * H);
            ms_sbuf_add(out, (const char *)st->hv, sizeof(float) * P * H);
        }
    }
}

static int k3_seq_load(ms_seq *base, ms_reader *in)
{
    k3_seq *s = k3s(base);
    const ms_k3_cfg *c = &k3(base->m)->cfg;
    const ms_mla_cfg mc = ms_k3_mla_cfg(c);
    size_t P = (size_t)c->kda_heads * (size_t)c->kda_head_dim, H = (size_t)(c->conv_k - 1);
    int rc = 0;
    for (int i = 0; i < c->n_layers && rc == 0; i++) {
        if (c->is_mla[i]) {
            rc = ms_mla_cache_load(&s->ls[i].mla, &mc, base->pos, in);
        } else {
            ms_kda_state *st = &s->ls[i].kda;
            rc = ms_reader_take_floats(in, st->S, P * (size_t)c->kda_head_dim);
            if (rc == 0) rc = ms_reader_take_floats(in, st->hq, P * H);
            if (rc == 0) rc = ms_reader_take_floats(in, st->hk, P * H);
            if (rc == 0) rc = ms_reader_take_floats(in, st->hv, P * H);
        }
        if (rc == -2) {
            ms_err_set("the sequence state holds a non-finite value (NaN or infinity) in layer %d, at byte %zu", i, in->at);
            return -1;
        }
    }
    if (rc == 0) return 0;
    ms_err_set("the sequence state does not fit this model (layer sizes differ, or it was cut short)");
    return -1;
}

/* Before a speculative pass of T rows: every KDA layer remembers its state and records. */
static void spec_begin(k3_seq *s, int64_t T)
{
    const ms_k3_cfg *c = &k3(s->base.m)->cfg;
    for (int i = 0; i < c->n_layers; i++)
        if (!c->is_mla[i]) {
            ms_kda_spec_reserve(&s->ls[i].kda, c, T);
            ms_kda_spec_begin(&s->ls[i].kda, c);
        }
}

static void k3_seq_keep(ms_seq *base, int64_t keep)
{
    k3_seq *s = k3s(base);
    k3_model *k = k3(base->m);
    const ms_k3_cfg *c = &k->cfg;
    int64_t drop = base->spec_rows - keep;
    for (int i = 0; i < c->n_layers; i++) {
        if (c->is_mla[i]) {
            MS_ASSERT(s->ls[i].mla.n >= drop);
            s->ls[i].mla.n -= drop; /* positions past n are never read, and are overwritten next */
        } else {
            ms_kda_spec_end(&s->ls[i].kda, c, &k->layers[i].kda, keep, base->m->pool);
        }
    }
    base->pos -= drop;
    base->spec_rows = 0;
}

/* ---- the pass ---- */


/* The item (sequence index in the pass) that row r belongs to. */
/* ---- the pass: layers and tail for the runtime's ms_mrt_pass_run ---- */

static void k3_pass_begin(ms_model *m, ms_pass *p)
{
    k3_model *k = k3(m);
    int smax = ms_layer_snaps_after(&k->cfg, k->cfg.n_layers - 1);
    for (int i = 0; i < p->n; i++)
        if (p->items[i].spec) spec_begin(k3s(p->items[i].seq), p->items[i].T);
    k->snaps = ms_arena_take(p->ar, (size_t)(p->R * smax * k->cfg.hidden)); /* [R][smax][E] */
    k->n_snap = 0;
}

static int k3_pass_layer(ms_model *m, ms_pass *p, int l)
{
    k3_model *k = k3(m);
    const ms_k3_cfg *c = &k->cfg;
    ms_layer_state *st[MS_MODEL_MAX_SEQS]; /* [n] this layer's states */
    for (int i = 0; i < p->n; i++) st[i] = &k3s(p->items[i].seq)->ls[l];
    return ms_layer_forward_batch(c, l, &k->layers[l], st, p->seg, p->n, &m->experts, p->h, k->snaps,
                                  ms_layer_snaps_after(c, c->n_layers - 1), &k->n_snap, p->R, p->route, p->ar, m->pool);
}

static int k3_layer_routes(const ms_model *m, int l) { return !k3c(m)->layers[l].is_dense; }

/* Output AttnRes over all snapshots and the last hidden state, then the final norm. */
static void k3_tail_row(ms_model *m, const ms_pass *p, int64_t r, float *out)
{
    k3_model *k = k3(m);
    const ms_k3_cfg *c = &k->cfg;
    int64_t E = c->hidden;
    int smax = ms_layer_snaps_after(c, c->n_layers - 1);
    const float *srcs[MS_K3_CFG_MAX_SNAPSHOTS + 1];
    MS_ASSERT(k->n_snap == smax && smax <= MS_K3_CFG_MAX_SNAPSHOTS); /* checked by ms_k3_cfg */
    for (int sidx = 0; sidx < smax; sidx++) srcs[sidx] = k->snaps + (r * smax + sidx) * E;
    srcs[smax] = p->h + r * E;
    ms_k3_attnres(srcs, smax + 1, E, k->out_fold, c->eps, out);
    ms_rmsnorm(out, k->final_norm, E, c->eps, out);
}

static const ms_mat *k3_lm_head(ms_model *m) { return &k3(m)->lm_head; }

static const ms_pass_ops k3_pass = {
    .pass_begin = k3_pass_begin,
    .layer = k3_pass_layer,
    .layer_routes = k3_layer_routes,
    .tail_row = k3_tail_row,
    .lm_head = k3_lm_head,
};

/* ---- opening ---- */

static void k3_free(ms_model *m)
{
    k3_model *k = k3(m);
    free(k->layers);
    ms_mat_buf_free(&k->kvb_buf);
    ms_k3_cfg_free(&k->cfg);
}

static const ms_model_ops k3_ops = {
    .free = k3_free,
    .pass = &k3_pass,
    .seq_new = k3_seq_new,
    .seq_free = k3_seq_free,
    .seq_keep = k3_seq_keep,
    .seq_clone = k3_seq_clone,
    .seq_save = k3_seq_save,
    .seq_load = k3_seq_load,
    .work_floats = k3_work_floats,
    .state_bytes = k3_state_bytes,
    .fixed_bytes = k3_fixed_bytes,
};

void ms_k3_info_of_cfg(const ms_k3_cfg *c, ms_model_info *in)
{
    in->family = ms_k3_experts.name;
    in->vocab = c->vocab;
    in->hidden = c->hidden;
    in->n_layers = c->n_layers;
    in->first_moe = c->first_dense;
    in->n_experts = c->n_experts;
    in->top_k = c->top_k;
    in->bos_id = c->bos_id;
    in->eos_id = c->eos_id;
}

/* What callers may know (ms_model_info): the config's, and the sizes for the run's options. */
static void fill_info(k3_model *k, const ms_run_opts *o)
{
    const ms_k3_cfg *c = &k->cfg;
    ms_model_info *in = &k->base.info;
    ms_k3_info_of_cfg(c, in);
    in->have_xfmt = ms_k3_experts_fmt(c->latent, c->moe_inter, c->situ_b1, c->situ_b2, &in->xfmt) == 0;
    if (!in->have_xfmt) snprintf(in->why_no_xfmt, sizeof in->why_no_xfmt, "%s", ms_err_msg());
    int64_t pos = o && o->max_positions > 0 ? o->max_positions : 4096;
    int win = o && o->spec_window > 0 ? o->spec_window : 0;
    in->state_bytes = k3_state_bytes(&k->base, pos, win ? 1 + win : 0);
    in->scratch_row_bytes = 4 * (ms_k3_work_floats(c, 1, 1) - ms_k3_work_floats(c, 0, 0));
    in->max_context = 0; /* K3's config names none: the run's max_positions bounds a sequence */
}

ms_model *ms_k3_model_bind(const ms_k3_cfg *cfg, const ms_tsrc *src, const ms_run_opts *o)
{
    if (check_counts(cfg, src, o) != 0) return NULL;
    k3_model *k = ms_calloc(1, sizeof *k);
    ms_model *m = &k->base;
    k->cfg = *cfg;
    k->cfg.full_attn = ms_malloc(sizeof(int) * (size_t)cfg->n_full_attn);
    memcpy(k->cfg.full_attn, cfg->full_attn, sizeof(int) * (size_t)cfg->n_full_attn);
    k->cfg.is_mla = ms_malloc((size_t)cfg->n_layers);
    memcpy(k->cfg.is_mla, cfg->is_mla, (size_t)cfg->n_layers);
    const ms_k3_cfg *c = &k->cfg;
    fill_info(k, o);
    float params[2] = {c->situ_b1, c->situ_b2};
    m->embed = &k->embed;
    if (ms_mrt_init(m, &k3_ops, src, o, MS_XACT_SITU_GLU, params, c->latent) != 0) {
        ms_model_free(m);
        return NULL;
    }
    k->layers = ms_calloc((size_t)c->n_layers, sizeof *k->layers);
    for (int i = 0; i < c->n_layers; i++) k->layers[i].mla.kvb_buf = &k->kvb_buf;
    int nt;
    const ms_k3_tensor *tab = ms_k3_tensors(&nt);
    for (int j = 0; j < nt; j++)
        if (tab[j].where == MS_K3_MODEL) bind_entry(m, &tab[j], -1, k);
    k->out_fold = fold(m, k->out_norm, k->out_proj, c->hidden);
    for (int i = 0; i < c->n_layers && m->n_errors <= 8; i++) bind_layer(m, i);
    if (ms_mrt_bind_done(m) != 0) {
        ms_model_free(m);
        return NULL;
    }
    return m;
}

static ms_model *bind_cfg(const void *cfg, const ms_tsrc *src, const ms_run_opts *o, const ms_xfmt *f)
{
    (void)f; /* K3's experts are described by its config alone */
    return ms_k3_model_bind(cfg, src, o);
}

ms_model *ms_k3_model_open(const char *dir, const ms_run_opts *o)
{
    char path[4096];
    ms_k3_cfg cfg;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (ms_k3_cfg_load(path, &cfg) != 0) return NULL;
    ms_model *m = ms_mrt_open_dir(dir, o, NULL, 0, bind_cfg, &cfg);
    ms_k3_cfg_free(&cfg);
    return m;
}

const ms_k3_cfg *ms_k3_model_cfg(const ms_model *m)
{
    MS_ASSERT(m->ops == &k3_ops);
    return &k3c(m)->cfg;
}
