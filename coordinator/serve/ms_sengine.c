/* ms_sengine: the engine thread of serve: a locked hand-over queue, the scheduler loop,
 * cancellation of abandoned or late requests, and the per-request news buffers. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ms_clock.h"
#include "ms_err.h"
#include "ms_pcache.h"
#include "ms_sbuf.h"
#include "ms_sengine.h"

/* What one choice of a request got and the HTTP side has not taken yet. */
typedef struct {
    int32_t *tok;                /* news not taken yet */
    size_t n_tok, cap_tok;
    ms_token_logprob *lp;        /* [cap_tok] with tok, when the job asked for logprobs */
    ms_sbuf text, content, reasoning; /* not taken yet: the text, and its routed parts */
    ms_chat_answer answer;       /* done: a chat's answer split by its format */
    int has_answer;
    int done, told;              /* it ended; its end was handed over */
    char finish[8];
    int stop_index;              /* done: the stop string it ended at, or -1 */
    size_t completion_tokens;
} choice_buf;

struct ms_sreqh {
    ms_sengine *s;
    ms_sched_job job;            /* until the engine thread adds it: owned prompt and stops */
    double t_submit, t_last, deadline;
    int refs;                    /* the HTTP side and the engine side */
    int in_sched, released, ended;
    int n_choices, n_done;       /* choices asked for, and reported by the scheduler */
    choice_buf *ch;              /* [n_choices] */
    size_t n_generated;          /* tokens seen so far (metrics) */
    int done, timed_out;         /* done: every choice ended (or the request was cancelled) */
    char error[512];             /* the first failure's message */
    size_t prompt_tokens;
    pthread_cond_t cv;
    ms_sreqh *next;              /* in the hand-over queue */
};

struct ms_sengine {
    ms_engine *e;
    ms_sched *sched;
    ms_pcache *pc;
    ms_smetrics *m;
    int max_batch, max_queue;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t work;         /* new requests, releases, draining */
    ms_sreqh *in_head, *in_tail; /* handed over, not yet in the scheduler */
    ms_sreqh **live;             /* in the scheduler */
    int n_live, cap_live;
    int in_flight;               /* submitted and not ended */
    int draining, failed, fail_code;
    int aborting;                /* a second signal: every request is cancelled at the next step */
    int finished;                /* the engine thread has ended (under mu) */
    ms_sched_stats st;           /* copied after every step (figures) */
    ms_engine_stats es;
    ms_pcache_stats ps;
    /* The pass running now (set by the model's layer observer on the engine thread, under mu;
     * zero between passes): layers done of n, its rows, seconds since it began. */
    int pass_layer, pass_layers;
    int64_t pass_rows;
    double pass_t0, pass_seconds;
    ms_layer_fn chain_fn;        /* the model's layer observer before the thread started, called after */
    void *chain_ctx;
    double busy;                 /* seconds in steps */
    /* the experts' use, copied after every step (ms_model_expert_routes / _reads) */
    uint32_t *routes, *reads;    /* [n_keys] each; reads NULL when workers hold the experts */
    size_t n_keys;
};


/* Drop one reference (under mu); the last frees h. */
static void unref(ms_sreqh *h)
{
    if (--h->refs > 0) return;
    ms_sched_job_clear(&h->job);
    for (int c = 0; c < h->n_choices; c++) {
        free(h->ch[c].tok);
        free(h->ch[c].lp);
        ms_sbuf_free(&h->ch[c].text);
        ms_sbuf_free(&h->ch[c].content);
        ms_sbuf_free(&h->ch[c].reasoning);
        ms_chat_answer_clear(&h->ch[c].answer);
    }
    free(h->ch);
    pthread_cond_destroy(&h->cv);
    free(h);
}

/* The end of h on the engine side (under mu). */
static void end(ms_sengine *s, ms_sreqh *h)
{
    if (h->ended) return;
    h->ended = 1;
    h->done = 1;
    s->in_flight--;
    for (int i = 0; i < s->n_live; i++)
        if (s->live[i] == h) {
            s->live[i] = s->live[--s->n_live];
            break;
        }
    pthread_cond_broadcast(&h->cv);
    unref(h);
}

