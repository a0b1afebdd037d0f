/* ms_remote: routed experts served by moestream-worker processes over ZeroMQ (the ms_experts
 * interface, with replicas, deadlines and fail-over); worker lists are ms_wlist. */
#ifndef MS_REMOTE_H
#define MS_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "ms_expert.h"
#include "ms_wlist.h"

typedef struct {
    int n_workers;
    ms_remote_worker *workers;   /* copied by ms_remote_new */
    const char *secret_key;      /* the coordinator's CURVE secret (Z85) when any worker uses CURVE */
    const char *fingerprint;     /* the coordinator's model fingerprint (copied) */
    int n_layers, n_experts;
    const ms_xfmt *fmt;          /* the routed experts' format (copied); workers must serve the same */
    double timeout_s;            /* per request (and hello) deadline; 0 = 60 s */
    int local;                   /* the workers were started by this process (--local-workers):
                                    messages point at their own output, not keys or firewalls */
    /* Optional: called for a down worker i before it is probed again. Returns 1 after
     * restarting it, 0 if nothing was done (it may still answer), -1 if it is gone for good
     * (why filled): it is then never used again, and its experts fail at once when no other
     * worker owns them. ms_local_revive is one. */
    int (*revive)(void *ctx, int worker, char *why, size_t n);
    void *revive_ctx;
    int draft_layers;            /* layers from n_layers on whose experts workers may serve too
                                    (a draft head's: DeepSeek-V3's MTP layer); not required of them */
} ms_remote_opts;

typedef struct ms_remote ms_remote;

/* Connect to every worker and exchange hellos (each must answer within the timeout, with the
 * same model fingerprint, shape and expert format; a different format is refused naming the
 * field). A worker that does not answer is reported with the likely causes (coordinator key not
 * on its --allow list, wrong worker public key, worker down, firewall), as far as the
 * connection's events tell. Every routed expert of every MoE layer
 * [first_moe, n_layers) must be owned by at least one worker. Returns NULL with ms_err set
 * (class MS_EXIT_WORKER) naming the worker or the experts nobody owns. */
ms_remote *ms_remote_new(const ms_remote_opts *o, int first_moe);
void ms_remote_free(ms_remote *r); /* accepts NULL */

/* 1 if every expert of `layer` has a worker that owns it (up or not), else 0: whether the
 * workers serve a draft head's layer (ms_remote_opts.draft_layers), which the hellos do not
 * require. */
int ms_remote_owns_layer(const ms_remote *r, int layer);

/* The ms_experts interface: one request per (call, worker) carrying all the rows that worker
 * computes; outputs placed in canonical (row, rank) order, so the result is bit-identical to
 * in-process. A worker that errs with a transport problem or misses its deadline is marked
 * down and its items are re-sent to a replica; with no replica left the call fails naming the
 * unreachable experts and workers (class MS_EXIT_WORKER). A down worker is probed again on
 * later calls once its back-off (0.5 s, doubling to 30 s) has passed, and used again when it
 * answers; until then a call that needs only it fails at once, naming it. */
ms_experts ms_remote_iface(ms_remote *r);

/* 0 while every routed expert has an owner that can still serve (up, or down but asked again
 * later); -1 once some expert's every owner is gone for good (a local worker given up on after
 * its restarts), with the reason in why. Safe from any thread. */
int ms_remote_health(ms_remote *r, char *why, size_t n);

/* One worker as the stats show it. */
#define MS_REMOTE_VIEW 32 /* workers the stats list one by one (the counts cover all) */
typedef struct {
    char endpoint[96];
    const char *state;         /* "up", "down" (asked again after its back-off), "probing" (asked,
                                  no answer yet), "gone" (given up on: a local worker past its restarts) */
    char why[96];              /* its last failure ("" none) */
    uint64_t requests;         /* compute requests sent to it (slices of a call count one each) */
    uint64_t replies;          /* of them answered with outputs, in ... */
    double reply_seconds;      /* ... this many seconds in all, each from its send to its reply */
} ms_remote_worker_view;

typedef struct {
    uint64_t requests, resends, failovers, bytes_sent, bytes_received;
    int workers_up;
    int n_view;                /* the first n_view workers, in the order listed: */
    ms_remote_worker_view view[MS_REMOTE_VIEW];
} ms_remote_stats;
void ms_remote_get_stats(ms_remote *r, ms_remote_stats *st);

#endif
