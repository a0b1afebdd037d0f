/* test_int4: symmetric group-32 INT4 weights with BF16 scales (compressed-tensors pack-quantized, spec §4): the dequantisation by the layout's definition on every path, and matmuls from the packed form = the F32 kernels on the dequantised matrix, bit for bit, at every token count and kernel path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_cpu.h"
#include "ms_err.h"
#include "ms_int4.h"
#include "ms_kern.h"
#include "ms_pool.h"
#include "ms_test.h"

static uint32_t rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(*s >> 33);
}

/* Element c of row r by the spec's words: bits 4 (c % 8) .. +3 of int32 word c / 8 (little-endian),
 * minus 8, times the row's scale c / 32 (BF16). */
static float by_definition(const uint8_t *packed, const uint16_t *scales, int64_t cols, int64_t r, int64_t c)
{
    uint32_t w;
    memcpy(&w, packed + (size_t)r * (size_t)(cols / 2) + (size_t)(c / 8) * 4, 4);
    unsigned u = (w >> (4 * (c % 8))) & 15;
    return (float)((int)u - 8) * ms_bf16_to_f32(scales[r * (cols / 32) + c / 32]);
}

/* A matrix of R x C with the scales' edge values among random ones. */
static void make(int64_t R, int64_t C, uint64_t seed, uint8_t **packed, uint16_t **scales)
{
    *packed = malloc((size_t)(R * C / 2));
    *scales = malloc(sizeof(uint16_t) * (size_t)(R * C / 32));
    for (int64_t i = 0; i < R * C / 2; i++) (*packed)[i] = (uint8_t)rnd(&seed);
    static const uint16_t edge[] = {0x0000, 0x8000, 0x0001, 0x3F80, 0xBF80, 0x7F7F, 0x3C00, 0x0080};
    for (int64_t i = 0; i < R * C / 32; i++)
        (*scales)[i] = i < 8 ? edge[i] : (uint16_t)(0x3A00 + (rnd(&seed) & 0x3FF) + (rnd(&seed) & 1 ? 0x8000 : 0));
}

static void dequant_paths(void)
{
    const int64_t R = 5, C = 96;
    uint8_t *p;
    uint16_t *s;
    make(R, C, 7, &p, &s);
    float *ref = malloc(sizeof(float) * (size_t)(R * C)), *got = malloc(sizeof(float) * (size_t)(R * C));
    int ok = 1;
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) ref[r * C + c] = by_definition(p, s, C, r, c);
    for (int l = MS_SIMD_SCALAR; l <= MS_SIMD_AVX512; l++) {
        if (ms_cpu_best_level() < l) {
            ms_t_skip("SKIP: the %s dequantisation: this CPU does not run it", ms_cpu_level_name(l));
            continue;
        }
        ms_int4_dequant_rows_at(p, (const uint8_t *)s, C, 0, R, got, l);
        ok = !memcmp(got, ref, sizeof(float) * (size_t)(R * C));
        T_CHECK(ok, "%s: every nibble and scale (zero, -0, subnormal, +-1, the largest) dequantised as the packed words "
                    "define it, bit for bit", ms_cpu_level_name(l));
        /* rows from the middle */
        ms_int4_dequant_rows_at(p, (const uint8_t *)s, C, 2, 2, got, l);
        T_CHECK(!memcmp(got, ref + 2 * C, sizeof(float) * (size_t)(2 * C)), "%s: rows 2..3 alone", ms_cpu_level_name(l));
    }
    T_CHECK(ms_int4_value(0, 0x3F80) == -8.0f && ms_int4_value(15, 0x3F80) == 7.0f && ms_int4_value(8, 0x4000) == 0.0f,
            "nibble 0 is -8, 15 is 7, 8 is 0 (scale 1, 2)");
    free(p);
    free(s);
    free(ref);
    free(got);
}

