/* test_plan: the RAM budget planner's arithmetic on its own (ms_plan_make), every expected number
 * worked out by hand in the comments from the rules of ms_plan.h:
 *   fixed  = baseline + state + work_fixed + work_per_token * chunk + expert_fixed + slack
 *            (+ ring when streaming), slack = 24 MiB + budget / 100;
 *   chunk  = min(prompt_tokens, max_chunk) (at least min_chunk, at least 1), halved (rounding down,
 *            never below that floor) until fixed + min_cache + (whole trunk, or else the ring) fits;
 *   the minimum cache is set aside, then the whole trunk is pinned if it fits, otherwise the ring
 *   is paid and the longest prefix of whole matrices in forward order that fits is pinned;
 *   cache  = what is left (plus the minimum) in whole expert slots, at most max_slots;
 *   a budget below the fixed costs at the floor chunk is refused (MS_EXIT_BUDGET) naming the
 *   minimum. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_plan.h"
#include "ms_test.h"

#define M (1ull << 20)

/* Budgets below are whole multiples of 100 MiB so that the slack is a whole number of MiB. */
static uint64_t slack(uint64_t budget) { return 24 * M + budget / 100; }

/* The run every case starts from (sizes in MiB):
 *   baseline 100, state 50, work_fixed 10, work_per_token 1, expert_fixed 20 -> 180 + chunk;
 *   one expert slot 16, minimum cache 8 slots = 128;
 *   trunk 10, 20, 30, 200, 5 = 265 in forward order; ring 40. */
static const uint64_t trunk5[5] = {10 * M, 20 * M, 30 * M, 200 * M, 5 * M};

static ms_plan_in base_in(uint64_t budget)
{
    ms_plan_in in;
    memset(&in, 0, sizeof in);
    in.budget = budget;
    in.baseline = 100 * M;
    in.state = 50 * M;
    in.work_fixed = 10 * M;
    in.work_per_token = 1 * M;
    in.prompt_tokens = 100;
    in.max_chunk = 64;
    in.expert_fixed = 20 * M;
    in.expert_bytes = 16 * M;
    in.min_cache = 8 * 16 * M;
    in.max_slots = 0;
    in.trunk = trunk5;
    in.n_trunk = 5;
    in.ring = 40 * M;
    return in;
}

/* Invariants of every accepted plan: the parts add up and stay within the budget. */
static void check_invariants(const char *what, const ms_plan *p)
{
    uint64_t trunk = 0, pinned = 0;
    for (int i = 0; i < p->in.n_trunk; i++) trunk += p->in.trunk[i];
    for (int i = 0; i < p->n_pinned; i++) pinned += p->in.trunk[i];
    T_CHECK(p->pinned_bytes == pinned, "%s: pinned bytes are the first %d matrices", what, p->n_pinned);
    T_CHECK(p->pinned_bytes + p->streamed_bytes == trunk, "%s: pinned + streamed = trunk", what);
    T_CHECK(p->streaming == (p->n_pinned < p->in.n_trunk), "%s: streaming iff some matrix is not pinned", what);
    T_CHECK(p->cache == p->cache_slots * p->in.expert_bytes, "%s: cache = slots * slot size", what);
    T_CHECK(p->fixed + p->pinned_bytes + p->cache <= p->in.budget, "%s: fixed %llu + pinned %llu + cache %llu <= %llu",
            what, (unsigned long long)p->fixed, (unsigned long long)p->pinned_bytes, (unsigned long long)p->cache,
            (unsigned long long)p->in.budget);
    T_CHECK(p->chunk <= p->mix && p->mix <= p->span_keeping_pins && p->span_keeping_pins <= p->span,
            "%s: chunk %lld <= mixed %lld <= span keeping the pins %lld <= span %lld", what, (long long)p->chunk,
            (long long)p->mix, (long long)p->span_keeping_pins, (long long)p->span);
}

