/* test_scratch: per-thread LIFO scratch (aligned, nested, heap past the block, freed at thread
 * exit), and a warm decode step calls no malloc, calloc or realloc on any thread: both
 * families, experts mapped, read into the cache and at the smallest budget (trunk streamed),
 * greedy and sampled. (Aligned allocations are not counted: a thread's scratch block and the
 * expert cache's slots, made once each.) */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_engine.h"
#include "ms_err.h"
#include "ms_gptoss_model.h"
#include "ms_scratch.h"
#include "ms_synth.h"
#include "ms_test.h"

#if defined(__SANITIZE_ADDRESS__)
#define COUNTING 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define COUNTING 0
#endif
#endif
#ifndef COUNTING
#define COUNTING 1
#endif

#if COUNTING
/* The process's malloc, calloc and realloc, counted while `counting` is set (every thread: the
 * pool's workers too). A sanitizer build brings its own allocator: there the count is skipped. */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
static atomic_int counting;
static atomic_long allocs;
void *malloc(size_t n)
{
    if (atomic_load_explicit(&counting, memory_order_relaxed)) atomic_fetch_add(&allocs, 1);
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t m)
{
    if (atomic_load_explicit(&counting, memory_order_relaxed)) atomic_fetch_add(&allocs, 1);
    return __libc_calloc(n, m);
}
void *realloc(void *p, size_t n)
{
    if (atomic_load_explicit(&counting, memory_order_relaxed)) atomic_fetch_add(&allocs, 1);
    return __libc_realloc(p, n);
}
#endif

