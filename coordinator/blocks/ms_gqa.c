/* ms_gqa: the projections, norms and rotation of a GQA layer, and its attention over the cache. */
#include <math.h>
#include <string.h>

#include "ms_err.h"
#include "ms_gqa.h"
#include "ms_ops.h"
#include "ms_scratch.h"

size_t ms_gqa_work_floats(const ms_gqa *a, int64_t R)
{
    size_t r = (size_t)R, qd = (size_t)a->n_heads * (size_t)a->head_dim, kvd = (size_t)a->n_kv * (size_t)a->head_dim;
    return 2 * MS_ARENA_SPAN(r * qd) /* q, attention out */ + 2 * MS_ARENA_SPAN(r * kvd) /* k, v */;
}

uint64_t ms_gqa_thread_bytes(const ms_gqa *a, int64_t positions)
{
    /* attend's scratch: a KV group's queries, scores over every position, sums, four keys' scores, the value rows */
    uint64_t Gp = (uint64_t)((a->n_heads / a->n_kv + 3) / 4 * 4);
    return 8 * Gp * (uint64_t)(2 * (int64_t)a->head_dim + positions + 5) + 8 * (uint64_t)(positions + 1) /* vrow */;
}

/* The attention of a block of query rows over the cache, one task per (row, KV head): the
 * group of query heads that share a KV head runs together, the heads in the lanes, so each key
 * and value row is read once for the group. Every score and every output lane still sums in
 * the order one head and one key at a time would (the same bits). */
typedef struct {
    const ms_gqa *cfg;
    const ms_kv *kv;   /* the cache: positions before p0 */
    const float *sinks; /* [nh] or NULL */
    const float *k;    /* [T][nkv*d] rotated keys of the rows, positions p0.. */
    const float *v;    /* [T][nkv*d] their values */
    const float *q;    /* [T][nh*d] rotated queries */
    float *out;        /* [T][nh*d] */
    int64_t p0, T;     /* the first row's position; the rows */
    int64_t r0, nr;    /* the tile of rows [r0, r0 + nr) this ms_pool_for attends */
} attn_ctx;

/* Query rows per attention tile: a head over a whole span would walk every q and o row once
 * per head (pages a span whose scratch is in a file reads back). */
#define GQA_QUERY_TILE 128

/* The key or value row of position pos: the rows' own from the pass, older ones from the cache
 * (which the rows' keys join only after they attend, so a ring still holds what they need). */
