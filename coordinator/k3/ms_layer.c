/* ms_layer: one decoder layer with the AttnRes wiring of spec §3.11. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_k3_ops.h"
#include "ms_layer.h"
#include "ms_ops.h"

ms_mla_cfg ms_k3_mla_cfg(const ms_k3_cfg *c)
{
    ms_mla_cfg m = {c->mla_heads, c->q_lora, c->kv_lora, c->qk_nope, c->qk_rope, c->v_head, c->mla_out_gate,
                    1.0 / sqrt((double)(c->qk_nope + c->qk_rope)), NULL, c->eps};
    return m;
}

int ms_layer_snaps_after(const ms_k3_cfg *c, int layer)
{
    if (layer < 0) return 0;
    return layer / c->attn_res_block + 1; /* boundaries 0, B, 2B, ... <= layer */
}

/* AttnRes over the first n snapshots of each token plus the prefix P. */
static void attnres_rows(const ms_k3_cfg *c, const float *snaps, int smax, int n, const float *P, const float *fold,
                         int64_t T, float *out)
{
    int64_t E = c->hidden;
    const float *srcs[MS_K3_CFG_MAX_SNAPSHOTS + 1];
    MS_ASSERT(n <= MS_K3_CFG_MAX_SNAPSHOTS); /* ms_k3_cfg refuses configs with more */
    for (int64_t t = 0; t < T; t++) {
        for (int s = 0; s < n; s++) srcs[s] = snaps + (t * smax + s) * E;
        srcs[n] = P + t * E;
        ms_k3_attnres(srcs, n + 1, E, fold, c->eps, out + t * E);
    }
}

/* Predicted routing: the layer's router applied to the residual stream before its attention
 * (AttnRes over the snapshots and the prefix P, NULL when the prefix is empty, as the MoE input
 * is formed after it), so that the expert store starts reading the likely experts while the
 * attention computes. The layer's own router decides what is computed; this only reads early. */
static void predict_route(const ms_k3_cfg *c, int layer, const ms_layer_w *w, const ms_experts *ex, const float *snaps,
                          int smax, int n, const float *P, int64_t T, float *xp, ms_arena *ar, ms_pool *pool)
{
    int64_t E = c->hidden;
    size_t mark = ms_arena_mark(ar);
    if (!P) {
        float *zero = ms_arena_take(ar, (size_t)(T * E)); /* [T][E] the empty prefix */
        memset(zero, 0, sizeof(float) * (size_t)(T * E));
        P = zero;
    }
    attnres_rows(c, snaps, smax, n, P, w->mlp_fold, T, xp); /* xp [T][E] */
    for (int64_t t = 0; t < T; t++) ms_rmsnorm(xp + t * E, w->post_norm, E, c->eps, xp + t * E);
    ms_moe_gate g = ms_moe_gate_of(c, &w->moe);
    ms_moe_gate_prefetch(&g, ex, layer, xp, T, ar, pool);
    ms_arena_reset(ar, mark);
}

size_t ms_layer_work_floats(const ms_k3_cfg *c, int64_t R)
{
    ms_mla_cfg mc = ms_k3_mla_cfg(c);
    size_t attn = 0, ffn = 0, kda = ms_kda_work_floats(c, R), mla = ms_mla_work_floats(&mc, R);
    for (int i = 0; i < c->n_layers; i++) {
        size_t a = c->is_mla[i] ? mla : kda;
        size_t f = ms_k3_cfg_is_dense(c, i) ? MS_ARENA_SPAN(2 * (size_t)R * (size_t)c->dense_inter)
                                         : ms_moe_work_floats(c, R);
        if (!ms_k3_cfg_is_dense(c, i)) { /* predict_route's, before the attention */
            size_t p = MS_ARENA_SPAN((size_t)R * (size_t)c->hidden) + MS_ARENA_SPAN((size_t)R * (size_t)c->n_experts) +
                       2 * MS_ARENA_SPAN((size_t)R * (size_t)c->top_k);
            if (p > a) a = p;
        }
        if (a > attn) attn = a;
        if (f > ffn) ffn = f;
    }
    return 2 * MS_ARENA_SPAN((size_t)R * (size_t)c->hidden) + (attn > ffn ? attn : ffn);
}

