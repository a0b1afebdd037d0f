/* test_xstore: the SSD expert store against the in-memory expert table (bits, stats, errors). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_expert.h"
#include "ms_io.h"
#include "ms_ops.h"
#include "ms_pool.h"
#include "ms_st.h"
#include "ms_test.h"
#include "ms_k3_experts.h"
#include "ms_xstore.h"
#include "ms_xtest.h"

#include <xxhash.h>

#define N_CALLS 24 /* random calls per store configuration */

static int has(const char *s, const char *n) { return strstr(s, n) != NULL; }

/* ---- shape arithmetic ---- */

static void test_sizes(void)
{
    /* spec §4.5: one K3 expert (L = 3584, I = 3072) is 17,547,264 bytes */
    T_CHECK(xt_bytes(3584, 3072) == 17547264ull, "K3 expert bytes %llu",
            (unsigned long long)xt_bytes(3584, 3072));
    int shapes[3][2] = {{3584, 3072}, {LAT, INTER}, {64, 32}};
    for (int i = 0; i < 3; i++) {
        int L = shapes[i][0], I = shapes[i][1];
        uint64_t E = xt_bytes(L, I), slot = xt_slot(L, I);
        int ok = slot % MS_IO_ALIGN == 0;
        /* any start offset, one read or six reads, must fit a slot */
        for (uint64_t off = 0; off < MS_IO_ALIGN; off += 1 + off / 3) {
            if (ms_io_span(off, (size_t)E) > slot) ok = 0;
            uint64_t six = 0, lens[6] = {(uint64_t)L * I / 2, (uint64_t)L * I / 32, (uint64_t)L * I / 2,
                                         (uint64_t)L * I / 32, (uint64_t)L * I / 2, (uint64_t)L * I / 32};
            for (int p = 0; p < 6; p++) six += ms_io_span(off + 977 * (uint64_t)p, (size_t)lens[p]);
            if (six > slot) ok = 0;
        }
        T_CHECK(ok, "slot %llu too small for expert of %llu bytes (L %d I %d)", (unsigned long long)slot,
                (unsigned long long)E, L, I);
        ms_xfmt f = xt_fmt(L, I);
        T_CHECK(ms_xstore_fixed_bytes(&f, 8) == 8 * slot, "fixed bytes = depth slots");
    }
}

/* ---- reference vs store ---- */

typedef struct {
    uint64_t cache_slots; /* cache_bytes = cache_slots * slot - cache_minus */
    uint64_t cache_minus;
    int depth, direct, lru, mode;
    int threads; /* the store's pool (1: none): hits then run whole experts one per thread */
} cfg;

static ms_expert_table *ref_table;
static ms_st *sts[2];

static int distinct(const int32_t *ids, int64_t n)
{
    int seen[NE] = {0}, c = 0;
    for (int64_t i = 0; i < n; i++)
        if (!seen[ids[i]]++) c++;
    return c;
}

static int run_cfg(const cfg *c, int *direct_ran)
{
    const char *paths[2] = {xt_path("a.safetensors"), xt_path("b.safetensors")};
    ms_io_files *files = ms_io_files_open(paths, 2, c->direct);
    T_CHECK(files != NULL, "open files: %s", ms_err_msg());
    if (!files) return 0;
    *direct_ran = ms_io_files_direct(files, 0) && ms_io_files_direct(files, 1);
    uint64_t slot = xt_slot(LAT, INTER), E = xt_bytes(LAT, INTER);
    ms_xstore_opts o = {.n_layers = NL, .n_experts = NE, .fmt = xt_fmt(LAT, INTER),
                        .cache_bytes = c->cache_slots * slot - c->cache_minus, .depth = c->depth, .lru = c->lru};
    ms_pool *pool = c->threads > 1 ? ms_pool_new(c->threads) : NULL;
    ms_xstore *s = ms_xstore_new(&o, files, pool);
    T_CHECK(s != NULL, "store: %s", ms_err_msg());
    if (!s) {
        ms_pool_free(pool);
        ms_io_files_close(files);
        return 0;
    }
    for (int key = 0; key < NK; key++) {
        ms_xloc loc;
        xt_make_loc(sts, key, c->mode, &loc);
        ms_xstore_set(s, key / NE, key % NE, &loc);
    }
    ms_experts st_if = ms_xstore_iface(s), ref_if = ms_expert_table_iface(ref_table);
    int32_t ids[9 * 4];
    float z[9 * LAT], want[9 * 4 * LAT], got[9 * 4 * LAT];
    int bad_bits = 0, bad_stats = 0, bad_cap = 0, bad_repeat = 0;
    uint64_t n_calls = 0;
    ms_xstore_stats prev, now;
    ms_xstore_get_stats(s, &prev);
    int all_fit = c->cache_minus == 0 && c->cache_slots >= NK;
    for (int call = 0; call < N_CALLS; call++) {
        int layer, k;
        int64_t n_rows;
        xt_random_routing(&layer, &n_rows, &k, ids, z);
        memset(got, 0xff, sizeof got);
        int rc_ref = ref_if.compute(ref_if.ctx, layer, n_rows, z, k, ids, want);
        int rc = st_if.compute(st_if.ctx, layer, n_rows, z, k, ids, got);
        T_CHECK(rc == 0 && rc_ref == 0, "compute failed: %s", ms_err_msg());
        if (rc != 0) break;
        n_calls++;
        if (memcmp(got, want, sizeof(float) * (size_t)(n_rows * k * LAT)) != 0) bad_bits++;
        ms_xstore_get_stats(s, &now);
        int nd = distinct(ids, n_rows * k);
        uint64_t dm = now.misses - prev.misses;
        if (now.hits + now.misses - prev.hits - prev.misses != (uint64_t)nd ||
            now.requests - prev.requests != (uint64_t)(n_rows * k) || now.bytes_read - prev.bytes_read != dm * E)
            bad_stats++;
        if (now.cache_bytes_used > o.cache_bytes || now.cache_bytes_peak > o.cache_bytes) bad_cap++;
        prev = now;
        /* With room for every expert, the same call again is served from memory. */
        if (all_fit && call % 5 == 0) {
            memset(got, 0xff, sizeof got);
            rc = st_if.compute(st_if.ctx, layer, n_rows, z, k, ids, got);
            ms_xstore_get_stats(s, &now);
            if (rc != 0 || now.misses != prev.misses || now.bytes_read != prev.bytes_read ||
                now.hits - prev.hits != (uint64_t)nd ||
                memcmp(got, want, sizeof(float) * (size_t)(n_rows * k * LAT)) != 0)
                bad_repeat++;
            prev = now;
        }
    }
    char what[160];
    snprintf(what, sizeof what, "cache %llu slots%s, depth %d, %s, %s, %s, %d thread(s)", (unsigned long long)c->cache_slots,
             c->cache_minus ? " - 1 byte" : "", c->depth, c->direct ? "direct" : "buffered",
             c->lru ? "LRU" : "WLFU", c->mode == 0 ? "file A" : c->mode == 1 ? "file B" : "A/B mixed", c->threads);
    T_CHECK(n_calls == N_CALLS, "%s: %llu calls", what, (unsigned long long)n_calls);
    T_CHECK(bad_bits == 0, "%s: %d calls differ from the table", what, bad_bits);
    T_CHECK(bad_stats == 0, "%s: %d calls with inconsistent counters", what, bad_stats);
    T_CHECK(bad_cap == 0, "%s: %d calls over the cache bytes", what, bad_cap);
    T_CHECK(bad_repeat == 0, "%s: %d repeated calls were not pure hits", what, bad_repeat);
    ms_xstore_get_stats(s, &now);
    if (o.cache_bytes < slot) T_CHECK(now.hits == 0 && now.cache_bytes_peak == 0, "%s: no cache, yet hits", what);
    if (c->cache_slots >= 3 && c->cache_minus == 0) T_CHECK(now.hits > 0, "%s: a cache that never hits", what);
    if (c->cache_slots > 0 && c->cache_slots < NK) T_CHECK(now.evictions > 0, "%s: small cache never evicts", what);
    T_CHECK(now.io_wait_seconds >= 0 && now.read_busy_seconds >= 0, "%s: timers", what);
    ms_xstore_free(s);
    ms_pool_free(pool);
    ms_io_files_close(files);
    return 1;
}

