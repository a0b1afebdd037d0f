/* test_prefill: prefill spans (passes of prefilling sequences only, longer than a chunk, run layer
 * by layer over all their rows) equal chunked prefill bit for bit, and read each weight once. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "ms_arena.h"
#include "ms_engine.h"
#include "ms_err.h"
#include "ms_synth.h"
#include "ms_test.h"

#define NGEN 3
#define MAXSEQ 3

/* How to run: the budget (0: plenty), the span option (ms_run_opts.max_span), workers. */
typedef struct {
    uint64_t budget;
    int64_t span;
    int local_workers;
    int max_seqs;
    int64_t chunk; /* ms_run_opts.max_chunk; 0: 16 */
    int64_t mixed; /* ms_run_opts.mixed_rows */
    const char *scratch; /* a directory: the scratch file whenever memory cannot hold a span of
                            the longest prompt (scratch_forced); NULL: none */
} how;

static ms_engine *open_engine_quiet(const char *dir, how h, int64_t longest)
{
    ms_engine_opts o = {0};
    o.model_dir = dir;
    o.run.n_threads = 2;
    o.run.ram_budget = h.budget ? h.budget : 16ull << 30;
    o.run.baseline = 1; /* plans independent of this process's RSS */
    o.run.max_positions = longest + NGEN + 1;
    o.run.prompt_tokens = longest;
    o.run.max_chunk = h.chunk > 0 ? h.chunk : 16;
    o.run.max_span = h.span;
    o.run.mixed_rows = h.mixed;
    o.run.scratch_dir = h.scratch ? h.scratch : "off";
    o.run.scratch_forced = h.scratch != NULL;
    o.max_seqs = h.max_seqs > 0 ? h.max_seqs : 1;
    o.local_workers = h.local_workers;
    o.speculate = 0;
    return ms_engine_open(&o);
}

static ms_engine *open_engine(const char *dir, how h, int64_t longest)
{
    ms_engine *e = open_engine_quiet(dir, h, longest);
    T_CHECK(e != NULL, "engine opens (budget %llu, span %lld, %d workers): %s", (unsigned long long)h.budget,
            (long long)h.span, h.local_workers, e ? "" : ms_err_msg());
    return e;
}

/* Prompt i of length n: ids spread over the vocabulary. */
static void prompt_of(int i, int32_t *ids, size_t n, int64_t V)
{
    for (size_t t = 0; t < n; t++) ids[t] = (int32_t)((int64_t)(i * 131 + (int)t * 37 + 5) % V);
}

/* Sequences with prompt lengths len[0..n) run together in one engine (every step all of them),
 * greedy and sampled, every logits row kept. Returns 0, or -1 after a failed check. passes:
 * the forward passes the prefill took (the steps until every prompt was in), st the stats then. */
static int run_set(const char *dir, how h, const size_t *len, int n, ms_t_record *out, uint64_t *passes, ms_engine_stats *st)
{
    int64_t longest = 0;
    for (int i = 0; i < n; i++) longest = (int64_t)len[i] > longest ? (int64_t)len[i] : longest;
    if (h.max_seqs < n) h.max_seqs = n;
    ms_engine *e = open_engine(dir, h, longest);
    if (!e) return -1;
    int64_t V = ms_engine_info(e)->vocab;
    ms_eseq *s[MAXSEQ] = {0};
    int rc = 0;
    for (int i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].V = V;
        int32_t *ids = ms_malloc(sizeof(int32_t) * len[i]);
        prompt_of(i, ids, len[i], V);
        ms_gen_params p = {0};
        p.temperature = i % 2 ? 0.8f : 0.0f;
        p.seed = 7 + (uint64_t)i;
        p.max_tokens = NGEN;
        p.all_logits = 1;
        p.on_token = ms_t_record_token;
        p.on_logits = ms_t_record_rows;
        p.ctx = &out[i];
        s[i] = ms_engine_seq_new(e, ids, len[i], &p);
        free(ids);
        if (!s[i]) rc = -1;
    }
    *passes = 0;
    for (int live = 1; live && rc == 0;) {
        ms_eseq *act[MAXSEQ];
        int na = 0, prefilling = 0;
        for (int i = 0; i < n; i++) {
            if (!ms_engine_seq_done(s[i])) act[na++] = s[i];
            prefilling |= ms_engine_seq_prefilled(s[i]) < ms_engine_seq_prompt_len(s[i]);
        }
        if (!(live = na > 0)) break;
        ms_engine_stats a, b;
        ms_engine_get_stats(e, &a);
        if (ms_engine_step(e, act, na) != 0) {
            T_CHECK(0, "step: %s", ms_err_msg());
            rc = -1;
        }
        ms_engine_get_stats(e, &b);
        if (prefilling) {
            *passes += b.passes - a.passes;
            if (st) *st = b; /* what was read until every prompt was in */
        }
    }
    for (int i = 0; i < n; i++) ms_engine_seq_free(s[i]);
    ms_engine_free(e);
    return rc;
}

