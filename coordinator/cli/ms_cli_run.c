/* ms_cli_run: the `run` and `demo` commands: prefill, incremental decoding, output and stats. */
#include <getopt.h>
#include <signal.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ms_cli.h"
#include "ms_err.h"
#include "ms_local.h"
#include "ms_model.h"
#include "ms_remote.h"
#include "ms_wire.h"
#include "ms_plan.h"
#include "ms_sample.h"
#include "ms_synth.h"
#include "ms_tok.h"

typedef struct {
    const char *model, *prompt, *prompt_file, *ids, *dump, *trace;
    const char *workers, *cluster, *curve_secret;
    long long local_workers; /* -1 = default */
    float worker_timeout;
    int insecure;
    long long n, threads, seed, io_depth, chunk;
    float temperature, top_p;
    uint64_t budget;
    int json, allow_special, stop_eos, quiet, buffered, lru;
} run_opts;

static void run_usage(FILE *f)
{
    fputs("usage: moestream run --model DIR (--prompt TEXT | --prompt-file PATH | --ids 1,2,3) [-n N]\n"
          "                     [--temperature T] [--top-p P] [--seed S] [--threads N] [--json]\n"
          "                     [--dump-logits PATH] [--allow-special] [--stop-at-eos] [--quiet]\n"
          "                     [--ram-budget SIZE] [--trace PATH] [--buffered-io] [--io-depth N]\n"
          "                     [--prefill-chunk N] [--lru-cache]\n"
          "                     [--workers EP[,EP...] | --cluster FILE | --local-workers N]\n"
          "                     [--curve-secret FILE] [--insecure] [--worker-timeout SEC]\n"
          "\n"
          "Generates N tokens (default 16) after the prompt. --temperature 0 (the default) is greedy.\n"
          "--prompt needs a tokenizer (tiktoken.model) in DIR; --ids works without one.\n"
          "--json prints one JSON object: prompt_ids, generated_ids, text (with a tokenizer), stats.\n"
          "--dump-logits writes little-endian f32 rows of vocab_size values: every prompt position,\n"
          "then each generated position whose logits were computed (prompt + N - 1 rows).\n"
          "--threads 0 (default) uses one thread per CPU; results do not depend on it.\n"
          "--ram-budget SIZE (K/M/G/T = powers of 1024; default: the memory available now) bounds the\n"
          "peak resident memory of the run; routed experts are read from disk on demand into a cache,\n"
          "trunk matrices that do not fit stream from disk; the answer is the same at every budget.\n"
          "--trace PATH records every routed-expert request as little-endian int32 (layer, expert) pairs.\n"
          "--buffered-io reads through the page cache instead of O_DIRECT; --io-depth N reads in flight\n"
          "(default 8); --prefill-chunk N caps the tokens per prefill pass; --lru-cache uses plain LRU.\n"
          "--workers / --cluster use moestream-worker processes already running (the cluster file is JSON:\n"
          "{\"workers\": [{\"endpoint\": \"tcp://host:port\", \"public_key\": \"<Z85>\"}]}); over tcp the\n"
          "connection is CURVE-encrypted with --curve-secret FILE (this side's key, from moestream keygen)\n"
          "unless --insecure. --local-workers N starts N workers on this box over ipc (0, the default,\n"
          "computes experts in this process) and splits the budget among all processes.\n"
          "--worker-timeout SEC is the deadline of one request (default 60).\n",
          f);
}

static long peak_rss_bytes(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss * 1024L;
}

/* Route observer: append (layer, expert) int32 pairs in request order. */
static void trace_route(void *ctx, int layer, int64_t T, int k, const int32_t *ids)
{
    FILE *f = ctx;
    for (int64_t i = 0; i < T * k; i++) {
        int32_t pair[2] = {layer, ids[i]};
        fwrite(pair, sizeof pair, 1, f);
    }
}

static int write_rows(FILE *f, const float *rows, int64_t n, int64_t V, const char *path)
{
    if (fwrite(rows, sizeof(float), (size_t)(n * V), f) != (size_t)(n * V)) {
        ms_err_set("cannot write logits to %s", path);
        return ms_err_set_code(MS_EXIT_IO);
    }
    return 0;
}

