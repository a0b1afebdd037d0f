/* test_pool: ms_pool_for visits every index exactly once in contiguous chunks, for any split. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "ms_err.h"
#include "ms_pool.h"
#include "ms_test.h"

typedef struct {
    atomic_int *visits; /* [n] */
    int64_t n, grain;
    atomic_int calls, bad_range, short_chunk;
} cover_ctx;

static void cover_fn(void *vctx, int64_t b, int64_t e)
{
    cover_ctx *c = vctx;
    atomic_fetch_add(&c->calls, 1);
    if (b < 0 || e > c->n || b >= e) {
        atomic_fetch_add(&c->bad_range, 1);
        return;
    }
    /* Every chunk has at least `grain` indices unless the whole range is smaller. */
    if (e - b < c->grain && e - b != c->n) atomic_fetch_add(&c->short_chunk, 1);
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&c->visits[i], 1);
}

static void check_cover(ms_pool *p, int64_t n, int64_t grain)
{
    cover_ctx c;
    c.n = n;
    c.grain = grain < 1 ? 1 : grain;
    c.visits = ms_calloc((size_t)(n > 0 ? n : 1), sizeof *c.visits);
    for (int64_t i = 0; i < n; i++) atomic_init(&c.visits[i], 0);
    atomic_init(&c.calls, 0);
    atomic_init(&c.bad_range, 0);
    atomic_init(&c.short_chunk, 0);
    ms_pool_for(p, n, grain, cover_fn, &c);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; i++) wrong += atomic_load(&c.visits[i]) != 1;
    int calls = atomic_load(&c.calls);
    T_CHECK(wrong == 0, "threads=%d n=%lld grain=%lld: %lld indices not visited exactly once",
            ms_pool_size(p), (long long)n, (long long)grain, (long long)wrong);
    T_CHECK(atomic_load(&c.bad_range) == 0, "threads=%d n=%lld grain=%lld: bad chunk bounds",
            ms_pool_size(p), (long long)n, (long long)grain);
    T_CHECK(atomic_load(&c.short_chunk) == 0, "threads=%d n=%lld grain=%lld: chunk below grain",
            ms_pool_size(p), (long long)n, (long long)grain);
    T_CHECK(n > 0 ? (calls >= 1 && calls <= ms_pool_size(p)) : calls == 0,
            "threads=%d n=%lld grain=%lld: %d chunks (at most one per thread expected)",
            ms_pool_size(p), (long long)n, (long long)grain, calls);
    free(c.visits);
}

typedef struct {
    pthread_t caller;
    atomic_int on_caller, total;
} who_ctx;

static void who_fn(void *vctx, int64_t b, int64_t e)
{
    who_ctx *c = vctx;
    if (pthread_equal(pthread_self(), c->caller)) atomic_fetch_add(&c->on_caller, (int)(e - b));
    atomic_fetch_add(&c->total, (int)(e - b));
}

static void sum_fn(void *vctx, int64_t b, int64_t e)
{
    atomic_llong *s = vctx;
    for (int64_t i = b; i < e; i++) atomic_fetch_add(s, i);
}

/* ms_pool_cpu_order on a made-up machine: 2 packages x 3 cores x 2 hardware threads, numbered
 * as Linux usually does (cpu c and c + 6 are siblings), listed in a scrambled order. */
