/* test_kern: decoding vs the released MXFP4 bytes and the spec; the ms_matmul floating-point contract. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ms_cpu.h"
#include "ms_err.h"
#include "ms_kern.h"
#include "ms_pool.h"
#include "ms_test.h"

/* ---- helpers written independently of ms_kern.c ---- */

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static uint64_t dbits(double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static ms_t_rng rng = {0x9e3779b97f4a7c15ull};
static uint64_t rnd(void) { return ms_t_rng_u64(&rng); }
/* Uniform in [-1, 1) times a random power of two in [2^-6, 2^6]: varied exponents. */
static float rnd_f(void) { return ms_t_rng_wide(&rng); }

/* The E2M1 values as the spec (§4.4) lists them. */
static const double spec_e2m1[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

/* Spec §4.4 decode of one MXFP4 element, in double then rounded to float once. */
static float spec_mxfp4(unsigned nib, unsigned s)
{
    double v = spec_e2m1[nib & 7];
    if (s == 255) v = 0.0;
    else v = ldexp(v, (int)s - 127);
    if (nib & 8) v = -v;
    return (float)v;
}

/* Independent row decode for any weight type. */
static void ref_row(const ms_mat *W, int64_t r, float *out)
{
    int64_t c = W->cols;
    for (int64_t i = 0; i < c; i++) {
        if (W->type == MS_WT_F32) {
            out[i] = ((const float *)W->data)[r * c + i];
        } else if (W->type == MS_WT_BF16) {
            out[i] = from_bits((uint32_t)((const uint16_t *)W->data)[r * c + i] << 16);
        } else {
            uint8_t b = ((const uint8_t *)W->data)[r * (c / 2) + i / 2];
            unsigned nib = (i % 2 == 0) ? (b & 15u) : (b >> 4);
            out[i] = spec_mxfp4(nib, W->scales[r * (c / 32) + i / 32]);
        }
    }
}

/* The canonical order of ms_kern.h written out plainly. */
static double ref_canon(const float *a, const float *b, int64_t n)
{
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n; i++) acc[i % 8] = acc[i % 8] + (double)a[i] * (double)b[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* The canonical FP32 order of ms_matmul (ms_kern.h), written out independently of ms_gemm.c. */
static float ref_canon32(const float *w, const float *x, int64_t n)
{
    float a[16];
    for (int j = 0; j < 16; j++) a[j] = 0.0f;
    for (int64_t i = 0; i < n; i++) a[i % 16] = fmaf(w[i], x[i], a[i % 16]);
    float b[8];
    for (int j = 0; j < 8; j++) b[j] = a[j] + a[j + 8];
    return ((b[0] + b[4]) + (b[2] + b[6])) + ((b[1] + b[5]) + (b[3] + b[7]));
}

/* ---- 1. the released bytes fixture ---- */

static void test_fixture(void)
{
    const char *p = ms_t_shared("fixtures/kimi-k3/mxfp4.json");
    if (!p) return;
    json_error_t jerr;
    json_t *j = json_load_file(p, 0, &jerr);
    T_CHECK(j != NULL, "mxfp4.json: %s", jerr.text);
    if (!j) return;
    int64_t rows = json_integer_value(json_object_get(j, "rows"));
    int64_t width = json_integer_value(json_object_get(j, "logical_width"));
    json_t *jp = json_object_get(json_object_get(j, "packed"), "data");
    json_t *js = json_object_get(json_object_get(j, "scales"), "data");
    json_t *je = json_object_get(json_object_get(j, "expected"), "data");
    json_t *jsw = json_object_get(json_object_get(j, "expected_swapped_nibbles"), "first64");
    json_t *jlut = json_object_get(j, "e2m1_lut");
    T_CHECK(rows == 64 && width == 3584, "fixture shape %lld x %lld", (long long)rows,
            (long long)width);
    T_CHECK(json_array_size(jp) == (size_t)(rows * width / 2), "packed size");
    T_CHECK(json_array_size(js) == (size_t)(rows * width / 32), "scales size");
    T_CHECK(json_array_size(je) == (size_t)(rows * width), "expected size");
    T_CHECK(json_array_size(jsw) == 64, "swapped size");
    T_CHECK(json_array_size(jlut) == 16, "lut size");
    if (ms_t_failed) {
        json_decref(j);
        return;
    }
    for (unsigned n = 0; n < 16; n++) {
        float want = (float)json_number_value(json_array_get(jlut, n));
        T_CHECK(fbits(ms_e2m1_value(n)) == fbits(want), "e2m1[%u] = %g, fixture %g", n,
                ms_e2m1_value(n), want);
    }

    uint8_t *packed = ms_malloc((size_t)(rows * width / 2));
    uint8_t *scales = ms_malloc((size_t)(rows * width / 32));
    float *expected = ms_malloc((size_t)(rows * width) * sizeof(float));
    float *out = ms_malloc((size_t)width * sizeof(float));
    for (int64_t i = 0; i < rows * width / 2; i++)
        packed[i] = (uint8_t)json_integer_value(json_array_get(jp, (size_t)i));
    for (int64_t i = 0; i < rows * width / 32; i++)
        scales[i] = (uint8_t)json_integer_value(json_array_get(js, (size_t)i));
    for (int64_t i = 0; i < rows * width; i++)
        expected[i] = (float)json_number_value(json_array_get(je, (size_t)i));
    ms_mat W = {MS_WT_MXFP4, rows, width, packed, scales};

    int paths = ms_cpu_simd_available() ? 2 : 1;
    if (paths == 1) ms_t_skip("AVX2+FMA not available: fixture checked on the scalar path only");
    for (int simd = 0; simd < paths; simd++) {
        ms_cpu_set_simd(simd);
        int64_t bad_row = 0, bad_mat = 0, first_bad = -1;
        for (int64_t r = 0; r < rows; r++) {
            ms_mxfp4_dequant_row(packed + r * width / 2, scales + r * width / 32, width, out);
            for (int64_t c = 0; c < width; c++) {
                if (fbits(out[c]) != fbits(expected[r * width + c])) {
                    if (first_bad < 0) first_bad = r * width + c;
                    bad_row++;
                }
            }
            ms_mat_row_f32(&W, r, out);
            for (int64_t c = 0; c < width; c++)
                bad_mat += fbits(out[c]) != fbits(expected[r * width + c]);
        }
        T_CHECK(bad_row == 0, "[%s] ms_mxfp4_dequant_row: %lld of %lld elements differ (first %lld)",
                simd ? "simd" : "scalar", (long long)bad_row, (long long)(rows * width),
                (long long)first_bad);
        T_CHECK(bad_mat == 0, "[%s] ms_mat_row_f32: %lld elements differ", simd ? "simd" : "scalar",
                (long long)bad_mat);
        /* The nibble-order trap: the swapped decode must not be what we produce. */
        ms_mat_row_f32(&W, 0, out);
        int diff_swapped = 0, fixture_differs = 0;
        for (int c = 0; c < 64; c++) {
            float sw = (float)json_number_value(json_array_get(jsw, (size_t)c));
            diff_swapped += fbits(out[c]) != fbits(sw);
            fixture_differs += fbits(expected[c]) != fbits(sw);
        }
        T_CHECK(fixture_differs > 0, "fixture: swapped row equals expected row");
        T_CHECK(diff_swapped > 0, "[%s] row 0 equals the swapped-nibble decode",
                simd ? "simd" : "scalar");
    }
    ms_cpu_set_simd(1);
    free(packed);
    free(scales);
    free(expected);
    free(out);
    json_decref(j);
}

/* ---- 2. self-contained format checks ---- */

static void test_e2m1_e8m0(void)
{
    static const float want[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                   -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    for (unsigned n = 0; n < 16; n++)
        T_CHECK(fbits(ms_e2m1_value(n)) == fbits(want[n]), "e2m1(%u) = %g", n, ms_e2m1_value(n));

    /* One 32-element row per scale byte: nibbles 0..15 twice, byte k holds nibble 2k%16 low
     * and (2k+1)%16 high, so every (scale, nibble) pair is decoded. */
    enum { NS = 256, C = 32 };
    uint8_t packed[NS * C / 2], scales[NS];
    float out[C];
    for (int s = 0; s < NS; s++) {
        scales[s] = (uint8_t)s;
        for (int k = 0; k < C / 2; k++)
            packed[s * C / 2 + k] = (uint8_t)(((2 * k) % 16) | (((2 * k + 1) % 16) << 4));
    }
    int paths = ms_cpu_simd_available() ? 2 : 1;
    for (int simd = 0; simd < paths; simd++) {
        ms_cpu_set_simd(simd);
        int bad = 0;
        for (int s = 0; s < NS; s++) {
            ms_mxfp4_dequant_row(packed + s * C / 2, scales + s, C, out);
            for (int c = 0; c < C; c++) {
                float w = spec_mxfp4((unsigned)c % 16, (unsigned)s);
                int ok = s == 255 ? out[c] == 0.0f : fbits(out[c]) == fbits(w);
                if (!ok && bad++ < 5)
                    fprintf(stderr, "  [%s] scale %d nibble %d: got %a want %a\n",
                            simd ? "simd" : "scalar", s, c % 16, out[c], w);
            }
        }
        T_CHECK(bad == 0, "[%s] %d of 8192 (scale, nibble) decodes wrong", simd ? "simd" : "scalar",
                bad);
        /* The extremes called out by the spec. */
        ms_mxfp4_dequant_row(packed, scales + 0, C, out); /* s = 0 */
        T_CHECK(fpclassify(out[2]) == FP_SUBNORMAL && (double)out[2] == ldexp(1.0, -127),
                "s=0: 1.0 * 2^-127 must be the subnormal 2^-127, got %a", out[2]);
        T_CHECK((double)out[1] == ldexp(1.0, -128), "s=0: 0.5 * 2^-127, got %a", out[1]);
        T_CHECK(out[15] == -6.0f * (float)ldexp(1.0, -127), "s=0: -6 * 2^-127, got %a", out[15]);
        ms_mxfp4_dequant_row(packed + 127 * C / 2, scales + 127, C, out); /* s = 127 */
        for (int c = 0; c < 16; c++)
            T_CHECK(fbits(out[c]) == fbits(want[c]), "s=127 nibble %d: got %g", c, out[c]);
        ms_mxfp4_dequant_row(packed + 255 * C / 2, scales + 255, C, out); /* s = 255 */
        for (int c = 0; c < C; c++) T_CHECK(out[c] == 0.0f, "s=255 col %d: got %g", c, out[c]);
        /* s = 254: 2^127 * 6 overflows float, as in an fp32 dequantisation. */
        ms_mxfp4_dequant_row(packed + 254 * C / 2, scales + 254, C, out);
        T_CHECK(out[2] == ldexpf(1.0f, 127) && isinf(out[7]) && out[7] > 0 && isinf(out[15]) &&
                    out[15] < 0,
                "s=254: got %a %a %a", out[2], out[7], out[15]);
    }
    ms_cpu_set_simd(1);
}

static void test_f16_bf16(void)
{
    /* Spot values of IEEE half. */
    T_CHECK(ms_f16_to_f32(0x3c00) == 1.0f, "f16 1.0");
    T_CHECK(ms_f16_to_f32(0xc000) == -2.0f, "f16 -2.0");
    T_CHECK(ms_f16_to_f32(0x7bff) == 65504.0f, "f16 max");
    T_CHECK((double)ms_f16_to_f32(0x0001) == ldexp(1.0, -24), "f16 min subnormal");
    T_CHECK((double)ms_f16_to_f32(0x03ff) == ldexp(1023.0, -24), "f16 max subnormal");
    T_CHECK((double)ms_f16_to_f32(0x0400) == ldexp(1.0, -14), "f16 min normal");
    T_CHECK(fbits(ms_f16_to_f32(0x8000)) == 0x80000000u, "f16 -0");
    T_CHECK(fbits(ms_f16_to_f32(0x0000)) == 0x00000000u, "f16 +0");
    T_CHECK(isinf(ms_f16_to_f32(0x7c00)) && ms_f16_to_f32(0x7c00) > 0, "f16 +inf");
    T_CHECK(isinf(ms_f16_to_f32(0xfc00)) && ms_f16_to_f32(0xfc00) < 0, "f16 -inf");
    T_CHECK(isnan(ms_f16_to_f32(0x7e00)) && !signbit(ms_f16_to_f32(0x7e00)), "f16 qNaN");
    T_CHECK(isnan(ms_f16_to_f32(0x7c01)), "f16 sNaN stays NaN");
    T_CHECK(isnan(ms_f16_to_f32(0xfe00)) && signbit(ms_f16_to_f32(0xfe00)), "f16 -NaN");
    /* Every half against the textbook formula evaluated in double. */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        int sgn = h >> 15, e = (h >> 10) & 31, m = h & 1023;
        float got = ms_f16_to_f32((uint16_t)h);
        if (e == 31) {
            bad += m ? !isnan(got) : !isinf(got);
            bad += !!signbit(got) != sgn;
            continue;
        }
        double v = e == 0 ? ldexp((double)m, -24) : ldexp(1024.0 + m, e - 25);
        float want = (float)(sgn ? -v : v);
        bad += fbits(got) != fbits(want);
    }
    T_CHECK(bad == 0, "%d of 65536 half values decode wrong", bad);

    /* bf16: widening is exact, narrowing truncates toward zero (never rounds up). */
    T_CHECK(ms_bf16_to_f32(0x3f80) == 1.0f && ms_bf16_to_f32(0xc040) == -3.0f, "bf16 widen");
    T_CHECK(ms_f32_to_bf16_trunc(from_bits(0x3f80ffffu)) == 0x3f80, "bf16 truncates, no round");
    T_CHECK(ms_f32_to_bf16_trunc(from_bits(0xbf80ffffu)) == 0xbf80, "bf16 truncates negative");
    T_CHECK(ms_f32_to_bf16_trunc(-0.0f) == 0x8000, "bf16 -0");
    T_CHECK(ms_f32_to_bf16_trunc(INFINITY) == 0x7f80, "bf16 inf");
    bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ms_bf16_to_f32((uint16_t)h);
        uint32_t u = fbits(f);
        bad += (u >> 16) != h || (u & 0xffffu) != 0;
        bad += ms_f32_to_bf16_trunc(f) != h;
    }
    T_CHECK(bad == 0, "bf16 round trip: %d failures", bad);
    bad = 0;
    for (int i = 0; i < 100000; i++) {
        float f = from_bits((uint32_t)rnd());
        if (!isfinite(f)) continue;
        float t = ms_bf16_to_f32(ms_f32_to_bf16_trunc(f));
        bad += !(fabsf(t) <= fabsf(f)) || signbit(t) != signbit(f) ||
               fabs((double)f - (double)t) >= ldexp(fabs((double)t), -7) + ldexp(1.0, -133);
    }
    T_CHECK(bad == 0, "bf16 truncation of random floats: %d failures", bad);
}

/* ---- 3. the floating-point contract ---- */

static void test_dot(void)
{
    enum { N = 200 };
    float a[N], b[N];
    for (int i = 0; i < N; i++) {
        a[i] = rnd_f();
        b[i] = rnd_f();
    }
    int paths = ms_cpu_simd_available() ? 2 : 1;
    int bad = 0;
    for (int n = 0; n <= N; n += (n < 70 ? 1 : 13)) {
        double want = ref_canon(a, b, n);
        for (int simd = 0; simd < paths; simd++) {
            ms_cpu_set_simd(simd);
            double got = ms_dot_f32(a, b, n);
            if (dbits(got) != dbits(want) && bad++ < 5)
                fprintf(stderr, "  dot n=%d [%s]: %a vs %a\n", n, simd ? "simd" : "scalar", got,
                        want);
        }
    }
    ms_cpu_set_simd(1);
    T_CHECK(bad == 0, "ms_dot_f32 differs from the canonical order %d times", bad);
}

/* Build a random matrix of the given type; for MXFP4, `scale_lo..scale_hi` are the scale bytes
 * (plus a few 0 and 255 when `extremes`). Returns the buffers via *data / *scales. */
static ms_mat make_mat(ms_wtype type, int64_t rows, int64_t cols, int extremes, void **data,
                       uint8_t **scales)
{
    ms_mat W = {type, rows, cols, NULL, NULL};
    *scales = NULL;
    if (type == MS_WT_F32) {
        float *d = ms_malloc((size_t)(rows * cols) * sizeof(float));
        for (int64_t i = 0; i < rows * cols; i++) d[i] = rnd_f();
        *data = d;
    } else if (type == MS_WT_BF16) {
        uint16_t *d = ms_malloc((size_t)(rows * cols) * sizeof(uint16_t));
        ms_t_fill_bf16(&rng, d, rows * cols);
        *data = d;
    } else {
        uint8_t *d = ms_malloc((size_t)(rows * cols / 2));
        uint8_t *s = ms_malloc((size_t)(rows * cols / 32));
        ms_t_fill_mxfp4(&rng, d, s, rows * cols, 112, 131);
        for (int64_t i = 0; extremes && i < rows * cols / 32; i++) {
            unsigned pick = (unsigned)(rnd() % 16);
            if (pick == 0) s[i] = 0;
            if (pick == 1) s[i] = 255;
            if (pick == 2) s[i] = 1;
            if (pick == 3) s[i] = 252;
            if (pick == 4) s[i] = 254; /* overflowing weights: inf/NaN results */
        }
        *data = d;
        *scales = s;
        W.scales = s;
    }
    W.data = *data;
    return W;
}

static int same_bits(const float *a, const float *b, int64_t n, int64_t *first)
{
    for (int64_t i = 0; i < n; i++) {
        if (fbits(a[i]) != fbits(b[i])) {
            if (first) *first = i;
            return 0;
        }
    }
    return 1;
}

/* Order-sensitive data: in every lane j (columns c = j mod 8) x holds 2^50 at two columns
 * (the last one of the lane, often in the n % 8 tail, and an earlier one) where each even
 * row's weights are +v and -v. Those products cancel exactly, but the small products added in
 * between are partly absorbed while 2^50*v sits in the accumulator, so any change of lane or
 * order shows in the float result; odd rows do the same across lanes for the final combine. Weights are E2M1 values (scale 2^0), so every
 * type represents them exactly. Needs cols >= 16. */
static ms_mat make_sensitive(ms_wtype type, int64_t rows, int64_t cols, int T, float *X,
                             void **data, uint8_t **scales)
{
    static const float vals[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    int64_t big1[8], big2[8];
    for (int j = 0; j < 8; j++) {
        int64_t last = j + (cols - 1 - j) / 8 * 8, occ = (last - j) / 8; /* occ >= 1 */
        big2[j] = last;
        big1[j] = j + (int64_t)(rnd() % (uint64_t)occ) * 8;
    }
    for (int t = 0; t < T; t++)
        for (int64_t c = 0; c < cols; c++)
            X[t * cols + c] = (float)((int)(rnd() % 64) - 32) * 0.25f;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < 8; j++) X[t * cols + big1[j]] = X[t * cols + big2[j]] = 0x1p50f;
    /* Unsigned nibble codes per element, then encode for the type. */
    uint8_t *nib = ms_malloc((size_t)(rows * cols));
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) nib[r * cols + c] = (uint8_t)(rnd() % 16);
        if (r % 2 == 0) {
            for (int j = 0; j < 8; j++) {
                uint8_t m = (uint8_t)(2 + rnd() % 6), sg = (uint8_t)(rnd() % 2 * 8);
                nib[r * cols + big1[j]] = m | sg;
                nib[r * cols + big2[j]] = m | (sg ^ 8);
            }
        } else {
            /* Odd rows: lanes j and j+4 carry +2v*2^50 and -2v*2^50, which cancel only in
             * the last step of the final combine. */
            for (int j = 0; j < 4; j++) {
                uint8_t m = (uint8_t)(2 + rnd() % 6), sg = (uint8_t)(rnd() % 2 * 8);
                nib[r * cols + big1[j]] = nib[r * cols + big2[j]] = m | sg;
                nib[r * cols + big1[j + 4]] = nib[r * cols + big2[j + 4]] = m | (sg ^ 8);
            }
        }
    }
    ms_mat W = {type, rows, cols, NULL, NULL};
    *scales = NULL;
    if (type == MS_WT_MXFP4) {
        uint8_t *d = ms_calloc((size_t)(rows * cols / 2), 1);
        uint8_t *s = ms_malloc((size_t)(rows * cols / 32));
        for (int64_t i = 0; i < rows * cols; i++)
            d[i / 2] |= (uint8_t)(nib[i] << (i % 2 ? 4 : 0));
        memset(s, 127, (size_t)(rows * cols / 32));
        *data = d;
        *scales = s;
        W.scales = s;
    } else {
        float *f = ms_malloc((size_t)(rows * cols) * sizeof(float));
        for (int64_t i = 0; i < rows * cols; i++)
            f[i] = nib[i] & 8 ? -vals[nib[i] & 7] : vals[nib[i] & 7];
        if (type == MS_WT_BF16) {
            uint16_t *h = ms_malloc((size_t)(rows * cols) * sizeof(uint16_t));
            for (int64_t i = 0; i < rows * cols; i++) h[i] = ms_f32_to_bf16_trunc(f[i]);
            free(f);
            *data = h;
        } else {
            *data = f;
        }
    }
    free(nib);
    W.data = *data;
    return W;
}

