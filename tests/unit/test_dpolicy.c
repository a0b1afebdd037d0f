/* test_dpolicy: the draft counts a sequence asks for: fixed, the acceptance ramp, pauses that grow, probes, the cost fit. */
#include "ms_dpolicy.h"
#include "ms_test.h"

static void fixed(void)
{
    ms_dpolicy d;
    ms_dpolicy_init(&d, 6, 0, 0);
    ms_dcost c = {0};
    T_CHECK(!ms_dpolicy_paused(&d) && ms_dpolicy_want(&d, &c, 3, 1) == 6, "fixed: always the window (the caller caps it)");
    ms_dpolicy_verified(&d, &c, 6, 0);
    T_CHECK(!ms_dpolicy_paused(&d) && ms_dpolicy_want(&d, &c, 8, 1) == 6, "fixed: a miss changes nothing");
}

static void ramp(void)
{
    ms_dcost c = {0}; /* no fit: acceptance alone */
    ms_dpolicy d;
    T_CHECK(ms_dpolicy_opening(8, 1) == 8 && ms_dpolicy_opening(8, 0) == 2 && ms_dpolicy_opening(1, 0) == 1,
            "opening: the window where the trunk streams, else 2");
    ms_dpolicy_init(&d, 8, 1, 0);
    T_CHECK(ms_dpolicy_want(&d, &c, 8, 1) == 2, "auto opens at 2 with the trunk pinned");
    ms_dpolicy_verified(&d, &c, 2, 2);
    T_CHECK(ms_dpolicy_want(&d, &c, 8, 1) == 8, "all right: x4 (capped at the window): %d", d.k_cur);
    ms_dpolicy_verified(&d, &c, 8, 3);
    T_CHECK(ms_dpolicy_want(&d, &c, 8, 1) == 4, "3 of 8 right: just past them, 4");
    ms_dpolicy_verified(&d, &c, 4, 0);
    T_CHECK(d.k_cur == 1 && !d.pause, "a miss quarters: 4 -> 1");
    /* misses at 1: pauses of 1, 4, 16, 64, 256, 256 passes (before a fit the probe gap is 1) */
    int want[6] = {1, 4, 16, 64, 256, 256}, ok = 1;
    for (int m = 0; m < 6; m++) {
        ms_dpolicy_verified(&d, &c, 1, 0);
        int n = 0;
        while (ms_dpolicy_paused(&d)) n++;
        ok &= n == want[m] && d.k_cur == 1;
    }
    T_CHECK(ok, "consecutive misses pause 1, 4, 16, 64, 256, 256 passes, then one draft");
    ms_dpolicy_verified(&d, &c, 1, 1);
    T_CHECK(d.backoff == 1 && d.k_cur == 4, "a hit ends the backoff and ramps again (%d, %d)", d.backoff, d.k_cur);
}

static void costed(void)
{
    /* passes cost 1 s plus 0.01 s a row (the trunk streamed): drafts are cheap, a right one pays */
    ms_dcost c = {0};
    for (int i = 0; i < 12; i++) ms_dcost_add(&c, 1 + i % 4, 1.0 + 0.01 * (1 + i % 4));
    double a, b;
    T_CHECK(ms_dcost_fit(&c, &a, &b) == 0, "the fit");
    ms_dpolicy d;
    ms_dpolicy_init(&d, 8, 1, 1);
    for (int i = 0; i < 10; i++) ms_dpolicy_verified(&d, &c, 8, 8);
    int64_t k = ms_dpolicy_want(&d, &c, 8, 1);
    T_CHECK(k == ms_dcost_best_k((d.acc_w + 0.5) / (d.acc_w + d.miss_w + 1), a, b, 1, 8) && k >= 4,
            "with a fit, the count that pays best for the acceptance so far (%lld)", (long long)k);
    /* rows as dear as a pass (the trunk pinned): after misses no draft pays; a pause, then a probe */
    ms_dcost dear = {0};
    for (int i = 0; i < 12; i++) ms_dcost_add(&dear, 1 + i % 4, 0.01 + 1.0 * (1 + i % 4));
    ms_dpolicy m;
    ms_dpolicy_init(&m, 8, 1, 0);
    for (int i = 0; i < 20; i++) ms_dpolicy_verified(&m, &dear, 1, 0);
    m.pause = 0, m.backoff = 1;
    T_CHECK(ms_dpolicy_want(&m, &dear, 8, 1) == 0 && m.probe && m.pause >= 1, "nothing pays: none, a pause (%d)", m.pause);
    while (ms_dpolicy_paused(&m)) {}
    T_CHECK(ms_dpolicy_want(&m, &dear, 8, 1) == 1 && !m.probe, "after the pause, one draft probes");
}

int main(void)
{
    fixed();
    ramp();
    costed();
    return ms_t_done();
}
