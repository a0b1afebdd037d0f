/* test_ptrie: the radix tree answers every query as a scan of all its keys would, and stays compact. */
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_ptrie.h"
#include "ms_test.h"

/* The reference: every key in a plain list, answered by scanning it. */
typedef struct {
    int32_t ids[40];
    size_t n;
    int v; /* 1-based tag; the tree stores &tags[v] */
    int live;
} ref_key;

#define NK 400
static ref_key keys[NK];
static int tags[NK + 1];

static long ref_find(const int32_t *ids, size_t n)
{
    for (long i = 0; i < NK; i++)
        if (keys[i].live && keys[i].n == n && !memcmp(keys[i].ids, ids, sizeof(int32_t) * n)) return i;
    return -1;
}

static long ref_longest(const int32_t *ids, size_t n, size_t max_len)
{
    long best = -1;
    for (long i = 0; i < NK; i++)
        if (keys[i].live && keys[i].n <= max_len && keys[i].n <= n && (best < 0 || keys[i].n > keys[best].n) &&
            !memcmp(keys[i].ids, ids, sizeof(int32_t) * keys[i].n))
            best = i;
    return best;
}

/* A random sequence built from a few stems, so keys share long beginnings (system prompts,
 * turns of one conversation) and split edges at many depths; ids from a small alphabet. */
static size_t rand_seq(ms_t_rng *r, int32_t *out, size_t cap)
{
    static const int32_t stem[3][24] = {{5, 9, 9, 2, 7, 1, 1, 3, 8, 4, 6, 2, 9, 0, 5, 5, 7, 3, 1, 8, 2, 6, 4, 0},
                                        {5, 9, 9, 2, 7, 3, 3, 1, 0, 2, 2, 8, 1, 7, 6, 5, 4, 3, 2, 1, 0, 9, 8, 7},
                                        {-4, 100000, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}};
    size_t n = 1 + ms_t_rng_below(r, (uint32_t)cap);
    size_t s = ms_t_rng_below(r, 4), keep = s < 3 ? ms_t_rng_below(r, 25) : 0;
    for (size_t i = 0; i < n; i++) out[i] = i < keep ? stem[s][i] : (int32_t)ms_t_rng_below(r, 4);
    return n;
}

/* Nodes a compact tree has for the live keys: the root, one per key, one per branch point
 * that is not a key (a depth where two keys' paths part). Counted from the reference. */
static size_t ref_nodes(void)
{
    size_t nodes = 1;
    for (long i = 0; i < NK; i++) nodes += keys[i].live;
    /* A branch point: a prefix P (not a key, not empty) such that keys continue P with at
     * least two different next ids. Every such P is a prefix of some key: enumerate them. */
    for (long i = 0; i < NK; i++) {
        if (!keys[i].live) continue;
        for (size_t d = 1; d < keys[i].n; d++) {
            const int32_t *p = keys[i].ids;
            if (ref_find(p, d) >= 0) continue;
            int seen_first = 0, first_i = -1, two = 0;
            for (long j = 0; j < NK && !two; j++) {
                if (!keys[j].live || keys[j].n <= d || memcmp(keys[j].ids, p, sizeof(int32_t) * d)) continue;
                /* count P once: only from the lowest key index that has it */
                if (j < i) goto next_depth;
                if (!seen_first) seen_first = 1, first_i = keys[j].ids[d];
                else if (keys[j].ids[d] != first_i) two = 1;
            }
            nodes += two;
        next_depth:;
        }
    }
    return nodes;
}

