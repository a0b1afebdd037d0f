/* test_kda: KDA decay, recurrence and whole-module fixtures, plus token-split invariants. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_k3_cfg.h"
#include "ms_cpu.h"
#include "ms_err.h"
#include "ms_fix.h"
#include "ms_kda.h"
#include "ms_kern.h"
#include "ms_pool.h"
#include "ms_test.h"

static ms_fix_tol tol;
static ms_k3_cfg cfg;

/* ---- self-contained invariants ---- */

static void self_checks(void)
{
    /* Decay: A_log indexes heads, dt_bias channels, g in (lb, 0], alpha = exp(g). */
    float z[8] = {0, 1, -1, 2, 0, 1, -1, 2}, A_log[2] = {0.0f, logf(2.0f)}, dt[8] = {0, 0, 0, 0, 1, 1, 1, 1};
    float g[8], a[8];
    ms_kda_decay(z, A_log, dt, 2, 4, -5.0f, g, a);
    int ok = 1;
    for (int p = 0; p < 8; p++) {
        double e = p < 4 ? 1.0 : 2.0;
        double want = -5.0 / (1.0 + exp(-e * (z[p] + dt[p])));
        if (!ms_t_close(g[p], (float)want, 1e-6, 1e-5) || !ms_t_close(a[p], (float)exp(want), 1e-6, 1e-5)) ok = 0;
    }
    T_CHECK(ok, "ms_kda_decay disagrees with lb*sigmoid(exp(A_log[h])*(z+dt_bias))");
    float aonly[8];
    ms_kda_decay(z, A_log, dt, 2, 4, -5.0f, NULL, aonly);
    T_CHECK(ms_fix_bitdiff(aonly, a, 8) == 0, "ms_kda_decay with g_out NULL gives different alpha");

    /* Recurrence, one head D=2, alpha=1, beta=1, k = e0: S row 0 becomes v; o = q0 * v. */
    float S[4] = {0}, q[2] = {0.5f, 0.25f}, k[2] = {1, 0}, v[2] = {3, -2}, al[2] = {1, 1}, be[1] = {1}, o[2];
    ms_kda_recur_step(S, 1, 2, q, k, v, al, be, o);
    T_CHECK(S[0] == 3 && S[1] == -2 && S[2] == 0 && S[3] == 0, "delta write: S = %g %g %g %g", (double)S[0],
            (double)S[1], (double)S[2], (double)S[3]);
    T_CHECK(o[0] == 1.5f && o[1] == -1.0f, "output read from updated state: o = %g %g", (double)o[0], (double)o[1]);
    /* Decay scales rows (key channel): alpha = (0.5, 1), k = e1, v = 0 leaves row 0 halved. */
    float al2[2] = {0.5f, 1.0f}, k2[2] = {0, 1}, v2[2] = {0, 0};
    ms_kda_recur_step(S, 1, 2, q, k2, v2, al2, be, o);
    T_CHECK(S[0] == 1.5f && S[1] == -1.0f, "decay does not scale the key-channel row: %g %g", (double)S[0],
            (double)S[1]);
}

/* ---- fixtures ---- */