/* Reads issued before their call never change an output.
 * begin (a call's first reads issued early) not even what is cached: a store given begin before
 * each call, sometimes with other ids or twice, and one without, serve the same calls with the
 * same bits and the same hits, misses and evictions.
 * prefetch (predicted routing): before each call the store is told a prediction that is right,
 * partly right, of another layer, or wrong (sometimes followed by begin), and every call still
 * gives the table's bits; right predictions are used, wrong ones dropped.
 * Either, never followed by its call, is undone by the next call, or at free (ASan). */
static void test_early(int threads, int predict)
{
    const char *paths[2] = {xt_path("a.safetensors"), xt_path("b.safetensors")};
    ms_io_files *files = ms_io_files_open(paths, 2, 1);
    ms_pool *pool = threads > 1 ? ms_pool_new(threads) : NULL;
    ms_xstore_opts o = {.n_layers = NL, .n_experts = NE, .fmt = xt_fmt(LAT, INTER),
                        .cache_bytes = 3 * xt_slot(LAT, INTER), .depth = predict ? 3 : 2,
                        .prefetch_reads = 3}; /* not the timing's: its reads are microseconds here */
    ms_xstore *sa = files ? ms_xstore_new(&o, files, pool) : NULL, *sb = files ? ms_xstore_new(&o, files, pool) : NULL;
    T_CHECK(sa && sb, "stores: %s", ms_err_msg());
    if (!sa || !sb) {
        ms_xstore_free(sa);
        ms_xstore_free(sb);
        ms_pool_free(pool);
        ms_io_files_close(files);
        return;
    }
    for (int key = 0; key < NK; key++) {
        ms_xloc loc;
        xt_make_loc(sts, key, 2, &loc);
        ms_xstore_set(sa, key / NE, key % NE, &loc);
        ms_xstore_set(sb, key / NE, key % NE, &loc);
    }
    ms_experts a = ms_xstore_iface(sa), b = ms_xstore_iface(sb), ref = ms_expert_table_iface(ref_table);
    T_CHECK(a.begin != NULL && a.prefetch != NULL, "the expert store has no begin or no prefetch");
    int32_t ids[9 * 4], other[9 * 4];
    float z[9 * LAT], za[9 * LAT], want[9 * 4 * LAT], ga[9 * 4 * LAT], gb[9 * 4 * LAT];
    int bad_bits = 0, bad_cache = 0, failed = 0, stale = 0;
    for (int call = 0; call < 3 * N_CALLS && a.begin && a.prefetch; call++) {
        int layer, k, ol, ok;
        int64_t n_rows, on;
        xt_random_routing(&ol, &on, &ok, other, za); /* another call's routing, for stale reads */
        xt_random_routing(&layer, &n_rows, &k, ids, z);
        if (!predict && call % 7 == 3) {
            a.begin(a.ctx, ol, on, ok, other);
            stale++;
        } else if (!predict) {
            a.begin(a.ctx, layer, n_rows, k, ids);
            if (call % 11 == 5) a.begin(a.ctx, layer, n_rows, k, ids);
        } else if (call % 5 == 1 && ok == k) { /* the first rows right, the rest another call's */
            for (int64_t r = 0; r < n_rows / 2 && r < on; r++) memcpy(other + r * k, ids + r * k, sizeof(int32_t) * (size_t)k);
            a.prefetch(a.ctx, layer, on, ok, other);
        } else if (call % 5 == 2) { /* another layer's, then right, then begin */
            a.prefetch(a.ctx, ol, on, ok, other);
            a.prefetch(a.ctx, layer, n_rows, k, ids);
            a.begin(a.ctx, layer, n_rows, k, ids);
        } else if (call % 5 == 3) { /* wrong */
            a.prefetch(a.ctx, layer, on, ok, other);
            stale++;
        } else if (call % 5 == 0) { /* right */
            a.prefetch(a.ctx, layer, n_rows, k, ids);
        }
        int rc = a.compute(a.ctx, layer, n_rows, z, k, ids, ga) | b.compute(b.ctx, layer, n_rows, z, k, ids, gb) |
                 ref.compute(ref.ctx, layer, n_rows, z, k, ids, want);
        if (rc != 0) {
            failed++;
            break;
        }
        size_t nb = sizeof(float) * (size_t)(n_rows * k * LAT);
        bad_bits += memcmp(ga, want, nb) != 0 || memcmp(gb, want, nb) != 0;
        ms_xstore_stats x, y;
        ms_xstore_get_stats(sa, &x);
        ms_xstore_get_stats(sb, &y);
        bad_cache += !predict && (x.hits != y.hits || x.misses != y.misses || x.evictions != y.evictions ||
                                  x.cache_bytes_used != y.cache_bytes_used || x.bytes_read < y.bytes_read);
    }
    ms_xstore_stats x;
    ms_xstore_get_stats(sa, &x);
    const char *what = predict ? "prefetch" : "begin";
    T_CHECK(failed == 0, "%s, %d thread(s): a call failed: %s", what, threads, ms_err_msg());
    T_CHECK(bad_bits == 0, "%s, %d thread(s): %d calls differ from the table", what, threads, bad_bits);
    T_CHECK(bad_cache == 0, "%s, %d thread(s): %d calls where begin changed what is cached", what, threads, bad_cache);
    T_CHECK(stale > 0 && x.misses > 0 && x.hits > 0, "%s, %d thread(s): the calls neither hit nor missed", what, threads);
    T_CHECK(!predict || (x.prefetch_used > 0 && x.prefetch_used < x.prefetched),
            "%d thread(s): %llu of %llu predicted reads used (some right, some wrong)", threads,
            (unsigned long long)x.prefetch_used, (unsigned long long)x.prefetched);
    /* Early reads whose call never comes: free waits for them and frees their buffers. */
    int layer, k;
    int64_t n_rows;
    xt_random_routing(&layer, &n_rows, &k, ids, z);
    if (a.begin && !predict) a.begin(a.ctx, layer, n_rows, k, ids);
    if (a.prefetch && predict) a.prefetch(a.ctx, layer, n_rows, k, ids);
    ms_xstore_free(sa);
    ms_xstore_free(sb);
    ms_pool_free(pool);
    ms_io_files_close(files);
}

