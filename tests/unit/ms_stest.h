/* ms_stest: helpers of the serve tests: a `moestream serve` process and curl requests to it. */
#ifndef MS_STEST_H
#define MS_STEST_H

#include "ms_test.h"

typedef struct {
    ms_t_worker w;     /* the serve process (ready at its "listening on" line) */
    char url[256];     /* http://127.0.0.1:PORT */
    char tmp[1024];    /* where bodies, answers and the log go */
    int k;             /* files written so far */
} ms_st_server;

/* Start `moestream serve --model MODEL --listen 127.0.0.1:0 --ram-budget 2G --date 2025-08-05
 * EXTRA` (EXTRA split at spaces; the date unless EXTRA gives one) with its files in tmp. Returns 0 when it listens, else its status (a failed check). */
int ms_st_start(ms_st_server *s, const char *tmp, const char *model, const char *extra);
/* SIGTERM and wait (up to 30 s): its exit status. */
int ms_st_stop(ms_st_server *s);

/* curl CURL_ARGS (e.g. "-X OPTIONS -H 'Origin: x'") on path with body (NULL: none; POSTed as JSON).
 * Returns the HTTP status (negative when curl failed); the answer's body into *out and its
 * headers into *headers (malloc'ed) when not NULL. */
int ms_st_http(ms_st_server *s, const char *curl_args, const char *path, const char *body, char **out, char **headers);

/* Node, npm and the packages of tests/node (`npm ci` into MS_BIN_DIR/node-tests once, under a
 * lock: tests in parallel share it; tests/node's scripts copied there each time). The folder, or
 * NULL after a visible skip saying that `what` did not run. */
const char *ms_st_node(const char *what);

#endif
