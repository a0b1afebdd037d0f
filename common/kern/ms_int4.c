/* ms_int4: the exact dequantisation of symmetric group-32 INT4 weights with BF16 scales, scalar and SIMD. */
#include <string.h>

#include "ms_cpu.h"
#include "ms_err.h"
#include "ms_int4.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define MS_KERN_X86 1
#include <immintrin.h>
#define MS_AVX2 __attribute__((target("avx2,fma")))         /* this function only: chosen at run time */
#define MS_AVX512 __attribute__((target("avx512f,avx512bw"))) /* likewise */
#else
#define MS_KERN_X86 0
#endif

/* BF16 bits -> float (exact: the high half of a float's bits). */
static float bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float ms_int4_value(unsigned u, uint16_t s) { return (float)((int)(u & 15) - 8) * bf16(s); }

/* One group of 32 columns: 16 packed bytes, its scale. */
static void group_scalar(const uint8_t *p, float s, float *o)
{
    for (int j = 0; j < 16; j++) {
        o[2 * j] = (float)((int)(p[j] & 15) - 8) * s;
        o[2 * j + 1] = (float)((int)(p[j] >> 4) - 8) * s;
    }
}

#if MS_KERN_X86
/* The 16 bytes as 32 nibbles in column order: low and high nibbles interleaved. */
MS_AVX2 static __m256i nibbles_avx2(const uint8_t *p)
{
    __m128i b = _mm_loadu_si128((const __m128i *)p), m = _mm_set1_epi8(15);
    __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    return _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
}

MS_AVX2 static void group_avx2(const uint8_t *p, float s, float *o)
{
    __m256i n = nibbles_avx2(p);
    __m256 sv = _mm256_set1_ps(s);
    __m256i eight = _mm256_set1_epi32(8);
    for (int k = 0; k < 4; k++) { /* columns 8k .. 8k+7 */
        __m128i q = k < 2 ? _mm256_castsi256_si128(n) : _mm256_extracti128_si256(n, 1);
        if (k & 1) q = _mm_srli_si128(q, 8);
        __m256i v = _mm256_sub_epi32(_mm256_cvtepu8_epi32(q), eight);
        _mm256_storeu_ps(o + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(v), sv));
    }
}

MS_AVX512 static void group_avx512(const uint8_t *p, float s, float *o)
{
    __m128i b = _mm_loadu_si128((const __m128i *)p), m = _mm_set1_epi8(15);
    __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    __m512 sv = _mm512_set1_ps(s);
    __m512i eight = _mm512_set1_epi32(8);
    __m512i v0 = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)), eight); /* columns 0..15 */
    __m512i v1 = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(lo, hi)), eight); /* 16..31 */
    _mm512_storeu_ps(o, _mm512_mul_ps(_mm512_cvtepi32_ps(v0), sv));
    _mm512_storeu_ps(o + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(v1), sv));
}
#endif

void ms_int4_dequant_rows_at(const uint8_t *packed, const uint8_t *scales, int64_t cols, int64_t r0, int64_t n,
                             float *out, int level)
{
    MS_ASSERT(r0 >= 0 && n >= 0 && cols >= 0 && cols % MS_INT4_GROUP == 0);
    void (*group)(const uint8_t *, float, float *) = group_scalar;
#if MS_KERN_X86
    if (level >= MS_SIMD_AVX512) group = group_avx512;
    else if (level >= MS_SIMD_AVX2) group = group_avx2;
#endif
    (void)level;
    const int64_t ng = cols / MS_INT4_GROUP;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *p = packed + (size_t)(r0 + i) * (size_t)(cols / 2);
        const uint8_t *sr = scales + (size_t)(r0 + i) * (size_t)ng * 2;
        for (int64_t g = 0; g < ng; g++) {
            uint16_t sb;
            memcpy(&sb, sr + 2 * g, 2);
            group(p + g * 16, bf16(sb), out + i * cols + g * MS_INT4_GROUP);
        }
    }
}
