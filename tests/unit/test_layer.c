/* test_layer: whole decoder layers (KDA at layer 1, MLA at boundary layer 3) with AttnRes wiring. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_k3_cfg.h"
#include "ms_cpu.h"
#include "ms_err.h"
#include "ms_expert.h"
#include "ms_fix.h"
#include "ms_kern.h"
#include "ms_layer.h"
#include "ms_pool.h"
#include "ms_test.h"

static ms_fix_tol tol;
static ms_k3_cfg cfg;

/* Everything one layer fixture needs, built once. */
typedef struct {
    ms_fix *f;
    ms_layer_w w;
    ms_expert_table *tab;
    int T, n_in, n_out;    /* tokens, snapshots per token on entry / on exit */
    const float *in;       /* [T][E] h */
    const float *want;     /* [T][E] new prefix sum */
    const float *snap_in;  /* [T][n_in][E] */
    const float *snap_out; /* [T][n_out][E] */
} layer_fx;

static const char *kp(const char *pre, const char *name)
{
    static char key[160];
    snprintf(key, sizeof key, "%s%s", pre, name);
    return key;
}

/* fold = res_norm * res_proj (spec §3.10), owned by the fixture. */
static const float *fold_of(ms_fix *f, const char *norm_key, const char *proj_key, int64_t E)
{
    const float *n = ms_fix_f32(f, norm_key, E);
    const float *p = ms_fix_f32(f, proj_key, E); /* [1][E] */
    float *fold = ms_fix_scratch(f, E);
    for (int64_t i = 0; i < E; i++) fold[i] = n[i] * p[i];
    return fold;
}

static void build_weights(layer_fx *lx, const ms_k3_cfg *c, int is_mla)
{
    ms_fix *f = lx->f;
    ms_layer_w *w = &lx->w;
    int64_t E = c->hidden;
    const char *a = "self_attn_";
    memset(w, 0, sizeof *w);
    w->is_mla = is_mla;
    w->is_dense = 0;
    w->in_norm = ms_fix_f32(f, "input_layernorm_weight", E);
    w->post_norm = ms_fix_f32(f, "post_attention_layernorm_weight", E);
    w->sa_fold = fold_of(f, "self_attention_res_norm_weight", "self_attention_res_proj_weight", E);
    w->mlp_fold = fold_of(f, "mlp_res_norm_weight", "mlp_res_proj_weight", E);
    if (is_mla) {
        int64_t H = c->mla_heads, dq = c->qk_nope + c->qk_rope;
        ms_mla_w *m = &w->mla;
        m->qa = ms_fix_mat(f, kp(a, "q_a_proj_weight"), c->q_lora, E);
        m->qb = ms_fix_mat(f, kp(a, "q_b_proj_weight"), H * dq, c->q_lora);
        m->kva = ms_fix_mat(f, kp(a, "kv_a_proj_with_mqa_weight"), c->kv_lora + c->qk_rope, E);
        m->kvb = ms_fix_mat(f, kp(a, "kv_b_proj_weight"), H * (c->qk_nope + c->v_head), c->kv_lora);
        m->o = ms_fix_mat(f, kp(a, "o_proj_weight"), E, H * c->v_head);
        m->g = ms_fix_mat(f, kp(a, "g_proj_weight"), H * c->v_head, E);
        m->qa_norm = ms_fix_f32(f, kp(a, "q_a_layernorm_weight"), c->q_lora);
        m->kva_norm = ms_fix_f32(f, kp(a, "kv_a_layernorm_weight"), c->kv_lora);
    } else {
        int64_t D = c->kda_head_dim, Hk = c->kda_heads, P = Hk * D, K = c->conv_k;
        ms_kda_w *k = &w->kda;
        k->q = ms_fix_mat(f, kp(a, "q_proj_weight"), P, E);
        k->k = ms_fix_mat(f, kp(a, "k_proj_weight"), P, E);
        k->v = ms_fix_mat(f, kp(a, "v_proj_weight"), P, E);
        k->g = ms_fix_mat(f, kp(a, "g_proj_weight"), P, E);
        k->o = ms_fix_mat(f, kp(a, "o_proj_weight"), E, P);
        k->fa = ms_fix_mat(f, kp(a, "f_a_proj_weight"), D, E);
        k->fb = ms_fix_mat(f, kp(a, "f_b_proj_weight"), P, D);
        k->b = ms_fix_mat(f, kp(a, "b_proj_weight"), Hk, E);
        k->q_conv = ms_fix_f32(f, kp(a, "q_conv1d_weight"), P * K); /* [P][1][K] */
        k->k_conv = ms_fix_f32(f, kp(a, "k_conv1d_weight"), P * K);
        k->v_conv = ms_fix_f32(f, kp(a, "v_conv1d_weight"), P * K);
        k->A_log = ms_fix_f32(f, kp(a, "A_log"), Hk);
        k->dt_bias = ms_fix_f32(f, kp(a, "dt_bias"), P);
        k->o_norm = ms_fix_f32(f, kp(a, "o_norm_weight"), D);
    }
    int64_t L = c->latent, NI = (int64_t)c->n_shared * c->moe_inter;
    ms_moe_w *m = &w->moe;
    m->gate = ms_fix_mat(f, "mlp_gate_weight", c->n_experts, E);
    m->bias = ms_fix_f32(f, "mlp_e_score_correction_bias", c->n_experts);
    m->down = ms_fix_mat(f, "mlp_down_weight", L, E);
    m->up = ms_fix_mat(f, "mlp_up_weight", E, L);
    m->norm = ms_fix_f32(f, "mlp_norm_weight", L);
    m->sg = ms_fix_mat(f, "mlp_shared_w1_weight", NI, E);
    m->su = ms_fix_mat(f, "mlp_shared_w3_weight", NI, E);
    m->sd = ms_fix_mat(f, "mlp_shared_w2_weight", E, NI);
}

