/* test_worker: moestream-worker's server through its binary and the wire: hello, bit-exact
 * compute, bad input, CURVE allow-lists, oversized frames, the command line, SIGTERM. */
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
#include "ms_k3_experts.h"
#include "ms_wtest.h"
#include "ms_wire.h"

#define EC(x) MOESTREAM__ERROR__CODE__##x

/* ---- the checks ---- */

static void test_main_worker(const char *fp)
{
    worker w;
    char ep[700];
    snprintf(ep, sizeof ep, "ipc://%s/a.sock", wt_root);
    const char *args[] = {"--model", wt_model, "--listen", ep, "--ram-budget", "512M", "--threads", "2", NULL};
    int rc = wt_worker_start(&w, "a", args);
    T_CHECK(rc == 0 && !strcmp(w.ep, ep), "worker A started on %s (rc %d, endpoint '%s')", ep, rc, w.ep);
    if (rc != 0) return;
    T_CHECK(wt_log_has(&w, fp) && wt_log_has(&w, "owns 40 experts"), "the start line names the fingerprint and ownership");
    void *s = wt_client(w.ep, NULL, NULL, NULL, ZMQ_DEALER);

    /* Hello. */
    Moestream__Envelope *e = wt_hello(s, fp, 10000);
    T_CHECK(e && e->body_case == MOESTREAM__ENVELOPE__BODY_HELLO_REPLY, "hello answered with HelloReply");
    ms_uuid wid = {{0}};
    if (e && e->body_case == MOESTREAM__ENVELOPE__BODY_HELLO_REPLY) {
        const Moestream__HelloReply *h = e->hello_reply;
        memcpy(wid.b, h->worker_uuid.data, 16);
        T_CHECK(!strcmp(h->model_fingerprint, fp), "hello reply fingerprint %s", h->model_fingerprint);
        T_CHECK(h->latent_width == (uint32_t)wt_cfg.latent && h->num_layers == (uint32_t)wt_cfg.n_layers &&
                    h->num_experts == (uint32_t)wt_cfg.n_experts,
                "hello reply shape %u %u %u", h->latent_width, h->num_layers, h->num_experts);
        int ranges_ok = h->n_owned == (size_t)(wt_cfg.n_layers - wt_cfg.first_dense);
        for (size_t i = 0; ranges_ok && i < h->n_owned; i++)
            ranges_ok = h->owned[i]->layer == (uint32_t)(wt_cfg.first_dense + (int)i) && h->owned[i]->expert_begin == 0 &&
                        h->owned[i]->expert_end == (uint32_t)wt_cfg.n_experts;
        T_CHECK(ranges_ok, "owns [0, %d) of every MoE layer, one range each (%zu ranges)", wt_cfg.n_experts, h->n_owned);
        uint64_t LI = (uint64_t)wt_cfg.latent * (uint64_t)wt_cfg.moe_inter, eb = LI / 2 * 3 + LI / 32 * 3; /* MXFP4 */
        uint64_t n_all = (uint64_t)(wt_cfg.n_layers - wt_cfg.first_dense) * (uint64_t)wt_cfg.n_experts;
        T_CHECK(h->cache_capacity_bytes >= n_all * eb && h->cache_capacity_bytes <= (512ull << 20),
                "a 512 MiB budget caches all %llu experts within the budget (%llu bytes)", (unsigned long long)n_all,
                (unsigned long long)h->cache_capacity_bytes);
    }
    ms_wire_free(e);

    /* A hello from another model is refused, naming both fingerprints. */
    e = wt_hello(s, "0123456789abcdef", 10000);
    T_CHECK(e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR && e->error->code == EC(FINGERPRINT) &&
                strstr(e->error->message, "0123456789abcdef") && strstr(e->error->message, fp),
            "another fingerprint refused with FINGERPRINT naming both (%s)",
            e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR ? e->error->message : "?");
    ms_wire_free(e);

    /* A hello without an expert format, or with another one, is refused naming the field. */
    e = wt_hello_fmt(s, fp, NULL, 10000);
    T_CHECK(e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR && e->error->code == EC(FORMAT) &&
                strstr(e->error->message, "expert_format"),
            "a hello without an expert format refused with FORMAT (%s)",
            e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR ? e->error->message : "?");
    ms_wire_free(e);
    {
        ms_xfmt other = wt_xfmt;
        other.param[0] = wt_xfmt.param[0] + 1.0f;
        e = wt_hello_fmt(s, fp, &other, 10000);
        T_CHECK(e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR && e->error->code == EC(FORMAT) &&
                    strstr(e->error->message, "activation.b1"),
                "another SiTU constant refused with FORMAT naming activation.b1 (%s)",
                e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR ? e->error->message : "?");
        ms_wire_free(e);
        ms_k3_experts_fmt(wt_xfmt.latent, wt_xfmt.inter + 32, wt_xfmt.param[0], wt_xfmt.param[1], &other);
        e = wt_hello_fmt(s, fp, &other, 10000);
        T_CHECK(e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR && e->error->code == EC(FORMAT) &&
                    strstr(e->error->message, "inter"),
                "another inner width refused with FORMAT naming inter (%s)",
                e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR ? e->error->message : "?");
        ms_wire_free(e);
    }

    /* Exact compute on random requests: rows 1..9, repeated experts and rows. */
    int all_ok = 1;
    for (int i = 0; i < 12; i++) {
        uint32_t layer = (uint32_t)(wt_cfg.first_dense + (int)(wt_rnd() % (uint32_t)(wt_cfg.n_layers - wt_cfg.first_dense)));
        all_ok &= wt_good_request(s, layer, 0, wt_cfg.n_experts - 1, "random request");
    }
    T_CHECK(all_ok, "12 random requests bit-identical to in-process");

    /* Several requests in flight on one connection: answered in order. */
    {
        creq r[3];
        for (int i = 0; i < 3; i++) {
            wt_creq_random(&r[i], (uint32_t)(wt_cfg.first_dense + i), 4, 7, 0, wt_cfg.n_experts - 1);
            wt_creq_send(s, &r[i], MS_WIRE_VERSION);
        }
        for (int i = 0; i < 3; i++) {
            Moestream__Envelope *x = wt_recv_env(s, 20000);
            wt_check_reply(&r[i], x, "pipelined request");
            ms_wire_free(x);
            wt_creq_free(&r[i]);
        }
    }

    /* Bad input: each gets its error, never a crash. */
    static const char garbage[] = "\xff\xfe this is not a protobuf envelope \x01\x02\x03";
    ms_wire_free(wt_expect_raw_error(s, garbage, sizeof garbage, EC(BAD_MESSAGE), "garbage bytes"));
    ms_wire_free(wt_expect_raw_error(s, "", 0, EC(VERSION), "an empty frame (version 0)"));
    {
        Moestream__Envelope x = MOESTREAM__ENVELOPE__INIT; /* version 1, no body */
        uint8_t *buf;
        size_t len;
        ms_wire_pack(&x, &buf, &len);
        ms_wire_free(wt_expect_raw_error(s, buf, len, EC(BAD_MESSAGE), "an envelope without a body"));
        free(buf);
        Moestream__HelloReply hr = MOESTREAM__HELLO_REPLY__INIT;
        uint8_t u16[16] = {0};
        hr.worker_uuid.data = u16;
        hr.worker_uuid.len = 16;
        x.body_case = MOESTREAM__ENVELOPE__BODY_HELLO_REPLY;
        x.hello_reply = &hr;
        ms_wire_pack(&x, &buf, &len);
        ms_wire_free(wt_expect_raw_error(s, buf, len, EC(BAD_MESSAGE), "a HelloReply sent to a worker"));
        free(buf);
    }
    {
        /* Two frames in one message. */
        zmq_send(s, "a", 1, ZMQ_SNDMORE);
        zmq_send(s, "b", 1, 0);
        Moestream__Envelope *x = wt_recv_env(s, 10000);
        T_CHECK(x && x->body_case == MOESTREAM__ENVELOPE__BODY_ERROR && x->error->code == EC(BAD_MESSAGE) &&
                    strstr(x->error->message, "2 frames"),
                "a two-frame message gets BAD_MESSAGE");
        ms_wire_free(x);
    }
    creq r;
    uint32_t moe = (uint32_t)wt_cfg.first_dense + 1;
    wt_creq_random(&r, moe, 2, 3, 0, 3);
    wt_expect_error(s, &r, 2, EC(VERSION), "version 2 is not supported", "protocol version 2 (the one before)");
    wt_expect_error(s, &r, 4, EC(VERSION), "version 4 is not supported", "protocol version 4");
    r.n_act--; /* rows x width inconsistent with the activations */
    wt_expect_error(s, &r, MS_WIRE_VERSION, EC(BAD_MESSAGE), "activations", "activations do not match rows x width");
    r.n_act++;
    r.row[1] = 2; /* a row beyond rows */
    wt_expect_error(s, &r, MS_WIRE_VERSION, EC(BAD_MESSAGE), "row", "an item names a row beyond rows");
    r.row[1] = 1;
    r.layer = (uint32_t)wt_cfg.n_layers;
    wt_expect_error(s, &r, MS_WIRE_VERSION, EC(BAD_LAYER), "layer 6", "a layer beyond the model");
    r.layer = 0;
    wt_expect_error(s, &r, MS_WIRE_VERSION, EC(BAD_LAYER), "dense", "dense layer 0");
    r.layer = moe;
    r.exp[2] = (uint32_t)wt_cfg.n_experts;
    wt_expect_error(s, &r, MS_WIRE_VERSION, EC(NOT_OWNED), "expert 8", "an expert beyond the layer");
    r.exp[2] = 1;
    wt_creq_free(&r);
    /* Items must come grouped by expert: 1, 2, 1 is refused naming the item. */
    wt_creq_random(&r, moe, 2, 3, 0, 3);
    r.exp[0] = 1, r.exp[1] = 2, r.exp[2] = 1;
    wt_expect_error(s, &r, MS_WIRE_VERSION, EC(BAD_MESSAGE), "grouped by expert", "items not grouped by expert");
    wt_creq_free(&r);
    wt_creq_random(&r, moe, 2, 3, 0, 3);
    r.width = (uint32_t)wt_L * 2;
    r.rows = 1; /* the same floats as one row of twice the width */
    r.row[0] = r.row[1] = r.row[2] = 0;
    wt_expect_error(s, &r, MS_WIRE_VERSION, EC(BAD_WIDTH), "latent_width 64", "the wrong latent width");
    wt_creq_free(&r);
    wt_creq_random(&r, moe, 65537, 1, 0, 3);
    wt_expect_error(s, &r, MS_WIRE_VERSION, EC(TOO_LARGE), "65537 rows", "too many rows");
    wt_creq_free(&r);
    wt_creq_random(&r, moe, 1, 65, 0, 3);
    wt_expect_error(s, &r, MS_WIRE_VERSION, EC(TOO_LARGE), "65 items", "too many items per row");
    wt_creq_free(&r);
    T_CHECK(wt_good_request(s, moe, 0, wt_cfg.n_experts - 1, "after the bad input"), "the worker still serves exactly");

    /* Ping and stats. */
    {
        Moestream__Ping p = MOESTREAM__PING__INIT;
        p.sequence = 0x123456789ull;
        Moestream__Envelope x = MOESTREAM__ENVELOPE__INIT;
        x.body_case = MOESTREAM__ENVELOPE__BODY_PING;
        x.ping = &p;
        wt_send_env(s, &x);
        Moestream__Envelope *y = wt_recv_env(s, 10000);
        T_CHECK(y && y->body_case == MOESTREAM__ENVELOPE__BODY_PONG && y->pong->sequence == 0x123456789ull &&
                    y->pong->worker_uuid.len == 16 && !memcmp(y->pong->worker_uuid.data, wid.b, 16),
                "ping answered with the sequence and the worker uuid");
        ms_wire_free(y);
        Moestream__StatsRequest sr = MOESTREAM__STATS_REQUEST__INIT;
        x.body_case = MOESTREAM__ENVELOPE__BODY_STATS;
        x.stats = &sr;
        wt_send_env(s, &x);
        y = wt_recv_env(s, 10000);
        T_CHECK(y && y->body_case == MOESTREAM__ENVELOPE__BODY_STATS_REPLY, "stats answered");
        if (y && y->body_case == MOESTREAM__ENVELOPE__BODY_STATS_REPLY) {
            const Moestream__StatsReply *t = y->stats_reply;
            /* 12 random + 3 pipelined + 1 after: 16 served; 15 error replies so far. The budget
             * holds every expert, so they are mapped (--mmap auto) and bytes_read counts what the
             * page cache lacked at their first use: nothing when the files are in it. */
            T_CHECK(t->requests >= 16 && t->errors >= 15 && t->items > 0 && t->cache_misses > 0 &&
                        t->bytes_read <= t->cache_misses * ms_xfmt_expert_bytes(&wt_xfmt) && t->peak_rss_bytes > 0,
                    "stats: requests %llu errors %llu items %llu misses %llu read %llu peak %llu",
                    (unsigned long long)t->requests, (unsigned long long)t->errors, (unsigned long long)t->items,
                    (unsigned long long)t->cache_misses, (unsigned long long)t->bytes_read,
                    (unsigned long long)t->peak_rss_bytes);
            T_CHECK(t->cache_misses <= 40, "each expert is read once under a budget that holds them all (%llu)",
                    (unsigned long long)t->cache_misses);
        }
        ms_wire_free(y);
    }

    /* A REQ client (empty delimiter frame) is answered too. */
    {
        void *q = wt_client(w.ep, NULL, NULL, NULL, ZMQ_REQ);
        Moestream__Envelope *y = wt_hello(q, fp, 10000);
        T_CHECK(y && y->body_case == MOESTREAM__ENVELOPE__BODY_HELLO_REPLY, "a REQ client gets its HelloReply");
        ms_wire_free(y);
        zmq_close(q);
    }

    /* SIGTERM with a request in flight: it is answered (result or SHUTTING_DOWN), then exit 0. */
    wt_creq_random(&r, moe, 3, 6, 0, wt_cfg.n_experts - 1);
    wt_creq_send(s, &r, MS_WIRE_VERSION);
    double took = 0;
    int st_ = wt_worker_stop(&w, 10, &took);
    Moestream__Envelope *y = wt_recv_env(s, 3000);
    T_CHECK(y && (y->body_case == MOESTREAM__ENVELOPE__BODY_COMPUTE_REPLY ||
                  (y->body_case == MOESTREAM__ENVELOPE__BODY_ERROR && y->error->code == EC(SHUTTING_DOWN))),
            "the request in flight at SIGTERM is answered");
    if (y && y->body_case == MOESTREAM__ENVELOPE__BODY_COMPUTE_REPLY) wt_check_reply(&r, y, "request at SIGTERM");
    ms_wire_free(y);
    wt_creq_free(&r);
    T_CHECK(st_ == 0 && took < 5, "SIGTERM: exit 0 within 5 s (status %d after %.2f s)", st_, took);
    T_CHECK(wt_log_has(&w, "shut down on SIGTERM"), "the shutdown is logged");
    zmq_close(s);
}

