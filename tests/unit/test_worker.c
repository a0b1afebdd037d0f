/* test_worker: moestream-worker through its binary and the wire: hello, bit-exact compute, bad
 * input, budgets, packs and checksums, CURVE allow-lists, SIGTERM. */
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

#include "ms_cfg.h"
#include "ms_err.h"
#include "ms_expert.h"
#include "ms_pack.h"
#include "ms_shard.h"
#include "ms_size.h"
#include "ms_st.h"
#include "ms_synth.h"
#include "ms_clock.h"
#include "ms_test.h"
#include "ms_wire.h"

#define EC(x) MOESTREAM__ERROR__CODE__##x

static char root[512], model[600], wbin[4096];
static void *zctx;
static ms_cfg cfg;
static ms_st *st;
static ms_expert_table *table;
static int L;

static ms_t_rng rng = {0x2545f4914f6cdd1dull};
static uint32_t rnd(void) { return (uint32_t)(ms_t_rng_u64(&rng) >> 16); }

/* ---- worker processes (ms_t_worker) ---- */

typedef ms_t_worker worker;

/* Start the worker binary with args (NULL-terminated), stderr to root/<name>.log; wait for its
 * "listening on" line (the bound endpoint lands in w->ep). Returns 0, or the exit status if it
 * ended first (-1 on a timeout). */
static int worker_start(worker *w, const char *name, const char **args)
{
    char log[700];
    snprintf(log, sizeof log, "%s/%s.log", root, name);
    const char *argv[40];
    int n = 0;
    argv[n++] = wbin;
    for (int i = 0; args[i] && n < 39; i++) argv[n++] = args[i];
    argv[n] = NULL;
    ms_t_worker_opts o = {log, NULL, NULL, 30};
    return ms_t_worker_start(w, argv, &o);
}

static int worker_stop(worker *w, double limit_s, double *took) { return ms_t_worker_stop(w, limit_s, took); }
static int log_has(const worker *w, const char *needle) { return ms_t_worker_log_has(w, needle); }

/* ---- a raw ZeroMQ client ---- */

static void *client(const char *ep, const char *server_pub, const char *pub, const char *sec, int type)
{
    void *s = zmq_socket(zctx, type);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    if (server_pub) {
        zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, server_pub, 40);
        zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, 40);
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, sec, 40);
    }
    if (zmq_connect(s, ep) != 0) fprintf(stderr, "connect %s: %s\n", ep, zmq_strerror(errno));
    return s;
}

static void send_raw(void *s, const void *buf, size_t len) { zmq_send(s, buf, len, 0); }

static void send_env(void *s, Moestream__Envelope *e)
{
    uint8_t *buf;
    size_t len;
    ms_wire_pack(e, &buf, &len);
    send_raw(s, buf, len);
    free(buf);
}

/* The next reply, decoded and validated, or NULL after timeout_ms. */
static Moestream__Envelope *recv_env(void *s, int timeout_ms)
{
    zmq_pollitem_t it = {s, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, timeout_ms) <= 0) return NULL;
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, s, 0) < 0) return NULL;
    char why[256];
    int code;
    Moestream__Envelope *e = ms_wire_unpack(zmq_msg_data(&m), zmq_msg_size(&m), why, sizeof why, &code);
    if (!e) fprintf(stderr, "reply does not decode: %s\n", why);
    T_CHECK(!zmq_msg_more(&m), "a reply is one frame");
    zmq_msg_close(&m);
    return e;
}

static ms_xfmt xfmt; /* the model's expert format, as a coordinator presents it */

static Moestream__Envelope *hello_fmt(void *s, const char *fp, const ms_xfmt *f, int timeout_ms)
{
    ms_uuid u;
    ms_uuid_new(&u);
    Moestream__Hello h = MOESTREAM__HELLO__INIT;
    h.client_uuid.data = u.b;
    h.client_uuid.len = 16;
    h.model_fingerprint = (char *)fp;
    ms_xfmt_pb keep;
    if (f) h.expert_format = ms_xfmt_to_proto(f, &keep);
    Moestream__Envelope e = MOESTREAM__ENVELOPE__INIT;
    e.body_case = MOESTREAM__ENVELOPE__BODY_HELLO;
    e.hello = &h;
    send_env(s, &e);
    return recv_env(s, timeout_ms);
}

static Moestream__Envelope *hello(void *s, const char *fp, int timeout_ms) { return hello_fmt(s, fp, &xfmt, timeout_ms); }

typedef struct {
    uint32_t layer, rows, width;
    size_t n_act;   /* floats sent (normally rows x width) */
    float *act;
    size_t n;
    uint32_t *row, *exp;
    ms_uuid id;
} creq;

/* Group r's items by expert (stable), as the protocol requires. */
static void creq_group(creq *r)
{
    for (size_t i = 1; i < r->n; i++)
        for (size_t j = i; j > 0 && r->exp[j - 1] > r->exp[j]; j--) {
            uint32_t t = r->exp[j];
            r->exp[j] = r->exp[j - 1];
            r->exp[j - 1] = t;
            t = r->row[j];
            r->row[j] = r->row[j - 1];
            r->row[j - 1] = t;
        }
}

