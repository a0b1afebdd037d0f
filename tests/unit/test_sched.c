/* test_sched: continuous batching: every job's tokens and logits equal running it alone, at
 * batch 1, 3 and 8; stop ids and stop strings; streamed deltas add up to the results; cancelled
 * jobs leave the batch; a job whose experts fail is isolated. */
#include <stdlib.h>
#include <string.h>

#include "ms_engine.h"
#include "ms_err.h"
#include "ms_sbuf.h"
#include "ms_sched.h"
#include "ms_synth.h"
#include "ms_test.h"

#define NJOB 11

static char dir[1024];
static int64_t V;
static ms_sched_stats last_stats;

/* What one job produced. */
typedef struct {
    int32_t tok[64];
    size_t n_tok;
    float *rows;
    int64_t n_rows;
    char finish[8];
    char text[512];
    size_t text_len;
    int error_code, reported;
    int32_t stok[64];            /* streamed: the deltas' tokens and text, concatenated */
    size_t n_stok;
    char stext[512];
    size_t n_stext;
    int deltas, delta_after_done;
    char scontent[2048], sreason[2048]; /* streamed: the deltas' content and reasoning, concatenated */
    size_t n_scontent, n_sreason;
    int has_answer;              /* the result's answer (a job with a chat format) */
    char acontent[2048], areason[2048];
    size_t n_acontent, n_areason;
} record;

/* Append n bytes to buf[2048] holding *at (what does not fit is counted, not kept: a length
 * past the buffer fails the comparisons). */
static void put(char *buf, size_t *at, const char *s, size_t n)
{
    if (n && *at + n <= 2048) memcpy(buf + *at, s, n);
    *at += n;
}

static void on_delta(void *ctx, const ms_sched_delta *d)
{
    record *rec = (record *)ctx + (intptr_t)d->user;
    rec->deltas++;
    if (rec->reported) rec->delta_after_done++;
    for (size_t i = 0; i < d->n_tokens && rec->n_stok < 64; i++) rec->stok[rec->n_stok++] = d->tokens[i];
    if (d->text && rec->n_stext + d->text_len < sizeof rec->stext) {
        memcpy(rec->stext + rec->n_stext, d->text, d->text_len);
        rec->n_stext += d->text_len;
    }
    put(rec->scontent, &rec->n_scontent, d->content, d->content_len);
    put(rec->sreason, &rec->n_sreason, d->reasoning, d->reasoning_len);
}

static ms_engine *open_engine(int max_seqs)
{
    ms_engine_opts o = {0};
    o.model_dir = dir;
    o.run.n_threads = 2;
    o.run.ram_budget = 16ull << 30;
    o.run.baseline = 1;
    o.run.max_positions = 64;
    o.run.prompt_tokens = 16;
    o.run.all_logits = 1;
    o.max_seqs = max_seqs;
    ms_engine *e = ms_engine_open(&o);
    T_CHECK(e != NULL, "engine opens: %s", e ? "" : ms_err_msg());
    return e;
}

/* Job i: prompt length 1 + (7 i) % 13, greedy or sampled, 2..9 tokens. */
static void job_of(int i, ms_sched_job *j, int32_t *ids)
{
    memset(j, 0, sizeof *j);
    j->n_prompt = 1 + (size_t)((7 * i) % 13);
    for (size_t t = 0; t < j->n_prompt; t++) ids[t] = (int32_t)((i * 131 + (int)t * 17 + 5) % (V - 10));
    j->prompt = ids;
    j->temperature = i % 3 ? 0.8f : 0.0f;
    j->top_p = i % 4 == 1 ? 0.9f : 1.0f;
    j->seed = 42 + (uint64_t)i;
    j->max_tokens = 2 + i % 8;
    j->keep_logits = 1;
}

