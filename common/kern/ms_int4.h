/* ms_int4: symmetric INT4 weights with a BF16 scale per 32 columns (compressed-tensors pack-quantized, Kimi K2-Thinking's experts): the exact dequantisation. */
#ifndef MS_INT4_H
#define MS_INT4_H

#include <stdint.h>

/* Columns of one scale group. */
#define MS_INT4_GROUP 32

/* Rows [r0, r0 + n) of an INT4 matrix of `cols` columns (cols % 32 == 0) dequantised into
 * out[n][cols]. packed: uint8_t[rows][cols/2], column c in the low nibble of byte c/2 when c is
 * even, else the high one (the bytes of compressed-tensors' little-endian int32 words, eight
 * columns each, the first in the lowest bits); scales: uint16_t[rows][cols/32] BF16 bits (the
 * bytes as stored, read unaligned). out[i][c] = (u - 8) * scale, u the nibble: one float multiply
 * of a small integer by a BF16 value, exact in float. level: a kernel path (MS_SIMD_*); the same
 * bits on every path. */
void ms_int4_dequant_rows_at(const uint8_t *packed, const uint8_t *scales, int64_t cols, int64_t r0, int64_t n,
                             float *out, int level);

/* The value of nibble u (0..15) scaled by BF16 bits s: the scalar reference. */
float ms_int4_value(unsigned u, uint16_t s);

#endif
