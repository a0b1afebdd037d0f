/* ms_test: implementation of the unit-test harness. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
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
#include "ms_err.h"
#include "ms_st.h"
#include "ms_test.h"
#include "ms_k3_experts.h"

int ms_t_passed, ms_t_failed, ms_t_skipped;

void ms_t_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("SKIP: ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    ms_t_skipped++;
}

const char *ms_t_path(const char *dir, const char *rel)
{
    static char buf[8][4096 + 256];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, rel);
    return buf[k];
}

const char *ms_t_shared(const char *rel)
{
    const char *root = getenv("MS_SHARED_DIR");
    if (!root || !*root) root = "../shared";
    const char *buf = ms_t_path(root, rel);
    if (access(buf, R_OK) != 0) {
        ms_t_skip("%s not found (shared fixtures absent)", buf);
        return NULL;
    }
    return buf;
}

void ms_t_mkdir_fresh(const char *path)
{
    char cmd[8300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", path, path);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot create %s\n", path);
        exit(1);
    }
}

/* Directories made by ms_t_tmpdir / ms_t_sockdir, removed at exit unless something failed. */
static char *tmp_made[64];
static int n_tmp_made;

static void tmp_cleanup(void)
{
    const char *keep = getenv("MS_KEEP_TMP");
    int kept = ms_t_failed > 0 || (keep && *keep && strcmp(keep, "0") != 0);
    for (int i = 0; i < n_tmp_made; i++) {
        if (kept) {
            printf("kept %s\n", tmp_made[i]);
        } else {
            char cmd[4200];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_made[i]);
            if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_made[i]);
        }
        free(tmp_made[i]);
    }
    n_tmp_made = 0;
}

static const char *tmp_register(const char *path)
{
    ms_t_mkdir_fresh(path);
    for (int i = 0; i < n_tmp_made; i++)
        if (!strcmp(tmp_made[i], path)) return path;
    if (n_tmp_made == 0) atexit(tmp_cleanup);
    if (n_tmp_made < (int)(sizeof tmp_made / sizeof *tmp_made)) tmp_made[n_tmp_made++] = strdup(path);
    return path;
}

const char *ms_t_tmpdir(const char *name)
{
    static char buf[4096];
    const char *root = getenv("MS_TMP_DIR");
    if (!root || !*root) root = "/tmp/moestream-test";
    snprintf(buf, sizeof buf, "%s/%s", root, name);
    return tmp_register(buf);
}

const char *ms_t_sockdir(const char *name)
{
    static char buf[256];
    snprintf(buf, sizeof buf, "/tmp/ms-%.40s-%d", name, (int)getpid());
    return tmp_register(buf);
}

const char *ms_t_bin(const char *name)
{
    static char buf[4096];
    const char *root = getenv("MS_BIN_DIR");
    if (!root || !*root) root = ".";
    snprintf(buf, sizeof buf, "%s/%s", root, name);
    return buf;
}

int ms_t_run(const char *cmd, char **out)
{
    FILE *f = popen(cmd, "r");
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!f || !buf) {
        free(buf);
        if (f) pclose(f);
        return -1;
    }
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len < 1024) {
            cap *= 2;
            buf = realloc(buf, cap);
            if (!buf) abort();
        }
    }
    buf[len] = 0;
    int st = pclose(f);
    if (out)
        *out = buf;
    else
        free(buf);
    if (st == -1 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

char *ms_t_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return NULL;
    }
    buf[n] = 0;
    fclose(f);
    if (len) *len = (size_t)n;
    return buf;
}

int ms_t_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int bad = fputs(text, f) < 0;
    return (fclose(f) == 0 && !bad) ? 0 : -1;
}

int ms_t_write_file_n(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int bad = fwrite(bytes, 1, n, f) != n;
    return (fclose(f) == 0 && !bad) ? 0 : -1;
}

int ms_t_file_has(const char *path, const char *needle)
{
    char *text = ms_t_read_file(path, NULL);
    int r = text && strstr(text, needle) != NULL;
    free(text);
    return r;
}

