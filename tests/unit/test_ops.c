/* test_ops: RMSNorm and SiTU-GLU against the shared op fixtures; SwiGLU against its formula. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_act.h"
#include "ms_k3_cfg.h"
#include "ms_err.h"
#include "ms_expert.h"
#include "ms_fix.h"
#include "ms_kern.h"
#include "ms_ops.h"
#include "ms_test.h"

static ms_fix_tol tol;
static ms_k3_cfg cfg;

/* ---- self-contained invariants (run without the shared folder) ---- */

static void self_checks(void)
{
    /* RMSNorm: y may alias x (header contract) and gives the same bits. */
    float x[37], y[37], w[37];
    for (int i = 0; i < 37; i++) {
        x[i] = (float)sin(0.7 * i) * 3.0f;
        w[i] = 0.5f + 0.01f * (float)i;
    }
    ms_rmsnorm(x, w, 37, 1e-5f, y);
    float xa[37];
    memcpy(xa, x, sizeof x);
    ms_rmsnorm(xa, w, 37, 1e-5f, xa);
    T_CHECK(ms_fix_bitdiff(xa, y, 37) == 0, "rmsnorm in place differs from out of place");
    /* Unit gain (w NULL) gives mean square ~1. */
    ms_rmsnorm(x, NULL, 37, 0.0f, y);
    double ms = 0;
    for (int i = 0; i < 37; i++) ms += (double)y[i] * y[i];
    T_CHECK(fabs(ms / 37 - 1.0) < 1e-5, "rmsnorm with unit gain: mean square %.8f", ms / 37);

    /* SiTU stays within b1*b2 even far beyond the fixture magnitudes (trap 10). */
    float big[] = {1e4f, -1e4f, 3e38f, -3e38f, 1000.0f, -1000.0f};
    int bounded = 1;
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++) {
            float v = ms_act_situ(big[i], big[j], 4.0f, 25.0f);
            if (!(fabsf(v) <= 100.0f)) bounded = 0;
        }
    T_CHECK(bounded, "ms_act_situ exceeds |100| or is NaN at extreme inputs");
    /* Sigmoid takes the uncapped gate: g=8 -> 4*tanh(2)*sigmoid(8), u=25 -> 25*tanh(1). */
    double want = 4.0 * tanh(2.0) / (1.0 + exp(-8.0)) * 25.0 * tanh(1.0);
    T_CHECK(ms_t_close(ms_act_situ(8.0f, 25.0f, 4.0f, 25.0f), (float)want, 1e-5, 1e-6), "ms_act_situ(8,25) = %g, want %g",
            (double)ms_act_situ(8.0f, 25.0f, 4.0f, 25.0f), want);

}

/* SwiGLU (DeepSeek-V3, Kimi K2, Qwen3-MoE): silu(g) u within a few float ulps of the formula in
 * double over a sweep; the MLP equals its parts composed, bit for bit; the expert activation row
 * computes the MLP. */
