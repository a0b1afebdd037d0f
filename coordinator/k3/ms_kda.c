/* ms_kda: Kimi Delta Attention (spec §3.5): projections, short convs, decay, delta-rule recurrence. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_k3_ops.h"
#include "ms_kda.h"
#include "ms_ops.h"

void ms_kda_state_init(ms_kda_state *st, const ms_k3_cfg *c)
{
    size_t P = (size_t)c->kda_heads * (size_t)c->kda_head_dim;
    size_t H = (size_t)(c->conv_k - 1);
    memset(st, 0, sizeof *st);
    st->S = ms_calloc(P * (size_t)c->kda_head_dim, sizeof(float));
    st->hq = ms_calloc(P * H + 1, sizeof(float));
    st->hk = ms_calloc(P * H + 1, sizeof(float));
    st->hv = ms_calloc(P * H + 1, sizeof(float));
}

uint64_t ms_kda_state_bytes(const ms_k3_cfg *c)
{
    uint64_t P = (uint64_t)c->kda_heads * (uint64_t)c->kda_head_dim, H = (uint64_t)(c->conv_k - 1);
    return 4 * (P * (uint64_t)c->kda_head_dim + 3 * (P * H + 1)); /* S, hq, hk, hv as ms_kda_state_init allocates them */
}

void ms_kda_state_copy(ms_kda_state *dst, const ms_kda_state *src, const ms_k3_cfg *c)
{
    size_t P = (size_t)c->kda_heads * (size_t)c->kda_head_dim, H = (size_t)(c->conv_k - 1);
    MS_ASSERT(!src->recording);
    ms_kda_state_init(dst, c);
    memcpy(dst->S, src->S, sizeof(float) * P * (size_t)c->kda_head_dim);
    memcpy(dst->hq, src->hq, sizeof(float) * P * H);
    memcpy(dst->hk, src->hk, sizeof(float) * P * H);
    memcpy(dst->hv, src->hv, sizeof(float) * P * H);
}

uint64_t ms_kda_fixed_bytes(const ms_k3_cfg *c)
{
    /* ms_kda_spec_end's [P] scratch and its conv rows, outside the pass's arena */
    return 16 * (uint64_t)c->kda_heads * (uint64_t)c->kda_head_dim;
}

void ms_kda_state_reset(ms_kda_state *st, const ms_k3_cfg *c)
{
    size_t P = (size_t)c->kda_heads * (size_t)c->kda_head_dim;
    size_t H = (size_t)(c->conv_k - 1);
    memset(st->S, 0, sizeof(float) * P * (size_t)c->kda_head_dim);
    memset(st->hq, 0, sizeof(float) * P * H);
    memset(st->hk, 0, sizeof(float) * P * H);
    memset(st->hv, 0, sizeof(float) * P * H);
}

void ms_kda_state_free(ms_kda_state *st)
{
    if (!st) return;
    free(st->S);
    free(st->hq);
    free(st->hk);
    free(st->hv);
    free(st->S0);
    free(st->h0);
    free(st->rec);
    memset(st, 0, sizeof *st);
}

void ms_kda_decay(const float *z, const float *A_log, const float *dt_bias, int Hk, int D, float lb, float *g_out,
                  float *alpha)
{
    for (int h = 0; h < Hk; h++) {
        float a = expf(A_log[h]); /* per head, never per channel (trap 15) */
        for (int d = 0; d < D; d++) {
            int p = h * D + d;
            float g = lb * ms_sigmoid(a * (z[p] + dt_bias[p]));
            if (g_out) g_out[p] = g;
            alpha[p] = expf(g);
        }
    }
}

/* Heads [h0, h1) of one recurrence step; heads are independent, so any split is exact. */
static void recur_heads(float *S, int h0, int h1, int D, const float *q, const float *k, const float *v,
                        const float *alpha, const float *beta, float *o)
{
    double u[512];
    MS_ASSERT(D <= 512);
    for (int h = h0; h < h1; h++) {
        float *Sh = S + (size_t)h * D * D; /* [D][D], row = key channel */
        const float *qh = q + h * D, *kh = k + h * D, *vh = v + h * D, *ah = alpha + h * D;
        /* decay rows, then read S^T k */
        for (int j = 0; j < D; j++) u[j] = 0.0;
        for (int i = 0; i < D; i++) {
            float *row = Sh + (size_t)i * D;
            float ai = ah[i];
            double ki = kh[i];
            for (int j = 0; j < D; j++) {
                row[j] *= ai;
                u[j] += ki * (double)row[j];
            }
        }
        /* delta write: S += k (beta (v - u))^T */
        float dv[512];
        for (int j = 0; j < D; j++) dv[j] = beta[h] * (vh[j] - (float)u[j]);
        for (int i = 0; i < D; i++) {
            float *row = Sh + (size_t)i * D;
            float ki = kh[i];
            for (int j = 0; j < D; j++) row[j] += ki * dv[j];
        }
        /* output from the updated state */
        for (int j = 0; j < D; j++) u[j] = 0.0;
        for (int i = 0; i < D; i++) {
            const float *row = Sh + (size_t)i * D;
            double qi = qh[i];
            for (int j = 0; j < D; j++) u[j] += qi * (double)row[j];
        }
        for (int j = 0; j < D; j++) o[h * D + j] = (float)u[j];
    }
}

