/* ms_shttp: serve's HTTP glue on libmicrohttpd (thread per connection): routing, auth, body
 * limit, whole and streamed (SSE) answers, client-disconnect detection, access log. */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <stdarg.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ms_clock.h"
#include "ms_err.h"
#include "ms_jtext.h"
#include "ms_sconn.h"
#include "ms_shttp.h"
#include "ms_shttp_int.h"
#include "ms_smsg.h"
#include "ms_sresp.h"
#include "ms_sreq.h"
#include "ms_sview.h"
#include "ms_sweb.h"

#define OVERFLOW 32 /* connections beyond --max-connections that are still accepted, to be told 503 */

const char *const ms_shttp_ep_names[] = {"completions", "chat_completions", "models", "health", "metrics", "messages",
                                          "count_tokens", "responses", "page", "engine", "other"};

void ms_shttp_active_add(ms_shttp *h, int d)
{
    pthread_mutex_lock(&h->mu);
    h->active += d;
    pthread_mutex_unlock(&h->mu);
}

/* Is the client of a whole answer gone? A reset says so at once. A FIN may be a half-close by a
 * client that still reads (nc -N, HTTP/1.0 clients, proxies), so an HTTP/1.1 client that sent
 * one is asked by writing an interim 102 (every PROBE_S): the write fails once it has gone. An
 * HTTP/1.0 client cannot be asked: its answer is computed and the final write tells. */
int ms_shttp_client_gone(conn *c, double *probed)
{
    if (ms_sconn_peer_reset(c->fd)) return 1;
    if (c->http10 || !ms_sconn_peer_eof(c->fd) || ms_now() - *probed < PROBE_S) return 0;
    *probed = ms_now();
    return ms_sconn_probe_1xx(c->fd) != 0;
}

void ms_shttp_access_log(const char *addr, const char *method, const char *path, int status, size_t pt, size_t ct,
                         double t0, const char *note)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    ms_log(1, "serve: %s.%03ldZ %s \"%s %s\" %d prompt_tokens=%zu completion_tokens=%zu %.3fs%s%s", when,
           ts.tv_nsec / 1000000, addr, method, path, status, pt, ct, ms_now() - t0, note && *note ? " " : "", note ? note : "");
}

/* Queue an answer of body[len] (malloc'ed, consumed). */
enum MHD_Result ms_shttp_reply(struct MHD_Connection *mc, conn *c, int status, const char *type, char *body, size_t len,
                             const char *hname, const char *hval)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (hname) MHD_add_response_header(resp, hname, hval);
    ms_shttp_cors(c->h, mc, resp);
    pthread_mutex_lock(&c->h->mu);
    int closing = c->h->quiesced;
    pthread_mutex_unlock(&c->h->mu);
    if (closing) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    c->status = status;
    enum MHD_Result r = MHD_queue_response(mc, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return r;
}

enum MHD_Result ms_shttp_reply_error(struct MHD_Connection *mc, conn *c, int status, const char *code, const char *msg,
                                   const char *hname, const char *hval)
{
    size_t len;
    char *b = c->ep == EP_MESSAGES || c->ep == EP_COUNT_TOKENS ? ms_smsg_error_json(status, msg, &len)
                                                               : ms_sreq_error_json(status, code, msg, NULL, &len);
    return ms_shttp_reply(mc, c, status, "application/json", b, len, hname, hval);
}

/* The request's Origin if --cors allows it ("*": any), else NULL. */
static const char *allowed_origin(const ms_shttp *h, struct MHD_Connection *mc)
{
    if (!h->o.cors) return NULL;
    const char *o = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Origin");
    if (!o || !*o) return NULL;
    if (!strcmp(h->o.cors, "*")) return o;
    size_t n = strlen(o);
    for (const char *p = h->o.cors; *p;) {
        size_t k = strcspn(p, ",");
        if (k == n && !strncmp(p, o, n)) return o;
        p += k + (p[k] == ',');
    }
    return NULL;
}

