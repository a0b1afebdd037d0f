/* ms_wsrv: the expert worker's server: one ROUTER socket, a ZAP thread for CURVE, strict requests. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "ms_clock.h"
#include "ms_err.h"
#include "ms_proc.h"
#include "ms_size.h"
#include "ms_wire.h"
#include "ms_wauth.h"
#include "ms_wsrv.h"

#define POLL_MS 200          /* how often the loop looks at the stop flag when idle */
#define DRAIN_MS 300         /* after a stop: answer what still arrives for this long */
#define LINGER_MS 1000       /* replies still queued at close get this long to leave */
#define MSG_OVERHEAD 65536   /* envelope bytes beyond the floats of a request */

typedef enum {
    E_BAD = MOESTREAM__ERROR__CODE__BAD_MESSAGE,
    E_FP = MOESTREAM__ERROR__CODE__FINGERPRINT,
    E_LAYER = MOESTREAM__ERROR__CODE__BAD_LAYER,
    E_WIDTH = MOESTREAM__ERROR__CODE__BAD_WIDTH,
    E_OWNED = MOESTREAM__ERROR__CODE__NOT_OWNED,
    E_LARGE = MOESTREAM__ERROR__CODE__TOO_LARGE,
    E_IO = MOESTREAM__ERROR__CODE__IO,
    E_SUM = MOESTREAM__ERROR__CODE__CHECKSUM,
    E_DOWN = MOESTREAM__ERROR__CODE__SHUTTING_DOWN,
    E_INTERNAL = MOESTREAM__ERROR__CODE__INTERNAL,
    E_FORMAT = MOESTREAM__ERROR__CODE__FORMAT,
} err_code;

struct ms_wsrv {
    void *ctx, *sock;
    ms_wauth_zap *zap;         /* the CURVE handshake checker, when CURVE is on */
    int curve;
    ms_wload *w;
    ms_uuid uuid;
    char uuid_s[37];
    char endpoint[512];
    uint64_t max_msg;          /* request_limit + overhead: larger messages are refused unread */
    uint64_t n_requests, n_items, n_errors;
    int draining;
    /* fault injection for the fail-over tests, read once at start (ms_wsrv_new) */
    uint64_t fault_kill_after;  /* MS_WORKER_FAULT_KILL_AFTER=N: SIGKILL itself on request N+1 (0: off) */
    int fault_nan;              /* MS_WORKER_FAULT_NAN=1: poison the outputs after the check */
};

/* ---- setup ---- */

static int zfail(const char *what, const char *ep)
{
    ms_err_set("--listen %s: %s: %s", ep, what, zmq_strerror(errno));
    return ms_err_set_code(MS_EXIT_RUNTIME);
}