static inline const float *kv_row(const attn_ctx *a, const float *cache, const float *rows, int64_t pos, int kvh)
{
    const ms_gqa *c = a->cfg;
    int64_t kvd = (int64_t)c->n_kv * c->head_dim, off = (int64_t)kvh * c->head_dim;
    if (pos >= a->p0) return rows + (pos - a->p0) * kvd + off;
    return cache + ms_kv_row(a->kv, pos) * kvd + off;
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
    const ms_gqa *c = a->cfg;
    int d = c->head_dim, G = c->n_heads / c->n_kv;
    int64_t Gp = (G + 3) / 4 * 4; /* lanes of qt and s4: the group padded to whole vectors of 4 */
    int64_t qd = (int64_t)c->n_heads * d, nmax = a->p0 + a->T; /* the most keys a row sees */
    /* qt [d][Gp], s4 [4][Gp], scores [G][n], sums [G][d]: the thread's scratch (ms_gqa_thread_bytes) */
    double *qt = ms_scratch_push_zero(sizeof(double) * (size_t)(Gp * (2 * d + nmax + 4))); /* padding lanes stay 0 */
    double *s4 = qt + (int64_t)d * Gp, *sc = s4 + 4 * Gp, *acc = sc + nmax * G;
    const float **vrow = ms_scratch_push(sizeof *vrow * (size_t)nmax); /* [n] the value rows a row sees */
    double scale = 1.0 / sqrt((double)d);
    for (int64_t t = t0; t < t1; t++) {
        /* KV head outermost: a thread's contiguous share of tasks takes whole heads over all
         * the tile's rows, early (short) and late (long) alike */
        int kvh = (int)(t / a->nr);
        int64_t r = a->r0 + t % a->nr, p = a->p0 + r;
        int64_t lo = c->window > 0 && p - c->window + 1 > 0 ? p - c->window + 1 : 0, n = p - lo + 1;
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
            /* a sink joins the denominator (and the max) and carries no value */
            double mx = a->sinks ? (double)a->sinks[h] : -INFINITY;
            for (int64_t j = 0; j < n; j++)
                if (sh[j] > mx) mx = sh[j];
            double den = a->sinks ? exp((double)a->sinks[h] - mx) : 0.0;
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

void ms_gqa_attend(const ms_gqa *a, const float *sinks, const ms_kv *kv, const float *q, const float *k, const float *v,
                   int64_t p0, int64_t T, float *out, ms_pool *pool)
{
    attn_ctx ac = {a, kv, sinks, k, v, q, out, p0, T, 0, 0};
    /* A tile of rows at a time, all KV heads within it. */
    for (ac.r0 = 0; ac.r0 < T; ac.r0 += GQA_QUERY_TILE) {
        ac.nr = T - ac.r0 < GQA_QUERY_TILE ? T - ac.r0 : GQA_QUERY_TILE;
        ms_pool_for(pool, ac.nr * a->n_kv, 1, attend, &ac);
    }
}

static void add_bias(float *y, const float *b, int64_t R, int64_t W)
{
    for (int64_t r = 0; r < R; r++)
        for (int64_t i = 0; i < W; i++) y[r * W + i] += b[i];
}

void ms_gqa_forward(const ms_gqa *a, const ms_gqa_w *w, const ms_rope *rope, ms_kv *const *kv, const int64_t *p0,
                    const ms_rows *seg, int n, const float *x, int64_t R, float *out, ms_arena *ar, ms_pool *pool)
{
    int d = a->head_dim;
    int64_t qd = (int64_t)a->n_heads * d, kvd = (int64_t)a->n_kv * d, H = w->o.rows;
    size_t mark = ms_arena_mark(ar);
    float *q = ms_arena_take(ar, (size_t)(R * qd));  /* [R][nh*d] */
    float *k = ms_arena_take(ar, (size_t)(R * kvd)); /* [R][nkv*d] */
    float *v = ms_arena_take(ar, (size_t)(R * kvd)); /* [R][nkv*d] */
    float *o = ms_arena_take(ar, (size_t)(R * qd));  /* [R][nh*d] attention output */
    /* Matmul order q, k, v, o: the streaming schedule is traced from it (ms_mrt_schedule). */
    ms_matmul(&w->q, x, R, q, pool);
    ms_matmul(&w->k, x, R, k, pool);
    ms_matmul(&w->v, x, R, v, pool);
    if (R > 0) {
        if (w->bq) add_bias(q, w->bq, R, qd);
        if (w->bk) add_bias(k, w->bk, R, kvd);
        if (w->bv) add_bias(v, w->bv, R, kvd);
        if (w->q_norm)
            for (int64_t h = 0; h < R * a->n_heads; h++) ms_rmsnorm(q + h * d, w->q_norm, d, a->eps, q + h * d);
        if (w->k_norm)
            for (int64_t h = 0; h < R * a->n_kv; h++) ms_rmsnorm(k + h * d, w->k_norm, d, a->eps, k + h * d);
    }
    for (int i = 0; i < n; i++) {
        int64_t r0 = seg[i].r0, T = seg[i].T;
        if (T == 0) continue;
        if (rope)
            for (int64_t s = 0; s < T; s++) {
                ms_rope_apply(rope, q + (r0 + s) * qd, a->n_heads, d, p0[i] + s);
                ms_rope_apply(rope, k + (r0 + s) * kvd, a->n_kv, d, p0[i] + s);
            }
        /* causal: each row sees the cache and the rows up to its own; then the rows' keys
         * join the cache in order (a ring keeps the last of them) */
        ms_gqa_attend(a, w->sinks, kv[i], q + r0 * qd, k + r0 * kvd, v + r0 * kvd, p0[i], T, o + r0 * qd, pool);
        ms_kv_append(kv[i], p0[i], k + r0 * kvd, v + r0 * kvd, T);
    }
    ms_matmul(&w->o, o, R, out, pool);
    if (R > 0 && w->bo) add_bias(out, w->bo, R, H);
    ms_arena_reset(ar, mark);
}
