/* ms_k3_ops: the heads' L2 norm, the fused-SiLU short convolution, AttnRes. */
#include <math.h>
#include <string.h>

#include "ms_err.h"
#include "ms_k3_ops.h"
#include "ms_kern.h"
#include "ms_ops.h"
#include "ms_scratch.h"

void ms_k3_l2norm(float *x, int64_t n)
{
    double ss = ms_dot_f32(x, x, n);
    float r = (float)(1.0 / sqrt(ss + 1e-6));
    for (int64_t i = 0; i < n; i++) x[i] *= r;
}

void ms_k3_shortconv_step(const float *w, int64_t C, int K, float *hist, const float *x, float *y)
{
    int H = K - 1;
    for (int64_t c = 0; c < C; c++) {
        const float *wc = w + c * K;
        float *hc = hist + c * H;
        double pre = 0.0;
        for (int j = 0; j < H; j++) pre += (double)wc[j] * (double)hc[j];
        pre += (double)wc[H] * (double)x[c];
        y[c] = ms_silu((float)pre);
        if (H > 0) {
            memmove(hc, hc + 1, sizeof(float) * (size_t)(H - 1));
            hc[H - 1] = x[c];
        }
    }
}

void ms_k3_attnres(const float *const *srcs, int n, int64_t E, const float *fold, float eps, float *out)
{
    MS_ASSERT(n >= 1 && n <= 64);
    double score[64], pi[64];
    float *tmp = ms_scratch_push(sizeof(float) * (size_t)E); /* [E] normalised key */
    double mx = -INFINITY;
    for (int s = 0; s < n; s++) {
        ms_rmsnorm(srcs[s], NULL, E, eps, tmp);
        score[s] = (double)(float)ms_dot_f32(tmp, fold, E);
        if (score[s] > mx) mx = score[s];
    }
    double sum = 0.0;
    for (int s = 0; s < n; s++) {
        pi[s] = exp(score[s] - mx);
        sum += pi[s];
    }
    for (int s = 0; s < n; s++) pi[s] /= sum;
    for (int64_t i = 0; i < E; i++) {
        double acc = 0.0;
        for (int s = 0; s < n; s++) acc += pi[s] * (double)srcs[s][i];
        out[i] = (float)acc;
    }
    ms_scratch_pop(tmp);
}
