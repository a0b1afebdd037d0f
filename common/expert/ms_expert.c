/* ms_expert: in-process routed-expert table serving the ms_experts interface. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_scratch.h"
#include "ms_expert.h"
#include "ms_ops.h"
#include "ms_st.h"

struct ms_expert_table {
    int n_layers, n_experts, latent;
    ms_xact act;
    float params[MS_XFMT_MAX_PARAMS];
    ms_pool *pool;          /* borrowed */
    ms_expert_w *w;         /* [n_layers][n_experts] */
};

ms_expert_table *ms_expert_table_new(int n_layers, int n_experts, int latent, ms_xact act, const float *params,
                                     ms_pool *pool)
{
    ms_expert_table *t = ms_calloc(1, sizeof *t);
    t->n_layers = n_layers;
    t->n_experts = n_experts;
    t->latent = latent;
    t->act = act;
    for (int i = 0; i < ms_xfmt_act_n_params(act); i++) t->params[i] = params[i];
    t->pool = pool;
    t->w = ms_calloc((size_t)n_layers * (size_t)n_experts, sizeof *t->w);
    return t;
}

void ms_expert_table_free(ms_expert_table *t)
{
    if (!t) return;
    free(t->w);
    free(t);
}

void ms_expert_table_set(ms_expert_table *t, int layer, int expert, const ms_expert_w *w)
{
    MS_ASSERT(layer >= 0 && layer < t->n_layers && expert >= 0 && expert < t->n_experts);
    t->w[(size_t)layer * (size_t)t->n_experts + (size_t)expert] = *w;
}

/* Group arrays from the heap or (scratch) the thread's scratch; the kept arrays are made first,
 * the temporaries after and given back in reverse, so scratch pieces stay last in, first out. */
static void *g_take(int scratch, size_t bytes, int zero)
{
    if (scratch) return zero ? ms_scratch_push_zero(bytes) : ms_scratch_push(bytes);
    return zero ? ms_calloc(bytes, 1) : ms_malloc(bytes);
}

static void g_give(int scratch, void *p)
{
    if (scratch) ms_scratch_pop(p);
    else free(p);
}

static int group_build(ms_xgroup *g, int64_t n, const uint32_t *expert, int n_experts, int scratch)
{
    memset(g, 0, sizeof *g);
    g->scratch = scratch;
    size_t nd_max = (size_t)(n < n_experts ? n : n_experts) + 1;                      /* distinct experts, at most */
    g->dexp = g_take(scratch, sizeof(int32_t) * nd_max, 0);
    g->start = g_take(scratch, sizeof(int64_t) * (nd_max + 1), 1);
    g->item = g_take(scratch, sizeof(int64_t) * (size_t)(n ? n : 1), 0);
    int32_t *dmap = g_take(scratch, sizeof(int32_t) * (size_t)(n_experts > 0 ? n_experts : 1), 0); /* expert -> d */
    for (int e = 0; e < n_experts; e++) dmap[e] = -1;
    int64_t *qd = g_take(scratch, sizeof(int64_t) * (size_t)(n ? n : 1), 0); /* [n] group of item q */
    int rc = 0;
    for (int64_t q = 0; q < n && rc == 0; q++) {
        uint32_t e = expert[q];
        if (e >= (uint32_t)n_experts) {
            rc = ms_err_set("item %lld: expert id %d out of range (0..%d)", (long long)q, (int32_t)e, n_experts - 1);
            break;
        }
        if (dmap[e] < 0) {
            dmap[e] = g->nd;
            g->dexp[g->nd++] = (int32_t)e;
        }
        qd[q] = dmap[e];
        g->start[qd[q] + 1]++;
    }
    if (rc == 0) {
        /* Counting sort: stable, so items keep their order within a group. */
        for (int d = 0; d < g->nd; d++) {
            if (g->start[d + 1] > g->max_m) g->max_m = g->start[d + 1];
            g->start[d + 1] += g->start[d];
        }
        int64_t *fill = g_take(scratch, sizeof(int64_t) * (size_t)(g->nd ? g->nd : 1), 0); /* [nd] */
        for (int d = 0; d < g->nd; d++) fill[d] = g->start[d];
        for (int64_t q = 0; q < n; q++) g->item[fill[qd[q]]++] = q;
        g_give(scratch, fill);
    }
    g_give(scratch, qd);
    g_give(scratch, dmap);
    if (rc != 0) ms_xgroup_free(g);
    return rc;
}

