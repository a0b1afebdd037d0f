/* ms_kbench: FMA peaks and read bandwidth, measured with loops in registers and over a large buffer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ms_clock.h"
#include "ms_cpu.h"
#include "ms_err.h"
#include "ms_kbench.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KB_X86 1
#else
#define KB_X86 0
#endif

/* Independent accumulator chains per thread: enough to cover the FMA latency (4-5 cycles) at two
 * FMAs a cycle, and few enough to stay in registers. */
enum { CHAINS = 12 };

typedef struct {
    ms_kb_isa isa;
    int64_t iters;  /* loop trips per thread */
    int64_t sink;   /* keeps the results alive */
} peak_ctx;

#if KB_X86
/* One FMA on each of the CHAINS accumulators, written out: the chains must stay in registers. */
#define FMA_CHAINS(FMA)                                                                                 \
    (a[0] = FMA(a[0], m, c), a[1] = FMA(a[1], m, c), a[2] = FMA(a[2], m, c), a[3] = FMA(a[3], m, c),   \
     a[4] = FMA(a[4], m, c), a[5] = FMA(a[5], m, c), a[6] = FMA(a[6], m, c), a[7] = FMA(a[7], m, c),   \
     a[8] = FMA(a[8], m, c), a[9] = FMA(a[9], m, c), a[10] = FMA(a[10], m, c), a[11] = FMA(a[11], m, c))
_Static_assert(CHAINS == 12, "FMA_CHAINS writes out 12 chains");
/* A thread's peak loop on one path: CHAINS independent FMA chains, summed at the end (the sum
 * only keeps the work alive). */
#define PEAK_LOOP(NAME, TARGET, VEC, SCALAR, LANES, SET1, FMA, ADD, STOREU)                 \
    __attribute__((target(TARGET))) static double NAME(int64_t iters)                      \
    {                                                                                      \
        VEC a[CHAINS], m = SET1((SCALAR)0.999999), c = SET1((SCALAR)1e-7);                 \
        for (int k = 0; k < CHAINS; k++) a[k] = SET1((SCALAR)k);                           \
        for (int64_t i = 0; i < iters; i++) FMA_CHAINS(FMA);                               \
        VEC s = a[0];                                                                      \
        for (int k = 1; k < CHAINS; k++) s = ADD(s, a[k]);                                 \
        SCALAR o[LANES];                                                                   \
        STOREU(o, s);                                                                      \
        return o[0];                                                                       \
    }
PEAK_LOOP(loop_f32_avx2, "avx2,fma", __m256, float, 8, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, _mm256_storeu_ps)
PEAK_LOOP(loop_f32_avx512, "avx512f", __m512, float, 16, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps,
          _mm512_storeu_ps)
PEAK_LOOP(loop_f64_avx2, "avx2,fma", __m256d, double, 4, _mm256_set1_pd, _mm256_fmadd_pd, _mm256_add_pd,
          _mm256_storeu_pd)
#endif

static int lanes(ms_kb_isa isa) { return isa == MS_KB_F32_AVX512 ? 16 : isa == MS_KB_F32_AVX2 ? 8 : 4; }

int ms_kbench_has(ms_kb_isa isa)
{
#if KB_X86
    ms_cpu_init();
    if (isa == MS_KB_F32_AVX512) return __builtin_cpu_supports("avx512f");
    return ms_cpu_simd_available();
#else
    (void)isa;
    return 0;
#endif
}

const char *ms_kbench_name(ms_kb_isa isa)
{
    static const char *const n[MS_KB_N] = {"fp32-avx2", "fp32-avx512", "fp64-avx2"};
    return isa >= 0 && isa < MS_KB_N ? n[isa] : "?";
}

static void peak_task(void *vctx, int64_t b, int64_t e)
{
    peak_ctx *c = vctx;
    double s = 0;
    for (int64_t t = b; t < e; t++) {
#if KB_X86
        s += c->isa == MS_KB_F32_AVX512 ? loop_f32_avx512(c->iters)
             : c->isa == MS_KB_F32_AVX2 ? loop_f32_avx2(c->iters)
                                        : loop_f64_avx2(c->iters);
#endif
    }
    __atomic_fetch_add(&c->sink, (int64_t)s, __ATOMIC_RELAXED);
}

double ms_kbench_fma_peak(ms_pool *pool, ms_kb_isa isa, double seconds)
{
    if (!ms_kbench_has(isa)) return 0;
    int n = ms_pool_size(pool);
    peak_ctx c = {isa, 1 << 16, 0};
    double best = 0;
    for (;;) { /* grow the trip count until one run takes a tenth of the time asked */
        double t0 = ms_now();
        ms_pool_for(pool, n, 1, peak_task, &c);
        double dt = ms_now() - t0;
        if (dt >= seconds / 10 || c.iters > ((int64_t)1 << 40)) break;
        c.iters *= 4;
    }
    double until = ms_now() + seconds;
    do { /* the best of several runs: the machine's limit, not its noise */
        double t0 = ms_now();
        ms_pool_for(pool, n, 1, peak_task, &c);
        double dt = ms_now() - t0;
        double g = 2.0 * lanes(isa) * CHAINS * (double)c.iters * n / dt / 1e9;
        if (g > best) best = g;
    } while (ms_now() < until);
    return best;
}

enum { MS_KB_PASS = 64 << 20 }; /* bytes of one timed pass of the bandwidth probe */

typedef struct {
    uint8_t *buf;       /* the part a pass covers: its thread t's slice at t * slice */
    size_t slice;       /* bytes a thread reads in a pass (a multiple of 16 KiB) */
    int touch;          /* 1: write the slice (first touch), 0: read it */
    uint64_t sink;
} bw_ctx;

