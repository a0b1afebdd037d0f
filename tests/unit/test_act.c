/* test_act: exp, tanh, sigmoid and SiTU-GLU against the exact functions, and every path against the scalar one. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ms_act.h"
#include "ms_cpu.h"
#include "ms_kern.h"
#include "ms_test.h"

static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* |got - want| in units of the float spacing at want (the smallest subnormal's below 2^-126). */
static double ulps(float got, double want)
{
    double a = fabs(want);
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    double ulp = ldexp(1.0, (e - 1 > -126 ? e - 1 : -126) - 23);
    return fabs((double)got - want) / ulp;
}

/* Every 61st float of [lo, hi] (either sign), about a million values for the ranges below. */
typedef double (*exact_fn)(double);
typedef float (*ours_fn)(float);
static double max_ulps(ours_fn ours, exact_fn exact, float lo, float hi, float *worst)
{
    double m = 0;
    for (int neg = 0; neg < 2; neg++) {
        for (uint32_t b = 0; b < 0x7f800000u; b += 61) {
            float x = u2f(b | (neg ? 0x80000000u : 0));
            if (!(x >= lo && x <= hi)) continue;
            double want = exact((double)x);
            if (!isfinite(want) || fabs(want) > 3.4028234663852886e38) continue;
            double d = ulps(ours(x), want);
            if (d > m) m = d, *worst = x;
        }
    }
    return m;
}

static double sigmoid_exact(double x) { return 1.0 / (1.0 + exp(-x)); }

static void test_accuracy(void)
{
    float w = 0;
    double e = max_ulps(ms_act_exp, exp, -110.0f, 88.7f, &w);
    T_CHECK(e <= 0.5001, "exp: %.4f ulp at %a (contract: the nearest float)", e, (double)w);
    e = max_ulps(ms_act_tanh, tanh, -30.0f, 30.0f, &w);
    T_CHECK(e <= 0.5001, "tanh: %.4f ulp at %a (contract: the nearest float)", e, (double)w);
    e = max_ulps(ms_act_sigmoid, sigmoid_exact, -88.0f, 100.0f, &w);
    T_CHECK(e <= 2.5, "sigmoid: %.4f ulp at %a (contract: 2.5)", e, (double)w);

    /* Ends and special values. */
    T_CHECK(ms_act_exp(0.0f) == 1.0f && ms_act_exp(-0.0f) == 1.0f, "exp(0) = %a", (double)ms_act_exp(0.0f));
    T_CHECK(isinf(ms_act_exp(89.0f)) && isinf(ms_act_exp(INFINITY)), "exp overflows to +inf");
    T_CHECK(isfinite(ms_act_exp(88.72f)), "exp(88.72) finite: %a", (double)ms_act_exp(88.72f));
    T_CHECK(ms_act_exp(-110.0f) == 0.0f && ms_act_exp(-INFINITY) == 0.0f, "exp underflows to 0");
    T_CHECK(ms_act_exp(-100.0f) > 0.0f, "exp(-100) is a subnormal, not 0");
    T_CHECK(isnan(ms_act_exp(NAN)) && isnan(ms_act_tanh(NAN)) && isnan(ms_act_sigmoid(NAN)), "NaN gives NaN");
    T_CHECK(ms_act_tanh(INFINITY) == 1.0f && ms_act_tanh(-INFINITY) == -1.0f, "tanh(+-inf) = +-1");
    T_CHECK(ms_act_tanh(10.0f) == 1.0f && ms_act_tanh(-3e38f) == -1.0f, "tanh saturates exactly");
    T_CHECK(f2u(ms_act_tanh(-0.0f)) == 0x80000000u, "tanh(-0) = -0");
    T_CHECK(ms_act_sigmoid(200.0f) == 1.0f && ms_act_sigmoid(-200.0f) == 0.0f, "sigmoid saturates");
    T_CHECK(ms_act_sigmoid(-88.0f) > 0.0f && ms_act_sigmoid(-89.0f) == 0.0f, "sigmoid is 0 where e^-x overflows");
    int odd = 1;
    for (uint32_t b = 0; b < 0x41400000u; b += 997) /* up to 12 */
        if (f2u(ms_act_tanh(-u2f(b))) != (f2u(ms_act_tanh(u2f(b))) ^ 0x80000000u)) odd = 0;
    T_CHECK(odd, "tanh(-x) = -tanh(x) bit for bit");

    /* SiTU against its formula in double (spec §3.3): both factors bounded by b1, b2. */
    double worst = 0;
    for (int i = -400; i <= 400; i++)
        for (int j = -40; j <= 40; j++) {
            float g = (float)i * 0.0625f, u = (float)j * 0.75f;
            double want = 4.0 * tanh(g / 4.0) / (1.0 + exp(-(double)g)) * 25.0 * tanh(u / 25.0);
            double err = fabs((double)ms_act_situ(g, u, 4.0f, 25.0f) - want) / (fabs(want) + 1e-30);
            if (want != 0 && err > worst) worst = err;
        }
    T_CHECK(worst <= 3e-7, "situ: relative error %.3g against the formula in double (contract: 3e-7)", worst);
}

