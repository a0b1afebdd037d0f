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

#include "ms_err.h"
#include "ms_local.h"
#include "ms_proc.h"

struct ms_local {
    char dir[PATH_MAX];
    int n;
    pid_t *pid;
    ms_remote_worker *w;
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

ms_local *ms_local_start(const char *model_dir, int n, int n_experts, uint64_t budget_each, int threads,
                         int buffered, int quiet, ms_remote_worker **workers, int *n_workers)
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
    const char *bin = ms_local_worker_bin();
    for (int i = 0; i < n; i++) {
        char ep[PATH_MAX + 64], spec[64], budget[32], thr[16];
        snprintf(ep, sizeof ep, "ipc://%s/worker-%d.sock", l->dir, i);
        l->w[i].endpoint = ms_strdup(ep);
        int a = (int)((int64_t)i * n_experts / n), b = (int)((int64_t)(i + 1) * n_experts / n) - 1;
        snprintf(spec, sizeof spec, "*:%d-%d", a, b);
        snprintf(budget, sizeof budget, "%llu", (unsigned long long)budget_each);
        snprintf(thr, sizeof thr, "%d", threads);
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0) {
            ms_err_set("cannot start worker %d: %s", i, strerror(errno));
            ms_err_set_code(MS_EXIT_WORKER);
            ms_local_stop(l);
            return NULL;
        }
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGTERM); /* no orphaned worker if the coordinator dies */
            if (getppid() != parent) _exit(1);
            const char *argv[20];
            int k = 0;
            argv[k++] = bin;
            argv[k++] = "--model";
            argv[k++] = model_dir;
            argv[k++] = "--listen";
            argv[k++] = ep;
            argv[k++] = "--experts";
            argv[k++] = spec;
            if (budget_each) {
                argv[k++] = "--ram-budget";
                argv[k++] = budget;
            }
            argv[k++] = "--threads";
            argv[k++] = thr;
            if (buffered) argv[k++] = "--buffered-io";
            if (quiet) argv[k++] = "--quiet";
            argv[k] = NULL;
            execv(bin, (char *const *)argv);
            ms_log(0, "cannot run %s: %s", bin, strerror(errno));
            _exit(127);
        }
        l->pid[i] = pid;
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
    free(l);
}
