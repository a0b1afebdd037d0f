/* moestream-worker: the expert worker: serves routed experts of its shard over ZeroMQ. */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ms_err.h"
#include "ms_opt.h"
#include "ms_pool.h"
#include "ms_proc.h"
#include "ms_progress.h"
#include "ms_size.h"
#include "ms_stdout.h"
#include "ms_wload.h"
#include "ms_wsrv.h"

static volatile sig_atomic_t g_stop;
static volatile sig_atomic_t g_signal;

static void on_signal(int sig)
{
    g_signal = sig;
    g_stop = 1;
}

static void usage(FILE *f)
{
    fputs("usage: moestream-worker (--model DIR | --pack DIR) --listen ENDPOINT [--ram-budget SIZE]\n"
          "                        [--experts SPEC] [--threads N] [--pin-threads] [--io-depth N] [--buffered-io]\n"
          "                        [--mmap auto|off]\n"
          "                        [--curve-secret FILE --allow FILE | --insecure] [--quiet | --verbose]\n"
          "\n"
          "Serves routed-expert computations to moestream coordinators over ZeroMQ.\n"
          "\n"
          "  --model DIR          a checkpoint as released (config.json + safetensors shards)\n"
          "  --pack DIR           a worker pack written by 'moestream shard' (checksummed experts)\n"
          "  --listen ENDPOINT    tcp://HOST:PORT (PORT may be '*': the bound port is logged) or ipc://PATH\n"
          "  --experts SPEC       the experts to serve (default all): comma-separated LAYER:FIRST-LAST items,\n"
          "                       either side '*' or one number, e.g. '*:0-447' or '1:0-895,2:*'\n"
          "  --ram-budget SIZE    peak resident memory of this worker (default 90% of MemAvailable);\n"
          "                       bytes, K/M/G/T or KiB..TiB = powers of 1024, KB/MB/GB/TB = powers of 1000\n"
          "  --threads N          compute threads (default 0 = one per CPU)\n"
          "  --pin-threads        bind each compute thread but the first to its own CPU (physical cores first,\n"
          "                       socket by socket); with one worker per socket, start each under\n"
          "                       'numactl --cpunodebind=N --membind=N'\n"
          "  --io-depth N         expert reads in flight (default 8)\n"
          "  --buffered-io        read through the page cache instead of O_DIRECT\n"
          "  --mmap auto|off      auto (default): when the budget would cache every expert served, use them in\n"
          "                       place from read-only mappings of the files (the page cache holds them once);\n"
          "                       off: always read them into the cache\n"
          "  --curve-secret FILE  this worker's CURVE secret key (Z85, one line); clients need its public key\n"
          "  --allow FILE         client CURVE public keys allowed to connect (Z85, one per line)\n"
          "  --insecure           accept plain TCP without encryption or authentication\n"
          "  --quiet              log errors only; --verbose logs every request\n"
          "  --version            print the version and exit\n"
          "\n"
          "Over tcp, CURVE (--curve-secret + --allow) is required unless --insecure is given.\n"
          "Exit codes: 0 after SIGTERM/SIGINT, 2 usage, 3 bad model, 4 I/O, 6 RAM budget too small.\n",
          f);
}

#define WHO "moestream-worker"

