/* ms_cpu: CPU feature detection and the process-wide choice of kernel path. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ms_cpu.h"

static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static int simd_avail;
static atomic_int simd_on;

static void cpu_init_once(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    simd_avail = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    simd_avail = 0;
#endif
    const char *env = getenv("MS_NO_SIMD");
    int off = env && *env && strcmp(env, "0") != 0;
    atomic_store(&simd_on, simd_avail && !off);
}

void ms_cpu_init(void) { pthread_once(&cpu_once, cpu_init_once); }

int ms_cpu_simd_available(void)
{
    ms_cpu_init();
    return simd_avail;
}

void ms_cpu_set_simd(int on)
{
    ms_cpu_init();
    atomic_store(&simd_on, on && simd_avail);
}

int ms_cpu_simd_enabled(void)
{
    ms_cpu_init();
    return atomic_load_explicit(&simd_on, memory_order_relaxed); /* read per kernel call */
}
