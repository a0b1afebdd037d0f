/* ms_sched: the continuous-batching scheduler: a FIFO of jobs, a batch of running sequences,
 * stop ids and strings, and per-job isolation of worker failures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_gentext.h"
#include "ms_pcache.h"
#include "ms_sbuf.h"
#include "ms_grammar.h"
#include "ms_sched.h"

typedef struct sjob {
    ms_sched_job j;              /* with owned copies of prompt, stop_ids, stop */
    ms_sched *s;
    ms_eseq *seq;                /* while running */
    int stopped;                 /* a stop id or string ended it */
    ms_gentext *text;            /* the generated text (with a tokenizer): each id decoded once,
                                    as it comes, for stop strings, streaming and the report */
    int alone;                   /* re-run alone after a failed step */
    float *rows;                 /* keep_logits: [n_rows][V] */
    int64_t n_rows, cap_rows;
    size_t sent_tokens;          /* stream: the ids the deltas carried so far (kept over a re-run,
                                    which gives the same tokens; so does the text's) */
    int choice;                  /* of the job's choices; a job not yet forked has j.n_choices > 1 */
    size_t skip;                 /* prompt tokens restored from the prefix cache (not prefilled) */
    size_t kept;                 /* prompt tokens whose state went into the prefix cache */
    int32_t end_ids[MS_SCHED_MAX_END]; /* a grammar's end ids: the stop ids, and eos with stop_at_eos */
    int n_end;
    ms_grammar *grammar;         /* j.grammar_text compiled (at its first sequence) */
} sjob;

/* A FIFO of jobs. */
typedef struct {
    sjob **v;
    size_t head, n, cap;
} fifo;

struct ms_sched {
    ms_engine *e;
    int max_batch;
    ms_sched_done_fn done;
    ms_sched_stream_fn stream;
    ms_sched_admit_fn on_admit;
    ms_pcache *pc;
    size_t pc_every;
    void *ctx;
    int64_t V;
    fifo wait;                   /* not started */
    fifo solo;                   /* from a failed step: each runs alone, before any other */
    sjob *run[MS_MODEL_MAX_SEQS];
    int n_run;
    ms_sched_stats st;
};

static void fifo_push(fifo *f, sjob *j)
{
    if (f->head + f->n == f->cap) {
        if (f->head > 0) {
            memmove(f->v, f->v + f->head, sizeof *f->v * f->n);
            f->head = 0;
        } else {
            f->cap = f->cap * 2 + 16;
            f->v = ms_realloc(f->v, sizeof *f->v * f->cap);
        }
    }
    f->v[f->head + f->n++] = j;
}

static sjob *fifo_pop(fifo *f)
{
    if (!f->n) return NULL;
    f->n--;
    return f->v[f->head++];
}

static void job_free(sjob *j)
{
    if (!j) return;
    ms_engine_seq_free(j->seq);
    ms_grammar_free(j->grammar); /* after the sequence that used it */
    ms_sched_job_clear(&j->j);
    free(j->rows);
    ms_gentext_free(j->text);
    free(j);
}

ms_sched *ms_sched_new(ms_engine *e, int max_batch, ms_sched_done_fn done, void *ctx)
{
    MS_ASSERT(max_batch >= 1 && max_batch <= MS_MODEL_MAX_SEQS && max_batch <= ms_engine_max_seqs(e));
    ms_sched *s = ms_calloc(1, sizeof *s);
    s->e = e;
    s->max_batch = max_batch;
    s->done = done;
    s->ctx = ctx;
    s->V = ms_engine_info(e)->vocab;
    return s;
}

void ms_sched_free(ms_sched *s)
{
    if (!s) return;
    for (int i = 0; i < s->n_run; i++) job_free(s->run[i]);
    sjob *j;
    while ((j = fifo_pop(&s->wait))) job_free(j);
    while ((j = fifo_pop(&s->solo))) job_free(j);
    free(s->wait.v);
    free(s->solo.v);
    free(s);
}

/* Batch places j takes: its own, and those of the choices it will fork. */
static int places(const sjob *j) { return j->j.n_choices > 1 ? j->j.n_choices : 1; }

