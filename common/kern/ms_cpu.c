/* ms_cpu: CPU feature detection and the process-wide choice of kernel path. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ms_cpu.h"

static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static int best;       /* what the CPU runs */
static int cap;        /* what MS_SIMD allows */
static int amd;        /* the vendor is AMD */
static int vbmi2;      /* AVX512_VBMI and AVX512_VBMI2 (byte permutes and expands) */
static atomic_int level;

static void cpu_init_once(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    int avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    best = avx512 ? MS_SIMD_AVX512 : avx2 ? MS_SIMD_AVX2 : MS_SIMD_SCALAR;
    amd = __builtin_cpu_is("amd");
    vbmi2 = avx512 && __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2");
#else
    best = MS_SIMD_SCALAR;
#endif
    cap = best;
    const char *s = getenv("MS_SIMD");
    if (s && !strcmp(s, "scalar")) cap = MS_SIMD_SCALAR;
    if (s && !strcmp(s, "avx2") && cap > MS_SIMD_AVX2) cap = MS_SIMD_AVX2;
    const char *env = getenv("MS_NO_SIMD");
    int off = env && *env && strcmp(env, "0") != 0;
    atomic_store(&level, off ? MS_SIMD_SCALAR : cap);
}

void ms_cpu_init(void) { pthread_once(&cpu_once, cpu_init_once); }

int ms_cpu_simd_available(void)
{
    ms_cpu_init();
    return best >= MS_SIMD_AVX2;
}

int ms_cpu_best_level(void)
{
    ms_cpu_init();
    return best;
}

void ms_cpu_set_simd(int on)
{
    ms_cpu_init();
    atomic_store(&level, on ? cap : MS_SIMD_SCALAR);
}

int ms_cpu_set_level(int l)
{
    ms_cpu_init();
    if (l > best) l = best;
    if (l < 0) l = 0;
    atomic_store(&level, l);
    return l;
}

int ms_cpu_simd_enabled(void)
{
    ms_cpu_init();
    return atomic_load_explicit(&level, memory_order_relaxed) > MS_SIMD_SCALAR; /* read per kernel call */
}

int ms_cpu_level(void)
{
    ms_cpu_init();
    return atomic_load_explicit(&level, memory_order_relaxed);
}

int ms_cpu_is_amd(void)
{
    ms_cpu_init();
    return amd;
}

int ms_cpu_has_vbmi2(void)
{
    ms_cpu_init();
    return vbmi2;
}

const char *ms_cpu_level_name(int l) { return l == MS_SIMD_AVX512 ? "avx512" : l == MS_SIMD_AVX2 ? "avx2" : "scalar"; }
