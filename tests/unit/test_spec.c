/* test_spec: speculative decoding is exact: tokens and every logits row equal --speculate off,
 * greedy and sampled, with drafts right, wrong at every window position, and from n-gram
 * lookup; at the smallest budget, with local workers, several sequences at once and in the
 * scheduler (stop ids cut at the same token); the planner refuses a window that does not fit. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_engine.h"
#include "ms_err.h"
#include "ms_sched.h"
#include "ms_synth.h"
#include "ms_test.h"

#define NGEN 24
#define NPAT 5

static char dir[1024];
static const char *tmp;

/* Same tokens and logits rows (and, with calls, as many on_logits calls: one per generated row;
 * in a batch prompt chunks may split differently, as they do without speculation). */
static int same_record(const ms_t_record *a, const ms_t_record *b, int calls)
{
    return a->n_rows > 0 && ms_t_record_same(a, b, calls);
}

/* Settings k: greedy, or sampled with top-p < 1 and its own seed. */
static ms_gen_params params_of(int k, ms_t_record *r)
{
    ms_gen_params p = {0};
    p.temperature = k == 0 ? 0.0f : 0.8f + 0.1f * (float)k;
    p.top_p = k == 0 ? 1.0f : 0.9f - 0.1f * (float)(k % 3);
    p.seed = 4242 + 17 * (uint64_t)k;
    p.max_tokens = NGEN;
    p.all_logits = 1;
    p.on_token = ms_t_record_token;
    p.on_logits = ms_t_record_rows;
    p.ctx = r;
    return p;
}
#define NSET 4 /* greedy and three sampled */

/* A repetitive prompt (long n-gram matches), i % COVER selects the pattern; with COVER it
 * starts with every id of the vocabulary once (V <= MAXV), so that n-gram lookup finds every
 * generated token and drafts at every pass. */
#define COVER 256
#define MAXV 1024
static size_t prompt_of(int i, int32_t *ids, int64_t V)
{
    size_t n0 = 0;
    if (i >= COVER) {
        MS_ASSERT(V <= MAXV && V % 2 == 0);
        for (int64_t t = 0; t < V; t++) ids[n0++] = (int32_t)((t * 37 + i) % V); /* 37 is prime to V */
        i -= COVER;
    }
    size_t n = 12 + (size_t)i;
    int period = 2 + i % 4;
    for (size_t t = 0; t < n; t++) ids[n0 + t] = (int32_t)((7 * (int64_t)(t % (size_t)period) + 5 + 11 * i) % V);
    return n0 + n;
}

typedef struct {
    const char *model;
    int speculate;          /* ms_engine_opts.speculate */
    const char *draft_file; /* or NULL */
    uint64_t budget;        /* 0: 16 GiB */
    int local_workers, max_seqs;
    int threads;            /* 0: 2 (the many runs of check_identity take 1: no pool waits) */
} eopts;

static ms_engine *open_e(const eopts *x)
{
    ms_engine_opts o = {0};
    o.model_dir = x->model;
    o.run.n_threads = x->threads ? x->threads : 2;
    o.run.ram_budget = x->budget ? x->budget : 16ull << 30;
    o.run.baseline = 1;
    o.run.max_positions = MAXV + 64;
    o.run.prompt_tokens = 16;
    o.max_seqs = x->max_seqs;
    o.local_workers = x->local_workers;
    o.speculate = x->speculate;
    o.draft_file = x->draft_file;
    return ms_engine_open(&o);
}

/* Run sequences [0, n) of (prompt i, settings k[i]) together in one engine until done. */
static int run_set(const eopts *x, int n, const int *pi, const int *k, ms_t_record *out, ms_engine_stats *st)
{
    ms_engine *e = open_e(x);
    T_CHECK(e != NULL, "engine opens (speculate %d, budget %llu, %d workers): %s", x->speculate,
            (unsigned long long)x->budget, x->local_workers, e ? "" : ms_err_msg());
    if (!e) return -1;
    int64_t V = ms_engine_info(e)->vocab;
    ms_eseq *s[8];
    int rc = 0;
    for (int i = 0; i < n; i++) {
        int32_t ids[MAXV + 32];
        size_t np = prompt_of(pi[i], ids, V);
        memset(&out[i], 0, sizeof out[i]);
        out[i].V = V;
        ms_gen_params p = params_of(k[i], &out[i]);
        s[i] = ms_engine_seq_new(e, ids, np, &p);
        if (!s[i]) rc = -1;
    }
    for (int live = 1; live && rc == 0;) {
        ms_eseq *act[8];
        int na = 0;
        for (int i = 0; i < n; i++)
            if (!ms_engine_seq_done(s[i])) act[na++] = s[i];
        live = na > 0;
        if (na && ms_engine_step(e, act, na) != 0) {
            T_CHECK(0, "step failed: %s", ms_err_msg());
            rc = -1;
        }
    }
    if (st) ms_engine_get_stats(e, st);
    for (int i = 0; i < n; i++) ms_engine_seq_free(s[i]);
    ms_engine_free(e);
    return rc;
}