static void swiglu_checks(void)
{
    double worst = 0;
    for (int i = 0; i <= 4000; i++)
        for (int j = 0; j < 5; j++) {
            float g = -40.0f + 0.02f * (float)i, u = (float)(j - 2) * 1.37f + 0.11f;
            double want = (double)g / (1.0 + exp(-(double)g)) * (double)u, got = ms_swiglu(g, u);
            double err = fabs(got - want) / (fabs(want) + 1e-37);
            if (fabs(want) > 1e-30 && err > worst) worst = err;
        }
    T_CHECK(worst < 6e-7, "ms_swiglu within 6e-7 of g sigmoid(g) u in double (worst %.2e)", worst);
    T_CHECK(ms_swiglu(0.0f, 5.0f) == 0.0f && ms_swiglu(100.0f, 2.0f) == 200.0f && ms_swiglu(-200.0f, 3.0f) == -0.0f,
            "silu(0) = 0; silu is the identity far above, 0 far below");
    enum { T = 3, L = 64, I = 40 };
    static float wg[I * L], wu[I * L], wd[L * I], x[T * L], y[T * L], g[T * I], u[T * I], want[T * L];
    for (int i = 0; i < I * L; i++) {
        wg[i] = (float)sin(0.37 * i) * 0.2f;
        wu[i] = (float)cos(0.11 * i) * 0.2f;
        wd[i] = (float)sin(0.05 * i + 1.0) * 0.2f;
    }
    for (int i = 0; i < T * L; i++) x[i] = (float)sin(0.9 * i) * 2.0f;
    ms_mat G = {MS_WT_F32, I, L, wg, NULL, NULL, NULL}, U = {MS_WT_F32, I, L, wu, NULL, NULL, NULL},
           D = {MS_WT_F32, L, I, wd, NULL, NULL, NULL};
    ms_swiglu_mlp(&G, &U, &D, x, T, y, NULL);
    ms_matmul(&G, x, T, g, NULL);
    ms_matmul(&U, x, T, u, NULL);
    for (int i = 0; i < T * I; i++) g[i] = ms_swiglu(g[i], u[i]);
    ms_matmul(&D, g, T, want, NULL);
    T_CHECK(ms_fix_bitdiff(y, want, T * L) == 0, "ms_swiglu_mlp = down (swiglu(gate x, up x)), bit for bit");
    ms_expert_w w = {0};
    w.w[MS_XROLE_GATE] = G;
    w.w[MS_XROLE_UP] = U;
    w.w[MS_XROLE_DOWN] = D;
    float z[T * L];
    ms_expert_apply(MS_XACT_SWIGLU, NULL, &w, x, T, z, NULL);
    T_CHECK(ms_fix_bitdiff(z, want, T * L) == 0, "the expert activation \"swiglu\" computes it");
    /* A SwiGLU expert stored as BF16 or as FP8 with block scales (its parts back to back, as the
     * store and the workers hand them over) = the MLP of its weights as F32, bit for bit. */
    for (int e = 0; e < 3; e++) { /* BF16; FP8 with F32 scales; FP8 with BF16 scales */
        ms_xfmt f;
        static const char *const pn[6] = {"g", "gs", "u", "us", "d", "ds"};
        ms_xenc enc = e == 2 ? MS_XENC_FP8_BF16S : e ? MS_XENC_FP8 : MS_XENC_BF16;
        ms_xfmt_begin(&f, "t", L, I, MS_XACT_SWIGLU, NULL, 0);
        ms_xfmt_add_mat(&f, "gate", MS_XROLE_GATE, enc, MS_XFMT_NO_BIAS, pn);
        ms_xfmt_add_mat(&f, "up", MS_XROLE_UP, enc, MS_XFMT_NO_BIAS, pn + (e ? 2 : 1));
        ms_xfmt_add_mat(&f, "down", MS_XROLE_DOWN, enc, MS_XFMT_NO_BIAS, pn + (e ? 4 : 2));
        uint8_t *bytes = malloc(ms_xfmt_expert_bytes(&f));
        const uint8_t *part[6];
        float *wf[3] = {malloc(sizeof(float) * I * L), malloc(sizeof(float) * I * L), malloc(sizeof(float) * L * I)};
        uint64_t at = 0;
        for (int i = 0; i < f.n_parts; i++) {
            part[i] = bytes + at;
            for (uint64_t b = 0; b < f.part[i].bytes; b++) bytes[at + b] = (uint8_t)(b * 37 + (uint64_t)i * 11 + 5);
            if (f.part[i].kind == MS_XPART_SCALES) /* finite scales near 2^-4 (exact in BF16 too) */
                for (uint64_t b = 0; b < f.part[i].bytes / (e == 2 ? 2 : 4); b++) {
                    float v = ldexpf(1.0f + (float)(b % 7) / 8.0f, -4);
                    uint32_t u;
                    memcpy(&u, &v, 4);
                    uint16_t h = (uint16_t)(u >> 16);
                    if (e == 2) memcpy(bytes + at + 2 * b, &h, 2);
                    else memcpy(bytes + at + 4 * b, &v, 4);
                }
            if (f.part[i].kind == MS_XPART_VALUES && e) /* no NaN codes */
                for (uint64_t b = 0; b < f.part[i].bytes; b++)
                    if ((bytes[at + b] & 0x7F) == 0x7F) bytes[at + b] ^= 1;
            at += f.part[i].bytes;
        }
        ms_expert_w pw;
        float *widened[6];
        ms_expert_w_of_parts(&f, part, &pw, widened);
        ms_mat F[3];
        for (int m = 0; m < 3; m++) {
            const ms_mat *src = &pw.w[m == 0 ? MS_XROLE_GATE : m == 1 ? MS_XROLE_UP : MS_XROLE_DOWN];
            for (int64_t r = 0; r < src->rows; r++) ms_mat_row_f32(src, r, wf[m] + r * src->cols);
            F[m] = (ms_mat){MS_WT_F32, src->rows, src->cols, wf[m], NULL, NULL, NULL};
        }
        float got[T * L];
        ms_expert_run(&f, part, x, T, got, NULL);
        ms_swiglu_mlp(&F[0], &F[1], &F[2], x, T, want, NULL);
        T_CHECK(ms_fix_bitdiff(got, want, T * L) == 0,
                "a SwiGLU expert from %s parts = the MLP of its F32 weights, bit for bit", ms_xfmt_enc_name(enc));
        for (int m = 0; m < 3; m++) free(wf[m]);
        for (int i = 0; i < f.n_parts; i++) free(widened[i]);
        free(bytes);
    }
}

