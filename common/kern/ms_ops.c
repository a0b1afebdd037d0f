/* ms_ops: RMSNorm, L2 norm, SiTU-GLU, short convolution, gated MLP, router selection, AttnRes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ms_act.h"
#include "ms_err.h"
#include "ms_scratch.h"
#include "ms_ops.h"

void ms_rmsnorm(const float *x, const float *w, int64_t n, float eps, float *y)
{
    MS_ASSERT(n > 0);
    double ss = ms_dot_f32(x, x, n);
    float r = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (int64_t i = 0; i < n; i++) {
        float v = x[i] * r;
        y[i] = w ? w[i] * v : v;
    }
}

void ms_glu_mlp_ws(const ms_mat *gate, const ms_mat *up, const ms_mat *down, float b1, float b2, const float *x,
                   int64_t T, float *y, float *work, ms_pool *pool)
{
    MS_ASSERT(gate->rows == up->rows && gate->cols == up->cols && down->cols == gate->rows);
    int64_t I = gate->rows;
    float *g = work;         /* [T][I] */
    float *u = work + T * I; /* [T][I] */
    ms_matmul(gate, x, T, g, pool);
    ms_matmul(up, x, T, u, pool);
    ms_act_situ_rows(g, u, T * I, b1, b2, g);
    ms_matmul(down, g, T, y, pool);
}

void ms_glu_mlp(const ms_mat *gate, const ms_mat *up, const ms_mat *down, float b1, float b2, const float *x,
                int64_t T, float *y, ms_pool *pool)
{
    float *work = ms_scratch_push(sizeof(float) * (size_t)(2 * T * gate->rows + 1)); /* [2][T][I] */
    ms_glu_mlp_ws(gate, up, down, b1, b2, x, T, y, work, pool);
    ms_scratch_pop(work);
}

float ms_swiglu_clamp(float gate, float up, float alpha, float limit)
{
    float g = gate < limit ? gate : limit;                   /* clamped above only */
    float u = up < -limit ? -limit : (up > limit ? limit : up);
    float sg = 1.0f / (1.0f + expf(-alpha * g));
    return g * sg * (u + 1.0f);
}

float ms_swiglu(float g, float u) { return (g * ms_act_sigmoid(g)) * u; }

void ms_swiglu_mlp(const ms_mat *gate, const ms_mat *up, const ms_mat *down, const float *x, int64_t T, float *y,
                   ms_pool *pool)
{
    MS_ASSERT(gate->rows == up->rows && gate->cols == up->cols && down->cols == gate->rows);
    int64_t I = gate->rows;
    float *g = ms_scratch_push(sizeof(float) * (size_t)(2 * T * I + 1)); /* [2][T][I]: gate, up */
    float *u = g + T * I;
    ms_matmul(gate, x, T, g, pool);
    ms_matmul(up, x, T, u, pool);
    for (int64_t i = 0; i < T * I; i++) g[i] = ms_swiglu(g[i], u[i]);
    ms_matmul(down, g, T, y, pool);
    ms_scratch_pop(g);
}

void ms_swiglu_clamp_mlp(const ms_mat *gate_up, const float *bgu, const ms_mat *down, const float *bd, float alpha,
                         float limit, const float *x, int64_t T, float *y, ms_pool *pool)
{
    MS_ASSERT(gate_up->rows % 2 == 0 && down->cols == gate_up->rows / 2);
    int64_t I2 = gate_up->rows, I = I2 / 2, O = down->rows;
    float *h = ms_scratch_push(sizeof(float) * (size_t)(T * I2 + 1)); /* [T][2I] */
    float *a = ms_scratch_push(sizeof(float) * (size_t)(T * I + 1));  /* [T][I] */
    ms_matmul(gate_up, x, T, h, pool);
    for (int64_t t = 0; t < T; t++) {
        float *ht = h + t * I2;
        if (bgu)
            for (int64_t i = 0; i < I2; i++) ht[i] += bgu[i];
        for (int64_t j = 0; j < I; j++) a[t * I + j] = ms_swiglu_clamp(ht[2 * j], ht[2 * j + 1], alpha, limit);
    }
    ms_matmul(down, a, T, y, pool);
    if (bd)
        for (int64_t t = 0; t < T; t++)
            for (int64_t o = 0; o < O; o++) y[t * O + o] += bd[o];
    ms_scratch_pop(a);
    ms_scratch_pop(h);
}
