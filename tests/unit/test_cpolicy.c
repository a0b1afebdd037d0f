/* test_cpolicy: invariants of the expert-cache policy (windowed LFU) and of its LRU baseline. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_cpolicy.h"
#include "ms_err.h"
#include "ms_test.h"

static ms_t_rng rng = {0x9E3779B97F4A7C15ull};
static uint32_t rnd(uint32_t n) { return ms_t_rng_below(&rng, n); }

/* A key stream mixing hot keys, cyclic scans and one-off keys, so every path runs. */
static uint32_t next_key(uint32_t n_keys, size_t i)
{
    uint32_t r = rnd(100);
    if (r < 40) return rnd(n_keys < 8 ? n_keys : 8);  /* hot */
    if (r < 70) return (uint32_t)(i % n_keys);        /* cyclic scan */
    return rnd(n_keys);                               /* anything */
}

/* Check every documented guarantee on one stream, with a shadow copy of the resident set
 * built only from the return values. */
static void check_invariants(int lru, size_t n_keys, size_t n_slots, size_t steps, uint64_t aging)
{
    ms_cpolicy *p = lru ? ms_cpolicy_new_lru(n_keys, n_slots) : ms_cpolicy_new(n_keys, n_slots);
    T_CHECK(p != NULL, "create %s keys=%zu slots=%zu", lru ? "lru" : "policy", n_keys, n_slots);
    if (!p) return;
    if (aging) ms_cpolicy_set_aging(p, aging);
    uint8_t *shadow = calloc(n_keys, 1);
    size_t resident = 0, bad = 0, nhit = 0, nmiss = 0, nevict = 0;
    for (size_t i = 0; i < steps; i++) {
        uint32_t k = next_key((uint32_t)n_keys, i), ev = UINT32_MAX;
        int was = ms_cpolicy_contains(p, k);
        int r = ms_cpolicy_access(p, k, &ev);
        if (was != shadow[k]) bad++;
        if (r == MS_CPOLICY_HIT) {
            nhit++;
            if (!was || ev != UINT32_MAX) bad++; /* a hit needs a resident key and never evicts */
        } else if (r == MS_CPOLICY_MISS) {
            nmiss++;
            if (was || ev != UINT32_MAX) bad++;
            if (n_slots > 0) {
                shadow[k] = 1;
                resident++;
            }
        } else if (r == MS_CPOLICY_EVICT) {
            nmiss++;
            nevict++;
            /* the evicted key was resident, is another key, and is gone now */
            if (was || ev >= n_keys || ev == k || !shadow[ev] || ms_cpolicy_contains(p, ev)) bad++;
            if (ev < n_keys) shadow[ev] = 0;
            shadow[k] = 1;
        } else {
            bad++;
        }
        if (n_slots > 0 && !ms_cpolicy_contains(p, k)) bad++; /* after any access the key is resident */
        if (ms_cpolicy_resident(p) != resident || resident > n_slots) bad++;
        if (r == MS_CPOLICY_MISS && resident > n_slots) bad++;
        if (i % 997 == 0)
            for (size_t j = 0; j < n_keys; j++)
                if (ms_cpolicy_contains(p, (uint32_t)j) != shadow[j]) bad++;
    }
    ms_cpolicy_stats st = ms_cpolicy_get_stats(p);
    T_CHECK(bad == 0, "%s keys=%zu slots=%zu aging=%llu: %zu invariant violations", lru ? "lru" : "policy", n_keys,
            n_slots, (unsigned long long)aging, bad);
    T_CHECK(st.accesses == steps && st.hits == nhit && st.misses == nmiss && st.evictions == nevict,
            "stats %llu/%llu/%llu/%llu vs %zu/%zu/%zu/%zu", (unsigned long long)st.accesses,
            (unsigned long long)st.hits, (unsigned long long)st.misses, (unsigned long long)st.evictions, steps, nhit,
            nmiss, nevict);
    /* Every miss adds a key and every eviction takes one away. */
    if (n_slots > 0) T_CHECK(nmiss - nevict == resident, "misses - evictions = resident");
    if (n_slots == 0) T_CHECK(nhit == 0 && nevict == 0 && resident == 0, "0 slots: nothing ever cached");
    if (n_slots > 0) T_CHECK(ms_cpolicy_window(p) >= 1 && ms_cpolicy_window(p) <= n_slots, "window in range");
    free(shadow);
    ms_cpolicy_free(p);
}