/* The experts' workers of a run: remote (listed) or started here. */
typedef struct {
    ms_remote_worker *list;   /* owned when listed; the ms_local's when local */
    int n, listed;
    ms_local *local;
    ms_remote *remote;
} workers_t;

static void stop_workers(workers_t *wk)
{
    ms_remote_free(wk->remote);
    wk->remote = NULL;
    ms_local_stop(wk->local); /* SIGTERM, wait, remove the socket directory */
    wk->local = NULL;
    if (wk->listed) ms_remote_workers_free(wk->list, wk->n);
    wk->list = NULL;
}

static volatile sig_atomic_t got_signal;
static void on_signal(int sig) { got_signal = sig; }

static int start_workers(const run_opts *o, ms_model *m, workers_t *wk)
{
    const char *cmd = "run";
    const ms_cfg *c = ms_model_cfg(m);
    char secret[41] = "";
    if (o->curve_secret && ms_remote_read_key(o->curve_secret, secret) != 0) return ms_cli_fail_err(cmd);
    if (o->workers || o->cluster) {
        int rc = o->cluster ? ms_remote_load_cluster(o->cluster, &wk->list, &wk->n)
                            : ms_remote_parse_list(o->workers, &wk->list, &wk->n);
        if (rc != 0) return ms_cli_fail_err(cmd);
        wk->listed = 1;
        for (int i = 0; i < wk->n; i++)
            if (!strncmp(wk->list[i].endpoint, "tcp://", 6) && !wk->list[i].public_key && !o->insecure)
                return ms_cli_fail(cmd, MS_EXIT_USAGE,
                                   "worker %s is reached over plain tcp: give its public key in a --cluster file "
                                   "(with --curve-secret), or pass --insecure",
                                   wk->list[i].endpoint);
    } else {
        const ms_plan *p = ms_model_plan(m);
        int n = (int)o->local_workers;
        /* Each worker: its read buffers and process overhead (reserved by the plan) plus an equal
         * share of the expert cache. */
        uint64_t each = 0;
        if (p) {
            /* The workers' reserved read buffers and process costs, the expert cache, and
             * whatever the plan left unused (the cache is capped at the model's experts). */
            uint64_t used = p->fixed + p->pinned_bytes + p->cache;
            uint64_t spare = p->in.budget > used ? p->in.budget - used : 0;
            each = (p->in.expert_fixed + p->cache + spare) / (uint64_t)n;
        }
        wk->local = ms_local_start(o->model, n, c->n_experts, each, (int)(o->threads ? o->threads : 0), o->buffered,
                                   1, &wk->list, &wk->n);
        if (!wk->local) return ms_cli_fail_err(cmd);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
    }
    char fp[17];
    if (ms_wire_fingerprint(o->model, fp) != 0) return ms_cli_fail_err(cmd);
    ms_remote_opts ro = {wk->n, wk->list, secret[0] ? secret : NULL, fp, c->n_layers, c->n_experts, c->latent,
                         o->worker_timeout, o->quiet};
    wk->remote = ms_remote_new(&ro, c->first_dense);
    if (!wk->remote) return ms_cli_fail_err(cmd);
    ms_model_set_experts(m, ms_remote_iface(wk->remote));
    return MS_EXIT_OK;
}

