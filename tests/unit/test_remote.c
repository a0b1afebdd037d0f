/* test_remote: coordinator + expert workers over ZeroMQ: logits bit-identical to in-process for
 * local workers, several shard layouts and replicas; dead workers fail over or fail clearly. */
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ms_k3_cfg.h"
#include "ms_clock.h"
#include "ms_err.h"
#include "ms_ident.h"
#include "ms_remote.h"
#include "ms_st.h"
#include "ms_test.h"
#include "ms_wire.h"
#include "ms_xfmt.h"
#include <zmq.h>

static char bin[1024], wbin[1024], dir[1024];

typedef ms_t_worker worker;

/* Start a --quiet worker on an ipc endpoint in d with an expert SPEC (or a pack directory when
 * spec starts with '/'), env one extra "NAME=value" or NULL; wait for its socket. */
static int start_worker(worker *w, const char *d, int idx, const char *spec, const char *env)
{
    char ep[sizeof w->ep];
    snprintf(ep, sizeof ep, "ipc://%.900s/w%d.sock", d, idx);
    unlink(ep + 6);
    const char *argv[] = {wbin, spec[0] == '/' ? "--pack" : "--model", spec[0] == '/' ? spec : dir, "--listen", ep,
                          "--threads", "1", "--quiet", spec[0] == '/' ? NULL : "--experts", spec, NULL};
    ms_t_worker_opts o = {NULL, env, ep + 6, 5};
    int rc = ms_t_worker_start(w, argv, &o);
    snprintf(w->ep, sizeof w->ep, "%s", ep);
    return rc;
}

static void stop_worker(worker *w) { ms_t_worker_kill(w); }

/* XOR the packed bytes of every routed-expert tensor of dir lying more than 64 KiB from either
 * end of its shard's data (what the old sampled fingerprint did not see). Returns how many. */
static int xor_middle_experts(const char *d)
{
    ms_st *st = ms_st_open_dir(d);
    int n = 0;
    for (size_t i = 0; st && i < ms_st_count(st); i++) {
        const ms_st_tensor *t = ms_st_at(st, i);
        struct stat sb;
        const char *path = ms_st_file_path(st, t->file);
        if (!strstr(t->name, ".block_sparse_moe.experts.") || !strstr(t->name, "weight_packed") || stat(path, &sb) != 0)
            continue;
        uint64_t lo = 0;
        for (size_t k = 0; k < ms_st_count(st); k++) /* the data section starts at the first tensor */
            if (ms_st_at(st, k)->file == t->file && (lo == 0 || ms_st_at(st, k)->offset < lo)) lo = ms_st_at(st, k)->offset;
        if (t->offset < lo + 65536 || t->offset + t->nbytes + 65536 > (uint64_t)sb.st_size) continue;
        int fd = open(path, O_RDWR);
        uint8_t *b = malloc(t->nbytes);
        if (fd >= 0 && pread(fd, b, t->nbytes, (off_t)t->offset) == (ssize_t)t->nbytes) {
            for (uint64_t k = 0; k < t->nbytes; k++) b[k] ^= 0x11; /* other nibbles, same scales: finite outputs */
            n += pwrite(fd, b, t->nbytes, (off_t)t->offset) == (ssize_t)t->nbytes;
        }
        free(b);
        if (fd >= 0) close(fd);
    }
    ms_st_close(st);
    return n;
}

/* A CURVE worker on a free tcp port of 127.0.0.1 (ready at its "listening on" line). */
static int start_curve_worker(worker *w, const char *secret, const char *allow, const char *log_path)
{
    const char *argv[] = {wbin, "--model", dir, "--listen", "tcp://127.0.0.1:*", "--curve-secret", secret,
                          "--allow", allow, "--threads", "1", "--ram-budget", "256M", NULL};
    ms_t_worker_opts o = {log_path, NULL, NULL, 30};
    return ms_t_worker_start(w, argv, &o);
}

static void write_key(const char *path, const char *key, int mode)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%s\n", key);
        fclose(f);
    }
    chmod(path, (mode_t)mode);
}

static const char *model_dir = dir; /* the coordinator's checkpoint (full, or a trunk) */

static int run_to(const char *extra, const char *dump, json_t **out)
{
    char cmd[32768], *o = NULL;
    snprintf(cmd, sizeof cmd, "%s run --model %s --ids 5,9,13,200,17,400,3,8,90,61 -n 12 --json --quiet "
             "--dump-logits %s %s",
             bin, model_dir, dump, extra);
    int st = ms_t_run(cmd, &o);
    json_error_t je;
    if (out) *out = o ? json_loads(o, 0, &je) : NULL;
    free(o);
    return st;
}

