/* ms_gemm: the weight matmul kernels: FP32 16-lane canonical dot products, register-blocked over rows and tokens (scalar, AVX2, AVX-512). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_scratch.h"
#include "ms_kern.h"
#include "ms_fp8.h"
#include "ms_kern_int.h"

/* The canonical dot product (ms_kern.h): 16 FP32 lanes, element i fused-multiply-added into lane
 * i % 16 in increasing i, then the fixed tree below. Every path computes exactly this. */
static inline float tree16(const float a[16])
{
    float s8[8], s4[4];
    for (int j = 0; j < 8; j++) s8[j] = a[j] + a[j + 8];
    for (int j = 0; j < 4; j++) s4[j] = s8[j] + s8[j + 4];
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

float ms_gemm_dot(const float *w, const float *x, int64_t n)
{
    float a[16] = {0};
    for (int64_t i = 0; i < n; i++) a[i & 15] = fmaf(w[i], x[i], a[i & 15]);
    return tree16(a);
}

/* Element c of row w (F32 or BF16) as float, for the tails of the SIMD paths. */
static inline float elem(ms_wtype ty, const void *w, int64_t c)
{
    return ty == MS_WT_F32 ? ((const float *)w)[c] : ms_bf16_to_f32(((const uint16_t *)w)[c]);
}

/* Where element e (0-15) of each 16 sits in the lanes of the given path's decode of type ty:
 * in order, or for MXFP4 paired with e + 8 (AVX-512, dec_mx_512) or grouped by e mod 4 (AVX2,
 * dec_mx_avx2), for BF16 on AVX2 in the half layout of dec_bf16_avx2. */
static inline int lane_pos(ms_wtype ty, int level, int e)
{
    if (level < MS_SIMD_AVX2 || ty == MS_WT_F32 || ty == MS_WT_FP8 || ty == MS_WT_INT4) return e;
    if (ty == MS_WT_BF16) return level == MS_SIMD_AVX512 ? e : (e & 3) + ((e & 4) << 1) + ((e & 8) >> 1);
    if (level == MS_SIMD_AVX512) return e < 8 ? 2 * e : 2 * (e - 8) + 1;
    return (e & 1) * 4 + (e >> 2) + (e & 2) * 4;
}

/* Lanes l[16] stored in the path's layout, back in order into a[16]. */
static inline void lanes_unperm(ms_wtype ty, int level, const float *l, float a[16])
{
    for (int e = 0; e < 16; e++) a[e] = l[lane_pos(ty, level, e)];
}

/* Scalar path: decode each row once, then one canonical dot per token. */
static void rows_scalar(const ms_mat *W, const float *X, int64_t T, float *Y, int64_t ldy, int64_t r0, int64_t r1)
{
    int64_t cols = W->cols;
    float *buf = ms_malloc((size_t)cols * sizeof(float));
    for (int64_t r = r0; r < r1; r++) {
        ms_kern_row_scalar(W, r, buf);
        for (int64_t t = 0; t < T; t++) Y[t * ldy + r] = ms_gemm_dot(buf, X + t * cols, cols);
    }
    free(buf);
}

/* A tile: R rows of W (from row r) against TB tokens. */
typedef struct {
    const ms_mat *W;
    int64_t r, cols;
    const float *x[6]; /* [TB] token rows */
    float *y[6];       /* [TB] output rows (y[t][r + k]) */
} tile;

static inline const void *row_ptr(const ms_mat *W, int64_t r)
{
    switch (W->type) {
    case MS_WT_F32: return (const float *)W->data + r * W->cols;
    case MS_WT_BF16: return (const uint16_t *)W->data + r * W->cols;
    case MS_WT_FP8: return (const uint8_t *)W->data + r * W->cols;
    default: return (const uint8_t *)W->data + r * (W->cols / 2);
    }
}

/* Row r's scales: MXFP4's E8M0 bytes, an INT4 row's BF16 words (one a 32 columns), or an FP8
 * row's floats of its 128-row block of the grid (one a 128 columns); NULL for F32 and BF16. */
static inline const uint8_t *row_scales(const ms_mat *W, int64_t r)
{
    if (W->type == MS_WT_MXFP4) return W->scales + r * (W->cols / 32);
    if (W->type == MS_WT_INT4) return W->scales + r * (W->cols / 32) * 2;
    if (W->type == MS_WT_FP8) return W->scales + (size_t)(r / MS_FP8_BLOCK) * (size_t)ms_fp8_blocks(W->cols) * sizeof(float);
    return NULL;
}

/* After the vector loop: lanes in a[16] per (row, token); the tail elements (F32 / BF16 only:
 * MXFP4 rows are whole groups of 32) go to their lanes, then the tree. */
static inline void finish(const tile *tl, int k, int t, float a[16], int64_t n16)
{
    const void *w = row_ptr(tl->W, tl->r + k);
    for (int64_t i = n16; i < tl->cols; i++) a[i & 15] = fmaf(elem(tl->W->type, w, i), tl->x[t][i], a[i & 15]);
    tl->y[t][tl->r + k] = tree16(a);
}

/* Software prefetch for the tiles. A tile reads its R rows side by side, each a slow stream
 * (one 64-byte line every 8 steps for MXFP4), and the hardware prefetchers keep too few lines in
 * flight for such streams: from memory a one-token MXFP4 tile ran at half its in-cache speed.
 * So each step that enters a new line of row k also asks for the line MS_PF_AHEAD bytes further
 * on: in the same row, or past its end in the row the next tile of rows reads at that place
 * (rows are contiguous; never past that row, so never past the matrix). At the start of a
 * tile, the next tile's MXFP4 scales. Prefetches change no result. */
enum { MS_PF_AHEAD = 1024 };

/* always_inline: GCC 12 took a function that only prefetches for a const one and dropped every
 * call to it (no prefetch was emitted at all). Row rk starts at w; off is a byte offset in it. */
static inline __attribute__((always_inline)) void pf_row(const ms_mat *W, const uint8_t *w, int64_t rk, int R,
                                                         int64_t off, int64_t rb)
{
    off += MS_PF_AHEAD;
    if (off < rb)
        __builtin_prefetch(w + off);
    else if (off - rb < rb && rk + R < W->rows) /* inside row rk + R (rows shorter than 1 KiB: none) */
        __builtin_prefetch(w + (int64_t)R * rb + (off - rb));
}

static inline __attribute__((always_inline)) void pf_scales(const ms_mat *W, int64_t r, int R)
{
    if (W->type != MS_WT_MXFP4 || !W->scales || r + 2 * (int64_t)R > W->rows) return;
    int64_t n = (int64_t)R * (W->cols / 32);
    const uint8_t *s = W->scales + (r + R) * (W->cols / 32);
    for (int64_t b = 0; b < n; b += 64) __builtin_prefetch(s + b);
}

/* Bytes of a row of `cols` elements: EB2 is twice an element's bytes (8 F32, 4 BF16, 2 FP8, 1 MXFP4
 * and INT4). */
#define MS_ROW_BYTES(cols, EB2) ((cols) * (EB2) / 2)

#if MS_KERN_X86
/* A weight vector loaded once and kept in a register for all the FMAs that use it: without this
 * the compiler folds the load into every FMA, and the tiles become bound by loads. */
#define MS_IN_REG(v) __asm__("" : "+v"(v))

/* ---- AVX2: a dot's 16 lanes are two ymm (lanes 0-7, 8-15; MXFP4: the mod-4 layout of dec_mx_avx2) ---- */

MS_AVX2 static inline void dec_f32_avx2(const void *w, const uint8_t *s, int64_t i, __m256 o[2])
{
    (void)s;
    o[0] = _mm256_loadu_ps((const float *)w + i);
    o[1] = _mm256_loadu_ps((const float *)w + i + 8);
}

/* 16 BF16 elements in the "half" layout: o[0] holds elements 0-3 then 8-11, o[1] 4-7 then 12-15
 * (bf16_pos). Unpacking the 16 words with zeros below them makes the floats with two in-lane
 * instructions, where widening in order took an extract, two zero-extends and two shifts:
 * a one-token BF16 step on Zen 1 was bound by that decode, not by memory. */
MS_AVX2 static inline void dec_bf16_avx2(const void *w, const uint8_t *s, int64_t i, __m256 o[2])
{
    (void)s;
    __m256i v = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
    o[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), v));
    o[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), v));
}

/* 32 E2M1 elements (one scale group) in the "mod-4" layout: of each 16, o[0] holds elements 0, 4,
 * 8, 12 then 1, 5, 9, 13, o[1] 2, 6, 10, 14 then 3, 7, 11, 15 (mx_pos); o[2], o[3] the same for
 * the next 16. The group's 16 bytes are broadcast to both 128-bit lanes; lane 0 keeps the low
 * nibbles (even elements), lane 1 the high ones (odd); two vpshufb look up the two upper bytes
 * of each value (ms_mx_tab_b; the lower two are 0), two unpacks pair them into 16-bit halves
 * of floats, and a shift or a mask makes the floats. Four shuffles for 32 weights, none of
 * them across lanes, no variable shift, no vpermd (slow on Zen 1, AMD's AVX2-only EPYCs). The
 * token rows are read in the same order (ms_gemm_prep_x); tree_avx2m sums the lanes in the
 * canonical tree. */