static int generate(const run_opts *o)
{
    const char *cmd = "run";
    double t0 = ms_cli_now();
    ms_model *m = NULL;
    ms_tok *tok = NULL;
    int rc = MS_EXIT_OK;
    int32_t *prompt = NULL, *gen = NULL;
    size_t np = 0;
    float *logits = NULL;
    FILE *dump = NULL, *trace = NULL;
    ms_seq *seq = NULL;
    workers_t wk = {0};
    const ms_cfg *c = NULL;
    int64_t V = 0;
    if (ms_tok_present(o->model) && !(tok = ms_tok_load(o->model))) {
        rc = ms_cli_fail_err(cmd);
        goto out;
    }
    if (o->ids) {
        if (ms_cli_parse_ids(o->ids, &prompt, &np) != 0) {
            rc = ms_cli_fail_err(cmd);
            goto out;
        }
    } else {
        if (!tok) {
            rc = ms_cli_fail(cmd, MS_EXIT_USAGE,
                             "model %s has no tokenizer (tiktoken.model), so --prompt/--prompt-file cannot be "
                             "used; pass token ids with --ids",
                             o->model);
            goto out;
        }
        size_t len = 0;
        char *buf = NULL;
        const char *text = o->prompt;
        if (o->prompt_file) {
            if (!(buf = ms_cli_read_file(o->prompt_file, &len))) {
                rc = ms_cli_fail_err(cmd);
                goto out;
            }
            text = buf;
        } else {
            len = strlen(text);
        }
        int e = ms_tok_encode(tok, text, len, o->allow_special, &prompt, &np);
        free(buf);
        if (e != 0) {
            ms_err_set_code(MS_EXIT_INPUT);
            rc = ms_cli_fail_err(cmd);
            goto out;
        }
    }
    if (np == 0) {
        rc = ms_cli_fail(cmd, MS_EXIT_INPUT, "the prompt is empty (no tokens)");
        goto out;
    }
    ms_run_opts ro = {0};
    ro.n_threads = (int)o->threads;
    ro.ram_budget = o->budget;
    ro.buffered = o->buffered;
    ro.io_depth = (int)o->io_depth;
    ro.prompt_tokens = (int64_t)np;
    ro.max_positions = (int64_t)np + o->n + 1;
    ro.max_chunk = o->chunk;
    ro.all_logits = o->dump != NULL;
    ro.lru = o->lru;
    ro.quiet = o->quiet;
    int remote = o->workers || o->cluster || o->local_workers > 0;
    ro.remote_experts = remote;
    ro.local_workers = o->local_workers > 0 ? (int)o->local_workers : 0;
    if (!(m = ms_model_open(o->model, &ro))) {
        rc = ms_cli_fail_err(cmd);
        goto out;
    }
    c = ms_model_cfg(m);
    V = c->vocab;
    if (remote && (rc = start_workers(o, m, &wk)) != MS_EXIT_OK) goto out;
    for (size_t i = 0; i < np; i++)
        if (prompt[i] >= V) {
            rc = ms_cli_fail(cmd, MS_EXIT_INPUT, "prompt token id %d is outside the model's vocabulary (%lld ids)",
                             prompt[i], (long long)V);
            goto out;
        }
    if (o->dump && !(dump = fopen(o->dump, "wb"))) {
        rc = ms_cli_fail(cmd, MS_EXIT_IO, "cannot create %s", o->dump);
        goto out;
    }
    if (o->trace) {
        if (!(trace = fopen(o->trace, "wb"))) {
            rc = ms_cli_fail(cmd, MS_EXIT_IO, "cannot create %s", o->trace);
            goto out;
        }
        ms_model_set_route_observer(m, trace_route, trace);
    }
    double t_load = ms_cli_now() - t0;
    ms_sampler sp;
    ms_sampler_init(&sp, o->temperature, o->top_p, (uint64_t)o->seed);
    seq = ms_seq_new(m);
    gen = ms_malloc(sizeof(int32_t) * (size_t)(o->n + 1));
    int64_t chunk = ms_model_chunk(m);
    logits = ms_malloc(sizeof(float) * (size_t)((dump ? chunk : 1) * V)); /* [rows][V] */
    int64_t ng = 0;
    ms_model_stats after_prefill;
    memset(&after_prefill, 0, sizeof after_prefill);
    int progress = !o->quiet && isatty(2);
    double t1 = ms_cli_now(), t_prefill = 0.0, t_decode = 0.0;
    if (o->n > 0) {
        /* Layer-major prefill in chunks the plan allows: all rows of a chunk go through a layer
         * together, so each routed expert is read at most once per layer per chunk. */
        const float *last = logits;
        for (int64_t p0 = 0; p0 < (int64_t)np; p0 += chunk) {
            int64_t cn = (int64_t)np - p0 < chunk ? (int64_t)np - p0 : chunk;
            if (progress) fprintf(stderr, "\rprefill %lld/%zu tokens", (long long)(p0 + cn), np);
            if (ms_model_forward(m, seq, prompt + p0, cn, dump != NULL, logits) != 0) {
                if (progress) fputc('\n', stderr);
                rc = ms_cli_fail_err(cmd);
                goto out;
            }
            if (dump && write_rows(dump, logits, cn, V, o->dump) != 0) {
                rc = ms_cli_fail_err(cmd);
                goto out;
            }
            last = logits + (dump ? (cn - 1) * V : 0);
        }
        if (progress) fputc('\n', stderr);
        t_prefill = ms_cli_now() - t1;
        ms_model_get_stats(m, &after_prefill);
        int32_t next = ms_sampler_pick(&sp, last, V);
        double t2 = ms_cli_now();
        for (;;) {
            gen[ng++] = next;
            if (!o->json && !o->quiet) {
                if (tok) {
                    char *piece = NULL;
                    size_t plen = 0;
                    if (ms_tok_decode(tok, &next, 1, &piece, &plen) == 0) fwrite(piece, 1, plen, stdout);
                    free(piece);
                } else {
                    printf("%s%d", ng > 1 ? " " : "", next);
                }
                fflush(stdout);
            }
            if (ng >= o->n || (o->stop_eos && next == c->eos_id)) break;
            if (got_signal) {
                rc = ms_cli_fail(cmd, 130, "interrupted; stopping the workers");
                goto out;
            }
            if (progress && o->json) fprintf(stderr, "\rtoken %lld/%lld", (long long)ng + 1, o->n);
            if (ms_model_forward(m, seq, &next, 1, 0, logits) != 0) {
                rc = ms_cli_fail_err(cmd);
                goto out;
            }
            if (dump && write_rows(dump, logits, 1, V, o->dump) != 0) {
                rc = ms_cli_fail_err(cmd);
                goto out;
            }
            next = ms_sampler_pick(&sp, logits, V);
        }
        t_decode = ms_cli_now() - t2;
        if (progress && o->json) fputc('\n', stderr);
    }
    if (trace && fclose(trace) != 0) {
        trace = NULL;
        rc = ms_cli_fail(cmd, MS_EXIT_IO, "cannot write %s", o->trace);
        goto out;
    }
    trace = NULL;
    if (dump) {
        int bad = fclose(dump) != 0;
        dump = NULL;
        if (bad) {
            rc = ms_cli_fail(cmd, MS_EXIT_IO, "cannot write %s", o->dump);
            goto out;
        }
    }
    /* All local processes together: the coordinator and the workers it started. */
    uint64_t rss_self = (uint64_t)peak_rss_bytes(), rss_all = rss_self + ms_local_peak_rss(wk.local);
    double dec_tps = ng > 1 && t_decode > 0 ? (double)(ng - 1) / t_decode : 0.0;
    double pre_tps = t_prefill > 0 ? (double)np / t_prefill : 0.0;
    double wall = ms_cli_now() - t0;
    ms_model_stats ms;
    ms_model_get_stats(m, &ms);
    double read_rate = ms.read_busy_seconds > 0 ? (double)ms.bytes_read_experts / ms.read_busy_seconds : 0.0;
    double io_share = wall > 0 ? ms.io_wait_seconds / wall : 0.0;
    double s_per_tok = ng > 1 ? t_decode / (double)(ng - 1) : 0.0;
    if (o->json) {
        json_t *pj = json_array(), *gj = json_array();
        for (size_t i = 0; i < np; i++) json_array_append_new(pj, json_integer(prompt[i]));
        for (int64_t i = 0; i < ng; i++) json_array_append_new(gj, json_integer(gen[i]));
        json_t *stats = json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:I,s:I,s:I}", "load_seconds", t_load,
                                  "prefill_seconds", t_prefill, "decode_seconds", t_decode,
                                  "decode_seconds_per_token", s_per_tok, "prefill_tokens_per_second", pre_tps,
                                  "decode_tokens_per_second", dec_tps, "prompt_tokens", (json_int_t)np,
                                  "generated_tokens", (json_int_t)ng, "threads",
                                  (json_int_t)ms_pool_size(ms_model_pool(m)), "peak_rss_bytes",
                                  (json_int_t)rss_all);
        json_object_set_new(stats, "peak_rss_coordinator_bytes", json_integer((json_int_t)rss_self));
        json_object_set_new(stats, "bytes_read_experts", json_integer((json_int_t)ms.bytes_read_experts));
        json_object_set_new(stats, "bytes_read_trunk", json_integer((json_int_t)ms.bytes_read_trunk));
        json_object_set_new(stats, "bytes_read_at_load", json_integer((json_int_t)ms.bytes_read_at_load));
        uint64_t dec_bytes = ms.bytes_read_experts + ms.bytes_read_trunk - after_prefill.bytes_read_experts -
                             after_prefill.bytes_read_trunk;
        json_object_set_new(stats, "decode_bytes_read_per_token",
                            json_real(ng > 1 ? (double)dec_bytes / (double)(ng - 1) : 0.0));
        json_object_set_new(stats, "expert_requests", json_integer((json_int_t)ms.expert_requests));
        json_object_set_new(stats, "expert_cache_hits", json_integer((json_int_t)ms.expert_cache_hits));
        json_object_set_new(stats, "expert_cache_misses", json_integer((json_int_t)ms.expert_cache_misses));
        json_object_set_new(stats, "expert_cache_evictions", json_integer((json_int_t)ms.expert_cache_evictions));
        json_object_set_new(stats, "expert_cache_peak_bytes", json_integer((json_int_t)ms.expert_cache_peak_bytes));
        json_object_set_new(stats, "expert_cache_capacity_bytes", json_integer((json_int_t)ms.expert_cache_capacity));
        json_object_set_new(stats, "expert_bytes", json_integer((json_int_t)ms.expert_bytes));
        json_object_set_new(stats, "expert_read_bytes_per_second", json_real(read_rate));
        json_object_set_new(stats, "io_wait_seconds", json_real(ms.io_wait_seconds));
        json_object_set_new(stats, "io_wait_share", json_real(io_share));
        json_object_set_new(stats, "wall_seconds", json_real(wall));
        if (ms_model_plan(m)) json_object_set_new(stats, "plan", ms_plan_json(ms_model_plan(m)));
        if (wk.remote) {
            ms_remote_stats rs;
            ms_remote_get_stats(wk.remote, &rs);
            json_object_set_new(stats, "workers",
                                json_pack("{s:i,s:i,s:I,s:I,s:I,s:I,s:I}", "count", wk.n, "up", rs.workers_up,
                                          "requests", (json_int_t)rs.requests, "resends", (json_int_t)rs.resends,
                                          "failovers", (json_int_t)rs.failovers, "bytes_sent",
                                          (json_int_t)rs.bytes_sent, "bytes_received", (json_int_t)rs.bytes_received));
        }
        json_t *out = json_pack("{s:o,s:o,s:o}", "prompt_ids", pj, "generated_ids", gj, "stats", stats);
        if (tok) {
            char *text = NULL;
            size_t len = 0;
            if (ms_tok_decode(tok, gen, (size_t)ng, &text, &len) == 0)
                json_object_set_new(out, "text", ms_cli_json_text(text, len));
            free(text);
        }
        json_dumpf(out, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(out);
    } else if (!o->quiet) {
        fputc('\n', stdout);
    }
    if (!o->quiet) {
        char a[64], b[64], d[64];
        fprintf(stderr,
                "moestream run: %zu prompt tokens in %.3f s (%.1f tok/s), %lld generated in %.3f s (%.3f s/token), "
                "load %.3f s, %d threads, peak RSS %s\n",
                np, t_prefill, pre_tps, (long long)ng, t_decode, s_per_tok, t_load, ms_pool_size(ms_model_pool(m)),
                ms_plan_fmt(rss_all, a, sizeof a));
        if (ms.expert_requests || ms.bytes_read_trunk)
            fprintf(stderr,
                    "moestream run: read %s of experts (%.0f MB/s while reading), %s of trunk; expert cache %llu hits, "
                    "%llu misses, %llu evictions; waiting on I/O %.0f%% of %.2f s\n",
                    ms_plan_fmt(ms.bytes_read_experts, b, sizeof b), read_rate / 1e6,
                    ms_plan_fmt(ms.bytes_read_trunk, d, sizeof d), (unsigned long long)ms.expert_cache_hits,
                    (unsigned long long)ms.expert_cache_misses, (unsigned long long)ms.expert_cache_evictions,
                    100.0 * io_share, wall);
    }
