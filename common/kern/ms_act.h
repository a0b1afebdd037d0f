/* ms_act: the activations' exp, tanh and sigmoid, and SiTU-GLU over arrays, one formula on every path. */
#ifndef MS_ACT_H
#define MS_ACT_H

#include <stdint.h>

/* Contract. exp and tanh are each one fixed sequence of IEEE double-precision operations (adds,
 * multiplies, divisions, explicit fused multiply-adds and exact bit operations) on the float
 * argument, rounded to float once at the end; sigmoid and SiTU combine them with float
 * operations, step by step as their formulas read. Nothing calls libm's transcendentals, whose
 * bits differ between libraries and which have no vector form. The scalar, AVX2 and AVX-512
 * paths run the same sequences lane by lane, so they give the same bits for every input
 * (test_act checks every path against the scalar one).
 *
 * Accuracy (test_act sweeps a million arguments of each):
 *   ms_act_exp      the nearest float (in double the error is under 2^-40, so only a value
 *                   within that of a halfway point could round the other way); +inf above
 *                   about 88.72, 0 below about -103.97, subnormals in between;
 *   ms_act_tanh     the nearest float, as exp; exactly +-1 from |x| of about 9.01; odd;
 *   ms_act_sigmoid  within 2.5 ulp; exactly 1 above about 17.33; 0 below about -88.72, where
 *                   e^-x overflows (the exact value is under 2^-127 there);
 *   ms_act_situ     within 3e-7 of the exact formula, relatively.
 * NaN in gives NaN out (its payload is not promised). */
float ms_act_exp(float x);
float ms_act_tanh(float x);
float ms_act_sigmoid(float x); /* 1 / (1 + exp(-x)) in float */

/* SiTU-GLU (spec §3.3) of gate g and up u: ((b1 * tanh(g / b1)) * sigmoid(g)) * (b2 * tanh(u / b2))
 * in float, the sigmoid of the uncapped gate (spec trap 9). */
float ms_act_situ(float g, float u, float b1, float b2);

/* out[i] = ms_act_situ(g[i], u[i], b1, b2) for i < n, on the kernel path selected (ms_cpu_level).
 * out may be g or u itself; otherwise no overlap. */
void ms_act_situ_rows(const float *g, const float *u, int64_t n, float b1, float b2, float *out);

#endif
