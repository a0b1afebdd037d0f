/* ms_mbind: binding a checkpoint's tensors for any family: lookup with shape checks, widening, trunk refs, routed experts, one report of every problem. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ms_err.h"
#include "ms_fp8.h"
#include "ms_file.h"
#include "ms_mrt.h"
#include "ms_xfams.h"

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

void ms_mrt_source(ms_st *st, const char *dir, ms_tsrc *src)
{
    int nf = ms_st_file_count(st);
    const char **paths = ms_malloc(sizeof(char *) * (size_t)(nf ? nf : 1));
    for (int i = 0; i < nf; i++) paths[i] = ms_st_file_path(st, i);
    *src = (ms_tsrc){st_find, st, dir, paths, nf};
}

void ms_mrt_adopt(ms_model *m, ms_st *st, const ms_tsrc *src)
{
    m->st = st;
    m->src.paths = src->paths;
}

ms_model *ms_mrt_open_dir(const char *dir, const ms_run_opts *o, ms_xfmt *f, int first_moe, ms_mrt_bind_fn bind,
                          const void *cfg)
{
    ms_st *st = ms_st_open_dir(dir);
    if (!st || (f && ms_xfam_refine(f, first_moe, st, dir) < 0)) {
        ms_st_close(st);
        return NULL;
    }
    ms_tsrc src;
    ms_mrt_source(st, dir, &src);
    ms_model *m = bind(cfg, &src, o, f);
    if (!m) {
        free((void *)src.paths);
        ms_st_close(st);
        return NULL;
    }
    ms_mrt_adopt(m, st, &src);
    return m;
}

void ms_mrt_bind_experts(ms_model *m, int layer)
{
    if (m->opts.remote_experts) return;
    if (!m->info.have_xfmt) {
        ms_mrt_error(m, "layer %d experts: %s", layer, m->info.why_no_xfmt);
        return;
    }
    for (int e = 0; e < m->info.n_experts && m->n_errors <= 8; e++)
        if (ms_mrt_expert(m, &m->info.xfmt, layer, e) == 0) {
            char name[256];
            int slice, ns;
            ms_xfam_locate(&m->info.xfmt, layer, e, 0, name, sizeof name, &slice, &ns);
            ms_mrt_error(m, "tensor %s is missing from %s", name, m->src.what);
        }
}

int ms_mrt_init(ms_model *m, const ms_model_ops *ops, const ms_tsrc *src, const ms_run_opts *o, ms_xact act,
                const float *params, int latent)
{
    m->ops = ops;
    m->src = *src;
    if (o) m->opts = *o;
    m->files = src->paths != NULL && src->n_paths > 0;
    m->embed_ref = -1;
    m->pool = ms_pool_new(m->opts.n_threads);
    if (!m->pool) return -1;
    const ms_model_info *in = &m->info;
    /* a draft head's routed experts are one more layer of the table and the store */
    int xl = in->n_layers + in->draft_layers;
    m->table = ms_expert_table_new(xl, in->n_experts, latent, act, params, m->pool);
    mrt_experts_set(m, ms_expert_table_iface(m->table));
    if (m->files) m->xlocs = ms_calloc((size_t)xl * (size_t)in->n_experts, sizeof *m->xlocs);
    return 0;
}

void *ms_mrt_own(ms_model *m, void *p)
{
    if (m->n_owned == m->cap_owned) {
        m->cap_owned = m->cap_owned ? 2 * m->cap_owned : 256;
        m->owned = ms_realloc(m->owned, sizeof(void *) * m->cap_owned);
    }
    m->owned[m->n_owned++] = p;
    return p;
}

/* Collect binding problems so one run reports several at once. */
void ms_mrt_error(ms_model *m, const char *fmt, ...)
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

int ms_mrt_get(ms_model *m, const char *name, ms_tview *tv, int ndim, const int64_t *shape)
{
    if (!m->src.find(m->src.ctx, name, tv)) {
        ms_mrt_error(m, "tensor %s is missing from %s", name, m->src.what);
        return 0;
    }
    int ok = tv->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = shape[i] < 0 || tv->shape[i] == shape[i];
    if (!ok) {
        char want[128], got[128];
        shape_str(want, sizeof want, ndim, shape);
        shape_str(got, sizeof got, tv->ndim, tv->shape);
        ms_mrt_error(m, "tensor %s in %s has shape %s, the config implies %s", name, tv->file, got, want);
        return 0;
    }
    return 1;
}

/* Safetensors packs tensors back to back, so a tensor may sit at any byte offset; element
 * reads need natural alignment, so misaligned data is copied into an owned buffer. */
static const void *aligned(ms_model *m, const void *data, size_t nbytes, size_t align)
{
    if (((uintptr_t)data & (align - 1)) == 0) return data;
    void *p = ms_mrt_own(m, ms_malloc(nbytes));
    memcpy(p, data, nbytes);
    return p;
}

