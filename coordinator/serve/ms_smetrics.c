/* ms_smetrics: serve's metrics: counters by endpoint and status, token counts, and histograms of
 * time to first token, time between tokens and batch size, as Prometheus text. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "ms_err.h"
#include "ms_proc.h"
#include "ms_smetrics.h"

#define N_SEC_BUCKETS 14
static const double sec_bounds[N_SEC_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
#define N_BATCH_BUCKETS 9
static const double batch_bounds[N_BATCH_BUCKETS] = {1, 2, 4, 8, 16, 32, 64, 128, 256};

typedef struct {
    uint64_t count[16]; /* per bound, not cumulative; the last one is +Inf */
    uint64_t n;
    double sum;
} histo;

#define N_ENDPOINTS 11
static const char *const endpoints[N_ENDPOINTS] = {"completions", "chat_completions", "models", "health", "metrics", "messages",
                                                   "count_tokens", "responses", "page", "engine", "other"};
#define N_CODES 11
/* 499: the client went away before its answer was complete (nginx's "client closed request") */
static const int codes[N_CODES] = {200, 400, 401, 404, 405, 413, 429, 499, 500, 503, 504};

struct ms_smetrics {
    pthread_mutex_t mu;
    uint64_t requests[N_ENDPOINTS][N_CODES + 1]; /* the last: any other status */
    uint64_t prompt_tokens, generated_tokens, generations;
    histo ttft, inter, batch, duration, wait;
    double start;                /* when serve started (Unix seconds) */
};

ms_smetrics *ms_smetrics_new(void)
{
    ms_smetrics *m = ms_calloc(1, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    m->start = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    return m;
}

void ms_smetrics_free(ms_smetrics *m)
{
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static void histo_add(ms_smetrics *m, histo *h, const double *bounds, int nb, double v);

void ms_smetrics_request(ms_smetrics *m, const char *endpoint, int status, double seconds)
{
    histo_add(m, &m->duration, sec_bounds, N_SEC_BUCKETS, seconds);
    int e = N_ENDPOINTS - 1, c = N_CODES;
    for (int i = 0; i < N_ENDPOINTS; i++)
        if (!strcmp(endpoint, endpoints[i])) e = i;
    for (int i = 0; i < N_CODES; i++)
        if (status == codes[i]) c = i;
    pthread_mutex_lock(&m->mu);
    m->requests[e][c]++;
    pthread_mutex_unlock(&m->mu);
}

void ms_smetrics_tokens(ms_smetrics *m, uint64_t prompt, uint64_t generated)
{
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += prompt;
    m->generated_tokens += generated;
    m->generations++;
    pthread_mutex_unlock(&m->mu);
}

static void histo_add(ms_smetrics *m, histo *h, const double *bounds, int nb, double v)
{
    int b = nb;
    for (int i = 0; i < nb; i++)
        if (v <= bounds[i]) {
            b = i;
            break;
        }
    pthread_mutex_lock(&m->mu);
    h->count[b]++;
    h->n++;
    h->sum += v;
    pthread_mutex_unlock(&m->mu);
}

void ms_smetrics_ttft(ms_smetrics *m, double s) { histo_add(m, &m->ttft, sec_bounds, N_SEC_BUCKETS, s); }
void ms_smetrics_inter_token(ms_smetrics *m, double s) { histo_add(m, &m->inter, sec_bounds, N_SEC_BUCKETS, s); }
void ms_smetrics_queue_wait(ms_smetrics *m, double s) { histo_add(m, &m->wait, sec_bounds, N_SEC_BUCKETS, s); }
void ms_smetrics_step(ms_smetrics *m, int batch) { histo_add(m, &m->batch, batch_bounds, N_BATCH_BUCKETS, batch); }

/* A growing text buffer. */
typedef struct {
    char *p;
    size_t n, cap;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        b->cap = b->cap * 2 + (size_t)(k > 0 ? k : 0) + 256;
        b->p = ms_realloc(b->p, b->cap);
    }
}

static void put_histo(buf *b, const char *name, const char *help, const histo *h, const double *bounds, int nb)
{
    put(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < nb; i++) {
        cum += h->count[i];
        put(b, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)cum);
    }
    put(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, (unsigned long long)h->n, name, h->sum, name,
        (unsigned long long)h->n);
}

