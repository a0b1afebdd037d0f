/* ms_wtest: the raw coordinator of the worker tests (see ms_wtest.h). */
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
#include "ms_ident.h"
#include "ms_pack.h"
#include "ms_shard.h"
#include "ms_size.h"
#include "ms_st.h"
#include "ms_synth.h"
#include "ms_clock.h"
#include "ms_test.h"
#include "ms_wire.h"

#define EC(x) MOESTREAM__ERROR__CODE__##x

#include "ms_wtest.h"

char wt_root[512], wt_model[600], wt_wbin[4096];
void *wt_zctx;
ms_k3_cfg wt_cfg;
ms_st *wt_st;
ms_expert_table *wt_table;
int wt_L;

ms_t_rng wt_rng = {0x2545f4914f6cdd1dull};
uint32_t wt_rnd(void) { return (uint32_t)(ms_t_rng_u64(&wt_rng) >> 16); }

/* ---- worker processes (ms_t_worker) ---- */



/* Start the worker binary with args (NULL-terminated), stderr to root/<name>.log; wait for its
 * "listening on" line (the bound endpoint lands in w->ep). Returns 0, or the exit status if it
 * ended first (-1 on a timeout). */
int wt_worker_start(worker *w, const char *name, const char **args)
{
    char log[700];
    snprintf(log, sizeof log, "%s/%s.log", wt_root, name);
    const char *argv[40];
    int n = 0;
    argv[n++] = wt_wbin;
    for (int i = 0; args[i] && n < 39; i++) argv[n++] = args[i];
    argv[n] = NULL;
    ms_t_worker_opts o = {log, NULL, NULL, 30};
    return ms_t_worker_start(w, argv, &o);
}

int wt_worker_stop(worker *w, double limit_s, double *took) { return ms_t_worker_stop(w, limit_s, took); }
int wt_log_has(const worker *w, const char *needle) { return ms_t_worker_log_has(w, needle); }

/* ---- a raw ZeroMQ client ---- */

void *wt_client(const char *ep, const char *server_pub, const char *pub, const char *sec, int type)
{
    void *s = zmq_socket(wt_zctx, type);
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

void wt_send_raw(void *s, const void *buf, size_t len) { zmq_send(s, buf, len, 0); }

void wt_send_env(void *s, Moestream__Envelope *e)
{
    uint8_t *buf;
    size_t len;
    ms_wire_pack(e, &buf, &len);
    wt_send_raw(s, buf, len);
    free(buf);
}

/* The next reply, decoded and validated, or NULL after timeout_ms. */
Moestream__Envelope *wt_recv_env(void *s, int timeout_ms)
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

ms_xfmt wt_xfmt; /* the model's expert format, as a coordinator presents it */

Moestream__Envelope *wt_hello_fmt(void *s, const char *fp, const ms_xfmt *f, int timeout_ms)
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
    wt_send_env(s, &e);
    return wt_recv_env(s, timeout_ms);
}

Moestream__Envelope *wt_hello(void *s, const char *fp, int timeout_ms) { return wt_hello_fmt(s, fp, &wt_xfmt, timeout_ms); }


/* Group r's items by expert (stable), as the protocol requires. */
void wt_creq_group(creq *r)
{
    /* A stable counting sort by expert (requests of 10^5 items: an insertion sort took minutes
     * under AddressSanitizer). */
    if (r->n < 2) return;
    uint32_t emax = 0;
    for (size_t i = 0; i < r->n; i++)
        if (r->exp[i] > emax) emax = r->exp[i];
    size_t *start = calloc((size_t)emax + 2, sizeof *start);
    uint32_t *row = malloc(sizeof *row * r->n), *exp = malloc(sizeof *exp * r->n);
    MS_ASSERT(start && row && exp);
    for (size_t i = 0; i < r->n; i++) start[r->exp[i] + 1]++;
    for (uint32_t e = 0; e <= emax; e++) start[e + 1] += start[e];
    for (size_t i = 0; i < r->n; i++) {
        size_t q = start[r->exp[i]]++;
        row[q] = r->row[i];
        exp[q] = r->exp[i];
    }
    memcpy(r->row, row, sizeof *row * r->n);
    memcpy(r->exp, exp, sizeof *exp * r->n);
    free(start);
    free(row);
    free(exp);
}

