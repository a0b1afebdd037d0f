/* ms_test: the tiny assertion harness shared by the unit tests. */
#ifndef MS_TEST_H
#define MS_TEST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

extern int ms_t_passed, ms_t_failed, ms_t_skipped;

/* Record one check. On failure print the location and the formatted message. */
#define T_CHECK(cond, ...)                                                                   \
    do {                                                                                     \
        if (cond) {                                                                          \
            ms_t_passed++;                                                                   \
        } else {                                                                             \
            ms_t_failed++;                                                                   \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                            \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fputc('\n', stderr);                                                             \
        }                                                                                    \
    } while (0)

/* Record a skipped group of checks with a visible reason. */
void ms_t_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- fixtures ---- */

/* Path of a file under the shared folder (MS_SHARED_DIR, default ../shared), or NULL after
 * printing "SKIP: ... (shared fixtures absent)" and counting a skip. The result lives in one of
 * 8 rotating static buffers: copy it if it must outlive 8 more calls. */
const char *ms_t_shared(const char *rel);

/* ---- temporary files ---- */

/* A fresh, empty directory MS_TMP_DIR/name (default root /tmp/moestream-test), static storage.
 * It is removed when the test exits without a failure (kept, and named, after a failure, or
 * always with MS_KEEP_TMP=1). Exits the test if it cannot be made. */
const char *ms_t_tmpdir(const char *name);
/* Like ms_t_tmpdir but with a short path /tmp/ms-<name>-<pid>, for ipc:// sockets (whose paths
 * must fit in a sockaddr_un, about 100 bytes). Same removal rule. */
const char *ms_t_sockdir(const char *name);
/* rm -rf path && mkdir -p path (not registered for removal). Exits the test on failure. */
void ms_t_mkdir_fresh(const char *path);
/* dir/rel in one of 8 rotating static buffers (copy a result that must outlive 8 more calls). */
const char *ms_t_path(const char *dir, const char *rel);

/* ---- running the binaries ---- */

/* Path of a built binary (MS_BIN_DIR/name), static storage. */
const char *ms_t_bin(const char *name);

/* Run a shell command; capture stdout into *out (malloc'ed, may be NULL if not wanted).
 * Returns the exit status (0..255), or -1 if it could not be run / was killed. */
int ms_t_run(const char *cmd, char **out);
/* ms_t_run of a printf-formatted command; with err != NULL, stderr is captured into *err
 * (malloc'ed) as well, otherwise it is left alone. */