static void fx_decay(void)
{
    ms_fix *f = ms_fix_open("kda_decay");
    if (!f) return;
    ms_fix_stat st = {0};
    const int T = 4, H = 4, D = 16, P = H * D;
    float lb = (float)ms_fix_num(f, "lower_bound");
    T_CHECK(lb == cfg.gate_lb, "kda_decay lower_bound %g, MANIFEST %g", (double)lb, (double)cfg.gate_lb);
    const float *z = ms_fix_f32(f, "z", T * P); /* [1][T][P], before dt_bias */
    const float *A_log = ms_fix_f32(f, "A_log", H);
    const float *dt = ms_fix_f32(f, "dt_bias", P);
    const float *want_g = ms_fix_f32(f, "g", T * P); /* [1][T][H][D] */
    const float *want_a = ms_fix_f32(f, "alpha", T * P);
    float *g = ms_fix_scratch(f, T * P), *a = ms_fix_scratch(f, T * P);
    for (int t = 0; t < T; t++) ms_kda_decay(z + t * P, A_log, dt, H, D, lb, g + t * P, a + t * P);
    ms_fix_cmp(&st, "kda_decay.g", g, want_g, T * P, tol);
    ms_fix_cmp(&st, "kda_decay.alpha", a, want_a, T * P, tol);
    /* "Saturated" means the sigmoid underflowed so g is exactly -0 (spec §3.5 step 4). alpha
     * also rounds to exactly 1.0f whenever |g| < 2^-25, which is a different (benign) thing. */
    int n_sat = 0, n_one = 0, in_range = 1;
    double amin = 2.0, amax = -1.0;
    for (int i = 0; i < T * P; i++) {
        if (g[i] == 0.0f) n_sat++;
        if (a[i] == 1.0f) n_one++;
        /* fp32 sigmoid also saturates at 1, so g may equal lb exactly: [lb, 0]. */
        if (!(g[i] <= 0.0f && g[i] >= lb && a[i] <= 1.0f && a[i] > 0.0f)) in_range = 0;
        if (a[i] < amin) amin = a[i];
        if (a[i] > amax) amax = a[i];
    }
    int want_sat = (int)ms_fix_num(f, "n_alpha_saturated_at_1");
    int want_total = (int)ms_fix_num(f, "n_alpha_total");
    T_CHECK(want_total == T * P, "n_alpha_total %d, expected %d", want_total, T * P);
    T_CHECK(n_sat == want_sat, "kda_decay: %d channels with g == 0, fixture n_alpha_saturated_at_1 = %d", n_sat,
            want_sat);
    T_CHECK(in_range, "kda_decay: some g outside [lb, 0] or alpha outside (0, 1]");
    T_CHECK(ms_t_close((float)amin, (float)ms_fix_num(f, "alpha_min"), tol.abs, tol.rel) &&
                ms_t_close((float)amax, (float)ms_fix_num(f, "alpha_max"), tol.abs, tol.rel),
            "kda_decay alpha range [%g, %g], fixture [%g, %g]", amin, amax, ms_fix_num(f, "alpha_min"),
            ms_fix_num(f, "alpha_max"));
    printf("  kda_decay: g==0 in %d channels (fixture %d); alpha rounds to 1.0f in %d\n", n_sat, want_sat, n_one);
    ms_fix_report("kda_decay", &st);
    ms_fix_free(f);
}

static void fx_recur(const char *name, int T)
{
    ms_fix *f = ms_fix_open(name);
    if (!f) return;
    ms_fix_stat st = {0};
    const int H = 4, D = 16, P = H * D;
    T_CHECK((int)ms_fix_num(f, "T") == T && (int)ms_fix_num(f, "H") == H && (int)ms_fix_num(f, "d_k") == D &&
                (int)ms_fix_num(f, "d_v") == D,
            "%s: unexpected T/H/d_k/d_v", name);
    float qs = (float)ms_fix_num(f, "q_scale");
    T_CHECK(ms_t_close(qs, 1.0f / sqrtf((float)D), 0, 1e-6), "%s: q_scale %g is not d_k^-0.5", name, (double)qs);
    const float *q = ms_fix_f32(f, "q", T * P); /* [T][H][D], not pre-scaled */
    const float *k = ms_fix_f32(f, "k", T * P);
    const float *v = ms_fix_f32(f, "v", T * P);
    const float *alpha = ms_fix_f32(f, "alpha", T * P);
    const float *beta = ms_fix_f32(f, "beta", T * H); /* [T][H] */
    const float *want_o = ms_fix_f32(f, "out", T * P);
    const float *want_S = ms_fix_f32(f, "state_out", H * D * D); /* [H][d_k][d_v] */
    float *S = ms_fix_scratch(f, H * D * D);                      /* zero state */
    float *o = ms_fix_scratch(f, T * P);
    float *qq = ms_fix_scratch(f, P);
    for (int t = 0; t < T; t++) {
        for (int p = 0; p < P; p++) qq[p] = q[t * P + p] * qs;
        ms_kda_recur_step(S, H, D, qq, k + t * P, v + t * P, alpha + t * P, beta + t * H, o + t * P);
    }
    char what[64];
    snprintf(what, sizeof what, "%s.out", name);
    ms_fix_cmp(&st, what, o, want_o, T * P, tol);
    snprintf(what, sizeof what, "%s.state_out", name);
    ms_fix_cmp(&st, what, S, want_S, H * D * D, tol);
    ms_fix_report(name, &st);
    ms_fix_free(f);
}

