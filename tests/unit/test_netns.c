/* test_netns: the coordinator and three CURVE workers on separate network hosts (one network
 * namespace per worker, joined to the root namespace by a veth pair): tokens and logits are
 * bit-identical to an in-process run, and a coordinator whose key is not allowed fails (exit 7). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ms_clock.h"
#include "ms_test.h"

/* Every name this test creates starts with these, followed by the pid of the run that made it,
 * so leftovers of a killed run can be recognised (and only those: the pid must be dead). */
#define NS_PREFIX "msnt-"
#define VETH_PREFIX "msv"
#define NW 3 /* workers = namespaces */

static char ip_bin[64];                  /* iproute2's ip, resolved once (used from signal handlers) */
static char ns_name[NW][32];             /* namespaces made by this run ("" = none) */
static char veth_host[NW][32];           /* root-namespace ends made by this run */
static char bin[1024], wbin[1024], dir[1024], tmp[1024];

/* Run ip with up to 5 arguments, output discarded; only fork/execv/waitpid so that it may be used
 * from the cleanup of a signal handler. Returns the exit status, -1 if it could not run. */
static int ip_run(const char *a, const char *b, const char *c, const char *d, const char *e)
{
    pid_t p = fork();
    if (p < 0) return -1;
    if (p == 0) {
        int nul = open("/dev/null", O_WRONLY);
        if (nul >= 0) {
            dup2(nul, 1);
            dup2(nul, 2);
        }
        const char *argv[] = {ip_bin, a, b, c, d, e, NULL};
        execv(ip_bin, (char *const *)argv);
        _exit(127);
    }
    int st;
    while (waitpid(p, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Kill the workers, delete the namespaces and the veths this run made. Idempotent; safe to call
 * from atexit and from the fatal-signal handler. */
static void cleanup(void)
{
    ms_t_worker_kill_all();
    for (int i = 0; i < NW; i++) {
        if (ns_name[i][0]) ip_run("netns", "del", ns_name[i], NULL, NULL);
        ns_name[i][0] = 0;
        /* deleting the namespace destroys the pair; this catches a host end never moved in */
        if (veth_host[i][0]) ip_run("link", "del", veth_host[i], NULL, NULL);
        veth_host[i][0] = 0;
    }
}

static void on_fatal(int sig)
{
    static const char msg[] = "test_netns: interrupted, cleaning up namespaces\n";
    ssize_t r = write(2, msg, sizeof msg - 1);
    (void)r;
    cleanup();
    _exit(128 + sig);
}

/* Is the run whose pid is embedded in a name (after prefix) gone? */
static int owner_dead(const char *name, const char *prefix)
{
    char *end;
    long pid = strtol(name + strlen(prefix), &end, 10);
    if (end == name + strlen(prefix) || pid <= 0) return 0;
    if (pid == (long)getpid()) return 1; /* our own pid reused from an earlier run */
    /* alive = a test_netns process that is not a zombie (a killed run may wait to be reaped) */
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *rp = strrchr(buf, ')');
    return !strstr(buf, "(test_netns)") || !rp || rp[1] != ' ' || rp[2] == 'Z';
}

/* Remove namespaces (and the processes still inside them) and veths left by earlier runs that were
 * killed before their cleanup. */
static void remove_leftovers(void)
{
    char *out = NULL, cmd[256];
    snprintf(cmd, sizeof cmd, "%s netns list 2>/dev/null", ip_bin);
    if (ms_t_run(cmd, &out) == 0 && out)
        for (char *save = NULL, *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
            l[strcspn(l, " ")] = 0;
            if (strncmp(l, NS_PREFIX, strlen(NS_PREFIX)) || !owner_dead(l, NS_PREFIX)) continue;
            char c2[256], *pids = NULL;
            snprintf(c2, sizeof c2, "%s netns pids '%s' 2>/dev/null", ip_bin, l);
            if (ms_t_run(c2, &pids) == 0 && pids)
                for (char *s2 = NULL, *p = strtok_r(pids, "\n", &s2); p; p = strtok_r(NULL, "\n", &s2))
                    if (atol(p) > 1) kill((pid_t)atol(p), SIGKILL);
            free(pids);
            fprintf(stderr, "test_netns: removing leftover namespace %s\n", l);
            ip_run("netns", "del", l, NULL, NULL);
        }
    free(out);
    out = NULL;
    snprintf(cmd, sizeof cmd, "%s -o link show 2>/dev/null", ip_bin);
    if (ms_t_run(cmd, &out) == 0 && out)
        for (char *save = NULL, *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
            char *n = strchr(l, ':');
            if (!n) continue;
            n += strspn(n + 1, " ") + 1;
            n[strcspn(n, "@:")] = 0;
            if (strncmp(n, VETH_PREFIX, strlen(VETH_PREFIX)) || !owner_dead(n, VETH_PREFIX)) continue;
            fprintf(stderr, "test_netns: removing leftover link %s\n", n);
            ip_run("link", "del", n, NULL, NULL);
        }
    free(out);
}

/* A third address octet no interface of the root namespace uses, derived from the pid so that
 * concurrent runs (plain and ASan builds) pick different subnets: 10.241.X.0/24, of which worker i
 * gets the /30 10.241.X.4i (host end .4i+1, namespace end .4i+2). */
static int pick_octet(void)
{
    char *out = NULL, cmd[128];
    snprintf(cmd, sizeof cmd, "%s -o -4 addr show 2>/dev/null", ip_bin);
    if (ms_t_run(cmd, &out) != 0) {
        free(out);
        return -1;
    }
    for (int k = 0; k < 250; k++) {
        int x = 1 + (int)((getpid() + k) % 250);
        char pat[32];
        snprintf(pat, sizeof pat, " 10.241.%d.", x);
        if (!out || !strstr(out, pat)) {
            free(out);
            return x;
        }
    }
    free(out);
    return -1;
}

/* A printf-formatted shell command, output left alone: its exit status. */
#define sh(...) ms_t_runf(NULL, NULL, __VA_ARGS__)

/* Namespace i with its veth pair up and addressed. Returns 0, or the failing step's name. */
static const char *make_host(int i, int x)
{
    int pid = (int)getpid();
    snprintf(ns_name[i], sizeof ns_name[i], NS_PREFIX "%d-%d", pid, i);
    if (sh("%s netns add %s 2>&1", ip_bin, ns_name[i]) != 0) {
        ns_name[i][0] = 0;
        return "ip netns add";
    }
    char peer[32];
    snprintf(veth_host[i], sizeof veth_host[i], VETH_PREFIX "%dh%d", pid, i);
    snprintf(peer, sizeof peer, VETH_PREFIX "%dn%d", pid, i);
    if (strlen(peer) > 15) { /* IFNAMSIZ; pids stay below 2^22 on Linux */
        veth_host[i][0] = 0;
        return "interface name length";
    }
    if (sh("%s link add %s type veth peer name %s 2>&1", ip_bin, veth_host[i], peer) != 0) {
        veth_host[i][0] = 0;
        return "ip link add type veth";
    }
    if (sh("%s link set %s netns %s", ip_bin, peer, ns_name[i]) != 0) return "ip link set netns";
    if (sh("%s addr add 10.241.%d.%d/30 dev %s && %s link set %s up", ip_bin, x, 4 * i + 1, veth_host[i], ip_bin,
           veth_host[i]) != 0)
        return "host address";
    if (sh("%s -n %s addr add 10.241.%d.%d/30 dev %s && %s -n %s link set %s up && %s -n %s link set lo up", ip_bin,
           ns_name[i], x, 4 * i + 2, peer, ip_bin, ns_name[i], peer, ip_bin, ns_name[i]) != 0)
        return "namespace address";
    return NULL;
}

typedef struct {
    char ep[64], log[1200], key[1200];
    ms_t_worker proc;
} worker;

/* Start worker i inside its namespace, serving SPEC over CURVE; wait (bounded) for its
 * "listening on" line. Returns 0, the exit status if it ended first, -1 on timeout.
 * ip netns exec execs the command itself: the pid held is the worker's. */
static int worker_start(worker *w, int i, const char *spec, const char *allow)
{
    const char *argv[] = {ip_bin,  "netns",           "exec",  ns_name[i],    wbin,     "--model",   dir,
                          "--listen", w->ep,          "--curve-secret", w->key, "--allow", allow,     "--experts",
                          spec,    "--threads",       "1",     "--ram-budget", "256M",  NULL};
    ms_t_worker_opts o = {w->log, NULL, NULL, 30};
    return ms_t_worker_start(&w->proc, argv, &o);
}

static long long veth_counter(int i, const char *what)
{
    char path[256];
    snprintf(path, sizeof path, "/sys/class/net/%s/statistics/%s", veth_host[i], what);
    /* sysfs files report a size of 4096 whatever they hold: read them plainly */
    FILE *f = fopen(path, "r");
    long long v = -1;
    if (f && fscanf(f, "%lld", &v) != 1) v = -1;
    if (f) fclose(f);
    return v;
}

static char *read_key(const char *path)
{
    char *k = ms_t_read_file(path, NULL);
    if (k) k[strcspn(k, " \r\n")] = 0;
    return k;
}

/* One coordinator run, bounded by timeout(1); stdout parsed as JSON into *out, stderr kept in
 * *err when asked. Returns the exit status (124 = timed out). */
static int coord_run(const char *extra, const char *dump, json_t **out, char **err, double *secs)
{
    char *o = NULL, *e = NULL;
    double t0 = ms_now();
    int st = ms_t_runf(&o, &e, "timeout -k 5 60 '%s' run --model '%s' --ids 5,9,13,200,17,400,3,8,90,61 -n 12 "
                       "--json --quiet --threads 2 --dump-logits '%s' %s", bin, dir, dump, extra);
    if (secs) *secs = ms_now() - t0;
    json_error_t je;
    if (out) *out = o ? json_loads(o, 0, &je) : NULL;
    if (err)
        *err = e;
    else
        free(e);
    free(o);
    return st;
}

int main(void)
{
    if (geteuid() != 0) {
        ms_t_skip("not root: network namespaces need CAP_SYS_ADMIN (run the tests as root to check multi-host)");
        return ms_t_done();
    }
    static const char *cands[] = {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"};
    for (size_t k = 0; k < sizeof cands / sizeof *cands && !ip_bin[0]; k++)
        if (access(cands[k], X_OK) == 0) snprintf(ip_bin, sizeof ip_bin, "%s", cands[k]);
    if (!ip_bin[0]) {
        ms_t_skip("iproute2's ip not found (apt-get install iproute2)");
        return ms_t_done();
    }
    /* Cleanup is registered before anything is created. */
    atexit(cleanup);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal;
    int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGALRM, SIGQUIT};
    for (size_t k = 0; k < sizeof sigs / sizeof *sigs; k++) sigaction(sigs[k], &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    alarm(240); /* last resort below ctest's 300 s: every wait below has its own bound */

    remove_leftovers();
    int x = pick_octet();
    if (x < 0) {
        ms_t_skip("no free 10.241.X.0/24 subnet in the root namespace");
        return ms_t_done();
    }
    for (int i = 0; i < NW; i++) {
        const char *bad = make_host(i, x);
        if (bad) {
            cleanup();
            if (i == 0 && !strcmp(bad, "ip netns add")) {
                ms_t_skip("ip netns add failed: no network namespaces here (container without CAP_SYS_ADMIN?)");
                return ms_t_done();
            }
            T_CHECK(0, "network setup failed at %s for namespace %d", bad, i);
            return ms_t_done();
        }
    }
    printf("hosts: %s .. %s, 10.241.%d.0/24 (one /30 each)\n", ns_name[0], ns_name[NW - 1], x);

    snprintf(bin, sizeof bin, "%.1000s", ms_t_bin("moestream"));
    snprintf(wbin, sizeof wbin, "%.1000s", ms_t_bin("moestream-worker"));
    snprintf(tmp, sizeof tmp, "%.1000s", ms_t_tmpdir("netns"));
    snprintf(dir, sizeof dir, "%.1000s/m", tmp);
    T_CHECK(sh("'%s' synth --out '%s' --seed 33 >/dev/null 2>&1", bin, dir) == 0, "synth a tiny checkpoint");
    static const char *names[] = {"w0", "w1", "w2", "coord", "intruder"};
    for (int k = 0; k < 5; k++)
        T_CHECK(sh("cd '%s' && '%s' keygen --out %s >/dev/null 2>&1", tmp, bin, names[k]) == 0, "keygen %s",
                names[k]);

    /* The experts split three ways so that every host computes: read the count from config.json. */
    char cfgp[1200], allow[1200], cluster[1200];
    snprintf(cfgp, sizeof cfgp, "%s/config.json", dir);
    json_error_t je;
    json_t *cj = json_load_file(cfgp, 0, &je);
    json_t *tc = json_object_get(cj, "text_config");
    int ne = (int)json_integer_value(json_object_get(tc ? tc : cj, "num_experts"));
    json_decref(cj);
    T_CHECK(ne >= NW, "config.json names %d experts", ne);
    if (ne < NW) return ms_t_done();

    snprintf(allow, sizeof allow, "%s/allow.txt", tmp);
    char cpub[1200];
    snprintf(cpub, sizeof cpub, "%s/coord.pub", tmp);
    char *ckey = read_key(cpub);
    FILE *f = fopen(allow, "w");
    T_CHECK(f && ckey && strlen(ckey) == 40, "allow list with the coordinator's public key");
    if (f) {
        fprintf(f, "%s\n", ckey ? ckey : "");
        fclose(f);
    }
    free(ckey);

    worker w[NW];
    json_t *arr = json_array();
    int started = 1;
    for (int i = 0; i < NW; i++) {
        memset(&w[i], 0, sizeof w[i]);
        snprintf(w[i].ep, sizeof w[i].ep, "tcp://10.241.%d.%d:7070", x, 4 * i + 2);
        snprintf(w[i].log, sizeof w[i].log, "%s/w%d.log", tmp, i);
        snprintf(w[i].key, sizeof w[i].key, "%s/w%d.key", tmp, i);
        char pubp[1200], spec[64];
        snprintf(pubp, sizeof pubp, "%s/w%d.pub", tmp, i);
        int lo = i * ne / NW, hi = (i + 1) * ne / NW - 1;
        snprintf(spec, sizeof spec, "*:%d-%d", lo, hi);
        int rc = worker_start(&w[i], i, spec, allow);
        char *log = ms_t_read_file(w[i].log, NULL);
        T_CHECK(rc == 0, "worker %d in %s on %s (experts %s) started (rc %d): %s", i, ns_name[i], w[i].ep, spec, rc,
                log ? log : "");
        free(log);
        started &= rc == 0;
        char *pk = read_key(pubp);
        json_array_append_new(arr, json_pack("{s:s, s:s}", "endpoint", w[i].ep, "public_key", pk ? pk : ""));
        free(pk);
    }
    snprintf(cluster, sizeof cluster, "%s/cluster.json", tmp);
    json_t *cl = json_pack("{s:o}", "workers", arr);
    T_CHECK(json_dump_file(cl, cluster, JSON_INDENT(2)) == 0, "write %s", cluster);
    json_decref(cl);

    /* The reference: experts computed in this process. */
    char a[1200], b[1200], c[1200], extra[4096];
    snprintf(a, sizeof a, "%s/inproc.bin", tmp);
    snprintf(b, sizeof b, "%s/cluster.bin", tmp);
    snprintf(c, sizeof c, "%s/intruder.bin", tmp);
    json_t *ref = NULL, *got = NULL;
    int st = coord_run("", a, &ref, NULL, NULL);
    T_CHECK(st == 0 && ref, "in-process run (status %d)", st);

    if (started) {
        long long tx0[NW], rx0[NW];
        for (int i = 0; i < NW; i++) {
            tx0[i] = veth_counter(i, "tx_bytes");
            rx0[i] = veth_counter(i, "rx_bytes");
        }
        char *err = NULL;
        snprintf(extra, sizeof extra, "--cluster '%s' --curve-secret '%s/coord.key' --worker-timeout 20", cluster, tmp);
        st = coord_run(extra, b, &got, &err, NULL);
        T_CHECK(st == 0 && got, "coordinator with --cluster over CURVE (status %d): %s", st, err ? err : "");
        T_CHECK(st == 0 && ms_t_same_file(a, b), "--dump-logits bit-identical to the in-process run");
        json_t *gi = json_object_get(got, "generated_ids"), *ri = json_object_get(ref, "generated_ids");
        T_CHECK(gi && json_array_size(gi) == 12 && json_equal(gi, ri), "generated tokens identical to in-process");
        json_t *ws = json_object_get(json_object_get(got, "stats"), "workers");
        T_CHECK(json_integer_value(json_object_get(ws, "count")) == NW &&
                json_integer_value(json_object_get(ws, "up")) == NW,
                "stats.workers: %d workers, all up", NW);
        long long sent = json_integer_value(json_object_get(ws, "bytes_sent"));
        long long recv = json_integer_value(json_object_get(ws, "bytes_received"));
        /* Each host's traffic crossed its own veth: every pair carried requests both ways, and
         * the frames on the host ends hold at least the payload the coordinator counted. */
        long long tx = 0, rx = 0;
        for (int i = 0; i < NW; i++) {
            long long dt = veth_counter(i, "tx_bytes") - tx0[i], dr = veth_counter(i, "rx_bytes") - rx0[i];
            T_CHECK(tx0[i] >= 0 && dt > 0 && dr > 0, "veth %s carried traffic both ways (tx %lld, rx %lld)",
                    veth_host[i], dt, dr);
            tx += dt;
            rx += dr;
        }
        T_CHECK(sent > 0 && recv > 0 && tx >= sent && rx >= recv,
                "veth bytes cover the wire payload (sent %lld <= tx %lld, received %lld <= rx %lld)", sent, tx, recv,
                rx);
        free(err);
        err = NULL;

        /* A coordinator whose key is not on the allow list: no answer, exit 7 naming a worker,
         * after about --worker-timeout, not a hang. */
        double secs = 0;
        snprintf(extra, sizeof extra, "--cluster '%s' --curve-secret '%s/intruder.key' --worker-timeout 2", cluster,
                 tmp);
        st = coord_run(extra, c, NULL, &err, &secs);
        T_CHECK(st == 7, "unlisted coordinator key: exit 7 (got %d): %s", st, err ? err : "");
        T_CHECK(err && strstr(err, "tcp://10.241."), "the error names the worker endpoint: %s", err ? err : "");
        T_CHECK(err && strstr(err, "refused this coordinator's CURVE key") && strstr(err, "--allow"),
                "the error says the key is not on the worker's --allow list: %s", err ? err : "");
        T_CHECK(secs < 30, "unlisted key fails in %.1f s (worker timeout 2 s)", secs);
        free(err);
        int refused = 0;
        for (int i = 0; i < NW; i++) {
            char *log = ms_t_read_file(w[i].log, NULL);
            refused += log && strstr(log, "not in the allow list") != NULL;
            free(log);
        }
        T_CHECK(refused >= 1, "a worker logged the refused key");

        /* The allowed coordinator still works after the refused one. */
        snprintf(extra, sizeof extra, "--cluster '%s' --curve-secret '%s/coord.key' --worker-timeout 20", cluster, tmp);
        st = coord_run(extra, c, NULL, NULL, NULL);
        T_CHECK(st == 0 && ms_t_same_file(a, c), "after the refusal, the allowed coordinator: same logits (status %d)", st);
    }
    for (int i = 0; i < NW; i++)
        if (w[i].proc.pid > 0) {
            int rc = ms_t_worker_stop(&w[i].proc, 15, NULL);
            T_CHECK(rc == 0, "worker %d exits 0 on SIGTERM (got %d)", i, rc);
        }
    json_decref(ref);
    json_decref(got);

    cleanup();
    char *left = NULL, cmd[256];
    snprintf(cmd, sizeof cmd, "%s netns list 2>/dev/null", ip_bin);
    ms_t_run(cmd, &left);
    char mine[40];
    snprintf(mine, sizeof mine, NS_PREFIX "%d-", (int)getpid());
    T_CHECK(left && !strstr(left, mine), "namespaces removed");
    free(left);
    snprintf(cmd, sizeof cmd, "%s link show %s%dh0 >/dev/null 2>&1", ip_bin, VETH_PREFIX, (int)getpid());
    T_CHECK(ms_t_run(cmd, NULL) != 0, "veth pairs removed");
    return ms_t_done();
}
