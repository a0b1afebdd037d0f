/* ms_rope: rotary position embeddings (half split or interleaved pairs), plain or with YaRN's scaling. */
#ifndef MS_ROPE_H
#define MS_ROPE_H

#include <stdint.h>

/* The rotation's table; owns inv_freq. */
typedef struct {
    float *inv_freq;     /* [head_dim / 2] inverse frequencies (float32, as the references) */
    int half;            /* head_dim / 2 */
    float concentration; /* each cos and sin times this (YaRN's attention scaling; 1 plain) */
    int interleaved;     /* 0: dimension i turns with i + d/2 (NeoX, gpt-oss, Qwen3); 1: with its
                            neighbour, pairs (2i, 2i + 1) (DeepSeek-V3, Kimi K2) */
} ms_rope;

/* theta^(-2i/d) for i < d/2, float32 as the references compute it. Returns 0, or -1 with ms_err
 * (an odd or non-positive head_dim, theta <= 1). */
int ms_rope_init_plain(ms_rope *r, int head_dim, double theta);
/* YaRN (gpt-oss's spec §3.2): inverse frequencies blended between interpolated (1/factor) and
 * extrapolated by a ramp over the dimensions whose wavelengths lie between orig_ctx / beta_fast
 * and orig_ctx / beta_slow rotations; concentration 0.1 ln(factor) + 1. */
int ms_rope_init_yarn(ms_rope *r, int head_dim, double theta, double factor, double orig_ctx, double beta_fast,
                      double beta_slow);
/* DeepSeek-V3's YaRN (its spec §3.4), interleaved pairs: f_i = theta^(-2i/d) divided by factor
 * past a ramp from floor(corr(beta_fast)) to ceil(corr(beta_slow)), corr(b) = d ln(orig_ctx /
 * (2 pi b)) / (2 ln theta); no concentration (the model scales its scores instead: ms_rope_mscale). */
int ms_rope_init_deepseek_yarn(ms_rope *r, int head_dim, double theta, double factor, double orig_ctx,
                               double beta_fast, double beta_slow);
/* YaRN's magnitude correction m = 0.1 mscale ln(factor) + 1 (1 for factor <= 1). */
double ms_rope_mscale(double factor, double mscale);
void ms_rope_free(ms_rope *r); /* accepts NULL and a zeroed table */

/* Rotates `heads` heads at position pos in place: head h is x + h * stride, each pair (a, b)
 * (i and i + d/2, or 2i and 2i + 1) turned to (a cos - b sin, b cos + a sin); the angle
 * pos * inv_freq[i] is a float32 product, as the references' tables. */
void ms_rope_apply(const ms_rope *r, float *x, int heads, int64_t stride, int64_t pos);

#endif
