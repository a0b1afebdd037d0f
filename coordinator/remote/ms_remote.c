/* ms_remote: routed experts computed by workers: one call's requests, replies, deadlines and fail-over to replicas. */
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
#include "ms_remote_int.h"
#include "ms_wire.h"

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
        w->owns = ms_calloc((size_t)(o->n_layers + o->draft_layers) * (size_t)o->n_experts, 1);
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
        if (ms_rconn_open(r, w) != 0) continue;
        w->state = W_PROBING;
        w->probe_at = ms_now();
        ms_rconn_hello(r, w);
    }
    double t0 = ms_now(), limit = r->o.timeout_s < 10 ? r->o.timeout_s : 10;
    /* One poll over every worker still probing (probe_items, item_worker: room for all), so an
     * answer is taken within one round whatever the number of workers. */
    for (;;) {
        int np = 0;
        for (int i = 0; i < r->n; i++) {
            wconn *w = &r->w[i];
            if (w->state != W_PROBING) continue;
            ms_rconn_check_monitor(r, w); /* records why a hello may get no answer */
            r->probe_items[np] = (zmq_pollitem_t){w->sock, 0, ZMQ_POLLIN, 0};
            r->item_worker[np++] = i;
        }
        if (!np || ms_now() - t0 > limit) break;
        zmq_poll(r->probe_items, np, 50);
        for (int j = 0; j < np; j++) {
            wconn *w = &r->w[r->item_worker[j]];
            if (r->probe_items[j].revents & ZMQ_POLLIN) {
                Moestream__Envelope *e = ms_rconn_recv(r, w);
                if (e) {
                    if (ms_rconn_take_hello(r, w, e) != 0) {
                        ms_wire_free(e);
                        ms_err_set("worker %s %s", w->endpoint, w->why);
                        ms_err_set_code(MS_EXIT_WORKER);
                        ms_remote_free(r);
                        return NULL;
                    }
                    ms_wire_free(e);
                }
            } else if (ms_now() - w->hello_at > 0.5) {
                ms_rconn_hello(r, w);
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
        ms_rconn_check_monitor(r, w);
        if (!w->why[0]) ms_rconn_hint(w, limit, hint, sizeof hint);
        snprintf(down + strlen(down), sizeof down - strlen(down), "%s%s (%s)", down[0] ? ", " : "", w->endpoint,
                 w->why[0] ? w->why : hint);
        ms_log(1, "worker %s: %s%s%s%s", w->endpoint, w->why[0] ? w->why : hint, w->why[0] ? "" : " (",
               w->why[0] ? "" : CAUSES(r), w->why[0] ? "" : ")");
        ms_rconn_down(r, w, w->why[0] ? w->why : hint);
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
        ms_rconn_close(&r->w[i]);
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
static int is_cand(const ms_remote *r, int i, int layer, int e, int avoid)
{
    return i != avoid && r->w[i].state == W_UP && r->w[i].owns[(size_t)layer * (size_t)r->o.n_experts + (size_t)e];
}

static int pick(ms_remote *r, int layer, int e, int avoid)
{
    int n = 0; /* candidates (any number of replicas), then the (e mod n)-th of them */
    for (int i = 0; i < r->n; i++) n += is_cand(r, i, layer, e, avoid);
    if (!n) return -1;
    for (int i = 0, k = e % n; i < r->n; i++)
        if (is_cand(r, i, layer, e, avoid) && k-- == 0) return i;
    return -1;
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
    int rc = ms_rconn_send(r, w, &env);
    free(act);
    free(irow);
    free(iexp);
    free(local);
    if (rc == 0) {
        w->pending = 1;
        w->probe_at = w->sent_at = ms_now(); /* the deadline counts from here */
        w->requests++;
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
            ms_rconn_revive_owners(r, layer, ids[i]); /* a replica that was down may be back */
            /* a worker restarted just now may take its own items back (bounded by the restarts) */
            to = pick(r, layer, ids[i], f->revived && f->state == W_UP ? -1 : from);
        }
        if (to < 0) {
            char list[1024];
            ms_rconn_owners_why(r, layer, ids[i], list, sizeof list);
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

/* One call of remote_compute: its items, their assignment to workers and what came back. */
typedef struct {
    ms_remote *r;
    int layer, k;
    int64_t n_rows, n;
    const float *z;       /* [n_rows][latent] */
    const int32_t *ids;   /* [n] expert of each (row, rank) item */
    float *out;           /* [n][latent] */
    const int64_t *slot;  /* [n] where item i's output goes in out (NULL: at i) */
    ms_xgroup g;
    int64_t *assign;      /* [n] worker of each item */
    uint8_t *done;        /* [n] output placed */
    int *need_send;       /* [n workers] a request to (re)send */
} rcall;

/* Step 1: one worker for each expert of the call (reviving owners when none is up). */
static int assign_experts(rcall *c)
{
    ms_remote *r = c->r;
    for (int64_t i = 0; i < c->n; i++)
        if (c->ids[i] < 0 || c->ids[i] >= r->o.n_experts) {
            ms_err_set("expert id %d out of range in layer %d", c->ids[i], c->layer);
            return -1;
        }
    /* The one grouping of the items by expert on this side: one worker picked per expert, and
     * each worker's request carries its items expert by expert. */
    if (ms_xgroup_build(&c->g, c->n, (const uint32_t *)c->ids, r->o.n_experts) != 0) return -1;
    for (int d = 0; d < c->g.nd; d++) {
        int e = c->g.dexp[d], wi = pick(r, c->layer, e, -1);
        if (wi < 0) {
            ms_rconn_revive_owners(r, c->layer, e);
            wi = pick(r, c->layer, e, -1);
        }
        if (wi < 0) {
            char list[1024];
            ms_rconn_owners_why(r, c->layer, e, list, sizeof list);
            ms_err_set("layer %d expert %d is unreachable: every worker that owns it is down: %s", c->layer, e, list);
            return ms_err_set_code(MS_EXIT_WORKER);
        }
        for (int64_t t = c->g.start[d]; t < c->g.start[d + 1]; t++) c->assign[ms_xgroup_item(&c->g, t)] = wi;
        c->need_send[wi] = 1;
    }
    return 0;
}

/* Worker i lost its request: its items go to replicas (-1: none, ms_err set). */
static int fail_over(rcall *c, int i)
{
    if (reassign(c->r, i, c->layer, c->ids, c->assign, c->need_send) != 0) return -1;
    c->r->st.resends++;
    return 0;
}

/* Step 2: send every request that needs sending. Returns 1 when more are to be sent (item
 * lists changed by a fail-over), 0 when all are out, -1 on a failure (ms_err set). */
static int send_requests(rcall *c)
{
    ms_remote *r = c->r;
    collect(r, &c->g, c->assign, c->need_send);
    for (int i = 0; i < r->n; i++) {
        if (!c->need_send[i]) continue;
        c->need_send[i] = 0;
        if (r->w[i].n_items && send_request(r, i, c->layer, c->z, c->k, c->ids, c->n_rows) != 0) {
            ms_rconn_down(r, &r->w[i], "cannot send");
            if (fail_over(c, i) != 0) return -1;
            return 1; /* item lists changed: collect them again before sending more */
        }
    }
    for (int i = 0; i < r->n; i++)
        if (c->need_send[i]) return 1;
    return 0;
}

/* Step 3b: everything waiting on worker i's socket: its reply (outputs placed in canonical
 * (row, rank) order, the next slice sent), its error (a replica tried), stale messages. */
static int take_replies(rcall *c, int i)
{
    ms_remote *r = c->r;
    wconn *w = &r->w[i];
    int layer = c->layer;
    const int32_t *ids = c->ids;
    int64_t L = r->fmt.latent;
    float *out = c->out;
    uint8_t *done = c->done;
    Moestream__Envelope *e;
    while (w->pending && (e = ms_rconn_recv(r, w))) {
        ms_uuid u;
        if (e->body_case == MOESTREAM__ENVELOPE__BODY_COMPUTE_REPLY &&
            ms_wire_uuid(&e->compute_reply->request_uuid, &u) == 0 && !memcmp(u.b, w->req.b, 16)) {
            const Moestream__ComputeReply *cr = e->compute_reply;
            if ((int64_t)cr->items != w->end - w->off || (int64_t)cr->latent_width != L) {
                ms_rconn_down(r, w, "reply does not match the request");
            } else if (check_reply_finite(w, layer, ids, cr, L) != 0) {
                ms_wire_free(e);
                return -1; /* never combine NaN/Inf: the run stops naming the worker */
            } else {
                for (int64_t j = w->off; j < w->end; j++) {
                    memcpy(out + (c->slot ? c->slot[w->items[j]] : w->items[j]) * L, cr->outputs + (j - w->off) * L,
                           sizeof(float) * (size_t)L);
                    done[w->items[j]] = 1;
                }
                w->off = w->end;
                w->pending = 0;
                w->replies++;
                w->reply_seconds += ms_now() - w->sent_at;
                if (w->off < w->n_items) { /* the next slice */
                    if (send_request(r, i, layer, c->z, c->k, ids, c->n_rows) != 0) ms_rconn_down(r, w, "cannot send");
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
            if (code == MOESTREAM__ERROR__CODE__SHUTTING_DOWN) ms_rconn_down(r, w, "shutting down");
            if (reassign(r, i, layer, ids, c->assign, c->need_send) != 0) {
                ms_err_set("%s", msg);
                ms_err_set_code(code == MOESTREAM__ERROR__CODE__CHECKSUM ? MS_EXIT_MODEL : MS_EXIT_WORKER);
                return -1;
            }
            ms_log(1, "%s; retrying on a replica", msg);
            r->st.resends++;
        }
        ms_wire_free(e); /* stale replies of earlier calls, pongs: ignored */
    }
    if (w->state == W_DOWN && w->n_items && fail_over(c, i) != 0) return -1;
    return 0;
}

/* Step 3: wait (200 ms at most) for replies and disconnects of the workers with a request out,
 * and handle them. Two poll items per worker (its socket and its monitor), sized for every
 * worker (a fixed 512 left workers past ~255 unread). */
static int await_replies(rcall *c)
{
    ms_remote *r = c->r;
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
    int pr = zmq_poll(items, np, 200);
    if (pr < 0 && zmq_errno() == EINTR) {
        ms_err_set("interrupted");
        return -1;
    }
    for (int p = 0; p < np; p++) {
        int i = map[p];
        wconn *w = &r->w[i];
        if (!w->pending) continue;
        if (items[p].socket == w->mon) {
            if (items[p].revents & ZMQ_POLLIN) ms_rconn_check_monitor(r, w);
            if (w->state == W_DOWN && fail_over(c, i) != 0) return -1;
            continue;
        }
        if ((items[p].revents & ZMQ_POLLIN) && take_replies(c, i) != 0) return -1;
    }
    return 0;
}

/* Step 4: a worker past its deadline is down and its items go to replicas. */
static int check_deadlines(rcall *c)
{
    ms_remote *r = c->r;
    double t = ms_now();
    for (int i = 0; i < r->n; i++) {
        wconn *w = &r->w[i];
        if (!w->pending || t - w->probe_at <= r->o.timeout_s) continue;
        /* its reply may have come while this thread waited on something else (a probe of
         * another worker): read it before calling the worker late */
        zmq_pollitem_t it = {w->sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 0) > 0 && (it.revents & ZMQ_POLLIN)) continue;
        ms_rconn_down(r, w, "no reply before the deadline");
        if (fail_over(c, i) != 0) return -1;
    }
    return 0;
}

static int remote_compute_placed(void *ctx, int layer, int64_t n_rows, const float *z, int k, const int32_t *ids,
                                 const int64_t *slot, float *out)
{
    ms_remote *r = ctx;
    rcall c = {.r = r, .layer = layer, .k = k, .n_rows = n_rows, .n = n_rows * k, .z = z, .ids = ids, .out = out,
               .slot = slot};
    c.assign = ms_malloc(sizeof(int64_t) * (size_t)(c.n ? c.n : 1));
    c.done = ms_calloc((size_t)(c.n ? c.n : 1), 1);
    c.need_send = ms_calloc((size_t)r->n, sizeof(int));
    ms_rconn_probe(r);
    for (int i = 0; i < r->n; i++) {
        r->w[i].pending = 0;
        r->w[i].n_items = r->w[i].off = r->w[i].end = 0;
    }
    int rc = assign_experts(&c);
    while (rc == 0) {
        int more = send_requests(&c);
        if (more < 0) rc = -1;
        if (more != 0) continue;
        int pending = 0;
        for (int i = 0; i < r->n; i++) pending += r->w[i].pending;
        if (!pending) break;
        if (await_replies(&c) != 0 || check_deadlines(&c) != 0) rc = -1;
    }
    for (int64_t i = 0; rc == 0 && i < c.n; i++)
        if (!c.done[i]) { /* should not happen; never report partial output as success */
            ms_err_set("layer %d expert %d: no output came back from the workers", layer, ids[i]);
            rc = ms_err_set_code(MS_EXIT_WORKER);
        }
    ms_xgroup_free(&c.g);
    free(c.assign);
    free(c.done);
    free(c.need_send);
    return rc == 0 ? 0 : -1;
}

static int remote_compute(void *ctx, int layer, int64_t n_rows, const float *z, int k, const int32_t *ids, float *out)
{
    return remote_compute_placed(ctx, layer, n_rows, z, k, ids, NULL, out);
}

ms_experts ms_remote_iface(ms_remote *r)
{
    ms_experts ex = {remote_compute, r};
    ex.compute_placed = remote_compute_placed;
    return ex;
}

void ms_remote_get_stats(ms_remote *r, ms_remote_stats *st)
{
    *st = r->st;
    st->workers_up = 0;
    st->n_view = 0;
    for (int i = 0; i < r->n; i++) {
        st->workers_up += r->w[i].state == W_UP;
        if (i >= MS_REMOTE_VIEW) continue;
        ms_remote_worker_view *v = &st->view[st->n_view++];
        snprintf(v->endpoint, sizeof v->endpoint, "%.95s", r->w[i].endpoint);
        int s = r->w[i].state;
        v->state = s == W_UP ? "up" : s == W_PROBING ? "probing" : s == W_GONE ? "gone" : "down";
        snprintf(v->why, sizeof v->why, "%.95s", s == W_UP ? "" : r->w[i].why);
        v->requests = r->w[i].requests;
        v->replies = r->w[i].replies;
        v->reply_seconds = r->w[i].reply_seconds;
    }
}

int ms_remote_owns_layer(const ms_remote *r, int layer)
{
    if (layer < r->first_moe || layer >= r->o.n_layers + r->o.draft_layers) return 0;
    for (int e = 0; e < r->o.n_experts; e++) {
        int owned = 0;
        for (int i = 0; i < r->n && !owned; i++) owned = r->w[i].owns[(size_t)layer * (size_t)r->o.n_experts + (size_t)e];
        if (!owned) return 0;
    }
    return 1;
}
