/* test_xstore_map: the mapped expert store (experts used in place from the files' mappings) against
 * the in-memory table and the reading store: bits, stats, checksums, files cut short. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ms_err.h"
#include "ms_expert.h"
#include "ms_io.h"
#include "ms_pool.h"
#include "ms_st.h"
#include "ms_test.h"
#include "ms_xstore.h"
#include "ms_xtest.h"

#include <xxhash.h>

static ms_expert_table *ref_table;
static ms_st *sts[2];

static int has(const char *s, const char *n) { return strstr(s, n) != NULL; }

/* A mapped store over a.safetensors and b.safetensors, every expert placed per mode (xt_make_loc). */
static ms_xstore *open_mapped(ms_io_files **files, const char *a, const char *b, int mode, ms_pool *pool)
{
    const char *paths[2] = {a, b};
    *files = ms_io_files_open(paths, 2, 1);
    T_CHECK(*files != NULL, "open files: %s", ms_err_msg());
    if (!*files) return NULL;
    /* no cache bytes at all: a mapped store needs none */
    ms_xstore_opts o = {.n_layers = NL, .n_experts = NE, .fmt = xt_fmt(LAT, INTER), .depth = 4, .mapped = 1,
                        .grow_bg = 1};
    ms_xstore *s = ms_xstore_new(&o, *files, pool);
    T_CHECK(s != NULL, "mapped store: %s", ms_err_msg());
    if (!s) return NULL;
    for (int key = 0; key < NK; key++) {
        ms_xloc loc;
        xt_make_loc(sts, key, mode, &loc);
        ms_xstore_set(s, key / NE, key % NE, &loc);
    }
    return s;
}

/* Every call gives the table's bits; misses are first uses (so over the run the distinct experts
 * used), bytes read at most their bytes, the cache's bytes exactly theirs, no eviction; a
 * call again is all hits. begin, prefetch, lend and unlend on the way change nothing. */
static void test_bits(int mode, int threads)
{
    ms_pool *pool = threads > 1 ? ms_pool_new(threads) : NULL;
    ms_io_files *files = NULL;
    ms_xstore *s = open_mapped(&files, xt_path("a.safetensors"), xt_path("b.safetensors"), mode, pool);
    if (!s) {
        ms_io_files_close(files);
        ms_pool_free(pool);
        return;
    }
    ms_experts ex = ms_xstore_iface(s), ref = ms_expert_table_iface(ref_table);
    uint64_t E = xt_bytes(LAT, INTER);
    int used[NK] = {0}, n_used = 0, bad_bits = 0, bad_stats = 0, bad_repeat = 0;
    int32_t ids[9 * 4], other[9 * 4];
    float z[9 * LAT], want[9 * 4 * LAT], got[9 * 4 * LAT];
    ms_xstore_stats prev, now;
    ms_xstore_get_stats(s, &prev);
    for (int call = 0; call < 40; call++) {
        int layer, k, lo, ko;
        int64_t n_rows, no;
        xt_random_routing(&lo, &no, &ko, other, z); /* a prediction, mostly wrong */
        xt_random_routing(&layer, &n_rows, &k, ids, z);
        if (call % 3 == 0) ex.prefetch(ex.ctx, lo, no, ko, other);
        if (call % 4 == 1) ex.begin(ex.ctx, layer, n_rows, k, ids);
        if (call == 10) ms_xstore_lend(s, 1);
        if (call == 20) ms_xstore_unlend(s);
        memset(got, 0xff, sizeof got);
        int rc = ex.compute(ex.ctx, layer, n_rows, z, k, ids, got);
        T_CHECK(rc == 0 && ref.compute(ref.ctx, layer, n_rows, z, k, ids, want) == 0, "compute: %s", ms_err_msg());
        if (rc != 0) break;
        size_t bytes = sizeof(float) * (size_t)(n_rows * k * LAT);
        bad_bits += memcmp(got, want, bytes) != 0;
        int nd = 0, first = 0, seen[NE] = {0};
        for (int64_t i = 0; i < n_rows * k; i++)
            if (!seen[ids[i]]++) {
                nd++;
                if (!used[layer * NE + ids[i]]++) first++, n_used++;
            }
        ms_xstore_get_stats(s, &now);
        bad_stats += now.misses - prev.misses != (uint64_t)first || now.hits - prev.hits != (uint64_t)(nd - first) ||
                     now.requests - prev.requests != (uint64_t)(n_rows * k) || now.bytes_read - prev.bytes_read > first * E ||
                     now.cache_bytes_used != n_used * E || now.cache_bytes_peak != n_used * E || now.evictions ||
                     now.prefetched;
        prev = now;
        memset(got, 0xff, sizeof got);
        rc = ex.compute(ex.ctx, layer, n_rows, z, k, ids, got);
        ms_xstore_get_stats(s, &now);
        bad_repeat += rc != 0 || memcmp(got, want, bytes) != 0 || now.misses != prev.misses ||
                      now.hits - prev.hits != (uint64_t)nd || now.bytes_read != prev.bytes_read;
        prev = now;
    }
    const char *what = mode == 0 ? "file A (contiguous)" : mode == 1 ? "file B (scattered)" : "A/B mixed";
    T_CHECK(bad_bits == 0, "mapped, %s, %d thread(s): %d calls differ from the table", what, threads, bad_bits);
    T_CHECK(bad_stats == 0, "mapped, %s, %d thread(s): %d calls with wrong counters", what, threads, bad_stats);
    T_CHECK(bad_repeat == 0, "mapped, %s, %d thread(s): %d repeated calls were not pure hits of the same bits", what,
            threads, bad_repeat);
    T_CHECK(n_used > NE / 2, "mapped, %s: %d experts used", what, n_used);
    ms_xstore_free(s);
    ms_io_files_close(files);
    ms_pool_free(pool);
}