static void free_set(ms_t_record *r, int n)
{
    for (int i = 0; i < n; i++) ms_t_record_free(&r[i]);
}

/* The smallest budget the planner accepts, from its refusal of 1 byte. */
static uint64_t min_budget(const char *dir, int64_t longest)
{
    how h = {1, 0, 0, 1};
    ms_engine_opts o = {0};
    o.model_dir = dir;
    o.run.ram_budget = h.budget;
    o.run.baseline = 1;
    o.run.max_positions = longest + NGEN + 1;
    o.run.prompt_tokens = longest;
    o.run.max_chunk = 16;
    o.speculate = 0;
    ms_engine *e = ms_engine_open(&o);
    T_CHECK(e == NULL && ms_err_code() == MS_EXIT_BUDGET, "a 1-byte budget is refused: %s", ms_err_msg());
    ms_engine_free(e);
    const char *p = strrchr(ms_err_msg(), '(');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}


/* The least budget from minb up (in steps of minb / 1024) whose plan for a 70-token prompt, spans
 * of 70 asked for, lends the pinned trunk to one span of it (pins 1; the plan's estimate keeps the
 * pins of these tiny models, whose experts are cheap to read), or whose own span is shorter than the prompt but longer than a
 * chunk (pins 0: several spans). 0 if none up to twice minb. */
static uint64_t budget_where(const char *dir, uint64_t minb, int pins)
{
    int level = ms_log_level();
    ms_log_set_level(0);
    uint64_t found = 0;
    for (uint64_t b = minb; b < 2 * minb && !found; b += minb / 1024) {
        how h = {b, pins ? 70 : 0, 0, 1};
        ms_engine *e = open_engine(dir, h, 70);
        const ms_plan *p = e ? ms_model_plan(ms_engine_model(e)) : NULL;
        if (p && (pins ? p->span_pins && p->span >= 70 : p->span > p->chunk && p->span < 70)) found = b;
        ms_engine_free(e);
    }
    ms_log_set_level(level);
    return found;
}

/* Spans = chunks for one family's model in dir: single prompts that end inside a chunk and a
 * window, spans forced shorter than the prompt (several spans, ending mid-chunk), the planned
 * span at budgets from the least that runs to plenty, a batch of prompts of three lengths, and
 * a prompt continued from a state (as the prefix cache restores one). */
