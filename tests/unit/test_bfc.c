/* test_bfc: the BF16 block codec: exact round trips of every kind of block, SIMD == scalar, corruption found. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ms_cpu.h"
#include "ms_bfc.h"
#include "ms_kern.h"
#include "ms_test.h"

static uint64_t rng = 0x1234567;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static double u01(void) { return ((double)(next() >> 11) + 0.5) / 9007199254740992.0; }

/* The decoder a kernel path runs: AVX-512 only with VBMI2 (else its AVX2 one). */
static const char *path_name(int level)
{
    return level == MS_SIMD_AVX512 ? (ms_cpu_has_vbmi2() ? "avx512-vbmi2" : "avx2 (on avx512)") : ms_cpu_level_name(level);
}

/* Encode v[n] with k (-1: best) into a buffer placed at byte offset `mis` (alignment), decode
 * it on both paths into outputs at offset `mis` too, and compare with v. Returns the size. */
static size_t round_trip(const char *what, const uint16_t *v, size_t n, int k, int mis)
{
    uint8_t *enc = malloc(ms_bfc_bound(n) + 64);
    uint8_t *o1 = malloc(2 * n + 64), *o2 = malloc(2 * n + 64);
    uint8_t *e = enc + mis;
    size_t sz = ms_bfc_encode(v, n, k, e);
    T_CHECK(sz <= ms_bfc_bound(n), "%s: size %zu within the bound %zu", what, sz, ms_bfc_bound(n));
    if (k >= 0) T_CHECK(ms_bfc_block_k(e, sz) == k, "%s: k %d as forced (got %d)", what, k, ms_bfc_block_k(e, sz));
    /* decoders write uint16_t; mis-aligned outputs by an even offset (an odd one would be UB) */
    uint16_t *d1 = (uint16_t *)(void *)(o1 + 2 * (mis & 1) + (mis & ~1)), *d2 = (uint16_t *)(void *)(o2 + (mis & ~1));
    memset(d1, 0xAA, 2 * n);
    memset(d2, 0x55, 2 * n);
    int r1 = ms_bfc_decode_scalar(e, sz, d1, n);
    T_CHECK(r1 == 0 && !memcmp(d1, v, 2 * n), "%s (n %zu, k %d): scalar decode is exact (rc %d)", what, n, k, r1);
    for (int l = MS_SIMD_AVX2; l <= ms_cpu_best_level(); l++) { /* every SIMD path this CPU runs */
        ms_cpu_set_level(l);
        memset(d2, 0x55, 2 * n);
        int r2 = ms_bfc_decode(e, sz, d2, n);
        T_CHECK(r2 == 0 && !memcmp(d2, v, 2 * n), "%s (n %zu, k %d): %s decode is exact (rc %d)", what, n, k, path_name(l),
                r2);
    }
    ms_cpu_set_simd(1);
    free(enc);
    free(o1);
    free(o2);
    return sz;
}

static void all_ks(const char *what, const uint16_t *v, size_t n, int has_one_high)
{
    round_trip(what, v, n, -1, 0);
    for (int k = 1; k <= 4; k++) round_trip(what, v, n, k, k); /* escapes where the table is short */
    round_trip(what, v, n, 8, 3);
    if (has_one_high) round_trip(what, v, n, 0, 5);
}

static void test_kinds(void)
{
    size_t N = 32768;
    uint16_t *v = malloc(2 * N);
    /* random bits: every high byte many times; best is raw (k = 8) */
    for (size_t i = 0; i < N; i++) v[i] = (uint16_t)next();
    size_t sz = round_trip("random", v, N, -1, 0);
    T_CHECK(sz == MS_BFC_HDR + 2 * N, "random bits are stored raw (%zu bytes)", sz);
    all_ks("random", v, N, 0);
    /* all equal */
    for (size_t i = 0; i < N; i++) v[i] = 0x3c01;
    sz = round_trip("all-equal", v, N, -1, 0);
    T_CHECK(sz == MS_BFC_HDR + N, "all-equal: the low bytes and a header (%zu of %zu)", sz, 2 * N);
    all_ks("all-equal", v, N, 1);
    /* all escapes: 16 high bytes never in a 1..4-bit table of the block's most frequent values */
    for (size_t i = 0; i < N; i++) v[i] = (uint16_t)(((i % 256) << 8) | (next() & 0xff));
    all_ks("all-escape", v, N, 0);
    /* NaN, Inf, denormals, zeros of both signs */
    static const uint16_t sp[] = {0x7fc0, 0xffc0, 0x7f80, 0xff80, 0x0001, 0x8001, 0x007f, 0x0000, 0x8000, 0x7f81};
    for (size_t i = 0; i < N; i++) v[i] = sp[next() % 10];
    all_ks("nan-inf-denormal", v, N, 0);
    /* Gaussian like trained weights (sigma 0.02): high bytes low-entropy, the codec's case */
    for (size_t i = 0; i < N; i++)
        v[i] = ms_f32_to_bf16_trunc((float)(0.02 * sqrt(-2.0 * log(u01())) * cos(6.283185307179586 * u01())));
    sz = round_trip("gaussian", v, N, -1, 0);
    T_CHECK(sz < 2 * N * 3 / 4, "gaussian: at least 25%% smaller (%zu of %zu bytes)", sz, 2 * N);
    all_ks("gaussian", v, N, 0);
    /* every high byte value in one block, and every pair value once in a long block */
    uint16_t *w = malloc(2 * 65536);
    for (size_t i = 0; i < 65536; i++) w[i] = (uint16_t)(i * 40503u); /* odd multiplier: a permutation */
    all_ks("every-value", w, 65536, 0);
    free(w);
    free(v);
}

