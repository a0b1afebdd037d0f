/* ms_xstore_mem: the expert cache's memory: buffers faulted in before a read lands in them (by a background thread, or by the call when it is behind), and lent to a prefill span. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#include "ms_clock.h"
#include "ms_err.h"
#include "ms_io.h"
#include "ms_proc.h"
#include "ms_xstore_int.h"

/* A buffer in huge pages, not yet faulted in (ms_io_prefault does it: the grower, the reader
 * before its read, or xs_buf_new). */
uint8_t *xs_buf_alloc(const ms_xstore *s) { return ms_io_alloc((size_t)s->slot_bytes); }

uint8_t *xs_buf_new(const ms_xstore *s)
{
    uint8_t *b = xs_buf_alloc(s);
    ms_io_prefault(b, (size_t)s->slot_bytes);
    return b;
}

/* The grower stops while the machine has less than this available: the plan took a share of
 * what was free at start (all of it without --ram-budget), and other processes may have taken
 * some since; a slot faulted in then could push the machine into its OOM killer. */
#define GROW_FLOOR (1ull << 30)
#define GROW_STEP ((size_t)2 << 20)
#define GROW_REST 3.0

/* Claim the making of one more buffer (under gmu): 0 when cap of them exist or are being made. */
static int claim(ms_xstore *s)
{
    if (s->n_made >= s->cap) return 0;
    s->n_made++;
    return 1;
}

/* The grower: one slot at a time, at idle priority (it takes only CPU time nobody else
 * wants), each handed over once faulted in, until every buffer the store may need exists. */
void *xs_grow_main(void *arg)
{
    ms_xstore *s = arg;
    struct sched_param sp = {0};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp); /* best effort */
    for (;;) {
        uint64_t avail = ms_proc_mem_available(); /* 0: unknown */
        if (avail && avail < GROW_FLOOR + s->slot_bytes) break;
        pthread_mutex_lock(&s->gmu);
        int go = !s->stop && claim(s);
        pthread_mutex_unlock(&s->gmu);
        if (!go) break;
        uint8_t *b = xs_buf_alloc(s);
        /* 2 MiB at a time, resting GROW_REST times as long as each took: in a VM a fault the
         * host must serve stalls the whole virtual CPU, which no guest priority can preempt,
         * so the grower keeps to a small share of one CPU. */
        for (size_t at = 0; at < s->slot_bytes; at += GROW_STEP) {
            size_t n = s->slot_bytes - at < GROW_STEP ? (size_t)(s->slot_bytes - at) : GROW_STEP;
            double t0 = ms_now();
            ms_io_prefault(b + at, n);
            double rest = GROW_REST * (ms_now() - t0);
            struct timespec ts = {(time_t)rest, (long)((rest - (double)(time_t)rest) * 1e9)};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&s->gmu);
        s->ready[s->n_ready++] = b;
        pthread_mutex_unlock(&s->gmu);
    }
    return NULL;
}

/* Hand the grown buffers to the cache (under s->mu): the free list gets them. With wait, block
 * until the gmu is free (else skip when it is busy). */
void xs_adopt(ms_xstore *s, int wait)
{
    if (wait) pthread_mutex_lock(&s->gmu);
    else if (pthread_mutex_trylock(&s->gmu) != 0) return;
    size_t k = s->n_ready;
    for (size_t i = 0; i < k; i++) s->free_buf[s->n_free++] = s->ready[i];
    s->n_ready = 0;
    pthread_mutex_unlock(&s->gmu);
    s->n_alloc += k;
}

uint8_t *xs_buf_get(ms_xstore *s, int *fresh)
{
    *fresh = 0;
    if (!s->n_free) xs_adopt(s, 1);
    while (!s->n_free) {
        pthread_mutex_lock(&s->gmu);
        int mine = claim(s);
        pthread_mutex_unlock(&s->gmu);
        if (mine) {
            /* The grower is behind: this call makes the buffer, which its reader faults in
             * before the read (a fault inside an O_DIRECT read costs several times the read;
             * in the reader it overlaps the other reads and this thread's compute). */
            *fresh = 1;
            s->n_alloc++;
            s->st.slots_made_in_calls++;
            return xs_buf_alloc(s);
        }
        /* the accounting (ms_xstore.c's top comment) says a buffer is due: the grower's last */
        MS_ASSERT(s->grower_on);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        xs_adopt(s, 1);
    }
    return s->free_buf[--s->n_free];
}

