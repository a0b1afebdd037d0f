/* ms_smetrics: the counters and histograms of `serve`, rendered as Prometheus text for /metrics. */
#ifndef MS_SMETRICS_H
#define MS_SMETRICS_H

#include <stddef.h>
#include <stdint.h>

typedef struct ms_smetrics ms_smetrics;

/* Engine-side figures sampled at render time (by the caller, under its own lock). */
typedef struct {
    int queue_depth;              /* requests waiting for a place in the batch */
    int batch_size;               /* sequences in the running batch */
    int max_batch;
    uint64_t steps;               /* batched steps run */
    uint64_t bytes_read;          /* expert + trunk bytes read by forward passes */
    uint64_t cache_requests, cache_hits, cache_misses;
    uint64_t cancelled;           /* sequences dropped (disconnects, deadlines) */
    uint64_t bytes_read_trunk, bytes_read_experts; /* bytes_read split */
    uint64_t cache_capacity, cache_used, cache_evictions; /* the expert cache: bytes, bytes, experts */
    int workers, workers_up;      /* expert workers listed, and those answering */
    uint64_t worker_requests, worker_resends, worker_failovers;
    uint64_t drafted, accepted;   /* speculative decoding: draft tokens verified, confirmed */
    int pass_layer, pass_layers;  /* the pass running now: layers done of n (0 between passes) */
    int64_t pass_rows;            /* its rows (a prefill span: up to the whole prompt) */
    double pass_seconds_left;     /* estimated from the layers done */
    int prefix_on;                /* a prefix cache is used: */
    uint64_t prefix_lookups, prefix_hits, prefix_tokens; /* prompts looked up, found, tokens not prefilled */
    uint64_t prefix_bytes_ram, prefix_bytes_disk;        /* states kept */
    /* for the engine view (/api/engine): */
    double busy_seconds;          /* wall time the engine spent in steps */
    uint64_t passes, pass_rows_total; /* forward passes and the rows they carried */
    uint64_t decode_tokens;       /* tokens decoding produced */
    uint64_t prefill_rows;        /* rows that were prompt tokens */
    double io_wait_seconds;       /* compute waiting for reads */
    uint64_t bytes_read_at_load;  /* the pinned trunk, read at open */
} ms_smetrics_engine;

/* Tokens of finished generations (prompt, generated) and their count. */
void ms_smetrics_token_totals(ms_smetrics *m, uint64_t *prompt, uint64_t *generated, uint64_t *generations);
/* When serve started (Unix seconds): what tells one server's totals from the next one's. */
double ms_smetrics_started(const ms_smetrics *m);

/* All functions are thread-safe. */
ms_smetrics *ms_smetrics_new(void);
void ms_smetrics_free(ms_smetrics *m); /* accepts NULL */

/* One answered HTTP request: its endpoint label ("completions", "chat_completions", "models",
 * "health", "metrics", "other"), status code and seconds from arrival to its last byte. */
void ms_smetrics_request(ms_smetrics *m, const char *endpoint, int status, double seconds);
/* Seconds a generation waited (queued) before its prompt started to run. */
void ms_smetrics_queue_wait(ms_smetrics *m, double seconds);
/* One finished generation: prompt and generated tokens. */
void ms_smetrics_tokens(ms_smetrics *m, uint64_t prompt, uint64_t generated);
/* Seconds from a request's arrival to its first token; between two of its tokens. */
void ms_smetrics_ttft(ms_smetrics *m, double seconds);
void ms_smetrics_inter_token(ms_smetrics *m, double seconds);
/* The batch size of one step (histogram). */
void ms_smetrics_step(ms_smetrics *m, int batch);

/* The Prometheus text exposition (malloc'ed, *len bytes), with the process's own figures (RSS,
 * CPU seconds, start time) and the build (moestream_build_info). */
char *ms_smetrics_render(ms_smetrics *m, const ms_smetrics_engine *e, size_t *len);

#endif
