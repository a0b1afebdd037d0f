/* ms_kern_int: what the kernel files share inside common/kern (decode tables, the SIMD attribute, the tile kernels' entry). */
#ifndef MS_KERN_INT_H
#define MS_KERN_INT_H

#include <stdint.h>

#include "ms_cpu.h"
#include "ms_kern.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define MS_KERN_X86 1
#include <immintrin.h>
/* Only the functions carrying this attribute use AVX2/FMA; the rest of the build stays
 * baseline x86-64 and the choice is made at run time. */
#define MS_AVX2 __attribute__((target("avx2,fma")))
#else
#define MS_KERN_X86 0
#endif

/* The SIMD MXFP4 table (ms_kern.c): for scale byte s and magnitude m = nibble & 7, the bits of
 * (float)(E2M1(m) * 2^(s-127)) XOR (m << 28); a row is 32 bytes (one ymm). */
extern _Alignas(32) uint32_t ms_mx_tab_f[256][8];
/* The AVX-512 MXFP4 table: ms_mx_tab16[s][n] = the value of nibble n (sign included) at scale
 * byte s, the product the scalar decode computes; a row is 64 bytes (one zmm). */
extern _Alignas(64) float ms_mx_tab16[256][16];
/* The AVX2 MXFP4 tables: ms_mx_tab_b[s][n] = bits 16-23 of ms_mx_tab16[s][n], [s][16 + n] bits
 * 24-31 (the other bits are 0); a row is 32 bytes, two vpshufb tables. */
extern _Alignas(32) uint8_t ms_mx_tab_b[256][32];

#if MS_KERN_X86
/* 8 floats of elements 0..7 of the packed word w (8 nibbles, element k in bits 4k..4k+3):
 * the table lookup, then XOR with (nibble << 28) restores the value and sets the sign. */
MS_AVX2 static inline __m256 ms_mx_decode8_f(__m256i tab, uint32_t w)
{
    const __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    __m256i idx = _mm256_srlv_epi32(_mm256_set1_epi32((int)w), sh);
    return _mm256_castsi256_ps(_mm256_xor_si256(_mm256_permutevar8x32_epi32(tab, idx), _mm256_slli_epi32(idx, 28)));
}
#endif

/* Row r of W decoded to float on the scalar path (the reference decode). */
void ms_kern_row_scalar(const ms_mat *W, int64_t r, float *out);

/* The token rows in the layout the given path reads for W's type: X itself, or (AVX-512 MXFP4,
 * whose decode yields each 16 elements in the order 0, 8, 1, 9, .., 7, 15) a copy in that order
 * in *owned (ms_scratch_push'ed: the caller pops it after its other pieces; NULL when X is returned). X: float[T][W->cols]. */
const float *ms_gemm_prep_x(const ms_mat *W, const float *X, int64_t T, int level, float **owned);

/* 1 when ms_gemm_rows runs T tokens of W's type in panels on this path (a block of rows decoded
 * once for every token, 8 rows a panel on AVX-512 and 3 on AVX2), 0 for tiles. ms_gemm.c. */
int ms_gemm_panels(ms_wtype type, int64_t T, int level);

/* Y[t * ldy + r] = the canonical FP32 dot of row r and X[t] (X: [T][cols], prepared by
 * ms_gemm_prep_x for this path) for r in [r0, r1), on the given path (MS_SIMD_*; the caller
 * has checked the CPU runs it). ms_gemm.c. */
void ms_gemm_rows(const ms_mat *W, const float *X, int64_t T, float *Y, int64_t ldy, int64_t r0, int64_t r1, int level);

#endif
