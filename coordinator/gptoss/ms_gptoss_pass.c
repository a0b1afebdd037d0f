/* ms_gptoss_pass: gpt-oss's batched forward pass: GQA attention with sinks, sliding windows and YaRN RoPE, then the routed MoE. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_scratch.h"
#include "ms_gptoss_int.h"
#include "ms_moe_block.h"
#include "ms_ops.h"
#include "ms_rows.h"

void go_kv_reserve(go_kv *kv, int64_t p, int64_t width)
{
    int64_t need = (kv->ring ? (p < kv->ring ? p : kv->ring - 1) : p) + 1;
    if (need <= kv->alloc) return;
    int64_t cap = kv->alloc ? kv->alloc : 64;
    while (cap < need) cap *= 2;
    if (kv->ring && cap > kv->ring) cap = kv->ring;
    /* a ring is grown only before it wraps (p < alloc), so every position stays at p % ring */
    kv->k = ms_realloc(kv->k, sizeof(float) * (size_t)(cap * width));
    kv->v = ms_realloc(kv->v, sizeof(float) * (size_t)(cap * width));
    kv->alloc = cap;
}

size_t go_work_floats(const ms_gptoss_cfg *c, int64_t R, int64_t out_rows)
{
    size_t r = (size_t)R, o = (size_t)out_rows, H = (size_t)c->hidden, k = (size_t)c->top_k;
    size_t qd = (size_t)c->n_heads * (size_t)c->head_dim, kvd = (size_t)c->n_kv * (size_t)c->head_dim;
    return MS_ARENA_SPAN(r * H) /* h */ + 2 * MS_ARENA_SPAN(r * H) /* attention's and the MoE's t */ + MS_ARENA_SPAN(r * qd) /* q */ +
           2 * MS_ARENA_SPAN(r * kvd) /* k, v */ + MS_ARENA_SPAN(r * qd) /* attention out */ +
           MS_ARENA_SPAN(r * H) /* projected */ + MS_ARENA_SPAN(r * (size_t)c->n_experts) /* router */ +
           2 * MS_ARENA_SPAN(r * k) /* ids, weights */ + MS_ARENA_SPAN(r * k * H) /* expert outputs */ +
           MS_ARENA_SPAN(o * H) + MS_ARENA_SPAN(o * (size_t)c->vocab);
}

uint64_t go_thread_bytes(const ms_gptoss_cfg *c, int64_t positions)
{
    /* attend's scratch: a KV group's queries, scores over every position, sums, four keys' scores, the value rows */
    uint64_t Gp = (uint64_t)((c->n_heads / c->n_kv + 3) / 4 * 4);
    return 8 * Gp * (uint64_t)(2 * (int64_t)c->head_dim + positions + 5) + 8 * (uint64_t)(positions + 1) /* vrow */;
}

/* RoPE with YaRN, NeoX half split (spec §3.2), on `heads` heads of x at position p. */
static void rope(const go_model *g, float *x, int heads, int64_t p)
{
    int d = g->cfg.head_dim, half = d / 2;
    for (int i = 0; i < half; i++) {
        float ang = (float)p * g->inv_freq[i]; /* a float32 product, as the reference's table */
        float cs = cosf(ang) * g->concentration, sn = sinf(ang) * g->concentration;
        for (int h = 0; h < heads; h++) {
            float *xh = x + (size_t)h * (size_t)d;
            float x1 = xh[i], x2 = xh[i + half];
            xh[i] = x1 * cs - x2 * sn;
            xh[i + half] = x2 * cs + x1 * sn;
        }
    }
}

/* The attention of a block of query rows over the cache, one task per (row, KV head): the
 * group of query heads that share a KV head runs together, the heads in the lanes, so each key
 * and value row is read once for the group. Every score and every output lane still sums in
 * the order one head and one key at a time would (the same bits). */
typedef struct {
    const go_model *g;
    const go_layer *w;
    const go_kv *kv;   /* the cache: positions before p0 */
    const float *k;    /* [T][nkv*d] rotated keys of the rows, positions p0.. */
    const float *v;    /* [T][nkv*d] their values */
    const float *q;    /* [T][nh*d] rotated queries */
    float *out;        /* [T][nh*d] */
    int64_t p0, T;     /* the first row's position; the rows */
    int64_t r0, nr;    /* the tile of rows [r0, r0 + nr) this ms_pool_for attends */
    int sliding;
} attn_ctx;

/* Query rows per attention tile. */
#define GO_QUERY_TILE 128

/* The key or value row of position pos: the rows' own from the pass, older ones from the cache
 * (which the rows' keys join only after they attend, so a ring still holds what they need). */