int ms_xgroup_build(ms_xgroup *g, int64_t n, const uint32_t *expert, int n_experts)
{
    return group_build(g, n, expert, n_experts, 0);
}

int ms_xgroup_build_scratch(ms_xgroup *g, int64_t n, const uint32_t *expert, int n_experts)
{
    return group_build(g, n, expert, n_experts, 1);
}

int ms_xgroup_runs(ms_xgroup *g, int64_t n, const uint32_t *expert, int n_experts)
{
    memset(g, 0, sizeof *g);
    uint8_t *seen = ms_calloc((size_t)(n_experts > 0 ? n_experts : 1), 1);
    size_t nd_max = (size_t)(n < n_experts ? n : n_experts) + 1; /* distinct experts, at most */
    g->dexp = ms_malloc(sizeof(int32_t) * nd_max);
    g->start = ms_calloc(nd_max + 1, sizeof(int64_t));
    g->item = NULL; /* identity: no per-item array for a request already grouped */
    int rc = 0;
    for (int64_t q = 0; q < n; q++) {
        uint32_t e = expert[q];
        if (e >= (uint32_t)n_experts) {
            rc = ms_err_set("item %lld: expert id %u out of range (0..%d)", (long long)q, e, n_experts - 1);
            break;
        }
        if (q > 0 && e == expert[q - 1]) continue;
        if (seen[e]) {
            rc = ms_err_set("item %lld: expert %u appears again after other experts' items (items must be grouped "
                            "by expert)",
                            (long long)q, e);
            break;
        }
        seen[e] = 1;
        g->start[g->nd] = q;
        g->dexp[g->nd++] = (int32_t)e;
    }
    free(seen);
    if (rc != 0) {
        ms_xgroup_free(g);
        return rc;
    }
    g->start[g->nd] = n;
    for (int d = 0; d < g->nd; d++)
        if (g->start[d + 1] - g->start[d] > g->max_m) g->max_m = g->start[d + 1] - g->start[d];
    return 0;
}

void ms_xgroup_free(ms_xgroup *g)
{
    if (!g) return;
    g_give(g->scratch, g->item);
    g_give(g->scratch, g->start);
    g_give(g->scratch, g->dexp);
    memset(g, 0, sizeof *g);
}

/* The activations' compute, by ms_xact (their descriptions: ms_xfmt.c's table). */
typedef void (*apply_fn)(const float *params, const ms_expert_w *w, const float *z, int64_t m, float *out,
                         ms_pool *pool);

static void situ_glu(const float *p, const ms_expert_w *w, const float *z, int64_t m, float *out, ms_pool *pool)
{
    ms_glu_mlp(&w->w[MS_XROLE_GATE], &w->w[MS_XROLE_UP], &w->w[MS_XROLE_DOWN], p[0], p[1], z, m, out, pool);
}

static void swiglu_clamp(const float *p, const ms_expert_w *w, const float *z, int64_t m, float *out, ms_pool *pool)
{
    ms_swiglu_clamp_mlp(&w->w[MS_XROLE_GATE_UP], w->bias[MS_XROLE_GATE_UP], &w->w[MS_XROLE_DOWN],
                        w->bias[MS_XROLE_DOWN], p[0], p[1], z, m, out, pool);
}

