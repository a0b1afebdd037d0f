/* ms_wauth: the expert worker's access control: its CURVE keys and allow list, the endpoint
 * policy (tcp needs keys or --insecure), and the ZAP handler that admits allowed client keys. */
#ifndef MS_WAUTH_H
#define MS_WAUTH_H

#include <stddef.h>
#include <stdint.h>

/* CURVE keys of a worker: its secret (and derived public) key and the client keys it allows. */
typedef struct {
    int curve;                 /* 1 when a secret key was given */
    char secret[41];           /* Z85 */
    char public_key[41];       /* Z85, derived with zmq_curve_public */
    uint8_t (*allow)[32];      /* [n_allow] client public keys (binary), owned */
    size_t n_allow;
} ms_wauth_keys;

/* Read --curve-secret (one 40-character Z85 key) and --allow (one Z85 client public key per
 * line) with ms_wire_read_keys (the coordinator's reader too: blank and '#' lines ignored, a
 * group/world-readable secret warned about). Both paths or neither. Returns 0, or -1 with
 * ms_err set naming the file and line (MS_EXIT_IO if unreadable, MS_EXIT_USAGE if malformed). */
int ms_wauth_keys_load(const char *secret_path, const char *allow_path, ms_wauth_keys *k);
void ms_wauth_keys_free(ms_wauth_keys *k); /* accepts a zeroed struct; wipes the secret */

/* Check an endpoint against the security options before anything is loaded: tcp:// needs
 * CURVE keys or insecure; ipc:// needs nothing; other transports are refused. Returns 0 or -1
 * with ms_err set (MS_EXIT_USAGE). */
int ms_wauth_check_endpoint(const char *endpoint, int curve, int insecure);

/* The ZAP handler: a thread answering libzmq's CURVE authentication requests on ctx, 200 for
 * client keys on the allow list, 400 for the rest (a refused key is logged once a minute). It
 * must be started before a CURVE server socket of ctx accepts a connection. NULL with ms_err
 * set naming the endpoint on failure. keys is copied (not the secret). */
typedef struct ms_wauth_zap ms_wauth_zap;
ms_wauth_zap *ms_wauth_zap_start(void *ctx, const ms_wauth_keys *keys, const char *endpoint);
/* Call after zmq_ctx_shutdown(ctx) (which ends the thread's wait) and before zmq_ctx_term.
 * Accepts NULL. */
void ms_wauth_zap_free(ms_wauth_zap *z);

#endif
