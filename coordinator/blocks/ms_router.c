/* ms_router: softmax, softmax-over-all and sigmoid-with-bias routers, group-limited choice. */
#include <math.h>
#include <string.h>

#include "ms_err.h"
#include "ms_ops.h"
#include "ms_router.h"
#include "ms_scratch.h"

int ms_router_check(const ms_router *r, const char *what)
{
    if (r->n_experts < 1) return ms_err_set("%s: %d experts (need at least 1)", what, r->n_experts);
    if (r->k < 1 || r->k > r->n_experts)
        return ms_err_set("%s: %d experts per token of %d (need 1 to %d)", what, r->k, r->n_experts, r->n_experts);
    if (r->score != MS_ROUTE_TOPK_THEN_SOFTMAX && r->score != MS_ROUTE_SOFTMAX_THEN_TOPK &&
        r->score != MS_ROUTE_SIGMOID_BIAS)
        return ms_err_set("%s: unknown scoring %d", what, (int)r->score);
    if (r->n_group > 1) {
        if (r->score != MS_ROUTE_SIGMOID_BIAS) return ms_err_set("%s: expert groups need sigmoid scoring", what);
        if (r->n_experts % r->n_group != 0)
            return ms_err_set("%s: %d experts do not split into %d groups", what, r->n_experts, r->n_group);
        if (r->n_experts / r->n_group < 2)
            return ms_err_set("%s: groups of %d experts (a group's score needs its best two)", what,
                              r->n_experts / r->n_group);
        if (r->topk_group < 1 || r->topk_group > r->n_group)
            return ms_err_set("%s: %d groups kept of %d", what, r->topk_group, r->n_group);
        if (r->topk_group * (r->n_experts / r->n_group) < r->k)
            return ms_err_set("%s: %d kept groups of %d experts hold fewer than %d experts per token", what,
                              r->topk_group, r->n_experts / r->n_group, r->k);
    }
    if (!isfinite(r->scale)) return ms_err_set("%s: scaling factor is not finite", what);
    return 0;
}

/* The k largest of v[n] among the allowed (allow NULL: all), largest first, ties to the lower
 * index: repeated maxima, so the order is the canonical one. */
static void top_k(const float *v, const uint8_t *allow, int n, int k, int32_t *ids, uint8_t *picked)
{
    memset(picked, 0, (size_t)n);
    for (int j = 0; j < k; j++) {
        int best = -1;
        float bv = 0.0f;
        for (int e = 0; e < n; e++) {
            if (picked[e] || (allow && !allow[e])) continue;
            if (best < 0 || v[e] > bv) {
                best = e;
                bv = v[e];
            }
        }
        MS_ASSERT(best >= 0); /* a checked rule leaves at least k eligible */
        picked[best] = 1;
        ids[j] = best;
    }
}

/* The weights divided by their sum (taken in double over the ranks in order, rounded once;
 * the tiny term keeps an all-zero row finite), then scaled. */
static void renorm_scale(const ms_router *r, float *w)
{
    if (r->renorm) {
        double sum = 0.0;
        for (int j = 0; j < r->k; j++) sum += w[j];
        float denom = (float)sum + 1e-20f;
        for (int j = 0; j < r->k; j++) w[j] = w[j] / denom;
    }
    for (int j = 0; j < r->k; j++) w[j] *= r->scale;
}

void ms_router_route(const ms_router *r, const float *logits, const float *bias, int32_t *ids, float *weights)
{
    int n = r->n_experts, k = r->k;
    MS_ASSERT(k >= 1 && k <= n);
    uint8_t *picked = ms_scratch_push((size_t)n * 2); /* [n] picked, [n] allowed */
    uint8_t *allow = picked + n;
    if (r->score == MS_ROUTE_TOPK_THEN_SOFTMAX) {
        top_k(logits, NULL, n, k, ids, picked);
        double mx = logits[ids[0]], sum = 0.0;
        for (int j = 0; j < k; j++) sum += exp((double)logits[ids[j]] - mx);
        for (int j = 0; j < k; j++) weights[j] = (float)(exp((double)logits[ids[j]] - mx) / sum);
    } else if (r->score == MS_ROUTE_SOFTMAX_THEN_TOPK) {
        float *p = ms_scratch_push(sizeof(float) * (size_t)n); /* [n] probabilities */
        double mx = -INFINITY, sum = 0.0;
        for (int e = 0; e < n; e++)
            if (logits[e] > mx) mx = logits[e];
        for (int e = 0; e < n; e++) sum += exp((double)logits[e] - mx);
        for (int e = 0; e < n; e++) p[e] = (float)(exp((double)logits[e] - mx) / sum);
        top_k(p, NULL, n, k, ids, picked);
        for (int j = 0; j < k; j++) weights[j] = p[ids[j]];
        ms_scratch_pop(p);
        renorm_scale(r, weights);
    } else {
        float *s = ms_scratch_push(sizeof(float) * (size_t)n * 2); /* [n] scores, [n] biased */
        float *c = s + n;
        for (int e = 0; e < n; e++) {
            s[e] = ms_sigmoid(logits[e]);
            c[e] = bias ? s[e] + bias[e] : s[e];
        }
        const uint8_t *mask = NULL;
        if (r->n_group > 1) {
            /* a group's score: its two best biased scores; the experts of the topk_group best
             * groups (ties to the lower group) stay eligible */
            int G = r->n_group, gs = n / G;
            float gscore[1024];
            uint8_t gpick[1024];
            int32_t gids[1024];
            MS_ASSERT(G <= 1024);
            for (int g = 0; g < G; g++) {
                int32_t two[2];
                top_k(c + g * gs, NULL, gs, 2, two, picked);
                gscore[g] = c[g * gs + two[0]] + c[g * gs + two[1]];
            }
            top_k(gscore, NULL, G, r->topk_group, gids, gpick);
            memset(allow, 0, (size_t)n);
            for (int j = 0; j < r->topk_group; j++) memset(allow + (size_t)gids[j] * gs, 1, (size_t)gs);
            mask = allow;
        }
        top_k(c, mask, n, k, ids, picked);
        for (int j = 0; j < k; j++) weights[j] = s[ids[j]];
        ms_scratch_pop(s);
        renorm_scale(r, weights);
    }
    ms_scratch_pop(picked);
}

void ms_router_route_rows(const ms_router *r, const float *logits, const float *bias, int64_t T, int32_t *ids,
                          float *weights)
{
    for (int64_t t = 0; t < T; t++)
        ms_router_route(r, logits + t * r->n_experts, bias, ids + t * r->k, weights + t * r->k);
}