/* Random request of `rows` rows on layer with experts drawn from [e0, e1], items grouped by expert. */
static void creq_random(creq *r, uint32_t layer, uint32_t rows, size_t n, int e0, int e1)
{
    memset(r, 0, sizeof *r);
    r->layer = layer;
    r->rows = rows;
    r->width = (uint32_t)L;
    r->n_act = (size_t)rows * (size_t)L;
    r->act = malloc(sizeof(float) * (r->n_act ? r->n_act : 1));
    for (size_t i = 0; i < r->n_act; i++) r->act[i] = ((float)(rnd() % 20001) - 10000.0f) / 2500.0f;
    r->n = n;
    r->row = malloc(sizeof(uint32_t) * (n ? n : 1));
    r->exp = malloc(sizeof(uint32_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        r->row[i] = rnd() % rows;
        r->exp[i] = (uint32_t)(e0 + (int)(rnd() % (uint32_t)(e1 - e0 + 1)));
    }
    creq_group(r);
    ms_uuid_new(&r->id);
}

static void creq_free(creq *r)
{
    free(r->act);
    free(r->row);
    free(r->exp);
}

static void creq_send(void *s, creq *r, uint32_t version)
{
    Moestream__ComputeRequest c = MOESTREAM__COMPUTE_REQUEST__INIT;
    c.request_uuid.data = r->id.b;
    c.request_uuid.len = 16;
    c.layer = r->layer;
    c.rows = r->rows;
    c.latent_width = r->width;
    c.n_activations = r->n_act;
    c.activations = r->act;
    c.n_item_row = r->n;
    c.item_row = r->row;
    c.n_item_expert = r->n;
    c.item_expert = r->exp;
    Moestream__Envelope e = MOESTREAM__ENVELOPE__INIT;
    e.body_case = MOESTREAM__ENVELOPE__BODY_COMPUTE;
    e.compute = &c;
    if (version == MS_WIRE_VERSION) {
        send_env(s, &e);
        return;
    }
    e.protocol_version = version; /* ms_wire_pack would set the right one */
    size_t len = moestream__envelope__get_packed_size(&e);
    uint8_t *buf = malloc(len);
    moestream__envelope__pack(&e, buf);
    send_raw(s, buf, len);
    free(buf);
}

/* Expected outputs of r: each item through the in-process expert table, one row at a time. */
static int check_reply(const creq *r, Moestream__Envelope *e, const char *what)
{
    if (!e || e->body_case != MOESTREAM__ENVELOPE__BODY_COMPUTE_REPLY) {
        T_CHECK(0, "%s: expected a ComputeReply, got %s%s", what, !e ? "nothing" : "another message",
                e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR ? e->error->message : "");
        return 0;
    }
    const Moestream__ComputeReply *c = e->compute_reply;
    T_CHECK(c->request_uuid.len == 16 && !memcmp(c->request_uuid.data, r->id.b, 16), "%s: request uuid echoed", what);
    T_CHECK(c->items == r->n && c->latent_width == (uint32_t)L, "%s: %u items of width %u", what, c->items,
            c->latent_width);
    if (c->items != r->n) return 0;
    ms_experts ex = ms_expert_table_iface(table);
    float *want = malloc(sizeof(float) * (size_t)L);
    size_t bad = 0;
    for (size_t i = 0; i < r->n; i++) {
        int32_t id = (int32_t)r->exp[i];
        MS_ASSERT(ex.compute(ex.ctx, (int)r->layer, 1, r->act + (size_t)r->row[i] * (size_t)L, 1, &id, want) == 0);
        if (memcmp(want, c->outputs + i * (size_t)L, sizeof(float) * (size_t)L)) bad++;
    }
    free(want);
    T_CHECK(bad == 0, "%s: %zu of %zu items differ from the in-process expert table", what, bad, r->n);
    return bad == 0;
}

/* Send r, expect an Error with code carrying r's uuid (and needle in its text); returns 1 if so. */
static int expect_error(void *s, creq *r, uint32_t version, int code, const char *needle, const char *what)
{
    creq_send(s, r, version);
    Moestream__Envelope *e = recv_env(s, 10000);
    int ok = e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR && (int)e->error->code == code;
    T_CHECK(ok, "%s: expected Error %d, got %s %d (%s)", what, code, !e ? "nothing" : "body", e ? (int)e->body_case : 0,
            e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR ? e->error->message : "");
    if (ok) {
        T_CHECK(e->error->request_uuid.len == 16 && !memcmp(e->error->request_uuid.data, r->id.b, 16),
                "%s: the error carries the request uuid", what);
        if (needle)
            T_CHECK(strstr(e->error->message, needle) != NULL, "%s: message '%s' names '%s'", what, e->error->message,
                    needle);
    }
    ms_wire_free(e);
    return ok;
}

static Moestream__Envelope *expect_raw_error(void *s, const void *buf, size_t len, int code, const char *what)
{
    send_raw(s, buf, len);
    Moestream__Envelope *e = recv_env(s, 10000);
    T_CHECK(e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR && (int)e->error->code == code,
            "%s: expected Error %d, got %s", what, code,
            !e ? "nothing" : e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR ? e->error->message : "another body");
    return e;
}

/* A good random request on layer, experts [e0, e1]; returns 1 if the reply is exact. */
static int good_request(void *s, uint32_t layer, int e0, int e1, const char *what)
{
    creq r;
    uint32_t rows = 1 + rnd() % 9;
    size_t n = 1 + rnd() % (3 * rows);
    creq_random(&r, layer, rows, n, e0, e1);
    if (n > 2) r.exp[n - 1] = r.exp[0], r.row[n - 1] = r.row[0]; /* a repeated (row, expert) pair */
    creq_group(&r);
    creq_send(s, &r, MS_WIRE_VERSION);
    Moestream__Envelope *e = recv_env(s, 20000);
    int ok = check_reply(&r, e, what);
    ms_wire_free(e);
    creq_free(&r);
    return ok;
}

/* ---- reference: the checkpoint's experts in an in-process table ---- */

static int load_reference(void)
{
    char path[700];
    snprintf(path, sizeof path, "%s/config.json", model);
    if (ms_cfg_load(path, &cfg) != 0) return -1;
    st = ms_st_open_dir(model);
    if (!st) return -1;
    L = cfg.latent;
    if (ms_xfmt_from_cfg(&cfg, path, &xfmt) != 0) return -1;
    table = ms_expert_table_new(cfg.n_layers, cfg.n_experts, cfg.latent, cfg.situ_b1, cfg.situ_b2, NULL);
    static const char *wn[3] = {"w1", "w2", "w3"};
    for (int l = cfg.first_dense; l < cfg.n_layers; l++)
        for (int e = 0; e < cfg.n_experts; e++) {
            ms_mat m[3];
            for (int j = 0; j < 3; j++) {
                char n1[256], n2[256];
                const char *pfx = "language_model.model.layers";
                snprintf(n1, sizeof n1, "%s.%d.block_sparse_moe.experts.%d.%s.weight_packed", pfx, l, e, wn[j]);
                snprintf(n2, sizeof n2, "%s.%d.block_sparse_moe.experts.%d.%s.weight_scale", pfx, l, e, wn[j]);
                const ms_st_tensor *tp = ms_st_find(st, n1), *ts = ms_st_find(st, n2);
                if (!tp || !ts) return -1;
                int64_t rows = j == 1 ? cfg.latent : cfg.moe_inter, cols = j == 1 ? cfg.moe_inter : cfg.latent;
                m[j] = (ms_mat){MS_WT_MXFP4, rows, cols, ms_t_st_bytes(st, tp), ms_t_st_bytes(st, ts), NULL, NULL};
            }
            ms_expert_w w = {m[0], m[1], m[2]};
            ms_expert_table_set(table, l, e, &w);
        }
    return 0;
}

/* ---- the checks ---- */

static void test_main_worker(const char *fp)
{
    worker w;
    char ep[700];
    snprintf(ep, sizeof ep, "ipc://%s/a.sock", root);
    const char *args[] = {"--model", model, "--listen", ep, "--ram-budget", "512M", "--threads", "2", NULL};
    int rc = worker_start(&w, "a", args);
    T_CHECK(rc == 0 && !strcmp(w.ep, ep), "worker A started on %s (rc %d, endpoint '%s')", ep, rc, w.ep);
    if (rc != 0) return;
    T_CHECK(log_has(&w, fp) && log_has(&w, "owns 40 experts"), "the start line names the fingerprint and ownership");
    void *s = client(w.ep, NULL, NULL, NULL, ZMQ_DEALER);

    /* Hello. */
    Moestream__Envelope *e = hello(s, fp, 10000);
    T_CHECK(e && e->body_case == MOESTREAM__ENVELOPE__BODY_HELLO_REPLY, "hello answered with HelloReply");
    ms_uuid wid = {{0}};
    if (e && e->body_case == MOESTREAM__ENVELOPE__BODY_HELLO_REPLY) {
        const Moestream__HelloReply *h = e->hello_reply;
        memcpy(wid.b, h->worker_uuid.data, 16);
        T_CHECK(!strcmp(h->model_fingerprint, fp), "hello reply fingerprint %s", h->model_fingerprint);
        T_CHECK(h->latent_width == (uint32_t)cfg.latent && h->num_layers == (uint32_t)cfg.n_layers &&
                    h->num_experts == (uint32_t)cfg.n_experts,
                "hello reply shape %u %u %u", h->latent_width, h->num_layers, h->num_experts);
        int ranges_ok = h->n_owned == (size_t)(cfg.n_layers - cfg.first_dense);
        for (size_t i = 0; ranges_ok && i < h->n_owned; i++)
            ranges_ok = h->owned[i]->layer == (uint32_t)(cfg.first_dense + (int)i) && h->owned[i]->expert_begin == 0 &&
                        h->owned[i]->expert_end == (uint32_t)cfg.n_experts;
        T_CHECK(ranges_ok, "owns [0, %d) of every MoE layer, one range each (%zu ranges)", cfg.n_experts, h->n_owned);
        uint64_t LI = (uint64_t)cfg.latent * (uint64_t)cfg.moe_inter, eb = LI / 2 * 3 + LI / 32 * 3; /* MXFP4 */
        uint64_t n_all = (uint64_t)(cfg.n_layers - cfg.first_dense) * (uint64_t)cfg.n_experts;
        T_CHECK(h->cache_capacity_bytes >= n_all * eb && h->cache_capacity_bytes <= (512ull << 20),
                "a 512 MiB budget caches all %llu experts within the budget (%llu bytes)", (unsigned long long)n_all,
                (unsigned long long)h->cache_capacity_bytes);
    }
    ms_wire_free(e);

    /* A hello from another model is refused, naming both fingerprints. */
    e = hello(s, "0123456789abcdef", 10000);
    T_CHECK(e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR && e->error->code == EC(FINGERPRINT) &&
                strstr(e->error->message, "0123456789abcdef") && strstr(e->error->message, fp),
            "another fingerprint refused with FINGERPRINT naming both (%s)",
            e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR ? e->error->message : "?");
    ms_wire_free(e);

    /* A hello without an expert format, or with another one, is refused naming the field. */
    e = hello_fmt(s, fp, NULL, 10000);
    T_CHECK(e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR && e->error->code == EC(FORMAT) &&
                strstr(e->error->message, "expert_format"),
            "a hello without an expert format refused with FORMAT (%s)",
            e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR ? e->error->message : "?");
    ms_wire_free(e);
    {
        ms_xfmt other = xfmt;
        other.b1 = xfmt.b1 + 1.0f;
        e = hello_fmt(s, fp, &other, 10000);
        T_CHECK(e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR && e->error->code == EC(FORMAT) &&
                    strstr(e->error->message, "activation.b1"),
                "another SiTU constant refused with FORMAT naming activation.b1 (%s)",
                e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR ? e->error->message : "?");
        ms_wire_free(e);
        ms_xfmt_k3(xfmt.latent, xfmt.inter + 32, xfmt.b1, xfmt.b2, &other);
        e = hello_fmt(s, fp, &other, 10000);
        T_CHECK(e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR && e->error->code == EC(FORMAT) &&
                    strstr(e->error->message, "inter"),
                "another inner width refused with FORMAT naming inter (%s)",
                e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR ? e->error->message : "?");
        ms_wire_free(e);
    }

    /* Exact compute on random requests: rows 1..9, repeated experts and rows. */
    int all_ok = 1;
    for (int i = 0; i < 12; i++) {
        uint32_t layer = (uint32_t)(cfg.first_dense + (int)(rnd() % (uint32_t)(cfg.n_layers - cfg.first_dense)));
        all_ok &= good_request(s, layer, 0, cfg.n_experts - 1, "random request");
    }
    T_CHECK(all_ok, "12 random requests bit-identical to in-process");

    /* Several requests in flight on one connection: answered in order. */
    {
        creq r[3];
        for (int i = 0; i < 3; i++) {
            creq_random(&r[i], (uint32_t)(cfg.first_dense + i), 4, 7, 0, cfg.n_experts - 1);
            creq_send(s, &r[i], MS_WIRE_VERSION);
        }
        for (int i = 0; i < 3; i++) {
            Moestream__Envelope *x = recv_env(s, 20000);
            check_reply(&r[i], x, "pipelined request");
            ms_wire_free(x);
            creq_free(&r[i]);
        }
    }

    /* Bad input: each gets its error, never a crash. */
    static const char garbage[] = "\xff\xfe this is not a protobuf envelope \x01\x02\x03";
    ms_wire_free(expect_raw_error(s, garbage, sizeof garbage, EC(BAD_MESSAGE), "garbage bytes"));
    ms_wire_free(expect_raw_error(s, "", 0, EC(VERSION), "an empty frame (version 0)"));
    {
        Moestream__Envelope x = MOESTREAM__ENVELOPE__INIT; /* version 1, no body */
        uint8_t *buf;
        size_t len;
        ms_wire_pack(&x, &buf, &len);
        ms_wire_free(expect_raw_error(s, buf, len, EC(BAD_MESSAGE), "an envelope without a body"));
        free(buf);
        Moestream__HelloReply hr = MOESTREAM__HELLO_REPLY__INIT;
        uint8_t u16[16] = {0};
        hr.worker_uuid.data = u16;
        hr.worker_uuid.len = 16;
        x.body_case = MOESTREAM__ENVELOPE__BODY_HELLO_REPLY;
        x.hello_reply = &hr;
        ms_wire_pack(&x, &buf, &len);
        ms_wire_free(expect_raw_error(s, buf, len, EC(BAD_MESSAGE), "a HelloReply sent to a worker"));
        free(buf);
    }
    {
        /* Two frames in one message. */
        zmq_send(s, "a", 1, ZMQ_SNDMORE);
        zmq_send(s, "b", 1, 0);
        Moestream__Envelope *x = recv_env(s, 10000);
        T_CHECK(x && x->body_case == MOESTREAM__ENVELOPE__BODY_ERROR && x->error->code == EC(BAD_MESSAGE) &&
                    strstr(x->error->message, "2 frames"),
                "a two-frame message gets BAD_MESSAGE");
        ms_wire_free(x);
    }
    creq r;
    uint32_t moe = (uint32_t)cfg.first_dense + 1;
    creq_random(&r, moe, 2, 3, 0, 3);
    expect_error(s, &r, 1, EC(VERSION), "version 1 is not supported", "protocol version 1 (the one before)");
    expect_error(s, &r, 3, EC(VERSION), "version 3 is not supported", "protocol version 3");
    r.n_act--; /* rows x width inconsistent with the activations */
    expect_error(s, &r, MS_WIRE_VERSION, EC(BAD_MESSAGE), "activations", "activations do not match rows x width");
    r.n_act++;
    r.row[1] = 2; /* a row beyond rows */
    expect_error(s, &r, MS_WIRE_VERSION, EC(BAD_MESSAGE), "row", "an item names a row beyond rows");
    r.row[1] = 1;
    r.layer = (uint32_t)cfg.n_layers;
    expect_error(s, &r, MS_WIRE_VERSION, EC(BAD_LAYER), "layer 6", "a layer beyond the model");
    r.layer = 0;
    expect_error(s, &r, MS_WIRE_VERSION, EC(BAD_LAYER), "dense", "dense layer 0");
    r.layer = moe;
    r.exp[2] = (uint32_t)cfg.n_experts;
    expect_error(s, &r, MS_WIRE_VERSION, EC(NOT_OWNED), "expert 8", "an expert beyond the layer");
    r.exp[2] = 1;
    creq_free(&r);
    /* Items must come grouped by expert: 1, 2, 1 is refused naming the item. */
    creq_random(&r, moe, 2, 3, 0, 3);
    r.exp[0] = 1, r.exp[1] = 2, r.exp[2] = 1;
    expect_error(s, &r, MS_WIRE_VERSION, EC(BAD_MESSAGE), "grouped by expert", "items not grouped by expert");
    creq_free(&r);
    creq_random(&r, moe, 2, 3, 0, 3);
    r.width = (uint32_t)L * 2;
    r.rows = 1; /* the same floats as one row of twice the width */
    r.row[0] = r.row[1] = r.row[2] = 0;
    expect_error(s, &r, MS_WIRE_VERSION, EC(BAD_WIDTH), "latent_width 64", "the wrong latent width");
    creq_free(&r);
    creq_random(&r, moe, 65537, 1, 0, 3);
    expect_error(s, &r, MS_WIRE_VERSION, EC(TOO_LARGE), "65537 rows", "too many rows");
    creq_free(&r);
    creq_random(&r, moe, 1, 65, 0, 3);
    expect_error(s, &r, MS_WIRE_VERSION, EC(TOO_LARGE), "65 items", "too many items per row");
    creq_free(&r);
    T_CHECK(good_request(s, moe, 0, cfg.n_experts - 1, "after the bad input"), "the worker still serves exactly");

    /* Ping and stats. */
    {
        Moestream__Ping p = MOESTREAM__PING__INIT;
        p.sequence = 0x123456789ull;
        Moestream__Envelope x = MOESTREAM__ENVELOPE__INIT;
        x.body_case = MOESTREAM__ENVELOPE__BODY_PING;
        x.ping = &p;
        send_env(s, &x);
        Moestream__Envelope *y = recv_env(s, 10000);
        T_CHECK(y && y->body_case == MOESTREAM__ENVELOPE__BODY_PONG && y->pong->sequence == 0x123456789ull &&
                    y->pong->worker_uuid.len == 16 && !memcmp(y->pong->worker_uuid.data, wid.b, 16),
                "ping answered with the sequence and the worker uuid");
        ms_wire_free(y);
        Moestream__StatsRequest sr = MOESTREAM__STATS_REQUEST__INIT;
        x.body_case = MOESTREAM__ENVELOPE__BODY_STATS;
        x.stats = &sr;
        send_env(s, &x);
        y = recv_env(s, 10000);
        T_CHECK(y && y->body_case == MOESTREAM__ENVELOPE__BODY_STATS_REPLY, "stats answered");
        if (y && y->body_case == MOESTREAM__ENVELOPE__BODY_STATS_REPLY) {
            const Moestream__StatsReply *t = y->stats_reply;
            /* 12 random + 3 pipelined + 1 after: 16 served; 15 error replies so far. */
            T_CHECK(t->requests >= 16 && t->errors >= 15 && t->items > 0 && t->cache_misses > 0 &&
                        t->bytes_read > 0 && t->peak_rss_bytes > 0,
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
        void *q = client(w.ep, NULL, NULL, NULL, ZMQ_REQ);
        Moestream__Envelope *y = hello(q, fp, 10000);
        T_CHECK(y && y->body_case == MOESTREAM__ENVELOPE__BODY_HELLO_REPLY, "a REQ client gets its HelloReply");
        ms_wire_free(y);
        zmq_close(q);
    }

    /* SIGTERM with a request in flight: it is answered (result or SHUTTING_DOWN), then exit 0. */
    creq_random(&r, moe, 3, 6, 0, cfg.n_experts - 1);
    creq_send(s, &r, MS_WIRE_VERSION);
    double took = 0;
    int st_ = worker_stop(&w, 10, &took);
    Moestream__Envelope *y = recv_env(s, 3000);
    T_CHECK(y && (y->body_case == MOESTREAM__ENVELOPE__BODY_COMPUTE_REPLY ||
                  (y->body_case == MOESTREAM__ENVELOPE__BODY_ERROR && y->error->code == EC(SHUTTING_DOWN))),
            "the request in flight at SIGTERM is answered");
    if (y && y->body_case == MOESTREAM__ENVELOPE__BODY_COMPUTE_REPLY) check_reply(&r, y, "request at SIGTERM");
    ms_wire_free(y);
    creq_free(&r);
    T_CHECK(st_ == 0 && took < 5, "SIGTERM: exit 0 within 5 s (status %d after %.2f s)", st_, took);
    T_CHECK(log_has(&w, "shut down on SIGTERM"), "the shutdown is logged");
    zmq_close(s);
}

/* A worker owning experts 0-3 of every MoE layer at its minimum budget, on a copy of the model
 * whose shards are then cut short. */
static void test_owned_budget_io(const char *fp)
{
    char copy[700], cmd[16384], ep[700];
    snprintf(copy, sizeof copy, "%s/copy", root);
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", model, copy);
    T_CHECK(system(cmd) == 0, "copy the model");
    snprintf(ep, sizeof ep, "ipc://%s/b.sock", root);

    /* An impossible budget: exit 6 naming the minimum. */
    snprintf(cmd, sizeof cmd, "'%s' --model '%s' --listen '%s' --experts '*:0-3' --ram-budget 1M 2>&1", wbin, copy, ep);
    char *out = NULL;
    int rc = ms_t_run(cmd, &out);
    const char *p = out ? strstr(out, "minimum that would work is about ") : NULL;
    const char *q = p ? strchr(p, '(') : NULL;
    unsigned long long need = q ? strtoull(q + 1, NULL, 10) : 0;
    T_CHECK(rc == 6 && need > (1u << 20), "--ram-budget 1M: exit 6 naming the minimum (rc %d: %s)", rc, out ? out : "");
    free(out);
    if (!need) need = 256ull << 20;

    /* The named minimum works. */
    char budget[32];
    snprintf(budget, sizeof budget, "%llu", need);
    worker w;
    const char *args[] = {"--model", copy, "--listen", ep, "--experts", "*:0-3", "--ram-budget", budget,
                          "--threads", "1", "--buffered-io", NULL};
    rc = worker_start(&w, "b", args);
    T_CHECK(rc == 0, "a worker starts at the minimum budget it named (%s bytes; rc %d)", budget, rc);
    if (rc != 0) return;
    void *s = client(w.ep, NULL, NULL, NULL, ZMQ_DEALER);
    Moestream__Envelope *e = hello(s, fp, 10000);
    int ok = e && e->body_case == MOESTREAM__ENVELOPE__BODY_HELLO_REPLY;
    T_CHECK(ok, "hello answered");
    if (ok) {
        const Moestream__HelloReply *h = e->hello_reply;
        int ranges_ok = h->n_owned == (size_t)(cfg.n_layers - cfg.first_dense);
        for (size_t i = 0; ranges_ok && i < h->n_owned; i++)
            ranges_ok = h->owned[i]->layer == (uint32_t)(cfg.first_dense + (int)i) && h->owned[i]->expert_begin == 0 &&
                        h->owned[i]->expert_end == 4;
        T_CHECK(ranges_ok, "owns [0, 4) of every MoE layer (%zu ranges)", h->n_owned);
        T_CHECK(h->cache_capacity_bytes < need, "the cache (%llu) fits in the budget",
                (unsigned long long)h->cache_capacity_bytes);
    }
    ms_wire_free(e);
    T_CHECK(good_request(s, (uint32_t)cfg.first_dense, 0, 3, "owned experts"), "owned experts computed exactly");
    creq r;
    creq_random(&r, 2, 3, 4, 0, 3);
    r.exp[3] = 5;
    expect_error(s, &r, MS_WIRE_VERSION, EC(NOT_OWNED), "layer 2 expert 5", "an expert owned elsewhere");
    creq_free(&r);
    /* Beyond the request limit of a minimum budget (a few MiB): refused, not computed. */
    creq_random(&r, 2, 65536, 131072, 0, 3);
    expect_error(s, &r, MS_WIRE_VERSION, EC(TOO_LARGE), "bytes", "a request beyond the budget's request limit");
    creq_free(&r);
    /* A message larger than the limit is refused before it is decoded (uuid still quoted). */
    creq_random(&r, 2, 140000, 1, 0, 3);
    expect_error(s, &r, MS_WIRE_VERSION, EC(TOO_LARGE), "larger than", "a message beyond the request limit");
    creq_free(&r);
    T_CHECK(good_request(s, 3, 0, 3, "after TOO_LARGE"), "still serving after a refused large request");

    /* A request near the limit the worker announced is served, and the peak RSS stays within the
     * budget (the budget counts the request, its reply and the compute buffers). */
    char *text = ms_t_read_file(w.log, NULL);
    const char *lim = text ? strstr(text, "requests up to ") : NULL;
    double mib = lim ? strtod(lim + strlen("requests up to "), NULL) : 0;
    free(text);
    T_CHECK(mib > 1, "the start line gives the request limit (%.2f MiB)", mib);
    if (mib > 1) {
        size_t total = (size_t)(mib * 0.95 * 1048576.0) / ((size_t)L * 4); /* rows + items */
        creq_random(&r, 5, (uint32_t)(total / 3), total - total / 3, 0, 3);
        creq_send(s, &r, MS_WIRE_VERSION);
        Moestream__Envelope *y = recv_env(s, 30000);
        check_reply(&r, y, "a request at 95% of the limit");
        ms_wire_free(y);
        creq_free(&r);
        Moestream__StatsRequest sr = MOESTREAM__STATS_REQUEST__INIT;
        Moestream__Envelope x = MOESTREAM__ENVELOPE__INIT;
        x.body_case = MOESTREAM__ENVELOPE__BODY_STATS;
        x.stats = &sr;
        send_env(s, &x);
        y = recv_env(s, 10000);
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
        creq_random(&r, 4, 2, 2, 3, 3);
        const char *base = strrchr(shard, '/');
        expect_error(s, &r, MS_WIRE_VERSION, EC(IO), base ? base + 1 : shard, "a short read");
        creq_free(&r);
        T_CHECK(good_request(s, 1, 0, 3, "after an I/O error"), "still serving after an I/O error");
    } else {
        T_CHECK(0, "tensor %s in the copy", name);
    }
    ms_st_close(cst);
    T_CHECK(worker_stop(&w, 10, NULL) == 0, "worker B exits 0 on SIGTERM");
    zmq_close(s);
}

/* A worker serving a pack written by ms_pack_shard: exact results, and a flipped byte in its
 * experts.bin is a CHECKSUM error naming the expert. */
static void test_pack(const char *fp)
{
    char pack[700], wdir[800], ep[700];
    /* "checksum" in the path: an I/O error naming it must still be classed IO (not by its text) */
    snprintf(pack, sizeof pack, "%s/checksum-pack", root);
    if (ms_pack_shard(model, 2, 1, pack) != 0) {
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
    snprintf(ep, sizeof ep, "ipc://%s/p.sock", root);
    const char *args[] = {"--pack", wdir, "--listen", ep, "--ram-budget", "256M", "--threads", "1", NULL};
    worker w;
    int rc = worker_start(&w, "p", args);
    T_CHECK(rc == 0, "pack worker started (rc %d)", rc);
    if (rc != 0) {
        ms_pack_close(&pk);
        return;
    }
    void *s = client(w.ep, NULL, NULL, NULL, ZMQ_DEALER);
    Moestream__Envelope *e = hello(s, fp, 10000);
    int ok = e && e->body_case == MOESTREAM__ENVELOPE__BODY_HELLO_REPLY;
    T_CHECK(ok, "pack worker: hello with the model's fingerprint accepted (%s)",
            e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR ? e->error->message : "");
    if (ok) {
        const Moestream__HelloReply *h = e->hello_reply;
        int half = cfg.n_experts / 2, ranges_ok = h->n_owned == (size_t)(cfg.n_layers - cfg.first_dense);
        for (size_t i = 0; ranges_ok && i < h->n_owned; i++)
            ranges_ok = h->owned[i]->expert_begin == (uint32_t)half &&
                        h->owned[i]->expert_end == (uint32_t)cfg.n_experts;
        T_CHECK(ranges_ok, "pack worker 1 of 2 owns the upper half of each MoE layer");
        ms_xfmt got;
        char why[256], diff[256] = "";
        T_CHECK(ms_xfmt_from_proto(h->expert_format, &got, why, sizeof why) == 0 &&
                    !ms_xfmt_diff(&got, &xfmt, diff, sizeof diff) && h->first_moe_layer == (uint32_t)cfg.first_dense,
                "pack worker: the hello reply carries the config's expert format (%s)", diff);
    }
    ms_wire_free(e);
    int half = cfg.n_experts / 2;
    T_CHECK(good_request(s, 1, half, cfg.n_experts - 1, "pack"), "pack experts computed exactly");
    T_CHECK(good_request(s, 3, half, cfg.n_experts - 1, "pack"), "pack experts computed exactly (layer 3)");
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
        creq_random(&r, 5, 2, 3, half, half);
        char needle[64];
        snprintf(needle, sizeof needle, "expert %d", half);
        expect_error(s, &r, MS_WIRE_VERSION, EC(CHECKSUM), needle, "a corrupted expert in a pack");
        creq_free(&r);
    } else {
        T_CHECK(0, "the pack has layer 5 expert %d", half);
    }
    T_CHECK(good_request(s, 2, half, cfg.n_experts - 1, "after CHECKSUM"), "still serving after a checksum error");
    /* A short read of an expert not read yet (layer 4 expert half + 1): IO, whatever the text says. */
    const ms_pack_entry *cut = NULL;
    for (size_t i = 0; i < pk.n; i++)
        if (pk.entries[i].layer == 4 && pk.entries[i].expert == half + 1) cut = &pk.entries[i];
    if (cut && truncate(pk.bin_path, (off_t)cut->offset) == 0) {
        creq r;
        creq_random(&r, 4, 2, 2, half + 1, half + 1);
        expect_error(s, &r, MS_WIRE_VERSION, EC(IO), "checksum-pack", "a short read in a pack whose path says checksum");
        creq_free(&r);
    } else {
        T_CHECK(0, "cut the pack before layer 4 expert %d", half + 1);
    }
    creq r;
    creq_random(&r, 2, 2, 2, 0, 0);
    expect_error(s, &r, MS_WIRE_VERSION, EC(NOT_OWNED), "expert 0", "an expert of the other pack");
    creq_free(&r);
    ms_pack_close(&pk);
    T_CHECK(worker_stop(&w, 10, NULL) == 0, "pack worker exits 0");
    zmq_close(s);
}

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
    snprintf(secf, sizeof secf, "%s/worker.secret", root);
    snprintf(allowf, sizeof allowf, "%s/allow.txt", root);
    snprintf(text, sizeof text, "%s\n", ssec);
    write_text(secf, text);
    snprintf(text, sizeof text, "# the coordinator\n%s\n\n", apub);
    write_text(allowf, text);

    /* Plain tcp without --insecure is refused before anything loads. */
    char cmd[16384], *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' --model '%s' --listen tcp://127.0.0.1:0 2>&1", wbin, model);
    int rc = ms_t_run(cmd, &out);
    T_CHECK(rc == 2 && out && strstr(out, "--insecure") && strstr(out, "--curve-secret"),
            "plain tcp without --insecure: exit 2 naming the options (rc %d: %s)", rc, out ? out : "");
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' --model '%s' --listen tcp://127.0.0.1:0 --curve-secret '%s' 2>&1", wbin, model,
             secf);
    rc = ms_t_run(cmd, NULL);
    T_CHECK(rc == 2, "--curve-secret without --allow: exit 2 (rc %d)", rc);
    char badf[700];
    snprintf(badf, sizeof badf, "%s/bad.secret", root);
    write_text(badf, "not-a-z85-key\n");
    snprintf(cmd, sizeof cmd, "'%s' --model '%s' --listen tcp://127.0.0.1:0 --curve-secret '%s' --allow '%s' 2>&1",
             wbin, model, badf, allowf);
    rc = ms_t_run(cmd, &out);
    T_CHECK(rc == 2 && out && strstr(out, "bad.secret line 1"),
            "a malformed secret key file: exit 2 naming it (rc %d: %s)", rc, out ? out : "");
    free(out);

    /* CURVE: the allowed key is served, another key gets no answer at all. */
    worker w;
    const char *args[] = {"--model", model, "--listen", "tcp://127.0.0.1:*", "--curve-secret", secf, "--allow",
                          allowf, "--ram-budget", "256M", "--threads", "1", NULL};
    rc = worker_start(&w, "curve", args);
    T_CHECK(rc == 0 && !strncmp(w.ep, "tcp://127.0.0.1:", 16) && strcmp(w.ep, "tcp://127.0.0.1:*"),
            "CURVE worker on a free port (%s, rc %d)", w.ep, rc);
    if (rc == 0) {
        T_CHECK(log_has(&w, spub), "the worker logs its public key");
        void *a = client(w.ep, spub, apub, asec, ZMQ_DEALER);
        Moestream__Envelope *e = hello(a, fp, 10000);
        T_CHECK(e && e->body_case == MOESTREAM__ENVELOPE__BODY_HELLO_REPLY, "an allowed CURVE client is answered");
        ms_wire_free(e);
        T_CHECK(good_request(a, 2, 0, cfg.n_experts - 1, "over CURVE"), "compute over CURVE is exact");
        void *b = client(w.ep, spub, bpub, bsec, ZMQ_DEALER);
        e = hello(b, fp, 1000);
        T_CHECK(e == NULL, "a client whose key is not allowed gets no answer within 1 s");
        ms_wire_free(e);
        void *c = client(w.ep, NULL, NULL, NULL, ZMQ_DEALER);
        e = hello(c, fp, 500);
        T_CHECK(e == NULL, "a plain client gets no answer from a CURVE worker");
        ms_wire_free(e);
        T_CHECK(log_has(&w, bpub), "the refused key is logged");
        zmq_close(b);
        zmq_close(c);
        T_CHECK(worker_stop(&w, 10, NULL) == 0, "CURVE worker exits 0");
        zmq_close(a);
    }

    /* --insecure: plain tcp works. */
    const char *args3[] = {"--model", model, "--listen", "tcp://127.0.0.1:*", "--insecure", "--ram-budget", "256M",
                           "--threads", "1", NULL};
    rc = worker_start(&w, "insecure", args3);
    T_CHECK(rc == 0, "--insecure worker started (rc %d)", rc);
    if (rc == 0) {
        void *c = client(w.ep, NULL, NULL, NULL, ZMQ_DEALER);
        Moestream__Envelope *e = hello(c, fp, 10000);
        T_CHECK(e && e->body_case == MOESTREAM__ENVELOPE__BODY_HELLO_REPLY,
                "--insecure: a plain tcp client is answered");
        ms_wire_free(e);
        T_CHECK(worker_stop(&w, 10, NULL) == 0, "insecure worker exits 0");
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
    snprintf(sock, sizeof sock, "%s/cli.sock", root);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[2048], cmd[16384], *out = NULL;
        /* M = the model, X = a socket path */
        size_t at = 0;
        for (const char *p = cases[i].args; *p && at < sizeof args - 1; p++) {
            if (*p == 'M' && (p[1] == ' ' || p[1] == '/' || !p[1]))
                at += (size_t)snprintf(args + at, sizeof args - at, "%s", model);
            else if (*p == 'X' && (p[1] == ' ' || !p[1]))
                at += (size_t)snprintf(args + at, sizeof args - at, "%s", sock);
            else
                args[at++] = *p;
            if (at >= sizeof args) at = sizeof args - 1;
        }
        args[at] = 0;
        snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", wbin, args);
        int rc = ms_t_run(cmd, &out);
        T_CHECK(rc == cases[i].rc && out && strstr(out, cases[i].needle), "'%s': exit %d naming '%s' (got %d: %s)",
                cases[i].args, cases[i].rc, cases[i].needle, rc, out ? out : "");
        free(out);
    }
    char cmd[4200], *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' --help", wbin);
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
    snprintf(ep, sizeof ep, "ipc://%s/flood.sock", root);
    const char *args[] = {"--model", model, "--listen", ep, "--ram-budget", "128M", "--threads", "1", NULL};
    worker w;
    int rc = worker_start(&w, "flood", args);
    T_CHECK(rc == 0, "worker at --ram-budget 128M starts (rc %d)", rc);
    if (rc != 0) return;
    const size_t big = 150u * 1000 * 1000;
    void *zeros = flood_buf = calloc(1, big); /* never written: the clients send untouched zero pages */
    void *c[3];
    for (int i = 0; i < 3; i++) {
        c[i] = client(w.ep, NULL, NULL, NULL, ZMQ_DEALER);
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
    void *s = client(w.ep, NULL, NULL, NULL, ZMQ_DEALER);
    Moestream__Envelope *e = hello(s, fp, 10000);
    T_CHECK(e && e->body_case == MOESTREAM__ENVELOPE__BODY_HELLO_REPLY, "the worker still answers a hello");
    ms_wire_free(e);
    T_CHECK(good_request(s, (uint32_t)cfg.first_dense, 0, 7, "after the flood"), "and computes exactly");
    uint64_t p = peak_rss(w.pid);
    if (p > peak) peak = p;
    T_CHECK(peak > 0 && peak <= (128ull << 20), "peak RSS %.1f MiB within the 128 MiB budget under the flood",
            (double)peak / 1048576.0);
    zmq_close(s);
    for (int i = 0; i < 3; i++) zmq_close(c[i]);
    worker_stop(&w, 10, NULL);
}

int main(void)
{
    snprintf(root, sizeof root, "%s", ms_t_tmpdir("test_worker"));
    if (strlen(root) > 80) /* ipc paths must fit in a sockaddr_un */
        snprintf(root, sizeof root, "%s", ms_t_sockdir("test-worker"));
    snprintf(model, sizeof model, "%s/model", root);
    snprintf(wbin, sizeof wbin, "%s", ms_t_bin("moestream-worker"));
    if (access(wbin, X_OK) != 0) {
        ms_t_skip("%s not built", wbin);
        return ms_t_done();
    }
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    if (ms_synth_write(model, &sh, 7) != 0 || load_reference() != 0) {
        T_CHECK(0, "synthetic checkpoint: %s", ms_err_msg());
        return ms_t_done();
    }
    char fp[17];
    T_CHECK(ms_wire_fingerprint(model, fp) == 0, "fingerprint of the model");
    zctx = zmq_ctx_new();
    signal(SIGPIPE, SIG_IGN);

    test_cli();
    test_main_worker(fp);
    test_owned_budget_io(fp);
    test_pack(fp);
    test_security(fp);
    test_oversized_flood(fp);

    zmq_ctx_term(zctx);
    free(flood_buf);
    ms_expert_table_free(table);
    ms_st_close(st);
    ms_cfg_free(&cfg);
    return ms_t_done();
}
