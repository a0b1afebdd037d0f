/* ms_rope: the inverse-frequency tables (plain, YaRN) and the rotation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_rope.h"

static int check(int head_dim, double theta)
{
    if (head_dim <= 0 || head_dim % 2) return ms_err_set("rotary embedding: head dimension %d is not even and positive", head_dim);
    if (!(theta > 1.0)) return ms_err_set("rotary embedding: rope_theta %g is not above 1", theta);
    return 0;
}

int ms_rope_init_plain(ms_rope *r, int head_dim, double theta)
{
    memset(r, 0, sizeof *r);
    if (check(head_dim, theta) != 0) return -1;
    r->half = head_dim / 2;
    r->concentration = 1.0f;
    r->inv_freq = ms_malloc(sizeof(float) * (size_t)r->half);
    for (int i = 0; i < r->half; i++) r->inv_freq[i] = 1.0f / powf((float)theta, (float)(2 * i) / (float)head_dim);
    return 0;
}

int ms_rope_init_yarn(ms_rope *r, int head_dim, double theta, double factor, double orig_ctx, double beta_fast,
                      double beta_slow)
{
    memset(r, 0, sizeof *r);
    if (check(head_dim, theta) != 0) return -1;
    if (!(factor >= 1.0) || !(orig_ctx > 0) || !(beta_fast > 0) || !(beta_slow > 0) || beta_fast == beta_slow)
        return ms_err_set("rotary embedding: YaRN factor %g, original context %g, betas %g and %g are not a scaling",
                          factor, orig_ctx, beta_fast, beta_slow);
    int d = head_dim, half = d / 2;
    r->half = half;
    r->inv_freq = ms_malloc(sizeof(float) * (size_t)half);
    double s = factor, base = theta, L0 = orig_ctx;
    r->concentration = (float)(0.1 * log(s) + 1.0);
    double low = half * log(L0 / (beta_fast * 2 * M_PI)) / log(base);
    double high = half * log(L0 / (beta_slow * 2 * M_PI)) / log(base);
    for (int i = 0; i < half; i++) {
        float freq = powf((float)base, (float)(2 * i) / (float)d);
        float interp = 1.0f / ((float)s * freq), extrap = 1.0f / freq;
        float ramp = (float)(((double)i - low) / (high - low));
        float mask = 1.0f - (ramp < 0 ? 0 : ramp > 1 ? 1 : ramp);
        r->inv_freq[i] = interp * (1.0f - mask) + extrap * mask;
    }
    return 0;
}

int ms_rope_init_deepseek_yarn(ms_rope *r, int head_dim, double theta, double factor, double orig_ctx,
                               double beta_fast, double beta_slow)
{
    memset(r, 0, sizeof *r);
    if (check(head_dim, theta) != 0) return -1;
    if (!(factor >= 1.0) || !(orig_ctx > 0) || !(beta_fast > 0) || !(beta_slow > 0))
        return ms_err_set("rotary embedding: YaRN factor %g, original context %g, betas %g and %g are not a scaling",
                          factor, orig_ctx, beta_fast, beta_slow);
    int d = head_dim, half = d / 2;
    r->half = half;
    r->concentration = 1.0f;
    r->interleaved = 1;
    r->inv_freq = ms_malloc(sizeof(float) * (size_t)half);
    double lo = floor(d * log(orig_ctx / (beta_fast * 2 * M_PI)) / (2 * log(theta)));
    double hi = ceil(d * log(orig_ctx / (beta_slow * 2 * M_PI)) / (2 * log(theta)));
    if (lo < 0) lo = 0;
    if (hi > half - 1) hi = half - 1;
    if (lo == hi) hi += 0.001;
    for (int i = 0; i < half; i++) {
        float f = 1.0f / powf((float)theta, (float)(2 * i) / (float)d);
        /* in float32 as the reference: smooth = 1 - ramp, f / factor * (1 - smooth) + f * smooth */
        float ramp = ((float)i - (float)lo) / ((float)hi - (float)lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        float smooth = 1.0f - ramp;
        r->inv_freq[i] = f / (float)factor * (1.0f - smooth) + f * smooth;
    }
    return 0;
}

double ms_rope_mscale(double factor, double mscale) { return factor <= 1.0 ? 1.0 : 0.1 * mscale * log(factor) + 1.0; }

void ms_rope_free(ms_rope *r)
{
    if (!r) return;
    free(r->inv_freq);
    memset(r, 0, sizeof *r);
}

void ms_rope_apply(const ms_rope *r, float *x, int heads, int64_t stride, int64_t pos)
{
    int half = r->half;
    for (int i = 0; i < half; i++) {
        float ang = (float)pos * r->inv_freq[i];
        float cs = cosf(ang) * r->concentration, sn = sinf(ang) * r->concentration;
        int ia = r->interleaved ? 2 * i : i, ib = r->interleaved ? 2 * i + 1 : i + half;
        for (int h = 0; h < heads; h++) {
            float *xh = x + (size_t)h * (size_t)stride;
            float x1 = xh[ia], x2 = xh[ib];
            xh[ia] = x1 * cs - x2 * sn;
            xh[ib] = x2 * cs + x1 * sn;
        }
    }
}
