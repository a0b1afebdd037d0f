/* ms_plan: the RAM budget planner (fixed costs first, then a pinned trunk prefix, then the cache). */
#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_plan.h"
#include "ms_size.h"

const char *ms_plan_fmt(uint64_t b, char *buf, size_t n) { return ms_size_fmt(b, buf, n); }

int ms_plan_parse_size(const char *s, uint64_t *out)
{
    return ms_size_parse(s, out); /* one size syntax for every option */
}

static uint64_t fixed_for(const ms_plan_in *in, int64_t chunk, uint64_t margin)
{
    return in->baseline + in->state + in->work_fixed + in->work_per_token * (uint64_t)chunk + in->expert_fixed +
           margin;
}

int ms_plan_make(const ms_plan_in *in, ms_plan *p)
{
    memset(p, 0, sizeof *p);
    p->in = *in;
    /* Slack for what is not modelled exactly: malloc arenas, thread stacks, page rounding. */
    p->margin = (24ull << 20) + in->budget / 100;
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
            /* The slack grows with the budget (24 MiB + 1%): solve for the budget that holds it. */
            uint64_t core = f - p->margin + (trunk < in->ring ? trunk : in->ring);
            uint64_t need = (core + (24ull << 20)) / 99 * 100 + 4096;
            need += in->baseline / 8; /* the measured baseline moves a little from run to run */
            char b1[64], b2[64];
            ms_err_set("a RAM budget of %s cannot hold the fixed costs of this run; the minimum that would work "
                       "is about %s (%llu bytes)",
                       ms_plan_fmt(in->budget, b1, sizeof b1), ms_plan_fmt(need, b2, sizeof b2),
                       (unsigned long long)need);
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
    return 0;
}

void ms_plan_print(const ms_plan *p, FILE *f)
{
    char a[64], b[64], c[64], d[64], e[64], g[64], h[64];
    fprintf(f, "plan: budget %s: fixed %s (baseline %s, sequence state %s, work %s for %lld-token prefill chunks, "
               "expert read buffers %s, slack %s)\n",
            ms_plan_fmt(p->in.budget, a, sizeof a), ms_plan_fmt(p->fixed, b, sizeof b),
            ms_plan_fmt(p->in.baseline, c, sizeof c), ms_plan_fmt(p->in.state, d, sizeof d),
            ms_plan_fmt(p->in.work_fixed + p->in.work_per_token * (uint64_t)p->chunk, e, sizeof e),
            (long long)p->chunk, ms_plan_fmt(p->in.expert_fixed, g, sizeof g), ms_plan_fmt(p->margin, h, sizeof h));
    fprintf(f, "plan: trunk %d of %d matrices pinned (%s), %s streamed%s%s\n", p->n_pinned, p->in.n_trunk,
            ms_plan_fmt(p->pinned_bytes, a, sizeof a), ms_plan_fmt(p->streamed_bytes, b, sizeof b),
            p->streaming ? " through a ring of " : "", p->streaming ? ms_plan_fmt(p->in.ring, c, sizeof c) : "");
    fprintf(f, "plan: expert cache %s (%llu experts of %s)\n", ms_plan_fmt(p->cache, a, sizeof a),
            (unsigned long long)p->cache_slots, ms_plan_fmt(p->in.expert_bytes, b, sizeof b));
}

json_t *ms_plan_json(const ms_plan *p)
{
    return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:i,s:i,s:I,s:I,s:b,s:I,s:I,s:I}", "budget_bytes",
                     (json_int_t)p->in.budget, "fixed_bytes", (json_int_t)p->fixed, "baseline_bytes",
                     (json_int_t)p->in.baseline, "state_bytes", (json_int_t)p->in.state, "work_bytes",
                     (json_int_t)(p->in.work_fixed + p->in.work_per_token * (uint64_t)p->chunk),
                     "expert_read_buffer_bytes", (json_int_t)p->in.expert_fixed, "slack_bytes",
                     (json_int_t)p->margin, "prefill_chunk", (json_int_t)p->chunk, "trunk_pinned", p->n_pinned,
                     "trunk_matrices", p->in.n_trunk, "trunk_pinned_bytes", (json_int_t)p->pinned_bytes,
                     "trunk_streamed_bytes", (json_int_t)p->streamed_bytes, "streaming", p->streaming,
                     "ring_bytes", (json_int_t)(p->streaming ? p->in.ring : 0), "expert_cache_bytes",
                     (json_int_t)p->cache, "expert_cache_slots", (json_int_t)p->cache_slots);
}