void ms_shttp_cors(const ms_shttp *h, struct MHD_Connection *mc, struct MHD_Response *resp)
{
    const char *o = allowed_origin(h, mc);
    if (!o) return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", !strcmp(h->o.cors, "*") ? "*" : o);
    MHD_add_response_header(resp, "Vary", "Origin");
    MHD_add_response_header(resp, "Access-Control-Expose-Headers", "Retry-After");
}

/* OPTIONS: a browser's preflight. Allowed (an origin --cors names): 204 with the methods and
 * headers it may send; without --cors or from another origin: 405. No API key is asked: a
 * preflight never carries one. */
static enum MHD_Result preflight(struct MHD_Connection *mc, conn *c)
{
    if (!allowed_origin(c->h, mc))
        return ms_shttp_reply_error(mc, c, 405, "method_not_allowed",
                                    c->h->o.cors ? "OPTIONS from an origin that --cors does not allow"
                                                 : "OPTIONS: serve answers browsers' preflights with --cors ORIGINS only",
                                    MHD_HTTP_HEADER_ALLOW, "GET, POST");
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    ms_shttp_cors(c->h, mc, resp);
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                            "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    c->status = 204;
    enum MHD_Result r = MHD_queue_response(mc, MHD_HTTP_NO_CONTENT, resp);
    MHD_destroy_response(resp);
    return r;
}

/* a[la] against the key, in time independent of where they differ. */
static int key_equal(const char *k, const char *a, size_t la)
{
    size_t lk = strlen(k);
    unsigned char diff = (unsigned char)(la != lk);
    for (size_t i = 0; i < lk; i++) diff |= (unsigned char)(k[i] ^ (i < la ? a[i] : 0));
    return diff == 0;
}

/* The key as "Authorization: Bearer KEY" (OpenAI's clients) or "x-api-key: KEY" (Anthropic's). */
static int authorized(ms_shttp *h, struct MHD_Connection *mc)
{
    if (!h->o.api_key) return 1;
    const char *a = NULL;
    size_t la = 0;
    if (MHD_lookup_connection_value_n(mc, MHD_HEADER_KIND, "x-api-key", 9, &a, &la) == MHD_YES && a)
        return key_equal(h->o.api_key, a, la);
    /* with its length, so that nothing but the whole key matches (libmicrohttpd itself ends a
     * header value at a NUL byte: "KEY\0junk" arrives as "KEY", a prefix of KEY never matches) */
    if (MHD_lookup_connection_value_n(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION,
                                      strlen(MHD_HTTP_HEADER_AUTHORIZATION), &a, &la) != MHD_YES ||
        !a)
        return 0;
    /* the scheme is case-insensitive (RFC 7235), then one or more spaces */
    if (la < 7 || strncasecmp(a, "bearer ", 7) != 0) return 0;
    a += 7;
    la -= 7;
    while (la && *a == ' ') {
        a++;
        la--;
    }
    return key_equal(h->o.api_key, a, la);
}

/* ---- the other endpoints ---- */

static enum MHD_Result models(struct MHD_Connection *mc, conn *c)
{
    const char *id = strncmp(c->path, "/v1/models/", 11) ? NULL : c->path + 11;
    int status;
    size_t len;
    char *b = ms_sreq_models_json(c->h->o.model_name, c->h->o.lim.max_context, id, &status, &len);
    return ms_shttp_reply(mc, c, status, "application/json", b, len, NULL, NULL);
}

/* 200 ok; 503 failed (the engine stopped), degraded (some experts have no worker left: every
 * request that needs them fails, so an orchestrator should restart serve) or draining. */
