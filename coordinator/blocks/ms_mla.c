/* ms_mla: MLA with a compressed KV cache and per-head absorbed attention (Kimi K3 spec §3.6, DeepSeek-V3 spec §3.3). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_scratch.h"
#include "ms_mla.h"
#include "ms_ops.h"

/* Query rows per attention tile (see ms_mla_forward_batch). */
#define MS_MLA_QUERY_TILE 128

void ms_mla_cache_init(ms_mla_cache *kc) { memset(kc, 0, sizeof *kc); }
void ms_mla_cache_reset(ms_mla_cache *kc) { kc->n = 0; }

void ms_mla_cache_free(ms_mla_cache *kc)
{
    if (!kc) return;
    free(kc->lat);
    free(kc->rope);
    memset(kc, 0, sizeof *kc);
}

void ms_mla_cache_save(const ms_mla_cache *kc, const ms_mla_cfg *c, ms_sbuf *out)
{
    ms_sbuf_add(out, (const char *)&kc->n, sizeof kc->n);
    ms_sbuf_add(out, (const char *)kc->lat, sizeof(float) * (size_t)kc->n * (size_t)c->kv_lora);
    if (c->qk_rope > 0) ms_sbuf_add(out, (const char *)kc->rope, sizeof(float) * (size_t)kc->n * (size_t)c->qk_rope);
}

int ms_mla_cache_load(ms_mla_cache *kc, const ms_mla_cfg *c, int64_t pos, ms_reader *in)
{
    int64_t n;
    if (ms_reader_take(in, &n, sizeof n) != 0 || n != pos || (size_t)n * (size_t)c->kv_lora * 4 > in->n - in->at) return -1;
    ms_mla_cache_reserve(kc, c, n > 0 ? n : 1);
    int rc = ms_reader_take_floats(in, kc->lat, (size_t)n * (size_t)c->kv_lora);
    if (rc == 0 && c->qk_rope > 0) rc = ms_reader_take_floats(in, kc->rope, (size_t)n * (size_t)c->qk_rope);
    if (rc == 0) kc->n = n;
    return rc;
}

static void cache_reserve(ms_mla_cache *kc, int64_t need, int Rkv, int dr);

uint64_t ms_mla_cache_bytes(const ms_mla_cfg *c, int64_t n)
{
    return 4 * (uint64_t)(c->kv_lora + c->qk_rope) * (uint64_t)n; /* lat and rope rows, as reserved below */
}

void ms_mla_cache_copy(ms_mla_cache *dst, const ms_mla_cache *src, const ms_mla_cfg *c)
{
    ms_mla_cache_init(dst);
    ms_mla_cache_reserve(dst, c, src->cap > 0 ? src->cap : 1);
    if (src->n > 0) memcpy(dst->lat, src->lat, sizeof(float) * (size_t)(src->n * c->kv_lora));
    if (src->n > 0 && c->qk_rope > 0) memcpy(dst->rope, src->rope, sizeof(float) * (size_t)(src->n * c->qk_rope));
    dst->n = src->n;
}

uint64_t ms_mla_thread_bytes(const ms_mla_cfg *c, int64_t positions)
{
    /* attn_heads' rows: wk [dn+dv][Rkv] floats, qabs and ctxv [Rkv] doubles, ctxf [Rkv] floats,
     * p [positions] doubles */
    return 4 * (uint64_t)(c->qk_nope + c->v_head) * (uint64_t)c->kv_lora + 20 * (uint64_t)c->kv_lora +
           8 * (uint64_t)positions;
}

void ms_mla_cache_reserve(ms_mla_cache *kc, const ms_mla_cfg *c, int64_t n)
{
    if (n <= kc->cap) return;
    kc->lat = ms_realloc(kc->lat, sizeof(float) * (size_t)(n * c->kv_lora));
    kc->rope = ms_realloc(kc->rope, sizeof(float) * (size_t)(n * (c->qk_rope > 0 ? c->qk_rope : 1)));
    kc->cap = n;
}

static void cache_reserve(ms_mla_cache *kc, int64_t need, int Rkv, int dr)
{
    if (need <= kc->cap) return;
    int64_t cap = kc->cap ? kc->cap : 64;
    while (cap < need) cap *= 2;
    kc->lat = ms_realloc(kc->lat, sizeof(float) * (size_t)(cap * Rkv));
    kc->rope = ms_realloc(kc->rope, sizeof(float) * (size_t)(cap * (dr > 0 ? dr : 1)));
    kc->cap = cap;
}

/* Attention of T query tokens for a range of heads. The score of head h against cached
 * position s is (q^n_h . Wk_h lat_s + q^r_h . rope_s) * scale; with Wk_h absorbed into the
 * query (qabs = Wk_h^T q^n_h) only the compressed cache is needed. The value read is
 * Wv_h (sum_s p_s lat_s). All sums in double, in a fixed order. */