/* mode 0: random data; 1: random with extreme MXFP4 scales; 2: order-sensitive data. */
/* Tokens per check_matmul call: 5 (tiles of 3 + 2 on AVX2, 5 on AVX-512), or others below. */
static int g_T = 5;

static void check_matmul(ms_wtype type, int64_t rows, int64_t cols, int mode,
                         ms_pool *const pools[4])
{
    static const char *tn[] = {"f32", "bf16", "mxfp4"};
    const int T = g_T;
    void *data;
    uint8_t *scales;
    float *X = ms_malloc((size_t)(T * cols) * sizeof(float));
    ms_mat W;
    if (mode == 2) {
        W = make_sensitive(type, rows, cols, T, X, &data, &scales);
    } else {
        W = make_mat(type, rows, cols, mode == 1, &data, &scales);
        for (int64_t i = 0; i < T * cols; i++) X[i] = rnd_f();
    }
    float *Yref = ms_malloc((size_t)(T * rows) * sizeof(float));
    float *Y = ms_malloc((size_t)(T * rows) * sizeof(float));
    float *row = ms_malloc((size_t)cols * sizeof(float));
    float *row2 = ms_malloc((size_t)cols * sizeof(float));

    /* Reference: independent decode + the canonical order; and the naive-double check. */
    int loose_bad = 0;
    for (int64_t r = 0; r < rows; r++) {
        ref_row(&W, r, row);
        for (int t = 0; t < T; t++) {
            const float *x = X + t * cols;
            float canon = ref_canon32(row, x, cols);
            double naive = 0, mag = 0;
            for (int64_t c = 0; c < cols; c++) {
                naive += (double)row[c] * (double)x[c];
                mag += fabs((double)row[c] * (double)x[c]);
            }
            Yref[t * rows + r] = canon;
            /* Within the error bound of FP32 sums of cols/16 + 4 terms per result (the lane
             * chains and the tree), with a margin; results that overflow or underflow float are
             * left to the bit-exact checks. */
            double bound = ((double)cols / 16.0 + 5.0) * 0x1p-24 * 1.01 * mag + 1e-37;
            if (isfinite(mag) && isfinite(canon) && mag > 1e-30 && !(fabs((double)canon - naive) <= bound)) loose_bad++;
        }
    }
    T_CHECK(loose_bad == 0, "%s %lldx%lld: %d results not within the FP32 error bound of the exact dot", tn[type],
            (long long)rows, (long long)cols, loose_bad);

    /* every path this CPU has: scalar, AVX2 (forced on an AVX-512 machine), AVX-512 */
    for (int lv = 0; lv <= ms_cpu_best_level(); lv++) {
        ms_cpu_set_level(lv);
        const char *pn = ms_cpu_level_name(lv);
        /* Decoded rows match the independent decode bit for bit. */
        int64_t bad_rows = 0;
        for (int64_t r = 0; r < rows; r++) {
            ref_row(&W, r, row);
            ms_mat_row_f32(&W, r, row2);
            bad_rows += !same_bits(row, row2, cols, NULL);
        }
        T_CHECK(bad_rows == 0, "%s %lldx%lld [%s]: %lld decoded rows differ", tn[type],
                (long long)rows, (long long)cols, pn, (long long)bad_rows);
        for (int pi = 0; pi < 4; pi++) {
            int64_t first = -1;
            memset(Y, 0xff, (size_t)(T * rows) * sizeof(float));
            ms_matmul(&W, X, T, Y, pools[pi]);
            T_CHECK(same_bits(Y, Yref, T * rows, &first),
                    "%s %lldx%lld [%s, %d threads] T=%d: element %lld: %a vs reference %a",
                    tn[type], (long long)rows, (long long)cols, pn, ms_pool_size(pools[pi]), T,
                    (long long)first, first >= 0 ? Y[first] : 0.0f,
                    first >= 0 ? Yref[first] : 0.0f);
            memset(Y, 0xff, (size_t)(T * rows) * sizeof(float));
            for (int t = 0; t < T; t++) ms_matvec(&W, X + t * cols, Y + t * rows, pools[pi]);
            first = -1;
            T_CHECK(same_bits(Y, Yref, T * rows, &first),
                    "%s %lldx%lld [%s, %d threads] T=1 calls: element %lld: %a vs reference %a",
                    tn[type], (long long)rows, (long long)cols, pn, ms_pool_size(pools[pi]),
                    (long long)first, first >= 0 ? Y[first] : 0.0f,
                    first >= 0 ? Yref[first] : 0.0f);
        }
    }
    ms_cpu_set_simd(1);
    free(data);
    free(scales);
    free(X);
    free(Yref);
    free(Y);
    free(row);
    free(row2);
}