/* Stop the grower thread (if any); what it grew is adopted by the caller. */
static void grower_stop(ms_xstore *s)
{
    if (!s->grower_on) return;
    pthread_mutex_lock(&s->gmu);
    s->stop = 1;
    pthread_mutex_unlock(&s->gmu);
    pthread_join(s->grower, NULL);
    s->grower_on = 0;
    s->stop = 0;
}

#define XS_MAKE_ROWS 8 /* rows from which a call makes the buffers it needs */
/* Buffers a smaller call may make beyond those made: where the grower lags (a machine whose
 * memory is full of page cache compacts for every huge page) the cache still grows by one a
 * call, so a long decode stops evicting within a few dozen tokens, at two fault-ins a layer. */
#define XS_MAKE_PER_CALL 2

void xs_capacity_for(ms_xstore *s, const uint32_t *item_row, int64_t n)
{
    if (s->lent || !s->o.grow_bg) return; /* without a grower every call makes what it needs */
    /* A cache that holds every expert never evicts: a buffer made now costs less than a read
     * again later. */
    if (s->n_slots >= s->n_located) {
        ms_cpolicy_set_slots(s->pol, s->n_slots);
        return;
    }
    uint32_t rows = 0;
    for (int64_t i = 0; i < n; i++)
        if (item_row[i] + 1 > rows) rows = item_row[i] + 1;
    size_t cap = s->n_slots, made = s->n_alloc > (size_t)s->o.depth ? s->n_alloc - (size_t)s->o.depth : 0;
    size_t held = ms_cpolicy_resident(s->pol);
    if (rows < XS_MAKE_ROWS && made < cap) {
        size_t have = (made > held ? made : held) + XS_MAKE_PER_CALL;
        if (have < cap) cap = have;
    }
    ms_cpolicy_set_slots(s->pol, cap);
}

int xs_grower_start(ms_xstore *s)
{
    if (!s->o.grow_bg || s->o.mapped || s->grower_on || s->lent) return 0;
    pthread_mutex_lock(&s->gmu);
    int more = s->n_made < s->cap;
    pthread_mutex_unlock(&s->gmu);
    if (!more) return 0;
    if (pthread_create(&s->grower, NULL, xs_grow_main, s) != 0) return -1;
    s->grower_on = 1;
    return 0;
}

void ms_xstore_lend(ms_xstore *s, size_t keep_slots)
{
    if (s->o.mapped) return; /* no cache memory to lend */
    grower_stop(s);
    pthread_mutex_lock(&s->mu);
    xs_adopt(s, 1);
    xs_early_drop(s); /* early reads whose call never came */
    if (keep_slots > s->n_slots) keep_slots = s->n_slots;
    for (size_t k = 0; k < s->n_keys; k++)
        if (s->key_buf[k]) {
            ms_cpolicy_remove(s->pol, (uint32_t)k);
            s->free_buf[s->n_free++] = s->key_buf[k];
            s->key_buf[k] = NULL;
        }
    MS_ASSERT(s->n_free == s->n_alloc);
    size_t keep = (size_t)s->o.depth + keep_slots;
    while (s->n_free > keep) {
        free(s->free_buf[--s->n_free]);
        s->n_alloc--;
    }
    pthread_mutex_lock(&s->gmu);
    s->n_made = s->n_alloc;
    pthread_mutex_unlock(&s->gmu);
    ms_cpolicy_set_slots(s->pol, keep_slots);
    s->lent = 1;
    pthread_mutex_unlock(&s->mu);
}

void ms_xstore_unlend(ms_xstore *s)
{
    if (s->o.mapped) return;
    pthread_mutex_lock(&s->mu);
    int was = s->lent;
    s->lent = 0;
    if (was) ms_cpolicy_set_slots(s->pol, s->n_slots);
    pthread_mutex_unlock(&s->mu);
    if (was) (void)xs_grower_start(s); /* failing, slots are made by the calls that need them */
}

void ms_xstore_grow_wait(ms_xstore *s)
{
    if (!s->grower_on) return;
    pthread_join(s->grower, NULL);
    s->grower_on = 0;
    pthread_mutex_lock(&s->mu);
    xs_adopt(s, 1);
    pthread_mutex_unlock(&s->mu);
}
