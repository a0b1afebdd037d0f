/* ms_plan: the RAM budget planner (fixed costs first, then a pinned trunk prefix, then the cache). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ms_err.h"
#include "ms_plan.h"
#include "ms_proc.h"
#include "ms_size.h"

#define SLACK_BASE (24ull << 20)

uint64_t ms_plan_slack(uint64_t budget) { return SLACK_BASE + budget / 100; }

uint64_t ms_plan_default_budget(int percent)
{
    MS_ASSERT(percent > 0 && percent <= 100);
    uint64_t avail = ms_proc_mem_available();
    if (!avail) return 8ull << 30;
    return avail / 100 * (uint64_t)percent + avail % 100 * (uint64_t)percent / 100; /* avail x percent / 100 */
}

static uint64_t fixed_for(const ms_plan_in *in, int64_t chunk, uint64_t margin)
{
    return in->baseline + in->state + in->work_fixed + in->work_per_token * (uint64_t)chunk + in->expert_fixed +
           in->state_cache + margin;
}

/* The refusal: every fixed cost that is not zero, then the minimum budget. */
static void refuse(const ms_plan_in *in, int64_t chunk, uint64_t margin, uint64_t ring, uint64_t need)
{
    const char *what[] = {"baseline",    "sequence state", "work buffers", "expert read buffers",
                          "minimum expert cache", "trunk ring",     "prefix cache", "slack"};
    uint64_t v[] = {in->baseline,     in->state, in->work_fixed + in->work_per_token * (uint64_t)chunk,
                    in->expert_fixed, in->min_cache, ring, in->state_cache, margin};
    char costs[512], a[32], b[32];
    size_t at = 0;
    costs[0] = 0;
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (v[i] && at < sizeof costs) {
            int k = snprintf(costs + at, sizeof costs - at, "%s%s %s", at ? ", " : "", what[i],
                             ms_size_fmt(v[i], a, sizeof a));
            if (k > 0) at += (size_t)k;
        }
    ms_err_set("a RAM budget of %s cannot hold the fixed costs (%s); the minimum that would work is about %s "
               "(%llu bytes)",
               ms_size_fmt(in->budget, a, sizeof a), costs, ms_size_fmt(need, b, sizeof b), (unsigned long long)need);
}

/* Expected bytes of the routed experts `rows` tokens touch (random routing: each expert with
 * probability 1 - (1 - share)^rows), at most every expert. */
static double touched(const ms_plan_in *in, uint64_t rows)
{
    double all = (double)in->max_slots * (double)(in->expert_read ? in->expert_read : in->expert_bytes);
    if (in->route_share <= 0 || in->route_share >= 1) return all;
    return all * (1.0 - pow(1.0 - in->route_share, (double)rows));
}

/* Estimated bytes a max_span-token prompt reads in passes of `rows` rows (the chunk: the cache
 * kept, a share of its experts hit across passes; longer: spans, the cache lent; pins: spans
 * that also stream the pinned trunk, read again once after). Each pass streams the unpinned
 * trunk and reads the experts its rows touch; every expert the prompt touches is read once. */
static double span_bytes(const ms_plan_in *in, const ms_plan *p, uint64_t trunk, uint64_t rows, int pins)
{
    uint64_t P = (uint64_t)in->max_span, n = (P + rows - 1) / rows;
    double kept = rows > (uint64_t)p->chunk || !in->max_slots ? 0.0 : (double)p->cache_slots / (double)in->max_slots;
    double experts = (double)n * touched(in, rows) * (1.0 - (kept < 1 ? kept : 1));
    if (experts < touched(in, P)) experts = touched(in, P);
    if (pins) return (double)n * (double)trunk + experts + (double)p->pinned_bytes;
    return (double)n * (double)p->streamed_bytes + experts;
}

