/* ms_dpolicy: fixed and adaptive draft counts, pauses and probes. */
#include "ms_dpolicy.h"

int ms_dpolicy_opening(int window, int streaming)
{
    if (streaming) return window;
    return window < 2 ? window : 2;
}

void ms_dpolicy_init(ms_dpolicy *d, int window, int automatic, int streaming)
{
    *d = (ms_dpolicy){0};
    d->window = window;
    d->automatic = automatic;
    d->k_cur = automatic ? ms_dpolicy_opening(window, streaming) : window;
    d->backoff = 1;
}

int ms_dpolicy_paused(ms_dpolicy *d)
{
    if (d->pause <= 0) return 0;
    d->pause--;
    return 1;
}

/* auto: passes between probes by their measured cost (ms_dcost_probe_gap); 1 before the fit. */
static int probe_gap(const ms_dcost *cost)
{
    double a, b;
    return ms_dcost_fit(cost, &a, &b) == 0 ? ms_dcost_probe_gap(a, b) : 1;
}

static void pause_after_miss(ms_dpolicy *d, int gap)
{
    d->pause = d->backoff > gap ? d->backoff : gap;
    d->backoff = 4 * d->backoff < 256 ? 4 * d->backoff : 256;
}

int64_t ms_dpolicy_want(ms_dpolicy *d, const ms_dcost *cost, int64_t kmax, int64_t n_base)
{
    if (!d->automatic) return d->window;
    double a, b;
    if (d->probe) {
        d->probe = 0;
        return 1;
    }
    if (ms_dcost_fit(cost, &a, &b) != 0) return d->k_cur;
    double p = (d->acc_w + 0.5) / (d->acc_w + d->miss_w + 1); /* a light prior: ten right drafts give 0.95 */
    int k = ms_dcost_best_k(p, a, b, n_base, (int)(kmax < d->window ? kmax : d->window));
    if (k == 0) {
        pause_after_miss(d, ms_dcost_probe_gap(a, b));
        d->probe = 1;
    }
    return k;
}

void ms_dpolicy_verified(ms_dpolicy *d, const ms_dcost *cost, int k, int acc)
{
    if (!d->automatic || k <= 0) return;
    int W = d->window;
    d->acc_w = 0.98 * d->acc_w + acc;
    d->miss_w = 0.98 * d->miss_w + (acc < k);
    if (acc == k) {
        d->k_cur = 4 * d->k_cur < W ? 4 * d->k_cur : W;
        d->backoff = 1;
    } else if (acc > 0) {
        d->k_cur = acc + 1 < W ? acc + 1 : W;
        d->backoff = 1;
    } else if ((d->k_cur /= 4) == 0) {
        pause_after_miss(d, probe_gap(cost));
        d->k_cur = 1;
    }
}