/* Put this fixture's routed experts at `layer` of the table. */
static void set_experts(layer_fx *lx, const ms_k3_cfg *c, int layer)
{
    char key[128];
    for (int e = 0; e < c->n_experts; e++) {
        ms_expert_w ew;
        snprintf(key, sizeof key, "mlp_experts_%d_w1_weight", e);
        ew.w[MS_XROLE_GATE] = ms_fix_mat(lx->f, key, c->moe_inter, c->latent);
        snprintf(key, sizeof key, "mlp_experts_%d_w2_weight", e);
        ew.w[MS_XROLE_DOWN] = ms_fix_mat(lx->f, key, c->latent, c->moe_inter);
        snprintf(key, sizeof key, "mlp_experts_%d_w3_weight", e);
        ew.w[MS_XROLE_UP] = ms_fix_mat(lx->f, key, c->moe_inter, c->latent);
        ms_expert_table_set(lx->tab, layer, e, &ew);
    }
}

/* One run of ms_layer_forward at `layer` under config c on the fixture's input, in token
 * chunks of size `chunk` that carry the state. h_out: [T][E]; snaps_out: [T][smax][E].
 * Returns 0 and *n_after (the snapshot count reported by every call), or -1. */
static int run_layer(const layer_fx *lx, const ms_k3_cfg *c, int layer, int smax, int chunk, ms_pool *pool, float *h_out,
                     float *snaps_out, int32_t *ids, int *n_after)
{
    int64_t E = c->hidden, T = lx->T;
    ms_layer_state st;
    memset(&st, 0, sizeof st);
    if (!lx->w.is_mla) ms_kda_state_init(&st.kda, c);
    ms_mla_cache_init(&st.mla);
    memcpy(h_out, lx->in, sizeof(float) * (size_t)(T * E));
    memset(snaps_out, 0, sizeof(float) * (size_t)(T * smax * E));
    for (int64_t t = 0; t < T; t++)
        memcpy(snaps_out + t * smax * E, lx->snap_in + t * lx->n_in * E, sizeof(float) * (size_t)(lx->n_in * E));
    ms_experts ex = ms_expert_table_iface(lx->tab);
    int rc = 0;
    *n_after = -1;
    for (int64_t t0 = 0; t0 < T && rc == 0; t0 += chunk) {
        int64_t n = T - t0 < chunk ? T - t0 : chunk;
        int n_snap = lx->n_in; /* every token of the chunk has the fixture's n_in snapshots */
        rc = ms_layer_forward(c, layer, &lx->w, &st, &ex, h_out + t0 * E, snaps_out + t0 * smax * E, smax, &n_snap,
                              n, ids ? ids + t0 * c->top_k : NULL, pool);
        if (*n_after >= 0 && n_snap != *n_after) rc = ms_err_set("snapshot count changed between chunks");
        *n_after = n_snap;
    }
    ms_kda_state_free(&st.kda);
    ms_mla_cache_free(&st.mla);
    return rc;
}