int ms_plan_make(const ms_plan_in *in, ms_plan *p)
{
    memset(p, 0, sizeof *p);
    p->in = *in;
    p->margin = ms_plan_slack(in->budget);
    uint64_t trunk = 0;
    for (int i = 0; i < in->n_trunk; i++) trunk += in->trunk[i];
    int64_t want = in->prompt_tokens < in->max_chunk ? in->prompt_tokens : in->max_chunk;
    /* A step of n sequences is one pass only if a pass holds n rows: cheaper to reserve their
     * working memory than to stream the trunk once per row. */
    int64_t least = in->min_chunk > 1 ? in->min_chunk : 1;
    if (want < least) want = least;
    /* The largest chunk that leaves room for the fixed costs (and the ring if it is needed). */
    int64_t chunk = want;
    for (;;) {
        uint64_t f = fixed_for(in, chunk, p->margin) + in->min_cache;
        int fits_all = f + trunk <= in->budget;
        if (fits_all || f + in->ring <= in->budget) break;
        if (chunk == least) {
            /* The slack grows with the budget (ms_plan_slack): solve for the budget that holds it. */
            uint64_t ring = trunk < in->ring ? trunk : in->ring;
            uint64_t core = f - p->margin + ring;
            uint64_t need = (core + SLACK_BASE) / 99 * 100 + 4096;
            need += in->baseline / 8; /* the measured baseline moves a little from run to run */
            refuse(in, chunk, p->margin, ring, need);
            return ms_err_set_code(MS_EXIT_BUDGET);
        }
        chunk = chunk / 2 > least ? chunk / 2 : least;
    }
    p->chunk = chunk;
    uint64_t f = fixed_for(in, chunk, p->margin);
    uint64_t avail = in->budget - f - in->min_cache; /* the minimum cache is set aside first */
    if (trunk <= avail) {
        p->n_pinned = in->n_trunk;
        p->pinned_bytes = trunk;
        avail -= trunk;
    } else {
        p->streaming = 1;
        f += in->ring;
        avail -= in->ring;
        while (p->n_pinned < in->n_trunk && p->pinned_bytes + in->trunk[p->n_pinned] <= avail)
            p->pinned_bytes += in->trunk[p->n_pinned++];
        avail -= p->pinned_bytes;
        p->streamed_bytes = trunk - p->pinned_bytes;
    }
    p->fixed = f;
    avail += in->min_cache;
    p->cache_slots = in->expert_bytes ? avail / in->expert_bytes : 0;
    if (in->max_slots && p->cache_slots > in->max_slots) p->cache_slots = in->max_slots;
    p->cache = p->cache_slots * in->expert_bytes;
    /* The span: the chunk's working memory plus what the cache above its minimum and the spare
     * lend, over a span's per-row cost; with span_pins, also the pinned trunk less a second ring.
     * Which of chunks, spans and spans with the pins reads the fewest bytes for a max_span-token
     * prompt (span_bytes) decides, unless spans were asked for (span_forced). */
    p->span = chunk;
    p->mix = p->span_keeping_pins = chunk;
    p->span_cache_slots = p->cache_slots;
    uint64_t span_per_token = in->work_per_token + in->span_extra_per_token;
    if (in->max_span > 0) p->read_chunks = p->read_prompt = (uint64_t)span_bytes(in, p, trunk, (uint64_t)chunk, 0);
    if (in->max_span > chunk && span_per_token > 0) {
        uint64_t keep = in->expert_bytes ? in->min_cache / in->expert_bytes : 0;
        if (keep > p->cache_slots || in->span_cache_kept) keep = p->cache_slots;
        uint64_t room = (p->cache_slots - keep) * in->expert_bytes + ms_plan_spare(p) +
                        in->work_per_token * (uint64_t)chunk;
        uint64_t P = (uint64_t)in->max_span, s = room / span_per_token, s2 = 0;
        if (s > P) s = P;
        if (s < (uint64_t)chunk) s = (uint64_t)chunk;
        const uint64_t s1 = s; /* without the pins */
        if (in->span_pins && p->pinned_bytes > 0 && s < P) {
            uint64_t room2 = room + p->pinned_bytes;
            s2 = room2 > in->ring ? (room2 - in->ring) / span_per_token : 0;
            if (s2 > P) s2 = P;
        }
        double bc = span_bytes(in, p, trunk, (uint64_t)chunk, 0), b1 = span_bytes(in, p, trunk, s, 0);
        double b2 = s2 > s ? span_bytes(in, p, trunk, s2, 1) : INFINITY;
        int spans = s > (uint64_t)chunk && (in->span_forced || b1 < 0.8 * bc);
        double best = spans ? b1 : bc;
        if (s2 > (uint64_t)chunk && (in->span_forced || b2 < 0.8 * best)) {
            s = s2;
            spans = 1;
            p->span_pins = 1;
        }
        p->read_chunks = (uint64_t)bc;
        p->read_prompt = (uint64_t)(p->span_pins ? b2 : spans ? b1 : bc);
        p->span_in_memory = spans ? (int64_t)s : chunk;
        /* One span of the whole prompt in a scratch file: the checkpoint read once, and the
         * part of each layer's scratch the window cannot hold written and read back. */
        uint64_t fits = s2 > s ? s2 : s; /* the longest span memory can hold */
        if (in->scratch && fits < P) {
            /* The window: what the cache and spare lend, or (lending the pins, which then
             * stream with the span and are read again after it) that and the pins less a ring. */
            uint64_t all = in->work_fixed + span_per_token * P, L = (uint64_t)(in->n_layers > 0 ? in->n_layers : 1);
            uint64_t win[2] = {room, 0}, traffic[2];
            double bf[2] = {span_bytes(in, p, trunk, P, 0), INFINITY};
            if (in->span_pins && p->pinned_bytes > 0 && room + p->pinned_bytes > in->ring) {
                win[1] = room + p->pinned_bytes - in->ring;
                bf[1] = span_bytes(in, p, trunk, P, 1);
            }
            for (int k = 0; k < 2; k++) traffic[k] = 2 * (all > win[k] ? all - win[k] : 0) * L;
            int k = bf[1] + (double)traffic[1] < bf[0] + (double)traffic[0];
            double now = (double)p->read_prompt;
            /* Measured on the k3-slice: a file 2.4 times its window read the checkpoint once
             * and 6.7 GB of it back; 4.9 times did too (26 GB back) once no op walked its
             * pages out of order (placed expert outputs, dead pieces zeroed); past 5 times
             * untried, so not unless asked. */
            int thrash = all > MS_PLAN_SCRATCH_RATIO * win[k];
            if (in->scratch_forced || (!thrash && bf[k] + (double)traffic[k] < 0.8 * now)) {
                spans = 1;
                p->scratch = 1;
                p->scratch_pins = k;
                p->scratch_bytes = all;
                p->scratch_traffic = traffic[k];
                p->scratch_window = win[k];
                p->read_prompt = (uint64_t)bf[k];
                s = P;
            }
        }
        if (spans) {
            /* A pass that also carries decoding sequences keeps the pins (lending them costs a
             * second read of them each time); asked for, it takes more prompt rows than a chunk:
             * up to N, or (auto) up to the count that touches nine tenths of a layer's experts
             * (fewer read almost as much per pass, more mostly add compute). It trades the
             * decoders' wait between tokens for the prompt's time to first token. */
            uint64_t mix = in->mix_wanted ? s1 : (uint64_t)chunk;
            if (in->mix_wanted > 0 && (uint64_t)in->mix_wanted < mix) mix = (uint64_t)in->mix_wanted;
            if (in->mix_wanted < 0 && in->route_share > 0 && in->route_share < 1) {
                double r90 = ceil(log(0.1) / log1p(-in->route_share));
                if (r90 < (double)mix) mix = (uint64_t)r90;
            }
            p->mix = mix > (uint64_t)chunk ? (int64_t)mix : chunk;
            p->span_keeping_pins = (int64_t)s1;
            p->span = (int64_t)s;
            p->span_cache_slots = keep;
        }
    }
    if (!p->scratch) p->span_in_memory = p->span;
    return 0;
}

