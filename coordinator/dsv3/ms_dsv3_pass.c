/* ms_dsv3_pass: DeepSeek-V3's and Kimi K2's layers for the runtime's pass: the shared MLA block (rotary rope parts, YaRN's m^2 in the scores), then a dense SwiGLU MLP or the MoE block (sigmoid router with groups) with its shared expert. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ms_dsv3_int.h"
#include "ms_err.h"
#include "ms_moe_block.h"
#include "ms_ops.h"
#include "ms_rope.h"
#include "ms_rows.h"

ms_mla_cfg ds_mla_cfg(const ds_model *g)
{
    const ms_dsv3_cfg *c = &g->cfg;
    /* the scores' scale (dn + dr)^-1/2 times YaRN's m^2, m = 0.1 mscale_all_dim ln(factor) + 1 */
    double m = ms_rope_mscale(c->yarn_factor, c->yarn_mscale);
    ms_mla_cfg a = {c->n_heads, c->q_lora, c->kv_lora, c->qk_nope, c->qk_rope, c->v_head, 0,
                    1.0 / sqrt((double)(c->qk_nope + c->qk_rope)) * m * m, &g->rope, c->eps};
    return a;
}

/* The layer's gate (spec §3.6): sigmoid scores, the choice by score + bias within the best
 * topk_group groups, weights from the unbiased scores normalised and scaled. */
ms_moe_gate ds_gate(const ds_model *g, const ds_layer *w)
{
    const ms_dsv3_cfg *c = &g->cfg;
    ms_moe_gate gt = {{MS_ROUTE_SIGMOID_BIAS, c->n_experts, c->top_k, c->n_group, c->topk_group, 1, c->routed_scale},
                      w ? &w->router : NULL, NULL, w ? w->select_bias : NULL};
    return gt;
}

static ms_moe_gate gate_of(const ds_model *g, int l) { return ds_gate(g, l >= 0 ? &g->layers[l] : NULL); }

size_t ds_work_floats(const ds_model *g, int64_t R, int64_t out_rows)
{
    const ms_dsv3_cfg *c = &g->cfg;
    size_t r = (size_t)R, o = (size_t)out_rows, H = (size_t)c->hidden;
    ms_mla_cfg a = ds_mla_cfg(g);
    ms_moe_gate gt = gate_of(g, -1);
    /* the pass's h; the attention's t and output and the block's; the MLP's t, y, the shared
     * expert's output and the MoE block's; the tail's rows and logits */
    size_t pass = MS_ARENA_SPAN(r * H) + 2 * MS_ARENA_SPAN(r * H) + ms_mla_work_floats(&a, R) + 3 * MS_ARENA_SPAN(r * H) +
                  ms_moe_block_work_floats(&gt, R, (int64_t)H) + MS_ARENA_SPAN(o * H) + MS_ARENA_SPAN(o * (size_t)c->vocab);
    if (!g->mtp_on) return pass;
    /* the draft head's pending rows (kept apart, counted here), and its own pass between ours */
    size_t head = ds_mtp_work_floats(g, R, 1);
    return (pass > head ? pass : head) + r * H;
}

/* The attention block of layer l: h += MLA(rmsnorm(h)). */
static int attention(ds_model *g, int l, const ms_batch_item *items, const ms_rows *seg, int n, float *h, int64_t R,
                     ms_arena *ar)
{
    const ms_dsv3_cfg *c = &g->cfg;
    int64_t H = c->hidden;
    size_t mark = ms_arena_mark(ar);
    float *t = ms_arena_take(ar, (size_t)(R * H)); /* [R][H] normed input */
    float *a = ms_arena_take(ar, (size_t)(R * H)); /* [R][H] the block's output */
    ms_mla_cache *kc[MS_MODEL_MAX_SEQS];
    MS_ASSERT(n <= MS_MODEL_MAX_SEQS);
    for (int i = 0; i < n; i++) kc[i] = &((ds_seq *)items[i].seq)->kv[l];
    for (int64_t r = 0; r < R; r++) ms_rmsnorm(h + r * H, g->layers[l].in_norm, H, c->eps, t + r * H);
    ms_mla_cfg mc = ds_mla_cfg(g);
    int rc = ms_mla_forward_batch(&mc, &g->layers[l].mla, kc, seg, n, t, R, a, ar, g->base.pool);
    if (rc == 0)
        for (int64_t i = 0; i < R * H; i++) h[i] += a[i];
    else
        ms_err_set("layer %d attention: %s", l, ms_err_msg());
    ms_arena_reset(ar, mark);
    return rc;
}