static void expect_plan(const char *what, const ms_plan_in *in, int64_t chunk, uint64_t fixed, int n_pinned,
                        int streaming, uint64_t slots)
{
    ms_plan p;
    int rc = ms_plan_make(in, &p);
    T_CHECK(rc == 0, "%s: accepted (%s)", what, rc ? ms_err_msg() : "ok");
    if (rc) return;
    T_CHECK(p.margin == slack(in->budget), "%s: slack %llu, want 24 MiB + 1%%", what, (unsigned long long)p.margin);
    T_CHECK(p.chunk == chunk, "%s: chunk %lld, want %lld", what, (long long)p.chunk, (long long)chunk);
    T_CHECK(p.fixed == fixed, "%s: fixed %.3f MiB, want %.3f MiB", what, (double)p.fixed / M, (double)fixed / M);
    T_CHECK(p.n_pinned == n_pinned, "%s: %d matrices pinned, want %d", what, p.n_pinned, n_pinned);
    T_CHECK(p.streaming == streaming, "%s: streaming %d, want %d", what, p.streaming, streaming);
    T_CHECK(p.cache_slots == slots, "%s: %llu cache slots, want %llu", what, (unsigned long long)p.cache_slots,
            (unsigned long long)slots);
    check_invariants(what, &p);
    /* The JSON form reports the same numbers, the ring only when it is used. */
    json_t *j = ms_plan_json(&p);
    T_CHECK(j && (uint64_t)json_integer_value(json_object_get(j, "fixed_bytes")) == fixed &&
                json_integer_value(json_object_get(j, "prefill_chunk")) == chunk &&
                (uint64_t)json_integer_value(json_object_get(j, "ring_bytes")) == (streaming ? in->ring : 0) &&
                json_is_true(json_object_get(j, "streaming")) == streaming &&
                (uint64_t)json_integer_value(json_object_get(j, "expert_cache_slots")) == slots,
            "%s: ms_plan_json agrees", what);
    json_decref(j);
}

static void test_everything_pinned(void)
{
    /* budget 1000: slack 24 + 10 = 34; chunk 64: fixed 180 + 64 + 34 = 278; 278 + 128 + 265 =
     * 671 <= 1000, so the whole trunk is pinned and no ring is paid. Cache: 1000 - 278 - 265 =
     * 457 -> 28 slots of 16 (448). */
    ms_plan_in in = base_in(1000 * M);
    expect_plan("1000 MiB", &in, 64, 278 * M, 5, 0, 28);
    /* max_slots caps the cache: 20 and 27 < 28; equal and above leave it alone. */
    in.max_slots = 20;
    expect_plan("1000 MiB, max_slots 20", &in, 64, 278 * M, 5, 0, 20);
    in.max_slots = 27;
    expect_plan("1000 MiB, max_slots 27", &in, 64, 278 * M, 5, 0, 27);
    in.max_slots = 28;
    expect_plan("1000 MiB, max_slots 28", &in, 64, 278 * M, 5, 0, 28);
    in.max_slots = 29;
    expect_plan("1000 MiB, max_slots 29", &in, 64, 278 * M, 5, 0, 28);
    /* A short prompt bounds the chunk: 5 tokens -> fixed 180 + 5 + 34 = 219; cache 1000 - 219 -
     * 265 = 516 -> 32 slots (512). No prompt at all still plans a chunk of 1: 215, 520 -> 32. */
    in = base_in(1000 * M);
    in.prompt_tokens = 5;
    expect_plan("1000 MiB, 5-token prompt", &in, 5, 219 * M, 5, 0, 32);
    in.prompt_tokens = 0;
    expect_plan("1000 MiB, empty prompt", &in, 1, 215 * M, 5, 0, 32);
}