/* Compare a run's prefix sum and snapshots with the fixture; returns elements over tolerance. */
static int64_t compare_run(const layer_fx *lx, const ms_k3_cfg *c, const char *tag, int smax, const float *h,
                           const float *snaps, ms_fix_stat *st)
{
    int64_t E = c->hidden, T = lx->T;
    char what[96];
    snprintf(what, sizeof what, "%s.out", tag);
    int64_t bad = ms_fix_cmp(st, what, h, lx->want, T * E, tol);
    /* Pack the first n_out snapshots of each token as [T][n_out][E]. */
    float *packed = malloc(sizeof(float) * (size_t)(T * lx->n_out * E));
    for (int64_t t = 0; t < T; t++)
        memcpy(packed + t * lx->n_out * E, snaps + t * smax * E, sizeof(float) * (size_t)(lx->n_out * E));
    snprintf(what, sizeof what, "%s.block_residual_out", tag);
    bad += ms_fix_cmp(st, what, packed, lx->snap_out, T * lx->n_out * E, tol);
    free(packed);
    /* Slots past the valid snapshots are left alone (they were zero on entry). */
    int untouched = 1;
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = lx->n_out * E; i < smax * E; i++)
            if (snaps[t * smax * E + i] != 0.0f) untouched = 0;
    T_CHECK(untouched, "%s: the layer wrote snapshot slots past %d", tag, lx->n_out);
    return bad;
}