/* Build the KDA weights of a kda_layer fixture (E = 128, P = 64, D = 16, Hk = 4, K = 4). */
static ms_kda_w kda_weights(ms_fix *f, const ms_k3_cfg *c)
{
    int64_t E = c->hidden, D = c->kda_head_dim, Hk = c->kda_heads, P = Hk * D, K = c->conv_k;
    ms_kda_w w;
    memset(&w, 0, sizeof w);
    w.q = ms_fix_mat(f, "q_proj", P, E);
    w.k = ms_fix_mat(f, "k_proj", P, E);
    w.v = ms_fix_mat(f, "v_proj", P, E);
    w.g = ms_fix_mat(f, "g_proj", P, E);
    w.o = ms_fix_mat(f, "o_proj", E, P);
    w.fa = ms_fix_mat(f, "f_a", D, E);
    w.fb = ms_fix_mat(f, "f_b", P, D);
    w.b = ms_fix_mat(f, "b_proj", Hk, E);
    w.q_conv = ms_fix_f32(f, "q_conv", P * K); /* [P][1][K] */
    w.k_conv = ms_fix_f32(f, "k_conv", P * K);
    w.v_conv = ms_fix_f32(f, "v_conv", P * K);
    w.A_log = ms_fix_f32(f, "A_log", Hk);
    w.dt_bias = ms_fix_f32(f, "dt_bias", P);
    w.o_norm = ms_fix_f32(f, "o_norm", D);
    return w;
}

/* The MANIFEST config with the fixture's own scalars where it has them. */
static ms_k3_cfg layer_cfg(ms_fix *f)
{
    ms_k3_cfg c = cfg; /* shallow: owned arrays stay with the global cfg */
    ms_fix_override_int(f, "H", &c.kda_heads);
    ms_fix_override_int(f, "d_k", &c.kda_head_dim);
    ms_fix_override_int(f, "conv_k", &c.conv_k);
    ms_fix_override_float(f, "lower_bound", &c.gate_lb);
    ms_fix_override_float(f, "rms_eps", &c.eps);
    T_CHECK(c.kda_heads == cfg.kda_heads && c.kda_head_dim == cfg.kda_head_dim && c.conv_k == cfg.conv_k &&
                c.gate_lb == cfg.gate_lb && c.eps == cfg.eps,
            "%s: fixture scalars disagree with the MANIFEST config", ms_fix_name(f));
    return c;
}

