/* ms_moe: Stable LatentMoE (spec §3.8): router, latent projections, experts, shared experts. */
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_moe.h"
#include "ms_ops.h"

ms_moe_gate ms_moe_gate_of(const ms_k3_cfg *c, const ms_moe_w *w)
{
    ms_moe_gate g = {{MS_ROUTE_SIGMOID_BIAS, c->n_experts, c->top_k, 0, 0, c->renorm, c->routed_scale}, &w->gate, NULL,
                     w->bias};
    return g;
}

size_t ms_moe_work_floats(const ms_k3_cfg *c, int64_t T)
{
    size_t t = (size_t)T, L = (size_t)c->latent;
    size_t SI = (size_t)c->n_shared * (size_t)c->moe_inter;
    ms_moe_gate g = {{MS_ROUTE_SIGMOID_BIAS, c->n_experts, c->top_k, 0, 0, 1, 1.0f}, NULL, NULL, NULL};
    return ms_moe_block_work_floats(&g, T, (int64_t)L) + 2 * MS_ARENA_SPAN(t * L) + MS_ARENA_SPAN(t * (size_t)c->hidden) +
           MS_ARENA_SPAN(2 * t * SI);
}

/* What the block overlaps with the routed experts' reads: their latent input and the shared
 * experts, neither of which needs them. */
typedef struct {
    const ms_k3_cfg *c;
    const ms_moe_w *w;
    const float *x; /* [T][E] */
    int64_t T;
    float *z, *sh, *gw; /* [T][L], [T][E], [2][T][Ns*I] */
    ms_pool *pool;
} overlap_ctx;

static void overlap_run(void *vctx)
{
    overlap_ctx *o = vctx;
    ms_matmul(&o->w->down, o->x, o->T, o->z, o->pool);
    ms_glu_mlp_ws(&o->w->sg, &o->w->su, &o->w->sd, o->c->situ_b1, o->c->situ_b2, o->x, o->T, o->sh, o->gw, o->pool);
}

int ms_moe_forward_ws(const ms_k3_cfg *c, int layer, const ms_moe_w *w, const ms_experts *ex, const float *x, int64_t T,
                      float *y, int32_t *ids_out, ms_arena *ar, ms_pool *pool)
{
    int E = c->hidden;
    int64_t L = c->latent;
    size_t mark = ms_arena_mark(ar);
    float *z = ms_arena_take(ar, (size_t)(T * L));                      /* [T][L] latent input */
    float *a = ms_arena_take(ar, (size_t)(T * L));                      /* [T][L] combined */
    float *sh = ms_arena_take(ar, (size_t)(T * E));                     /* [T][E] shared experts */
    float *gw = ms_arena_take(ar, (size_t)(2 * T * c->n_shared * c->moe_inter)); /* [2][T][Ns*I] */
    ms_moe_gate g = ms_moe_gate_of(c, w);
    overlap_ctx oc = {c, w, x, T, z, sh, gw, pool};
    ms_moe_overlap ov = {overlap_run, &oc};
    int rc = ms_moe_block_run(&g, ex, layer, x, z, T, L, a, 0, ids_out, &ov, ar, pool);
    if (rc == 0) {
        if (c->latent_norm)
            for (int64_t t = 0; t < T; t++) ms_rmsnorm(a + t * L, w->norm, L, c->eps, a + t * L);
        ms_matmul(&w->up, a, T, y, pool);
        for (int64_t i = 0; i < T * E; i++) y[i] += sh[i];
    }
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
