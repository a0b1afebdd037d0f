/* test_shard: moestream shard: packs and trunk checked byte for byte against the source, the command, all-or-nothing output. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ms_k3_cfg.h"
#include "ms_cli.h"
#include "ms_err.h"
#include "ms_expert.h"
#include "ms_ident.h"
#include "ms_io.h"
#include "ms_ops.h"
#include "ms_pack.h"
#include "ms_shard.h"
#include "ms_st.h"
#include "ms_synth.h"
#include "ms_test.h"
#include "ms_wire.h"
#include "ms_xstore.h"

static char root[4096];

static int has(const char *s, const char *n) { return s && strstr(s, n) != NULL; }

/* root/rel in one of 8 rotating buffers: copy a result that must outlive 8 more calls. */
static const char *rpath(const char *rel) { return ms_t_path(root, rel); }


/* A routed expert's tensor, by the naming of the released checkpoints (spec §4.3); shared
 * experts are named ".shared_experts." and never match. */
static int is_routed(const char *name) { return strstr(name, ".block_sparse_moe.experts.") != NULL; }


/* The source bytes of expert (l, e) in canonical order (malloc'ed), from the mapped checkpoint. */
static uint8_t *src_expert(const ms_st *st, int l, int e, uint64_t len[6], uint64_t *total)
{
    uint64_t t = 0;
    for (int k = 0; k < 6; k++) {
        const ms_st_tensor *x = (const ms_st_tensor *)ms_t_expert_part(st, l, e, k);
        len[k] = x ? x->nbytes : 0;
        t += len[k];
    }
    uint8_t *b = malloc(t ? t : 1);
    uint64_t o = 0;
    for (int k = 0; k < 6; k++) {
        const ms_st_tensor *x = (const ms_st_tensor *)ms_t_expert_part(st, l, e, k);
        if (x) memcpy(b + o, ms_t_st_bytes(st, x), len[k]);
        o += len[k];
    }
    *total = t;
    return b;
}

/* First owner of expert e among N workers: the i with i*Ne/N <= e < (i+1)*Ne/N. */
static int owner_of(int e, int ne, int n)
{
    for (int i = 0; i < n; i++)
        if ((int64_t)e >= (int64_t)i * ne / n && (int64_t)e < (int64_t)(i + 1) * ne / n) return i;
    return -1;
}

/* ---- shard a checkpoint and check every pack and the trunk against the source ---- */