MS_AVX2 static inline void dec_mx_avx2(const void *w, const uint8_t *s, int64_t i, __m256 o[4])
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), hi16 = _mm256_set1_epi32((int)0xffff0000u);
    const __m128i *tb = (const __m128i *)ms_mx_tab_b[s[i >> 5]];
    const __m256i tl = _mm256_broadcastsi128_si256(_mm_load_si128(tb)), th = _mm256_broadcastsi128_si256(_mm_load_si128(tb + 1));
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)((const uint8_t *)w + (i >> 1))));
    __m256i n = _mm256_blend_epi32(_mm256_and_si256(v, m4), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4), 0xf0);
    __m256i l = _mm256_shuffle_epi8(tl, n), h = _mm256_shuffle_epi8(th, n);
    __m256i u0 = _mm256_unpacklo_epi8(l, h), u1 = _mm256_unpackhi_epi8(l, h); /* elements 0-15, 16-31 */
    o[0] = _mm256_castsi256_ps(_mm256_slli_epi32(u0, 16));
    o[1] = _mm256_castsi256_ps(_mm256_and_si256(u0, hi16));
    o[2] = _mm256_castsi256_ps(_mm256_slli_epi32(u1, 16));
    o[3] = _mm256_castsi256_ps(_mm256_and_si256(u1, hi16));
}

/* 8 E4M3 codes' values times their block's scale, in order: a code's magnitude bits shifted to
 * a float's exponent and mantissa make it times 2^-120 (a subnormal code a subnormal float of
 * the same value times 2^-120), so one exact multiply by 2^120 gives the code's value; the sign
 * bit moves to the float's; 0x7F / 0xFF are NaN. Then the one float multiply by the scale, as
 * ms_fp8_dequant_rows: the same bits as the table. */
MS_AVX2 static inline __m256 fp8x8_avx2(const uint8_t *q, __m256 scale)
{
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)q));
    __m256i mag = _mm256_and_si256(v, _mm256_set1_epi32(0x7F));
    __m256 f = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(mag, 20)), _mm256_set1_ps(0x1p120f));
    f = _mm256_or_ps(f, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x80)), 24)));
    f = _mm256_blendv_ps(f, _mm256_set1_ps(NAN), _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7F))));
    return _mm256_mul_ps(f, scale);
}

/* 16 FP8 elements in order (o[0] 0-7, o[1] 8-15); s: the row's scales (row_scales). */
MS_AVX2 static inline void dec_fp8_avx2(const void *w, const uint8_t *s, int64_t i, __m256 o[2])
{
    float sc;
    memcpy(&sc, s + (i >> 7) * (int64_t)sizeof(float), sizeof sc); /* a grid may sit unaligned in a file's bytes */
    const __m256 sv = _mm256_set1_ps(sc);
    o[0] = fp8x8_avx2((const uint8_t *)w + i, sv);
    o[1] = fp8x8_avx2((const uint8_t *)w + i + 8, sv);
}

/* An INT4 group's scale (BF16 word g of the row's) as a float: exact. */
static inline float int4_scale(const uint8_t *s, int64_t i)
{
    uint16_t h;
    memcpy(&h, s + (i >> 5) * 2, 2);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The 8 bytes of 16 INT4 columns as 16 nibbles in column order (low nibble first). */
MS_AVX2 static inline __m128i int4_nibbles(const void *w, int64_t i)
{
    __m128i b = _mm_loadl_epi64((const __m128i *)((const uint8_t *)w + (i >> 1))), m = _mm_set1_epi8(15);
    return _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m));
}

/* 16 INT4 elements in order (o[0] 0-7, o[1] 8-15): (u - 8) x the group's scale, exact, the
 * values of ms_int4_dequant_rows_at. */
MS_AVX2 static inline void dec_int4_avx2(const void *w, const uint8_t *s, int64_t i, __m256 o[2])
{
    const __m256 sv = _mm256_set1_ps(int4_scale(s, i));
    const __m256i eight = _mm256_set1_epi32(8);
    __m128i n = int4_nibbles(w, i);
    o[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(n), eight)), sv);
    o[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(n, 8)), eight)), sv);
}

/* The tree of ms_gemm_dot over lanes lo (0-7) and hi (8-15), in registers: s8 = lo + hi, s4 =
 * halves of s8 added, then (s4[0] + s4[2]) + (s4[1] + s4[3]). */
MS_AVX2 static inline float tree_avx2(__m256 lo, __m256 hi)
{
    __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 t = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

/* The same tree over lanes in the half layout of dec_bf16_avx2 (a: lanes 0-3, 8-11; b: 4-7,
 * 12-15): s8[0..3] = a's halves added, s8[4..7] = b's, s4 = the two added, then as tree_avx2. */
MS_AVX2 static inline float tree_avx2h(__m256 a, __m256 b)
{
    __m128 s4 = _mm_add_ps(_mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1)),
                           _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1)));
    __m128 t = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

/* The same tree over lanes in the mod-4 layout of dec_mx_avx2 (a: lanes 0, 4, 8, 12, 1, 5, 9,
 * 13; b: 2, 6, 10, 14, 3, 7, 11, 15): swapping 64-bit halves in each 128-bit lane and adding
 * gives s8 (a[j] + a[j + 8]), swapping neighbours and adding gives s4 (s8[j] + s8[j + 4]) in
 * positions 0 and 4, then (s4[0] + s4[2]) + (s4[1] + s4[3]) as in tree16. */
MS_AVX2 static inline float tree_avx2m(__m256 a, __m256 b)
{
    a = _mm256_add_ps(a, _mm256_permute_ps(a, 0x4e));
    b = _mm256_add_ps(b, _mm256_permute_ps(b, 0x4e));
    a = _mm256_add_ps(a, _mm256_permute_ps(a, 0xb1));
    b = _mm256_add_ps(b, _mm256_permute_ps(b, 0xb1));
    __m256 c = _mm256_add_ps(a, b); /* c[0] = s4[0] + s4[2], c[4] = s4[1] + s4[3] */
    return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1)));
}

/* One tile kernel per (decoder, R, TB): the accumulators stay in registers (2 R TB ymm <= 14).
 * A step decodes S x 16 columns (S = 2 for MXFP4: a scale group), wv[2j] and wv[2j + 1] the lo
 * and hi of its j-th 16; each accumulator still takes its elements in increasing order. */