int ms_t_runf(char **out, char **err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Read a whole file (malloc'ed, NUL-terminated), or NULL. */
char *ms_t_read_file(const char *path, size_t *len);
/* Write text (NUL-terminated) to path, replacing it; 0, or -1 if it cannot be written. */
int ms_t_write_file(const char *path, const char *text);
/* The same for n bytes. */
int ms_t_write_file_n(const char *path, const void *bytes, size_t n);
/* 1 if the file exists and holds needle. */
int ms_t_file_has(const char *path, const char *needle);

/* 1 if both files exist, are non-empty and hold the same bytes. */
int ms_t_same_file(const char *a, const char *b);

/* All bytes of tensor t of st (read with ms_st_read; checkpoints are not mapped), in a buffer
 * kept until exit; NULL (message printed) if the read fails. */
struct ms_st;
const unsigned char *ms_t_st_bytes(const struct ms_st *st, const void *tensor);
/* Part k (0..5: w1, w2, w3, each packed then scale) of routed expert e of layer l in st, by the
 * released naming (spec §4.3), spelled here independently of the code under test; NULL if
 * absent. Returns the ms_st_tensor. */
const void *ms_t_expert_part(const struct ms_st *st, int l, int e, int k);

/* Run fn with stderr (fd 2) sent to a file under MS_TMP_DIR; what it wrote goes into buf[n]
 * (NUL-terminated, cut to fit). Returns fn's result. */
int ms_t_capture_stderr(char *buf, size_t n, int (*fn)(void));

/* Sleep for ms milliseconds. */
void ms_t_sleep_ms(int ms);

/* ---- expert worker processes (moestream-worker, or anything that logs "listening on EP") ---- */

typedef struct {
    int pid;          /* > 0 while started and not reaped */
    int status;       /* once reaped: exit code, or 128 + signal if killed; -1 before */
    char log[1024];   /* its stderr (empty: /dev/null) */
    char ep[1024];    /* the endpoint taken from its "listening on EP" log line */
} ms_t_worker;

typedef struct {
    const char *log;       /* file for its stderr, or NULL */
    const char *env;       /* one "NAME=value" added to its environment, or NULL */
    const char *wait_path; /* ready once this path exists (an ipc socket of a --quiet worker);
                            * NULL: ready at the "listening on " line of the log */
    double timeout_s;      /* how long to wait for ready; 0 = 30 s */
} ms_t_worker_opts;

/* Start argv[0] (a path; argv NULL-terminated) with stdout on /dev/null, killed with the test
 * (PR_SET_PDEATHSIG), and wait until it is ready. Returns 0 when ready, its exit status if it
 * ended first, -1 on a timeout (it is then still running: stop or kill it). Every started worker
 * is killed at exit if still running. */
int ms_t_worker_start(ms_t_worker *w, const char *const *argv, const ms_t_worker_opts *o);
/* SIGTERM, then wait up to limit_s (time taken into *took when not NULL). Returns the exit status,
 * or -1 if it had to be SIGKILLed (or was not running: then w->status is returned). */
int ms_t_worker_stop(ms_t_worker *w, double limit_s, double *took);
/* SIGKILL and reap (no-op when not running). */
void ms_t_worker_kill(ms_t_worker *w);
/* Reap without waiting: 1 if it has ended (w->status set), 0 if it still runs. */
int ms_t_worker_reaped(ms_t_worker *w);
/* 1 if the worker's log holds needle. */
int ms_t_worker_log_has(const ms_t_worker *w, const char *needle);
/* XOR the byte at off of the file at path with mask, in place (a failed read or write is a
 * test failure). */
void ms_t_flip_byte(const char *path, uint64_t off, uint8_t mask);
/* Pid of local worker i started by coordinator pid (--local-workers: its command line names
 * worker-<i>.sock), or 0 while there is none. */
int ms_t_local_worker(int pid, int i);
/* SIGKILL every worker still running (async-signal-safe: for fatal-signal handlers). */
void ms_t_worker_kill_all(void);

/* ---- seeded random data (xorshift64: the same seed gives the same data everywhere) ---- */

typedef struct {
    uint64_t s; /* never 0 */
} ms_t_rng;

uint64_t ms_t_rng_u64(ms_t_rng *r);
/* Uniform in [0, n) (n > 0; modulo bias is irrelevant for tests). */
uint32_t ms_t_rng_below(ms_t_rng *r, uint32_t n);
/* Uniform double in [0, 1) from the top 53 bits. */
double ms_t_rng_unit(ms_t_rng *r);
/* Uniform float in [lo, hi). */
float ms_t_rng_float(ms_t_rng *r, float lo, float hi);
/* Uniform in [-1, 1) times a random power of two in [2^-6, 2^6]: varied exponents. */
float ms_t_rng_wide(ms_t_rng *r);
/* x[n] uniform in [lo, hi). */
void ms_t_fill_f32(ms_t_rng *r, float *x, int64_t n, float lo, float hi);
/* x[n] bf16 bit patterns of ms_t_rng_wide values (top 16 bits: truncated). */
void ms_t_fill_bf16(ms_t_rng *r, uint16_t *x, int64_t n);
/* b[n] uniform bytes in [lo, hi] (0, 255 = anything). */
void ms_t_fill_u8(ms_t_rng *r, uint8_t *b, int64_t n, unsigned lo, unsigned hi);
/* An MXFP4 matrix of n elements (n % 32 == 0): packed[n/2] any nibbles, scales[n/32] in
 * [scale_lo, scale_hi] (127 = 2^0; 112..131 keeps every product finite). */
void ms_t_fill_mxfp4(ms_t_rng *r, uint8_t *packed, uint8_t *scales, int64_t n, unsigned scale_lo, unsigned scale_hi);

/* ---- comparisons and the end ---- */

/* |got - want| <= abs + rel * |want| */
int ms_t_close(float got, float want, double abs_tol, double rel_tol);

/* Print "N passed, N failed, N skipped" and return the exit code for main: 0 if nothing
 * failed and something ran, 1 on failure, 77 (ctest SKIP) if every check was skipped. */
int ms_t_done(void);

/* Printable, truncated renderings of bytes / ids for failure messages (static storage: each
 * call returns one of a few rotating buffers). */
const char *ms_t_show(const char *s, size_t n);
const char *ms_t_show_ids(const int32_t *ids, size_t n);

/* max |got - want| / max |want| over V logits whose reference is a JSON array of float32 bit
 * patterns (the fixtures' *_bits); INFINITY when the array is not V long. */
#include <jansson.h>
double ms_t_rel_err_bits(const float *got, json_t *bits, int64_t V);

/* ---- what an engine sequence produced (ms_test.c) ---- */

#define MS_T_RECORD_TOKENS 64

/* A sequence's tokens (the first MS_T_RECORD_TOKENS kept, all counted) and every logits row
 * handed to on_logits; zero it and set V before use, free with ms_t_record_free. */
typedef struct {
    int32_t tok[MS_T_RECORD_TOKENS];
    size_t n_tok;
    float *rows; /* [n_rows][V] */
    int64_t n_rows, cap, V;
    uint64_t calls; /* on_logits calls */
} ms_t_record;

struct ms_eseq;
/* ms_gen_params callbacks with ctx an ms_t_record: on_logits keeps the rows, on_token the token. */
int ms_t_record_rows(void *ctx, struct ms_eseq *s, const float *rows, int64_t n);
void ms_t_record_token(void *ctx, struct ms_eseq *s, int32_t token);
/* Same tokens and logits rows, bit for bit (and, with calls, as many on_logits calls). */
int ms_t_record_same(const ms_t_record *a, const ms_t_record *b, int calls);
void ms_t_record_free(ms_t_record *r); /* the rows; r is zeroed but for V */

/* ---- Kimi K3 shorthands (ms_test.c) ---- */
#include "ms_expert.h"
#include "ms_k3_model.h"
#include "ms_synth.h"

/* K3's routed expert from its matrices w1 (gate), w2 (down), w3 (up). */
ms_expert_w ms_t_expert_w(ms_mat w1, ms_mat w2, ms_mat w3);
/* An in-process table of SiTU-GLU experts with constants b1, b2. */
ms_expert_table *ms_t_situ_table(int n_layers, int n_experts, int latent, float b1, float b2, ms_pool *pool);
/* The routed-expert format of a K3 config (0, or -1 with ms_err set). */
int ms_t_k3_xfmt(const ms_k3_cfg *c, ms_xfmt *f);
/* Write the tiny synthetic K3 checkpoint of seed `seed` into <ms_t_tmpdir(name)>/tiny: its path
 * in dir[n], its shape in *sh. Returns 0, or -1 after a failed check. */
int ms_t_synth_tiny(const char *name, uint64_t seed, char *dir, size_t n, ms_synth_shape *sh);
/* ms_k3_model_open with default options and n_threads. */
ms_model *ms_t_k3_load(const char *dir, int n_threads);

#endif