/* Odd lengths (partial last groups) and alignments, on small blocks of a few high bytes. */
static void test_lengths(void)
{
    static const size_t lens[] = {1, 2, 7, 31, 32, 33, 63, 64, 65, 95, 97, 1000, 4097};
    uint16_t v[4097];
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        size_t n = lens[li];
        for (size_t i = 0; i < n; i++) v[i] = (uint16_t)(((0x3c + next() % 5) << 8) | (next() & 0xff));
        for (int mis = 0; mis < 4; mis++) {
            round_trip("short", v, n, -1, mis);
            for (int k = 1; k <= 4; k++) round_trip("short", v, n, k, mis);
        }
    }
    round_trip("empty", v, 0, -1, 0);
}

/* SIMD == scalar over many random mixtures (escape-dense and sparse groups). */
static void test_simd_scalar(void)
{
    if (!ms_cpu_simd_available()) {
        ms_t_skip("test_bfc: no AVX2 on this CPU: only the scalar path is tested");
        return;
    }
    if (!ms_cpu_has_vbmi2())
        ms_t_skip("test_bfc: no AVX-512 VBMI2 on this CPU: its trunk-pack decoder is not tested here");
    uint16_t v[5000];
    uint16_t a[5000], b[5000];
    uint8_t *enc = malloc(ms_bfc_bound(5000));
    for (int l = MS_SIMD_AVX2; l <= ms_cpu_best_level(); l++) {
        int bad = 0;
        for (int t = 0; t < 400; t++) {
            size_t n = 1 + next() % 5000;
            int spread = 1 + (int)(next() % 40); /* distinct high bytes */
            for (size_t i = 0; i < n; i++) v[i] = (uint16_t)(((0x30 + next() % (unsigned)spread) << 8) | (next() & 0xff));
            int k = (int)(next() % 6) - 1;
            if (k == 0) k = -1;
            if (k == 5) k = 8;
            size_t sz = ms_bfc_encode(v, n, k, enc);
            ms_cpu_set_level(l);
            int r1 = ms_bfc_decode(enc, sz, a, n);
            int r2 = ms_bfc_decode_scalar(enc, sz, b, n);
            if (r1 || r2 || memcmp(a, b, 2 * n) || memcmp(a, v, 2 * n)) bad++;
        }
        T_CHECK(bad == 0, "400 random blocks: %s and scalar decode to the input (%d differ)", path_name(l), bad);
    }
    ms_cpu_set_simd(1);
    free(enc);
}