/* A read of n bytes as four streams at once (the slice's quarters, side by side), each asking for
 * the line 1 KiB ahead as the kernels' tiles do (ms_gemm.c): the hardware prefetchers alone keep
 * too few lines in flight to reach the memory's limit. n is a multiple of 4 KiB; the prefetches
 * never pass the end of a quarter. */
#if KB_X86
__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, size_t n)
{
    size_t q = n / 4;
    const uint8_t *s0 = p, *s1 = p + q, *s2 = p + 2 * q, *s3 = p + 3 * q;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 64 <= q; i += 64) {
        if (i + 1024 < q) {
            __builtin_prefetch(s0 + i + 1024);
            __builtin_prefetch(s1 + i + 1024);
            __builtin_prefetch(s2 + i + 1024);
            __builtin_prefetch(s3 + i + 1024);
        }
        a0 = _mm256_xor_si256(a0, _mm256_xor_si256(_mm256_load_si256((const __m256i *)(s0 + i)),
                                                   _mm256_load_si256((const __m256i *)(s0 + i + 32))));
        a1 = _mm256_xor_si256(a1, _mm256_xor_si256(_mm256_load_si256((const __m256i *)(s1 + i)),
                                                   _mm256_load_si256((const __m256i *)(s1 + i + 32))));
        a2 = _mm256_xor_si256(a2, _mm256_xor_si256(_mm256_load_si256((const __m256i *)(s2 + i)),
                                                   _mm256_load_si256((const __m256i *)(s2 + i + 32))));
        a3 = _mm256_xor_si256(a3, _mm256_xor_si256(_mm256_load_si256((const __m256i *)(s3 + i)),
                                                   _mm256_load_si256((const __m256i *)(s3 + i + 32))));
    }
    __m256i s = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    uint64_t o[4];
    _mm256_storeu_si256((__m256i *)o, s);
    return o[0] ^ o[1] ^ o[2] ^ o[3];
}
#endif

static uint64_t read_plain(const uint8_t *p, size_t n)
{
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, v;
    size_t q = n / 4;
    for (size_t i = 0; i + 8 <= q; i += 8) {
        if (!(i & 63) && i + 1024 < q)
            for (int k = 0; k < 4; k++) __builtin_prefetch(p + (size_t)k * q + i + 1024);
        memcpy(&v, p + i, 8), s0 ^= v;
        memcpy(&v, p + q + i, 8), s1 ^= v;
        memcpy(&v, p + 2 * q + i, 8), s2 ^= v;
        memcpy(&v, p + 3 * q + i, 8), s3 ^= v;
    }
    return s0 ^ s1 ^ s2 ^ s3;
}

static void bw_task(void *vctx, int64_t b, int64_t e)
{
    bw_ctx *c = vctx;
    size_t slice = c->slice;
    for (int64_t t = b; t < e; t++) {
        uint8_t *p = c->buf + (size_t)t * slice;
        if (c->touch) {
            for (size_t i = 0; i < slice; i += 8) {
                uint64_t v = (uint64_t)i * 0x9e3779b97f4a7c15ull;
                memcpy(p + i, &v, 8);
            }
            continue;
        }
        uint64_t s;
#if KB_X86
        s = ms_cpu_simd_available() ? read_avx2(p, slice) : read_plain(p, slice);
#else
        s = read_plain(p, slice);
#endif
        __atomic_fetch_xor(&c->sink, s, __ATOMIC_RELAXED);
    }
}

double ms_kbench_read_bw(ms_pool *pool, size_t bytes, double seconds)
{
    int n = ms_pool_size(pool);
    uint8_t *buf = NULL;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0 && bytes / (size_t)psz >= (size_t)pages) {
        ms_err_set("cannot allocate %zu bytes for the bandwidth probe: more than this machine's RAM", bytes);
        return ms_err_set_code(MS_EXIT_RUNTIME);
    }
    if (posix_memalign((void **)&buf, 4096, bytes) != 0 || !buf) {
        ms_err_set("cannot allocate %zu bytes for the bandwidth probe", bytes);
        return ms_err_set_code(MS_EXIT_RUNTIME);
    }
    /* A timed pass reads MS_KB_PASS bytes (or the whole buffer if smaller), each thread its
     * slice, and the passes go round the buffer: the best pass is the same statistic as the
     * kernels' best call (ms_cli_bench), taken on memory the caches do not hold. */
    size_t pass = bytes < MS_KB_PASS ? bytes : MS_KB_PASS;
    size_t slice = (pass / (size_t)n) & ~(size_t)16383; /* four 4 KiB-aligned quarters */
    if (slice == 0) {
        free(buf);
        ms_err_set("a bandwidth probe of %zu bytes is too small for %d threads (16 KiB a thread at least)", bytes, n);
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    size_t stride = slice * (size_t)n, npass = bytes / stride;
    bw_ctx c = {buf, slice, 1, 0};
    for (size_t k = 0; k < npass; k++) { /* each thread's slices on its own node */
        c.buf = buf + k * stride;
        ms_pool_for(pool, n, 1, bw_task, &c);
    }
    c.touch = 0;
    double best = 0, until = ms_now() + seconds;
    size_t k = 0;
    do {
        c.buf = buf + k * stride;
        k = (k + 1) % npass;
        double t0 = ms_now();
        ms_pool_for(pool, n, 1, bw_task, &c);
        double g = (double)stride / (ms_now() - t0) / 1e9;
        if (g > best) best = g;
    } while (ms_now() < until);
    free(buf);
    return best;
}
