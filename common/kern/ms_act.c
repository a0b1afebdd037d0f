/* ms_act: exp and tanh as fixed sequences in double, sigmoid and SiTU-GLU over them, scalar and SIMD alike (ms_act.h). */
#include <math.h>
#include <string.h>

#include "ms_act.h"
#include "ms_kern_int.h"

/* exp and tanh run in double and are rounded to float once: the nearest float but where the
 * exact value lies within about 2^-40 of a halfway point (test_act measures). In double nothing
 * overflows: arguments are clamped to +-200 (e^200 is about 7e86), far past where every result
 * saturates in float.
 *
 * exp(x) = 2^n e^r, n = round(x / ln 2), r = x - n ln 2 in two fused steps (|r| <= ln 2 / 2),
 * e^r by its Taylor series to r^10 (the first term left out is under 2^-41 of the result).
 * n comes from adding 1.5 * 2^52, whose double has a spacing of 1: the sum's rounding is
 * round-to-nearest-even of x / ln 2, and its low bits are n. */
#define ACT_CLAMP 200.0
#define ACT_MAGIC 0x1.8p52
#define ACT_LOG2E 0x1.71547652b82fep+0
#define ACT_LN2_HI 0x1.62e42fefa39efp-1
#define ACT_LN2_LO 0x1.abc9e3b39803fp-56
#define ACT_E2 0x1p-1
#define ACT_E3 0x1.5555555555555p-3
#define ACT_E4 0x1.5555555555555p-5
#define ACT_E5 0x1.1111111111111p-7
#define ACT_E6 0x1.6c16c16c16c17p-10
#define ACT_E7 0x1.a01a01a01a01ap-13
#define ACT_E8 0x1.a01a01a01a01ap-16
#define ACT_E9 0x1.71de3a556c734p-19
#define ACT_E10 0x1.27e4fb7789f5cp-22
/* tanh(x) = sign(x) tanh(|x|), tanh(a) = a + a^3 (T3 + a^2 (T5 + ...)) for a < 0.25 (Taylor to
 * a^13: the next term is under 2^-37 of the result there), else 1 - 2 / (e^2a + 1). */
#define ACT_TANH_SMALL 0.25
#define ACT_T3 (-0x1.5555555555555p-2)
#define ACT_T5 0x1.1111111111111p-3
#define ACT_T7 (-0x1.ba1ba1ba1ba1cp-5)
#define ACT_T9 0x1.664f4882c10fap-6
#define ACT_T11 (-0x1.226e355e6c23dp-7)
#define ACT_T13 0x1.d6d3d0e157de0p-9

static inline uint64_t d2u(double f)
{
    uint64_t u;
    memcpy(&u, &f, 8);
    return u;
}

static inline double u2d(uint64_t u)
{
    double f;
    memcpy(&f, &u, 8);
    return f;
}

static double exp_d(double x)
{
    x = ACT_CLAMP < x ? ACT_CLAMP : x; /* comparisons false for NaN: it passes through */
    x = -ACT_CLAMP > x ? -ACT_CLAMP : x;
    double t = fma(x, ACT_LOG2E, ACT_MAGIC);
    double n = t - ACT_MAGIC;
    double r = fma(n, -ACT_LN2_HI, x);
    r = fma(n, -ACT_LN2_LO, r);
    double p = ACT_E10;
    p = fma(p, r, ACT_E9);
    p = fma(p, r, ACT_E8);
    p = fma(p, r, ACT_E7);
    p = fma(p, r, ACT_E6);
    p = fma(p, r, ACT_E5);
    p = fma(p, r, ACT_E4);
    p = fma(p, r, ACT_E3);
    p = fma(p, r, ACT_E2);
    p = fma(p, r, 1.0);
    p = fma(p, r, 1.0);
    /* n from -289 to 289 (NaN: any bits; p is NaN then) */
    return p * u2d((d2u(t) - d2u(ACT_MAGIC) + 1023) << 52);
}