/* Inputs for the path comparisons: ordinary values of every magnitude and the special ones. */
static void fill(float *g, float *u, int n)
{
    static const float special[] = {0.0f, -0.0f, 0.39999998f, 0.4f, -0.4f, 9.0f, -9.02f, 88.0f, -88.0f, 89.0f,
                                    -104.0f, -120.0f, 1e-30f, -1e-42f, 3e38f, -3e38f, INFINITY, -INFINITY};
    uint32_t s = 12345;
    for (int i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        float mag = ldexpf((float)(s >> 8) / 16777216.0f, (int)(s % 24) - 12); /* 2^-12 .. 2^12 */
        g[i] = (s & 0x80) ? -mag : mag;
        s = s * 1664525u + 1013904223u;
        u[i] = ((s >> 9) / 8388608.0f - 0.5f) * 120.0f;
    }
    for (int i = 0; i < (int)(sizeof special / sizeof special[0]) && i < n; i++) {
        g[i] = special[i];
        u[n - 1 - i] = special[i];
    }
}

static void test_paths(void)
{
    if (!ms_cpu_simd_available()) {
        ms_t_skip("AVX2+FMA not available: SIMD = scalar comparisons not run");
        return;
    }
    enum { N = 4099 }; /* 16 x 256 + 3: every path's tail too */
    float *g = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N); /* [N] */
    float *want = malloc(sizeof(float) * N), *got = malloc(sizeof(float) * N); /* [N] */
    fill(g, u, N);
    for (int i = 0; i < N; i++) want[i] = ms_act_situ(g[i], u[i], 4.0f, 25.0f);
    for (int lv = MS_SIMD_SCALAR; lv <= MS_SIMD_AVX512; lv++) {
        if (ms_cpu_set_level(lv) != lv) {
            ms_t_skip("the %s path is not on this CPU: not compared", ms_cpu_level_name(lv));
            continue;
        }
        for (int n = N - 16; n <= N; n++) { /* every tail length */
            memset(got, 0, sizeof(float) * N);
            ms_act_situ_rows(g, u, n, 4.0f, 25.0f, got);
            int diff = -1;
            for (int i = 0; i < n && diff < 0; i++)
                if (f2u(got[i]) != f2u(want[i]) && !(isnan(got[i]) && isnan(want[i]))) diff = i;
            T_CHECK(diff < 0, "%s path, n = %d: element %d is %a, scalar %a (g %a, u %a)", ms_cpu_level_name(lv), n, diff,
                    diff < 0 ? 0.0 : (double)got[diff], diff < 0 ? 0.0 : (double)want[diff],
                    diff < 0 ? 0.0 : (double)g[diff], diff < 0 ? 0.0 : (double)u[diff]);
        }
        /* in place, over the gate */
        memcpy(got, g, sizeof(float) * N);
        ms_act_situ_rows(got, u, N, 4.0f, 25.0f, got);
        int same = 1;
        for (int i = 0; i < N; i++)
            if (f2u(got[i]) != f2u(want[i]) && !(isnan(got[i]) && isnan(want[i]))) same = 0;
        T_CHECK(same, "%s path: out = g gives other bits", ms_cpu_level_name(lv));
    }
    ms_cpu_set_simd(1);
    free(g), free(u), free(want), free(got);
}

int main(void)
{
    ms_kern_init();
    test_accuracy();
    test_paths();
    return ms_t_done();
}