#define MS_TILE_AVX2(NAME, DEC, TREE, EB2, S, R, TB)                                                                            \
    MS_AVX2 static void NAME(const tile *tl)                                                                           \
    {                                                                                                                  \
        __m256 lo[R][TB], hi[R][TB];                                                                                   \
        const void *w[R];                                                                                              \
        const uint8_t *sc[R];                                                                                          \
        const int64_t rb = MS_ROW_BYTES(tl->cols, EB2);                                                                \
        pf_scales(tl->W, tl->r, R);                                                                                    \
        _Pragma("GCC unroll 6") for (int k = 0; k < R; k++)                                                           \
        {                                                                                                              \
            w[k] = row_ptr(tl->W, tl->r + k);                                                                          \
            sc[k] = row_scales(tl->W, tl->r + k);                                                                      \
            _Pragma("GCC unroll 6") for (int t = 0; t < TB; t++) lo[k][t] = hi[k][t] = _mm256_setzero_ps();           \
        }                                                                                                              \
        int64_t n16 = tl->cols & ~(int64_t)15;                                                                         \
        for (int64_t i = 0; i < n16; i += 16 * (S)) {                                                                  \
            if (!(i & (128 / (EB2) - 1))) {                                                                            \
                _Pragma("GCC unroll 6") for (int k = 0; k < R; k++)                                                   \
                    pf_row(tl->W, (const uint8_t *)w[k], tl->r + k, R, MS_ROW_BYTES(i, EB2), rb);                      \
            }                                                                                                          \
            _Pragma("GCC unroll 6") for (int k = 0; k < R; k++)                                                       \
            {                                                                                                          \
                __m256 wv[2 * (S)];                                                                                    \
                DEC(w[k], sc[k], i, wv);                                                                               \
                _Pragma("GCC unroll 2") for (int j = 0; j < (S); j++)                                                 \
                {                                                                                                      \
                    MS_IN_REG(wv[2 * j]);                                                                              \
                    MS_IN_REG(wv[2 * j + 1]);                                                                          \
                    _Pragma("GCC unroll 6") for (int t = 0; t < TB; t++)                                              \
                    {                                                                                                  \
                        lo[k][t] = _mm256_fmadd_ps(wv[2 * j], _mm256_loadu_ps(tl->x[t] + i + 16 * j), lo[k][t]);      \
                        hi[k][t] = _mm256_fmadd_ps(wv[2 * j + 1], _mm256_loadu_ps(tl->x[t] + i + 16 * j + 8), hi[k][t]); \
                    }                                                                                                  \
                }                                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
        for (int k = 0; k < R; k++)                                                                                    \
            for (int t = 0; t < TB; t++) {                                                                             \
                if (n16 == tl->cols) { /* no tail: the tree in registers */                                            \
                    tl->y[t][tl->r + k] = TREE(lo[k][t], hi[k][t]);                                                    \
                    continue;                                                                                          \
                }                                                                                                      \
                float l[16], a[16];                                                                                    \
                _mm256_storeu_ps(l, lo[k][t]);                                                                         \
                _mm256_storeu_ps(l + 8, hi[k][t]);                                                                     \
                lanes_unperm(tl->W->type, MS_SIMD_AVX2, l, a);                                                         \
                finish(tl, k, t, a, n16);                                                                              \
            }                                                                                                          \
    }

/* Tiles of up to two rows and three tokens (12 accumulators, 2 weight registers, x from L1):
 * each decoded weight vector serves three FMAs pairs; four rows for one token (a GEMV: eight
 * independent chains). The sizes were chosen by `moestream bench` on this project's machines. */
#define MS_TILES_AVX2(T, DEC, TREE, EB2, S)                                                                                          \
    MS_TILE_AVX2(t_##T##_a2_1_1, DEC, TREE, EB2, S, 1, 1)                                                                            \
    MS_TILE_AVX2(t_##T##_a2_1_2, DEC, TREE, EB2, S, 1, 2)                                                                            \
    MS_TILE_AVX2(t_##T##_a2_1_3, DEC, TREE, EB2, S, 1, 3)                                                                            \
    MS_TILE_AVX2(t_##T##_a2_2_1, DEC, TREE, EB2, S, 2, 1)                                                                            \
    MS_TILE_AVX2(t_##T##_a2_2_2, DEC, TREE, EB2, S, 2, 2)                                                                            \
    MS_TILE_AVX2(t_##T##_a2_2_3, DEC, TREE, EB2, S, 2, 3)                                                                            \
    MS_TILE_AVX2(t_##T##_a2_4_1, DEC, TREE, EB2, S, 4, 1)
MS_TILES_AVX2(f32, dec_f32_avx2, tree_avx2, 8, 1)
MS_TILES_AVX2(bf16, dec_bf16_avx2, tree_avx2h, 4, 1)
MS_TILES_AVX2(mx, dec_mx_avx2, tree_avx2m, 1, 2) /* no tails: cols % 32 == 0 */
MS_TILES_AVX2(fp8, dec_fp8_avx2, tree_avx2, 2, 1) /* no tails: ms_matmul takes these for cols % 16 == 0 */
MS_TILES_AVX2(int4, dec_int4_avx2, tree_avx2, 1, 1) /* no tails: cols % 32 == 0 */
/* MXFP4 at 4-6 tokens: one row, each decoded group serving all the tokens. The decode (a dozen
 * instructions for 32 weights) is the cost, so a tile is as fast as it has tokens: on Zen 1, 2
 * threads, k3 expert up, 2 x 2 + 2 x 2 tiles gave 39 GFLOP/s at 4 tokens, 1 x 4 53; at 5 and 6
 * tokens panels 42-47, 1 x 5 and 1 x 6 56-59 (at 7, two tiles tie with panels: 48-49). */
MS_TILE_AVX2(t_mx_a2_1_4, dec_mx_avx2, tree_avx2m, 1, 2, 1, 4)
MS_TILE_AVX2(t_mx_a2_1_5, dec_mx_avx2, tree_avx2m, 1, 2, 1, 5)
MS_TILE_AVX2(t_mx_a2_1_6, dec_mx_avx2, tree_avx2m, 1, 2, 1, 6)

typedef void (*tile_fn)(const tile *);
/* [type][R - 1][TB - 1] (R = 1, 2, 4) */
static const tile_fn avx2_tiles[5][4][6] = {
#define ROW(T)                                                                                                         \
    {{t_##T##_a2_1_1, t_##T##_a2_1_2, t_##T##_a2_1_3},                                                                 \
     {t_##T##_a2_2_1, t_##T##_a2_2_2, t_##T##_a2_2_3},                                                                 \
     {0},                                                                                                              \
     {t_##T##_a2_4_1}}
    ROW(f32), ROW(bf16),
    {{t_mx_a2_1_1, t_mx_a2_1_2, t_mx_a2_1_3, t_mx_a2_1_4, t_mx_a2_1_5, t_mx_a2_1_6}, {t_mx_a2_2_1, t_mx_a2_2_2, t_mx_a2_2_3}, {0}, {t_mx_a2_4_1}},
    ROW(fp8), ROW(int4)
#undef ROW
};

/* ---- AVX-512: a dot's 16 lanes are one zmm ---- */
#define MS_AVX512 __attribute__((target("avx512f,avx512bw,avx2,fma")))

MS_AVX512 static inline __m512 dec_f32_512(const void *w, const uint8_t *s, int64_t i)
{
    (void)s;
    return _mm512_loadu_ps((const float *)w + i);
}

MS_AVX512 static inline __m512 dec_bf16_512(const void *w, const uint8_t *s, int64_t i)
{
    (void)s;
    /* word 2j + 1 of the result takes bf16 j, word 2j is zeroed: one vpermw */
    const __m512i idx = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0, 7, 0, 6, 0, 5, 0, 4, 0, 3, 0,
                                         2, 0, 1, 0, 0, 0);
    __m512i v = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i)));
    return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, idx, v));
}

/* 16 E2M1 elements in the order 0, 8, 1, 9, .., 7, 15 (the "paired" layout): the 8 bytes
 * broadcast to every 64-bit lane, lane m shifted right by 4m, so dword 2m starts at nibble m and
 * dword 2m + 1 at nibble m + 8; vpermps reads the low 4 bits of each as the index into the
 * scale's 16 values. Two instructions for 16 weights; the token rows are read in the same
 * order (ms_gemm_prep_x) and the tree pairs the lanes back (tree_512p). */
MS_AVX512 static inline __m512 dec_mx_512(const void *w, const uint8_t *s, int64_t i)
{
    const __m512i sh = _mm512_setr_epi64(0, 4, 8, 12, 16, 20, 24, 28);
    uint64_t q;
    memcpy(&q, (const uint8_t *)w + (i >> 1), 8);
    __m512i idx = _mm512_srlv_epi64(_mm512_set1_epi64((long long)q), sh);
    return _mm512_permutexvar_ps(idx, _mm512_load_ps(ms_mx_tab16[s[i >> 5]]));
}

/* 16 INT4 elements in order, as dec_int4_avx2. */
MS_AVX512 static inline __m512 dec_int4_512(const void *w, const uint8_t *s, int64_t i)
{
    __m512i v = _mm512_sub_epi32(_mm512_cvtepu8_epi32(int4_nibbles(w, i)), _mm512_set1_epi32(8));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(int4_scale(s, i)));
}

/* 16 FP8 elements in order, as fp8x8_avx2 does 8. */
MS_AVX512 static inline __m512 dec_fp8_512(const void *w, const uint8_t *s, int64_t i)
{
    float sc;
    memcpy(&sc, s + (i >> 7) * (int64_t)sizeof(float), sizeof sc);
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)((const uint8_t *)w + i)));
    __m512i mag = _mm512_and_si512(v, _mm512_set1_epi32(0x7F));
    __m512 f = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(mag, 20)), _mm512_set1_ps(0x1p120f));
    f = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(f),
                                            _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x80)), 24)));
    f = _mm512_mask_mov_ps(f, _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7F)), _mm512_set1_ps(NAN));
    return _mm512_mul_ps(f, _mm512_set1_ps(sc));
}

static inline long long ld64(const uint8_t *p)
{
    long long q;
    memcpy(&q, p, 8);
    return q;
}

/* The tree of ms_gemm_dot over the 16 lanes of v, in registers (lanes 0-7 plus 8-15 first). */
MS_AVX512 static inline float tree_512(__m512 v)
{
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return tree_avx2(_mm512_castps512_ps256(v), hi);
}

/* The same tree over lanes in the paired layout (lane j at position 2j, lane j + 8 at 2j + 1):
 * s8[j] = a[j] + a[j + 8] is a pair sum, s4[j] = s8[j] + s8[j + 4] adds the 256-bit halves,
 * then (s4[0] + s4[2]) + (s4[1] + s4[3]) as in tree16. */
MS_AVX512 static inline float tree_512p(__m512 v)
{
    __m512 u = _mm512_add_ps(v, _mm512_permute_ps(v, 0xB1));
    __m256 w = _mm256_add_ps(_mm512_castps512_ps256(u), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(u), 1)));
    __m128 z = _mm_add_ps(_mm256_castps256_ps128(w), _mm256_extractf128_ps(w, 1));
    return _mm_cvtss_f32(_mm_add_ss(z, _mm_movehl_ps(z, z)));
}