/* nbytes of a tensor from byte `skip` on, readable with natural alignment `align`: in place for
 * a tensor in memory (copied if misaligned); for a tensor in a file, read now into a buffer the
 * model owns. Nothing reads a file through a mapping, so a file truncated during the run is an
 * I/O error naming it, never SIGBUS. NULL after a binding error. */
static const void *tensor_bytes(ms_model *m, const char *name, const ms_tview *tv, uint64_t skip, size_t nbytes,
                                size_t align)
{
    if (tv->data) return aligned(m, (const uint8_t *)tv->data + skip, nbytes, align);
    if (tv->fidx < 0 || !m->src.paths || tv->fidx >= m->src.n_paths) {
        ms_mrt_error(m, "tensor %s has neither bytes in memory nor a file", name);
        return NULL;
    }
    const char *path = m->src.paths[tv->fidx];
    void *p = ms_mrt_own(m, ms_malloc(nbytes ? nbytes : 1));
    int fd = ms_file_open(path, "shard", 0, 0, NULL);
    if (fd < 0 || ms_file_pread(fd, path, tv->foff + skip, p, nbytes) != 0) {
        ms_mrt_error(m, "tensor %s: %s", name, ms_err_msg());
        m->bind_io = 1;
        p = NULL;
    }
    if (fd >= 0) close(fd);
    return p;
}

/* n floats from 16-bit values (BF16 or F16). */
static float *widen16(ms_model *m, const uint8_t *raw, ms_dtype dt, int64_t n)
{
    float *o = ms_mrt_own(m, ms_malloc(sizeof(float) * (size_t)(n ? n : 1)));
    for (int64_t i = 0; i < n; i++) {
        uint16_t b;
        memcpy(&b, raw + 2 * i, 2);
        o[i] = dt == MS_DT_BF16 ? ms_bf16_to_f32(b) : ms_f16_to_f32(b);
    }
    return o;
}

const float *ms_mrt_widen(ms_model *m, const char *name, const ms_tview *tv, int64_t n)
{
    switch (tv->dtype) {
    case MS_DT_F32:
        return tensor_bytes(m, name, tv, 0, sizeof(float) * (size_t)n, sizeof(float));
    case MS_DT_BF16:
    case MS_DT_F16: {
        const uint8_t *raw = tensor_bytes(m, name, tv, 0, 2 * (size_t)n, 1);
        return raw ? widen16(m, raw, tv->dtype, n) : NULL;
    }
    default:
        ms_mrt_error(m, "tensor %s in %s has dtype %s; expected F32, BF16 or F16", name, tv->file,
                     ms_dtype_name(tv->dtype));
        return NULL;
    }
}

const float *ms_mrt_vec(ms_model *m, const char *name, int64_t n, int ndim, const int64_t *shape)
{
    ms_tview tv;
    if (!ms_mrt_get(m, name, &tv, ndim, shape)) return NULL;
    return ms_mrt_widen(m, name, &tv, n);
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
    /* an FP8 matrix's file bytes are its codes; its scale grid was read at binding */
    r->bytes = dst->type == MS_WT_FP8 ? (uint64_t)dst->rows * (uint64_t)dst->cols : ms_mat_bytes(dst);
    r->layer = -1;
    if (dst == m->embed) m->embed_ref = m->n_refs - 1;
}

void ms_mrt_refs_layer(ms_model *m, int n_refs0, int layer)
{
    for (int r = n_refs0; r < m->n_refs; r++) m->refs[r].layer = layer;
}

void ms_mrt_mat(ms_model *m, ms_mat *w, const char *name, int64_t rows, int64_t cols)
{
    ms_tview tv;
    int64_t s[2] = {rows, cols};
    *w = (ms_mat){MS_WT_F32, rows, cols, NULL, NULL, NULL, NULL};
    if (!ms_mrt_get(m, name, &tv, 2, s)) return;
    switch (tv.dtype) {
    case MS_DT_F32:
    case MS_DT_BF16:
        w->type = tv.dtype == MS_DT_F32 ? MS_WT_F32 : MS_WT_BF16;
        if (m->files && tv.fidx >= 0 && !m->bind_resident)
            add_ref(m, w, name, &tv); /* data comes later: pinned read or stream */
        else
            w->data = tensor_bytes(m, name, &tv, 0, (size_t)ms_mat_bytes(w), tv.dtype == MS_DT_F32 ? 4 : 2);
        break;
    case MS_DT_F8_E4M3: {
        /* fine-grained FP8: the codes, and NAME_scale_inv's float per 128 x 128 block (F32 or
         * BF16 as stored, widened and kept resident: a 4096th of the codes' bytes) */
        char sn[600];
        ms_tview sv;
        int64_t gs[2] = {ms_fp8_blocks(rows), ms_fp8_blocks(cols)};
        snprintf(sn, sizeof sn, "%s_scale_inv", name);
        if (!ms_mrt_get(m, sn, &sv, 2, gs)) return;
        const float *grid = ms_mrt_widen(m, sn, &sv, gs[0] * gs[1]);
        if (!grid) return;
        w->type = MS_WT_FP8;
        w->scales = (const uint8_t *)grid;
        if (m->files && tv.fidx >= 0 && !m->bind_resident)
            add_ref(m, w, name, &tv);
        else
            w->data = tensor_bytes(m, name, &tv, 0, (size_t)(rows * cols), 1);
        break;
    }
    case MS_DT_F16: {
        const uint8_t *raw = tensor_bytes(m, name, &tv, 0, 2 * (size_t)(rows * cols), 1);
        if (raw) w->data = widen16(m, raw, MS_DT_F16, rows * cols);
        break;
    }
    default:
        ms_mrt_error(m, "tensor %s in %s has dtype %s; a dense matrix must be F32, BF16, F16 or F8_E4M3", name, tv.file,
                     ms_dtype_name(tv.dtype));
    }
}