static void free_rec(ms_t_record *r, int n)
{
    for (int i = 0; i < n; i++) free(r[i].rows);
}

/* Write ids[n] as a draft file (comma-separated). */
static const char *write_drafts(const char *name, const int32_t *ids, size_t n)
{
    static char path[8][1200];
    static int at;
    char *p = path[at++ % 8];
    snprintf(p, 1200, "%s/%s", tmp, name);
    FILE *f = fopen(p, "w");
    for (size_t i = 0; f && i < n; i++) fprintf(f, "%s%d", i ? ", " : "", ids[i]);
    if (f) fclose(f);
    return p;
}

/* Wrong-draft pattern pat of window N: which drafts of a list built from the reference tokens
 * are made wrong. 0: none; 1: every draft; 2, 3, 4: one position of each window of N + 1 tokens
 * (first, middle, last draft), so rejections fall at those positions of the window. */
static int wrong_at(int pat, int N, size_t i)
{
    size_t w = (size_t)N + 1;
    switch (pat) {
    case 0: return 0;
    case 1: return 1;
    case 2: return i % w == 1;
    case 3: return i % w == (size_t)(1 + N / 2);
    default: return i % w == (size_t)N;
    }
}

/* Which window positions (0..N-1) saw a rejection when drafting list[] against ref[] with a
 * fixed window N: the engine's own rule, replayed (a pass at n_gen proposes list[n_gen..]). */
static unsigned rejected_positions(const int32_t *list, const int32_t *ref, int N)
{
    unsigned seen = 0;
    size_t g = 1; /* the prefill pass produced token 0 */
    while (g < NGEN) {
        size_t left = NGEN - g - 1, k = (size_t)N < left ? (size_t)N : left, a = 0;
        while (a < k && list[g + a] == ref[g + a]) a++;
        if (a < k) seen |= 1u << a;
        g += a + 1;
    }
    return seen;
}

/* Settings k (greedy / sampled), prompt pi: off is the reference; drafts right, wrong at the
 * first, middle and last window position, and n-gram lookup, for the windows ns[] (0 = auto;
 * n-gram on the covering prompt for the windows of ng[]): all identical. */
