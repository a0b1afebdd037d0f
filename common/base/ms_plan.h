/* ms_plan: the one RAM budget planner (coordinator and worker): fixed costs, pinned trunk, expert cache. */
#ifndef MS_PLAN_H
#define MS_PLAN_H

#include <stdint.h>

struct json_t;

/* What the planner is told. Sizes in bytes. A process without a trunk (an expert worker) gives
 * n_trunk 0 and ring 0; without prefill chunks, work_per_token 0 and prompt_tokens 1. */
typedef struct {
    uint64_t budget;           /* peak resident memory allowed for the whole run */
    uint64_t baseline;         /* resident before the planned allocations (code, tokenizer, small tensors) */
    uint64_t state;            /* sequence state (the family's) for every planned position */
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
    uint64_t state_cache;      /* saved sequence states kept in RAM (a prefix cache), 0: none */
    /* Prefill spans: a pass of prefilling sequences only may take more rows than a chunk, its
     * extra working memory lent by the expert cache (emptied to min_cache for the span: a span
     * reads each expert of a layer once, so a cache would only hold what it will not need again)
     * and the budget's spare. 0: spans are chunks. */
    int64_t max_span;          /* rows a span may want (the longest prompt) */
    uint64_t span_extra_per_token; /* working memory per row of a span on top of work_per_token */
    int span_pins;             /* 1: a span may also borrow the pinned trunk (streamed for the span
                                  through a second ring, read again after it) */
    uint64_t expert_read;      /* bytes one expert's read brings from disk (0: expert_bytes) */
    int span_forced;           /* 1: spans asked for: as long as memory allows (lending the pins
                                  too when that holds more), whatever the estimate */
    double route_share;        /* top_k / experts a layer: the share of a layer's experts one token
                                  reads (the bytes estimate of spans; 0: every expert) */
    int span_cache_kept;       /* 1: the expert cache lends nothing (it is in worker processes) */
    int64_t mix_wanted;        /* rows of a pass beside decoding sequences, with spans: 0 the
                                  chunk, -1 those that touch 9/10 of a layer's experts, N up to N */
    /* A scratch file (ms_arena_reserve_file) may hold the scratch of a span memory cannot: one
     * span of max_span rows, each weight read once, its scratch written and read back through
     * the memory the cache and spare would have lent (the page cache's window). */
    int scratch;               /* 1: a scratch directory on disk is there */
    int scratch_forced;        /* 1: take it whenever memory cannot hold a max_span-row span (else
                                  only with a file at most MS_PLAN_SCRATCH_RATIO times its window) */
    int n_layers;              /* layers a pass goes through (the scratch traffic estimate) */
} ms_plan_in;

/* The most a span's scratch file may exceed its window (times) for the plan to take it unless
 * asked (scratch_forced): measured up to 4.9 times (the k3-slice, 4,096 tokens at 1 GiB). */
#ifndef MS_PLAN_SCRATCH_RATIO
#define MS_PLAN_SCRATCH_RATIO 5
#endif