static int keep(void *ctx, const ms_sched_result *r)
{
    record *rec = (record *)ctx + (intptr_t)r->user;
    rec->reported++;
    rec->n_tok = r->n_tokens < 64 ? r->n_tokens : 64;
    if (r->n_tokens) memcpy(rec->tok, r->tokens, sizeof(int32_t) * rec->n_tok);
    snprintf(rec->finish, sizeof rec->finish, "%s", r->finish ? r->finish : "");
    rec->text_len = r->text_len < sizeof rec->text ? r->text_len : sizeof rec->text - 1;
    if (r->text) memcpy(rec->text, r->text, rec->text_len);
    rec->text[rec->text_len] = 0;
    rec->error_code = r->finish ? 0 : r->error_code;
    rec->has_answer = r->answer != NULL;
    if (r->answer) {
        put(rec->acontent, &rec->n_acontent, r->answer->content, r->answer->content_len);
        put(rec->areason, &rec->n_areason, r->answer->reasoning, r->answer->reasoning_len);
    }
    rec->n_rows = r->n_rows;
    free(rec->rows);
    rec->rows = NULL;
    if (r->n_rows) {
        rec->rows = ms_malloc(sizeof(float) * (size_t)(r->n_rows * V));
        memcpy(rec->rows, r->logits, sizeof(float) * (size_t)(r->n_rows * V));
    }
    return 0;
}

/* Jobs [0, n) through a scheduler of max_batch; stop ids/strings from mod when given. */
static void run_sched(ms_engine *e, int max_batch, int n, record *got, void (*mod)(int, ms_sched_job *))
{
    memset(got, 0, sizeof(record) * (size_t)n);
    ms_sched *s = ms_sched_new(e, max_batch, keep, got);
    ms_sched_set_stream(s, on_delta);
    for (int i = 0; i < n; i++) {
        ms_sched_job j;
        int32_t ids[16];
        job_of(i, &j, ids);
        j.user = (void *)(intptr_t)i;
        if (mod) mod(i, &j);
        ms_sched_add(s, &j);
    }
    int guard = 0;
    while (ms_sched_pending(s) && guard++ < 1000)
        if (ms_sched_step(s) != 0) {
            T_CHECK(0, "batch %d: step failed: %s", max_batch, ms_err_msg());
            break;
        }
    ms_sched_get_stats(s, &last_stats);
    ms_sched_free(s);
}

static int same(const record *a, const record *b)
{
    return a->reported == 1 && a->n_tok == b->n_tok && !memcmp(a->tok, b->tok, sizeof(int32_t) * a->n_tok) &&
           a->n_rows == b->n_rows && b->n_rows > 0 && !memcmp(a->rows, b->rows, sizeof(float) * (size_t)(a->n_rows * V));
}

/* Stop conditions taken from the reference, so that they bite at a known place. */
static record *g_ref;
static int32_t stop_id_store[NJOB];
static char stop_str[NJOB][64];
static const char *stop_ptr[NJOB][1];
static void add_stops(int i, ms_sched_job *j)
{
    j->stream = i % 2 == 0 || i % 3 == 1; /* every stop-string job streams; some others too */
    if (i % 3 == 0 && g_ref[i].n_tok >= 3) { /* stop at the id generated third */
        stop_id_store[i] = g_ref[i].tok[2];
        j->stop_ids = &stop_id_store[i];
        j->n_stop_ids = 1;
    } else if (i % 3 == 1 && stop_str[i][0]) {
        stop_ptr[i][0] = stop_str[i];
        j->stop = stop_ptr[i];
        j->n_stop = 1;
    }
}

/* A chat format of the test's own over any tokenizer: an id's text goes to the content when the
 * id is even, to the reasoning when odd, nowhere when a multiple of 7 (a marker); the answer
 * splits the same way. It shows the scheduler's split, streamed and whole, on real generations. */
static int parity_to(int32_t id) { return id % 7 == 0 ? MS_CHAT_TO_NONE : id % 2 ? MS_CHAT_TO_REASONING : MS_CHAT_TO_CONTENT; }
static int parity_route(const ms_tok *t, ms_chat_stream *s, int32_t id)
{
    (void)t;
    (void)s;
    return parity_to(id);
}
static int parity_answer(const ms_tok *t, const int32_t *ids, size_t n, ms_chat_answer *a)
{
    ms_sbuf c = {0}, r = {0};
    for (size_t i = 0; i < n; i++) {
        char *txt = NULL;
        size_t l = 0;
        if (ms_tok_decode_text(t, &ids[i], 1, 1, &txt, &l) != 0) return -1;
        if (parity_to(ids[i]) != MS_CHAT_TO_NONE) ms_sbuf_add(parity_to(ids[i]) == MS_CHAT_TO_CONTENT ? &c : &r, txt, l);
        free(txt);
    }
    memset(a, 0, sizeof *a);
    a->content = ms_sbuf_take(&c, &a->content_len);
    if (r.n) a->reasoning = ms_sbuf_take(&r, &a->reasoning_len);
    return 0;
}
static const ms_chatfmt parity = {.name = "parity", .answer = parity_answer, .route = parity_route};

