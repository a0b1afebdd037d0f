/* fuzz_worker: libFuzzer harness for the expert worker's request path: one message to a real worker (ms_wsrv over an ipc socket, a synthetic tiny model), its one reply checked. */
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <zmq.h>

#include "fuzz_util.h"
#include "ms_synth.h"
#include "ms_wire.h"
#include "ms_wload.h"
#include "ms_wsrv.h"
#include "ms_xfmt.h"

static ms_wload wl;
static ms_wsrv *srv;
static volatile sig_atomic_t stop_flag;
static pthread_t srv_thread;
static void *zctx, *client;

static void *serve(void *arg)
{
    (void)arg;
    if (ms_wsrv_run(srv, &stop_flag) != 0) {
        fprintf(stderr, "fuzz_worker: %s\n", ms_err_msg());
        abort();
    }
    return NULL;
}

static void shutdown_worker(void)
{
    stop_flag = 1;
    pthread_join(srv_thread, NULL);
    zmq_close(client);
    zmq_ctx_term(zctx);
    ms_wsrv_free(srv);
    ms_wload_close(&wl);
}

static void fail_init(void)
{
    fprintf(stderr, "fuzz_worker: %s\n", ms_err_msg());
    abort();
}

/* Seeds for this model (hello, pings, compute requests on owned experts) into dir. */
static void write_seeds(const char *dir)
{
    uint8_t uuid[16];
    for (int i = 0; i < 16; i++) uuid[i] = (uint8_t)(i * 17);
    char path[1024];
    int k = 0;
    Moestream__Envelope e = MOESTREAM__ENVELOPE__INIT;
    Moestream__Hello h = MOESTREAM__HELLO__INIT;
    ms_xfmt_pb keep;
    Moestream__Ping p = MOESTREAM__PING__INIT;
    Moestream__StatsRequest sr = MOESTREAM__STATS_REQUEST__INIT;
    Moestream__ComputeRequest c = MOESTREAM__COMPUTE_REQUEST__INIT;
    int L = wl.fmt.latent;
    float act[4 * 1024];
    uint32_t rows[8] = {0, 0, 1, 1, 2, 3, 3, 3}, experts[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    for (int i = 0; i < 4 * L && i < 4 * 1024; i++) act[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    for (int m = 0; m < 5; m++) {
        Moestream__Envelope x = e;
        if (m == 0) {
            h.client_uuid.data = uuid, h.client_uuid.len = 16, h.model_fingerprint = wl.fingerprint;
            h.expert_format = ms_xfmt_to_proto(&wl.fmt, &keep);
            x.body_case = MOESTREAM__ENVELOPE__BODY_HELLO, x.hello = &h;
        } else if (m == 1) {
            p.sequence = 7;
            x.body_case = MOESTREAM__ENVELOPE__BODY_PING, x.ping = &p;
        } else if (m == 2) {
            x.body_case = MOESTREAM__ENVELOPE__BODY_STATS, x.stats = &sr;
        } else {
            c.request_uuid.data = uuid, c.request_uuid.len = 16;
            c.layer = (uint32_t)(m == 3 ? wl.first_moe : wl.n_layers - 1);
            c.rows = m == 3 ? 1 : 4;
            c.latent_width = (uint32_t)L;
            c.n_activations = c.rows * (size_t)L, c.activations = act;
            c.n_item_row = c.n_item_expert = m == 3 ? 2 : 8;
            c.item_row = rows, c.item_expert = experts;
            x.body_case = MOESTREAM__ENVELOPE__BODY_COMPUTE, x.compute = &c;
        }
        uint8_t *buf;
        size_t len;
        ms_wire_pack(&x, &buf, &len);
        for (int mode = 0; mode < (m < 2 ? 3 : 1); mode++) { /* hello and ping in every framing */
            uint8_t *seed = malloc(len + 1);
            if (!seed) abort();
            seed[0] = (uint8_t)mode;
            memcpy(seed + 1, buf, len);
            snprintf(path, sizeof path, "%s/seed-%d", dir, k++);
            fuzz_write(path, seed, len + 1);
            free(seed);
        }
        free(buf);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *d = fuzz_dir();
    ms_synth_shape sh;
    if (ms_synth_preset("tiny", &sh) != 0) fail_init();
    sh.tok_ranks = 0;
    const char *model = fuzz_path(1, "model");
    if (ms_synth_write(model, &sh, 1) != 0) fail_init();
    ms_wload_opts lo = {0};
    lo.model_dir = model;
    lo.ram_budget = (uint64_t)1 << 30;
    lo.threads = 1;
    lo.buffered = 1;
    if (ms_wload_open(&lo, &wl) != 0) fail_init();
    char ep[600];
    snprintf(ep, sizeof ep, "ipc://%s/w.sock", d);
    ms_wauth_keys keys;
    memset(&keys, 0, sizeof keys);
    ms_wsrv_opts so = {ep, &keys, &wl};
    if (!(srv = ms_wsrv_new(&so))) fail_init();
    if (pthread_create(&srv_thread, NULL, serve, NULL) != 0) abort();
    zctx = zmq_ctx_new();
    client = zmq_socket(zctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(client, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_connect(client, ep) != 0) abort();
    atexit(shutdown_worker);
    const char *seeds = getenv("FUZZ_WORKER_SEEDS");
    if (seeds) write_seeds(seeds);
    return 0;
}

/* Expected reply body for a request body (0: only an Error is acceptable). */
static int reply_for(int req)
{
    switch (req) {
    case MOESTREAM__ENVELOPE__BODY_HELLO: return MOESTREAM__ENVELOPE__BODY_HELLO_REPLY;
    case MOESTREAM__ENVELOPE__BODY_COMPUTE: return MOESTREAM__ENVELOPE__BODY_COMPUTE_REPLY;
    case MOESTREAM__ENVELOPE__BODY_PING: return MOESTREAM__ENVELOPE__BODY_PONG;
    case MOESTREAM__ENVELOPE__BODY_STATS: return MOESTREAM__ENVELOPE__BODY_STATS_REPLY;
    default: return 0;
    }
}

/* libFuzzer's -timeout watchdog is a SIGALRM every few seconds: calls it interrupts are
 * retried (the poll with the time left). */
static void send_frame(const void *p, size_t n, int flags)
{
    while (zmq_send(client, p, n, flags) < 0)
        if (zmq_errno() != EINTR) abort();
}

static int recv_msg(zmq_msg_t *m)
{
    int rc;
    while ((rc = zmq_msg_recv(m, client, 0)) < 0 && zmq_errno() == EINTR) {
    }
    return rc;
}

static int poll_in(zmq_pollitem_t *it, long ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        long left = ms - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        int n = zmq_poll(it, 1, left > 0 ? left : 0);
        if (n >= 0 || zmq_errno() != EINTR) return n;
    }
}

/* The first input byte chooses the framing (mod 3): 0 one frame (a DEALER client), 1 an empty
 * delimiter and the message (a REQ client), 2 the message split into two frames (refused). */
int LLVMFuzzerTestOneInput(const uint8_t *in, size_t in_len)
{
    /* Larger messages only buy more legitimate compute (thousands of items under ASan take
     * seconds): every check is reached well below 16 KiB. */
    if (in_len == 0 || in_len > 16384) return 0;
    int mode = in[0] % 3;
    const uint8_t *data = in + 1;
    size_t len = in_len - 1;
    if (mode == 1) send_frame("", 0, ZMQ_SNDMORE);
    if (mode == 2) {
        size_t half = len / 2;
        send_frame(data, half, ZMQ_SNDMORE);
        send_frame(data + half, len - half, 0);
    } else {
        send_frame(data, len, 0);
    }
    /* Exactly one reply, soon: at most one empty delimiter frame, then one Envelope that is an
     * Error or the answer to the request's type. */
    zmq_pollitem_t it = {client, 0, ZMQ_POLLIN, 0};
    static long wait_ms = -1;
    if (wait_ms < 0) wait_ms = getenv("FUZZ_WORKER_WAIT_MS") ? atol(getenv("FUZZ_WORKER_WAIT_MS")) : 10000;
    FUZZ_CHECK(poll_in(&it, wait_ms) == 1);
    zmq_msg_t m;
    zmq_msg_init(&m);
    FUZZ_CHECK(recv_msg(&m) >= 0);
    int frames = 1;
    if (zmq_msg_more(&m)) { /* the delimiter put back */
        FUZZ_CHECK(zmq_msg_size(&m) == 0 && mode != 0);
        FUZZ_CHECK(recv_msg(&m) >= 0);
        frames++;
    }
    FUZZ_CHECK(!zmq_msg_more(&m));
    FUZZ_CHECK(mode != 1 || frames == 2);
    char why[256];
    int code;
    Moestream__Envelope *r = ms_wire_unpack(zmq_msg_data(&m), zmq_msg_size(&m), why, sizeof why, &code);
    zmq_msg_close(&m);
    FUZZ_CHECK(r != NULL);
    Moestream__Envelope *q = ms_wire_unpack(data, len, why, sizeof why, &code);
    if (getenv("FUZZ_WORKER_VERBOSE"))
        fprintf(stderr, "fuzz_worker: mode %d reply %d%s%s\n", mode, (int)r->body_case,
                r->body_case == MOESTREAM__ENVELOPE__BODY_ERROR ? ": " : "",
                r->body_case == MOESTREAM__ENVELOPE__BODY_ERROR ? r->error->message : "");
    if (r->body_case != MOESTREAM__ENVELOPE__BODY_ERROR) {
        FUZZ_CHECK(mode != 2 && q != NULL && (int)r->body_case == reply_for((int)q->body_case));
        if (r->body_case == MOESTREAM__ENVELOPE__BODY_COMPUTE_REPLY) {
            const Moestream__ComputeRequest *c = q->compute;
            const Moestream__ComputeReply *cr = r->compute_reply;
            FUZZ_CHECK(cr->items == c->n_item_expert && cr->latent_width == c->latent_width);
            FUZZ_CHECK(cr->request_uuid.len == 16 && memcmp(cr->request_uuid.data, c->request_uuid.data, 16) == 0);
        }
    } else {
        FUZZ_CHECK(r->error->message[0] != 0);
    }
    ms_wire_free(q);
    ms_wire_free(r);
    /* Nothing else queued: one request, one reply. */
    FUZZ_CHECK(poll_in(&it, 0) == 0);
    return 0;
}
