/* ms_cpolicy: windowed LFU with most-recent tie-break and an adaptive window (see ms_cpolicy.h). */
#include <stdlib.h>
#include <string.h>

#include "ms_cpolicy.h"
#include "ms_err.h"

#define NIL UINT32_MAX

enum { AT_NONE = 0, AT_WIN = 1, AT_MAIN = 2 };

struct ms_cpolicy {
    int lru;          /* 1: plain LRU (the window is the whole cache, no main segment) */
    uint32_t n_keys;
    size_t n_slots;   /* capacity now (ms_cpolicy_set_slots), <= max_slots */
    size_t max_slots; /* capacity at creation: the arrays are sized for it */
    uint8_t *where;   /* [n_keys] AT_NONE / AT_WIN / AT_MAIN */
    uint32_t *prev;   /* [n_keys] window list, towards the MRU end */
    uint32_t *next;   /* [n_keys] window list, towards the LRU end */
    uint32_t head;    /* window MRU key, NIL if empty */
    uint32_t tail;    /* window LRU key, NIL if empty */
    size_t win_n;     /* keys in the window */
    size_t w;         /* window target size */
    uint32_t *cnt;    /* [n_keys] access counts as of epoch ep[k]; halved once per later epoch */
    uint64_t *ep;     /* [n_keys] epoch in which cnt[k] is expressed (aging is applied lazily) */
    uint64_t epoch;   /* aging periods elapsed */
    uint64_t *tick;   /* [n_keys] time of the key's last access (tie-break in main) */
    uint32_t *heap;   /* [heap_cap] main keys, binary min-heap: evicted first at [0] */
    uint32_t *hpos;   /* [n_keys] index of a main key in heap */
    size_t heap_cap;  /* min(n_slots, n_keys) */
    size_t main_n;
    uint64_t *wgone;  /* [n_keys] wexits value when the key was dropped from the window, 0 = none */
    uint64_t *mgone;  /* [n_keys] mevicts value when the key was evicted from main, 0 = none */
    uint64_t wexits;  /* keys that ever left the window (to main or out) */
    uint64_t mevicts; /* keys ever evicted from main */
    uint64_t now;     /* accesses so far (the clock of tick[]) */
    uint64_t aging;   /* halve counts every `aging` accesses; 0 = never */
    ms_cpolicy_stats st;
};

static ms_cpolicy *cpolicy_alloc(size_t n_keys, size_t n_slots, int lru)
{
    if (n_keys == 0 || n_keys > (size_t)UINT32_MAX - 1) {
        ms_err_set("expert cache policy: key count %zu out of range (1..%u)", n_keys, UINT32_MAX - 1);
        return NULL;
    }
    ms_cpolicy *p = ms_calloc(1, sizeof *p);
    p->lru = lru;
    p->n_keys = (uint32_t)n_keys;
    p->n_slots = p->max_slots = n_slots;
    p->where = ms_calloc(n_keys, 1);
    p->prev = ms_malloc(n_keys * sizeof(uint32_t));
    p->next = ms_malloc(n_keys * sizeof(uint32_t));
    p->head = p->tail = NIL;
    if (!lru) {
        p->heap_cap = n_slots < n_keys ? n_slots : n_keys;
        p->cnt = ms_calloc(n_keys, sizeof(uint32_t));
        p->ep = ms_calloc(n_keys, sizeof(uint64_t));
        p->tick = ms_calloc(n_keys, sizeof(uint64_t));
        p->heap = ms_malloc((p->heap_cap ? p->heap_cap : 1) * sizeof(uint32_t));
        p->hpos = ms_malloc(n_keys * sizeof(uint32_t));
        p->wgone = ms_calloc(n_keys, sizeof(uint64_t));
        p->mgone = ms_calloc(n_keys, sizeof(uint64_t));
        /* Start with a 1% window; the ghosts move it to where the trace wants it. */
        p->w = n_slots / 100;
        if (p->w < 1) p->w = 1;
        if (n_slots >= 2 && p->w > n_slots - 1) p->w = n_slots - 1;
        p->aging = 32 * (uint64_t)(n_slots ? n_slots : 1);
    } else {
        p->w = n_slots;
    }
    return p;
}

ms_cpolicy *ms_cpolicy_new(size_t n_keys, size_t n_slots) { return cpolicy_alloc(n_keys, n_slots, 0); }

ms_cpolicy *ms_cpolicy_new_lru(size_t n_keys, size_t n_slots) { return cpolicy_alloc(n_keys, n_slots, 1); }

void ms_cpolicy_free(ms_cpolicy *p)
{
    if (!p) return;
    free(p->where);
    free(p->prev);
    free(p->next);
    free(p->cnt);
    free(p->ep);
    free(p->tick);
    free(p->heap);
    free(p->hpos);
    free(p->wgone);
    free(p->mgone);
    free(p);
}

