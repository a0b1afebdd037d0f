/* test_moe: the LatentMoE fixture with fp32 experts, row-grouping invariants and expert failures. */
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
#include "ms_moe.h"
#include "ms_pool.h"
#include "ms_test.h"

static ms_fix_tol tol;
static ms_k3_cfg cfg;

/* An ms_experts wrapper that counts calls and can be told to fail. */
typedef struct {
    ms_experts inner;
    int calls;
    int64_t last_rows;
    int last_k, last_layer;
    int fail;
} spy_ctx;

static int spy_compute(void *ctx, int layer, int64_t n_rows, const float *z, int k, const int32_t *ids, float *out)
{
    spy_ctx *s = ctx;
    s->calls++;
    s->last_rows = n_rows;
    s->last_k = k;
    s->last_layer = layer;
    if (s->fail) return ms_err_set("test: expert %d of layer %d unavailable", ids[0], layer);
    return s->inner.compute(s->inner.ctx, layer, n_rows, z, k, ids, out);
}

/* Trunk weights of the moe fixture (prefix "" ) or of a layer fixture (prefix "mlp_"). */
static ms_moe_w moe_weights(ms_fix *f, const char *pre, const ms_k3_cfg *c)
{
    char key[128];
    int64_t E = c->hidden, L = c->latent, NI = (int64_t)c->n_shared * c->moe_inter;
    ms_moe_w w;
    memset(&w, 0, sizeof w);
#define K(s) (snprintf(key, sizeof key, "%s%s", pre, s), key)
    w.gate = ms_fix_mat(f, K("gate_weight"), c->n_experts, E);
    w.bias = ms_fix_f32(f, K("e_score_correction_bias"), c->n_experts);
    w.down = ms_fix_mat(f, K("down_weight"), L, E);
    w.up = ms_fix_mat(f, K("up_weight"), E, L);
    w.norm = ms_fix_f32(f, K("norm_weight"), L);
    w.sg = ms_fix_mat(f, K("shared_w1_weight"), NI, E);
    w.su = ms_fix_mat(f, K("shared_w3_weight"), NI, E);
    w.sd = ms_fix_mat(f, K("shared_w2_weight"), E, NI);
#undef K
    return w;
}

static void set_experts(ms_fix *f, const char *pre, const ms_k3_cfg *c, ms_expert_table *t, int layer)
{
    char key[128];
    for (int e = 0; e < c->n_experts; e++) {
        ms_expert_w ew;
        snprintf(key, sizeof key, "%sexperts_%d_w1_weight", pre, e);
        ew.w[MS_XROLE_GATE] = ms_fix_mat(f, key, c->moe_inter, c->latent);
        snprintf(key, sizeof key, "%sexperts_%d_w2_weight", pre, e);
        ew.w[MS_XROLE_DOWN] = ms_fix_mat(f, key, c->latent, c->moe_inter);
        snprintf(key, sizeof key, "%sexperts_%d_w3_weight", pre, e);
        ew.w[MS_XROLE_UP] = ms_fix_mat(f, key, c->moe_inter, c->latent);
        ms_expert_table_set(t, layer, e, &ew);
    }
}

