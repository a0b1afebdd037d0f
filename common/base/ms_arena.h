/* ms_arena: one scratch buffer, allocated once, handed out in aligned pieces and reset by mark. */
#ifndef MS_ARENA_H
#define MS_ARENA_H

#include <stddef.h>

/* Pieces are 64-byte aligned; a size function that counts MS_ARENA_SPAN(n) for each piece of
 * n floats is an exact upper bound of what those pieces take. */
#define MS_ARENA_ALIGN_FLOATS 16
#define MS_ARENA_SPAN(n) ((size_t)(n) + MS_ARENA_ALIGN_FLOATS)

typedef struct {
    float *base;     /* [cap] owned: heap memory, or a shared mapping of a scratch file */
    size_t cap;      /* floats */
    size_t used;     /* floats handed out (with alignment) */
    size_t peak;     /* most ever used */
    int mapped;      /* 1: base maps the scratch file fd (ms_arena_reserve_file) */
    int fd;
    struct ms_arena_flusher *flusher; /* owned: the thread that keeps the file's dirty pages few */
} ms_arena;

/* An arena of cap floats (zero-initialised struct a); aborts like ms_malloc when memory is
 * exhausted. Growing an arena with live pieces is a programmer error. */
void ms_arena_reserve(ms_arena *a, size_t cap);
void ms_arena_free(ms_arena *a); /* accepts an empty arena; unmaps and closes a file-backed one */

/* An arena of cap floats whose memory is a scratch file in directory `dir` (an unnamed file,
 * gone when the arena is freed or the process ends), mapped shared: the kernel keeps as much
 * of it in memory as memory allows and writes the rest back (reclaimable page cache, not the
 * process's own memory). A thread starts writing dirty pages back every 10 ms, so that a memory
 * cgroup's reclaim always finds clean pages to drop (its reclaim cannot write them itself). The file's blocks are allocated up front, so a full disk fails here,
 * never as a fault in the middle of a pass. Any previous memory of a is freed first. 0, or -1
 * with ms_err set naming the directory (class MS_EXIT_IO): it cannot be created or written, it
 * is in memory (tmpfs, ramfs: the file would be unreclaimable RAM), or the disk is full. */
int ms_arena_reserve_file(ms_arena *a, size_t cap, const char *dir);

/* A file-backed arena's memory from float `from` on (rounded up to a page) holds nothing the
 * caller needs any more (a layer's temporaries once it is done): its pages are dropped without
 * being written back, the blocks zeroed in place (FALLOC_FL_ZERO_RANGE) or, where the filesystem
 * cannot, punched out and allocated again, so the file costs no writes for them and a full disk
 * shows here, not in a fault. 0 (also for a heap arena: nothing to do), or -1 with
 * ms_err set (MS_EXIT_IO) when the blocks cannot be had again. */
int ms_arena_discard(ms_arena *a, size_t from);

/* Advice on n floats at p, a piece of a file-backed arena (nothing for a heap arena; the range is
 * widened to whole pages): random access (1: a fault reads its own page, no readahead around it;
 * 0: the kernel's usual readahead again), or wanted soon (its pages not in memory are read now,
 * without waiting). Neither changes any value; a refusal of the kernel is ignored. */
void ms_arena_advise_random(ms_arena *a, const float *p, size_t n, int random);
void ms_arena_willneed(ms_arena *a, const float *p, size_t n);

/* Whether `dir` can hold scratch files that leave memory: 1 on a disk, 0 in memory (tmpfs,
 * ramfs) or when it cannot be examined (ms_err says why). */
int ms_arena_dir_on_disk(const char *dir);

/* n floats (uninitialised, 64-byte aligned) valid until a reset below them. Running out is a
 * programmer error (the size function undercounted): an always-on assert names it. */
float *ms_arena_take(ms_arena *a, size_t n);
static inline size_t ms_arena_mark(const ms_arena *a) { return a->used; }
/* Gives back the pieces taken since mark. In a file-backed arena their whole pages, when they
 * make at least ms_arena_zero_min bytes (2 MiB), are zeroed in the file (FALLOC_FL_ZERO_RANGE: dropped from the page cache
 * unwritten, their blocks kept): what was there is dead, and a later piece there would otherwise
 * fault each page in from the disk (with readahead) only to overwrite it. Where the filesystem
 * cannot, nothing happens but the reset. */
void ms_arena_reset(ms_arena *a, size_t mark);
/* Set once before any arena is used, by tests only: a page, so that every op's reset over a
 * tiny model's span gives its pieces back too (and the spans' bit-identity tests cover it). */
extern size_t ms_arena_zero_min;

#endif