/* ---- window: a doubly linked LRU list threaded through prev/next ---- */

static void win_push_front(ms_cpolicy *p, uint32_t k)
{
    p->prev[k] = NIL;
    p->next[k] = p->head;
    if (p->head != NIL) p->prev[p->head] = k;
    p->head = k;
    if (p->tail == NIL) p->tail = k;
    p->where[k] = AT_WIN;
    p->win_n++;
}

static void win_unlink(ms_cpolicy *p, uint32_t k)
{
    uint32_t a = p->prev[k], b = p->next[k];
    if (a != NIL) p->next[a] = b; else p->head = b;
    if (b != NIL) p->prev[b] = a; else p->tail = a;
    p->where[k] = AT_NONE;
    p->win_n--;
}

/* ---- main: indexed min-heap; the root is the next victim ---- */

/* The count of key k now: halved once for every aging period since it was last updated
 * (lazily, so aging costs nothing for keys nobody touches). */
static uint32_t count_now(ms_cpolicy *p, uint32_t k)
{
    uint64_t d = p->epoch - p->ep[k];
    if (d) {
        p->cnt[k] = d >= 32 ? 0 : p->cnt[k] >> d;
        p->ep[k] = p->epoch;
    }
    return p->cnt[k];
}

/* 1 if key a should be evicted before key b: lower count, or equal count and used more
 * recently (under cyclic access the most recently used is needed last). */
static int evict_before(const ms_cpolicy *p, uint32_t a, uint32_t b)
{
    if (p->cnt[a] != p->cnt[b]) return p->cnt[a] < p->cnt[b];
    return p->tick[a] > p->tick[b];
}

static void heap_set(ms_cpolicy *p, size_t i, uint32_t k)
{
    p->heap[i] = k;
    p->hpos[k] = (uint32_t)i;
}

static void heap_up(ms_cpolicy *p, size_t i)
{
    uint32_t k = p->heap[i];
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!evict_before(p, k, p->heap[up])) break;
        heap_set(p, i, p->heap[up]);
        i = up;
    }
    heap_set(p, i, k);
}

static void heap_down(ms_cpolicy *p, size_t i)
{
    uint32_t k = p->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= p->main_n) break;
        if (c + 1 < p->main_n && evict_before(p, p->heap[c + 1], p->heap[c])) c++;
        if (!evict_before(p, p->heap[c], k)) break;
        heap_set(p, i, p->heap[c]);
        i = c;
    }
    heap_set(p, i, k);
}

static void main_insert(ms_cpolicy *p, uint32_t k)
{
    MS_ASSERT(p->main_n < p->heap_cap);
    count_now(p, k); /* main's heap compares up-to-date counts only */
    p->where[k] = AT_MAIN;
    heap_set(p, p->main_n++, k);
    heap_up(p, p->main_n - 1);
}

static void main_remove(ms_cpolicy *p, uint32_t k)
{
    size_t i = p->hpos[k];
    p->where[k] = AT_NONE;
    p->main_n--;
    if (i == p->main_n) return;
    uint32_t m = p->heap[p->main_n]; /* the last leaf fills the hole, then settles */
    heap_set(p, i, m);
    heap_up(p, i);
    heap_down(p, p->hpos[m]);
}

/* Start a new aging period: every count halves (the frequency memory fades). Main's
 * counts are brought up to date at once and its heap rebuilt (O(n_slots) per period);
 * the heap order only ever compares up-to-date counts. */
static void age_counts(ms_cpolicy *p)
{
    p->epoch++;
    for (size_t i = 0; i < p->main_n; i++) count_now(p, p->heap[i]);
    for (size_t i = p->main_n / 2; i-- > 0;) heap_down(p, i);
}

/* ---- access ---- */

static int lru_access(ms_cpolicy *p, uint32_t key, uint32_t *evicted)
{
    if (p->where[key] == AT_WIN) {
        win_unlink(p, key);
        win_push_front(p, key);
        return MS_CPOLICY_HIT;
    }
    if (p->n_slots == 0) return MS_CPOLICY_MISS;
    win_push_front(p, key);
    if (p->win_n <= p->n_slots) return MS_CPOLICY_MISS;
    uint32_t v = p->tail;
    win_unlink(p, v);
    if (evicted) *evicted = v;
    return MS_CPOLICY_EVICT;
}

/* The window adapts on misses of keys that left recently: one that a window twice as
 * large would still hold votes for a bigger window; one that a main segment larger by the
 * window's size would still hold votes for a smaller window. */