char *ms_smetrics_render(ms_smetrics *m, const ms_smetrics_engine *e, size_t *len)
{
    buf b = {ms_malloc(4096), 0, 4096};
    pthread_mutex_lock(&m->mu);
    put(&b, "# HELP moestream_requests_total HTTP requests answered, by endpoint and status code.\n"
            "# TYPE moestream_requests_total counter\n");
    for (int i = 0; i < N_ENDPOINTS; i++)
        for (int c = 0; c <= N_CODES; c++)
            if (m->requests[i][c]) {
                char code[8];
                snprintf(code, sizeof code, "%d", c < N_CODES ? codes[c] : 0);
                put(&b, "moestream_requests_total{endpoint=\"%s\",code=\"%s\"} %llu\n", endpoints[i],
                    c < N_CODES ? code : "other", (unsigned long long)m->requests[i][c]);
            }
    put(&b,
        "# HELP moestream_generations_total Generations finished (completions and chats).\n"
        "# TYPE moestream_generations_total counter\nmoestream_generations_total %llu\n"
        "# HELP moestream_prompt_tokens_total Prompt tokens of finished generations.\n"
        "# TYPE moestream_prompt_tokens_total counter\nmoestream_prompt_tokens_total %llu\n"
        "# HELP moestream_generated_tokens_total Tokens generated by finished generations.\n"
        "# TYPE moestream_generated_tokens_total counter\nmoestream_generated_tokens_total %llu\n",
        (unsigned long long)m->generations, (unsigned long long)m->prompt_tokens, (unsigned long long)m->generated_tokens);
    put_histo(&b, "moestream_time_to_first_token_seconds", "Seconds from a request's arrival to its first token.", &m->ttft,
              sec_bounds, N_SEC_BUCKETS);
    put_histo(&b, "moestream_time_per_token_seconds", "Seconds between two tokens of one generation.", &m->inter,
              sec_bounds, N_SEC_BUCKETS);
    put_histo(&b, "moestream_step_batch_size", "Sequences advanced by one batched step.", &m->batch, batch_bounds,
              N_BATCH_BUCKETS);
    put_histo(&b, "moestream_request_duration_seconds", "Seconds from a request's arrival to its answer's last byte.",
              &m->duration, sec_bounds, N_SEC_BUCKETS);
    put_histo(&b, "moestream_queue_wait_seconds", "Seconds a generation waited for a place in the batch.", &m->wait,
              sec_bounds, N_SEC_BUCKETS);
    double start = m->start;
    pthread_mutex_unlock(&m->mu);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
                 (double)ru.ru_stime.tv_usec * 1e-6;
    put(&b,
        "# HELP process_resident_memory_bytes Resident memory of the serve process.\n"
        "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %llu\n"
        "# HELP process_cpu_seconds_total User and system CPU time of the serve process.\n"
        "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %.3f\n"
        "# HELP process_start_time_seconds When serve started, in seconds since the Unix epoch.\n"
        "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %.3f\n"
        "# HELP moestream_build_info The build serving (always 1).\n"
        "# TYPE moestream_build_info gauge\nmoestream_build_info{version=\"%s\"} 1\n",
        (unsigned long long)ms_proc_rss(), cpu, start, MS_VERSION);
    put(&b,
        "# HELP moestream_bytes_read_trunk_total Trunk bytes read from storage by forward passes.\n"
        "# TYPE moestream_bytes_read_trunk_total counter\nmoestream_bytes_read_trunk_total %llu\n"
        "# HELP moestream_bytes_read_experts_total Routed-expert bytes read from storage by forward passes.\n"
        "# TYPE moestream_bytes_read_experts_total counter\nmoestream_bytes_read_experts_total %llu\n"
        "# HELP moestream_expert_cache_capacity_bytes Bytes the expert cache may hold (the plan).\n"
        "# TYPE moestream_expert_cache_capacity_bytes gauge\nmoestream_expert_cache_capacity_bytes %llu\n"
        "# HELP moestream_expert_cache_used_bytes Bytes the expert cache holds now.\n"
        "# TYPE moestream_expert_cache_used_bytes gauge\nmoestream_expert_cache_used_bytes %llu\n"
        "# HELP moestream_expert_cache_evictions_total Experts evicted from the cache.\n"
        "# TYPE moestream_expert_cache_evictions_total counter\nmoestream_expert_cache_evictions_total %llu\n"
        "# HELP moestream_workers Expert workers listed (0: experts run in this process).\n"
        "# TYPE moestream_workers gauge\nmoestream_workers %d\n"
        "# HELP moestream_workers_up Expert workers answering.\n"
        "# TYPE moestream_workers_up gauge\nmoestream_workers_up %d\n"
        "# HELP moestream_worker_requests_total Requests sent to expert workers.\n"
        "# TYPE moestream_worker_requests_total counter\nmoestream_worker_requests_total %llu\n"
        "# HELP moestream_worker_resends_total Requests sent again (a lost or late answer).\n"
        "# TYPE moestream_worker_resends_total counter\nmoestream_worker_resends_total %llu\n"
        "# HELP moestream_worker_failovers_total Requests moved to another replica after a worker failed.\n"
        "# TYPE moestream_worker_failovers_total counter\nmoestream_worker_failovers_total %llu\n"
        "# HELP moestream_draft_tokens_total Speculative draft tokens verified.\n"
        "# TYPE moestream_draft_tokens_total counter\nmoestream_draft_tokens_total %llu\n"
        "# HELP moestream_accepted_draft_tokens_total Draft tokens the model confirmed.\n"
        "# TYPE moestream_accepted_draft_tokens_total counter\nmoestream_accepted_draft_tokens_total %llu\n",
        (unsigned long long)e->bytes_read_trunk, (unsigned long long)e->bytes_read_experts,
        (unsigned long long)e->cache_capacity, (unsigned long long)e->cache_used, (unsigned long long)e->cache_evictions,
        e->workers, e->workers_up, (unsigned long long)e->worker_requests, (unsigned long long)e->worker_resends,
        (unsigned long long)e->worker_failovers, (unsigned long long)e->drafted, (unsigned long long)e->accepted);
    double hit = e->cache_requests ? (double)e->cache_hits / (double)e->cache_requests : 0.0;
    put(&b,
        "# HELP moestream_queue_depth Requests waiting for a place in the batch.\n"
        "# TYPE moestream_queue_depth gauge\nmoestream_queue_depth %d\n"
        "# HELP moestream_batch_size Sequences in the running batch.\n"
        "# TYPE moestream_batch_size gauge\nmoestream_batch_size %d\n"
        "# HELP moestream_max_batch Sequences the plan allows in one batch.\n"
        "# TYPE moestream_max_batch gauge\nmoestream_max_batch %d\n"
        "# HELP moestream_steps_total Batched engine steps run.\n"
        "# TYPE moestream_steps_total counter\nmoestream_steps_total %llu\n"
        "# HELP moestream_cancelled_total Sequences dropped before their end (client gone, deadline).\n"
        "# TYPE moestream_cancelled_total counter\nmoestream_cancelled_total %llu\n"
        "# HELP moestream_bytes_read_total Bytes of weights read from storage by forward passes.\n"
        "# TYPE moestream_bytes_read_total counter\nmoestream_bytes_read_total %llu\n"
        "# HELP moestream_expert_cache_requests_total Routed-expert lookups in the RAM cache.\n"
        "# TYPE moestream_expert_cache_requests_total counter\nmoestream_expert_cache_requests_total %llu\n"
        "# HELP moestream_expert_cache_hits_total Routed-expert lookups served from the RAM cache.\n"
        "# TYPE moestream_expert_cache_hits_total counter\nmoestream_expert_cache_hits_total %llu\n"
        "# HELP moestream_expert_cache_hit_ratio Hits over lookups since start.\n"
        "# TYPE moestream_expert_cache_hit_ratio gauge\nmoestream_expert_cache_hit_ratio %.6f\n",
        e->queue_depth, e->batch_size, e->max_batch, (unsigned long long)e->steps, (unsigned long long)e->cancelled,
        (unsigned long long)e->bytes_read, (unsigned long long)e->cache_requests, (unsigned long long)e->cache_hits, hit);
    put(&b,
        "# HELP moestream_pass_layers_done Layers done of the forward pass running now (0 between passes).\n"
        "# TYPE moestream_pass_layers_done gauge\nmoestream_pass_layers_done %d\n"
        "# HELP moestream_pass_layers Layers of the forward pass running now.\n"
        "# TYPE moestream_pass_layers gauge\nmoestream_pass_layers %d\n"
        "# HELP moestream_pass_rows Token rows of the forward pass running now (a prefill span: up to a whole prompt).\n"
        "# TYPE moestream_pass_rows gauge\nmoestream_pass_rows %lld\n"
        "# HELP moestream_pass_seconds_left Estimated seconds until the running pass ends, from its layers done.\n"
        "# TYPE moestream_pass_seconds_left gauge\nmoestream_pass_seconds_left %.3f\n",
        e->pass_layer, e->pass_layers, (long long)e->pass_rows, e->pass_seconds_left);
    if (e->prefix_on)
        put(&b,
            "# HELP moestream_prefix_cache_lookups_total Prompts looked up in the prefix cache.\n"
            "# TYPE moestream_prefix_cache_lookups_total counter\nmoestream_prefix_cache_lookups_total %llu\n"
            "# HELP moestream_prefix_cache_hits_total Prompts that started from a kept state.\n"
            "# TYPE moestream_prefix_cache_hits_total counter\nmoestream_prefix_cache_hits_total %llu\n"
            "# HELP moestream_prefix_cache_tokens_reused_total Prompt tokens not prefilled thanks to kept states.\n"
            "# TYPE moestream_prefix_cache_tokens_reused_total counter\nmoestream_prefix_cache_tokens_reused_total %llu\n"
            "# HELP moestream_prefix_cache_bytes Bytes of kept states, in RAM and on disk.\n"
            "# TYPE moestream_prefix_cache_bytes gauge\nmoestream_prefix_cache_bytes{where=\"ram\"} %llu\n"
            "moestream_prefix_cache_bytes{where=\"disk\"} %llu\n",
            (unsigned long long)e->prefix_lookups, (unsigned long long)e->prefix_hits, (unsigned long long)e->prefix_tokens,
            (unsigned long long)e->prefix_bytes_ram, (unsigned long long)e->prefix_bytes_disk);
    *len = b.n;
    return b.p;
}

double ms_smetrics_started(const ms_smetrics *m) { return m->start; } /* set once, before any thread reads it */

void ms_smetrics_token_totals(ms_smetrics *m, uint64_t *prompt, uint64_t *generated, uint64_t *generations)
{
    pthread_mutex_lock(&m->mu);
    *prompt = m->prompt_tokens;
    *generated = m->generated_tokens;
    *generations = m->generations;
    pthread_mutex_unlock(&m->mu);
}