/* A worker owning experts 0-3 of every MoE layer at its minimum budget, on a copy of the model
 * whose shards are then cut short. */
static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    chmod(path, 0600);
}

static void test_security(const char *fp)
{
    char spub[41], ssec[41], apub[41], asec[41], bpub[41], bsec[41];
    if (zmq_curve_keypair(spub, ssec) != 0) {
        ms_t_skip("libzmq without CURVE: %s", zmq_strerror(errno));
        return;
    }
    zmq_curve_keypair(apub, asec);
    zmq_curve_keypair(bpub, bsec);
    char secf[700], allowf[700], text[256];
    snprintf(secf, sizeof secf, "%s/worker.secret", wt_root);
    snprintf(allowf, sizeof allowf, "%s/allow.txt", wt_root);
    snprintf(text, sizeof text, "%s\n", ssec);
    write_text(secf, text);
    snprintf(text, sizeof text, "# the coordinator\n%s\n\n", apub);
    write_text(allowf, text);

    /* Plain tcp without --insecure is refused before anything loads. */
    char cmd[16384], *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' --model '%s' --listen tcp://127.0.0.1:0 2>&1", wt_wbin, wt_model);
    int rc = ms_t_run(cmd, &out);
    T_CHECK(rc == 2 && out && strstr(out, "--insecure") && strstr(out, "--curve-secret"),
            "plain tcp without --insecure: exit 2 naming the options (rc %d: %s)", rc, out ? out : "");
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' --model '%s' --listen tcp://127.0.0.1:0 --curve-secret '%s' 2>&1", wt_wbin, wt_model,
             secf);
    rc = ms_t_run(cmd, NULL);
    T_CHECK(rc == 2, "--curve-secret without --allow: exit 2 (rc %d)", rc);
    char badf[700];
    snprintf(badf, sizeof badf, "%s/bad.secret", wt_root);
    write_text(badf, "not-a-z85-key\n");
    snprintf(cmd, sizeof cmd, "'%s' --model '%s' --listen tcp://127.0.0.1:0 --curve-secret '%s' --allow '%s' 2>&1",
             wt_wbin, wt_model, badf, allowf);
    rc = ms_t_run(cmd, &out);
    T_CHECK(rc == 2 && out && strstr(out, "bad.secret line 1"),
            "a malformed secret key file: exit 2 naming it (rc %d: %s)", rc, out ? out : "");
    free(out);

    /* CURVE: the allowed key is served, another key gets no answer at all. */
    worker w;
    const char *args[] = {"--model", wt_model, "--listen", "tcp://127.0.0.1:*", "--curve-secret", secf, "--allow",
                          allowf, "--ram-budget", "256M", "--threads", "1", NULL};
    rc = wt_worker_start(&w, "curve", args);
    T_CHECK(rc == 0 && !strncmp(w.ep, "tcp://127.0.0.1:", 16) && strcmp(w.ep, "tcp://127.0.0.1:*"),
            "CURVE worker on a free port (%s, rc %d)", w.ep, rc);
    if (rc == 0) {
        T_CHECK(wt_log_has(&w, spub), "the worker logs its public key");
        void *a = wt_client(w.ep, spub, apub, asec, ZMQ_DEALER);
        Moestream__Envelope *e = wt_hello(a, fp, 10000);
        T_CHECK(e && e->body_case == MOESTREAM__ENVELOPE__BODY_HELLO_REPLY, "an allowed CURVE client is answered");
        ms_wire_free(e);
        T_CHECK(wt_good_request(a, 2, 0, wt_cfg.n_experts - 1, "over CURVE"), "compute over CURVE is exact");
        void *b = wt_client(w.ep, spub, bpub, bsec, ZMQ_DEALER);
        e = wt_hello(b, fp, 1000);
        T_CHECK(e == NULL, "a client whose key is not allowed gets no answer within 1 s");
        ms_wire_free(e);
        void *c = wt_client(w.ep, NULL, NULL, NULL, ZMQ_DEALER);
        e = wt_hello(c, fp, 500);
        T_CHECK(e == NULL, "a plain client gets no answer from a CURVE worker");
        ms_wire_free(e);
        T_CHECK(wt_log_has(&w, bpub), "the refused key is logged");
        zmq_close(b);
        zmq_close(c);
        T_CHECK(wt_worker_stop(&w, 10, NULL) == 0, "CURVE worker exits 0");
        zmq_close(a);
    }

    /* --insecure: plain tcp works. */
    const char *args3[] = {"--model", wt_model, "--listen", "tcp://127.0.0.1:*", "--insecure", "--ram-budget", "256M",
                           "--threads", "1", NULL};
    rc = wt_worker_start(&w, "insecure", args3);
    T_CHECK(rc == 0, "--insecure worker started (rc %d)", rc);
    if (rc == 0) {
        void *c = wt_client(w.ep, NULL, NULL, NULL, ZMQ_DEALER);
        Moestream__Envelope *e = wt_hello(c, fp, 10000);
        T_CHECK(e && e->body_case == MOESTREAM__ENVELOPE__BODY_HELLO_REPLY,
                "--insecure: a plain tcp client is answered");
        ms_wire_free(e);
        T_CHECK(wt_worker_stop(&w, 10, NULL) == 0, "insecure worker exits 0");
        zmq_close(c);
    }
}

