/* ms_shttp_int.h: what serve's HTTP modules share: the server, one request's state, the replies. */
#ifndef MS_SHTTP_INT_H
#define MS_SHTTP_INT_H

#include <microhttpd.h>
#include <pthread.h>
#include <stddef.h>

#include "ms_sconn.h"
#include "ms_shttp.h"
#include "ms_sreq.h"

#define POLL_S 0.1  /* how often a waiting answer looks whether its client is still there */
#define PROBE_S 0.5 /* how often a client that sent FIN is asked (by a write) whether it still reads */

struct ms_shttp {
    ms_shttp_opts o;
    ms_sengine *s;
    ms_smetrics *m;
    struct MHD_Daemon *d;
    ms_sconn *g;                 /* read deadlines and counts of the open connections */
    int listen_fd;
    char url[160];
    pthread_mutex_t mu;
    int active;                  /* requests being answered (a stream until its last byte) */
    int quiesced;
    struct ms_sresp_store *responses; /* the turns /v1/responses stored (previous_response_id) */
};

enum { EP_COMPLETIONS, EP_CHAT, EP_MODELS, EP_HEALTH, EP_METRICS, EP_MESSAGES, EP_COUNT_TOKENS, EP_RESPONSES, EP_PAGE, EP_ENGINE, EP_OTHER };
extern const char *const ms_shttp_ep_names[]; /* [EP_OTHER + 1] the /metrics endpoint labels */

/* One request (MHD's con_cls): from the first call to MHD's completion notice. */
typedef struct {
    ms_shttp *h;
    int ep;
    char *body;
    size_t n, cap;
    int too_big, streamed;
    int status;
    double t0;
    int fd, http10;
    ms_sconn_sock *sock;         /* its connection's entry in h->g */
    size_t prompt_tokens, completion_tokens;
    char addr[80], method[16], path[128];
} conn;


/* Requests being answered (+1 at the start, -1 at the end): the drain waits for 0. */
void ms_shttp_active_add(ms_shttp *h, int d);
/* Is the client of a whole answer gone (a reset, or a FIN and a failed 1xx probe)? */
int ms_shttp_client_gone(conn *c, double *probed);
/* One access log line (info level) with the tokens the request used. */
void ms_shttp_access_log(const char *addr, const char *method, const char *path, int status, size_t pt, size_t ct,
                         double t0, const char *note);
/* Queue an answer of body[len] (malloc'ed, consumed), with one more header when hname is set. */
enum MHD_Result ms_shttp_reply(struct MHD_Connection *mc, conn *c, int status, const char *type, char *body, size_t len,
                               const char *hname, const char *hval);
/* An OpenAI error object as the answer. */
enum MHD_Result ms_shttp_reply_error(struct MHD_Connection *mc, conn *c, int status, const char *code, const char *msg,
                                     const char *hname, const char *hval);

/* The CORS headers of an answer to a browser's request (an Origin header that --cors allows). */
void ms_shttp_cors(const ms_shttp *h, struct MHD_Connection *mc, struct MHD_Response *resp);

/* POST /v1/completions and /v1/chat/completions (ms_scompl): parse, submit, answer whole or streamed. */
enum MHD_Result ms_scompl_answer(struct MHD_Connection *mc, conn *c);

#endif