static void check_shard(const char *model, const char *out, int N, int R)
{
    char what[256];
    snprintf(what, sizeof what, "%s N=%d R=%d", model, N, R);
    ms_k3_cfg cfg;
    char cpath[4300];
    snprintf(cpath, sizeof cpath, "%s/config.json", model);
    T_CHECK(ms_k3_cfg_load(cpath, &cfg) == 0, "config: %s", ms_err_msg());
    ms_st *st = ms_st_open_dir(model);
    T_CHECK(st != NULL, "source: %s", ms_err_msg());
    if (!st) return;
    ms_err_clear();
    int rc = ms_pack_shard(model, N, R, out);
    T_CHECK(rc == 0, "%s: shard failed: %s", what, ms_err_msg());
    if (rc != 0) {
        ms_st_close(st);
        ms_k3_cfg_free(&cfg);
        return;
    }
    char fp[17];
    T_CHECK(ms_ident_model(model, fp) == 0, "fingerprint");
    int NL = cfg.n_layers, NE = cfg.n_experts;
    int *count = calloc((size_t)NL * (size_t)NE, sizeof(int));
    int bad_bytes = 0, bad_sum = 0, bad_align = 0, bad_owner = 0, bad_len = 0, n_entries = 0;
    char dir[4200], path[4300];
    for (int w = 0; w < N; w++) {
        snprintf(dir, sizeof dir, "%s/worker-%d", out, w);
        ms_pack p;
        int orc = ms_pack_open(dir, &p);
        T_CHECK(orc == 0, "%s: open pack %d: %s", what, w, ms_err_msg());
        if (orc != 0) continue;
        T_CHECK(p.worker == w && p.workers == N && p.replicas == R, "%s: pack %d says worker %d of %d, R %d", what, w,
                p.worker, p.workers, p.replicas);
        ms_xfmt want;
        char diff[256] = "";
        T_CHECK(ms_t_k3_xfmt(&cfg, &want) == 0, "format of the config: %s", ms_err_msg());
        T_CHECK(p.n_layers == NL && p.n_experts == NE && p.first_moe == cfg.first_dense &&
                    !ms_xfmt_diff(&p.fmt, &want, diff, sizeof diff),
                "%s: pack %d shape and expert format (%s)", what, w, diff);
        T_CHECK(strcmp(p.fingerprint, fp) == 0, "%s: pack %d fingerprint %s, model %s", what, w, p.fingerprint, fp);
        snprintf(path, sizeof path, "%s/config.json", dir);
        T_CHECK(access(path, F_OK) != 0, "%s: pack %d has a config.json: the manifest alone describes it", what, w);
        size_t blen = 0;
        uint8_t *bin = (uint8_t *)ms_t_read_file(p.bin_path, &blen);
        T_CHECK(bin != NULL, "%s: read %s", what, p.bin_path);
        /* Experts this worker must hold: its range and those of the R-1 workers before it. */
        int want_n = 0;
        for (int l = cfg.first_dense; l < NL; l++)
            for (int e = 0; e < NE; e++) want_n += (w - owner_of(e, NE, N) + N) % N < R;
        T_CHECK((int)p.n == want_n, "%s: pack %d holds %zu experts, expected %d", what, w, p.n, want_n);
        for (size_t i = 0; i < p.n && bin; i++) {
            const ms_pack_entry *en = &p.entries[i];
            n_entries++;
            if (en->layer < cfg.first_dense || (w - owner_of(en->expert, NE, N) + N) % N >= R) bad_owner++;
            count[(size_t)en->layer * (size_t)NE + (size_t)en->expert]++;
            if (en->offset % 4096) bad_align++;
            uint64_t len[6], E;
            uint8_t *want = src_expert(st, en->layer, en->expert, len, &E);
            for (int k = 0; k < 6; k++) bad_len += en->len[k] != len[k];
            if (E != p.expert_bytes || en->offset + E > blen || memcmp(bin + en->offset, want, (size_t)E) != 0)
                bad_bytes++;
            if (XXH3_64bits(want, (size_t)E) != en->xxh3) bad_sum++;
            free(want);
        }
        free(bin);
        ms_pack_close(&p);
        T_CHECK(p.entries == NULL && p.bin_path == NULL, "close leaves a zeroed pack");
    }
    int bad_count = 0;
    for (int l = 0; l < NL; l++)
        for (int e = 0; e < NE; e++)
            if (count[(size_t)l * (size_t)NE + (size_t)e] != (l < cfg.first_dense ? 0 : R)) bad_count++;
    T_CHECK(n_entries == (NL - cfg.first_dense) * NE * R, "%s: %d entries in all", what, n_entries);
    T_CHECK(bad_count == 0, "%s: %d experts not on exactly R packs", what, bad_count);
    T_CHECK(bad_owner == 0, "%s: %d experts on a worker that does not own them", what, bad_owner);
    T_CHECK(bad_bytes == 0, "%s: %d pack experts differ from the source tensors", what, bad_bytes);
    T_CHECK(bad_sum == 0, "%s: %d checksums differ from XXH3 of the source bytes", what, bad_sum);
    T_CHECK(bad_align == 0, "%s: %d offsets not 4 KiB aligned", what, bad_align);
    T_CHECK(bad_len == 0, "%s: %d part lengths differ from the tensors", what, bad_len);
    free(count);

    /* The trunk: every non-expert tensor with identical bytes, no routed expert. */
    snprintf(dir, sizeof dir, "%s/trunk", out);
    ms_st *tr = ms_st_open_dir(dir);
    T_CHECK(tr != NULL, "%s: trunk does not open: %s", what, ms_err_msg());
    if (tr) {
        size_t n_src = 0;
        int missing = 0, differ = 0, experts_in = 0;
        for (size_t i = 0; i < ms_st_count(st); i++) {
            const ms_st_tensor *t = ms_st_at(st, i);
            const ms_st_tensor *u = ms_st_find(tr, t->name);
            if (is_routed(t->name)) {
                experts_in += u != NULL;
                continue;
            }
            n_src++;
            if (!u) {
                missing++;
                continue;
            }
            if (u->dtype != t->dtype || u->ndim != t->ndim || memcmp(u->shape, t->shape, sizeof t->shape) != 0 ||
                u->nbytes != t->nbytes || memcmp(ms_t_st_bytes(tr, u), ms_t_st_bytes(st, t), (size_t)t->nbytes) != 0)
                differ++;
        }
        for (size_t i = 0; i < ms_st_count(tr); i++) experts_in += is_routed(ms_st_at(tr, i)->name);
        T_CHECK(missing == 0 && differ == 0, "%s: trunk misses %d and changes %d tensors", what, missing, differ);
        T_CHECK(experts_in == 0, "%s: %d routed expert tensors in the trunk", what, experts_in);
        T_CHECK(ms_st_count(tr) == n_src, "%s: trunk has %zu tensors, source %zu non-expert", what, ms_st_count(tr),
                n_src);
        ms_st_close(tr);
    }
    snprintf(path, sizeof path, "%s/trunk/config.json", out);
    T_CHECK(ms_t_same_file(path, cpath), "%s: trunk config.json differs", what);
    static const char *tok[2] = {"tiktoken.model", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        char sp[4300];
        snprintf(sp, sizeof sp, "%s/%s", model, tok[i]);
        snprintf(path, sizeof path, "%s/trunk/%s", out, tok[i]);
        if (access(sp, F_OK) == 0)
            T_CHECK(ms_t_same_file(path, sp), "%s: trunk %s differs", what, tok[i]);
        else
            T_CHECK(access(path, F_OK) != 0, "%s: trunk has a %s the model lacks", what, tok[i]);
    }
    /* No temporary file is left behind. */
    char cmd[4400], *listing = NULL;
    snprintf(cmd, sizeof cmd, "find '%s' -name '*.tmp'", out);
    T_CHECK(ms_t_run(cmd, &listing) == 0 && listing && listing[0] == 0, "%s: tmp files left: %s", what,
            listing ? listing : "?");
    free(listing);
    ms_st_close(st);
    ms_k3_cfg_free(&cfg);
}

