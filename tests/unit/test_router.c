/* test_router: every scoring rule and the group-limited choice by hand values; the checks. */
#include <math.h>
#include <string.h>

#include "ms_err.h"
#include "ms_router.h"
#include "ms_test.h"

static double sig(double x) { return 1.0 / (1.0 + exp(-x)); }

static void sigmoid_bias(void)
{
    /* the bias steers the choice only; ties go to the lower id; weights renormalised, scaled */
    float logits[6] = {0.0f, 2.0f, 0.0f, 1.0f, 0.0f, 0.0f};
    float bias[6] = {0.0f, -10.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    ms_router r = {MS_ROUTE_SIGMOID_BIAS, 6, 3, 0, 0, 1, 2.0f};
    int32_t ids[3];
    float w[3];
    T_CHECK(ms_router_check(&r, "r") == 0, "a plain sigmoid rule passes: %s", ms_err_msg());
    ms_router_route(&r, logits, bias, ids, w);
    T_CHECK(ids[0] == 3 && ids[1] == 0 && ids[2] == 2, "sigmoid: picks %d %d %d, want 3 0 2", ids[0], ids[1], ids[2]);
    double s3 = sig(1.0), sum = s3 + 0.5 + 0.5;
    T_CHECK(ms_t_close(w[0], (float)(2.0 * s3 / sum), 1e-6, 1e-5) && ms_t_close(w[1], (float)(1.0 / sum), 1e-6, 1e-5) &&
                w[1] == w[2],
            "sigmoid: weights %g %g %g, want %g %g %g", (double)w[0], (double)w[1], (double)w[2], 2.0 * s3 / sum,
            1.0 / sum, 1.0 / sum);
    /* no bias: NULL is zeros */
    ms_router_route(&r, logits, NULL, ids, w);
    T_CHECK(ids[0] == 1 && ids[1] == 3 && ids[2] == 0, "sigmoid, no bias: picks %d %d %d, want 1 3 0", ids[0], ids[1],
            ids[2]);
    /* without renorm the weights are the scores times the scale */
    r.renorm = 0;
    ms_router_route(&r, logits, NULL, ids, w);
    T_CHECK(w[0] == (float)(1.0 / (1.0 + exp(-2.0))) * 2.0f || ms_t_close(w[0], (float)(2.0 * sig(2.0)), 1e-7, 1e-6),
            "sigmoid, no renorm: weight %g, want %g", (double)w[0], 2.0 * sig(2.0));
}

static void groups(void)
{
    /* 8 experts in 4 groups of 2; a group's score is its two best: g0 = s(3) + s(-3) = 1.0,
     * g1 = 2 s(1) = 1.46, g2 = s(2) + s(0) = 1.38, g3 = 2 s(0.5) = 1.24. Keeping 2 groups (g1, g2)
     * the best 3 are 4, 2, 3; without groups they would be 0, 4, 2. */
    float logits[8] = {3.0f, -3.0f, 1.0f, 1.0f, 2.0f, 0.0f, 0.5f, 0.5f};
    ms_router r = {MS_ROUTE_SIGMOID_BIAS, 8, 3, 4, 2, 1, 1.0f};
    int32_t ids[3];
    float w[3];
    T_CHECK(ms_router_check(&r, "r") == 0, "4 groups keeping 2 passes: %s", ms_err_msg());
    ms_router_route(&r, logits, NULL, ids, w);
    T_CHECK(ids[0] == 4 && ids[1] == 2 && ids[2] == 3, "groups: picks %d %d %d, want 4 2 3", ids[0], ids[1], ids[2]);
    double sum = sig(2.0) + 2 * sig(1.0);
    T_CHECK(ms_t_close(w[0], (float)(sig(2.0) / sum), 1e-6, 1e-5) && ms_t_close(w[1], (float)(sig(1.0) / sum), 1e-6, 1e-5),
            "groups: weights %g %g, want %g %g", (double)w[0], (double)w[1], sig(2.0) / sum, sig(1.0) / sum);
    ms_router all = r;
    all.n_group = 1;
    ms_router_route(&all, logits, NULL, ids, w);
    T_CHECK(ids[0] == 0 && ids[1] == 4 && ids[2] == 2, "one group: picks %d %d %d, want 0 4 2", ids[0], ids[1], ids[2]);
    /* the bias counts in the group scores: lifting expert 1 by 2 makes g0 = 0.95 + 2.05 the best, g1 next */
    float bias[8] = {0, 2.0f, 0, 0, 0, 0, 0, 0};
    ms_router_route(&r, logits, bias, ids, w);
    T_CHECK(ids[0] == 1 && ids[1] == 0 && ids[2] == 2, "groups, biased: picks %d %d %d, want 1 0 2 (g0 and g1 kept)",
            ids[0], ids[1], ids[2]);
    sum = sig(-3.0) + sig(3.0) + sig(1.0);
    T_CHECK(ms_t_close(w[0], (float)(sig(-3.0) / sum), 1e-6, 1e-5), "groups, biased: the weight is the unbiased score's (%g, want %g)",
            (double)w[0], sig(-3.0) / sum);
}

static void softmax_rules(void)
{
    float logits[4] = {1.0f, 3.0f, 2.0f, 3.0f};
    int32_t ids[3];
    float w[3];
    ms_router top = {MS_ROUTE_TOPK_THEN_SOFTMAX, 4, 2, 0, 0, 0, 1.0f};
    ms_router_route(&top, logits, NULL, ids, w);
    T_CHECK(ids[0] == 1 && ids[1] == 3 && w[0] == 0.5f && w[1] == 0.5f, "top-k then softmax: %d %d (%g %g), want 1 3 (0.5 0.5)",
            ids[0], ids[1], (double)w[0], (double)w[1]);
    top.k = 3;
    ms_router_route(&top, logits, NULL, ids, w);
    double d = 2.0 + exp(-1.0);
    T_CHECK(ids[2] == 2 && w[0] == (float)(1.0 / d) && w[2] == (float)(exp(-1.0) / d),
            "top-k then softmax, k 3: %d (%g %g), want 2 (%g %g)", ids[2], (double)w[0], (double)w[2], 1.0 / d, exp(-1.0) / d);
    /* softmax over all 4, then the top 3: the weights are the full probabilities */
    ms_router all = {MS_ROUTE_SOFTMAX_THEN_TOPK, 4, 3, 0, 0, 0, 1.0f};
    ms_router_route(&all, logits, NULL, ids, w);
    double z = exp(-2.0) + 2.0 + exp(-1.0);
    T_CHECK(ids[0] == 1 && ids[1] == 3 && ids[2] == 2 && w[0] == (float)(1.0 / z) && w[2] == (float)(exp(-1.0) / z),
            "softmax then top-k: %d %d %d (%g %g), want 1 3 2 (%g %g)", ids[0], ids[1], ids[2], (double)w[0],
            (double)w[2], 1.0 / z, exp(-1.0) / z);
    all.renorm = 1;
    ms_router_route(&all, logits, NULL, ids, w);
    T_CHECK(ms_t_close(w[0], (float)(1.0 / d), 1e-7, 1e-6) && ms_t_close(w[2], (float)(exp(-1.0) / d), 1e-7, 1e-6),
            "softmax then top-k, renormalised: %g %g, want %g %g (the top-k softmax's)", (double)w[0], (double)w[2],
            1.0 / d, exp(-1.0) / d);
    /* a row of NaN still names k distinct experts */
    float bad[4] = {NAN, NAN, NAN, NAN};
    for (int s = 0; s < 3; s++) {
        ms_router rr = s == 0 ? top : s == 1 ? all : (ms_router){MS_ROUTE_SIGMOID_BIAS, 4, 3, 2, 2, 1, 1.0f};
        T_CHECK(ms_router_check(&rr, "r") == 0, "rule %d is a checked one: %s", s, ms_err_msg());
        ms_router_route(&rr, bad, NULL, ids, w);
        T_CHECK(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2] && ids[0] >= 0 && ids[2] < 4,
                "rule %d: a NaN row picks distinct experts (%d %d %d)", s, ids[0], ids[1], ids[2]);
    }
}

