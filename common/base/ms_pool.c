/* ms_pool: a persistent pthread pool that runs parallel-for loops over contiguous index chunks. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ms_err.h"
#include "ms_scratch.h"
#include "ms_pool.h"

/* A loop is split into at most n_threads contiguous chunks of equal size (each >= grain);
 * the caller and the workers claim chunks from an atomic counter, so whoever is ready first
 * does the work. A generation counter publishes a loop. Waiting (workers for a loop, the
 * caller for the workers) first spins for MS_POOL_SPIN_NS, because a decode step issues
 * hundreds of short loops back to back and a condition-variable wake-up costs tens of
 * microseconds, then blocks on a condition variable so idle pools use no CPU.
 *
 * No lost wake-ups: a waiter announces itself (sleepers / caller_waiting) and re-checks the
 * condition under mu; the other side changes the condition, then reads the announcement
 * (all seq_cst) and, if set, signals under mu. */
#define MS_POOL_SPIN_NS 50000

struct ms_pool {
    int n_threads;      /* total, the caller's thread included */
    int n_started;      /* workers actually running */
    int n_pinned;       /* workers bound to one CPU */
    pthread_t *threads; /* [n_threads - 1] */

    pthread_mutex_t call_mu; /* serialises concurrent callers of ms_pool_for */
    pthread_mutex_t mu;      /* only for the condition variables */
    pthread_cond_t start_cv; /* gen changed or stop was set */
    pthread_cond_t done_cv;  /* busy reached 0 */
    atomic_ullong gen;
    atomic_int stop;
    atomic_int busy;           /* workers that have not finished the current generation */
    atomic_int sleepers;       /* workers blocked (or about to block) on start_cv */
    atomic_int caller_waiting; /* the caller is blocked (or about to block) on done_cv */