out:
    if (dump) fclose(dump);
    if (trace) fclose(trace);
    stop_workers(&wk);
    ms_seq_free(seq);
    free(logits);
    free(gen);
    free(prompt);
    ms_tok_free(tok);
    ms_model_free(m);
    return rc;
}

static int parse_run(int argc, char **argv, run_opts *o, int demo)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},  {"prompt", required_argument, 0, 'p'},
                                         {"prompt-file", required_argument, 0, 'P'}, {"ids", required_argument, 0, 'i'},
                                         {"temperature", required_argument, 0, 't'}, {"top-p", required_argument, 0, 'k'},
                                         {"seed", required_argument, 0, 's'},   {"threads", required_argument, 0, 'T'},
                                         {"json", no_argument, 0, 'j'},         {"dump-logits", required_argument, 0, 'd'},
                                         {"allow-special", no_argument, 0, 'a'}, {"stop-at-eos", no_argument, 0, 'e'},
                                         {"quiet", no_argument, 0, 'q'},        {"help", no_argument, 0, 'h'},
                                         {"ram-budget", required_argument, 0, 'B'}, {"trace", required_argument, 0, 'R'},
                                         {"buffered-io", no_argument, 0, 'U'},  {"io-depth", required_argument, 0, 'D'},
                                         {"prefill-chunk", required_argument, 0, 'C'}, {"lru-cache", no_argument, 0, 'L'},
                                         {"workers", required_argument, 0, 'W'}, {"cluster", required_argument, 0, 'K'},
                                         {"local-workers", required_argument, 0, 'N'},
                                         {"curve-secret", required_argument, 0, 'S'}, {"insecure", no_argument, 0, 'I'},
                                         {"worker-timeout", required_argument, 0, 'O'},
                                         {0, 0, 0, 0}};
    const char *cmd = demo ? "demo" : "run";
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'p': o->prompt = optarg; break;
        case 'P': o->prompt_file = optarg; break;
        case 'i': o->ids = optarg; break;
        case 'd': o->dump = optarg; break;
        case 'j': o->json = 1; break;
        case 'a': o->allow_special = 1; break;
        case 'e': o->stop_eos = 1; break;
        case 'q': o->quiet = 1; break;
        case 'R': o->trace = optarg; break;
        case 'W': o->workers = optarg; break;
        case 'K': o->cluster = optarg; break;
        case 'S': o->curve_secret = optarg; break;
        case 'I': o->insecure = 1; break;
        case 'N':
            if (ms_cli_parse_i64(optarg, &o->local_workers) != 0 || o->local_workers < 0 || o->local_workers > 64)
                return ms_cli_fail(cmd, MS_EXIT_USAGE, "--local-workers must be an integer in 0..64, got '%s'",
                                   optarg);
            break;
        case 'O':
            if (ms_cli_parse_f32(optarg, &o->worker_timeout) != 0 || o->worker_timeout <= 0)
                return ms_cli_fail(cmd, MS_EXIT_USAGE, "--worker-timeout must be a positive number, got '%s'", optarg);
            break;
        case 'U': o->buffered = 1; break;
        case 'L': o->lru = 1; break;
        case 'B':
            if (ms_plan_parse_size(optarg, &o->budget) != 0 || o->budget == 0)
                return ms_cli_fail(cmd, MS_EXIT_USAGE, "--ram-budget must be a size such as 512M or 8G, got '%s'",
                                   optarg);
            break;
        case 'D':
            if (ms_cli_parse_i64(optarg, &o->io_depth) != 0 || o->io_depth < 1 || o->io_depth > 256)
                return ms_cli_fail(cmd, MS_EXIT_USAGE, "--io-depth must be an integer in 1..256, got '%s'", optarg);
            break;
        case 'C':
            if (ms_cli_parse_i64(optarg, &o->chunk) != 0 || o->chunk < 1 || o->chunk > 65536)
                return ms_cli_fail(cmd, MS_EXIT_USAGE, "--prefill-chunk must be an integer in 1..65536, got '%s'",
                                   optarg);
            break;
        case 'n':
            if (ms_cli_parse_i64(optarg, &o->n) != 0 || o->n < 0 || o->n > 1000000)
                return ms_cli_fail(cmd, MS_EXIT_USAGE, "-n must be an integer in 0..1000000, got '%s'", optarg);
            break;
        case 'T':
            if (ms_cli_parse_i64(optarg, &o->threads) != 0 || o->threads < 0 || o->threads > 1024)
                return ms_cli_fail(cmd, MS_EXIT_USAGE, "--threads must be an integer in 0..1024, got '%s'", optarg);
            break;
        case 's':
            if (ms_cli_parse_i64(optarg, &o->seed) != 0)
                return ms_cli_fail(cmd, MS_EXIT_USAGE, "--seed must be an integer, got '%s'", optarg);
            break;
        case 't':
            if (ms_cli_parse_f32(optarg, &o->temperature) != 0 || o->temperature < 0)
                return ms_cli_fail(cmd, MS_EXIT_USAGE, "--temperature must be a number >= 0, got '%s'", optarg);
            break;
        case 'k':
            if (ms_cli_parse_f32(optarg, &o->top_p) != 0 || !(o->top_p > 0 && o->top_p <= 1))
                return ms_cli_fail(cmd, MS_EXIT_USAGE, "--top-p must be in (0, 1], got '%s'", optarg);
            break;
        case 'h':
            run_usage(stdout);
            return -1;
        default: run_usage(stderr); return MS_EXIT_USAGE;
        }
    }
    if (optind != argc) return ms_cli_fail(cmd, MS_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    if (!!o->workers + !!o->cluster + (o->local_workers > 0) > 1)
        return ms_cli_fail(cmd, MS_EXIT_USAGE, "give at most one of --workers, --cluster and --local-workers");
    return 0;
}