static enum MHD_Result health(struct MHD_Connection *mc, conn *c)
{
    int ok = ms_sengine_ok(c->h->s) == 1;
    char why[600] = "";
    int degraded = ok && ms_sengine_health(c->h->s, why, sizeof why) != 0;
    pthread_mutex_lock(&c->h->mu);
    int q = c->h->quiesced;
    pthread_mutex_unlock(&c->h->mu);
    const char *st = !ok ? "failed" : degraded ? "degraded" : q ? "draining" : "ok";
    json_t *o = json_pack("{s:s,s:s}", "status", st, "api_key", c->h->o.api_key ? "required" : "none");
    if (degraded) json_object_set_new(o, "reason", ms_jtext(why, strlen(why)));
    char *b = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(o);
    size_t len = strlen(b);
    b = ms_realloc(b, len + 2);
    memcpy(b + len, "\n", 2);
    return ms_shttp_reply(mc, c, ok && !degraded && !q ? 200 : 503, "application/json", b, len + 1, NULL, NULL);
}

/* A file of the chat page (GET or HEAD): static bytes, revalidated each time (a new binary may
 * bring a new page), only this server's scripts and connections allowed. */
static enum MHD_Result page(struct MHD_Connection *mc, conn *c, const char *method)
{
    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return ms_shttp_reply_error(mc, c, 405, "method_not_allowed", "use GET", MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    const ms_sweb_file *f = ms_sweb_find(c->path);
    struct MHD_Response *resp = MHD_create_response_from_buffer(f->len, (void *)f->data, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ms_sweb_type(f));
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(resp, "Content-Security-Policy",
                            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'");
    c->status = 200;
    enum MHD_Result r = MHD_queue_response(mc, 200, resp);
    MHD_destroy_response(resp);
    return r;
}

static enum MHD_Result metrics(struct MHD_Connection *mc, conn *c)
{
    ms_smetrics_engine f;
    ms_sengine_figures(c->h->s, &f);
    size_t len;
    char *t = ms_smetrics_render(c->h->m, &f, &len);
    return ms_shttp_reply(mc, c, 200, "text/plain; version=0.0.4", t, len, NULL, NULL);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    ms_shttp *h = cls;
    conn *c = *con_cls;
    if (!c) {
        c = ms_calloc(1, sizeof *c);
        c->h = h;
        c->t0 = ms_now();
        c->fd = -1;
        c->http10 = version && !strcmp(version, MHD_HTTP_VERSION_1_0);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci) c->fd = ci->connect_fd;
        ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        if (ci) c->sock = ci->socket_context;
        ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        snprintf(c->addr, sizeof c->addr, "?");
        if (ci && ci->client_addr) {
            char a[64] = "?";
            const struct sockaddr *sa = ci->client_addr;
            if (sa->sa_family == AF_INET) {
                const struct sockaddr_in *in = (const void *)sa;
                inet_ntop(AF_INET, &in->sin_addr, a, sizeof a);
                snprintf(c->addr, sizeof c->addr, "%s:%u", a, ntohs(in->sin_port));
            } else if (sa->sa_family == AF_INET6) {
                const struct sockaddr_in6 *in = (const void *)sa;
                inet_ntop(AF_INET6, &in->sin6_addr, a, sizeof a);
                snprintf(c->addr, sizeof c->addr, "[%s]:%u", a, ntohs(in->sin6_port));
            }
        }
        snprintf(c->method, sizeof c->method, "%s", method);
        snprintf(c->path, sizeof c->path, "%s", url);
        c->ep = !strcmp(url, "/v1/completions")        ? EP_COMPLETIONS
                : !strcmp(url, "/v1/chat/completions") ? EP_CHAT
                : !strcmp(url, "/v1/models") || (!strncmp(url, "/v1/models/", 11) && url[11]) ? EP_MODELS
                : !strcmp(url, "/health")              ? EP_HEALTH
                : !strcmp(url, "/metrics")             ? EP_METRICS
                : !strcmp(url, "/v1/messages")         ? EP_MESSAGES
                : !strcmp(url, "/v1/messages/count_tokens") ? EP_COUNT_TOKENS
                : !strcmp(url, "/v1/responses")        ? EP_RESPONSES
                : !strcmp(url, "/api/engine")          ? EP_ENGINE
                : ms_sweb_find(url)                    ? EP_PAGE
                                                       : EP_OTHER;
        ms_shttp_active_add(h, 1);
        *con_cls = c;
        int open_now = ms_sconn_count(h->g);
        if (open_now > h->o.max_connections) { /* the overflow slots: told, not left hanging */
            ms_log(1, "serve: %s refused: %d connections open, --max-connections is %d (503)", c->addr, open_now,
                   h->o.max_connections);
            return ms_shttp_reply_error(mc, c, 503, "too_many_connections",
                               "the server has as many connections open as it allows: retry later",
                               MHD_HTTP_HEADER_RETRY_AFTER, "1");
        }
        return MHD_YES;
    }
    if (*upload_size) { /* the body, up to the limit */
        if (c->n + *upload_size > h->o.max_body)
            c->too_big = 1;
        else {
            if (c->n + *upload_size + 1 > c->cap) {
                c->cap = (c->n + *upload_size) * 2 + 1;
                c->body = ms_realloc(c->body, c->cap);
            }
            memcpy(c->body + c->n, upload, *upload_size);
            c->n += *upload_size;
            c->body[c->n] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    ms_sconn_busy(h->g, c->sock); /* the whole request is in: no read deadline while it is answered */
    if (!strcmp(method, "OPTIONS")) return preflight(mc, c);
    if (c->ep == EP_HEALTH && !strcmp(method, "GET")) return health(mc, c);
    if (c->ep == EP_PAGE) return page(mc, c, method); /* the page asks for the key itself */
    if (!authorized(h, mc))
        return ms_shttp_reply_error(mc, c, 401, "invalid_api_key",
                                    "a valid \"Authorization: Bearer KEY\" or \"x-api-key: KEY\" header is required",
                           MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    int post = c->ep == EP_COMPLETIONS || c->ep == EP_CHAT || c->ep == EP_MESSAGES || c->ep == EP_COUNT_TOKENS ||
               c->ep == EP_RESPONSES;
    if (c->ep == EP_OTHER) return ms_shttp_reply_error(mc, c, 404, "not_found", "unknown path (see docs/API.md)", NULL, NULL);
    if (strcmp(method, post ? "POST" : "GET") != 0)
        return ms_shttp_reply_error(mc, c, 405, "method_not_allowed", post ? "use POST" : "use GET", MHD_HTTP_HEADER_ALLOW,
                           post ? "POST" : "GET");
    if (c->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "the body is larger than %zu bytes (--max-body)", h->o.max_body);
        return ms_shttp_reply_error(mc, c, 413, "body_too_large", msg, NULL, NULL);
    }
    if (c->ep == EP_MODELS) return models(mc, c);
    if (c->ep == EP_METRICS) return metrics(mc, c);
    if (c->ep == EP_ENGINE) {
        size_t len;
        char *t = ms_sview_json(c->h->s, c->h->m, c->h->o.model_name, &len);
        return ms_shttp_reply(mc, c, 200, "application/json", t, len, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    }
    pthread_mutex_lock(&h->mu);
    int q = h->quiesced;
    pthread_mutex_unlock(&h->mu);
    if (q) return ms_shttp_reply_error(mc, c, 503, "unavailable", "the server is shutting down", NULL, NULL);
    return ms_scompl_answer(mc, c);
}

static void completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode why)
{
    ms_shttp *h = cls;
    conn *c = *con_cls;
    (void)mc;
    if (!c) return;
    ms_sconn_idle(h->g, c->sock); /* the next request on this connection has its own deadline */
    if (c->status && !c->streamed) /* streams: stream_free */
        ms_smetrics_request(h->m, ms_shttp_ep_names[c->ep], c->status, ms_now() - c->t0);
    if (!c->streamed)
        ms_shttp_access_log(c->addr, c->method, c->path, c->status ? c->status : 500, c->prompt_tokens, c->completion_tokens, c->t0,
                   why == MHD_REQUEST_TERMINATED_COMPLETED_OK ? NULL : c->status == 499 ? "client_gone (cancelled)" : "aborted");
    free(c->body);
    free(c);
    *con_cls = NULL;
    ms_shttp_active_add(h, -1);
}

/* ---- the daemon ---- */

/* Split "HOST:PORT" / "[V6]:PORT" into host and port. 0, or -1 with ms_err set. */
static int split_listen(const char *listen, char *host, size_t hn, char *port, size_t pn)
{
    const char *colon = strrchr(listen, ':');
    if (!colon || !colon[1]) goto bad;
    size_t n = (size_t)(colon - listen);
    const char *h = listen;
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') h++, n -= 2;
    if (n == 0 || n >= hn || strlen(colon + 1) >= pn) goto bad;
    memcpy(host, h, n);
    host[n] = 0;
    snprintf(port, pn, "%s", colon + 1);
    for (const char *p = port; *p; p++)
        if (*p < '0' || *p > '9') goto bad;
    if (atoi(port) > 65535) goto bad;
    return 0;
bad:
    ms_err_set("--listen '%s' is not HOST:PORT (e.g. 127.0.0.1:8080 or [::1]:8080)", listen);
    return ms_err_set_code(MS_EXIT_USAGE);
}

static struct addrinfo *resolve(const char *listen)
{
    char host[256], port[16];
    if (split_listen(listen, host, sizeof host, port, sizeof port) != 0) return NULL;
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int rc = getaddrinfo(host, port, &hints, &ai);
    if (rc != 0) {
        ms_err_set("--listen '%s': cannot resolve '%s': %s", listen, host, gai_strerror(rc));
        ms_err_set_code(MS_EXIT_USAGE);
        return NULL;
    }
    return ai;
}

int ms_shttp_is_loopback(const char *listen)
{
    struct addrinfo *ai = resolve(listen);
    if (!ai) return 0;
    int all = 1;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        if (a->ai_family == AF_INET) {
            const struct sockaddr_in *in = (const void *)a->ai_addr;
            if ((ntohl(in->sin_addr.s_addr) >> 24) != 127) all = 0;
        } else if (a->ai_family == AF_INET6) {
            const struct sockaddr_in6 *in = (const void *)a->ai_addr;
            if (!IN6_IS_ADDR_LOOPBACK(&in->sin6_addr)) all = 0;
        } else {
            all = 0;
        }
    }
    freeaddrinfo(ai);
    return all;
}

/* A listening socket on the first address of listen that binds; the URL it serves. */
static int bind_listen(const char *spec, char *url, size_t un)
{
    struct addrinfo *ai = resolve(spec);
    if (!ai) return -1;
    int fd = -1, err = 0;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        ms_err_set("cannot listen on %s: %s", spec, strerror(err));
        return ms_err_set_code(MS_EXIT_IO);
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    char a[64] = "?";
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *in = (void *)&ss;
        inet_ntop(AF_INET, &in->sin_addr, a, sizeof a);
        snprintf(url, un, "http://%s:%u", a, ntohs(in->sin_port));
    } else {
        struct sockaddr_in6 *in = (void *)&ss;
        inet_ntop(AF_INET6, &in->sin6_addr, a, sizeof a);
        snprintf(url, un, "http://[%s]:%u", a, ntohs(in->sin6_port));
    }
    return fd;
}

/* Each connection's entry in the guard, from its opening to its closing (before its fd closes). */
static void notify_conn(void *cls, struct MHD_Connection *mc, void **socket_context, enum MHD_ConnectionNotificationCode why)
{
    ms_shttp *h = cls;
    if (why == MHD_CONNECTION_NOTIFY_CLOSED) {
        ms_sconn_close(h->g, *socket_context);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    char addr[80] = "?", a[64] = "?";
    const union MHD_ConnectionInfo *ai = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ai && ai->client_addr && ai->client_addr->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const void *)ai->client_addr;
        inet_ntop(AF_INET, &in->sin_addr, a, sizeof a);
        snprintf(addr, sizeof addr, "%s:%u", a, ntohs(in->sin_port));
    } else if (ai && ai->client_addr && ai->client_addr->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in = (const void *)ai->client_addr;
        inet_ntop(AF_INET6, &in->sin6_addr, a, sizeof a);
        snprintf(addr, sizeof addr, "[%s]:%u", a, ntohs(in->sin6_port));
    }
    *socket_context = ms_sconn_open(h->g, ci ? ci->connect_fd : -1, addr);
}