/* y = W x from the packed form against the canonical F32 dot of the dequantised rows. */
static int check_shape(int64_t R, int64_t C, int64_t T, ms_pool *pool)
{
    uint8_t *p;
    uint16_t *s;
    make(R, C, (uint64_t)(R * 131 + C * 7 + T), &p, &s);
    for (int64_t i = 0; i < 8 && i < R * C / 32; i++) s[i] = 0x3C00; /* finite scales: the sums compare bitwise */
    float *deq = malloc(sizeof(float) * (size_t)(R * C)), *x = malloc(sizeof(float) * (size_t)(T * C));
    float *y4 = malloc(sizeof(float) * (size_t)(T * R)), *y32 = malloc(sizeof(float) * (size_t)(T * R));
    uint64_t seed = 99;
    for (int64_t i = 0; i < T * C; i++) x[i] = (float)((int)(rnd(&seed) % 2001) - 1000) / 997.0f;
    ms_int4_dequant_rows_at(p, (const uint8_t *)s, C, 0, R, deq, MS_SIMD_SCALAR);
    ms_mat w4 = {MS_WT_INT4, R, C, p, (const uint8_t *)s, NULL, NULL}, w32 = {MS_WT_F32, R, C, deq, NULL, NULL, NULL};
    ms_matmul(&w4, x, T, y4, pool);
    ms_matmul(&w32, x, T, y32, pool);
    int same = !memcmp(y4, y32, sizeof(float) * (size_t)(T * R));
    for (int64_t r = 0; same && r < R; r++) { /* and the scalar reference dot */
        float want = ms_gemm_dot(deq + r * C, x, C);
        same = !memcmp(&want, &y4[r], 4);
    }
    same &= ms_mat_bytes(&w4) == (uint64_t)(R * C / 2) + (uint64_t)(R * C / 32) * 2;
    free(p);
    free(s);
    free(deq);
    free(x);
    free(y4);
    free(y32);
    return same;
}

static void matmuls(void)
{
    /* 1-32 tokens go through the tiles (AVX2: 1-4), every row and token grouping of them; more
     * are dequantised for the F32 kernels */
    static const int64_t rows[] = {1, 16, 17, 300}, cols[] = {32, 96, 256, 7168},
                         tokens[] = {1, 2, 3, 4, 5, 6, 7, 13, 32, 37, 400};
    ms_pool *pool = ms_pool_new(2);
    int levels[3] = {MS_SIMD_SCALAR, MS_SIMD_AVX2, MS_SIMD_AVX512};
    for (int l = 0; l < 3; l++) {
        if (ms_cpu_set_level(levels[l]) != levels[l]) {
            ms_t_skip("SKIP: the %s path: this CPU does not run it", ms_cpu_level_name(levels[l]));
            continue;
        }
        int bad = 0, n = 0;
        for (size_t a = 0; a < sizeof rows / sizeof rows[0]; a++)
            for (size_t b = 0; b < sizeof cols / sizeof cols[0]; b++)
                for (size_t t = 0; t < sizeof tokens / sizeof tokens[0]; t++) {
                    if (tokens[t] * rows[a] * cols[b] > 3000000) continue;
                    n++;
                    if (!check_shape(rows[a], cols[b], tokens[t], t % 2 ? pool : NULL)) {
                        bad++;
                        T_CHECK(0, "%s: INT4 %lld x %lld, %lld tokens differs from its dequantised F32 matrix",
                                ms_cpu_level_name(levels[l]), (long long)rows[a], (long long)cols[b], (long long)tokens[t]);
                    }
                }
        T_CHECK(bad == 0 && n > 60, "%s: %d INT4 matmuls (1 to 400 tokens) = F32 on the dequantised matrix, bit for bit",
                ms_cpu_level_name(levels[l]), n);
    }
    ms_cpu_set_simd(1);
    ms_pool_free(pool);
}

int main(void)
{
    ms_log_set_level(0);
    ms_kern_init();
    dequant_paths();
    matmuls();
    return ms_t_done();
}