static void test_streaming(void)
{
    /* budget 600: slack 30; chunk 64: 180 + 64 + 30 = 274; 274 + 128 + 265 = 667 > 600 but
     * 274 + 128 + 40 = 442 <= 600: stream at chunk 64, fixed 274 + 40 = 314. Room for the trunk:
     * 600 - 274 - 128 - 40 = 158: 10 + 20 + 30 = 60 fits, + 200 does not, and the 5 after it is
     * not pinned (a prefix, in forward order). Cache: 158 - 60 + 128 = 226 -> 14 slots. */
    ms_plan_in in = base_in(600 * M);
    expect_plan("600 MiB", &in, 64, 314 * M, 3, 1, 14);
    ms_plan p;
    if (ms_plan_make(&in, &p) == 0)
        T_CHECK(p.pinned_bytes == 60 * M && p.streamed_bytes == 205 * M, "600 MiB: 60 MiB pinned, 205 streamed");
    /* The same with max_slots 10: the cap applies to the cache only, the trunk stays as it was. */
    in.max_slots = 10;
    expect_plan("600 MiB, max_slots 10", &in, 64, 314 * M, 3, 1, 10);

    /* budget 400: slack 28. chunk 64: 272 + 128 + 40 = 440 > 400; 32: 240 + 168 = 408 > 400;
     * 16: 224 + 168 = 392 <= 400 -> chunk 16, fixed 224 + 40 = 264. Room for the trunk:
     * 400 - 224 - 128 - 40 = 8 < 10: nothing pinned. Cache: 8 + 128 = 136 -> 8 slots. */
    in = base_in(400 * M);
    expect_plan("400 MiB", &in, 16, 264 * M, 0, 1, 8);
    /* A 48-token prompt at 400: 48: 180 + 48 + 28 = 256, + 168 = 424 > 400; 24: 232 + 168 = 400,
     * exactly the budget, accepted -> fixed 272; no room for the trunk; cache exactly 8 slots. */
    in.prompt_tokens = 48;
    expect_plan("400 MiB, 48-token prompt (exact fit)", &in, 24, 272 * M, 0, 1, 8);
    /* Halving rounds down: 5 -> 2. At 400 with per-token work 10 MiB: 5: 180 + 50 + 28 = 258,
     * + 168 = 426 > 400; 2: 180 + 20 + 28 = 228, + 168 = 396 <= 400 -> chunk 2, fixed 228 + 40 =
     * 268; trunk room 400 - 228 - 128 - 40 = 4: nothing pinned; cache 4 + 128 -> 8 slots. */
    in = base_in(400 * M);
    in.work_per_token = 10 * M;
    in.prompt_tokens = 5;
    expect_plan("400 MiB, 10 MiB per token, 5-token prompt", &in, 2, 268 * M, 0, 1, 8);
}

static void test_min_chunk(void)
{
    /* min_chunk raises the floor of the chunk: at 400 (slack 28) the halving 64 -> 32 -> 16
     * stops at 20 instead: 180 + 20 + 28 = 228, + 168 = 396 <= 400 -> chunk 20, fixed 268;
     * trunk room 400 - 228 - 128 - 40 = 4: nothing pinned; cache 4 + 128 -> 8 slots. */
    ms_plan_in in = base_in(400 * M);
    in.min_chunk = 20;
    expect_plan("400 MiB, min_chunk 20", &in, 20, 268 * M, 0, 1, 8);
    /* ... and lifts a short prompt: 5 tokens, min_chunk 8 at 1000: 180 + 8 + 34 = 222; cache
     * 1000 - 222 - 265 = 513 -> 32 slots. min_chunk 0 and 1 both mean 1. */
    in = base_in(1000 * M);
    in.prompt_tokens = 5;
    in.min_chunk = 8;
    expect_plan("1000 MiB, 5-token prompt, min_chunk 8", &in, 8, 222 * M, 5, 0, 32);
    in.min_chunk = 1;
    expect_plan("1000 MiB, 5-token prompt, min_chunk 1", &in, 5, 219 * M, 5, 0, 32);
    in.min_chunk = 0;
    expect_plan("1000 MiB, 5-token prompt, min_chunk 0", &in, 5, 219 * M, 5, 0, 32);
}

/* The smallest budget B with cost_at_chunk_1 + slack(B) <= B, i.e. B - B/100 >= core + 24 MiB,
 * found by search from the definition (not from the planner's formula). */
static uint64_t true_minimum(uint64_t core)
{
    uint64_t need = core + 24 * M, b = need + need / 99 - 200;
    while (b - b / 100 < need) b++;
    while (b - 1 - (b - 1) / 100 >= need) b--;
    return b;
}