static void on_delta(void *ctx, const ms_sched_delta *d)
{
    ms_sengine *s = ctx;
    ms_sreqh *h = d->user;
    double now = ms_now();
    if (d->n_tokens) {
        if (h->n_generated == 0)
            ms_smetrics_ttft(s->m, now - h->t_submit);
        else
            ms_smetrics_inter_token(s->m, now - h->t_last);
        h->t_last = now;
        h->n_generated += d->n_tokens;
    }
    pthread_mutex_lock(&s->mu);
    choice_buf *c = &h->ch[d->choice];
    if (c->n_tok + d->n_tokens > c->cap_tok) {
        c->cap_tok = (c->n_tok + d->n_tokens) * 2 + 16;
        c->tok = ms_realloc(c->tok, sizeof *c->tok * c->cap_tok);
        if (d->logprobs) c->lp = ms_realloc(c->lp, sizeof *c->lp * c->cap_tok);
    }
    if (d->n_tokens) memcpy(c->tok + c->n_tok, d->tokens, sizeof *c->tok * d->n_tokens);
    if (d->n_tokens && d->logprobs) {
        if (!c->lp) c->lp = ms_malloc(sizeof *c->lp * c->cap_tok);
        memcpy(c->lp + c->n_tok, d->logprobs, sizeof *c->lp * d->n_tokens);
    }
    c->n_tok += d->n_tokens;
    if (d->text_len) ms_sbuf_add(&c->text, d->text, d->text_len);
    if (d->content_len) ms_sbuf_add(&c->content, d->content, d->content_len);
    if (d->reasoning_len) ms_sbuf_add(&c->reasoning, d->reasoning, d->reasoning_len);
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&s->mu);
}

static void on_admit(void *ctx, void *user)
{
    ms_sengine *s = ctx;
    ms_sreqh *h = user;
    ms_smetrics_queue_wait(s->m, ms_now() - h->t_submit);
}

/* n bytes (which may hold NUL) and a NUL after them, malloc'ed. */
static char *bytes_dup(const char *p, size_t n)
{
    char *d = ms_malloc(n + 1);
    if (n) memcpy(d, p, n);
    d[n] = 0;
    return d;
}