static void check_family(const char *what, const char *dir)
{
    const size_t one[1] = {70}, three[3] = {41, 70, 9};
    ms_t_record ref[MAXSEQ], got[MAXSEQ];
    memset(ref, 0, sizeof ref);
    memset(got, 0, sizeof got);
    uint64_t np_ref, np;
    ms_engine_stats st;
    how chunks = {0, -1, 0, 1};
    if (run_set(dir, chunks, one, 1, ref, &np_ref, NULL) != 0) return;
    T_CHECK(np_ref == (70 + 15) / 16, "%s: span off: 70 prompt tokens in %llu chunks of 16", what,
            (unsigned long long)np_ref);
    uint64_t minb = min_budget(dir, 70);
    T_CHECK(minb > 0, "%s: the refusal names the least budget", what);
    /* budgets: the least that runs, one where spans are shorter than the prompt, one where they
     * lend the pinned trunk, twice and eight times the least, plenty */
    uint64_t several = budget_where(dir, minb, 0), pins = budget_where(dir, minb, 1);
    T_CHECK(several && pins, "%s: budgets found where the 70 tokens take several spans (%llu) and where spans lend the "
            "pinned trunk (%llu)", what, (unsigned long long)several, (unsigned long long)pins);
    uint64_t budgets[6] = {minb, several, pins, 2 * minb, 8 * minb, 0};
    for (int b = 0; b < 6; b++) {
        if (b > 0 && b < 3 && !budgets[b]) continue;
        how h = {budgets[b], b == 2 ? 70 : 0, 0, 1};
        if (run_set(dir, h, one, 1, got, &np, &st) == 0) {
            T_CHECK(ms_t_record_same(&ref[0], &got[0], 0) && (b != 1 || np > 1) && (b != 2 || np == 1),
                    "%s: budget %llu: spans = chunks, every logits row and token (%llu passes)", what,
                    (unsigned long long)budgets[b], (unsigned long long)np);
        }
        free_set(got, 1);
    }
    /* plenty of memory: the cache holds every expert, so chunks read no more than a span and the
     * plan keeps them (a span would empty the cache); asked for, spans of the whole prompt */
    how hp = {0, 1000, 0, 1};
    if (run_set(dir, hp, one, 1, got, &np, NULL) == 0)
        T_CHECK(ms_t_record_same(&ref[0], &got[0], 0) && np == 1,
                "%s: plenty of memory, spans asked for: the 70 tokens in one span = chunks (%llu passes)", what,
                (unsigned long long)np);
    free_set(got, 1);
    /* spans forced shorter than the prompt: 23, 23, 23, 1 rows, ending mid-chunk */
    how h23 = {0, 23, 0, 1};
    if (run_set(dir, h23, one, 1, got, &np, NULL) == 0)
        T_CHECK(ms_t_record_same(&ref[0], &got[0], 0) && np == 4, "%s: spans of 23 = chunks (%llu passes)", what, (unsigned long long)np);
    free_set(got, 1);
    free_set(ref, 1);
    /* a batch of prompts of different lengths prefilled together, spans vs chunks */
    if (run_set(dir, chunks, three, 3, ref + 0, &np_ref, NULL) == 0) {
        how hb = {0, 1000, 0, 3};
        if (run_set(dir, hb, three, 3, got, &np, NULL) == 0) {
            int ok = 1;
            for (int i = 0; i < 3; i++) ok &= ms_t_record_same(&ref[i], &got[i], 0);
            T_CHECK(ok && np == 1, "%s: 3 prompts (41, 70, 9 tokens) prefilled together in %llu span(s) = chunks "
                    "(%llu passes)", what, (unsigned long long)np, (unsigned long long)np_ref);
        }
        free_set(got, 3);
    }
    free_set(ref, 3);
    /* a prompt longer than the attention's query tiles (128 rows): one span of 300 = chunks */
    const size_t long1[1] = {300};
    if (run_set(dir, chunks, long1, 1, ref, &np_ref, NULL) == 0) {
        if (run_set(dir, hp, long1, 1, got, &np, NULL) == 0)
            T_CHECK(ms_t_record_same(&ref[0], &got[0], 0) && np == 1,
                    "%s: 300 prompt tokens in one span (attention by tiles of rows) = chunks (%llu passes)", what,
                    (unsigned long long)np);
        free_set(got, 1);
    }
    free_set(ref, 1);
}

/* A state continued with a span: the first 30 tokens in chunks, saved and loaded (what the prefix
 * cache restores), the other 40 in one span: the same rows as the 70 in chunks. */
