/* ms_fp8: the E4M3 code table and block-scaled dequantisation. */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "ms_cpu.h"
#include "ms_err.h"
#include "ms_fp8.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define MS_KERN_X86 1
#include <immintrin.h>
#define MS_AVX2 __attribute__((target("avx2,fma"))) /* this function only: the path is chosen at run time */
#else
#define MS_KERN_X86 0
#endif

static float table[256]; /* every code's value, built once */
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_build(void)
{
    for (int code = 0; code < 256; code++) {
        int e = (code >> 3) & 15, m = code & 7;
        float v = e == 15 && m == 7 ? NAN : e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 + m), e - 10);
        table[code] = code & 0x80 ? -v : v;
    }
}

float ms_fp8_e4m3(uint8_t code)
{
    pthread_once(&table_once, table_build);
    return table[code];
}

#if MS_KERN_X86
/* 8 codes' values from their bits: sign, exponent e (bias 7) and mantissa m to a float's fields
 * (exponent e + 120), a subnormal code (e = 0) as m * 2^-9 (exact), 0x7F / 0xFF as NaN: the
 * table's values exactly; times the block's scale, one float multiply, as the scalar path. */
MS_AVX2 static inline __m256 e4m3x8(const uint8_t *q, __m256 scale)
{
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)q));
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x80)), 24);
    __m256i e = _mm256_and_si256(_mm256_srli_epi32(v, 3), _mm256_set1_epi32(15));
    __m256i m = _mm256_and_si256(v, _mm256_set1_epi32(7));
    __m256i normal = _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(120)), 23),
                                     _mm256_slli_epi32(m, 20));
    __m256i sub = _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(1.0f / 512.0f)));
    __m256i mag = _mm256_blendv_epi8(normal, sub, _mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
    __m256i nan = _mm256_cmpeq_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7F)), _mm256_set1_epi32(0x7F));
    mag = _mm256_blendv_epi8(mag, _mm256_set1_epi32(0x7FC00000), nan);
    return _mm256_mul_ps(_mm256_castsi256_ps(_mm256_or_si256(mag, sign)), scale);
}

/* Columns [c, c1) of one row within one scale block: 8 codes at a time, the tail by the table. */
MS_AVX2 static void block_avx2(const uint8_t *q, float *o, int64_t c, int64_t c1, float s)
{
    const __m256 sv = _mm256_set1_ps(s);
    for (; c + 8 <= c1; c += 8) _mm256_storeu_ps(o + c, e4m3x8(q + c, sv));
    for (; c < c1; c++) o[c] = table[q[c]] * s;
}
#endif

static void block_scalar(const uint8_t *q, float *o, int64_t c, int64_t c1, float s)
{
    for (; c < c1; c++) o[c] = table[q[c]] * s;
}

void ms_fp8_dequant_rows_at(const uint8_t *codes, const uint8_t *scales, int64_t cols, int64_t r0, int64_t n, float *out,
                            int level)
{
    MS_ASSERT(r0 >= 0 && n >= 0 && cols >= 0);
    pthread_once(&table_once, table_build);
    void (*block)(const uint8_t *, float *, int64_t, int64_t, float) = block_scalar;
#if MS_KERN_X86
    if (level >= MS_SIMD_AVX2) block = block_avx2;
#endif
    (void)level;
    const int64_t cb = ms_fp8_blocks(cols);
    for (int64_t i = 0; i < n; i++) {
        const int64_t r = r0 + i;
        const uint8_t *srow = scales + (size_t)((r / MS_FP8_BLOCK) * cb) * sizeof(float);
        for (int64_t k = 0; k < cb; k++) {
            float s;
            memcpy(&s, srow + k * sizeof(float), sizeof s); /* the grid may sit unaligned in a file's bytes */
            int64_t c0 = k * MS_FP8_BLOCK, c1 = c0 + MS_FP8_BLOCK < cols ? c0 + MS_FP8_BLOCK : cols;
            block(codes + r * cols, out + i * cols, c0, c1, s);
        }
    }
}

void ms_fp8_dequant_rows(const uint8_t *codes, const uint8_t *scales, int64_t cols, int64_t r0, int64_t n, float *out)
{
    ms_fp8_dequant_rows_at(codes, scales, cols, r0, n, out, MS_SIMD_SCALAR);
}