typedef struct {
    const ms_mla_cfg *c;
    const ms_mla_w *w;
    const ms_mat *kvb;   /* resident view of w->kvb */
    const ms_mla_cache *kc;
    int64_t T, n0;     /* query tokens, absolute position of the first */
    const float *q;    /* [T][H*dq] */
    float *o;          /* [T][H*dv] */
} attn_ctx;

static void attn_heads(void *vctx, int64_t h0, int64_t h1)
{
    attn_ctx *a = vctx;
    const ms_mla_cfg *c = a->c;
    int dn = c->qk_nope, dr = c->qk_rope, dv = c->v_head, Rkv = c->kv_lora;
    int dq = dn + dr;
    int64_t npos = a->n0 + a->T;
    double scale = c->scale;
    float *wk = ms_scratch_push(sizeof(float) * (size_t)((dn + dv) * Rkv)); /* [dn+dv][Rkv] head rows */
    double *qabs = ms_scratch_push(sizeof(double) * (size_t)Rkv);           /* [Rkv] */
    double *ctxv = ms_scratch_push(sizeof(double) * (size_t)Rkv);           /* [Rkv] */
    float *ctxf = ms_scratch_push(sizeof(float) * (size_t)Rkv);             /* [Rkv] */
    double *p = ms_scratch_push(sizeof(double) * (size_t)npos);             /* [npos] */
    for (int64_t h = h0; h < h1; h++) {
        int64_t base = h * (dn + dv);
        for (int r = 0; r < dn + dv; r++) ms_mat_row_f32(a->kvb, base + r, wk + (size_t)r * Rkv);
        for (int64_t t = 0; t < a->T; t++) {
            const float *qh = a->q + t * (int64_t)c->heads * dq + h * dq;
            for (int j = 0; j < Rkv; j++) qabs[j] = 0.0;
            for (int i = 0; i < dn; i++) {
                const float *row = wk + (size_t)i * Rkv;
                double qi = qh[i];
                for (int j = 0; j < Rkv; j++) qabs[j] += qi * (double)row[j];
            }
            int64_t last = a->n0 + t; /* causal: sees 0..last */
            double mx = -INFINITY;
            /* Four positions at a time: each score still sums in its own order (the same bits
             * as one at a time), in four independent chains that hide the adds' latency. */
            for (int64_t s0 = 0; s0 <= last; s0 += 4) {
                int nb = last + 1 - s0 < 4 ? (int)(last + 1 - s0) : 4;
                const float *lat[4], *rope[4];
                double sc[4] = {0}, sr[4] = {0};
                for (int b = 0; b < 4; b++) {
                    int64_t s = s0 + (b < nb ? b : 0);
                    lat[b] = a->kc->lat + s * Rkv;
                    rope[b] = a->kc->rope + s * dr;
                }
                for (int j = 0; j < Rkv; j++) {
                    double qj = qabs[j];
                    for (int b = 0; b < 4; b++) sc[b] += qj * (double)lat[b][j];
                }
                for (int j = 0; j < dr; j++) {
                    double qj = (double)qh[dn + j];
                    for (int b = 0; b < 4; b++) sr[b] += qj * (double)rope[b][j];
                }
                for (int b = 0; b < nb; b++) {
                    p[s0 + b] = (sc[b] + sr[b]) * scale;
                    if (p[s0 + b] > mx) mx = p[s0 + b];
                }
            }
            double sum = 0.0;
            for (int64_t s = 0; s <= last; s++) {
                p[s] = exp(p[s] - mx);
                sum += p[s];
            }
            for (int j = 0; j < Rkv; j++) ctxv[j] = 0.0;
            for (int64_t s = 0; s <= last; s++) {
                const float *lat = a->kc->lat + s * Rkv;
                double ps = p[s] / sum;
                for (int j = 0; j < Rkv; j++) ctxv[j] += ps * (double)lat[j];
            }
            for (int j = 0; j < Rkv; j++) ctxf[j] = (float)ctxv[j];
            float *oh = a->o + t * (int64_t)c->heads * dv + h * dv;
            for (int i = 0; i < dv; i++) oh[i] = (float)ms_dot_f32(wk + (size_t)(dn + i) * Rkv, ctxf, Rkv);
        }
    }
    ms_scratch_pop(p);
    ms_scratch_pop(ctxf);
    ms_scratch_pop(ctxv);
    ms_scratch_pop(qabs);
    ms_scratch_pop(wk);
}

size_t ms_mla_work_floats(const ms_mla_cfg *c, int64_t R)
{
    size_t r = (size_t)R, H = (size_t)c->heads, dq = (size_t)(c->qk_nope + c->qk_rope), dv = (size_t)c->v_head;
    return MS_ARENA_SPAN(r * (size_t)c->q_lora) + MS_ARENA_SPAN(r * H * dq) +
           MS_ARENA_SPAN(r * (size_t)(c->kv_lora + c->qk_rope)) + 2 * MS_ARENA_SPAN(r * H * dv);
}