uint64_t ms_plan_spare(const ms_plan *p)
{
    uint64_t used = p->fixed + p->pinned_bytes + p->cache;
    return p->in.budget > used ? p->in.budget - used : 0;
}

uint64_t ms_plan_local_budget(const ms_plan *p, int n)
{
    MS_ASSERT(n > 0);
    return (p->in.expert_fixed + p->cache + ms_plan_spare(p)) / (uint64_t)n;
}

void ms_plan_log(const ms_plan *p)
{
    char a[32], b[32], c[32], d[32], e[32], g[32], h[32], i[32];
    ms_log(1,
           "plan: budget %s: fixed %s (baseline %s, sequence state %s, work %s for %lld-token prefill chunks, "
           "expert read buffers %s, slack %s%s%s)",
           ms_size_fmt(p->in.budget, a, sizeof a), ms_size_fmt(p->fixed, b, sizeof b),
           ms_size_fmt(p->in.baseline, c, sizeof c), ms_size_fmt(p->in.state, d, sizeof d),
           ms_size_fmt(p->in.work_fixed + p->in.work_per_token * (uint64_t)p->chunk, e, sizeof e), (long long)p->chunk,
           ms_size_fmt(p->in.expert_fixed, g, sizeof g), ms_size_fmt(p->margin, h, sizeof h),
           p->in.state_cache ? ", prefix cache " : "", p->in.state_cache ? ms_size_fmt(p->in.state_cache, i, sizeof i) : "");
    ms_log(1, "plan: trunk %d of %d matrices pinned (%s), %s streamed%s%s", p->n_pinned, p->in.n_trunk,
           ms_size_fmt(p->pinned_bytes, a, sizeof a), ms_size_fmt(p->streamed_bytes, b, sizeof b),
           p->streaming ? " through a ring of " : "", p->streaming ? ms_size_fmt(p->in.ring, c, sizeof c) : "");
    ms_log(1, "plan: expert cache %s (%llu experts of %s)", ms_size_fmt(p->cache, a, sizeof a),
           (unsigned long long)p->cache_slots, ms_size_fmt(p->in.expert_bytes, b, sizeof b));
    if (p->span > p->chunk) {
        char mixed[64] = "";
        if (p->mix > p->chunk) snprintf(mixed, sizeof mixed, ", %lld beside decoding sequences", (long long)p->mix);
        ms_log(1, "plan: prefill spans of up to %lld tokens, layer by layer%s (work %s, the expert cache lending %s%s%s%s)",
               (long long)p->span, mixed,
               ms_size_fmt(p->in.work_fixed + (p->in.work_per_token + p->in.span_extra_per_token) * (uint64_t)p->span, a, sizeof a),
               ms_size_fmt((p->cache_slots - p->span_cache_slots) * p->in.expert_bytes, b, sizeof b),
               p->span_pins ? ", the pinned trunk " : "", p->span_pins ? ms_size_fmt(p->pinned_bytes, c, sizeof c) : "",
               p->span_pins ? ", read again after the prompt" : "");
    }
    if (p->scratch)
        ms_log(1, "plan: prefill spans longer than %lld tokens keep their scratch in a file of up to %s (a window of "
               "%s in memory%s; a %lld-token prompt writes and reads back about %s of it)",
               (long long)p->span_in_memory, ms_size_fmt(p->scratch_bytes, a, sizeof a),
               ms_size_fmt(p->scratch_window, b, sizeof b), p->scratch_pins ? ", the pinned trunk lent" : "",
               (long long)p->in.max_span, ms_size_fmt(p->scratch_traffic, c, sizeof c));
    if (p->read_prompt)
        ms_log(1, "plan: a %lld-token prompt reads about %s from disk (in chunks it would read %s)",
               (long long)p->in.max_span, ms_size_fmt(p->read_prompt, a, sizeof a), ms_size_fmt(p->read_chunks, b, sizeof b));
}