/* Each (row, rank) on its own, T = 1, from the mapped bytes: grouping must not change a bit. */
static void test_row_invariance(void)
{
    const char *paths[1] = {xt_path("b.safetensors")};
    ms_io_files *files = ms_io_files_open(paths, 1, 1);
    ms_xstore_opts o = {.n_layers = NL, .n_experts = NE, .fmt = xt_fmt(LAT, INTER),
                        .cache_bytes = 2 * xt_slot(LAT, INTER), .depth = 3};
    ms_xstore *s = ms_xstore_new(&o, files, NULL);
    xt_set_all(s, sts[1]);
    ms_experts ex = ms_xstore_iface(s);
    int bad = 0;
    for (int call = 0; call < 10; call++) {
        int layer, k;
        int64_t n_rows;
        int32_t ids[9 * 4];
        float z[9 * LAT], got[9 * 4 * LAT], y[LAT];
        xt_random_routing(&layer, &n_rows, &k, ids, z);
        T_CHECK(ex.compute(ex.ctx, layer, n_rows, z, k, ids, got) == 0, "compute: %s", ms_err_msg());
        for (int64_t q = 0; q < n_rows * k; q++) {
            int key = layer * NE + ids[q];
            ms_mat w[6 / 2];
            for (int m = 0; m < 3; m++) {
                const ms_st_tensor *tp = xt_find_part(sts[1], key, 2 * m), *ts = xt_find_part(sts[1], key, 2 * m + 1);
                memset(&w[m], 0, sizeof w[m]);
                w[m].type = MS_WT_MXFP4;
                w[m].rows = m == 1 ? LAT : INTER;
                w[m].cols = m == 1 ? INTER : LAT;
                w[m].data = ms_t_st_bytes(sts[1], tp);
                w[m].scales = ms_t_st_bytes(sts[1], ts);
            }
            ms_glu_mlp(&w[0], &w[2], &w[1], 4.0f, 25.0f, z + (q / k) * LAT, 1, y, NULL);
            if (memcmp(y, got + q * LAT, sizeof y) != 0) bad++;
        }
    }
    T_CHECK(bad == 0, "%d outputs differ from one-row computes", bad);
    ms_xstore_free(s);
    ms_io_files_close(files);
}

/* Without a grower (grow_bg 0) a call makes the buffers it needs; with one, a call of 8 rows or
 * more makes those the grower has not, and a call of fewer holds what it made. A cache of every
 * expert misses each expert once and never evicts, the same bits as the table; its buffers
 * never exceed the plan and all exist in the end; lent to a prefill span (ms_xstore_lend) and
 * given back, likewise. */