static void add_parity(int i, ms_sched_job *j)
{
    add_stops(i, j);
    j->stream = 1;
    j->chat = &parity;
    j->max_tokens = 40 + i;
}

static int same_bytes(const char *a, size_t na, const char *b, size_t nb)
{
    return na == nb && na <= 2048 && !memcmp(a, b, na);
}

/* Jobs with a chat format, stop ids and strings, batched: each one's streamed content and
 * reasoning are its result's answer, whatever step the stop comes at. */
static void check_split(ms_engine *e)
{
    record got[NJOB];
    run_sched(e, 3, NJOB, got, add_parity);
    int n_reason = 0, n_content = 0;
    for (int i = 0; i < NJOB; i++) {
        const record *g = &got[i];
        T_CHECK(g->reported == 1 && g->has_answer && same_bytes(g->scontent, g->n_scontent, g->acontent, g->n_acontent) &&
                    same_bytes(g->sreason, g->n_sreason, g->areason, g->n_areason),
                "job %d (%zu tokens, finish %s): streamed content %zu and reasoning %zu bytes = its answer's (%zu, %zu)", i,
                g->n_tok, g->finish, g->n_scontent, g->n_sreason, g->n_acontent, g->n_areason);
        n_reason += g->n_areason > 0;
        n_content += g->n_acontent > 0;
        free(got[i].rows);
    }
    T_CHECK(n_reason >= NJOB / 2 && n_content >= NJOB / 2, "answers with reasoning (%d) and content (%d)", n_reason,
            n_content);
}

/* A long streamed answer decodes each token to text a bounded number of times (its text is
 * extended, not decoded again at every step): the scheduler's decoded ids stay within twice the
 * tokens generated, where decoding the whole answer at each step would take about n^2 / 2. */
static void check_linear(void)
{
    ms_engine *e = open_engine(1);
    if (!e) return;
    record got[1];
    memset(got, 0, sizeof got);
    ms_sched *s = ms_sched_new(e, 1, keep, got);
    ms_sched_set_stream(s, on_delta);
    int32_t ids[4] = {5, 17, 29, 41};
    ms_sched_job j = {0};
    j.prompt = ids;
    j.n_prompt = 4;
    j.max_tokens = 56;
    j.stream = 1;
    j.user = (void *)(intptr_t)0;
    ms_sched_add(s, &j);
    int guard = 0;
    while (ms_sched_pending(s) && guard++ < 200)
        if (ms_sched_step(s) != 0) break;
    ms_sched_stats st;
    ms_sched_get_stats(s, &st);
    T_CHECK(got[0].reported == 1 && got[0].n_tok == 56 && got[0].deltas == 56 && st.decoded == st.generated,
            "a streamed answer of %zu tokens in %d deltas: %llu ids decoded for %llu generated (each once)",
            got[0].n_tok, got[0].deltas, (unsigned long long)st.decoded, (unsigned long long)st.generated);
    ms_sched_free(s);
    ms_engine_free(e);
}

/* Cancel a running and a waiting job between steps: they are never reported, the others are
 * unchanged, and a waiting job fills the freed place at the next step. */
static void check_cancel(const record *ref)
{
    ms_engine *e = open_engine(3);
    if (!e) return;
    record got[NJOB];
    memset(got, 0, sizeof got);
    ms_sched *s = ms_sched_new(e, 3, keep, got);
    for (int i = 0; i < NJOB; i++) {
        ms_sched_job j;
        int32_t ids[16];
        job_of(i, &j, ids);
        j.user = (void *)(intptr_t)i;
        ms_sched_add(s, &j);
    }
    ms_sched_stats st;
    T_CHECK(ms_sched_step(s) == 0, "first step: %s", ms_err_msg());
    ms_sched_get_stats(s, &st);
    int running = st.running;
    /* jobs 0..2 run (job 0 has 2 tokens, so it may be done); 1 runs for 3 tokens, 9 waits */
    T_CHECK(ms_sched_cancel(s, (void *)(intptr_t)1) == 1 && ms_sched_cancel(s, (void *)(intptr_t)9) == 1,
            "a running and a waiting job are cancelled");
    T_CHECK(ms_sched_cancel(s, (void *)(intptr_t)1) == 0 && ms_sched_cancel(s, (void *)(intptr_t)99) == 0,
            "cancelling twice or an unknown job finds nothing");
    ms_sched_get_stats(s, &st);
    T_CHECK(st.running == running - 1 && st.cancelled == 2, "the batch lost the cancelled job (%d -> %d running)",
            running, st.running);
    T_CHECK(ms_sched_step(s) == 0, "next step: %s", ms_err_msg());
    ms_sched_get_stats(s, &st);
    T_CHECK(st.last_batch == 3, "a waiting job took the freed place: the next step ran %d jobs", st.last_batch);
    while (ms_sched_pending(s))
        if (ms_sched_step(s) != 0) break;
    for (int i = 0; i < NJOB; i++) {
        if (i == 1 || i == 9)
            T_CHECK(got[i].reported == 0, "cancelled job %d is never reported", i);
        else
            T_CHECK(same(&got[i], &ref[i]), "job %d beside cancelled jobs: bit-identical to alone", i);
        free(got[i].rows);
    }
    ms_sched_free(s);
    ms_engine_free(e);
}