/* ---- the command ---- */

static int cli(int n, const char *const *args)
{
    char *argv[32];
    for (int i = 0; i < n; i++) argv[i] = (char *)args[i];
    argv[n] = NULL;
    ms_err_clear();
    return ms_cli_shard(n, argv);
}

static void test_cli(const char *model)
{
    char out[4200], trunk[4200], nowrite[4200], bad_cfg[4200], nomodel[4200];
    snprintf(out, sizeof out, "%s", rpath("cli"));
    snprintf(trunk, sizeof trunk, "%s", rpath("s21/trunk")); /* a checkpoint without routed experts */
    snprintf(nowrite, sizeof nowrite, "%s", rpath("model/config.json/sub"));
    snprintf(bad_cfg, sizeof bad_cfg, "%s", rpath("badcfg"));
    snprintf(nomodel, sizeof nomodel, "%s", rpath("no-such-model"));
    mkdir(bad_cfg, 0755);
    FILE *f = fopen(rpath("badcfg/config.json"), "w");
    if (f) {
        fputs("{\"hidden_size\": 64}", f);
        fclose(f);
    }
    struct {
        int want;
        int n;
        const char *a[12];
    } cases[] = {
        {2, 1, {"shard"}},
        {2, 5, {"shard", "--model", model, "--out", out}},
        {2, 5, {"shard", "--workers", "2", "--out", out}},
        {2, 5, {"shard", "--model", model, "--workers", "2"}},
        {2, 7, {"shard", "--model", model, "--workers", "0", "--out", out}},
        {2, 7, {"shard", "--model", model, "--workers", "-1", "--out", out}},
        {2, 7, {"shard", "--model", model, "--workers", "two", "--out", out}},
        {2, 7, {"shard", "--model", model, "--workers", "2x", "--out", out}},
        {2, 9, {"shard", "--model", model, "--workers", "2", "--replicas", "0", "--out", out}},
        {2, 9, {"shard", "--model", model, "--workers", "2", "--replicas", "3", "--out", out}},
        {2, 8, {"shard", "--model", model, "--workers", "2", "--bogus", "--out", out}},
        {2, 8, {"shard", "--model", model, "--workers", "2", "--out", out, "extra"}},
        {2, 7, {"shard", "--model", model, "--workers", "9", "--out", out}}, /* 8 experts a layer */
        {0, 2, {"shard", "--help"}},
        {4, 7, {"shard", "--model", nomodel, "--workers", "2", "--out", out}},
        {3, 7, {"shard", "--model", bad_cfg, "--workers", "2", "--out", out}},
        {3, 7, {"shard", "--model", trunk, "--workers", "2", "--out", out}},
        {4, 7, {"shard", "--model", model, "--workers", "2", "--out", nowrite}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = cli(cases[i].n, cases[i].a);
        char line[512] = "";
        for (int k = 1; k < cases[i].n; k++) {
            strncat(line, " ", sizeof line - strlen(line) - 1);
            strncat(line, cases[i].a[k], sizeof line - strlen(line) - 1);
        }
        T_CHECK(rc == cases[i].want, "shard%s: exit %d, expected %d", line, rc, cases[i].want);
    }
    /* The messages name what is wrong. */
    const char *a1[] = {"shard", "--model", trunk, "--workers", "2", "--out", out};
    cli(7, a1);
    T_CHECK(has(ms_err_msg(), "experts.0.w1.weight_packed") && has(ms_err_msg(), "missing"),
            "model without experts: %s", ms_err_msg());
    const char *a2[] = {"shard", "--model", model, "--workers", "2", "--out", nowrite};
    cli(7, a2);
    T_CHECK(has(ms_err_msg(), "config.json/sub"), "unwritable out: %s", ms_err_msg());
    T_CHECK(access(rpath("cli/worker-0"), F_OK) != 0, "a refused command wrote packs");

    /* A good run: exit 0, and its packs open. */
    const char *ok[] = {"shard", "--model", model, "--workers", "2", "--replicas", "2", "--out", out, "--quiet"};
    T_CHECK(cli(10, ok) == 0, "shard --quiet: %s", ms_err_msg());
    ms_pack p;
    T_CHECK(ms_pack_open(rpath("cli/worker-1"), &p) == 0 && p.replicas == 2 && p.workers == 2, "cli pack: %s",
            ms_err_msg());
    ms_pack_close(&p);
    /* Sharding again over the same directory replaces the packs. */
    const char *again[] = {"shard", "--model", model, "--workers", "2", "--out", out, "--quiet"};
    T_CHECK(cli(8, again) == 0, "shard again: %s", ms_err_msg());
    T_CHECK(ms_pack_open(rpath("cli/worker-1"), &p) == 0 && p.replicas == 1, "re-sharded pack: %s", ms_err_msg());
    ms_pack_close(&p);
    /* With fewer workers, the packs of the earlier run's extra workers stop looking valid. */
    const char *three[] = {"shard", "--model", model, "--workers", "3", "--out", out, "--quiet"};
    const char *one[] = {"shard", "--model", model, "--workers", "1", "--out", out, "--quiet"};
    T_CHECK(cli(8, three) == 0 && cli(8, one) == 0, "shard 3 then 1: %s", ms_err_msg());
    T_CHECK(ms_pack_open(rpath("cli/worker-0"), &p) == 0 && p.workers == 1, "pack of 1: %s", ms_err_msg());
    ms_pack_close(&p);
    T_CHECK(ms_pack_open(rpath("cli/worker-1"), &p) == -1 && ms_pack_open(rpath("cli/worker-2"), &p) == -1,
            "stale packs of the 3-worker run still open");
}

/* ---- a failed or refused shard leaves the earlier output as it was, and nothing new ---- */

/* Names in dir that start with prefix, space separated (malloc'ed; "" if none). */
static char *entries_with(const char *dir, const char *prefix)
{
    char cmd[4600], *out = NULL;
    snprintf(cmd, sizeof cmd, "ls -A '%s' 2>/dev/null | grep '^%s' | tr '\\n' ' '", dir, prefix);
    ms_t_run(cmd, &out);
    return out ? out : calloc(1, 1);
}

/* ms_pack_shard under a file size limit (a disk that fills up): writes past limit fail with EFBIG. */
static int shard_with_fsize_limit(const char *model, int n, const char *out, rlim_t limit)
{
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = limit;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    int rc = ms_pack_shard(model, n, 1, out);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    return rc;
}

static void test_failed_shard(const char *model)
{
    char out[4200], fresh[4200], cmd[40000], bad_model[4200], *s = NULL;
    snprintf(out, sizeof out, "%s", rpath("crash"));
    snprintf(fresh, sizeof fresh, "%s", rpath("crash-fresh"));
    T_CHECK(ms_pack_shard(model, 2, 1, out) == 0, "first shard: %s", ms_err_msg());
    size_t l0 = 0, l1 = 0;
    char *m0 = ms_t_read_file(rpath("crash/worker-0/manifest.json"), &l0);

    /* A disk that fills up while the packs are written: exit code for I/O, the earlier packs
     * untouched and still valid, no temporary directory or file left. */
    ms_err_clear();
    T_CHECK(shard_with_fsize_limit(model, 3, out, 40000) == -1 && ms_err_code() == MS_EXIT_IO &&
                has(ms_err_msg(), "File too large"),
            "full disk during the packs: %s", ms_err_msg());
    ms_pack p;
    T_CHECK(ms_pack_open(rpath("crash/worker-0"), &p) == 0 && p.workers == 2, "earlier pack after a failed shard: %s",
            ms_err_msg());
    ms_pack_close(&p);
    char *m1 = ms_t_read_file(rpath("crash/worker-0/manifest.json"), &l1);
    T_CHECK(m0 && m1 && l0 == l1 && memcmp(m0, m1, l0) == 0, "earlier manifest unchanged by a failed shard");
    free(m1);
    T_CHECK(access(rpath("crash/worker-2"), F_OK) != 0, "a failed 3-worker shard left worker-2");
    s = entries_with(out, ".shard");
    T_CHECK(s[0] == 0, "temporary directory left after a full disk: %s", s);
    free(s);
    snprintf(cmd, sizeof cmd, "find '%s' -name '*.tmp'", out);
    T_CHECK(ms_t_run(cmd, &s) == 0 && s && s[0] == 0, "tmp files left: %s", s ? s : "?");
    free(s);

    /* A failure after the packs, in the trunk (the tokenizer file cannot be read). */
    snprintf(bad_model, sizeof bad_model, "%s", rpath("badtok"));
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s' && rm '%s/tiktoken.model' && mkdir '%s/tiktoken.model'",
             bad_model, model, bad_model, bad_model, bad_model);
    T_CHECK(ms_t_run(cmd, NULL) == 0, "model with an unreadable tokenizer");
    ms_err_clear();
    T_CHECK(ms_pack_shard(bad_model, 1, 1, out) == -1 && ms_err_code() == MS_EXIT_IO &&
                has(ms_err_msg(), "tiktoken.model"),
            "unreadable tokenizer during the trunk: %s", ms_err_msg());
    m1 = ms_t_read_file(rpath("crash/worker-0/manifest.json"), &l1);
    T_CHECK(m0 && m1 && l0 == l1 && memcmp(m0, m1, l0) == 0, "earlier manifest unchanged by a late failure");
    free(m1);
    T_CHECK(ms_pack_open(rpath("crash/worker-1"), &p) == 0, "earlier worker-1 after a late failure: %s",
            ms_err_msg());
    ms_pack_close(&p);
    s = entries_with(out, ".shard");
    T_CHECK(s[0] == 0, "temporary directory left after a late failure: %s", s);
    free(s);

    /* Into a directory that did not exist: a failure leaves no directory at all. */
    ms_err_clear();
    T_CHECK(shard_with_fsize_limit(model, 2, fresh, 40000) == -1 && ms_err_code() == MS_EXIT_IO,
            "full disk into a new directory: %s", ms_err_msg());
    T_CHECK(access(fresh, F_OK) != 0, "a failed shard left %s behind", fresh);
    T_CHECK(ms_pack_shard(bad_model, 2, 1, fresh) == -1 && access(fresh, F_OK) != 0,
            "a late failure left %s behind", fresh);

    /* The same command succeeds once the cause is gone, and replaces the earlier pack. */
    T_CHECK(ms_pack_shard(model, 3, 1, out) == 0, "shard after repair: %s", ms_err_msg());
    T_CHECK(ms_pack_open(rpath("crash/worker-2"), &p) == 0 && p.workers == 3, "repaired pack: %s", ms_err_msg());
    ms_pack_close(&p);
    s = entries_with(out, "");
    T_CHECK(!strcmp(s, "trunk worker-0 worker-1 worker-2 "), "after the repair %s holds: %s", out, s);
    free(s);
    free(m0);

    /* Not enough space: refused before anything is created, sizes in readable units. Needs a
     * small filesystem: a tmpfs in a private mount namespace (root only). */
    snprintf(cmd, sizeof cmd,
             "unshare -m sh -c 'mkdir -p %s/small && mount -t tmpfs -o size=64k none %s/small && "
             "%s shard --model %s --workers 2 --out %s/small/out; echo \"exit $?\"; ls -A %s/small' 2>&1",
             root, root, ms_t_bin("moestream"), model, root, root);
    if (geteuid() != 0 || system("unshare -m true 2>/dev/null") != 0) {
        ms_t_skip("not root or no mount namespaces: the full-filesystem refusal of shard is not checked");
        return;
    }
    T_CHECK(ms_t_run(cmd, &s) == 0 && s, "shard on a 64 KiB tmpfs ran");
    T_CHECK(has(s, "exit 4") && has(s, "not enough space") && has(s, "KiB free") && has(s, "KiB\n") &&
                !has(s, "0.00") && !has(s, "exit 4\nout"),
            "64 KiB filesystem: refused with exit 4, sizes in KiB, nothing created: %s", s ? s : "");
    free(s);
}