static void test_grow(void)
{
    const char *paths[1] = {xt_path("a.safetensors")};
    ms_io_files *files = ms_io_files_open(paths, 1, 1);
    uint64_t slot = xt_slot(LAT, INTER);
    ms_xstore_opts o = {.n_layers = NL, .n_experts = NE, .fmt = xt_fmt(LAT, INTER), .cache_bytes = NK * slot, .depth = 2};
    ms_xstore *s = NULL;
    ms_xstore_stats st;
    ms_experts st_if = {0}, ref_if = ms_expert_table_iface(ref_table);
    for (int bg = 0; bg < 2; bg++) {
        ms_xstore_free(s);
        o.grow_bg = bg;
        s = ms_xstore_new(&o, files, NULL);
        T_CHECK(s != NULL, "store: %s", ms_err_msg());
        if (!s) break;
        xt_set_all(s, sts[0]);
        st_if = ms_xstore_iface(s);
        if (bg) ms_xstore_grow_wait(s); /* calls of few rows hold only what the grower made */
        int32_t ids[9 * 4];
        float z[9 * LAT], want[9 * 4 * LAT], got[9 * 4 * LAT];
        int bad_bits = 0, bad_cap = 0, touched = 0, layer, k;
        uint8_t seen[NK] = {0};
        for (int call = 0; call < N_CALLS; call++) {
            int64_t n_rows;
            xt_random_routing(&layer, &n_rows, &k, ids, z);
            for (int64_t q = 0; q < n_rows * k; q++) touched += !seen[layer * NE + ids[q]]++;
            T_CHECK(ref_if.compute(ref_if.ctx, layer, n_rows, z, k, ids, want) == 0 &&
                        st_if.compute(st_if.ctx, layer, n_rows, z, k, ids, got) == 0,
                    "compute: %s", ms_err_msg());
            if (memcmp(got, want, sizeof(float) * (size_t)(n_rows * k * LAT)) != 0) bad_bits++;
            ms_xstore_get_stats(s, &st);
            if (st.cache_bytes_used > st.cache_bytes_grown + 2 * slot || st.cache_bytes_grown > o.cache_bytes) bad_cap++;
        }
        T_CHECK(bad_bits == 0 && bad_cap == 0, "grow_bg %d: %d calls differ from the table, %d held more buffers than "
                "the plan", bg, bad_bits, bad_cap);
        T_CHECK(st.evictions == 0 && st.misses == (uint64_t)touched && (bg || st.slots_made_in_calls * slot == st.cache_bytes_grown),
                "grow_bg %d: a cache of every expert: %llu misses for %d experts touched, %llu evictions, %llu buffers "
                "made by calls", bg, (unsigned long long)st.misses, touched, (unsigned long long)st.evictions,
                (unsigned long long)st.slots_made_in_calls);
    }
    if (s) {
        ms_xstore_grow_wait(s);
        ms_xstore_get_stats(s, &st);
    }
    /* A call of 9 rows on a new store (the grower barely started) makes the buffers it needs:
     * every expert of layer 0 missed once, none evicted. */
    ms_xstore *f = ms_xstore_new(&o, files, NULL);
    if (f) {
        xt_set_all(f, sts[0]);
        int32_t ids9[9 * 4];
        float z9[9 * LAT], o9[9 * 4 * LAT];
        for (int q = 0; q < 9 * 4; q++) ids9[q] = (int32_t)((q / 4 * 4 + q % 4) % NE);
        for (int q = 0; q < 9 * LAT; q++) z9[q] = (float)(q % 5) / 5.0f;
        ms_experts fi = ms_xstore_iface(f);
        ms_xstore_stats fs;
        T_CHECK(fi.compute(fi.ctx, 0, 9, z9, 4, ids9, o9) == 0, "9-row call: %s", ms_err_msg());
        ms_xstore_get_stats(f, &fs);
        T_CHECK(fs.misses == NE && fs.evictions == 0, "9-row call on a new store: %llu misses of %d, %llu evictions",
                (unsigned long long)fs.misses, NE, (unsigned long long)fs.evictions);
        ms_xstore_free(f);
    }
    /* One-row calls over every expert on a new store, its grower racing them: a cache that holds
     * every expert makes what the grower has not and never evicts, whatever the grower's pace. */
    if ((f = ms_xstore_new(&o, files, NULL))) {
        xt_set_all(f, sts[0]);
        ms_experts fi = ms_xstore_iface(f);
        float z1[LAT], o1[LAT], r1[LAT];
        int differ = 0;
        for (int q = 0; q < LAT; q++) z1[q] = (float)(q % 3) / 3.0f - 0.25f;
        for (int l = 0; l < NL; l++)
            for (int32_t e = 0; e < NE; e++) {
                T_CHECK(fi.compute(fi.ctx, l, 1, z1, 1, &e, o1) == 0 && ref_if.compute(ref_if.ctx, l, 1, z1, 1, &e, r1) == 0,
                        "1-row call: %s", ms_err_msg());
                differ += memcmp(o1, r1, sizeof o1) != 0;
            }
        ms_xstore_stats fs;
        ms_xstore_get_stats(f, &fs);
        T_CHECK(fs.misses == NK && fs.evictions == 0 && differ == 0,
                "1-row calls racing the grower: %llu misses of %d, %llu evictions, %d outputs differ from the table",
                (unsigned long long)fs.misses, NK, (unsigned long long)fs.evictions, differ);
        ms_xstore_free(f);
    }
    T_CHECK(s && st.cache_bytes_grown == NK * slot, "grown to %llu of %llu bytes", (unsigned long long)st.cache_bytes_grown,
            (unsigned long long)(NK * slot));
    if (!s) {
        ms_io_files_close(files);
        return;
    }
    /* Every expert of layer 0 twice: the second pass is all hits, same bits. */
    int32_t all[NE];
    float zz[LAT], y1[NE * LAT], y2[NE * LAT], y3[NE * LAT];
    for (int e = 0; e < NE; e++) all[e] = e;
    for (int i = 0; i < LAT; i++) zz[i] = (float)(i % 7) / 7.0f - 0.5f;
    ms_xstore_stats a, b;
    st_if.compute(st_if.ctx, 0, 1, zz, NE, all, y1);
    ms_xstore_get_stats(s, &a);
    st_if.compute(st_if.ctx, 0, 1, zz, NE, all, y2);
    ms_xstore_get_stats(s, &b);
    T_CHECK(b.hits - a.hits == NE && b.misses == a.misses && memcmp(y1, y2, sizeof y1) == 0,
            "grown cache: %llu hits, %llu misses on a repeat", (unsigned long long)(b.hits - a.hits),
            (unsigned long long)(b.misses - a.misses));
    /* Lent to a span down to one slot: same bits, one expert held; given back, it regrows. */
    ms_xstore_lend(s, 1);
    ms_xstore_get_stats(s, &a);
    st_if.compute(st_if.ctx, 0, 1, zz, NE, all, y3);
    ms_xstore_get_stats(s, &b);
    T_CHECK(a.cache_bytes_used == 0 && a.cache_bytes_grown == slot && b.cache_bytes_used <= slot && b.evictions > a.evictions &&
                b.misses - a.misses == NE && memcmp(y1, y3, sizeof y1) == 0,
            "lent: %llu bytes cached, %llu grown, %llu misses of %d, same bits", (unsigned long long)a.cache_bytes_used,
            (unsigned long long)a.cache_bytes_grown, (unsigned long long)(b.misses - a.misses), NE);
    ms_xstore_unlend(s);
    ms_xstore_unlend(s); /* not lent: nothing */
    ms_xstore_grow_wait(s);
    st_if.compute(st_if.ctx, 0, 1, zz, NE, all, y3);
    ms_xstore_get_stats(s, &a);
    st_if.compute(st_if.ctx, 0, 1, zz, NE, all, y3);
    ms_xstore_get_stats(s, &b);
    T_CHECK(a.cache_bytes_grown == NK * slot && b.hits - a.hits == NE && memcmp(y1, y3, sizeof y1) == 0,
            "given back: grown to %llu of %llu bytes, %llu hits on a repeat", (unsigned long long)a.cache_bytes_grown,
            (unsigned long long)(NK * slot), (unsigned long long)(b.hits - a.hits));
    ms_xstore_free(s);
    /* A store freed while its grower is still at work stops it (ASan: nothing leaks). */
    o.cache_bytes = 64 * NK * slot;
    s = ms_xstore_new(&o, files, NULL);
    T_CHECK(s != NULL, "store: %s", ms_err_msg());
    ms_xstore_free(s);
    /* grow_sync_bytes: that head of the cache is made at creation, whatever the grower's pace. */
    o.grow_sync_bytes = 3 * slot + slot / 2;
    ms_xstore_stats g = {0};
    if ((s = ms_xstore_new(&o, files, NULL))) ms_xstore_get_stats(s, &g);
    T_CHECK(g.cache_bytes_grown >= 3 * slot, "grow_sync_bytes %llu: %llu bytes made at creation",
            (unsigned long long)o.grow_sync_bytes, (unsigned long long)g.cache_bytes_grown);
    ms_xstore_free(s);
    ms_io_files_close(files);
}