/* tanh of a >= 0 (or NaN) */
static double tanh_pos(double a)
{
    if (a < ACT_TANH_SMALL) {
        double z = a * a;
        double p = ACT_T13;
        p = fma(p, z, ACT_T11);
        p = fma(p, z, ACT_T9);
        p = fma(p, z, ACT_T7);
        p = fma(p, z, ACT_T5);
        p = fma(p, z, ACT_T3);
        return fma(a * z, p, a);
    }
    return 1.0 - 2.0 / (exp_d(2.0 * a) + 1.0);
}

float ms_act_exp(float x) { return (float)exp_d((double)x); }

float ms_act_tanh(float x)
{
    double d = (double)x;
    return (float)copysign(tanh_pos(fabs(d)), d); /* of |x|, then the sign: odd, tanh(-0) = -0 */
}

float ms_act_sigmoid(float x) { return 1.0f / (1.0f + ms_act_exp(-x)); }

/* SiTU in float, step by step as its formula reads (each product and quotient rounded to
 * float), with exp and tanh rounded once from double. Done wholly in double instead, it was more
 * accurate but moved the Kimi K3 moe fixture's worst element (heavy cancellation in the down
 * projection) past its tolerance; this way it passes, as the libm version did. */
float ms_act_situ(float g, float u, float b1, float b2)
{
    float a = b1 * ms_act_tanh(g / b1) * ms_act_sigmoid(g);
    float b = b2 * ms_act_tanh(u / b2);
    return a * b;
}

static void situ_scalar(const float *g, const float *u, int64_t n, float b1, float b2, float *out)
{
    for (int64_t i = 0; i < n; i++) out[i] = ms_act_situ(g[i], u[i], b1, b2);
}

#if MS_KERN_X86
/* The same sequences, 4 doubles a lane group (AVX2) and 8 (AVX-512); both branches of tanh are
 * computed and one is picked per lane. min/max take the constant first: with a NaN lane they
 * return their second operand, x, as the scalar comparisons do. */