void ms_kda_recur_step(float *S, int Hk, int D, const float *q, const float *k, const float *v, const float *alpha,
                       const float *beta, float *o)
{
    recur_heads(S, 0, Hk, D, q, k, v, alpha, beta, o);
}

typedef struct {
    float *S;
    int D;
    const float *q, *k, *v, *alpha, *beta;
    float *o;
} recur_ctx;

static void recur_chunk(void *ctx, int64_t begin, int64_t end)
{
    recur_ctx *r = ctx;
    recur_heads(r->S, (int)begin, (int)end, r->D, r->q, r->k, r->v, r->alpha, r->beta, r->o);
}


size_t ms_kda_work_floats(const ms_k3_cfg *c, int64_t R)
{
    size_t P = (size_t)c->kda_heads * (size_t)c->kda_head_dim, r = (size_t)R;
    return 6 * MS_ARENA_SPAN(r * P) + MS_ARENA_SPAN(r * (size_t)c->kda_head_dim) +
           MS_ARENA_SPAN(r * (size_t)c->kda_heads) + MS_ARENA_SPAN(4 * P);
}

void ms_kda_forward_batch(const ms_k3_cfg *c, const ms_kda_w *w, ms_kda_state *const *st, const ms_rows *seg,
                          int n_seg, const float *x, int64_t R, float *out, ms_arena *ar, ms_pool *pool)
{
    int Hk = c->kda_heads, D = c->kda_head_dim, K = c->conv_k;
    int64_t P = (int64_t)Hk * D;
    size_t RP = (size_t)(R * P), mark = ms_arena_mark(ar);
    float *q = ms_arena_take(ar, RP);    /* [R][P] */
    float *k = ms_arena_take(ar, RP);    /* [R][P] */
    float *v = ms_arena_take(ar, RP);    /* [R][P] */
    float *g = ms_arena_take(ar, RP);    /* [R][P] output gate logits */
    float *z = ms_arena_take(ar, RP);    /* [R][P] decay pre-activation */
    float *fa = ms_arena_take(ar, (size_t)(R * D)); /* [R][D] */
    float *b = ms_arena_take(ar, (size_t)(R * Hk)); /* [R][Hk] */
    float *y = ms_arena_take(ar, RP);    /* [R][P] gated, normed output */
    float *tmp = ms_arena_take(ar, (size_t)P * 4); /* [4][P] conv outputs q, k, v and alpha */
    /* The streaming schedule is traced from this order of matmuls (ms_mrt_schedule). */
    ms_matmul(&w->q, x, R, q, pool);
    ms_matmul(&w->k, x, R, k, pool);
    ms_matmul(&w->v, x, R, v, pool);
    ms_matmul(&w->g, x, R, g, pool);
    ms_matmul(&w->fa, x, R, fa, pool);
    ms_matmul(&w->fb, fa, R, z, pool);
    ms_matmul(&w->b, x, R, b, pool);
    float qscale = 1.0f / sqrtf((float)D);
    float *cq = tmp, *ck = tmp + P, *cv = tmp + 2 * P, *alpha = tmp + 3 * P;
    float beta[1024];
    MS_ASSERT(Hk <= 1024);
    for (int s = 0; s < n_seg; s++) {
        ms_kda_state *ss = st[s];
        MS_ASSERT(seg[s].r0 >= 0 && seg[s].r0 + seg[s].T <= R);
        for (int64_t t = seg[s].r0; t < seg[s].r0 + seg[s].T; t++) {
            ms_k3_shortconv_step(w->q_conv, P, K, ss->hq, q + t * P, cq);
            ms_k3_shortconv_step(w->k_conv, P, K, ss->hk, k + t * P, ck);
            ms_k3_shortconv_step(w->v_conv, P, K, ss->hv, v + t * P, cv);
            for (int h = 0; h < Hk; h++) {
                ms_k3_l2norm(cq + h * D, D);
                ms_k3_l2norm(ck + h * D, D);
                beta[h] = ms_sigmoid(b[t * Hk + h]);
            }
            for (int64_t p = 0; p < P; p++) cq[p] *= qscale;
            ms_kda_decay(z + t * P, w->A_log, w->dt_bias, Hk, D, c->gate_lb, NULL, alpha);
            float *yt = y + t * P;
            recur_ctx rc = {ss->S, D, cq, ck, cv, alpha, beta, yt};
            ms_pool_for(pool, Hk, 8, recur_chunk, &rc);
            if (ss->recording) { /* speculative: keep what a replay of this row needs */
                MS_ASSERT(ss->n_rec < ss->cap_rec);
                float *rr = ss->rec + (size_t)ss->n_rec++ * MS_KDA_REC(P, Hk);
                memcpy(rr, q + t * P, sizeof(float) * (size_t)P);
                memcpy(rr + P, k + t * P, sizeof(float) * (size_t)P);
                memcpy(rr + 2 * P, v + t * P, sizeof(float) * (size_t)P);
                memcpy(rr + 3 * P, tmp, sizeof(float) * (size_t)(4 * P)); /* cq, ck, cv, alpha */
                memcpy(rr + 7 * P, beta, sizeof(float) * (size_t)Hk);
            }
            for (int h = 0; h < Hk; h++) ms_rmsnorm(yt + h * D, w->o_norm, D, c->eps, yt + h * D);
            for (int64_t p = 0; p < P; p++) yt[p] *= ms_sigmoid(g[t * P + p]);
        }
    }
    ms_matmul(&w->o, y, R, out, pool);
    ms_arena_reset(ar, mark);
}

