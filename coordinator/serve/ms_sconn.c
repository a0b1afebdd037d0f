/* ms_sconn: read deadlines for serve's connections (a watchdog thread shuts slow ones down) and peer liveness checks. */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "ms_clock.h"
#include "ms_err.h"
#include "ms_sconn.h"

#define WATCH_S 0.2 /* how often the watchdog looks */

struct ms_sconn_sock {
    int fd;
    double deadline; /* INFINITY while a request is answered */
    int cut;
    char addr[80];
    ms_sconn_sock *prev, *next;
};

struct ms_sconn {
    double read_timeout;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int stop, n;
    uint64_t cut_total;
    ms_sconn_sock *head;
};

static void *watch(void *arg)
{
    ms_sconn *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        double now = ms_now();
        for (ms_sconn_sock *s = g->head; s; s = s->next) {
            if (s->cut || now <= s->deadline) continue;
            /* the socket stays the server's: shutting it down makes its thread see the end and close it */
            shutdown(s->fd, SHUT_RDWR);
            s->cut = 1;
            g->cut_total++;
            ms_log(1, "serve: %s sent no complete request within %g s (--read-timeout): connection closed", s->addr,
                   g->read_timeout);
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)(WATCH_S * 1e9);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

ms_sconn *ms_sconn_new(double read_timeout)
{
    MS_ASSERT(read_timeout > 0);
    ms_sconn *g = ms_calloc(1, sizeof *g);
    g->read_timeout = read_timeout;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (pthread_create(&g->thread, NULL, watch, g) != 0) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        ms_err_set("cannot start the connection watchdog thread");
        ms_err_set_code(MS_EXIT_RUNTIME);
        return NULL;
    }
    return g;
}

void ms_sconn_free(ms_sconn *g)
{
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = 1;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    MS_ASSERT(g->head == NULL);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

ms_sconn_sock *ms_sconn_open(ms_sconn *g, int fd, const char *addr)
{
    ms_sconn_sock *s = ms_calloc(1, sizeof *s);
    s->fd = fd;
    snprintf(s->addr, sizeof s->addr, "%s", addr ? addr : "?");
    pthread_mutex_lock(&g->mu);
    s->deadline = ms_now() + g->read_timeout;
    s->next = g->head;
    if (g->head) g->head->prev = s;
    g->head = s;
    g->n++;
    pthread_mutex_unlock(&g->mu);
    return s;
}

void ms_sconn_close(ms_sconn *g, ms_sconn_sock *s)
{
    if (!s) return;
    pthread_mutex_lock(&g->mu);
    if (s->prev) s->prev->next = s->next;
    else g->head = s->next;
    if (s->next) s->next->prev = s->prev;
    g->n--;
    pthread_mutex_unlock(&g->mu);
    free(s);
}

void ms_sconn_busy(ms_sconn *g, ms_sconn_sock *s)
{
    if (!s) return;
    pthread_mutex_lock(&g->mu);
    s->deadline = INFINITY;
    pthread_mutex_unlock(&g->mu);
}

void ms_sconn_idle(ms_sconn *g, ms_sconn_sock *s)
{
    if (!s) return;
    pthread_mutex_lock(&g->mu);
    s->deadline = ms_now() + g->read_timeout;
    pthread_mutex_unlock(&g->mu);
}

int ms_sconn_count(ms_sconn *g)
{
    pthread_mutex_lock(&g->mu);
    int n = g->n;
    pthread_mutex_unlock(&g->mu);
    return n;
}

uint64_t ms_sconn_cut_total(ms_sconn *g)
{
    pthread_mutex_lock(&g->mu);
    uint64_t n = g->cut_total;
    pthread_mutex_unlock(&g->mu);
    return n;
}

int ms_sconn_peer_reset(int fd)
{
    if (fd < 0) return 0;
    struct pollfd p = {fd, 0, 0}; /* POLLERR, POLLHUP and POLLNVAL are reported whatever is asked */
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR | POLLNVAL));
}

int ms_sconn_peer_eof(int fd)
{
    if (fd < 0) return 0;
    struct pollfd p = {fd, POLLRDHUP, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & POLLRDHUP);
}

int ms_sconn_probe_1xx(int fd)
{
    static const char msg[] = "HTTP/1.1 102 Processing\r\n\r\n";
    ssize_t n = send(fd, msg, sizeof msg - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    return n == (ssize_t)(sizeof msg - 1) || (n < 0 && errno == EAGAIN) ? 0 : -1;
}
