/* ms_qwen3_pass: Qwen3-MoE's layers for the runtime's pass: the shared GQA block (per-head q/k norms, RoPE), the MoE block (softmax router) or a dense SwiGLU MLP. */
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_moe_block.h"
#include "ms_ops.h"
#include "ms_qwen3_int.h"
#include "ms_rows.h"

ms_gqa qw_gqa(const ms_qwen3_cfg *c)
{
    ms_gqa a = {c->n_heads, c->n_kv, c->head_dim, 0, c->eps};
    return a;
}

/* The layer's gate: a softmax over all the experts, its top k, divided by their sum when
 * norm_topk_prob (spec §3.4); no bias, no scaling. */
static ms_moe_gate gate_of(const qw_model *g, int l)
{
    const ms_qwen3_cfg *c = &g->cfg;
    ms_moe_gate gt = {{MS_ROUTE_SOFTMAX_THEN_TOPK, c->n_experts, c->top_k, 0, 0, c->norm_topk, 1.0f},
                      l >= 0 ? &g->layers[l].router : NULL, NULL, NULL};
    return gt;
}

size_t qw_work_floats(const ms_qwen3_cfg *c, int64_t R, int64_t out_rows)
{
    size_t r = (size_t)R, o = (size_t)out_rows, H = (size_t)c->hidden;
    ms_gqa a = qw_gqa(c);
    ms_moe_gate g = {{MS_ROUTE_SOFTMAX_THEN_TOPK, c->n_experts, c->top_k, 0, 0, 1, 1.0f}, NULL, NULL, NULL};
    size_t moe = ms_moe_block_work_floats(&g, R, (int64_t)H), dense = MS_ARENA_SPAN(r * H); /* the MLP's y */
    /* the pass's h; the attention's t, its output and the block's; the MLP's t and the MoE
     * block's or the dense MLP's y; the tail's rows and logits */
    return MS_ARENA_SPAN(r * H) + 2 * MS_ARENA_SPAN(r * H) + ms_gqa_work_floats(&a, R) + MS_ARENA_SPAN(r * H) +
           (moe > dense ? moe : dense) + MS_ARENA_SPAN(o * H) + MS_ARENA_SPAN(o * (size_t)c->vocab);
}

/* The attention block of layer l for all rows: h += o_proj(attention(rmsnorm(h))). */
static void attention(qw_model *g, int l, const ms_batch_item *items, const ms_rows *seg, int n, float *h, int64_t R,
                      ms_arena *ar)
{
    const ms_qwen3_cfg *c = &g->cfg;
    const qw_layer *w = &g->layers[l];
    int64_t H = c->hidden;
    size_t mark = ms_arena_mark(ar);
    float *t = ms_arena_take(ar, (size_t)(R * H)); /* [R][H] normed input */
    float *a = ms_arena_take(ar, (size_t)(R * H)); /* [R][H] the block's output */
    ms_kv *kv[MS_MODEL_MAX_SEQS];
    int64_t p0[MS_MODEL_MAX_SEQS];
    MS_ASSERT(n <= MS_MODEL_MAX_SEQS);
    for (int i = 0; i < n; i++) {
        kv[i] = &((qw_seq *)items[i].seq)->kv[l];
        p0[i] = items[i].seq->pos;
    }
    for (int64_t r = 0; r < R; r++) ms_rmsnorm(h + r * H, w->in_norm, H, c->eps, t + r * H);
    ms_gqa shape = qw_gqa(c);
    ms_gqa_forward(&shape, &w->attn, &g->rope, kv, p0, seg, n, t, R, a, ar, g->base.pool);
    for (int64_t i = 0; i < R * H; i++) h[i] += a[i];
    ms_arena_reset(ar, mark);
}

/* Predicted routing: the layer's router on the residual stream before its attention, normed as
 * the MoE's input will be, so that the expert store starts reading the likely experts while the
 * attention computes (ms_experts.prefetch). Only reads early; the real routing decides. */
static void predict_route(qw_model *g, int l, const float *h, int64_t R, ms_arena *ar)
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

/* The MLP block of layer l: h += sum over rank j of w_j * expert_j(rmsnorm(h)) in a MoE layer,
 * h += down(silu(gate t) * up t) in a dense one. */
static int mlp(qw_model *g, int l, float *h, int64_t R, int32_t *ids_out, ms_arena *ar)
{
    ms_model *m = &g->base;
    const ms_qwen3_cfg *c = &g->cfg;
    const qw_layer *w = &g->layers[l];
    int64_t H = c->hidden;
    float *t = ms_arena_take(ar, (size_t)(R * H)); /* [R][H] normed input */
    for (int64_t r = 0; r < R; r++) ms_rmsnorm(h + r * H, w->post_norm, H, c->eps, t + r * H);
    if (l >= c->first_moe) {
        ms_moe_gate gt = gate_of(g, l);
        return ms_moe_block_run(&gt, &m->experts, l, t, NULL, R, H, h, 1, ids_out, NULL, ar, m->pool);
    }
    float *y = ms_arena_take(ar, (size_t)(R * H)); /* [R][H] the dense MLP's output */
    ms_swiglu_mlp(&w->gate, &w->up, &w->down, t, R, y, m->pool);
    for (int64_t i = 0; i < R * H; i++) h[i] += y[i];
    return 0;
}

/* ---- the pass: layers and tail for the runtime's ms_mrt_pass_run ---- */

static int qw_pass_layer(ms_model *m, ms_pass *p, int l)
{
    qw_model *g = (qw_model *)m;
    if (p->R > 0 && l >= g->cfg.first_moe && m->experts.prefetch && ms_mat_resident(&g->layers[l].router))
        predict_route(g, l, p->h, p->R, p->ar);
    attention(g, l, p->items, p->seg, p->n, p->h, p->R, p->ar);
    return mlp(g, l, p->h, p->R, p->route, p->ar);
}

static int qw_layer_routes(const ms_model *m, int l) { return l >= ((const qw_model *)m)->cfg.first_moe; }

static void qw_tail_row(ms_model *m, const ms_pass *p, int64_t r, float *out)
{
    qw_model *g = (qw_model *)m;
    ms_rmsnorm(p->h + r * g->cfg.hidden, g->final_norm, g->cfg.hidden, g->cfg.eps, out);
}

static const ms_mat *qw_lm_head(ms_model *m) { return &((qw_model *)m)->lm_head; }

const ms_pass_ops qw_pass = {
    .layer = qw_pass_layer,
    .layer_routes = qw_layer_routes,
    .tail_row = qw_tail_row,
    .lm_head = qw_lm_head,
};
