/* test_dcost: the pass-time fit and the draft count auto chooses (ms_dcost). */
#include <math.h>
#include <stdio.h>

#include "ms_dcost.h"
#include "ms_test.h"

/* Tokens per second of a pass with k drafts, from the definition (not from ms_dcost). */
static double rate(double p, double a, double b, int n_base, int k)
{
    double e = 0;
    for (int j = 0; j <= k; j++) e += pow(p, j);
    return (n_base - 1 + e) / (a + b * (n_base + k));
}

static void test_fit(void)
{
    ms_dcost c = {0};
    double a = -1, b = -1;
    T_CHECK(ms_dcost_fit(&c, &a, &b) != 0, "no passes: no fit");
    for (int i = 0; i < 10; i++) ms_dcost_add(&c, 1, 1.5);
    T_CHECK(ms_dcost_fit(&c, &a, &b) != 0, "one row count only: the slope is not determined");
    /* exact line: 1.5 s + 0.25 s a row, rows 1..9 in turn */
    ms_dcost d = {0};
    for (int i = 0; i < 30; i++) ms_dcost_add(&d, 1 + i % 9, 1.5 + 0.25 * (1 + i % 9));
    T_CHECK(ms_dcost_fit(&d, &a, &b) == 0 && fabs(a - 1.5) < 1e-9 && fabs(b - 0.25) < 1e-9,
            "a line is fitted exactly: a %.12f b %.12f", a, b);
    /* the cost changes (a budget or batch change): newer passes take over */
    for (int i = 0; i < 200; i++) ms_dcost_add(&d, 1 + i % 5, 0.2 + 0.8 * (1 + i % 5));
    T_CHECK(ms_dcost_fit(&d, &a, &b) == 0 && fabs(a - 0.2) < 1e-3 && fabs(b - 0.8) < 1e-3,
            "older passes decay: a %.6f b %.6f", a, b);
    /* noise that slopes down: clamped, never a negative cost */
    ms_dcost e = {0};
    for (int i = 0; i < 20; i++) ms_dcost_add(&e, 1 + i % 2, i % 2 ? 1.0 : 1.2);
    T_CHECK(ms_dcost_fit(&e, &a, &b) == 0 && b == 0 && a > 0, "a negative slope is clamped to 0: a %.3f b %.3f", a, b);
}

static void test_best_k(void)
{
    T_CHECK(fabs(ms_dcost_expected(0.5, 3) - 1.875) < 1e-12 && ms_dcost_expected(1, 4) == 5 &&
                ms_dcost_expected(0, 8) == 1,
            "expected tokens 1 + p + .. + p^k");
    /* drafts that never land never pay, whatever a pass costs */
    T_CHECK(ms_dcost_best_k(0, 1.7, 0.1, 1, 8) == 0, "p = 0: no drafts (small budget)");
    T_CHECK(ms_dcost_best_k(0, 0.1, 0.6, 1, 8) == 0, "p = 0: no drafts (large budget)");
    /* always right, rows cheap next to the pass (1 GiB: the trunk streams once a pass): all */
    T_CHECK(ms_dcost_best_k(1, 1.7, 0.1, 1, 8) == 8, "p = 1, cheap rows: the whole window");
    /* always right but each row costs more than a whole one-row pass: none */
    T_CHECK(ms_dcost_best_k(1, 0.0, 1.0, 1, 8) == 0, "p = 1, a row costs a pass: nothing to gain");
    /* the 8 GiB case of docs/PERFORMANCE.md: a pass 0.5 + 0.5 s a row; right drafts pay, a
     * coin-flip acceptance does not */
    T_CHECK(ms_dcost_best_k(1, 0.5, 0.5, 1, 8) == 8, "8 GiB, all right: the window");
    T_CHECK(ms_dcost_best_k(0.3, 0.5, 0.5, 1, 8) == 0, "8 GiB, p = 0.3: no drafts");
    /* whatever it picks is at least as good as every other count (within the 1% it asks) */
    int bad = 0;
    for (int pi = 0; pi <= 20; pi++)
        for (int ai = 0; ai <= 8; ai++)
            for (int bi = 0; bi <= 8; bi++)
                for (int n = 1; n <= 16; n *= 4) {
                    double p = pi / 20.0, a = ai * 0.25, b = 0.05 + bi * 0.2;
                    int k = ms_dcost_best_k(p, a, b, n, 8);
                    double rk = rate(p, a, b, n, k);
                    for (int j = 0; j <= 8; j++)
                        if (rate(p, a, b, n, j) > rk * 1.0101 + 1e-12) {
                            if (!bad++)
                                fprintf(stderr, "p %.2f a %.2f b %.2f n %d: k %d (%.4f) but k %d gives %.4f\n", p, a, b,
                                        n, k, rk, j, rate(p, a, b, n, j));
                        }
                }
    T_CHECK(bad == 0, "the chosen count is within 1%% of the best (%d cases not)", bad);
}

/* The probe gap: a wrong probe (b / (a + b) of a pass) at most 2% of the passes between probes. */
static void test_probe_gap(void)
{
    static const double ab[][2] = {{0, 1}, {13, 1}, {1, 1}, {0.6, 0.0}, {5, 0.001}, {0, 0}, {0.3, 0.7}, {49, 1}};
    for (size_t i = 0; i < sizeof ab / sizeof ab[0]; i++) {
        double a = ab[i][0], b = ab[i][1];
        int g = ms_dcost_probe_gap(a, b);
        double share = a + b > 0 ? b / (a + b) : 0; /* one probe's cost in passes */
        /* the smallest gap in 1..256 whose share is within 2% (256 when none is) */
        int want = 1;
        while (want < 256 && share / want > 0.02 + 1e-12) want++;
        T_CHECK(g == want, "a %.3f b %.3f: probe gap %d, want %d", a, b, g, want);
    }
    T_CHECK(ms_dcost_probe_gap(0, 1) == 50 && ms_dcost_probe_gap(13, 1) == 4 && ms_dcost_probe_gap(1, 0) == 1,
            "pinned trunk: a probe every 50 passes; streamed (a = 13 b): every 4; free rows: every pass");
}

int main(void)
{
    test_fit();
    test_best_k();
    test_probe_gap();
    return ms_t_done();
}
