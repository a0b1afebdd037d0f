/* ms_engine: opens a model with its experts' workers and steps sets of sequences through
 * batched forward passes, sampling each with its own RNG. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ms_clock.h"
#include "ms_dcost.h"
#include "ms_dpolicy.h"
#include "ms_draft.h"
#include "ms_engine.h"
#include "ms_err.h"
#include "ms_scratch.h"
#include "ms_families.h"
#include "ms_grammar.h"
#include "ms_ident.h"
#include "ms_local.h"
#include "ms_proc.h"
#include "ms_remote.h"
#include "ms_sample.h"
#include "ms_wire.h"
#include "ms_xfams.h"

struct ms_engine {
    ms_engine_opts o;
    const ms_family *fam;
    ms_model *m;
    ms_tok *tok;
    int64_t V;
    /* workers of the routed experts (none: in this process) */
    ms_remote_worker *wlist;  /* owned when listed, else the ms_local's */
    int n_workers, listed;
    ms_local *local;
    ms_remote *remote;
    uint64_t passes, pass_rows;
    int spec_window, spec_auto;  /* drafts per pass planned; adaptive (MS_SPEC_AUTO) */
    int32_t *draft_ids;          /* [n_draft_ids] --draft-file, or NULL (n-gram lookup) */
    int draft_head;              /* 1: drafts come from the model's draft head (ms_seq_draft) */
    size_t n_draft_ids;
    uint64_t drafted, accepted, decode_passes, decode_tokens;
    double draft_seconds;        /* proposing drafts, in all */
    double pass_draft_seconds;   /* proposing the next pass's drafts (auto's cost counts them) */
    ms_dcost cost;               /* auto: decoding-pass time against rows */
    ms_sample_ws sample_ws;      /* the picks' work memory, kept between tokens */
    ms_gvocab *gvocab;           /* the tokenizer's tokens as bytes, made for the first grammar */
};

struct ms_eseq {
    ms_engine *e;
    ms_seq *seq;
    ms_gen_params p;
    ms_sampler sp;
    int32_t *toks;            /* [n_prompt + max_tokens + 1] the prompt, then the generated tokens */
    int32_t *prompt;          /* = toks */
    size_t n_prompt, fed;     /* prompt tokens, and how many went through the model */
    int32_t *gen;             /* = toks + n_prompt: generated tokens */
    size_t n_gen;
    ms_token_logprob *lp;     /* [max_tokens + 1] with p.logprobs: each generated token's, or NULL */
    float *last;              /* [V] logits of the last computed row */
    int has_last;
    const char *finish;       /* NULL while running */
    /* this step's pass */
    int64_t take;             /* rows fed in the current pass */
    float *rows;              /* [cap_rows][V] logits out of the pass (all_logits, drafts) */
    int64_t cap_rows;
    /* speculative decoding */
    ms_drafter *dr;           /* NULL: this sequence never drafts */
    int32_t *vids;            /* [1 + window] the pass's ids: last generated token, then drafts */
    int n_draft;              /* drafts in the current pass */
    ms_dpolicy pol;           /* how many drafts it asks for (ms_dpolicy) */
    int stopped;              /* ms_engine_seq_stop was called */
    /* constrained decoding (p.grammar) */
    ms_gstate *gs;            /* where the text is in the grammar, or NULL */
    uint8_t *allowed;         /* [V] this pick's allowed tokens */
    float *masked;            /* [V] the row with the others at -infinity */
};

static void stop_workers(ms_engine *e)
{
    ms_remote_free(e->remote);
    e->remote = NULL;
    ms_local_stop(e->local); /* SIGTERM, wait, remove the socket directory */
    e->local = NULL;
    if (e->listed) ms_wlist_free(e->wlist, e->n_workers);
    e->wlist = NULL;
    e->n_workers = 0;
}

/* --workers / --cluster: read and check the list (endpoint shapes, keys, plain tcp) before
 * anything loads, so a bad one is a usage error at once. */
