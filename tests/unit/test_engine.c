/* test_engine: batched steps over many sequences equal each sequence run alone, bit for bit,
 * in-process, at the smallest budget and with 1 and 3 local workers; one trunk read per pass. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_engine.h"
#include "ms_err.h"
#include "ms_st.h"
#include "ms_synth.h"
#include "ms_test.h"

#define NSEQ 8
#define NGEN 6

static char dir[1024];

/* Prompt i: length 1 + (5 * i) % 11, ids spread over the vocabulary. */
static size_t prompt_of(int i, int32_t *ids, int64_t V)
{
    size_t n = 1 + (size_t)((5 * i) % 11);
    for (size_t t = 0; t < n; t++) ids[t] = (int32_t)((int64_t)(i * 97 + (int)t * 31 + 3) % V);
    return n;
}

/* Half the sequences greedy, half sampled with their own seeds. */
static ms_gen_params params_of(int i, ms_t_record *r)
{
    ms_gen_params p = {0};
    p.temperature = i % 2 ? 0.9f : 0.0f;
    p.top_p = i % 4 == 3 ? 0.8f : 1.0f;
    p.seed = 1000 + (uint64_t)i;
    p.max_tokens = NGEN;
    p.all_logits = 1;
    p.on_token = ms_t_record_token;
    p.on_logits = ms_t_record_rows;
    p.ctx = r;
    return p;
}

static ms_engine *open_engine(int max_seqs, uint64_t budget, int local_workers)
{
    ms_engine_opts o = {0};
    o.model_dir = dir;
    o.run.n_threads = 2;
    o.run.ram_budget = budget ? budget : 16ull << 30;
    o.run.baseline = 1; /* plans independent of this process's RSS */
    o.run.max_positions = 64;
    o.run.prompt_tokens = 16;
    o.max_seqs = max_seqs;
    o.local_workers = local_workers;
    ms_engine *e = ms_engine_open(&o);
    T_CHECK(e != NULL, "engine opens (max_seqs %d, budget %llu, %d local workers): %s", max_seqs,
            (unsigned long long)budget, local_workers, e ? "" : ms_err_msg());
    return e;
}

/* Sequence i alone, from its own engine: the reference. */
static void run_alone(int i, ms_t_record *r)
{
    ms_engine *e = open_engine(1, 0, 0);
    if (!e) return;
    int32_t ids[16];
    size_t n = prompt_of(i, ids, r->V);
    ms_gen_params p = params_of(i, r);
    ms_eseq *s = ms_engine_seq_new(e, ids, n, &p);
    T_CHECK(s != NULL, "sequence %d alone: %s", i, s ? "" : ms_err_msg());
    while (s && !ms_engine_seq_done(s))
        if (ms_engine_step(e, &s, 1) != 0) {
            T_CHECK(0, "sequence %d alone: step failed: %s", i, ms_err_msg());
            break;
        }
    ms_engine_seq_free(s);
    ms_engine_free(e);
}

/* n sequences in one engine; sequence i joins at step i * stagger, so they sit at different
 * positions and some prefill while others decode. Returns 1 if every ms_t_record equals ref. */
static int run_batched(int n, int stagger, uint64_t budget, int local_workers, const ms_t_record *ref, const char *what)
{
    int64_t V = ref[0].V;
    ms_engine *e = open_engine(n, budget, local_workers);
    if (!e) return 0;
    ms_t_record got[NSEQ];
    ms_eseq *seq[NSEQ] = {0};
    memset(got, 0, sizeof got);
    int ok = 1;
    for (int step = 0, live = 1; live && ok; step++) {
        ms_eseq *act[NSEQ];
        int na = 0;
        live = 0;
        for (int i = 0; i < n; i++) {
            if (!seq[i] && step >= i * stagger) {
                int32_t ids[16];
                size_t np = prompt_of(i, ids, V);
                got[i].V = V;
                ms_gen_params p = params_of(i, &got[i]);
                seq[i] = ms_engine_seq_new(e, ids, np, &p);
                ok &= seq[i] != NULL;
            }
            if (!seq[i] || !ms_engine_seq_done(seq[i])) live = 1;
            if (seq[i] && !ms_engine_seq_done(seq[i])) act[na++] = seq[i];
        }
        if (na && ms_engine_step(e, act, na) != 0) {
            T_CHECK(0, "%s: step %d failed: %s", what, step, ms_err_msg());
            ok = 0;
        }
    }
    for (int i = 0; i < n; i++) {
        int same = ms_t_record_same(&got[i], &ref[i], 0) && ref[i].n_rows > 0;
        T_CHECK(same, "%s: sequence %d: tokens and %lld logits rows bit-identical to running it alone", what, i,
                (long long)ref[i].n_rows);
        ok &= same;
        ms_engine_seq_free(seq[i]);
        free(got[i].rows);
    }
    ms_engine_free(e);
    return ok;
}