int ms_t_runf(char **out, char **err, const char *fmt, ...)
{
    char cmd[16384], errf[4200] = "";
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof cmd - 4300) {
        fprintf(stderr, "ms_t_runf: command too long\n");
        return -1;
    }
    if (err) {
        static int seq;
        const char *root = getenv("MS_TMP_DIR");
        if (!root || !*root) root = "/tmp";
        mkdir(root, 0755);
        snprintf(errf, sizeof errf, "%s/.stderr-%d-%d", root, (int)getpid(), seq++);
        /* braces: the command's own redirections stay inside, ours apply to the whole */
        memmove(cmd + 2, cmd, (size_t)n + 1);
        memcpy(cmd, "{ ", 2);
        snprintf(cmd + n + 2, sizeof cmd - (size_t)n - 2, "\n} 2>'%s'", errf);
    }
    int st = ms_t_run(cmd, out);
    if (err) {
        *err = ms_t_read_file(errf, NULL);
        unlink(errf);
    }
    return st;
}

int ms_t_same_file(const char *a, const char *b)
{
    size_t la = 0, lb = 0;
    char *x = ms_t_read_file(a, &la), *y = ms_t_read_file(b, &lb);
    int eq = x && y && la == lb && la > 0 && !memcmp(x, y, la);
    free(x);
    free(y);
    return eq;
}

static void **st_bufs;
static size_t n_st_bufs;

static void st_bufs_free(void)
{
    for (size_t i = 0; i < n_st_bufs; i++) free(st_bufs[i]);
    free(st_bufs);
}

const unsigned char *ms_t_st_bytes(const struct ms_st *st, const void *tensor)
{
    const ms_st_tensor *t = tensor;
    unsigned char *b = malloc(t->nbytes ? (size_t)t->nbytes : 1);
    if (ms_st_read(st, t, 0, b, (size_t)t->nbytes) != 0) {
        fprintf(stderr, "cannot read tensor %s: %s\n", t->name, ms_err_msg());
        free(b);
        return NULL;
    }
    if (n_st_bufs == 0) atexit(st_bufs_free);
    st_bufs = realloc(st_bufs, sizeof *st_bufs * (n_st_bufs + 1));
    st_bufs[n_st_bufs++] = b;
    return b;
}

void ms_t_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- worker processes ---- */

/* Pids of started, unreaped workers, for the exit / fatal-signal cleanup. */
static volatile pid_t live_pid[64];

static void live_set(pid_t pid, int on)
{
    for (size_t i = 0; i < sizeof live_pid / sizeof *live_pid; i++)
        if (on ? live_pid[i] == 0 : live_pid[i] == pid) {
            live_pid[i] = on ? pid : 0;
            return;
        }
}

void ms_t_worker_kill_all(void)
{
    for (size_t i = 0; i < sizeof live_pid / sizeof *live_pid; i++)
        if (live_pid[i] > 0) {
            kill(live_pid[i], SIGKILL);
            waitpid(live_pid[i], NULL, 0);
            live_pid[i] = 0;
        }
}

static int status_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0); }

int ms_t_worker_reaped(ms_t_worker *w)
{
    int st;
    if (w->pid <= 0) return 1;
    if (waitpid(w->pid, &st, WNOHANG) != w->pid) return 0;
    live_set(w->pid, 0);
    w->pid = 0;
    w->status = status_code(st);
    return 1;
}

