/* ms_wsrv: the expert worker's ZeroMQ server (ROUTER socket, CURVE + ZAP allow-list, request loop). */
#ifndef MS_WSRV_H
#define MS_WSRV_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "ms_wload.h"

/* Limits of one compute request (beyond them: Error TOO_LARGE). The byte limit of a request,
 * (rows + items) x latent_width floats, is the worker's plan.request_limit. */
#define MS_WSRV_MAX_ROWS 65536u
#define MS_WSRV_MAX_ITEMS_PER_ROW 64u

/* CURVE keys of a worker: its secret (and derived public) key and the client keys it allows. */
typedef struct {
    int curve;                 /* 1 when a secret key was given */
    char secret[41];           /* Z85 */
    char public_key[41];       /* Z85, derived with zmq_curve_public */
    uint8_t (*allow)[32];      /* [n_allow] client public keys (binary), owned */
    size_t n_allow;
} ms_wsrv_keys;

/* Read --curve-secret (one 40-character Z85 key) and --allow (one Z85 client public key per
 * line) with ms_wire_read_keys (the coordinator's reader too: blank and '#' lines ignored, a
 * group/world-readable secret warned about). Both paths or neither. Returns 0, or -1 with
 * ms_err set naming the file and line (MS_EXIT_IO if unreadable, MS_EXIT_USAGE if malformed). */
int ms_wsrv_keys_load(const char *secret_path, const char *allow_path, ms_wsrv_keys *k);
void ms_wsrv_keys_free(ms_wsrv_keys *k); /* accepts a zeroed struct; wipes the secret */

/* Check an endpoint against the security options before anything is loaded: tcp:// needs
 * CURVE keys or insecure; ipc:// needs nothing; other transports are refused. Returns 0 or -1
 * with ms_err set (MS_EXIT_USAGE). */
int ms_wsrv_check_endpoint(const char *endpoint, int curve, int insecure);

typedef struct {
    const char *endpoint;      /* tcp://host:port (port may be '*') or ipc://path */
    const ms_wsrv_keys *keys;  /* borrowed; curve = 0 for plain */
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