/* Random request of `rows` rows on layer with experts drawn from [e0, e1], items grouped by expert. */
void wt_creq_random(creq *r, uint32_t layer, uint32_t rows, size_t n, int e0, int e1)
{
    memset(r, 0, sizeof *r);
    r->layer = layer;
    r->rows = rows;
    r->width = (uint32_t)wt_L;
    r->n_act = (size_t)rows * (size_t)wt_L;
    r->act = malloc(sizeof(float) * (r->n_act ? r->n_act : 1));
    for (size_t i = 0; i < r->n_act; i++) r->act[i] = ((float)(wt_rnd() % 20001) - 10000.0f) / 2500.0f;
    r->n = n;
    r->row = malloc(sizeof(uint32_t) * (n ? n : 1));
    r->exp = malloc(sizeof(uint32_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        r->row[i] = wt_rnd() % rows;
        r->exp[i] = (uint32_t)(e0 + (int)(wt_rnd() % (uint32_t)(e1 - e0 + 1)));
    }
    wt_creq_group(r);
    ms_uuid_new(&r->id);
}

void wt_creq_free(creq *r)
{
    free(r->act);
    free(r->row);
    free(r->exp);
}

void wt_creq_send(void *s, creq *r, uint32_t version)
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
        wt_send_env(s, &e);
        return;
    }
    e.protocol_version = version; /* ms_wire_pack would set the right one */
    size_t len = moestream__envelope__get_packed_size(&e);
    uint8_t *buf = malloc(len);
    moestream__envelope__pack(&e, buf);
    wt_send_raw(s, buf, len);
    free(buf);
}

/* Expected outputs of r: each item through the in-process expert table, one row at a time. */
int wt_check_reply(const creq *r, Moestream__Envelope *e, const char *what)
{
    if (!e || e->body_case != MOESTREAM__ENVELOPE__BODY_COMPUTE_REPLY) {
        T_CHECK(0, "%s: expected a ComputeReply, got %s%s", what, !e ? "nothing" : "another message",
                e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR ? e->error->message : "");
        return 0;
    }
    const Moestream__ComputeReply *c = e->compute_reply;
    T_CHECK(c->request_uuid.len == 16 && !memcmp(c->request_uuid.data, r->id.b, 16), "%s: request uuid echoed", what);
    T_CHECK(c->items == r->n && c->latent_width == (uint32_t)wt_L, "%s: %u items of width %u", what, c->items,
            c->latent_width);
    if (c->items != r->n) return 0;
    ms_experts ex = ms_expert_table_iface(wt_table);
    float *want = malloc(sizeof(float) * (size_t)wt_L);
    size_t bad = 0;
    for (size_t i = 0; i < r->n; i++) {
        int32_t id = (int32_t)r->exp[i];
        MS_ASSERT(ex.compute(ex.ctx, (int)r->layer, 1, r->act + (size_t)r->row[i] * (size_t)wt_L, 1, &id, want) == 0);
        if (memcmp(want, c->outputs + i * (size_t)wt_L, sizeof(float) * (size_t)wt_L)) bad++;
    }
    free(want);
    T_CHECK(bad == 0, "%s: %zu of %zu items differ from the in-process expert table", what, bad, r->n);
    return bad == 0;
}