/* The plan. */
typedef struct {
    ms_plan_in in;             /* copy of the inputs (trunk pointer borrowed) */
    int64_t chunk;             /* prefill chunk in tokens (any pass) */
    int64_t span;              /* rows of a prefill-only pass (>= chunk; > chunk: it borrows the cache) */
    int64_t span_keeping_pins; /* rows of a span that fit without lending the pins (<= span; a
                                  shorter span keeps them even with span_pins) */
    int64_t mix;               /* rows of a pass that prefills while other sequences decode (chunk
                                  <= mix <= span_keeping_pins, as mix_wanted says; spans only): the
                                  cache lent, never the pins */
    uint64_t span_cache_slots; /* expert cache slots kept during a span (the rest is lent) */
    uint64_t read_prompt;      /* the bytes a max_span-token prompt is estimated to read from disk
                                  as planned (chunks, spans or spans lending the pins), and ... */
    uint64_t read_chunks;      /* ... in chunks (0 both without max_span) */
    int span_pins;             /* 1: spans borrow the pinned trunk too (fewer spans for the longest
                                  prompt, and fewer bytes read in all counting its reading again) */
    int scratch;               /* 1: a span longer than span_in_memory keeps its scratch in a file
                                  (span is then max_span) */
    int64_t span_in_memory;    /* the longest span whose scratch is in memory (= span without scratch) */
    uint64_t scratch_bytes;    /* the file for a span-row pass: its work and its rows' matmul copies */
    uint64_t scratch_traffic;  /* bytes a max_span-token prompt is estimated to write to and read
                                  back from it: per layer, what of it exceeds the window, twice */
    uint64_t scratch_window;   /* the memory the kernel may cache the file in (what the cache and
                                  the spare lend, and with scratch_pins the pins less a ring) */
    int scratch_pins;          /* 1: such a span also lends the pinned trunk (a larger window for
                                  the pins' second read: fewer bytes in all) */
    uint64_t margin;           /* slack for the allocator, thread stacks, small buffers (ms_plan_slack) */
    uint64_t fixed;            /* baseline + state + work + expert_fixed + state_cache + margin (+ ring if streaming) */
    int n_pinned;              /* the first n_pinned trunk matrices stay resident */
    uint64_t pinned_bytes, streamed_bytes;
    int streaming;             /* 1 if the ring is used */
    uint64_t cache;            /* expert cache capacity */
    uint64_t cache_slots;      /* experts it holds */
} ms_plan;

/* The one slack rule of every planned process: room for what is not modelled exactly (malloc
 * arenas, thread stacks, page rounding, zmq): 24 MiB + 1% of the budget. */
uint64_t ms_plan_slack(uint64_t budget);
/* The budget when none is given: percent % of MemAvailable (ms_proc), or 8 GiB when /proc does
 * not say. The coordinator takes 100, a standalone worker 90. */
uint64_t ms_plan_default_budget(int percent);

/* Make the plan: the largest prefill chunk (up to max_chunk) whose fixed costs fit, then the
 * trunk prefix that fits pinned (the rest streams through the ring), then whole expert cache
 * slots (at least min_cache, at most max_slots) from what is left, then the longest prefill span
 * (up to max_span) whose working memory the cache above min_cache and the spare can lend, and,
 * with span_pins, the pinned trunk too; spans (and lent pins) are taken when they read a fifth
 * fewer bytes for a max_span-token prompt than chunks (each pass streams the unpinned trunk and
 * reads the experts its rows touch, chunks hitting the cache kept; lent pins stream with every
 * span and are read again once after), or when span_forced; with a scratch directory, one span
 * of max_span rows in a scratch file when its bytes (the checkpoint's plus the file's traffic)
 * are a fifth fewer than the best in memory (or scratch_forced); with spans, the rows of a pass that
 * prefills beside decoding sequences (mix: see ms_plan). Returns 0, or -1 with ms_err
 * set (class MS_EXIT_BUDGET) when the budget is below the fixed costs, listing them and naming
 * the minimum budget that would work as "... about SIZE (N bytes)". */
int ms_plan_make(const ms_plan_in *in, ms_plan *out);

/* What a coordinator reserves in expert_fixed for each local worker's process besides the
 * worker's read buffers (its baseline, compute and request buffers and slack come out of this,
 * its share of the cache and the spare: see ms_plan_local_budget). */
#define MS_PLAN_WORKER_PROCESS (64ull << 20)

/* The budget the plan leaves unused (the cache is capped at max_slots, and whole slots). */
uint64_t ms_plan_spare(const ms_plan *p);
/* The --ram-budget of each of n local workers started by a coordinator with this plan: what it
 * reserved for their processes (expert_fixed), its expert cache and its spare, split evenly
 * (each worker then plans its own cache with ms_plan_make). */
uint64_t ms_plan_local_budget(const ms_plan *p, int n);

/* The plan at info level (ms_log): three lines starting with "plan: ". */
void ms_plan_log(const ms_plan *p);
/* The plan as a JSON object (new reference). */
struct json_t *ms_plan_json(const ms_plan *p);

#endif