/* libmicrohttpd's own messages (a connection refused at its limits, for one) go to the log. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = 0;
    ms_log(1, "serve: http: %s", msg);
}

/* Each connection is a socket and a thread: lift the soft limit on open files to what the
 * connections need (the default 1024 would make accept fail near 1,000 connections). */
static void raise_fd_limit(int need)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= (rlim_t)need) return;
    rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= (rlim_t)need ? (rlim_t)need : rl.rlim_max;
    rl.rlim_cur = want;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (want < (rlim_t)need)
        ms_log(1, "serve: note: open files are limited to %llu (ulimit -Hn), fewer than the %d that %d connections "
                  "need: connections beyond it are refused",
               (unsigned long long)want, need, need - 256);
}

ms_shttp *ms_shttp_start(const ms_shttp_opts *o, ms_sengine *s, ms_smetrics *m)
{
    ms_shttp *h = ms_calloc(1, sizeof *h);
    h->o = *o;
    h->s = s;
    h->m = m;
    pthread_mutex_init(&h->mu, NULL);
    h->responses = ms_sresp_store_new(MS_SRESP_KEEP);
    h->listen_fd = bind_listen(o->listen, h->url, sizeof h->url);
    if (h->listen_fd < 0) {
        ms_shttp_stop(h);
        return NULL;
    }
    if (h->o.max_connections <= 0) h->o.max_connections = 256;
    if (h->o.read_timeout <= 0) h->o.read_timeout = 10;
    unsigned limit = (unsigned)h->o.max_connections + OVERFLOW;
    raise_fd_limit((int)limit + 256);
    if (!(h->g = ms_sconn_new(h->o.read_timeout))) {
        ms_shttp_stop(h);
        return NULL;
    }
    /* poll(), not select(): sockets numbered above 1023 are served too */
    h->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_POLL |
                                MHD_USE_ERROR_LOG,
                            0, NULL, NULL, handle, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h, MHD_OPTION_LISTEN_SOCKET,
                            h->listen_fd, MHD_OPTION_NOTIFY_COMPLETED,
                            completed, h, MHD_OPTION_NOTIFY_CONNECTION, notify_conn, h, MHD_OPTION_CONNECTION_LIMIT, limit,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                            (unsigned)(h->o.max_per_ip > 0 ? h->o.max_per_ip : 0), MHD_OPTION_END);
    if (!h->d) {
        ms_err_set("cannot start the HTTP server on %s", o->listen);
        ms_err_set_code(MS_EXIT_IO);
        ms_shttp_stop(h);
        return NULL;
    }
    h->listen_fd = -1; /* the daemon's now */
    return h;
}

const char *ms_shttp_url(const ms_shttp *h) { return h->url; }

void ms_shttp_quiesce(ms_shttp *h)
{
    /* The listener stays open: load balancers and orchestrators probing /health see 503
     * "draining" (not a refused connection, which looks like a crash), new requests get 503
     * with Connection: close, and the requests taken finish. */
    pthread_mutex_lock(&h->mu);
    h->quiesced = 1;
    pthread_mutex_unlock(&h->mu);
}

int ms_shttp_wait_idle(ms_shttp *h, double limit_s)
{
    double t0 = ms_now();
    for (;;) {
        pthread_mutex_lock(&h->mu);
        int a = h->active;
        pthread_mutex_unlock(&h->mu);
        if (a == 0) return 1;
        if (ms_now() - t0 > limit_s) return 0;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void ms_shttp_stop(ms_shttp *h)
{
    if (!h) return;
    if (h->d) MHD_stop_daemon(h->d);
    ms_sconn_free(h->g); /* after the daemon: every connection is closed */
    if (h->listen_fd >= 0) close(h->listen_fd);
    pthread_mutex_destroy(&h->mu);
    ms_sresp_store_free(h->responses);
    free(h);
}