static inline const float *kv_row(const attn_ctx *a, const float *cache, const float *rows, int64_t pos, int kvh)
{
    const ms_gptoss_cfg *c = &a->g->cfg;
    int64_t kvd = (int64_t)c->n_kv * c->head_dim, off = (int64_t)kvh * c->head_dim;
    if (pos >= a->p0) return rows + (pos - a->p0) * kvd + off;
    return cache + (a->kv->ring ? pos % a->kv->ring : pos) * kvd + off;
}

/* Scores of L heads against 16 / L keys: s[b][l] = sum over i in order of q[l][i] * k_b[i] (into
 * s[b * ss + l]). qt holds the heads' queries transposed, as doubles, a row of `qs` lanes per
 * dimension. Inlined with L a constant (8 or 4): the 16 sums stay in registers (8 SSE2 pairs)
 * as independent chains. */
static inline __attribute__((always_inline)) void group_scores(const double *qt, int64_t qs, int L, int d,
                                                               const float *const *kj, double *s, int64_t ss)
{
    const int KB = 16 / L;
    double acc[16];
    _Pragma("GCC unroll 16") for (int x = 0; x < 16; x++) acc[x] = 0;
    for (int i = 0; i < d; i++) {
        const double *qi = qt + i * qs;
        _Pragma("GCC unroll 4") for (int b = 0; b < KB; b++)
        {
            double kv = (double)kj[b][i];
            _Pragma("GCC unroll 8") for (int l = 0; l < L; l++) acc[b * L + l] += qi[l] * kv;
        }
    }
    _Pragma("GCC unroll 4") for (int b = 0; b < KB; b++)
        _Pragma("GCC unroll 8") for (int l = 0; l < L; l++) s[b * ss + l] = acc[b * L + l];
}

/* out[i] = sum over keys j in order of p[j] * v_j[i], for 16 lanes i (v_j = the rows vj[j] + i0):
 * the sums in registers, one chain each. */
static inline void value_sums16(const double *p, const float *const *vj, int64_t n, int64_t i0, double *out)
{
    double acc[16];
    _Pragma("GCC unroll 16") for (int x = 0; x < 16; x++) acc[x] = 0;
    for (int64_t j = 0; j < n; j++) {
        const float *v = vj[j] + i0;
        double pj = p[j];
        _Pragma("GCC unroll 16") for (int x = 0; x < 16; x++) acc[x] += pj * (double)v[x];
    }
    _Pragma("GCC unroll 16") for (int x = 0; x < 16; x++) out[x] = acc[x];
}

static void attend(void *vctx, int64_t t0, int64_t t1)
{
    const attn_ctx *a = vctx;
    const ms_gptoss_cfg *c = &a->g->cfg;
    int d = c->head_dim, G = c->n_heads / c->n_kv;
    int64_t Gp = (G + 3) / 4 * 4; /* lanes of qt and s4: the group padded to whole vectors of 4 */
    int64_t qd = (int64_t)c->n_heads * d, nmax = a->p0 + a->T; /* the most keys a row sees */
    /* qt [d][Gp], s4 [4][Gp], scores [G][n], sums [G][d]: the thread's scratch (go_thread_bytes) */
    double *qt = ms_scratch_push_zero(sizeof(double) * (size_t)(Gp * (2 * d + nmax + 4))); /* padding lanes stay 0 */
    double *s4 = qt + (int64_t)d * Gp, *sc = s4 + 4 * Gp, *acc = sc + nmax * G;
    const float **vrow = ms_scratch_push(sizeof *vrow * (size_t)nmax); /* [n] the value rows a row sees */
    double scale = 1.0 / sqrt((double)d);
    for (int64_t t = t0; t < t1; t++) {
        /* KV head outermost: a thread's contiguous share of tasks takes whole heads over all
         * the tile's rows, early (short) and late (long) alike */
        int kvh = (int)(t / a->nr);
        int64_t r = a->r0 + t % a->nr, p = a->p0 + r;
        int64_t lo = a->sliding && p - c->window + 1 > 0 ? p - c->window + 1 : 0, n = p - lo + 1;
        const float *qg = a->q + r * qd + (int64_t)kvh * G * d; /* [G][d] */
        for (int gi = 0; gi < G; gi++)
            for (int i = 0; i < d; i++) qt[i * Gp + gi] = (double)qg[(int64_t)gi * d + i];
        for (int64_t j0 = 0; j0 < n; j0 += 4) {
            int nb = n - j0 < 4 ? (int)(n - j0) : 4;
            const float *kj[4];
            for (int b = 0; b < 4; b++) kj[b] = kv_row(a, a->kv->k, a->k, lo + j0 + (b < nb ? b : 0), kvh);
            if (Gp == 8) {
                group_scores(qt, 8, 8, d, kj, s4, 8);
                group_scores(qt, 8, 8, d, kj + 2, s4 + 16, 8);
            } else
                for (int64_t l0 = 0; l0 < Gp; l0 += 4) group_scores(qt + l0, Gp, 4, d, kj, s4 + l0, Gp);
            for (int b = 0; b < nb; b++)
                for (int gi = 0; gi < G; gi++) sc[(int64_t)gi * n + j0 + b] = s4[b * Gp + gi] * scale;
        }
        for (int gi = 0; gi < G; gi++) {
            int h = kvh * G + gi;
            double *sh = sc + (int64_t)gi * n;
            /* the sink joins the denominator (and the max) and carries no value */
            double mx = (double)a->w->sinks[h];
            for (int64_t j = 0; j < n; j++)
                if (sh[j] > mx) mx = sh[j];
            double den = exp((double)a->w->sinks[h] - mx);
            for (int64_t j = 0; j < n; j++) den += (sh[j] = exp(sh[j] - mx));
            s4[gi] = den; /* the head's denominator (s4's scores are spent), kept until its sums are divided */
        }
        /* each output lane sums over the keys in order, 16 lanes at a time in registers (the
         * value rows, n x d floats, stay in L1 / L2 across the group's heads) */
        for (int64_t j = 0; j < n; j++) vrow[j] = kv_row(a, a->kv->v, a->v, lo + j, kvh);
        for (int gi = 0; gi < G; gi++) {
            int64_t i = 0;
            for (; i + 16 <= d; i += 16) value_sums16(sc + (int64_t)gi * n, vrow, n, i, acc + (int64_t)gi * d + i);
            for (; i < d; i++) { /* head_dim % 16 */
                double x = 0;
                for (int64_t j = 0; j < n; j++) x += sc[(int64_t)gi * n + j] * (double)vrow[j][i];
                acc[(int64_t)gi * d + i] = x;
            }
        }
        float *og = a->out + r * qd + (int64_t)kvh * G * d;
        for (int gi = 0; gi < G; gi++)
            for (int i = 0; i < d; i++) og[(int64_t)gi * d + i] = (float)(acc[(int64_t)gi * d + i] / s4[gi]);
    }
    ms_scratch_pop(vrow);
    ms_scratch_pop(qt);
}