static void check_continue(const char *what, const char *dir)
{
    how chunks = {0, -1, 0, 1}, spans = {0, 1000, 0, 1};
    ms_engine *e = open_engine(dir, chunks, 70);
    ms_engine *f = open_engine(dir, spans, 70);
    if (!e || !f) {
        ms_engine_free(e);
        ms_engine_free(f);
        return;
    }
    int64_t V = ms_engine_info(e)->vocab;
    int32_t ids[70];
    prompt_of(0, ids, 70, V);
    ms_t_record a = {0}, b = {0};
    a.V = b.V = V;
    ms_gen_params p = {0};
    p.max_tokens = NGEN;
    p.all_logits = 1;
    p.on_token = ms_t_record_token;
    p.on_logits = ms_t_record_rows;
    p.ctx = &a;
    ms_eseq *s = ms_engine_seq_new(e, ids, 70, &p);
    while (s && !ms_engine_seq_done(s) && ms_engine_step(e, &s, 1) == 0) {}
    /* the first 30 tokens, then the state moved to the span engine */
    ms_gen_params q = p;
    q.max_tokens = 1;
    q.all_logits = 0;
    q.on_token = NULL;
    q.on_logits = NULL;
    ms_eseq *h = ms_engine_seq_new(e, ids, 30, &q);
    while (h && ms_engine_seq_prefilled(h) < 30 && ms_engine_step(e, &h, 1) == 0) {}
    ms_sbuf buf = {0};
    if (h) ms_seq_save(ms_engine_seq_state(h), &buf);
    ms_seq *state = buf.n ? ms_seq_load(ms_engine_model(f), buf.s, buf.n) : NULL;
    p.ctx = &b;
    ms_eseq *c = state ? ms_engine_seq_continue(f, state, ids + 30, 40, &p) : NULL;
    ms_engine_stats s0, s1;
    ms_engine_get_stats(f, &s0);
    uint64_t passes = 0;
    while (c && !ms_engine_seq_done(c)) {
        int pre = ms_engine_seq_prefilled(c) < ms_engine_seq_prompt_len(c);
        if (ms_engine_step(f, &c, 1) != 0) break;
        ms_engine_get_stats(f, &s1);
        if (pre) passes = s1.passes - s0.passes;
    }
    T_CHECK(c && b.n_rows == 40 + NGEN - 1 && passes == 1 &&
                !memcmp(a.rows + 30 * V, b.rows, sizeof(float) * (size_t)(b.n_rows * V)) && !memcmp(a.tok, b.tok, sizeof a.tok),
            "%s: 30 tokens restored from a saved state, 40 in one span: the rows of the whole prompt in chunks", what);
    ms_sbuf_free(&buf);
    ms_engine_seq_free(s);
    ms_engine_seq_free(h);
    ms_engine_seq_free(c);
    free(a.rows);
    free(b.rows);
    ms_engine_free(e);
    ms_engine_free(f);
}

/* Bytes, at two budgets: plenty (the trunk pinned) and the tight one where spans lend the pinned
 * trunk (it streams for the span). One span of the whole prompt reads every routed expert at most
 * once and the trunk at most once: at most the checkpoint's bytes (besides predicted reads no
 * layer used), where chunks read the unpinned trunk and their experts again for every chunk. */
static void check_bytes(const char *what, const char *dir, uint64_t ckpt_bytes, int moe_experts)
{
    const size_t one[1] = {70};
    uint64_t minb = min_budget(dir, 70), tight = budget_where(dir, minb, 1);
    uint64_t budgets[2] = {8 * minb, tight};
    for (int b = 0; b < 2 && budgets[b]; b++) {
        ms_t_record r[1];
        memset(r, 0, sizeof r);
        uint64_t np, npc;
        ms_engine_stats sc, ss;
        /* spans asked for: at plenty the plan would keep chunks, at the tight one the pins */
        how hc = {budgets[b], -1, 0, 1}, hs = {budgets[b], b == 0 ? 1000 : 70, 0, 1};
        int ok = run_set(dir, hc, one, 1, r, &npc, &sc) == 0;
        free_set(r, 1);
        ok = ok && run_set(dir, hs, one, 1, r, &np, &ss) == 0;
        free_set(r, 1);
        if (!ok) return;
        /* what the prefill read after load */
        uint64_t rc = sc.model.bytes_read_experts + sc.model.bytes_read_trunk;
        uint64_t rs = ss.model.bytes_read_experts + ss.model.bytes_read_trunk;
        uint64_t unused = (ss.model.expert_prefetched - ss.model.expert_prefetch_used) * ss.model.expert_bytes;
        T_CHECK(np == 1 && rs - unused <= ckpt_bytes,
                "%s, budget %llu: one span reads at most the checkpoint once for the prompt: %llu bytes (checkpoint "
                "%llu)", what, (unsigned long long)budgets[b], (unsigned long long)(rs - unused),
                (unsigned long long)ckpt_bytes);
        T_CHECK(ss.model.expert_cache_misses <= (uint64_t)moe_experts,
                "%s, budget %llu: the span reads each routed expert at most once (%llu reads, %d experts in MoE "
                "layers)", what, (unsigned long long)budgets[b], (unsigned long long)ss.model.expert_cache_misses,
                moe_experts);
        /* plenty: the cache holds every expert, so chunks read each once too; tight: these tiny
         * experts are cheap next to the trunk the lent pins stream (why the plan keeps the pins
         * unless asked; test_plan checks its choice on real widths) */
        if (b == 0)
            T_CHECK(npc == 5 && rs <= rc, "%s, budget %llu: the span reads at most what 5 chunks do (%llu, %llu bytes)",
                    what, (unsigned long long)budgets[b], (unsigned long long)rs, (unsigned long long)rc);
        if (b == 1)
            T_CHECK(ss.model.trunk_bytes_streamed > 0 && sc.model.trunk_bytes_streamed == 0,
                    "%s: lent, the pinned trunk streams for the span (%llu bytes; chunks stream %llu)", what,
                    (unsigned long long)ss.model.trunk_bytes_streamed, (unsigned long long)sc.model.trunk_bytes_streamed);
    }
}

