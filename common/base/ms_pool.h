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
/* Thread placement, process-wide, read by every later ms_pool_new: with pinning on, worker k
 * of a pool (k = 1 .. n_threads - 1) is bound to CPU order[k] of ms_pool_cpu_order(); the
 * caller's thread (k = 0) is never bound, because threads it starts later (readers, the
 * cache grower) would inherit its one-CPU mask. A CPU the kernel refuses leaves that worker
 * unbound (ms_pool_pinned counts the bound ones). Off by default: on a machine shared with
 * other work a bound thread cannot move off a busy CPU, and every loop waits for it. */
void ms_pool_set_pinning(int on);
int ms_pool_pinning(void);

/* One CPU as the kernel describes it (/sys/devices/system/cpu/cpuN/topology). */
typedef struct {
    int cpu, package, core; /* core: core_id within the package */
} ms_pool_cpuinfo;

/* The order in which pinned workers take CPUs: every physical core's first hardware thread
 * before any second one (SMT siblings share one core's FMA units), and within that, package
 * (socket) by package, core by core, so a pool smaller than a socket stays on one socket and
 * its memory. in[n] in any order, distinct cpu numbers; writes their cpu numbers to out[n]. */
void ms_pool_cpu_order(const ms_pool_cpuinfo *in, int n, int *out);
/* This process's CPUs (its affinity mask) in that order, from sysfs (a CPU without topology
 * files counts as its own core of package 0). Returns how many (<= max) were written. */
int ms_pool_machine_order(int *out, int max);

/* Worker threads bound to their CPU (0 when pinning was off or refused). */
int ms_pool_pinned(const ms_pool *p);

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