static void test_cli(void)
{
    struct {
        const char *args;
        int rc;
        const char *needle;
    } cases[] = {
        {"--listen ipc:///nonexistent/x.sock", 2, "--model DIR or --pack DIR"},
        {"--model M --listen ipc://X --bogus", 2, "--bogus"},
        {"--model M", 2, "--listen"},
        {"--model M --listen ipc://X --experts 0:*", 2, "dense"},
        {"--model M --listen ipc://X --experts 1:0-8", 2, "expert 8"},
        {"--model M --listen ipc://X --experts 9:0", 2, "layer 9"},
        {"--model M --listen ipc://X --experts 1-", 2, "no ':'"},
        {"--model M --listen ipc://X --ram-budget 12Q", 2, "12Q"},
        {"--model M --listen inproc://x", 2, "tcp://"},
        {"--model M/nope --listen ipc://X", 4, "nope"},
    };
    char sock[700];
    snprintf(sock, sizeof sock, "%s/cli.sock", wt_root);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[2048], cmd[16384], *out = NULL;
        /* M = the model, X = a socket path */
        size_t at = 0;
        for (const char *p = cases[i].args; *p && at < sizeof args - 1; p++) {
            if (*p == 'M' && (p[1] == ' ' || p[1] == '/' || !p[1]))
                at += (size_t)snprintf(args + at, sizeof args - at, "%s", wt_model);
            else if (*p == 'X' && (p[1] == ' ' || !p[1]))
                at += (size_t)snprintf(args + at, sizeof args - at, "%s", sock);
            else
                args[at++] = *p;
            if (at >= sizeof args) at = sizeof args - 1;
        }
        args[at] = 0;
        snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", wt_wbin, args);
        int rc = ms_t_run(cmd, &out);
        T_CHECK(rc == cases[i].rc && out && strstr(out, cases[i].needle), "'%s': exit %d naming '%s' (got %d: %s)",
                cases[i].args, cases[i].rc, cases[i].needle, rc, out ? out : "");
        free(out);
    }
    char cmd[4200], *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' --help", wt_wbin);
    T_CHECK(ms_t_run(cmd, &out) == 0 && out && strstr(out, "--experts"), "--help prints the usage on stdout");
    free(out);
}

