/* moestream-worker: the expert worker: serves routed experts of its shard over ZeroMQ. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ms_err.h"
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
          "                        [--experts SPEC] [--threads N] [--io-depth N] [--buffered-io]\n"
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
          "  --io-depth N         expert reads in flight (default 8)\n"
          "  --buffered-io        read through the page cache instead of O_DIRECT\n"
          "  --curve-secret FILE  this worker's CURVE secret key (Z85, one line); clients need its public key\n"
          "  --allow FILE         client CURVE public keys allowed to connect (Z85, one per line)\n"
          "  --insecure           accept plain TCP without encryption or authentication\n"
          "  --quiet              log errors only; --verbose logs every request\n"
          "\n"
          "Over tcp, CURVE (--curve-secret + --allow) is required unless --insecure is given.\n"
          "Exit codes: 0 after SIGTERM/SIGINT, 2 usage, 3 bad model, 4 I/O, 6 RAM budget too small.\n",
          f);
}

static int fail(int code, const char *fmt, const char *a)
{
    fputs("moestream-worker: ", stderr);
    fprintf(stderr, fmt, a);
    fputs("\n", stderr);
    return code;
}

static int fail_err(void)
{
    fprintf(stderr, "moestream-worker: %s\n", ms_err_msg());
    return ms_err_code();
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

static int worker_main(int argc, char **argv)
{
    ms_wload_opts lo = {0};
    const char *listen = NULL, *secret = NULL, *allow = NULL;
    int insecure = 0, quiet = 0, verbose = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return MS_EXIT_OK;
        }
        if (!strcmp(a, "--buffered-io")) {
            lo.buffered = 1;
            continue;
        }
        if (!strcmp(a, "--insecure")) {
            insecure = 1;
            continue;
        }
        if (!strcmp(a, "--quiet")) {
            quiet = 1;
            continue;
        }
        if (!strcmp(a, "--verbose")) {
            verbose = 1;
            continue;
        }
        static const char *with_value[] = {"--model",   "--pack",     "--listen",       "--ram-budget", "--experts",
                                           "--threads", "--io-depth", "--curve-secret", "--allow"};
        int known = 0;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) known |= !strcmp(a, with_value[k]);
        if (!known) {
            usage(stderr);
            return fail(MS_EXIT_USAGE, "unknown option '%s'", a);
        }
        if (i + 1 >= argc) return fail(MS_EXIT_USAGE, "option %s needs a value", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--model")) lo.model_dir = v;
        else if (!strcmp(a, "--pack")) lo.pack_dir = v;
        else if (!strcmp(a, "--listen")) listen = v;
        else if (!strcmp(a, "--experts")) lo.experts = v;
        else if (!strcmp(a, "--curve-secret")) secret = v;
        else if (!strcmp(a, "--allow")) allow = v;
        else if (!strcmp(a, "--ram-budget")) {
            if (ms_size_parse(v, &lo.ram_budget) != 0 || lo.ram_budget == 0)
                return fail(MS_EXIT_USAGE, "--ram-budget '%s': not a size (e.g. 8G, 64GB, 512MiB)", v);
        } else if (!strcmp(a, "--threads")) {
            if (parse_int(v, 0, 4096, &lo.threads) != 0)
                return fail(MS_EXIT_USAGE, "--threads '%s': not a thread count (0..4096, 0 = one per CPU)", v);
        } else if (!strcmp(a, "--io-depth")) {
            if (parse_int(v, 1, 1024, &lo.io_depth) != 0)
                return fail(MS_EXIT_USAGE, "--io-depth '%s': not a read depth (1..1024)", v);
        }
    }
    if (!!lo.model_dir == !!lo.pack_dir) {
        usage(stderr);
        return fail(MS_EXIT_USAGE, "%s",
                    lo.model_dir ? "give --model or --pack, not both" : "--model DIR or --pack DIR is required");
    }
    if (!listen) {
        usage(stderr);
        return fail(MS_EXIT_USAGE, "%s", "--listen ENDPOINT is required");
    }
    if (quiet && verbose) return fail(MS_EXIT_USAGE, "%s", "--quiet and --verbose contradict each other");
    ms_log_set_level(quiet ? 0 : verbose ? 2 : 1);

    /* Security first: refusing a plain tcp endpoint must not wait for the model to load. */
    ms_wsrv_keys keys;
    if (ms_wsrv_keys_load(secret, allow, &keys) != 0) return fail_err();
    if (ms_wsrv_check_endpoint(listen, keys.curve, insecure) != 0) {
        ms_wsrv_keys_free(&keys);
        return fail_err();
    }
    struct stat sb;
    if (secret && stat(secret, &sb) == 0 && (sb.st_mode & 077))
        ms_log(1, "worker: warning: %s (a secret key) is readable by other users; chmod 600 it", secret);

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
        int rc = fail_err();
        ms_wload_close(&w);
        ms_wsrv_keys_free(&keys);
        return rc;
    }
    ms_wsrv_opts so = {listen, &keys, &w};
    ms_wsrv *srv = ms_wsrv_new(&so);
    int have_public = keys.curve;
    char public_key[41];
    memcpy(public_key, keys.public_key, sizeof public_key);
    ms_wsrv_keys_free(&keys);
    if (!srv) {
        int rc = fail_err();
        ms_wload_close(&w);
        return rc;
    }

    char owned[1024], a[64], b[64], c[64], d[64], e[64];
    const ms_wload_plan *p = &w.plan;
    ms_log(1, "worker %s: listening on %s (%s), model %s, fingerprint %s", ms_wsrv_uuid(srv), ms_wsrv_endpoint(srv),
           have_public ? "CURVE" : strncmp(listen, "ipc://", 6) ? "plain TCP, --insecure" : "ipc", w.source,
           w.fingerprint);
    if (have_public) ms_log(1, "worker: CURVE public key %s", public_key);
    ms_log(1, "worker: owns %zu experts: %s", w.n_owned, ms_wload_describe(&w, owned, sizeof owned));
    ms_log(1, "worker: budget %s: expert cache %s (%llu of %zu experts), fixed %s (baseline %s), requests up to %s",
           ms_size_fmt(p->budget, a, sizeof a), ms_size_fmt(p->cache, b, sizeof b), (unsigned long long)p->cache_slots,
           w.n_owned, ms_size_fmt(p->fixed, c, sizeof c), ms_size_fmt(p->baseline, d, sizeof d),
           ms_size_fmt(p->request_limit, e, sizeof e));

    /* If a signal came during loading, it is pending: unblocking delivers it and the loop ends. */
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    int rc = ms_wsrv_run(srv, &g_stop);
    if (rc != 0) fprintf(stderr, "moestream-worker: %s\n", ms_err_msg());
    ms_xstore_stats st;
    ms_xstore_get_stats(w.store, &st);
    ms_wsrv_free(srv);
    ms_log(1, "worker: shut down%s%s: cache hits %llu, misses (expert reads) %llu, %s read, peak RSS %s",
           g_signal ? " on " : "", g_signal == SIGTERM ? "SIGTERM" : g_signal == SIGINT ? "SIGINT" : "",
           (unsigned long long)st.hits, (unsigned long long)st.misses, ms_size_fmt(st.bytes_read, a, sizeof a),
           ms_size_fmt(ms_wload_rss(1), b, sizeof b));
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