/* Send r, expect an Error with code carrying r's uuid (and needle in its text); returns 1 if so. */
int wt_expect_error(void *s, creq *r, uint32_t version, int code, const char *needle, const char *what)
{
    wt_creq_send(s, r, version);
    Moestream__Envelope *e = wt_recv_env(s, 10000);
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

Moestream__Envelope *wt_expect_raw_error(void *s, const void *buf, size_t len, int code, const char *what)
{
    wt_send_raw(s, buf, len);
    Moestream__Envelope *e = wt_recv_env(s, 10000);
    T_CHECK(e && e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR && (int)e->error->code == code,
            "%s: expected Error %d, got %s", what, code,
            !e ? "nothing" : e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR ? e->error->message : "another body");
    return e;
}

/* A good random request on layer, experts [e0, e1]; returns 1 if the reply is exact. */
int wt_good_request(void *s, uint32_t layer, int e0, int e1, const char *what)
{
    creq r;
    uint32_t rows = 1 + wt_rnd() % 9;
    size_t n = 1 + wt_rnd() % (3 * rows);
    wt_creq_random(&r, layer, rows, n, e0, e1);
    if (n > 2) r.exp[n - 1] = r.exp[0], r.row[n - 1] = r.row[0]; /* a repeated (row, expert) pair */
    wt_creq_group(&r);
    wt_creq_send(s, &r, MS_WIRE_VERSION);
    Moestream__Envelope *e = wt_recv_env(s, 20000);
    int ok = wt_check_reply(&r, e, what);
    ms_wire_free(e);
    wt_creq_free(&r);
    return ok;
}

/* ---- reference: the checkpoint's experts in an in-process table ---- */

int wt_load_reference(void)
{
    char path[700];
    snprintf(path, sizeof path, "%s/config.json", wt_model);
    if (ms_k3_cfg_load(path, &wt_cfg) != 0) return -1;
    wt_st = ms_st_open_dir(wt_model);
    if (!wt_st) return -1;
    wt_L = wt_cfg.latent;
    if (ms_t_k3_xfmt(&wt_cfg, &wt_xfmt) != 0) return -1;
    wt_table = ms_t_situ_table(wt_cfg.n_layers, wt_cfg.n_experts, wt_cfg.latent, wt_cfg.situ_b1, wt_cfg.situ_b2, NULL);
    const char *wn[3] = {"w1", "w2", "w3"};
    for (int l = wt_cfg.first_dense; l < wt_cfg.n_layers; l++)
        for (int e = 0; e < wt_cfg.n_experts; e++) {
            ms_mat m[3];
            for (int j = 0; j < 3; j++) {
                char n1[256], n2[256];
                const char *pfx = "language_model.model.layers";
                snprintf(n1, sizeof n1, "%s.%d.block_sparse_moe.experts.%d.%s.weight_packed", pfx, l, e, wn[j]);
                snprintf(n2, sizeof n2, "%s.%d.block_sparse_moe.experts.%d.%s.weight_scale", pfx, l, e, wn[j]);
                const ms_st_tensor *tp = ms_st_find(wt_st, n1), *ts = ms_st_find(wt_st, n2);
                if (!tp || !ts) return -1;
                int64_t rows = j == 1 ? wt_cfg.latent : wt_cfg.moe_inter, cols = j == 1 ? wt_cfg.moe_inter : wt_cfg.latent;
                m[j] = (ms_mat){MS_WT_MXFP4, rows, cols, ms_t_st_bytes(wt_st, tp), ms_t_st_bytes(wt_st, ts), NULL, NULL};
            }
            ms_expert_w w = ms_t_expert_w(m[0], m[1], m[2]);
            ms_expert_table_set(wt_table, l, e, &w);
        }
    return 0;
}

int wt_setup(const char *name, char fp[17])
{
    snprintf(wt_root, sizeof wt_root, "%s", ms_t_tmpdir(name));
    if (strlen(wt_root) > 80) /* ipc paths must fit in a sockaddr_un */
        snprintf(wt_root, sizeof wt_root, "%s", ms_t_sockdir(name));
    snprintf(wt_model, sizeof wt_model, "%s/model", wt_root);
    snprintf(wt_wbin, sizeof wt_wbin, "%s", ms_t_bin("moestream-worker"));
    if (access(wt_wbin, X_OK) != 0) {
        ms_t_skip("%s not built", wt_wbin);
        return -1;
    }
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    if (ms_synth_write(wt_model, &sh, 7) != 0 || wt_load_reference() != 0) {
        T_CHECK(0, "synthetic checkpoint: %s", ms_err_msg());
        return -1;
    }
    T_CHECK(ms_ident_model(wt_model, fp) == 0, "fingerprint of the model");
    wt_zctx = zmq_ctx_new();
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

void wt_teardown(void)
{
    if (wt_zctx) zmq_ctx_term(wt_zctx);
    wt_zctx = NULL;
    ms_expert_table_free(wt_table);
    ms_st_close(wt_st);
    ms_k3_cfg_free(&wt_cfg);
}
