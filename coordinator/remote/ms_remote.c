/* ms_remote: DEALER sockets to expert workers; per-call requests, deadlines, fail-over to replicas. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "ms_clock.h"
#include "ms_err.h"
#include "ms_remote.h"
#include "ms_wire.h"

/* W_GONE: a local worker that exited and will not be restarted: never probed again. */
#define REPROBE_WAIT_S 0.3 /* how long a call waits for a worker that failed its last probe recently */
enum { W_DOWN = 0, W_PROBING = 1, W_UP = 2, W_GONE = 3 };

/* Connection events watched: a disconnect marks a worker down; the others explain a hello
 * that gets no answer (see hello_hint). */
#define MON_EVENTS                                                                                            \
    (ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECTED | ZMQ_EVENT_CONNECT_RETRIED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED | \
     ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)

typedef struct {
    char *endpoint;
    char pub[41];
    int curve;
    void *sock;            /* DEALER, NULL when down */
    void *mon;             /* PAIR receiving the socket's disconnect events */
    int state;
    double probe_at;       /* W_DOWN: when to try again; W_PROBING: when the hello was sent */
    double backoff;
    double hello_at;       /* W_PROBING: when the last hello went out */
    int hello_sent;        /* W_PROBING: 0 while the connection refused it (not yet connected) */
    uint8_t *owns;         /* [n_layers * n_experts] */
    char why[256];         /* last failure */
    int seen;              /* ZMQ_EVENT_* bits seen on the connection (monitor): why a hello got no answer */
    int revived;           /* restarted by the revive hook and up again: its own items may go back to it */
    int starting;          /* restarted by the revive hook and not yet answered: it is loading, wait for it */
    /* the request in flight during a call */
    int pending;
    ms_uuid req;
    int64_t *items;        /* [n_items] global item index per request item */
    int64_t n_items;
    int64_t off, end;      /* items [off, end) are in the request in flight; [0, off) are done */
} wconn;

struct ms_remote {
    ms_remote_opts o;
    char fingerprint[64];  /* copied: the caller's string may not outlive the call */
    ms_xfmt fmt;           /* copied: the experts this coordinator expects */
    void *ctx;
    wconn *w;
    int n;
    char secret[41], pub[41];
    int first_moe;
    int mon_seq;
    ms_remote_stats st;
    pthread_mutex_t health_mu;
    char health[600];      /* "" while every expert has an owner not gone for good */
    zmq_pollitem_t *items; /* [2 * n] poll items of a call (socket and monitor per worker) */
    int *item_worker;      /* [2 * n] the worker of each */
    zmq_pollitem_t *probe_items; /* [n] the sockets of workers being probed */
};

static void update_health(ms_remote *r);

/* Whether every routed expert still has an owner that is not gone for good (a local worker
 * given up on): kept for ms_remote_health, which other threads call. Run on the caller's
 * thread when a worker is given up on. */
static void update_health(ms_remote *r)
{
    char why[600] = "";
    for (int l = r->first_moe; l < r->o.n_layers && !why[0]; l++)
        for (int e = 0; e < r->o.n_experts && !why[0]; e++) {
            int live = 0, known = 0;
            for (int i = 0; i < r->n; i++) {
                if (!r->w[i].owns[(size_t)l * (size_t)r->o.n_experts + (size_t)e]) continue;
                known = 1;
                live |= r->w[i].state != W_GONE;
            }
            if (known && !live)
                for (int i = 0; i < r->n; i++)
                    if (r->w[i].owns[(size_t)l * (size_t)r->o.n_experts + (size_t)e]) {
                        snprintf(why, sizeof why, "layer %d expert %d has no worker left: %.400s", l, e, r->w[i].why);
                        break;
                    }
        }
    pthread_mutex_lock(&r->health_mu);
    snprintf(r->health, sizeof r->health, "%s", why);
    pthread_mutex_unlock(&r->health_mu);
}

int ms_remote_health(ms_remote *r, char *why, size_t n)
{
    pthread_mutex_lock(&r->health_mu);
    int bad = r->health[0] != 0;
    if (bad && why) snprintf(why, n, "%s", r->health);
    pthread_mutex_unlock(&r->health_mu);
    return bad ? -1 : 0;
}

static void close_sock(wconn *w)
{
    /* stop the monitor before closing what it watches: libzmq otherwise leaks its last event */
    if (w->sock && w->mon) zmq_socket_monitor(w->sock, NULL, 0);
    if (w->mon) zmq_close(w->mon);
    if (w->sock) zmq_close(w->sock);
    w->sock = w->mon = NULL;
}

static void mark_down(ms_remote *r, wconn *w, const char *why)
{
    (void)r; /* its quiet flag is gone: ms_log decides */
    char reason[256];
    snprintf(reason, sizeof reason, "%.200s", why);
    if (w->state == W_UP) ms_log(1, "worker %s is down: %s", w->endpoint, reason);
    snprintf(w->why, sizeof w->why, "%s", reason);
    close_sock(w);
    w->state = W_DOWN;
    w->pending = 0;
    w->backoff = w->backoff ? (w->backoff * 2 > 30 ? 30 : w->backoff * 2) : 0.5;
    w->probe_at = ms_now() + w->backoff;
}