int main(void)
{
    snprintf(root, sizeof root, "%s", ms_t_tmpdir("shard"));
    static char model[4200];
    snprintf(model, sizeof model, "%s", rpath("model"));
    ms_synth_shape sh;
    T_CHECK(ms_synth_preset("tiny", &sh) == 0, "preset");
    T_CHECK(ms_synth_write(model, &sh, 7) == 0, "synth: %s", ms_err_msg());

    /* The packs and trunk of every layout, from the synthetic checkpoint. */
    static const int nr[][2] = {{1, 1}, {2, 1}, {2, 2}, {3, 1}, {3, 2}, {3, 3}};
    for (size_t i = 0; i < sizeof nr / sizeof nr[0]; i++) {
        char rel[32];
        snprintf(rel, sizeof rel, "s%d%d", nr[i][0], nr[i][1]);
        check_shard(model, rpath(rel), nr[i][0], nr[i][1]);
    }
    /* Bad arguments of the library call. */
    ms_err_clear();
    T_CHECK(ms_pack_shard(model, 2, 3, rpath("x")) == -1 && ms_err_code() == MS_EXIT_USAGE, "R > N accepted");
    T_CHECK(ms_pack_shard(model, 0, 1, rpath("x")) == -1 && ms_err_code() == MS_EXIT_USAGE, "N = 0 accepted");
    T_CHECK(ms_pack_shard(model, 2, 0, rpath("x")) == -1 && ms_err_code() == MS_EXIT_USAGE, "R = 0 accepted");

    test_cli(model);
    test_failed_shard(model);

    /* The shared released-like checkpoints (three shards, nested config; one file, flat config). */
    const char *rel = ms_t_shared("fixtures/kimi-k3/checkpoints/tiny-released-like");
    if (rel) check_shard(rel, rpath("rel22"), 2, 2);
    const char *flat = ms_t_shared("fixtures/kimi-k3/checkpoints/tiny-s1234");
    if (flat) check_shard(flat, rpath("flat31"), 3, 1);
    return ms_t_done();
}