/* The in-process table on synthetic weights: grouping rows never changes a bit, bad ids fail. */
static void self_checks(void)
{
    enum { L = 8, I = 6, NE = 3, R = 4, KK = 2 };
    static float wbuf[NE][3][L * I];
    uint32_t s = 99;
    for (int e = 0; e < NE; e++)
        for (int m = 0; m < 3; m++)
            for (int i = 0; i < L * I; i++) {
                s = s * 1664525u + 1013904223u;
                wbuf[e][m][i] = (float)(s >> 8) / 16777216.0f - 0.5f;
            }
    ms_expert_table *t = ms_t_situ_table(2, NE, L, 4.0f, 25.0f, NULL);
    for (int e = 0; e < NE; e++) {
        ms_expert_w w = ms_t_expert_w((ms_mat){MS_WT_F32, I, L, wbuf[e][0], NULL}, (ms_mat){MS_WT_F32, L, I, wbuf[e][1], NULL},
                                      (ms_mat){MS_WT_F32, I, L, wbuf[e][2], NULL});
        ms_expert_table_set(t, 1, e, &w);
    }
    ms_experts ex = ms_expert_table_iface(t);
    float z[R * L], out[R * KK * L], one[KK * L];
    for (int i = 0; i < R * L; i++) z[i] = (float)((i * 37) % 17) * 0.25f - 2.0f;
    int32_t ids[R * KK] = {0, 2, 2, 1, 1, 0, 2, 0};
    int rc = ex.compute(ex.ctx, 1, R, z, KK, ids, out);
    T_CHECK(rc == 0, "expert table compute: %s", ms_err_msg());
    int64_t d = 0;
    for (int r = 0; r < R; r++) {
        rc = ex.compute(ex.ctx, 1, 1, z + r * L, KK, ids + r * KK, one);
        d += ms_fix_bitdiff(one, out + r * KK * L, KK * L);
    }
    T_CHECK(d == 0, "expert table: one-row calls differ from one 4-row call in %lld elements", (long long)d);
    /* Expert e on row r is W2 SiTU(W1 z, W3 z): check one element by direct evaluation. */
    double acc = 0.0;
    for (int i = 0; i < I; i++) {
        double g = 0.0, u = 0.0;
        for (int l = 0; l < L; l++) {
            g += (double)wbuf[2][0][i * L + l] * z[L + l];
            u += (double)wbuf[2][2][i * L + l] * z[L + l];
        }
        double a = 4.0 * tanh(g / 4.0) / (1.0 + exp(-g)) * 25.0 * tanh(u / 25.0);
        acc += (double)wbuf[2][1][3 * I + i] * a;
    }
    T_CHECK(ms_t_close(out[(1 * KK + 0) * L + 3], (float)acc, 1e-5, 1e-4), "expert 2 row 1 elem 3: %g want %g",
            (double)out[(1 * KK + 0) * L + 3], acc);
    int32_t bad[2] = {0, NE};
    ms_err_clear();
    T_CHECK(ex.compute(ex.ctx, 1, 1, z, KK, bad, out) == -1 && ms_err_msg()[0], "expert id out of range accepted");
    int32_t ok[2] = {0, 1};
    ms_err_clear();
    T_CHECK(ex.compute(ex.ctx, 0, 1, z, KK, ok, out) == -1 && ms_err_msg()[0], "layer without weights accepted");
    ms_err_clear();
    T_CHECK(ex.compute(ex.ctx, 5, 1, z, KK, ok, out) == -1 && ms_err_msg()[0], "layer out of range accepted");
    ms_expert_table_free(t);
}

