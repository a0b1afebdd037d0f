/* ms_kern: f32/bf16/MXFP4 decoding, the canonical dot product and the row-parallel matmul. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ms_bfc.h"
#include "ms_err.h"
#include "ms_fp8.h"
#include "ms_int4.h"
#include "ms_scratch.h"
#include "ms_cpu.h"
#include "ms_kern.h"
#include "ms_kern_int.h"

/* ---------------------------------------------------------------------------------------
 * Tables and dispatch state
 * ------------------------------------------------------------------------------------- */

/* E2M1 nibble -> value (spec §4.4): bit 3 sign, then 0, .5, 1, 1.5, 2, 3, 4, 6. */
static const float e2m1_tab[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                   -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

/* E8M0 byte s -> 2^(s-127) as float (s = 0 is the subnormal 2^-127); s = 255 -> 0. */
static float mx_scale[256];

/* SIMD decode tables, built from e2m1_tab and mx_scale by the scalar formula so the SIMD path
 * decodes to exactly the same values. For scale byte s and magnitude m = nibble & 7:
 *   ms_mx_tab_f[s][m] = bits of (float)(E2M1(m) * scale(s))            ^ (m << 28)
 * (the low 32 bits of that double are always 0: at most 2 significant bits). The XOR with
 * m << 28 lets the kernel restore the value and add the sign bit with one XOR by
 * (nibble << 28); see mx_decode8_f. Rows are 32 bytes so one row is one ymm load. */
_Alignas(32) uint32_t ms_mx_tab_f[256][8];
/* ms_mx_tab16[s][n] = e2m1_tab[n] * mx_scale[s]: the scalar formula itself, one zmm a scale. */
_Alignas(64) float ms_mx_tab16[256][16];
/* ms_mx_tab_b[s][n] and [s][16 + n]: bits 16-23 and 24-31 of that float (its low 16 bits are 0:
 * at most 2 significant bits), the two byte tables of the AVX2 decode's vpshufb. */
_Alignas(32) uint8_t ms_mx_tab_b[256][32];

static pthread_once_t kern_once = PTHREAD_ONCE_INIT;

static void kern_init_once(void)
{
    for (int s = 0; s < 256; s++) mx_scale[s] = s == 255 ? 0.0f : ldexpf(1.0f, s - 127);
    for (int s = 0; s < 256; s++) {
        for (uint32_t m = 0; m < 8; m++) {
            float f = e2m1_tab[m] * mx_scale[s];
            double d = (double)f;
            uint32_t fb;
            uint64_t db;
            memcpy(&fb, &f, 4);
            memcpy(&db, &d, 8);
            MS_ASSERT((db & 0xffffffffu) == 0);
            ms_mx_tab_f[s][m] = fb ^ (m << 28);
        }
        for (int n = 0; n < 16; n++) {
            ms_mx_tab16[s][n] = e2m1_tab[n] * mx_scale[s];
            uint32_t fb;
            memcpy(&fb, &ms_mx_tab16[s][n], 4);
            MS_ASSERT((fb & 0xffffu) == 0);
            ms_mx_tab_b[s][n] = (uint8_t)(fb >> 16);
            ms_mx_tab_b[s][16 + n] = (uint8_t)(fb >> 24);
        }
    }
    ms_cpu_init();
}

void ms_kern_init(void) { pthread_once(&kern_once, kern_init_once); }

/* ---------------------------------------------------------------------------------------
 * Scalar conversions and decoding (the reference semantics of every SIMD routine)
 * ------------------------------------------------------------------------------------- */

float ms_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0) {
        if (m == 0) {
            u = sign;
        } else {
            /* Subnormal half m * 2^-24: normalise into a float exponent. */
            int sh = 0;
            while (!(m & 0x400u)) {
                m <<= 1;
                sh++;
            }
            u = sign | ((uint32_t)(113 - sh) << 23) | ((m & 0x3ffu) << 13);
        }
    } else if (e == 31) {
        u = sign | 0x7f800000u | (m << 13); /* inf, or NaN keeping its payload */
    } else {
        u = sign | ((e + 112u) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t ms_f32_to_bf16_trunc(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

float ms_e2m1_value(unsigned n)
{
    MS_ASSERT(n < 16);
    return e2m1_tab[n];
}

/* packed: uint8[cols/2], scales: uint8[cols/32] -> out: float[cols]. */
static void mx_dequant_scalar(const uint8_t *packed, const uint8_t *scales, int64_t cols,
                              float *out)
{
    for (int64_t g = 0; g < cols / 32; g++) {
        float sc = mx_scale[scales[g]];
        const uint8_t *p = packed + g * 16;
        float *o = out + g * 32;
        for (int i = 0; i < 16; i++) {
            o[2 * i] = e2m1_tab[p[i] & 15] * sc; /* low nibble = even column (spec §4.4) */
            o[2 * i + 1] = e2m1_tab[p[i] >> 4] * sc;
        }
    }
}

static void bf16_row_scalar(const uint16_t *w, int64_t n, float *out)
{
    for (int64_t i = 0; i < n; i++) out[i] = ms_bf16_to_f32(w[i]);
}

/* The canonical final combine of the eight lane accumulators (ms_kern.h). */
static inline double combine8(const double a[8])
{
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

static double dot_scalar(const float *a, const float *b, int64_t n)
{
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += (double)a[i + j] * (double)b[i + j];
    for (; i < n; i++) acc[i & 7] += (double)a[i] * (double)b[i];
    return combine8(acc);
}

/* ---------------------------------------------------------------------------------------
 * AVX2 + FMA kernels. Lane layout: for each block of 8 elements i..i+7, ymm "lo" holds
 * acc[0..3] (elements i..i+3) and ymm "hi" holds acc[4..7]. A product of two floats is exact
 * in double, so fmadd(a, b, acc) rounds exactly like acc + a*b in the scalar loop.
 * ------------------------------------------------------------------------------------- */
#if MS_KERN_X86

/* Store the two lane vectors into acc[8] for the scalar tail and the combine. */
MS_AVX2 static inline void acc_store(__m256d lo, __m256d hi, double acc[8])
{
    _mm256_storeu_pd(acc, lo);
    _mm256_storeu_pd(acc + 4, hi);
}

MS_AVX2 static inline __m256d cvt4(const float *p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }

MS_AVX2 static double dot_avx2(const float *a, const float *b, int64_t n)
{
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        lo = _mm256_fmadd_pd(cvt4(a + i), cvt4(b + i), lo);
        hi = _mm256_fmadd_pd(cvt4(a + i + 4), cvt4(b + i + 4), hi);
    }
    double acc[8];
    acc_store(lo, hi, acc);
    for (; i < n; i++) acc[i & 7] += (double)a[i] * (double)b[i];
    return combine8(acc);
}

MS_AVX2 static void mx_dequant_avx2(const uint8_t *packed, const uint8_t *scales, int64_t cols,
                                    float *out)
{
    for (int64_t g = 0; g < cols / 32; g++) {
        __m256i tab = _mm256_load_si256((const __m256i *)ms_mx_tab_f[scales[g]]);
        for (int q = 0; q < 4; q++) {
            uint32_t w;
            memcpy(&w, packed + g * 16 + q * 4, 4);
            _mm256_storeu_ps(out + g * 32 + q * 8, ms_mx_decode8_f(tab, w));
        }
    }
}

MS_AVX2 static void bf16_row_avx2(const uint16_t *w, int64_t n, float *out)
{
    const __m128i z = _mm_setzero_si128();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i v = _mm_loadu_si128((const __m128i *)(w + i));
        _mm_storeu_si128((__m128i *)(out + i), _mm_unpacklo_epi16(z, v));
        _mm_storeu_si128((__m128i *)(out + i + 4), _mm_unpackhi_epi16(z, v));
    }
    for (; i < n; i++) out[i] = ms_bf16_to_f32(w[i]);
}

#endif /* MS_KERN_X86 */

/* ---------------------------------------------------------------------------------------
 * Public decode / dot entry points
 * ------------------------------------------------------------------------------------- */

static int use_simd(void)
{
    ms_kern_init();
    return ms_cpu_simd_enabled();
}

void ms_mxfp4_dequant_row(const uint8_t *packed, const uint8_t *scales, int64_t cols, float *out)
{
    MS_ASSERT(cols >= 0 && cols % 32 == 0);
    int simd = use_simd(); /* also builds the tables */
#if MS_KERN_X86
    if (simd) {
        mx_dequant_avx2(packed, scales, cols, out);
        return;
    }
#endif
    (void)simd;
    mx_dequant_scalar(packed, scales, cols, out);
}

/* Decode row r of W into out[cols] with the given path. */
static void mat_row(const ms_mat *W, int64_t r, float *out, int simd)
{
    int64_t c = W->cols;
    (void)simd; /* unused without x86 */
    switch (W->type) {
    case MS_WT_F32:
        memcpy(out, (const float *)W->data + r * c, (size_t)c * sizeof(float));
        return;
    case MS_WT_BF16:
#if MS_KERN_X86
        if (simd) {
            bf16_row_avx2((const uint16_t *)W->data + r * c, c, out);
            return;
        }
#endif
        bf16_row_scalar((const uint16_t *)W->data + r * c, c, out);
        return;
    case MS_WT_FP8:
        /* the AVX2 block decode gives the table's values: the same bits */
        ms_fp8_dequant_rows_at((const uint8_t *)W->data, W->scales, c, r, 1, out, simd ? ms_cpu_level() : MS_SIMD_SCALAR);
        return;
    case MS_WT_INT4:
        ms_int4_dequant_rows_at((const uint8_t *)W->data, W->scales, c, r, 1, out, simd ? ms_cpu_level() : MS_SIMD_SCALAR);
        return;
    case MS_WT_MXFP4: {
        const uint8_t *p = (const uint8_t *)W->data + r * (c / 2);
        const uint8_t *s = W->scales + r * (c / 32);
#if MS_KERN_X86
        if (simd) {
            mx_dequant_avx2(p, s, c, out);
            return;
        }
#endif
        mx_dequant_scalar(p, s, c, out);
        return;
    }
    }
    MS_ASSERT(!"unknown ms_wtype");
}

static void check_mat(const ms_mat *W)
{
    MS_ASSERT(W && W->rows >= 0 && W->cols >= 0);
    MS_ASSERT(W->data || W->rows == 0 || W->cols == 0);
    MS_ASSERT(W->type == MS_WT_F32 || W->type == MS_WT_BF16 || W->type == MS_WT_MXFP4 || W->type == MS_WT_FP8 ||
              W->type == MS_WT_INT4);
    if (W->type == MS_WT_MXFP4 || W->type == MS_WT_INT4) MS_ASSERT(W->cols % 32 == 0 && (W->scales || W->rows == 0));
    if (W->type == MS_WT_FP8) MS_ASSERT(W->scales || W->rows == 0 || W->cols == 0);
}

void ms_kern_row_scalar(const ms_mat *W, int64_t r, float *out) { mat_row(W, r, out, 0); }

void ms_mat_row_f32(const ms_mat *W, int64_t r, float *out)
{
    check_mat(W);
    MS_ASSERT(r >= 0 && r < W->rows);
    mat_row(W, r, out, use_simd());
}

double ms_dot_f32(const float *a, const float *b, int64_t n)
{
    int simd = use_simd();
#if MS_KERN_X86
    if (simd) return dot_avx2(a, b, n);
#endif
    (void)simd;
    return dot_scalar(a, b, n);
}

uint64_t ms_mat_bytes(const ms_mat *W)
{
    uint64_t r = (uint64_t)W->rows, c = (uint64_t)W->cols;
    switch (W->type) {
    case MS_WT_F32:
        return r * c * 4;
    case MS_WT_BF16:
        return r * c * 2;
    case MS_WT_MXFP4:
        return r * (c / 2) + r * (c / 32);
    case MS_WT_FP8:
        return r * c + (uint64_t)ms_fp8_blocks((int64_t)r) * (uint64_t)ms_fp8_blocks((int64_t)c) * sizeof(float);
    case MS_WT_INT4:
        return r * (c / 2) + r * (c / 32) * 2;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Matmul driver: the pool splits the output rows in blocks of MS_RB rows; every output
 * element is one canonical dot, so neither the split nor T changes any bit.
 * ------------------------------------------------------------------------------------- */

enum { MS_RB = 4 };

typedef struct {
    const ms_mat *W;
    const float *X; /* [T][cols] */
    int64_t T;
    float *Y; /* [T][rows] */
    int level; /* MS_SIMD_* */
} mm_ctx;

static void mm_chunk(void *vctx, int64_t b0, int64_t b1)
{
    const mm_ctx *c = vctx;
    int64_t r0 = b0 * MS_RB, r1 = b1 * MS_RB;
    if (r1 > c->W->rows) r1 = c->W->rows;
    ms_gemm_rows(c->W, c->X, c->T, c->Y, c->W->rows, r0, r1, c->level);
}

/* Token rows per matmul tile (a multiple of every kernel's token group: 2 and 3). */
#define MS_MM_TOKEN_TILE 384

/* Below this many multiply-adds a chunk is not worth waking a thread for. */
#define MS_MIN_CHUNK_WORK (1 << 15)

/* Bytes of rows [0, n) of a matrix of W's type and width, and the offset of their scales. */
static uint64_t rows_bytes(const ms_mat *W, int64_t n) { return ms_mat_bytes(&(ms_mat){W->type, n, W->cols, 0, 0, 0, 0}); }

/* A coded chunk: each task decodes its blocks a block or a group at a time into a per-task
 * buffer (about 64 KiB, or 16 rows for panels: cache-resident) and runs the same row kernels on
 * it, so every output element is the same canonical dot as from resident rows. */
typedef struct {
    ms_mat_packed *pk;
    int64_t rows, cols; /* of the chunk */
    const float *X;
    int64_t T;
    float *Y;           /* [T][rows] */
    int level;          /* MS_SIMD_* */
} pk_ctx;

static void pk_task(void *vctx, int64_t b0, int64_t b1)
{
    const pk_ctx *c = vctx;
    int64_t rpb = c->pk->rows_per_block, cols = c->cols;
    /* Blocks decoded a group: one for tiles, whose token rows are read again for every few rows
     * anyway (a larger group only leaves L1 and L2 to the decoded rows); for panels enough for 16
     * rows, so that every panel is whole (a K3 projection's block holds 4 rows, half a panel) and
     * the token rows are read once per 8 rows, not per block (kernels-ab.sh, T = 48 and 64:
     * 1.19-1.49x). */
    int64_t g = ms_gemm_panels(MS_WT_BF16, c->T, c->level) ? (16 + rpb - 1) / rpb : 1;
    uint16_t *buf = ms_scratch_push(sizeof(uint16_t) * (size_t)(g * rpb * cols)); /* [g * rpb][cols] */
    float *y = ms_scratch_push(sizeof(float) * (size_t)(c->T * g * rpb));          /* [T][nr] */
    for (int64_t b = b0; b < b1;) {
        int64_t n = b1 - b < g ? b1 - b : g, r = b * rpb, nr = 0;
        uint32_t bad = 0; /* bit j: block b + j did not decode (g <= 16) */
        int (*dec)(const uint8_t *, size_t, uint16_t *, size_t) =
            c->pk->verified ? ms_bfc_decode_verified : ms_bfc_decode;
        for (int64_t j = 0; j < n; j++) {
            int64_t rj = c->rows - (r + nr) < rpb ? c->rows - (r + nr) : rpb;
            uint64_t s = b + j ? c->pk->end[b + j - 1] : 0;
            if (dec(c->pk->src + s, (size_t)(c->pk->end[b + j] - s), buf + nr * cols, (size_t)(rj * cols)) != 0) {
                int none = -1, bj = (int)(b + j);
                __atomic_compare_exchange_n(&c->pk->bad_block, &none, bj, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
                memset(buf + nr * cols, 0, sizeof(uint16_t) * (size_t)(rj * cols));
                bad |= 1u << j;
            }
            nr += rj;
        }
        /* The next group's bytes to L2 while this one's dot products run: otherwise memory
         * idles during them and the next decode waits for its lines. */
        int64_t e = b + n + n < b1 ? b + n + n : b1;
        for (uint64_t o = c->pk->end[b + n - 1]; b + n < b1 && o < c->pk->end[e - 1]; o += 64)
            __builtin_prefetch(c->pk->src + o, 0, 2);
        ms_mat blk = {MS_WT_BF16, nr, cols, buf, NULL, NULL, NULL};
        ms_gemm_rows(&blk, c->X, c->T, y, nr, 0, nr, c->level);
        for (int64_t j = 0; bad && j < n; j++) { /* a block that did not decode gives zero rows */
            int64_t rj = nr - j * rpb < rpb ? nr - j * rpb : rpb;
            if (bad >> j & 1)
                for (int64_t t = 0; t < c->T; t++) memset(y + t * nr + j * rpb, 0, sizeof(float) * (size_t)rj);
        }
        for (int64_t t = 0; t < c->T; t++) memcpy(c->Y + t * c->rows + r, y + t * nr, sizeof(float) * (size_t)nr);
        b += n;
    }
    ms_scratch_pop(y);
    ms_scratch_pop(buf);
}

static void matmul_packed(ms_mat_packed *pk, int64_t rows, int64_t cols, const float *X, int64_t T, float *Y,
                          ms_pool *pool)
{
    MS_ASSERT(pk->n_blocks == (rows + pk->rows_per_block - 1) / pk->rows_per_block);
    ms_kern_init();
    int level = ms_cpu_level();
    ms_mat shape = {MS_WT_BF16, rows, cols, NULL, NULL, NULL, NULL};
    for (int64_t t0 = 0; t0 < T; t0 += MS_MM_TOKEN_TILE) { /* see ms_matmul */
        int64_t nt = T - t0 < MS_MM_TOKEN_TILE ? T - t0 : MS_MM_TOKEN_TILE;
        float *xp;
        pk_ctx c = {pk, rows, cols, ms_gemm_prep_x(&shape, X + t0 * cols, nt, level, &xp), nt, Y + t0 * rows, level};
        ms_pool_for(pool, pk->n_blocks, 1, pk_task, &c);
        ms_scratch_pop(xp);
    }
}

/* FP8 and INT4: each task dequantises FP8_GROUP rows at a time into a per-task buffer
 * (ms_fp8_dequant_rows_at, ms_int4_dequant_rows_at: exact) and runs the F32 row kernels on it, so every output element is the canonical dot of the
 * dequantised row, whatever the path, the grouping or the token tile. */
enum { FP8_GROUP = 16 };

/* Token rows up to which FP8 matrices go through the tiles, which decode the codes in registers,
 * rather than being dequantised 16 rows at a time for the F32 kernels (`tests/bench/kernels-ab.sh`
 * with `moestream bench`'s fp8 shapes, Zen 5, 2 threads: AVX-512 tiles 4.0-4.4x at 1 token,
 * 1.3-1.7x at 16 and 32, 0.9-1.4x at 64; AVX2 tiles 2.4x at 1, 1.2-1.3x at 4, 0.5-1.0x from 16;
 * docs/PERFORMANCE.md "FP8 tiles"). */
static int fp8_tile_tokens(int level) { return level >= MS_SIMD_AVX512 ? 32 : level >= MS_SIMD_AVX2 ? 4 : 0; }

typedef struct {
    const ms_mat *W;
    const float *X;     /* prepared for F32 rows */
    int64_t T;
    float *Y;           /* [T][rows] */
    int level;
} f8_ctx;

static void f8_task(void *vctx, int64_t g0, int64_t g1)
{
    const f8_ctx *c = vctx;
    const int64_t rows = c->W->rows, cols = c->W->cols;
    float *buf = ms_scratch_push(sizeof(float) * (size_t)(FP8_GROUP * cols)); /* [FP8_GROUP][cols] */
    float *y = ms_scratch_push(sizeof(float) * (size_t)(c->T * FP8_GROUP));   /* [T][nr] */
    for (int64_t g = g0; g < g1; g++) {
        int64_t r = g * FP8_GROUP, nr = rows - r < FP8_GROUP ? rows - r : FP8_GROUP;
        if (c->W->type == MS_WT_INT4)
            ms_int4_dequant_rows_at((const uint8_t *)c->W->data, c->W->scales, cols, r, nr, buf, c->level);
        else
            ms_fp8_dequant_rows_at((const uint8_t *)c->W->data, c->W->scales, cols, r, nr, buf, c->level);
        ms_mat blk = {MS_WT_F32, nr, cols, buf, NULL, NULL, NULL};
        ms_gemm_rows(&blk, c->X, c->T, y, nr, 0, nr, c->level);
        for (int64_t t = 0; t < c->T; t++) memcpy(c->Y + t * rows + r, y + t * nr, sizeof(float) * (size_t)nr);
    }
    ms_scratch_pop(y);
    ms_scratch_pop(buf);
}

static void matmul_fp8(const ms_mat *W, const float *X, int64_t T, float *Y, int level, ms_pool *pool)
{
    ms_mat shape = {MS_WT_F32, W->rows, W->cols, NULL, NULL, NULL, NULL};
    int64_t groups = (W->rows + FP8_GROUP - 1) / FP8_GROUP;
    for (int64_t t0 = 0; t0 < T; t0 += MS_MM_TOKEN_TILE) { /* see ms_matmul */
        int64_t nt = T - t0 < MS_MM_TOKEN_TILE ? T - t0 : MS_MM_TOKEN_TILE;
        float *xp;
        f8_ctx c = {W, ms_gemm_prep_x(&shape, X + t0 * W->cols, nt, level, &xp), nt, Y + t0 * W->rows, level};
        ms_pool_for(pool, groups, 1, f8_task, &c);
        ms_scratch_pop(xp);
    }
}

/* Decode a coded chunk of `rows` rows into dst (uint16_t[rows][cols]); 0 or -1 (bad_block set). */
static int packed_decode(ms_mat_packed *pk, int64_t rows, int64_t cols, uint16_t *dst)
{
    for (int b = 0; b < pk->n_blocks; b++) {
        int64_t r = b * pk->rows_per_block, nr = rows - r < pk->rows_per_block ? rows - r : pk->rows_per_block;
        uint64_t s = b ? pk->end[b - 1] : 0;
        if (ms_bfc_decode(pk->src + s, (size_t)(pk->end[b] - s), dst + r * cols, (size_t)(nr * cols)) != 0) {
            pk->bad_block = b;
            return -1;
        }
    }
    return 0;
}

/* Streamed matrix: chunk by chunk, Y[t][r0..r1) from a resident view of rows r0..r1. Every
 * chunk walks all of X; over a long span whose scratch lives in a file (a dense layer's down
 * projection: 4,096 rows of 33,792 floats, 553 MB) X can exceed the memory the kernel caches
 * the file in, and a walk in the same order each time would miss on every page (the least
 * recently used page is always the next one wanted). So the token tiles go forward for one
 * chunk and backward for the next: each walk starts where the last ended, on the pages still
 * cached, and only what exceeds the window is read again. Each output is the same canonical
 * dot in any order. */
static void matmul_streamed(const ms_mat *W, const float *X, int64_t T, float *Y, ms_pool *pool)
{
    float *tmp = NULL; /* [MS_MM_TOKEN_TILE][chunk rows] */
    int64_t cap = 0, done = 0, tile = T < MS_MM_TOKEN_TILE ? T : MS_MM_TOKEN_TILE;
    int64_t n_tiles = (T + MS_MM_TOKEN_TILE - 1) / MS_MM_TOKEN_TILE;
    int backward = 0;
    while (done < W->rows) {
        int64_t r0 = 0, r1 = 0;
        const void *data = NULL;
        const uint8_t *scales = NULL;
        ms_mat_packed *pk = NULL;
        if (W->stream->acquire(W->stream->ctx, W->key, &r0, &r1, &data, &scales, &pk) != 0) {
            for (int64_t t = 0; t < T; t++) memset(Y + t * W->rows + done, 0, sizeof(float) * (size_t)(W->rows - done));
            break;
        }
        MS_ASSERT(r0 == done && r1 > r0 && r1 <= W->rows);
        MS_ASSERT(!pk || W->type == MS_WT_BF16);
        if (W->type == MS_WT_FP8) { /* the chunk's rows of the resident scale grid */
            MS_ASSERT(r0 % MS_FP8_BLOCK == 0 && !scales);
            scales = W->scales + (size_t)(r0 / MS_FP8_BLOCK) * (size_t)ms_fp8_blocks(W->cols) * sizeof(float);
        }
        ms_mat sub = {W->type, r1 - r0, W->cols, data, scales, NULL, NULL};
        int64_t nr = r1 - r0;
        if (nr > cap) {
            cap = nr;
            ms_scratch_pop(tmp); /* the inner matmuls popped theirs */
            tmp = ms_scratch_push(sizeof(float) * (size_t)(tile * cap));
        }
        for (int64_t k = 0; k < n_tiles; k++) {
            int64_t t0 = (backward ? n_tiles - 1 - k : k) * MS_MM_TOKEN_TILE;
            int64_t nt = T - t0 < MS_MM_TOKEN_TILE ? T - t0 : MS_MM_TOKEN_TILE;
            if (pk)
                matmul_packed(pk, nr, W->cols, X + t0 * W->cols, nt, tmp, pool);
            else
                ms_matmul(&sub, X + t0 * W->cols, nt, tmp, pool);
            for (int64_t t = 0; t < nt; t++)
                memcpy(Y + (t0 + t) * W->rows + r0, tmp + t * nr, sizeof(float) * (size_t)nr);
        }
        backward = !backward;
        W->stream->release(W->stream->ctx, W->key);
        done = r1;
    }
    ms_scratch_pop(tmp);
}

static _Thread_local ms_mat_trace *g_trace;

void ms_mat_trace_begin(ms_mat_trace *t)
{
    MS_ASSERT(!g_trace);
    g_trace = t;
}

void ms_mat_trace_end(void) { g_trace = NULL; }

static void trace_add(const ms_mat *W)
{
    ms_mat_trace *t = g_trace;
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->mats = ms_realloc(t->mats, sizeof *t->mats * (size_t)t->cap);
    }
    t->mats[t->n++] = W;
}

/* Bytes of n rows' values without their scales (MXFP4's follow the values in a buffer; an FP8
 * matrix's grid stays resident while its codes stream). */
static uint64_t data_bytes(const ms_mat *W, int64_t n)
{
    if (W->type == MS_WT_FP8) return (uint64_t)n * (uint64_t)W->cols;
    return rows_bytes(W, n) - (W->type == MS_WT_MXFP4 ? (uint64_t)n * (uint64_t)(W->cols / 32) : 0);
}

/* W pulled from its stream into buf (ms_mat_bytes(W) + 1 bytes); rows the stream failed to give are zeros. */
static int materialize(const ms_mat *W, ms_mat *out, uint8_t *buf)
{
    uint64_t nb = ms_mat_bytes(W), sb = W->type == MS_WT_MXFP4 ? (uint64_t)W->rows * (uint64_t)(W->cols / 32) : 0;
    int64_t done = 0;
    int rc = 0;
    while (done < W->rows) {
        int64_t r0 = 0, r1 = 0;
        const void *data = NULL;
        const uint8_t *scales = NULL;
        ms_mat_packed *pk = NULL;
        if (W->stream->acquire(W->stream->ctx, W->key, &r0, &r1, &data, &scales, &pk) != 0) {
            memset(buf, 0, (size_t)nb + 1);
            rc = -1;
            break;
        }
        MS_ASSERT(r0 == done && r1 > r0 && r1 <= W->rows);
        uint64_t body = data_bytes(W, r1 - r0), at = data_bytes(W, r0);
        if (pk) {
            MS_ASSERT(W->type == MS_WT_BF16);
            if (packed_decode(pk, r1 - r0, W->cols, (uint16_t *)(void *)(buf + at)) != 0) rc = -1;
        } else {
            memcpy(buf + at, data, (size_t)body);
        }
        if (sb) memcpy(buf + (nb - sb) + (uint64_t)r0 * (W->cols / 32), scales, (size_t)(r1 - r0) * (W->cols / 32));
        W->stream->release(W->stream->ctx, W->key);
        done = r1;
    }
    out->data = buf;
    out->scales = sb ? buf + (nb - sb) : W->type == MS_WT_FP8 ? W->scales : NULL; /* FP8: the resident grid */
    out->stream = NULL;
    return rc;
}

int ms_mat_materialize(const ms_mat *W, ms_mat *out, void **owned)
{
    *owned = NULL;
    *out = *W;
    if (g_trace) {
        trace_add(W);
        return 0;
    }
    if (W->data || !W->stream || W->rows == 0) return 0;
    uint8_t *buf = ms_malloc((size_t)ms_mat_bytes(W) + 1);
    *owned = buf;
    return materialize(W, out, buf);
}

void ms_mat_buf_free(ms_mat_buf *b)
{
    if (!b) return;
    free(b->p);
    b->p = NULL;
    b->cap = 0;
}

int ms_mat_materialize_in(const ms_mat *W, ms_mat *out, ms_mat_buf *b)
{
    *out = *W;
    if (g_trace) {
        trace_add(W);
        return 0;
    }
    if (W->data || !W->stream || W->rows == 0) return 0;
    size_t need = (size_t)ms_mat_bytes(W) + 1;
    if (need > b->cap) {
        free(b->p);
        b->p = ms_malloc(need);
        b->cap = need;
    }
    return materialize(W, out, b->p);
}

void ms_matmul(const ms_mat *W, const float *X, int64_t T, float *Y, ms_pool *pool)
{
    if (g_trace) {
        trace_add(W);
        if (T == 0) return;
    }
    if (W && !W->data && W->stream && W->rows > 0 && W->cols > 0 && T > 0) {
        matmul_streamed(W, X, T, Y, pool);
        return;
    }
    check_mat(W);
    MS_ASSERT(T >= 0);
    if (T == 0 || W->rows == 0) return;
    MS_ASSERT(X && Y);
    if (W->cols == 0) {
        memset(Y, 0, (size_t)(T * W->rows) * sizeof(float));
        return;
    }
    ms_kern_init();
    int level = ms_cpu_level();
    /* FP8 and INT4: up to fp8_tile_tokens rows go through the tiles, which decode the codes in
     * registers (the same values, each output the same canonical dot); more are dequantised 16
     * rows at a time for the F32 kernels, whose panels then take them */
    if ((W->type == MS_WT_FP8 || W->type == MS_WT_INT4) && !(T <= fp8_tile_tokens(level) && W->cols % 16 == 0)) {
        matmul_fp8(W, X, T, Y, level, pool);
        return;
    }
    int64_t nblocks = (W->rows + MS_RB - 1) / MS_RB;
    /* Token rows a tile at a time, every weight row within it: the kernels walk all the
     * tokens they are given once per few weight rows, so a span of thousands (a K3 layer's
     * 4,096 rows of 7,168 floats: 117 MB, prepared again) would stream the whole prepared X
     * from memory per panel, and from disk where a span's scratch lives in a file and its
     * window cannot hold it. Each output is the same canonical dot in any grouping. */
    for (int64_t t0 = 0; t0 < T; t0 += MS_MM_TOKEN_TILE) {
        int64_t nt = T - t0 < MS_MM_TOKEN_TILE ? T - t0 : MS_MM_TOKEN_TILE;
        float *xp;
        mm_ctx c = {W, ms_gemm_prep_x(W, X + t0 * W->cols, nt, level, &xp), nt, Y + t0 * W->rows, level};
        int64_t block_work = MS_RB * W->cols * nt;
        int64_t grain = (MS_MIN_CHUNK_WORK + block_work - 1) / block_work;
        if (grain < 4) grain = 4; /* at least 16 rows per chunk */
        ms_pool_for(pool, nblocks, grain, mm_chunk, &c);
        ms_scratch_pop(xp);
    }
}

void ms_matvec(const ms_mat *W, const float *x, float *y, ms_pool *pool)
{
    ms_matmul(W, x, 1, y, pool);
}
