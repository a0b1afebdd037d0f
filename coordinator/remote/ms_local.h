/* ms_local: starts and stops the coordinator's own moestream-worker processes on this box. */
#ifndef MS_LOCAL_H
#define MS_LOCAL_H

#include <stddef.h>
#include <stdint.h>

#include "ms_remote.h"

typedef struct ms_local ms_local;

/* io_flags of ms_local_start: the workers read with --buffered-io, never map (--mmap off). */
enum { MS_LOCAL_BUFFERED = 1, MS_LOCAL_NO_MMAP = 2 };

/* Start n workers serving the checkpoint in model_dir over ipc sockets in a new private 0700
 * directory; worker i owns experts [i*Ne/n, (i+1)*Ne/n) of every layer and gets budget_each
 * bytes (--ram-budget), threads each, io_flags their I/O options. Workers die with the coordinator (PR_SET_PDEATHSIG).
 * On success *workers and *n_workers describe their endpoints (owned by the ms_local). Returns
 * NULL with ms_err set (MS_EXIT_WORKER) if a worker cannot be started. */
ms_local *ms_local_start(const char *model_dir, int n, int n_experts, uint64_t budget_each, int threads,
                         int io_flags, int quiet, ms_remote_worker **workers, int *n_workers);
/* SIGTERM every worker, wait up to a few seconds, SIGKILL the rest, remove the directory.
 * Accepts NULL. */
void ms_local_stop(ms_local *l);
/* Sum of the workers' peak resident memory so far (ms_proc_pid_peak_rss), in bytes; a worker
 * already gone counts 0. */
uint64_t ms_local_peak_rss(const ms_local *l);
/* Pid of worker i (tests kill one to check fail-over). */
int ms_local_pid(const ms_local *l, int i);

/* For ms_remote_opts.revive: if worker i has exited, start it again on its endpoint and return
 * 1 (at most 3 times in a row: a worker that ran 60 s, or $MS_LOCAL_HEALTHY_S, before dying
 * gets a fresh budget); 0 while it runs; -1 when it exited and is not restarted (why says how it
 * ended). Logs what it does. */
int ms_local_revive(ms_local *l, int i, char *why, size_t n);

/* Path of the moestream-worker binary: $MS_WORKER_BIN, else next to this executable. */
const char *ms_local_worker_bin(void);

#endif