/* ---- errors ---- */

static void test_errors(void)
{
    /* c.safetensors: file A cut in the middle of the expert that ends last in the file. */
    int last = 0;
    for (int key = 0; key < NK; key++)
        if (xt_find_part(sts[0], key, 5)->offset > xt_find_part(sts[0], last, 5)->offset) last = key;
    const ms_st_tensor *mid = xt_find_part(sts[0], last, 2);
    size_t cut = (size_t)mid->offset + 100;
    size_t alen = 0;
    char *abytes = ms_t_read_file(xt_path("a.safetensors"), &alen);
    FILE *f = fopen(xt_path("c.safetensors"), "wb");
    T_CHECK(abytes && f && fwrite(abytes, 1, cut, f) == cut, "write truncated copy");
    if (f) fclose(f);
    free(abytes);

    /* Variant first = 0: every expert in c (the cut one is read last, in offset order);
     * first = 1: only the cut one in c (file 0), the rest in a (file 1), so the failing read
     * is the first in order and the reads behind it are still in flight when it fails. */
    for (int v = 0; v < 4; v++) {
        int direct = v & 1, first = v >> 1;
        const char *paths[2] = {xt_path("c.safetensors"), xt_path("a.safetensors")};
        ms_io_files *files = ms_io_files_open(paths, 2, direct);
        ms_xstore_opts o = {.n_layers = NL, .n_experts = NE, .fmt = xt_fmt(LAT, INTER),
                            .cache_bytes = NK * xt_slot(LAT, INTER), .depth = 4};
        ms_xstore *s = ms_xstore_new(&o, files, NULL);
        ms_st *one[2] = {sts[0], sts[0]};
        for (int key = 0; key < NK; key++) {
            ms_xloc loc;
            xt_make_loc(one, key, 0, &loc);
            T_CHECK(xt_contiguous(&loc), "file A expert %d not contiguous", key);
            if (first && key != last)
                for (int p = 0; p < 6; p++) loc.file[p] = 1;
            if (key != NE + 3) ms_xstore_set(s, key / NE, key % NE, &loc); /* (1, 3) stays unset */
        }
        ms_experts ex = ms_xstore_iface(s), ref = ms_expert_table_iface(ref_table);
        int L0 = last / NE, E0 = last % NE;
        char want_l[32], want_e[32];
        snprintf(want_l, sizeof want_l, "layer %d", L0);
        snprintf(want_e, sizeof want_e, "expert %d", E0);
        float z[3 * LAT], got[3 * 3 * LAT], want[3 * 3 * LAT];
        for (int i = 0; i < 3 * LAT; i++) z[i] = (float)(i % 17) * 0.125f - 1.0f;
        int o1 = (E0 + 1) % NE, o2 = (E0 + 2) % NE, o3 = (E0 + 5) % NE;
        if (L0 == 1) { /* keep clear of the unset expert 3 */
            if (o1 == 3) o1 = (E0 + 7) % NE;
            if (o2 == 3) o2 = (E0 + 8) % NE;
            if (o3 == 3) o3 = (E0 + 9) % NE;
        }
        /* Warm one other expert, then a call mixing a hit, misses and the truncated expert. */
        int32_t warm[1] = {o1};
        T_CHECK(ex.compute(ex.ctx, L0, 1, z, 1, warm, got) == 0, "warm call: %s", ms_err_msg());
        int32_t ids[9] = {o2, last % NE, o1, o1, o3, E0, o2, o3, o1};
        for (int rep = 0; rep < 2; rep++) {
            ms_err_clear();
            int rc = ex.compute(ex.ctx, L0, 3, z, 3, ids, got);
            const char *m = ms_err_msg();
            T_CHECK(rc == -1, "truncated expert accepted (try %d)", rep);
            T_CHECK(has(m, "c.safetensors") && has(m, want_l) && has(m, want_e),
                    "message must name file, layer and expert: %s", m);
            T_CHECK(ms_err_code() == MS_EXIT_IO, "class %d", ms_err_code());
        }
        ms_xstore_stats st;
        ms_xstore_get_stats(s, &st);
        T_CHECK(st.cache_bytes_used <= o.cache_bytes, "cache over budget after failure");
        /* The other experts still work, from cache or disk, and give the table's bits. */
        int32_t ok_ids[6] = {o2, o1, o3, o3, o1, o2};
        int rc = ex.compute(ex.ctx, L0, 2, z, 3, ok_ids, got);
        T_CHECK(rc == 0, "other experts after a failure: %s", ms_err_msg());
        T_CHECK(ref.compute(ref.ctx, L0, 2, z, 3, ok_ids, want) == 0, "reference");
        T_CHECK(rc == 0 && memcmp(got, want, sizeof(float) * 6 * LAT) == 0, "bits after failure");

        /* Unset expert, ids and layer out of range: refused by name, nothing computed. */
        int32_t unset[2] = {0, 3};
        ms_err_clear();
        T_CHECK(ex.compute(ex.ctx, 1, 1, z, 2, unset, got) == -1 && has(ms_err_msg(), "layer 1 expert 3"),
                "unset expert: %s", ms_err_msg());
        int32_t big[1] = {NE}, neg[1] = {-1}, fine[1] = {0};
        ms_err_clear();
        T_CHECK(ex.compute(ex.ctx, 0, 1, z, 1, big, got) == -1 && has(ms_err_msg(), "expert id 12") &&
                    has(ms_err_msg(), "layer 0"),
                "id too large: %s", ms_err_msg());
        ms_err_clear();
        T_CHECK(ex.compute(ex.ctx, 0, 1, z, 1, neg, got) == -1 && has(ms_err_msg(), "expert id -1"),
                "negative id: %s", ms_err_msg());
        ms_err_clear();
        T_CHECK(ex.compute(ex.ctx, NL, 1, z, 1, fine, got) == -1 && has(ms_err_msg(), "layer 2"),
                "layer out of range: %s", ms_err_msg());
        ms_err_clear();
        T_CHECK(ex.compute(ex.ctx, -1, 1, z, 1, fine, got) == -1 && has(ms_err_msg(), "layer -1"),
                "negative layer: %s", ms_err_msg());
        ms_xstore_get_stats(s, &st);
        uint64_t req = st.requests;
        T_CHECK(ex.compute(ex.ctx, 0, 0, z, 1, fine, got) == 0, "zero rows");
        ms_xstore_get_stats(s, &st);
        T_CHECK(st.requests == req, "zero rows counted");
        ms_xstore_free(s);
        ms_io_files_close(files);
    }

    /* Bad options are refused with a message. */
    const char *paths[1] = {xt_path("a.safetensors")};
    ms_io_files *files = ms_io_files_open(paths, 1, 0);
    ms_xstore_opts o = {.n_layers = NL, .n_experts = NE, .fmt = xt_fmt(LAT, INTER), .depth = 2};
    o.fmt.mat[1].rows = 48; /* w2 no longer [L, I] */
    ms_err_clear();
    T_CHECK(ms_xstore_new(&o, files, NULL) == NULL && has(ms_err_msg(), "matrices[1]"), "a bad format: %s",
            ms_err_msg());
    o.fmt = xt_fmt(LAT, INTER);
    o.depth = 0;
    ms_err_clear();
    T_CHECK(ms_xstore_new(&o, files, NULL) == NULL && has(ms_err_msg(), "depth 0"), "depth 0: %s", ms_err_msg());
    ms_io_files_close(files);
    ms_xstore_free(NULL);
}

