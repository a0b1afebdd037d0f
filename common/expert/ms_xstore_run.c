/* ms_xstore_run: computing the experts of one expert-store call (hits, arrived misses), on
 * the caller's thread or one expert per pool thread. */
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_scratch.h"
#include "ms_xstore_int.h"

/* Compute distinct expert d from the slot buf (NULL: a mapped store's files): gather its rows (at most `gather` at a time,
 * through zin/zout of [gather][L] floats), run the expert with `pool` (NULL: on this thread),
 * scatter. Returns 0, or -1 with ms_err set (this thread's) when an output is not finite. */
static int compute_into(ms_xstore *s, xs_call *c, int d, const uint8_t *buf, int64_t gather, float *zin,
                        float *zout, ms_pool *pool)
{
    int64_t L = s->o.fmt.latent;
    size_t key = (size_t)c->layer * (size_t)s->o.n_experts + (size_t)c->g->dexp[d];
    const uint8_t *part[XS_PARTS];
    xs_parts(s, key, buf, part); /* buf NULL: in place in the mapped files */
    int64_t m = c->g->start[d + 1] - c->g->start[d];
    int64_t t0 = c->g->start[d];
    int bad = 0;
    for (int64_t a = 0; a < m; a += gather) {
        int64_t mm = m - a < gather ? m - a : gather;
        for (int64_t r = 0; r < mm; r++)
            memcpy(zin + r * L, c->z + (int64_t)c->item_row[ms_xgroup_item(c->g, t0 + a + r)] * L,
                   sizeof(float) * (size_t)L);
        ms_expert_run(&s->o.fmt, part, zin, mm, zout, pool);
        /* A NaN or Inf output (bad weights in the file) stops the run instead of spoiling it. */
        if (!bad && ms_expert_check_finite(NULL, MS_EXIT_RUNTIME, c->layer, c->g->dexp[d], zin, zout, mm, L))
            bad = 1;
        for (int64_t r = 0; r < mm; r++) {
            int64_t item = ms_xgroup_item(c->g, t0 + a + r);
            memcpy(c->out + (c->slot ? c->slot[item] : item) * L, zout + r * L, sizeof(float) * (size_t)L);
        }
    }
    c->done[d] = 1;
    return bad ? -1 : 0;
}

/* On the caller's thread, each matmul split over the pool. */
void xs_compute_one(ms_xstore *s, xs_call *c, int d, const uint8_t *buf)
{
    if (compute_into(s, c, d, buf, c->gather, c->zin, c->zout, s->pool) != 0 && !c->bad) {
        c->bad = 1;
        snprintf(c->bad_msg, sizeof c->bad_msg, "%s", ms_err_msg());
    }
}

typedef struct {
    ms_xstore *s;
    xs_call *c;
    const int *list;    /* [n] distinct-expert indices to compute */
    const uint8_t *const *buf; /* [n] the slot each one is in */
    int n;
    atomic_int next;    /* the next index of list to claim */
    pthread_mutex_t mu; /* guards bad_d, bad_msg */
    int bad_d;          /* lowest list index whose output was not finite, or INT_MAX */
    char bad_msg[512];
} xs_par;

static void par_task(void *ctx, int64_t b, int64_t e)
{
    (void)b, (void)e; /* one chunk per thread; experts are claimed one by one for balance */
    xs_par *p = ctx;
    int64_t L = p->s->o.fmt.latent;
    float *zin = ms_scratch_push(sizeof(float) * (size_t)(2 * XS_PAR_ROWS * L)); /* [XS_PAR_ROWS][L] */
    float *zout = zin + XS_PAR_ROWS * L;                                   /* [XS_PAR_ROWS][L] */
    for (int i; (i = atomic_fetch_add(&p->next, 1)) < p->n;) {
        if (compute_into(p->s, p->c, p->list[i], p->buf[i], XS_PAR_ROWS, zin, zout, NULL) != 0) {
            pthread_mutex_lock(&p->mu);
            if (i < p->bad_d) {
                p->bad_d = i;
                snprintf(p->bad_msg, sizeof p->bad_msg, "%s", ms_err_msg());
            }
            pthread_mutex_unlock(&p->mu);
        }
    }
    ms_scratch_pop(zin);
}

/* list[n] (each of at most XS_PAR_ROWS rows, in slots buf[n]) one per thread of the pool. */
void xs_compute_par(ms_xstore *s, xs_call *c, const int *list, const uint8_t *const *buf, int n)
{
    xs_par p = {.s = s, .c = c, .list = list, .buf = buf, .n = n, .bad_d = INT_MAX};
    atomic_init(&p.next, 0);
    pthread_mutex_init(&p.mu, NULL);
    ms_pool_for(s->pool, ms_pool_size(s->pool), 1, par_task, &p);
    pthread_mutex_destroy(&p.mu);
    if (p.bad_d != INT_MAX && !c->bad) {
        c->bad = 1;
        snprintf(c->bad_msg, sizeof c->bad_msg, "%s", p.bad_msg);
    }
}

int xs_small_group(const xs_call *c, int d) { return c->g->start[d + 1] - c->g->start[d] <= XS_PAR_ROWS; }

/* Every hit of the call not computed yet (a hit evicted by an early miss already was). */
void xs_compute_hits(ms_xstore *s, xs_call *c)
{
    int nt = ms_pool_size(s->pool);
    int *list = ms_scratch_push(sizeof(int) * (size_t)(c->g->nd + 1));           /* [nd] small hits */
    const uint8_t **buf = ms_scratch_push(sizeof *buf * (size_t)(c->g->nd + 1)); /* [nd] their slots */
    int n = 0;
    for (int d = 0; d < c->g->nd; d++)
        if (c->hit[d] && !c->done[d] && xs_small_group(c, d)) {
            buf[n] = s->key_buf[(size_t)c->layer * (size_t)s->o.n_experts + (size_t)c->g->dexp[d]];
            list[n++] = d;
        }
    if (nt > 1 && n >= 2 * nt) xs_compute_par(s, c, list, buf, n);
    ms_scratch_pop(buf);
    ms_scratch_pop(list);
    for (int d = 0; d < c->g->nd; d++) {
        size_t key = (size_t)c->layer * (size_t)s->o.n_experts + (size_t)c->g->dexp[d];
        if (c->hit[d] && !c->done[d]) xs_compute_one(s, c, d, s->key_buf[key]);
    }
}
