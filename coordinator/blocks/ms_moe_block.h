/* ms_moe_block: a routed MoE layer's shared steps: route, start the reads, compute, combine. */
#ifndef MS_MOE_BLOCK_H
#define MS_MOE_BLOCK_H

#include "ms_arena.h"
#include "ms_expert.h"
#include "ms_kern.h"
#include "ms_pool.h"
#include "ms_router.h"

/* A layer's gate: borrowed weights, owned by the family's model. */
typedef struct {
    ms_router router;
    const ms_mat *gate;        /* [n_experts][H] router matrix */
    const float *logit_bias;   /* [n_experts] added to the logits (gpt-oss), or NULL */
    const float *select_bias;  /* [n_experts] the sigmoid router's correction bias, or NULL */
} ms_moe_gate;

/* Work the caller runs while the routed experts' reads start (K3: the latent input and the
 * shared experts); it may fill the experts' input. NULL fn: none. */
typedef struct {
    void (*fn)(void *ctx);
    void *ctx;
} ms_moe_overlap;

/* Floats of arena ms_moe_block_run takes for T rows of width W (returned on exit). */
size_t ms_moe_block_work_floats(const ms_moe_gate *g, int64_t T, int64_t W);

/* The routing of T rows x[T][H]: logits = gate x (+ logit_bias), then the router: ids[T][k],
 * weights[T][k]. With T = 0 it only names the gate to a matmul trace. */
void ms_moe_gate_route(const ms_moe_gate *g, const float *x, int64_t T, int32_t *ids, float *weights, ms_arena *ar,
                       ms_pool *pool);

/* Predicted routing: the routing of x tells ex->prefetch which experts to start reading
 * (when ex has one); nothing is computed from it. */
void ms_moe_gate_prefetch(const ms_moe_gate *g, const ms_experts *ex, int layer, const float *x, int64_t T,
                          ms_arena *ar, ms_pool *pool);

/* y[T][W] = (or, accumulate: +=) sum over the ranks j in order of w[t][j] * eo[t][j][:], summed
 * in double and rounded once: the canonical combine, the same bits whatever computed eo. */
void ms_moe_combine(const float *w, const float *eo, int64_t T, int k, int64_t W, float *y, int accumulate);
/* The same with row t's rank-j output at eo[slot[t * k + j]][:] (slot NULL: at t * k + j); k <= 64. */
void ms_moe_combine_placed(const float *w, const float *eo, const int64_t *slot, int64_t T, int k, int64_t W, float *y,
                           int accumulate);

/* The routed experts of layer `layer` for T rows: route x[T][H]; ex->begin starts the reads;
 * overlap runs; ex->compute on z[T][W] (NULL: x, whose width is then W); combined into y as
 * ms_moe_combine. ids_out[T][k] (or NULL) gets the choice. With T = 0 the gate and the overlap
 * still run (a matmul trace's walk), nothing else. Returns 0, or -1 with ms_err naming the layer
 * when the experts failed (y then undefined). */
int ms_moe_block_run(const ms_moe_gate *g, const ms_experts *ex, int layer, const float *x, const float *z,
                     int64_t T, int64_t W, float *y, int accumulate, int32_t *ids_out, const ms_moe_overlap *overlap,
                     ms_arena *ar, ms_pool *pool);

#endif