static void test_refusal(void)
{
    /* At chunk 1: 180 + 1 + 128 + min(trunk 265, ring 40) = 349 MiB besides the slack, so the
     * smallest budget B has B - B/100 >= 373 MiB. */
    uint64_t bmin = true_minimum(349 * M);
    T_CHECK(bmin > 376 * M && bmin < 377 * M, "hand check: the minimum is about 376.8 MiB (%llu)",
            (unsigned long long)bmin);
    ms_plan_in in = base_in(bmin);
    ms_plan p;
    int rc = ms_plan_make(&in, &p);
    T_CHECK(rc == 0 && p.chunk == 1 && p.streaming == 1 && p.n_pinned == 0 && p.cache_slots == 8,
            "the smallest budget that holds the fixed costs is accepted: chunk 1, streaming, 8 slots (%s)",
            rc ? ms_err_msg() : "ok");
    if (rc == 0) check_invariants("minimum budget", &p);

    in = base_in(bmin - 1);
    ms_err_clear();
    rc = ms_plan_make(&in, &p);
    T_CHECK(rc == -1 && ms_err_code() == MS_EXIT_BUDGET, "one byte less is refused with class %d (rc %d, class %d)",
            MS_EXIT_BUDGET, rc, ms_err_code());
    const char *msg = ms_err_msg();
    const char *b = msg ? strstr(msg, "minimum") : NULL;
    const char *paren = b ? strchr(b, '(') : NULL;
    unsigned long long named = paren ? strtoull(paren + 1, NULL, 10) : 0;
    T_CHECK(b && paren && strstr(paren, " bytes)"), "the refusal names the minimum: %s", msg ? msg : "");
    /* "about": never below the true minimum, and above it by at most the allowance for the
     * baseline moving between runs (1/8 of it) plus rounding. */
    T_CHECK(named >= bmin && named <= bmin + in.baseline / 8 + 8192,
            "the named minimum %llu is within [%llu, %llu]", named, (unsigned long long)bmin,
            (unsigned long long)(bmin + in.baseline / 8 + 8192));
    in = base_in(named);
    rc = ms_plan_make(&in, &p);
    T_CHECK(rc == 0, "a budget of exactly the named minimum is accepted (%s)", rc ? ms_err_msg() : "ok");

    /* With a ring larger than the trunk the minimum counts the trunk (pinning all is cheaper):
     * ring 400: 180 + 1 + 128 + 265 = 574 besides the slack. */
    uint64_t bmin2 = true_minimum(574 * M);
    in = base_in(bmin2);
    in.ring = 400 * M;
    rc = ms_plan_make(&in, &p);
    T_CHECK(rc == 0 && p.streaming == 0 && p.n_pinned == 5 && p.chunk == 1,
            "ring > trunk: the minimum pins the whole trunk at chunk 1 (%s)", rc ? ms_err_msg() : "ok");
    in.budget = bmin2 - 1;
    T_CHECK(ms_plan_make(&in, &p) == -1 && ms_err_code() == MS_EXIT_BUDGET, "ring > trunk: one byte less is refused");

    /* With min_chunk 4 the fixed costs are those of a 4-row pass: 180 + 4 + 128 + 40 = 352. */
    uint64_t bmin3 = true_minimum(352 * M);
    in = base_in(bmin3);
    in.min_chunk = 4;
    rc = ms_plan_make(&in, &p);
    T_CHECK(rc == 0 && p.chunk == 4, "min_chunk 4: the smallest budget plans a 4-row pass (%s)",
            rc ? ms_err_msg() : "ok");
    in.budget = bmin3 - 1;
    rc = ms_plan_make(&in, &p);
    T_CHECK(rc == -1 && ms_err_code() == MS_EXIT_BUDGET, "min_chunk 4: one byte less is refused, not planned smaller");
    named = 0;
    msg = ms_err_msg();
    paren = msg ? strstr(msg, "bytes)") : NULL;
    while (paren && paren > msg && paren[-1] != '(') paren--;
    named = paren ? strtoull(paren, NULL, 10) : 0;
    T_CHECK(named >= bmin3 && named <= bmin3 + in.baseline / 8 + 8192, "min_chunk 4: the named minimum %llu >= %llu",
            named, (unsigned long long)bmin3);
}

/* A process without a trunk (an expert worker: ms_wload's plan) through the same rules, what it
 * leaves spare, and the coordinator's split of its budget among local workers. Sizes in MiB:
 *   budget 300 -> slack 24 + 3 = 27; baseline 5, work 48, read buffers 3 -> fixed 83;
 *   217 left = 13 slots of 16, capped at the 10 experts owned -> cache 160, spare 300 - 83 - 160 = 57;
 *   local share of 3 workers = (read buffers 3 + cache 160 + spare 57) / 3 = 220 / 3. */