static int open_sock(ms_remote *r, wconn *w)
{
    int64_t maxmsg = MS_WIRE_MAX_MSG;
    int zero = 0, one = 1, ivl = 1000, hb_to = 5000;
    char mon_ep[64];
    w->sock = zmq_socket(r->ctx, ZMQ_DEALER);
    if (!w->sock) return -1;
    zmq_setsockopt(w->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    zmq_setsockopt(w->sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(w->sock, ZMQ_IMMEDIATE, &one, sizeof one);
    zmq_setsockopt(w->sock, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(w->sock, ZMQ_HEARTBEAT_TIMEOUT, &hb_to, sizeof hb_to);
    if (w->curve) {
        zmq_setsockopt(w->sock, ZMQ_CURVE_SERVERKEY, w->pub, 40);
        zmq_setsockopt(w->sock, ZMQ_CURVE_PUBLICKEY, r->pub, 40);
        zmq_setsockopt(w->sock, ZMQ_CURVE_SECRETKEY, r->secret, 40);
    }
    snprintf(mon_ep, sizeof mon_ep, "inproc://ms-remote-mon-%d", r->mon_seq++);
    w->seen = 0;
    if (zmq_socket_monitor(w->sock, mon_ep, MON_EVENTS) == 0) {
        w->mon = zmq_socket(r->ctx, ZMQ_PAIR);
        if (w->mon) zmq_connect(w->mon, mon_ep);
    }
    if (zmq_connect(w->sock, w->endpoint) != 0) {
        snprintf(w->why, sizeof w->why, "cannot connect: %s", zmq_strerror(zmq_errno()));
        close_sock(w);
        return -1;
    }
    return 0;
}

static int send_env(ms_remote *r, wconn *w, Moestream__Envelope *e)
{
    uint8_t *buf;
    size_t len;
    ms_wire_pack(e, &buf, &len);
    int rc = zmq_send(w->sock, buf, len, ZMQ_DONTWAIT);
    free(buf);
    if (rc < 0) return -1;
    r->st.bytes_sent += len;
    return 0;
}

static void send_hello(ms_remote *r, wconn *w)
{
    w->hello_at = ms_now();
    Moestream__Envelope env = MOESTREAM__ENVELOPE__INIT;
    Moestream__Hello h = MOESTREAM__HELLO__INIT;
    ms_uuid id;
    ms_uuid_new(&id);
    h.client_uuid.data = id.b;
    h.client_uuid.len = 16;
    h.model_fingerprint = (char *)r->o.fingerprint;
    ms_xfmt_pb keep;
    h.expert_format = ms_xfmt_to_proto(&r->fmt, &keep);
    env.body_case = MOESTREAM__ENVELOPE__BODY_HELLO;
    env.hello = &h;
    /* with ZMQ_IMMEDIATE an unconnected peer refuses: sent again soon (probe), else the probe times out */
    w->hello_sent = send_env(r, w, &env) == 0;
}

/* Receive one message from w (non-blocking); NULL if none or garbage (w->why set). */
static Moestream__Envelope *recv_env(ms_remote *r, wconn *w)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, w->sock, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return NULL;
    }
    r->st.bytes_received += zmq_msg_size(&m);
    char why[256];
    int code;
    Moestream__Envelope *e = ms_wire_unpack(zmq_msg_data(&m), zmq_msg_size(&m), why, sizeof why, &code);
    zmq_msg_close(&m);
    if (!e) snprintf(w->why, sizeof w->why, "bad message from the worker: %.200s", why);
    return e;
}

/* Take a HelloReply: check the model and record what the worker owns. */
static int take_hello(ms_remote *r, wconn *w, const Moestream__Envelope *e)
{
    if (e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR) {
        snprintf(w->why, sizeof w->why, "refused the hello: %.200s", e->error->message);
        return -1;
    }
    if (e->body_case != MOESTREAM__ENVELOPE__BODY_HELLO_REPLY) {
        snprintf(w->why, sizeof w->why, "answered the hello with message type %d", (int)e->body_case);
        return -1;
    }
    const Moestream__HelloReply *h = e->hello_reply;
    if (strcmp(h->model_fingerprint, r->o.fingerprint) != 0) {
        snprintf(w->why, sizeof w->why, "serves model %s, this coordinator runs %s", h->model_fingerprint,
                 r->o.fingerprint);
        return -1;
    }
    if ((int)h->num_layers != r->o.n_layers || (int)h->num_experts != r->o.n_experts ||
        (int)h->first_moe_layer != r->first_moe) {
        snprintf(w->why, sizeof w->why,
                 "has a different model shape (%u layers, %u experts, MoE from layer %u; this coordinator: %d, %d, %d)",
                 h->num_layers, h->num_experts, h->first_moe_layer, r->o.n_layers, r->o.n_experts, r->first_moe);
        return -1;
    }
    /* The worker's expert format must be this coordinator's, field by field. */
    ms_xfmt theirs;
    char why[400], diff[400];
    if (ms_xfmt_from_proto(h->expert_format, &theirs, why, sizeof why) != 0) {
        snprintf(w->why, sizeof w->why, "sent a bad hello reply: %.200s", why);
        return -1;
    }
    if (ms_xfmt_diff(&r->fmt, &theirs, diff, sizeof diff)) {
        snprintf(w->why, sizeof w->why, "serves another expert format: %.160s (this coordinator vs the worker)",
                 diff);
        return -1;
    }
    if ((int)h->latent_width != r->fmt.latent) {
        snprintf(w->why, sizeof w->why, "reports latent width %u but its expert format says %d", h->latent_width,
                 r->fmt.latent);
        return -1;
    }
    memset(w->owns, 0, (size_t)r->o.n_layers * (size_t)r->o.n_experts);
    for (size_t i = 0; i < h->n_owned; i++) {
        const Moestream__ExpertRange *g = h->owned[i];
        if ((int)g->layer >= r->o.n_layers || g->expert_end > (uint32_t)r->o.n_experts || g->expert_begin > g->expert_end) {
            snprintf(w->why, sizeof w->why, "claims experts outside the model (layer %u, %u..%u)", g->layer,
                     g->expert_begin, g->expert_end);
            return -1;
        }
        for (uint32_t x = g->expert_begin; x < g->expert_end; x++)
            w->owns[(size_t)g->layer * (size_t)r->o.n_experts + x] = 1;
    }
    w->state = W_UP;
    w->backoff = 0;
    w->starting = 0;
    return 0;
}

/* Drain disconnect events: a worker whose connection dropped is down at once. */
static void check_monitor(ms_remote *r, wconn *w)
{
    if (!w->mon) return;
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, w->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            return;
        }
        int first = zmq_msg_size(&m) >= 2;
        uint16_t ev = 0;
        if (first) memcpy(&ev, zmq_msg_data(&m), 2);
        w->seen |= ev;
        int more = zmq_msg_more(&m);
        zmq_msg_close(&m);
        if (more) { /* second frame: the endpoint */
            zmq_msg_init(&m);
            zmq_msg_recv(&m, w->mon, ZMQ_DONTWAIT);
            zmq_msg_close(&m);
        }
        if (ev == ZMQ_EVENT_DISCONNECTED && w->state == W_UP) {
            mark_down(r, w, "connection lost");
            return;
        }
    }
}

