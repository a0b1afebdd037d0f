/* test_cachesim: trace reading, LRU / policy / Belady replay and the cache-sim command. */
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ms_cachesim.h"
#include "ms_err.h"
#include "ms_test.h"

static const char *tmp;

/* Write little-endian int32 pairs to tmp/name; returns the path (ms_t_path: 8 rotating buffers). */
static const char *write_trace(const char *name, const int32_t *v, size_t n_ints, size_t extra_bytes)
{
    const char *p = ms_t_path(tmp, name);
    FILE *f = fopen(p, "wb");
    for (size_t i = 0; i < n_ints; i++) {
        uint32_t u = (uint32_t)v[i];
        unsigned char b[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16), (unsigned char)(u >> 24)};
        fwrite(b, 1, 4, f);
    }
    for (size_t i = 0; i < extra_bytes; i++) fputc(0, f);
    fclose(f);
    return p;
}

/* Run the command with stdout and stderr captured (malloc'ed strings). */
static int run_cli(const char *const *args, char **out, char **err)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)"cache-sim";
    for (; args[argc - 1]; argc++) argv[argc] = (char *)args[argc - 1];
    argv[argc] = NULL;
    char po[4200], pe[4200];
    snprintf(po, sizeof po, "%s/stdout.txt", tmp);
    snprintf(pe, sizeof pe, "%s/stderr.txt", tmp);
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2);
    int fo = open(po, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(pe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fo, 1);
    dup2(fe, 2);
    close(fo);
    close(fe);
    int rc = ms_cli_cache_sim(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    char *o = ms_t_read_file(po, NULL), *e = ms_t_read_file(pe, NULL);
    if (out) *out = o;
    else free(o);
    if (err) *err = e;
    else free(e);
    return rc;
}

/* Keys k -> pairs (layer k / 10, expert k % 10). */
static ms_cachesim_trace *trace_of_keys(const int *keys, size_t n)
{
    int32_t *pairs = malloc(2 * n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) {
        pairs[2 * i] = keys[i] / 10;
        pairs[2 * i + 1] = keys[i] % 10;
    }
    ms_cachesim_trace *t = ms_cachesim_trace_from_pairs(pairs, n, "test");
    free(pairs);
    return t;
}

static uint64_t hits_of(const ms_cachesim_trace *t, ms_cachesim_kind kind, size_t slots)
{
    ms_cachesim_result r;
    T_CHECK(ms_cachesim_run(t, kind, slots, &r) == 0, "run");
    T_CHECK(r.hits + r.misses == t->n, "hits + misses = requests");
    T_CHECK(r.max_resident <= slots, "kind %d: %zu resident in %zu slots", (int)kind, r.max_resident, slots);
    return r.hits;
}

/* Hand-checked counts. */
static void test_known_counts(void)
{
    /* Keys 0..n cycled R times through n slots (n = 5, R = 7, 42 requests).
     * LRU: each key returns after the n other keys, so it was just evicted: 0 hits.
     * Belady: after the n cold misses, key n is requested with every resident key needed
     * before it again, so it is left out; it stays so at each return (its next use is
     * always after the residents' next uses), and keys 0..n-1 stay resident and hit
     * every time: hits = n * (R - 1) = 30 (only key n's R requests and the n cold misses
     * miss). */
    enum { N = 5, R = 7 };
    int cyc[(N + 1) * R];
    for (int i = 0; i < (N + 1) * R; i++) cyc[i] = i % (N + 1);
    ms_cachesim_trace *t = trace_of_keys(cyc, (N + 1) * R);
    T_CHECK(t && t->n == 42 && t->n_distinct == 6, "cyclic trace shape");
    T_CHECK(hits_of(t, MS_CACHESIM_LRU, N) == 0, "cyclic: LRU 0 hits");
    T_CHECK(hits_of(t, MS_CACHESIM_BELADY, N) == N * (R - 1), "cyclic: Belady n(R-1) = 30 hits");
    T_CHECK(hits_of(t, MS_CACHESIM_POLICY, N) <= N * (R - 1), "cyclic: policy <= Belady");
    /* With n+1 slots everything fits: all but the 6 cold misses hit, for every policy. */
    for (int k = 0; k < 3; k++) T_CHECK(hits_of(t, (ms_cachesim_kind)k, N + 1) == 42 - 6, "cyclic fits: kind %d", k);
    /* No slots: no hits. */
    for (int k = 0; k < 3; k++) T_CHECK(hits_of(t, (ms_cachesim_kind)k, 0) == 0, "0 slots: kind %d", k);
    ms_cachesim_trace_free(t);

    /* The textbook string (Silberschatz, Operating System Concepts, page replacement):
     * 7 0 1 2 0 3 0 4 2 3 0 3 2 1 2 0 1 7 0 1 with 3 frames: LRU 12 faults -> 8 hits.
     * Demand-paging OPT has 9 faults; ours may also leave the requested key out, which
     * saves the fault at the 4 (position 7, never used again: OPT-with-loading evicts
     * the 0 for it and faults on the 0 at position 10): 8 faults -> 12 hits. */
    int sil[] = {7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1};
    t = trace_of_keys(sil, 20);
    T_CHECK(hits_of(t, MS_CACHESIM_LRU, 3) == 8, "textbook: LRU 8 hits");
    T_CHECK(hits_of(t, MS_CACHESIM_BELADY, 3) == 12, "textbook: Belady 12 hits");
    ms_cachesim_trace_free(t);

    /* Y X Y, one slot: LRU 0 hits; leaving X out keeps Y: Belady 1 hit. */
    int yxy[] = {1, 2, 1};
    t = trace_of_keys(yxy, 3);
    T_CHECK(hits_of(t, MS_CACHESIM_LRU, 1) == 0, "YXY: LRU 0");
    T_CHECK(hits_of(t, MS_CACHESIM_BELADY, 1) == 1, "YXY: Belady 1");
    ms_cachesim_trace_free(t);
}

static ms_t_rng rng = {88172645463325252ull};
static uint32_t rnd(uint32_t n) { return ms_t_rng_below(&rng, n); }

/* Properties on random traces: Belady is an upper bound; LRU and Belady have the
 * inclusion property (more slots never lose a hit); capacity is never exceeded. */
static void test_random_properties(void)
{
    for (int trial = 0; trial < 6; trial++) {
        size_t n = 3000;
        int *keys = malloc(n * sizeof(int));
        for (size_t i = 0; i < n; i++) {
            uint32_t r = rnd(100);
            keys[i] = r < 50 ? (int)rnd(12) : r < 80 ? (int)(i % (20 + trial * 7)) : (int)rnd(120);
        }
        ms_cachesim_trace *t = trace_of_keys(keys, n);
        uint64_t prev_lru = 0, prev_bel = 0;
        size_t bad = 0;
        for (size_t s = 0; s <= 130; s += 3) {
            uint64_t l = hits_of(t, MS_CACHESIM_LRU, s), p = hits_of(t, MS_CACHESIM_POLICY, s),
                     b = hits_of(t, MS_CACHESIM_BELADY, s);
            if (b < l || b < p || l < prev_lru || b < prev_bel) bad++;
            if (s >= t->n_distinct && (l != n - t->n_distinct || p != l || b != l)) bad++;
            prev_lru = l;
            prev_bel = b;
        }
        T_CHECK(bad == 0, "trial %d: %zu property violations", trial, bad);
        ms_cachesim_trace_free(t);
        free(keys);
    }
}

/* Trace bookkeeping: distinct pairs, layers, passes, tokens. */
static void test_trace_shape(void)
{
    /* 3 tokens x layers 1, 2 x top-2 = 12 requests; some experts repeat. */
    int32_t pairs[] = {1, 4, 1, 5, 2, 4, 2, 6, 1, 4, 1, 7, 2, 4, 2, 8, 1, 9, 1, 4, 2, 6, 2, 4};
    ms_cachesim_trace *t = ms_cachesim_trace_from_pairs(pairs, 12, "shape");
    T_CHECK(t && t->n == 12, "12 requests");
    T_CHECK(t && t->n_distinct == 7, "distinct %zu, want 7: (1,4) (1,5) (1,7) (1,9) (2,4) (2,6) (2,8)",
            t ? t->n_distinct : 0);
    T_CHECK(t && t->n_layers == 2 && t->n_sweeps == 3, "2 layers, 3 passes");
    T_CHECK(t && fabs(ms_cachesim_tokens(t, 2) - 3.0) < 1e-12, "3 tokens");
    /* (1,4) and (2,4) are different experts; the same pair maps to the same key. */
    T_CHECK(t && t->keys[0] != t->keys[2] && t->keys[0] == t->keys[4] && t->keys[2] == t->keys[6], "keys by pair");
    ms_cachesim_trace_free(t);
}

static void test_bad_traces(void)
{
    int32_t good[] = {1, 2, 1, 3, 2, 5};
    const char *p = write_trace("trunc.trace", good, 3, 0); /* 12 bytes */
    ms_cachesim_trace *t = ms_cachesim_trace_read(p);
    T_CHECK(!t && ms_err_code() == MS_EXIT_INPUT && strstr(ms_err_msg(), p) && strstr(ms_err_msg(), "offset 8"),
            "12-byte trace refused naming file and offset: %s", ms_err_msg());
    int32_t neg_e[] = {1, 2, 1, -3, 2, 5};
    p = write_trace("nege.trace", neg_e, 6, 0);
    t = ms_cachesim_trace_read(p);
    T_CHECK(!t && ms_err_code() == MS_EXIT_INPUT && strstr(ms_err_msg(), p) && strstr(ms_err_msg(), "offset 12"),
            "negative expert refused at offset 12: %s", ms_err_msg());
    int32_t neg_l[] = {1, 2, 1, 3, -2, 5};
    p = write_trace("negl.trace", neg_l, 6, 0);
    t = ms_cachesim_trace_read(p);
    T_CHECK(!t && ms_err_code() == MS_EXIT_INPUT && strstr(ms_err_msg(), "offset 16"),
            "negative layer refused at offset 16: %s", ms_err_msg());
    p = write_trace("empty.trace", good, 0, 0);
    t = ms_cachesim_trace_read(p);
    T_CHECK(!t && ms_err_code() == MS_EXIT_INPUT && strstr(ms_err_msg(), p), "empty trace refused: %s", ms_err_msg());
    char missing[4200];
    snprintf(missing, sizeof missing, "%s/no-such.trace", tmp);
    t = ms_cachesim_trace_read(missing);
    T_CHECK(!t && ms_err_code() == MS_EXIT_IO && strstr(ms_err_msg(), missing), "missing trace: %s", ms_err_msg());
    t = ms_cachesim_trace_read(tmp); /* a directory */
    T_CHECK(!t && ms_err_code() == MS_EXIT_IO, "directory as trace: %s", ms_err_msg());
    p = write_trace("ok.trace", good, 6, 0);
    t = ms_cachesim_trace_read(p);
    T_CHECK(t && t->n == 3 && t->n_distinct == 3, "good trace reads");
    ms_cachesim_trace_free(t);
}

static void test_cli(void)
{
    int cyc[42];
    int32_t pairs[84];
    for (int i = 0; i < 42; i++) {
        cyc[i] = i % 6;
        pairs[2 * i] = 0;
        pairs[2 * i + 1] = cyc[i];
    }
    const char *p = write_trace("cyc.trace", pairs, 84, 0);
    char *out = NULL, *err = NULL;

    /* JSON: the cyclic trace of test_known_counts, one layer, top-1 (one request per token). */
    const char *a1[] = {"--trace", p, "--expert-bytes", "1000", "--slots", "5,6", "--top-k", "1", "--json", NULL};
    int rc = run_cli(a1, &out, NULL);
    json_error_t je;
    json_t *j = out ? json_loads(out, 0, &je) : NULL;
    T_CHECK(rc == 0 && j, "cache-sim --json: rc %d, output %s", rc, out ? out : "(none)");
    if (j) {
        T_CHECK(json_integer_value(json_object_get(j, "requests")) == 42, "requests");
        T_CHECK(json_integer_value(json_object_get(j, "distinct")) == 6, "distinct");
        json_t *rows = json_object_get(j, "rows");
        T_CHECK(json_array_size(rows) == 2, "2 rows");
        json_t *r0 = json_array_get(rows, 0), *r1 = json_array_get(rows, 1);
        T_CHECK(json_integer_value(json_object_get(r0, "slots")) == 5, "row 0: 5 slots");
        T_CHECK(json_real_value(json_object_get(r0, "lru_hit_rate")) == 0.0, "row 0: LRU 0");
        T_CHECK(fabs(json_real_value(json_object_get(r0, "belady_hit_rate")) - 30.0 / 42) < 1e-12, "row 0: Belady 30/42");
        double pr = json_real_value(json_object_get(r0, "policy_hit_rate"));
        T_CHECK(pr >= 0 && pr <= 30.0 / 42 + 1e-12, "row 0: policy within [0, Belady]");
        /* every request misses under LRU, one request per token: one expert read per token */
        T_CHECK(fabs(json_real_value(json_object_get(r0, "lru_bytes_per_token")) - 1000.0) < 1e-9, "LRU bytes/token");
        T_CHECK(json_integer_value(json_object_get(r1, "slots")) == 6, "row 1: 6 slots");
        const char *ks[] = {"lru_hit_rate", "policy_hit_rate", "belady_hit_rate"};
        for (int k = 0; k < 3; k++)
            T_CHECK(fabs(json_real_value(json_object_get(r1, ks[k])) - 36.0 / 42) < 1e-12, "row 1 %s: 36/42", ks[k]);
    }
    json_decref(j);
    free(out);

    /* --capacity: 5000 bytes and 6K over 1000-byte experts are 5 and 6 slots; 6KiB is 6. */
    const char *a2[] = {"--trace", p, "--expert-bytes", "1000", "--capacity", "5000,6K,6KiB,999", "--json", NULL};
    rc = run_cli(a2, &out, NULL);
    j = out ? json_loads(out, 0, &je) : NULL;
    T_CHECK(rc == 0 && j, "--capacity json");
    if (j) {
        json_t *rows = json_object_get(j, "rows");
        long long want[] = {5, 6, 6, 0};
        for (int i = 0; i < 4; i++)
            T_CHECK(json_integer_value(json_object_get(json_array_get(rows, (size_t)i), "slots")) == want[i],
                    "capacity row %d: %lld slots", i, want[i]);
    }
    json_decref(j);
    free(out);

    /* Text output. */
    const char *a3[] = {"--trace", p, "--expert-bytes", "1000", "--slots", "5", NULL};
    rc = run_cli(a3, &out, NULL);
    T_CHECK(rc == 0 && out && strstr(out, "LRU") && strstr(out, "Belady") && strstr(out, "42 requests"), "text: %s",
            out ? out : "");
    free(out);

    /* Errors and exit codes. */
    const char *h[] = {"--help", NULL};
    rc = run_cli(h, &out, NULL);
    T_CHECK(rc == 0 && out && strstr(out, "powers of 1000"), "--help documents the units");
    free(out);
    const char *u1[] = {"--expert-bytes", "1000", "--slots", "5", NULL};
    const char *u2[] = {"--trace", p, "--slots", "5", NULL};
    const char *u3[] = {"--trace", p, "--expert-bytes", "1000", NULL};
    const char *u4[] = {"--trace", p, "--expert-bytes", "1000", "--slots", "5", "--capacity", "5K", NULL};
    const char *u5[] = {"--trace", p, "--expert-bytes", "1000", "--capacity", "5X", NULL};
    const char *u6[] = {"--trace", p, "--expert-bytes", "0", "--slots", "5", NULL};
    const char *u7[] = {"--trace", p, "--expert-bytes", "1000", "--slots", "5,x", NULL};
    const char *u8[] = {"--trace", p, "--expert-bytes", "1000", "--slots", "5", "extra", NULL};
    const char *u9[] = {"--trace", p, "--expert-bytes", "1000", "--slots", "5", "--top-k", "0", NULL};
    const char *u10[] = {"--trace", p, "--expert-bytes", "1000", "--slots", "5", "--bogus", NULL};
    const char *const *usage[] = {u1, u2, u3, u4, u5, u6, u7, u8, u9, u10};
    for (int i = 0; i < 10; i++) T_CHECK(run_cli(usage[i], NULL, NULL) == 2, "usage error %d: exit 2", i + 1);

    char missing[4200];
    snprintf(missing, sizeof missing, "%s/missing.trace", tmp);
    const char *e1[] = {"--trace", missing, "--expert-bytes", "1000", "--slots", "5", NULL};
    rc = run_cli(e1, NULL, &err);
    T_CHECK(rc == 4 && err && strstr(err, missing), "missing trace: exit 4 naming it (%d, %s)", rc, err ? err : "");
    free(err);
    const char *bp = write_trace("bad.trace", pairs, 83, 0); /* 332 bytes */
    const char *e2[] = {"--trace", bp, "--expert-bytes", "1000", "--slots", "5", NULL};
    rc = run_cli(e2, NULL, &err);
    T_CHECK(rc == 5 && err && strstr(err, bp) && strstr(err, "offset 328"), "truncated trace: exit 5 (%d, %s)", rc,
            err ? err : "");
    free(err);
}

/* The shared K3 trace against the independent reference figures. */
static void test_shared_trace(void)
{
    const char *path = ms_t_shared("fixtures/traces/kimi-k3-93layer.trace");
    if (!path) return;
    ms_cachesim_trace *t = ms_cachesim_trace_read(path);
    T_CHECK(t != NULL, "read %s: %s", path, ms_err_msg());
    if (!t) return;
    T_CHECK(t->n == 100096, "requests %zu, want 100096", t->n);
    T_CHECK(t->n_distinct == 10010, "distinct %zu, want 10010", t->n_distinct);
    /* fixtures/README.md: GB of expert cache at 17,547,264 bytes per expert; the issue puts
     * 64 GB at 3,647 slots, so GB = 1e9 bytes. Rates are printed to 0.1%. */
    static const int gb[5] = {8, 16, 32, 64, 128};
    static const double lru_ref[5] = {0.362, 0.362, 0.362, 0.362, 0.492};
    static const double bel_ref[5] = {0.394, 0.426, 0.490, 0.617, 0.846};
    const uint64_t eb = 17547264;
    for (int i = 0; i < 5; i++) {
        size_t slots = (size_t)((uint64_t)gb[i] * 1000000000ull / eb);
        if (gb[i] == 64) T_CHECK(slots == 3647, "64 GB = 3647 slots");
        ms_cachesim_result r[3];
        for (int k = 0; k < 3; k++) {
            ms_cachesim_run(t, (ms_cachesim_kind)k, slots, &r[k]);
            T_CHECK(r[k].max_resident <= slots, "kind %d at %zu slots: capacity exceeded", k, slots);
        }
        double lru = (double)r[0].hits / t->n, pol = (double)r[1].hits / t->n, bel = (double)r[2].hits / t->n;
        printf("  %3d GB %5zu slots: LRU %.4f  policy %.4f  Belady %.4f\n", gb[i], slots, lru, pol, bel);
        T_CHECK(fabs(lru - lru_ref[i]) < 0.0006, "%d GB: LRU %.4f, reference %.3f", gb[i], lru, lru_ref[i]);
        T_CHECK(fabs(bel - bel_ref[i]) < 0.0006, "%d GB: Belady %.4f, reference %.3f", gb[i], bel, bel_ref[i]);
        T_CHECK(pol >= lru, "%d GB: policy %.4f below LRU %.4f", gb[i], pol, lru);
        T_CHECK(pol <= bel, "%d GB: policy %.4f above Belady %.4f", gb[i], pol, bel);
        if (gb[i] == 64) T_CHECK(pol >= 0.50, "64 GB: policy %.4f, target >= 0.50", pol);
    }
    ms_cachesim_trace_free(t);

    /* The command on the same trace, GB suffix as in the reference. */
    const char *a[] = {"--trace", path, "--expert-bytes", "17547264", "--capacity", "8GB,16GB,32GB,64GB,128GB", "--json", NULL};
    char *out = NULL;
    int rc = run_cli(a, &out, NULL);
    json_error_t je;
    json_t *j = out ? json_loads(out, 0, &je) : NULL;
    T_CHECK(rc == 0 && j, "cache-sim on the shared trace");
    if (j) {
        T_CHECK(json_integer_value(json_object_get(j, "requests")) == 100096, "json requests");
        T_CHECK(json_integer_value(json_object_get(j, "distinct")) == 10010, "json distinct");
        json_t *rows = json_object_get(j, "rows");
        T_CHECK(json_array_size(rows) == 5, "5 rows");
        for (size_t i = 0; i < 5 && i < json_array_size(rows); i++) {
            json_t *row = json_array_get(rows, i);
            T_CHECK(json_integer_value(json_object_get(row, "slots")) ==
                        (json_int_t)((uint64_t)gb[i] * 1000000000ull / eb),
                    "row %zu slots", i);
            T_CHECK(fabs(json_real_value(json_object_get(row, "lru_hit_rate")) - lru_ref[i]) < 0.0006, "row %zu LRU", i);
            T_CHECK(fabs(json_real_value(json_object_get(row, "belady_hit_rate")) - bel_ref[i]) < 0.0006,
                    "row %zu Belady", i);
        }
    }
    json_decref(j);
    free(out);
}

int main(void)
{
    static char tmpbuf[4096];
    snprintf(tmpbuf, sizeof tmpbuf, "%s", ms_t_tmpdir("cachesim"));
    tmp = tmpbuf;
    test_known_counts();
    test_random_properties();
    test_trace_shape();
    test_bad_traces();
    test_cli();
    test_shared_trace();
    return ms_t_done();
}