/* ---- checksums (packs): verified on every read, a mismatch is refused by name ---- */

static void test_checksums(void)
{
    /* Reference sums from the bytes the files were written from, in canonical part order. */
    uint64_t sums[NK];
    for (int key = 0; key < NK; key++) {
        uint64_t E = 0;
        for (int p = 0; p < 6; p++) E += xt_part_len[p];
        uint8_t *all = malloc(E), *q = all;
        for (int p = 0; p < 6; p++) {
            memcpy(q, xt_part_bytes[key][p], xt_part_len[p]);
            q += xt_part_len[p];
        }
        sums[key] = XXH3_64bits(all, E);
        free(all);
    }
    const int BAD = NE + 4; /* layer 1 expert 4: an even key, so scattered in file B */
    for (int run = 0; run < 4; run++) { /* each file mode without a pool, then with one of 2 threads */
        int mode = run & 1;
        ms_pool *pool = run >> 1 ? ms_pool_new(2) : NULL;
        const char *paths[2] = {xt_path("a.safetensors"), xt_path("b.safetensors")};
        const char *fname = mode ? "b.safetensors" : "a.safetensors";
        ms_io_files *files = ms_io_files_open(paths, 2, mode);
        ms_xstore_opts o = {.n_layers = NL, .n_experts = NE, .fmt = xt_fmt(LAT, INTER),
                            .cache_bytes = 4 * xt_slot(LAT, INTER), .depth = 3};
        ms_xstore *s = ms_xstore_new(&o, files, pool);
        T_CHECK(s != NULL, "store: %s", ms_err_msg());
        if (!s) {
            ms_io_files_close(files);
            ms_pool_free(pool);
            continue;
        }
        for (int key = 0; key < NK; key++) {
            ms_xloc loc;
            xt_make_loc(sts, key, mode, &loc);
            loc.has_xxh3 = 1;
            loc.xxh3 = key == BAD ? sums[key] ^ 1 : sums[key];
            ms_xstore_set(s, key / NE, key % NE, &loc);
        }
        ms_experts ex = ms_xstore_iface(s), ref = ms_expert_table_iface(ref_table);
        int32_t ids[9 * 4];
        float z[9 * LAT], want[9 * 4 * LAT], got[9 * 4 * LAT];
        int n_good = 0, n_bad = 0, wrong_bits = 0, wrong_fail = 0, wrong_msg = 0;
        for (int call = 0; call < 40; call++) {
            int layer, k;
            int64_t n_rows;
            xt_random_routing(&layer, &n_rows, &k, ids, z);
            int hits_bad = 0;
            for (int64_t i = 0; i < n_rows * k; i++) hits_bad |= layer * NE + ids[i] == BAD;
            ms_err_clear();
            int rc = ex.compute(ex.ctx, layer, n_rows, z, k, ids, got);
            if (hits_bad) {
                n_bad++;
                if (rc != -1) wrong_fail++;
                const char *m = ms_err_msg();
                if (!has(m, "layer 1 expert 4") || !has(m, fname) || !has(m, "checksum") ||
                    ms_err_code() != MS_EXIT_MODEL)
                    wrong_msg++;
            } else {
                n_good++;
                T_CHECK(ref.compute(ref.ctx, layer, n_rows, z, k, ids, want) == 0, "reference");
                if (rc != 0) wrong_fail++;
                else if (memcmp(got, want, sizeof(float) * (size_t)(n_rows * k * LAT)) != 0) wrong_bits++;
            }
        }
        T_CHECK(wrong_fail == 0, "mode %d: %d calls failed or succeeded wrongly (%s)", mode, wrong_fail, ms_err_msg());
        T_CHECK(wrong_bits == 0, "mode %d: %d verified calls differ from the table", mode, wrong_bits);
        T_CHECK(wrong_msg == 0, "mode %d: %d failures without layer, expert, file, checksum, class 3", mode, wrong_msg);
        /* Explicitly: the corrupt expert alone, twice: read again each time (never cached). */
        int32_t one[1] = {4};
        for (int rep = 0; rep < 2; rep++) {
            ms_xstore_stats a, b;
            ms_xstore_get_stats(s, &a);
            ms_err_clear();
            int rc = ex.compute(ex.ctx, 1, 1, z, 1, one, got);
            ms_xstore_get_stats(s, &b);
            T_CHECK(rc == -1 && has(ms_err_msg(), "layer 1 expert 4") && has(ms_err_msg(), "checksum"),
                    "mode %d: corrupt expert alone: %s", mode, ms_err_msg());
            T_CHECK(b.misses - a.misses == 1 && b.hits == a.hits, "mode %d: corrupt expert came from the cache", mode);
        }
        /* and the rest of its layer still works (some from the cache), bit for bit */
        int32_t rest[3] = {3, 5, 6};
        for (int rep = 0; rep < 2; rep++) {
            int rc = ex.compute(ex.ctx, 1, 1, z, 3, rest, got);
            T_CHECK(rc == 0, "mode %d: good experts after a checksum failure: %s", mode, ms_err_msg());
            T_CHECK(ref.compute(ref.ctx, 1, 1, z, 3, rest, want) == 0, "reference");
            T_CHECK(rc == 0 && memcmp(got, want, sizeof(float) * 3 * LAT) == 0, "mode %d: bits after failure", mode);
        }
        ms_xstore_stats st;
        ms_xstore_get_stats(s, &st);
        T_CHECK(st.hits > 0 && st.cache_bytes_used <= o.cache_bytes, "mode %d: cache after checksum failures", mode);
        T_CHECK(n_good > 0 && n_bad > 0, "mode %d: %d calls with and %d without the corrupt expert", mode, n_bad,
                n_good);
        ms_xstore_free(s), ms_pool_free(pool), ms_io_files_close(files);
    }
}