/* The shared expert, computed while the routed experts' reads are in flight. */
typedef struct {
    const ds_layer *w;
    const float *t; /* [R][H] */
    int64_t R;
    float *sh;      /* [R][H] */
    ms_pool *pool;
} shared_ctx;

static void shared_run(void *vctx)
{
    shared_ctx *s = vctx;
    ms_swiglu_mlp(&s->w->sgate, &s->w->sup, &s->w->sdown, s->t, s->R, s->sh, s->pool);
}

/* The MLP block of layer l: h += (sum_r w_r expert_r(t) + shared(t)) in a MoE layer (the
 * reference's y + z), h += down(silu(gate t) up t) in a dense one; t = rmsnorm(h). */
static int mlp(ds_model *g, int l, float *h, int64_t R, int32_t *ids_out, ms_arena *ar)
{
    ms_model *m = &g->base;
    const ms_dsv3_cfg *c = &g->cfg;
    const ds_layer *w = &g->layers[l];
    int64_t H = c->hidden;
    float *t = ms_arena_take(ar, (size_t)(R * H));  /* [R][H] normed input */
    float *y = ms_arena_take(ar, (size_t)(R * H));  /* [R][H] the routed experts' or the MLP's sum */
    for (int64_t r = 0; r < R; r++) ms_rmsnorm(h + r * H, w->post_norm, H, c->eps, t + r * H);
    if (l < c->n_dense) {
        ms_swiglu_mlp(&w->gate, &w->up, &w->down, t, R, y, m->pool);
        for (int64_t i = 0; i < R * H; i++) h[i] += y[i];
        return 0;
    }
    float *sh = ms_arena_take(ar, (size_t)(R * H)); /* [R][H] the shared expert's output */
    shared_ctx sc = {w, t, R, sh, m->pool};
    ms_moe_overlap ov = {shared_run, &sc};
    ms_moe_gate gt = gate_of(g, l);
    int rc = ms_moe_block_run(&gt, &m->experts, l, t, NULL, R, H, y, 0, ids_out, c->n_shared > 0 ? &ov : NULL, ar,
                              m->pool);
    if (rc == 0)
        for (int64_t i = 0; i < R * H; i++) h[i] += c->n_shared > 0 ? y[i] + sh[i] : y[i];
    return rc;
}

/* Predicted routing: the layer's router on the residual stream before its attention, normed as
 * the MoE's input will be, so that the expert store starts reading the likely experts while the
 * attention computes. Only reads early; the real routing decides. */
static void predict_route(ds_model *g, int l, const float *h, int64_t R, ms_arena *ar)
{
    ms_model *m = &g->base;
    int64_t H = g->cfg.hidden;
    size_t mark = ms_arena_mark(ar);
    float *t = ms_arena_take(ar, (size_t)(R * H)); /* [R][H] normed stream */
    for (int64_t r = 0; r < R; r++) ms_rmsnorm(h + r * H, g->layers[l].post_norm, H, g->cfg.eps, t + r * H);
    ms_moe_gate gt = gate_of(g, l);
    ms_moe_gate_prefetch(&gt, &m->experts, l, t, R, ar, m->pool);
    ms_arena_reset(ar, mark);
}

/* ---- the pass: layers and tail for the runtime's ms_mrt_pass_run ---- */

static int ds_pass_layer(ms_model *m, ms_pass *p, int l)
{
    ds_model *g = (ds_model *)m;
    if (p->R > 0 && l >= g->cfg.n_dense && m->experts.prefetch && ms_mat_resident(&g->layers[l].router))
        predict_route(g, l, p->h, p->R, p->ar);
    if (attention(g, l, p->items, p->seg, p->n, p->h, p->R, p->ar) != 0) return -1;
    return mlp(g, l, p->h, p->R, p->route, p->ar);
}

static int ds_layer_routes(const ms_model *m, int l) { return l >= ((const ds_model *)m)->cfg.n_dense; }

static void ds_tail_row(ms_model *m, const ms_pass *p, int64_t r, float *out)
{
    ds_model *g = (ds_model *)m;
    ms_rmsnorm(p->h + r * g->cfg.hidden, g->final_norm, g->cfg.hidden, g->cfg.eps, out);
}

static const ms_mat *ds_lm_head(ms_model *m) { return &((ds_model *)m)->lm_head; }

const ms_pass_ops ds_pass = {
    .layer = ds_pass_layer,
    .layer_routes = ds_layer_routes,
    .tail_row = ds_tail_row,
    .lm_head = ds_lm_head,
    .pass_end = ds_mtp_pass_end,
};
