/* ms_shttp: serve's HTTP side on libmicrohttpd: routes, Bearer check, body limit, completion
 * requests handed to the engine thread and answered whole or as Server-Sent Events, access log. */
#ifndef MS_SHTTP_H
#define MS_SHTTP_H

#include <stddef.h>
#include <stdint.h>

#include "ms_jobfile.h"
#include "ms_sengine.h"
#include "ms_smetrics.h"

typedef struct ms_shttp ms_shttp;

typedef struct {
    const char *listen;          /* "HOST:PORT" ("[v6]:PORT"); port 0 = any free port */
    const char *api_key;         /* required as "Authorization: Bearer KEY" (all but /health); NULL: none */
    const char *model_name;      /* the one model of /v1/models, answered when a request names none */
    size_t max_body;             /* bytes; a larger body gets 413 */
    ms_jobfile_limits lim;       /* tokenizer, vocabulary, prompt + max_tokens bound */
    int32_t chat_stop[MS_CHAT_MAX_STOPS]; /* the ids that end a chat's turn (<|im_end|>; <|return|>, <|call|>) */
    int n_chat_stop;
    double request_timeout;      /* seconds; 0: none */
    double read_timeout;         /* seconds a connection has to deliver a whole request (ms_sconn); 0: 10 */
    int max_connections;         /* open at once; beyond: 503 (a few), then closed by the server; 0: 256 */
    int max_per_ip;              /* open at once from one client address (0: no limit) */
    const char *cors;            /* --cors: "*" or comma-separated origins allowed to call from a
                                    browser (Access-Control-Allow-* headers, OPTIONS preflights); NULL: none */
} ms_shttp_opts;

/* Bind and start serving (one thread per connection; the soft limit on open files is raised
 * to what max_connections needs). NULL with ms_err set: MS_EXIT_USAGE for a
 * bad --listen, MS_EXIT_IO when the address cannot be bound. Borrows everything. */
ms_shttp *ms_shttp_start(const ms_shttp_opts *o, ms_sengine *s, ms_smetrics *m);
/* The address served, "http://HOST:PORT" (the real port when 0 was asked). */
const char *ms_shttp_url(const ms_shttp *h);
/* Draining: /health answers 503 {"status": "draining"} and new requests 503 (Connection: close)
 * from now on; the listener stays open and the requests taken run to their end. */
void ms_shttp_quiesce(ms_shttp *h);
/* Wait up to limit_s until no request is being answered. Returns 1 when idle. */
int ms_shttp_wait_idle(ms_shttp *h, double limit_s);
/* Stop (closing connections still open) and free. Accepts NULL. */
void ms_shttp_stop(ms_shttp *h);

/* 1 if host (as in --listen, without the port) names only loopback addresses. */
int ms_shttp_is_loopback(const char *listen);

#endif