    /* The current loop: written before gen is bumped, read-only until busy is 0. */
    ms_pool_fn fn;
    void *ctx;
    int64_t n;
    int64_t n_chunks;
    atomic_llong next_chunk;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Bounds of chunk k of [0, n) split into nc near-equal contiguous parts. */
static void chunk_bounds(int64_t n, int64_t nc, int64_t k, int64_t *b, int64_t *e)
{
    int64_t base = n / nc, rem = n % nc;
    *b = k * base + (k < rem ? k : rem);
    *e = *b + base + (k < rem ? 1 : 0);
}

static void run_chunks(ms_pool *p)
{
    for (;;) {
        int64_t k = atomic_fetch_add(&p->next_chunk, 1);
        if (k >= p->n_chunks) break;
        int64_t b, e;
        chunk_bounds(p->n, p->n_chunks, k, &b, &e);
        p->fn(p->ctx, b, e);
    }
}

/* One step of a bounded spin: relax, yield now and then; 1 once the spin budget is spent. */
static int spin_over(unsigned i, int64_t *t0)
{
    cpu_relax();
    if ((i & 63) != 63) return 0;
    sched_yield(); /* lets a descheduled peer run when threads outnumber cores */
    int64_t t = now_ns();
    if (!*t0) *t0 = t;
    return t - *t0 > MS_POOL_SPIN_NS;
}

/* Wait until a generation other than `seen` is published; returns 0 when the pool stops. */
static int wait_for_loop(ms_pool *p, uint64_t seen)
{
    int64_t t0 = 0;
    for (unsigned i = 0;; i++) {
        if (atomic_load(&p->stop)) return 0;
        if (atomic_load(&p->gen) != seen) return 1;
        if (spin_over(i, &t0)) break;
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    while (!atomic_load(&p->stop) && atomic_load(&p->gen) == seen)
        pthread_cond_wait(&p->start_cv, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    return !atomic_load(&p->stop);
}

static void *worker_main(void *arg)
{
    ms_pool *p = arg;
    uint64_t seen = 0;
    ms_scratch_prepare(); /* its scratch block is made before any loop needs it */
    while (wait_for_loop(p, seen)) {
        /* gen cannot move on before this worker decrements busy, so this is the loop. */
        seen = atomic_load(&p->gen);
        run_chunks(p);
        if (atomic_fetch_sub(&p->busy, 1) == 1 && atomic_load(&p->caller_waiting)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_broadcast(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

/* Caller side: wait until every worker has finished the current generation. */
static void wait_for_workers(ms_pool *p)
{
    int64_t t0 = 0;
    for (unsigned i = 0;; i++) {
        if (atomic_load(&p->busy) == 0) return;
        if (spin_over(i, &t0)) break;
    }
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->caller_waiting, 1);
    while (atomic_load(&p->busy) > 0) pthread_cond_wait(&p->done_cv, &p->mu);
    atomic_store(&p->caller_waiting, 0);
    pthread_mutex_unlock(&p->mu);
}

static void stop_workers(ms_pool *p)
{
    atomic_store(&p->stop, 1);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->threads[i], NULL);
    p->n_started = 0;
}

int ms_pool_cpus(void)
{
    /* The CPUs this process may run on (taskset, a cgroup's cpuset), not all the machine has. */
    cpu_set_t set;
    CPU_ZERO(&set);
    int c = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    if (c <= 0) {
        long o = sysconf(_SC_NPROCESSORS_ONLN);
        c = o > 0 ? (int)(o > 1024 ? 1024 : o) : 1;
    }
    return c > 1024 ? 1024 : c;
}

static atomic_int g_pin;

void ms_pool_set_pinning(int on) { atomic_store(&g_pin, !!on); }
int ms_pool_pinning(void) { return atomic_load(&g_pin); }

/* Sort key of ms_pool_cpu_order: (SMT rank on its core, package, core, cpu). */
typedef struct {
    int rank, package, core, cpu;
} cpu_key;

static int key_cmp(const void *a, const void *b)
{
    const cpu_key *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    if (x->package != y->package) return x->package < y->package ? -1 : 1;
    if (x->core != y->core) return x->core < y->core ? -1 : 1;
    return (x->cpu > y->cpu) - (x->cpu < y->cpu);
}

void ms_pool_cpu_order(const ms_pool_cpuinfo *in, int n, int *out)
{
    MS_ASSERT(n >= 0 && (n == 0 || (in && out)));
    cpu_key *k = ms_malloc(sizeof *k * (size_t)(n > 0 ? n : 1));
    for (int i = 0; i < n; i++) {
        /* rank: how many hardware threads of the same core have a lower cpu number */
        int r = 0;
        for (int j = 0; j < n; j++)
            r += in[j].package == in[i].package && in[j].core == in[i].core && in[j].cpu < in[i].cpu;
        k[i] = (cpu_key){r, in[i].package, in[i].core, in[i].cpu};
    }
    qsort(k, (size_t)n, sizeof *k, key_cmp);
    for (int i = 0; i < n; i++) out[i] = k[i].cpu;
    free(k);
}

static int sysfs_int(int cpu, const char *what, int dflt)
{
    char path[128];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/%s", cpu, what);
    FILE *f = fopen(path, "r");
    int v;
    if (!f) return dflt;
    if (fscanf(f, "%d", &v) != 1) v = dflt;
    fclose(f);
    return v;
}

int ms_pool_machine_order(int *out, int max)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    ms_pool_cpuinfo *in = ms_malloc(sizeof *in * CPU_SETSIZE);
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) in[n++] = (ms_pool_cpuinfo){c, sysfs_int(c, "physical_package_id", 0), sysfs_int(c, "core_id", c)};
    int *all = ms_malloc(sizeof *all * (size_t)(n > 0 ? n : 1));
    ms_pool_cpu_order(in, n, all);
    if (n > max) n = max;
    memcpy(out, all, sizeof *out * (size_t)n);
    free(all);
    free(in);
    return n;
}

int ms_pool_pinned(const ms_pool *p) { return p ? p->n_pinned : 0; }

/* Bind worker k of p to the k-th CPU of the machine order (k >= 1; k = 0 is the caller). */
static void pin_workers(ms_pool *p)
{
    int *order = ms_malloc(sizeof *order * CPU_SETSIZE);
    int n = ms_pool_machine_order(order, CPU_SETSIZE);
    for (int i = 0; n > 1 && i < p->n_started; i++) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(order[(i + 1) % n], &one);
        p->n_pinned += pthread_setaffinity_np(p->threads[i], sizeof one, &one) == 0;
    }
    free(order);
}

ms_pool *ms_pool_new(int n_threads)
{
    if (n_threads <= 0) n_threads = ms_pool_cpus();
    ms_pool *p = ms_calloc(1, sizeof *p);
    p->n_threads = n_threads;
    p->threads = ms_calloc((size_t)n_threads, sizeof *p->threads);
    pthread_mutex_init(&p->call_mu, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    atomic_init(&p->gen, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->busy, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_waiting, 0);
    atomic_init(&p->next_chunk, 0);
    for (int i = 0; i < n_threads - 1; i++) {
        int rc = pthread_create(&p->threads[i], NULL, worker_main, p);
        if (rc != 0) {
            ms_err_set("thread pool: cannot create worker thread %d of %d: %s", i + 1,
                       n_threads - 1, strerror(rc));
            ms_pool_free(p);
            return NULL;
        }
        p->n_started++;
    }
    if (ms_pool_pinning()) pin_workers(p);
    return p;
}

void ms_pool_free(ms_pool *p)
{
    if (!p) return;
    stop_workers(p);
    pthread_cond_destroy(&p->done_cv);
    pthread_cond_destroy(&p->start_cv);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->call_mu);
    free(p->threads);
    free(p);
}

int ms_pool_size(const ms_pool *p) { return p ? p->n_threads : 1; }

void ms_pool_for(ms_pool *p, int64_t n, int64_t grain, ms_pool_fn fn, void *ctx)
{
    MS_ASSERT(fn != NULL);
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t nc = n / grain;
    if (p && nc > p->n_threads) nc = p->n_threads;
    if (!p || p->n_started == 0 || nc <= 1) {
        fn(ctx, 0, n);
        return;
    }

    pthread_mutex_lock(&p->call_mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->n_chunks = nc;
    atomic_store(&p->next_chunk, 0);
    atomic_store(&p->busy, p->n_started);
    atomic_fetch_add(&p->gen, 1); /* publishes the fields above */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->start_cv);
        pthread_mutex_unlock(&p->mu);
    }
    run_chunks(p);
    /* Wait for every worker, not only for the chunks: a worker still inside run_chunks must
     * not see the next loop's counter with this loop's fn. */
    wait_for_workers(p);
    pthread_mutex_unlock(&p->call_mu);
}