/* Find part k of expert (layer, e) by the family's locate and check it (ms_xfam_find_part's
 * rules, on any weight source): 1 with *tv and the part's byte offset in it, 0 if the tensor is
 * missing, -1 after a problem. */
static int expert_part(ms_model *m, const ms_xfmt *f, int layer, int e, int k, ms_tview *tv, uint64_t *skip,
                       char *name, size_t n)
{
    int slice, ns;
    if (ms_xfam_locate(f, layer, e, k, name, n, &slice, &ns) != 0) {
        ms_mrt_error(m, "%s", ms_err_msg());
        return -1;
    }
    if (!m->src.find(m->src.ctx, name, tv)) return 0;
    char why[300];
    if (ms_xfam_check_part(f, k, slice, ns, (int)tv->dtype, tv->ndim, tv->shape, why, sizeof why)) {
        ms_mrt_error(m, "tensor %s in %s %s", name, tv->file, why);
        return -1;
    }
    *skip = (uint64_t)slice * f->part[k].bytes;
    return 1;
}

int ms_mrt_expert(ms_model *m, const ms_xfmt *f, int layer, int e)
{
    ms_tview tv[MS_XFMT_MAX_PARTS];
    uint64_t skip[MS_XFMT_MAX_PARTS];
    char name[MS_XFMT_MAX_PARTS][512];
    for (int k = 0; k < f->n_parts; k++) {
        int rc = expert_part(m, f, layer, e, k, &tv[k], &skip[k], name[k], sizeof name[k]);
        if (rc < 0) return -1;
        if (rc == 0 && k == 0) return 0; /* none of its parts: the family may bind another form */
        if (rc == 0) {
            ms_mrt_error(m, "tensor %s is missing from %s", name[k], m->src.what);
            return -1;
        }
    }
    int on_disk = m->files;
    for (int k = 0; k < f->n_parts; k++) on_disk = on_disk && tv[k].fidx >= 0;
    if (on_disk) { /* read when routed to, through the expert store */
        ms_xloc *x = &m->xlocs[(size_t)layer * (size_t)m->info.n_experts + (size_t)e];
        for (int k = 0; k < f->n_parts; k++) {
            x->file[k] = tv[k].fidx;
            x->off[k] = tv[k].foff + skip[k];
            x->len[k] = f->part[k].bytes;
        }
        return 1;
    }
    const uint8_t *part[MS_XFMT_MAX_PARTS];
    for (int k = 0; k < f->n_parts; k++)
        if (!(part[k] = tensor_bytes(m, name[k], &tv[k], skip[k], (size_t)f->part[k].bytes, 1))) return -1;
    ms_expert_w w;
    float *widened[MS_XFMT_MAX_PARTS];
    ms_expert_w_of_parts(f, part, &w, widened);
    for (int k = 0; k < f->n_parts; k++)
        if (widened[k]) ms_mrt_own(m, widened[k]);
    ms_expert_table_set(m->table, layer, e, &w);
    return 1;
}

void ms_mrt_expert_set(ms_model *m, int layer, int expert, const ms_expert_w *w)
{
    ms_expert_table_set(m->table, layer, expert, w);
}

int ms_mrt_bind_done(ms_model *m)
{
    if (m->n_errors) {
        ms_err_set("%s: %d tensor problem%s: %s%s", m->src.what, m->n_errors, m->n_errors > 1 ? "s" : "", m->errors,
                   m->n_errors > 8 ? "; ..." : "");
        return ms_err_set_code(m->bind_io ? MS_EXIT_IO : MS_EXIT_MODEL);
    }
    return m->files ? ms_mrt_setup(m) : 0;
}
