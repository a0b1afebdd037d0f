/* ms_moe: Stable LatentMoE (spec §3.8): router, latent projections, experts, shared experts. */
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_moe.h"
#include "ms_ops.h"

size_t ms_moe_work_floats(const ms_k3_cfg *c, int64_t T)
{
    size_t t = (size_t)T, k = (size_t)c->top_k, L = (size_t)c->latent;
    size_t SI = (size_t)c->n_shared * (size_t)c->moe_inter;
    return MS_ARENA_SPAN(t * (size_t)c->n_experts) + 2 * MS_ARENA_SPAN(t * k) + 2 * MS_ARENA_SPAN(t * L) +
           MS_ARENA_SPAN(t * k * L) + MS_ARENA_SPAN(t * (size_t)c->hidden) + MS_ARENA_SPAN(2 * t * SI);
}

int ms_moe_forward_ws(const ms_k3_cfg *c, int layer, const ms_moe_w *w, const ms_experts *ex, const float *x, int64_t T,
                      float *y, int32_t *ids_out, ms_arena *ar, ms_pool *pool)
{
    int Ne = c->n_experts, k = c->top_k, E = c->hidden;
    int64_t L = c->latent;
    int rc = -1;
    size_t mark = ms_arena_mark(ar);
    _Static_assert(sizeof(int32_t) == sizeof(float), "ids share the float arena");
    float *logits = ms_arena_take(ar, (size_t)(T * Ne));                /* [T][Ne] */
    int32_t *ids = (int32_t *)ms_arena_take(ar, (size_t)(T * k));       /* [T][k] */
    float *wts = ms_arena_take(ar, (size_t)(T * k));                    /* [T][k] */
    float *z = ms_arena_take(ar, (size_t)(T * L));                      /* [T][L] latent input */
    float *eo = ms_arena_take(ar, (size_t)(T * k * L));                 /* [T][k][L] expert outputs */
    float *a = ms_arena_take(ar, (size_t)(T * L));                      /* [T][L] combined */
    float *sh = ms_arena_take(ar, (size_t)(T * E));                     /* [T][E] shared experts */
    float *gw = ms_arena_take(ar, (size_t)(2 * T * c->n_shared * c->moe_inter)); /* [2][T][Ns*I] */
    ms_matmul(&w->gate, x, T, logits, pool);
    for (int64_t t = 0; t < T; t++)
        ms_router_select(logits + t * Ne, w->bias, Ne, k, c->renorm, c->routed_scale, ids + t * k, wts + t * k);
    /* The routed experts' reads start now, and the disk works while this thread computes the
     * latent input and the shared experts (which do not depend on them). */
    if (T > 0 && ex->begin) ex->begin(ex->ctx, layer, T, k, ids);
    ms_matmul(&w->down, x, T, z, pool);
    ms_glu_mlp_ws(&w->sg, &w->su, &w->sd, c->situ_b1, c->situ_b2, x, T, sh, gw, pool);
    if (T > 0 && ex->compute(ex->ctx, layer, T, z, k, ids, eo) != 0) {
        ms_err_wrap("layer %d routed experts", layer);
        goto out;
    }
    /* Combine in canonical rank order 0..k-1, never in arrival order. */
    for (int64_t t = 0; t < T; t++) {
        for (int64_t l = 0; l < L; l++) {
            double acc = 0.0;
            for (int j = 0; j < k; j++) acc += (double)wts[t * k + j] * (double)eo[(t * k + j) * L + l];
            a[t * L + l] = (float)acc;
        }
        if (c->latent_norm) ms_rmsnorm(a + t * L, w->norm, L, c->eps, a + t * L);
    }
    ms_matmul(&w->up, a, T, y, pool);
    for (int64_t i = 0; i < T * E; i++) y[i] += sh[i];
    if (ids_out) memcpy(ids_out, ids, sizeof(int32_t) * (size_t)(T * k));
    rc = 0;
out:
    ms_arena_reset(ar, mark);
    return rc;
}

int ms_moe_forward(const ms_k3_cfg *c, int layer, const ms_moe_w *w, const ms_experts *ex, const float *x, int64_t T,
                   float *y, int32_t *ids_out, ms_pool *pool)
{
    ms_arena ar = {0};
    ms_arena_reserve(&ar, ms_moe_work_floats(c, T));
    int rc = ms_moe_forward_ws(c, layer, w, ex, x, T, y, ids_out, &ar, pool);
    ms_arena_free(&ar);
    return rc;
}
