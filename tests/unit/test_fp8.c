/* test_fp8: FP8 E4M3 block-scaled weights: the code table and the dequantisation against the DeepSeek-V3 fixture (fp8.json), and matmuls from the 1-byte form = the F32 kernels on the dequantised matrix, bit for bit, at every edge-block shape, token count and kernel path. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_cpu.h"
#include "ms_err.h"
#include "ms_fp8.h"
#include "ms_kern.h"
#include "ms_pool.h"
#include "ms_test.h"

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- against the fixture ---- */

static void fixture_cases(void)
{
    const char *p = ms_t_shared("fixtures/deepseek-v3/fp8.json");
    if (!p) return;
    json_error_t je;
    json_t *d = json_load_file(p, 0, &je);
    T_CHECK(d != NULL, "fp8.json: %s", je.text);
    if (!d) return;
    /* every code's value; 0x7F and 0xFF NaN */
    json_t *tab = json_object_get(d, "e4m3_table");
    int good = json_array_size(tab) == 256;
    for (size_t i = 0; good && i < 256; i++) {
        json_t *e = json_array_get(tab, i), *v = json_object_get(e, "value");
        float got = ms_fp8_e4m3((uint8_t)json_integer_value(json_object_get(e, "code")));
        good = json_is_null(v) ? isnan(got) : got == (float)json_number_value(v);
        if (!good) T_CHECK(0, "code %zu: %g, the table's %g", i, (double)got, json_number_value(v));
    }
    T_CHECK(good, "the 256 E4M3 codes as float8_e4m3fn decodes them (0x7F, 0xFF NaN; 0x7E 448)");
    json_t *cases = json_object_get(d, "cases");
    const char *dir = ms_t_tmpdir("fp8");
    for (size_t k = 0; k < json_array_size(cases); k++) {
        json_t *c = json_array_get(cases, k);
        if (!json_object_get(c, "shape")) { /* the rounding of one product */
            uint8_t code = (uint8_t)json_integer_value(json_object_get(c, "code"));
            float s = float_of((uint32_t)json_integer_value(json_object_get(c, "scale_inv_bits")));
            uint32_t want = (uint32_t)json_integer_value(json_object_get(c, "dequant_bits"));
            float out;
            ms_fp8_dequant_rows(&code, (const uint8_t *)&s, 1, 0, 1, &out);
            T_CHECK(bits_of(out) == want, "%s: bits %u, want %u", json_string_value(json_object_get(c, "note")),
                    bits_of(out), want);
            continue;
        }
        int64_t R = json_integer_value(json_array_get(json_object_get(c, "shape"), 0));
        int64_t C = json_integer_value(json_array_get(json_object_get(c, "shape"), 1));
        json_t *sb = json_object_get(c, "scale_inv_bits");
        const char *hex = json_string_value(json_object_get(c, "codes_hex"));
        T_CHECK((int64_t)json_array_size(sb) == ms_fp8_blocks(R) * ms_fp8_blocks(C) && (int64_t)strlen(hex) == 2 * R * C,
                "case %zu: a scale grid [ceil(R/128), ceil(C/128)] and R x C codes", k);
        uint8_t *codes = malloc((size_t)(R * C));
        float *scales = malloc(sizeof(float) * json_array_size(sb)), *out = malloc(sizeof(float) * (size_t)(R * C));
        for (int64_t i = 0; i < R * C; i++) {
            char h[3] = {hex[2 * i], hex[2 * i + 1], 0};
            codes[i] = (uint8_t)strtoul(h, NULL, 16);
        }
        for (size_t i = 0; i < json_array_size(sb); i++) scales[i] = float_of((uint32_t)json_integer_value(json_array_get(sb, i)));
        ms_fp8_dequant_rows(codes, (const uint8_t *)scales, C, 0, R, out);
        json_t *smp = json_object_get(c, "samples");
        int ok = json_array_size(smp) > 0;
        for (size_t i = 0; i < json_array_size(smp); i++) {
            json_t *x = json_array_get(smp, i);
            int64_t r = json_integer_value(json_object_get(x, "row")), col = json_integer_value(json_object_get(x, "col"));
            ok &= bits_of(out[r * C + col]) == (uint32_t)json_integer_value(json_object_get(x, "dequant_bits"));
        }
        /* the whole matrix as float32 bytes against the fixture's sha256 */
        char path[1200], cmd[1400];
        snprintf(path, sizeof path, "%s/case%zu.f32", dir, k);
        FILE *f = fopen(path, "wb");
        if (f) {
            fwrite(out, sizeof(float), (size_t)(R * C), f);
            fclose(f);
        }
        snprintf(cmd, sizeof cmd, "sha256sum '%s'", path);
        char *sum = NULL;
        const char *want = json_string_value(json_object_get(c, "dequant_sha256"));
        int have_sum = ms_t_run(cmd, &sum) == 0 && sum;
        T_CHECK(ok && have_sum && !strncmp(sum, want, 64), "case %zu (%s): samples and the whole matrix's sha256 (coreutils' "
                "sha256sum) match", k, json_string_value(json_object_get(c, "note")));
        /* rows dequantised from any start give the same rows */
        float *part = malloc(sizeof(float) * (size_t)C);
        int rows_ok = 1;
        for (int64_t r = 0; r < R; r += 7) {
            ms_fp8_dequant_rows(codes, (const uint8_t *)scales, C, r, 1, part);
            rows_ok &= !memcmp(part, out + r * C, sizeof(float) * (size_t)C);
        }
        T_CHECK(rows_ok, "case %zu: a row dequantised alone = the same row of the whole", k);
        free(part);
        free(sum);
        free(codes);
        free(scales);
        free(out);
    }
    json_decref(d);
}