static void fx_layer(const char *name)
{
    layer_fx lx;
    memset(&lx, 0, sizeof lx);
    lx.f = ms_fix_open(name);
    if (!lx.f) return;
    ms_fix *f = lx.f;
    ms_k3_cfg c = cfg; /* shallow copy */
    int layer = (int)ms_fix_num(f, "layer_idx");
    int is_mla = (int)ms_fix_num(f, "is_mla");
    int B = (int)ms_fix_num(f, "attn_res_block_size");
    ms_fix_override_float(f, "rms_eps", &c.eps);
    T_CHECK(B == c.attn_res_block && (int)ms_fix_num(f, "hidden") == c.hidden && c.eps == cfg.eps,
            "%s: block size / hidden / eps disagree with the MANIFEST config", name);
    if (layer < 1 || layer >= c.n_layers || c.is_mla[layer] != is_mla || ms_k3_cfg_is_dense(&c, layer)) {
        T_CHECK(0, "%s: layer_idx %d (is_mla %d) does not fit the MANIFEST layer map", name, layer, is_mla);
        ms_fix_free(f);
        return;
    }
    int64_t E = c.hidden;
    const ms_fix_tensor *tin = ms_fix_tensor_get(f, "block_residual_in");
    const ms_fix_tensor *tout = ms_fix_tensor_get(f, "block_residual_out");
    const ms_fix_tensor *th = ms_fix_tensor_get(f, "in");
    T_CHECK(tin && tout && th && tin->ndim == 3 && tout->ndim == 3 && th->ndim == 3 && tin->shape[2] == E &&
                tout->shape[0] == th->shape[1] && tin->shape[0] == th->shape[1],
            "%s: unexpected block_residual_in/out or in shapes", name);
    if (!(tin && tout && th && tin->ndim == 3 && tout->ndim == 3 && th->ndim == 3)) {
        ms_fix_free(f);
        return;
    }
    lx.T = (int)th->shape[1];
    lx.n_in = (int)tin->shape[1];
    lx.n_out = (int)tout->shape[1];
    int boundary = ms_k3_cfg_is_boundary(&c, layer);
    T_CHECK(lx.n_out == lx.n_in + boundary, "%s: %d snapshots in, %d out, boundary %d", name, lx.n_in, lx.n_out,
            boundary);
    lx.in = ms_fix_f32(f, "in", lx.T * E);
    lx.want = ms_fix_f32(f, "out", lx.T * E);
    lx.snap_in = tin->data;
    lx.snap_out = tout->data;
    build_weights(&lx, &c, is_mla);
    lx.tab = ms_t_situ_table(c.n_layers, c.n_experts, c.latent, c.situ_b1, c.situ_b2, NULL);
    set_experts(&lx, &c, layer);

    int smax = ms_layer_snaps_after(&c, c.n_layers - 1);
    if (smax < lx.n_out + 1) smax = lx.n_out + 1;
    float *h = ms_fix_scratch(f, lx.T * E);
    float *snaps = ms_fix_scratch(f, (int64_t)lx.T * smax * E);
    int32_t *ids = calloc((size_t)lx.T * (size_t)c.top_k, sizeof(int32_t));

    /* At the fixture's own layer index with the fixture's snapshots (spec §3.11). */
    printf("  %s: layer %d (%s, boundary %d), snapshots in %d / out %d\n", name, layer, is_mla ? "MLA" : "KDA",
           boundary, lx.n_in, lx.n_out);
    ms_fix_stat st = {0};
    int n_after;
    int rc = run_layer(&lx, &c, layer, smax, lx.T, NULL, h, snaps, ids, &n_after);
    T_CHECK(rc == 0, "%s: ms_layer_forward: %s", name, ms_err_msg());
    T_CHECK(n_after == lx.n_out, "%s: *n_snap is %d after the layer, want %d", name, n_after, lx.n_out);
    compare_run(&lx, &c, name, smax, h, snaps, &st);
    ms_fix_report(name, &st);
    int ids_ok = 1;
    for (int i = 0; i < lx.T * c.top_k; i++)
        if (ids[i] < 0 || ids[i] >= c.n_experts) ids_ok = 0;
    T_CHECK(ids_ok, "%s: ids_out out of range", name);

    /* Invariants: token-by-token calls with carried state, a 2-thread pool and the scalar
     * kernels all give the same bits as one call. */
    float *h1 = ms_fix_scratch(f, lx.T * E), *s1 = ms_fix_scratch(f, (int64_t)lx.T * smax * E);
    float *h2 = ms_fix_scratch(f, lx.T * E), *s2 = ms_fix_scratch(f, (int64_t)lx.T * smax * E);
    rc = run_layer(&lx, &c, layer, smax, 1, NULL, h1, s1, NULL, &n_after);
    int64_t d1 = ms_fix_bitdiff(h1, h, lx.T * E) + ms_fix_bitdiff(s1, snaps, (int64_t)lx.T * smax * E);
    double m1 = ms_fix_maxdiff(h1, h, lx.T * E);
    printf("  %s: %d x 1-token vs 1 x %d-token: max |diff| %.3e, %lld elements differ in bits\n", name, lx.T, lx.T,
           m1, (long long)d1);
    T_CHECK(rc == 0 && n_after == lx.n_out && m1 <= tol.abs, "%s: token-by-token differs from one call by %.3e",
            name, m1);
    T_CHECK(d1 == 0, "%s: token-by-token not bit-identical to one call (%lld elements)", name, (long long)d1);
    ms_pool *pool = ms_pool_new(2);
    T_CHECK(pool != NULL, "ms_pool_new(2): %s", ms_err_msg());
    int simd = ms_cpu_simd_enabled();
    ms_cpu_set_simd(0);
    rc = run_layer(&lx, &c, layer, smax, lx.T, pool, h2, s2, NULL, &n_after);
    ms_cpu_set_simd(simd);
    int64_t d2 = ms_fix_bitdiff(h2, h, lx.T * E) + ms_fix_bitdiff(s2, snaps, (int64_t)lx.T * smax * E);
    printf("  %s: 2 threads + scalar kernels (simd available %d) vs default: %lld elements differ in bits\n", name,
           ms_cpu_simd_available(), (long long)d2);
    T_CHECK(rc == 0 && d2 == 0, "%s: threads/scalar run differs in %lld elements", name, (long long)d2);
    ms_pool_free(pool);
    free(ids);
    ms_expert_table_free(lx.tab);
    ms_fix_free(f);
}

/* Self-contained: the snapshot count rule of the header (boundaries 0, B, 2B, ...). */
static void self_checks(void)
{
    ms_k3_cfg c;
    memset(&c, 0, sizeof c);
    c.attn_res_block = 3;
    T_CHECK(ms_layer_snaps_after(&c, -1) == 0, "no snapshots before layer 0");
    T_CHECK(ms_layer_snaps_after(&c, 0) == 1 && ms_layer_snaps_after(&c, 2) == 1 && ms_layer_snaps_after(&c, 3) == 2 &&
                ms_layer_snaps_after(&c, 12) == 5,
            "ms_layer_snaps_after does not count boundaries 0, B, 2B, ...");
    c.attn_res_block = 12;
    T_CHECK(ms_layer_snaps_after(&c, 92) == 8, "real K3: %d snapshots after layer 92, want 8",
            ms_layer_snaps_after(&c, 92));
}

int main(void)
{
    ms_kern_init();
    self_checks();
    if (ms_fix_manifest(&cfg, &tol) == 0) {
        printf("tolerance: abs %g rel %g\n", tol.abs, tol.rel);
        fx_layer("layer_kda");
        fx_layer("layer_mla");
    }
    ms_k3_cfg_free(&cfg);
    return ms_t_done();
}