static int running_places(const ms_sched *s)
{
    int n = 0;
    for (int i = 0; i < s->n_run; i++) n += places(s->run[i]);
    return n;
}

void ms_sched_add(ms_sched *s, const ms_sched_job *in)
{
    MS_ASSERT(in->max_tokens >= 1 && in->n_prompt >= 1 && in->n_choices <= s->max_batch);
    sjob *j = ms_calloc(1, sizeof *j);
    j->s = s;
    ms_sched_job_copy(&j->j, in);
    fifo_push(&s->wait, j);
}

void ms_sched_job_copy(ms_sched_job *dst, const ms_sched_job *in)
{
    *dst = *in;
    int32_t *p = ms_malloc(sizeof(int32_t) * (in->n_prompt + 1));
    if (in->n_prompt) memcpy(p, in->prompt, sizeof(int32_t) * in->n_prompt);
    dst->prompt = p;
    int32_t *ids = ms_malloc(sizeof(int32_t) * (size_t)(in->n_stop_ids + 1));
    if (in->n_stop_ids) memcpy(ids, in->stop_ids, sizeof(int32_t) * (size_t)in->n_stop_ids);
    dst->stop_ids = ids;
    const char **st = ms_calloc((size_t)in->n_stop + 1, sizeof *st);
    for (int i = 0; i < in->n_stop; i++) st[i] = ms_strdup(in->stop[i]);
    dst->stop = st;
    dst->grammar_text = in->grammar_text ? ms_strdup(in->grammar_text) : NULL;
    ms_logit_bias *b = ms_malloc(sizeof *b * (size_t)(in->n_logit_bias + 1));
    if (in->n_logit_bias) memcpy(b, in->logit_bias, sizeof *b * (size_t)in->n_logit_bias);
    dst->logit_bias = b;
}

void ms_sched_job_clear(ms_sched_job *j)
{
    free((void *)j->prompt);
    free((void *)j->stop_ids);
    free((void *)j->logit_bias);
    free((void *)j->grammar_text);
    for (int i = 0; i < j->n_stop; i++) free((void *)j->stop[i]);
    free((void *)j->stop);
    memset(j, 0, sizeof *j);
}

void ms_sched_set_stream(ms_sched *s, ms_sched_stream_fn fn) { s->stream = fn; }
void ms_sched_set_admit(ms_sched *s, ms_sched_admit_fn fn) { s->on_admit = fn; }
void ms_sched_set_pcache(ms_sched *s, ms_pcache *c, size_t every)
{
    s->pc = c;
    s->pc_every = every;
}

/* Remove j from f if there; 1 if it was. */
static int fifo_remove(fifo *f, const void *user)
{
    for (size_t i = 0; i < f->n; i++) {
        sjob *j = f->v[f->head + i];
        if (j->j.user != user) continue;
        memmove(f->v + f->head + i, f->v + f->head + i + 1, sizeof *f->v * (f->n - i - 1));
        f->n--;
        job_free(j);
        return 1;
    }
    return 0;
}

static int cancel_one(ms_sched *s, const void *user)
{
    int found = fifo_remove(&s->wait, user) || fifo_remove(&s->solo, user);
    for (int i = 0; i < s->n_run && !found; i++) {
        if (s->run[i]->j.user != user) continue;
        job_free(s->run[i]);
        memmove(s->run + i, s->run + i + 1, sizeof *s->run * (size_t)(s->n_run - i - 1));
        s->n_run--;
        found = 1;
    }
    return found;
}

int ms_sched_cancel(ms_sched *s, const void *user)
{
    int found = 0;
    while (cancel_one(s, user)) found = 1; /* every choice */
    if (found) s->st.cancelled++;
    return found;
}

int ms_sched_pending(const ms_sched *s) { return (int)(s->wait.n + s->solo.n) + s->n_run; }

/* The text of a job's generated ids, made as they come (NULL without a tokenizer). */
static ms_gentext *job_text(sjob *j)
{
    ms_tok *tok = ms_engine_tok(j->s->e);
    if (!j->text && tok) {
        j->text = ms_gentext_new(tok, j->j.chat, j->j.keep_special, j->j.stop, j->j.n_stop);
        ms_gentext_prompt(j->text, j->j.prompt, j->j.n_prompt);
    }
    return j->text;
}

