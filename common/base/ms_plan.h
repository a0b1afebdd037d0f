/* ms_plan: splits a RAM budget into fixed costs, pinned trunk, expert cache and streaming. */
#ifndef MS_PLAN_H
#define MS_PLAN_H

#include <stdint.h>
#include <stdio.h>

struct json_t;

/* What the planner is told. Sizes in bytes. */
typedef struct {
    uint64_t budget;           /* peak resident memory allowed for the whole run */
    uint64_t baseline;         /* resident before the planned allocations (code, tokenizer, small tensors) */
    uint64_t state;            /* sequence state: KDA states + MLA cache for every planned position */
    uint64_t work_fixed;       /* working buffers independent of the prefill chunk */
    uint64_t work_per_token;   /* working buffers per token of a prefill chunk */
    int64_t prompt_tokens;     /* tokens to prefill (chunk never larger) */
    int64_t max_chunk;         /* largest prefill chunk wanted (e.g. 64) */
    int64_t min_chunk;         /* rows a pass must hold (sequences decoding together); 0 = 1 */
    uint64_t expert_fixed;     /* expert read buffers (staging), whatever the cache */
    uint64_t expert_bytes;     /* one expert's cache slot */
    uint64_t min_cache;        /* smallest useful expert cache (e.g. top-k experts) */
    uint64_t max_slots;        /* experts that exist (the cache never needs more); 0 = no cap */
    const uint64_t *trunk;     /* [n_trunk] bytes of each trunk matrix, in forward order */
    int n_trunk;
    uint64_t ring;             /* trunk ring buffers, needed when any trunk matrix streams */
} ms_plan_in;

/* The plan. */
typedef struct {
    ms_plan_in in;             /* copy of the inputs (trunk pointer borrowed) */
    int64_t chunk;             /* prefill chunk in tokens */
    uint64_t margin;           /* slack for the allocator, thread stacks, small buffers */
    uint64_t fixed;            /* baseline + state + work + expert_fixed + margin (+ ring if streaming) */
    int n_pinned;              /* the first n_pinned trunk matrices stay resident */
    uint64_t pinned_bytes, streamed_bytes;
    int streaming;             /* 1 if the ring is used */
    uint64_t cache;            /* expert cache capacity */
    uint64_t cache_slots;      /* experts it holds */
} ms_plan;

/* Make the plan. Returns 0, or -1 with ms_err set (class MS_EXIT_BUDGET) when the budget is
 * below the fixed costs, naming the minimum budget that would work. */
int ms_plan_make(const ms_plan_in *in, ms_plan *out);

/* Human-readable plan, several lines starting with "plan: ". */
void ms_plan_print(const ms_plan *p, FILE *f);
/* The plan as a JSON object (new reference). */
struct json_t *ms_plan_json(const ms_plan *p);

/* Parse a size as every option does (ms_cachesim_parse_size): bytes, K/M/G/T or KiB..TiB =
 * powers of 1024, KB/MB/GB/TB = powers of 1000. Returns 0 or -1 with ms_err set. */
int ms_plan_parse_size(const char *s, uint64_t *out);
/* "1.50 GiB"-style text into buf. */
const char *ms_plan_fmt(uint64_t bytes, char *buf, size_t n);

#endif
