/* test_wload: what a worker serves (ms_wload): owned experts, its budget and I/O options, packs
 * with checksums, through the binary and the wire. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "ms_k3_cfg.h"
#include "ms_err.h"
#include "ms_expert.h"
#include "ms_pack.h"
#include "ms_shard.h"
#include "ms_size.h"
#include "ms_st.h"
#include "ms_synth.h"
#include "ms_clock.h"
#include "ms_test.h"
#include "ms_wtest.h"
#include "ms_wire.h"

#define EC(x) MOESTREAM__ERROR__CODE__##x

static void test_owned_budget_io(const char *fp)
{
    char copy[700], cmd[16384], ep[700];
    snprintf(copy, sizeof copy, "%s/copy", wt_root);
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", wt_model, copy);
    T_CHECK(system(cmd) == 0, "copy the model");
    snprintf(ep, sizeof ep, "ipc://%s/b.sock", wt_root);

    /* An impossible budget: exit 6 naming the minimum. */
    snprintf(cmd, sizeof cmd, "'%s' --model '%s' --listen '%s' --experts '*:0-3' --ram-budget 1M 2>&1", wt_wbin, copy, ep);
    char *out = NULL;
    int rc = ms_t_run(cmd, &out);
    const char *p = out ? strstr(out, "minimum that would work is about ") : NULL;
    const char *q = p ? strchr(p, '(') : NULL;
    unsigned long long need = q ? strtoull(q + 1, NULL, 10) : 0;
    T_CHECK(rc == 6 && need > (1u << 20), "--ram-budget 1M: exit 6 naming the minimum (rc %d: %s)", rc, out ? out : "");
    free(out);
    if (!need) need = 256ull << 20;
    snprintf(cmd, sizeof cmd, "'%s' --model '%s' --listen '%s' --mmap sometimes 2>&1", wt_wbin, copy, ep);
    rc = ms_t_run(cmd, &out);
    T_CHECK(rc == 2 && out && strstr(out, "--mmap takes auto or off"), "--mmap sometimes: a usage error (rc %d: %s)", rc,
            out ? out : "");
    free(out);

    /* The named minimum works. */
    char budget[32];
    snprintf(budget, sizeof budget, "%llu", need);
    worker w;
    const char *args[] = {"--model", copy, "--listen", ep, "--experts", "*:0-3", "--ram-budget", budget,
                          "--threads", "1", "--buffered-io", NULL};
    rc = wt_worker_start(&w, "b", args);
    T_CHECK(rc == 0, "a worker starts at the minimum budget it named (%s bytes; rc %d)", budget, rc);
    if (rc != 0) return;
    char owns[200];
    int n_moe = wt_cfg.n_layers - wt_cfg.first_dense;
    if (n_moe > 1)
        snprintf(owns, sizeof owns, "owns %d experts: layers %d-%d: 0-3\n", 4 * n_moe, wt_cfg.first_dense,
                 wt_cfg.n_layers - 1);
    else
        snprintf(owns, sizeof owns, "owns 4 experts: layer %d: 0-3\n", wt_cfg.first_dense);
    T_CHECK(wt_log_has(&w, owns), "its log says what it owns: %s", owns);
    void *s = wt_client(w.ep, NULL, NULL, NULL, ZMQ_DEALER);
    Moestream__Envelope *e = wt_hello(s, fp, 10000);
    int ok = e && e->body_case == MOESTREAM__ENVELOPE__BODY_HELLO_REPLY;
    T_CHECK(ok, "hello answered");
    if (ok) {
        const Moestream__HelloReply *h = e->hello_reply;
        int ranges_ok = h->n_owned == (size_t)(wt_cfg.n_layers - wt_cfg.first_dense);
        for (size_t i = 0; ranges_ok && i < h->n_owned; i++)
            ranges_ok = h->owned[i]->layer == (uint32_t)(wt_cfg.first_dense + (int)i) && h->owned[i]->expert_begin == 0 &&
                        h->owned[i]->expert_end == 4;
        T_CHECK(ranges_ok, "owns [0, 4) of every MoE layer (%zu ranges)", h->n_owned);
        T_CHECK(h->cache_capacity_bytes < need, "the cache (%llu) fits in the budget",
                (unsigned long long)h->cache_capacity_bytes);
    }
    ms_wire_free(e);
    T_CHECK(wt_good_request(s, (uint32_t)wt_cfg.first_dense, 0, 3, "owned experts"), "owned experts computed exactly");
    creq r;
    wt_creq_random(&r, 2, 3, 4, 0, 3);
    r.exp[3] = 5;
    wt_expect_error(s, &r, MS_WIRE_VERSION, EC(NOT_OWNED), "layer 2 expert 5", "an expert owned elsewhere");
    wt_creq_free(&r);
    /* Beyond the request limit of a minimum budget (a few MiB): refused, not computed. */
    wt_creq_random(&r, 2, 65536, 131072, 0, 3);
    wt_expect_error(s, &r, MS_WIRE_VERSION, EC(TOO_LARGE), "bytes", "a request beyond the budget's request limit");
    wt_creq_free(&r);
    /* A message larger than the limit is refused before it is decoded (uuid still quoted). */
    wt_creq_random(&r, 2, 140000, 1, 0, 3);
    wt_expect_error(s, &r, MS_WIRE_VERSION, EC(TOO_LARGE), "larger than", "a message beyond the request limit");
    wt_creq_free(&r);
    T_CHECK(wt_good_request(s, 3, 0, 3, "after TOO_LARGE"), "still serving after a refused large request");

    /* A request near the limit the worker announced is served, and the peak RSS stays within the
     * budget (the budget counts the request, its reply and the compute buffers). */
    char *text = ms_t_read_file(w.log, NULL);
    const char *lim = text ? strstr(text, "requests up to ") : NULL;
    double mib = lim ? strtod(lim + strlen("requests up to "), NULL) : 0;
    free(text);
    T_CHECK(mib > 1, "the start line gives the request limit (%.2f MiB)", mib);
    if (mib > 1) {
        size_t total = (size_t)(mib * 0.95 * 1048576.0) / ((size_t)wt_L * 4); /* rows + items */
        wt_creq_random(&r, 5, (uint32_t)(total / 3), total - total / 3, 0, 3);
        wt_creq_send(s, &r, MS_WIRE_VERSION);
        Moestream__Envelope *y = wt_recv_env(s, 30000);
        wt_check_reply(&r, y, "a request at 95% of the limit");
        ms_wire_free(y);
        wt_creq_free(&r);
        Moestream__StatsRequest sr = MOESTREAM__STATS_REQUEST__INIT;
        Moestream__Envelope x = MOESTREAM__ENVELOPE__INIT;
        x.body_case = MOESTREAM__ENVELOPE__BODY_STATS;
        x.stats = &sr;
        wt_send_env(s, &x);
        y = wt_recv_env(s, 10000);
#ifdef __SANITIZE_ADDRESS__
        /* Shadow memory and the quarantine of freed blocks are not the program's: the bound is
         * checked in the plain build. */
        ms_t_skip("AddressSanitizer build: the worker's peak RSS is not held to its budget");
        need = UINT64_MAX / 2;
#endif
        int is_stats = y && y->body_case == MOESTREAM__ENVELOPE__BODY_STATS_REPLY;
        unsigned long long peak = is_stats ? (unsigned long long)y->stats_reply->peak_rss_bytes : 0ull;
        T_CHECK(is_stats && peak > 0 && peak <= need, "peak RSS %llu within the budget %llu", peak, need);
        ms_wire_free(y);
    }

    /* A read that comes up short: the shard holding layer 4 expert 3 (never read yet) is cut. */
    char name[256];
    snprintf(name, sizeof name, "language_model.model.layers.4.block_sparse_moe.experts.3.w1.weight_packed");
    ms_st *cst = ms_st_open_dir(copy);
    const ms_st_tensor *t = cst ? ms_st_find(cst, name) : NULL;
    if (t) {
        char shard[4096];
        snprintf(shard, sizeof shard, "%s", ms_st_file_path(cst, t->file));
        uint64_t cut = t->offset;
        ms_st_close(cst);
        cst = NULL;
        T_CHECK(truncate(shard, (off_t)cut) == 0, "truncate %s", shard);
        wt_creq_random(&r, 4, 2, 2, 3, 3);
        const char *base = strrchr(shard, '/');
        wt_expect_error(s, &r, MS_WIRE_VERSION, EC(IO), base ? base + 1 : shard, "a short read");
        wt_creq_free(&r);
        T_CHECK(wt_good_request(s, 1, 0, 3, "after an I/O error"), "still serving after an I/O error");
    } else {
        T_CHECK(0, "tensor %s in the copy", name);
    }
    ms_st_close(cst);
    T_CHECK(wt_worker_stop(&w, 10, NULL) == 0, "worker B exits 0 on SIGTERM");
    zmq_close(s);
}

