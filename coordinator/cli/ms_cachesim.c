/* ms_cachesim: trace loading, LRU / policy / Belady replay, and the `moestream cache-sim` command. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_cachesim.h"
#include "ms_cli.h"
#include "ms_cpolicy.h"
#include "ms_err.h"
#include "ms_file.h"
#include "ms_opt.h"
#include "ms_size.h"

/* ---- trace ---- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

ms_cachesim_trace *ms_cachesim_trace_from_pairs(const int32_t *pairs, size_t n, const char *name)
{
    if (n == 0) {
        ms_err_set("%s: empty trace (no requests)", name);
        ms_err_set_code(MS_EXIT_INPUT);
        return NULL;
    }
    if (n > UINT32_MAX - 1) {
        ms_err_set("%s: too many requests (%zu)", name, n);
        ms_err_set_code(MS_EXIT_INPUT);
        return NULL;
    }
    for (size_t i = 0; i < 2 * n; i++) {
        if (pairs[i] < 0) {
            ms_err_set("%s: negative %s id %d at byte offset %zu (request %zu)", name, i % 2 ? "expert" : "layer",
                       (int)pairs[i], i * 4, i / 2);
            ms_err_set_code(MS_EXIT_INPUT);
            return NULL;
        }
    }
    /* (layer << 32 | expert), sorted and deduplicated, gives the dense key of each pair. */
    uint64_t *pk = ms_malloc(n * sizeof(uint64_t));    /* [n] packed pair per request */
    uint64_t *uniq = ms_malloc(n * sizeof(uint64_t));  /* [n_distinct] sorted distinct pairs */
    for (size_t i = 0; i < n; i++) pk[i] = (uint64_t)(uint32_t)pairs[2 * i] << 32 | (uint32_t)pairs[2 * i + 1];
    memcpy(uniq, pk, n * sizeof(uint64_t));
    qsort(uniq, n, sizeof(uint64_t), cmp_u64);
    size_t d = 0, layers = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || uniq[i] != uniq[d - 1]) {
            if (d == 0 || uniq[i] >> 32 != uniq[d - 1] >> 32) layers++;
            uniq[d++] = uniq[i];
        }
    }
    ms_cachesim_trace *t = ms_calloc(1, sizeof *t);
    t->n = n;
    t->keys = ms_malloc(n * sizeof(uint32_t));
    t->n_distinct = d;
    t->n_layers = layers;
    t->n_sweeps = 1;
    for (size_t i = 0; i < n; i++) {
        const uint64_t *f = bsearch(&pk[i], uniq, d, sizeof(uint64_t), cmp_u64);
        MS_ASSERT(f);
        t->keys[i] = (uint32_t)(f - uniq);
        if (i > 0 && pairs[2 * i] < pairs[2 * i - 2]) t->n_sweeps++;
    }
    free(pk);
    free(uniq);
    return t;
}

