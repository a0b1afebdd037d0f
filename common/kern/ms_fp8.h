/* ms_fp8: FP8 E4M3 weights with a float scale per 128 x 128 block (DeepSeek-V3, Kimi K2, Qwen3's FP8 releases): the code table and the exact dequantisation. */
#ifndef MS_FP8_H
#define MS_FP8_H

#include <stdint.h>

/* Rows and columns of one scale block. */
#define MS_FP8_BLOCK 128

/* The value of an E4M3 code (torch.float8_e4m3fn): bit 7 sign, bits 6..3 exponent (bias 7),
 * bits 2..0 mantissa; exponent 0 is subnormal (m/8 * 2^-6); no infinities; 0x7F and 0xFF are
 * NaN; the largest finite value is 448. Exact in float. */
float ms_fp8_e4m3(uint8_t code);

/* Scale blocks of a matrix of `n` rows or columns: ceil(n / 128) (the last may be partial). */
static inline int64_t ms_fp8_blocks(int64_t n) { return (n + MS_FP8_BLOCK - 1) / MS_FP8_BLOCK; }

/* Rows [r0, r0 + n) of an FP8 matrix of `cols` columns (codes: uint8_t[rows][cols]; scales: the
 * bytes of float[ceil(rows/128)][ceil(cols/128)], as MS_WT_FP8 holds them) dequantised into
 * out[n][cols]: out[i][c] = e4m3(code[r0 + i][c]) * scale[(r0 + i) / 128][c / 128], one float
 * multiply (round to nearest even), as the reference's weight_dequant computes it. */
void ms_fp8_dequant_rows(const uint8_t *codes, const uint8_t *scales, int64_t cols, int64_t r0, int64_t n, float *out);
/* The same on a kernel path (MS_SIMD_*: AVX2 and wider decode 8 codes at once by their bits);
 * the same bits on every path. */
void ms_fp8_dequant_rows_at(const uint8_t *codes, const uint8_t *scales, int64_t cols, int64_t r0, int64_t n, float *out,
                            int level);

#endif