static void swiglu(const float *p, const ms_expert_w *w, const float *z, int64_t m, float *out, ms_pool *pool)
{
    (void)p;
    ms_swiglu_mlp(&w->w[MS_XROLE_GATE], &w->w[MS_XROLE_UP], &w->w[MS_XROLE_DOWN], z, m, out, pool);
}

static const apply_fn applies[] = {[MS_XACT_SITU_GLU] = situ_glu, [MS_XACT_SWIGLU_CLAMP] = swiglu_clamp,
                                   [MS_XACT_SWIGLU] = swiglu};

void ms_expert_apply(ms_xact act, const float *params, const ms_expert_w *w, const float *z, int64_t m, float *out,
                     ms_pool *pool)
{
    /* a format reaches here only through ms_xfmt_check, which knows the same activations */
    MS_ASSERT((size_t)act < sizeof applies / sizeof applies[0] && applies[act]);
    applies[act](params, w, z, m, out, pool);
}

/* ms_mat types of the encodings (ms_xfmt.c describes their parts). */
static const ms_wtype enc_wtype[] = {[MS_XENC_MXFP4] = MS_WT_MXFP4, [MS_XENC_BF16] = MS_WT_BF16, [MS_XENC_FP8] = MS_WT_FP8,
                                     [MS_XENC_FP8_BF16S] = MS_WT_FP8, [MS_XENC_INT4_G32] = MS_WT_INT4};

/* Floats a part is widened to: a bias, or an FP8 matrix's BF16 scale grid (FP8 kernels take float
 * scales; INT4's take their BF16 scales as stored). */
static int64_t widened_floats(const ms_xfmt *f, const ms_xfmt_part *p)
{
    if (p->kind == MS_XPART_BIAS) return p->shape[1];
    return p->kind == MS_XPART_SCALES && p->dtype == MS_DT_BF16 && f->mat[p->mat].enc != MS_XENC_INT4_G32
               ? p->shape[0] * p->shape[1]
               : 0;
}

/* ms_expert_w_of_parts, the biases (and BF16 scale grids) widened into `space` one after another
 * when it is not NULL (widened[] then all NULL), else each into its own malloc'ed widened[i]. */
static void w_of_parts(const ms_xfmt *f, const uint8_t *const *part, ms_expert_w *w, float **widened, float *space)
{
    memset(w, 0, sizeof *w);
    for (int i = 0; i < f->n_mats; i++) {
        ms_mat *x = &w->w[f->mat[i].role];
        MS_ASSERT((size_t)f->mat[i].enc < sizeof enc_wtype / sizeof enc_wtype[0]);
        x->type = enc_wtype[f->mat[i].enc];
        x->rows = f->mat[i].rows;
        x->cols = f->mat[i].cols;
    }
    for (int i = 0; i < f->n_parts; i++) {
        ms_xrole r = f->mat[f->part[i].mat].role;
        widened[i] = NULL;
        int64_t n = widened_floats(f, &f->part[i]);
        float *b = NULL;
        if (n > 0) { /* widened: parts may be BF16 and sit at any byte offset */
            b = space ? space : (widened[i] = ms_malloc(sizeof(float) * (size_t)n));
            if (space) space += n;
            for (int64_t j = 0; j < n; j++) {
                if (f->part[i].dtype == MS_DT_BF16) {
                    uint16_t x;
                    memcpy(&x, part[i] + 2 * j, 2);
                    b[j] = ms_bf16_to_f32(x);
                } else {
                    memcpy(&b[j], part[i] + 4 * j, 4);
                }
            }
        }
        switch (f->part[i].kind) {
        case MS_XPART_VALUES: w->w[r].data = part[i]; break;
        case MS_XPART_SCALES: w->w[r].scales = b ? (const uint8_t *)b : part[i]; break;
        case MS_XPART_BIAS: w->bias[r] = b; break;
        }
    }
}

void ms_expert_w_of_parts(const ms_xfmt *f, const uint8_t *const *part, ms_expert_w *w, float **widened)
{
    w_of_parts(f, part, w, widened, NULL);
}