static void test_invariants(void)
{
    static const size_t cases[][2] = {{1, 0}, {1, 1}, {5, 1}, {5, 2}, {16, 3}, {16, 16}, {16, 40},
                                      {64, 7}, {300, 20}, {300, 100}, {1000, 64}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int lru = 0; lru < 2; lru++) {
            check_invariants(lru, cases[c][0], cases[c][1], 20000, 0);
            if (!lru) check_invariants(lru, cases[c][0], cases[c][1], 20000, 37); /* frequent aging */
        }
    }
}

/* A working set that fits: after each key's first access every access hits, whatever the
 * order, and nothing is ever evicted. */
static void test_fits(void)
{
    for (int lru = 0; lru < 2; lru++) {
        for (size_t slots = 1; slots <= 50; slots += 7) {
            ms_cpolicy *p = lru ? ms_cpolicy_new_lru(1000, slots) : ms_cpolicy_new(1000, slots);
            uint32_t set[64];
            for (size_t j = 0; j < slots; j++) set[j] = (uint32_t)(j * 17 + 3);
            uint8_t seen[1000] = {0};
            size_t bad = 0, first = 0;
            for (size_t i = 0; i < 5000; i++) {
                uint32_t k = set[i < slots ? i : rnd((uint32_t)slots)];
                int r = ms_cpolicy_access(p, k, NULL);
                if (!seen[k]) {
                    first++;
                    if (r != MS_CPOLICY_MISS) bad++;
                    seen[k] = 1;
                } else if (r != MS_CPOLICY_HIT) {
                    bad++;
                }
            }
            T_CHECK(bad == 0 && first == slots, "%s slots=%zu: %zu unexpected misses/evictions", lru ? "lru" : "policy",
                    slots, bad);
            ms_cpolicy_free(p);
        }
    }
}

/* The LRU baseline against a naive LRU written here (timestamps, linear scan). */
static void test_lru_reference(void)
{
    enum { NK = 50, SLOTS = 12, STEPS = 20000 };
    ms_cpolicy *p = ms_cpolicy_new_lru(NK, SLOTS);
    long last[NK];
    int in[NK] = {0}, n = 0;
    size_t bad = 0;
    for (int k = 0; k < NK; k++) last[k] = -1;
    for (long i = 0; i < STEPS; i++) {
        uint32_t k = rnd(100) < 60 ? rnd(16) : rnd(NK), ev = UINT32_MAX;
        int r = ms_cpolicy_access(p, k, &ev);
        int want = MS_CPOLICY_HIT;
        long want_ev = -1;
        if (!in[k]) {
            want = MS_CPOLICY_MISS;
            if (n == SLOTS) {
                long best = -1;
                for (int j = 0; j < NK; j++)
                    if (in[j] && (best < 0 || last[j] < last[best])) best = j;
                in[best] = 0;
                want_ev = best;
                want = MS_CPOLICY_EVICT;
            } else {
                n++;
            }
            in[k] = 1;
        }
        last[k] = i;
        if (r != want || (want == MS_CPOLICY_EVICT && (long)ev != want_ev)) bad++;
    }
    T_CHECK(bad == 0, "LRU differs from the naive LRU in %zu of %d accesses", bad, STEPS);
    ms_cpolicy_free(p);
}

/* Scan resistance: 40 hot keys, each reused after 120 one-off keys, in 100 slots. The hot
 * keys' reuse distance (159 other keys) exceeds the cache, so LRU never hits at all; the
 * policy must keep the hot keys (count >= 2) against one-off keys (count 1, never admitted
 * over a higher count) and hit every hot access once the hot keys have been seen twice. */
