/* ms_scratch: per-thread last-in-first-out scratch memory, so code run every token allocates
 * nothing once warm. */
#ifndef MS_SCRATCH_H
#define MS_SCRATCH_H

#include <stddef.h>

/* Each thread has one block of MS_SCRATCH_KEEP bytes, made at its first use (its pages become
 * resident only as pieces reach them); a piece that does not fit is mapped for itself (and
 * unmapped at its pop, so its memory goes back at once). The block is
 * freed when the thread ends (ms_scratch_release for the calling thread). */
#define MS_SCRATCH_KEEP ((size_t)1 << 20)

/* Makes the calling thread's block now (a pool's workers at their start, so that no step has to). */
void ms_scratch_prepare(void);

/* `bytes` bytes (uninitialised, or zeroed), 64-byte aligned, never NULL (aborts like ms_malloc
 * when memory is exhausted). Owned by the calling thread until its ms_scratch_pop. */
void *ms_scratch_push(size_t bytes);
void *ms_scratch_push_zero(size_t bytes);

/* Gives back p, which must be the piece this thread pushed last and has not popped (pieces are
 * popped in reverse order of their pushes: a programmer error otherwise, caught by an assert).
 * NULL is ignored. */
void ms_scratch_pop(void *p);

/* Frees the calling thread's block (it must hold no pieces); the next push makes a new one. */
void ms_scratch_release(void);

/* Gives the calling thread a spill region [base, base + bytes), 64-byte aligned, owned by the
 * caller: pieces that do not fit the thread's block are taken from it (last in, first out) while
 * they fit, before the heap. A long prefill pass's main thread gets one in its scratch file, so
 * the copies its matmuls make of all its rows leave memory with the rest of the pass's scratch.
 * NULL clears it; no piece may be in the region then (an assert). */
void ms_scratch_spill_set(void *base, size_t bytes);

/* Heap pieces (those that did not fit) this thread has pushed so far: what a caller that must
 * not allocate checks. */
size_t ms_scratch_heap_pushes(void);

#endif