static void test_matmul(void)
{
    if (!ms_cpu_simd_available())
        ms_t_skip("AVX2+FMA not available: SIMD = scalar comparisons not run");
    ms_pool *pools[4] = {NULL, ms_pool_new(1), ms_pool_new(2), ms_pool_new(3)};
    T_CHECK(pools[1] && pools[2] && pools[3], "ms_pool_new: %s", ms_err_msg());
    if (!pools[1] || !pools[2] || !pools[3]) return;
    static const int64_t rows[] = {1, 7, 130};
    static const int64_t cols_fb[] = {1, 37, 1029};
    static const int64_t cols_mx[] = {32, 96, 3584};
    for (int ri = 0; ri < 3; ri++) {
        for (int ci = 0; ci < 3; ci++) {
            check_matmul(MS_WT_F32, rows[ri], cols_fb[ci], 0, pools);
            check_matmul(MS_WT_BF16, rows[ri], cols_fb[ci], 0, pools);
            check_matmul(MS_WT_MXFP4, rows[ri], cols_mx[ci], 0, pools);
        }
    }
    /* Extreme MXFP4 scales: subnormal, zero and overflowing weights. */
    check_matmul(MS_WT_MXFP4, 130, 3584, 1, pools);
    check_matmul(MS_WT_MXFP4, 9, 96, 1, pools);
    /* Order-sensitive data, tails of every length. */
    for (int64_t c = 16; c <= 24; c++) {
        check_matmul(MS_WT_F32, 7, c, 2, pools);
        check_matmul(MS_WT_BF16, 7, c, 2, pools);
    }
    check_matmul(MS_WT_F32, 130, 1029, 2, pools);
    check_matmul(MS_WT_BF16, 130, 1029, 2, pools);
    check_matmul(MS_WT_MXFP4, 7, 32, 2, pools);
    check_matmul(MS_WT_MXFP4, 130, 3584, 2, pools);
    /* the AVX-512 GEMV's 128-column steps, its last 32-column groups, and the next rows' prefetch */
    check_matmul(MS_WT_MXFP4, 17, 2880, 2, pools);
    check_matmul(MS_WT_MXFP4, 24, 160, 0, pools);
    /* every tile shape and remainder: T = 1 (GEMV tiles; AVX-512 MXFP4: 8 rows, then 2 + 1), 2..16 (AVX2 3-token and AVX-512
     * 6-token tiles with every remainder; AVX2 MXFP4: one-row tiles of 4-6 tokens; F32 rows:
     * panels from 4) */
    static const int Ts[] = {1, 2, 3, 4, 5, 6, 7, 8, 13, 16};
    for (size_t k = 0; k < sizeof Ts / sizeof Ts[0]; k++) {
        g_T = Ts[k];
        check_matmul(MS_WT_F32, 7, 37, 2, pools);
        check_matmul(MS_WT_BF16, 9, 1029, 2, pools);
        check_matmul(MS_WT_MXFP4, 11, 96, 2, pools);
    }
    /* panels (F32 from 4 tokens; on AVX2 BF16 from 8 and MXFP4 from 7; on AVX-512 from 24 and 32 on
     * Intel, 40 on AMD): rows in panels of 8 (AVX-512) or 3 (AVX2) with every remainder,
     * columns in blocks of 512 (AVX-512) or 8192 (AVX2: rows wider than that carry the lanes over
     * too; the next block's prefetch at every block and panel), tokens in passes of 255 (AVX-512)
     * or 28 (AVX2): 65 and 70 take a second and a third on AVX2, 257 a second on AVX-512, 100 and
     * 130 panels on every machine */
    static const int Tp[] = {24, 32, 65, 70, 100, 130, 257};
    for (size_t k = 0; k < sizeof Tp / sizeof Tp[0]; k++) {
        g_T = Tp[k];
        check_matmul(MS_WT_F32, 19, 1029, 2, pools);
        check_matmul(MS_WT_BF16, 13, 1100, 2, pools);
        check_matmul(MS_WT_MXFP4, 21, 3584, 2, pools);
        check_matmul(MS_WT_MXFP4, 5, 96, 1, pools);
        check_matmul(MS_WT_BF16, 4, 8200, 2, pools);
        check_matmul(MS_WT_MXFP4, 4, 8224, 2, pools);
    }
    /* token groups (rows_panel): passes whose token rows pass 6 MiB make groups of their own,
     * each through every panel (8200 columns: one 255-token pass a group on AVX-512, 168 tokens
     * on AVX2); 19 and 21 rows: several panels and a remainder */
    static const int Tg[] = {257, 600};
    for (size_t k = 0; k < sizeof Tg / sizeof Tg[0]; k++) {
        g_T = Tg[k];
        check_matmul(MS_WT_BF16, 19, 8200, 2, pools);
        check_matmul(MS_WT_MXFP4, 21, 8224, 2, pools);
    }
    g_T = 5;
    for (int i = 1; i < 4; i++) ms_pool_free(pools[i]);

    /* Degenerate shapes. */
    float y[3] = {1, 2, 3}, x[2] = {1, 1};
    float w[1] = {0};
    ms_mat Z = {MS_WT_F32, 3, 0, w, NULL};
    ms_matvec(&Z, x, y, NULL);
    T_CHECK(y[0] == 0 && y[1] == 0 && y[2] == 0, "cols = 0 gives zeros");
    ms_mat E = {MS_WT_F32, 0, 2, w, NULL};
    y[0] = 7, y[1] = 8, y[2] = 9;
    ms_matvec(&E, x, y, NULL);
    T_CHECK(y[0] == 7 && y[1] == 8 && y[2] == 9, "rows = 0 is a no-op (writes nothing)");

    ms_mat B = {MS_WT_BF16, 3, 5, w, NULL};
    T_CHECK(ms_mat_bytes(&B) == 30, "bf16 bytes");
    ms_mat M = {MS_WT_MXFP4, 4, 64, w, (const uint8_t *)w};
    T_CHECK(ms_mat_bytes(&M) == 4 * 32 + 4 * 2, "mxfp4 bytes");
    ms_mat F = {MS_WT_F32, 3, 5, w, NULL};
    T_CHECK(ms_mat_bytes(&F) == 60, "f32 bytes");
}

int main(void)
{
    /* MS_NO_SIMD is read by the first ms_kern_init; ms_cpu_set_simd overrides it. */
    setenv("MS_NO_SIMD", "1", 1);
    ms_kern_init();
    T_CHECK(!ms_cpu_simd_enabled(), "MS_NO_SIMD=1 disables SIMD");
    ms_cpu_set_simd(1);
    T_CHECK(ms_cpu_simd_enabled() == ms_cpu_simd_available(), "ms_cpu_set_simd(1)");
    unsetenv("MS_NO_SIMD");

    test_fixture();
    test_e2m1_e8m0();
    test_f16_bf16();
    test_dot();
    test_matmul();
    return ms_t_done();
}
