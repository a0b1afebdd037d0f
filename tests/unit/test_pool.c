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

int main(void)
{
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
