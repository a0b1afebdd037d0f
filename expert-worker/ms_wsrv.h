/* ms_wsrv: the expert worker's ZeroMQ server (ROUTER socket, CURVE + ZAP allow-list, request loop). */
#ifndef MS_WSRV_H
#define MS_WSRV_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "ms_wauth.h"
#include "ms_wload.h"

/* Limits of one compute request (beyond them: Error TOO_LARGE). The byte limit of a request,
 * (rows + items) x latent_width floats, is the worker's plan.request_limit. */
#define MS_WSRV_MAX_ROWS 65536u
#define MS_WSRV_MAX_ITEMS_PER_ROW 64u

typedef struct {
    const char *endpoint;      /* tcp://host:port (port may be '*') or ipc://path */
    const ms_wauth_keys *keys;  /* borrowed; curve = 0 for plain */
    ms_wload *load;            /* borrowed: the experts, the store, the plan */
} ms_wsrv_opts;

typedef struct ms_wsrv ms_wsrv;

/* Create the socket, start the ZAP handler when CURVE is on, bind. Returns NULL with ms_err set
 * naming the endpoint. */
ms_wsrv *ms_wsrv_new(const ms_wsrv_opts *o);
void ms_wsrv_free(ms_wsrv *s); /* closes the socket (lingering up to 1 s for replies); accepts NULL */

/* The endpoint actually bound (a '*' port resolved) and the worker's uuid as text. */
const char *ms_wsrv_endpoint(const ms_wsrv *s);
const char *ms_wsrv_uuid(const ms_wsrv *s);

/* Serve requests in arrival order until *stop becomes non-zero (set from a signal handler),
 * then drain: every message still arriving for a short while gets Error SHUTTING_DOWN.
 * Returns 0, or -1 with ms_err set if the socket fails. */
int ms_wsrv_run(ms_wsrv *s, volatile sig_atomic_t *stop);

#endif