static int list_workers(ms_engine *e)
{
    const ms_engine_opts *o = &e->o;
    int rc = o->cluster ? ms_wlist_load_cluster(o->cluster, &e->wlist, &e->n_workers)
                        : ms_wlist_parse(o->workers, &e->wlist, &e->n_workers);
    if (rc != 0) return -1;
    e->listed = 1;
    for (int i = 0; i < e->n_workers; i++)
        if (!strncmp(e->wlist[i].endpoint, "tcp://", 6) && !e->wlist[i].public_key && !o->insecure) {
            ms_err_set("worker %s is reached over plain tcp: give its public key in a --cluster file "
                       "(with --curve-secret), or pass --insecure",
                       e->wlist[i].endpoint);
            return ms_err_set_code(MS_EXIT_USAGE);
        }
    return 0;
}

/* ms_remote_opts.revive over the workers this engine started. */
static int local_revive(void *ctx, int worker, char *why, size_t n) { return ms_local_revive(ctx, worker, why, n); }

static int start_workers(ms_engine *e)
{
    const ms_engine_opts *o = &e->o;
    const ms_model_info *c = ms_model_get_info(e->m);
    char secret[41] = "";
    if (o->curve_secret) { /* the reader the workers use too: same rules, same warnings */
        char(*keys)[41] = NULL;
        if (ms_wire_read_keys(o->curve_secret, "--curve-secret", 1, &keys) < 0) return -1;
        memcpy(secret, keys[0], sizeof secret);
        ms_wire_keys_free(keys, 1);
    }
    /* Before local workers start: the first fingerprint of a checkpoint hashes all of it and
     * keeps the hashes in its sidecar, which the workers then read instead of hashing again. */
    char fp[17];
    if (ms_ident_model(o->model_dir, fp) != 0) return -1;
    if (!e->listed) {
        int n = o->local_workers;
        const ms_plan *p = ms_model_plan(e->m);
        e->local = ms_local_start(o->model_dir, n, c->n_experts, p ? ms_plan_local_budget(p, n) : 0,
                                  o->run.n_threads,
                                  (o->run.buffered ? MS_LOCAL_BUFFERED : 0) | (o->run.no_mmap ? MS_LOCAL_NO_MMAP : 0), 1,
                                  &e->wlist, &e->n_workers);
        if (!e->local) return -1;
    }
    if (!c->have_xfmt) { /* the routed experts' format the workers must serve */
        ms_err_set("%s/config.json: %s", o->model_dir, c->why_no_xfmt);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    /* workers serve a draft head's layer (DeepSeek-V3's MTP) where the checkpoint has one */
    char cfg[4200];
    ms_xmodel xm;
    snprintf(cfg, sizeof cfg, "%s/config.json", o->model_dir);
    if (ms_xfam_load(cfg, 0, &xm) != 0) return -1;
    ms_remote_opts ro = {.n_workers = e->n_workers,
                         .workers = e->wlist,
                         .secret_key = secret[0] ? secret : NULL,
                         .fingerprint = fp,
                         .n_layers = c->n_layers,
                         .n_experts = c->n_experts,
                         .draft_layers = xm.draft_layers,
                         .fmt = &c->xfmt,
                         .timeout_s = o->worker_timeout};
    ro.local = !e->listed;
    if (ro.local) { /* a local worker that dies is restarted and the pass goes on */
        ro.revive = local_revive;
        ro.revive_ctx = e->local;
    }
    e->remote = ms_remote_new(&ro, c->first_moe);
    if (!e->remote) return -1;
    ms_model_set_experts(e->m, ms_remote_iface(e->remote));
    /* The draft head's routed experts are the workers' too: without an owner for each (packs
     * written before the packs held them, --experts specs that leave them out), --draft mtp
     * fails and auto drafts n-grams. */
    if (e->draft_head && !ms_remote_owns_layer(e->remote, c->n_layers)) {
        if (o->draft_source == MS_DRAFT_HEAD) {
            ms_err_set("--draft mtp: no worker owns every expert of the MTP layer (layer %d): write the packs again "
                       "with this build's moestream shard (they then hold it), give a worker those experts "
                       "(--experts '%d:*'), or use --draft ngram",
                       c->n_layers, c->n_layers);
            return ms_err_set_code(MS_EXIT_WORKER);
        }
        ms_log(1, "speculation: the workers do not serve the MTP layer's experts (layer %d): n-gram drafts instead",
               c->n_layers);
        e->draft_head = 0;
    }
    return 0;
}

ms_engine *ms_engine_open(const ms_engine_opts *o)
{
    int remote = o->workers || o->cluster || o->local_workers > 0;
    if (!!o->workers + !!o->cluster + (o->local_workers > 0) > 1) {
        ms_err_set("give at most one of --workers, --cluster and --local-workers");
        ms_err_set_code(MS_EXIT_USAGE);
        return NULL;
    }
    ms_engine *e = ms_calloc(1, sizeof *e);
    e->o = *o;
    if (e->o.max_seqs < 1) e->o.max_seqs = 1;
    MS_ASSERT(e->o.max_seqs <= MS_MODEL_MAX_SEQS && e->o.fit_seqs <= MS_MODEL_MAX_SEQS);
    if ((o->workers || o->cluster) && list_workers(e) != 0) goto fail;
    ms_run_opts ro = o->run;
    ro.max_seqs = e->o.max_seqs;
    ro.fit_seqs = e->o.fit_seqs;
    ro.remote_experts = remote;
    ro.local_workers = o->local_workers > 0 ? o->local_workers : 0;
    MS_ASSERT(o->speculate == MS_SPEC_AUTO || (o->speculate >= 0 && o->speculate <= MS_SPEC_MAX));
    ro.spec_window = o->speculate == MS_SPEC_AUTO ? MS_SPEC_AUTO_MAX : o->speculate;
    ro.spec_fit = o->speculate == MS_SPEC_AUTO;
    /* the checkpoint's draft head (its routed experts here, or the workers') */
    ro.draft_head = o->speculate != 0 && !o->draft_file && o->draft_source != MS_DRAFT_NGRAM;
    e->spec_auto = o->speculate == MS_SPEC_AUTO;
    if (o->draft_file && ms_draft_read_file(o->draft_file, &e->draft_ids, &e->n_draft_ids) != 0) goto fail;
    if (ms_tok_present(o->model_dir) && !(e->tok = ms_tok_load(o->model_dir))) goto fail;
    if (!(e->fam = ms_families_detect(o->model_dir)) || !(e->m = e->fam->open(o->model_dir, &ro))) goto fail;
    e->V = ms_model_get_info(e->m)->vocab;
    e->spec_window = ms_model_spec_window(e->m);
    e->draft_head = ms_model_get_info(e->m)->draft_layers > 0;
    if (o->draft_source == MS_DRAFT_HEAD && !e->draft_head) {
        ms_err_set("--draft mtp: %s has no draft head (a DeepSeek-V3 checkpoint with num_nextn_predict_layers = 1 "
                   "and its MTP layer's tensors)",
                   o->model_dir);
        ms_err_set_code(MS_EXIT_USAGE);
        goto fail;
    }
    for (size_t i = 0; i < e->n_draft_ids; i++)
        if (e->draft_ids[i] >= e->V) {
            ms_err_set("draft file %s: token id %d (item %zu) is outside the model's vocabulary (%lld ids)",
                       o->draft_file, e->draft_ids[i], i + 1, (long long)e->V);
            ms_err_set_code(MS_EXIT_INPUT);
            goto fail;
        }
    if (remote && start_workers(e) != 0) goto fail;
    return e;
fail:
    ms_engine_free(e);
    return NULL;
}

void ms_engine_free(ms_engine *e)
{
    if (!e) return;
    stop_workers(e);
    ms_model_free(e->m);
    ms_tok_free(e->tok);
    free(e->draft_ids);
    ms_sample_ws_free(&e->sample_ws);
    ms_gvocab_free(e->gvocab);
    free(e);
}

ms_model *ms_engine_model(ms_engine *e) { return e->m; }
const ms_model_info *ms_engine_info(const ms_engine *e) { return ms_model_get_info(e->m); }
const ms_family *ms_engine_family(const ms_engine *e) { return e->fam; }
ms_tok *ms_engine_tok(ms_engine *e) { return e->tok; }
int64_t ms_engine_pass_rows(const ms_engine *e) { return ms_model_chunk(e->m); }
int ms_engine_max_seqs(const ms_engine *e) { return ms_model_max_seqs(e->m); }

static ms_eseq *seq_alloc(ms_engine *e, const int32_t *prompt, size_t n, const ms_gen_params *p);

static int check_prompt(ms_engine *e, const int32_t *prompt, size_t n);

ms_eseq *ms_engine_seq_new(ms_engine *e, const int32_t *prompt, size_t n, const ms_gen_params *p)
{
    if (check_prompt(e, prompt, n) != 0) return NULL;
    ms_eseq *s = seq_alloc(e, prompt, n, p);
    s->seq = ms_seq_new(e->m);
    return s;
}

ms_eseq *ms_engine_seq_continue(ms_engine *e, ms_seq *state, const int32_t *prompt, size_t n, const ms_gen_params *p)
{
    if (check_prompt(e, prompt, n) != 0) {
        ms_seq_free(state);
        return NULL;
    }
    ms_eseq *s = seq_alloc(e, prompt, n, p);
    s->seq = state;
    return s;
}

ms_seq *ms_engine_seq_take_state(ms_eseq *s)
{
    ms_seq *st = s->seq;
    s->seq = NULL;
    s->finish = s->finish ? s->finish : "stop";
    return st;
}

const ms_seq *ms_engine_seq_state(const ms_eseq *s) { return s->seq; }

static int check_prompt(ms_engine *e, const int32_t *prompt, size_t n)
{
    if (n == 0) {
        ms_err_set("the prompt is empty (no tokens)");
        ms_err_set_code(MS_EXIT_INPUT);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (prompt[i] < 0 || prompt[i] >= e->V) {
            ms_err_set("prompt token id %d (position %zu) is outside the model's vocabulary (%lld ids)", prompt[i], i,
                       (long long)e->V);
            ms_err_set_code(MS_EXIT_INPUT);
            return -1;
        }
    return 0;
}

/* Everything of a new sequence but its model state. */
static ms_eseq *seq_alloc(ms_engine *e, const int32_t *prompt, size_t n, const ms_gen_params *p)
{
    MS_ASSERT(p->max_tokens >= 0);
    ms_eseq *s = ms_calloc(1, sizeof *s);
    s->e = e;
    s->p = *p;
    MS_ASSERT(p->top_logprobs >= 0 && p->top_logprobs <= MS_MAX_TOP_LOGPROBS);
    ms_sample_params sp = {p->temperature, p->top_p > 0 ? p->top_p : 1.0f, p->top_k, p->min_p, p->presence_penalty,
                           p->frequency_penalty, p->logit_bias, p->n_logit_bias};
    ms_sampler_setup(&s->sp, &sp, p->seed);
    s->p.logit_bias = NULL; /* the sampler holds its copy */
    s->p.n_logit_bias = 0;
    if (p->logprobs) s->lp = ms_calloc((size_t)p->max_tokens + 1, sizeof *s->lp);
    s->toks = ms_malloc(sizeof(int32_t) * (n + (size_t)p->max_tokens + 1));
    s->prompt = s->toks;
    memcpy(s->prompt, prompt, sizeof(int32_t) * n);
    s->n_prompt = n;
    s->gen = s->toks + n;
    if (e->spec_window > 0 && !p->no_speculate) {
        s->dr = e->draft_ids    ? ms_draft_list_new(e->draft_ids, e->n_draft_ids)
                : e->draft_head ? ms_draft_head_new(&s->seq, e->V)
                                : ms_draft_ngram_new(1, 8);
        s->vids = ms_malloc(sizeof(int32_t) * (size_t)(1 + e->spec_window));
        const ms_plan *plan = ms_model_plan(e->m);
        ms_dpolicy_init(&s->pol, e->spec_window, e->spec_auto, plan && plan->streaming);
    }
    s->last = ms_malloc(sizeof(float) * (size_t)e->V);
    if (p->grammar) {
        MS_ASSERT(e->tok); /* callers refuse a grammar without a tokenizer */
        if (!e->gvocab) e->gvocab = ms_gvocab_new(e->tok);
        s->gs = ms_gstate_new(p->grammar);
        s->allowed = ms_malloc((size_t)e->V);
        s->masked = ms_malloc(sizeof(float) * (size_t)e->V);
    }
    if (p->max_tokens == 0) s->finish = "length";
    return s;
}

static int32_t pick(ms_eseq *s, const float *row);
static void emit(ms_eseq *s, int32_t next);

ms_eseq *ms_engine_seq_fork(const ms_eseq *s, const ms_gen_params *p)
{
    MS_ASSERT(s->fed == s->n_prompt && s->n_gen == 1 && s->has_last && p->max_tokens == s->p.max_tokens);
    ms_engine *e = s->e;
    ms_eseq *c = seq_alloc(e, s->prompt, s->n_prompt, p);
    c->seq = ms_seq_clone(s->seq);
    c->fed = s->n_prompt;
    memcpy(c->last, s->last, sizeof(float) * (size_t)e->V);
    c->has_last = 1;
    if (c->p.on_logits && c->p.on_logits(c->p.ctx, c, c->last, 1) != 0) {
        ms_engine_seq_free(c);
        return NULL;
    }
    emit(c, pick(c, c->last));
    return c;
}

void ms_engine_seq_free(ms_eseq *s)
{
    if (!s) return;
    ms_seq_free(s->seq);
    ms_sampler_free(&s->sp);
    free(s->lp);
    free(s->toks);
    free(s->vids);
    ms_drafter_free(s->dr);
    free(s->last);
    free(s->rows);
    ms_gstate_free(s->gs);
    free(s->allowed);
    free(s->masked);
    free(s);
}

int ms_engine_seq_done(const ms_eseq *s) { return s->finish != NULL; }
void ms_engine_seq_stop(ms_eseq *s) { s->stopped = 1; }
const char *ms_engine_seq_finish_reason(const ms_eseq *s) { return s->finish; }
size_t ms_engine_seq_prefilled(const ms_eseq *s) { return s->fed; }
size_t ms_engine_seq_prompt_len(const ms_eseq *s) { return s->n_prompt; }
const float *ms_engine_seq_last_logits(const ms_eseq *s) { return s->has_last ? s->last : NULL; }

const int32_t *ms_engine_seq_tokens(const ms_eseq *s, size_t *n)
{
    *n = s->n_gen;
    return s->gen;
}

const ms_token_logprob *ms_engine_seq_logprobs(const ms_eseq *s, size_t *n)
{
    *n = s->lp ? s->n_gen : 0;
    return s->lp;
}

/* log_softmax of row at the token, and the k most probable ids (in double, then float). */
static void logprob_of(const float *row, int64_t V, int32_t tok, int k, ms_token_logprob *out)
{
    double mx = row[ms_argmax(row, V)], sum = 0.0;
    for (int64_t i = 0; i < V; i++) sum += exp((double)row[i] - mx);
    double lse = mx + log(sum);
    out->logprob = (float)((double)row[tok] - lse);
    out->n_top = 0;
    for (int64_t i = 0; i < V && k > 0; i++) { /* insertion into the sorted top k; ties keep the lower id first */
        int n = out->n_top;
        if (n == k && !(row[i] > row[out->top_id[n - 1]])) continue;
        int at = n < k ? n : k - 1;
        while (at > 0 && row[i] > row[out->top_id[at - 1]]) {
            if (at < k) out->top_id[at] = out->top_id[at - 1];
            at--;
        }
        out->top_id[at] = (int32_t)i;
        if (n < k) out->n_top++;
    }
    for (int i = 0; i < out->n_top; i++) out->top_logprob[i] = (float)((double)row[out->top_id[i]] - lse);
}

static int is_end(const ms_eseq *s, int32_t id)
{
    for (int i = 0; i < s->p.n_end_ids; i++)
        if (s->p.end_ids[i] == id) return 1;
    return 0;
}

/* The row with every token that would break the grammar at -infinity: what the text allows
 * next, and the end ids once it is a whole sentence. A text that nothing the vocabulary writes
 * can continue (a grammar needing a character no token holds) may only end. */
static const float *constrain(ms_eseq *s, const float *row)
{
    ms_engine *e = s->e;
    int64_t V = e->V, n = 0;
    memset(s->allowed, 0, (size_t)V);
    if (ms_gstate_open(s->gs)) n = ms_gstate_mask(s->gs, e->gvocab, s->allowed); /* the tokenizer's ids: <= V */
    int end = ms_gstate_complete(s->gs) || n == 0;
    for (int i = 0; end && i < s->p.n_end_ids; i++)
        if (s->p.end_ids[i] >= 0 && s->p.end_ids[i] < V) s->allowed[s->p.end_ids[i]] = 1, n++;
    if (n == 0) s->allowed[ms_argmax(row, V)] = 1; /* no way on and no end: the sequence stops after it (emit) */
    for (int64_t i = 0; i < V; i++) s->masked[i] = s->allowed[i] ? row[i] : -INFINITY;
    return s->masked;
}

/* The next token from a logits row: sampled (from the allowed ones under a grammar), and its
 * log-probabilities (under the model) kept when asked for. */
static int32_t pick(ms_eseq *s, const float *row)
{
    int32_t t = ms_sampler_pick_ws(&s->sp, s->gs ? constrain(s, row) : row, s->e->V, &s->e->sample_ws);
    if (s->lp) logprob_of(row, s->e->V, t, s->p.top_logprobs, &s->lp[s->n_gen]);
    return t;
}

/* One generated token: keep it, report it, and see whether the sequence ends with it. */
static void emit(ms_eseq *s, int32_t next)
{
    ms_sampler_accept(&s->sp, next);
    s->gen[s->n_gen++] = next;
    int closed = 0; /* the grammar's text ended with it */
    if (s->gs) {
        /* a token the grammar takes (text, or a special token it names: harmony's <|call|> may
         * be both its last symbol and an end id); else an end id, or the forced last */
        if (!ms_gstate_accept_id(s->gs, s->e->gvocab, next)) closed = 1;
        else closed = !ms_gstate_open(s->gs) && (s->p.n_end_ids == 0 || is_end(s, next));
    }
    if (s->p.on_token) s->p.on_token(s->p.ctx, s, next);
    if ((int64_t)s->n_gen >= s->p.max_tokens)
        s->finish = "length";
    else if (closed)
        s->finish = "stop";
    else if (s->p.stop_at_eos && next == ms_model_get_info(s->e->m)->eos_id)
        s->finish = "stop";
    else if (s->stopped)
        s->finish = "stop";
}

/* After a prefill pass: hand the rows to on_logits, keep the last, and sample when the prompt
 * is in. */
static int finish_prefill(ms_eseq *s, const float *rows, int64_t n_rows)
{
    int64_t V = s->e->V;
    if (s->p.on_logits && s->p.on_logits(s->p.ctx, s, rows, n_rows) != 0) return -1;
    memcpy(s->last, rows + (n_rows - 1) * V, sizeof(float) * (size_t)V);
    s->has_last = 1;
    if (s->fed < s->n_prompt) return 0; /* more prompt to run */
    emit(s, pick(s, s->last));
    return 0;
}

/* After a decoding pass over the last generated token and n_draft drafts (rows[1 + n_draft][V]):
 * row by row, exactly as one token per step would: hand the row to on_logits, sample the next
 * token with the sequence's RNG and report it; go on to the next row only while the sampled
 * token is the draft that row was computed for (and the sequence has not ended). The rows not
 * reached are undone in the sequence's state. */
static int finish_decode(ms_eseq *s, const float *rows)
{
    ms_engine *e = s->e;
    int64_t V = e->V;
    int k = s->n_draft, rc = 0;
    int64_t kept = 0;
    for (int i = 0; i <= k && !s->finish; i++) {
        const float *row = rows + (int64_t)i * V;
        kept = i + 1;
        if (s->p.on_logits && s->p.on_logits(s->p.ctx, s, row, 1) != 0) {
            rc = -1;
            break;
        }
        int32_t next = pick(s, row);
        emit(s, next);
        if (i < k && next != s->vids[1 + i]) break; /* the draft was wrong: next is the right token */
    }
    memcpy(s->last, rows + (kept - 1) * V, sizeof(float) * (size_t)V);
    s->has_last = 1;
    if (k > 0) {
        ms_seq_keep(s->seq, kept);
        free(s->rows); /* the pass's rows: the plan counts them for one pass, not kept per sequence */
        s->rows = NULL;
        s->cap_rows = 0;
    }
    e->decode_passes++;
    e->decode_tokens += (uint64_t)kept;
    e->drafted += (uint64_t)k;
    e->accepted += (uint64_t)(kept - 1);
    if (rc == 0) ms_dpolicy_verified(&s->pol, &e->cost, k, (int)(kept - 1));
    return rc;
}

/* Drafts for a decoding sequence's next pass, at most room - 1 of them (room: rows left in the
 * pass) and never more than the tokens it still generates need; n_base: the pass's rows before
 * drafts (for auto's cost). Sets n_draft and vids. */
static int propose(ms_eseq *s, int64_t room, int64_t n_base)
{
    s->n_draft = 0;
    if (!s->dr) return 0;
    if (ms_dpolicy_paused(&s->pol)) return 0;
    int64_t left = s->p.max_tokens - (int64_t)s->n_gen - 1; /* a pass yields at most drafts + 1 tokens */
    int64_t max = left < room - 1 ? left : room - 1;
    if (max <= 0) return 0;
    int64_t want = ms_dpolicy_want(&s->pol, &s->e->cost, max, n_base);
    if (want < max) max = want;
    if (max <= 0) return 0;
    s->vids[0] = s->gen[s->n_gen - 1];
    double t0 = ms_now();
    int got = ms_drafter_propose(s->dr, s->toks, s->n_prompt + s->n_gen, s->n_prompt, s->vids + 1, (int)max);
    double dt = ms_now() - t0;
    s->e->draft_seconds += dt;
    s->e->pass_draft_seconds += dt;
    if (got < 0) return -1;
    s->n_draft = got;
    MS_ASSERT(s->n_draft <= max);
    return s->n_draft;
}

/* Run one forward pass over items [0, n) whose take is set. */
static int run_pass(ms_engine *e, ms_eseq *const *set, int n)
{
    int64_t V = e->V;
    ms_batch_item *it = ms_scratch_push(sizeof *it * (size_t)n); /* [n] */
    int rc = -1;
    int64_t rows = 0;
    for (int i = 0; i < n; i++) {
        ms_eseq *s = set[i];
        int prefill = s->fed < s->n_prompt, spec = !prefill && s->n_draft > 0;
        int all = (prefill && s->p.all_logits) || spec;
        int64_t need = all ? s->take : 1;
        if (s->cap_rows < need) {
            free(s->rows);
            s->rows = ms_malloc(sizeof(float) * (size_t)(need * V));
            s->cap_rows = need;
        }
        const int32_t *ids = prefill ? s->prompt + s->fed : spec ? s->vids : &s->gen[s->n_gen - 1];
        it[i] = (ms_batch_item){s->seq, ids, s->take, all, s->rows, spec, !prefill};
        rows += s->take;
    }
    int decoding = 1;
    for (int i = 0; i < n; i++) decoding &= set[i]->fed >= set[i]->n_prompt;
    double t0 = ms_now();
    if (ms_model_forward_batch(e->m, it, n) != 0) goto out;
    /* a draft costs its rows in the pass and what proposing it took (the MTP head's step) */
    if (decoding && e->spec_auto) ms_dcost_add(&e->cost, rows, ms_now() - t0 + e->pass_draft_seconds);
    e->pass_draft_seconds = 0;
    e->passes++;
    e->pass_rows += (uint64_t)rows;
    for (int i = 0; i < n; i++) {
        ms_eseq *s = set[i];
        if (s->fed < s->n_prompt) {
            int64_t got = it[i].all_rows ? s->take : 1;
            s->fed += (size_t)s->take;
            if (finish_prefill(s, s->rows, got) != 0) goto out;
        } else if (finish_decode(s, s->rows) != 0) {
            goto out;
        }
        /* the draft head catches up with the rows whose next token is now known */
        if (e->draft_head && !s->finish && ms_seq_draft(s->seq, s->toks, s->n_prompt + s->n_gen, NULL) < 0) goto out;
    }
    rc = 0;
out:
    ms_scratch_pop(it);
    return rc;
}

/* The draft head's proposals for the decoding sequences that will ask for one, made together
 * (the head's weights, its LM head above all, read once for all of them); propose() takes them. */
static int heads_ahead(ms_engine *e, ms_eseq *const *seqs, int n)
{
    ms_drafter **d = ms_scratch_push(sizeof *d * (size_t)n); /* [n] */
    const int32_t **toks = ms_scratch_push(sizeof *toks * (size_t)n); /* [n] */
    size_t *len = ms_scratch_push(sizeof *len * (size_t)n);        /* [n] */
    int k = 0, rc = 0;
    for (int i = 0; i < n; i++) {
        ms_eseq *s = seqs[i];
        if (s->finish || s->fed < s->n_prompt || !s->dr || ms_dpolicy_paused(&s->pol) ||
            s->p.max_tokens - (int64_t)s->n_gen - 1 <= 0)
            continue;
        d[k] = s->dr, toks[k] = s->toks, len[k++] = s->n_prompt + s->n_gen;
    }
    if (k > 1) {
        double t0 = ms_now();
        rc = ms_draft_heads_run(d, k, toks, len);
        double dt = ms_now() - t0;
        e->draft_seconds += dt;
        e->pass_draft_seconds += dt;
    }
    ms_scratch_pop(len);
    ms_scratch_pop(toks);
    ms_scratch_pop(d);
    return rc;
}

int ms_engine_step(ms_engine *e, ms_eseq *const *seqs, int n)
{
    int64_t cap = ms_engine_pass_rows(e);
    ms_eseq **pass = ms_scratch_push(sizeof *pass * (size_t)(n > 0 ? n : 1)); /* [n] */
    int np = 0, rc = 0;
    int64_t rows = 0;
    /* Drafts share the pass: at most the planned window in all, and never so many that a
     * decoding sequence's own row would not fit (a second pass would stream the trunk again). */
    int n_dec = 0, drafts = e->spec_window;
    for (int i = 0; i < n; i++) n_dec += !seqs[i]->finish && seqs[i]->fed >= seqs[i]->n_prompt;
    /* A step where every sequence prefills runs spans: passes of up to the plan's span, layer by
     * layer over all their rows (each weight read once for all of them). Beside decoding
     * sequences a prompt takes the plan's mixed rows: a pass that reads about all of a layer's
     * experts anyway, so its decoders wait about as long as for a chunk's pass while the prompt
     * moves faster (ms_model_mix_rows). */
    int n_pre = 0;
    for (int i = 0; i < n; i++) n_pre += !seqs[i]->finish && seqs[i]->fed < seqs[i]->n_prompt;
    if (n_dec == 0) cap = ms_model_span(e->m);
    else if (n_pre > 0) cap = ms_model_mix_rows(e->m);
    const int64_t n_base = n_dec < cap ? n_dec : cap; /* a pass's rows before drafts */
    if (e->draft_head && n_dec > 1 && heads_ahead(e, seqs, n) != 0) rc = -1;
    /* Decoding sequences first (one row each, plus their drafts), then prompt chunks in the
     * rows left; a pass that is full runs and the next one starts. */
    for (int round = 0; round < 2 && rc == 0; round++)
        for (int i = 0; i < n && rc == 0; i++) {
            ms_eseq *s = seqs[i];
            MS_ASSERT(s->e == e);
            if (s->finish) continue;
            int prefill = s->fed < s->n_prompt;
            if (prefill != round) continue;
            if (rows >= cap || np == MS_MODEL_MAX_SEQS) {
                rc = run_pass(e, pass, np);
                np = 0;
                rows = 0;
                drafts = e->spec_window;
                if (rc != 0) break;
            }
            int64_t want = prefill ? (int64_t)(s->n_prompt - s->fed) : 1;
            if (!prefill) {
                int64_t room = cap - rows - --n_dec; /* rows this one may take */
                if (room > 1 + drafts) room = 1 + drafts;
                int got = propose(s, room, n_base);
                if (got < 0) {
                    rc = -1;
                    break;
                }
                want += got;
                drafts -= (int)(want - 1);
            }
            s->take = want < cap - rows ? want : cap - rows;
            pass[np++] = s;
            rows += s->take;
        }
    if (rc == 0 && np > 0) rc = run_pass(e, pass, np);
    ms_scratch_pop(pass);
    return rc;
}

void ms_engine_get_stats(ms_engine *e, ms_engine_stats *st)
{
    memset(st, 0, sizeof *st);
    ms_model_get_stats(e->m, &st->model);
    st->peak_rss_self = ms_proc_peak_rss();
    st->peak_rss_all = st->peak_rss_self + ms_local_peak_rss(e->local);
    st->threads = ms_pool_size(ms_model_pool(e->m));
    st->threads_pinned = ms_pool_pinned(ms_model_pool(e->m));
    st->passes = e->passes;
    st->pass_rows = e->pass_rows;
    st->spec_window = e->spec_window;
    st->drafted = e->drafted;
    st->accepted = e->accepted;
    st->decode_passes = e->decode_passes;
    st->decode_tokens = e->decode_tokens;
    st->draft_source = !e->spec_window ? "off" : e->draft_ids ? "file" : e->draft_head ? "mtp" : "ngram";
    st->draft_seconds = e->draft_seconds;
    if (e->remote) {
        st->workers = e->n_workers;
        ms_remote_get_stats(e->remote, &st->remote);
    }
}

int ms_engine_health(ms_engine *e, char *why, size_t n) { return e->remote ? ms_remote_health(e->remote, why, n) : 0; }