static void expect_refused(ms_router r, const char *field)
{
    T_CHECK(ms_router_check(&r, "layer 3 router") != 0 && strstr(ms_err_msg(), "layer 3 router") &&
                strstr(ms_err_msg(), field),
            "refused, naming '%s': %s", field, ms_err_msg());
}

static void checks(void)
{
    expect_refused((ms_router){MS_ROUTE_SIGMOID_BIAS, 8, 9, 0, 0, 1, 1.0f}, "9 experts per token");
    expect_refused((ms_router){MS_ROUTE_SIGMOID_BIAS, 8, 0, 0, 0, 1, 1.0f}, "0 experts per token");
    expect_refused((ms_router){MS_ROUTE_SIGMOID_BIAS, 9, 2, 2, 1, 1, 1.0f}, "do not split into 2 groups");
    expect_refused((ms_router){MS_ROUTE_SIGMOID_BIAS, 8, 2, 8, 1, 1, 1.0f}, "groups of 1 experts");
    expect_refused((ms_router){MS_ROUTE_SIGMOID_BIAS, 8, 2, 4, 5, 1, 1.0f}, "5 groups kept of 4");
    expect_refused((ms_router){MS_ROUTE_SIGMOID_BIAS, 8, 5, 4, 2, 1, 1.0f}, "fewer than 5 experts per token");
    expect_refused((ms_router){MS_ROUTE_SOFTMAX_THEN_TOPK, 8, 2, 4, 2, 1, 1.0f}, "groups need sigmoid");
    expect_refused((ms_router){(ms_route_score)7, 8, 2, 0, 0, 1, 1.0f}, "unknown scoring 7");
    expect_refused((ms_router){MS_ROUTE_SIGMOID_BIAS, 8, 2, 0, 0, 1, INFINITY}, "scaling factor");
}

int main(void)
{
    sigmoid_bias();
    groups();
    softmax_rules();
    checks();
    return ms_t_done();
}
