/* ms_gemm: the weight matmul kernels: FP32 16-lane canonical dot products, register-blocked over rows and tokens (scalar, AVX2, AVX-512). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_kern.h"
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
    default: return (const uint8_t *)W->data + r * (W->cols / 2);
    }
}

/* After the vector loop: lanes in a[16] per (row, token); the tail elements (F32 / BF16 only:
 * MXFP4 rows are whole groups of 32) go to their lanes, then the tree. */
static inline void finish(const tile *tl, int k, int t, float a[16], int64_t n16)
{
    const void *w = row_ptr(tl->W, tl->r + k);
    for (int64_t i = n16; i < tl->cols; i++) a[i & 15] = fmaf(elem(tl->W->type, w, i), tl->x[t][i], a[i & 15]);
    tl->y[t][tl->r + k] = tree16(a);
}

#if MS_KERN_X86
/* ---- AVX2: a dot's 16 lanes are two ymm (lanes 0-7, 8-15) ---- */

MS_AVX2 static inline void dec_f32_avx2(const void *w, const uint8_t *s, int64_t i, __m256 *lo, __m256 *hi)
{
    (void)s;
    *lo = _mm256_loadu_ps((const float *)w + i);
    *hi = _mm256_loadu_ps((const float *)w + i + 8);
}

MS_AVX2 static inline void dec_bf16_avx2(const void *w, const uint8_t *s, int64_t i, __m256 *lo, __m256 *hi)
{
    (void)s;
    __m256i v = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
    *lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(v)), 16));
    *hi = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(v, 1)), 16));
}