/* A pack's checksums are checked at an expert's first use: a mismatch fails every call that uses
 * it (MS_EXIT_MODEL, naming the layer, the expert and the file), the others keep their bits. */
static void test_checksum(void)
{
    const int BAD = NE + 4;
    ms_io_files *files = NULL;
    ms_xstore *s = open_mapped(&files, xt_path("a.safetensors"), xt_path("b.safetensors"), 0, NULL);
    if (!s) {
        ms_io_files_close(files);
        return;
    }
    for (int key = 0; key < NK; key++) {
        ms_xloc loc;
        xt_make_loc(sts, key, 0, &loc);
        uint8_t all[65536], *q = all;
        for (int p = 0; p < 6; p++) q = (uint8_t *)memcpy(q, xt_part_bytes[key][p], xt_part_len[p]) + xt_part_len[p];
        loc.has_xxh3 = 1;
        loc.xxh3 = XXH3_64bits(all, (size_t)(q - all)) ^ (key == BAD);
        ms_xstore_set(s, key / NE, key % NE, &loc);
    }
    ms_experts ex = ms_xstore_iface(s), ref = ms_expert_table_iface(ref_table);
    float z[LAT], got[3 * LAT], want[3 * LAT];
    for (int i = 0; i < LAT; i++) z[i] = (float)(i % 7) * 0.25f - 0.5f;
    int32_t bad[1] = {4}, good[3] = {3, 5, 6};
    for (int rep = 0; rep < 2; rep++) {
        ms_err_clear();
        int rc = ex.compute(ex.ctx, 1, 1, z, 1, bad, got);
        T_CHECK(rc == -1 && ms_err_code() == MS_EXIT_MODEL && has(ms_err_msg(), "layer 1 expert 4") &&
                    has(ms_err_msg(), "checksum") && has(ms_err_msg(), "a.safetensors"),
                "mapped: a checksum mismatch fails (try %d): %s", rep + 1, ms_err_msg());
        rc = ex.compute(ex.ctx, 1, 1, z, 3, good, got);
        T_CHECK(rc == 0 && ref.compute(ref.ctx, 1, 1, z, 3, good, want) == 0 && !memcmp(got, want, sizeof want),
                "mapped: the layer's other experts keep their bits after it (%s)", ms_err_msg());
    }
    ms_xstore_free(s);
    ms_io_files_close(files);
}

/* A file cut short: an expert past its end at first use is an I/O error naming the file; one used
 * before and cut while mapped too (its pages read as zeros, which are never reported). */
static void test_cut(void)
{
    for (int when = 0; when < 2; when++) { /* 0: cut before any use, 1: after every expert was used */
        const char *c = xt_path("c.safetensors");
        size_t n = 0;
        char *bytes = ms_t_read_file(xt_path("a.safetensors"), &n);
        ms_t_write_file_n(c, bytes, n);
        free(bytes);
        ms_io_files *files = NULL;
        ms_xstore *s = open_mapped(&files, c, xt_path("b.safetensors"), 0, NULL);
        if (!s) {
            ms_io_files_close(files);
            return;
        }
        ms_experts ex = ms_xstore_iface(s);
        float z[LAT], got[NE * LAT];
        for (int i = 0; i < LAT; i++) z[i] = 0.125f * (float)(i % 5);
        int32_t all[NE];
        for (int e = 0; e < NE; e++) all[e] = e;
        if (when) T_CHECK(ex.compute(ex.ctx, NL - 1, 1, z, NE, all, got) == 0, "cut: first use: %s", ms_err_msg());
        T_CHECK(truncate(c, (off_t)(n / 2)) == 0, "cut %s", c);
        ms_err_clear();
        int rc = ex.compute(ex.ctx, NL - 1, 1, z, NE, all, got);
        T_CHECK(rc == -1 && ms_err_code() == MS_EXIT_IO && has(ms_err_msg(), "c.safetensors") &&
                    (has(ms_err_msg(), "past its end") || has(ms_err_msg(), "cut short")),
                "mapped, file cut %s: an I/O error naming it: %s", when ? "while in use" : "before use", ms_err_msg());
        ms_xstore_free(s);
        ms_io_files_close(files);
        unlink(c);
    }
}

int main(void)
{
    snprintf(xt_root, sizeof xt_root, "%s", ms_t_tmpdir("xstore-map"));
    if (xt_fixture(sts, &ref_table) != 0) return ms_t_done();
    for (int mode = 0; mode < 3; mode++) {
        test_bits(mode, 1);
        test_bits(mode, 2);
    }
    test_checksum();
    test_cut();
    xt_fixture_free(sts, ref_table);
    return ms_t_done();
}
