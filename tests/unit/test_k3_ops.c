/* test_k3_ops: K3's short convolution, AttnRes and sigmoid router against the shared op fixtures. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_k3_cfg.h"
#include "ms_k3_ops.h"
#include "ms_err.h"
#include "ms_fix.h"
#include "ms_kern.h"
#include "ms_ops.h"
#include "ms_router.h"
#include "ms_test.h"

static ms_fix_tol tol;
static ms_k3_cfg cfg;

/* ---- self-contained invariants (run without the shared folder) ---- */

static void self_checks(void)
{
    /* Short conv tap order (trap 12): tap K-1 is the current input, tap 0 the oldest. */
    float wc[2][4] = {{0, 0, 0, 1}, {1, 0, 0, 0}}; /* [C=2][K=4] */
    float hist[2][3] = {{0}};                      /* [C][K-1] */
    int ok_cur = 1, ok_old = 1;
    for (int t = 0; t < 6; t++) {
        float in[2] = {(float)(t + 1), (float)(10 * (t + 1))}, out[2];
        ms_k3_shortconv_step(&wc[0][0], 2, 4, &hist[0][0], in, out);
        float s0 = in[0] / (1.0f + expf(-in[0]));
        float old = t >= 3 ? (float)(10 * (t - 2)) : 0.0f;
        float s1 = old / (1.0f + expf(-old));
        if (!ms_t_close(out[0], s0, 1e-6, 1e-6)) ok_cur = 0;
        if (!ms_t_close(out[1], s1, 1e-6, 1e-6)) ok_old = 0;
    }
    T_CHECK(ok_cur, "shortconv: tap K-1 does not multiply the current input");
    T_CHECK(ok_old, "shortconv: tap 0 does not multiply the input K-1 steps back");
    T_CHECK(hist[0][0] == 4.0f && hist[0][1] == 5.0f && hist[0][2] == 6.0f,
            "shortconv history is not the last K-1 raw inputs oldest first: %g %g %g", (double)hist[0][0],
            (double)hist[0][1], (double)hist[0][2]);

    /* AttnRes over identical sources returns that source (weights sum to 1, values raw). */
    float src[16], fold[16], out[16];
    for (int i = 0; i < 16; i++) {
        src[i] = (float)(i - 7) * 0.3f;
        fold[i] = (float)(i % 3) - 1.0f;
    }
    const float *srcs[3] = {src, src, src};
    ms_k3_attnres(srcs, 3, 16, fold, 1e-5f, out);
    T_CHECK(ms_fix_maxdiff(out, src, 16) < 1e-6, "attnres of identical sources differs from the source by %g",
            ms_fix_maxdiff(out, src, 16));
}

/* ---- fixtures ---- */

static void fx_shortconv(void)
{
    ms_fix *f = ms_fix_open("shortconv");
    if (!f) return;
    ms_fix_stat st = {0};
    int K = (int)ms_fix_num(f, "kernel"), C = (int)ms_fix_num(f, "channels");
    T_CHECK(K == 4 && C == 64, "shortconv kernel %d channels %d", K, C);
    if (K != 4 || C != 64) {
        ms_fix_free(f);
        return;
    }
    const float *w = ms_fix_f32(f, "weight", C * K);         /* [C][1][K] */
    const float *in = ms_fix_f32(f, "in", 5 * C);             /* [1][5][C] */
    const float *want = ms_fix_f32(f, "out", 5 * C);          /* [1][5][C] */
    const float *state = ms_fix_f32(f, "state_after", C * 3); /* [1][C][K-1] */
    const float *in_next = ms_fix_f32(f, "in_next", C);       /* [1][1][C] */
    const float *out_next = ms_fix_f32(f, "out_next", C);     /* [1][1][C] */
    float *hist = ms_fix_scratch(f, C * (K - 1));             /* [C][K-1], zero */
    float *got = ms_fix_scratch(f, 5 * C);
    for (int t = 0; t < 5; t++) ms_k3_shortconv_step(w, C, K, hist, in + t * C, got + t * C);
    ms_fix_cmp(&st, "shortconv.out", got, want, 5 * C, tol);
    ms_fix_cmp(&st, "shortconv.state_after", hist, state, C * (K - 1), tol);
    /* One decode step from the fixture's own state. */
    float *h2 = ms_fix_scratch(f, C * (K - 1));
    float *y2 = ms_fix_scratch(f, C);
    memcpy(h2, state, sizeof(float) * (size_t)(C * (K - 1)));
    ms_k3_shortconv_step(w, C, K, h2, in_next, y2);
    ms_fix_cmp(&st, "shortconv.out_next", y2, out_next, C, tol);
    ms_fix_report("shortconv", &st);
    ms_fix_free(f);
}

/* Index of id in ids[k], or -1. */
static int find_id(const int32_t *ids, int k, int id)
{
    for (int j = 0; j < k; j++)
        if (ids[j] == id) return j;
    return -1;
}