int ms_cli_run(int argc, char **argv)
{
    run_opts o = {.n = 16, .top_p = 1.0f};
    int rc = parse_run(argc, argv, &o, 0);
    if (rc) return rc < 0 ? MS_EXIT_OK : rc;
    if (!o.model) return ms_cli_fail("run", MS_EXIT_USAGE, "--model DIR is required (see moestream run --help)");
    if (!!o.prompt + !!o.prompt_file + !!o.ids != 1)
        return ms_cli_fail("run", MS_EXIT_USAGE, "give exactly one of --prompt, --prompt-file or --ids");
    return generate(&o);
}

int ms_cli_demo(int argc, char **argv)
{
    run_opts o = {.n = 24, .top_p = 1.0f};
    int rc = parse_run(argc, argv, &o, 1);
    if (rc) return rc < 0 ? MS_EXIT_OK : rc;
    char dir[4096];
    if (!o.model) {
        const char *base = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/moestream-demo-tiny", base && *base ? base : "/tmp");
        o.model = dir;
    }
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/config.json", o.model);
    if (access(cfg, R_OK) != 0) {
        ms_synth_shape sh;
        ms_synth_preset("tiny", &sh);
        fprintf(stderr, "moestream demo: writing a synthetic tiny Kimi K3 checkpoint to %s\n", o.model);
        if (ms_synth_write(o.model, &sh, 1) != 0) return ms_cli_fail_err("demo");
    }
    if (!o.prompt && !o.prompt_file && !o.ids) o.prompt = "The weather today is";
    fprintf(stderr, "moestream demo: random weights, so the text is gibberish; the engine is real.\n");
    return generate(&o);
}