void ms_kda_forward(const ms_k3_cfg *c, const ms_kda_w *w, ms_kda_state *st, const float *x, int64_t T, float *out,
                    ms_pool *pool)
{
    ms_rows seg = {0, T};
    ms_arena ar = {0};
    ms_arena_reserve(&ar, ms_kda_work_floats(c, T));
    ms_kda_forward_batch(c, w, &st, &seg, 1, x, T, out, &ar, pool);
    ms_arena_free(&ar);
}

uint64_t ms_kda_spec_bytes(const ms_k3_cfg *c, int64_t rows)
{
    uint64_t P = (uint64_t)c->kda_heads * (uint64_t)c->kda_head_dim;
    return 4 * (P * (uint64_t)c->kda_head_dim + 3 * P * (uint64_t)(c->conv_k - 1) + 1 +
                (uint64_t)rows * MS_KDA_REC(P, c->kda_heads));
}

void ms_kda_spec_reserve(ms_kda_state *st, const ms_k3_cfg *c, int64_t rows)
{
    size_t P = (size_t)c->kda_heads * (size_t)c->kda_head_dim, H = (size_t)(c->conv_k - 1);
    if (!st->S0) {
        st->S0 = ms_malloc(sizeof(float) * P * (size_t)c->kda_head_dim);
        st->h0 = ms_malloc(sizeof(float) * (3 * P * H + 1));
    }
    if (rows > st->cap_rec) {
        free(st->rec);
        st->rec = ms_malloc(sizeof(float) * (size_t)rows * MS_KDA_REC(P, c->kda_heads));
        st->cap_rec = rows;
    }
}

void ms_kda_spec_begin(ms_kda_state *st, const ms_k3_cfg *c)
{
    size_t P = (size_t)c->kda_heads * (size_t)c->kda_head_dim, H = (size_t)(c->conv_k - 1);
    MS_ASSERT(st->S0 && st->cap_rec > 0);
    memcpy(st->S0, st->S, sizeof(float) * P * (size_t)c->kda_head_dim);
    memcpy(st->h0, st->hq, sizeof(float) * P * H);
    memcpy(st->h0 + P * H, st->hk, sizeof(float) * P * H);
    memcpy(st->h0 + 2 * P * H, st->hv, sizeof(float) * P * H);
    st->n_rec = 0;
    st->recording = 1;
}

void ms_kda_spec_end(ms_kda_state *st, const ms_k3_cfg *c, const ms_kda_w *w, int64_t keep, ms_pool *pool)
{
    int Hk = c->kda_heads, D = c->kda_head_dim, K = c->conv_k;
    size_t P = (size_t)Hk * (size_t)D, H = (size_t)(K - 1);
    MS_ASSERT(st->recording && keep >= 1 && keep <= st->n_rec);
    st->recording = 0;
    if (keep == st->n_rec) return; /* every row stays: the state is already right */
    memcpy(st->S, st->S0, sizeof(float) * P * (size_t)D);
    memcpy(st->hq, st->h0, sizeof(float) * P * H);
    memcpy(st->hk, st->h0 + P * H, sizeof(float) * P * H);
    memcpy(st->hv, st->h0 + 2 * P * H, sizeof(float) * P * H);
    float *scratch = ms_malloc(sizeof(float) * P); /* [P] outputs nobody reads */
    for (int64_t t = 0; t < keep; t++) {
        const float *rr = st->rec + (size_t)t * MS_KDA_REC(P, Hk);
        /* the same history updates and recurrence steps the forward pass ran for this row */
        ms_k3_shortconv_step(w->q_conv, (int64_t)P, K, st->hq, rr, scratch);
        ms_k3_shortconv_step(w->k_conv, (int64_t)P, K, st->hk, rr + P, scratch);
        ms_k3_shortconv_step(w->v_conv, (int64_t)P, K, st->hv, rr + 2 * P, scratch);
        recur_ctx rc = {st->S, D, rr + 3 * P, rr + 4 * P, rr + 5 * P, rr + 6 * P, rr + 7 * P, scratch};
        ms_pool_for(pool, Hk, 8, recur_chunk, &rc);
    }
    free(scratch);
}
