/* ms_pool: a persistent pthread pool that runs parallel-for loops over contiguous index chunks. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ms_err.h"
#include "ms_pool.h"

/* A loop is split into at most n_threads contiguous chunks of equal size (each >= grain);
 * the caller and the workers claim chunks from an atomic counter, so whoever is awake first
 * does the work. Workers sleep on a condition variable between loops; a generation counter
 * tells them a new loop was published. */
struct ms_pool {
    int n_threads;      /* total, the caller's thread included */
    int n_started;      /* workers actually running */
    pthread_t *threads; /* [n_threads - 1] */

    pthread_mutex_t call_mu; /* serialises concurrent callers of ms_pool_for */
    pthread_mutex_t mu;      /* guards everything below except next_chunk */
    pthread_cond_t start_cv; /* a new generation was published (or stop) */
    pthread_cond_t done_cv;  /* busy reached 0 */
    uint64_t gen;
    int stop;
    int busy; /* workers that have not yet finished the current generation */

    /* The current loop (written under mu before gen is bumped, read-only while busy > 0). */
    ms_pool_fn fn;
    void *ctx;
    int64_t n;
    int64_t n_chunks;
    atomic_llong next_chunk;
};

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

static void *worker_main(void *arg)
{
    ms_pool *p = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->gen == seen) pthread_cond_wait(&p->start_cv, &p->mu);
        if (p->stop) break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        run_chunks(p);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0) pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void stop_workers(ms_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->threads[i], NULL);
    p->n_started = 0;
}

ms_pool *ms_pool_new(int n_threads)
{
    if (n_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (int)(c > 1024 ? 1024 : c) : 1;
    }
    ms_pool *p = ms_calloc(1, sizeof *p);
    p->n_threads = n_threads;
    p->threads = ms_calloc((size_t)n_threads, sizeof *p->threads);
    pthread_mutex_init(&p->call_mu, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
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
    if (!p || p->n_threads <= 1 || nc <= 1) {
        fn(ctx, 0, n);
        return;
    }

    pthread_mutex_lock(&p->call_mu);
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->n_chunks = nc;
    atomic_store(&p->next_chunk, 0);
    p->busy = p->n_started;
    p->gen++;
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);

    run_chunks(p);

    /* Wait for every worker to check in, not only for the chunks: a worker still inside
     * run_chunks must not see the next loop's counter with this loop's fn. */
    pthread_mutex_lock(&p->mu);
    while (p->busy > 0) pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_unlock(&p->call_mu);
}
