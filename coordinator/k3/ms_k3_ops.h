/* ms_k3_ops: Kimi K3's own small ops: the heads' L2 norm, the short convolution, AttnRes (its spec §3.2, 3.4, 3.10). */
#ifndef MS_K3_OPS_H
#define MS_K3_OPS_H

#include <stdint.h>

/* L2 normalisation of an attention head (K3 spec §3.2), in place: x / sqrt(sum x^2 + 1e-6). */
void ms_k3_l2norm(float *x, int64_t n);

/* One token of the causal depthwise short convolution with fused SiLU (K3 spec §3.4).
 * w: float[C][K] taps (tap K-1 multiplies the current input); hist: float[C][K-1], the previous
 * K-1 raw inputs oldest first, updated in place; x, y: float[C]. */
void ms_k3_shortconv_step(const float *w, int64_t C, int K, float *hist, const float *x, float *y);

/* AttnRes aggregation (K3 spec §3.10) for one token. srcs[0..n-1]: the n sources (snapshots oldest
 * first, then the prefix), each float[E]. fold: float[E] = norm gain * proj. out: float[E]
 * (must not alias a source). */
void ms_k3_attnres(const float *const *srcs, int n, int64_t E, const float *fold, float eps, float *out);

#endif