/* With local workers the cache is theirs, so a span borrows only the spare and the pins: asked
 * for, one span of the whole prompt, every bit the same as chunks in one process, and each worker
 * gets one request per MoE layer (a layer's rows for its experts once) where chunks send one per
 * chunk. */
static void check_workers(const char *what, const char *dir, int moe_layers)
{
    const size_t one[1] = {70};
    ms_t_record ref[1], got[1];
    memset(ref, 0, sizeof ref);
    memset(got, 0, sizeof got);
    uint64_t np_ref, np;
    ms_engine_stats st;
    how chunks = {0, -1, 0, 1};
    if (run_set(dir, chunks, one, 1, ref, &np_ref, NULL) != 0) return;
    for (int w = 1; w <= 3; w += 2) {
        how h = {0, 1000, w, 1};
        if (run_set(dir, h, one, 1, got, &np, &st) == 0)
            T_CHECK(ms_t_record_same(&ref[0], &got[0], 0) && np == 1 && st.remote.requests > 0 &&
                        st.remote.requests <= (uint64_t)(moe_layers * w),
                    "%s: %d local worker(s), spans: the same rows and tokens in %llu pass(es), %llu requests to the "
                    "workers for %d MoE layers", what, w, (unsigned long long)np, (unsigned long long)st.remote.requests,
                    moe_layers);
        free_set(got, 1);
        how hc = {0, -1, w, 1};
        if (run_set(dir, hc, one, 1, got, &np, &st) == 0)
            T_CHECK(ms_t_record_same(&ref[0], &got[0], 0) && np == np_ref && st.remote.requests > (uint64_t)moe_layers,
                    "%s: %d local worker(s), chunks: the same rows and tokens (%llu passes, %llu requests)", what, w,
                    (unsigned long long)np, (unsigned long long)st.remote.requests);
        free_set(got, 1);
    }
    free_set(ref, 1);
    /* a span of 600 rows: enough items that the workers' outputs are placed in grouped order */
    const size_t long1[1] = {600};
    if (run_set(dir, (how){0, -1, 0, 1}, long1, 1, ref, &np_ref, NULL) == 0) {
        how h = {0, 1000, 3, 1};
        if (run_set(dir, h, long1, 1, got, &np, &st) == 0)
            T_CHECK(ms_t_record_same(&ref[0], &got[0], 0) && np == 1 && st.remote.requests > 0,
                    "%s: 3 local workers, one span of 600 rows (outputs placed by expert) = chunks in one process (%llu "
                    "pass, %llu requests)", what, (unsigned long long)np, (unsigned long long)st.remote.requests);
        free_set(got, 1);
    }
    free_set(ref, 1);
}

/* One sequence from prompt i of len tokens, greedy, max_tokens, every row recorded into r. */
static ms_eseq *seq_of(ms_engine *e, int i, size_t len, int max_tokens, ms_t_record *r)
{
    int32_t ids[64];
    MS_ASSERT(len <= 64);
    prompt_of(i, ids, len, ms_engine_info(e)->vocab);
    memset(r, 0, sizeof *r);
    r->V = ms_engine_info(e)->vocab;
    ms_gen_params p = {0};
    p.max_tokens = max_tokens;
    p.all_logits = 1;
    p.on_token = ms_t_record_token;
    p.on_logits = ms_t_record_rows;
    p.ctx = r;
    return ms_engine_seq_new(e, ids, len, &p);
}

/* A prompt arriving while another sequence decodes (what serve and jobs do): the passes that
 * carry both take chunks, or asked (--prefill-mixed auto) the plan's mixed rows, longer than a
 * chunk; either keeps the pinned trunk, and both sequences get the rows and tokens they get
 * alone. Chunks of 2 rows, so that the tiny models' mixed rows (those touching 9/10 of a layer's
 * experts) are longer. */