static void fx_moe(void)
{
    ms_fix *f = ms_fix_open("moe");
    if (!f) return;
    ms_fix_stat st = {0};
    ms_k3_cfg c = cfg; /* shallow copy; the fixture's scalars override (e.g. moe_inter 48) */
    ms_fix_override_int(f, "hidden", &c.hidden);
    ms_fix_override_int(f, "latent", &c.latent);
    ms_fix_override_int(f, "moe_inter", &c.moe_inter);
    ms_fix_override_int(f, "n_experts", &c.n_experts);
    ms_fix_override_int(f, "top_k", &c.top_k);
    ms_fix_override_int(f, "n_shared", &c.n_shared);
    ms_fix_override_float(f, "routed_scale", &c.routed_scale);
    ms_fix_override_int(f, "renorm", &c.renorm);
    ms_fix_override_int(f, "latent_norm", &c.latent_norm);
    ms_fix_override_float(f, "rms_eps", &c.eps);
    ms_fix_override_float(f, "situ_b1", &c.situ_b1);
    ms_fix_override_float(f, "situ_b2", &c.situ_b2);
    printf("  moe cfg: E %d L %d I %d Ne %d k %d Ns %d scale %g renorm %d latent_norm %d\n", c.hidden, c.latent,
           c.moe_inter, c.n_experts, c.top_k, c.n_shared, (double)c.routed_scale, c.renorm, c.latent_norm);
    const int T = 3, layer = 0;
    int64_t E = c.hidden, k = c.top_k;
    ms_moe_w w = moe_weights(f, "", &c);
    ms_expert_table *tab = ms_t_situ_table(1, c.n_experts, c.latent, c.situ_b1, c.situ_b2, NULL);
    set_experts(f, "", &c, tab, layer);
    spy_ctx spy = {ms_expert_table_iface(tab), 0, 0, 0, -1, 0};
    ms_experts ex = {spy_compute, &spy};
    const float *in = ms_fix_f32(f, "in", T * E);    /* [1][T][E] */
    const float *want = ms_fix_f32(f, "out", T * E); /* [1][T][E] */
    float *y = ms_fix_scratch(f, T * E);
    int32_t ids[3 * MS_K3_CFG_MAX_TOPK];
    int rc = ms_moe_forward(&c, layer, &w, &ex, in, T, y, ids, NULL);
    T_CHECK(rc == 0, "ms_moe_forward: %s", ms_err_msg());
    T_CHECK(spy.calls == 1 && spy.last_rows == T && spy.last_k == k && spy.last_layer == layer,
            "experts called %d times (rows %lld, k %d, layer %d); want once for all %d rows", spy.calls,
            (long long)spy.last_rows, spy.last_k, spy.last_layer, T);
    ms_fix_cmp(&st, "moe.out", y, want, T * E, tol);
    ms_fix_report("moe", &st);
    int ids_ok = 1;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) {
            if (ids[t * k + j] < 0 || ids[t * k + j] >= c.n_experts) ids_ok = 0;
            for (int i = 0; i < j; i++)
                if (ids[t * k + i] == ids[t * k + j]) ids_ok = 0;
        }
    T_CHECK(ids_ok, "moe: ids_out has an out-of-range or repeated expert");

    /* Invariant: the 3 rows in one call == 3 separate one-row calls, bit for bit. */
    float *y1 = ms_fix_scratch(f, T * E);
    int32_t ids1[3 * MS_K3_CFG_MAX_TOPK];
    for (int t = 0; t < T; t++) {
        rc = ms_moe_forward(&c, layer, &w, &ex, in + t * E, 1, y1 + t * E, ids1 + t * k, NULL);
        T_CHECK(rc == 0, "ms_moe_forward row %d: %s", t, ms_err_msg());
    }
    int64_t d = ms_fix_bitdiff(y1, y, T * E);
    int ids_same = memcmp(ids1, ids, sizeof(int32_t) * (size_t)(T * k)) == 0;
    printf("  moe: 3 rows in one call vs 3 one-row calls: %lld elements differ in bits, ids %s\n", (long long)d,
           ids_same ? "equal" : "DIFFER");
    T_CHECK(d == 0 && ids_same, "moe: one call of 3 rows differs from 3 one-row calls");

    /* Invariant: a 2-thread pool (trunk and experts) with scalar kernels gives the same bits. */
    ms_pool *pool = ms_pool_new(2);
    T_CHECK(pool != NULL, "ms_pool_new(2): %s", ms_err_msg());
    ms_expert_table *tab2 = ms_t_situ_table(1, c.n_experts, c.latent, c.situ_b1, c.situ_b2, pool);
    set_experts(f, "", &c, tab2, layer);
    ms_experts ex2 = ms_expert_table_iface(tab2);
    int simd = ms_cpu_simd_enabled();
    ms_cpu_set_simd(0);
    rc = ms_moe_forward(&c, layer, &w, &ex2, in, T, y1, NULL, pool);
    ms_cpu_set_simd(simd);
    d = ms_fix_bitdiff(y1, y, T * E);
    printf("  moe: 2 threads + scalar kernels vs default: %lld elements differ in bits\n", (long long)d);
    T_CHECK(rc == 0 && d == 0, "moe: threads/scalar run differs (rc %d, %lld elements)", rc, (long long)d);

    /* A failing expert backend is reported, never shown as success (trap 34). */
    spy.fail = 1;
    ms_err_clear();
    rc = ms_moe_forward(&c, layer, &w, &ex, in, T, y1, NULL, NULL);
    T_CHECK(rc == -1, "ms_moe_forward returned %d although the experts failed", rc);
    T_CHECK(strstr(ms_err_msg(), "unavailable") != NULL, "error message lost the expert failure: \"%s\"",
            ms_err_msg());
    /* An expert with no weights is refused by the table. */
    ms_expert_table *empty = ms_t_situ_table(1, c.n_experts, c.latent, c.situ_b1, c.situ_b2, NULL);
    ms_experts ex3 = ms_expert_table_iface(empty);
    ms_err_clear();
    rc = ms_moe_forward(&c, layer, &w, &ex3, in, T, y1, NULL, NULL);
    T_CHECK(rc == -1 && ms_err_msg()[0] != 0, "missing expert weights not reported (rc %d, \"%s\")", rc,
            ms_err_msg());
    ms_expert_table_free(empty);
    ms_expert_table_free(tab2);
    ms_pool_free(pool);
    ms_expert_table_free(tab);
    ms_expert_table_free(NULL);
    ms_fix_free(f);
}

int main(void)
{
    ms_kern_init();
    self_checks();
    if (ms_fix_manifest(&cfg, &tol) == 0) {
        printf("tolerance: abs %g rel %g\n", tol.abs, tol.rel);
        fx_moe();
    }
    ms_k3_cfg_free(&cfg);
    return ms_t_done();
}
