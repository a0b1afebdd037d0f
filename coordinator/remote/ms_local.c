/* ms_local: fork/exec of local expert workers on ipc endpoints in a private directory. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ms_clock.h"
#include "ms_err.h"
#include "ms_local.h"
#include "ms_proc.h"

/* Restarts of one local worker in a row: a worker that keeps dying (a bad disk, a crash on some
 * input) is given up on rather than restarted forever. A worker that ran well for
 * MS_LOCAL_HEALTHY_S seconds (env MS_LOCAL_HEALTHY_S overrides, for tests) before it died gets
 * a fresh budget: an occasional death, however many over a long serve, is always repaired. */
#define MS_LOCAL_MAX_RESTARTS 3
#define MS_LOCAL_HEALTHY_S 60.0

struct ms_local {
    char dir[PATH_MAX];
    int n;
    pid_t *pid;
    int *restarts;             /* [n] restarts since it last ran healthy */
    double *started;           /* [n] when it was (re)started (ms_now) */
    ms_remote_worker *w;
    /* what a (re)start needs */
    char *model_dir;
    int n_experts, threads, io_flags, quiet;
    uint64_t budget_each;
};

const char *ms_local_worker_bin(void)
{
    static char path[PATH_MAX];
    const char *env = getenv("MS_WORKER_BIN");
    if (env && *env) return env;
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
    if (n <= 0) return "moestream-worker";
    path[n] = 0;
    char *slash = strrchr(path, '/');
    snprintf(slash ? slash + 1 : path, 32, "moestream-worker");
    return path;
}

/* Fork and exec worker i on its endpoint; 0, or -1 with ms_err set (MS_EXIT_WORKER). */
static int spawn(ms_local *l, int i)
{
    char spec[64], budget[32], thr[16];
    const char *bin = ms_local_worker_bin();
    const char *ep = l->w[i].endpoint;
    int a = (int)((int64_t)i * l->n_experts / l->n), b = (int)((int64_t)(i + 1) * l->n_experts / l->n) - 1;
    snprintf(spec, sizeof spec, "*:%d-%d", a, b);
    snprintf(budget, sizeof budget, "%llu", (unsigned long long)l->budget_each);
    snprintf(thr, sizeof thr, "%d", l->threads);
    unlink(ep + 6); /* a dead worker's socket file */
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        ms_err_set("cannot start worker %d: %s", i, strerror(errno));
        return ms_err_set_code(MS_EXIT_WORKER);
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* no orphaned worker if the coordinator dies */
        if (getppid() != parent) _exit(1);
        const char *argv[20];
        int k = 0;
        argv[k++] = bin;
        argv[k++] = "--model";
        argv[k++] = l->model_dir;
        argv[k++] = "--listen";
        argv[k++] = ep;
        argv[k++] = "--experts";
        argv[k++] = spec;
        if (l->budget_each) {
            argv[k++] = "--ram-budget";
            argv[k++] = budget;
        }
        argv[k++] = "--threads";
        argv[k++] = thr;
        if (l->io_flags & MS_LOCAL_BUFFERED) argv[k++] = "--buffered-io";
        if (l->io_flags & MS_LOCAL_NO_MMAP) argv[k++] = "--mmap", argv[k++] = "off";
        if (l->quiet) argv[k++] = "--quiet";
        argv[k] = NULL;
        execv(bin, (char *const *)argv);
        ms_log(0, "cannot run %s: %s", bin, strerror(errno));
        _exit(127);
    }
    l->pid[i] = pid;
    l->started[i] = ms_now();
    return 0;
}

static double healthy_s(void)
{
    const char *e = getenv("MS_LOCAL_HEALTHY_S");
    double v = e && *e ? atof(e) : 0;
    return v > 0 ? v : MS_LOCAL_HEALTHY_S;
}

