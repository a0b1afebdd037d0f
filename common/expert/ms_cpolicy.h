/* ms_cpolicy: the online replacement policy of the expert cache (slot-based, O(log n) per access). */
#ifndef MS_CPOLICY_H
#define MS_CPOLICY_H

#include <stddef.h>
#include <stdint.h>

/*
 * The policy decides which keys (routed experts, one (layer, expert) pair each, numbered
 * densely 0..n_keys-1 by the caller, e.g. layer * n_experts + expert) stay resident in a
 * cache of n_slots equal-sized slots. It holds no expert bytes: the caller owns the
 * memory and does the loads; the policy only says hit / miss / which key to drop.
 *
 * Algorithm ("windowed LFU", after W-TinyLFU, adapted to the cyclic way a MoE model
 * touches its experts):
 *   - an LRU *window* takes every missed key; it catches short-range reuse (several rows
 *     of one batch or prefill chunk routing to the same expert of the current layer);
 *   - a *main* segment holds the rest. Every key has an exact access count (the key space
 *     is small and dense, so no sketch is needed); when the window overflows, its LRU key
 *     enters main only if its count is higher than main's victim, else it is dropped;
 *   - main's victim is the key with the lowest count and, among equal counts, the MOST
 *     recently used one. Experts are touched in layer order once per token, so among keys
 *     that are equally likely to be used again, the one used last will be needed last
 *     (Belady's rule applied to a cyclic scan); LRU order would evict the next one needed;
 *   - the window size adapts (1 .. n_slots-1): a miss on a key that a window twice as
 *     large would still hold grows it by one slot; a miss on a key that main would still
 *     hold with that many more slots shrinks it by one slot (ghost bookkeeping, ARC-style,
 *     one sequence number per key);
 *   - every count is halved each aging period (default 32 * n_slots accesses) so the
 *     policy follows a workload whose popular experts change.
 * Memory: about 50 bytes per key (9 for LRU) plus 4 bytes per slot, allocated at creation.
 *
 * The policy is not thread safe; one owner calls it. Results are deterministic: the same
 * access sequence always gives the same decisions.
 */

typedef struct ms_cpolicy ms_cpolicy;

/* Return values of ms_cpolicy_access. */
enum {
    MS_CPOLICY_HIT = 0,  /* key was resident; nothing changes residency */
    MS_CPOLICY_MISS = 1, /* key was absent and is now resident; nothing was evicted */
    MS_CPOLICY_EVICT = 2 /* key was absent and is now resident; *evicted (another key,
                            resident until now) is no longer resident */
};

/* Access and eviction counters since creation (or the last ms_cpolicy_reset_stats). */
typedef struct {
    uint64_t accesses, hits, misses, evictions;
} ms_cpolicy_stats;

/* The windowed-LFU policy for keys 0..n_keys-1 and n_slots slots. n_slots may be 0
 * (nothing is ever cached: every access is a MISS and the key is not resident) or larger
 * than n_keys. Returns NULL with ms_err set if n_keys is 0 or too large (> UINT32_MAX-1).
 * Free with ms_cpolicy_free. */
ms_cpolicy *ms_cpolicy_new(size_t n_keys, size_t n_slots);
/* Plain LRU with the same interface (the baseline; also usable as a fallback policy). */
ms_cpolicy *ms_cpolicy_new_lru(size_t n_keys, size_t n_slots);
void ms_cpolicy_free(ms_cpolicy *p); /* accepts NULL */

/* Record one request for key (< n_keys, else MS_ASSERT). Returns MS_CPOLICY_HIT, _MISS or
 * _EVICT (then *evicted is set; evicted may be NULL if the caller does not need it). After
 * a miss the key is resident (unless n_slots is 0). At most one key is evicted per call,
 * and the number of resident keys never exceeds n_slots. */
int ms_cpolicy_access(ms_cpolicy *p, uint32_t key, uint32_t *evicted);

/* Whether key is resident now (does not count as an access). */
int ms_cpolicy_contains(const ms_cpolicy *p, uint32_t key);
/* Make key non-resident without an access (e.g. its load failed, or the caller must free
 * memory). Returns 1 if it was resident, 0 if not. Its access count is kept. */
int ms_cpolicy_remove(ms_cpolicy *p, uint32_t key);

size_t ms_cpolicy_resident(const ms_cpolicy *p); /* keys resident now (<= n_slots) */
size_t ms_cpolicy_slots(const ms_cpolicy *p);
/* Change the capacity to n_slots, between the keys resident now and the n_slots given at
 * creation (MS_ASSERT otherwise): a cache whose memory arrives over time (ms_xstore's
 * background growth) starts at 0 and grows. Access counts and the window are kept (the
 * window is clamped to the new capacity). */
void ms_cpolicy_set_slots(ms_cpolicy *p, size_t n_slots);
size_t ms_cpolicy_window(const ms_cpolicy *p);   /* current window target, for reports */
ms_cpolicy_stats ms_cpolicy_get_stats(const ms_cpolicy *p);
void ms_cpolicy_reset_stats(ms_cpolicy *p);

/* Halve every access count each `period` accesses (0 = never). No effect on LRU. */
void ms_cpolicy_set_aging(ms_cpolicy *p, uint64_t period);

#endif
