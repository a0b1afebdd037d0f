/* malloc-count: an LD_PRELOAD library that counts malloc, calloc and realloc calls (every thread)
 * and writes the totals to the file named by MS_MALLOC_COUNT_OUT at exit. For decode-step.sh. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

static atomic_long calls;

void *malloc(size_t n)
{
    atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
    atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
    return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
    atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
    return __libc_realloc(p, n);
}

__attribute__((destructor)) static void report(void)
{
    const char *path = getenv("MS_MALLOC_COUNT_OUT");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f) return;
    fprintf(f, "%ld\n", atomic_load(&calls));
    fclose(f);
}