/* After each generated token: stop ids, then its text (decoded once) and stop strings. The
 * tokens come in order for each job, a forked choice's first one included (reported through
 * the choice's own job before the fork returns its sequence). */
static void on_token(void *ctx, ms_eseq *seq, int32_t token)
{
    sjob *j = ctx;
    j->s->st.generated++;
    if (j->stopped) return;
    for (int i = 0; i < j->j.n_stop_ids; i++)
        if (token == j->j.stop_ids[i]) j->stopped = 1;
    ms_gentext *g = job_text(j);
    if (g) {
        j->s->st.decoded++;
        if (ms_gentext_add(g, token, !j->stopped) == 1) j->stopped = 1; /* a stop string */
    }
    if (j->stopped) ms_engine_seq_stop(seq); /* a speculative step ends here too */
}

static int on_logits(void *ctx, ms_eseq *seq, const float *rows, int64_t n)
{
    sjob *j = ctx;
    (void)seq;
    if (!j->j.keep_logits) return 0;
    int64_t V = j->s->V;
    if (j->n_rows + n > j->cap_rows) {
        j->cap_rows = (j->n_rows + n) * 2;
        j->rows = ms_realloc(j->rows, sizeof(float) * (size_t)(j->cap_rows * V));
    }
    memcpy(j->rows + j->n_rows * V, rows, sizeof(float) * (size_t)(n * V));
    j->n_rows += n;
    return 0;
}

/* Hand j's new tokens, and the text that is final (done: all of it; drop_last: without a final
 * stop id), to the stream callback. */
static void send_delta(ms_sched *s, sjob *j, int done, int drop_last)
{
    size_t ng;
    const int32_t *gen = ms_engine_seq_tokens(j->seq, &ng);
    ms_sched_delta d = {0};
    d.user = j->j.user;
    d.choice = j->choice;
    if (ng > j->sent_tokens) {
        size_t nl;
        const ms_token_logprob *lp = ms_engine_seq_logprobs(j->seq, &nl);
        d.tokens = gen + j->sent_tokens;
        d.n_tokens = ng - j->sent_tokens;
        d.logprobs = lp ? lp + j->sent_tokens : NULL;
    }
    ms_gentext_news nw = {0};
    if (j->text) ms_gentext_take(j->text, done, drop_last, &nw);
    d.text = nw.text;
    d.text_len = nw.text_len;
    d.content = nw.content;
    d.content_len = nw.content_len;
    d.reasoning = nw.reasoning;
    d.reasoning_len = nw.reasoning_len;
    if (!d.n_tokens && !d.text_len) return;
    j->sent_tokens = ng;
    s->stream(s->ctx, &d);
}

/* The engine's generation parameters for job j: its sampling as the job line or request set it,
 * the scheduler's callbacks with j as their context. */
static void params_of(sjob *j, ms_gen_params *out)
{
    const ms_sched_job *q = &j->j;
    if (q->grammar_text && !j->grammar) {
        j->grammar = ms_grammar_parse(q->grammar_text, strlen(q->grammar_text));
        MS_ASSERT(j->grammar); /* the request parsers compiled it before */
    }
    j->n_end = 0;
    for (int i = 0; i < q->n_stop_ids && j->n_end < MS_SCHED_MAX_END; i++) j->end_ids[j->n_end++] = q->stop_ids[i];
    if (q->stop_at_eos && j->n_end < MS_SCHED_MAX_END) j->end_ids[j->n_end++] = ms_engine_info(j->s->e)->eos_id;
    *out = (ms_gen_params){.temperature = q->temperature, .top_p = q->top_p, .top_k = q->top_k, .min_p = q->min_p,
                           .seed = q->seed, .max_tokens = q->max_tokens, .stop_at_eos = q->stop_at_eos,
                           .all_logits = q->keep_logits, .presence_penalty = q->presence_penalty,
                           .frequency_penalty = q->frequency_penalty, .logit_bias = q->logit_bias,
                           .n_logit_bias = q->n_logit_bias, .logprobs = q->logprobs, .top_logprobs = q->top_logprobs,
                           .on_token = on_token, .on_logits = on_logits, .ctx = j, .grammar = j->grammar,
                           .end_ids = j->end_ids, .n_end_ids = j->n_end};
}