int ms_t_worker_start(ms_t_worker *w, const char *const *argv, const ms_t_worker_opts *o)
{
    static int registered;
    ms_t_worker_opts none = {0};
    if (!o) o = &none;
    memset(w, 0, sizeof *w);
    w->status = -1;
    if (o->log) snprintf(w->log, sizeof w->log, "%s", o->log);
    if (!registered) {
        atexit(ms_t_worker_kill_all);
        registered = 1;
    }
    fflush(NULL);
    pid_t parent = getpid(), p = fork();
    if (p < 0) return -1;
    if (p == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* kept across exec: a killed test leaves no worker */
        if (getppid() != parent) _exit(125);
        int nul = open("/dev/null", O_WRONLY);
        int fd = o->log ? open(o->log, O_WRONLY | O_CREAT | O_TRUNC, 0644) : nul;
        if (fd < 0 || nul < 0) _exit(126);
        dup2(fd, 2);
        dup2(nul, 1);
        if (o->env) putenv((char *)o->env);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    w->pid = p;
    live_set(p, 1);
    double limit = o->timeout_s > 0 ? o->timeout_s : 30.0;
    for (double t0 = ms_now(); ms_now() - t0 < limit;) {
        if (ms_t_worker_reaped(w)) return w->status;
        if (o->wait_path) {
            struct stat sb;
            if (stat(o->wait_path, &sb) == 0) return 0;
        } else {
            char *text = o->log ? ms_t_read_file(o->log, NULL) : NULL;
            const char *q = text ? strstr(text, "listening on ") : NULL;
            if (q) {
                q += strlen("listening on ");
                snprintf(w->ep, sizeof w->ep, "%.*s", (int)strcspn(q, " \n"), q);
                free(text);
                return 0;
            }
            free(text);
        }
        ms_t_sleep_ms(10);
    }
    return -1;
}

int ms_t_worker_stop(ms_t_worker *w, double limit_s, double *took)
{
    if (w->pid <= 0) return w->status;
    double t0 = ms_now();
    kill(w->pid, SIGTERM);
    while (ms_now() - t0 < limit_s) {
        if (ms_t_worker_reaped(w)) {
            if (took) *took = ms_now() - t0;
            return w->status;
        }
        ms_t_sleep_ms(10);
    }
    ms_t_worker_kill(w);
    return -1;
}

void ms_t_worker_kill(ms_t_worker *w)
{
    if (w->pid <= 0) return;
    int st = 0;
    kill(w->pid, SIGKILL);
    while (waitpid(w->pid, &st, 0) < 0 && errno == EINTR) {
    }
    live_set(w->pid, 0);
    w->pid = 0;
    w->status = status_code(st);
}

int ms_t_worker_log_has(const ms_t_worker *w, const char *needle) { return w->log[0] && ms_t_file_has(w->log, needle); }

/* ---- random data ---- */

uint64_t ms_t_rng_u64(ms_t_rng *r)
{
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}

uint32_t ms_t_rng_below(ms_t_rng *r, uint32_t n) { return (uint32_t)(ms_t_rng_u64(r) % n); }

double ms_t_rng_unit(ms_t_rng *r) { return (double)(ms_t_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

float ms_t_rng_float(ms_t_rng *r, float lo, float hi)
{
    float v = (float)((double)lo + ((double)hi - (double)lo) * ms_t_rng_unit(r));
    return v < hi ? v : lo; /* rounding to float can reach hi */
}

float ms_t_rng_wide(ms_t_rng *r)
{
    double u = ms_t_rng_unit(r) * 2.0 - 1.0;
    return (float)ldexp(u, (int)(ms_t_rng_u64(r) % 13) - 6);
}

void ms_t_fill_f32(ms_t_rng *r, float *x, int64_t n, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++) x[i] = ms_t_rng_float(r, lo, hi);
}

void ms_t_fill_bf16(ms_t_rng *r, uint16_t *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float f = ms_t_rng_wide(r);
        uint32_t u;
        memcpy(&u, &f, 4);
        x[i] = (uint16_t)(u >> 16);
    }
}

void ms_t_fill_u8(ms_t_rng *r, uint8_t *b, int64_t n, unsigned lo, unsigned hi)
{
    for (int64_t i = 0; i < n; i++) b[i] = (uint8_t)(lo + ms_t_rng_below(r, hi - lo + 1));
}

void ms_t_fill_mxfp4(ms_t_rng *r, uint8_t *packed, uint8_t *scales, int64_t n, unsigned scale_lo, unsigned scale_hi)
{
    ms_t_fill_u8(r, packed, n / 2, 0, 255);
    ms_t_fill_u8(r, scales, n / 32, scale_lo, scale_hi);
}

int ms_t_close(float got, float want, double abs_tol, double rel_tol)
{
    if (isnan(got) || isnan(want)) return 0;
    return fabs((double)got - (double)want) <= abs_tol + rel_tol * fabs((double)want);
}

int ms_t_done(void)
{
    printf("%d passed, %d failed, %d skipped\n", ms_t_passed, ms_t_failed, ms_t_skipped);
    if (ms_t_failed) return 1;
    if (ms_t_passed == 0) return 77;
    return 0;
}

const void *ms_t_expert_part(const struct ms_st *st, int l, int e, int k)
{
    static const char *part[6] = {"w1.weight_packed", "w1.weight_scale", "w2.weight_packed",
                                  "w2.weight_scale",  "w3.weight_packed", "w3.weight_scale"};
    char name[256];
    snprintf(name, sizeof name, "language_model.model.layers.%d.block_sparse_moe.experts.%d.%s", l, e, part[k]);
    return ms_st_find(st, name);
}

int ms_t_capture_stderr(char *buf, size_t n, int (*fn)(void))
{
    char path[4200], name[64];
    /* one directory per process: tests run in parallel (ctest -j) and a fresh tmpdir is wiped */
    snprintf(name, sizeof name, "stderr-capture-%d", (int)getpid());
    snprintf(path, sizeof path, "%s/stderr", ms_t_tmpdir(name));
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
    int rc = fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(path, "r");
    size_t got = f ? fread(buf, 1, n - 1, f) : 0;
    buf[got] = 0;
    if (f) fclose(f);
    return rc;
}

int ms_t_local_worker(int pid, int i)
{
    char path[300], sock[32];
    snprintf(sock, sizeof sock, "worker-%d.sock", i);
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *tasks = opendir(path); /* a worker restarted by another thread is that thread's child */
    struct dirent *de;
    int found = 0;
    while (tasks && !found && (de = readdir(tasks))) {
        if (de->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "/proc/%d/task/%.40s/children", pid, de->d_name);
        FILE *f = fopen(path, "r"); /* /proc files have no size: read with stdio */
        int child;
        while (f && !found && fscanf(f, "%d", &child) == 1) {
            char cmd[4096] = "";
            snprintf(path, sizeof path, "/proc/%d/cmdline", child);
            FILE *c = fopen(path, "r");
            size_t n = c ? fread(cmd, 1, sizeof cmd - 1, c) : 0;
            if (c) fclose(c);
            for (size_t k = 0; k < n; k++)
                if (!cmd[k]) cmd[k] = ' ';
            if (strstr(cmd, sock)) found = child;
        }
        if (f) fclose(f);
    }
    if (tasks) closedir(tasks);
    return found;
}

void ms_t_flip_byte(const char *path, uint64_t off, uint8_t mask)
{
    int fd = open(path, O_RDWR);
    uint8_t b = 0;
    T_CHECK(fd >= 0 && pread(fd, &b, 1, (off_t)off) == 1, "read byte %llu of %s", (unsigned long long)off, path);
    b ^= mask;
    T_CHECK(pwrite(fd, &b, 1, (off_t)off) == 1, "write byte %llu of %s", (unsigned long long)off, path);
    if (fd >= 0) close(fd);
}

ms_expert_w ms_t_expert_w(ms_mat w1, ms_mat w2, ms_mat w3)
{
    ms_expert_w w;
    memset(&w, 0, sizeof w);
    w.w[MS_XROLE_GATE] = w1;
    w.w[MS_XROLE_DOWN] = w2;
    w.w[MS_XROLE_UP] = w3;
    return w;
}

ms_expert_table *ms_t_situ_table(int n_layers, int n_experts, int latent, float b1, float b2, ms_pool *pool)
{
    float p[2] = {b1, b2};
    return ms_expert_table_new(n_layers, n_experts, latent, MS_XACT_SITU_GLU, p, pool);
}

int ms_t_k3_xfmt(const ms_k3_cfg *c, ms_xfmt *f) { return ms_k3_experts_fmt(c->latent, c->moe_inter, c->situ_b1, c->situ_b2, f); }

int ms_t_synth_tiny(const char *name, uint64_t seed, char *dir, size_t n, ms_synth_shape *sh)
{
    snprintf(dir, n, "%s/tiny", ms_t_tmpdir(name));
    ms_synth_preset("tiny", sh);
    int rc = ms_synth_write(dir, sh, seed);
    T_CHECK(rc == 0, "synth tiny (seed %llu) into %s: %s", (unsigned long long)seed, dir, ms_err_msg());
    return rc;
}

ms_model *ms_t_k3_load(const char *dir, int n_threads)
{
    ms_run_opts o = {0};
    o.n_threads = n_threads;
    return ms_k3_model_open(dir, &o);
}

/* Printable, truncated rendering of bytes for failure messages (static storage). */
const char *ms_t_show(const char *s, size_t n)
{
    static char buf[4][400];
    static int which;
    char *b = buf[which++ & 3];
    size_t o = 0;
    for (size_t i = 0; i < n && o < sizeof buf[0] - 12; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') o += (size_t)snprintf(b + o, 8, "\\n");
        else if (c == '\r') o += (size_t)snprintf(b + o, 8, "\\r");
        else if (c == '\t') o += (size_t)snprintf(b + o, 8, "\\t");
        else if (c < 0x20 || c == 0x7f) o += (size_t)snprintf(b + o, 8, "\\x%02x", c);
        else b[o++] = (char)c;
    }
    if (o >= sizeof buf[0] - 12) o += (size_t)snprintf(b + o, 8, "...");
    b[o] = 0;
    return b;
}

const char *ms_t_show_ids(const int32_t *ids, size_t n)
{
    static char buf[2][400];
    static int which;
    char *b = buf[which++ & 1];
    size_t o = 0;
    b[0] = 0;
    for (size_t i = 0; i < n && o < sizeof buf[0] - 24; i++)
        o += (size_t)snprintf(b + o, 16, "%s%d", i ? "," : "", ids[i]);
    if (o >= sizeof buf[0] - 24) snprintf(b + o, 8, ",...");
    return b;
}


static float bits_to_f32(json_t *v)
{
    uint32_t u = (uint32_t)json_integer_value(v);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

double ms_t_rel_err_bits(const float *got, json_t *bits, int64_t V)
{
    double mx = 0, worst = 0;
    if (json_array_size(bits) != (size_t)V) return INFINITY; /* a short or missing row is no match */
    for (int64_t i = 0; i < V; i++) mx = fmax(mx, fabs(bits_to_f32(json_array_get(bits, (size_t)i))));
    for (int64_t i = 0; i < V; i++)
        worst = fmax(worst, fabs((double)got[i] - bits_to_f32(json_array_get(bits, (size_t)i))));
    return worst / mx;
}

/* ---- what an engine sequence produced ---- */

int ms_t_record_rows(void *ctx, struct ms_eseq *s, const float *rows, int64_t n)
{
    ms_t_record *r = ctx;
    (void)s;
    if (r->n_rows + n > r->cap) {
        r->cap = (r->n_rows + n) * 2;
        r->rows = ms_realloc(r->rows, sizeof(float) * (size_t)(r->cap * r->V));
    }
    memcpy(r->rows + r->n_rows * r->V, rows, sizeof(float) * (size_t)(n * r->V));
    r->n_rows += n;
    r->calls++;
    return 0;
}

void ms_t_record_token(void *ctx, struct ms_eseq *s, int32_t token)
{
    ms_t_record *r = ctx;
    (void)s;
    if (r->n_tok < MS_T_RECORD_TOKENS) r->tok[r->n_tok] = token;
    r->n_tok++;
}

int ms_t_record_same(const ms_t_record *a, const ms_t_record *b, int calls)
{
    size_t kept = a->n_tok < MS_T_RECORD_TOKENS ? a->n_tok : MS_T_RECORD_TOKENS;
    return a->n_tok == b->n_tok && !memcmp(a->tok, b->tok, sizeof(int32_t) * kept) && a->n_rows == b->n_rows &&
           (!calls || a->calls == b->calls) && a->V == b->V &&
           (a->n_rows == 0 || !memcmp(a->rows, b->rows, sizeof(float) * (size_t)(a->n_rows * a->V)));
}

void ms_t_record_free(ms_t_record *r)
{
    int64_t V = r->V;
    free(r->rows);
    memset(r, 0, sizeof *r);
    r->V = V;
}
