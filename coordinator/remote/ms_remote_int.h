/* ms_remote_int: what ms_remote (calls) and ms_rconn (connections to workers: sockets, hellos, probes, revival, health) share. */
#ifndef MS_REMOTE_INT_H
#define MS_REMOTE_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "ms_remote.h"
#include "ms_wire.h"

/* W_GONE: a local worker that exited and will not be restarted: never probed again. */
#define REPROBE_WAIT_S 0.3 /* how long a call waits for a worker that failed its last probe recently */
enum { W_DOWN = 0, W_PROBING = 1, W_UP = 2, W_GONE = 3 };

/* Connection events watched: a disconnect marks a worker down; the others explain a hello
 * that gets no answer (see ms_rconn_hint). */
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
    double sent_at;        /* when the request in flight went out */
    uint64_t requests;     /* requests sent to it, and of them ... */
    uint64_t replies;      /* ... those it answered with outputs, in ... */
    double reply_seconds;  /* ... this many seconds in all (send to reply) */
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

/* ---- ms_rconn.c: one worker's connection ---- */

void ms_rconn_close(wconn *w);                                  /* its sockets (monitor first) */
void ms_rconn_down(ms_remote *r, wconn *w, const char *why);     /* down, back-off doubled */
int ms_rconn_open(ms_remote *r, wconn *w);                       /* DEALER + monitor, connected */
int ms_rconn_send(ms_remote *r, wconn *w, Moestream__Envelope *e); /* 0, or -1 (not sent) */
void ms_rconn_hello(ms_remote *r, wconn *w);
Moestream__Envelope *ms_rconn_recv(ms_remote *r, wconn *w);      /* non-blocking; NULL: none */
int ms_rconn_take_hello(ms_remote *r, wconn *w, const Moestream__Envelope *e); /* 0: up */
void ms_rconn_check_monitor(ms_remote *r, wconn *w);             /* a disconnect marks it down */
void ms_rconn_hint(const wconn *w, double limit, char *buf, size_t n); /* why a hello got no answer */
/* ---- all workers ---- */
void ms_rconn_probe(ms_remote *r);                  /* probe down workers whose back-off passed */
void ms_rconn_check_local(ms_remote *r);            /* local workers not up: restarted or gone */
void ms_rconn_wait(ms_remote *r, double limit);     /* for probes to be answered */
void ms_rconn_revive_owners(ms_remote *r, int layer, int e); /* bring back an owner of (layer, e) */
void ms_rconn_owners_why(const ms_remote *r, int layer, int e, char *buf, size_t n);
void ms_rconn_update_health(ms_remote *r);          /* after a worker is given up on */

#define LIKELY_CAUSES                                                                                             \
    "likely causes of no answer: this coordinator's key not on the worker's --allow list, a wrong worker public " \
    "key, the worker down, a firewall"
#define LOCAL_CAUSE "a worker this run started did not answer: it may have exited (see its messages above)"
/* The likely causes for r's workers: local ones are started here with the right keys. */
#define CAUSES(r) ((r)->o.local ? LOCAL_CAUSE : LIKELY_CAUSES)

#endif
