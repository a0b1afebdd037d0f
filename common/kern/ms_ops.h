/* ms_ops: elementwise and small ops the families share (RMSNorm, activations, the gated MLPs). */
#ifndef MS_OPS_H
#define MS_OPS_H

#include <stdint.h>

#include "ms_kern.h"
#include "ms_pool.h"

/* RMSNorm (spec §3.1): y[i] = w[i] * (x[i] * r), r = 1/sqrt(mean(x^2) + eps), sum of squares
 * in double in canonical order, r rounded to float. w may be NULL (unit gain). y may alias x. */
void ms_rmsnorm(const float *x, const float *w, int64_t n, float eps, float *y);

static inline float ms_sigmoid(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }
static inline float ms_silu(float x) { return x * ms_sigmoid(x); }

/* Gated MLP y = down * SiTU(gate * x, up * x) for T rows (spec §3.8/3.9 shared and dense MLP,
 * and one routed expert). x: float[T][gate->cols]; y: float[T][down->rows]; gate and up have
 * the same shape [I, cols]; down is [rows, I]. */
void ms_glu_mlp(const ms_mat *gate, const ms_mat *up, const ms_mat *down, float b1, float b2, const float *x,
                int64_t T, float *y, ms_pool *pool);
/* The clamped SwiGLU MLP of gpt-oss's experts (its spec §3.4) for T rows: h = gate_up x + bgu
 * [2I] with gate and up rows interleaved (h[2j] gate, h[2j+1] up), gate = min(h[2j], limit),
 * up = clamp(h[2j+1], -limit, limit), a_j = gate * sigmoid(alpha * gate) * (up + 1), then
 * y = down a + bd. x: float[T][gate_up->cols]; y: float[T][down->rows]; biases may be NULL. */
void ms_swiglu_clamp_mlp(const ms_mat *gate_up, const float *bgu, const ms_mat *down, const float *bd, float alpha,
                         float limit, const float *x, int64_t T, float *y, ms_pool *pool);
/* One activation value of it. */
float ms_swiglu_clamp(float gate, float up, float alpha, float limit);
/* SwiGLU of gate g and up u: (g sigmoid(g)) u in float, with ms_act_sigmoid (one sequence on
 * every path). */
float ms_swiglu(float g, float u);
/* y[T][O] = down · (silu(gate · x) up · x) for x[T][L]: gate, up [I, L], down [O, I], no biases
 * (the MLPs and experts of DeepSeek-V3, Kimi K2, Qwen3-MoE). Temporaries from ms_scratch. */
void ms_swiglu_mlp(const ms_mat *gate, const ms_mat *up, const ms_mat *down, const float *x, int64_t T, float *y,
                   ms_pool *pool);
/* ms_glu_mlp with the caller's scratch: work is float[2][T][gate->rows]. */
void ms_glu_mlp_ws(const ms_mat *gate, const ms_mat *up, const ms_mat *down, float b1, float b2, const float *x,
                   int64_t T, float *y, float *work, ms_pool *pool);

#endif