/* ---- a worker that cannot compute what one job needs ---- */
typedef struct {
    ms_experts inner;
    int layer, latent, record;
    float poison[4096]; /* one latent row */
    int have;
} faulty;

static int faulty_compute(void *ctx, int layer, int64_t n_rows, const float *z, int k, const int32_t *ids, float *out)
{
    faulty *f = ctx;
    if (layer == f->layer) {
        if (f->record && !f->have) {
            memcpy(f->poison, z, sizeof(float) * (size_t)f->latent);
            f->have = 1;
        } else if (!f->record) {
            for (int64_t r = 0; r < n_rows; r++)
                if (!memcmp(z + r * f->latent, f->poison, sizeof(float) * (size_t)f->latent)) {
                    ms_err_set("worker lost: no replica for the experts of layer %d (test)", layer);
                    return ms_err_set_code(MS_EXIT_WORKER);
                }
        }
    }
    return f->inner.compute(f->inner.ctx, layer, n_rows, z, k, ids, out);
}

static void check_isolation(const record *ref)
{
    /* The poison: job 5's first prompt row at the first MoE layer (its first token starts no other job). */
    const int bad = 5;
    static faulty f;
    ms_engine *e = open_engine(8);
    if (!e) return;
    ms_model *m = ms_engine_model(e);
    f.inner = ms_model_experts(m);
    f.layer = ms_k3_model_cfg(ms_engine_model(e))->first_dense;
    f.latent = ms_k3_model_cfg(ms_engine_model(e))->latent;
    f.record = 1;
    ms_model_set_experts(m, (ms_experts){faulty_compute, &f});
    record got[NJOB];
    /* record job 5's row alone */
    {
        ms_sched_job j;
        int32_t ids[16];
        job_of(bad, &j, ids);
        record one[1];
        memset(one, 0, sizeof one);
        ms_sched *s = ms_sched_new(e, 1, keep, one);
        ms_sched_add(s, &j);
        while (ms_sched_pending(s) && ms_sched_step(s) == 0) {}
        ms_sched_free(s);
        free(one[0].rows);
    }
    T_CHECK(f.have, "the poison row is recorded");
    f.record = 0;
    run_sched(e, 8, NJOB, got, NULL);
    T_CHECK(last_stats.retries >= 2 && last_stats.failed == 1 && last_stats.finished == NJOB,
            "the failed step's jobs were re-run alone (%llu retries), one failed",
            (unsigned long long)last_stats.retries);
    for (int i = 0; i < NJOB; i++) {
        if (i == bad)
            T_CHECK(got[i].reported == 1 && got[i].error_code == MS_EXIT_WORKER && !got[i].finish[0],
                    "failing job %d is reported once with the worker error (%d)", i, got[i].error_code);
        else
            T_CHECK(same(&got[i], &ref[i]), "job %d completes, bit-identical, beside a failing job", i);
        free(got[i].rows);
    }
    ms_engine_free(e);
}

/* Choices: one job with n_choices 3 gives each choice the tokens of a solo job with seed + i,
 * and runs its prompt once (the engine's rows: the prompt once, then each choice's decoding). */
static record choice_rec[3];
static int keep_choice(void *ctx, const ms_sched_result *r)
{
    (void)ctx;
    MS_ASSERT(r->choice >= 0 && r->choice < 3);
    return keep(choice_rec + r->choice, &(ms_sched_result){.user = (void *)0, .tokens = r->tokens, .n_tokens = r->n_tokens,
                                                          .finish = r->finish, .text = r->text, .text_len = r->text_len});
}