int main(void)
{
    ms_t_rng r = {0x9e3779b97f4a7c15ull};
    ms_ptrie *t = ms_ptrie_new();
    int32_t q[48];
    size_t found_deep = 0, found_any = 0, max_nodes = 0;
    int wrong_get = 0, wrong_longest = 0, wrong_put = 0, wrong_del = 0, wrong_count = 0, wrong_nodes = 0;
    for (int step = 0; step < 20000; step++) {
        unsigned op = ms_t_rng_below(&r, 10);
        if (op < 4) { /* put: a new key or one already there */
            long slot = ms_t_rng_below(&r, NK);
            int32_t ids[40];
            size_t n = rand_seq(&r, ids, 40);
            long have = ref_find(ids, n);
            if (have >= 0) slot = have;
            else if (keys[slot].live) {
                void *v = ms_ptrie_del(t, keys[slot].ids, keys[slot].n);
                wrong_del += v != &tags[keys[slot].v];
                keys[slot].live = 0;
            }
            int tag = 1 + (int)ms_t_rng_below(&r, NK);
            void *old = ms_ptrie_put(t, ids, n, &tags[tag]);
            wrong_put += have >= 0 ? old != &tags[keys[have].v] : old != NULL;
            memcpy(keys[slot].ids, ids, sizeof(int32_t) * n);
            keys[slot].n = n, keys[slot].v = tag, keys[slot].live = 1;
        } else if (op < 6) { /* delete: a live key, or a key that is not there */
            long slot = ms_t_rng_below(&r, NK);
            if (keys[slot].live && ms_t_rng_below(&r, 4)) {
                void *v = ms_ptrie_del(t, keys[slot].ids, keys[slot].n);
                wrong_del += v != &tags[keys[slot].v];
                keys[slot].live = 0;
            } else {
                size_t n = rand_seq(&r, q, 40);
                long have = ref_find(q, n);
                void *v = ms_ptrie_del(t, q, n);
                wrong_del += have >= 0 ? v != &tags[keys[have].v] : v != NULL;
                if (have >= 0) keys[have].live = 0;
            }
        } else { /* queries */
            size_t n = rand_seq(&r, q, 48);
            long have = ref_find(q, n);
            void *g = ms_ptrie_get(t, q, n);
            wrong_get += have >= 0 ? g != &tags[keys[have].v] : g != NULL;
            size_t max_len = ms_t_rng_below(&r, 2) ? n : ms_t_rng_below(&r, (uint32_t)n + 1), len = 99;
            long best = ref_longest(q, n, max_len);
            void *l = ms_ptrie_longest(t, q, n, max_len, &len);
            found_any += best >= 0, found_deep += best >= 0 && keys[best].n >= 10;
            if (best >= 0 ? (l != &tags[keys[best].v] || len != keys[best].n) : (l != NULL || len != 0)) {
                if (!wrong_longest)
                    fprintf(stderr, "longest of %s (max %zu): want %zu ids, got %zu\n", ms_t_show_ids(q, n), max_len,
                            best >= 0 ? keys[best].n : 0, len);
                wrong_longest++;
            }
        }
        size_t live = 0;
        for (long i = 0; i < NK; i++) live += keys[i].live;
        wrong_count += ms_ptrie_count(t) != live;
        if (ms_ptrie_nodes(t) > max_nodes) max_nodes = ms_ptrie_nodes(t);
        if (step % 499 == 0) wrong_nodes += ms_ptrie_nodes(t) != ref_nodes();
    }
    /* The mix must have exercised deep shared prefixes, not only misses. */
    T_CHECK(found_any > 3000 && found_deep > 1000 && max_nodes > 300, "weak mix: %zu prefixes found, %zu of 10+ ids, %zu nodes at most",
            found_any, found_deep, max_nodes);
    T_CHECK(wrong_put == 0, "put returned the wrong replaced value %d times", wrong_put);
    T_CHECK(wrong_del == 0, "del returned the wrong value %d times", wrong_del);
    T_CHECK(wrong_get == 0, "get differed from the scan %d times", wrong_get);
    T_CHECK(wrong_longest == 0, "longest differed from the scan %d times", wrong_longest);
    T_CHECK(wrong_count == 0, "count differed from the live keys %d times", wrong_count);
    T_CHECK(wrong_nodes == 0, "the tree was not compact (node count off) %d times", wrong_nodes);

    /* Everything deleted: only the root is left. */
    for (long i = 0; i < NK; i++)
        if (keys[i].live) ms_ptrie_del(t, keys[i].ids, keys[i].n), keys[i].live = 0;
    T_CHECK(ms_ptrie_count(t) == 0 && ms_ptrie_nodes(t) == 1, "emptied tree: %zu keys, %zu nodes",
            ms_ptrie_count(t), ms_ptrie_nodes(t));
    size_t len = 7;
    T_CHECK(ms_ptrie_longest(t, q, 5, 5, &len) == NULL && len == 0, "an empty tree found a prefix");
    T_CHECK(ms_ptrie_get(t, q, 0) == NULL && ms_ptrie_del(t, q, 0) == NULL, "the empty key");

    /* Long keys (a 100k-token conversation's checkpoints every 256): a lookup finds the last. */
    enum { LONG = 100000 };
    int32_t *big = ms_malloc(sizeof(int32_t) * LONG);
    for (int i = 0; i < LONG; i++) big[i] = (int32_t)((i * 7919) % 160000);
    for (int k = 256; k <= LONG; k += 256) ms_ptrie_put(t, big, (size_t)k, &tags[1 + k % NK]);
    void *l = ms_ptrie_longest(t, big, LONG, LONG - 1, &len);
    T_CHECK(l == &tags[1 + (LONG / 256 * 256) % NK] && len == LONG / 256 * 256, "long keys: got %zu", len);
    T_CHECK(ms_ptrie_nodes(t) == 1 + LONG / 256, "long keys: %zu nodes for %d keys", ms_ptrie_nodes(t), LONG / 256);
    free(big);
    ms_ptrie_free(t);
    ms_ptrie_free(NULL);
    return ms_t_done();
}