static void check_mixed(const char *what, const char *dir)
{
    enum { LA = 5, LB = 40, NA = 44, LONG = LA + NA }; /* a decodes all through b's prefill, in chunks too */
    ms_t_record ra, rb, ga, gb;
    uint64_t minb = min_budget(dir, LONG), found = 0;
    int level = ms_log_level();
    ms_log_set_level(0);
    for (uint64_t b = minb; b < 4 * minb && !found; b += minb / 256) {
        how h = {b, 0, 0, 2, 2, -1};
        ms_engine *e = open_engine_quiet(dir, h, LONG); /* the least budgets hold one sequence only */
        if (e && ms_model_mix_rows(ms_engine_model(e)) > ms_model_chunk(ms_engine_model(e)) + 1) found = b;
        ms_engine_free(e);
    }
    ms_log_set_level(level);
    T_CHECK(found, "%s: a budget found where a pass beside a decoding sequence takes more rows than a chunk", what);
    if (!found) return;
    /* alone, in chunks */
    how solo = {0, -1, 0, 1, 2};
    ms_engine *e = open_engine(dir, solo, LONG);
    if (!e) return;
    ms_eseq *a = seq_of(e, 1, LA, NA, &ra), *b = seq_of(e, 0, LB, NGEN, &rb);
    while (a && !ms_engine_seq_done(a) && ms_engine_step(e, &a, 1) == 0) {}
    while (b && !ms_engine_seq_done(b) && ms_engine_step(e, &b, 1) == 0) {}
    ms_engine_seq_free(a);
    ms_engine_seq_free(b);
    ms_engine_free(e);
    /* together: b arrives once a has its first token; --prefill-mixed off (chunks), then auto */
    for (int asked = 0; asked < 2; asked++) {
        how mixed = {found, 0, 0, 2, 2, asked ? -1 : 0};
        e = open_engine(dir, mixed, LONG);
        if (!e) break;
        const ms_plan *pl = ms_model_plan(ms_engine_model(e));
        int64_t mix = ms_model_mix_rows(ms_engine_model(e)), chunk = ms_model_chunk(ms_engine_model(e));
        a = seq_of(e, 1, LA, NA, &ga);
        while (a && ga.n_tok < 1 && ms_engine_step(e, &a, 1) == 0) {}
        b = seq_of(e, 0, LB, NGEN, &gb);
        ms_engine_stats s0, s1;
        ms_engine_get_stats(e, &s0);
        uint64_t passes = 0, trunk = 0;
        int ok = a && b;
        while (ok && (!ms_engine_seq_done(a) || !ms_engine_seq_done(b))) {
            ms_eseq *act[2];
            int na = 0, pre = ms_engine_seq_prefilled(b) < LB;
            if (!ms_engine_seq_done(a)) act[na++] = a;
            if (!ms_engine_seq_done(b)) act[na++] = b;
            ok = ms_engine_step(e, act, na) == 0;
            ms_engine_get_stats(e, &s1);
            if (pre) {
                passes = s1.passes - s0.passes;
                trunk = s1.model.bytes_read_trunk - s0.model.bytes_read_trunk;
            }
        }
        uint64_t want = (uint64_t)((LB + mix - 2) / (mix - 1)); /* a's row and mix - 1 of b's a pass */
        T_CHECK(ok && ms_t_record_same(&ra, &ga, 0) && ms_t_record_same(&rb, &gb, 0) && passes == want &&
                    (asked ? mix > chunk + 1 : mix == chunk),
                "%s: budget %llu, mixed %s: a %d-token prompt beside a decoding sequence in %llu passes of %lld rows "
                "(chunks of %lld): both sequences' rows and tokens as alone", what, (unsigned long long)found,
                asked ? "auto" : "off", LB, (unsigned long long)passes, (long long)mix, (long long)chunk);
        /* lent, the pins would stream with every pass and be read again after: more than this */
        T_CHECK(pl->pinned_bytes > 0 && trunk < passes * pl->streamed_bytes + pl->pinned_bytes,
                "%s: the pinned trunk stays pinned beside a decoding sequence (%llu trunk bytes read in %llu passes, "
                "%llu streamed a pass, %llu pinned%s)", what, (unsigned long long)trunk, (unsigned long long)passes,
                (unsigned long long)pl->streamed_bytes, (unsigned long long)pl->pinned_bytes,
                pl->span_pins ? ", lent to prefill-only spans" : "");
        ms_engine_seq_free(a);
        ms_engine_seq_free(b);
        ms_engine_free(e);
        ms_t_record_free(&ga);
        ms_t_record_free(&gb);
    }
    ms_t_record_free(&ra);
    ms_t_record_free(&rb);
}