ms_wsrv *ms_wsrv_new(const ms_wsrv_opts *o)
{
    ms_wsrv *s = ms_calloc(1, sizeof *s);
    s->w = o->load;
    ms_uuid_new(&s->uuid);
    ms_uuid_str(&s->uuid, s->uuid_s);
    s->curve = o->keys && o->keys->curve;
    s->max_msg = s->w->plan.request_limit + MSG_OVERHEAD;
    const char *fk = getenv("MS_WORKER_FAULT_KILL_AFTER");
    s->fault_kill_after = fk ? strtoull(fk, NULL, 10) : 0;
    if (fk && !s->fault_kill_after) s->fault_kill_after = UINT64_MAX; /* "0": on the first request */
    s->fault_nan = getenv("MS_WORKER_FAULT_NAN") != NULL;

    s->ctx = zmq_ctx_new();
    if (!s->ctx) {
        zfail("cannot create a ZeroMQ context", o->endpoint);
        goto fail;
    }
    /* The handler must be running before the server socket accepts a handshake. */
    if (s->curve && !(s->zap = ms_wauth_zap_start(s->ctx, o->keys, o->endpoint))) goto fail;
    s->sock = zmq_socket(s->ctx, ZMQ_ROUTER);
    if (!s->sock) {
        zfail("cannot create the socket", o->endpoint);
        goto fail;
    }
    /* Frames over the protocol's largest message are dropped by libzmq before they are buffered
     * (a flood of huge frames cannot grow the worker past its budget); between the request
     * limit and this, the worker answers TOO_LARGE without decoding. */
    int64_t maxmsg = MS_WIRE_MAX_MSG;
    MS_ASSERT(s->max_msg <= (uint64_t)MS_WIRE_MAX_MSG);
    int hwm = 16, linger = LINGER_MS, one = 1;
    if (zmq_setsockopt(s->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0 ||
        zmq_setsockopt(s->sock, ZMQ_RCVHWM, &hwm, sizeof hwm) != 0 ||
        zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof linger) != 0) {
        zfail("cannot set socket options", o->endpoint);
        goto fail;
    }
    if (strchr(o->endpoint, '[') && zmq_setsockopt(s->sock, ZMQ_IPV6, &one, sizeof one) != 0) {
        zfail("cannot enable IPv6", o->endpoint);
        goto fail;
    }
    if (s->curve) {
        if (zmq_setsockopt(s->sock, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
            zmq_setsockopt(s->sock, ZMQ_CURVE_SECRETKEY, o->keys->secret, 40) != 0 ||
            zmq_setsockopt(s->sock, ZMQ_ZAP_DOMAIN, "moestream", 9) != 0) {
            zfail("cannot enable CURVE", o->endpoint);
            goto fail;
        }
    }
    if (zmq_bind(s->sock, o->endpoint) != 0) {
        zfail("cannot bind", o->endpoint);
        goto fail;
    }
    size_t el = sizeof s->endpoint;
    if (zmq_getsockopt(s->sock, ZMQ_LAST_ENDPOINT, s->endpoint, &el) != 0 || !s->endpoint[0])
        snprintf(s->endpoint, sizeof s->endpoint, "%s", o->endpoint);
    return s;
fail:
    ms_wsrv_free(s);
    return NULL;
}

void ms_wsrv_free(ms_wsrv *s)
{
    if (!s) return;
    if (s->sock) zmq_close(s->sock); /* lingers up to LINGER_MS in zmq_ctx_term for queued replies */
    if (s->ctx) {
        zmq_ctx_shutdown(s->ctx); /* the ZAP thread's recv returns ETERM */
        ms_wauth_zap_free(s->zap);
        zmq_ctx_term(s->ctx);
    }
    free(s);
}

const char *ms_wsrv_endpoint(const ms_wsrv *s) { return s->endpoint; }
const char *ms_wsrv_uuid(const ms_wsrv *s) { return s->uuid_s; }

/* ---- messages ---- */

/* One message from a client: its routing id, an optional empty delimiter (REQ clients), the
 * payload. frames counts every frame after the routing id. */
typedef struct {
    zmq_msg_t id, f[2];
    int n_f, frames;
} wmsg;

static void wmsg_close(wmsg *m)
{
    zmq_msg_close(&m->id);
    for (int i = 0; i < m->n_f; i++) zmq_msg_close(&m->f[i]);
}

/* Returns 1 with a message, 0 if none is waiting (flags = ZMQ_DONTWAIT), -1 on a socket error. */
static int recv_one(ms_wsrv *s, int flags, wmsg *m)
{
    m->n_f = m->frames = 0;
    zmq_msg_init(&m->id);
    for (;;) {
        if (zmq_msg_recv(&m->id, s->sock, flags) >= 0) break;
        if (errno == EAGAIN) {
            zmq_msg_close(&m->id);
            return 0;
        }
        if (errno != EINTR) {
            zmq_msg_close(&m->id);
            return -1;
        }
        if (flags & ZMQ_DONTWAIT) continue;
        zmq_msg_close(&m->id);
        return 0;
    }
    int more = zmq_msg_more(&m->id);
    while (more) {
        zmq_msg_t t;
        zmq_msg_init(&t);
        if (zmq_msg_recv(&t, s->sock, 0) < 0) {
            zmq_msg_close(&t);
            if (errno == EINTR) continue; /* the rest of a message is already here */
            break;
        }
        more = zmq_msg_more(&t);
        m->frames++;
        if (m->n_f < 2) {
            zmq_msg_init(&m->f[m->n_f]);
            zmq_msg_move(&m->f[m->n_f++], &t);
        }
        zmq_msg_close(&t);
    }
    return 1;
}

static void free_cb(void *data, void *hint)
{
    (void)hint;
    free(data);
}

/* Send buf (malloc'ed, taken over) to the client of m, with the REQ delimiter if it had one. */
static void send_to(ms_wsrv *s, wmsg *m, int delim, uint8_t *buf, size_t len)
{
    zmq_msg_t id, r;
    zmq_msg_init(&id);
    zmq_msg_copy(&id, &m->id);
    if (zmq_msg_send(&id, s->sock, ZMQ_SNDMORE) < 0) {
        zmq_msg_close(&id);
        free(buf);
        return;
    }
    if (delim) zmq_send(s->sock, "", 0, ZMQ_SNDMORE);
    zmq_msg_init_data(&r, buf, len, free_cb, NULL); /* no copy: zmq frees it once sent */
    if (zmq_msg_send(&r, s->sock, 0) < 0) {
        ms_log(2, "worker: a reply could not be queued: %s", zmq_strerror(errno));
        zmq_msg_close(&r);
    }
}

static void send_env(ms_wsrv *s, wmsg *m, int delim, Moestream__Envelope *e)
{
    uint8_t *buf;
    size_t len;
    ms_wire_pack(e, &buf, &len);
    send_to(s, m, delim, buf, len);
}

static void send_error(ms_wsrv *s, wmsg *m, int delim, const ms_uuid *rid, int code, const char *text)
{
    uint8_t *buf;
    size_t len;
    s->n_errors++;
    ms_wire_error(rid, code, text, &buf, &len);
    send_to(s, m, delim, buf, len);
}

/* Protobuf wire scanning, to quote the request uuid of a compute request that cannot be decoded
 * (too large, or failing validation). Bounds-checked; returns -1 on anything unexpected. */
static int pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (int sh = 0; sh < 64 && *p < end; sh += 7) {
        uint8_t b = *(*p)++;
        r |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -1;
}

static int pb_field(const uint8_t *p, const uint8_t *end, uint64_t field, const uint8_t **sub, uint64_t *sub_len)
{
    while (p < end) {
        uint64_t key, v;
        if (pb_varint(&p, end, &key) != 0) return -1;
        switch (key & 7) {
        case 0:
            if (pb_varint(&p, end, &v) != 0) return -1;
            break;
        case 1:
            if (end - p < 8) return -1;
            p += 8;
            break;
        case 5:
            if (end - p < 4) return -1;
            p += 4;
            break;
        case 2:
            if (pb_varint(&p, end, &v) != 0 || v > (uint64_t)(end - p)) return -1;
            if ((key >> 3) == field) {
                *sub = p;
                *sub_len = v;
                return 0;
            }
            p += v;
            break;
        default:
            return -1;
        }
    }
    return -1;
}

static int scan_request_uuid(const uint8_t *buf, size_t len, ms_uuid *u)
{
    const uint8_t *c, *id;
    uint64_t cl, il;
    if (pb_field(buf, buf + len, 12, &c, &cl) != 0 || pb_field(c, c + cl, 1, &id, &il) != 0 || il != 16) return -1;
    memcpy(u->b, id, 16);
    return 0;
}

static const char *peer_of(zmq_msg_t *m, char *buf, size_t n)
{
    const char *addr = zmq_msg_gets(m, "Peer-Address");
    const char *user = zmq_msg_gets(m, "User-Id");
    snprintf(buf, n, "%s%s%s%s", addr && *addr ? " at " : "", addr && *addr ? addr : "", user && *user ? " key " : "",
             user && *user ? user : "");
    return buf;
}

static void on_hello(ms_wsrv *s, wmsg *m, int delim, zmq_msg_t *payload, const Moestream__Hello *h)
{
    ms_uuid cu;
    char cs[37], peer[160], text[800];
    ms_wire_uuid(&h->client_uuid, &cu);
    ms_uuid_str(&cu, cs);
    peer_of(payload, peer, sizeof peer);
    const char *fp = h->model_fingerprint ? h->model_fingerprint : "";
    if (strcmp(fp, s->w->fingerprint)) {
        snprintf(text, sizeof text,
                 "model fingerprint mismatch: the client runs model %.40s, this worker serves %s (%.400s)",
                 *fp ? fp : "(none)", s->w->fingerprint, s->w->source);
        ms_log(1, "worker: refused hello from client %s%s: %s", cs, peer, text);
        send_error(s, m, delim, NULL, E_FP, text);
        return;
    }
    /* The client's idea of an expert must be this worker's, field by field. */
    ms_xfmt theirs;
    char why[400], diff[400];
    if (ms_xfmt_from_proto(h->expert_format, &theirs, why, sizeof why) != 0) {
        snprintf(text, sizeof text, "hello: %s", why);
        ms_log(1, "worker: refused hello from client %s%s: %s", cs, peer, text);
        send_error(s, m, delim, NULL, E_FORMAT, text);
        return;
    }
    if (ms_xfmt_diff(&theirs, &s->w->fmt, diff, sizeof diff)) {
        snprintf(text, sizeof text, "expert format mismatch (client vs this worker) in %s (%.300s)", diff,
                 s->w->source);
        ms_log(1, "worker: refused hello from client %s%s: %s", cs, peer, text);
        send_error(s, m, delim, NULL, E_FORMAT, text);
        return;
    }
    ms_log(1, "worker: hello from client %s%s", cs, peer);
    const ms_wload *w = s->w;
    /* Owned experts as maximal runs per layer. */
    size_t n = 0, cap = 16;
    Moestream__ExpertRange *r = ms_malloc(sizeof *r * cap);
    for (int l = 0; l < w->x_layers; l++)
        for (int e = 0; e < w->n_experts;) {
            if (!ms_wload_owns(w, l, e)) {
                e++;
                continue;
            }
            int b = e;
            while (e < w->n_experts && ms_wload_owns(w, l, e)) e++;
            if (n == cap) r = ms_realloc(r, sizeof *r * (cap *= 2));
            moestream__expert_range__init(&r[n]);
            r[n].layer = (uint32_t)l;
            r[n].expert_begin = (uint32_t)b;
            r[n].expert_end = (uint32_t)e;
            n++;
        }
    Moestream__ExpertRange **rp = ms_malloc(sizeof *rp * (n ? n : 1));
    for (size_t i = 0; i < n; i++) rp[i] = &r[i];
    ms_xfmt_pb keep;
    Moestream__HelloReply hr = MOESTREAM__HELLO_REPLY__INIT;
    hr.worker_uuid.data = s->uuid.b;
    hr.worker_uuid.len = 16;
    hr.model_fingerprint = s->w->fingerprint;
    hr.n_owned = n;
    hr.owned = rp;
    hr.cache_capacity_bytes = s->w->plan.mem.cache;
    hr.latent_width = (uint32_t)w->fmt.latent;
    hr.num_layers = (uint32_t)w->n_layers;
    hr.num_experts = (uint32_t)w->n_experts;
    hr.first_moe_layer = (uint32_t)w->first_moe;
    hr.expert_format = ms_xfmt_to_proto(&w->fmt, &keep);
    Moestream__Envelope e = MOESTREAM__ENVELOPE__INIT;
    e.body_case = MOESTREAM__ENVELOPE__BODY_HELLO_REPLY;
    e.hello_reply = &hr;
    send_env(s, m, delim, &e);
    free(rp);
    free(r);
}

/* Validate a compute request and group its items (they must come grouped by expert); 0 if it
 * can run (g then holds the groups; free with ms_xgroup_free), else an error code with text. */
static int check_compute(ms_wsrv *s, const Moestream__ComputeRequest *c, ms_xgroup *g, char *text, size_t tn)
{
    const ms_wload *w = s->w;
    int L = w->fmt.latent;
    size_t n = c->n_item_expert;
    if (c->layer >= (uint32_t)w->x_layers) {
        snprintf(text, tn, "compute: layer %u does not exist (the model's experts are in layers 0..%d)", c->layer,
                 w->x_layers - 1);
        return E_LAYER;
    }
    if (c->layer < (uint32_t)w->first_moe) {
        snprintf(text, tn, "compute: layer %u is dense: it has no routed experts (MoE layers are %d..%d)", c->layer,
                 w->first_moe, w->x_layers - 1);
        return E_LAYER;
    }
    if (c->latent_width != (uint32_t)L) {
        snprintf(text, tn, "compute: latent_width %u, but this model's routed experts take %d", c->latent_width, L);
        return E_WIDTH;
    }
    if (c->rows > MS_WSRV_MAX_ROWS) {
        snprintf(text, tn, "compute: %u rows; a request may carry at most %u", c->rows, MS_WSRV_MAX_ROWS);
        return E_LARGE;
    }
    if ((uint64_t)n > (uint64_t)c->rows * MS_WSRV_MAX_ITEMS_PER_ROW) {
        snprintf(text, tn, "compute: %zu items for %u rows; at most %u items per row", n, c->rows,
                 MS_WSRV_MAX_ITEMS_PER_ROW);
        return E_LARGE;
    }
    uint64_t bytes = ((uint64_t)c->rows + (uint64_t)n) * (uint64_t)L * 4;
    if (bytes > s->w->plan.request_limit) {
        snprintf(text, tn,
                 "compute: %u rows + %zu items of %d floats are %llu bytes; this worker accepts at most %llu bytes "
                 "per request (set by its --ram-budget): split the request",
                 c->rows, n, L, (unsigned long long)bytes, (unsigned long long)s->w->plan.request_limit);
        return E_LARGE;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t e = c->item_expert[i];
        if (e >= (uint32_t)w->n_experts) {
            snprintf(text, tn, "compute: item %zu: layer %u expert %u does not exist (experts 0..%d)", i, c->layer, e,
                     w->n_experts - 1);
            return E_OWNED;
        }
        if (!ms_wload_owns(w, (int)c->layer, (int)e)) {
            char own[256];
            snprintf(text, tn,
                     "compute: item %zu: layer %u expert %u is not owned by this worker (it owns %s of layer %u)", i,
                     c->layer, e, ms_wload_layer_ranges(w, (int)c->layer, own, sizeof own), c->layer);
            return E_OWNED;
        }
    }
    if (ms_xgroup_runs(g, (int64_t)n, c->item_expert, w->n_experts) != 0) {
        snprintf(text, tn, "compute: %s", ms_err_msg());
        return E_BAD;
    }
    return 0;
}

/* The wire code of a failed computation, from the store's error class (ms_xstore.h), never
 * from its text. */
static int store_error_code(int cls)
{
    switch (cls) {
    case MS_EXIT_IO: return E_IO;     /* a read failed or came up short */
    case MS_EXIT_MODEL: return E_SUM; /* the bytes read do not match their checksum */
    default: return E_INTERNAL;
    }
}

/* A worker never sends NaN or Inf: the coordinator would combine them into every later token.
 * (The store checks its outputs too; this guards whatever computes them.) */
static int outputs_finite(ms_wsrv *s, const float *outputs, uint32_t n, uint32_t layer)
{
    int L = s->w->fmt.latent;
    for (size_t i = 0; i < (size_t)n * (size_t)L; i++)
        if (!isfinite(outputs[i])) {
            ms_err_set("worker %s: layer %u: output %zu of item %zu is not finite; refusing to send it", s->endpoint,
                       layer, i % (size_t)L, i / (size_t)L);
            return ms_err_set_code(MS_EXIT_RUNTIME);
        }
    return 0;
}

static void on_compute(ms_wsrv *s, wmsg *m, int delim, Moestream__Envelope *env)
{
    const Moestream__ComputeRequest *c = env->compute;
    ms_uuid rid;
    char rs[37], text[768];
    ms_wire_uuid(&c->request_uuid, &rid);
    ms_uuid_str(&rid, rs);
    s->n_requests++;
    /* Fault injection for the fail-over tests: MS_WORKER_FAULT_KILL_AFTER=N makes the worker
     * SIGKILL itself on compute request N+1, before answering (a crash mid-generation). */
    if (s->fault_kill_after && s->n_requests > (s->fault_kill_after == UINT64_MAX ? 0 : s->fault_kill_after))
        raise(SIGKILL);
    if (s->draining) {
        ms_wire_free(env);
        send_error(s, m, delim, &rid, E_DOWN, "the worker is shutting down");
        return;
    }
    ms_xgroup g;
    int code = check_compute(s, c, &g, text, sizeof text);
    if (code) {
        ms_log(1, "worker: request %s refused: %s", rs, text);
        ms_wire_free(env);
        send_error(s, m, delim, &rid, code, text);
        return;
    }
    double t0 = ms_now();
    uint32_t n = (uint32_t)c->n_item_expert, layer = c->layer, rows = c->rows, L = c->latent_width;
    /* The items come grouped by expert: the store computes each group as it is (no regrouping),
     * straight into the reply's outputs [n][L]. */
    float *outputs = ms_malloc(sizeof(float) * ((size_t)n * L + 1));
    int crc = ms_xstore_compute_items(s->w->store, (int)layer, c->activations, c->item_row, &g, outputs);
    ms_xgroup_free(&g);
    ms_wire_free(env); /* the request goes before the reply is encoded (request_work = 2 x limit) */
    if (crc != 0) {
        free(outputs);
        code = store_error_code(ms_err_code());
        snprintf(text, sizeof text, "%s", ms_err_msg());
        ms_log(0, "worker: request %s (layer %u): %s", rs, layer, text);
        send_error(s, m, delim, &rid, code, text);
        return;
    }
    if (outputs_finite(s, outputs, n, layer) != 0) {
        free(outputs);
        snprintf(text, sizeof text, "%s", ms_err_msg());
        ms_log(0, "worker: request %s refused: %s", rs, text);
        send_error(s, m, delim, &rid, E_INTERNAL, text);
        return;
    }
    /* Fault injection for the coordinator's own check: MS_WORKER_FAULT_NAN=1 poisons the
     * outputs after the worker's check, as a buggy or hostile worker would send them. */
    if (s->fault_nan && n > 0) outputs[(size_t)n * L - 1] = NAN;
    s->n_items += n;
    Moestream__ComputeReply r = MOESTREAM__COMPUTE_REPLY__INIT;
    r.request_uuid.data = rid.b;
    r.request_uuid.len = 16;
    r.items = n;
    r.latent_width = L;
    r.n_outputs = (size_t)n * L;
    r.outputs = outputs;
    Moestream__Envelope e = MOESTREAM__ENVELOPE__INIT;
    e.body_case = MOESTREAM__ENVELOPE__BODY_COMPUTE_REPLY;
    e.compute_reply = &r;
    uint8_t *buf;
    size_t len;
    ms_wire_pack(&e, &buf, &len);
    free(outputs);
    send_to(s, m, delim, buf, len);
    ms_log(2, "worker: request %s layer %u: %u rows, %u items in %.3f ms", rs, layer, rows, n, 1e3 * (ms_now() - t0));
}

static void on_stats(ms_wsrv *s, wmsg *m, int delim)
{
    ms_xstore_stats st;
    ms_xstore_get_stats(s->w->store, &st);
    Moestream__StatsReply r = MOESTREAM__STATS_REPLY__INIT;
    r.requests = s->n_requests;
    r.items = s->n_items;
    r.cache_hits = st.hits;
    r.cache_misses = st.misses;
    r.bytes_read = st.bytes_read;
    r.errors = s->n_errors;
    r.peak_rss_bytes = ms_proc_peak_rss();
    Moestream__Envelope e = MOESTREAM__ENVELOPE__INIT;
    e.body_case = MOESTREAM__ENVELOPE__BODY_STATS_REPLY;
    e.stats_reply = &r;
    send_env(s, m, delim, &e);
}

static void handle(ms_wsrv *s, wmsg *m)
{
    /* One frame holding one Envelope; a REQ client adds an empty delimiter before it. */
    int delim = m->frames == 2 && zmq_msg_size(&m->f[0]) == 0;
    char why[512];
    if (m->frames != 1 && !delim) {
        snprintf(why, sizeof why, "expected one frame holding one Envelope, got %d frames", m->frames);
        ms_log(1, "worker: bad message: %s", why);
        send_error(s, m, m->frames > 0 && zmq_msg_size(&m->f[0]) == 0, NULL, E_BAD, why);
        return;
    }
    zmq_msg_t *payload = &m->f[delim];
    const uint8_t *data = zmq_msg_data(payload);
    size_t len = zmq_msg_size(payload);
    ms_uuid rid;
    int have_rid = scan_request_uuid(data, len, &rid) == 0;
    if (len > s->max_msg) {
        char a[64];
        snprintf(why, sizeof why,
                 "a message of %zu bytes is larger than this worker accepts (%s, set by its --ram-budget)", len,
                 ms_size_fmt(s->max_msg, a, sizeof a));
        ms_log(1, "worker: %s", why);
        send_error(s, m, delim, have_rid ? &rid : NULL, E_LARGE, why);
        return;
    }
    int code = E_BAD;
    Moestream__Envelope *env = ms_wire_unpack(data, len, why, sizeof why, &code);
    if (!env) {
        ms_log(1, "worker: bad message of %zu bytes: %s", len, why);
        send_error(s, m, delim, have_rid ? &rid : NULL, code, why);
        return;
    }
    switch (env->body_case) {
    case MOESTREAM__ENVELOPE__BODY_COMPUTE:
        on_compute(s, m, delim, env); /* frees env */
        return;
    case MOESTREAM__ENVELOPE__BODY_HELLO:
        if (s->draining)
            send_error(s, m, delim, NULL, E_DOWN, "the worker is shutting down");
        else
            on_hello(s, m, delim, payload, env->hello);
        break;
    case MOESTREAM__ENVELOPE__BODY_PING:
        if (s->draining) {
            send_error(s, m, delim, NULL, E_DOWN, "the worker is shutting down");
        } else {
            Moestream__Pong p = MOESTREAM__PONG__INIT;
            p.sequence = env->ping->sequence;
            p.worker_uuid.data = s->uuid.b;
            p.worker_uuid.len = 16;
            Moestream__Envelope e = MOESTREAM__ENVELOPE__INIT;
            e.body_case = MOESTREAM__ENVELOPE__BODY_PONG;
            e.pong = &p;
            send_env(s, m, delim, &e);
        }
        break;
    case MOESTREAM__ENVELOPE__BODY_STATS:
        on_stats(s, m, delim);
        break;
    default:
        snprintf(why, sizeof why, "a worker does not accept %s messages",
                 env->body_case == MOESTREAM__ENVELOPE__BODY_HELLO_REPLY     ? "HelloReply"
                 : env->body_case == MOESTREAM__ENVELOPE__BODY_COMPUTE_REPLY ? "ComputeReply"
                 : env->body_case == MOESTREAM__ENVELOPE__BODY_ERROR         ? "Error"
                 : env->body_case == MOESTREAM__ENVELOPE__BODY_PONG          ? "Pong"
                                                                             : "StatsReply");
        ms_log(1, "worker: bad message: %s", why);
        send_error(s, m, delim, NULL, E_BAD, why);
        break;
    }
    ms_wire_free(env);
}

int ms_wsrv_run(ms_wsrv *s, volatile sig_atomic_t *stop)
{
    zmq_pollitem_t it = {s->sock, 0, ZMQ_POLLIN, 0};
    while (!*stop) {
        int rc = zmq_poll(&it, 1, POLL_MS);
        if (rc < 0) {
            if (errno == EINTR) continue;
            ms_err_set("worker socket %s: %s", s->endpoint, zmq_strerror(errno));
            return -1;
        }
        /* Requests are served in arrival order; the flag is looked at between two of them. */
        while (rc > 0 && !*stop) {
            wmsg m;
            int got = recv_one(s, ZMQ_DONTWAIT, &m);
            if (got < 0) {
                ms_err_set("worker socket %s: %s", s->endpoint, zmq_strerror(errno));
                return -1;
            }
            if (!got) break;
            handle(s, &m);
            wmsg_close(&m);
        }
    }
    /* Drain: whatever arrives now is told that the worker is going away. */
    s->draining = 1;
    ms_log(1, "worker: stopping: finishing, answering new requests with SHUTTING_DOWN");
    double end = ms_now() + DRAIN_MS / 1e3;
    for (double t = ms_now(); t < end; t = ms_now()) {
        int rc = zmq_poll(&it, 1, (long)((end - t) * 1e3) + 1);
        if (rc < 0 && errno != EINTR) break;
        if (rc <= 0) continue;
        wmsg m;
        while (recv_one(s, ZMQ_DONTWAIT, &m) == 1) {
            handle(s, &m);
            wmsg_close(&m);
        }
    }
    return 0;
}
