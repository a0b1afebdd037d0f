/* ms_scratch: per-thread LIFO scratch blocks (see ms_scratch.h). */
#include "ms_scratch.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ms_err.h"

#define ALIGN 64
#define SPILL (SIZE_MAX - 1)
#define MAX_DEPTH 64 /* pieces live at once on one thread; deeper is a programmer error */

typedef struct {
    uint8_t *base;               /* [MS_SCRATCH_KEEP] owned, ALIGN-aligned; NULL until the first use */
    size_t top;                  /* bytes of it in use */
    void *piece[MAX_DEPTH];      /* live pieces, oldest first */
    size_t piece_top[MAX_DEPTH]; /* the block's top before each piece, or SIZE_MAX (heap), or
                                    SPILL (the spill region) */
    size_t piece_size[MAX_DEPTH]; /* a mapped piece's bytes */
    int depth;
    uint8_t *spill;              /* [spill_cap] the caller's, or NULL (ms_scratch_spill_set) */
    size_t spill_cap, spill_top;
    size_t heap_pushes;
} scratch;

static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static _Thread_local scratch *mine;

static void scratch_free(void *v)
{
    scratch *s = v;
    if (!s) return;
    free(s->base);
    free(s);
    mine = NULL; /* run by the ending thread itself */
}

static void key_make(void) { MS_ASSERT(pthread_key_create(&key, scratch_free) == 0); }

static scratch *get(void)
{
    if (mine) return mine;
    pthread_once(&key_once, key_make);
    mine = ms_calloc(1, sizeof *mine);
    MS_ASSERT(pthread_setspecific(key, mine) == 0); /* freed by the key's destructor at thread exit */
    return mine;
}

static void *aligned(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, ALIGN, n) != 0) {
        fprintf(stderr, "moestream: out of memory allocating %zu bytes\n", n);
        abort();
    }
    return p;
}

void ms_scratch_prepare(void)
{
    scratch *s = get();
    if (!s->base) s->base = aligned(MS_SCRATCH_KEEP); /* pages are touched only as pieces use them */
}

void *ms_scratch_push(size_t bytes)
{
    scratch *s = get();
    MS_ASSERT(s->depth < MAX_DEPTH);
    if (!s->base) s->base = aligned(MS_SCRATCH_KEEP);
    size_t n = (bytes + ALIGN - 1) / ALIGN * ALIGN;
    if (n == 0) n = ALIGN;
    void *p;
    if (s->top + n <= MS_SCRATCH_KEEP) {
        p = s->base + s->top;
        s->piece_top[s->depth] = s->top;
        s->top += n;
    } else if (s->spill && s->spill_top + n <= s->spill_cap) {
        p = s->spill + s->spill_top;
        s->piece_top[s->depth] = SPILL;
        s->spill_top += n;
    } else {
        /* Mapped for itself and unmapped at its pop: malloc would keep a freed piece this big in
         * the thread's arena (its mmap threshold rises after such frees), and with a piece of
         * all a span's rows on several threads that memory stays the process's. */
        p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            fprintf(stderr, "moestream: out of memory allocating %zu bytes\n", n);
            abort();
        }
        s->piece_top[s->depth] = SIZE_MAX;
        s->piece_size[s->depth] = n;
        s->heap_pushes++;
    }
    s->piece[s->depth++] = p;
    return p;
}

void *ms_scratch_push_zero(size_t bytes)
{
    void *p = ms_scratch_push(bytes);
    memset(p, 0, bytes);
    return p;
}

void ms_scratch_pop(void *p)
{
    if (!p) return;
    scratch *s = mine;
    MS_ASSERT(s && s->depth > 0 && s->piece[s->depth - 1] == p); /* pops in reverse order of pushes */
    s->depth--;
    if (s->piece_top[s->depth] == SIZE_MAX) munmap(p, s->piece_size[s->depth]);
    else if (s->piece_top[s->depth] == SPILL) s->spill_top = (size_t)((uint8_t *)p - s->spill);
    else s->top = s->piece_top[s->depth];
}

void ms_scratch_release(void)
{
    scratch *s = mine;
    if (!s) return;
    MS_ASSERT(s->depth == 0);
    free(s->base);
    s->base = NULL;
}

void ms_scratch_spill_set(void *base, size_t bytes)
{
    scratch *s = get();
    MS_ASSERT(s->spill_top == 0 && ((uintptr_t)base % ALIGN) == 0);
    s->spill = base;
    s->spill_cap = base ? bytes : 0;
}

size_t ms_scratch_heap_pushes(void) { return mine ? mine->heap_pushes : 0; }