/* Start j's sequence; a prompt the engine refuses is reported as the job's error (each choice's). */
static int admit(ms_sched *s, sjob *j)
{
    ms_gen_params p;
    params_of(j, &p);
    ms_seq *st = NULL;
    j->skip = j->kept = 0;
    if (s->pc && !j->j.keep_logits) st = ms_pcache_take(s->pc, j->j.prompt, j->j.n_prompt, &j->skip);
    if (st) j->kept = j->skip;
    j->seq = st ? ms_engine_seq_continue(s->e, st, j->j.prompt + j->skip, j->j.n_prompt - j->skip, &p)
                : ms_engine_seq_new(s->e, j->j.prompt, j->j.n_prompt, &p);
    if (j->seq) {
        s->run[s->n_run++] = j;
        if (s->on_admit && !j->alone) s->on_admit(s->ctx, j->j.user);
        return 0;
    }
    int rc = 0;
    for (int c = 0; c < places(j) && rc == 0; c++) {
        ms_sched_result r = {0};
        r.user = j->j.user;
        r.choice = j->choice + c;
        r.prompt_tokens = j->j.n_prompt;
        r.error_code = ms_err_code();
        r.error = ms_err_msg();
        s->st.failed++;
        s->st.finished++;
        rc = s->done(s->ctx, &r);
    }
    job_free(j);
    return rc;
}

/* A job whose prompt has just run (its first token picked): its other choices start from a
 * clone of its state, each with its own seed, and join the batch (their places were kept). */
static int fork_choices(ms_sched *s, sjob *j)
{
    int n = j->j.n_choices;
    j->j.n_choices = 1; /* forked: a re-run of this choice alone is one choice */
    for (int c = 1; c < n; c++) {
        sjob *k = ms_calloc(1, sizeof *k);
        k->s = s;
        ms_sched_job_copy(&k->j, &j->j);
        k->j.seed = j->j.seed + (uint64_t)c;
        k->choice = c;
        /* The prompt's state went into the prefix cache through j (or was taken from it): the
         * choice's own state has moved past the prompt and must not be kept under it. */
        k->skip = j->skip;
        k->kept = j->j.n_prompt;
        ms_gen_params p;
        params_of(k, &p);
        s->run[s->n_run++] = k; /* before the fork: its first token is reported through k */
        if (!(k->seq = ms_engine_seq_fork(j->seq, &p))) return -1;
    }
    return 0;
}

/* Report a finished job and free it. */
static int report(ms_sched *s, sjob *j)
{
    ms_sched_result r = {0};
    size_t ng;
    const int32_t *gen = ms_engine_seq_tokens(j->seq, &ng);
    const char *fin = ms_engine_seq_finish_reason(j->seq);
    r.user = j->j.user;
    r.choice = j->choice;
    r.prompt_tokens = j->j.n_prompt;
    r.tokens = gen;
    r.n_tokens = ng;
    r.finish = j->stopped ? "stop" : fin;
    r.stop_index = j->text ? ms_gentext_stop_index(j->text) : -1;
    /* The text leaves out a final stop id (eos or one of stop_ids) and anything from a stop
     * string; a chat's answer is split by its format. */
    int drop_last = r.finish && !strcmp(r.finish, "stop") && ng > 0;
    ms_chat_answer a = {0};
    if (j->text) {
        r.text = ms_gentext_text(j->text, drop_last, &r.text_len);
        /* the answer's ids end before a final stop id (eos or a stop id: the turn's end, no part of it) */
        size_t na = ng;
        if (drop_last && ng > 0) {
            int stop_id = j->j.stop_at_eos && gen[ng - 1] == ms_engine_info(s->e)->eos_id;
            for (int i = 0; i < j->j.n_stop_ids && !stop_id; i++) stop_id = gen[ng - 1] == j->j.stop_ids[i];
            if (stop_id) na = ng - 1;
        }
        if (ms_gentext_answer(j->text, gen, na, r.text_len, &a) == 0) r.answer = &a;
    }
    r.logits = j->rows;
    r.n_rows = j->n_rows;
    size_t nl;
    r.logprobs = ms_engine_seq_logprobs(j->seq, &nl);
    if (j->j.stream && s->stream) send_delta(s, j, 1, drop_last);
    s->st.finished++;
    s->st.tokens += ng;
    int rc = s->done(s->ctx, &r);
    ms_chat_answer_clear(&a);
    job_free(j);
    return rc;
}