/* One tile kernel per (decoder, R, TB): R TB zmm accumulators (<= 24 of 32). */
#define MS_TILE_512(NAME, DEC, TREE, EB2, R, TB)                                                                       \
    MS_AVX512 static void NAME(const tile *tl)                                                                         \
    {                                                                                                                  \
        __m512 acc[R][TB];                                                                                             \
        const void *w[R];                                                                                              \
        const uint8_t *sc[R];                                                                                          \
        const int64_t rb = MS_ROW_BYTES(tl->cols, EB2);                                                                \
        pf_scales(tl->W, tl->r, R);                                                                                    \
        _Pragma("GCC unroll 6") for (int k = 0; k < R; k++)                                                           \
        {                                                                                                              \
            w[k] = row_ptr(tl->W, tl->r + k);                                                                          \
            sc[k] = row_scales(tl->W, tl->r + k);                                                                      \
            _Pragma("GCC unroll 6") for (int t = 0; t < TB; t++) acc[k][t] = _mm512_setzero_ps();                     \
        }                                                                                                              \
        int64_t n16 = tl->cols & ~(int64_t)15;                                                                         \
        for (int64_t i = 0; i < n16; i += 16) {                                                                        \
            if (!(i & (128 / (EB2) - 1))) {                                                                            \
                _Pragma("GCC unroll 6") for (int k = 0; k < R; k++)                                                   \
                    pf_row(tl->W, (const uint8_t *)w[k], tl->r + k, R, MS_ROW_BYTES(i, EB2), rb);                      \
            }                                                                                                          \
            _Pragma("GCC unroll 6") for (int k = 0; k < R; k++)                                                       \
            {                                                                                                          \
                __m512 wv = DEC(w[k], sc[k], i);                                                                       \
                MS_IN_REG(wv);                                                                                         \
                _Pragma("GCC unroll 6") for (int t = 0; t < TB; t++)                                                  \
                    acc[k][t] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(tl->x[t] + i), acc[k][t]);                        \
            }                                                                                                          \
        }                                                                                                              \
        for (int k = 0; k < R; k++)                                                                                    \
            for (int t = 0; t < TB; t++) {                                                                             \
                if (n16 == tl->cols) { /* no tail: the tree in registers */                                            \
                    tl->y[t][tl->r + k] = TREE(acc[k][t]);                                                         \
                    continue;                                                                                          \
                }                                                                                                      \
                float a[16];                                                                                           \
                _mm512_storeu_ps(a, acc[k][t]);                                                                        \
                finish(tl, k, t, a, n16);                                                                              \
            }                                                                                                          \
    }

/* Tiles of up to four rows and six tokens (24 accumulators, the six x vectors in registers,
 * one weight vector): each decoded weight vector serves six FMAs, each x vector four. */