MS_AVX2 static inline void dec_mx_avx2(const void *w, const uint8_t *s, int64_t i, __m256 *lo, __m256 *hi)
{
    __m256i tab = _mm256_load_si256((const __m256i *)ms_mx_tab_f[s[i >> 5]]);
    uint32_t a, b;
    memcpy(&a, (const uint8_t *)w + (i >> 1), 4);
    memcpy(&b, (const uint8_t *)w + (i >> 1) + 4, 4);
    *lo = ms_mx_decode8_f(tab, a);
    *hi = ms_mx_decode8_f(tab, b);
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

/* One tile kernel per (decoder, R, TB): the accumulators stay in registers (2 R TB ymm <= 14). */
#define MS_TILE_AVX2(NAME, DEC, R, TB)                                                                                 \
    MS_AVX2 static void NAME(const tile *tl)                                                                           \
    {                                                                                                                  \
        __m256 lo[R][TB], hi[R][TB];                                                                                   \
        const void *w[R];                                                                                              \
        const uint8_t *sc[R];                                                                                          \
        _Pragma("GCC unroll 6") for (int k = 0; k < R; k++)                                                           \
        {                                                                                                              \
            w[k] = row_ptr(tl->W, tl->r + k);                                                                          \
            sc[k] = tl->W->scales ? tl->W->scales + (tl->r + k) * (tl->cols / 32) : NULL;                             \
            _Pragma("GCC unroll 6") for (int t = 0; t < TB; t++) lo[k][t] = hi[k][t] = _mm256_setzero_ps();           \
        }                                                                                                              \
        int64_t n16 = tl->cols & ~(int64_t)15;                                                                         \
        for (int64_t i = 0; i < n16; i += 16) {                                                                        \
            _Pragma("GCC unroll 6") for (int k = 0; k < R; k++)                                                       \
            {                                                                                                          \
                __m256 wl, wh;                                                                                         \
                DEC(w[k], sc[k], i, &wl, &wh);                                                                         \
                _Pragma("GCC unroll 6") for (int t = 0; t < TB; t++)                                                  \
                {                                                                                                      \
                    lo[k][t] = _mm256_fmadd_ps(wl, _mm256_loadu_ps(tl->x[t] + i), lo[k][t]);                          \
                    hi[k][t] = _mm256_fmadd_ps(wh, _mm256_loadu_ps(tl->x[t] + i + 8), hi[k][t]);                      \
                }                                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
        for (int k = 0; k < R; k++)                                                                                    \
            for (int t = 0; t < TB; t++) {                                                                             \
                if (n16 == tl->cols) { /* no tail: the tree in registers */                                            \
                    tl->y[t][tl->r + k] = tree_avx2(lo[k][t], hi[k][t]);                                               \
                    continue;                                                                                          \
                }                                                                                                      \
                float a[16];                                                                                           \
                _mm256_storeu_ps(a, lo[k][t]);                                                                         \
                _mm256_storeu_ps(a + 8, hi[k][t]);                                                                     \
                finish(tl, k, t, a, n16);                                                                              \
            }                                                                                                          \
    }

/* Tiles of up to two rows and three tokens (12 accumulators, 2 weight registers, x from L1):
 * each decoded weight vector serves three FMAs pairs; four rows for one token (a GEMV: eight
 * independent chains). The sizes were chosen by `moestream bench` on this project's machines. */
#define MS_TILES_AVX2(T, DEC)                                                                                          \
    MS_TILE_AVX2(t_##T##_a2_1_1, DEC, 1, 1)                                                                            \
    MS_TILE_AVX2(t_##T##_a2_1_2, DEC, 1, 2)                                                                            \
    MS_TILE_AVX2(t_##T##_a2_1_3, DEC, 1, 3)                                                                            \
    MS_TILE_AVX2(t_##T##_a2_2_1, DEC, 2, 1)                                                                            \
    MS_TILE_AVX2(t_##T##_a2_2_2, DEC, 2, 2)                                                                            \
    MS_TILE_AVX2(t_##T##_a2_2_3, DEC, 2, 3)                                                                            \
    MS_TILE_AVX2(t_##T##_a2_4_1, DEC, 4, 1)
MS_TILES_AVX2(f32, dec_f32_avx2)
MS_TILES_AVX2(bf16, dec_bf16_avx2)
MS_TILES_AVX2(mx, dec_mx_avx2)

typedef void (*tile_fn)(const tile *);
/* [type][R - 1][TB - 1] (R = 1, 2, 4) */
static const tile_fn avx2_tiles[3][4][6] = {
#define ROW(T)                                                                                                         \
    {{t_##T##_a2_1_1, t_##T##_a2_1_2, t_##T##_a2_1_3},                                                                 \
     {t_##T##_a2_2_1, t_##T##_a2_2_2, t_##T##_a2_2_3},                                                                 \
     {0},                                                                                                              \
     {t_##T##_a2_4_1}}
    ROW(f32), ROW(bf16), ROW(mx)
#undef ROW
};

/* ---- AVX-512: a dot's 16 lanes are one zmm ---- */
#define MS_AVX512 __attribute__((target("avx512f,avx2,fma")))

MS_AVX512 static inline __m512 dec_f32_512(const void *w, const uint8_t *s, int64_t i)
{
    (void)s;
    return _mm512_loadu_ps((const float *)w + i);
}

MS_AVX512 static inline __m512 dec_bf16_512(const void *w, const uint8_t *s, int64_t i)
{
    (void)s;
    __m256i v = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

/* 16 E2M1 elements: lane j takes nibble j of the 8 bytes (j < 8 from the first word), looked up
 * in the scale's 8 magnitudes (repeated for the sign half), the sign restored by the XOR trick
 * of ms_mx_tab_f. */
MS_AVX512 static inline __m512 dec_mx_512(const void *w, const uint8_t *s, int64_t i)
{
    const __m512i sh = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    __m512i tab = _mm512_broadcast_i64x4(_mm256_load_si256((const __m256i *)ms_mx_tab_f[s[i >> 5]]));
    uint32_t a, b;
    memcpy(&a, (const uint8_t *)w + (i >> 1), 4);
    memcpy(&b, (const uint8_t *)w + (i >> 1) + 4, 4);
    __m512i words = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32((int)a)), _mm256_set1_epi32((int)b), 1);
    __m512i idx = _mm512_srlv_epi32(words, sh);
    __m512i v = _mm512_xor_si512(_mm512_permutexvar_epi32(idx, tab), _mm512_slli_epi32(idx, 28));
    return _mm512_castsi512_ps(v);
}

/* The tree of ms_gemm_dot over the 16 lanes of v, in registers (lanes 0-7 plus 8-15 first). */
MS_AVX512 static inline float tree_512(__m512 v)
{
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return tree_avx2(_mm512_castps512_ps256(v), hi);
}

/* One tile kernel per (decoder, R, TB): R TB zmm accumulators (<= 24 of 32). */
#define MS_TILE_512(NAME, DEC, R, TB)                                                                                  \
    MS_AVX512 static void NAME(const tile *tl)                                                                         \
    {                                                                                                                  \
        __m512 acc[R][TB];                                                                                             \
        const void *w[R];                                                                                              \
        const uint8_t *sc[R];                                                                                          \
        _Pragma("GCC unroll 6") for (int k = 0; k < R; k++)                                                           \
        {                                                                                                              \
            w[k] = row_ptr(tl->W, tl->r + k);                                                                          \
            sc[k] = tl->W->scales ? tl->W->scales + (tl->r + k) * (tl->cols / 32) : NULL;                             \
            _Pragma("GCC unroll 6") for (int t = 0; t < TB; t++) acc[k][t] = _mm512_setzero_ps();                     \
        }                                                                                                              \
        int64_t n16 = tl->cols & ~(int64_t)15;                                                                         \
        for (int64_t i = 0; i < n16; i += 16) {                                                                        \
            _Pragma("GCC unroll 6") for (int k = 0; k < R; k++)                                                       \
            {                                                                                                          \
                __m512 wv = DEC(w[k], sc[k], i);                                                                       \
                _Pragma("GCC unroll 6") for (int t = 0; t < TB; t++)                                                  \
                    acc[k][t] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(tl->x[t] + i), acc[k][t]);                        \
            }                                                                                                          \
        }                                                                                                              \
        for (int k = 0; k < R; k++)                                                                                    \
            for (int t = 0; t < TB; t++) {                                                                             \
                if (n16 == tl->cols) { /* no tail: the tree in registers */                                            \
                    tl->y[t][tl->r + k] = tree_512(acc[k][t]);                                                         \
                    continue;                                                                                          \
                }                                                                                                      \
                float a[16];                                                                                           \
                _mm512_storeu_ps(a, acc[k][t]);                                                                        \
                finish(tl, k, t, a, n16);                                                                              \
            }                                                                                                          \
    }

/* Tiles of up to four rows and six tokens (24 accumulators, the six x vectors in registers,
 * one weight vector): each decoded weight vector serves six FMAs, each x vector four. */
#define MS_TILES_512(T, DEC)                                                                                           \
    MS_TILE_512(t_##T##_z_1_1, DEC, 1, 1)                                                                              \
    MS_TILE_512(t_##T##_z_1_2, DEC, 1, 2)                                                                              \
    MS_TILE_512(t_##T##_z_1_3, DEC, 1, 3)                                                                              \
    MS_TILE_512(t_##T##_z_1_4, DEC, 1, 4)                                                                              \
    MS_TILE_512(t_##T##_z_1_5, DEC, 1, 5)                                                                              \
    MS_TILE_512(t_##T##_z_1_6, DEC, 1, 6)                                                                              \
    MS_TILE_512(t_##T##_z_2_1, DEC, 2, 1)                                                                              \
    MS_TILE_512(t_##T##_z_2_2, DEC, 2, 2)                                                                              \
    MS_TILE_512(t_##T##_z_2_3, DEC, 2, 3)                                                                              \
    MS_TILE_512(t_##T##_z_2_4, DEC, 2, 4)                                                                              \
    MS_TILE_512(t_##T##_z_2_5, DEC, 2, 5)                                                                              \
    MS_TILE_512(t_##T##_z_2_6, DEC, 2, 6)                                                                              \
    MS_TILE_512(t_##T##_z_4_1, DEC, 4, 1)                                                                              \
    MS_TILE_512(t_##T##_z_4_2, DEC, 4, 2)                                                                              \
    MS_TILE_512(t_##T##_z_4_3, DEC, 4, 3)                                                                              \
    MS_TILE_512(t_##T##_z_4_4, DEC, 4, 4)                                                                              \
    MS_TILE_512(t_##T##_z_4_5, DEC, 4, 5)                                                                              \
    MS_TILE_512(t_##T##_z_4_6, DEC, 4, 6)
MS_TILES_512(f32, dec_f32_512)
MS_TILES_512(bf16, dec_bf16_512)
MS_TILES_512(mx, dec_mx_512)

static const tile_fn z_tiles[3][4][6] = {
#define ROW(T)                                                                                                         \
    {{t_##T##_z_1_1, t_##T##_z_1_2, t_##T##_z_1_3, t_##T##_z_1_4, t_##T##_z_1_5, t_##T##_z_1_6},                       \
     {t_##T##_z_2_1, t_##T##_z_2_2, t_##T##_z_2_3, t_##T##_z_2_4, t_##T##_z_2_5, t_##T##_z_2_6},                       \
     {0},                                                                                                              \
     {t_##T##_z_4_1, t_##T##_z_4_2, t_##T##_z_4_3, t_##T##_z_4_4, t_##T##_z_4_5, t_##T##_z_4_6}}
    ROW(f32), ROW(bf16), ROW(mx)
#undef ROW
};

/* Rows [r0, r1) against all T tokens in tiles: rows in groups of up to rmax (4, 2, 1), tokens in
 * groups of up to tbmax. Each output element is one canonical dot whatever the tile. (Sweeping
 * columns in blocks, with the lanes carried over, measured slower here: the tiles' own reuse
 * is what counts.) */
static void rows_tiled(const ms_mat *W, const float *X, int64_t T, float *Y, int64_t ldy, int64_t r0, int64_t r1,
                       int level)
{
    int ty = W->type == MS_WT_F32 ? 0 : W->type == MS_WT_BF16 ? 1 : 2;
    int tbmax = level == MS_SIMD_AVX512 ? 6 : 3;
    int rmax = T == 1 || level == MS_SIMD_AVX512 ? 4 : 2; /* a GEMV: more rows, more chains */
    tile tl = {W, 0, W->cols, {0}, {0}};
    for (int64_t r = r0; r < r1;) {
        int R = r1 - r >= rmax ? rmax : r1 - r >= 2 ? 2 : 1;
        for (int64_t t = 0; t < T;) {
            int tb = T - t >= tbmax ? tbmax : (int)(T - t);
            if (R == 4 && level == MS_SIMD_AVX2) tb = 1; /* (T == 1 here) */
            for (int k = 0; k < tb; k++) {
                tl.x[k] = X + (t + k) * W->cols;
                tl.y[k] = Y + (t + k) * ldy;
            }
            tl.r = r;
            tile_fn f = level == MS_SIMD_AVX512 ? z_tiles[ty][R - 1][tb - 1] : avx2_tiles[ty][R - 1][tb - 1];
            MS_ASSERT(f);
            f(&tl);
            t += tb;
        }
        r += R;
    }
}
#endif /* MS_KERN_X86 */

void ms_gemm_rows(const ms_mat *W, const float *X, int64_t T, float *Y, int64_t ldy, int64_t r0, int64_t r1, int level)
{
#if MS_KERN_X86
    if (level >= MS_SIMD_AVX2) {
        rows_tiled(W, X, T, Y, ldy, r0, r1, level);
        return;
    }
#endif
    (void)level;
    rows_scalar(W, X, T, Y, ldy, r0, r1);
}
