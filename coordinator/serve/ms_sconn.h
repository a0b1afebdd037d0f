/* ms_sconn: serve's connection guard: a read deadline per connection (slow clients are cut), open-connection counts, peer liveness. */
#ifndef MS_SCONN_H
#define MS_SCONN_H

#include <stdint.h>

/* Every open connection must deliver a complete request (headers and body) within read_timeout
 * seconds of its opening, or of the end of its previous answer (an idle keep-alive connection
 * counts the same way); otherwise a watchdog thread shuts its socket down and logs it, so
 * connections that send a request line and then nothing cannot hold the server's slots. While
 * a request is being answered it has no deadline (the request timeout and the client's own
 * liveness govern it). Thread-safe. */
typedef struct ms_sconn ms_sconn;
typedef struct ms_sconn_sock ms_sconn_sock;

/* NULL only on thread creation failure (ms_err set). read_timeout > 0 seconds. */
ms_sconn *ms_sconn_new(double read_timeout);
void ms_sconn_free(ms_sconn *g); /* stops the watchdog; accepts NULL; every sock must be closed */

/* A connection opened (fd: its socket, still owned by the HTTP server; addr: for the log).
 * Returns its handle, owned by g until ms_sconn_close. */
ms_sconn_sock *ms_sconn_open(ms_sconn *g, int fd, const char *addr);
void ms_sconn_close(ms_sconn *g, ms_sconn_sock *s); /* before its fd is closed; accepts NULL */
void ms_sconn_busy(ms_sconn *g, ms_sconn_sock *s);  /* its request is complete: no deadline */
void ms_sconn_idle(ms_sconn *g, ms_sconn_sock *s);  /* its answer is done: a new deadline */
int ms_sconn_count(ms_sconn *g);                    /* connections open now */
uint64_t ms_sconn_cut_total(ms_sconn *g);           /* connections cut by the deadline so far */

/* Peer liveness, for a request being answered. Only a reset (or a failed write) means the
 * client is gone: a client may half-close its side after sending (shutdown(SHUT_WR), as
 * `nc -N`, some proxies and HTTP/1.0 clients do) and still read the answer. */
int ms_sconn_peer_reset(int fd); /* 1: the connection was reset or failed */
int ms_sconn_peer_eof(int fd);   /* 1: the peer sent FIN (half-closed, or gone: only a write tells) */
/* Write an interim "HTTP/1.1 102 Processing" (RFC 7231: HTTP/1.1 clients must accept 1xx
 * before the final answer; never to HTTP/1.0 ones) to learn whether a peer that sent FIN still
 * reads: 0 written, -1 the write failed (the peer is gone). */
int ms_sconn_probe_1xx(int fd);

#endif