static void fx_router(void)
{
    ms_fix *f = ms_fix_open("router");
    if (!f) return;
    ms_fix_stat st = {0};
    int k = (int)ms_fix_num(f, "top_k"), Ne = (int)ms_fix_num(f, "n_experts");
    T_CHECK(k == cfg.top_k && Ne == cfg.n_experts, "router top_k %d n_experts %d differ from MANIFEST %d %d", k, Ne,
            cfg.top_k, cfg.n_experts);
    if (k != 2 || Ne != 8) {
        ms_fix_free(f);
        return;
    }
    const int T = 6, E = 128;
    ms_mat G = ms_fix_mat(f, "gate_weight", Ne, E);
    const float *bias = ms_fix_f32(f, "bias", Ne);
    const float *in = ms_fix_f32(f, "in", T * E);        /* [T][E] */
    const float *want_id = ms_fix_f32(f, "topk_idx", T * k); /* [T][k], ids as floats */
    const float *want_w = ms_fix_f32(f, "topk_weight", T * k);
    float *logits = ms_fix_scratch(f, T * Ne); /* [T][Ne] */
    float *got_w = ms_fix_scratch(f, T * k);   /* [T][k] matched to the fixture's order */
    float *zero = ms_fix_scratch(f, Ne);
    ms_router rt = {MS_ROUTE_SIGMOID_BIAS, Ne, k, 0, 0, cfg.renorm, cfg.routed_scale};
    ms_matmul(&G, in, T, logits, NULL);
    int sets_ok = 1, nchanged = 0;
    for (int t = 0; t < T; t++) {
        int32_t ids[8], ids0[8];
        float w[8], w0[8];
        ms_router_route(&rt, logits + t * Ne, bias, ids, w);
        /* The same row without the bias: counts the rows where the bias changed the set. */
        ms_router_route(&rt, logits + t * Ne, zero, ids0, w0);
        int distinct = 1, differs = 0;
        for (int j = 0; j < k; j++) {
            for (int i = 0; i < j; i++)
                if (ids[i] == ids[j]) distinct = 0;
            if (find_id(ids, k, ids0[j]) < 0) differs = 1;
        }
        T_CHECK(distinct, "router row %d: repeated expert id", t);
        nchanged += differs;
        for (int j = 0; j < k; j++) {
            int want = (int)lrintf(want_id[t * k + j]);
            int pos = find_id(ids, k, want);
            if (pos < 0) {
                sets_ok = 0;
                fprintf(stderr, "  router row %d: expert %d expected but not selected (got", t, want);
                for (int i = 0; i < k; i++) fprintf(stderr, " %d", ids[i]);
                fprintf(stderr, ")\n");
                got_w[t * k + j] = NAN;
            } else {
                got_w[t * k + j] = w[pos];
            }
        }
    }
    T_CHECK(sets_ok, "router: selected expert sets differ from topk_idx");
    int want_changed = (int)ms_fix_num(f, "rows_where_bias_changed_selection");
    T_CHECK(nchanged == want_changed, "router: bias changed the selection in %d rows, fixture says %d", nchanged,
            want_changed);
    printf("  router: index sets %s, bias changed %d rows (fixture %d)\n", sets_ok ? "equal" : "DIFFER", nchanged,
           want_changed);
    ms_fix_cmp(&st, "router.topk_weight (by id)", got_w, want_w, T * k, tol);
    ms_fix_report("router", &st);
    ms_fix_free(f);
}

static void fx_attnres(void)
{
    ms_fix *f = ms_fix_open("attnres");
    if (!f) return;
    ms_fix_stat st = {0};
    const int T = 4, NS = 8, E = 128;
    float eps = (float)ms_fix_num(f, "eps");
    int n_sources = (int)ms_fix_num(f, "n_sources");
    T_CHECK(n_sources == NS + 1, "attnres n_sources %d, want %d", n_sources, NS + 1);
    const float *prefix = ms_fix_f32(f, "prefix_sum", T * E);      /* [T][E] */
    const float *blocks = ms_fix_f32(f, "block_residual", T * NS * E); /* [T][NS][E] */
    const float *proj = ms_fix_f32(f, "proj_weight", E);
    const float *norm = ms_fix_f32(f, "norm_weight", E);
    const float *hint = ms_fix_f32(f, "fold_hint", E);
    const float *want = ms_fix_f32(f, "out", T * E);
    float *fold = ms_fix_scratch(f, E);
    for (int i = 0; i < E; i++) fold[i] = norm[i] * proj[i];
    ms_fix_cmp(&st, "attnres.fold_hint", fold, hint, E, tol);
    float *got = ms_fix_scratch(f, T * E);
    for (int t = 0; t < T; t++) {
        const float *srcs[NS + 1];
        for (int s = 0; s < NS; s++) srcs[s] = blocks + ((int64_t)t * NS + s) * E;
        srcs[NS] = prefix + (int64_t)t * E;
        ms_k3_attnres(srcs, NS + 1, E, fold, eps, got + (int64_t)t * E);
    }
    ms_fix_cmp(&st, "attnres.out", got, want, T * E, tol);
    ms_fix_report("attnres", &st);
    ms_fix_free(f);
}

int main(void)
{
    ms_kern_init();
    self_checks();
    if (ms_fix_manifest(&cfg, &tol) == 0) {
        printf("tolerance: abs %g rel %g\n", tol.abs, tol.rel);
        fx_shortconv();
        fx_router();
        fx_attnres();
    }
    ms_k3_cfg_free(&cfg);
    return ms_t_done();
}
