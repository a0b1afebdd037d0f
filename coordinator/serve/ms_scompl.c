/* ms_scompl: serve's completion endpoints: a request body to a submitted job, then the answer
 * whole (watching the client) or streamed as SSE events. */
#include <jansson.h>
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>

#include "ms_clock.h"
#include "ms_err.h"
#include "ms_sconn.h"
#include "ms_shttp_int.h"
#include "ms_smsg.h"
#include "ms_sresp.h"
#include "ms_sreq.h"

/* One choice of a streamed answer: what it holds back. */
typedef struct {
    int first;                   /* no chunk sent yet (the chat delta then carries the role) */
    char *pend;                  /* text bytes held back (an unfinished UTF-8 character) */
    size_t pend_n;
    char *rpend;                 /* the same for reasoning text (a format with channels) */
    size_t rpend_n;
    size_t content_sent;         /* bytes the format routed to the content */
    size_t lp_offset;            /* a completion's logprobs: text_offset of the next token */
} stream_choice;

/* A streamed answer (owned by its MHD response; outlives the conn). */
typedef struct {
    ms_shttp *h;
    ms_sreqh **reqs;             /* [n_reqs] one a prompt (a completion may send several) */
    int n_reqs, reqs_done, next_req;
    uint8_t *req_done;           /* [n_reqs] its every choice ended */
    ms_sreq r;
    ms_sreq_ident id;
    int fd, finished, gone;
    int ep, code;                /* for /metrics: 200 finished, 504 deadline, 500 error, 499 client gone */
    double probed;               /* when a ping comment last went to a client that sent FIN */
    char *out;                   /* every SSE byte so far (MHD may ask for a position again) */
    size_t n;
    stream_choice *ch;           /* [n_choices] */
    int n_choices;
    int failed;                  /* a choice ended with an error (sent as an event) */
    size_t prompt_tokens, completion_tokens; /* completion: over every choice */
    double t0;
    char addr[80], path[128], end[40];
    int messages;                /* /v1/messages: Anthropic's events (one choice) */
    ms_smsg_stream ms;
    int responses;               /* /v1/responses: its events (one choice), the turn kept at the end */
    ms_sresp_req rq;
    ms_sresp_stream rs;
} stream;

/* ---- streamed answers ---- */

static void out_add(stream *st, char *bytes, size_t len)
{
    char *p = ms_realloc(st->out, st->n + len + 1);
    st->out = p;
    memcpy(st->out + st->n, bytes, len);
    st->n += len;
    free(bytes);
}

static void out_str(stream *st, const char *s) { out_add(st, ms_strdup(s), strlen(s)); }

/* Turn news into SSE events. */
static void pend_add(char **p, size_t *n, const char *bytes, size_t len)
{
    if (!len) return;
    *p = ms_realloc(*p, *n + len);
    memcpy(*p + *n, bytes, len);
    *n += len;
}

/* The same for /v1/messages: typed events, one block per kind of text, the end as its events. */
static void stream_news_messages(stream *st, ms_sreq_news *nw)
{
    stream_choice *c = &st->ch[0];
    size_t len = 0;
    pend_add(&c->pend, &c->pend_n, nw->content, nw->content_len);
    pend_add(&c->rpend, &c->rpend_n, nw->reasoning, nw->reasoning_len);
    size_t ready = nw->done ? c->pend_n : ms_sreq_utf8_ready(c->pend, c->pend_n);
    size_t rready = nw->done ? c->rpend_n : ms_sreq_utf8_ready(c->rpend, c->rpend_n);
    char *ev = ms_smsg_stream_text(&st->ms, c->rpend, rready, c->pend, ready, &len);
    if (ev) out_add(st, ev, len);
    if (ready) memmove(c->pend, c->pend + ready, c->pend_n - ready);
    c->pend_n -= ready;
    if (rready) memmove(c->rpend, c->rpend + rready, c->rpend_n - rready);
    c->rpend_n -= rready;
    st->completion_tokens += nw->n_tokens;
    if (!nw->done) return;
    if (nw->finish && !st->failed) {
        const char *seq = nw->stop_index >= 0 && nw->stop_index < st->r.spec.n_stop ? st->r.spec.stop[nw->stop_index] : NULL;
        ev = ms_smsg_stream_end(&st->ms, nw->has_answer ? &nw->answer : NULL, nw->finish, seq, nw->completion_tokens, &len);
        if (ev) out_add(st, ev, len);
        snprintf(st->end, sizeof st->end, "stream stop_reason=%s",
                 ms_smsg_stop_reason(nw->has_answer ? &nw->answer : NULL, nw->finish, seq));
        st->code = 200;
    } else if (!st->failed) {
        ev = ms_smsg_stream_error(nw->timed_out ? 504 : 500, nw->error, &len);
        out_add(st, ev, len);
        snprintf(st->end, sizeof st->end, "stream %s", nw->timed_out ? "deadline" : "error");
        st->code = nw->timed_out ? 504 : 500;
        st->failed = 1;
    }
    if (nw->all_done) st->finished = 1;
}

