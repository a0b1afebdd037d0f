/* ms_wtest: a raw coordinator for the worker tests (test_worker, test_wload): the synthetic
 * model and its in-process reference experts, worker processes, a ZeroMQ client, hellos and
 * compute requests checked bit for bit against the reference. */
#ifndef MS_WTEST_H
#define MS_WTEST_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "ms_k3_cfg.h"
#include "ms_expert.h"
#include "ms_st.h"
#include "ms_test.h"
#include "ms_wire.h"
#include "ms_xfmt.h"

#define EC(x) MOESTREAM__ERROR__CODE__##x

typedef ms_t_worker worker;

extern char wt_root[512], wt_model[600], wt_wbin[4096];
extern void *wt_zctx;
extern ms_k3_cfg wt_cfg;
extern ms_st *wt_st;
extern ms_expert_table *wt_table;
extern int wt_L;
extern ms_xfmt wt_xfmt; /* the model's expert format, as a coordinator presents it */
extern ms_t_rng wt_rng;

typedef struct {
    uint32_t layer, rows, width;
    size_t n_act;   /* floats sent (normally rows x width) */
    float *act;
    size_t n;
    uint32_t *row, *exp;
    ms_uuid id;
} creq;

uint32_t wt_rnd(void);
int wt_worker_start(worker *w, const char *name, const char **args);
int wt_worker_stop(worker *w, double limit_s, double *took);
int wt_log_has(const worker *w, const char *needle);
void *wt_client(const char *ep, const char *server_pub, const char *pub, const char *sec, int type);
void wt_send_raw(void *s, const void *buf, size_t len);
void wt_send_env(void *s, Moestream__Envelope *e);
Moestream__Envelope *wt_recv_env(void *s, int timeout_ms);
Moestream__Envelope *wt_hello_fmt(void *s, const char *fp, const ms_xfmt *f, int timeout_ms);
Moestream__Envelope *wt_hello(void *s, const char *fp, int timeout_ms);
void wt_creq_group(creq *r);
void wt_creq_random(creq *r, uint32_t layer, uint32_t rows, size_t n, int e0, int e1);
void wt_creq_free(creq *r);
void wt_creq_send(void *s, creq *r, uint32_t version);
int wt_check_reply(const creq *r, Moestream__Envelope *e, const char *what);
int wt_expect_error(void *s, creq *r, uint32_t version, int code, const char *needle, const char *what);
Moestream__Envelope *wt_expect_raw_error(void *s, const void *buf, size_t len, int code, const char *what);
int wt_good_request(void *s, uint32_t layer, int e0, int e1, const char *what);
int wt_load_reference(void);

/* Set up for test `name`: a temporary root (short enough for ipc paths), the synthetic tiny
 * model, its reference experts, the model fingerprint into fp, a ZeroMQ context. Returns 0, or
 * -1 after recording a failure or a skip (the test should then return ms_t_done()). */
int wt_setup(const char *name, char fp[17]);
void wt_teardown(void);

#endif