int ms_layer_forward_batch(const ms_k3_cfg *c, int layer, const ms_layer_w *w, ms_layer_state *const *st,
                           const ms_rows *seg, int n_seg, const ms_experts *ex, float *h, float *snaps, int smax,
                           int *n_snap, int64_t T, int32_t *ids_out, ms_arena *ar, ms_pool *pool)
{
    int64_t E = c->hidden;
    size_t TE = (size_t)(T * E);
    int n_prev = *n_snap;
    int boundary = ms_k3_cfg_is_boundary(c, layer);
    int n_cur = n_prev + boundary;
    MS_ASSERT(n_cur <= smax);
    *n_snap = n_cur;
    size_t mark = ms_arena_mark(ar);
    float *x = ms_arena_take(ar, TE);  /* [T][E] AttnRes output / normed input */
    float *a = ms_arena_take(ar, TE);  /* [T][E] module output */
    int rc = 0;

    /* h holds P, the running prefix sum, throughout. */
    if (n_prev > 0)
        attnres_rows(c, snaps, smax, n_prev, h, w->sa_fold, T, x);
    else
        memcpy(x, h, sizeof(float) * TE);
    int p_empty = 0;
    if (boundary) {
        for (int64_t t = 0; t < T; t++) memcpy(snaps + (t * smax + n_prev) * E, h + t * E, sizeof(float) * (size_t)E);
        p_empty = 1;
    }
    for (int64_t t = 0; t < T; t++) ms_rmsnorm(x + t * E, w->in_norm, E, c->eps, x + t * E);
    if (!w->is_dense && T > 0 && ex && ex->prefetch && ms_mat_resident(&w->moe.gate))
        predict_route(c, layer, w, ex, snaps, smax, n_cur, p_empty ? NULL : h, T, a, ar, pool);
    MS_ASSERT(n_seg >= 0 && n_seg <= MS_MODEL_MAX_SEQS);
    if (w->is_mla) {
        ms_mla_cache *kc[MS_MODEL_MAX_SEQS];
        for (int s = 0; s < n_seg; s++) kc[s] = &st[s]->mla;
        ms_mla_cfg mc = ms_k3_mla_cfg(c);
        if (ms_mla_forward_batch(&mc, &w->mla, kc, seg, n_seg, x, T, a, ar, pool) != 0) {
            rc = -1;
            goto out;
        }
    } else {
        ms_kda_state *ks[MS_MODEL_MAX_SEQS];
        for (int s = 0; s < n_seg; s++) ks[s] = &st[s]->kda;
        ms_kda_forward_batch(c, &w->kda, ks, seg, n_seg, x, T, a, ar, pool);
    }
    if (p_empty)
        memcpy(h, a, sizeof(float) * TE);
    else
        for (size_t i = 0; i < TE; i++) h[i] += a[i];

    attnres_rows(c, snaps, smax, n_cur, h, w->mlp_fold, T, x);
    for (int64_t t = 0; t < T; t++) ms_rmsnorm(x + t * E, w->post_norm, E, c->eps, x + t * E);
    if (w->is_dense) {
        float *gw = ms_arena_take(ar, (size_t)(2 * T * c->dense_inter)); /* [2][T][Id] */
        ms_glu_mlp_ws(&w->dgate, &w->dup, &w->ddown, c->situ_b1, c->situ_b2, x, T, a, gw, pool);
    } else if (ms_moe_forward_ws(c, layer, &w->moe, ex, x, T, a, ids_out, ar, pool) != 0) {
        rc = -1;
        goto out;
    }
    for (size_t i = 0; i < TE; i++) h[i] += a[i];
out:
    ms_arena_reset(ar, mark);
    return rc;
}

int ms_layer_forward(const ms_k3_cfg *c, int layer, const ms_layer_w *w, ms_layer_state *st, const ms_experts *ex,
                     float *h, float *snaps, int smax, int *n_snap, int64_t T, int32_t *ids_out, ms_pool *pool)
{
    ms_rows seg = {0, T};
    ms_arena ar = {0};
    ms_arena_reserve(&ar, ms_layer_work_floats(c, T));
    int rc = ms_layer_forward_batch(c, layer, w, &st, &seg, 1, ex, h, snaps, smax, n_snap, T, ids_out, &ar, pool);
    ms_arena_free(&ar);
    return rc;
}
