/* ms_model: binds a Kimi K3 checkpoint's tensors to layer weights and runs the forward pass. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ms_err.h"
#include "ms_file.h"
#include "ms_k3_tensors.h"
#include "ms_model_int.h"
#include "ms_ops.h"

struct ms_seq {
    const ms_model *m;
    ms_layer_state *ls;        /* [N] */
    int64_t pos;
    int64_t spec_rows;         /* rows of the last speculative pass not yet settled by ms_seq_keep */
};

void *ms_model_own(ms_model *m, void *p)
{
    if (m->n_owned == m->cap_owned) {
        m->cap_owned = m->cap_owned ? 2 * m->cap_owned : 256;
        m->owned = ms_realloc(m->owned, sizeof(void *) * m->cap_owned);
    }
    m->owned[m->n_owned++] = p;
    return p;
}

/* Collect binding problems so one run reports several at once. */
static void bind_error(ms_model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bind_error(ms_model *m, const char *fmt, ...)
{
    m->n_errors++;
    if (m->n_errors > 8) return;
    size_t used = strlen(m->errors);
    if (used + 8 >= sizeof m->errors) return;
    if (used) {
        strcat(m->errors, "; ");
        used += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->errors + used, sizeof m->errors - used, fmt, ap);
    va_end(ap);
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t u = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && u < n; i++) u += (size_t)snprintf(buf + u, n - u, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (u < n) snprintf(buf + u, n - u, "]");
}

/* Look up name and check its shape (ndim dims given; -1 = any). Returns 1 if usable. */
static int get(ms_model *m, const char *name, ms_tview *tv, int ndim, const int64_t *shape)
{
    if (!m->src.find(m->src.ctx, name, tv)) {
        bind_error(m, "tensor %s is missing from %s", name, m->src.what);
        return 0;
    }
    int ok = tv->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = shape[i] < 0 || tv->shape[i] == shape[i];
    if (!ok) {
        char want[128], got[128];
        shape_str(want, sizeof want, ndim, shape);
        shape_str(got, sizeof got, tv->ndim, tv->shape);
        bind_error(m, "tensor %s in %s has shape %s, the config implies %s", name, tv->file, got, want);
        return 0;
    }
    return 1;
}

static int64_t numel(const ms_tview *tv)
{
    int64_t n = 1;
    for (int i = 0; i < tv->ndim; i++) n *= tv->shape[i];
    return n;
}

/* Safetensors packs tensors back to back, so a tensor may sit at any byte offset; element
 * reads need natural alignment, so misaligned data is copied into an owned buffer. */
static const void *aligned(ms_model *m, const void *data, size_t nbytes, size_t align)
{
    if (((uintptr_t)data & (align - 1)) == 0) return data;
    void *p = ms_model_own(m, ms_malloc(nbytes));
    memcpy(p, data, nbytes);
    return p;
}

/* The first nbytes of a tensor, readable with natural alignment `align`: in place for a
 * tensor in memory (copied if misaligned); for a tensor in a file, read now into a buffer the
 * model owns. Nothing reads a file through a mapping, so a file truncated during the run is an
 * I/O error naming it, never SIGBUS. NULL after a binding error. */
static const void *tensor_bytes(ms_model *m, const char *name, const ms_tview *tv, size_t nbytes, size_t align)
{
    if (tv->data) return aligned(m, tv->data, nbytes, align);
    if (tv->fidx < 0 || !m->src.paths || tv->fidx >= m->src.n_paths) {
        bind_error(m, "tensor %s has neither bytes in memory nor a file", name);
        return NULL;
    }
    const char *path = m->src.paths[tv->fidx];
    void *p = ms_model_own(m, ms_malloc(nbytes ? nbytes : 1));
    int fd = ms_file_open(path, "shard", 0, 0, NULL);
    if (fd < 0 || ms_file_pread(fd, path, tv->foff, p, nbytes) != 0) {
        bind_error(m, "tensor %s: %s", name, ms_err_msg());
        m->bind_io = 1;
        p = NULL;
    }
    if (fd >= 0) close(fd);
    return p;
}

/* A vector of n floats widened from F32/BF16/F16 (owned by the model unless F32 in memory). */
static const float *widen(ms_model *m, const char *name, const ms_tview *tv, int64_t n)
{
    switch (tv->dtype) {
    case MS_DT_F32:
        return tensor_bytes(m, name, tv, sizeof(float) * (size_t)n, sizeof(float));
    case MS_DT_BF16:
    case MS_DT_F16: {
        const uint8_t *raw = tensor_bytes(m, name, tv, 2 * (size_t)n, 1);
        if (!raw) return NULL;
        float *o = ms_model_own(m, ms_malloc(sizeof(float) * (size_t)n));
        for (int64_t i = 0; i < n; i++) {
            uint16_t b;
            memcpy(&b, raw + 2 * i, 2);
            o[i] = tv->dtype == MS_DT_BF16 ? ms_bf16_to_f32(b) : ms_f16_to_f32(b);
        }
        return o;
    }
    default:
        bind_error(m, "tensor %s in %s has dtype %s; expected F32, BF16 or F16", name, tv->file,
                   ms_dtype_name(tv->dtype));
        return NULL;
    }
}

/* Vector tensor: any shape whose element count is n (e.g. [E] or [1,E] or [P,1,K]). */
static const float *vec(ms_model *m, const char *name, int64_t n, int ndim, const int64_t *shape)
{
    ms_tview tv;
    if (!get(m, name, &tv, ndim, shape)) return NULL;
    return widen(m, name, &tv, n);
}

static const float *vec1(ms_model *m, const char *name, int64_t n)
{
    int64_t s[1] = {n};
    return vec(m, name, n, 1, s);
}

/* AttnRes projections are [1, E] as released; [E] is accepted too. */
static const float *vec_row(ms_model *m, const char *name, int64_t n)
{
    ms_tview tv;
    if (m->src.find(m->src.ctx, name, &tv) && tv.ndim == 1) return vec1(m, name, n);
    int64_t s[2] = {1, n};
    return vec(m, name, n, 2, s);
}

/* Record a trunk matrix that lives in a file: resident or streamed, as the plan decides. */
static void add_ref(ms_model *m, ms_mat *dst, const char *name, const ms_tview *tv)
{
    if (m->n_refs == m->cap_refs) {
        m->cap_refs = m->cap_refs ? 2 * m->cap_refs : 64;
        m->refs = ms_realloc(m->refs, sizeof *m->refs * (size_t)m->cap_refs);
    }
    ms_wref *r = &m->refs[m->n_refs++];
    r->dst = dst;
    r->name = ms_strdup(name);
    r->file = tv->fidx;
    r->off = tv->foff;
    r->bytes = ms_mat_bytes(dst);
    r->layer = -1;
}

/* Bind a dense matrix [rows, cols] into *w. */
static void mat(ms_model *m, ms_mat *w, const char *name, int64_t rows, int64_t cols)
{
    ms_tview tv;
    int64_t s[2] = {rows, cols};
    *w = (ms_mat){MS_WT_F32, rows, cols, NULL, NULL, NULL, NULL};
    if (!get(m, name, &tv, 2, s)) return;
    switch (tv.dtype) {
    case MS_DT_F32:
    case MS_DT_BF16:
        w->type = tv.dtype == MS_DT_F32 ? MS_WT_F32 : MS_WT_BF16;
        if (m->files && tv.fidx >= 0)
            add_ref(m, w, name, &tv); /* data comes later: pinned read or stream */
        else
            w->data = tensor_bytes(m, name, &tv, (size_t)ms_mat_bytes(w), tv.dtype == MS_DT_F32 ? 4 : 2);
        break;
    case MS_DT_F16: {
        const uint8_t *raw = tensor_bytes(m, name, &tv, 2 * (size_t)(rows * cols), 1);
        if (!raw) break;
        float *o = ms_model_own(m, ms_malloc(sizeof(float) * (size_t)(rows * cols)));
        for (int64_t i = 0; i < rows * cols; i++) {
            uint16_t b;
            memcpy(&b, raw + 2 * i, 2);
            o[i] = ms_f16_to_f32(b);
        }
        w->data = o;
        break;
    }
    default:
        bind_error(m, "tensor %s in %s has dtype %s; a dense matrix must be F32, BF16 or F16", name, tv.file,
                   ms_dtype_name(tv.dtype));
    }
}

/* One routed-expert matrix (m: 0 = w1, 1 = w2, 2 = w3): MXFP4 (weight_packed U8 [rows, cols/2]
 * + weight_scale U8 [rows, cols/32]) as released, or a dense weight (fp32 oracle). Returns 1 for
 * MXFP4 (tp, ts describe the two parts), 2 for dense, 0 after a binding error. */
static int expert_mat(ms_model *m, int layer, int e, int which, int64_t rows, int64_t cols, ms_mat *w, ms_tview *tp,
                      ms_tview *ts)
{
    char n1[512], n2[512];
    *w = (ms_mat){MS_WT_MXFP4, rows, cols, NULL, NULL, NULL, NULL};
    ms_k3_expert_name(layer, e, which, 0, n1, sizeof n1);
    if (!m->src.find(m->src.ctx, n1, tp)) {
        ms_tview td;
        ms_k3_expert_name(layer, e, which, 2, n2, sizeof n2);
        if (m->src.find(m->src.ctx, n2, &td)) {
            int saved = m->files;
            m->files = 0; /* dense experts are used in place (only the fp32 oracle has them) */
            mat(m, w, n2, rows, cols);
            m->files = saved;
            return w->data ? 2 : 0;
        }
        bind_error(m, "tensor %s is missing from %s", n1, m->src.what);
        return 0;
    }
    if (cols % 32 != 0) {
        bind_error(m, "tensor %s: MXFP4 row width %lld is not a multiple of 32", n1, (long long)cols);
        return 0;
    }
    ms_k3_expert_name(layer, e, which, 1, n2, sizeof n2);
    int64_t sp[2] = {rows, cols / 2}, ss[2] = {rows, cols / 32};
    if (!get(m, n1, tp, 2, sp) || !get(m, n2, ts, 2, ss)) return 0;
    if (tp->dtype != MS_DT_U8 || ts->dtype != MS_DT_U8) {
        bind_error(m, "tensors %s / %s in %s must be U8 (MXFP4), found %s / %s", n1, n2, tp->file,
                   ms_dtype_name(tp->dtype), ms_dtype_name(ts->dtype));
        return 0;
    }
    if (!m->files || tp->fidx < 0) { /* in memory: bound now (experts on disk go to the store) */
        w->data = tensor_bytes(m, n1, tp, (size_t)(rows * (cols / 2)), 1);
        w->scales = tensor_bytes(m, n2, ts, (size_t)(rows * (cols / 32)), 1);
        if (!w->data || !w->scales) return 0;
    }
    return 1;
}

/* Routed expert e of layer i: into the on-disk store (files) or the in-memory table. */
static void bind_expert(ms_model *m, int i, int e)
{
    const ms_cfg *c = &m->cfg;
    ms_mat w[3];
    ms_tview tv[6];
    int kind[3];
    for (int j = 0; j < 3; j++) {
        int64_t rows = j == 1 ? c->latent : c->moe_inter, cols = j == 1 ? c->moe_inter : c->latent;
        kind[j] = expert_mat(m, i, e, j, rows, cols, &w[j], &tv[2 * j], &tv[2 * j + 1]);
        if (!kind[j]) return;
    }
    if (m->files && kind[0] == 1 && kind[1] == 1 && kind[2] == 1 && tv[0].fidx >= 0) {
        ms_xloc *x = &m->xlocs[(size_t)i * (size_t)c->n_experts + (size_t)e];
        for (int j = 0; j < 6; j++) {
            x->file[j] = tv[j].fidx;
            x->off[j] = tv[j].foff;
            x->len[j] = j % 2 == 0 ? (uint64_t)w[j / 2].rows * (uint64_t)(w[j / 2].cols / 2)
                                   : (uint64_t)w[j / 2].rows * (uint64_t)(w[j / 2].cols / 32);
        }
        return;
    }
    for (int j = 0; j < 3; j++) /* mixed kinds on disk: the MXFP4 parts are read in too */
        if (kind[j] == 1 && !w[j].data) {
            char base[512];
            ms_k3_expert_name(i, e, j, 0, base, sizeof base);
            w[j].data = tensor_bytes(m, base, &tv[2 * j], (size_t)(w[j].rows * (w[j].cols / 2)), 1);
            w[j].scales = tensor_bytes(m, base, &tv[2 * j + 1], (size_t)(w[j].rows * (w[j].cols / 32)), 1);
            if (!w[j].data || !w[j].scales) return;
        }
    ms_expert_w ew = {w[0], w[1], w[2]};
    ms_expert_table_set(m->table, i, e, &ew);
}

static float *fold(ms_model *m, const float *norm, const float *proj, int64_t E)
{
    if (!norm || !proj) return NULL;
    float *f = ms_model_own(m, ms_malloc(sizeof(float) * (size_t)E));
    for (int64_t i = 0; i < E; i++) f[i] = norm[i] * proj[i];
    return f;
}

/* Bind one entry of the K3 tensor table into base (a layer's weights, or the model). */
static void bind_entry(ms_model *m, const ms_k3_tensor *t, int layer, void *base)
{
    const ms_cfg *c = &m->cfg;
    char n[512];
    int64_t shape[3], count = 1;
    ms_k3_tensor_name(t, layer, n, sizeof n);
    for (int j = 0; j < t->ndim; j++) count *= (shape[j] = ms_k3_dim_value(c, t->dim[j]));
    void *dst = (char *)base + t->field;
    switch (t->kind) {
    case MS_K3_MAT:
    case MS_K3_EMBED: mat(m, (ms_mat *)dst, n, shape[0], shape[1]); break;
    case MS_K3_RESPROJ: *(const float **)dst = vec_row(m, n, shape[1]); break;
    case MS_K3_ALOG: {
        ms_tview tv;
        int64_t Hk = c->kda_heads;
        if (!m->src.find(m->src.ctx, n, &tv))
            bind_error(m, "tensor %s is missing from %s", n, m->src.what);
        else if (numel(&tv) < Hk)
            bind_error(m, "tensor %s in %s has %lld values, fewer than the %lld KDA heads", n, tv.file,
                       (long long)numel(&tv), (long long)Hk);
        else
            *(const float **)dst = widen(m, n, &tv, Hk); /* only the first Hk values are heads (spec §4.3) */
        break;
    }
    default: *(const float **)dst = vec(m, n, count, t->ndim, shape); break;
    }
}

static void bind_layer(ms_model *m, int i)
{
    const ms_cfg *c = &m->cfg;
    ms_layer_w *w = &m->layers[i];
    int n_refs0 = m->n_refs, nt;
    const ms_k3_tensor *tab = ms_k3_tensors(&nt);
    w->is_mla = c->is_mla[i];
    w->is_dense = ms_cfg_is_dense(c, i);
    for (int j = 0; j < nt; j++)
        if (ms_k3_in_layer(&tab[j], c, i)) bind_entry(m, &tab[j], i, w);
    w->sa_fold = fold(m, w->sa_norm, w->sa_proj, c->hidden);
    w->mlp_fold = fold(m, w->mlp_norm, w->mlp_proj, c->hidden);
    if (!w->is_dense && !m->opts.remote_experts)
        for (int x = 0; x < c->n_experts && m->n_errors <= 8; x++) bind_expert(m, i, x);
    for (int r = n_refs0; r < m->n_refs; r++) m->refs[r].layer = i;
}

/* Before anything is sized from the config: its layer and expert counts must match the
 * checkpoint (the last layer and the last routed expert exist), so a wrong config is refused
 * at once instead of after allocating per-layer and per-expert tables. */
static int check_counts(const ms_cfg *c, const ms_tsrc *src, const ms_run_opts *o)
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

ms_model *ms_model_bind(const ms_cfg *cfg, const ms_tsrc *src, const ms_run_opts *o)
{
    if (check_counts(cfg, src, o) != 0) return NULL;
    ms_model *m = ms_calloc(1, sizeof *m);
    m->cfg = *cfg;
    m->cfg.full_attn = ms_malloc(sizeof(int) * (size_t)cfg->n_full_attn);
    memcpy(m->cfg.full_attn, cfg->full_attn, sizeof(int) * (size_t)cfg->n_full_attn);
    m->cfg.is_mla = ms_malloc((size_t)cfg->n_layers);
    memcpy(m->cfg.is_mla, cfg->is_mla, (size_t)cfg->n_layers);
    m->src = *src;
    if (o) m->opts = *o;
    m->files = src->paths != NULL && src->n_paths > 0;
    m->embed_ref = -1;
    m->pool = ms_pool_new(m->opts.n_threads);
    if (!m->pool) {
        ms_model_free(m);
        return NULL;
    }
    const ms_cfg *c = &m->cfg;
    int64_t E = c->hidden;
    m->table = ms_expert_table_new(c->n_layers, c->n_experts, c->latent, c->situ_b1, c->situ_b2, m->pool);
    m->experts = ms_expert_table_iface(m->table);
    if (m->files) m->xlocs = ms_calloc((size_t)c->n_layers * (size_t)c->n_experts, sizeof *m->xlocs);
    m->layers = ms_calloc((size_t)c->n_layers, sizeof *m->layers);
    int nt;
    const ms_k3_tensor *tab = ms_k3_tensors(&nt);
    for (int j = 0; j < nt; j++)
        if (tab[j].where == MS_K3_MODEL) bind_entry(m, &tab[j], -1, m);
    for (int r = 0; r < m->n_refs; r++)
        if (m->refs[r].dst == &m->embed) m->embed_ref = r;
    m->out_fold = fold(m, m->out_norm, m->out_proj, E);
    for (int i = 0; i < c->n_layers && m->n_errors <= 8; i++) bind_layer(m, i);
    if (m->n_errors) {
        ms_err_set("%s: %d tensor problem%s: %s%s", src->what, m->n_errors, m->n_errors > 1 ? "s" : "", m->errors,
                   m->n_errors > 8 ? "; ..." : "");
        ms_err_set_code(m->bind_io ? MS_EXIT_IO : MS_EXIT_MODEL);
        ms_model_free(m);
        return NULL;
    }
    if (m->files && ms_mload_setup(m) != 0) {
        ms_model_free(m);
        return NULL;
    }
    return m;
}

static int st_find(void *ctx, const char *name, ms_tview *out)
{
    const ms_st *st = ctx;
    const ms_st_tensor *t = ms_st_find(st, name);
    if (!t) return 0;
    out->dtype = t->dtype;
    out->ndim = t->ndim;
    memcpy(out->shape, t->shape, sizeof out->shape);
    out->data = NULL; /* bytes are read from the file (never mapped) */
    out->file = ms_st_file_path(st, t->file);
    out->fidx = t->file;
    out->foff = t->offset;
    return 1;
}

ms_model *ms_model_open(const char *dir, const ms_run_opts *o)
{
    char path[4096];
    ms_cfg cfg;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (ms_cfg_load(path, &cfg) != 0) return NULL;
    ms_st *st = ms_st_open_dir(dir);
    if (!st) {
        ms_cfg_free(&cfg);
        return NULL;
    }
    int nf = ms_st_file_count(st);
    const char **paths = ms_malloc(sizeof(char *) * (size_t)nf);
    for (int i = 0; i < nf; i++) paths[i] = ms_st_file_path(st, i);
    ms_tsrc src = {st_find, st, dir, paths, nf};
    ms_model *m = ms_model_bind(&cfg, &src, o);
    ms_cfg_free(&cfg);
    if (!m) {
        free(paths);
        ms_st_close(st);
        return NULL;
    }
    m->st = st;
    m->src.paths = paths; /* owned from now on */
    return m;
}

ms_model *ms_model_load(const char *dir, int n_threads)
{
    ms_run_opts o = {0};
    o.n_threads = n_threads;
    return ms_model_open(dir, &o);
}

void ms_model_free(ms_model *m)
{
    if (!m) return;
    ms_mload_teardown(m);
    for (size_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    for (int i = 0; i < m->n_refs; i++) free(m->refs[i].name);
    free(m->refs);
    free(m->xlocs);
    free(m->layers);
    ms_expert_table_free(m->table);
    ms_arena_free(&m->work);
    ms_pool_free(m->pool);
    if (m->st) free((void *)m->src.paths);
    ms_st_close(m->st);
    ms_cfg_free(&m->cfg);
    free(m);
}

const ms_cfg *ms_model_cfg(const ms_model *m) { return &m->cfg; }
const ms_plan *ms_model_plan(const ms_model *m) { return m->planned ? &m->plan : NULL; }
int64_t ms_model_chunk(const ms_model *m) { return m->planned ? m->plan.chunk : 64; }
int ms_model_max_seqs(const ms_model *m)
{
    if (!m->planned && m->opts.fit_seqs > 0) return m->opts.fit_seqs;
    return m->opts.max_seqs > 1 ? m->opts.max_seqs : 1;
}
ms_pool *ms_model_pool(ms_model *m) { return m->pool; }
void ms_model_set_experts(ms_model *m, ms_experts ex) { m->experts = ex; }
ms_experts ms_model_experts(ms_model *m) { return m->experts; }
ms_experts ms_model_local_experts(ms_model *m) { return ms_expert_table_iface(m->table); }

void ms_model_set_route_observer(ms_model *m, ms_route_fn fn, void *ctx)
{
    m->route_fn = fn;
    m->route_ctx = ctx;
}

ms_seq *ms_seq_new(const ms_model *m)
{
    const ms_cfg *c = &m->cfg;
    ms_seq *s = ms_calloc(1, sizeof *s);
    s->m = m;
    s->ls = ms_calloc((size_t)c->n_layers, sizeof *s->ls);
    for (int i = 0; i < c->n_layers; i++) {
        if (c->is_mla[i]) {
            ms_mla_cache_init(&s->ls[i].mla);
            if (m->opts.max_positions > 0) ms_mla_cache_reserve(&s->ls[i].mla, c, m->opts.max_positions);
        }
        else {
            ms_kda_state_init(&s->ls[i].kda, c);
            if (m->opts.spec_window > 0) ms_kda_spec_reserve(&s->ls[i].kda, c, 1 + m->opts.spec_window);
        }
    }
    return s;
}

void ms_seq_free(ms_seq *s)
{
    if (!s) return;
    for (int i = 0; i < s->m->cfg.n_layers; i++) {
        ms_kda_state_free(&s->ls[i].kda);
        ms_mla_cache_free(&s->ls[i].mla);
    }
    free(s->ls);
    free(s);
}

int64_t ms_seq_pos(const ms_seq *s) { return s->pos; }

int ms_model_spec_window(const ms_model *m) { return m->opts.spec_window > 0 ? m->opts.spec_window : 0; }

/* Before a speculative pass of T rows: every KDA layer remembers its state and records. */
static void spec_begin(ms_seq *s, int64_t T)
{
    const ms_cfg *c = &s->m->cfg;
    MS_ASSERT(s->spec_rows == 0);
    for (int i = 0; i < c->n_layers; i++)
        if (!c->is_mla[i]) {
            ms_kda_spec_reserve(&s->ls[i].kda, c, T);
            ms_kda_spec_begin(&s->ls[i].kda, c);
        }
    s->spec_rows = T;
}

void ms_seq_keep(ms_seq *s, int64_t keep)
{
    const ms_cfg *c = &s->m->cfg;
    int64_t T = s->spec_rows, drop = T - keep;
    MS_ASSERT(T > 0 && keep >= 1 && keep <= T);
    for (int i = 0; i < c->n_layers; i++) {
        if (c->is_mla[i]) {
            MS_ASSERT(s->ls[i].mla.n >= drop);
            s->ls[i].mla.n -= drop; /* positions past n are never read, and are overwritten next */
        } else {
            ms_kda_spec_end(&s->ls[i].kda, c, &s->m->layers[i].kda, keep, s->m->pool);
        }
    }
    s->pos -= drop;
    s->spec_rows = 0;
}

size_t ms_model_work_floats(const ms_cfg *c, int64_t R, int64_t out_rows)
{
    size_t r = (size_t)R, o = (size_t)out_rows, E = (size_t)c->hidden;
    size_t smax = (size_t)ms_layer_snaps_after(c, c->n_layers - 1);
    return MS_ARENA_SPAN(r * E) + MS_ARENA_SPAN(r * smax * E) + MS_ARENA_SPAN(r * (size_t)c->top_k) +
           MS_ARENA_SPAN(o * E) + MS_ARENA_SPAN(o * (size_t)c->vocab) + ms_layer_work_floats(c, R);
}

/* The first non-finite value of rows [0, R) of x (width W), as a row index, or -1. */
static int64_t first_nonfinite_row(const float *x, int64_t R, int64_t W)
{
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < W; j++)
            if (!isfinite(x[r * W + j])) return r;
    return -1;
}

/* The item (sequence index in the pass) that row r belongs to. */
static int item_of_row(const ms_rows *seg, int n, int64_t r)
{
    for (int i = 0; i < n; i++)
        if (r >= seg[i].r0 && r < seg[i].r0 + seg[i].T) return i;
    return -1;
}

int ms_model_forward_batch(ms_model *m, const ms_batch_item *items, int n)
{
    const ms_cfg *c = &m->cfg;
    int64_t E = c->hidden, V = c->vocab;
    int smax = ms_layer_snaps_after(c, c->n_layers - 1);
    int rc = -1;
    MS_ASSERT(n >= 0 && n <= MS_LAYER_MAX_SEQS); /* n = 0: the zero-row walk of ms_model_schedule */
    ms_rows seg[MS_LAYER_MAX_SEQS];
    int64_t R = 0;
    for (int i = 0; i < n; i++) {
        MS_ASSERT(items[i].T >= 1 && items[i].seq && items[i].seq->m == m && items[i].seq->spec_rows == 0);
        for (int j = 0; j < i; j++) MS_ASSERT(items[j].seq != items[i].seq);
        for (int64_t t = 0; t < items[i].T; t++)
            if (items[i].ids[t] < 0 || items[i].ids[t] >= V) {
                ms_err_set("token id %d at position %lld is outside the vocabulary (0..%lld)", items[i].ids[t],
                           (long long)(items[i].seq->pos + t), (long long)(V - 1));
                ms_err_set_code(MS_EXIT_INPUT);
                return -1;
            }
        seg[i] = (ms_rows){R, items[i].T};
        R += items[i].T;
    }
    int64_t out_rows = 0; /* logits rows asked for */
    for (int i = 0; i < n; i++) out_rows += items[i].all_rows ? items[i].T : 1;
    /* All scratch of the pass comes from the model's arena, sized once for the plan's passes
     * (it grows only for a caller that exceeds them, e.g. an unplanned in-memory model). */
    ms_arena *ar = &m->work;
    MS_ASSERT(ar->used == 0);
    ms_arena_reserve(ar, ms_model_work_floats(c, R, out_rows));
    float *h = ms_arena_take(ar, (size_t)(R * E));                         /* [R][E] */
    float *snaps = ms_arena_take(ar, (size_t)(R * smax * E));              /* [R][smax][E] */
    int32_t *route = (int32_t *)ms_arena_take(ar, (size_t)(R * c->top_k)); /* [R][k] */
    float *x = ms_arena_take(ar, (size_t)(out_rows * E));                  /* [out_rows][E] */
    float *lg = ms_arena_take(ar, (size_t)(out_rows * V));                 /* [out_rows][V] */
    ms_layer_state *st[MS_LAYER_MAX_SEQS];                                 /* [n] this layer's states */
    for (int i = 0; i < n; i++)
        for (int64_t t = 0; t < items[i].T; t++) {
            float *ht = h + (seg[i].r0 + t) * E;
            if (m->embed.data)
                ms_mat_row_f32(&m->embed, items[i].ids[t], ht);
            else if (ms_mload_embed_row(m, items[i].ids[t], ht) != 0)
                goto out;
        }
    for (int i = 0; i < n; i++)
        if (items[i].spec) spec_begin(items[i].seq, items[i].T);
    int nsnap = 0;
    for (int l = 0; l < c->n_layers; l++) {
        for (int i = 0; i < n; i++) st[i] = &items[i].seq->ls[l];
        if (ms_layer_forward_batch(c, l, &m->layers[l], st, seg, n, &m->experts, h, snaps, smax, &nsnap, R, route, ar,
                                   m->pool) != 0)
            goto out;
        if (ms_wstream_check(m->ws) != 0) goto out; /* a trunk read failed: no answer from partial weights */
        int64_t bad = first_nonfinite_row(h, R, E);
        if (bad >= 0) {
            int it = item_of_row(seg, n, bad);
            ms_err_set("layer %d produced a non-finite hidden state (position %lld of sequence %d of the pass); "
                       "the weights or an expert output are corrupt",
                       l, (long long)(items[it].seq->pos + bad - seg[it].r0), it);
            goto out;
        }
        if (m->route_fn && R > 0 && !m->layers[l].is_dense) m->route_fn(m->route_ctx, l, R, c->top_k, route);
    }
    /* Tail: output AttnRes over all snapshots + prefix, final norm, LM head (asked rows only). */
    const float *srcs[MS_CFG_MAX_SNAPSHOTS + 1];
    MS_ASSERT(nsnap == smax && smax <= MS_CFG_MAX_SNAPSHOTS); /* checked by ms_cfg */
    int64_t o = 0;
    for (int i = 0; i < n; i++)
        for (int64_t t = items[i].all_rows ? 0 : items[i].T - 1; t < items[i].T; t++, o++) {
            int64_t r = seg[i].r0 + t;
            for (int sidx = 0; sidx < smax; sidx++) srcs[sidx] = snaps + (r * smax + sidx) * E;
            srcs[smax] = h + r * E;
            float *xt = x + o * E;
            ms_attnres(srcs, smax + 1, E, m->out_fold, c->eps, xt);
            ms_rmsnorm(xt, m->final_norm, E, c->eps, xt);
        }
    ms_matmul(&m->lm_head, x, out_rows, lg, m->pool);
    if (ms_wstream_check(m->ws) != 0) goto out;
    int64_t bad = first_nonfinite_row(lg, out_rows, V);
    if (bad >= 0) {
        ms_err_set("the LM head produced a non-finite logit (logits row %lld of the pass); the weights are corrupt",
                   (long long)bad);
        goto out;
    }
    o = 0;
    for (int i = 0; i < n; i++) {
        int64_t nr = items[i].all_rows ? items[i].T : 1;
        memcpy(items[i].logits, lg + o * V, sizeof(float) * (size_t)(nr * V));
        o += nr;
        items[i].seq->pos += items[i].T;
    }
    rc = 0;
out:
    ms_arena_reset(ar, 0);
    return rc;
}

int ms_model_schedule(ms_model *m, ms_mat ***out)
{
    ms_mat_trace tr = {0};
    ms_mat_trace_begin(&tr);
    int rc = ms_model_forward_batch(m, NULL, 0);
    ms_mat_trace_end();
    MS_ASSERT(rc == 0);
    *out = (ms_mat **)tr.mats; /* the model's own matrices: it may set their data and stream */
    return tr.n;
}

int ms_model_forward(ms_model *m, ms_seq *s, const int32_t *ids, int64_t T, int all_rows, float *logits)
{
    ms_batch_item it = {s, ids, T, all_rows, logits};
    return ms_model_forward_batch(m, &it, 1);
}