static void test_no_trunk_and_split(void)
{
    T_CHECK(ms_plan_slack(0) == 24 * M && ms_plan_slack(300 * M) == slack(300 * M) &&
                ms_plan_slack(100000 * M) == 24 * M + 1000 * M,
            "one slack rule: 24 MiB + 1%% of the budget");
    ms_plan_in in;
    memset(&in, 0, sizeof in);
    in.budget = 300 * M;
    in.baseline = 5 * M;
    in.work_fixed = 48 * M;
    in.prompt_tokens = in.max_chunk = 1;
    in.expert_fixed = 3 * M;
    in.expert_bytes = 16 * M;
    in.max_slots = 10;
    ms_plan p;
    T_CHECK(ms_plan_make(&in, &p) == 0, "no trunk: accepted (%s)", ms_err_msg());
    check_invariants("no trunk", &p);
    T_CHECK(p.fixed == 83 * M && p.chunk == 1 && !p.streaming && p.n_pinned == 0 && p.cache_slots == 10 &&
                p.cache == 160 * M,
            "no trunk: fixed %llu MiB, %llu slots", (unsigned long long)(p.fixed / M),
            (unsigned long long)p.cache_slots);
    T_CHECK(ms_plan_spare(&p) == 57 * M, "spare 57 MiB: %llu", (unsigned long long)ms_plan_spare(&p));
    T_CHECK(ms_plan_local_budget(&p, 3) == 220 * M / 3 && ms_plan_local_budget(&p, 1) == 220 * M,
            "local share: (read buffers + cache + spare) / n");
    /* Without the cap the cache takes whole slots and leaves less than one spare. */
    in.max_slots = 0;
    T_CHECK(ms_plan_make(&in, &p) == 0 && p.cache_slots == 13 && ms_plan_spare(&p) == 217 * M - 13 * 16 * M,
            "uncapped: 13 slots, 9 MiB spare (%llu)", (unsigned long long)ms_plan_spare(&p));

    /* The refusal lists the costs that are there and names a minimum that works. */
    in.budget = 50 * M;
    ms_err_clear();
    T_CHECK(ms_plan_make(&in, &p) == -1 && ms_err_code() == MS_EXIT_BUDGET, "no trunk: 50 MiB refused");
    const char *msg = ms_err_msg();
    T_CHECK(strstr(msg, "baseline 5.00 MiB") && strstr(msg, "work buffers 48.00 MiB") &&
                strstr(msg, "expert read buffers 3.00 MiB") && !strstr(msg, "sequence state") &&
                !strstr(msg, "ring"),
            "the refusal lists the fixed costs there are: %s", msg);
    const char *b = strstr(msg, "bytes)");
    while (b && b > msg && b[-1] != '(') b--;
    uint64_t named = b ? strtoull(b, NULL, 10) : 0;
    /* fixed = 56 MiB + 24 MiB + budget / 100 <= budget  <=>  budget >= 80 MiB * 100 / 99 */
    uint64_t bmin = (80 * M * 100 + 98) / 99;
    T_CHECK(named >= bmin && named <= bmin + in.baseline / 8 + 8192, "named minimum %llu, true minimum %llu",
            (unsigned long long)named, (unsigned long long)bmin);
    in.budget = named;
    T_CHECK(ms_plan_make(&in, &p) == 0, "the named minimum is accepted (%s)", ms_err_msg());
}

/* The default budget: MemAvailable of /proc/meminfo (read here on its own), a share of it. */
static void test_default_budget(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    unsigned long long kb = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    if (!kb) {
        ms_t_skip("no MemAvailable in /proc/meminfo");
        return;
    }
    uint64_t avail = kb * 1024, all = ms_plan_default_budget(100), most = ms_plan_default_budget(90);
    uint64_t tol = 256 * M; /* other processes allocate meanwhile */
    T_CHECK(all + tol >= avail && all <= avail + tol, "default 100%%: %llu, MemAvailable %llu",
            (unsigned long long)all, (unsigned long long)avail);
    T_CHECK(most + tol >= avail / 10 * 9 && most <= avail / 10 * 9 + tol, "default 90%%: %llu",
            (unsigned long long)most);
}