static void add_bias(float *y, const float *b, int64_t R, int64_t W)
{
    for (int64_t r = 0; r < R; r++)
        for (int64_t i = 0; i < W; i++) y[r * W + i] += b[i];
}

/* The attention block of layer l for all rows: h += o_proj(attention(rmsnorm(h))) + bo. */
static void attention(go_model *g, int l, const ms_batch_item *items, const ms_rows *seg, int n, float *h, int64_t R,
                      ms_arena *ar)
{
    const ms_gptoss_cfg *c = &g->cfg;
    const go_layer *w = &g->layers[l];
    ms_pool *pool = g->base.pool;
    int64_t H = c->hidden, qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv * c->head_dim;
    float *t = ms_arena_take(ar, (size_t)(R * H));    /* [R][H] normed input */
    float *q = ms_arena_take(ar, (size_t)(R * qd));   /* [R][nh*d] */
    float *k = ms_arena_take(ar, (size_t)(R * kvd));  /* [R][nkv*d] */
    float *v = ms_arena_take(ar, (size_t)(R * kvd));  /* [R][nkv*d] */
    float *o = ms_arena_take(ar, (size_t)(R * qd));   /* [R][nh*d] attention output */
    float *a = ms_arena_take(ar, (size_t)(R * H));    /* [R][H] projected */
    for (int64_t r = 0; r < R; r++) ms_rmsnorm(h + r * H, w->in_norm, H, c->eps, t + r * H);
    ms_matmul(&w->q, t, R, q, pool);
    ms_matmul(&w->k, t, R, k, pool);
    ms_matmul(&w->v, t, R, v, pool);
    if (R > 0) {
        add_bias(q, w->bq, R, qd);
        add_bias(k, w->bk, R, kvd);
        add_bias(v, w->bv, R, kvd);
    }
    for (int i = 0; i < n; i++) {
        go_kv *kv = &((go_seq *)items[i].seq)->kv[l];
        int64_t r0 = seg[i].r0, T = seg[i].T, p0 = items[i].seq->pos;
        if (T == 0) continue;
        for (int64_t s = 0; s < T; s++) {
            rope(g, q + (r0 + s) * qd, c->n_heads, p0 + s);
            rope(g, k + (r0 + s) * kvd, c->n_kv, p0 + s);
        }
        /* causal: each row sees the cache and the rows up to its own */
        attn_ctx ac = {g, w, kv, k + r0 * kvd, v + r0 * kvd, q + r0 * qd, o + r0 * qd, p0, T, 0, 0, c->sliding[l]};
        /* A tile of rows at a time, all KV heads within it: a head over a whole span would walk
         * every q and o row once per head (pages a span whose scratch is in a file reads back). */
        for (ac.r0 = 0; ac.r0 < T; ac.r0 += GO_QUERY_TILE) {
            ac.nr = T - ac.r0 < GO_QUERY_TILE ? T - ac.r0 : GO_QUERY_TILE;
            ms_pool_for(pool, ac.nr * c->n_kv, 1, attend, &ac);
        }
        /* then the rows' keys join the cache in order (a ring keeps the last of them) */
        go_kv_reserve(kv, p0 + T - 1, kvd);
        for (int64_t s = 0; s < T; s++) {
            int64_t p = p0 + s, row = kv->ring ? p % kv->ring : p;
            memcpy(kv->k + row * kvd, k + (r0 + s) * kvd, sizeof(float) * (size_t)kvd);
            memcpy(kv->v + row * kvd, v + (r0 + s) * kvd, sizeof(float) * (size_t)kvd);
        }
    }
    ms_matmul(&w->o, o, R, a, pool);
    for (int64_t r = 0; r < R; r++)
        for (int64_t i = 0; i < H; i++) h[r * H + i] += a[r * H + i] + w->bo[i];
}