int ms_mla_forward_batch(const ms_mla_cfg *c, const ms_mla_w *w, ms_mla_cache *const *kc, const ms_rows *seg, int n_seg,
                         const float *x, int64_t R, float *out, ms_arena *ar, ms_pool *pool)
{
    int H = c->heads, dn = c->qk_nope, dr = c->qk_rope, dv = c->v_head, Rq = c->q_lora, Rkv = c->kv_lora;
    int dq = dn + dr;
    size_t mark = ms_arena_mark(ar);
    float *qa = ms_arena_take(ar, (size_t)(R * Rq));            /* [R][Rq] */
    float *q = ms_arena_take(ar, (size_t)(R * H * dq));         /* [R][H*dq] */
    float *ckv = ms_arena_take(ar, (size_t)(R * (Rkv + dr)));   /* [R][Rkv+dr] */
    float *o = ms_arena_take(ar, (size_t)(R * H * dv));         /* [R][H*dv] */
    /* Matmul order qa, qb, kva, kvb, g, o; the streaming schedule is traced from it (ms_mrt_schedule). */
    ms_matmul(&w->qa, x, R, qa, pool);
    for (int64_t t = 0; t < R; t++) ms_rmsnorm(qa + t * Rq, w->qa_norm, Rq, c->eps, qa + t * Rq);
    ms_matmul(&w->qb, qa, R, q, pool);
    ms_matmul(&w->kva, x, R, ckv, pool);
    /* The attention reads kv_b by rows: a streamed kv_b is pulled whole, once for the pass. */
    ms_mat kvb;
    void *kvb_owned = NULL;
    int rc = w->kvb_buf ? ms_mat_materialize_in(&w->kvb, &kvb, w->kvb_buf) : ms_mat_materialize(&w->kvb, &kvb, &kvb_owned);
    for (int s = 0; s < n_seg; s++) {
        ms_mla_cache *kcs = kc[s];
        int64_t r0 = seg[s].r0, T = seg[s].T;
        MS_ASSERT(r0 >= 0 && r0 + T <= R);
        int64_t n0 = kcs->n;
        cache_reserve(kcs, n0 + T, Rkv, dr);
        for (int64_t t = 0; t < T; t++) {
            const float *ct = ckv + (r0 + t) * (Rkv + dr);
            ms_rmsnorm(ct, w->kva_norm, Rkv, c->eps, kcs->lat + (n0 + t) * Rkv);
            memcpy(kcs->rope + (n0 + t) * dr, ct + Rkv, sizeof(float) * (size_t)dr); /* raw without a rotary */
            if (c->rotary) { /* the shared key and every head's query part at the row's position */
                ms_rope_apply(c->rotary, kcs->rope + (n0 + t) * dr, 1, dr, n0 + t);
                ms_rope_apply(c->rotary, q + (r0 + t) * H * dq + dn, H, dq, n0 + t);
            }
        }
        kcs->n = n0 + T;
        /* Query rows a tile at a time, every head within it: each head of a tile reads its
         * slice of every q and o row, so over a whole span (4,096 rows of a K3 layer: 500 MB of
         * q and o) that walk would touch all the pages once per head, which a span whose scratch
         * is in a file pays in disk reads. A tile's rows stay in cache across its heads; each
         * (row, head) is the same arithmetic in any order. */
        for (int64_t t0 = 0; t0 < T; t0 += MS_MLA_QUERY_TILE) {
            int64_t nt = T - t0 < MS_MLA_QUERY_TILE ? T - t0 : MS_MLA_QUERY_TILE;
            attn_ctx a = {c, w, &kvb, kcs, nt, n0 + t0, q + (r0 + t0) * H * dq, o + (r0 + t0) * H * dv};
            ms_pool_for(pool, H, 1, attn_heads, &a);
        }
    }
    free(kvb_owned);
    if (c->out_gate) {
        float *g = ms_arena_take(ar, (size_t)(R * H * dv)); /* [R][H*dv] */
        ms_matmul(&w->g, x, R, g, pool);
        for (int64_t i = 0; i < R * H * dv; i++) o[i] *= ms_sigmoid(g[i]);
    }
    ms_matmul(&w->o, o, R, out, pool);
    ms_arena_reset(ar, mark);
    return rc;
}

int ms_mla_forward(const ms_mla_cfg *c, const ms_mla_w *w, ms_mla_cache *kc, const float *x, int64_t T, float *out,
                   ms_pool *pool)
{
    ms_rows seg = {0, T};
    ms_arena ar = {0};
    ms_arena_reserve(&ar, ms_mla_work_floats(c, T));
    int rc = ms_mla_forward_batch(c, w, &kc, &seg, 1, x, T, out, &ar, pool);
    ms_arena_free(&ar);
    return rc;
}