int main(void)
{
    snprintf(bin, sizeof bin, "%.1000s", ms_t_bin("moestream"));
    snprintf(wbin, sizeof wbin, "%.1000s", ms_t_bin("moestream-worker"));
    const char *t = ms_t_tmpdir("remote");
    char tmp[1024], a[1200], b[1200], cmd[8192], sock[1200];
    snprintf(tmp, sizeof tmp, "%.900s", t);
    snprintf(dir, sizeof dir, "%.900s/m", tmp);
    snprintf(cmd, sizeof cmd, "%s synth --out %s --seed 21 2>/dev/null", bin, dir);
    T_CHECK(ms_t_run(cmd, NULL) == 0, "synth");
    /* short socket paths: ipc paths are limited to ~100 bytes */
    snprintf(sock, sizeof sock, "%s", ms_t_sockdir("remote"));

    snprintf(a, sizeof a, "%s/inproc.bin", tmp);
    json_t *ref = NULL;
    T_CHECK(run_to("", a, &ref) == 0 && ref, "in-process run");

    /* Local workers started by the coordinator. */
    for (int n = 1; n <= 3; n += 2) {
        char extra[64];
        snprintf(b, sizeof b, "%s/local%d.bin", tmp, n);
        snprintf(extra, sizeof extra, "--local-workers %d", n);
        json_t *j = NULL;
        int st = run_to(extra, b, &j);
        T_CHECK(st == 0 && ms_t_same_file(a, b), "%d local worker(s): logits bit-identical to in-process (status %d)", n,
                st);
        T_CHECK(j && json_equal(json_object_get(j, "generated_ids"), json_object_get(ref, "generated_ids")),
                "%d local worker(s): same tokens", n);
        json_decref(j);
    }

    /* Workers started by hand with different shard layouts, with and without replicas. */
    static const char *layouts[][3] = {
        {"*:0-2", "*:3-5", "*:6-7"},       /* three disjoint ranges */
        {"*:0-7", NULL, NULL},             /* one worker owns everything */
        {"*:0-5", "*:3-7", "*:0-1,*:6-7"}, /* every expert on two workers */
        {"1:*,2:*", "3:*,4:*", "5:*"},     /* split by layer */
    };
    for (int L = 0; L < 4; L++) {
        worker w[3] = {{0}};
        char list[4096] = "";
        int ok = 1;
        for (int i = 0; i < 3 && layouts[L][i]; i++) {
            ok &= start_worker(&w[i], sock, i, layouts[L][i], NULL) == 0;
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? "," : "", w[i].ep);
        }
        T_CHECK(ok, "layout %d: workers started", L);
        char extra[4200];
        snprintf(extra, sizeof extra, "--workers %s", list);
        snprintf(b, sizeof b, "%s/layout%d.bin", tmp, L);
        int st = run_to(extra, b, NULL);
        T_CHECK(st == 0 && ms_t_same_file(a, b), "layout %d: logits bit-identical to in-process (status %d)", L, st);
        for (int i = 0; i < 3; i++) stop_worker(&w[i]);
    }

    /* 300 workers listed: 297 endpoints nobody listens on, then three live workers that share
     * the experts. Every socket is polled each round (at start and in each pass), so the last
     * workers answer as the first would: same bits, and the start waits no longer than the
     * worker timeout. */
    {
        worker w[3] = {{0}};
        static const char *part[3] = {"*:0-2", "*:3-5", "*:6-7"};
        static char list[300 * 128];
        list[0] = 0;
        int ok = 1;
        for (int i = 0; i < 297; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%sipc://%s/none%d", i ? "," : "", sock, i);
        for (int i = 0; i < 3; i++) {
            ok &= start_worker(&w[i], sock, 70 + i, part[i], NULL) == 0;
            snprintf(list + strlen(list), sizeof list - strlen(list), ",%s", w[i].ep);
        }
        T_CHECK(ok, "300 workers: the three live ones started");
        static char extra[sizeof list + 64];
        snprintf(extra, sizeof extra, "--worker-timeout 3 --workers %s", list);
        snprintf(b, sizeof b, "%s/w300.bin", tmp);
        double t0 = ms_now();
        int st = run_to(extra, b, NULL);
        T_CHECK(st == 0 && ms_t_same_file(a, b),
                "300 listed workers, the live ones last: logits bit-identical to in-process (status %d, %.1f s)", st,
                ms_now() - t0);
        for (int i = 0; i < 3; i++) stop_worker(&w[i]);
    }

    /* Requests larger than the cap go out as consecutive slices: same bits. */
    {
        worker w[2] = {{0}};
        T_CHECK(start_worker(&w[0], sock, 60, "*:0-4", NULL) == 0 && start_worker(&w[1], sock, 61, "*:3-7", NULL) == 0,
                "workers for the slicing test");
        char extra[4200];
        snprintf(extra, sizeof extra, "--workers %s,%s", w[0].ep, w[1].ep);
        snprintf(b, sizeof b, "%s/sliced.bin", tmp);
        setenv("MS_REMOTE_MAX_REQUEST", "700", 1); /* a row and a few items per request */
        json_t *j = NULL;
        int st = run_to(extra, b, &j);
        unsetenv("MS_REMOTE_MAX_REQUEST");
        json_t *ws = j ? json_object_get(json_object_get(j, "stats"), "workers") : NULL;
        T_CHECK(st == 0 && ms_t_same_file(a, b), "sliced requests: logits bit-identical (%d)", st);
        T_CHECK(ws && json_integer_value(json_object_get(ws, "requests")) > 2 * 12 * 5,
                "the requests were sliced (%lld requests)", (long long)json_integer_value(json_object_get(ws, "requests")));
        json_decref(j);
        for (int i = 0; i < 2; i++) stop_worker(&w[i]);
    }

    /* Issue 16, defect 1: a worker serving a copy whose expert bytes differ only far from the
     * ends of a shard is refused (the fingerprint covers every byte), exit 7, naming it. */
    {
        char copy[1200], ep[1300];
        snprintf(copy, sizeof copy, "%s/edited", tmp);
        snprintf(cmd, sizeof cmd, "rm -rf %s && cp -a %s %s && rm -f %s/moestream.ident", copy, dir, copy, copy);
        T_CHECK(ms_t_run(cmd, NULL) == 0, "copy the model");
        int nx = xor_middle_experts(copy);
        T_CHECK(nx > 0, "%d routed-expert tensors changed more than 64 KiB from either end of their shard", nx);
        worker w = {0};
        snprintf(ep, sizeof ep, "ipc://%.900s/wedit.sock", sock);
        unlink(ep + 6);
        const char *argv[] = {wbin, "--model", copy, "--listen", ep, "--threads", "1", "--quiet", NULL};
        ms_t_worker_opts o = {NULL, NULL, ep + 6, 10};
        T_CHECK(ms_t_worker_start(&w, argv, &o) == 0, "worker on the edited copy");
        char extra[8192], *err = NULL;
        snprintf(extra, sizeof extra, "%s run --model %s --ids 1,2 -n 2 --workers %s --quiet 2>&1 >/dev/null", bin, dir, ep);
        int st = ms_t_run(extra, &err);
        T_CHECK(st == 7 && err && strstr(err, "fingerprint mismatch") && strstr(err, "edited"),
                "a worker whose expert bytes differ in the middle of a shard is refused: exit 7 (%d): %s", st, err ? err : "");
        free(err);
        stop_worker(&w);
    }

    /* Experts nobody owns: refused at start, naming one, exit 7. */
    {
        worker w = {0};
        T_CHECK(start_worker(&w, sock, 0, "*:0-3", NULL) == 0, "worker for a partial layout");
        char extra[8192], *err = NULL;
        snprintf(extra, sizeof extra, "%s run --model %s --ids 1,2 -n 2 --workers %s --quiet 2>&1 >/dev/null", bin,
                 dir, w.ep);
        int st = ms_t_run(extra, &err);
        T_CHECK(st == 7 && err && strstr(err, "owns layer 1 expert 4"), "unowned experts: exit 7 naming them (%d): %s", st,
                err ? err : "");
        free(err);
        stop_worker(&w);
    }

    /* A dead worker with no replica: a clear error naming it, exit 7, no hang. */
    {
        worker w[2] = {{0}};
        T_CHECK(start_worker(&w[0], sock, 0, "*:0-3", NULL) == 0 && start_worker(&w[1], sock, 1, "*:4-7", NULL) == 0,
                "two workers");
        stop_worker(&w[1]); /* gone before the run */
        char extra[8192], *err = NULL;
        snprintf(extra, sizeof extra,
                 "timeout 60 %s run --model %s --ids 1,2 -n 2 --workers %s,%s --worker-timeout 3 --quiet 2>&1 "
                 ">/dev/null",
                 bin, dir, w[0].ep, w[1].ep);
        int st = ms_t_run(extra, &err);
        T_CHECK(st == 7 && err && strstr(err, "w1.sock"), "dead worker: exit 7 naming it (%d): %s", st, err ? err : "");
        free(err);
        stop_worker(&w[0]);
    }

    /* Packs from moestream shard: the coordinator keeps only the trunk; 3 workers, 2 replicas. */
    {
        char out[1200], trunk[1300], packs[3][1300], extra[8192], list[4096] = "";
        snprintf(out, sizeof out, "%.1000s/packs", tmp);
        snprintf(cmd, sizeof cmd, "%s shard --model %s --workers 3 --replicas 2 --out %s --quiet", bin, dir, out);
        T_CHECK(ms_t_run(cmd, NULL) == 0, "shard into 3 packs with 2 replicas");
        snprintf(trunk, sizeof trunk, "%s/trunk", out);
        worker w[3] = {{0}};
        for (int i = 0; i < 3; i++) {
            snprintf(packs[i], sizeof packs[i], "%s/worker-%d", out, i);
            T_CHECK(start_worker(&w[i], sock, 10 + i, packs[i], NULL) == 0, "pack worker %d", i);
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? "," : "", w[i].ep);
        }
        model_dir = trunk;
        snprintf(extra, sizeof extra, "--workers %s", list);
        snprintf(b, sizeof b, "%s/packs.bin", tmp);
        int st = run_to(extra, b, NULL);
        T_CHECK(st == 0 && ms_t_same_file(a, b), "trunk-only coordinator + pack workers: logits bit-identical (%d)", st);
        /* Corrupt one expert the run uses in worker 0's pack: its replica answers instead. */
        char tr[1300];
        snprintf(tr, sizeof tr, "%s/used.trace", tmp);
        snprintf(cmd, sizeof cmd, "%s run --model %s --ids 5,9,13,200,17,400,3,8,90,61 -n 12 --quiet --trace %s "
                 ">/dev/null 2>&1", bin, dir, tr);
        T_CHECK(ms_t_run(cmd, NULL) == 0, "trace of the experts used");
        size_t tl = 0;
        int32_t *pairs = (int32_t *)ms_t_read_file(tr, &tl);
        char mf[1400];
        snprintf(mf, sizeof mf, "%s/manifest.json", packs[0]);
        json_error_t je;
        json_t *man = json_load_file(mf, 0, &je);
        long long off = -1;
        int cl = -1, ce = -1;
        for (size_t p = 0; pairs && p < tl / 8 && off < 0; p++) {
            json_t *ents = json_object_get(man, "experts");
            for (size_t i = 0; i < json_array_size(ents); i++) {
                json_t *en = json_array_get(ents, i);
                if (json_integer_value(json_object_get(en, "layer")) == pairs[2 * p] &&
                    json_integer_value(json_object_get(en, "expert")) == pairs[2 * p + 1]) {
                    off = json_integer_value(json_object_get(en, "offset"));
                    cl = pairs[2 * p];
                    ce = pairs[2 * p + 1];
                    break;
                }
            }
        }
        free(pairs);
        json_decref(man);
        T_CHECK(off >= 0, "found a used expert in worker 0's pack");
        if (off >= 0) {
            snprintf(cmd, sizeof cmd,
                     "printf '\\377' | dd of=%s/experts.bin bs=1 seek=%lld conv=notrunc status=none", packs[0],
                     off + 100);
            T_CHECK(ms_t_run(cmd, NULL) == 0, "flip a byte");
            snprintf(b, sizeof b, "%s/packs-corrupt.bin", tmp);
            st = run_to(extra, b, NULL);
            T_CHECK(st == 0 && ms_t_same_file(a, b), "a corrupt copy with a replica: same logits (%d)", st);
            /* Without a replica: one pack, one copy of everything; the run fails naming the expert. */
            for (int i = 0; i < 3; i++) stop_worker(&w[i]);
            char one[4200], *err = NULL, pat[64], p1[1300];
            snprintf(p1, sizeof p1, "%s/single", tmp);
            snprintf(cmd, sizeof cmd, "%s shard --model %s --workers 1 --out %s --quiet", bin, dir, p1);
            T_CHECK(ms_t_run(cmd, NULL) == 0, "shard into one pack");
            snprintf(mf, sizeof mf, "%s/worker-0/manifest.json", p1);
            man = json_load_file(mf, 0, &je);
            long long off1 = -1;
            json_t *ents = json_object_get(man, "experts");
            for (size_t i = 0; i < json_array_size(ents); i++) {
                json_t *en = json_array_get(ents, i);
                if (json_integer_value(json_object_get(en, "layer")) == cl &&
                    json_integer_value(json_object_get(en, "expert")) == ce)
                    off1 = json_integer_value(json_object_get(en, "offset"));
            }
            json_decref(man);
            snprintf(cmd, sizeof cmd, "printf '\\377' | dd of=%s/worker-0/experts.bin bs=1 seek=%lld conv=notrunc "
                     "status=none", p1, off1 + 100);
            T_CHECK(off1 >= 0 && ms_t_run(cmd, NULL) == 0, "flip a byte of layer %d expert %d", cl, ce);
            char pk[1400];
            snprintf(pk, sizeof pk, "%s/worker-0", p1);
            worker w1 = {0};
            T_CHECK(start_worker(&w1, sock, 20, pk, NULL) == 0, "single pack worker");
            snprintf(one, sizeof one,
                     "%s run --model %s/trunk --ids 5,9,13,200,17,400,3,8,90,61 -n 12 --quiet --workers %s "
                     "--worker-timeout 5 2>&1 >/dev/null",
                     bin, p1, w1.ep);
            st = ms_t_run(one, &err);
            snprintf(pat, sizeof pat, "layer %d expert %d", cl, ce);
            T_CHECK(st == 3 && err && strstr(err, pat) && strstr(err, "checksum"),
                    "corrupt expert without a replica: exit 3 naming it (%d): %s", st, err ? err : "");
            free(err);
            stop_worker(&w1);
        }
        for (int i = 0; i < 3; i++) stop_worker(&w[i]);
        model_dir = dir;
    }

    /* A worker SIGKILLed in the middle of a generation (after answering 6 requests). */
    {
        worker w[3] = {{0}};
        /* with replicas: every expert on two workers; worker 0 dies mid-run */
        static const char *rep[3] = {"*:0-5", "*:3-7", "*:0-2,*:6-7"};
        char list[4096] = "", extra[4200];
        int ok = start_worker(&w[0], sock, 30, rep[0], "MS_WORKER_FAULT_KILL_AFTER=6") == 0;
        for (int i = 1; i < 3; i++) ok &= start_worker(&w[i], sock, 30 + i, rep[i], NULL) == 0;
        for (int i = 0; i < 3; i++) snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? "," : "", w[i].ep);
        T_CHECK(ok, "replicated workers started");
        snprintf(extra, sizeof extra, "--workers %s --worker-timeout 10", list);
        snprintf(b, sizeof b, "%s/killed.bin", tmp);
        json_t *j = NULL;
        int st = run_to(extra, b, &j);
        T_CHECK(ms_t_worker_reaped(&w[0]) && w[0].status == 128 + SIGKILL, "worker 0 was SIGKILLed mid-generation");
        T_CHECK(st == 0 && ms_t_same_file(a, b), "SIGKILL with replicas: logits bit-identical (%d)", st);
        T_CHECK(j && json_equal(json_object_get(j, "generated_ids"), json_object_get(ref, "generated_ids")),
                "SIGKILL with replicas: same tokens");
        json_t *ws = j ? json_object_get(json_object_get(j, "stats"), "workers") : NULL;
        T_CHECK(ws && json_integer_value(json_object_get(ws, "failovers")) > 0, "the coordinator failed over");
        json_decref(j);
        for (int i = 0; i < 3; i++) stop_worker(&w[i]);

        /* without replicas: a clear error naming the worker and experts, exit 7, no hang */
        static const char *disj[2] = {"*:0-3", "*:4-7"};
        list[0] = 0;
        ok = start_worker(&w[0], sock, 40, disj[0], "MS_WORKER_FAULT_KILL_AFTER=6") == 0 &&
             start_worker(&w[1], sock, 41, disj[1], NULL) == 0;
        T_CHECK(ok, "disjoint workers started");
        char one[8192], *err = NULL;
        snprintf(one, sizeof one,
                 "timeout 120 %s run --model %s --ids 5,9,13,200,17,400,3,8,90,61 -n 12 --quiet --workers %s,%s "
                 "--worker-timeout 10 2>&1 >/dev/null",
                 bin, dir, w[0].ep, w[1].ep);
        double t0 = (double)time(NULL);
        st = ms_t_run(one, &err);
        T_CHECK(st == 7 && err && strstr(err, "unreachable") && strstr(err, "w40.sock"),
                "SIGKILL without replicas: exit 7 naming the experts and worker (%d): %s", st, err ? err : "");
        T_CHECK((double)time(NULL) - t0 < 60, "and it did not hang");
        free(err);
        for (int i = 0; i < 2; i++) stop_worker(&w[i]);
    }

    /* Issue 16, defect 11: with the only owner of some experts gone, every call that needs them
     * fails at once (each used to wait out a probe of its own, ~5 s, so queued requests failed
     * one by one), the healthy worker stays up, and the owner is used again once it is back. */
    {
        ms_k3_cfg cfg;
        char cp[1200], fp[17];
        snprintf(cp, sizeof cp, "%s/config.json", dir);
        T_CHECK(ms_k3_cfg_load(cp, &cfg) == 0 && ms_ident_model(dir, fp) == 0, "config and fingerprint");
        worker w[2] = {{0}};
        T_CHECK(start_worker(&w[0], sock, 60, "*:0-3", NULL) == 0 && start_worker(&w[1], sock, 61, "*:4-7", NULL) == 0,
                "two workers, no replicas");
        ms_remote_worker rw[2] = {{w[0].ep, NULL}, {w[1].ep, NULL}};
        ms_log_set_level(0);
        ms_xfmt xf;
        T_CHECK(ms_t_k3_xfmt(&cfg, &xf) == 0, "expert format of the config");
        ms_remote_opts ro = {2, rw, NULL, fp, cfg.n_layers, cfg.n_experts, &xf, 5.0};
        ms_remote *r = ms_remote_new(&ro, cfg.first_dense);
        T_CHECK(r != NULL, "ms_remote_new: %s", ms_err_msg());
        if (r) {
            ms_experts ex = ms_remote_iface(r);
            float z[2 * 32], o1[2 * 2 * 32], o2[2 * 2 * 32], ob[2 * 2 * 32], ob2[2 * 2 * 32];
            int32_t both[4] = {1, 6, 0, 5}, only_b[4] = {4, 6, 7, 5};
            for (int i = 0; i < 64; i++) z[i] = (float)((i * 37) % 11) / 7.0f - 0.5f;
            T_CHECK(ex.compute(ex.ctx, 2, 2, z, 2, both, o1) == 0 && ex.compute(ex.ctx, 2, 2, z, 2, only_b, ob) == 0,
                    "computes with both up");
            stop_worker(&w[0]);
            double t0 = ms_now(), worst = 0;
            int failed = 0;
            for (int c = 0; c < 10; c++) {
                double t1 = ms_now();
                failed += ex.compute(ex.ctx, 2, 2, z, 2, both, o2) != 0 && ms_err_code() == MS_EXIT_WORKER &&
                          strstr(ms_err_msg(), "unreachable") && strstr(ms_err_msg(), "w60.sock");
                if (ms_now() - t1 > worst && c > 0) worst = ms_now() - t1;
            }
            double all = ms_now() - t0;
            T_CHECK(failed == 10 && all < 8 && worst < 1.0,
                    "10 calls needing the lost worker's experts: all fail naming it, in %.2f s (after the first, "
                    "each within %.2f s)",
                    all, worst);
            ms_remote_stats rs;
            memset(ob2, 0, sizeof ob2);
            T_CHECK(ex.compute(ex.ctx, 2, 2, z, 2, only_b, ob2) == 0 && !memcmp(ob, ob2, sizeof ob),
                    "meanwhile a call needing only the other worker succeeds, same bits (%s)", ms_err_msg());
            ms_remote_get_stats(r, &rs);
            T_CHECK(rs.workers_up == 1, "the healthy worker stayed up (%d up)", rs.workers_up);
            T_CHECK(start_worker(&w[0], sock, 60, "*:0-3", NULL) == 0, "the lost worker comes back");
            int rc = -1;
            double tb = ms_now();
            while (rc != 0 && ms_now() - tb < 40) { /* within its back-off (at most 30 s) */
                memset(o2, 0, sizeof o2);
                rc = ex.compute(ex.ctx, 2, 2, z, 2, both, o2);
                if (rc) ms_t_sleep_ms(100);
            }
            T_CHECK(rc == 0 && !memcmp(o1, o2, sizeof o1), "it is used again after %.1f s, same bits (%s)",
                    ms_now() - tb, rc ? ms_err_msg() : "ok");
            ms_remote_free(r);
        }
        for (int i = 0; i < 2; i++) stop_worker(&w[i]);
        ms_k3_cfg_free(&cfg);
    }

    /* A worker that comes back is used again (library level: ms_remote with one worker). */
    {
        ms_k3_cfg cfg;
        char cp[1200], fp[17];
        snprintf(cp, sizeof cp, "%s/config.json", dir);
        T_CHECK(ms_k3_cfg_load(cp, &cfg) == 0 && ms_ident_model(dir, fp) == 0, "config and fingerprint");
        worker w = {0};
        T_CHECK(start_worker(&w, sock, 50, "*:*", NULL) == 0, "worker for the revival test");
        ms_remote_worker rw = {w.ep, NULL};
        ms_log_set_level(0); /* the worker going down and up is expected here */
        ms_xfmt xf;
        T_CHECK(ms_t_k3_xfmt(&cfg, &xf) == 0, "expert format of the config");
        ms_remote_opts ro = {1, &rw, NULL, fp, cfg.n_layers, cfg.n_experts, &xf, 3.0};
        ms_remote *r = ms_remote_new(&ro, cfg.first_dense);
        T_CHECK(r != NULL, "ms_remote_new: %s", ms_err_msg());
        if (r) {
            ms_experts ex = ms_remote_iface(r);
            float z[2 * 32], o1[2 * 2 * 32], o2[2 * 2 * 32];
            int32_t ids[4] = {1, 6, 0, 3};
            for (int i = 0; i < 64; i++) z[i] = (float)((i * 37) % 11) / 7.0f - 0.5f;
            T_CHECK(cfg.latent == 32 && ex.compute(ex.ctx, 2, 2, z, 2, ids, o1) == 0, "compute with the worker up");
            stop_worker(&w);
            double t0 = (double)time(NULL);
            int rc = ex.compute(ex.ctx, 2, 2, z, 2, ids, o2);
            T_CHECK(rc != 0 && ms_err_code() == 7, "worker gone: the call fails with class 7 (%s)", ms_err_msg());
            T_CHECK((double)time(NULL) - t0 < 30, "without hanging");
            T_CHECK(start_worker(&w, sock, 50, "*:*", NULL) == 0, "the worker restarts on the same endpoint");
            memset(o2, 0, sizeof o2);
            rc = ex.compute(ex.ctx, 2, 2, z, 2, ids, o2);
            T_CHECK(rc == 0 && !memcmp(o1, o2, sizeof o1), "the restarted worker is used again, same bits (%s)",
                    rc ? ms_err_msg() : "ok");
            ms_remote_free(r);
        }
        stop_worker(&w);
        ms_k3_cfg_free(&cfg);
    }

    /* A malformed --workers endpoint is a usage error at once, not a wait for an answer. */
    {
        char *err = NULL;
        snprintf(cmd, sizeof cmd, "%s run --model %s --ids 1 --workers ipc:///tmp/x.sock,bogus://x --quiet 2>&1",
                 bin, dir);
        double t0 = ms_now();
        int st = ms_t_run(cmd, &err);
        T_CHECK(st == 2 && err && strstr(err, "bogus://x") && strstr(err, "tcp://HOST:PORT"),
                "--workers bogus://x: exit 2 quoting it (%d): %s", st, err ? err : "");
        T_CHECK(ms_now() - t0 < 3, "and at once (%.1f s)", ms_now() - t0);
        free(err);
        snprintf(cmd, sizeof cmd, "%s run --model %s --ids 1 --workers tcp://127.0.0.1 --insecure --quiet 2>&1", bin,
                 dir);
        st = ms_t_run(cmd, &err);
        T_CHECK(st == 2 && err && strstr(err, "HOST:PORT"), "a tcp endpoint without a port: exit 2 (%d): %s", st,
                err ? err : "");
        free(err);
    }

    /* CURVE over tcp: the coordinator reads its key with the workers' reader (a readable secret
     * is warned about), and a worker that does not answer is reported with the likely cause. */
    {
        char wpub[41], wsec[41], cpub[41], csec[41], opub[41], osec[41];
        if (zmq_curve_keypair(wpub, wsec) == 0 && zmq_curve_keypair(cpub, csec) == 0 &&
            zmq_curve_keypair(opub, osec) == 0) {
            char wkey[1200], allow[1200], ckey[1200], log[1200], cluster[1200], extra[8192], *err = NULL;
            snprintf(wkey, sizeof wkey, "%s/w.key", tmp);
            snprintf(allow, sizeof allow, "%s/allow.txt", tmp);
            snprintf(ckey, sizeof ckey, "%s/c.key", tmp);
            snprintf(log, sizeof log, "%s/curve-worker.log", tmp);
            snprintf(cluster, sizeof cluster, "%s/cluster.json", tmp);
            write_key(wkey, wsec, 0600);
            write_key(allow, cpub, 0644);
            write_key(ckey, csec, 0644); /* readable by others: warned about */
            worker w = {0};
            T_CHECK(start_curve_worker(&w, wkey, allow, log) == 0, "CURVE worker on tcp");
            FILE *f = fopen(cluster, "w");
            if (f) {
                fprintf(f, "{\"workers\": [{\"endpoint\": \"%s\", \"public_key\": \"%s\"}]}\n", w.ep, wpub);
                fclose(f);
            }
            snprintf(b, sizeof b, "%s/curve.bin", tmp);
            snprintf(extra, sizeof extra, "--cluster %s --curve-secret %s 2>%s/curve.err", cluster, ckey, tmp);
            int st = run_to(extra, b, NULL);
            snprintf(a, sizeof a, "%s/inproc.bin", tmp);
            snprintf(cmd, sizeof cmd, "%s/curve.err", tmp);
            err = ms_t_read_file(cmd, NULL);
            T_CHECK(st == 0 && ms_t_same_file(a, b), "CURVE over tcp: logits bit-identical (%d)", st);
            T_CHECK(err && strstr(err, "readable by other users") && strstr(err, ckey),
                    "the coordinator warns about its readable secret key: %s", err ? err : "");
            free(err);
            /* A worker public key that is not the worker's: the handshake fails; named as a cause. */
            f = fopen(cluster, "w");
            if (f) {
                fprintf(f, "{\"workers\": [{\"endpoint\": \"%s\", \"public_key\": \"%s\"}]}\n", w.ep, opub);
                fclose(f);
            }
            chmod(ckey, 0600);
            snprintf(cmd, sizeof cmd,
                     "%s run --model %s --ids 1 --cluster %s --curve-secret %s --worker-timeout 2 --quiet 2>&1", bin,
                     dir, cluster, ckey);
            st = ms_t_run(cmd, &err);
            T_CHECK(st == 7 && err && strstr(err, w.ep) && strstr(err, "public") && strstr(err, "likely causes") &&
                        !strstr(err, "readable"),
                    "a wrong worker public key: exit 7 with the likely causes (%d): %s", st, err ? err : "");
            free(err);
            stop_worker(&w);
        } else {
            ms_t_skip("libzmq without CURVE");
        }
    }

    /* Non-finite expert outputs stop the run (issue 12, defect 1): a worker that sends NaN is
     * named by the coordinator (class 7), whatever its own checks. */
    {
        ms_k3_cfg cfg;
        char cp[1200], fp[17];
        snprintf(cp, sizeof cp, "%s/config.json", dir);
        T_CHECK(ms_k3_cfg_load(cp, &cfg) == 0 && ms_ident_model(dir, fp) == 0, "config and fingerprint");
        worker w = {0};
        T_CHECK(start_worker(&w, sock, 51, "*:*", "MS_WORKER_FAULT_NAN=1") == 0, "NaN-sending worker");
        ms_remote_worker rw = {w.ep, NULL};
        ms_xfmt xf;
        T_CHECK(ms_t_k3_xfmt(&cfg, &xf) == 0, "expert format of the config");
        ms_remote_opts ro = {1, &rw, NULL, fp, cfg.n_layers, cfg.n_experts, &xf, 5.0};
        ms_remote *r = ms_remote_new(&ro, cfg.first_dense);
        T_CHECK(r != NULL, "ms_remote_new: %s", ms_err_msg());
        if (r) {
            ms_experts ex = ms_remote_iface(r);
            float z[2 * 32], o[2 * 2 * 32];
            int32_t ids[4] = {1, 6, 0, 3};
            for (int i = 0; i < 64; i++) z[i] = (float)((i * 37) % 11) / 7.0f - 0.5f;
            int rc = cfg.latent == 32 ? ex.compute(ex.ctx, 2, 2, z, 2, ids, o) : 0;
            const char *m = ms_err_msg();
            T_CHECK(rc != 0 && ms_err_code() == MS_EXIT_WORKER && strstr(m, w.ep) && strstr(m, "layer 2") &&
                        strstr(m, "NaN"),
                    "a NaN reply stops the call naming worker and layer, class 7 (%d): %s", rc, m);
            ms_remote_free(r);
        }
        stop_worker(&w);
        ms_k3_cfg_free(&cfg);

        /* A checkpoint whose layer-1 experts overflow (w2 scales 2^127): in process the run
         * stops naming layer and expert (exit 1); a worker refuses to send them (exit 7). */
        char nd[1200], *err = NULL;
        snprintf(nd, sizeof nd, "%s/nan-model", tmp);
        snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s %s", nd, dir, nd);
        T_CHECK(ms_t_run(cmd, NULL) == 0, "copy the model");
        ms_st *st = ms_st_open_dir(nd);
        int patched = 0;
        for (int e = 0; st && e < cfg.n_experts; e++) {
            char name[256];
            snprintf(name, sizeof name, "language_model.model.layers.1.block_sparse_moe.experts.%d.w2.weight_scale", e);
            const ms_st_tensor *t = ms_st_find(st, name);
            int fd = t ? open(ms_st_file_path(st, t->file), O_WRONLY) : -1;
            uint8_t *b = t ? malloc(t->nbytes) : NULL;
            if (b) memset(b, 0xfe, t->nbytes);
            if (fd >= 0 && b && pwrite(fd, b, t->nbytes, (off_t)t->offset) == (ssize_t)t->nbytes) patched++;
            free(b);
            if (fd >= 0) close(fd);
        }
        ms_st_close(st);
        T_CHECK(patched == cfg.n_experts && patched > 0, "patched %d experts", patched);
        snprintf(cmd, sizeof cmd, "%s run --model %s --ids 5,9,13 -n 2 --quiet 2>&1 >/dev/null", bin, nd);
        int rs = ms_t_run(cmd, &err);
        T_CHECK(rs == 1 && err && strstr(err, "layer 1 expert") && !strstr(err, "Assert"),
                "in-process: non-finite expert output stops the run naming the layer (%d): %s", rs, err ? err : "");
        free(err);
        err = NULL;
        char wd[1300];
        snprintf(wd, sizeof wd, "%s", dir);
        snprintf(dir, sizeof dir, "%.1000s", nd); /* the worker serves the patched model */
        T_CHECK(start_worker(&w, sock, 52, "*:*", NULL) == 0, "worker on the patched model");
        snprintf(dir, sizeof dir, "%.1000s", wd);
        snprintf(cmd, sizeof cmd, "timeout 60 %s run --model %s --ids 5,9,13 -n 2 --workers %s --quiet 2>&1 >/dev/null",
                 bin, nd, w.ep);
        rs = ms_t_run(cmd, &err);
        T_CHECK(rs == 7 && err && strstr(err, w.ep) && strstr(err, "layer 1 expert"),
                "worker: refuses to send non-finite outputs; the run stops naming it (%d): %s", rs, err ? err : "");
        free(err);
        stop_worker(&w);
    }

    /* Plain tcp needs --insecure or keys. */
    snprintf(cmd, sizeof cmd, "%s run --model %s --ids 1 --workers tcp://127.0.0.1:1 --quiet 2>/dev/null", bin, dir);
    T_CHECK(ms_t_run(cmd, NULL) == 2, "plain tcp without --insecure is refused (exit 2)");

    json_decref(ref);
    return ms_t_done();
}
