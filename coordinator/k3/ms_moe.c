/* ms_moe: Stable LatentMoE (spec §3.8): router, latent projections, experts, shared experts. */
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_moe.h"
#include "ms_ops.h"

int ms_moe_forward(const ms_cfg *c, int layer, const ms_moe_w *w, const ms_experts *ex, const float *x, int64_t T,
                   float *y, int32_t *ids_out, ms_pool *pool)
{
    int Ne = c->n_experts, k = c->top_k, E = c->hidden;
    int64_t L = c->latent;
    int rc = -1;
    float *logits = ms_malloc(sizeof(float) * (size_t)(T * Ne));     /* [T][Ne] */
    int32_t *ids = ms_malloc(sizeof(int32_t) * (size_t)(T * k));     /* [T][k] */
    float *wts = ms_malloc(sizeof(float) * (size_t)(T * k));         /* [T][k] */
    float *z = ms_malloc(sizeof(float) * (size_t)(T * L));           /* [T][L] latent input */
    float *eo = ms_malloc(sizeof(float) * (size_t)(T * k * L));      /* [T][k][L] expert outputs */
    float *a = ms_malloc(sizeof(float) * (size_t)(T * L));           /* [T][L] combined */
    float *sh = ms_malloc(sizeof(float) * (size_t)(T * E));          /* [T][E] shared experts */
    ms_matmul(&w->gate, x, T, logits, pool);
    for (int64_t t = 0; t < T; t++)
        ms_router_select(logits + t * Ne, w->bias, Ne, k, c->renorm, c->routed_scale, ids + t * k, wts + t * k);
    ms_matmul(&w->down, x, T, z, pool);
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
    ms_glu_mlp(&w->sg, &w->su, &w->sd, c->situ_b1, c->situ_b2, x, T, sh, pool);
    for (int64_t i = 0; i < T * E; i++) y[i] += sh[i];
    if (ids_out) memcpy(ids_out, ids, sizeof(int32_t) * (size_t)(T * k));
    rc = 0;
out:
    free(logits);
    free(ids);
    free(wts);
    free(z);
    free(eo);
    free(a);
    free(sh);
    return rc;
}