/* Why a worker may not have answered its hello within limit seconds, from the connection events
 * seen: the likely causes, most specific first. */
static void hello_hint(const wconn *w, double limit, char *buf, size_t n)
{
    const char *cause;
    if (w->seen & ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
        cause = "the worker refused this coordinator's CURVE key: add the coordinator's public key to the "
                "worker's --allow file";
    else if (w->seen & (ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL))
        cause = w->curve ? "the CURVE handshake failed: check the worker's public_key in the cluster file and that "
                           "the worker uses CURVE"
                         : "the handshake failed: the worker may use CURVE (give its public_key in a --cluster file)";
    else if (w->seen & ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
        cause = "connected, but the worker did not answer: is it a moestream-worker of this version?";
    else if (w->curve && (w->seen & ZMQ_EVENT_CONNECTED))
        cause = "connected, but the CURVE handshake did not complete: likely this coordinator's key is not on the "
                "worker's --allow list, or the worker's public_key in the cluster file is wrong";
    else if (w->seen & (ZMQ_EVENT_CONNECT_RETRIED | ZMQ_EVENT_CONNECTED))
        cause = "could not connect: is the worker running and listening on this endpoint?";
    else
        cause = "no connection: the worker may be down, the host unreachable or a firewall blocking the port";
    snprintf(buf, n, "did not answer within %.0f s: %s", limit, cause);
}

#define LIKELY_CAUSES                                                                                             \
    "likely causes of no answer: this coordinator's key not on the worker's --allow list, a wrong worker public " \
    "key, the worker down, a firewall"
#define LOCAL_CAUSE "a worker this run started did not answer: it may have exited (see its messages above)"
/* The likely causes for r's workers: local ones are started here with the right keys. */
#define CAUSES(r) ((r)->o.local ? LOCAL_CAUSE : LIKELY_CAUSES)

/* Probe down workers whose back-off has passed, and finish probes that got their answer. */
static void probe(ms_remote *r)
{
    double t = ms_now();
    for (int i = 0; i < r->n; i++) {
        wconn *w = &r->w[i];
        if (w->state == W_DOWN && t >= w->probe_at) {
            if (open_sock(r, w) == 0) {
                w->state = W_PROBING;
                w->probe_at = t;
                send_hello(r, w);
            } else {
                mark_down(r, w, w->why);
            }
        } else if (w->state == W_PROBING) {
            Moestream__Envelope *e;
            while ((e = recv_env(r, w))) {
                if (take_hello(r, w, e) == 0) ms_log(1, "worker %s is up again", w->endpoint);
                ms_wire_free(e);
                if (w->state == W_UP) break;
            }
            /* a restarted local worker may take a while to load: it gets the whole timeout */
            double limit = w->starting ? r->o.timeout_s : (r->o.timeout_s < 5 ? r->o.timeout_s : 5);
            if (w->state == W_PROBING && t - w->probe_at > limit) {
                mark_down(r, w, w->starting ? "no answer to hello after its restart" : "no answer to hello");
                w->starting = 0; /* given its time once */
            }
            else if (w->state == W_PROBING && t - w->hello_at > (w->hello_sent ? 0.5 : 0.02))
                send_hello(r, w); /* the first one may have been refused before the connection was up */
        }
    }
}

/* A local worker that is not up may be dying (its socket closes before the process can be
 * reaped), restarting, or dead again before it answered (killed again, a crash on start): ask
 * the revive hook, which restarts it or gives up on it, instead of waiting out a hello. */
static void check_local(ms_remote *r)
{
    for (int i = 0; i < r->n; i++) {
        wconn *w = &r->w[i];
        if (!r->o.revive || (w->state != W_PROBING && w->state != W_DOWN)) continue;
        char why[200] = "";
        int rv = r->o.revive(r->o.revive_ctx, i, why, sizeof why);
        if (rv == 0) continue;
        close_sock(w);
        if (rv < 0) {
            snprintf(w->why, sizeof w->why, "%s", why);
            w->state = W_GONE;
            w->starting = 0;
            update_health(r);
        } else {
            w->revived = 1;
            w->starting = 1;
            w->backoff = 0;
            w->state = W_DOWN; /* opened again by probe(), at once */
            w->probe_at = 0;
        }
    }
}

/* Wait up to `limit` seconds for workers being probed to answer. */
static void wait_probes(ms_remote *r, double limit)
{
    double t0 = ms_now();
    for (;;) {
        check_local(r);
        probe(r);
        zmq_pollitem_t *it = r->probe_items; /* not r->items: a call may be polling with those */
        int n = 0;
        double lim = limit;
        for (int i = 0; i < r->n; i++)
            if (r->w[i].state == W_PROBING) {
                it[n++] = (zmq_pollitem_t){r->w[i].sock, 0, ZMQ_POLLIN, 0};
                /* a worker restarted during the wait is loading: it gets the whole timeout */
                if (r->w[i].starting && lim < r->o.timeout_s) lim = r->o.timeout_s;
            }
        if (!n || ms_now() - t0 > lim) return;
        zmq_poll(it, n, 50);
    }
}

/* Bring back, if it can, an owner of (layer, e) when none is up: probe the down ones now. */
static void revive_owners(ms_remote *r, int layer, int e)
{
    int any = 0, patient = 0, loading = 0;
    for (int i = 0; i < r->n; i++) {
        wconn *w = &r->w[i];
        if (w->state == W_UP && w->owns[(size_t)layer * (size_t)r->o.n_experts + (size_t)e]) return;
    }
    double now = ms_now();
    for (int i = 0; i < r->n; i++) {
        wconn *w = &r->w[i];
        if (w->state == W_PROBING) any = 1; /* asked already: its answer may be on the way */
        if (w->state == W_PROBING && w->starting) loading = 1;
        if (w->state == W_PROBING && r->o.revive) patient = 1; /* a local one: alive, or check_local sees */
        if (w->state != W_DOWN) continue;
        if (r->o.revive) { /* a local worker that exited is restarted, or given up on at once */
            char why[200] = "";
            int rv = r->o.revive(r->o.revive_ctx, i, why, sizeof why);
            if (rv < 0) {
                snprintf(w->why, sizeof w->why, "%s", why);
                w->state = W_GONE;
                update_health(r);
                continue;
            }
            if (rv > 0) {
                w->revived = 1;
                w->starting = 1;
                w->backoff = 0;
                w->probe_at = 0; /* a fresh process: ask it now */
            }
        }
        /* Asked now even within its back-off (a worker that is back answers a hello in
         * milliseconds), but one that failed recently is waited for only briefly: otherwise
         * every call needing only it waited out a full probe, and queued requests failed one by
         * one, seconds apart. Ownership of a worker never heard from is unknown: it is asked
         * too. */
        /* a local worker still running after its connection was lost may be dying: wait for it
         * fully (check_local restarts it as soon as it can be reaped) */
        if (w->probe_at <= now || r->o.revive) patient = 1;
        if (w->starting) loading = 1;
        w->probe_at = 0;
        any = 1;
    }
    if (!any) return;
    probe(r);
    /* a worker restarted just now is loading: wait for it as long as a request may take */
    double full = r->o.timeout_s < 5 ? r->o.timeout_s : 5;
    wait_probes(r, loading ? r->o.timeout_s : patient ? full : (full < REPROBE_WAIT_S ? full : REPROBE_WAIT_S));
}

/* The owners of (layer, e) and why each is not up, for a message. */
static void owners_why(const ms_remote *r, int layer, int e, char *buf, size_t n)
{
    buf[0] = 0;
    double now = ms_now();
    for (int x = 0; x < r->n; x++) {
        const wconn *w = &r->w[x];
        if (!w->owns[(size_t)layer * (size_t)r->o.n_experts + (size_t)e]) continue;
        size_t l = strlen(buf);
        if (w->state == W_DOWN && w->probe_at > now)
            snprintf(buf + l, n - l, "%s%s (%s; asked again in %.1f s)", l ? ", " : "", w->endpoint, w->why,
                     w->probe_at - now);
        else
            snprintf(buf + l, n - l, "%s%s (%s)", l ? ", " : "", w->endpoint, w->state == W_UP ? "failed" : w->why);
    }
    if (!buf[0]) snprintf(buf, n, "none known (no worker that owns it has answered yet)");
}

ms_remote *ms_remote_new(const ms_remote_opts *o, int first_moe)
{
    ms_remote *r = ms_calloc(1, sizeof *r);
    r->o = *o;
    snprintf(r->fingerprint, sizeof r->fingerprint, "%s", o->fingerprint ? o->fingerprint : "");
    r->o.fingerprint = r->fingerprint;
    MS_ASSERT(o->fmt != NULL);
    r->fmt = *o->fmt;
    r->o.fmt = &r->fmt;
    r->o.workers = NULL; /* endpoints and keys are copied below */
    if (r->o.timeout_s <= 0) r->o.timeout_s = 60;
    r->first_moe = first_moe;
    pthread_mutex_init(&r->health_mu, NULL);
    r->n = o->n_workers;
    r->ctx = zmq_ctx_new();
    r->w = ms_calloc((size_t)r->n, sizeof *r->w);
    r->items = ms_calloc((size_t)(2 * r->n + 1), sizeof *r->items);
    r->item_worker = ms_calloc((size_t)(2 * r->n + 1), sizeof *r->item_worker);
    r->probe_items = ms_calloc((size_t)(r->n + 1), sizeof *r->probe_items);
    int any_curve = 0;
    for (int i = 0; i < r->n; i++) {
        wconn *w = &r->w[i];
        w->endpoint = ms_strdup(o->workers[i].endpoint);
        w->owns = ms_calloc((size_t)o->n_layers * (size_t)o->n_experts, 1);
        if (o->workers[i].public_key) {
            snprintf(w->pub, sizeof w->pub, "%s", o->workers[i].public_key);
            w->curve = 1;
            any_curve = 1;
        }
    }
    if (any_curve) {
        if (!o->secret_key || strlen(o->secret_key) != 40) {
            ms_err_set("workers with public keys need the coordinator's CURVE secret (--curve-secret FILE)");
            ms_err_set_code(MS_EXIT_USAGE);
            ms_remote_free(r);
            return NULL;
        }
        snprintf(r->secret, sizeof r->secret, "%s", o->secret_key);
        if (zmq_curve_public(r->pub, r->secret) != 0) {
            ms_err_set("the coordinator's CURVE secret key is not a valid Z85 key");
            ms_err_set_code(MS_EXIT_USAGE);
            ms_remote_free(r);
            return NULL;
        }
    }
    /* Hellos to all, answers awaited together. */
    for (int i = 0; i < r->n; i++) {
        wconn *w = &r->w[i];
        if (open_sock(r, w) != 0) continue;
        w->state = W_PROBING;
        w->probe_at = ms_now();
        send_hello(r, w);
    }
    double t0 = ms_now(), limit = r->o.timeout_s < 10 ? r->o.timeout_s : 10;
    for (;;) {
        int waiting = 0;
        for (int i = 0; i < r->n; i++) waiting += r->w[i].state == W_PROBING;
        if (!waiting || ms_now() - t0 > limit) break;
        for (int i = 0; i < r->n; i++) {
            wconn *w = &r->w[i];
            if (w->state != W_PROBING) continue;
            zmq_pollitem_t it = {w->sock, 0, ZMQ_POLLIN, 0};
            check_monitor(r, w); /* records why a hello may get no answer */
            if (zmq_poll(&it, 1, 50) > 0) {
                Moestream__Envelope *e = recv_env(r, w);
                if (e) {
                    if (take_hello(r, w, e) != 0) {
                        ms_wire_free(e);
                        ms_err_set("worker %s %s", w->endpoint, w->why);
                        ms_err_set_code(MS_EXIT_WORKER);
                        ms_remote_free(r);
                        return NULL;
                    }
                    ms_wire_free(e);
                }
            } else if (ms_now() - w->hello_at > 0.5) {
                send_hello(r, w);
            }
        }
    }
    /* A worker that does not answer is left down and probed again later; the run can start
     * as long as the others own every expert. */
    int up = 0;
    char down[1600] = "";
    for (int i = 0; i < r->n; i++) {
        wconn *w = &r->w[i];
        if (w->state == W_UP) {
            up++;
            continue;
        }
        char hint[512];
        check_monitor(r, w);
        if (!w->why[0]) hello_hint(w, limit, hint, sizeof hint);
        snprintf(down + strlen(down), sizeof down - strlen(down), "%s%s (%s)", down[0] ? ", " : "", w->endpoint,
                 w->why[0] ? w->why : hint);
        ms_log(1, "worker %s: %s%s%s%s", w->endpoint, w->why[0] ? w->why : hint, w->why[0] ? "" : " (",
               w->why[0] ? "" : CAUSES(r), w->why[0] ? "" : ")");
        mark_down(r, w, w->why[0] ? w->why : hint);
    }
    /* Every routed expert must have an owner. */
    for (int l = first_moe; l < o->n_layers; l++)
        for (int e = 0; e < o->n_experts; e++) {
            int owned = 0;
            for (int i = 0; i < r->n && !owned; i++) owned = r->w[i].owns[(size_t)l * (size_t)o->n_experts + (size_t)e];
            if (!owned) {
                if (down[0])
                    ms_err_set("no worker that answered owns layer %d expert %d (and maybe others); not answering: "
                               "%s (%s)",
                               l, e, down, CAUSES(r));
                else if (r->o.local)
                    ms_err_set("no worker that answered owns layer %d expert %d (and maybe others)", l, e);
                else
                    ms_err_set("no worker that answered owns layer %d expert %d (and maybe others): check the "
                               "workers' --experts or packs",
                               l, e);
                ms_err_set_code(MS_EXIT_WORKER);
                ms_remote_free(r);
                return NULL;
            }
        }
    ms_log(1, "%d of %d worker%s up", up, r->n, r->n > 1 ? "s" : "");
    return r;
}

void ms_remote_free(ms_remote *r)
{
    if (!r) return;
    for (int i = 0; i < r->n; i++) {
        close_sock(&r->w[i]);
        free(r->w[i].endpoint);
        free(r->w[i].owns);
        free(r->w[i].items);
    }
    free(r->w);
    free(r->items);
    free(r->item_worker);
    free(r->probe_items);
    if (r->ctx) zmq_ctx_term(r->ctx);
    pthread_mutex_destroy(&r->health_mu);
    free(r);
}

/* Pick an up owner of (layer, e), skipping `avoid`; -1 if none. Replicas are used in turn by
 * expert id so load spreads, deterministically. */
static int pick(ms_remote *r, int layer, int e, int avoid)
{
    int cand[256], n = 0;
    for (int i = 0; i < r->n && n < 256; i++)
        if (i != avoid && r->w[i].state == W_UP && r->w[i].owns[(size_t)layer * (size_t)r->o.n_experts + (size_t)e])
            cand[n++] = i;
    return n ? cand[e % n] : -1;
}

/* A request stays below this size, half of every worker's limit (MS_WIRE_MAX_REQUEST): one
 * request per (layer, worker) whenever it fits, consecutive slices otherwise. Replies are no
 * larger than their requests, so the socket's MS_WIRE_MAX_MSG bounds what a worker can send.
 * MS_REMOTE_MAX_REQUEST (bytes) lowers it, so tests can exercise the slicing. */
static int64_t max_request(void)
{
    static int64_t v;
    if (!v) {
        const char *e = getenv("MS_REMOTE_MAX_REQUEST");
        v = e && atoll(e) > 0 ? atoll(e) : MS_WIRE_MAX_REQUEST / 2;
        if (v > MS_WIRE_MAX_REQUEST) v = MS_WIRE_MAX_REQUEST; /* what every worker accepts */
    }
    return v;
}

/* Send worker wi the next slice of its items, from w->off. */
static int send_request(ms_remote *r, int wi, int layer, const float *z, int k, const int32_t *ids, int64_t n_rows)
{
    wconn *w = &r->w[wi];
    int64_t L = r->fmt.latent;
    int64_t *local = ms_malloc(sizeof(int64_t) * (size_t)n_rows); /* global row -> local row, -1 */
    for (int64_t i = 0; i < n_rows; i++) local[i] = -1;
    int64_t rows = 0, end = w->off;
    for (; end < w->n_items; end++) {
        int64_t g = w->items[end] / k, nr = rows + (local[g] < 0);
        if (end > w->off && (nr + end - w->off + 1) * L * 4 > max_request()) break;
        if (local[g] < 0) local[g] = rows++;
    }
    w->end = end;
    int64_t ni = end - w->off;
    Moestream__ComputeRequest c = MOESTREAM__COMPUTE_REQUEST__INIT;
    float *act = ms_malloc(sizeof(float) * (size_t)(rows * L)); /* [rows][L] */
    uint32_t *irow = ms_malloc(sizeof(uint32_t) * (size_t)ni);
    uint32_t *iexp = ms_malloc(sizeof(uint32_t) * (size_t)ni);
    for (int64_t g = 0; g < n_rows; g++)
        if (local[g] >= 0) memcpy(act + local[g] * L, z + g * L, sizeof(float) * (size_t)L);
    for (int64_t j = 0; j < ni; j++) {
        irow[j] = (uint32_t)local[w->items[w->off + j] / k];
        iexp[j] = (uint32_t)ids[w->items[w->off + j]];
    }
    ms_uuid_new(&w->req);
    c.request_uuid.data = w->req.b;
    c.request_uuid.len = 16;
    c.layer = (uint32_t)layer;
    c.rows = (uint32_t)rows;
    c.latent_width = (uint32_t)L;
    c.n_activations = (size_t)(rows * L);
    c.activations = act;
    c.n_item_row = c.n_item_expert = (size_t)ni;
    c.item_row = irow;
    c.item_expert = iexp;
    Moestream__Envelope env = MOESTREAM__ENVELOPE__INIT;
    env.body_case = MOESTREAM__ENVELOPE__BODY_COMPUTE;
    env.compute = &c;
    int rc = send_env(r, w, &env);
    free(act);
    free(irow);
    free(iexp);
    free(local);
    if (rc == 0) {
        w->pending = 1;
        w->probe_at = ms_now(); /* the deadline counts from here */
        r->st.requests++;
    }
    return rc;
}

/* Give the items of worker `from` to other up owners; -1 (ms_err set) if some have none. */
static int reassign(ms_remote *r, int from, int layer, const int32_t *ids, int64_t *assign, int *need_send)
{
    wconn *f = &r->w[from];
    for (int64_t j = f->off; j < f->n_items; j++) { /* the slices already answered stay */
        int64_t i = f->items[j];
        int to = pick(r, layer, ids[i], from);
        if (to < 0) {
            revive_owners(r, layer, ids[i]); /* a replica that was down may be back */
            /* a worker restarted just now may take its own items back (bounded by the restarts) */
            to = pick(r, layer, ids[i], f->revived && f->state == W_UP ? -1 : from);
        }
        if (to < 0) {
            char list[1024];
            owners_why(r, layer, ids[i], list, sizeof list);
            ms_err_set("layer %d expert %d is unreachable: its workers %s", layer, ids[i], list);
            return ms_err_set_code(MS_EXIT_WORKER);
        }
        assign[i] = to;
        need_send[to] = 1;
        r->st.failovers++;
    }
    f->n_items = f->off = f->end = 0;
    f->revived = 0;
    return 0;
}

/* The item lists of the workers that need a request, in grouped order: each worker's items of
 * one expert are consecutive, as the protocol requires (slices keep that). */
static void collect(ms_remote *r, const ms_xgroup *g, const int64_t *assign, int *need_send)
{
    int64_t n = g->nd ? g->start[g->nd] : 0;
    for (int i = 0; i < r->n; i++) {
        if (!need_send[i]) continue;
        wconn *w = &r->w[i];
        free(w->items);
        w->items = ms_malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
        w->n_items = w->off = w->end = 0;
        for (int64_t t = 0; t < n; t++) {
            int64_t j = ms_xgroup_item(g, t);
            if (assign[j] == i) w->items[w->n_items++] = j;
        }
    }
}

/* Every output of a compute reply must be finite; otherwise ms_err names the worker, layer and
 * expert (class MS_EXIT_WORKER). */
static int check_reply_finite(const wconn *w, int layer, const int32_t *ids, const Moestream__ComputeReply *cr,
                              int64_t L)
{
    char who[300];
    snprintf(who, sizeof who, "worker %.200s sent a non-finite result", w->endpoint);
    for (int64_t j = 0; j < w->end - w->off; j++)
        if (ms_expert_check_finite(who, MS_EXIT_WORKER, layer, ids[w->items[w->off + j]], NULL, cr->outputs + j * L, 1,
                                   L) != 0)
            return -1;
    return 0;
}

static int remote_compute(void *ctx, int layer, int64_t n_rows, const float *z, int k, const int32_t *ids, float *out)
{
    ms_remote *r = ctx;
    int64_t n = n_rows * k, L = r->fmt.latent;
    int rc = -1;
    ms_xgroup g = {0};
    probe(r);
    int64_t *assign = ms_malloc(sizeof(int64_t) * (size_t)n); /* [n] worker of each item */
    uint8_t *done = ms_calloc((size_t)n, 1);
    int *need_send = ms_calloc((size_t)r->n, sizeof(int));
    for (int i = 0; i < r->n; i++) {
        r->w[i].pending = 0;
        r->w[i].n_items = r->w[i].off = r->w[i].end = 0;
    }
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= r->o.n_experts) {
            ms_err_set("expert id %d out of range in layer %d", ids[i], layer);
            goto out;
        }
    /* The one grouping of the items by expert on this side: one worker picked per expert, and
     * each worker's request carries its items expert by expert. */
    if (ms_xgroup_build(&g, n, (const uint32_t *)ids, r->o.n_experts) != 0) goto out;
    for (int d = 0; d < g.nd; d++) {
        int e = g.dexp[d], wi = pick(r, layer, e, -1);
        if (wi < 0) {
            revive_owners(r, layer, e);
            wi = pick(r, layer, e, -1);
        }
        if (wi < 0) {
            char list[1024];
            owners_why(r, layer, e, list, sizeof list);
            ms_err_set("layer %d expert %d is unreachable: every worker that owns it is down: %s", layer, e, list);
            ms_err_set_code(MS_EXIT_WORKER);
            goto out;
        }
        for (int64_t t = g.start[d]; t < g.start[d + 1]; t++) assign[ms_xgroup_item(&g, t)] = wi;
        need_send[wi] = 1;
    }
    for (;;) {
        collect(r, &g, assign, need_send);
        for (int i = 0; i < r->n; i++) {
            if (!need_send[i]) continue;
            need_send[i] = 0;
            if (r->w[i].n_items && send_request(r, i, layer, z, k, ids, n_rows) != 0) {
                mark_down(r, &r->w[i], "cannot send");
                if (reassign(r, i, layer, ids, assign, need_send) != 0) goto out;
                r->st.resends++;
                break; /* item lists changed: collect them again before sending more */
            }
        }
        int any_send = 0;
        for (int i = 0; i < r->n; i++) any_send |= need_send[i];
        if (any_send) continue;
        int pending = 0;
        for (int i = 0; i < r->n; i++) pending += r->w[i].pending;
        if (!pending) break;
        /* Wait for replies, disconnects and deadlines: two poll items per worker (its socket
         * and its monitor), sized for every worker (a fixed 512 left workers past ~255 unread). */
        zmq_pollitem_t *items = r->items;
        int *map = r->item_worker, np = 0;
        for (int i = 0; i < r->n; i++) {
            if (!r->w[i].pending) continue;
            items[np] = (zmq_pollitem_t){r->w[i].sock, 0, ZMQ_POLLIN, 0};
            map[np++] = i;
            if (r->w[i].mon) {
                items[np] = (zmq_pollitem_t){r->w[i].mon, 0, ZMQ_POLLIN, 0};
                map[np++] = i;
            }
        }
        double t0 = ms_now();
        int pr = zmq_poll(items, np, 200);
        if (pr < 0 && zmq_errno() == EINTR) {
            ms_err_set("interrupted");
            goto out;
        }
        for (int p = 0; p < np; p++) {
            int i = map[p];
            wconn *w = &r->w[i];
            if (!w->pending) continue;
            if (items[p].socket == w->mon) {
                if (items[p].revents & ZMQ_POLLIN) check_monitor(r, w);
                if (w->state == W_DOWN) {
                    if (reassign(r, i, layer, ids, assign, need_send) != 0) goto out;
                    r->st.resends++;
                }
                continue;
            }
            if (!(items[p].revents & ZMQ_POLLIN)) continue;
            Moestream__Envelope *e;
            while (w->pending && (e = recv_env(r, w))) {
                ms_uuid u;
                if (e->body_case == MOESTREAM__ENVELOPE__BODY_COMPUTE_REPLY &&
                    ms_wire_uuid(&e->compute_reply->request_uuid, &u) == 0 && !memcmp(u.b, w->req.b, 16)) {
                    const Moestream__ComputeReply *cr = e->compute_reply;
                    if ((int64_t)cr->items != w->end - w->off || (int64_t)cr->latent_width != L) {
                        mark_down(r, w, "reply does not match the request");
                    } else if (check_reply_finite(w, layer, ids, cr, L) != 0) {
                        ms_wire_free(e);
                        goto out; /* never combine NaN/Inf: the run stops naming the worker */
                    } else {
                        for (int64_t j = w->off; j < w->end; j++) {
                            memcpy(out + w->items[j] * L, cr->outputs + (j - w->off) * L, sizeof(float) * (size_t)L);
                            done[w->items[j]] = 1;
                        }
                        w->off = w->end;
                        w->pending = 0;
                        if (w->off < w->n_items) { /* the next slice */
                            if (send_request(r, i, layer, z, k, ids, n_rows) != 0) mark_down(r, w, "cannot send");
                        } else {
                            w->n_items = w->off = w->end = 0;
                        }
                    }
                } else if (e->body_case == MOESTREAM__ENVELOPE__BODY_ERROR &&
                           ms_wire_uuid(&e->error->request_uuid, &u) == 0 && !memcmp(u.b, w->req.b, 16)) {
                    /* The worker is alive but could not compute (I/O, checksum, ownership): try a
                     * replica; with none the run stops with the worker's own message. */
                    char msg[600];
                    snprintf(msg, sizeof msg, "worker %s: %s", w->endpoint, e->error->message);
                    w->pending = 0;
                    int code = e->error->code;
                    ms_wire_free(e);
                    e = NULL;
                    if (code == MOESTREAM__ERROR__CODE__SHUTTING_DOWN) mark_down(r, w, "shutting down");
                    if (reassign(r, i, layer, ids, assign, need_send) != 0) {
                        ms_err_set("%s", msg);
                        ms_err_set_code(code == MOESTREAM__ERROR__CODE__CHECKSUM ? MS_EXIT_MODEL : MS_EXIT_WORKER);
                        goto out;
                    }
                    ms_log(1, "%s; retrying on a replica", msg);
                    r->st.resends++;
                }
                ms_wire_free(e); /* stale replies of earlier calls, pongs: ignored */
            }
            if (w->state == W_DOWN && w->n_items) {
                if (reassign(r, i, layer, ids, assign, need_send) != 0) goto out;
                r->st.resends++;
            }
        }
        /* Deadlines. */
        double t = ms_now();
        (void)t0;
        for (int i = 0; i < r->n; i++) {
            wconn *w = &r->w[i];
            if (w->pending && t - w->probe_at > r->o.timeout_s) {
                /* its reply may have come while this thread waited on something else (a probe of
                 * another worker): read it before calling the worker late */
                zmq_pollitem_t it = {w->sock, 0, ZMQ_POLLIN, 0};
                if (zmq_poll(&it, 1, 0) > 0 && (it.revents & ZMQ_POLLIN)) continue;
                mark_down(r, w, "no reply before the deadline");
                if (reassign(r, i, layer, ids, assign, need_send) != 0) goto out;
                r->st.resends++;
            }
        }
    }
    for (int64_t i = 0; i < n; i++)
        if (!done[i]) { /* should not happen; never report partial output as success */
            ms_err_set("layer %d expert %d: no output came back from the workers", layer, ids[i]);
            ms_err_set_code(MS_EXIT_WORKER);
            goto out;
        }
    rc = 0;
out:
    ms_xgroup_free(&g);
    free(assign);
    free(done);
    free(need_send);
    return rc;
}

ms_experts ms_remote_iface(ms_remote *r)
{
    ms_experts ex = {remote_compute, r};
    return ex;
}

void ms_remote_get_stats(ms_remote *r, ms_remote_stats *st)
{
    *st = r->st;
    st->workers_up = 0;
    for (int i = 0; i < r->n; i++) st->workers_up += r->w[i].state == W_UP;
}
