/* ms_wire: the moestream protocol on ZeroMQ: strict decoding, encoding, uuids, fingerprints. */
#ifndef MS_WIRE_H
#define MS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "moestream.pb-c.h"

/* 2: hellos carry the expert format (ExpertFormat), compute items come grouped by expert. */
#define MS_WIRE_VERSION 3u
/* Largest compute request any peer may send, counted as (rows + items) x latent_width x 4
 * bytes: a worker's request limit is this (its --ram-budget reserves room for it), and the
 * coordinator slices its requests at half of it (8 MiB). A reply carries at most as many floats
 * as its request. */
#define MS_WIRE_MAX_REQUEST ((int64_t)16 << 20)
/* Largest message either side takes from the transport (ZMQ_MAXMSGSIZE on every socket): a
 * maximal request or reply plus the envelope, item lists and a hello reply's ranges. libzmq
 * reads a frame's size first and drops the connection of a peer that sends more, before
 * buffering any of it, so no client can make a worker hold more than this per message. */
#define MS_WIRE_MAX_MSG (MS_WIRE_MAX_REQUEST + ((int64_t)4 << 20))

/* A 16-byte libuuid id. */
typedef struct {
    uint8_t b[16];
} ms_uuid;
void ms_uuid_new(ms_uuid *u);
/* 36 characters + NUL. */
void ms_uuid_str(const ms_uuid *u, char out[37]);

/* Encode e (its protocol_version is set to MS_WIRE_VERSION) into a malloc'ed buffer. */
void ms_wire_pack(Moestream__Envelope *e, uint8_t **buf, size_t *len);

/* Decode and validate one message: a known version, a body, 16-byte uuids where present, and
 * for compute requests/replies consistent sizes (activations = rows x latent_width, as many
 * item_row as item_expert, every item_row < rows, outputs = items x latent_width, latent_width
 * > 0). Returns the envelope (free with ms_wire_free) or NULL with a reason in why (and, when
 * the version is the problem, *code = MOESTREAM__ERROR__CODE__VERSION, else BAD_MESSAGE). */
Moestream__Envelope *ms_wire_unpack(const uint8_t *buf, size_t len, char *why, size_t why_len, int *code);
void ms_wire_free(Moestream__Envelope *e); /* accepts NULL */

/* Ready-to-send encodings of the simple messages (malloc'ed). uuid may be NULL. */
void ms_wire_error(const ms_uuid *request, int code, const char *message, uint8_t **buf, size_t *len);

/* Copy a 16-byte uuid field (0 on success, -1 if it is not 16 bytes). */
int ms_wire_uuid(const ProtobufCBinaryData *d, ms_uuid *u);

/* Read a CURVE key file (both sides use this one reader, so the rules are the same): one Z85
 * key of 40 characters per line, blank lines and lines starting with '#' ignored, at most
 * 1 MiB. With secret = 1 the file must hold exactly one key, and a file readable by its group
 * or others is warned about (ms_log, naming it: chmod 600). `what` names the option in
 * messages ("--curve-secret"). On success returns the number of keys (>= 1) and *keys, a
 * malloc'ed [n][41] array of NUL-terminated keys (free with ms_wire_keys_free, which wipes
 * it). On failure returns -1 with ms_err set naming the file and line: MS_EXIT_IO if it
 * cannot be read, MS_EXIT_USAGE if it is malformed or holds no key, or (secret = 1) if its name
 * ends in ".pub": keygen's public half is no secret, and would fail only at the handshake. */
int ms_wire_read_keys(const char *path, const char *what, int secret, char (**keys)[41]);
void ms_wire_keys_free(char (*keys)[41], int n); /* accepts NULL */

/* Check the shape of a worker endpoint: tcp://HOST:PORT (PORT 1..65535, or 0 or '*' when
 * bind = 1; HOST a name, an IPv4 address or [IPv6]), ipc://PATH (non-empty, shorter than a
 * socket path may be) or inproc://NAME. Returns 0, or -1 with ms_err set (MS_EXIT_USAGE)
 * quoting the endpoint and saying what is wrong. */
int ms_wire_check_endpoint(const char *ep, int bind);

#endif