/* A failed step: discard its sequences (the engine's contract) and queue its jobs to run again,
 * each alone; a job that failed while alone is reported with the error. */
static int isolate(ms_sched *s)
{
    int code = ms_err_code();
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", ms_err_msg());
    int rc = 0;
    for (int i = 0; i < s->n_run; i++) {
        sjob *j = s->run[i];
        ms_engine_seq_free(j->seq);
        j->seq = NULL;
        if (j->alone) {
            ms_sched_result r = {0};
            r.user = j->j.user;
            r.choice = j->choice;
            r.prompt_tokens = j->j.n_prompt;
            r.error_code = code;
            r.error = msg;
            s->st.failed++;
            s->st.finished++;
            if (rc == 0) rc = s->done(s->ctx, &r);
            job_free(j);
            continue;
        }
        j->stopped = 0;
        if (j->text) ms_gentext_restart(j->text); /* the re-run decodes its own tokens again */
        j->n_rows = 0;
        j->alone = 1;
        s->st.retries++;
        fifo_push(&s->solo, j);
    }
    s->n_run = 0;
    return rc;
}

int ms_sched_step(ms_sched *s)
{
    /* Admit: a job to retry runs alone; otherwise fill the batch in queue order. */
    if (s->solo.n) {
        if (s->n_run == 0 && admit(s, fifo_pop(&s->solo)) != 0) return -1;
    } else {
        while (s->wait.n && running_places(s) + places(s->wait.v[s->wait.head]) <= s->max_batch)
            if (admit(s, fifo_pop(&s->wait)) != 0) return -1;
    }
    if (s->n_run == 0) return 0;
    ms_eseq *seqs[MS_MODEL_MAX_SEQS];
    for (int i = 0; i < s->n_run; i++) seqs[i] = s->run[i]->seq;
    s->st.steps++;
    s->st.last_batch = s->n_run;
    if (ms_engine_step(s->e, seqs, s->n_run) != 0) {
        if (ms_err_code() != MS_EXIT_WORKER) return -1;
        return isolate(s);
    }
    /* Prompts' states into the prefix cache, as they are prefilled: at every pc_every tokens and
     * at the prompt's end (the state then holds exactly the prompt: its first token is not fed). */
    for (int i = 0; s->pc && i < s->n_run; i++) {
        sjob *j = s->run[i];
        if (j->j.keep_logits) continue;
        ms_pcache_keep_prompt(s->pc, j->j.prompt, j->j.n_prompt, j->skip + ms_engine_seq_prefilled(j->seq), s->pc_every,
                              &j->kept, ms_engine_seq_state(j->seq));
    }
    /* Choices fork from a prompt that has just run; then report the finished jobs in batch
     * order; the rest keep their order. */
    for (int i = 0, n = s->n_run; i < n; i++) {
        size_t ng;
        ms_engine_seq_tokens(s->run[i]->seq, &ng);
        if (s->run[i]->j.n_choices > 1 && ng == 1 && fork_choices(s, s->run[i]) != 0) return -1;
    }
    int k = 0, rc = 0;
    for (int i = 0; i < s->n_run; i++) {
        sjob *j = s->run[i];
        if (j->stopped || ms_engine_seq_done(j->seq)) {
            if (rc == 0)
                rc = report(s, j);
            else
                job_free(j);
        } else {
            if (j->j.stream && s->stream && rc == 0) send_delta(s, j, 0, 0);
            s->run[k++] = j;
        }
    }
    s->n_run = k;
    return rc;
}

void ms_sched_get_stats(const ms_sched *s, ms_sched_stats *st)
{
    *st = s->st;
    st->waiting = (int)(s->wait.n + s->solo.n);
    st->running = s->n_run;
}