static void check_choices(void)
{
    ms_sched_job j;
    int32_t ids[16];
    record solo[3];
    for (int c = 0; c < 3; c++) {
        ms_engine *e = open_engine(1);
        if (!e) return;
        job_of(1, &j, ids);
        j.keep_logits = 0;
        j.seed += (uint64_t)c;
        ms_sched *s = ms_sched_new(e, 1, keep, &solo[c]);
        memset(&solo[c], 0, sizeof solo[c]);
        ms_sched_add(s, &j);
        while (ms_sched_pending(s))
            if (ms_sched_step(s) != 0) break;
        ms_sched_free(s);
        ms_engine_free(e);
    }
    ms_engine *e = open_engine(4);
    if (!e) return;
    memset(choice_rec, 0, sizeof choice_rec);
    job_of(1, &j, ids);
    j.keep_logits = 0;
    j.n_choices = 3;
    ms_sched *s = ms_sched_new(e, 4, keep_choice, NULL);
    ms_sched_add(s, &j);
    while (ms_sched_pending(s))
        if (ms_sched_step(s) != 0) break;
    ms_sched_free(s);
    ms_engine_stats es;
    ms_engine_get_stats(e, &es);
    int ok = 1, differ = 0;
    for (int c = 0; c < 3; c++) {
        ok &= choice_rec[c].reported == 1 && choice_rec[c].n_tok == solo[c].n_tok &&
              !memcmp(choice_rec[c].tok, solo[c].tok, sizeof(int32_t) * solo[c].n_tok);
        differ |= c > 0 && memcmp(solo[c].tok, solo[0].tok, sizeof(int32_t) * solo[0].n_tok);
    }
    T_CHECK(ok && differ, "3 choices: each equals the solo job with seed + i (and they differ)");
    uint64_t want = j.n_prompt + 3 * (uint64_t)(j.max_tokens - 1);
    T_CHECK(es.pass_rows == want, "the prompt ran once: %llu rows (prompt %zu once + 3 x %lld decoding; not shared: %llu)",
            (unsigned long long)es.pass_rows, j.n_prompt, (long long)j.max_tokens - 1,
            (unsigned long long)(3 * j.n_prompt + 3 * (uint64_t)(j.max_tokens - 1)));
    ms_engine_free(e);
}