void ms_expert_run(const ms_xfmt *f, const uint8_t *const *part, const float *z, int64_t m, float *out,
                   ms_pool *pool)
{
    ms_expert_w w;
    float *widened[MS_XFMT_MAX_PARTS];
    int64_t nb = 0; /* bias and BF16 scale floats, widened into one scratch piece */
    for (int i = 0; i < f->n_parts; i++) nb += widened_floats(f, &f->part[i]);
    float *space = ms_scratch_push(sizeof(float) * (size_t)nb); /* [nb] */
    w_of_parts(f, part, &w, widened, space);
    ms_expert_apply(f->act, f->param, &w, z, m, out, pool);
    ms_scratch_pop(space);
}

/* Rows are grouped by expert so each expert's weights are decoded once per call; every output
 * element is still one canonical dot, so grouping never changes a bit. */
static int64_t first_nonfinite(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

static int table_compute(void *ctx, int layer, int64_t n_rows, const float *z, int k, const int32_t *ids,
                         float *out)
{
    ms_expert_table *t = ctx;
    int64_t L = t->latent;
    if (layer < 0 || layer >= t->n_layers) return ms_err_set("expert request for layer %d out of range", layer);
    int64_t n = n_rows * k;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_experts)
            return ms_err_set("expert id %d out of range in layer %d", ids[i], layer);
        if (!t->w[(size_t)layer * (size_t)t->n_experts + (size_t)ids[i]].w[MS_XROLE_DOWN].data)
            return ms_err_set("layer %d expert %d has no weights loaded", layer, ids[i]);
    }
    ms_xgroup g;
    if (ms_xgroup_build(&g, n, (const uint32_t *)ids, t->n_experts) != 0) return -1;
    float *zin = ms_malloc(sizeof(float) * (size_t)(g.max_m * L + 1)); /* [rows of one expert][L] */
    float *zout = ms_malloc(sizeof(float) * (size_t)(g.max_m * L + 1));
    int rc = 0;
    for (int d = 0; d < g.nd && rc == 0; d++) {
        int64_t m = g.start[d + 1] - g.start[d];
        const int64_t *q = g.item + g.start[d];
        for (int64_t r = 0; r < m; r++) memcpy(zin + r * L, z + (q[r] / k) * L, sizeof(float) * (size_t)L);
        const ms_expert_w *w = &t->w[(size_t)layer * (size_t)t->n_experts + (size_t)g.dexp[d]];
        ms_expert_apply(t->act, t->params, w, zin, m, zout, t->pool);
        /* NaN or Inf (bad weights) stops the run instead of spoiling every later token. */
        rc = ms_expert_check_finite(NULL, MS_EXIT_RUNTIME, layer, g.dexp[d], zin, zout, m, L);
        for (int64_t r = 0; r < m; r++) memcpy(out + q[r] * L, zout + r * L, sizeof(float) * (size_t)L);
    }
    ms_xgroup_free(&g);
    free(zout);
    free(zin);
    return rc;
}

int ms_expert_check_finite(const char *who, int code, int layer, int expert, const float *z, const float *out,
                           int64_t m, int64_t L)
{
    MS_ASSERT(L >= 1);
    int64_t bad = first_nonfinite(out, m * L);
    if (bad < 0) return 0;
    int64_t row = bad / L;
    int in_bad = z && first_nonfinite(z + row * L, L) >= 0;
    ms_err_set("%s%slayer %d expert %d: output %lld is %s%s", who ? who : "", who ? ": " : "", layer, expert,
               (long long)(bad % L), isnan(out[bad]) ? "NaN" : "infinite",
               in_bad ? " (its input is already not finite)" : " (bad weights? the run stops rather than answer from it)");
    return ms_err_set_code(code);
}

ms_experts ms_expert_table_iface(ms_expert_table *t)
{
    ms_experts ex = {table_compute, t};
    return ex;
}