/* The layer's gate: top 4 of the router's logits (with its bias), a softmax over them. */
static ms_moe_gate gate_of(const go_model *g, int l)
{
    const ms_gptoss_cfg *c = &g->cfg;
    const go_layer *w = &g->layers[l];
    ms_moe_gate gt = {{MS_ROUTE_TOPK_THEN_SOFTMAX, c->n_experts, c->top_k, 0, 0, 0, 1.0f}, &w->router, w->router_b, NULL};
    return gt;
}

/* Predicted routing: the layer's router applied to the residual stream before its attention,
 * normed as the MoE's input will be, so that the expert store starts reading the likely
 * experts while the attention computes (ms_experts.prefetch). The router after the attention
 * decides what is computed; this only reads early. */
static void predict_route(go_model *g, int l, const float *h, int64_t R, ms_arena *ar)
{
    ms_model *m = &g->base;
    const ms_gptoss_cfg *c = &g->cfg;
    int64_t H = c->hidden;
    size_t mark = ms_arena_mark(ar);
    float *t = ms_arena_take(ar, (size_t)(R * H)); /* [R][H] normed stream */
    for (int64_t r = 0; r < R; r++) ms_rmsnorm(h + r * H, g->layers[l].post_norm, H, c->eps, t + r * H);
    ms_moe_gate gt = gate_of(g, l);
    ms_moe_gate_prefetch(&gt, &m->experts, l, t, R, ar, m->pool);
    ms_arena_reset(ar, mark);
}

/* The MoE block of layer l: h += sum over rank r of w_r * expert_r(rmsnorm(h)). */
static int moe(go_model *g, int l, float *h, int64_t R, int32_t *ids_out, ms_arena *ar)
{
    ms_model *m = &g->base;
    const ms_gptoss_cfg *c = &g->cfg;
    int64_t H = c->hidden;
    float *t = ms_arena_take(ar, (size_t)(R * H)); /* [R][H] normed input */
    for (int64_t r = 0; r < R; r++) ms_rmsnorm(h + r * H, g->layers[l].post_norm, H, c->eps, t + r * H);
    ms_moe_gate gt = gate_of(g, l);
    return ms_moe_block_run(&gt, &m->experts, l, t, NULL, R, H, h, 1, ids_out, NULL, ar, m->pool);
}


/* ---- the pass: layers and tail for the runtime's ms_mrt_pass_run ---- */

static void go_pass_begin(ms_model *m, ms_pass *p)
{
    (void)m;
    for (int i = 0; i < p->n; i++)
        if (p->items[i].spec) p->items[i].seq->spec_rows = p->items[i].T;
}

static int go_pass_layer(ms_model *m, ms_pass *p, int l)
{
    go_model *g = (go_model *)m;
    if (p->R > 0 && m->experts.prefetch && ms_mat_resident(&g->layers[l].router)) predict_route(g, l, p->h, p->R, p->ar);
    attention(g, l, p->items, p->seg, p->n, p->h, p->R, p->ar);
    return moe(g, l, p->h, p->R, p->route, p->ar);
}

static int go_layer_routes(const ms_model *m, int l)
{
    (void)m, (void)l;
    return 1; /* every layer */
}

static void go_tail_row(ms_model *m, const ms_pass *p, int64_t r, float *out)
{
    go_model *g = (go_model *)m;
    ms_rmsnorm(p->h + r * g->cfg.hidden, g->final_norm, g->cfg.hidden, g->cfg.eps, out);
}

static const ms_mat *go_lm_head(ms_model *m) { return &((go_model *)m)->lm_head; }

const ms_pass_ops go_pass = {
    .pass_begin = go_pass_begin,
    .layer = go_pass_layer,
    .layer_routes = go_layer_routes,
    .tail_row = go_tail_row,
    .lm_head = go_lm_head,
};