/* More budget never keeps less resident: sweeping the budget upwards in 1 MiB steps from the
 * smallest accepted, the prefill chunk never shrinks, and for one chunk the pinned trunk and
 * the pinned trunk + cache never shrink and the streamed bytes never grow (a decode step
 * never has more to read). (Where the chunk doubles it takes its rows from the trunk or the
 * cache: prefill passes against decode reads, a trade the planner makes for the chunk.) */
static void test_monotone(void)
{
    for (int prompt = 1; prompt <= 100; prompt += 99) {
        ms_plan prev;
        int have = 0, bad = 0;
        char why[200] = "";
        for (uint64_t b = 200 * M; b <= 1200 * M; b += M) {
            ms_plan_in in = base_in(b);
            in.prompt_tokens = prompt;
            ms_plan p;
            if (ms_plan_make(&in, &p) != 0) continue;
            if (have && (p.chunk < prev.chunk ||
                         (p.chunk == prev.chunk && (p.pinned_bytes < prev.pinned_bytes || p.streamed_bytes > prev.streamed_bytes ||
                                                    p.pinned_bytes + p.cache < prev.pinned_bytes + prev.cache)))) {
                if (!bad++)
                    snprintf(why, sizeof why, "%llu MiB: pinned %llu + cache %llu MiB (chunk %lld) after %llu + %llu "
                             "(chunk %lld)", (unsigned long long)(b / M), (unsigned long long)(p.pinned_bytes / M),
                             (unsigned long long)(p.cache / M), (long long)p.chunk,
                             (unsigned long long)(prev.pinned_bytes / M), (unsigned long long)(prev.cache / M),
                             (long long)prev.chunk);
            }
            prev = p;
            have = 1;
        }
        T_CHECK(have && bad == 0, "prompt %d: %d budgets keep less resident than a smaller one; first at %s", prompt,
                bad, why);
    }
}

/* Prefill spans: memory the cache lends above its minimum (and the spare), and the choice of
 * chunks, spans or spans lending the pinned trunk by the bytes a prompt would read. */