static void check_identity(const char *model, const char *what, int pi, int k, const int *ns, int n_ns, const int *ng,
                           int n_ng)
{
    eopts off = {model, 0, NULL, 0, 0, 1, 1};
    ms_t_record ref, cref = {0};
    if (run_set(&off, 1, &pi, &k, &ref, NULL) != 0) return;
    T_CHECK(ref.n_tok == NGEN, "%s: reference made %zu tokens", what, ref.n_tok);
    int32_t list[NGEN];
    uint64_t ngram_drafted = 0, ngram_accepted = 0;
    for (int in = 0; in < n_ns; in++) {
        int N = ns[in], spec = N ? N : MS_SPEC_AUTO, with_ng = 0;
        for (int j = 0; j < n_ng; j++) with_ng |= ng[j] == N;
        unsigned reject_seen = 0;
        for (int pat = 0; pat <= (with_ng ? NPAT : NPAT - 1); pat++) {
            eopts x = {model, spec, NULL, 0, 0, 1, 1};
            if (pat == NPAT) { /* n-gram drafts on the covering prompt, against its own reference */
                ms_t_record ng;
                ms_engine_stats st;
                int pc = pi + COVER;
                if (!cref.n_rows && run_set(&off, 1, &pc, &k, &cref, NULL) != 0) continue;
                if (run_set(&x, 1, &pc, &k, &ng, &st) != 0) continue;
                T_CHECK(same_record(&ng, &cref, 1),
                        "%s, --speculate %d, n-gram drafts: tokens and %lld logits rows identical to off (%lld)", what,
                        spec, (long long)ng.n_rows, (long long)cref.n_rows);
                ngram_drafted += st.drafted;
                ngram_accepted += st.accepted;
                T_CHECK(st.drafted > 0, "%s, --speculate %d: n-gram drafts made", what, spec);
                free(ng.rows);
                continue;
            }
            {
                for (size_t i = 0; i < NGEN; i++)
                    list[i] = wrong_at(pat, N ? N : 4, i) ? (int32_t)((ref.tok[i] + 1) % ref.V) : ref.tok[i];
                x.draft_file = write_drafts("drafts.txt", list, NGEN);
                if (N) reject_seen |= rejected_positions(list, ref.tok, N);
            }
            ms_t_record got;
            ms_engine_stats st;
            if (run_set(&x, 1, &pi, &k, &got, &st) != 0) continue;
            T_CHECK(same_record(&got, &ref, 1),
                    "%s, --speculate %d, %s: tokens and %lld logits rows (%llu calls) identical to off (%lld, %llu)",
                    what, spec, pat == 0 ? "all drafts right" : "wrong drafts",
                    (long long)got.n_rows, (unsigned long long)got.calls, (long long)ref.n_rows,
                    (unsigned long long)ref.calls);
            if (pat == 0 && N)
                T_CHECK(st.accepted == st.drafted && st.drafted > 0 &&
                            st.decode_tokens == NGEN - 1 && st.decode_passes <= (NGEN - 1 + (uint64_t)N) / (N + 1) + 1,
                        "%s, N %d, right drafts: all %llu accepted, %llu decode passes for %d tokens", what, N,
                        (unsigned long long)st.drafted, (unsigned long long)st.decode_passes, NGEN - 1);
            if (pat == 1)
                T_CHECK(st.accepted == 0 && st.decode_passes == NGEN - 1 && (N ? st.drafted > 0 : 1),
                        "%s, N %d, wrong drafts: none accepted (%llu drafted), one token per pass", what, N,
                        (unsigned long long)st.drafted);
            free(got.rows);
        }
        if (N) { /* the first, middle and last draft of a window were each rejected at least once */
            unsigned want = 1u | 1u << (N / 2) | 1u << (N - 1);
            T_CHECK((reject_seen & want) == want, "%s, N %d: rejections seen at window positions %#x (want %#x)",
                    what, N, reject_seen, want);
        }
    }
    T_CHECK(ngram_drafted > 0, "%s: the covering prompt gives n-gram drafts (a random model rarely repeats itself, so few are right) (%llu drafted, %llu accepted)", what,
            (unsigned long long)ngram_drafted, (unsigned long long)ngram_accepted);
    free(ref.rows);
    free(cref.rows);
}

/* Drafts of each sequence of a set: its own reference tokens with every third one wrong. */
static void check_batch(const char *what, uint64_t budget, int local_workers, int spec)
{
    int pi[4] = {0, 1, 2, 3}, k[4] = {0, 1, 2, 3};
    eopts off = {dir, 0, NULL, budget, 0, 4};
    ms_t_record ref[4], got[4];
    if (run_set(&off, 4, pi, k, ref, NULL) != 0) return;
    /* one list for all (the engine's --draft-file): right for sequence 0, mostly wrong for the
     * others, so sequences of one pass accept different counts */
    int32_t list[NGEN];
    for (size_t i = 0; i < NGEN; i++) list[i] = i % 3 == 2 ? (int32_t)((ref[0].tok[i] + 1) % ref[0].V) : ref[0].tok[i];
    eopts x = {dir, spec, write_drafts("batch.txt", list, NGEN), budget, local_workers, 4};
    ms_engine_stats st;
    if (run_set(&x, 4, pi, k, got, &st) == 0) {
        for (int i = 0; i < 4; i++) {
            int64_t r = 0;
            while (r < ref[i].n_rows && r < got[i].n_rows &&
                   !memcmp(got[i].rows + r * ref[i].V, ref[i].rows + r * ref[i].V, sizeof(float) * (size_t)ref[i].V))
                r++;
            T_CHECK(same_record(&got[i], &ref[i], 0), "%s: sequence %d identical to off (rows %lld/%lld, first diff %lld)",
                    what, i, (long long)got[i].n_rows, (long long)ref[i].n_rows, (long long)r);
        }
        T_CHECK(st.accepted > 0, "%s: drafts accepted (%llu of %llu)", what, (unsigned long long)st.accepted,
                (unsigned long long)st.drafted);
        free_rec(got, 4);
    }
    free_rec(ref, 4);
}

