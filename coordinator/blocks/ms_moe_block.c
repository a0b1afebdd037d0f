/* ms_moe_block: route -> begin the reads -> overlapped work -> compute -> combine in rank order. */
#include <string.h>

#include "ms_err.h"
#include "ms_moe_block.h"

size_t ms_moe_block_work_floats(const ms_moe_gate *g, int64_t T, int64_t W)
{
    size_t t = (size_t)T, k = (size_t)g->router.k;
    return MS_ARENA_SPAN(t * (size_t)g->router.n_experts) + 2 * MS_ARENA_SPAN(t * k) + MS_ARENA_SPAN(t * k * (size_t)W);
}

void ms_moe_gate_route(const ms_moe_gate *g, const float *x, int64_t T, int32_t *ids, float *weights, ms_arena *ar,
                       ms_pool *pool)
{
    int64_t Ne = g->router.n_experts;
    size_t mark = ms_arena_mark(ar);
    float *logits = ms_arena_take(ar, (size_t)(T * Ne)); /* [T][Ne] */
    ms_matmul(g->gate, x, T, logits, pool);
    if (g->logit_bias)
        for (int64_t t = 0; t < T; t++)
            for (int64_t e = 0; e < Ne; e++) logits[t * Ne + e] += g->logit_bias[e];
    ms_router_route_rows(&g->router, logits, g->select_bias, T, ids, weights);
    ms_arena_reset(ar, mark);
}

void ms_moe_gate_prefetch(const ms_moe_gate *g, const ms_experts *ex, int layer, const float *x, int64_t T,
                          ms_arena *ar, ms_pool *pool)
{
    if (!ex->prefetch) return;
    int64_t k = g->router.k;
    size_t mark = ms_arena_mark(ar);
    _Static_assert(sizeof(int32_t) == sizeof(float), "ids share the float arena");
    int32_t *ids = (int32_t *)ms_arena_take(ar, (size_t)(T * k)); /* [T][k] */
    float *wts = ms_arena_take(ar, (size_t)(T * k));              /* [T][k] */
    ms_moe_gate_route(g, x, T, ids, wts, ar, pool);
    if (T > 0) ex->prefetch(ex->ctx, layer, T, (int)k, ids);
    ms_arena_reset(ar, mark);
}

void ms_moe_combine(const float *w, const float *eo, int64_t T, int k, int64_t W, float *y, int accumulate)
{
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < W; i++) {
            double acc = 0.0;
            for (int j = 0; j < k; j++) acc += (double)w[t * k + j] * (double)eo[(t * k + j) * W + i];
            if (accumulate)
                y[t * W + i] += (float)acc;
            else
                y[t * W + i] = (float)acc;
        }
}

int ms_moe_block_run(const ms_moe_gate *g, const ms_experts *ex, int layer, const float *x, const float *z,
                     int64_t T, int64_t W, float *y, int accumulate, int32_t *ids_out, const ms_moe_overlap *overlap,
                     ms_arena *ar, ms_pool *pool)
{
    int k = g->router.k;
    int rc = -1;
    size_t mark = ms_arena_mark(ar);
    int32_t *ids = ids_out ? ids_out : (int32_t *)ms_arena_take(ar, (size_t)(T * k)); /* [T][k] */
    float *wts = ms_arena_take(ar, (size_t)(T * k));                                  /* [T][k] */
    float *eo = ms_arena_take(ar, (size_t)(T * k * W));                               /* [T][k][W] */
    ms_moe_gate_route(g, x, T, ids, wts, ar, pool); /* its logits [T][Ne] come and go after eo */
    if (ex->routes)
        for (int64_t i = 0; i < T * k; i++) ex->routes[(size_t)layer * (size_t)ex->routes_n + (size_t)ids[i]]++;
    /* The reads start now, and the disk works while the overlapped work computes. */
    if (T > 0 && ex->begin) ex->begin(ex->ctx, layer, T, k, ids);
    if (overlap && overlap->fn) overlap->fn(overlap->ctx);
    if (T > 0 && ex->compute(ex->ctx, layer, T, z ? z : x, k, ids, eo) != 0) {
        ms_err_wrap("layer %d routed experts", layer);
        goto out;
    }
    ms_moe_combine(wts, eo, T, k, W, y, accumulate);
    rc = 0;
out:
    ms_arena_reset(ar, mark);
    return rc;
}