static void test_scan_resistance(void)
{
    enum { SLOTS = 100, HOT = 40, SCAN = 3, ROUNDS = 60 };
    uint32_t n_keys = HOT + HOT * SCAN * ROUNDS;
    for (int lru = 0; lru < 2; lru++) {
        ms_cpolicy *p = lru ? ms_cpolicy_new_lru(n_keys, SLOTS) : ms_cpolicy_new(n_keys, SLOTS);
        uint32_t next_scan = HOT;
        size_t hot_hits_late = 0, hot_late = 0, hits = 0;
        for (int round = 0; round < ROUNDS; round++) {
            for (uint32_t h = 0; h < HOT; h++) {
                int r = ms_cpolicy_access(p, h, NULL);
                hits += r == MS_CPOLICY_HIT;
                if (round >= 10) {
                    hot_late++;
                    hot_hits_late += r == MS_CPOLICY_HIT;
                }
                for (int s = 0; s < SCAN; s++) hits += ms_cpolicy_access(p, next_scan++, NULL) == MS_CPOLICY_HIT;
            }
        }
        if (lru) {
            T_CHECK(hits == 0, "LRU on a reuse distance above the cache: %zu hits, want 0", hits);
        } else {
            T_CHECK(hot_hits_late == hot_late, "policy: %zu of %zu hot accesses hit after warm-up", hot_hits_late,
                    hot_late);
        }
        ms_cpolicy_free(p);
    }
}

/* A loop over 150 keys through 100 slots: LRU evicts every key just before its return (0
 * hits). The policy keeps a fixed subset: every key has the same count after each pass, a
 * window key only displaces a main key with a strictly lower count, and a dropped key
 * returns far beyond the window's ghost horizon, so the window stays at its initial 1 slot
 * and main keeps 99 keys that hit on every pass (99/150 = 0.66). Require at least 1/2. */
static void test_loop(void)
{
    enum { SLOTS = 100, N = 150, PASSES = 50 };
    for (int lru = 0; lru < 2; lru++) {
        ms_cpolicy *p = lru ? ms_cpolicy_new_lru(N, SLOTS) : ms_cpolicy_new(N, SLOTS);
        size_t hits = 0, late = 0;
        for (int pass = 0; pass < PASSES; pass++)
            for (uint32_t k = 0; k < N; k++)
                if (ms_cpolicy_access(p, k, NULL) == MS_CPOLICY_HIT) {
                    hits++;
                    late += pass >= 1;
                }
        if (lru) T_CHECK(hits == 0, "LRU on a loop of %d keys in %d slots: %zu hits, want 0", N, SLOTS, hits);
        else
            T_CHECK(late * 2 >= (size_t)(PASSES - 1) * N, "policy on a loop: %zu hits of %d after the first pass (want >= 1/2)",
                    late, (PASSES - 1) * N);
        ms_cpolicy_free(p);
    }
}

/* remove() and contains(); creation limits. */
static void test_api(void)
{
    T_CHECK(ms_cpolicy_new(0, 4) == NULL && strstr(ms_err_msg(), "key count"), "0 keys refused: %s", ms_err_msg());
    ms_cpolicy_free(NULL);
    for (int lru = 0; lru < 2; lru++) {
        ms_cpolicy *p = lru ? ms_cpolicy_new_lru(10, 4) : ms_cpolicy_new(10, 4);
        T_CHECK(ms_cpolicy_slots(p) == 4, "slots");
        for (uint32_t k = 0; k < 4; k++) ms_cpolicy_access(p, k, NULL);
        T_CHECK(ms_cpolicy_resident(p) == 4, "4 resident");
        T_CHECK(ms_cpolicy_remove(p, 2) == 1 && !ms_cpolicy_contains(p, 2) && ms_cpolicy_resident(p) == 3, "remove");
        T_CHECK(ms_cpolicy_remove(p, 2) == 0 && ms_cpolicy_remove(p, 9) == 0, "remove absent");
        uint32_t ev = UINT32_MAX;
        T_CHECK(ms_cpolicy_access(p, 7, &ev) == MS_CPOLICY_MISS && ev == UINT32_MAX, "refill freed slot without eviction");
        T_CHECK(ms_cpolicy_access(p, 8, &ev) == MS_CPOLICY_EVICT && ev < 10 && ev != 8, "full again: evicts");
        for (uint32_t k = 0; k < 10; k++) ms_cpolicy_remove(p, k);
        T_CHECK(ms_cpolicy_resident(p) == 0, "all removed");
        T_CHECK(ms_cpolicy_access(p, 5, NULL) == MS_CPOLICY_MISS, "empty again");
        ms_cpolicy_stats st = ms_cpolicy_get_stats(p);
        T_CHECK(st.accesses == 7 && st.misses == 7 && st.evictions == 1, "stats after remove");
        ms_cpolicy_reset_stats(p);
        st = ms_cpolicy_get_stats(p);
        T_CHECK(st.accesses == 0 && st.hits == 0, "reset stats");
        ms_cpolicy_free(p);
    }
}