/* A worker serving a pack written by ms_pack_shard: exact results, and a flipped byte in its
 * experts.bin is a CHECKSUM error naming the expert. */
static void test_pack(const char *fp)
{
    char pack[700], wdir[800], ep[700];
    /* "checksum" in the path: an I/O error naming it must still be classed IO (not by its text) */
    snprintf(pack, sizeof pack, "%s/checksum-pack", wt_root);
    if (ms_pack_shard(wt_model, 2, 1, pack) != 0) {
        T_CHECK(0, "ms_pack_shard: %s", ms_err_msg());
        return;
    }
    snprintf(wdir, sizeof wdir, "%s/worker-1", pack);
    ms_pack pk;
    memset(&pk, 0, sizeof pk);
    if (ms_pack_open(wdir, &pk) != 0) {
        T_CHECK(0, "ms_pack_open: %s", ms_err_msg());
        return;
    }
    char cj[900];
    snprintf(cj, sizeof cj, "%s/config.json", wdir);
    T_CHECK(access(cj, F_OK) != 0, "the pack has no config.json: the worker serves it from the manifest alone");
    snprintf(ep, sizeof ep, "ipc://%s/p.sock", wt_root);
    const char *args[] = {"--pack", wdir, "--listen", ep, "--ram-budget", "256M", "--threads", "1", NULL};
    worker w;
    int rc = wt_worker_start(&w, "p", args);
    T_CHECK(rc == 0, "pack worker started (rc %d)", rc);
    if (rc != 0) {
        ms_pack_close(&pk);
        return;
    }
    void *s = wt_client(w.ep, NULL, NULL, NULL, ZMQ_DEALER);
    Moestream__Envelope *e = wt_hello(s, fp, 10000);
    int ok = e && e->body_case == MOESTREAM__ENVELOPE__BODY_HELLO_REPLY;
    T_CHECK(ok, "pack worker: hello with the model's fingerprint accepted (%s)",
            e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR ? e->error->message : "");
    if (ok) {
        const Moestream__HelloReply *h = e->hello_reply;
        int half = wt_cfg.n_experts / 2, ranges_ok = h->n_owned == (size_t)(wt_cfg.n_layers - wt_cfg.first_dense);
        for (size_t i = 0; ranges_ok && i < h->n_owned; i++)
            ranges_ok = h->owned[i]->expert_begin == (uint32_t)half &&
                        h->owned[i]->expert_end == (uint32_t)wt_cfg.n_experts;
        T_CHECK(ranges_ok, "pack worker 1 of 2 owns the upper half of each MoE layer");
        ms_xfmt got;
        char why[256], diff[256] = "";
        T_CHECK(ms_xfmt_from_proto(h->expert_format, &got, why, sizeof why) == 0 &&
                    !ms_xfmt_diff(&got, &wt_xfmt, diff, sizeof diff) && h->first_moe_layer == (uint32_t)wt_cfg.first_dense,
                "pack worker: the hello reply carries the config's expert format (%s)", diff);
    }
    ms_wire_free(e);
    int half = wt_cfg.n_experts / 2;
    T_CHECK(wt_good_request(s, 1, half, wt_cfg.n_experts - 1, "pack"), "pack experts computed exactly");
    T_CHECK(wt_good_request(s, 3, half, wt_cfg.n_experts - 1, "pack"), "pack experts computed exactly (layer 3)");
    /* Flip one byte of layer 5 expert `half` (not read yet). */
    const ms_pack_entry *en = NULL;
    for (size_t i = 0; i < pk.n; i++)
        if (pk.entries[i].layer == 5 && pk.entries[i].expert == half) en = &pk.entries[i];
    if (en) {
        FILE *f = fopen(pk.bin_path, "r+b");
        int c = EOF;
        if (f && fseek(f, (long)(en->offset + 100), SEEK_SET) == 0) c = fgetc(f);
        if (c != EOF && fseek(f, (long)(en->offset + 100), SEEK_SET) == 0) fputc(c ^ 0x10, f);
        if (f) fclose(f);
        T_CHECK(c != EOF, "corrupt a byte of %s", pk.bin_path);
        creq r;
        wt_creq_random(&r, 5, 2, 3, half, half);
        char needle[64];
        snprintf(needle, sizeof needle, "expert %d", half);
        wt_expect_error(s, &r, MS_WIRE_VERSION, EC(CHECKSUM), needle, "a corrupted expert in a pack");
        wt_creq_free(&r);
    } else {
        T_CHECK(0, "the pack has layer 5 expert %d", half);
    }
    T_CHECK(wt_good_request(s, 2, half, wt_cfg.n_experts - 1, "after CHECKSUM"), "still serving after a checksum error");
    /* A short read of an expert not read yet (layer 4 expert half + 1): IO, whatever the text says. */
    const ms_pack_entry *cut = NULL;
    for (size_t i = 0; i < pk.n; i++)
        if (pk.entries[i].layer == 4 && pk.entries[i].expert == half + 1) cut = &pk.entries[i];
    if (cut && truncate(pk.bin_path, (off_t)cut->offset) == 0) {
        creq r;
        wt_creq_random(&r, 4, 2, 2, half + 1, half + 1);
        wt_expect_error(s, &r, MS_WIRE_VERSION, EC(IO), "checksum-pack", "a short read in a pack whose path says checksum");
        wt_creq_free(&r);
    } else {
        T_CHECK(0, "cut the pack before layer 4 expert %d", half + 1);
    }
    creq r;
    wt_creq_random(&r, 2, 2, 2, 0, 0);
    wt_expect_error(s, &r, MS_WIRE_VERSION, EC(NOT_OWNED), "expert 0", "an expert of the other pack");
    wt_creq_free(&r);
    ms_pack_close(&pk);
    T_CHECK(wt_worker_stop(&w, 10, NULL) == 0, "pack worker exits 0");
    zmq_close(s);
}

int main(void)
{
    char fp[17];
    if (wt_setup("test-wload", fp) != 0) return ms_t_done();
    test_owned_budget_io(fp);
    test_pack(fp);
    wt_teardown();
    return ms_t_done();
}