/* The smallest budget of a window (0 = off) for seqs sequences, from the refusal of 1 byte. */
static uint64_t min_budget(int spec, int seqs)
{
    eopts x = {dir, spec, NULL, 1, 0, seqs};
    ms_engine *e = open_e(&x);
    T_CHECK(!e && ms_err_code() == MS_EXIT_BUDGET, "a 1-byte budget is refused: %s", e ? "opened" : ms_err_msg());
    ms_engine_free(e);
    const char *p = strrchr(ms_err_msg(), '(');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

/* At the smallest budget without speculation, a large window is refused naming the largest
 * that fits; that one opens, one more does not; auto opens with what fits. */
static void check_window_fit(void)
{
    uint64_t b = min_budget(0, 1), ba = min_budget(MS_SPEC_AUTO, 1), b8 = min_budget(8, 1);
    T_CHECK(b > 0 && ba == b && b8 > b,
            "auto's refusal names off's minimum (%llu, %llu), a window of 8 needs more (%llu)", (unsigned long long)ba,
            (unsigned long long)b, (unsigned long long)b8);
    if (!b) return;
    b += b / 50;
    eopts x = {dir, MS_SPEC_MAX, NULL, b, 0, 1};
    ms_engine *e = open_e(&x);
    const char *p = e ? NULL : strstr(ms_err_msg(), "the largest that fits is ");
    int w = p ? atoi(p + strlen("the largest that fits is ")) : -1;
    T_CHECK(!e && ms_err_code() == MS_EXIT_BUDGET && w >= 0 && w < MS_SPEC_MAX,
            "a window of %d at a budget just above off's minimum is refused naming the largest that fits: %s",
            MS_SPEC_MAX, e ? "opened" : ms_err_msg());
    ms_engine_free(e);
    if (w < 0) return;
    if (w > 0) {
        x.speculate = w;
        e = open_e(&x);
        T_CHECK(e != NULL, "window %d opens: %s", w, e ? "" : ms_err_msg());
        ms_engine_stats st;
        if (e) ms_engine_get_stats(e, &st);
        T_CHECK(!e || st.spec_window == w, "planned window %d", w);
        ms_engine_free(e);
    }
    x.speculate = w + 1;
    e = open_e(&x);
    T_CHECK(!e && strstr(ms_err_msg(), "the largest that fits is "), "window %d does not: %s", w + 1,
            e ? "opened" : ms_err_msg());
    ms_engine_free(e);
    x.speculate = MS_SPEC_AUTO;
    e = open_e(&x);
    ms_engine_stats st;
    if (e) ms_engine_get_stats(e, &st);
    int want = w < MS_SPEC_AUTO_MAX ? w : MS_SPEC_AUTO_MAX;
    T_CHECK(e && st.spec_window == want, "auto opens with window %d: %s", want, e ? "" : ms_err_msg());
    ms_engine_free(e);
}

/* A sequence of e on prompt pattern pi with the parameters of set k, prefilled (its whole
 * prompt fed); *ok is 0 when that failed. got takes its logits rows. */
static ms_eseq *seq_prefilled(ms_engine *e, int pi, int k, ms_t_record *got, int *ok)
{
    int32_t ids[MAXV + 32];
    size_t np = prompt_of(pi, ids, ms_engine_info(e)->vocab);
    *got = (ms_t_record){.V = ms_engine_info(e)->vocab};
    ms_gen_params p = params_of(k, got);
    ms_eseq *s = ms_engine_seq_new(e, ids, np, &p);
    *ok = s != NULL;
    while (*ok && ms_engine_seq_prefilled(s) < np) *ok = ms_engine_step(e, &s, 1) == 0;
    return s;
}

/* At the smallest budget of window 4 the trunk streams: a decoding pass verifying 4 drafts
 * streams it once, like a pass of one row. */
static void check_one_pass(uint64_t budget)
{
    int pi = 0, k = 0;
    eopts off = {dir, 0, NULL, budget, 0, 1};
    ms_t_record ref;
    if (run_set(&off, 1, &pi, &k, &ref, NULL) != 0) return;
    eopts x = {dir, 4, write_drafts("right.txt", ref.tok, NGEN), budget, 0, 1};
    ms_engine *e = open_e(&x);
    T_CHECK(e != NULL, "window 4 at its minimum budget: %s", e ? "" : ms_err_msg());
    const ms_plan *pl = e ? ms_model_plan(ms_engine_model(e)) : NULL;
    T_CHECK(!e || (pl && pl->streaming), "the trunk streams");
    if (e && pl) {
        ms_t_record got;
        int ok;
        ms_eseq *s = seq_prefilled(e, pi, k, &got, &ok);
        ms_engine_stats a, b;
        ms_engine_get_stats(e, &a);
        size_t n0, n1;
        ms_engine_seq_tokens(s, &n0);
        ok = ok && ms_engine_step(e, &s, 1) == 0;
        ms_engine_get_stats(e, &b);
        ms_engine_seq_tokens(s, &n1);
        T_CHECK(ok && n1 == n0 + 5 && b.passes == a.passes + 1 &&
                    b.model.trunk_bytes_streamed - a.model.trunk_bytes_streamed == pl->streamed_bytes,
                "one pass verifies 4 drafts (%zu tokens) streaming the trunk once (%llu of %llu bytes)", n1 - n0,
                (unsigned long long)(b.model.trunk_bytes_streamed - a.model.trunk_bytes_streamed),
                (unsigned long long)pl->streamed_bytes);
        ms_engine_seq_free(s);
        free(got.rows);
    }
    ms_engine_free(e);
    free(ref.rows);
}

/* auto's opening window with right drafts: the first decoding pass verifies the whole window
 * where the plan streams the trunk (budget: the smallest of window 4, which streams it; auto
 * takes the window that fits), 2 drafts where the trunk is resident (no budget: window 8). */
static void check_auto_opening(uint64_t streaming_budget)
{
    int pi = 0, k = 0;
    eopts off = {dir, 0, NULL, 0, 0, 1};
    ms_t_record ref;
    if (run_set(&off, 1, &pi, &k, &ref, NULL) != 0) return;
    const char *drafts = write_drafts("right-open.txt", ref.tok, NGEN);
    for (int streaming = 0; streaming < 2; streaming++) {
        eopts x = {dir, MS_SPEC_AUTO, drafts, streaming ? streaming_budget : 0, 0, 1};
        ms_engine *e = open_e(&x);
        const ms_plan *pl = e ? ms_model_plan(ms_engine_model(e)) : NULL;
        ms_engine_stats st;
        if (e) ms_engine_get_stats(e, &st);
        T_CHECK(e && pl && pl->streaming == streaming && st.spec_window >= (streaming ? 4 : 8),
                "auto, %s: plan %s, window %d: %s", streaming ? "smallest budget of window 4" : "no budget",
                pl && pl->streaming ? "streams" : "resident", e ? st.spec_window : -1, e ? "" : ms_err_msg());
        if (e && pl) {
            ms_t_record got;
            int ok;
            ms_eseq *s = seq_prefilled(e, pi, k, &got, &ok);
            size_t n0 = 0, n1 = 0;
            if (ok) ms_engine_seq_tokens(s, &n0);
            ok = ok && ms_engine_step(e, &s, 1) == 0;
            if (ok) ms_engine_seq_tokens(s, &n1);
            size_t want = streaming ? 1 + (size_t)st.spec_window : 1 + 2;
            T_CHECK(ok && n1 - n0 == want, "auto, %s: the first decoding pass gives %zu tokens (want %zu)",
                    streaming ? "trunk streamed" : "trunk resident", n1 - n0, want);
            ms_engine_seq_free(s);
            free(got.rows);
        }
        ms_engine_free(e);
    }
    free(ref.rows);
}

/* The scheduler: a stop id in the middle of an accepted window ends the job at that token. */
typedef struct {
    int32_t tok[NGEN];
    size_t n;
    const char *finish;
} sres;

static int on_done(void *ctx, const ms_sched_result *r)
{
    sres *out = ctx;
    sres *o = &out[(intptr_t)r->user];
    o->n = r->n_tokens < NGEN ? r->n_tokens : NGEN;
    memcpy(o->tok, r->tokens, sizeof(int32_t) * o->n);
    o->finish = r->finish;
    return 0;
}

static void sched_run(int spec, const char *drafts, const int32_t *stop, sres *out)
{
    eopts x = {dir, spec, drafts, 0, 0, 3};
    ms_engine *e = open_e(&x);
    T_CHECK(e != NULL, "engine for the scheduler: %s", e ? "" : ms_err_msg());
    if (!e) return;
    ms_sched *s = ms_sched_new(e, 3, on_done, out);
    for (int i = 0; i < 3; i++) {
        int32_t ids[MAXV + 32];
        ms_sched_job j = {0};
        j.n_prompt = prompt_of(i, ids, ms_engine_info(e)->vocab);
        j.prompt = ids;
        j.temperature = i ? 0.9f : 0.0f;
        j.top_p = i == 2 ? 0.7f : 1.0f;
        j.seed = 9 + (uint64_t)i;
        j.max_tokens = i == 1 ? NGEN - 5 : NGEN;
        j.stop_ids = stop ? &stop[i] : NULL;
        j.n_stop_ids = stop ? 1 : 0;
        j.user = (void *)(intptr_t)i;
        ms_sched_add(s, &j);
    }
    while (ms_sched_pending(s))
        if (ms_sched_step(s) != 0) {
            T_CHECK(0, "sched step: %s", ms_err_msg());
            break;
        }
    ms_sched_free(s);
    ms_engine_free(e);
}

static void check_sched(void)
{
    sres ref[3] = {0}, got[3] = {0};
    sched_run(0, NULL, NULL, ref);
    /* stop ids: each job's token 6 (a greedy, a sampled, a top-p job); drafts: job 0's tokens */
    int32_t stop[3];
    for (int i = 0; i < 3; i++) stop[i] = ref[i].tok[6];
    sres refs[3] = {0};
    sched_run(0, NULL, stop, refs);
    for (int i = 0; i < 3; i++)
        T_CHECK(refs[i].finish && !strcmp(refs[i].finish, "stop") && refs[i].n <= 7, "job %d stops by its stop id", i);
    const char *df = write_drafts("sched.txt", ref[0].tok, NGEN);
    for (int spec = MS_SPEC_AUTO; spec <= 8; spec += spec == MS_SPEC_AUTO ? 3 : 4) {
        memset(got, 0, sizeof got);
        sched_run(spec, df, stop, got);
        for (int i = 0; i < 3; i++)
            T_CHECK(got[i].n == refs[i].n && !memcmp(got[i].tok, refs[i].tok, sizeof(int32_t) * refs[i].n) &&
                        got[i].finish && !strcmp(got[i].finish, refs[i].finish),
                    "scheduler, --speculate %d, job %d: stops at the same token (%zu vs %zu tokens)", spec, i, got[i].n,
                    refs[i].n);
        memset(got, 0, sizeof got);
        sched_run(spec, df, NULL, got);
        for (int i = 0; i < 3; i++)
            T_CHECK(got[i].n == ref[i].n && !memcmp(got[i].tok, ref[i].tok, sizeof(int32_t) * ref[i].n) &&
                        got[i].finish && !strcmp(got[i].finish, "length"),
                    "scheduler, --speculate %d, job %d: max_tokens cuts at the same token", spec, i);
    }
}

int main(void)
{
    ms_log_set_level(0);
    tmp = ms_t_tmpdir("spec");
    snprintf(dir, sizeof dir, "%.1000s/m", tmp);
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    T_CHECK(ms_synth_write(dir, &sh, 5) == 0, "synth tiny: %s", ms_err_msg());
    /* every window 1..8 and auto, greedy and sampled; fewer windows for more seeds and the
     * shared checkpoint (the test's time, under the sanitizers too) */
    static const int all[] = {1, 2, 3, 4, 5, 6, 7, 8, 0}, some[] = {1, 3, 8, 0}, ng2[] = {2, 0}, ng1[] = {8};
    for (int k = 0; k < NSET; k++) {
        char what[64];
        snprintf(what, sizeof what, "synth, %s %d", k ? "sampled, seed set" : "greedy", k);
        if (k < 2)
            check_identity(dir, what, k, k, all, 9, ng2, 2);
        else
            check_identity(dir, what, k, k, some, 4, ng1, 1);
    }
    const char *shared = ms_t_shared("fixtures/kimi-k3/checkpoints/tiny-s1234");
    if (shared) {
        char m[1200];
        snprintf(m, sizeof m, "%s", shared);
        check_identity(m, "tiny-s1234, greedy", 1, 0, some, 4, ng1, 1);
        check_identity(m, "tiny-s1234, sampled", 2, 2, some, 4, ng2, 2);
    }
    check_batch("4 sequences together, window 6", 0, 0, 6);
    check_batch("4 sequences together, auto", 0, 0, MS_SPEC_AUTO);
    check_batch("4 sequences, 2 local workers", 0, 2, 4);
    uint64_t b4 = min_budget(4, 4), b1 = min_budget(4, 1);
    T_CHECK(b4 > 0 && b1 > 0, "minimum budgets of window 4 named");
    if (b4) check_batch("4 sequences at the smallest budget of window 4", b4, 0, 4);
    if (b1) check_one_pass(b1);
    if (b1) check_auto_opening(b1);
    check_window_fit();
    check_sched();
    return ms_t_done();
}