static uint64_t dir_bytes(const char *dir)
{
    char cmd[1200], *out = NULL;
    snprintf(cmd, sizeof cmd, "du -sb --apparent-size %s/*.safetensors | awk '{s += $1} END {print s}'", dir);
    uint64_t n = ms_t_run(cmd, &out) == 0 && out ? strtoull(out, NULL, 10) : 0;
    free(out);
    return n;
}

/* Routed experts in the model's MoE layers (per_layer: 1, the MoE layers instead). */
static int moe_experts(const char *dir, int per_layer)
{
    how h = {0, 0, 0, 1};
    ms_engine *e = open_engine(dir, h, 8);
    const ms_model_info *in = e ? ms_engine_info(e) : NULL;
    int n = in ? (in->n_layers - in->first_moe) * (per_layer ? 1 : in->n_experts) : 0;
    ms_engine_free(e);
    return n;
}

/* The planned span of the longest prompt in a scratch file (spans memory cannot hold): a 70-token
 * prompt at the least budget that runs (memory holds a chunk), at one where memory holds a span
 * shorter than the prompt (the file's span lends the pinned trunk there), and a batch of three lengths: one pass, every logits row and token those of
 * chunks. Then a file that cannot be written (a file size limit of 4 KiB): the step fails with
 * MS_EXIT_IO naming the directory, and once the limit is lifted the same sequence goes on and
 * its rows are still those of chunks. */
static void check_scratch(const char *what, const char *dir, const char *sdir)
{
    const size_t one[1] = {70}, three[3] = {41, 70, 9};
    ms_t_record ref[MAXSEQ], got[MAXSEQ];
    memset(ref, 0, sizeof ref);
    memset(got, 0, sizeof got);
    uint64_t np_ref, np, minb = min_budget(dir, 70);
    how chunks = {0, -1, 0, 1};
    if (run_set(dir, chunks, one, 1, ref, &np_ref, NULL) != 0) return;
    uint64_t budgets[2] = {minb, budget_where(dir, minb, 0)};
    for (int b = 0; b < 2; b++) {
        how h = {budgets[b], 0, 0, 1};
        h.scratch = sdir;
        ms_engine *e = open_engine(dir, h, 70);
        const ms_plan *p = e ? ms_model_plan(ms_engine_model(e)) : NULL;
        /* at the second budget the plan lends the pins too (mode 4), at the least it cannot */
        int used = p && p->scratch && p->span == 70 && p->span_in_memory < 70 && (b != 1 || p->scratch_pins);
        ms_engine_free(e);
        if (run_set(dir, h, one, 1, got, &np, NULL) == 0)
            T_CHECK(used && np == 1 && ms_t_record_same(&ref[0], &got[0], 0),
                    "%s: budget %llu: one span of 70 in a scratch file (planned %d; lending the pins at the second) = "
                    "chunks (%llu passes)", what,
                    (unsigned long long)h.budget, used, (unsigned long long)np);
        free_set(got, 1);
    }
    free_set(ref, 1);
    if (run_set(dir, chunks, three, 3, ref, &np_ref, NULL) == 0) {
        how hb = {budgets[1], 0, 0, 3};
        hb.scratch = sdir;
        if (run_set(dir, hb, three, 3, got, &np, NULL) == 0) {
            int ok = 1;
            for (int i = 0; i < 3; i++) ok &= ms_t_record_same(&ref[i], &got[i], 0);
            T_CHECK(ok && np == 1, "%s: 3 prompts (41, 70, 9) in one span in a scratch file = chunks (%llu passes)", what,
                    (unsigned long long)np);
        }
        free_set(got, 3);
    }
    free_set(ref, 3);
    /* 900 rows at the least budget: the trunk streams in chunks and each chunk's matmul walks the
     * span's three token tiles, forward for one chunk and backward for the next (what keeps a
     * file larger than its window from being read again whole for every chunk) */
    const size_t long1[1] = {900};
    if (run_set(dir, chunks, long1, 1, ref, &np_ref, NULL) == 0) {
        how hl = {min_budget(dir, 900), 0, 0, 1};
        hl.scratch = sdir;
        ms_engine_stats st;
        if (run_set(dir, hl, long1, 1, got, &np, &st) == 0)
            T_CHECK(np == 1 && st.model.trunk_bytes_streamed > 0 && ms_t_record_same(&ref[0], &got[0], 0),
                    "%s: 900 tokens at the least budget in one span in a scratch file, the trunk streamed (%llu "
                    "bytes) = chunks (%llu passes)", what, (unsigned long long)st.model.trunk_bytes_streamed,
                    (unsigned long long)np);
        free_set(got, 1);
    }
    free_set(ref, 1);

    /* the file cannot be written */
    if (run_set(dir, chunks, one, 1, ref, &np_ref, NULL) != 0) return;
    how h = {minb, 0, 0, 1};
    h.scratch = sdir;
    ms_engine *e = open_engine(dir, h, 70);
    if (!e) return;
    int64_t V = ms_engine_info(e)->vocab;
    int32_t ids[70];
    prompt_of(0, ids, 70, V);
    ms_gen_params gp = {0};
    gp.max_tokens = NGEN;
    gp.all_logits = 1;
    gp.on_token = ms_t_record_token;
    gp.on_logits = ms_t_record_rows;
    gp.ctx = &got[0];
    got[0].V = V;
    ms_eseq *s = ms_engine_seq_new(e, ids, 70, &gp);
    struct rlimit was, small;
    getrlimit(RLIMIT_FSIZE, &was);
    small = was;
    small.rlim_cur = 4096;
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &small);
    int rc = ms_engine_step(e, &s, 1);
    setrlimit(RLIMIT_FSIZE, &was);
    T_CHECK(rc != 0 && ms_err_code() == MS_EXIT_IO && strstr(ms_err_msg(), sdir) && ms_engine_seq_prefilled(s) == 0,
            "%s: a scratch file that cannot be written: the step fails with exit 4 naming %s, nothing prefilled (%s)",
            what, sdir, ms_err_msg());
    ms_err_clear();
    while (s && !ms_engine_seq_done(s))
        if (ms_engine_step(e, &s, 1) != 0) {
            T_CHECK(0, "%s: the step after the failed one: %s", what, ms_err_msg());
            break;
        }
    T_CHECK(ms_t_record_same(&ref[0], &got[0], 0), "%s: the same sequence, its file writable again: the rows of chunks",
            what);
    ms_engine_seq_free(s);
    ms_engine_free(e);
    free_set(got, 1);
    free_set(ref, 1);
}