static void fx_layer(const char *name, int T)
{
    ms_fix *f = ms_fix_open(name);
    if (!f) return;
    ms_fix_stat st = {0};
    ms_k3_cfg c = layer_cfg(f);
    T_CHECK((int)ms_fix_num(f, "T") == T, "%s: T", name);
    int64_t E = c.hidden, D = c.kda_head_dim, Hk = c.kda_heads, P = Hk * D, K = c.conv_k;
    ms_kda_w w = kda_weights(f, &c);
    const float *in = ms_fix_f32(f, "in", T * E);   /* [1][T][E] */
    const float *want = ms_fix_f32(f, "out", T * E); /* [1][T][E] */
    const float *want_S = ms_fix_f32(f, "state_out", Hk * D * D); /* [1][Hk][D][D] */
    float *out = ms_fix_scratch(f, T * E);
    ms_kda_state s1;
    ms_kda_state_init(&s1, &c);
    ms_kda_forward(&c, &w, &s1, in, T, out, NULL);
    char what[64];
    snprintf(what, sizeof what, "%s.out", name);
    ms_fix_cmp(&st, what, out, want, T * E, tol);
    snprintf(what, sizeof what, "%s.state_out", name);
    ms_fix_cmp(&st, what, s1.S, want_S, Hk * D * D, tol);
    ms_fix_report(name, &st);

    if (T > 1) {
        /* Invariant: T one-token calls with carried state == one T-token call, bit for bit. */
        ms_kda_state s2;
        ms_kda_state_init(&s2, &c);
        float *out2 = ms_fix_scratch(f, T * E);
        for (int t = 0; t < T; t++) ms_kda_forward(&c, &w, &s2, in + t * E, 1, out2 + t * E, NULL);
        int64_t d_out = ms_fix_bitdiff(out2, out, T * E);
        int64_t d_S = ms_fix_bitdiff(s2.S, s1.S, Hk * D * D);
        int64_t d_h = ms_fix_bitdiff(s2.hq, s1.hq, P * (K - 1)) + ms_fix_bitdiff(s2.hk, s1.hk, P * (K - 1)) +
                      ms_fix_bitdiff(s2.hv, s1.hv, P * (K - 1));
        printf("  %s: %d x 1-token vs 1 x %d-token: out %lld, S %lld, conv state %lld elements differ in bits\n",
               name, T, T, (long long)d_out, (long long)d_S, (long long)d_h);
        T_CHECK(d_out == 0 && d_S == 0 && d_h == 0, "%s: token-by-token differs from one call", name);

        /* Invariant: a 2-thread pool and the scalar kernels give the same bits. */
        ms_pool *pool = ms_pool_new(2);
        T_CHECK(pool != NULL, "ms_pool_new(2): %s", ms_err_msg());
        ms_kda_state s3;
        ms_kda_state_init(&s3, &c);
        float *out3 = ms_fix_scratch(f, T * E);
        int simd = ms_cpu_simd_enabled();
        ms_cpu_set_simd(0);
        ms_kda_forward(&c, &w, &s3, in, 3, out3, pool);
        ms_kda_forward(&c, &w, &s3, in + 3 * E, T - 3, out3 + 3 * E, pool);
        ms_cpu_set_simd(simd);
        int64_t d3 = ms_fix_bitdiff(out3, out, T * E) + ms_fix_bitdiff(s3.S, s1.S, Hk * D * D);
        printf("  %s: 3+%d split, 2 threads, scalar kernels vs 1 call: %lld elements differ in bits\n", name, T - 3,
               (long long)d3);
        T_CHECK(d3 == 0, "%s: split/threads/scalar run differs from one call", name);

        /* Speculative rows: after rows [0, 2), rows [2, T) run recorded and only the first keep
         * of them stay (a rejection at every position of the window); the state must be bit for
         * bit that of running rows [0, 2 + keep), and so must the next row's output. */
        for (int keep = 1; T > 3 && keep <= T - 2; keep++) {
            ms_kda_state a, b;
            ms_kda_state_init(&a, &c);
            ms_kda_state_init(&b, &c);
            float *oa = ms_fix_scratch(f, T * E), *ob = ms_fix_scratch(f, T * E);
            ms_kda_forward(&c, &w, &a, in, 2, oa, pool);
            ms_kda_spec_reserve(&a, &c, T - 2);
            ms_kda_spec_begin(&a, &c);
            ms_kda_forward(&c, &w, &a, in + 2 * E, T - 2, oa + 2 * E, pool);
            ms_kda_spec_end(&a, &c, &w, keep, pool);
            ms_kda_forward(&c, &w, &b, in, 2 + keep, ob, NULL);
            int64_t d = ms_fix_bitdiff(a.S, b.S, Hk * D * D) + ms_fix_bitdiff(a.hq, b.hq, P * (K - 1)) +
                        ms_fix_bitdiff(a.hk, b.hk, P * (K - 1)) + ms_fix_bitdiff(a.hv, b.hv, P * (K - 1));
            int next = 2 + keep < T ? 2 + keep : 0; /* any row will do as the next input */
            ms_kda_forward(&c, &w, &a, in + next * E, 1, oa, pool);
            ms_kda_forward(&c, &w, &b, in + next * E, 1, ob, NULL);
            d += ms_fix_bitdiff(oa, ob, E);
            T_CHECK(d == 0, "%s: %d of %d speculative rows kept: state and next output differ in %lld elements", name,
                    keep, T - 2, (long long)d);
            ms_kda_state_free(&a);
            ms_kda_state_free(&b);
        }

        /* Reset really zeroes: after a reset the first call reproduces the fixture bits. */
        ms_kda_state_reset(&s3, &c);
        ms_kda_forward(&c, &w, &s3, in, T, out3, NULL);
        T_CHECK(ms_fix_bitdiff(out3, out, T * E) == 0, "%s: output after ms_kda_state_reset differs", name);
        ms_kda_state_free(&s3);
        ms_pool_free(pool);
        ms_kda_state_free(&s2);
    }
    ms_kda_state_free(&s1);
    ms_kda_state_free(NULL);
    ms_fix_free(f);
}

int main(void)
{
    ms_kern_init();
    self_checks();
    if (ms_fix_manifest(&cfg, &tol) == 0) {
        printf("tolerance: abs %g rel %g\n", tol.abs, tol.rel);
        fx_decay();
        fx_recur("kda_recur1", 1);
        fx_recur("kda_recur8", 8);
        fx_layer("kda_layer1", 1);
        fx_layer("kda_layer8", 8);
    }
    ms_k3_cfg_free(&cfg);
    return ms_t_done();
}
