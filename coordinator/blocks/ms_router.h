/* ms_router: which experts a row of a MoE layer goes to, and their weights, for every family. */
#ifndef MS_ROUTER_H
#define MS_ROUTER_H

#include <stdint.h>

/* How the router's logits become scores and a choice. */
typedef enum {
    /* top k of the raw logits, a softmax over those k (gpt-oss) */
    MS_ROUTE_TOPK_THEN_SOFTMAX,
    /* a softmax over all the experts, its top k; renorm divides them by their sum (Qwen3-MoE) */
    MS_ROUTE_SOFTMAX_THEN_TOPK,
    /* sigmoid scores; the choice by score + a correction bias, optionally within the best
     * groups; the weights from the unbiased scores (DeepSeek-V3, Kimi K2, Kimi K3) */
    MS_ROUTE_SIGMOID_BIAS,
} ms_route_score;

/* A layer's routing rule (a value: copy it freely). */
typedef struct {
    ms_route_score score;
    int n_experts;  /* logits per row */
    int k;          /* experts per row, 1 <= k <= n_experts */
    int n_group;    /* SIGMOID_BIAS: experts in n_group equal groups, the choice within the
                       topk_group groups of the largest sum of their two best biased scores;
                       0 or 1: no groups */
    int topk_group;
    int renorm;     /* the k weights divided by their sum (SOFTMAX_THEN_TOPK, SIGMOID_BIAS) */
    float scale;    /* then multiplied by this (routed_scaling_factor; 1 for none) */
} ms_router;

/* Checks a rule: 0, or -1 with ms_err naming the field (what: the caller's name for it). */
int ms_router_check(const ms_router *r, const char *what);

/* One row: logits[n_experts] (and bias[n_experts], the SIGMOID_BIAS correction; NULL: zeros)
 * -> ids[k] best first (ties: the lower id first) and weights[k]. The order of ids is the
 * canonical order the experts' outputs are combined in. Never fails on a checked rule; a
 * row with NaN logits picks some k distinct experts (the caller's non-finite checks report it). */
void ms_router_route(const ms_router *r, const float *logits, const float *bias, int32_t *ids, float *weights);

/* T rows: logits[T][n_experts] -> ids[T][k], weights[T][k]. */
void ms_router_route_rows(const ms_router *r, const float *logits, const float *bias, int64_t T, int32_t *ids,
                          float *weights);

#endif
