/* ms_gptoss_pass: gpt-oss's layers for the runtime's pass: the shared GQA block (sinks, biases, sliding windows, YaRN) and MoE block. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_scratch.h"
#include "ms_gptoss_int.h"
#include "ms_moe_block.h"
#include "ms_ops.h"
#include "ms_rows.h"

ms_gqa go_gqa(const ms_gptoss_cfg *c, int l)
{
    ms_gqa a = {c->n_heads, c->n_kv, c->head_dim, c->sliding[l] ? c->window : 0, c->eps};
    return a;
}

size_t go_work_floats(const ms_gptoss_cfg *c, int64_t R, int64_t out_rows)
{
    size_t r = (size_t)R, o = (size_t)out_rows, H = (size_t)c->hidden;
    ms_gqa a = go_gqa(c, 0);
    ms_moe_gate g = {{MS_ROUTE_TOPK_THEN_SOFTMAX, c->n_experts, c->top_k, 0, 0, 0, 1.0f}, NULL, NULL, NULL};
    /* the pass's h; the attention's t, its projection and the block's; the MoE's t and block
     * (the router's logits, ids, weights, expert outputs); the tail's rows and logits */
    return MS_ARENA_SPAN(r * H) + 2 * MS_ARENA_SPAN(r * H) + ms_gqa_work_floats(&a, R) + MS_ARENA_SPAN(r * H) +
           ms_moe_block_work_floats(&g, R, (int64_t)H) + MS_ARENA_SPAN(o * H) + MS_ARENA_SPAN(o * (size_t)c->vocab);
}

/* The attention block of layer l for all rows: h += o_proj(attention(rmsnorm(h))) + bo. */
static void attention(go_model *g, int l, const ms_batch_item *items, const ms_rows *seg, int n, float *h, int64_t R,
                      ms_arena *ar)
{
    const ms_gptoss_cfg *c = &g->cfg;
    const go_layer *w = &g->layers[l];
    int64_t H = c->hidden;
    size_t mark = ms_arena_mark(ar);
    float *t = ms_arena_take(ar, (size_t)(R * H)); /* [R][H] normed input */
    float *a = ms_arena_take(ar, (size_t)(R * H)); /* [R][H] projected, with o's bias */
    ms_kv *kv[MS_MODEL_MAX_SEQS];
    int64_t p0[MS_MODEL_MAX_SEQS];
    MS_ASSERT(n <= MS_MODEL_MAX_SEQS);
    for (int i = 0; i < n; i++) {
        kv[i] = &((go_seq *)items[i].seq)->kv[l];
        p0[i] = items[i].seq->pos;
    }
    for (int64_t r = 0; r < R; r++) ms_rmsnorm(h + r * H, w->in_norm, H, c->eps, t + r * H);
    ms_gqa shape = go_gqa(c, l);
    ms_gqa_forward(&shape, &w->attn, &g->rope, kv, p0, seg, n, t, R, a, ar, g->base.pool);
    for (int64_t i = 0; i < R * H; i++) h[i] += a[i];
    ms_arena_reset(ar, mark);
}

/* The layer's gate: top 4 of the router's logits (with its bias), a softmax over them. */
static ms_moe_gate gate_of(const go_model *g, int l)
{
    const ms_gptoss_cfg *c = &g->cfg;
    const go_layer *w = &g->layers[l];
    ms_moe_gate gt = {{MS_ROUTE_TOPK_THEN_SOFTMAX, c->n_experts, c->top_k, 0, 0, 0, 1.0f}, &w->router, w->router_b, NULL};
    return gt;
}

/* Predicted routing: the layer's router applied to the residual stream before its attention,
 * normed as the MoE's input will be, so that the expert store starts reading the likely
 * experts while the attention computes (ms_experts.prefetch). The router after the attention
 * decides what is computed; this only reads early. */
static void predict_route(go_model *g, int l, const float *h, int64_t R, ms_arena *ar)
{
    ms_model *m = &g->base;
    const ms_gptoss_cfg *c = &g->cfg;
    int64_t H = c->hidden;
    size_t mark = ms_arena_mark(ar);
    float *t = ms_arena_take(ar, (size_t)(R * H)); /* [R][H] normed stream */
    for (int64_t r = 0; r < R; r++) ms_rmsnorm(h + r * H, g->layers[l].post_norm, H, c->eps, t + r * H);
    ms_moe_gate gt = gate_of(g, l);
    ms_moe_gate_prefetch(&gt, &m->experts, l, t, R, ar, m->pool);
    ms_arena_reset(ar, mark);
}

/* The MoE block of layer l: h += sum over rank r of w_r * expert_r(rmsnorm(h)). */
static int moe(go_model *g, int l, float *h, int64_t R, int32_t *ids_out, ms_arena *ar)
{
    ms_model *m = &g->base;
    const ms_gptoss_cfg *c = &g->cfg;
    int64_t H = c->hidden;
    float *t = ms_arena_take(ar, (size_t)(R * H)); /* [R][H] normed input */
    for (int64_t r = 0; r < R; r++) ms_rmsnorm(h + r * H, g->layers[l].post_norm, H, c->eps, t + r * H);
    ms_moe_gate gt = gate_of(g, l);
    return ms_moe_block_run(&gt, &m->experts, l, t, NULL, R, H, h, 1, ids_out, NULL, ar, m->pool);
}


/* ---- the pass: layers and tail for the runtime's ms_mrt_pass_run ---- */

static int go_pass_layer(ms_model *m, ms_pass *p, int l)
{
    go_model *g = (go_model *)m;
    if (p->R > 0 && m->experts.prefetch && ms_mat_resident(&g->layers[l].router)) predict_route(g, l, p->h, p->R, p->ar);
    attention(g, l, p->items, p->seg, p->n, p->h, p->R, p->ar);
    return moe(g, l, p->h, p->R, p->route, p->ar);
}

static int go_layer_routes(const ms_model *m, int l)
{
    (void)m, (void)l;
    return 1; /* every layer */
}

static void go_tail_row(ms_model *m, const ms_pass *p, int64_t r, float *out)
{
    go_model *g = (go_model *)m;
    ms_rmsnorm(p->h + r * g->cfg.hidden, g->final_norm, g->cfg.hidden, g->cfg.eps, out);
}

static const ms_mat *go_lm_head(ms_model *m) { return &((go_model *)m)->lm_head; }

const ms_pass_ops go_pass = {
    .layer = go_pass_layer,
    .layer_routes = go_layer_routes,
    .tail_row = go_tail_row,
    .lm_head = go_lm_head,
};
