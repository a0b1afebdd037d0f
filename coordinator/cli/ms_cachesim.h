/* ms_cachesim: replay a routed-expert trace through LRU, the cache policy and Belady's optimum. */
#ifndef MS_CACHESIM_H
#define MS_CACHESIM_H

#include <stddef.h>
#include <stdint.h>

/*
 * A trace file is a sequence of little-endian int32 pairs (layer, expert), one pair per
 * routed-expert request, in request order; both must be >= 0. Hit rates count every
 * request, cold misses included.
 */

/* A loaded trace. Each (layer, expert) pair is renumbered to a dense key
 * 0..n_distinct-1 (in increasing (layer, expert) order). Owned by the caller; free with
 * ms_cachesim_trace_free. */
typedef struct {
    size_t n;          /* requests */
    uint32_t *keys;    /* [n] dense key of each request */
    size_t n_distinct; /* distinct (layer, expert) pairs */
    size_t n_layers;   /* distinct layer indices */
    size_t n_sweeps;   /* 1 + the number of times the layer index goes down (passes over the layers) */
} ms_cachesim_trace;

/* Read a trace file. NULL with ms_err set on failure: code MS_EXIT_IO if the file cannot
 * be opened or read (message names the file), MS_EXIT_INPUT if it is empty, its length is
 * not a multiple of 8, or it holds a negative id (message names the file and the byte
 * offset). */
/* Largest trace read: 2 GiB (268M (layer, expert) pairs); larger is refused (MS_EXIT_INPUT). */
#define MS_CACHESIM_MAX_TRACE ((uint64_t)2 << 30)
ms_cachesim_trace *ms_cachesim_trace_read(const char *path);
/* The same from memory: pairs[2*i] = layer, pairs[2*i+1] = expert of request i. `name`
 * names the source in error messages. */
ms_cachesim_trace *ms_cachesim_trace_from_pairs(const int32_t *pairs, size_t n_requests, const char *name);
void ms_cachesim_trace_free(ms_cachesim_trace *t); /* accepts NULL */

/* Estimated tokens in the trace: requests / (top_k * n_layers), i.e. every token routes
 * to top_k experts in each MoE layer the trace covers. (Counting passes over the layers
 * instead would count prefill chunks, not tokens.) */
double ms_cachesim_tokens(const ms_cachesim_trace *t, unsigned top_k);

typedef enum {
    MS_CACHESIM_LRU = 0,    /* least recently used */
    MS_CACHESIM_POLICY = 1, /* the online policy of ms_cpolicy.h */
    MS_CACHESIM_BELADY = 2  /* offline optimum: on a miss with a full cache, drop whichever
                               of the resident keys and the requested key is next used
                               farthest in the future (the requested key may thus be
                               left out; no policy, with or without admission control,
                               gets more hits) */
} ms_cachesim_kind;

typedef struct {
    uint64_t hits, misses;
    size_t max_resident; /* most keys resident at once (<= slots) */
} ms_cachesim_result;

/* Replay the trace through a cache of `slots` equal slots. Returns 0, or -1 with ms_err
 * set (only if the policy cannot be created). O(n log n). */
int ms_cachesim_run(const ms_cachesim_trace *t, ms_cachesim_kind kind, size_t slots, ms_cachesim_result *out);

/* `moestream cache-sim`: argv[0] = "cache-sim". Returns the process exit code. */
int ms_cli_cache_sim(int argc, char **argv);

#endif