static void check_lifo(void)
{
    size_t h0 = ms_scratch_heap_pushes();
    uint8_t *a = ms_scratch_push(100), *b = ms_scratch_push_zero(1000), *c = ms_scratch_push(0);
    T_CHECK(((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 64 == 0, "pieces are 64-byte aligned");
    int zero = 1;
    for (int i = 0; i < 1000; i++) zero &= b[i] == 0;
    T_CHECK(zero, "push_zero gives zeros");
    T_CHECK(b >= a + 100 && c >= b + 1000, "nested pieces do not overlap");
    memset(a, 1, 100), memset(b, 2, 1000), memset(c, 3, 1);
    ms_scratch_pop(c);
    ms_scratch_pop(b);
    ms_scratch_pop(a);
    ms_scratch_pop(NULL);
    size_t h1 = ms_scratch_heap_pushes();
    T_CHECK(h1 == h0, "pieces that fit the block take no heap (%zu did)", h1 - h0);
    /* Popped pieces give their room back: the same nesting lands at the same places. */
    uint8_t *a0 = a;
    for (int round = 0; round < 3; round++) {
        a = ms_scratch_push(100), b = ms_scratch_push(1000), c = ms_scratch_push(0);
        T_CHECK(a == a0, "round %d: the first piece is where it was", round);
        ms_scratch_pop(c), ms_scratch_pop(b), ms_scratch_pop(a);
    }
    /* Past the block's cap: the heap, every time, and it still pops in order. */
    uint8_t *big = ms_scratch_push(MS_SCRATCH_KEEP + 1);
    memset(big, 7, MS_SCRATCH_KEEP + 1);
    uint8_t *in = ms_scratch_push(64);
    ms_scratch_pop(in);
    ms_scratch_pop(big);
    T_CHECK(ms_scratch_heap_pushes() > h1, "a piece past MS_SCRATCH_KEEP is a heap piece");
    ms_scratch_release();
    a = ms_scratch_push(10); /* a new block after a release */
    ms_scratch_pop(a);
}

/* A spill region: pieces past the block go there (last in, first out) while they fit, then to
 * the heap; cleared, big pieces go to the heap again. */
static void check_spill(void)
{
    static _Alignas(64) unsigned char region[4 << 20];
    ms_scratch_spill_set(region, sizeof region);
    size_t heap0 = ms_scratch_heap_pushes();
    uint8_t *a = ms_scratch_push(MS_SCRATCH_KEEP + 1);  /* past the block: the region */
    uint8_t *b = ms_scratch_push(MS_SCRATCH_KEEP + 64); /* the region, after a */
    uint8_t *c = ms_scratch_push(3 << 20);              /* does not fit what is left: the heap */
    T_CHECK(a == region && b == region + (MS_SCRATCH_KEEP + 64) && (c < region || c >= region + sizeof region) &&
                ms_scratch_heap_pushes() == heap0 + 1,
            "spill: two pieces in the region in order, the third on the heap");
    memset(c, 1, 3 << 20);
    ms_scratch_pop(c);
    ms_scratch_pop(b);
    uint8_t *d = ms_scratch_push(MS_SCRATCH_KEEP + 1000);
    T_CHECK(d == b, "spill: a popped piece's place is taken again");
    ms_scratch_pop(d);
    ms_scratch_pop(a);
    ms_scratch_spill_set(NULL, 0);
    uint8_t *e = ms_scratch_push(MS_SCRATCH_KEEP + 1);
    T_CHECK((e < region || e >= region + sizeof region) && ms_scratch_heap_pushes() == heap0 + 2,
            "spill cleared: a big piece on the heap");
    ms_scratch_pop(e);
}

static void *thread_main(void *arg)
{
    (void)arg;
    for (int i = 0; i < 4; i++) {
        void *p = ms_scratch_push(4096), *q = ms_scratch_push(4096);
        memset(p, 1, 4096), memset(q, 2, 4096);
        ms_scratch_pop(q), ms_scratch_pop(p);
    }
    return (void *)(uintptr_t)ms_scratch_heap_pushes();
}

/* Each thread has its own block (the leak check of the sanitizer build sees it freed). */
static void check_threads(void)
{
    pthread_t t[4];
    for (int i = 0; i < 4; i++) T_CHECK(pthread_create(&t[i], NULL, thread_main, NULL) == 0, "thread %d starts", i);
    for (int i = 0; i < 4; i++) {
        void *r = NULL;
        pthread_join(t[i], &r);
        T_CHECK((uintptr_t)r == 0, "thread %d: its pieces fit its own block (%zu heap pieces)", i, (size_t)(uintptr_t)r);
    }
}

#define WARM 4  /* decode steps before counting: the scratch blocks have grown */
#define COUNT 6 /* decode steps counted */

/* One sequence in an engine on dir: prefill, WARM decode steps, then COUNT counted ones. */
static void check_decode(const char *dir, const char *what, uint64_t budget, int no_mmap, float temperature)
{
    ms_engine_opts o = {0};
    o.model_dir = dir;
    o.run.n_threads = 2;
    o.run.ram_budget = budget;
    o.run.baseline = 1;
    o.run.max_positions = 64;
    o.run.prompt_tokens = 16;
    o.run.no_mmap = no_mmap;
    o.max_seqs = 1;
    ms_engine *e = ms_engine_open(&o);
    T_CHECK(e != NULL, "%s: engine opens: %s", what, e ? "" : ms_err_msg());
    if (!e) return;
    int32_t ids[12];
    for (int i = 0; i < 12; i++) ids[i] = 3 + 7 * i;
    ms_gen_params p = {0};
    p.temperature = temperature;
    p.top_p = temperature > 0 ? 0.8f : 1.0f;
    p.seed = 5;
    p.max_tokens = 1 + WARM + COUNT + 2;
    ms_eseq *s = ms_engine_seq_new(e, ids, 12, &p);
    T_CHECK(s != NULL, "%s: sequence: %s", what, s ? "" : ms_err_msg());
    int ok = s != NULL;
    size_t ng = 0;
    while (ok && !ms_engine_seq_done(s) && (ms_engine_seq_tokens(s, &ng), ng < 1 + WARM))
        ok = ms_engine_step(e, &s, 1) == 0;
#if COUNTING
    atomic_store(&allocs, 0);
    atomic_store(&counting, 1);
#endif
    int steps = 0;
    for (; ok && steps < COUNT && !ms_engine_seq_done(s); steps++) ok = ms_engine_step(e, &s, 1) == 0;
#if COUNTING
    atomic_store(&counting, 0);
    long n = atomic_load(&allocs);
    T_CHECK(ok && steps == COUNT, "%s: %d decode steps ran: %s", what, steps, ok ? "" : ms_err_msg());
    T_CHECK(n == 0, "%s: %d warm decode steps allocate nothing (%ld mallocs)", what, COUNT, n);
#else
    T_CHECK(ok && steps == COUNT, "%s: %d decode steps ran: %s", what, steps, ok ? "" : ms_err_msg());
#endif
    ms_engine_seq_free(s);
    ms_engine_free(e);
}

/* The smallest budget the planner accepts, from its refusal of 1 byte. */
static uint64_t min_budget(const char *dir)
{
    ms_engine_opts o = {0};
    o.model_dir = dir;
    o.run.ram_budget = 1;
    o.run.baseline = 1;
    o.run.max_positions = 64;
    o.run.prompt_tokens = 16;
    o.max_seqs = 1;
    ms_engine *e = ms_engine_open(&o);
    T_CHECK(e == NULL && ms_err_code() == MS_EXIT_BUDGET, "%s: a 1-byte budget is refused: %s", dir, ms_err_msg());
    ms_engine_free(e);
    const char *q = strrchr(ms_err_msg(), '(');
    return q ? strtoull(q + 1, NULL, 10) : 0;
}

static void check_family(const char *dir, const char *name)
{
    char what[128];
    const uint64_t all = 16ull << 30;
    const uint64_t least = min_budget(dir);
    T_CHECK(least > 0, "%s: the least budget is known", name);
    for (int sampled = 0; sampled < 2; sampled++) {
        float temp = sampled ? 0.9f : 0.0f;
        const char *how = sampled ? "sampled" : "greedy";
        snprintf(what, sizeof what, "%s, experts mapped, %s", name, how);
        check_decode(dir, what, all, 0, temp);
        snprintf(what, sizeof what, "%s, experts read, %s", name, how);
        check_decode(dir, what, all, 1, temp);
        if (least) {
            snprintf(what, sizeof what, "%s, least budget, %s", name, how);
            check_decode(dir, what, least, 0, temp);
        }
    }
}

int main(void)
{
    check_lifo();
    check_spill();
    check_threads();
#if !COUNTING
    ms_t_skip("allocation counts: a sanitizer build brings its own malloc (the decode steps still run)");
#endif
    const char *k3 = ms_t_tmpdir("scratch-k3");
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    T_CHECK(ms_synth_write(k3, &sh, 77) == 0, "synth tiny: %s", ms_err_msg());
    check_family(k3, "K3 tiny");
    const char *go = ms_t_tmpdir("scratch-gptoss");
    T_CHECK(ms_gptoss_synth(go, "gpt-oss-tiny", 0, 0, 7) == 0, "synth gpt-oss-tiny: %s", ms_err_msg());
    check_family(go, "gpt-oss tiny");
    return ms_t_done();
}