/* The same for /v1/responses. */
static void stream_news_responses(stream *st, ms_sreq_news *nw)
{
    stream_choice *c = &st->ch[0];
    size_t len = 0;
    pend_add(&c->pend, &c->pend_n, nw->content, nw->content_len);
    pend_add(&c->rpend, &c->rpend_n, nw->reasoning, nw->reasoning_len);
    size_t ready = nw->done ? c->pend_n : ms_sreq_utf8_ready(c->pend, c->pend_n);
    size_t rready = nw->done ? c->rpend_n : ms_sreq_utf8_ready(c->rpend, c->rpend_n);
    char *ev = ms_sresp_stream_text(&st->rs, &st->rq, c->rpend, rready, c->pend, ready, &len);
    if (ev) out_add(st, ev, len);
    if (ready) memmove(c->pend, c->pend + ready, c->pend_n - ready);
    c->pend_n -= ready;
    if (rready) memmove(c->rpend, c->rpend + rready, c->rpend_n - rready);
    c->rpend_n -= rready;
    st->completion_tokens += nw->n_tokens;
    if (!nw->done) return;
    if (nw->finish && !st->failed) {
        const ms_chat_answer *a = nw->has_answer ? &nw->answer : NULL;
        ev = ms_sresp_stream_end(&st->rs, &st->rq, a, nw->finish, st->prompt_tokens, nw->completion_tokens, &len);
        if (ev) out_add(st, ev, len);
        ms_sresp_store_put(st->h->responses, &st->rq, a);
        snprintf(st->end, sizeof st->end, "stream finish=%s", nw->finish);
        st->code = 200;
    } else if (!st->failed) {
        ev = ms_sresp_stream_error(&st->rs, &st->rq, nw->error, &len);
        if (ev) out_add(st, ev, len);
        snprintf(st->end, sizeof st->end, "stream %s", nw->timed_out ? "deadline" : "error");
        st->code = nw->timed_out ? 504 : 500;
        st->failed = 1;
    }
    if (nw->all_done) st->finished = 1;
}