static int on_done(void *ctx, const ms_sched_result *r)
{
    ms_sengine *s = ctx;
    ms_sreqh *h = r->user;
    if (r->finish) ms_smetrics_tokens(s->m, r->prompt_tokens, r->n_tokens);
    pthread_mutex_lock(&s->mu);
    choice_buf *c = &h->ch[r->choice];
    snprintf(c->finish, sizeof c->finish, "%s", r->finish ? r->finish : "");
    if (!r->finish && !h->error[0]) snprintf(h->error, sizeof h->error, "%s", r->error ? r->error : "generation failed");
    c->done = 1;
    c->stop_index = r->finish ? r->stop_index : -1;
    c->completion_tokens = r->n_tokens;
    if (r->answer) { /* the HTTP side's own copy */
        const ms_chat_answer *a = r->answer;
        c->has_answer = 1;
        c->answer.content = bytes_dup(a->content ? a->content : "", a->content_len);
        c->answer.content_len = a->content_len;
        c->answer.reasoning = a->reasoning ? bytes_dup(a->reasoning, a->reasoning_len) : NULL;
        c->answer.reasoning_len = a->reasoning_len;
        c->answer.call_name = a->call_name ? ms_strdup(a->call_name) : NULL;
        c->answer.call_args = a->call_args ? bytes_dup(a->call_args, a->call_args_len) : NULL;
        c->answer.call_args_len = a->call_args_len;
    }
    h->prompt_tokens = r->prompt_tokens;
    if (++h->n_done == h->n_choices) {
        h->in_sched = 0;
        end(s, h);
    } else {
        pthread_cond_broadcast(&h->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* Under mu: move handed-over jobs into the scheduler; cancel released and late ones. */
static void take_work(ms_sengine *s)
{
    ms_sreqh *h;
    while ((h = s->in_head)) {
        s->in_head = h->next;
        if (!s->in_head) s->in_tail = NULL;
        if (h->released) { /* gone before it started */
            end(s, h);
            continue;
        }
        ms_sched_add(s->sched, &h->job);
        ms_sched_job_clear(&h->job);
        h->in_sched = 1;
        if (s->n_live == s->cap_live) {
            s->cap_live = s->cap_live * 2 + 16;
            s->live = ms_realloc(s->live, sizeof *s->live * (size_t)s->cap_live);
        }
        s->live[s->n_live++] = h;
    }
    double now = ms_now();
    for (int i = 0; i < s->n_live;) {
        h = s->live[i];
        int late = h->deadline > 0 && now > h->deadline;
        if (h->released || late || s->aborting) {
            ms_sched_cancel(s->sched, h);
            h->in_sched = 0;
            h->timed_out = late && !h->released && !s->aborting;
            if (h->timed_out) snprintf(h->error, sizeof h->error, "the request's deadline passed before it finished");
            if (s->aborting && !h->released)
                snprintf(h->error, sizeof h->error, "cancelled: the server was stopped (a second signal while draining)");
            end(s, h); /* removes live[i] */
            continue;
        }
        i++;
    }
    ms_sched_get_stats(s->sched, &s->st); /* queue depth and cancellations, also when idle */
}

/* How long an idle engine waits, once a request comes, for others sent at the same moment (up
 * to max_batch): they then share their first step instead of joining over the next steps, whose
 * prompt rows would make those steps long (the gaps between tokens of everyone else). Small
 * beside a step of a streamed model (a second or more). */
#define GATHER_S 0.05

/* Under mu: requests handed over and not yet taken. */
static int queued(const ms_sengine *s)
{
    int n = 0;
    for (const ms_sreqh *h = s->in_head; h; h = h->next) n++;
    return n;
}

static void *engine_main(void *arg)
{
    ms_sengine *s = arg;
    int idle = 1;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (idle && s->in_head && !s->draining) {
            double until = ms_now() + GATHER_S;
            while (!s->draining && queued(s) < s->max_batch && ms_now() < until) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                double left = until - ms_now();
                long ns = ts.tv_nsec + (long)(left > 0 ? left * 1e9 : 0);
                ts.tv_sec += ns / 1000000000L;
                ts.tv_nsec = ns % 1000000000L;
                pthread_cond_timedwait(&s->work, &s->mu, &ts);
            }
        }
        take_work(s);
        if (!ms_sched_pending(s->sched)) {
            if (s->draining && !s->in_head) {
                s->finished = 1;
                break;
            }
            /* wake up now and then for deadlines of requests that are waiting to be taken */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&s->work, &s->mu, &ts);
            idle = 1;
            continue;
        }
        idle = 0;
        s->pass_t0 = ms_now();
        pthread_mutex_unlock(&s->mu);
        double t_step = ms_now();
        int rc = ms_sched_step(s->sched);
        t_step = ms_now() - t_step;
        ms_sched_stats st;
        ms_sched_get_stats(s->sched, &st);
        ms_engine_stats es;
        ms_engine_get_stats(s->e, &es); /* the engine is this thread's alone */
        ms_pcache_stats ps = {0};
        if (s->pc) ms_pcache_get_stats(s->pc, &ps); /* so is the prefix cache */
        if (rc == 0) ms_smetrics_step(s->m, st.last_batch);
        const uint32_t *routes = ms_model_expert_routes(ms_engine_model(s->e)), *reads = ms_model_expert_reads(ms_engine_model(s->e));
        pthread_mutex_lock(&s->mu);
        s->st = st;
        s->es = es;
        s->ps = ps;
        s->busy += t_step;
        if (routes) memcpy(s->routes, routes, sizeof *s->routes * s->n_keys);
        if (reads && s->reads) memcpy(s->reads, reads, sizeof *s->reads * s->n_keys);
        s->pass_layer = s->pass_layers = 0;
        s->pass_rows = 0;
        s->pass_seconds = 0.0;
        if (rc != 0) {
            /* the engine cannot go on: every request ends with the error, new ones get 503 */
            ms_log(0, "serve: the engine failed: %s", ms_err_msg());
            s->failed = 1;
            s->fail_code = ms_err_code() ? ms_err_code() : 1;
            s->draining = 1;
            while (s->n_live) {
                ms_sreqh *h = s->live[0];
                snprintf(h->error, sizeof h->error, "the engine failed: %s", ms_err_msg());
                end(s, h);
            }
            ms_sched_free(s->sched);
            s->sched = ms_sched_new(s->e, s->max_batch, on_done, s);
            ms_sched_set_stream(s->sched, on_delta);
            ms_sched_set_admit(s->sched, on_admit);
            ms_sched_set_pcache(s->sched, s->pc, 256);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* After each layer of a pass (the engine thread): where the pass is, and the bytes read so far,
 * for /metrics while a long prefill span runs (minutes on a big model). */
static void serve_layer(void *ctx, int layer, int n_layers, int64_t rows)
{
    ms_sengine *s = ctx;
    ms_model_stats ms;
    ms_model_get_stats(ms_engine_model(s->e), &ms);
    pthread_mutex_lock(&s->mu);
    s->pass_layer = layer + 1;
    s->pass_layers = n_layers;
    s->pass_rows = rows;
    s->pass_seconds = ms_now() - s->pass_t0;
    s->es.model.bytes_read_experts = ms.bytes_read_experts;
    s->es.model.bytes_read_trunk = ms.bytes_read_trunk;
    pthread_mutex_unlock(&s->mu);
    if (s->chain_fn) s->chain_fn(s->chain_ctx, layer, n_layers, rows);
}

ms_sengine *ms_sengine_start(ms_engine *e, int max_batch, int max_queue, ms_smetrics *m, ms_pcache *pc)
{
    ms_sengine *s = ms_calloc(1, sizeof *s);
    s->e = e;
    s->pc = pc;
    s->m = m;
    s->max_batch = max_batch;
    s->max_queue = max_queue;
    s->sched = ms_sched_new(e, max_batch, on_done, s);
    ms_sched_set_stream(s->sched, on_delta);
    ms_sched_set_admit(s->sched, on_admit);
    ms_sched_set_pcache(s->sched, pc, 256);
    const ms_model_info *in = ms_engine_info(e);
    s->n_keys = (size_t)(in->n_layers + in->draft_layers) * (size_t)in->n_experts;
    s->routes = ms_calloc(s->n_keys ? s->n_keys : 1, sizeof *s->routes);
    if (ms_model_expert_reads(ms_engine_model(e))) s->reads = ms_calloc(s->n_keys ? s->n_keys : 1, sizeof *s->reads);
    ms_model_get_layer_observer(ms_engine_model(e), &s->chain_fn, &s->chain_ctx);
    ms_model_set_layer_observer(ms_engine_model(e), serve_layer, s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    if (pthread_create(&s->thread, NULL, engine_main, s) != 0) {
        ms_err_set("cannot start the engine thread: %s", strerror(errno));
        ms_err_set_code(MS_EXIT_IO);
        ms_sengine_free(s);
        return NULL;
    }
    s->started = 1;
    return s;
}

void ms_sengine_drain_begin(ms_sengine *s)
{
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
}

int ms_sengine_drained(ms_sengine *s)
{
    pthread_mutex_lock(&s->mu);
    int done = s->finished || !s->started;
    pthread_mutex_unlock(&s->mu);
    return done;
}

void ms_sengine_abort(ms_sengine *s)
{
    pthread_mutex_lock(&s->mu);
    s->draining = s->aborting = 1;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
}

void ms_sengine_drain(ms_sengine *s)
{
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
    if (s->started) pthread_join(s->thread, NULL);
    s->started = 0;
}

void ms_sengine_free(ms_sengine *s)
{
    if (!s) return;
    ms_sengine_drain(s);
    ms_model_set_layer_observer(ms_engine_model(s->e), s->chain_fn, s->chain_ctx);
    ms_sched_free(s->sched);
    free(s->live);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->mu);
    free(s->routes);
    free(s->reads);
    free(s);
}

ms_sreqh *ms_sengine_submit(ms_sengine *s, const ms_sched_job *j, double deadline_s, int *status)
{
    pthread_mutex_lock(&s->mu);
    if (s->draining) {
        *status = 503;
        pthread_mutex_unlock(&s->mu);
        return NULL;
    }
    if (s->in_flight >= s->max_batch + s->max_queue) {
        *status = 429;
        pthread_mutex_unlock(&s->mu);
        return NULL;
    }
    ms_sreqh *h = ms_calloc(1, sizeof *h);
    h->s = s;
    h->refs = 2;
    h->t_submit = h->t_last = ms_now();
    h->deadline = deadline_s > 0 ? h->t_submit + deadline_s : 0;
    pthread_cond_init(&h->cv, NULL);
    ms_sched_job_copy(&h->job, j);
    h->job.user = h;
    h->job.stream = 1;
    h->n_choices = j->n_choices > 1 ? j->n_choices : 1;
    h->ch = ms_calloc((size_t)h->n_choices, sizeof *h->ch);
    if (s->in_tail)
        s->in_tail->next = h;
    else
        s->in_head = h;
    s->in_tail = h;
    s->in_flight++;
    *status = 200;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
    return h;
}

void ms_sreq_news_clear(ms_sreq_news *n)
{
    free(n->tokens);
    free(n->logprobs);
    free(n->text);
    free(n->content);
    free(n->reasoning);
    ms_chat_answer_clear(&n->answer);
    memset(n, 0, sizeof *n);
}

/* The choice with something to hand over (new tokens or text, or its end), or -1 (under mu). */
static int pending_choice(const ms_sreqh *h)
{
    for (int c = 0; c < h->n_choices; c++)
        if (h->ch[c].n_tok || h->ch[c].text.n || h->ch[c].content.n || h->ch[c].reasoning.n || ((h->ch[c].done || h->done) && !h->ch[c].told)) return c;
    return -1;
}

int ms_sreqh_wait(ms_sreqh *h, double timeout_s, ms_sreq_news *n)
{
    ms_sengine *s = h->s;
    ms_sreq_news_clear(n);
    pthread_mutex_lock(&s->mu);
    int k = pending_choice(h);
    if (k < 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double t = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + timeout_s;
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
        while ((k = pending_choice(h)) < 0)
            if (pthread_cond_timedwait(&h->cv, &s->mu, &ts) == ETIMEDOUT) break;
    }
    if (k >= 0) {
        choice_buf *c = &h->ch[k];
        n->choice = k;
        if (c->n_tok) {
            n->tokens = c->tok;
            n->n_tokens = c->n_tok;
            n->logprobs = c->lp;
            c->lp = NULL;
            c->tok = NULL;
            c->n_tok = c->cap_tok = 0;
        }
        if (c->text.n) n->text = ms_sbuf_take(&c->text, &n->text_len);
        if (c->content.n) n->content = ms_sbuf_take(&c->content, &n->content_len);
        if (c->reasoning.n) n->reasoning = ms_sbuf_take(&c->reasoning, &n->reasoning_len);
        /* a choice's end is told once everything before it was taken; a request that ended
         * early (cancelled, timed out, failed) ends its choices not done with its error */
        if (c->done || h->done) {
            c->told = 1;
            n->done = 1;
            n->finish = !c->done ? NULL : !strcmp(c->finish, "stop") ? "stop" : !strcmp(c->finish, "length") ? "length" : NULL;
            n->stop_index = c->done ? c->stop_index : -1;
            n->timed_out = h->timed_out;
            snprintf(n->error, sizeof n->error, "%s", h->error[0] ? h->error : "the request ended before this choice");
            n->prompt_tokens = h->prompt_tokens;
            n->completion_tokens = c->completion_tokens;
            n->has_answer = c->has_answer;
            n->answer = c->answer; /* handed over */
            memset(&c->answer, 0, sizeof c->answer);
            c->has_answer = 0;
            n->all_done = pending_choice(h) < 0 && h->done;
            if (n->all_done)
                for (int i = 0; i < h->n_choices; i++) n->all_done &= h->ch[i].told;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return k >= 0;
}

void ms_sreqh_release(ms_sreqh *h)
{
    if (!h) return;
    ms_sengine *s = h->s;
    pthread_mutex_lock(&s->mu);
    h->released = 1;
    if (!h->ended) pthread_cond_broadcast(&s->work);
    unref(h);
    pthread_mutex_unlock(&s->mu);
}

int ms_sengine_ok(ms_sengine *s)
{
    pthread_mutex_lock(&s->mu);
    int ok = s->failed ? -s->fail_code : 1;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

int ms_sengine_health(ms_sengine *s, char *why, size_t n) { return ms_engine_health(s->e, why, n); }

void ms_sengine_figures(ms_sengine *s, ms_smetrics_engine *f)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_lock(&s->mu);
    int queued = 0;
    for (ms_sreqh *h = s->in_head; h; h = h->next) queued++;
    f->queue_depth = s->st.waiting + queued;
    f->batch_size = s->st.running;
    f->max_batch = s->max_batch;
    f->steps = s->st.steps;
    f->cancelled = s->st.cancelled;
    f->bytes_read = s->es.model.bytes_read_experts + s->es.model.bytes_read_trunk;
    f->cache_requests = s->es.model.expert_requests;
    f->cache_hits = s->es.model.expert_cache_hits;
    f->cache_misses = s->es.model.expert_cache_misses;
    f->bytes_read_trunk = s->es.model.bytes_read_trunk;
    f->bytes_read_experts = s->es.model.bytes_read_experts;
    f->cache_capacity = s->es.model.expert_cache_capacity;
    f->cache_used = s->es.model.expert_cache_bytes;
    f->cache_evictions = s->es.model.expert_cache_evictions;
    f->workers = s->es.workers;
    f->workers_up = s->es.remote.workers_up;
    f->worker_requests = s->es.remote.requests;
    f->worker_resends = s->es.remote.resends;
    f->worker_failovers = s->es.remote.failovers;
    f->drafted = s->es.drafted;
    f->accepted = s->es.accepted;
    f->pass_layer = s->pass_layer;
    f->pass_layers = s->pass_layers;
    f->pass_rows = s->pass_rows;
    /* time left: the layers still to run at the pace of those done */
    f->pass_seconds_left = s->pass_layer > 0 ? s->pass_seconds / s->pass_layer * (s->pass_layers - s->pass_layer) : 0.0;
    f->busy_seconds = s->busy;
    f->passes = s->es.passes;
    f->pass_rows_total = s->es.pass_rows;
    f->decode_tokens = s->es.decode_tokens;
    uint64_t dec_rows = s->es.decode_passes + s->es.drafted;
    f->prefill_rows = s->es.pass_rows > dec_rows ? s->es.pass_rows - dec_rows : 0;
    f->io_wait_seconds = s->es.model.io_wait_seconds;
    f->bytes_read_at_load = s->es.model.bytes_read_at_load;
    if (s->pc) {
        f->prefix_on = 1;
        f->prefix_lookups = s->ps.lookups;
        f->prefix_hits = s->ps.hits;
        f->prefix_tokens = s->ps.tokens_reused;
        f->prefix_bytes_ram = s->ps.bytes_ram;
        f->prefix_bytes_disk = s->ps.bytes_disk;
    }
    pthread_mutex_unlock(&s->mu);
}

ms_engine *ms_sengine_engine(ms_sengine *s) { return s->e; }

size_t ms_sengine_expert_use(ms_sengine *s, uint32_t **routes, uint32_t **reads)
{
    *routes = ms_malloc(sizeof **routes * (s->n_keys ? s->n_keys : 1));
    *reads = s->reads ? ms_malloc(sizeof **reads * (s->n_keys ? s->n_keys : 1)) : NULL;
    pthread_mutex_lock(&s->mu);
    memcpy(*routes, s->routes, sizeof **routes * s->n_keys);
    if (s->reads) memcpy(*reads, s->reads, sizeof **reads * s->n_keys);
    pthread_mutex_unlock(&s->mu);
    return s->n_keys;
}

void ms_sengine_engine_stats(ms_sengine *s, ms_engine_stats *es)
{
    pthread_mutex_lock(&s->mu);
    *es = s->es;
    pthread_mutex_unlock(&s->mu);
}