ms_cachesim_trace *ms_cachesim_trace_read(const char *path)
{
    size_t len = 0;
    /* [len] the raw file: a regular file or a pipe, bounded (the pairs take as much again) */
    unsigned char *buf = (unsigned char *)ms_file_read_all(path, "trace", MS_FILE_STREAM, MS_CACHESIM_MAX_TRACE,
                                                           MS_EXIT_INPUT, &len);
    if (!buf) return NULL;
    if (len % 8) {
        free(buf);
        ms_err_set("trace %s: length %zu bytes is not a multiple of 8 (a (layer, expert) pair of int32 is 8 bytes; "
                   "incomplete record at byte offset %zu)",
                   path, len, len - len % 8);
        ms_err_set_code(MS_EXIT_INPUT);
        return NULL;
    }
    size_t n = len / 8;
    int32_t *pairs = ms_malloc((n ? n : 1) * 2 * sizeof(int32_t)); /* [n][2] (layer, expert) */
    for (size_t i = 0; i < 2 * n; i++) {
        const unsigned char *b = buf + 4 * i;
        pairs[i] = (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
    }
    free(buf);
    char *name = ms_malloc(strlen(path) + 8);
    sprintf(name, "trace %s", path);
    ms_cachesim_trace *t = ms_cachesim_trace_from_pairs(pairs, n, name);
    free(name);
    free(pairs);
    return t;
}

void ms_cachesim_trace_free(ms_cachesim_trace *t)
{
    if (!t) return;
    free(t->keys);
    free(t);
}

double ms_cachesim_tokens(const ms_cachesim_trace *t, unsigned top_k)
{
    MS_ASSERT(top_k > 0 && t->n_layers > 0);
    return (double)t->n / ((double)top_k * (double)t->n_layers);
}

/* ---- Belady ---- */

/* Max-heap of resident keys ordered by next use; pos[] indexes it by key. */
typedef struct {
    uint32_t *heap; /* [slots] resident keys */
    uint32_t *pos;  /* [n_distinct] position of a resident key in heap */
    size_t *nu;     /* [n_distinct] next request index of a resident key (n = never) */
    size_t len;
} bel_heap;

static void bel_set(bel_heap *h, size_t i, uint32_t k)
{
    h->heap[i] = k;
    h->pos[k] = (uint32_t)i;
}

static void bel_up(bel_heap *h, size_t i)
{
    uint32_t k = h->heap[i];
    while (i > 0 && h->nu[h->heap[(i - 1) / 2]] < h->nu[k]) {
        bel_set(h, i, h->heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    bel_set(h, i, k);
}

static void bel_down(bel_heap *h, size_t i)
{
    uint32_t k = h->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->len) break;
        if (c + 1 < h->len && h->nu[h->heap[c + 1]] > h->nu[h->heap[c]]) c++;
        if (h->nu[h->heap[c]] <= h->nu[k]) break;
        bel_set(h, i, h->heap[c]);
        i = c;
    }
    bel_set(h, i, k);
}

static void belady_run(const ms_cachesim_trace *t, size_t slots, ms_cachesim_result *r)
{
    size_t n = t->n, d = t->n_distinct;
    size_t *nxt = ms_malloc(n * sizeof(size_t)); /* [n] next request of the same key, n = never */
    size_t *last = ms_malloc(d * sizeof(size_t)); /* [d] scratch: next occurrence seen so far */
    for (size_t k = 0; k < d; k++) last[k] = n;
    for (size_t i = n; i-- > 0;) {
        nxt[i] = last[t->keys[i]];
        last[t->keys[i]] = i;
    }
    free(last);
    if (slots > d) slots = d; /* more slots than keys: the extra ones are never used */
    bel_heap h = {ms_malloc((slots ? slots : 1) * sizeof(uint32_t)), ms_malloc(d * sizeof(uint32_t)),
                  ms_malloc(d * sizeof(size_t)), 0};
    uint8_t *res = ms_calloc(d, 1); /* [d] resident flags */
    for (size_t i = 0; i < n; i++) {
        uint32_t k = t->keys[i];
        if (res[k]) {
            r->hits++;
            h.nu[k] = nxt[i]; /* later than before: it can only rise in the max-heap */
            bel_up(&h, h.pos[k]);
            continue;
        }
        r->misses++;
        if (slots == 0) continue;
        if (h.len == slots) {
            uint32_t far = h.heap[0];
            if (nxt[i] >= h.nu[far]) continue; /* the requested key is needed last: leave it out */
            res[far] = 0;
            bel_set(&h, 0, h.heap[--h.len]);
            if (h.len) bel_down(&h, 0);
        }
        res[k] = 1;
        h.nu[k] = nxt[i];
        bel_set(&h, h.len++, k);
        bel_up(&h, h.len - 1);
        if (h.len > r->max_resident) r->max_resident = h.len;
    }
    free(res);
    free(h.heap);
    free(h.pos);
    free(h.nu);
    free(nxt);
}

int ms_cachesim_run(const ms_cachesim_trace *t, ms_cachesim_kind kind, size_t slots, ms_cachesim_result *out)
{
    memset(out, 0, sizeof *out);
    if (kind == MS_CACHESIM_BELADY) {
        belady_run(t, slots, out);
        return 0;
    }
    ms_cpolicy *p = kind == MS_CACHESIM_LRU ? ms_cpolicy_new_lru(t->n_distinct, slots)
                                            : ms_cpolicy_new(t->n_distinct, slots);
    if (!p) return -1;
    for (size_t i = 0; i < t->n; i++) {
        if (ms_cpolicy_access(p, t->keys[i], NULL) == MS_CPOLICY_HIT) out->hits++;
        else out->misses++;
        size_t r = ms_cpolicy_resident(p);
        if (r > out->max_resident) out->max_resident = r;
    }
    ms_cpolicy_free(p);
    return 0;
}

/* ---- sizes ---- */


/* ---- the command ---- */

static void cachesim_usage(FILE *f)
{
    fputs("usage: moestream cache-sim --trace PATH --expert-bytes N (--capacity SIZE[,SIZE...] | --slots N[,N...])\n"
          "                           [--top-k K] [--json]\n"
          "\n"
          "Replays a routed-expert trace through an expert cache and prints, per cache size, the hit\n"
          "rate of LRU, of moestream's policy (windowed LFU, common/expert/ms_cpolicy.h) and of Belady's\n"
          "offline optimum, and the expert bytes each would read from disk per token.\n"
          "\n"
          "  --trace PATH        little-endian int32 (layer, expert) pairs, one per request, in order\n"
          "  --expert-bytes N    bytes of one routed expert (Kimi K3: 17547264)\n"
          "  --capacity LIST     cache sizes; slots = floor(size / expert-bytes). SIZE is bytes, or a\n"
          "                      number with KB, MB, GB, TB = powers of 1000 (64GB = 64,000,000,000\n"
          "                      bytes, the unit of the reference figures) or K, M, G, T (= KiB..TiB)\n"
          "                      = powers of 1024, as in dd. Decimals are allowed (1.5TB).\n"
          "  --slots LIST        cache sizes in experts instead\n"
          "  --top-k K           experts routed per token in each MoE layer (default 16), to count\n"
          "                      tokens: tokens = requests / (K x layers present in the trace)\n"
          "  --json              one JSON object: {\"requests\", \"distinct\", \"rows\": [{\"slots\",\n"
          "                      \"lru_hit_rate\", \"policy_hit_rate\", \"belady_hit_rate\", ...}], ...}\n"
          "\n"
          "Hit rates count every request, cold misses included. Bytes read = misses x expert-bytes.\n"
          "Exit codes: 2 bad options, 4 trace unreadable, 5 malformed trace.\n",
          f);
}

/* "a,b,c" -> malloc'ed sizes (SIZE syntax if as_size, plain counts otherwise). */
static int parse_list(const char *s, int as_size, uint64_t **out, size_t *n)
{
    size_t cap = 8, len = 0;
    uint64_t *v = ms_malloc(cap * sizeof(uint64_t));
    char *copy = ms_strdup(s), *save = NULL;
    int rc = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        uint64_t x = 0;
        if (as_size) {
            rc = ms_size_parse(tok, &x);
        } else {
            long long ll;
            rc = ms_opt_int("a slot count", tok, 0, LLONG_MAX, &ll);
            x = (uint64_t)ll;
        }
        if (rc) break;
        if (len == cap) v = ms_realloc(v, (cap *= 2) * sizeof(uint64_t));
        v[len++] = x;
    }
    free(copy);
    if (!rc && len == 0) rc = ms_err_set("empty list '%s'", s);
    if (rc) {
        free(v);
        return -1;
    }
    *out = v;
    *n = len;
    return 0;
}