static int worker_main(int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},   {"pack", required_argument, 0, 'p'},
                                         {"listen", required_argument, 0, 'l'},  {"ram-budget", required_argument, 0, 'B'},
                                         {"experts", required_argument, 0, 'e'}, {"threads", required_argument, 0, 'T'},
                                         {"io-depth", required_argument, 0, 'D'}, {"curve-secret", required_argument, 0, 'S'},
                                         {"allow", required_argument, 0, 'A'},   {"buffered-io", no_argument, 0, 'U'},
                                         {"insecure", no_argument, 0, 'I'},      {"quiet", no_argument, 0, 'q'},
                                         {"verbose", no_argument, 0, 'v'},       {"help", no_argument, 0, 'h'},
                                         {"version", no_argument, 0, 'V'},       {"pin-threads", no_argument, 0, 'P'},
                                         {"mmap", required_argument, 0, 'M'},    {0, 0, 0, 0}};
    ms_wload_opts lo = {0};
    const char *listen = NULL, *secret = NULL, *allow = NULL;
    int insecure = 0, quiet = 0, verbose = 0, c;
    long long threads = 0, depth = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': lo.model_dir = optarg; break;
        case 'p': lo.pack_dir = optarg; break;
        case 'l': listen = optarg; break;
        case 'e': lo.experts = optarg; break;
        case 'S': secret = optarg; break;
        case 'A': allow = optarg; break;
        case 'U': lo.buffered = 1; break;
        case 'M':
            if (strcmp(optarg, "auto") && strcmp(optarg, "off"))
                return ms_opt_fail(WHO, MS_EXIT_USAGE, "--mmap takes auto or off, got '%s'", optarg);
            lo.no_mmap = !strcmp(optarg, "off");
            break;
        case 'I': insecure = 1; break;
        case 'q': quiet = 1; break;
        case 'v': verbose = 1; break;
        case 'P': ms_pool_set_pinning(1); break;
        case 'B':
            if (ms_opt_size("--ram-budget", optarg, &lo.ram_budget) != 0) return ms_opt_fail_err(WHO);
            break;
        case 'T':
            if (ms_opt_threads(optarg, &threads) != 0) return ms_opt_fail_err(WHO);
            lo.threads = (int)threads;
            break;
        case 'D':
            if (ms_opt_io_depth(optarg, &depth) != 0) return ms_opt_fail_err(WHO);
            lo.io_depth = (int)depth;
            break;
        case 'h': usage(stdout); return MS_EXIT_OK;
        case 'V': puts("moestream-worker " MS_VERSION); return MS_EXIT_OK;
        default: usage(stderr); return MS_EXIT_USAGE; /* getopt named the option */
        }
    }
    if (optind != argc) return ms_opt_fail(WHO, MS_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    if (!!lo.model_dir == !!lo.pack_dir) {
        usage(stderr);
        return ms_opt_fail(WHO, MS_EXIT_USAGE, "%s",
                           lo.model_dir ? "give --model or --pack, not both" : "--model DIR or --pack DIR is required");
    }
    if (!listen) {
        usage(stderr);
        return ms_opt_fail(WHO, MS_EXIT_USAGE, "--listen ENDPOINT is required");
    }
    if (quiet && verbose) return ms_opt_fail(WHO, MS_EXIT_USAGE, "--quiet and --verbose contradict each other");
    ms_log_set_level(quiet ? 0 : verbose ? 2 : 1);
    ms_progress_use_stderr(); /* the first start on a checkpoint hashes all of it (ms_ident) */

    /* Security first: refusing a plain tcp endpoint must not wait for the model to load. */
    ms_wauth_keys keys;
    if (ms_wauth_keys_load(secret, allow, &keys) != 0) return ms_opt_fail_err(WHO);
    if (ms_wauth_check_endpoint(listen, keys.curve, insecure) != 0) {
        ms_wauth_keys_free(&keys);
        return ms_opt_fail_err(WHO);
    }

    /* Only the main thread takes SIGTERM/SIGINT: every thread started below inherits the mask,
     * so the signal interrupts the main loop's poll and nothing else. */
    sigset_t sigs, old;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, &old);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: zmq_poll returns EINTR */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    ms_wload w;
    if (ms_wload_open(&lo, &w) != 0) {
        int rc = ms_opt_fail_err(WHO);
        ms_wload_close(&w);
        ms_wauth_keys_free(&keys);
        return rc;
    }
    ms_wsrv_opts so = {.endpoint = listen, .keys = &keys, .load = &w};
    ms_wsrv *srv = ms_wsrv_new(&so);
    int have_public = keys.curve;
    char public_key[41];
    memcpy(public_key, keys.public_key, sizeof public_key);
    ms_wauth_keys_free(&keys);
    if (!srv) {
        int rc = ms_opt_fail_err(WHO);
        ms_wload_close(&w);
        return rc;
    }

    char owned[1024], a[64], b[64], d[64], e[64], f[64];
    const ms_wload_plan *p = &w.plan;
    ms_log(1, "worker %s: listening on %s (%s), model %s, fingerprint %s", ms_wsrv_uuid(srv), ms_wsrv_endpoint(srv),
           have_public ? "CURVE" : strncmp(listen, "ipc://", 6) ? "plain TCP, --insecure" : "ipc", w.source,
           w.fingerprint);
    if (have_public) ms_log(1, "worker: CURVE public key %s", public_key);
    ms_log(1, "worker: owns %zu experts: %s", w.n_owned, ms_wload_describe(&w, owned, sizeof owned));
    ms_log(1, "worker: budget %s: expert cache %s (%llu of %zu experts), fixed %s (baseline %s), requests up to %s",
           ms_size_fmt(p->mem.in.budget, a, sizeof a), ms_size_fmt(p->mem.cache, b, sizeof b),
           (unsigned long long)p->mem.cache_slots, w.n_owned, ms_size_fmt(p->mem.fixed, f, sizeof f),
           ms_size_fmt(p->mem.in.baseline, d, sizeof d), ms_size_fmt(p->request_limit, e, sizeof e));

    /* If a signal came during loading, it is pending: unblocking delivers it and the loop ends. */
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    int rc = ms_wsrv_run(srv, &g_stop);
    if (rc != 0) ms_opt_fail_err(WHO);
    ms_xstore_stats st;
    ms_xstore_get_stats(w.store, &st);
    ms_wsrv_free(srv);
    ms_log(1, "worker: shut down%s%s: cache hits %llu, misses (expert reads) %llu, %s read, peak RSS %s",
           g_signal ? " on " : "", g_signal == SIGTERM ? "SIGTERM" : g_signal == SIGINT ? "SIGINT" : "",
           (unsigned long long)st.hits, (unsigned long long)st.misses, ms_size_fmt(st.bytes_read, a, sizeof a),
           ms_size_fmt(ms_proc_peak_rss(), b, sizeof b));
    ms_wload_close(&w);
    return rc == 0 ? MS_EXIT_OK : MS_EXIT_RUNTIME;
}

/* Only --help writes to stdout, but lost output must not look like success there either. */
int main(int argc, char **argv)
{
    int rc = worker_main(argc, argv);
    if (ms_stdout_close() != 0) {
        fprintf(stderr, "moestream-worker: %s\n", ms_err_msg());
        if (rc == MS_EXIT_OK) rc = MS_EXIT_IO;
    }
    return rc;
}
