/* ms_dcost: the pass-time fit and the best draft count (see ms_dcost.h). */
#include "ms_dcost.h"

#include <math.h>

#include "ms_err.h"

void ms_dcost_add(ms_dcost *c, int64_t rows, double seconds)
{
    MS_ASSERT(rows > 0 && seconds >= 0);
    double x = (double)rows;
    c->w = MS_DCOST_DECAY * c->w + 1;
    c->x = MS_DCOST_DECAY * c->x + x;
    c->y = MS_DCOST_DECAY * c->y + seconds;
    c->xx = MS_DCOST_DECAY * c->xx + x * x;
    c->xy = MS_DCOST_DECAY * c->xy + x * seconds;
    c->n++;
}

int ms_dcost_fit(const ms_dcost *c, double *a, double *b)
{
    if (c->n < 3 || c->w <= 0) return -1;
    double mx = c->x / c->w, my = c->y / c->w;
    double vx = c->xx / c->w - mx * mx, cxy = c->xy / c->w - mx * my;
    /* The rows must vary by a fair fraction of a row (weighted): else the slope is noise. */
    if (!(vx > 0.05)) return -1;
    double bb = cxy / vx;
    if (bb < 0) bb = 0; /* more rows never make a pass faster; noise can say so */
    double aa = my - bb * mx;
    if (aa < 0) aa = 0;
    *a = aa;
    *b = bb;
    return 0;
}

double ms_dcost_expected(double p, int k)
{
    double e = 1, pj = 1;
    for (int j = 1; j <= k; j++) {
        pj *= p;
        e += pj;
    }
    return e;
}

int ms_dcost_probe_gap(double a, double b)
{
    MS_ASSERT(a >= 0 && b >= 0);
    if (!(a + b > 0)) return 1;
    double g = ceil(b / (a + b) / MS_DCOST_PROBE_SHARE - 1e-9);
    return g < 1 ? 1 : g > 256 ? 256 : (int)g;
}

int ms_dcost_best_k(double p, double a, double b, int64_t n_base, int kmax)
{
    MS_ASSERT(n_base >= 1 && kmax >= 0);
    double t0 = a + b * (double)n_base;
    if (!(t0 > 0)) return kmax; /* a free pass: any right draft is a gain */
    double best = (double)n_base / t0;
    int bk = 0;
    for (int k = 1; k <= kmax; k++) {
        double v = ((double)n_base - 1 + ms_dcost_expected(p, k)) / (a + b * (double)(n_base + k));
        if (v > best * 1.01) {
            best = v;
            bk = k;
        }
    }
    return bk;
}