/* Same accesses, same decisions. */
static void test_deterministic(void)
{
    ms_cpolicy *a = ms_cpolicy_new(500, 60), *b = ms_cpolicy_new(500, 60);
    size_t diff = 0;
    for (size_t i = 0; i < 30000; i++) {
        uint32_t k = next_key(500, i), ea = 0, eb = 0;
        int ra = ms_cpolicy_access(a, k, &ea), rb = ms_cpolicy_access(b, k, &eb);
        if (ra != rb || (ra == MS_CPOLICY_EVICT && ea != eb)) diff++;
    }
    T_CHECK(diff == 0, "two policies on the same stream disagree %zu times", diff);
    ms_cpolicy_free(a);
    ms_cpolicy_free(b);
}

/* ms_cpolicy_set_slots: a policy grown from 0 never holds more keys than its capacity of the
 * moment, evicts only when full, and grown to its size before any access decides exactly as
 * one created with that size. */
static void test_set_slots(void)
{
    for (int lru = 0; lru <= 1; lru++) {
        ms_cpolicy *p = lru ? ms_cpolicy_new_lru(400, 50) : ms_cpolicy_new(400, 50);
        ms_cpolicy_set_slots(p, 0);
        size_t bad = 0, cap = 0;
        for (size_t i = 0; i < 20000; i++) {
            if (i % 300 == 0 && cap < 50) ms_cpolicy_set_slots(p, ++cap);
            size_t before = ms_cpolicy_resident(p);
            int r = ms_cpolicy_access(p, next_key(400, i), NULL);
            if (ms_cpolicy_resident(p) > cap || ms_cpolicy_slots(p) != cap) bad++;
            if (r == MS_CPOLICY_EVICT && before < cap) bad++; /* room was left, yet it evicted */
        }
        T_CHECK(bad == 0 && cap == 50, "%s grown to %zu: %zu violations", lru ? "LRU" : "WLFU", cap, bad);
        ms_cpolicy_free(p);
        ms_cpolicy *a = lru ? ms_cpolicy_new_lru(400, 50) : ms_cpolicy_new(400, 50);
        ms_cpolicy *g = lru ? ms_cpolicy_new_lru(400, 50) : ms_cpolicy_new(400, 50);
        ms_cpolicy_set_slots(g, 0);
        ms_cpolicy_set_slots(g, 50);
        size_t diff = 0;
        for (size_t i = 0; i < 20000; i++) {
            uint32_t k = next_key(400, i), ea = 0, eg = 0;
            int ra = ms_cpolicy_access(a, k, &ea), rg = ms_cpolicy_access(g, k, &eg);
            if (ra != rg || (ra == MS_CPOLICY_EVICT && ea != eg)) diff++;
        }
        T_CHECK(diff == 0, "%s: grown 0 -> 50 disagrees with created at 50 %zu times", lru ? "LRU" : "WLFU", diff);
        ms_cpolicy_free(a);
        ms_cpolicy_free(g);
    }
}

int main(void)
{
    test_invariants();
    test_fits();
    test_lru_reference();
    test_scan_resistance();
    test_loop();
    test_api();
    test_deterministic();
    test_set_slots();
    return ms_t_done();
}