/* A directory on disk for scratch files (the working directory's, not /tmp, which may be in
 * memory), or NULL after a visible skip. */
static const char *scratch_dir(void)
{
    static char d[4200];
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) return NULL;
    snprintf(d, sizeof d, "%s/prefill-scratch", cwd);
    mkdir(d, 0700);
    if (!ms_arena_dir_on_disk(d)) {
        ms_t_skip("scratch files: %s", ms_err_msg());
        return NULL;
    }
    return d;
}

int main(void)
{
    char k3[1024], go[1024];
    ms_synth_shape sh;
    if (ms_t_synth_tiny("prefill-k3", 11, k3, sizeof k3, &sh) != 0) return ms_t_done();
    snprintf(go, sizeof go, "%s/m", ms_t_tmpdir("prefill-gptoss"));
    T_CHECK(ms_t_runf(NULL, NULL, "%s synth --preset gpt-oss-tiny --out %s --force", ms_t_bin("moestream"), go) == 0,
            "synth gpt-oss-tiny");
    check_family("K3", k3);
    check_family("gpt-oss", go);
    check_continue("K3", k3);
    check_continue("gpt-oss", go);
    check_mixed("K3", k3);
    check_mixed("gpt-oss", go);
    check_bytes("K3", k3, dir_bytes(k3), moe_experts(k3, 0));
    check_bytes("gpt-oss", go, dir_bytes(go), moe_experts(go, 0));
    check_workers("K3", k3, moe_experts(k3, 1));
    check_workers("gpt-oss", go, moe_experts(go, 1));
    const char *sd = scratch_dir();
    ms_arena_zero_min = 4096; /* every reset of a file's piece gives it back: covered by the spans = chunks checks */
    if (sd) {
        check_scratch("K3", k3, sd);
        check_scratch("gpt-oss", go, sd);
        rmdir(sd);
    }
    return ms_t_done();
}