static void *flood_buf; /* freed after zmq_ctx_term: the io threads may still read it until then */

/* VmHWM of a process, in bytes (0 if unknown). */
static uint64_t peak_rss(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    uint64_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = strtoull(line + 6, NULL, 10);
    if (f) fclose(f);
    return kb * 1024;
}

/* Issue 12, defect 3: three clients each send a 150 MB frame to a worker with --ram-budget
 * 128M. The transport drops them before buffering (ZMQ_MAXMSGSIZE = MS_WIRE_MAX_MSG); the
 * worker stays up and its peak RSS stays within its budget. */
static void test_oversized_flood(const char *fp)
{
    char ep[700];
    snprintf(ep, sizeof ep, "ipc://%s/flood.sock", wt_root);
    const char *args[] = {"--model", wt_model, "--listen", ep, "--ram-budget", "128M", "--threads", "1", NULL};
    worker w;
    int rc = wt_worker_start(&w, "flood", args);
    T_CHECK(rc == 0, "worker at --ram-budget 128M starts (rc %d)", rc);
    if (rc != 0) return;
    const size_t big = 150u * 1000 * 1000;
    void *zeros = flood_buf = calloc(1, big); /* never written: the clients send untouched zero pages */
    void *c[3];
    for (int i = 0; i < 3; i++) {
        c[i] = wt_client(w.ep, NULL, NULL, NULL, ZMQ_DEALER);
        zmq_msg_t m;
        zmq_msg_init_data(&m, zeros, big, NULL, NULL); /* zero copy: the buffer outlives the sockets */
        T_CHECK(zmq_msg_send(&m, c[i], 0) == (int)big, "client %d queued its 150 MB frame", i);
    }
    /* Let the frames flow (and be dropped) for a while; the worker must stay up meanwhile. */
    uint64_t peak = 0;
    for (int t = 0; t < 30; t++) {
        ms_t_sleep_ms(100);
        uint64_t p = peak_rss(w.pid);
        if (p > peak) peak = p;
    }
    int st_;
    T_CHECK(waitpid(w.pid, &st_, WNOHANG) == 0, "the worker is still running");
    void *s = wt_client(w.ep, NULL, NULL, NULL, ZMQ_DEALER);
    Moestream__Envelope *e = wt_hello(s, fp, 10000);
    T_CHECK(e && e->body_case == MOESTREAM__ENVELOPE__BODY_HELLO_REPLY, "the worker still answers a hello");
    ms_wire_free(e);
    T_CHECK(wt_good_request(s, (uint32_t)wt_cfg.first_dense, 0, 7, "after the flood"), "and computes exactly");
    uint64_t p = peak_rss(w.pid);
    if (p > peak) peak = p;
    T_CHECK(peak > 0 && peak <= (128ull << 20), "peak RSS %.1f MiB within the 128 MiB budget under the flood",
            (double)peak / 1048576.0);
    zmq_close(s);
    for (int i = 0; i < 3; i++) zmq_close(c[i]);
    wt_worker_stop(&w, 10, NULL);
}

int main(void)
{
    char fp[17];
    if (wt_setup("test-worker", fp) != 0) return ms_t_done();
    test_cli();
    test_main_worker(fp);
    test_security(fp);
    test_oversized_flood(fp);
    wt_teardown();
    free(flood_buf);
    return ms_t_done();
}