/* An expert whose bytes make NaN/Inf outputs (w2 scales 2^127: values beyond float) stops the call with an
 * error naming its layer and expert, in the store and in the in-memory table (issue 12, defect 1). */
static void test_nonfinite(void)
{
    const int layer = 1, expert = 5, key = layer * NE + expert;
    uint8_t *saved = malloc(xt_part_len[3]);
    memcpy(saved, xt_part_bytes[key][3], xt_part_len[3]);
    memset(xt_part_bytes[key][3], 0xfe, xt_part_len[3]); /* 2^127: w2 values overflow float */
    xt_write_file(xt_path("nan.safetensors"), 0);
    ms_st *st = ms_st_open_file(xt_path("nan.safetensors"));
    const char *paths[1] = {xt_path("nan.safetensors")};
    ms_io_files *files = ms_io_files_open(paths, 1, 0);
    ms_xstore_opts o = {.n_layers = NL, .n_experts = NE, .fmt = xt_fmt(LAT, INTER), .cache_bytes = 0, .depth = 2};
    ms_xstore *s = st && files ? ms_xstore_new(&o, files, NULL) : NULL;
    T_CHECK(s != NULL, "non-finite: store: %s", ms_err_msg());
    ms_expert_table *tab = ms_t_situ_table(NL, NE, LAT, 4.0f, 25.0f, NULL);
    for (int k2 = 0; s && k2 < NK; k2++) {
        ms_st *two[2] = {st, st};
        ms_xloc loc;
        xt_make_loc(two, k2, 0, &loc);
        ms_xstore_set(s, k2 / NE, k2 % NE, &loc);
        ms_expert_w w = {0};
        ms_mat *m[3] = {&w.w[MS_XROLE_GATE], &w.w[MS_XROLE_DOWN], &w.w[MS_XROLE_UP]}; /* w1, w2, w3 */
        for (int i = 0; i < 3; i++)
            *m[i] = (ms_mat){.type = MS_WT_MXFP4, .rows = i == 1 ? LAT : INTER, .cols = i == 1 ? INTER : LAT,
                             .data = xt_part_bytes[k2][2 * i], .scales = xt_part_bytes[k2][2 * i + 1]};
        ms_expert_table_set(tab, k2 / NE, k2 % NE, &w);
    }
    int32_t ids[4] = {2, 7, expert, 3}; /* two rows, k = 2; the bad expert is row 1, rank 0 */
    float z[2 * LAT], out[4 * LAT];
    for (int i = 0; i < 2 * LAT; i++) z[i] = (float)(i % 7) / 7.0f - 0.4f;
    ms_experts ifs[2] = {s ? ms_xstore_iface(s) : ms_expert_table_iface(tab), ms_expert_table_iface(tab)};
    const char *what[2] = {"store", "table"};
    char want[64];
    snprintf(want, sizeof want, "layer %d expert %d", layer, expert);
    for (int i = 0; i < 2; i++) {
        ms_err_clear();
        int rc = ifs[i].compute(ifs[i].ctx, layer, 2, z, 2, ids, out);
        T_CHECK(rc != 0, "non-finite %s: NaN output accepted", what[i]);
        T_CHECK(rc != 0 && ms_err_code() == MS_EXIT_RUNTIME && has(ms_err_msg(), want),
                "non-finite %s: message/class: %d %s", what[i], ms_err_code(), ms_err_msg());
        /* The same experts without the bad one are fine. */
        int32_t ok_ids[4] = {2, 7, 4, 3};
        T_CHECK(ifs[i].compute(ifs[i].ctx, layer, 2, z, 2, ok_ids, out) == 0, "non-finite %s: good experts: %s",
                what[i], ms_err_msg());
    }
    /* Hits computed one expert per thread (a pool, every expert cached): the same error,
     * naming the bad expert, and the good ones' outputs unchanged. */
    ms_pool *pool = ms_pool_new(2);
    ms_xstore_opts o2 = o;
    o2.cache_bytes = NK * xt_slot(LAT, INTER);
    ms_xstore *s2 = st && files ? ms_xstore_new(&o2, files, pool) : NULL;
    for (int k2 = 0; s2 && k2 < NK; k2++) {
        ms_st *two[2] = {st, st};
        ms_xloc loc;
        xt_make_loc(two, k2, 0, &loc);
        ms_xstore_set(s2, k2 / NE, k2 % NE, &loc);
    }
    int32_t ids6[6] = {2, 7, 4, 3, expert, 6}, ok6[6] = {2, 7, 4, 3, 8, 6}; /* 3 rows, k = 2 */
    float z3[3 * LAT], o_store[6 * LAT], o_tab[6 * LAT];
    for (int i = 0; i < 3 * LAT; i++) z3[i] = (float)(i % 5) / 5.0f - 0.3f;
    ms_experts e2 = s2 ? ms_xstore_iface(s2) : ms_expert_table_iface(tab), et = ms_expert_table_iface(tab);
    for (int pass = 0; s2 && pass < 2; pass++) { /* pass 0 reads them all, pass 1 is all hits */
        ms_err_clear();
        int rc = e2.compute(e2.ctx, layer, 3, z3, 2, ids6, o_store);
        T_CHECK(rc != 0 && ms_err_code() == MS_EXIT_RUNTIME && has(ms_err_msg(), want),
                "non-finite, pooled store, pass %d: %d %s", pass, ms_err_code(), ms_err_msg());
    }
    if (s2) {
        ms_xstore_stats xs;
        ms_xstore_get_stats(s2, &xs);
        T_CHECK(xs.hits >= 6, "non-finite, pooled store: the second pass was not served from the cache");
        T_CHECK(e2.compute(e2.ctx, layer, 3, z3, 2, ok6, o_store) == 0 && et.compute(et.ctx, layer, 3, z3, 2, ok6, o_tab) == 0 &&
                    !memcmp(o_store, o_tab, sizeof o_tab),
                "non-finite, pooled store: good experts differ from the table: %s", ms_err_msg());
    }
    ms_xstore_free(s2);
    ms_pool_free(pool);
    ms_expert_table_free(tab);
    ms_xstore_free(s);
    ms_io_files_close(files);
    ms_st_close(st);
    memcpy(xt_part_bytes[key][3], saved, xt_part_len[3]);
    free(saved);
}