/* A flipped bit anywhere is a checksum mismatch; a wrong count or size is malformed. */
static void test_corrupt(void)
{
    size_t n = 3000;
    uint16_t v[3000], d[3000];
    for (size_t i = 0; i < n; i++) v[i] = (uint16_t)(((0x3c + next() % 9) << 8) | (next() & 0xff));
    uint8_t *enc = malloc(ms_bfc_bound(n));
    size_t sz = ms_bfc_encode(v, n, 3, enc);
    int caught = 0, tries = 0;
    for (size_t pos = 0; pos < sz; pos += 1 + sz / 97, tries++) {
        enc[pos] ^= 0x10;
        caught += ms_bfc_decode(enc, sz, d, n) != 0 && ms_bfc_decode_scalar(enc, sz, d, n) != 0;
        enc[pos] ^= 0x10;
    }
    T_CHECK(caught == tries, "every flipped bit is refused (%d of %d)", caught, tries);
    enc[sz / 2] ^= 1;
    T_CHECK(ms_bfc_decode(enc, sz, d, n) == MS_BFC_BAD_SUM, "a flipped data bit is a checksum mismatch");
    enc[sz / 2] ^= 1;
    T_CHECK(ms_bfc_decode(enc, sz, d, n) == 0, "restored, it decodes");
    T_CHECK(ms_bfc_decode(enc, sz, d, n - 1) == MS_BFC_BAD_FORM, "a block of another length is malformed");
    T_CHECK(ms_bfc_decode(enc, sz - 1, d, n) != 0, "a truncated block is refused");
    T_CHECK(ms_bfc_decode(enc, 10, d, n) == MS_BFC_BAD_FORM, "a block shorter than its header is refused");
    /* verified once (a block kept in memory), then decoded without the checksum */
    T_CHECK(ms_bfc_verify(enc, sz, n) == 0, "an intact block verifies");
    enc[sz / 2] ^= 1;
    T_CHECK(ms_bfc_verify(enc, sz, n) == MS_BFC_BAD_SUM, "verify: a flipped data bit is a checksum mismatch");
    memset(d, 0, sizeof d);
    T_CHECK(ms_bfc_decode_verified(enc, sz, d, n) == 0 && memcmp(d, v, 2 * n) != 0,
            "decode_verified skips the checksum (the flipped bit decodes, to other values)");
    enc[sz / 2] ^= 1;
    T_CHECK(ms_bfc_decode_verified(enc, sz, d, n) == 0 && !memcmp(d, v, 2 * n), "decode_verified is exact");
    T_CHECK(ms_bfc_verify(enc, sz, n - 1) == MS_BFC_BAD_FORM && ms_bfc_decode_verified(enc, sz, d, n - 1) == MS_BFC_BAD_FORM,
            "both still refuse a block of another length");
    T_CHECK(ms_bfc_decode_verified(enc, sz - 1, d, n) == MS_BFC_BAD_FORM && ms_bfc_verify(enc, 10, n) == MS_BFC_BAD_FORM,
            "and truncated blocks");
    free(enc);
}

/* A block claiming one escape fewer or one more than its codes use (layout and sizes otherwise
 * consistent, decoded without the checksum): malformed on every path. */
static void test_escape_count(void)
{
    size_t n = 4000;
    uint16_t v[4000], d[4000];
    for (size_t i = 0; i < n; i++) v[i] = (uint16_t)(((0x30 + next() % 7) << 8) | (next() & 0xff));
    uint8_t *enc = malloc(ms_bfc_bound(n)), *bad = malloc(ms_bfc_bound(n) + 1);
    size_t sz = ms_bfc_encode(v, n, 1, enc); /* k = 1: one high byte coded, the other six escaped */
    uint32_t esc;
    memcpy(&esc, enc + 16, 4);
    T_CHECK(esc > 100, "k = 1 escapes most values (%u)", esc);
    size_t at = sz - n; /* where the low bytes start: the escapes end there */
    for (int more = 0; more < 2; more++) {
        /* fewer: drop the last escape; more: repeat it */
        size_t bs = more ? sz + 1 : sz - 1;
        memcpy(bad, enc, at - 1);
        if (more) bad[at - 1] = bad[at] = enc[at - 1];
        memcpy(bad + at - 1 + 2 * more, enc + at, n);
        uint32_t e2 = more ? esc + 1 : esc - 1;
        memcpy(bad + 16, &e2, 4);
        T_CHECK(ms_bfc_decode_scalar(bad, bs, d, n) == MS_BFC_BAD_SUM, "%s escapes: the checksum no longer matches",
                more ? "more" : "fewer");
        for (int l = MS_SIMD_SCALAR; l <= ms_cpu_best_level(); l++) {
            ms_cpu_set_level(l);
            T_CHECK(ms_bfc_decode_verified(bad, bs, d, n) == MS_BFC_BAD_FORM, "%s escapes than codes: malformed (%s)",
                    more ? "more" : "fewer", path_name(l));
        }
    }
    ms_cpu_set_simd(1);
    free(enc);
    free(bad);
}

int main(void)
{
    ms_kern_init();
    test_kinds();
    test_lengths();
    test_simd_scalar();
    test_corrupt();
    test_escape_count();
    ms_cpu_set_simd(ms_cpu_simd_available());
    return ms_t_done();
}