static void check_order(void)
{
    ms_pool_cpuinfo in[12];
    int n = 0;
    static const int perm[12] = {7, 2, 11, 0, 5, 9, 3, 10, 1, 6, 4, 8};
    for (int i = 0; i < 12; i++) {
        int c = perm[i], hw = c % 6;
        in[n++] = (ms_pool_cpuinfo){c, hw / 3, hw % 3 + 10 * (hw / 3)}; /* core ids need not be dense */
    }
    int out[12];
    ms_pool_cpu_order(in, n, out);
    static const int want[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    int same = 1;
    for (int i = 0; i < 12; i++) same &= out[i] == want[i];
    T_CHECK(same, "order: first threads of package 0's cores, then package 1's, then the siblings; got %d %d %d %d "
            "%d %d %d %d ...", out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7]);

    /* Siblings numbered next to each other (cpu 2k and 2k + 1 share a core): every core's first
     * thread before any second one. */
    for (int c = 0; c < 8; c++) in[c] = (ms_pool_cpuinfo){7 - c, 0, (7 - c) / 2};
    ms_pool_cpu_order(in, 8, out);
    static const int want2[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    same = 1;
    for (int i = 0; i < 8; i++) same &= out[i] == want2[i];
    T_CHECK(same, "adjacent siblings: got %d %d %d %d %d %d %d %d", out[0], out[1], out[2], out[3], out[4], out[5],
            out[6], out[7]);
    ms_pool_cpu_order(NULL, 0, NULL); /* nothing to order */
}

/* Each chunk's thread: its own CPU mask (a pinned worker's has one CPU) and whether it is the caller. */
typedef struct {
    pthread_t caller;
    atomic_int arrived;
    int n;
    int ncpu[64], cpu[64], on_caller[64];
} pin_ctx;

static void pin_fn(void *vctx, int64_t b, int64_t e)
{
    pin_ctx *c = vctx;
    (void)e;
    atomic_fetch_add(&c->arrived, 1);
    while (atomic_load(&c->arrived) < c->n) sched_yield(); /* one chunk per thread */
    cpu_set_t m;
    CPU_ZERO(&m);
    pthread_getaffinity_np(pthread_self(), sizeof m, &m);
    c->ncpu[b] = CPU_COUNT(&m);
    c->cpu[b] = -1;
    for (int k = 0; k < CPU_SETSIZE; k++)
        if (CPU_ISSET(k, &m)) {
            c->cpu[b] = k;
            break;
        }
    c->on_caller[b] = pthread_equal(pthread_self(), c->caller);
}

static void check_pinning(void)
{
    int order[64];
    int n = ms_pool_machine_order(order, 64);
    T_CHECK(n == (ms_pool_cpus() < 64 ? ms_pool_cpus() : 64), "machine order: %d CPUs, %d allowed", n, ms_pool_cpus());
    if (n < 2) {
        ms_t_skip("one CPU allowed: pinning needs two");
        return;
    }
    T_CHECK(!ms_pool_pinning(), "pinning is off by default");
    ms_pool_set_pinning(1);
    ms_pool *p = ms_pool_new(n);
    ms_pool_set_pinning(0);
    T_CHECK(p && ms_pool_pinned(p) == n - 1, "pinned pool of %d: %d workers bound", n, p ? ms_pool_pinned(p) : -1);
    if (!p) return;
    pin_ctx c = {.caller = pthread_self(), .n = n};
    atomic_init(&c.arrived, 0);
    ms_pool_for(p, n, 1, pin_fn, &c);
    int bound = 0, caller_free = 0, seen[64] = {0};
    for (int i = 0; i < n; i++) {
        if (c.on_caller[i]) {
            caller_free = c.ncpu[i] == n; /* the caller keeps the process's mask */
            continue;
        }
        for (int k = 1; k < n; k++) /* a worker: one CPU of order[1..n-1], each once */
            if (c.ncpu[i] == 1 && c.cpu[i] == order[k] && !seen[k]++) bound++;
    }
    T_CHECK(bound == n - 1 && caller_free, "workers bound to CPUs order[1..%d] (%d of %d), the caller unbound (%d)",
            n - 1, bound, n - 1, caller_free);
    ms_pool_free(p);
    p = ms_pool_new(n); /* off again: nothing bound */
    T_CHECK(p && ms_pool_pinned(p) == 0, "unpinned pool: %d bound", p ? ms_pool_pinned(p) : -1);
    ms_pool_free(p);
}

int main(void)
{
    check_order();
    check_pinning();
    static const int64_t ns[] = {0, 1, 2, 3, 7, 16, 100, 1000, 12345};
    static const int64_t grains[] = {0, 1, 3, 16, 1000, 100000};
    static const int threads[] = {1, 2, 3, 4, 8};

    /* NULL pool: serial, on the caller. */
    T_CHECK(ms_pool_size(NULL) == 1, "NULL pool size");
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++)
            check_cover(NULL, ns[i], grains[g]);
    who_ctx w;
    w.caller = pthread_self();
    atomic_init(&w.on_caller, 0);
    atomic_init(&w.total, 0);
    ms_pool_for(NULL, 50, 1, who_fn, &w);
    T_CHECK(atomic_load(&w.on_caller) == 50, "NULL pool runs on the caller");

    for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
        ms_pool *p = ms_pool_new(threads[t]);
        T_CHECK(p != NULL, "ms_pool_new(%d): %s", threads[t], ms_err_msg());
        if (!p) continue;
        T_CHECK(ms_pool_size(p) == threads[t], "size %d", ms_pool_size(p));
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
            for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++)
                check_cover(p, ns[i], grains[g]);
        ms_pool_free(p);
    }

    /* Default size: one thread per CPU the process may use, not per CPU the machine has. */
    ms_pool *p = ms_pool_new(0);
    T_CHECK(p && ms_pool_size(p) == ms_pool_cpus() && ms_pool_cpus() <= (int)sysconf(_SC_NPROCESSORS_ONLN),
            "ms_pool_new(0) size %d, %d CPUs allowed", ms_pool_size(p), ms_pool_cpus());
    ms_pool_free(p);
    {
        cpu_set_t all, one;
        if (sched_getaffinity(0, sizeof all, &all) == 0 && CPU_COUNT(&all) > 1) {
            int first = 0;
            while (!CPU_ISSET(first, &all)) first++;
            CPU_ZERO(&one);
            CPU_SET(first, &one);
            T_CHECK(sched_setaffinity(0, sizeof one, &one) == 0, "sched_setaffinity");
            p = ms_pool_new(0);
            T_CHECK(ms_pool_cpus() == 1 && p && ms_pool_size(p) == 1,
                    "pinned to one CPU (as under taskset -c %d): the default pool has %d threads", first,
                    p ? ms_pool_size(p) : -1);
            ms_pool_free(p);
            sched_setaffinity(0, sizeof all, &all);
        } else {
            ms_t_skip("one CPU allowed: the affinity check needs two");
        }
    }

    /* Repeated use: many small loops must neither deadlock nor lose work. */
    p = ms_pool_new(3);
    T_CHECK(p != NULL, "ms_pool_new(3)");
    if (p) {
        int wrong = 0;
        for (int it = 0; it < 1000; it++) {
            atomic_llong s;
            atomic_init(&s, 0);
            int64_t n = 1 + it % 37;
            ms_pool_for(p, n, 1, sum_fn, &s);
            wrong += atomic_load(&s) != n * (n - 1) / 2;
        }
        T_CHECK(wrong == 0, "repeated loops: %d wrong sums", wrong);
        for (int it = 0; it < 100; it++) check_cover(p, 64 + it, 1 + it % 5);
        ms_pool_free(p);
    }

    /* Create/free cycles, including a pool that never ran a loop. */
    for (int it = 0; it < 50; it++) {
        ms_pool *q = ms_pool_new(1 + it % 4);
        if (it % 2) check_cover(q, 10, 1);
        ms_pool_free(q);
    }
    ms_pool_free(NULL); /* accepted: a crash here fails the test */
    return ms_t_done();
}