int main(void)
{
    ms_log_set_level(0);
    const char *t = ms_t_tmpdir("sched");
    snprintf(dir, sizeof dir, "%.1000s/m", t);
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    T_CHECK(ms_synth_write(dir, &sh, 5) == 0, "synth tiny: %s", ms_err_msg());
    V = sh.vocab;

    /* Reference: each job alone (a batch of 1, one job queued). */
    record ref[NJOB];
    for (int i = 0; i < NJOB; i++) {
        ms_engine *e = open_engine(1);
        if (!e) return ms_t_done();
        ms_sched_job j;
        int32_t ids[16];
        job_of(i, &j, ids);
        j.user = (void *)(intptr_t)0;
        ms_sched *s = ms_sched_new(e, 1, keep, &ref[i]);
        memset(&ref[i], 0, sizeof ref[i]);
        ms_sched_add(s, &j);
        while (ms_sched_pending(s))
            if (ms_sched_step(s) != 0) break;
        ms_sched_free(s);
        ms_engine_free(e);
        T_CHECK(ref[i].reported == 1 && ref[i].n_tok == (size_t)j.max_tokens && !strcmp(ref[i].finish, "length"),
                "job %d alone: %zu tokens, finish %s", i, ref[i].n_tok, ref[i].finish);
    }

    int batches[3] = {1, 3, 8};
    for (int b = 0; b < 3; b++) {
        ms_engine *e = open_engine(batches[b]);
        if (!e) break;
        record got[NJOB];
        run_sched(e, batches[b], NJOB, got, NULL);
        for (int i = 0; i < NJOB; i++) {
            T_CHECK(same(&got[i], &ref[i]), "batch %d: job %d: %zu tokens and %lld logits rows bit-identical to alone",
                    batches[b], i, ref[i].n_tok, (long long)ref[i].n_rows);
            free(got[i].rows);
        }
        ms_engine_free(e);
    }

    /* Stops: job i % 3 == 0 stops at its third id; i % 3 == 1 at the text of its last token. */
    ms_engine *e = open_engine(3);
    ms_tok *tok = e ? ms_engine_tok(e) : NULL;
    g_ref = ref;
    for (int i = 0; tok && i < NJOB; i++) {
        if (i % 3 != 1 || ref[i].n_tok < 2) continue;
        char *txt = NULL;
        size_t len = 0;
        if (ms_tok_decode_text(tok, &ref[i].tok[ref[i].n_tok - 1], 1, 1, &txt, &len) == 0 && len > 0 && len < 60 &&
            !memchr(txt, 0, len))
            memcpy(stop_str[i], txt, len);
        free(txt);
    }
    if (tok) {
        record got[NJOB];
        run_sched(e, 3, NJOB, got, add_stops);
        int n_id = 0, n_str = 0;
        for (int i = 0; i < NJOB; i++) {
            if (i % 3 == 0 && ref[i].n_tok >= 3) {
                /* the first place the id appears ends the job; the text leaves the id out */
                size_t at = 0;
                while (ref[i].tok[at] != stop_id_store[i]) at++;
                char *want = NULL;
                size_t wl = 0;
                ms_tok_decode_text(tok, ref[i].tok, at, 1, &want, &wl); /* the text a reader sees: no special tokens */
                T_CHECK(got[i].n_tok == at + 1 && !memcmp(got[i].tok, ref[i].tok, sizeof(int32_t) * (at + 1)) &&
                            !strcmp(got[i].finish, "stop") && got[i].text_len == wl && !memcmp(got[i].text, want, wl),
                        "job %d stops at stop id %d after %zu tokens, text without it", i, stop_id_store[i], at + 1);
                free(want);
                n_id++;
            } else if (i % 3 == 1 && stop_str[i][0]) {
                /* the first prefix of the reference whose text holds the string; text cut before it */
                size_t m = 0;
                char *txt = NULL;
                size_t len = 0;
                for (m = 1; m <= ref[i].n_tok; m++) {
                    free(txt);
                    txt = NULL;
                    ms_tok_decode_text(tok, ref[i].tok, m, 1, &txt, &len);
                    if (memmem(txt, len, stop_str[i], strlen(stop_str[i]))) break;
                }
                size_t cut = txt ? (size_t)((char *)memmem(txt, len, stop_str[i], strlen(stop_str[i])) - txt) : 0;
                T_CHECK(got[i].n_tok == m && !memcmp(got[i].tok, ref[i].tok, sizeof(int32_t) * m) &&
                            !strcmp(got[i].finish, "stop") && got[i].text_len == cut && !memcmp(got[i].text, txt, cut),
                        "job %d stops at the string '%s' after %zu tokens (got %zu), text cut at byte %zu", i,
                        stop_str[i], m, got[i].n_tok, cut);
                free(txt);
                n_str++;
            } else {
                T_CHECK(same(&got[i], &ref[i]), "job %d without stops beside stopping jobs: unchanged", i);
            }
            free(got[i].rows);
        }
        T_CHECK(n_id >= 2 && n_str >= 2, "stop ids (%d jobs) and stop strings (%d jobs) were exercised", n_id, n_str);
        int n_streamed = 0;
        for (int i = 0; i < NJOB; i++) {
            int streamed = i % 2 == 0 || i % 3 == 1;
            n_streamed += streamed;
            if (!streamed) {
                T_CHECK(got[i].deltas == 0, "job %d without stream: no deltas (%d)", i, got[i].deltas);
                continue;
            }
            /* the deltas add up to the result (a stop string's bytes are never sent) and the
             * tokens come as they are generated: one delta per step */
            T_CHECK(got[i].n_stok == got[i].n_tok && !memcmp(got[i].stok, got[i].tok, sizeof(int32_t) * got[i].n_tok) &&
                        got[i].n_stext == got[i].text_len && !memcmp(got[i].stext, got[i].text, got[i].text_len) &&
                        got[i].deltas == (int)got[i].n_tok && got[i].delta_after_done == 0,
                    "job %d streamed: %d deltas of %zu tokens and %zu text bytes add up to the result (%zu tokens, "
                    "%zu bytes)",
                    i, got[i].deltas, got[i].n_stok, got[i].n_stext, got[i].n_tok, got[i].text_len);
        }
        T_CHECK(n_streamed >= 6, "%d streamed jobs", n_streamed);
        check_split(e);
    }
    ms_engine_free(e);

    check_cancel(ref);
    check_isolation(ref);
    check_linear();
    check_choices();
    for (int i = 0; i < NJOB; i++) free(ref[i].rows);
    return ms_t_done();
}