static void window_adapt(ms_cpolicy *p, uint32_t key)
{
    if (p->n_slots < 2) return;
    if (p->wgone[key] && p->wexits - p->wgone[key] < p->w) {
        if (p->w < p->n_slots - 1) p->w++;
    } else if (p->mgone[key] && p->mevicts - p->mgone[key] < p->w) {
        if (p->w > 1) p->w--;
    }
    p->wgone[key] = p->mgone[key] = 0;
}

static int wlfu_access(ms_cpolicy *p, uint32_t key, uint32_t *evicted)
{
    if (p->aging && p->now % p->aging == 0 && p->now) age_counts(p);
    if (count_now(p, key) < UINT32_MAX) p->cnt[key]++;
    p->tick[key] = p->now;
    if (p->where[key] == AT_WIN) {
        win_unlink(p, key);
        win_push_front(p, key);
        return MS_CPOLICY_HIT;
    }
    if (p->where[key] == AT_MAIN) {
        /* a higher count moves it away from eviction, a newer tick towards it (among equal
         * counts): let it settle either way */
        heap_down(p, p->hpos[key]);
        heap_up(p, p->hpos[key]);
        return MS_CPOLICY_HIT;
    }
    if (p->n_slots == 0) return MS_CPOLICY_MISS;
    window_adapt(p, key);
    win_push_front(p, key);
    /* Overfull window: its LRU key moves to main (free room), competes with main's victim
     * (cache full), or is dropped. At most one key leaves the cache per access. */
    while (p->win_n > p->w) {
        uint32_t cand = p->tail;
        win_unlink(p, cand);
        p->wexits++;
        if (p->win_n + p->main_n < p->n_slots && p->main_n < p->heap_cap) {
            main_insert(p, cand);
            continue;
        }
        if (p->main_n > 0 && count_now(p, cand) > p->cnt[p->heap[0]]) {
            uint32_t v = p->heap[0];
            main_remove(p, v);
            p->mgone[v] = ++p->mevicts;
            main_insert(p, cand);
            if (evicted) *evicted = v;
        } else {
            p->wgone[cand] = p->wexits;
            if (evicted) *evicted = cand;
        }
        return MS_CPOLICY_EVICT;
    }
    if (p->win_n + p->main_n <= p->n_slots) return MS_CPOLICY_MISS;
    /* The window grew into main's share: main gives up its victim. */
    MS_ASSERT(p->main_n > 0);
    uint32_t v = p->heap[0];
    main_remove(p, v);
    p->mgone[v] = ++p->mevicts;
    if (evicted) *evicted = v;
    return MS_CPOLICY_EVICT;
}

int ms_cpolicy_access(ms_cpolicy *p, uint32_t key, uint32_t *evicted)
{
    MS_ASSERT(p && key < p->n_keys);
    int r = p->lru ? lru_access(p, key, evicted) : wlfu_access(p, key, evicted);
    p->now++;
    p->st.accesses++;
    if (r == MS_CPOLICY_HIT) p->st.hits++;
    else p->st.misses++;
    if (r == MS_CPOLICY_EVICT) p->st.evictions++;
    return r;
}

int ms_cpolicy_contains(const ms_cpolicy *p, uint32_t key)
{
    MS_ASSERT(p && key < p->n_keys);
    return p->where[key] != AT_NONE;
}

int ms_cpolicy_remove(ms_cpolicy *p, uint32_t key)
{
    MS_ASSERT(p && key < p->n_keys);
    if (p->where[key] == AT_WIN) win_unlink(p, key);
    else if (p->where[key] == AT_MAIN) main_remove(p, key);
    else return 0;
    return 1;
}

size_t ms_cpolicy_resident(const ms_cpolicy *p) { return p->win_n + p->main_n; }

size_t ms_cpolicy_slots(const ms_cpolicy *p) { return p->n_slots; }

void ms_cpolicy_set_slots(ms_cpolicy *p, size_t n_slots)
{
    MS_ASSERT(n_slots <= p->max_slots && n_slots >= ms_cpolicy_resident(p));
    p->n_slots = n_slots;
    if (p->lru) {
        p->w = n_slots;
        return;
    }
    /* The window keeps its adapted size when it fits, and at least the 1% it starts with. */
    size_t lo = n_slots / 100 ? n_slots / 100 : 1;
    if (p->w < lo) p->w = lo;
    if (n_slots >= 2 && p->w > n_slots - 1) p->w = n_slots - 1;
    if (n_slots < 2) p->w = 1;
}

size_t ms_cpolicy_window(const ms_cpolicy *p) { return p->w; }

ms_cpolicy_stats ms_cpolicy_get_stats(const ms_cpolicy *p) { return p->st; }

void ms_cpolicy_reset_stats(ms_cpolicy *p) { memset(&p->st, 0, sizeof p->st); }

void ms_cpolicy_set_aging(ms_cpolicy *p, uint64_t period)
{
    if (!p->lru) p->aging = period;
}
