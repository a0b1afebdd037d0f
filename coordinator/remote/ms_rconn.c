/* ms_rconn: the coordinator's connections to expert workers: sockets and monitors, hellos, probes with back-off, local revival, health. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "ms_clock.h"
#include "ms_err.h"
#include "ms_remote_int.h"
#include "ms_wire.h"


/* Whether every routed expert still has an owner that is not gone for good (a local worker
 * given up on): kept for ms_remote_health, which other threads call. Run on the caller's
 * thread when a worker is given up on. */
void ms_rconn_update_health(ms_remote *r)
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

void ms_rconn_close(wconn *w)
{
    /* stop the monitor before closing what it watches: libzmq otherwise leaks its last event */
    if (w->sock && w->mon) zmq_socket_monitor(w->sock, NULL, 0);
    if (w->mon) zmq_close(w->mon);
    if (w->sock) zmq_close(w->sock);
    w->sock = w->mon = NULL;
}

void ms_rconn_down(ms_remote *r, wconn *w, const char *why)
{
    (void)r; /* its quiet flag is gone: ms_log decides */
    char reason[256];
    snprintf(reason, sizeof reason, "%.200s", why);
    if (w->state == W_UP) ms_log(1, "worker %s is down: %s", w->endpoint, reason);
    snprintf(w->why, sizeof w->why, "%s", reason);
    ms_rconn_close(w);
    w->state = W_DOWN;
    w->pending = 0;
    w->backoff = w->backoff ? (w->backoff * 2 > 30 ? 30 : w->backoff * 2) : 0.5;
    w->probe_at = ms_now() + w->backoff;
}

int ms_rconn_open(ms_remote *r, wconn *w)
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
        ms_rconn_close(w);
        return -1;
    }
    return 0;
}

int ms_rconn_send(ms_remote *r, wconn *w, Moestream__Envelope *e)
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

void ms_rconn_hello(ms_remote *r, wconn *w)
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
    w->hello_sent = ms_rconn_send(r, w, &env) == 0;
}

/* Receive one message from w (non-blocking); NULL if none or garbage (w->why set). */
Moestream__Envelope *ms_rconn_recv(ms_remote *r, wconn *w)
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
int ms_rconn_take_hello(ms_remote *r, wconn *w, const Moestream__Envelope *e)
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
    memset(w->owns, 0, (size_t)(r->o.n_layers + r->o.draft_layers) * (size_t)r->o.n_experts);
    for (size_t i = 0; i < h->n_owned; i++) {
        const Moestream__ExpertRange *g = h->owned[i];
        if ((int)g->layer >= r->o.n_layers + r->o.draft_layers || g->expert_end > (uint32_t)r->o.n_experts || g->expert_begin > g->expert_end) {
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
void ms_rconn_check_monitor(ms_remote *r, wconn *w)
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
            ms_rconn_down(r, w, "connection lost");
            return;
        }
    }
}

/* Why a worker may not have answered its hello within limit seconds, from the connection events
 * seen: the likely causes, most specific first. */
void ms_rconn_hint(const wconn *w, double limit, char *buf, size_t n)
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



/* Probe down workers whose back-off has passed, and finish probes that got their answer. */
void ms_rconn_probe(ms_remote *r)
{
    double t = ms_now();
    for (int i = 0; i < r->n; i++) {
        wconn *w = &r->w[i];
        if (w->state == W_DOWN && t >= w->probe_at) {
            if (ms_rconn_open(r, w) == 0) {
                w->state = W_PROBING;
                w->probe_at = t;
                ms_rconn_hello(r, w);
            } else {
                ms_rconn_down(r, w, w->why);
            }
        } else if (w->state == W_PROBING) {
            Moestream__Envelope *e;
            while ((e = ms_rconn_recv(r, w))) {
                if (ms_rconn_take_hello(r, w, e) == 0) ms_log(1, "worker %s is up again", w->endpoint);
                ms_wire_free(e);
                if (w->state == W_UP) break;
            }
            /* a restarted local worker may take a while to load: it gets the whole timeout */
            double limit = w->starting ? r->o.timeout_s : (r->o.timeout_s < 5 ? r->o.timeout_s : 5);
            if (w->state == W_PROBING && t - w->probe_at > limit) {
                ms_rconn_down(r, w, w->starting ? "no answer to hello after its restart" : "no answer to hello");
                w->starting = 0; /* given its time once */
            }
            else if (w->state == W_PROBING && t - w->hello_at > (w->hello_sent ? 0.5 : 0.02))
                ms_rconn_hello(r, w); /* the first one may have been refused before the connection was up */
        }
    }
}

/* A local worker that is not up may be dying (its socket closes before the process can be
 * reaped), restarting, or dead again before it answered (killed again, a crash on start): ask
 * the revive hook, which restarts it or gives up on it, instead of waiting out a hello. */
void ms_rconn_check_local(ms_remote *r)
{
    for (int i = 0; i < r->n; i++) {
        wconn *w = &r->w[i];
        if (!r->o.revive || (w->state != W_PROBING && w->state != W_DOWN)) continue;
        char why[200] = "";
        int rv = r->o.revive(r->o.revive_ctx, i, why, sizeof why);
        if (rv == 0) continue;
        ms_rconn_close(w);
        if (rv < 0) {
            snprintf(w->why, sizeof w->why, "%s", why);
            w->state = W_GONE;
            w->starting = 0;
            ms_rconn_update_health(r);
        } else {
            w->revived = 1;
            w->starting = 1;
            w->backoff = 0;
            w->state = W_DOWN; /* opened again by ms_rconn_probe(), at once */
            w->probe_at = 0;
        }
    }
}

/* Wait up to `limit` seconds for workers being probed to answer. */
void ms_rconn_wait(ms_remote *r, double limit)
{
    double t0 = ms_now();
    for (;;) {
        ms_rconn_check_local(r);
        ms_rconn_probe(r);
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
void ms_rconn_revive_owners(ms_remote *r, int layer, int e)
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
                ms_rconn_update_health(r);
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
    ms_rconn_probe(r);
    /* a worker restarted just now is loading: wait for it as long as a request may take */
    double full = r->o.timeout_s < 5 ? r->o.timeout_s : 5;
    ms_rconn_wait(r, loading ? r->o.timeout_s : patient ? full : (full < REPROBE_WAIT_S ? full : REPROBE_WAIT_S));
}

/* The owners of (layer, e) and why each is not up, for a message. */
void ms_rconn_owners_why(const ms_remote *r, int layer, int e, char *buf, size_t n)
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