/* Route observer: distinct (layer, expert) pairs of the current pass. */
typedef struct {
    unsigned char seen[64][64];
    uint64_t distinct;
} routes;

static void count_routes(void *ctx, int layer, int64_t T, int k, const int32_t *ids)
{
    routes *r = ctx;
    for (int64_t i = 0; i < T * k; i++)
        if (!r->seen[layer][ids[i]]) {
            r->seen[layer][ids[i]] = 1;
            r->distinct++;
        }
}

/* At the smallest budget the trunk streams: a decode pass of 8 sequences reads the same trunk
 * bytes as a pass of one (plus one embedding row per extra sequence), and each routed expert
 * is looked up once per layer per pass whatever the number of rows routed to it. */
static void check_reads_per_pass(uint64_t budget, int64_t V)
{
    ms_engine *e = open_engine(NSEQ, budget, 0);
    if (!e) return;
    const ms_plan *pl = ms_model_plan(ms_engine_model(e));
    T_CHECK(pl && pl->streaming && pl->chunk >= NSEQ, "the budget streams the trunk and a pass holds %d rows", NSEQ);
    ms_eseq *s[NSEQ];
    ms_t_record rec[NSEQ];
    memset(rec, 0, sizeof rec);
    for (int i = 0; i < NSEQ; i++) {
        int32_t ids[16];
        size_t n = prompt_of(i, ids, V);
        rec[i].V = V;
        ms_gen_params p = params_of(i, &rec[i]);
        p.max_tokens = 5;
        s[i] = ms_engine_seq_new(e, ids, n, &p);
    }
    /* prefill everything, then one step of one sequence, one of all 8, one of one again */
    int ok = 1;
    for (int i = 0; ok && i < NSEQ; i++)
        while (ok && ms_engine_seq_prefilled(s[i]) < ms_engine_seq_prompt_len(s[i])) ok = ms_engine_step(e, &s[i], 1) == 0;
    for (int i = 0; i < NSEQ; i++) ok &= ms_engine_seq_prefilled(s[i]) == ms_engine_seq_prompt_len(s[i]);
    T_CHECK(ok, "prefill of %d sequences: %s", NSEQ, ok ? "" : ms_err_msg());
    routes rt;
    ms_model_set_route_observer(ms_engine_model(e), count_routes, &rt);
    uint64_t trunk[3], lookups[3], distinct[3];
    int sizes[3] = {1, NSEQ, 1};
    for (int j = 0; j < 3 && ok; j++) {
        ms_engine_stats a, b;
        memset(&rt, 0, sizeof rt);
        ms_engine_get_stats(e, &a);
        ok = ms_engine_step(e, s, sizes[j]) == 0;
        ms_engine_get_stats(e, &b);
        T_CHECK(ok && b.passes == a.passes + 1, "a decode step of %d sequence(s) is one pass", sizes[j]);
        trunk[j] = b.model.trunk_bytes_streamed - a.model.trunk_bytes_streamed;
        lookups[j] = (b.model.expert_cache_hits + b.model.expert_cache_misses) -
                     (a.model.expert_cache_hits + a.model.expert_cache_misses);
        distinct[j] = rt.distinct;
    }
    if (ok) {
        T_CHECK(trunk[0] == pl->streamed_bytes && trunk[1] == pl->streamed_bytes && trunk[2] == pl->streamed_bytes,
                "every pass streams the unpinned trunk once (%llu bytes): 1 sequence %llu, %d sequences %llu, "
                "1 again %llu",
                (unsigned long long)pl->streamed_bytes, (unsigned long long)trunk[0], NSEQ,
                (unsigned long long)trunk[1], (unsigned long long)trunk[2]);
        for (int j = 0; j < 3; j++)
            T_CHECK(lookups[j] == distinct[j] && distinct[j] > 0,
                    "pass of %d: %llu expert lookups for %llu distinct routed (layer, expert) pairs", sizes[j],
                    (unsigned long long)lookups[j], (unsigned long long)distinct[j]);
        T_CHECK(distinct[1] > distinct[0], "8 rows route to more experts than 1 (%llu > %llu), so the check bites",
                (unsigned long long)distinct[1], (unsigned long long)distinct[0]);
    }
    ms_model_set_route_observer(ms_engine_model(e), NULL, NULL);
    for (int i = 0; i < NSEQ; i++) {
        ms_engine_seq_free(s[i]);
        free(rec[i].rows);
    }
    ms_engine_free(e);
}