#define MS_TILES_512(T, DEC, TREE, EB2)                                                                                           \
    MS_TILE_512(t_##T##_z_1_1, DEC, TREE, EB2, 1, 1)                                                                              \
    MS_TILE_512(t_##T##_z_1_2, DEC, TREE, EB2, 1, 2)                                                                              \
    MS_TILE_512(t_##T##_z_1_3, DEC, TREE, EB2, 1, 3)                                                                              \
    MS_TILE_512(t_##T##_z_1_4, DEC, TREE, EB2, 1, 4)                                                                              \
    MS_TILE_512(t_##T##_z_1_5, DEC, TREE, EB2, 1, 5)                                                                              \
    MS_TILE_512(t_##T##_z_1_6, DEC, TREE, EB2, 1, 6)                                                                              \
    MS_TILE_512(t_##T##_z_2_1, DEC, TREE, EB2, 2, 1)                                                                              \
    MS_TILE_512(t_##T##_z_2_2, DEC, TREE, EB2, 2, 2)                                                                              \
    MS_TILE_512(t_##T##_z_2_3, DEC, TREE, EB2, 2, 3)                                                                              \
    MS_TILE_512(t_##T##_z_2_4, DEC, TREE, EB2, 2, 4)                                                                              \
    MS_TILE_512(t_##T##_z_2_5, DEC, TREE, EB2, 2, 5)                                                                              \
    MS_TILE_512(t_##T##_z_2_6, DEC, TREE, EB2, 2, 6)                                                                              \
    MS_TILE_512(t_##T##_z_4_1, DEC, TREE, EB2, 4, 1)                                                                              \
    MS_TILE_512(t_##T##_z_4_2, DEC, TREE, EB2, 4, 2)                                                                              \
    MS_TILE_512(t_##T##_z_4_3, DEC, TREE, EB2, 4, 3)                                                                              \
    MS_TILE_512(t_##T##_z_4_4, DEC, TREE, EB2, 4, 4)                                                                              \
    MS_TILE_512(t_##T##_z_4_5, DEC, TREE, EB2, 4, 5)                                                                              \
    MS_TILE_512(t_##T##_z_4_6, DEC, TREE, EB2, 4, 6)
MS_TILES_512(f32, dec_f32_512, tree_512, 8)
MS_TILES_512(bf16, dec_bf16_512, tree_512, 4)
MS_TILES_512(fp8, dec_fp8_512, tree_512, 2)
MS_TILES_512(int4, dec_int4_512, tree_512, 1)

/* MXFP4 tiles step a whole scale group (32 columns): the group's 16 scaled values are loaded
 * into a register once and looked up by both halves, each a broadcast 8 bytes, one shift and
 * one vpermps (dec_mx_512's decode); half the scale lookups and loop steps of a 16-column step.
 * A lane still takes its elements in increasing column order. No tails: cols % 32 == 0.
 * (Zen 5, `moestream bench`, 2 threads: T = 1 from 121 to 175 GFLOP/s with the 8-row tile,
 * T = 4 from 265 to 322; at 5 and 6 tokens the 16-column step stays.) */
#define MS_TILE_512_MX(NAME, R, TB)                                                                                    \
    MS_AVX512 static void NAME(const tile *tl)                                                                         \
    {                                                                                                                  \
        const __m512i sh = _mm512_setr_epi64(0, 4, 8, 12, 16, 20, 24, 28);                                             \
        __m512 acc[R][TB];                                                                                             \
        const uint8_t *w[R];                                                                                           \
        const uint8_t *sc[R];                                                                                          \
        const int64_t rb = MS_ROW_BYTES(tl->cols, 1);                                                                  \
        pf_scales(tl->W, tl->r, R);                                                                                    \
        _Pragma("GCC unroll 8") for (int k = 0; k < R; k++)                                                           \
        {                                                                                                              \
            w[k] = row_ptr(tl->W, tl->r + k);                                                                          \
            sc[k] = tl->W->scales + (tl->r + k) * (tl->cols / 32);                                                     \
            _Pragma("GCC unroll 6") for (int t = 0; t < TB; t++) acc[k][t] = _mm512_setzero_ps();                     \
        }                                                                                                              \
        for (int64_t i = 0; i < tl->cols; i += 32) {                                                                   \
            if (!(i & 127)) {                                                                                          \
                _Pragma("GCC unroll 8") for (int k = 0; k < R; k++)                                                   \
                    pf_row(tl->W, w[k], tl->r + k, R, i / 2, rb);                                                      \
            }                                                                                                          \
            _Pragma("GCC unroll 8") for (int k = 0; k < R; k++)                                                       \
            {                                                                                                          \
                __m512 tab = _mm512_load_ps(ms_mx_tab16[sc[k][i >> 5]]);                                               \
                uint64_t q0, q1;                                                                                       \
                memcpy(&q0, w[k] + i / 2, 8);                                                                          \
                memcpy(&q1, w[k] + i / 2 + 8, 8);                                                                      \
                __m512 w0 = _mm512_permutexvar_ps(_mm512_srlv_epi64(_mm512_set1_epi64((long long)q0), sh), tab);      \
                __m512 w1 = _mm512_permutexvar_ps(_mm512_srlv_epi64(_mm512_set1_epi64((long long)q1), sh), tab);      \
                _Pragma("GCC unroll 6") for (int t = 0; t < TB; t++)                                                  \
                    acc[k][t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(tl->x[t] + i), acc[k][t]);                        \
                _Pragma("GCC unroll 6") for (int t = 0; t < TB; t++)                                                  \
                    acc[k][t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(tl->x[t] + i + 16), acc[k][t]);                   \
            }                                                                                                          \
        }                                                                                                              \
        for (int k = 0; k < R; k++)                                                                                    \
            for (int t = 0; t < TB; t++) tl->y[t][tl->r + k] = tree_512p(acc[k][t]);                                   \
    }
MS_TILE_512_MX(t_mx_z_1_1, 1, 1)
MS_TILE_512_MX(t_mx_z_1_2, 1, 2)
MS_TILE_512_MX(t_mx_z_1_3, 1, 3)
MS_TILE_512_MX(t_mx_z_1_4, 1, 4)
MS_TILE_512_MX(t_mx_z_2_1, 2, 1)
MS_TILE_512_MX(t_mx_z_2_2, 2, 2)
MS_TILE_512_MX(t_mx_z_2_3, 2, 3)
MS_TILE_512_MX(t_mx_z_2_4, 2, 4)
MS_TILE_512_MX(t_mx_z_4_1, 4, 1)
MS_TILE_512_MX(t_mx_z_4_2, 4, 2)
MS_TILE_512_MX(t_mx_z_4_3, 4, 3)
MS_TILE_512_MX(t_mx_z_4_4, 4, 4)

/* The AVX-512 MXFP4 GEMV tile: 8 rows, one token. The same steps and lanes as MS_TILE_512_MX
 * (8, 1), with the rows addressed from two bases and their stride rather than 16 pointers
 * (which GCC kept in vector registers, a move to a general one before every load), and four
 * groups a loop step, so each row's prefetch (pf_row's lines, one a row per 64 bytes) is issued
 * once a step without a test. */
MS_AVX512 static void t_mx_z_8_1(const tile *tl)
{
    const __m512i sh = _mm512_setr_epi64(0, 4, 8, 12, 16, 20, 24, 28);
    const int64_t rb = MS_ROW_BYTES(tl->cols, 1), g = tl->cols / 32, rb3 = 3 * rb, g3 = 3 * g;
    const uint8_t *wp = row_ptr(tl->W, tl->r), *wq = wp + 4 * rb; /* rows 0-3, 4-7 */
    const uint8_t *sp = tl->W->scales + tl->r * g, *sq = sp + 4 * g;
    const float *x = tl->x[0];
    /* Past its own end a row prefetches the row 8 further on (the next tile's), if there is one */
    const int next = tl->r + 16 <= tl->W->rows;
    pf_scales(tl->W, tl->r, 8);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
#define MX_ROW(ACC, W, S)                                                                                              \
    do {                                                                                                               \
        __m512 tab = _mm512_load_ps(ms_mx_tab16[(S)[0]]);                                                              \
        __m512 w0 = _mm512_permutexvar_ps(_mm512_srlv_epi64(_mm512_set1_epi64(ld64(W)), sh), tab);                   \
        __m512 w1 = _mm512_permutexvar_ps(_mm512_srlv_epi64(_mm512_set1_epi64(ld64((W) + 8)), sh), tab);             \
        ACC = _mm512_fmadd_ps(w0, x0, ACC);                                                                            \
        ACC = _mm512_fmadd_ps(w1, x1, ACC);                                                                            \
    } while (0)
#define MX_GROUP(J)                                                                                                    \
    do {                                                                                                               \
        __m512 x0 = _mm512_loadu_ps(x + 32 * (J)), x1 = _mm512_loadu_ps(x + 32 * (J) + 16);                             \
        MX_ROW(a0, wp + 16 * (J), sp + (J));                                                                           \
        MX_ROW(a1, wp + rb + 16 * (J), sp + g + (J));                                                                  \
        MX_ROW(a2, wp + 2 * rb + 16 * (J), sp + 2 * g + (J));                                                          \
        MX_ROW(a3, wp + rb3 + 16 * (J), sp + g3 + (J));                                                                \
        MX_ROW(a4, wq + 16 * (J), sq + (J));                                                                           \
        MX_ROW(a5, wq + rb + 16 * (J), sq + g + (J));                                                                  \
        MX_ROW(a6, wq + 2 * rb + 16 * (J), sq + 2 * g + (J));                                                          \
        MX_ROW(a7, wq + rb3 + 16 * (J), sq + g3 + (J));                                                                \
    } while (0)
    /* wp, wq, sp, sq and x move on with the columns */
    int64_t i = 0;
    for (; i + 128 <= tl->cols; i += 128, wp += 64, wq += 64, sp += 4, sq += 4, x += 128) {
        int64_t off = i / 2 + MS_PF_AHEAD; /* pf_row's line, the same for every row */
        if (off >= rb) off = next && off < 2 * rb ? off + 7 * rb : -1;
        if (off >= 0) {
            const uint8_t *p = wp - i / 2 + off, *q = wq - i / 2 + off;
            __builtin_prefetch(p), __builtin_prefetch(p + rb), __builtin_prefetch(p + 2 * rb), __builtin_prefetch(p + rb3);
            __builtin_prefetch(q), __builtin_prefetch(q + rb), __builtin_prefetch(q + 2 * rb), __builtin_prefetch(q + rb3);
        }
        MX_GROUP(0);
        MX_GROUP(1);
        MX_GROUP(2);
        MX_GROUP(3);
    }
    for (; i < tl->cols; i += 32, wp += 16, wq += 16, sp += 1, sq += 1, x += 32) MX_GROUP(0); /* cols % 128 */
#undef MX_GROUP
#undef MX_ROW
    float *y = tl->y[0] + tl->r;
    y[0] = tree_512p(a0), y[1] = tree_512p(a1), y[2] = tree_512p(a2), y[3] = tree_512p(a3);
    y[4] = tree_512p(a4), y[5] = tree_512p(a5), y[6] = tree_512p(a6), y[7] = tree_512p(a7);
}
/* Five and six tokens: 16-column steps (the 32-column step measured 10-35% slower there). */
MS_TILE_512(t_mx_z_1_5, dec_mx_512, tree_512p, 1, 1, 5)
MS_TILE_512(t_mx_z_1_6, dec_mx_512, tree_512p, 1, 1, 6)
MS_TILE_512(t_mx_z_2_5, dec_mx_512, tree_512p, 1, 2, 5)
MS_TILE_512(t_mx_z_2_6, dec_mx_512, tree_512p, 1, 2, 6)
MS_TILE_512(t_mx_z_4_5, dec_mx_512, tree_512p, 1, 4, 5)
MS_TILE_512(t_mx_z_4_6, dec_mx_512, tree_512p, 1, 4, 6)

static const tile_fn z_tiles[5][4][6] = {
#define ROW(T)                                                                                                         \
    {{t_##T##_z_1_1, t_##T##_z_1_2, t_##T##_z_1_3, t_##T##_z_1_4, t_##T##_z_1_5, t_##T##_z_1_6},                       \
     {t_##T##_z_2_1, t_##T##_z_2_2, t_##T##_z_2_3, t_##T##_z_2_4, t_##T##_z_2_5, t_##T##_z_2_6},                       \
     {0},                                                                                                              \
     {t_##T##_z_4_1, t_##T##_z_4_2, t_##T##_z_4_3, t_##T##_z_4_4, t_##T##_z_4_5, t_##T##_z_4_6}}
    ROW(f32), ROW(bf16), ROW(mx), ROW(fp8), ROW(int4)
#undef ROW
};

/* Rows [r0, r1) against all T tokens in tiles: rows in groups of up to rmax (4, 2, 1), tokens in
 * groups of up to tbmax. Each output element is one canonical dot whatever the tile. (Sweeping
 * columns in blocks, with the lanes carried over, measured slower here: the tiles' own reuse
 * is what counts.) */
static void rows_tiled(const ms_mat *W, const float *X, int64_t T, float *Y, int64_t ldy, int64_t r0, int64_t r1,
                       int level)
{
    int ty = W->type == MS_WT_F32    ? 0
             : W->type == MS_WT_BF16 ? 1
             : W->type == MS_WT_FP8  ? 3
             : W->type == MS_WT_INT4 ? 4
                                     : 2;
    int tbmax = level == MS_SIMD_AVX512 ? 6 : 3;
    int rmax = T == 1 || level == MS_SIMD_AVX512 ? 4 : 2; /* a GEMV: more rows, more chains */
    /* An AVX-512 MXFP4 GEMV: 8 rows, each step two dependent FMAs a row (measured 5-7% over 4) */
    if (level == MS_SIMD_AVX512 && ty == 2 && T == 1) rmax = 8;
    if (level == MS_SIMD_AVX2 && ty == 2 && T >= 4 && T <= 6) rmax = 1, tbmax = (int)T; /* t_mx_a2_1_4 .. 6 */
    tile tl = {W, 0, W->cols, {0}, {0}};
    for (int64_t r = r0; r < r1;) {
        int R = r1 - r >= rmax ? rmax : r1 - r >= 4 && rmax > 4 ? 4 : r1 - r >= 2 ? 2 : 1;
        for (int64_t t = 0; t < T;) {
            /* tokens spread evenly over the fewest groups (4 on AVX2: 2 + 2, not 3 + 1) */
            int64_t groups = (T - t + tbmax - 1) / tbmax;
            int tb = (int)((T - t + groups - 1) / groups);
            if (R == 4 && level == MS_SIMD_AVX2) tb = 1; /* (T == 1 here) */
            for (int k = 0; k < tb; k++) {
                tl.x[k] = X + (t + k) * W->cols;
                tl.y[k] = Y + (t + k) * ldy;
            }
            tl.r = r;
            tile_fn f = R == 8                     ? t_mx_z_8_1 /* the AVX-512 MXFP4 GEMV's */
                        : level == MS_SIMD_AVX512 ? z_tiles[ty][R - 1][tb - 1]
                                                  : avx2_tiles[ty][R - 1][tb - 1];
            MS_ASSERT(f);
            f(&tl);
            t += tb;
        }
        r += R;
    }
}

/* ---- Panels: each weight decoded once per step, for many tokens ----
 *
 * Tiles decode a weight vector once per group of up to 6 tokens and read both operands from L2.
 * For T >= panel_min(type, path) a panel of up to 8 rows instead goes through the columns in blocks of
 * panel_kb(path) columns: each block of its rows is decoded once into float (wd), then every token
 * runs over it, the 16 lanes of each (row, token) carried from block to block in st. A lane
 * still takes element i in increasing i, so every output is the same canonical dot as on the
 * tiles and the scalar path; only where the partial lanes wait between blocks changes. */
/* Token groups a pass over a panel takes. Each pass decodes the panel's blocks again, so on
 * AVX-512 (a block of 8 x 512 decoded in a few hundred cycles) one pass takes up to 255 tokens:
 * with 42 (14 groups) the decode was a fifth of a 128-token BF16 step on Zen 5. The lanes of a
 * pass (st: 512 bytes a token) then live in L2, which their 24 loads and stores a micro tile and
 * block do not notice. AVX2 decodes whole rows a block, into L2; its passes stay at 28 tokens. */
static inline int panel_tg(int level) { return level == MS_SIMD_AVX512 ? 85 : 14; }

/* Columns a block (a multiple of 32). AVX-512: 512, the decoded block of 8 rows in L1 (measured
 * on the Xeon and on Zen 5). AVX2: whole rows of every K3 and gpt-oss matrix (cols <= 7168):
 * on Zen 1 each block's carried lanes cost more than L2 instead of L1 for the decoded rows and
 * the tokens (moestream bench, 2 threads, bf16 T=64: 62.8 GFLOP/s with 512-column blocks, 66.6
 * with 1024, 70.5 with 4096). */
static inline int64_t panel_kb(int level) { return level == MS_SIMD_AVX512 ? 512 : 8192; }

/* From how many tokens panels beat tiles (measured with `moestream bench` and one thread, both
 * paths): at once for F32 rows, which panels read in place; for BF16 and MXFP4 rows once decoding
 * a block to memory is shared by enough tokens. The AVX2 tiles (2 x 3) lose from 8-16 tokens on
 * both machines measured. AVX2 MXFP4 runs one-row tiles of all the tokens up to 6 (t_mx_a2_1_4)
 * and panels from 7, where they tie. The AVX-512 tiles (4 x 6, the decode in registers) held out to 24-32
 * tokens on this project's Xeon. On Zen 5 (AMD EPYC), with the tiles' prefetch and the panels'
 * passes of 255 tokens and next-block prefetch, the tiles hold out to 32 tokens (BF16 panels
 * 0.83-1.00x there, MXFP4 0.94-1.10x) and panels win from 40-48 (`tests/bench/kernels-ab.sh`:
 * BF16 1.06-1.20x at 48 with two threads, MXFP4 1.07-1.23x with one and two). */
static inline int panel_min(ms_wtype type, int level)
{
    if (type == MS_WT_FP8 || type == MS_WT_INT4) return INT32_MAX; /* tiles only: wider passes dequantise (ms_kern.c) */
    if (type == MS_WT_F32) return 4;
    if (level != MS_SIMD_AVX512) return type == MS_WT_BF16 ? 8 : 7;
    if (ms_cpu_is_amd()) return 40;
    return type == MS_WT_BF16 ? 24 : 32;
}
/* Bytes of token rows a group of passes keeps (rows_panel): well inside a shared L3. */
#define GROUP_BYTES ((int64_t)6 << 20)
/* Tokens a micro tile takes (a group of the interleaved layout of ms_gemm_prep_x). */
static inline int panel_tb(int level) { return level == MS_SIMD_AVX512 ? 3 : 2; }

typedef struct {
    const float *w;    /* row k of the micro tile's segment at w + k * ws (kw floats) */
    int64_t ws;
    const float *x;    /* the group's interleaved token rows from this block's first chunk */
    float *s[3];       /* [TB] lanes: row k of the micro tile at s[t] + 16 k */
    float *y[3];       /* [TB] outputs: row k of the micro tile at y[t][k] */
    int64_t kw;
    int first;         /* first block: the lanes start at +0 */
    int fin;           /* 0: store the lanes in s; the last block, the tree into y: 1 lanes in order,
                          2 MXFP4's layout (paired or mod-4), 3 BF16's half layout (AVX2) */
    const uint8_t *pf; /* AVX2: prefetch pf_n lines from pf into L2, one a step (the next panel's rows) */
    int64_t pf_n;
} pmic;

/* AVX-512 micro tile: R rows x TB tokens, R TB zmm lanes (<= 24). */
#define MS_PMIC_512(NAME, R, TB)                                                                                       \
    MS_AVX512 static void NAME(const pmic *m)                                                                          \
    {                                                                                                                  \
        __m512 acc[R][TB];                                                                                             \
        _Pragma("GCC unroll 8") for (int k = 0; k < R; k++)                                                           \
            _Pragma("GCC unroll 3") for (int t = 0; t < TB; t++)                                                      \
                acc[k][t] = m->first ? _mm512_setzero_ps() : _mm512_loadu_ps(m->s[t] + 16 * k);                       \
        for (int64_t i = 0; i < m->kw; i += 16) {                                                                      \
            __m512 xv[TB];                                                                                             \
            _Pragma("GCC unroll 3") for (int t = 0; t < TB; t++) xv[t] = _mm512_loadu_ps(m->x + i * TB + 16 * t);     \
            _Pragma("GCC unroll 8") for (int k = 0; k < R; k++)                                                       \
            {                                                                                                          \
                __m512 wv = _mm512_loadu_ps(m->w + k * m->ws + i);                                                              \
                MS_IN_REG(wv);                                                                                         \
                _Pragma("GCC unroll 3") for (int t = 0; t < TB; t++) acc[k][t] = _mm512_fmadd_ps(wv, xv[t], acc[k][t]); \
            }                                                                                                          \
        }                                                                                                              \
        if (m->fin == 1)                                                                                               \
            _Pragma("GCC unroll 8") for (int k = 0; k < R; k++)                                                       \
                _Pragma("GCC unroll 3") for (int t = 0; t < TB; t++) m->y[t][k] = tree_512(acc[k][t]);                \
        else if (m->fin == 2)                                                                                          \
            _Pragma("GCC unroll 8") for (int k = 0; k < R; k++)                                                       \
                _Pragma("GCC unroll 3") for (int t = 0; t < TB; t++) m->y[t][k] = tree_512p(acc[k][t]);               \
        else                                                                                                           \
            _Pragma("GCC unroll 8") for (int k = 0; k < R; k++)                                                       \
                _Pragma("GCC unroll 3") for (int t = 0; t < TB; t++) _mm512_storeu_ps(m->s[t] + 16 * k, acc[k][t]);   \
    }
#define MS_PMIC_512_ROWS(R) MS_PMIC_512(pm_z_##R##_1, R, 1) MS_PMIC_512(pm_z_##R##_2, R, 2) MS_PMIC_512(pm_z_##R##_3, R, 3)
MS_PMIC_512_ROWS(1)
MS_PMIC_512_ROWS(2)
MS_PMIC_512_ROWS(4)
MS_PMIC_512_ROWS(8)

/* AVX2 micro tile: R rows x TB tokens, 2 R TB ymm lanes (<= 12). Each 8-column half of a step
 * holds the TB token vectors in registers and loads each row's weight vector once: R + TB loads
 * for R TB FMAs. (Holding the weights and folding the tokens into the FMAs took R + R TB loads,
 * and on Zen 1, one 256-bit load and one 256-bit FMA a cycle, bound the tile by its loads.) */
/* One 16-column step of an AVX2 micro tile (i: the column), on its lo, hi and m. */
#define MS_PMIC_AVX2_STEP(R, TB)                                                                                       \
    do {                                                                                                               \
        __m256 xv[TB];                                                                                             \
        _Pragma("GCC unroll 2") for (int t = 0; t < TB; t++)                                                      \
        {                                                                                                          \
            xv[t] = _mm256_loadu_ps(m->x + i * TB + 16 * t);                                                       \
            MS_IN_REG(xv[t]);                                                                                      \
        }                                                                                                          \
        _Pragma("GCC unroll 3") for (int k = 0; k < R; k++)                                                       \
        {                                                                                                          \
            __m256 wl = _mm256_loadu_ps(m->w + k * m->ws + i);                                                     \
            MS_IN_REG(wl);                                                                                         \
            _Pragma("GCC unroll 2") for (int t = 0; t < TB; t++) lo[k][t] = _mm256_fmadd_ps(wl, xv[t], lo[k][t]);  \
        }                                                                                                          \
        _Pragma("GCC unroll 2") for (int t = 0; t < TB; t++)                                                      \
        {                                                                                                          \
            xv[t] = _mm256_loadu_ps(m->x + i * TB + 16 * t + 8);                                                   \
            MS_IN_REG(xv[t]);                                                                                      \
        }                                                                                                          \
        _Pragma("GCC unroll 3") for (int k = 0; k < R; k++)                                                       \
        {                                                                                                          \
            __m256 wh = _mm256_loadu_ps(m->w + k * m->ws + i + 8);                                                 \
            MS_IN_REG(wh);                                                                                         \
            _Pragma("GCC unroll 2") for (int t = 0; t < TB; t++) hi[k][t] = _mm256_fmadd_ps(wh, xv[t], hi[k][t]);  \
        }                                                                                                          \
    } while (0)

#define MS_PMIC_AVX2(NAME, R, TB)                                                                                      \
    MS_AVX2 static void NAME(const pmic *m)                                                                            \
    {                                                                                                                  \
        __m256 lo[R][TB], hi[R][TB];                                                                                   \
        _Pragma("GCC unroll 3") for (int k = 0; k < R; k++)                                                           \
            _Pragma("GCC unroll 2") for (int t = 0; t < TB; t++)                                                      \
            {                                                                                                          \
                lo[k][t] = m->first ? _mm256_setzero_ps() : _mm256_loadu_ps(m->s[t] + 16 * k);                        \
                hi[k][t] = m->first ? _mm256_setzero_ps() : _mm256_loadu_ps(m->s[t] + 16 * k + 8);                    \
            }                                                                                                          \
        int64_t i = 0, ipf = 16 * m->pf_n < m->kw ? 16 * m->pf_n : m->kw;                                            \
        for (; i < ipf; i += 16) { /* the steps that also prefetch a line (a loop of their own: no test per step) */  \
            __builtin_prefetch(m->pf + 4 * i, 0, 2);                                                                   \
            MS_PMIC_AVX2_STEP(R, TB);                                                                                  \
        }                                                                                                              \
        for (; i < m->kw; i += 16) MS_PMIC_AVX2_STEP(R, TB);                                                           \
        _Pragma("GCC unroll 3") for (int k = 0; k < R; k++)                                                           \
            _Pragma("GCC unroll 2") for (int t = 0; t < TB; t++)                                                      \
            {                                                                                                          \
                if (m->fin) {                                                                                          \
                    m->y[t][k] = m->fin == 2   ? tree_avx2m(lo[k][t], hi[k][t])                                          \
                                 : m->fin == 3 ? tree_avx2h(lo[k][t], hi[k][t])                                          \
                                               : tree_avx2(lo[k][t], hi[k][t]);                                          \
                    continue;                                                                                          \
                }                                                                                                      \
                _mm256_storeu_ps(m->s[t] + 16 * k, lo[k][t]);                                                          \
                _mm256_storeu_ps(m->s[t] + 16 * k + 8, hi[k][t]);                                                      \
            }                                                                                                          \
    }
#define MS_PMIC_AVX2_ROWS(R) MS_PMIC_AVX2(pm_a2_##R##_1, R, 1) MS_PMIC_AVX2(pm_a2_##R##_2, R, 2)
MS_PMIC_AVX2_ROWS(1)
MS_PMIC_AVX2_ROWS(2)
MS_PMIC_AVX2_ROWS(3)

typedef void (*pmic_fn)(const pmic *);
/* [R - 1][TB - 1] */
static const pmic_fn z_pmic[8][3] = {{pm_z_1_1, pm_z_1_2, pm_z_1_3}, {pm_z_2_1, pm_z_2_2, pm_z_2_3}, {0}, {pm_z_4_1, pm_z_4_2, pm_z_4_3},
                                     {0}, {0}, {0}, {pm_z_8_1, pm_z_8_2, pm_z_8_3}};
static const pmic_fn a2_pmic[3][2] = {{pm_a2_1_1, pm_a2_1_2}, {pm_a2_2_1, pm_a2_2_2}, {pm_a2_3_1, pm_a2_3_2}};

/* Columns [c0, c0 + n) of row r (n % 16 == 0; for MXFP4 c0, n % 32 == 0) as float in the path's
 * layout (lane_pos). */
MS_AVX512 static void seg_512(const ms_mat *W, int64_t r, int64_t c0, int64_t n, float *out)
{
    const void *w = row_ptr(W, r);
    const uint8_t *sc = W->scales ? W->scales + r * (W->cols / 32) : NULL;
    for (int64_t i = 0; i < n; i += 16)
        _mm512_store_ps(out + i, W->type == MS_WT_BF16 ? dec_bf16_512(w, sc, c0 + i) : dec_mx_512(w, sc, c0 + i));
}

MS_AVX2 static void seg_avx2(const ms_mat *W, int64_t r, int64_t c0, int64_t n, float *out)
{
    const void *w = row_ptr(W, r);
    const uint8_t *sc = W->scales ? W->scales + r * (W->cols / 32) : NULL;
    __m256 o[4];
    if (W->type == MS_WT_BF16) {
        for (int64_t i = 0; i < n; i += 16) {
            dec_bf16_avx2(w, sc, c0 + i, o);
            _mm256_store_ps(out + i, o[0]);
            _mm256_store_ps(out + i + 8, o[1]);
        }
        return;
    }
    for (int64_t i = 0; i < n; i += 32) {
        dec_mx_avx2(w, sc, c0 + i, o);
        _mm256_store_ps(out + i, o[0]);
        _mm256_store_ps(out + i + 8, o[1]);
        _mm256_store_ps(out + i + 16, o[2]);
        _mm256_store_ps(out + i + 24, o[3]);
    }
}


/* The rows of a panel's next block, prefetched a few lines before each micro tile of this block
 * so that its decode (seg_512) does not wait on memory: without it seg_512 was a fifth of a
 * 128-token BF16 step on Zen 5, nearly all of it waiting for its loads; a tenth with the lines
 * brought to L2, a twentieth to L1 (the block's 8 KiB of BF16 fit beside the decoded one). */
typedef struct {
    const uint8_t *p;      /* the block's first row */
    int64_t stride, lpr;   /* bytes from row to row; lines a row */
    int64_t row, line;     /* the next line to fetch */
    int64_t left, per;     /* lines still to fetch; lines a step */
} nxpf;

static void nxpf_init(nxpf *q, const uint8_t *p, int64_t stride, int64_t row_bytes, int64_t rows, int64_t steps)
{
    *q = (nxpf){p, stride, (row_bytes + 63) / 64, 0, 0, 0, 0};
    q->left = rows * q->lpr;
    q->per = (q->left + steps - 1) / steps;
}

static inline void nxpf_step(nxpf *q)
{
    for (int64_t n = q->per < q->left ? q->per : q->left; n > 0; n--, q->left--) {
        __builtin_prefetch(q->p + q->row * q->stride + 64 * q->line, 0, 3);
        if (++q->line == q->lpr) q->line = 0, q->row++;
    }
}

static void rows_panel(const ms_mat *W, const float *X, int64_t T, float *Y, int64_t ldy, int64_t r0, int64_t r1,
                       int level)
{
    const int z = level == MS_SIMD_AVX512, RP = z ? 8 : 3, TB = panel_tb(level), TS = panel_tg(level) * TB;
    /* the tree for the decode's lane layout (lane_pos) */
    const int tree = W->type == MS_WT_MXFP4 ? 2 : W->type == MS_WT_BF16 && !z ? 3 : 1;
    const int64_t cols = W->cols, n16 = cols & ~(int64_t)15, nch = (cols + 15) / 16;
    const int64_t KB = panel_kb(level);
    /* [RP][KB] decoded row segments, 64-byte aligned (F32 rows are read in place) */
    float *wd = W->type == MS_WT_F32 ? NULL : ms_scratch_push(sizeof(float) * (size_t)(RP * KB));
    const int64_t npass = T < TS ? T : TS;
    float *st = ms_scratch_push(sizeof(float) * (size_t)(npass * RP * 16)); /* [npass][RP][16] lanes */
    /* Token groups outermost: as many passes as keep the group's token rows within GROUP_BYTES
     * (all of them for a chunk's few dozen tokens: each weight row is then read once), at least
     * one pass (AVX-512: 255 tokens, 7.3 MB at 7,168 columns). The group stays in L3 while every
     * panel of the range goes through it; with panels outermost a long prefill span's tokens
     * (4,096 x 7,168 floats: 117 MB) came from DRAM again for every panel (a third more CPU for a
     * 4,096-token prompt on the k3-slice). Each output is still one pass and panel's blocks in
     * column order: the same dots. */
    const int64_t group_passes = GROUP_BYTES / (TS * nch * 64) > 1 ? GROUP_BYTES / (TS * nch * 64) : 1;
    for (int64_t u0 = 0; u0 < T; u0 += group_passes * TS) {
        const int64_t u1 = T - u0 < group_passes * TS ? T : u0 + group_passes * TS;
        for (int64_t rp = r0; rp < r1; rp += RP) {
            int nr = r1 - rp < RP ? (int)(r1 - rp) : RP;
            /* AVX2, BF16: the next panel's rows go to L2 during this panel's first pass, a few lines a
             * micro tile, so decoding them does not wait on memory (one-token steps have the tiles'
             * prefetch; here the decode was a sixth of a batch-16 step on Zen 1; MXFP4 rows, a quarter
             * of the bytes, gained nothing). */
            const uint8_t *pf = NULL;
            int64_t pf_left = 0, pf_per = 0;
            if (!z && W->type == MS_WT_BF16 && rp + RP < r1) {
                int64_t nr2 = r1 - rp - RP < RP ? r1 - rp - RP : RP;
                pf = (const uint8_t *)row_ptr(W, rp + RP);
                pf_left = (2 * cols * nr2 + 63) / 64;
                int64_t calls = ((u1 - u0 < TS ? u1 - u0 : TS) + TB - 1) / TB * ((n16 + KB - 1) / KB);
                pf_per = (pf_left + calls - 1) / calls;
            }
            for (int64_t ts = u0; ts < u1; ts += TS) {
                int nt = u1 - ts < TS ? (int)(u1 - ts) : TS;
                for (int64_t kb = 0; kb < n16; kb += KB) {
                    pmic m;
                    m.kw = n16 - kb < KB ? n16 - kb : KB;
                    m.first = kb == 0;
                    m.fin = kb + m.kw < cols ? 0 : tree; /* the last block, and no tail */
                    const float *w0 = wd; /* row k of the panel's segment at w0 + k * m.ws */
                    m.ws = KB;
                    if (W->type == MS_WT_F32) {
                        w0 = (const float *)W->data + rp * cols + kb;
                        m.ws = cols;
                    } else {
                        for (int k = 0; k < nr; k++) {
                            if (z)
                                seg_512(W, rp + k, kb, m.kw, wd + k * KB);
                            else
                                seg_avx2(W, rp + k, kb, m.kw, wd + k * KB);
                        }
                    }
                    /* AVX-512: the next block (this panel's next columns, or the next panel's first) */
                    nxpf q = {0};
                    if (z && W->type != MS_WT_F32) {
                        int64_t c0 = kb + KB < n16 ? kb + KB : 0, r = kb + KB < n16 ? rp : rp + RP;
                        int64_t nrow = kb + KB < n16 ? nr : ts + TS >= u1 && r < r1 ? (r1 - r < RP ? r1 - r : RP) : 0;
                        int64_t ncol = n16 - c0 < KB ? n16 - c0 : KB, bf = W->type == MS_WT_BF16;
                        const uint8_t *p = (const uint8_t *)row_ptr(W, r) + (bf ? 2 * c0 : c0 / 2);
                        int64_t stride = bf ? 2 * cols : cols / 2, seg = bf ? 2 * ncol : ncol / 2;
                        if (nrow) nxpf_init(&q, p, stride, seg, nrow, (nt + TB - 1) / TB);
                    }
                    for (int t = 0; t < nt; t += TB) {
                        int tb = nt - t < TB ? nt - t : TB;
                        nxpf_step(&q);
                        m.x = X + (ts + t) * nch * 16 + kb * tb; /* group (ts + t) / TB, chunk kb / 16 */
                        for (int k0 = 0; k0 < nr;) {
                            int R = z ? (nr - k0 >= 8 ? 8 : nr - k0 >= 4 ? 4 : nr - k0 >= 2 ? 2 : 1) : (nr - k0 >= 3 ? 3 : nr - k0);
                            m.w = w0 + k0 * m.ws;
                            m.pf = pf;
                            m.pf_n = ts == u0 && k0 == 0 ? (pf_left < pf_per ? pf_left : pf_per) : 0;
                            pf += 64 * m.pf_n;
                            pf_left -= m.pf_n;
                            for (int j = 0; j < tb; j++) {
                                m.s[j] = st + ((t + j) * RP + k0) * 16;
                                m.y[j] = Y + (ts + t + j) * ldy + rp + k0;
                            }
                            pmic_fn f = z ? z_pmic[R - 1][tb - 1] : a2_pmic[R - 1][tb - 1];
                            MS_ASSERT(f);
                            f(&m);
                            k0 += R;
                        }
                    }
                }
                /* The tails (F32 / BF16 rows not a multiple of 16) and their trees. */
                if (n16 == cols) continue; /* the micro tiles wrote the trees (MXFP4 always) */
                for (int t = 0; t < nt; t++)
                    for (int k = 0; k < nr; k++) {
                        float a[16] = {0};
                        float *y = Y + (ts + t) * ldy + rp + k;
                        if (n16) lanes_unperm(W->type, level, st + (t * RP + k) * 16, a);
                        const void *w = row_ptr(W, rp + k);
                        int64_t g0 = (ts + t) / TB * TB, tb = T - g0 < TB ? T - g0 : TB;
                        const float *x = X + g0 * nch * 16 + n16 * tb + (ts + t - g0) * 16; /* the tail chunk */
                        for (int64_t i = n16; i < cols; i++) a[i & 15] = fmaf(elem(W->type, w, i), x[i - n16], a[i & 15]);
                        *y = tree16(a);
                    }
            }
        }
    }
    ms_scratch_pop(st);
    ms_scratch_pop(wd);
}
#endif /* MS_KERN_X86 */

int ms_gemm_panels(ms_wtype type, int64_t T, int level)
{
#if MS_KERN_X86
    return level >= MS_SIMD_AVX2 && T >= panel_min(type, level);
#else
    (void)type, (void)T, (void)level;
    return 0;
#endif
}

void ms_gemm_rows(const ms_mat *W, const float *X, int64_t T, float *Y, int64_t ldy, int64_t r0, int64_t r1, int level)
{
#if MS_KERN_X86
    if (level >= MS_SIMD_AVX2) {
        if (T >= panel_min(W->type, level))
            rows_panel(W, X, T, Y, ldy, r0, r1, level);
        else
            rows_tiled(W, X, T, Y, ldy, r0, r1, level);
        return;
    }
#endif
    (void)level;
    rows_scalar(W, X, T, Y, ldy, r0, r1);
}

const float *ms_gemm_prep_x(const ms_mat *W, const float *X, int64_t T, int level, float **owned)
{
    *owned = NULL;
    int pos[16], perm = 0; /* the decode's lane layout (lane_pos): the token rows follow it */
    for (int e = 0; e < 16; e++) perm |= (pos[e] = lane_pos(W->type, level, e)) != e;
    const int panels = ms_gemm_panels(W->type, T, level);
    if (T == 0 || (!perm && !panels)) return X;
    const int64_t cols = W->cols, n16 = cols & ~(int64_t)15, nch = (cols + 15) / 16;
    if (!panels) { /* tiles read rows in place: only the lane layout (the tail stays in order) */
        float *p = ms_scratch_push((size_t)(T * cols) * sizeof(float));
        for (int64_t t = 0; t < T; t++) {
            const float *src = X + t * cols;
            float *dst = p + t * cols;
            for (int64_t c = 0; c < n16; c += 16)
                for (int e = 0; e < 16; e++) dst[c + pos[e]] = src[c + e];
            memcpy(dst + n16, src + n16, sizeof(float) * (size_t)(cols - n16));
        }
        *owned = p;
        return p;
    }
#if MS_KERN_X86
    /* Panels: tokens in groups of TB; a group's rows interleaved by chunks of 16 columns (chunk
     * c of each token in turn), the last chunk zero-padded, so a micro tile reads one stream. */
    const int TB = panel_tb(level);
    float *p = ms_scratch_push_zero((size_t)(T * nch * 16) * sizeof(float));
    for (int64_t t = 0; t < T; t++) {
        int64_t g0 = t / TB * TB, tb = T - g0 < TB ? T - g0 : TB;
        float *dst = p + g0 * nch * 16 + (t - g0) * 16;
        const float *src = X + t * cols;
        if (!perm) {
            for (int64_t c = 0; c < cols; c += 16)
                memcpy(dst + (c >> 4) * tb * 16, src + c, sizeof(float) * (size_t)(cols - c < 16 ? cols - c : 16));
            continue;
        }
        for (int64_t c = 0; c < cols; c++) dst[(c >> 4) * tb * 16 + (c < n16 ? pos[c & 15] : c & 15)] = src[c];
    }
    *owned = p;
    return p;
#else
    return X;
#endif
}
