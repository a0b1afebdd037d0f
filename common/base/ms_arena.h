/* ms_arena: one scratch buffer, allocated once, handed out in aligned pieces and reset by mark. */
#ifndef MS_ARENA_H
#define MS_ARENA_H

#include <stddef.h>

/* Pieces are 64-byte aligned; a size function that counts MS_ARENA_SPAN(n) for each piece of
 * n floats is an exact upper bound of what those pieces take. */
#define MS_ARENA_ALIGN_FLOATS 16
#define MS_ARENA_SPAN(n) ((size_t)(n) + MS_ARENA_ALIGN_FLOATS)

typedef struct {
    float *base;     /* [cap] owned */
    size_t cap;      /* floats */
    size_t used;     /* floats handed out (with alignment) */
    size_t peak;     /* most ever used */
} ms_arena;

/* An arena of cap floats (zero-initialised struct a); aborts like ms_malloc when memory is
 * exhausted. Growing an arena with live pieces is a programmer error. */
void ms_arena_reserve(ms_arena *a, size_t cap);
void ms_arena_free(ms_arena *a); /* accepts an empty arena */

/* n floats (uninitialised, 64-byte aligned) valid until a reset below them. Running out is a
 * programmer error (the size function undercounted): an always-on assert names it. */
float *ms_arena_take(ms_arena *a, size_t n);
static inline size_t ms_arena_mark(const ms_arena *a) { return a->used; }
static inline void ms_arena_reset(ms_arena *a, size_t mark) { a->used = mark; }

#endif