int ms_cli_cache_sim(int argc, char **argv)
{
    static const struct option opts[] = {{"trace", required_argument, 0, 't'}, {"expert-bytes", required_argument, 0, 'e'},
                                         {"capacity", required_argument, 0, 'c'}, {"slots", required_argument, 0, 's'},
                                         {"top-k", required_argument, 0, 'k'},    {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    const char *cmd = "cache-sim", *path = NULL, *ebs = NULL, *caps = NULL, *slotss = NULL, *topks = NULL;
    int js = 0, c;
    optind = 1;
    opterr = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 't': path = optarg; break;
        case 'e': ebs = optarg; break;
        case 'c': caps = optarg; break;
        case 's': slotss = optarg; break;
        case 'k': topks = optarg; break;
        case 'j': js = 1; break;
        case 'h': cachesim_usage(stdout); return MS_EXIT_OK;
        default: cachesim_usage(stderr); return MS_EXIT_USAGE;
        }
    }
    if (optind != argc) return ms_cli_fail(cmd, MS_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    if (!path) return ms_cli_fail(cmd, MS_EXIT_USAGE, "--trace PATH is required");
    if (!ebs) return ms_cli_fail(cmd, MS_EXIT_USAGE, "--expert-bytes N is required (Kimi K3: 17547264)");
    if (!!caps + !!slotss != 1) return ms_cli_fail(cmd, MS_EXIT_USAGE, "give exactly one of --capacity or --slots");
    uint64_t eb;
    if (ms_opt_size("--expert-bytes", ebs, &eb) != 0) return ms_cli_fail_err(cmd);
    unsigned top_k = 16;
    if (topks) {
        long long k;
        if (ms_opt_int("--top-k", topks, 1, 1 << 20, &k) != 0) return ms_cli_fail_err(cmd);
        top_k = (unsigned)k;
    }
    uint64_t *sizes = NULL;
    size_t nsz = 0;
    if (parse_list(caps ? caps : slotss, !!caps, &sizes, &nsz) != 0)
        return ms_cli_fail(cmd, MS_EXIT_USAGE, "%s: %s", caps ? "--capacity" : "--slots", ms_err_msg());

    ms_cachesim_trace *t = ms_cachesim_trace_read(path);
    if (!t) {
        free(sizes);
        return ms_cli_fail_err(cmd);
    }
    double tokens = ms_cachesim_tokens(t, top_k);
    json_t *rows = json_array();
    if (!js) {
        printf("trace %s: %zu requests, %zu distinct experts, %zu layers, %.1f tokens (requests / (%u x %zu)), "
               "%zu passes over the layers\n",
               path, t->n, t->n_distinct, t->n_layers, tokens, top_k, t->n_layers, t->n_sweeps);
        printf("expert %llu bytes; hit rates over all requests, GB = 1e9 bytes\n\n", (unsigned long long)eb);
        printf("%12s %9s %9s %9s %9s   %s\n", "capacity", "slots", "LRU", "policy", "Belady",
               "GB read per token: LRU / policy / Belady");
    }
    int rc = MS_EXIT_OK;
    for (size_t i = 0; i < nsz; i++) {
        uint64_t slots64 = caps ? sizes[i] / eb : sizes[i];
        size_t slots = slots64 > SIZE_MAX / 2 ? SIZE_MAX / 2 : (size_t)slots64;
        ms_cachesim_result r[3];
        for (int kind = 0; kind < 3 && rc == MS_EXIT_OK; kind++)
            if (ms_cachesim_run(t, (ms_cachesim_kind)kind, slots, &r[kind]) != 0) rc = ms_cli_fail_err(cmd);
        if (rc != MS_EXIT_OK) break;
        double rate[3], bpt[3];
        for (int kind = 0; kind < 3; kind++) {
            rate[kind] = (double)r[kind].hits / (double)t->n;
            bpt[kind] = (double)r[kind].misses * (double)eb / tokens;
        }
        double capb = caps ? (double)sizes[i] : (double)slots64 * (double)eb; /* bytes */
        if (js) {
            json_t *o = json_object();
            json_object_set_new(o, "slots", json_integer((json_int_t)slots64));
            json_object_set_new(o, "capacity_bytes", capb < 9e18 ? json_integer((json_int_t)capb) : json_real(capb));
            json_object_set_new(o, "lru_hit_rate", json_real(rate[0]));
            json_object_set_new(o, "policy_hit_rate", json_real(rate[1]));
            json_object_set_new(o, "belady_hit_rate", json_real(rate[2]));
            json_object_set_new(o, "lru_hits", json_integer((json_int_t)r[0].hits));
            json_object_set_new(o, "policy_hits", json_integer((json_int_t)r[1].hits));
            json_object_set_new(o, "belady_hits", json_integer((json_int_t)r[2].hits));
            json_object_set_new(o, "lru_bytes_per_token", json_real(bpt[0]));
            json_object_set_new(o, "policy_bytes_per_token", json_real(bpt[1]));
            json_object_set_new(o, "belady_bytes_per_token", json_real(bpt[2]));
            json_array_append_new(rows, o);
        } else {
            printf("%9.2f GB %9llu %8.2f%% %8.2f%% %8.2f%%   %.2f / %.2f / %.2f\n", capb / 1e9,
                   (unsigned long long)slots64, 100 * rate[0], 100 * rate[1], 100 * rate[2], bpt[0] / 1e9,
                   bpt[1] / 1e9, bpt[2] / 1e9);
        }
    }
    if (js && rc == MS_EXIT_OK) {
        json_t *o = json_object();
        json_object_set_new(o, "requests", json_integer((json_int_t)t->n));
        json_object_set_new(o, "distinct", json_integer((json_int_t)t->n_distinct));
        json_object_set_new(o, "rows", rows);
        rows = NULL;
        json_object_set_new(o, "layers", json_integer((json_int_t)t->n_layers));
        json_object_set_new(o, "tokens", json_real(tokens));
        json_object_set_new(o, "passes", json_integer((json_int_t)t->n_sweeps));
        json_object_set_new(o, "expert_bytes", json_integer((json_int_t)eb));
        json_object_set_new(o, "top_k", json_integer(top_k));
        char *s = json_dumps(o, JSON_PRESERVE_ORDER);
        puts(s);
        free(s);
        json_decref(o);
    }
    json_decref(rows);
    fflush(stdout);
    ms_cachesim_trace_free(t);
    free(sizes);
    return rc;
}