json_t *ms_plan_json(const ms_plan *p)
{
    json_t *j = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:i,s:i,s:I,s:I,s:b,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:b,s:I,s:I}", "budget_bytes",
                     (json_int_t)p->in.budget, "fixed_bytes", (json_int_t)p->fixed, "baseline_bytes",
                     (json_int_t)p->in.baseline, "state_bytes", (json_int_t)p->in.state, "work_bytes",
                     (json_int_t)(p->in.work_fixed + p->in.work_per_token * (uint64_t)p->chunk),
                     "expert_read_buffer_bytes", (json_int_t)p->in.expert_fixed, "slack_bytes",
                     (json_int_t)p->margin, "prefill_chunk", (json_int_t)p->chunk, "trunk_pinned", p->n_pinned,
                     "trunk_matrices", p->in.n_trunk, "trunk_pinned_bytes", (json_int_t)p->pinned_bytes,
                     "trunk_streamed_bytes", (json_int_t)p->streamed_bytes, "streaming", p->streaming,
                     "ring_bytes", (json_int_t)(p->streaming ? p->in.ring : 0), "expert_cache_bytes",
                     (json_int_t)p->cache, "expert_cache_slots", (json_int_t)p->cache_slots, "prefix_cache_bytes",
                     (json_int_t)p->in.state_cache, "prefill_span", (json_int_t)p->span, "prefill_mixed_rows", (json_int_t)p->mix, "span_cache_slots",
                     (json_int_t)p->span_cache_slots, "span_lends_pinned_trunk", p->span_pins,
                     "prompt_read_bytes", (json_int_t)p->read_prompt, "prompt_read_bytes_in_chunks",
                     (json_int_t)p->read_chunks);
    json_object_set_new(j, "prefill_span_in_memory", json_integer((json_int_t)p->span_in_memory));
    json_object_set_new(j, "scratch_file", json_boolean(p->scratch));
    json_object_set_new(j, "scratch_file_bytes", json_integer((json_int_t)p->scratch_bytes));
    json_object_set_new(j, "scratch_traffic_bytes", json_integer((json_int_t)p->scratch_traffic));
    json_object_set_new(j, "scratch_window_bytes", json_integer((json_int_t)p->scratch_window));
    json_object_set_new(j, "scratch_lends_pinned_trunk", json_boolean(p->scratch_pins));
    return j;
}
