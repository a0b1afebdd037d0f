/* ms_pool: a fixed-size thread pool that runs parallel-for loops over index ranges. */
#ifndef MS_POOL_H
#define MS_POOL_H

#include <stdint.h>

typedef struct ms_pool ms_pool;

/* Body of a parallel loop: process indices [begin, end). */
typedef void (*ms_pool_fn)(void *ctx, int64_t begin, int64_t end);

/* The CPUs this process may run on: its affinity mask (taskset, a cgroup cpuset), else the
 * online CPUs; at most 1024. */
int ms_pool_cpus(void);
/* Create a pool that runs loops on n_threads threads in total (the caller's thread counts
 * as one, so n_threads = 1 starts no thread). n_threads <= 0 means ms_pool_cpus().
 * Returns NULL (ms_err set) if a thread cannot be created. */
ms_pool *ms_pool_new(int n_threads);
/* Stop and join the threads. Accepts NULL. */
void ms_pool_free(ms_pool *p);
/* Threads in the pool (1 for NULL). */
int ms_pool_size(const ms_pool *p);

/* Run fn over [0, n) split into contiguous chunks of at least `grain` indices, and return
 * when all are done. p may be NULL (runs serially on the caller). Not reentrant: fn must not
 * call ms_pool_for on the same pool. How [0, n) is split must never change a result: callers
 * split by independent outputs only (ARCHITECTURE invariant 1). */
void ms_pool_for(ms_pool *p, int64_t n, int64_t grain, ms_pool_fn fn, void *ctx);

#endif