static void stream_news(stream *st, ms_sreq_news *nw)
{
    if (st->responses) {
        stream_news_responses(st, nw);
        return;
    }
    if (st->messages) {
        stream_news_messages(st, nw);
        return;
    }
    size_t len;
    const ms_jobfile_limits *lim = &st->h->o.lim;
    stream_choice *c = &st->ch[nw->choice];
    int k = nw->choice;
    /* a chat's text as the scheduler split it by its format (content, reasoning, nowhere); a
     * completion's as it is */
    if (st->r.chat) {
        pend_add(&c->pend, &c->pend_n, nw->content, nw->content_len);
        pend_add(&c->rpend, &c->rpend_n, nw->reasoning, nw->reasoning_len);
        c->content_sent += nw->content_len;
    } else {
        pend_add(&c->pend, &c->pend_n, nw->text, nw->text_len);
    }
    size_t ready = nw->done ? c->pend_n : ms_sreq_utf8_ready(c->pend, c->pend_n);
    size_t rready = nw->done ? c->rpend_n : ms_sreq_utf8_ready(c->rpend, c->rpend_n);
    int has_text = lim->tok != NULL;
    if (nw->n_tokens || ready || rready) {
        json_t *lp = nw->logprobs ? ms_jobfile_logprobs_json(st->r.chat, lim->tok, nw->tokens, nw->logprobs, nw->n_tokens,
                                                             st->r.spec.top_logprobs, &c->lp_offset)
                                  : NULL;
        char *ev = ms_sreq_chat_chunk(&st->r, &st->id, k, nw->tokens, nw->n_tokens, has_text ? c->pend : NULL, ready,
                                      c->rpend, rready, NULL, c->first, lp, &len);
        out_add(st, ev, len);
        c->first = 0;
        if (ready) memmove(c->pend, c->pend + ready, c->pend_n - ready);
        c->pend_n -= ready;
        if (rready) memmove(c->rpend, c->rpend + rready, c->rpend_n - rready);
        c->rpend_n -= rready;
    }
    st->completion_tokens += nw->n_tokens; /* what it used, also when it ends early (log, usage) */
    if (!nw->done) return;
    if (nw->finish && !st->failed) {
        /* what the answer holds that routing could not send: a tool call it ends with (its
         * arguments were routed nowhere), or content from output with no message at all */
        const ms_chat_answer *a = st->r.chat && nw->has_answer ? &nw->answer : NULL;
        int call = a && a->call_name && !strcmp(nw->finish, "stop");
        int late = a && !c->content_sent && a->content_len;
        char *ev = call   ? ms_sreq_tool_chunk(&st->r, &st->id, k, a, c->first, &len)
                   : late ? ms_sreq_chat_chunk(&st->r, &st->id, k, NULL, 0, a->content, a->content_len, NULL, 0, nw->finish,
                                               c->first, NULL, &len)
                          : ms_sreq_chunk(&st->r, &st->id, k, NULL, 0, has_text ? "" : NULL, 0, nw->finish, c->first,
                                          NULL, &len);
        out_add(st, ev, len);
        snprintf(st->end, sizeof st->end, "stream finish=%s", call ? "tool_calls" : nw->finish);
        st->code = 200;
    } else if (!st->failed) {
        /* the status line went out already: the error is an event of its own (once) */
        char *e = ms_sreq_error_json(nw->timed_out ? 504 : 500, nw->timed_out ? "deadline_exceeded" : "engine_error", nw->error, NULL, &len);
        out_str(st, "data: ");
        e[len - 1] = 0; /* its newline */
        out_add(st, e, len - 1);
        out_str(st, "\n\n");
        snprintf(st->end, sizeof st->end, "stream %s", nw->timed_out ? "deadline" : "error");
        st->code = nw->timed_out ? 504 : 500;
        st->failed = 1;
    }
    if (!nw->all_done) return;
    st->req_done[nw->choice / (st->n_choices / st->n_reqs)] = 1;
    if (++st->reqs_done < st->n_reqs) return; /* every prompt's every choice */
    if (!st->failed && st->r.include_usage) {
        char *ev = ms_sreq_usage_chunk(&st->r, &st->id, st->prompt_tokens, st->completion_tokens, &len);
        out_add(st, ev, len);
    }
    out_str(st, "data: [DONE]\n\n");
    st->finished = 1;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    stream *st = cls;
    while (pos >= st->n) {
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        ms_sreq_news nw = {0};
        if (ms_sconn_peer_reset(st->fd)) {
            st->gone = 1;
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (ms_sconn_peer_eof(st->fd) && ms_now() - st->probed >= PROBE_S) {
            /* a FIN: half-closed, or gone. An SSE comment (ignored by clients) is written: once
             * the client has gone, the write after it fails and the stream ends. */
            st->probed = ms_now();
            out_str(st, ": ping\n\n");
            break;
        }
        /* the prompts' handles in turn (one a request but for a batch of prompts) */
        int k = st->next_req, per = st->n_choices / st->n_reqs;
        while (st->req_done[k]) k = (k + 1) % st->n_reqs; /* one is not done: the stream has not finished */
        st->next_req = (k + 1) % st->n_reqs;
        if (ms_sreqh_wait(st->reqs[k], st->n_reqs > 1 ? POLL_S / st->n_reqs : POLL_S, &nw)) {
            nw.choice += k * per;
            stream_news(st, &nw);
        }
        ms_sreq_news_clear(&nw);
    }
    size_t k = st->n - pos < max ? st->n - (size_t)pos : max;
    memcpy(buf, st->out + pos, k);
    return (ssize_t)k;
}

static void stream_free(void *cls)
{
    stream *st = cls;
    if (!st->finished) {
        st->gone = 1;
        snprintf(st->end, sizeof st->end, "stream client_gone (cancelled)");
        st->code = 499;
    }
    /* counted at its end, by how it ended (the status line said 200 long before) */
    ms_smetrics_request(st->h->m, ms_shttp_ep_names[st->ep], st->code ? st->code : 499, ms_now() - st->t0);
    for (int k = 0; k < st->n_reqs; k++) ms_sreqh_release(st->reqs[k]); /* cancels a generation still running */
    free(st->reqs);
    free(st->req_done);
    ms_shttp_access_log(st->addr, "POST", st->path, 200, st->prompt_tokens, st->completion_tokens, st->t0, st->end);
    ms_sreq_clear(&st->r);
    ms_sresp_req_clear(&st->rq);
    ms_sresp_stream_clear(&st->rs);
    free(st->out);
    for (int i = 0; i < st->n_choices; i++) {
        free(st->ch[i].pend);
        free(st->ch[i].rpend);
    }
    free(st->ch);
    ms_shttp_active_add(st->h, -1);
    free(st);
}

/* ---- completions ---- */

enum MHD_Result ms_scompl_answer(struct MHD_Connection *mc, conn *c)
{
    ms_shttp *h = c->h;
    ms_sreq r;
    int messages = c->ep == EP_MESSAGES || c->ep == EP_COUNT_TOKENS, responses = c->ep == EP_RESPONSES;
    char *chat_body = NULL; /* /v1/messages, /v1/responses: the request as the chat request it is */
    size_t chat_len = 0;
    ms_sresp_req rq = {0};
    if (responses) {
        char why[600];
        const char *param = NULL;
        int status = 400;
        json_t *cb = ms_sresp_to_chat(c->body ? c->body : "", c->n, h->responses, h->o.model_name, &rq, &status, why,
                                      sizeof why, &param);
        if (!cb) {
            size_t el;
            char *eb = ms_sreq_error_json(status, status == 404 ? "previous_response_not_found" : "invalid_request", why,
                                          param, &el);
            return ms_shttp_reply(mc, c, status, "application/json", eb, el, NULL, NULL);
        }
        chat_body = json_dumps(cb, JSON_COMPACT);
        chat_len = strlen(chat_body);
        json_decref(cb);
    }
    if (messages) {
        char why[600];
        const char *param = NULL;
        json_t *cb = ms_smsg_to_chat(c->body ? c->body : "", c->n, c->ep == EP_COUNT_TOKENS, why, sizeof why, &param);
        if (!cb) {
            char msg[700];
            snprintf(msg, sizeof msg, "%s%s%s", param ? param : "", param ? ": " : "", why);
            return ms_shttp_reply_error(mc, c, 400, "invalid_request", msg, NULL, NULL);
        }
        chat_body = json_dumps(cb, JSON_COMPACT);
        chat_len = strlen(chat_body);
        json_decref(cb);
    }
    int prc = ms_sreq_parse(chat_body ? chat_body : c->body ? c->body : "", chat_body ? chat_len : c->n,
                            c->ep == EP_CHAT || messages || responses, &h->o.lim, &r);
    free(chat_body);
    if (prc != 0) {
        size_t el;
        char *eb;
        if (messages) {
            char msg[700];
            snprintf(msg, sizeof msg, "%s%s%s", r.param ? r.param : "", r.param ? ": " : "", r.message);
            eb = ms_smsg_error_json(r.status, msg, &el);
        } else {
            eb = ms_sreq_error_json(r.status, r.code, r.message, r.param, &el);
        }
        enum MHD_Result res = ms_shttp_reply(mc, c, r.status, "application/json", eb, el, NULL, NULL);
        ms_sreq_clear(&r);
        ms_sresp_req_clear(&rq);
        return res;
    }
    if (c->ep == EP_COUNT_TOKENS) { /* the prompt the request renders to, counted */
        json_t *o = json_pack("{s:I}", "input_tokens", (json_int_t)r.spec.n_prompt);
        char *b = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        ms_sreq_clear(&r);
        return ms_shttp_reply(mc, c, 200, "application/json", b, strlen(b), NULL, NULL);
    }
    /* a job a prompt (a completion may send several: prompt k's choices follow k's before it) */
    int n_reqs = 1 + r.n_more, per = r.spec.n > 1 ? r.spec.n : 1, n_choices = n_reqs * per, status = 0;
    ms_sreqh **reqs = ms_calloc((size_t)n_reqs, sizeof *reqs);
    size_t prompt_tokens = 0;
    for (int k = 0; k < n_reqs; k++) {
        const ms_jobspec *sp = k ? &r.more[k - 1] : &r.spec;
        ms_sched_job j;
        ms_jobspec_sched_job(sp, h->o.lim.chat, h->o.chat_stop, h->o.n_chat_stop, &j);
        j.n_choices = per;
        prompt_tokens += sp->n_prompt;
        if (!(reqs[k] = ms_sengine_submit(h->s, &j, h->o.request_timeout, &status))) {
            while (k-- > 0) ms_sreqh_release(reqs[k]);
            free(reqs);
            reqs = NULL;
            break;
        }
    }
    if (!reqs) {
        ms_sreq_clear(&r);
        ms_sresp_req_clear(&rq);
        if (status == 429)
            return ms_shttp_reply_error(mc, c, 429, "queue_full", "the queue is full: retry later", MHD_HTTP_HEADER_RETRY_AFTER, "1");
        return ms_shttp_reply_error(mc, c, 503, "unavailable", "the server is shutting down or its engine failed", NULL, NULL);
    }
    ms_sreq_ident id;
    ms_sreq_ident_new(&r, h->o.model_name, &id);
    if (r.stream) {
        stream *st = ms_calloc(1, sizeof *st);
        st->h = h;
        st->reqs = reqs;
        st->n_reqs = n_reqs;
        st->req_done = ms_calloc((size_t)n_reqs, 1);
        st->r = r;
        st->id = id;
        st->id.model = st->r.spec.model ? st->r.spec.model : h->o.model_name;
        st->fd = c->fd;
        st->ch = ms_calloc((size_t)n_choices, sizeof *st->ch);
        st->n_choices = n_choices;
        st->prompt_tokens = prompt_tokens;
        for (int i = 0; i < n_choices; i++) st->ch[i].first = 1;
        st->t0 = c->t0;
        snprintf(st->addr, sizeof st->addr, "%s", c->addr);
        snprintf(st->path, sizeof st->path, "%s", c->path);
        st->ep = c->ep;
        if (messages) {
            char mid[64];
            size_t sl;
            ms_smsg_id_new(mid);
            st->messages = 1;
            char *ev = ms_smsg_stream_start(&st->ms, mid, st->id.model, prompt_tokens, &sl);
            out_add(st, ev, sl);
        }
        if (responses) {
            size_t sl;
            st->responses = 1;
            st->rq = rq; /* taken over */
            memset(&rq, 0, sizeof rq);
            char *ev = ms_sresp_stream_start(&st->rs, &st->rq, &sl);
            out_add(st, ev, sl);
        }
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free);
        if (!resp) {
            ms_shttp_active_add(h, 1);
            stream_free(st);
            return MHD_NO;
        }
        ms_shttp_active_add(h, 1); /* until stream_free */
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        ms_shttp_cors(h, mc, resp);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        c->streamed = 1;
        c->status = 200;
        enum MHD_Result res = MHD_queue_response(mc, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        return res;
    }
    /* whole answer: gather each choice's news until the end, watching the client */
    typedef struct {
        int32_t *tok;
        ms_token_logprob *lps; /* [n_tok] when asked for */
        char *text;
        size_t n_tok, n_text;
        const char *finish;
        int stop_index;         /* the stop string it ended at, or -1 */
        int has_answer;         /* a chat's answer, as the scheduler split it (owned) */
        ms_chat_answer answer;
    } whole;
    whole *w = ms_calloc((size_t)n_choices, sizeof *w);
    ms_sreq_news nw = {0};
    enum MHD_Result res = MHD_NO;
    double probed = 0;
    const char *failed = NULL; /* a choice that ended without finishing: its news */
    int timed_out = 0;
    char error[512] = "";
    size_t completion_tokens = 0;
    int reqs_done = 0, next = 0;
    uint8_t *rdone = ms_calloc((size_t)n_reqs, 1);
    c->prompt_tokens = prompt_tokens;
    c->completion_tokens = 0;
    for (;;) {
        if (ms_shttp_client_gone(c, &probed)) { /* looked at every round: news may come at every step */
            c->status = 499; /* nginx's "client closed request", for the log only */
            goto out;
        }
        int kr = next; /* the prompts' handles in turn, those not done */
        while (rdone[kr]) kr = (kr + 1) % n_reqs;
        next = (kr + 1) % n_reqs;
        if (ms_sreqh_wait(reqs[kr], n_reqs > 1 ? POLL_S / n_reqs : POLL_S, &nw)) {
            whole *x = &w[kr * per + nw.choice];
            x->tok = ms_realloc(x->tok, sizeof *x->tok * (x->n_tok + nw.n_tokens + 1));
            if (nw.n_tokens) memcpy(x->tok + x->n_tok, nw.tokens, sizeof *x->tok * nw.n_tokens);
            if (nw.logprobs) {
                x->lps = ms_realloc(x->lps, sizeof *x->lps * (x->n_tok + nw.n_tokens));
                memcpy(x->lps + x->n_tok, nw.logprobs, sizeof *x->lps * nw.n_tokens);
            }
            x->n_tok += nw.n_tokens;
            c->completion_tokens += nw.n_tokens; /* what it used, also when it ends early (log) */
            x->text = ms_realloc(x->text, x->n_text + nw.text_len + 1);
            if (nw.text_len) memcpy(x->text + x->n_text, nw.text, nw.text_len);
            x->n_text += nw.text_len;
            if (nw.done) {
                x->finish = nw.finish;
                x->stop_index = nw.stop_index;
                x->has_answer = nw.has_answer;
                x->answer = nw.answer; /* taken over */
                memset(&nw.answer, 0, sizeof nw.answer);
                completion_tokens += nw.completion_tokens;
                if (!nw.finish && !failed) {
                    failed = "failed";
                    timed_out = nw.timed_out;
                    snprintf(error, sizeof error, "%s", nw.error);
                }
            }
            if (nw.all_done) rdone[kr] = 1;
            if (nw.all_done && ++reqs_done == n_reqs) break;
        }
    }
    if (!failed && responses) { /* one choice, as a response; its turn kept */
        whole *x = &w[0];
        ms_chat_answer plain = {h->o.lim.tok ? x->text : NULL, x->n_text, NULL, 0, NULL, NULL, 0};
        const ms_chat_answer *a = x->has_answer ? &x->answer : &plain;
        size_t len;
        char *b = ms_sresp_response(&rq, a, x->finish, prompt_tokens, completion_tokens, &len);
        ms_sresp_store_put(h->responses, &rq, a);
        res = ms_shttp_reply(mc, c, 200, "application/json", b, len, NULL, NULL);
    } else if (!failed && messages) { /* one choice, as a message */
        whole *x = &w[0];
        ms_chat_answer plain = {h->o.lim.tok ? x->text : NULL, x->n_text, NULL, 0, NULL, NULL, 0};
        const char *seq = x->stop_index >= 0 && x->stop_index < r.spec.n_stop ? r.spec.stop[x->stop_index] : NULL;
        char mid[64];
        size_t len;
        ms_smsg_id_new(mid);
        char *b = ms_smsg_message(mid, id.model, x->has_answer ? &x->answer : &plain, x->finish, seq, prompt_tokens,
                                  completion_tokens, &len);
        res = ms_shttp_reply(mc, c, 200, "application/json", b, len, NULL, NULL);
    } else if (!failed) {
        json_t *choices = json_array();
        for (int k = 0; k < n_choices; k++) {
            whole *x = &w[k];
            ms_chat_answer plain = {h->o.lim.tok ? x->text : NULL, x->n_text, NULL, 0, NULL, NULL, 0};
            size_t off = 0;
            json_t *lp = x->lps ? ms_jobfile_logprobs_json(r.chat, h->o.lim.tok, x->tok, x->lps, x->n_tok,
                                                           r.spec.top_logprobs, &off)
                                : NULL;
            /* a chat's answer as the scheduler split it by the format (harmony: channels, tool
             * calls; a stop string cut); else the text */
            const ms_chat_answer *a = r.chat && x->has_answer ? &x->answer : &plain;
            json_array_append_new(choices, ms_sreq_choice(&r, k, x->tok, x->n_tok, a, x->finish, lp));
        }
        size_t len;
        char *b = ms_sreq_completion_choices(&r, &id, choices, prompt_tokens, completion_tokens, &len);
        res = ms_shttp_reply(mc, c, 200, "application/json", b, len, NULL, NULL);
    } else if (timed_out) {
        res = ms_shttp_reply_error(mc, c, 504, "deadline_exceeded", error, NULL, NULL);
    } else {
        res = ms_shttp_reply_error(mc, c, 500, "engine_error", error, NULL, NULL);
    }
out:
    for (int k = 0; k < n_reqs; k++) ms_sreqh_release(reqs[k]); /* cancels them when the client left */
    free(reqs);
    free(rdone);
    ms_sreq_news_clear(&nw);
    for (int k = 0; k < n_choices; k++) {
        free(w[k].tok);
        free(w[k].lps);
        free(w[k].text);
        ms_chat_answer_clear(&w[k].answer);
    }
    free(w);
    ms_sreq_clear(&r);
    ms_sresp_req_clear(&rq);
    return res;
}