static void test_spans(void)
{
    /* budget 2000: slack 44; chunk 64: fixed 180 + 64 + 44 = 288; the trunk (265) is pinned;
     * cache (2000 - 288 - 265) / 16 = 90 slots (1440), spare 7. Experts: 1000 of 16 MiB, a token
     * reads 1% of a layer's. A span row costs 1 MiB: room = (90 - 8 kept) * 16 + 7 + 64 * 1 =
     * 1383 rows. A 2000-token prompt: chunks (32 passes) read ~32 x 47% of the experts, less the
     * 9% the cache keeps (~220 GB), spans of 1383 (2 passes) ~2 x 100% (32 GB): spans. Lending
     * the pins gives (1383 + 265 - 40 ring) = 1608 rows, still 2 spans, now each streaming the
     * trunk too: kept. */
    ms_plan_in in = base_in(2000 * M);
    in.max_slots = 1000;
    in.route_share = 0.01;
    in.max_span = 2000;
    in.span_pins = 1;
    ms_plan p;
    T_CHECK(ms_plan_make(&in, &p) == 0 && p.chunk == 64 && p.cache_slots == 90 && p.span == 1383 &&
                p.span_cache_slots == 8 && !p.span_pins,
            "2000 MiB, 2000-token prompt: spans of %lld (want 1383), %llu slots kept (8), pins lent %d (0)",
            (long long)p.span, (unsigned long long)p.span_cache_slots, p.span_pins);
    check_invariants("spans", &p);
    /* the estimates: spans of 1383 read all but 1 - 0.99^1383 (1e-6) of the experts twice
     * (2 x 1000 x 16 MiB), no trunk streams */
    T_CHECK(p.read_prompt <= 2 * 1000 * 16 * M && p.read_prompt > 2 * 1000 * 16 * M - 64 * M && p.read_chunks > 6 * p.read_prompt,
            "2000-token prompt: spans read about %llu MiB (32000), chunks %llu MiB (~220 GB)",
            (unsigned long long)(p.read_prompt / M), (unsigned long long)(p.read_chunks / M));
    /* Beside decoding sequences: the chunk unless asked; auto, the rows touching 9/10 of a
     * layer's experts at 1% a row, ceil(ln 0.1 / ln 0.99) = 230 (fewer than the 1383 that fit);
     * N, up to N (at most what fits). */
    T_CHECK(p.mix == p.chunk, "mixed passes: chunks unless asked (%lld)", (long long)p.mix);
    in.mix_wanted = 100;
    T_CHECK(ms_plan_make(&in, &p) == 0 && p.mix == 100, "mixed passes asked of 100: %lld", (long long)p.mix);
    in.mix_wanted = 5000;
    T_CHECK(ms_plan_make(&in, &p) == 0 && p.mix == 1383, "mixed passes asked of 5000: %lld (1383 fit)", (long long)p.mix);
    in.mix_wanted = -1;
    T_CHECK(ms_plan_make(&in, &p) == 0 && p.mix == 230 && p.span_keeping_pins == 1383, "mixed passes of %lld rows "
            "(230), spans keeping the pins %lld (1383)", (long long)p.mix, (long long)p.span_keeping_pins);
    /* A 1500-token prompt: spans of 1383 take 2 passes (~32 GB), lending the pins one of 1500
     * (the trunk 265 + experts ~16 GB + the pins read again 265): lent. */
    in.max_span = 1500;
    T_CHECK(ms_plan_make(&in, &p) == 0 && p.span == 1500 && p.span_pins && p.span_keeping_pins == 1383 && p.mix == 230,
            "1500-token prompt: one span of %lld lending the pins (%d), shorter ones (<= %lld) keep them, mixed passes "
            "of %lld", (long long)p.span, p.span_pins, (long long)p.span_keeping_pins, (long long)p.mix);
    /* Not allowed to lend them (e.g. packed pins): spans of 1383. */
    in.span_pins = 0;
    T_CHECK(ms_plan_make(&in, &p) == 0 && p.span == 1383 && !p.span_pins, "pins not lendable: spans of %lld",
            (long long)p.span);
    /* The cache holds every expert (max_slots 80 < 90): chunks read each once and keep them, a
     * span would empty the cache for nothing: chunks (span = chunk, nothing lent)... */
    in = base_in(2000 * M);
    in.max_slots = 80;
    in.route_share = 0.01;
    in.max_span = 2000;
    T_CHECK(ms_plan_make(&in, &p) == 0 && p.span == p.chunk && p.span_cache_slots == p.cache_slots && p.mix == p.chunk,
            "cache holds every expert: chunks (span %lld, mixed %lld, chunk %lld)", (long long)p.span, (long long)p.mix,
            (long long)p.chunk);
    /* ...unless spans are asked for (--prefill-span N). */
    in.span_forced = 1;
    T_CHECK(ms_plan_make(&in, &p) == 0 && p.span > p.chunk, "asked for: spans of %lld", (long long)p.span);
    /* A span row's extra cost (the rows' prepared copy) shortens spans: 1 + 1 MiB a row. */
    in = base_in(2000 * M);
    in.max_slots = 1000;
    in.route_share = 0.01;
    in.max_span = 2000;
    in.span_extra_per_token = 1 * M;
    T_CHECK(ms_plan_make(&in, &p) == 0 && p.span == 1383 / 2, "2 MiB a span row: spans of %lld (want 691)",
            (long long)p.span);
}

/* A span of the whole prompt in a scratch file when memory holds a shorter one: taken when the
 * checkpoint's bytes once plus the file's traffic are a fifth fewer than spans in memory. */