ms_local *ms_local_start(const char *model_dir, int n, int n_experts, uint64_t budget_each, int threads,
                         int io_flags, int quiet, ms_remote_worker **workers, int *n_workers)
{
    ms_local *l = ms_calloc(1, sizeof *l);
    const char *tmp = getenv("TMPDIR");
    snprintf(l->dir, sizeof l->dir, "%s/moestream-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(l->dir)) { /* mkdtemp makes it 0700: only this user reaches the sockets */
        ms_err_set("cannot create a private directory for the worker sockets in %s: %s", tmp ? tmp : "/tmp",
                   strerror(errno));
        free(l);
        ms_err_set_code(MS_EXIT_WORKER);
        return NULL;
    }
    l->n = n;
    l->pid = ms_calloc((size_t)n, sizeof(pid_t));
    l->w = ms_calloc((size_t)n, sizeof *l->w);
    l->restarts = ms_calloc((size_t)n, sizeof(int));
    l->started = ms_calloc((size_t)n, sizeof(double));
    l->model_dir = ms_strdup(model_dir);
    l->n_experts = n_experts;
    l->threads = threads;
    l->io_flags = io_flags;
    l->quiet = quiet;
    l->budget_each = budget_each;
    for (int i = 0; i < n; i++) {
        char ep[PATH_MAX + 64];
        snprintf(ep, sizeof ep, "ipc://%s/worker-%d.sock", l->dir, i);
        l->w[i].endpoint = ms_strdup(ep);
        if (spawn(l, i) != 0) {
            ms_local_stop(l);
            return NULL;
        }
    }
    *workers = l->w;
    *n_workers = n;
    return l;
}

uint64_t ms_local_peak_rss(const ms_local *l)
{
    uint64_t total = 0;
    for (int i = 0; l && i < l->n; i++) total += ms_proc_pid_peak_rss((int)l->pid[i]);
    return total;
}

int ms_local_pid(const ms_local *l, int i) { return l && i >= 0 && i < l->n ? (int)l->pid[i] : -1; }

int ms_local_revive(ms_local *l, int i, char *why, size_t n)
{
    MS_ASSERT(l && i >= 0 && i < l->n);
    if (l->pid[i] <= 0) {
        snprintf(why, n, "local worker %d is not running", i);
        return -1;
    }
    int status = 0;
    if (waitpid(l->pid[i], &status, WNOHANG) != l->pid[i]) return 0; /* still running */
    char how[64];
    if (WIFSIGNALED(status))
        snprintf(how, sizeof how, "was killed by signal %d", WTERMSIG(status));
    else
        snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(status));
    l->pid[i] = 0;
    double ran = ms_now() - l->started[i];
    if (ran >= healthy_s() && l->restarts[i] > 0) {
        ms_log(1, "local worker %d had run %.0f s since its last restart: a fresh budget of %d restarts", i, ran,
               MS_LOCAL_MAX_RESTARTS);
        l->restarts[i] = 0;
    }
    if (l->restarts[i] >= MS_LOCAL_MAX_RESTARTS) {
        snprintf(why, n, "local worker %d %s after %d restarts in a row (each ran less than %.0f s): not restarted again",
                 i, how, l->restarts[i], healthy_s());
        ms_log(0, "%s", why);
        return -1;
    }
    l->restarts[i]++;
    if (spawn(l, i) != 0) {
        snprintf(why, n, "local worker %d %s and cannot be restarted: %s", i, how, ms_err_msg());
        ms_log(0, "%s", why);
        return -1;
    }
    ms_log(0, "local worker %d %s: restarted (%d of %d restarts)", i, how, l->restarts[i], MS_LOCAL_MAX_RESTARTS);
    return 1;
}

void ms_local_stop(ms_local *l)
{
    if (!l) return;
    for (int i = 0; i < l->n; i++)
        if (l->pid[i] > 0) kill(l->pid[i], SIGTERM);
    struct timespec ts = {0, 20 * 1000 * 1000};
    for (int round = 0; round < 250; round++) { /* up to 5 s to drain */
        int alive = 0;
        for (int i = 0; i < l->n; i++) {
            if (l->pid[i] <= 0) continue;
            if (waitpid(l->pid[i], NULL, WNOHANG) == l->pid[i] || errno == ECHILD)
                l->pid[i] = 0;
            else
                alive++;
        }
        if (!alive) break;
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < l->n; i++)
        if (l->pid[i] > 0) {
            kill(l->pid[i], SIGKILL);
            waitpid(l->pid[i], NULL, 0);
        }
    for (int i = 0; i < l->n; i++) {
        if (l->w[i].endpoint) unlink(l->w[i].endpoint + 6);
        free(l->w[i].endpoint);
    }
    rmdir(l->dir);
    free(l->w);
    free(l->pid);
    free(l->restarts);
    free(l->started);
    free(l->model_dir);
    free(l);
}