int main(void)
{
    snprintf(xt_root, sizeof xt_root, "%s", ms_t_tmpdir("xstore"));
    test_sizes();

    if (xt_fixture(sts, &ref_table) != 0) return ms_t_done();
    int direct_ok = 0, direct_asked = 0;
    static const uint64_t caches[][2] = {{0, 0}, {1, 0}, {3, 0}, {3, 1}, {NK, 0}};
    /* Every cache size x depth x read mode; policy and file layout rotate so each of their six
     * pairs meets every cache size (the full product would only cost time). */
    int n_run = 0;
    for (size_t ci = 0; ci < sizeof caches / sizeof caches[0]; ci++)
        for (int depth = 1; depth <= 8; depth += 7)
            for (int direct = 0; direct <= 1; direct++)
                for (int twice = 0; twice < 2; twice++, n_run++) {
                    int pair = (int)((n_run + ci) % 6);
                    /* the second run of each has a pool of 2 or 3 threads: the same bits */
                    cfg c = {caches[ci][0], caches[ci][1], depth, direct, pair / 3, pair % 3, twice ? 2 + n_run % 2 : 1};
                    int dr = 0;
                    run_cfg(&c, &dr);
                    if (direct) direct_asked++, direct_ok += dr;
                }
    printf("O_DIRECT on %s: %s\n", xt_root,
           direct_ok == direct_asked ? "used" : direct_ok ? "partly used" : "refused by the file system, buffered reads ran");
    test_row_invariance();
    for (int predict = 0; predict < 2; predict++) {
        test_early(1, predict);
        test_early(2, predict);
    }
    test_grow();
    test_errors();
    test_checksums();
    test_nonfinite();
    xt_fixture_free(sts, ref_table);
    return ms_t_done();
}
