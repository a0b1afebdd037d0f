/* ms_bfc: a lossless block codec for BF16 weights (coded high bytes, raw low bytes). */
#ifndef MS_BFC_H
#define MS_BFC_H

#include <stddef.h>
#include <stdint.h>

/* Why it works: a BF16 value's high byte (sign + the top 7 exponent bits) takes few values in
 * a weight matrix, its low byte (exponent LSB + 7 mantissa bits) is near random. A block codes
 * each high byte as a k-bit index (k = 0..4) into a table of the block's 2^k - 1 most frequent
 * high bytes (code 2^k - 1 = escape: the byte follows in an escape list; k = 0: one value, no
 * escapes), or stores it raw (k = 8), whichever is smallest; low bytes are stored raw.
 *
 * Block layout (little-endian), n values:
 *   [0, 8)    u64 XXH3-64 of bytes [8, size)   (the block's checksum)
 *   [8, 12)   u32 n
 *   [12]      u8 k (0, 1, 2, 3, 4 or 8)
 *   [13, 16)  zero
 *   [16, 20)  u32 escapes
 *   [20, 24)  zero
 *   [24, 40)  table[16]: code c -> high byte (c < 2^k - 1; k = 0: table[0])
 *   then      k > 0 and k < 8: per group of 32 values, k u32 bit planes (bit i of plane p =
 *             bit p of value i's code; the last group padded with code 0): 4 * k * ceil(n/32)
 *             k = 8: the n high bytes
 *   then      the escaped high bytes in value order (k 1..4)
 *   then      the n low bytes
 * The size is therefore fixed by (n, k, escapes); a decoder checks all of it. */

#define MS_BFC_HDR 40
#define MS_BFC_MAX_VALUES (1u << 30)

/* Largest encoded size of n values with any k (with k = -1 never more than MS_BFC_HDR + 2n). */
size_t ms_bfc_bound(size_t n);

/* Encode src[n] into dst (at least ms_bfc_bound(n) bytes); k = -1 picks the smallest layout,
 * k in 0..4 or 8 forces one (tests: k = 0 needs a single high byte value). Returns the size. */
size_t ms_bfc_encode(const uint16_t *src, size_t n, int k, uint8_t *dst);

/* Decode a block of `size` bytes into dst[n] (n as the container expects). Returns 0, or
 * MS_BFC_BAD_SUM (checksum mismatch: corrupt bytes) or MS_BFC_BAD_FORM (sizes, count or
 * escapes inconsistent). Never writes past dst[n]; on failure dst is unspecified. */
#define MS_BFC_BAD_SUM (-1)
#define MS_BFC_BAD_FORM (-2)
int ms_bfc_decode(const uint8_t *src, size_t size, uint16_t *dst, size_t n);

/* A block's checksum and header checked without decoding it: 0, MS_BFC_BAD_SUM or
 * MS_BFC_BAD_FORM (an inconsistent escape count shows only when decoding). For blocks held in
 * memory: verified once when read from disk, then decoded with ms_bfc_decode_verified. */
int ms_bfc_verify(const uint8_t *src, size_t size, size_t n);

/* ms_bfc_decode without the checksum, for a block ms_bfc_verify accepted since it was read and
 * that stayed in memory. Every check of the layout still runs: a block that is not well formed
 * still gives MS_BFC_BAD_FORM and never a write past dst[n]. */
int ms_bfc_decode_verified(const uint8_t *src, size_t size, uint16_t *dst, size_t n);

/* The same, on the scalar path regardless of the kernel SIMD setting (tests). */
int ms_bfc_decode_scalar(const uint8_t *src, size_t size, uint16_t *dst, size_t n);

/* k of an encoded block (statistics); -1 if too short. */
int ms_bfc_block_k(const uint8_t *src, size_t size);

#endif