/* The smallest budget the planner accepts for NSEQ sequences, from its refusal of 1 byte. */
static uint64_t min_budget(void)
{
    ms_engine_opts o = {0};
    o.model_dir = dir;
    o.run.ram_budget = 1;
    o.run.baseline = 1;
    o.run.max_positions = 64;
    o.run.prompt_tokens = 16;
    o.max_seqs = NSEQ;
    ms_engine *e = ms_engine_open(&o);
    T_CHECK(e == NULL && ms_err_code() == MS_EXIT_BUDGET, "a 1-byte budget is refused (exit class 6): %s",
            ms_err_msg());
    ms_engine_free(e);
    const char *p = strrchr(ms_err_msg(), '(');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

/* Overwrite the first BF16 value of tensor `name` of the checkpoint in d with NaN. */
static int poison(const char *d, const char *name)
{
    ms_st *st = ms_st_open_dir(d);
    const ms_st_tensor *t = st ? ms_st_find(st, name) : NULL;
    int rc = -1;
    if (t && t->dtype == MS_DT_BF16) {
        FILE *f = fopen(ms_st_file_path(st, t->file), "r+b");
        uint16_t nan = 0x7fc0;
        if (f && fseek(f, (long)t->offset, SEEK_SET) == 0 && fwrite(&nan, 2, 1, f) == 1) rc = 0;
        if (f && fclose(f) != 0) rc = -1;
    }
    ms_st_close(st);
    return rc;
}

/* A corrupt trunk weight makes a non-finite hidden state or logit: the step fails naming the
 * layer (or the LM head), and no token is produced from it. */
static void check_nonfinite(const ms_synth_shape *sh)
{
    static const struct {
        const char *tensor, *want;
    } cases[] = {{"language_model.model.layers.0.mlp.down_proj.weight", "layer 0 produced a non-finite hidden state"},
                 {"language_model.lm_head.weight", "non-finite logit"}};
    for (int c = 0; c < 2; c++) {
        char d[1100];
        snprintf(d, sizeof d, "%.1000s/nan%d", ms_t_tmpdir("engine-nan"), c);
        T_CHECK(ms_synth_write(d, sh, 77) == 0 && poison(d, cases[c].tensor) == 0, "poison %s: %s", cases[c].tensor,
                ms_err_msg());
        ms_engine_opts o = {0};
        o.model_dir = d;
        o.run.n_threads = 2;
        o.run.max_positions = 16;
        ms_engine *e = ms_engine_open(&o);
        T_CHECK(e != NULL, "open the poisoned checkpoint: %s", e ? "" : ms_err_msg());
        if (!e) continue;
        int32_t ids[3] = {5, 6, 7};
        ms_t_record r = {.V = sh->vocab};
        ms_gen_params p = params_of(0, &r);
        ms_eseq *s = ms_engine_seq_new(e, ids, 3, &p);
        int rc = s ? ms_engine_step(e, &s, 1) : 0;
        T_CHECK(rc == -1 && strstr(ms_err_msg(), cases[c].want) && r.n_tok == 0,
                "%s poisoned: the step fails with '%s' and no token (got %d: %s)", cases[c].tensor, cases[c].want, rc,
                ms_err_msg());
        ms_engine_seq_free(s);
        ms_engine_free(e);
        free(r.rows);
    }
}

static ms_engine *open_quiet(int max_seqs, int fit_seqs, uint64_t budget)
{
    ms_engine_opts o = {0};
    o.model_dir = dir;
    o.run.n_threads = 2;
    o.run.ram_budget = budget;
    o.run.baseline = 1;
    o.run.max_positions = 64;
    o.run.prompt_tokens = 16;
    o.max_seqs = max_seqs;
    o.fit_seqs = fit_seqs;
    return ms_engine_open(&o);
}

/* At the smallest budget for NSEQ sequences: 2 * NSEQ are refused naming the largest count K
 * that fits (NSEQ <= K < 2 * NSEQ); K opens, K + 1 does not; fit_seqs finds K. */
static void check_fit(uint64_t budget)
{
    ms_engine *e = open_quiet(2 * NSEQ, 0, budget);
    const char *p = e ? NULL : strstr(ms_err_msg(), "the largest batch that fits is ");
    int k = p ? atoi(p + strlen("the largest batch that fits is ")) : 0;
    T_CHECK(!e && ms_err_code() == MS_EXIT_BUDGET && k >= NSEQ && k < 2 * NSEQ,
            "%d sequences at the budget of %d are refused (class 6) naming the largest that fits: %s", 2 * NSEQ, NSEQ,
            e ? "opened" : ms_err_msg());
    ms_engine_free(e);
    if (!k) return;
    e = open_quiet(k, 0, budget);
    T_CHECK(e && ms_engine_max_seqs(e) == k, "%d sequences open: %s", k, e ? "" : ms_err_msg());
    ms_engine_free(e);
    e = open_quiet(k + 1, 0, budget);
    T_CHECK(!e && strstr(ms_err_msg(), "the largest batch that fits is "), "%d sequences do not", k + 1);
    ms_engine_free(e);
    e = open_quiet(0, 2 * NSEQ, budget);
    T_CHECK(e && ms_engine_max_seqs(e) == k, "fit_seqs %d finds %d: %d", 2 * NSEQ, k, e ? ms_engine_max_seqs(e) : -1);
    ms_engine_free(e);
    e = open_quiet(0, 2 * NSEQ, 1);
    T_CHECK(!e && ms_err_code() == MS_EXIT_BUDGET && strstr(ms_err_msg(), "not even one sequence"),
            "fit_seqs with a 1-byte budget is refused: %s", ms_err_msg());
    ms_engine_free(e);
}

static void check_bad_input(void)
{
    ms_engine *e = open_engine(1, 0, 0);
    if (!e) return;
    int32_t bad[2] = {1, (int32_t)ms_engine_info(e)->vocab};
    ms_gen_params p = {0};
    p.max_tokens = 2;
    ms_eseq *s = ms_engine_seq_new(e, bad, 2, &p);
    T_CHECK(s == NULL && ms_err_code() == MS_EXIT_INPUT && strstr(ms_err_msg(), "position 1"),
            "an id outside the vocabulary is refused naming its position: %s", ms_err_msg());
    s = ms_engine_seq_new(e, bad, 0, &p);
    T_CHECK(s == NULL && ms_err_code() == MS_EXIT_INPUT, "an empty prompt is refused: %s", ms_err_msg());
    ms_engine_opts o = {0};
    o.model_dir = dir;
    o.local_workers = 2;
    o.workers = "ipc:///nonexistent";
    ms_engine *e2 = ms_engine_open(&o);
    T_CHECK(e2 == NULL && ms_err_code() == MS_EXIT_USAGE, "two expert sources at once are a usage error: %s",
            ms_err_msg());
    ms_engine_free(e);
}

int main(void)
{
    ms_log_set_level(0); /* no plan lines and worker notes: the checks print what they need */
    const char *t = ms_t_tmpdir("engine");
    snprintf(dir, sizeof dir, "%.1000s/m", t);
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    T_CHECK(ms_synth_write(dir, &sh, 77) == 0, "synth tiny: %s", ms_err_msg());
    int64_t V = sh.vocab;

    ms_t_record ref[NSEQ];
    memset(ref, 0, sizeof ref);
    for (int i = 0; i < NSEQ; i++) {
        ref[i].V = V;
        run_alone(i, &ref[i]);
        T_CHECK(ref[i].n_tok == NGEN, "sequence %d alone generated %zu tokens", i, ref[i].n_tok);
    }
    /* 1..8 sequences at once, joining together or one step apart. */
    for (int n = 1; n <= NSEQ; n++) {
        char what[64];
        snprintf(what, sizeof what, "%d sequences together", n);
        run_batched(n, 0, 0, 0, ref, what);
        snprintf(what, sizeof what, "%d sequences, staggered", n);
        run_batched(n, 1, 0, 0, ref, what);
    }
    uint64_t minb = min_budget();
    T_CHECK(minb > 0, "the refusal names the minimum budget");
    if (minb) run_batched(NSEQ, 2, minb, 0, ref, "8 sequences at the smallest budget (trunk streamed)");
    if (minb) check_reads_per_pass(minb, V);
    if (minb) check_fit(minb);
    run_batched(NSEQ, 1, 0, 1, ref, "8 sequences, 1 local worker");
    run_batched(NSEQ, 1, 0, 3, ref, "8 sequences, 3 local workers");
    run_batched(3, 0, 0, 3, ref, "3 sequences together, 3 local workers");
    check_bad_input();
    check_nonfinite(&sh);
    for (int i = 0; i < NSEQ; i++) free(ref[i].rows);
    return ms_t_done();
}
