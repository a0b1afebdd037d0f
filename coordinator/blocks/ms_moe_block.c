/* ms_moe_block: route -> begin the reads -> overlapped work -> compute -> combine in rank order. */
#include <string.h>

#include "ms_err.h"
#include "ms_moe_block.h"
#include "ms_scratch.h"

/* From this many (row, expert) items a call's outputs are placed in grouped order (see
 * ms_experts.compute_placed): spans, never a decode step's few rows. */
#define MS_MOE_PLACED_ITEMS 1024

size_t ms_moe_block_work_floats(const ms_moe_gate *g, int64_t T, int64_t W)
{
    size_t t = (size_t)T, k = (size_t)g->router.k;
    return MS_ARENA_SPAN(t * (size_t)g->router.n_experts) + 2 * MS_ARENA_SPAN(t * k) + MS_ARENA_SPAN(t * k * (size_t)W) +
           MS_ARENA_SPAN(2 * t * k); /* the items' slots (int64) */
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
    ms_moe_combine_placed(w, eo, NULL, T, k, W, y, accumulate);
}

void ms_moe_combine_placed(const float *w, const float *eo, const int64_t *slot, int64_t T, int k, int64_t W, float *y,
                           int accumulate)
{
    enum { KMAX = 64 };
    MS_ASSERT(k <= KMAX);
    for (int64_t t = 0; t < T; t++) {
        const float *o[KMAX]; /* the row's k outputs, rank order */
        for (int j = 0; j < k; j++) o[j] = eo + (slot ? slot[t * k + j] : t * k + j) * W;
        for (int64_t i = 0; i < W; i++) {
            double acc = 0.0;
            for (int j = 0; j < k; j++) acc += (double)w[t * k + j] * (double)o[j][i];
            if (accumulate)
                y[t * W + i] += (float)acc;
            else
                y[t * W + i] = (float)acc;
        }
    }
}

/* slot[i] = item i's place in the items' grouped order (ms_xgroup_build: experts by first
 * appearance, rows increasing within one), so that each expert's outputs are consecutive. */
static int place_items(const int32_t *ids, int64_t n, int n_experts, int64_t *slot)
{
    ms_xgroup gr;
    if (ms_xgroup_build_scratch(&gr, n, (const uint32_t *)ids, n_experts) != 0) return -1;
    for (int64_t t = 0; t < n; t++) slot[ms_xgroup_item(&gr, t)] = t;
    ms_xgroup_free(&gr);
    return 0;
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
    int64_t *slot = NULL; /* [T * k] */
    if (ex->compute_placed && T * k >= MS_MOE_PLACED_ITEMS) {
        _Static_assert(sizeof(int64_t) == 2 * sizeof(float), "slots take two floats of the arena");
        slot = (int64_t *)(void *)ms_arena_take(ar, (size_t)(2 * T * k));
        if (place_items(ids, T * k, g->router.n_experts, slot) != 0) {
            ms_err_wrap("layer %d routed experts", layer);
            goto out;
        }
    }
    if (T > 0 && (slot ? ex->compute_placed(ex->ctx, layer, T, z ? z : x, k, ids, slot, eo)
                       : ex->compute(ex->ctx, layer, T, z ? z : x, k, ids, eo)) != 0) {
        ms_err_wrap("layer %d routed experts", layer);
        goto out;
    }
    if (slot && ar->mapped) {
        /* The span's scratch is a file: its rows' outputs are read back in row order, each of a
         * row's k somewhere else, so no readahead around a fault (it would read, and evict,
         * pages the next rows do not want) and the next rows' outputs asked for while these
         * combine. The same rows' arithmetic, a block at a time. */
        enum { RB = 32 };
        ms_arena_advise_random(ar, eo, (size_t)(T * k * W), 1);
        for (int64_t t0 = 0; t0 < T; t0 += RB) {
            int64_t nt = T - t0 < RB ? T - t0 : RB;
            for (int64_t t = t0 ? t0 + RB : 0; t < t0 + 2 * RB && t < T; t++) /* the first time these too */
                for (int j = 0; j < k; j++) ms_arena_willneed(ar, eo + slot[t * k + j] * W, (size_t)W);
            ms_moe_combine_placed(wts + t0 * k, eo, slot + t0 * k, nt, k, W, y + t0 * W, accumulate);
        }
        ms_arena_advise_random(ar, eo, (size_t)(T * k * W), 0);
    } else {
        ms_moe_combine_placed(wts, eo, slot, T, k, W, y, accumulate);
    }
    rc = 0;
out:
    ms_arena_reset(ar, mark);
    return rc;
}