/* ---- fixtures ---- */

static void fx_rmsnorm(void)
{
    ms_fix *f = ms_fix_open("rmsnorm");
    if (!f) return;
    ms_fix_stat st = {0};
    float eps = (float)ms_fix_num(f, "eps");
    const float *w = ms_fix_f32(f, "weight", 128);
    const float *in = ms_fix_f32(f, "in", 3 * 128); /* [3][128] */
    const float *want = ms_fix_f32(f, "out", 3 * 128);
    float *got = ms_fix_scratch(f, 3 * 128);
    for (int r = 0; r < 3; r++) ms_rmsnorm(in + r * 128, w, 128, eps, got + r * 128);
    ms_fix_cmp(&st, "rmsnorm.out", got, want, 3 * 128, tol);
    ms_fix_report("rmsnorm", &st);
    ms_fix_free(f);
}

static void fx_situ_glu(void)
{
    ms_fix *f = ms_fix_open("situ_glu");
    if (!f) return;
    ms_fix_stat st = {0};
    float b1 = (float)ms_fix_num(f, "beta"), b2 = (float)ms_fix_num(f, "linear_beta");
    double max_abs = ms_fix_num(f, "max_abs");
    T_CHECK(b1 == cfg.situ_b1 && b2 == cfg.situ_b2, "situ_glu betas %g/%g differ from MANIFEST config %g/%g",
            (double)b1, (double)b2, (double)cfg.situ_b1, (double)cfg.situ_b2);
    const float *in = ms_fix_f32(f, "in", 6 * 16);   /* [6][16]: cols 0-7 gate, 8-15 up */
    const float *want = ms_fix_f32(f, "out", 6 * 8); /* [6][8] */
    float *got = ms_fix_scratch(f, 6 * 8);
    int bounded = 1;
    for (int r = 0; r < 6; r++)
        for (int j = 0; j < 8; j++) {
            float v = ms_act_situ(in[r * 16 + j], in[r * 16 + 8 + j], b1, b2);
            got[r * 8 + j] = v;
            /* fp32 saturates tanh and sigmoid at |x| = 1000, so the bound is reached exactly. */
            if (!(fabs((double)v) <= max_abs)) bounded = 0;
        }
    T_CHECK(bounded, "situ_glu: |y| exceeds max_abs %g", max_abs);
    /* Strictly inside the bound wherever the inputs do not saturate fp32 (|x| <= 100). */
    int strict = 1;
    for (int r = 0; r < 6; r++)
        if (fabsf(in[r * 16]) <= 100.0f)
            for (int j = 0; j < 8; j++)
                if (!(fabsf(got[r * 8 + j]) < 100.0f)) strict = 0;
    T_CHECK(strict, "situ_glu: |y| reaches 100 at unsaturated magnitudes");
    ms_fix_cmp(&st, "situ_glu.out", got, want, 6 * 8, tol);
    ms_fix_report("situ_glu", &st);
    ms_fix_free(f);
}

int main(void)
{
    ms_kern_init();
    self_checks();
    swiglu_checks();
    if (ms_fix_manifest(&cfg, &tol) == 0) {
        printf("tolerance: abs %g rel %g\n", tol.abs, tol.rel);
        fx_rmsnorm();
        fx_situ_glu();
    }
    ms_k3_cfg_free(&cfg);
    return ms_t_done();
}
