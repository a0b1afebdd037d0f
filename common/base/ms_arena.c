/* ms_arena: a bump allocator over one buffer for the forward pass's scratch. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ms_arena.h"
#include "ms_err.h"

void ms_arena_reserve(ms_arena *a, size_t cap)
{
    if (cap <= a->cap) return;
    MS_ASSERT(a->used == 0);
    free(a->base);
    a->base = NULL;
    if (posix_memalign((void **)&a->base, 64, sizeof(float) * cap) != 0) {
        fprintf(stderr, "moestream: out of memory (scratch of %zu bytes)\n", sizeof(float) * cap);
        abort();
    }
    a->cap = cap;
}

void ms_arena_free(ms_arena *a)
{
    free(a->base);
    a->base = NULL;
    a->cap = a->used = a->peak = 0;
}

float *ms_arena_take(ms_arena *a, size_t n)
{
    size_t at = (a->used + MS_ARENA_ALIGN_FLOATS - 1) / MS_ARENA_ALIGN_FLOATS * MS_ARENA_ALIGN_FLOATS;
    if (at + n > a->cap) {
        fprintf(stderr, "moestream: internal error: scratch arena of %zu floats is short of %zu more\n", a->cap,
                at + n - a->cap);
        MS_ASSERT(at + n <= a->cap);
    }
    a->used = at + n;
    if (a->used > a->peak) a->peak = a->used;
    return a->base + at;
}