#define ACT_SIMD(P, VD, VI, SET1, FMA, MIN, MAX, SUB, ADD, MUL, DIV, CAST_DI, CAST_ID, ADD64, SUB64, SLL64)      \
    MS_SIMD_ATTR static inline VD P##_exp(VD x)                                                                  \
    {                                                                                                            \
        x = MIN(SET1(ACT_CLAMP), x);                                                                             \
        x = MAX(SET1(-ACT_CLAMP), x);                                                                            \
        VD t = FMA(x, SET1(ACT_LOG2E), SET1(ACT_MAGIC));                                                         \
        VD n = SUB(t, SET1(ACT_MAGIC));                                                                          \
        VD r = FMA(n, SET1(-ACT_LN2_HI), x);                                                                     \
        r = FMA(n, SET1(-ACT_LN2_LO), r);                                                                        \
        VD p = SET1(ACT_E10);                                                                                    \
        p = FMA(p, r, SET1(ACT_E9));                                                                             \
        p = FMA(p, r, SET1(ACT_E8));                                                                             \
        p = FMA(p, r, SET1(ACT_E7));                                                                             \
        p = FMA(p, r, SET1(ACT_E6));                                                                             \
        p = FMA(p, r, SET1(ACT_E5));                                                                             \
        p = FMA(p, r, SET1(ACT_E4));                                                                             \
        p = FMA(p, r, SET1(ACT_E3));                                                                             \
        p = FMA(p, r, SET1(ACT_E2));                                                                             \
        p = FMA(p, r, SET1(1.0));                                                                                \
        p = FMA(p, r, SET1(1.0));                                                                                \
        VI k = ADD64(SUB64(CAST_DI(t), CAST_DI(SET1(ACT_MAGIC))), P##_i1023());                                  \
        return MUL(p, CAST_ID(SLL64(k, 52)));                                                                    \
    }                                                                                                            \
    MS_SIMD_ATTR static inline VD P##_tanh_pos(VD a)                                                             \
    {                                                                                                            \
        VD z = MUL(a, a);                                                                                        \
        VD p = SET1(ACT_T13);                                                                                    \
        p = FMA(p, z, SET1(ACT_T11));                                                                            \
        p = FMA(p, z, SET1(ACT_T9));                                                                             \
        p = FMA(p, z, SET1(ACT_T7));                                                                             \
        p = FMA(p, z, SET1(ACT_T5));                                                                             \
        p = FMA(p, z, SET1(ACT_T3));                                                                             \
        VD small = FMA(MUL(a, z), p, a);                                                                         \
        VD big = SUB(SET1(1.0), DIV(SET1(2.0), ADD(P##_exp(MUL(SET1(2.0), a)), SET1(1.0))));                     \
        return P##_pick_small(a, small, big);                                                                    \
    }                                                                                                            \
    /* tanh of doubles holding floats, signed */                                                              \
    MS_SIMD_ATTR static inline VD P##_tanh(VD x) { return P##_copysign(P##_tanh_pos(P##_abs(x)), x); }

#define MS_SIMD_ATTR MS_AVX2
MS_AVX2 static inline __m256i a2_i1023(void) { return _mm256_set1_epi64x(1023); }
MS_AVX2 static inline __m256d a2_abs(__m256d x) { return _mm256_andnot_pd(_mm256_set1_pd(-0.0), x); }
MS_AVX2 static inline __m256d a2_neg(__m256d x) { return _mm256_xor_pd(_mm256_set1_pd(-0.0), x); }
MS_AVX2 static inline __m256d a2_copysign(__m256d m, __m256d s)
{
    const __m256d sign = _mm256_set1_pd(-0.0);
    return _mm256_or_pd(_mm256_andnot_pd(sign, m), _mm256_and_pd(sign, s));
}
MS_AVX2 static inline __m256d a2_pick_small(__m256d a, __m256d small, __m256d big)
{
    return _mm256_blendv_pd(big, small, _mm256_cmp_pd(a, _mm256_set1_pd(ACT_TANH_SMALL), _CMP_LT_OQ));
}
ACT_SIMD(a2, __m256d, __m256i, _mm256_set1_pd, _mm256_fmadd_pd, _mm256_min_pd, _mm256_max_pd, _mm256_sub_pd,
         _mm256_add_pd, _mm256_mul_pd, _mm256_div_pd, _mm256_castpd_si256, _mm256_castsi256_pd, _mm256_add_epi64,
         _mm256_sub_epi64, _mm256_slli_epi64)
#undef MS_SIMD_ATTR

/* 8 floats: each half widened to double, the function, rounded back to float */
#define ACT_A2_F(FN, X) _mm256_set_m128(_mm256_cvtpd_ps(FN(_mm256_cvtps_pd(_mm256_extractf128_ps(X, 1)))), \
                                        _mm256_cvtpd_ps(FN(_mm256_cvtps_pd(_mm256_castps256_ps128(X)))))
MS_AVX2 static inline __m256d a2_nexp(__m256d x) { return a2_exp(a2_neg(x)); }

MS_AVX2 static void situ_avx2(const float *g, const float *u, int64_t n, float b1, float b2, float *out)
{
    const __m256 B1 = _mm256_set1_ps(b1), B2 = _mm256_set1_ps(b2), one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i), uv = _mm256_loadu_ps(u + i);
        __m256 ta = ACT_A2_F(a2_tanh, _mm256_div_ps(gv, B1)), tb = ACT_A2_F(a2_tanh, _mm256_div_ps(uv, B2));
        __m256 sg = _mm256_div_ps(one, _mm256_add_ps(one, ACT_A2_F(a2_nexp, gv)));
        __m256 a = _mm256_mul_ps(_mm256_mul_ps(B1, ta), sg), b = _mm256_mul_ps(B2, tb);
        _mm256_storeu_ps(out + i, _mm256_mul_ps(a, b));
    }
    situ_scalar(g + i, u + i, n - i, b1, b2, out + i);
}

#define MS_AVX512 __attribute__((target("avx512f,avx2,fma")))
#define MS_SIMD_ATTR MS_AVX512
MS_AVX512 static inline __m512i z_i1023(void) { return _mm512_set1_epi64(1023); }
/* sign-bit operations on the integer view (the _pd forms are AVX512DQ, beyond the path's needs) */
#define ACT_Z_BITS(OP, A, B) _mm512_castsi512_pd(OP(_mm512_castpd_si512(A), _mm512_castpd_si512(B)))
MS_AVX512 static inline __m512d z_abs(__m512d x) { return ACT_Z_BITS(_mm512_andnot_si512, _mm512_set1_pd(-0.0), x); }
MS_AVX512 static inline __m512d z_neg(__m512d x) { return ACT_Z_BITS(_mm512_xor_si512, _mm512_set1_pd(-0.0), x); }
MS_AVX512 static inline __m512d z_copysign(__m512d m, __m512d s)
{
    const __m512d sign = _mm512_set1_pd(-0.0);
    return ACT_Z_BITS(_mm512_or_si512, ACT_Z_BITS(_mm512_andnot_si512, sign, m), ACT_Z_BITS(_mm512_and_si512, sign, s));
}
MS_AVX512 static inline __m512d z_pick_small(__m512d a, __m512d small, __m512d big)
{
    return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(a, _mm512_set1_pd(ACT_TANH_SMALL), _CMP_LT_OQ), big, small);
}
ACT_SIMD(z, __m512d, __m512i, _mm512_set1_pd, _mm512_fmadd_pd, _mm512_min_pd, _mm512_max_pd, _mm512_sub_pd,
         _mm512_add_pd, _mm512_mul_pd, _mm512_div_pd, _mm512_castpd_si512, _mm512_castsi512_pd, _mm512_add_epi64,
         _mm512_sub_epi64, _mm512_slli_epi64)