static void test_scratch_file(void)
{
    /* test_spans' 2000 MiB case, pins not lendable: spans of 1383 in memory (2 passes, ~32,000
     * MiB of experts). In a file: one span of 2000 (~16,000 MiB), its file 10 + 2000 = 2010 MiB,
     * of which the window (the 1383 MiB lent) holds 1383: 627 MiB written and read back a layer. */
    ms_plan_in in = base_in(2000 * M);
    in.max_slots = 1000;
    in.route_share = 0.01;
    in.max_span = 2000;
    in.scratch = 1;
    in.n_layers = 2; /* 2 x 627 x 2 = 2508 MiB of traffic: 18,508 < 0.8 x 32,000 */
    ms_plan p;
    T_CHECK(ms_plan_make(&in, &p) == 0 && p.scratch && p.span == 2000 && p.span_in_memory == 1383 &&
                p.span_keeping_pins == 1383 && p.scratch_bytes == 2010 * M && p.scratch_window == 1383 * M &&
                p.scratch_traffic == 2508 * M && p.read_prompt <= 1000 * 16 * M && p.read_prompt > 1000 * 16 * M - 64 * M,
            "2 layers: one span of %lld in a file (%d) of %llu MiB, window %llu MiB, traffic %llu MiB (2508), reads "
            "%llu MiB; in memory up to %lld",
            (long long)p.span, p.scratch, (unsigned long long)(p.scratch_bytes / M),
            (unsigned long long)(p.scratch_window / M), (unsigned long long)(p.scratch_traffic / M),
            (unsigned long long)(p.read_prompt / M), (long long)p.span_in_memory);
    check_invariants("scratch", &p);
    /* 10 layers: 12,540 MiB of traffic, 28,540 > 25,600: spans in memory; asked for, the file */
    in.n_layers = 10;
    T_CHECK(ms_plan_make(&in, &p) == 0 && !p.scratch && p.span == 1383 && p.span_in_memory == 1383,
            "10 layers: spans of %lld in memory (file %d)", (long long)p.span, p.scratch);
    in.scratch_forced = 1;
    T_CHECK(ms_plan_make(&in, &p) == 0 && p.scratch && p.span == 2000 && p.scratch_traffic == 12540 * M,
            "asked for: the file (%d), traffic %llu MiB (12540)", p.scratch, (unsigned long long)(p.scratch_traffic / M));
    /* pins lendable: 1383 + 265 - 40 = 1608 rows in memory would still take 2 spans, so spans in
     * memory keep them (up to 1383, as before); in a
     * file lending them the window is 1608 MiB: 402 MiB a layer, 8040 MiB over 10 layers, plus
     * the trunk 265 streamed and 265 read again: 16,530 + 8040 < 12,540 + 16,000: lent */
    in.span_pins = 1;
    T_CHECK(ms_plan_make(&in, &p) == 0 && p.scratch && p.scratch_pins && p.scratch_window == 1608 * M &&
                p.scratch_traffic == 8040 * M && p.span_in_memory == 1383,
            "pins lendable: the file's span lends them (%d), window %llu MiB (1608), traffic %llu MiB (8040), in "
            "memory up to %lld (1383)", p.scratch_pins, (unsigned long long)(p.scratch_window / M),
            (unsigned long long)(p.scratch_traffic / M), (long long)p.span_in_memory);
    in.span_pins = 0;
    /* a 5000-token prompt: a file of 5010 MiB is 3.6 times the 1383 window, within
     * MS_PLAN_SCRATCH_RATIO (5): taken; an 8000-token one, 8010 MiB, 5.8 times: not taken (not
     * measured that far), though it would read fewer bytes than 6 spans; asked for, taken */
    in.n_layers = 2;
    in.max_span = 5000;
    in.scratch_forced = 0;
    T_CHECK(MS_PLAN_SCRATCH_RATIO == 5 && ms_plan_make(&in, &p) == 0 && p.scratch && p.span == 5000,
            "a file 3.6 times its window: taken (%d)", p.scratch);
    in.max_span = 8000;
    T_CHECK(ms_plan_make(&in, &p) == 0 && !p.scratch && p.span == 1383, "a file 5.8 times its window: spans of %lld "
            "in memory (file %d)", (long long)p.span, p.scratch);
    in.scratch_forced = 1;
    T_CHECK(ms_plan_make(&in, &p) == 0 && p.scratch && p.span == 8000, "asked for: the file (%d)", p.scratch);
    in.max_span = 2000;
    /* no directory: never; a prompt memory holds: never */
    in.scratch = 0;
    T_CHECK(ms_plan_make(&in, &p) == 0 && !p.scratch && p.span == 1383, "no scratch directory: spans of %lld",
            (long long)p.span);
    in.scratch = 1;
    in.max_span = 1000;
    T_CHECK(ms_plan_make(&in, &p) == 0 && !p.scratch && p.span == 1000, "a 1000-token prompt fits: no file (%d)",
            p.scratch);
}

int main(void)
{
    test_everything_pinned();
    test_streaming();
    test_min_chunk();
    test_refusal();
    test_no_trunk_and_split();
    test_default_budget();
    test_monotone();
    test_spans();
    test_scratch_file();
    return ms_t_done();
}
