/* ms_wauth: the expert worker's access control: CURVE keys, the endpoint policy, and the ZAP
 * handler that admits allowed client keys. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "ms_clock.h"
#include "ms_err.h"
#include "ms_wauth.h"
#include "ms_wire.h"

struct ms_wauth_zap {
    void *zap;                 /* REP socket bound to the ZAP endpoint (used by its thread only) */
    pthread_t thread;
    int started;
    ms_wauth_keys keys;        /* copy of the allow list (the thread reads it; no secret) */
};

/* ---- keys ---- */

int ms_wauth_keys_load(const char *secret_path, const char *allow_path, ms_wauth_keys *k)
{
    memset(k, 0, sizeof *k);
    if (!secret_path && !allow_path) return 0;
    if (!secret_path || !allow_path) {
        ms_err_set("--curve-secret FILE and --allow FILE go together (%s is missing)",
                   secret_path ? "--allow" : "--curve-secret");
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    if (!zmq_has("curve")) {
        ms_err_set("this libzmq was built without CURVE support: --curve-secret cannot be used");
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    char(*sec)[41] = NULL, (*allow)[41] = NULL;
    int n_allow = 0, rc = -1;
    if (ms_wire_read_keys(secret_path, "--curve-secret", 1, &sec) < 0) goto out;
    memcpy(k->secret, sec[0], sizeof k->secret);
    if (zmq_curve_public(k->public_key, k->secret) != 0) {
        ms_err_set("--curve-secret %s: cannot derive the public key: %s", secret_path, zmq_strerror(errno));
        ms_err_set_code(MS_EXIT_USAGE);
        goto out;
    }
    if ((n_allow = ms_wire_read_keys(allow_path, "--allow", 0, &allow)) < 0) goto out;
    k->allow = ms_malloc(sizeof *k->allow * (size_t)n_allow);
    for (int i = 0; i < n_allow; i++) zmq_z85_decode(k->allow[i], allow[i]); /* checked by the reader */
    k->n_allow = (size_t)n_allow;
    k->curve = 1;
    rc = 0;
out:
    ms_wire_keys_free(sec, 1);
    ms_wire_keys_free(allow, n_allow);
    if (rc) ms_wauth_keys_free(k);
    return rc;
}

void ms_wauth_keys_free(ms_wauth_keys *k)
{
    if (!k) return;
    free(k->allow);
    memset(k, 0, sizeof *k); /* the secret does not outlive its use */
}

int ms_wauth_check_endpoint(const char *ep, int curve, int insecure)
{
    if (curve && insecure) {
        ms_err_set("--insecure and --curve-secret contradict each other: choose one");
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    if (strncmp(ep, "ipc://", 6) && strncmp(ep, "tcp://", 6)) {
        ms_err_set("--listen %s: the endpoint must be tcp://HOST:PORT or ipc://PATH", ep);
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    if (ms_wire_check_endpoint(ep, 1) != 0) return ms_err_wrap("--listen");
    if (!strncmp(ep, "ipc://", 6)) return 0;
    if (!curve && !insecure) {
        ms_err_set("--listen %s: plain TCP lets anyone who reaches this port use the worker; give --curve-secret "
                   "FILE --allow FILE (keys from 'moestream keygen'), or --insecure on a trusted network",
                   ep);
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    return 0;
}

/* ---- ZAP: answers CURVE handshakes, 200 for allowed client keys, 400 for the rest ---- */

static void *zap_main(void *arg)
{
    ms_wauth_zap *s = arg;
    char last_denied[41] = "";
    double last_log = -1e9;
    for (;;) {
        zmq_msg_t f[8];
        int n = 0, more = 1, dead = 0, extra = 0;
        while (more) {
            zmq_msg_t t;
            zmq_msg_init(&t);
            if (zmq_msg_recv(&t, s->zap, 0) < 0) {
                zmq_msg_close(&t);
                if (errno == EINTR) continue;
                dead = 1; /* ETERM: the context is shutting down */
                break;
            }
            more = zmq_msg_more(&t);
            if (n < 8) {
                zmq_msg_init(&f[n]);
                zmq_msg_move(&f[n++], &t);
            } else {
                extra++;
            }
            zmq_msg_close(&t);
        }
        if (dead) {
            for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
            break;
        }
        /* version, request id, domain, address, routing id, mechanism, credentials... */
        const char *status = "400", *text = "client key not allowed";
        char user[41] = "";
        int ok_shape = n >= 7 && !extra && zmq_msg_size(&f[0]) == 3 && !memcmp(zmq_msg_data(&f[0]), "1.0", 3);
        if (ok_shape && zmq_msg_size(&f[5]) == 5 && !memcmp(zmq_msg_data(&f[5]), "CURVE", 5) &&
            zmq_msg_size(&f[6]) == 32) {
            const uint8_t *key = zmq_msg_data(&f[6]);
            for (size_t i = 0; i < s->keys.n_allow; i++)
                if (!memcmp(s->keys.allow[i], key, 32)) {
                    status = "200";
                    text = "OK";
                    zmq_z85_encode(user, key, 32);
                    break;
                }
            if (!user[0]) {
                char z[41], addr[64];
                zmq_z85_encode(z, key, 32);
                size_t al = zmq_msg_size(&f[3]) < sizeof addr - 1 ? zmq_msg_size(&f[3]) : sizeof addr - 1;
                memcpy(addr, zmq_msg_data(&f[3]), al);
                addr[al] = 0;
                /* A refused client reconnects every fraction of a second: log each key once a minute. */
                double t = ms_now();
                if (strcmp(z, last_denied) || t - last_log > 60) {
                    ms_log(1, "worker: refused a connection from %s: CURVE key %s is not in the allow list",
                           addr[0] ? addr : "?", z);
                    memcpy(last_denied, z, sizeof z);
                    last_log = t;
                }
            }
        }
        {
            /* A REP socket must answer every request, even one it cannot read. */
            zmq_send(s->zap, "1.0", 3, ZMQ_SNDMORE);
            zmq_send(s->zap, n >= 2 ? zmq_msg_data(&f[1]) : "", n >= 2 ? zmq_msg_size(&f[1]) : 0, ZMQ_SNDMORE);
            zmq_send(s->zap, status, 3, ZMQ_SNDMORE);
            zmq_send(s->zap, text, strlen(text), ZMQ_SNDMORE);
            zmq_send(s->zap, user, strlen(user), ZMQ_SNDMORE);
            zmq_send(s->zap, "", 0, 0);
        }
        for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
    }
    zmq_close(s->zap);
    s->zap = NULL;
    return NULL;
}

ms_wauth_zap *ms_wauth_zap_start(void *ctx, const ms_wauth_keys *keys, const char *endpoint)
{
    ms_wauth_zap *s = ms_calloc(1, sizeof *s);
    s->keys.curve = 1;
    s->keys.n_allow = keys->n_allow;
    s->keys.allow = ms_malloc(sizeof *s->keys.allow * (keys->n_allow ? keys->n_allow : 1));
    memcpy(s->keys.allow, keys->allow, sizeof *s->keys.allow * keys->n_allow);
    s->zap = zmq_socket(ctx, ZMQ_REP);
    if (!s->zap || zmq_bind(s->zap, "inproc://zeromq.zap.01") != 0) {
        ms_err_set("--listen %s: cannot start the ZAP handler: %s", endpoint, zmq_strerror(errno));
        ms_err_set_code(MS_EXIT_RUNTIME);
        ms_wauth_zap_free(s);
        return NULL;
    }
    if (pthread_create(&s->thread, NULL, zap_main, s) != 0) {
        ms_err_set("--listen %s: cannot start the ZAP thread", endpoint);
        ms_err_set_code(MS_EXIT_RUNTIME);
        ms_wauth_zap_free(s);
        return NULL;
    }
    s->started = 1;
    return s;
}

void ms_wauth_zap_free(ms_wauth_zap *s)
{
    if (!s) return;
    if (s->started) pthread_join(s->thread, NULL); /* its socket is closed by the thread */
    else if (s->zap) zmq_close(s->zap);
    free(s->keys.allow);
    free(s);
}