#undef MS_SIMD_ATTR

/* 16 floats: each half widened to double, the function, rounded back to float */
#define ACT_Z_F(FN, X)                                                                                             \
    _mm512_castpd_ps(_mm512_insertf64x4(                                                                           \
        _mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(FN(_mm512_cvtps_pd(_mm512_castps512_ps256(X)))))), \
        _mm256_castps_pd(_mm512_cvtpd_ps(FN(_mm512_cvtps_pd(                                                      \
            _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(X), 1)))))), 1))
MS_AVX512 static inline __m512d z_nexp(__m512d x) { return z_exp(z_neg(x)); }

MS_AVX512 static void situ_512(const float *g, const float *u, int64_t n, float b1, float b2, float *out)
{
    const __m512 B1 = _mm512_set1_ps(b1), B2 = _mm512_set1_ps(b2), one = _mm512_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 gv = _mm512_loadu_ps(g + i), uv = _mm512_loadu_ps(u + i);
        __m512 ta = ACT_Z_F(z_tanh, _mm512_div_ps(gv, B1)), tb = ACT_Z_F(z_tanh, _mm512_div_ps(uv, B2));
        __m512 sg = _mm512_div_ps(one, _mm512_add_ps(one, ACT_Z_F(z_nexp, gv)));
        __m512 a = _mm512_mul_ps(_mm512_mul_ps(B1, ta), sg), b = _mm512_mul_ps(B2, tb);
        _mm512_storeu_ps(out + i, _mm512_mul_ps(a, b));
    }
    situ_scalar(g + i, u + i, n - i, b1, b2, out + i);
}
#endif

void ms_act_situ_rows(const float *g, const float *u, int64_t n, float b1, float b2, float *out)
{
#if MS_KERN_X86
    int level = ms_cpu_level();
    if (level == MS_SIMD_AVX512) {
        situ_512(g, u, n, b1, b2, out);
        return;
    }
    if (level == MS_SIMD_AVX2) {
        situ_avx2(g, u, n, b1, b2, out);
        return;
    }
#endif
    situ_scalar(g, u, n, b1, b2, out);
}