/* ---- matmuls from the 1-byte form ---- */

static uint32_t rng = 12345;
static uint32_t next(void)
{
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}

/* An FP8 matrix R x C with random finite codes and scales, its dequantised F32 twin, and for
 * T token rows: ms_matmul(FP8) = ms_matmul(F32 twin), bit for bit, on the current path. */
static int check_shape(int64_t R, int64_t C, int64_t T, ms_pool *pool)
{
    uint8_t *codes = malloc((size_t)(R * C) + 1);
    int64_t nb = ms_fp8_blocks(R) * ms_fp8_blocks(C);
    float *scales = malloc(sizeof(float) * (size_t)nb), *deq = malloc(sizeof(float) * (size_t)(R * C) + 4);
    float *x = malloc(sizeof(float) * (size_t)(T * C) + 4), *y8 = malloc(sizeof(float) * (size_t)(T * R) + 4),
          *y32 = malloc(sizeof(float) * (size_t)(T * R) + 4);
    for (int64_t i = 0; i < R * C; i++) {
        uint8_t q = (uint8_t)next();
        codes[i] = (q & 0x7F) == 0x7F ? q ^ 1 : q; /* no NaN */
    }
    for (int64_t i = 0; i < nb; i++) scales[i] = ldexpf(1.0f + (float)(next() % 1000) / 1000.0f, -(int)(next() % 12));
    for (int64_t i = 0; i < T * C; i++) x[i] = ((float)(next() % 20001) - 10000.0f) / 3000.0f;
    ms_fp8_dequant_rows(codes, (const uint8_t *)scales, C, 0, R, deq);
    ms_mat w8 = {MS_WT_FP8, R, C, codes, (const uint8_t *)scales, NULL, NULL};
    ms_mat w32 = {MS_WT_F32, R, C, deq, NULL, NULL, NULL};
    ms_matmul(&w8, x, T, y8, pool);
    ms_matmul(&w32, x, T, y32, pool);
    int same = !memcmp(y8, y32, sizeof(float) * (size_t)(T * R));
    float row[600];
    if (C <= 600) { /* one row, as embeddings read them */
        ms_mat_row_f32(&w8, R - 1, row);
        same &= !memcmp(row, deq + (R - 1) * C, sizeof(float) * (size_t)C);
    }
    same &= ms_mat_bytes(&w8) == (uint64_t)(R * C) + (uint64_t)nb * 4;
    free(codes);
    free(scales);
    free(deq);
    free(x);
    free(y8);
    free(y32);
    return same;
}

static void matmuls(void)
{
    static const int64_t rows[] = {1, 16, 127, 128, 129, 300}, cols[] = {5, 128, 200, 257, 272}; /* 128, 272: the tiles */
    static const int64_t tokens[] = {1, 2, 3, 37, 400}; /* up to 3: FP8 tiles (cols % 16 == 0); 400: past a token tile */
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
                    if (tokens[t] == 400 && rows[a] * cols[b] > 40000) continue;
                    n++;
                    if (!check_shape(rows[a], cols[b], tokens[t], t % 2 ? pool : NULL)) {
                        bad++;
                        T_CHECK(0, "%s: FP8 %lld x %lld, %lld tokens differs from its dequantised F32 matrix",
                                ms_cpu_level_name(levels[l]), (long long)rows[a], (long long)cols[b], (long long)tokens[t]);
                    }
                }
        T_CHECK(bad == 0, "%s: %d FP8 matmuls (edge blocks both ways, 1 to 400 tokens) = F32 on the dequantised matrix",
                ms_cpu_level_name(levels[l]), n);
    }
    ms_cpu_set_simd(1);
    ms_pool_free(pool);
}

int main(void)
{
    ms_log_set_level(0);
    ms_kern_init();
    T_CHECK(ms_fp8_e4m3(0x7E) == 448.0f && ms_fp8_e4m3(0xFE) == -448.0f && ms_fp8_e4m3(0x01) == ldexpf(1.0f, -9) &&
                ms_fp8_e4m3(0x38) == 1.0f && isnan(ms_fp8_e4m3(0x7F)) && ms_fp8_e4m3(0x80) == 0.0f &&
                signbit(ms_fp8_e4m3(0x80)),
            "E4M3: 448 the largest, 2^-9 the smallest subnormal, 0x38 = 1, 0x7F NaN, 0x80 = -0");
    /* every code (NaN ones too) through each path's dequantisation: the same bits */
    {
        uint8_t codes[2 * 260];
        float sc[2 * 3] = {0.0078125f, 3.5f, -1.25f, 1e-3f, 7.0f, 0.5f}, ref[2 * 260], got[2 * 260];
        for (int i = 0; i < 2 * 260; i++) codes[i] = (uint8_t)(i * 7 + 3);
        ms_fp8_dequant_rows(codes, (const uint8_t *)sc, 260, 0, 2, ref);
        for (int l = MS_SIMD_AVX2; l <= MS_SIMD_AVX512; l++) {
            if (ms_cpu_best_level() < l) continue;
            ms_fp8_dequant_rows_at(codes, (const uint8_t *)sc, 260, 0, 2, got, l);
            T_CHECK(!memcmp(got, ref, sizeof ref), "%s: every code's dequantised bits (NaN's too) = the scalar path's",
                    ms_cpu_level_name(l));
        }
    }
    matmuls();
    fixture_cases();
    return ms_t_done();
}
