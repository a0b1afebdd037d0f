/* test_ptrunk: `moestream pack-trunk` and streaming from its pack: the same logits bit for bit; foreign and corrupt packs refused by name. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ms_err.h"
#include "ms_kern.h"
#include "ms_model.h"
#include "ms_st.h"
#include "ms_synth.h"
#include "ms_test.h"
#include "ms_tpack.h"

#define NT 60

typedef struct {
    float *logits;        /* [NT][V] or NULL when open or forward failed */
    ms_model_stats st;
    ms_plan plan;
    int code;             /* ms_err_code() on failure */
    char err[1024];
} result;

static result run(const char *dir, const char *pack, uint64_t budget, int64_t V)
{
    result r;
    memset(&r, 0, sizeof r);
    ms_run_opts o = {.n_threads = 2, .ram_budget = budget, .max_positions = 64, .prompt_tokens = NT,
                     .baseline = 1, .max_chunk = 48, .trunk_pack = pack};
    ms_model *m = ms_k3_model_open(dir, &o);
    if (!m) {
        r.code = ms_err_code();
        snprintf(r.err, sizeof r.err, "%s", ms_err_msg());
        return r;
    }
    int32_t ids[NT];
    for (int i = 0; i < NT; i++) ids[i] = (int32_t)((i * 53 + 7) % V);
    float *all = malloc(sizeof(float) * NT * (size_t)V);
    ms_seq *s = ms_seq_new(m);
    int rc = 0;
    /* a prefill chunk of 48 rows (BF16 panels on every path, from packed blocks too, decoded in
     * groups of 16 rows), one of 8 (tiles on AVX-512), then one token a pass (the T = 1 kernel) */
    for (int t = 0; t < NT && rc == 0;) {
        int n = t == 0 ? 48 : t < NT - 4 ? 8 : 1;
        rc = ms_model_forward(m, s, ids + t, n, 1, all + (size_t)t * (size_t)V);
        t += n;
    }
    ms_model_get_stats(m, &r.st);
    if (ms_model_plan(m)) r.plan = *ms_model_plan(m);
    if (rc) {
        r.code = ms_err_code();
        snprintf(r.err, sizeof r.err, "%s", ms_err_msg());
        free(all);
        all = NULL;
    }
    ms_seq_free(s);
    ms_model_free(m);
    r.logits = all;
    return r;
}

/* Trunk matrices the plan pins at a budget (plan only, nothing run). */
static int plan_pins(const char *dir, const char *pack, uint64_t budget)
{
    ms_run_opts o = {.n_threads = 2, .ram_budget = budget, .max_positions = 64, .prompt_tokens = NT, .baseline = 1,
                     .max_chunk = 48, .trunk_pack = pack, .plan_only = 1};
    ms_model *m = ms_k3_model_open(dir, &o);
    int n = m && ms_model_plan(m) ? ms_model_plan(m)->n_pinned : -1;
    ms_model_free(m);
    return n;
}

/* The smallest budget the planner accepts with these options, from its refusal of 1 byte. */
static uint64_t min_budget(const char *dir, const char *pack)
{
    ms_run_opts o = {.n_threads = 2, .ram_budget = 1, .max_positions = 64, .prompt_tokens = NT, .baseline = 1,
                     .max_chunk = 48, .trunk_pack = pack};
    ms_model *m = ms_k3_model_open(dir, &o);
    ms_model_free(m);
    const char *p = strrchr(ms_err_msg(), '(');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

static int pack_cli(const char *model, const char *out)
{
    char *err = NULL;
    int rc = ms_t_runf(NULL, &err, "%s pack-trunk --model %s --out %s --quiet", ms_t_bin("moestream"), model, out);
    T_CHECK(rc == 0, "pack-trunk %s exits 0 (%d): %s", model, rc, err ? err : "");
    free(err);
    return rc;
}

/* Same logits with and without the pack, unlimited and at the smallest budget (streaming). */
static void check_same(const char *what, const char *dir, const char *pack, int64_t V)
{
    size_t bytes = sizeof(float) * NT * (size_t)V;
    result ref = run(dir, "none", 16ull << 30, V);
    T_CHECK(ref.logits != NULL, "%s: runs without the pack: %s", what, ref.err);
    result big = run(dir, pack, 16ull << 30, V);
    T_CHECK(big.logits && ref.logits && !memcmp(big.logits, ref.logits, bytes),
            "%s: unlimited budget, with the pack: logits bit-identical", what);
    uint64_t mb_none = min_budget(dir, "none"), mb = min_budget(dir, pack);
    T_CHECK(mb > 0 && mb_none > 0, "%s: minimum budgets named (%llu with the pack, %llu without)", what,
            (unsigned long long)mb, (unsigned long long)mb_none);
    result sn = run(dir, "none", mb_none, V);
    result sp = run(dir, pack, mb, V);
    T_CHECK(sp.logits && ref.logits && !memcmp(sp.logits, ref.logits, bytes),
            "%s: smallest budget, streaming from the pack: logits bit-identical (%s)", what, sp.err);
    T_CHECK(sn.logits && ref.logits && !memcmp(sn.logits, ref.logits, bytes),
            "%s: smallest budget without the pack: logits bit-identical", what);
    T_CHECK(sp.plan.streaming && sp.plan.n_pinned < sp.plan.in.n_trunk, "%s: the smallest budget streams (%d of %d pinned)",
            what, sp.plan.n_pinned, sp.plan.in.n_trunk);
    T_CHECK(sp.st.trunk_pack_read > 0 && sp.st.trunk_pack_read < sp.st.trunk_pack_decoded,
            "%s: streamed matrices came from the pack, compressed (%llu bytes read for %llu)", what,
            (unsigned long long)sp.st.trunk_pack_read, (unsigned long long)sp.st.trunk_pack_decoded);
    T_CHECK(sn.st.trunk_pack_read == 0, "%s: 'none' reads no pack", what);
    /* Pinned matrices stay packed when the kernel decodes: the plan holds fewer bytes for the
     * whole trunk, and a budget between the two pins more matrices with the pack. */
    int kernel = !getenv("MS_TPACK_DECODE");
    result nb = run(dir, "none", 16ull << 30, V);
    T_CHECK(nb.logits && big.plan.n_pinned == big.plan.in.n_trunk && nb.plan.n_pinned == nb.plan.in.n_trunk,
            "%s: an unlimited budget pins every trunk matrix (%d, %d of %d)", what, big.plan.n_pinned, nb.plan.n_pinned,
            nb.plan.in.n_trunk);
    T_CHECK(big.plan.pinned_bytes == nb.plan.pinned_bytes,
            "%s: where the raw trunk fits, it is pinned raw with a pack too (%llu, %llu bytes)", what,
            (unsigned long long)big.plan.pinned_bytes, (unsigned long long)nb.plan.pinned_bytes);
    if (kernel && nb.plan.pinned_bytes >= (8u << 20)) {
        /* budgets from the smallest up by eighths of the raw trunk: the pack never pins fewer
         * matrices, somewhere more; where it pins more the logits are still the same. (Only
         * where the trunk is MBs: below that the plan's chunk and ring steps outweigh it.) */
        int more = 0, fewer = 0, same = 1;
        for (int k = 0; k <= 8; k++) {
            uint64_t B = (mb > mb_none ? mb : mb_none) + nb.plan.pinned_bytes / 8 * (uint64_t)k;
            int a = plan_pins(dir, pack, B), b = plan_pins(dir, "none", B);
            fewer += a < b;
            if (a > b && !more++) {
                result ra = run(dir, pack, B, V);
                same = ra.logits && !memcmp(ra.logits, ref.logits, bytes);
                free(ra.logits);
            }
        }
        T_CHECK(fewer == 0 && more > 0 && same,
                "%s: the packed pinned trunk pins more at %d of 9 budgets, fewer at %d; same logits there: %d", what, more,
                fewer, same);
    } else if (kernel) {
        printf("%s: the budget sweep needs a trunk of MBs (this one: %llu bytes): not run here\n", what,
               (unsigned long long)nb.plan.pinned_bytes);
    }
    free(nb.logits);
    printf("%s: smallest budget %llu (%llu without the pack); pack bytes read %llu for %llu BF16 bytes\n", what,
           (unsigned long long)mb, (unsigned long long)mb_none, (unsigned long long)sp.st.trunk_pack_read,
           (unsigned long long)sp.st.trunk_pack_decoded);
    free(ref.logits);
    free(big.logits);
    free(sn.logits);
    free(sp.logits);
}

static void test_synth(void)
{
    const char *d = ms_t_tmpdir("ptrunk");
    char dir[4200], beside[4300], other[4200];
    snprintf(dir, sizeof dir, "%s/tiny", d);
    snprintf(beside, sizeof beside, "%s/tiny.trunk-pack", d);
    snprintf(other, sizeof other, "%s/tiny-seed10", d);
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    T_CHECK(ms_synth_write(dir, &sh, 9) == 0 && ms_synth_write(other, &sh, 10) == 0, "synth: %s", ms_err_msg());
    if (pack_cli(dir, beside) != 0) return;
    ms_tpack *p = ms_tpack_open(ms_t_path(beside, MS_TPACK_FILE));
    T_CHECK(p && ms_tpack_count(p) > 0, "the pack holds trunk matrices (%d)", p ? ms_tpack_count(p) : 0);
    ms_tpack_close(p);
    check_same("synth tiny (pack given)", dir, beside, sh.vocab);
    check_same("synth tiny (pack found beside the model)", dir, NULL, sh.vocab);
    setenv("MS_TPACK_DECODE", "reader", 1); /* blocks decoded by the reader threads instead of the kernel */
    check_same("synth tiny (decoded by the reader threads)", dir, beside, sh.vocab);
    unsetenv("MS_TPACK_DECODE");

    /* another model's pack: same config and names, other weights */
    result f = run(other, beside, 16ull << 30, sh.vocab);
    T_CHECK(!f.logits && f.code == MS_EXIT_MODEL && strstr(f.err, "trunk.pack") && strstr(f.err, "not for the model"),
            "a pack of another model is refused (class 3) naming it: %s", f.err);
    free(f.logits);
    char *err = NULL;
    int rc = ms_t_runf(NULL, &err, "%s run --model %s --trunk-pack %s --ids 1,2,3 -n 2 --quiet", ms_t_bin("moestream"),
                       other, beside);
    T_CHECK(rc == 3 && err && strstr(err, "trunk.pack"), "moestream run with a foreign pack exits 3 naming it: %d %s", rc,
            err ? err : "");
    free(err);

    /* a corrupt block in every packed tensor: the first streamed one fails, named */
    char bad[4300];
    snprintf(bad, sizeof bad, "%s/bad.trunk-pack", d);
    if (pack_cli(dir, bad) != 0) return;
    const char *bp = ms_t_path(bad, MS_TPACK_FILE);
    char bpath[4400];
    snprintf(bpath, sizeof bpath, "%s", bp);
    p = ms_tpack_open(bpath);
    for (int i = 0; p && i < ms_tpack_count(p); i++) {
        const ms_tpack_tensor *t = ms_tpack_at(p, i);
        uint32_t b = t->n_blocks / 2;
        ms_t_flip_byte(bpath, t->data_off + ms_tpack_block_start(t, b) + 50, 0x20);
    }
    ms_tpack_close(p);
    /* pinned and kept packed (the smallest budget streams, so the pins stay packed; the first
     * matrix of a pass is pinned): the load verifies every pinned block (the kernels then skip
     * the checksums) and refuses the model naming the corrupt one, before any pass */
    uint64_t mbb = min_budget(dir, bad);
    int np = plan_pins(dir, bad, mbb);
    T_CHECK(np > 0, "the smallest budget pins %d matrices (packed)", np);
    {
        ms_run_opts o = {.n_threads = 2, .ram_budget = mbb, .max_positions = 64, .prompt_tokens = NT, .baseline = 1,
                         .max_chunk = 48, .trunk_pack = bad};
        ms_model *m = ms_k3_model_open(dir, &o);
        T_CHECK(!m && ms_err_code() == MS_EXIT_MODEL && strstr(ms_err_msg(), "pinned tensor"),
                "a corrupt pinned block is refused when the model opens: %s", m ? "(opened)" : ms_err_msg());
        ms_model_free(m);
    }
    result cp = run(dir, bad, mbb, sh.vocab);
    T_CHECK(!cp.logits && cp.code == MS_EXIT_MODEL && strstr(cp.err, bpath) && strstr(cp.err, "block") &&
                strstr(cp.err, "checksum") && strstr(cp.err, "pinned tensor"),
            "pinned packed: a corrupt block is refused (class 3) naming pack, tensor and block: %s", cp.err);
    free(cp.logits);
    /* an unlimited budget holds the raw trunk: the pins are raw, the pack is not read */
    result cu = run(dir, bad, 16ull << 30, sh.vocab);
    T_CHECK(cu.logits && cu.st.trunk_pack_read == 0, "unlimited budget: raw pins, the (corrupt) pack unused: %s", cu.err);
    free(cu.logits);
    for (int mode = 0; mode < 2; mode++) {
        if (mode) setenv("MS_TPACK_DECODE", "reader", 1);
        uint64_t mb = min_budget(dir, bad);
        result c = run(dir, bad, mb, sh.vocab);
        T_CHECK(!c.logits && c.code == MS_EXIT_MODEL && strstr(c.err, bpath) && strstr(c.err, "block") &&
                    strstr(c.err, "checksum") && strstr(c.err, "tensor"),
                "%s: a corrupt block is refused (class 3) naming pack, tensor and block: %s",
                mode ? "reader threads" : "kernel", c.err);
        free(c.logits);
        unsetenv("MS_TPACK_DECODE");
    }
}

/* Flip the sign of every BF16 value in the middle half of tensor name in dir (in place). */
static void negate_middle(const char *dir, const char *name)
{
    ms_st *st = ms_st_open_dir(dir);
    const ms_st_tensor *t = st ? ms_st_find(st, name) : NULL;
    T_CHECK(t && t->dtype == MS_DT_BF16 && t->nbytes > 4 * 4096, "%s has %s in BF16, larger than 16 KiB", dir, name);
    if (t) {
        int fd = open(ms_st_file_path(st, t->file), O_RDWR);
        uint64_t a = t->offset + t->nbytes / 4 / 2 * 2, b = t->offset + t->nbytes * 3 / 4 / 2 * 2;
        size_t n = (size_t)(b - a);
        uint8_t *buf = malloc(n);
        T_CHECK(fd >= 0 && pread(fd, buf, n, (off_t)a) == (ssize_t)n, "read the middle of %s", name);
        for (size_t i = 1; i < n; i += 2) buf[i] ^= 0x80; /* little-endian: the sign is in the high byte */
        T_CHECK(pwrite(fd, buf, n, (off_t)a) == (ssize_t)n, "write the middle of %s", name);
        free(buf);
        close(fd);
    }
    ms_st_close(st);
}

/* Issue 16, defect 2: a pack beside a checkpoint whose weights differ beyond what the old
 * fingerprint sampled (the first 4 KiB of each tensor) must be refused at every budget, and a
 * checkpoint changed in place after packing too (the identity sidecar is invalidated). */
static void test_edited(void)
{
    const char *d = ms_t_tmpdir("ptrunk-edit");
    char dir[4200], copy[4200], pack[4300], cpack[4300];
    snprintf(dir, sizeof dir, "%s/small", d);
    snprintf(copy, sizeof copy, "%s/edited", d);
    snprintf(pack, sizeof pack, "%s/small.trunk-pack", d);
    snprintf(cpack, sizeof cpack, "%s/edited.trunk-pack", d);
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    T_CHECK(ms_synth_write(dir, &sh, 9) == 0, "synth: %s", ms_err_msg());
    if (pack_cli(dir, pack) != 0) return;
    T_CHECK(ms_t_runf(NULL, NULL, "cp -a %s %s && cp -a %s %s", dir, copy, pack, cpack) == 0, "copy model and pack");
    negate_middle(copy, "language_model.lm_head.weight");
    uint64_t budgets[2] = {min_budget(copy, NULL), 16ull << 30};
    for (int i = 0; i < 2; i++) {
        result r = run(copy, NULL, budgets[i], sh.vocab);
        T_CHECK(!r.logits && r.code == MS_EXIT_MODEL && strstr(r.err, "not for the model") && strstr(r.err, cpack),
                "budget %llu: the original's pack beside an edited copy (middle of lm_head negated) is refused: %s",
                (unsigned long long)budgets[i], r.err);
        free(r.logits);
    }
    result ok = run(dir, NULL, 16ull << 30, sh.vocab);
    T_CHECK(ok.logits != NULL, "the original still runs with its pack (its identity now cached): %s", ok.err);
    free(ok.logits);
    negate_middle(dir, "language_model.lm_head.weight"); /* the checkpoint updated in place next to its old pack */
    result up = run(dir, NULL, 16ull << 30, sh.vocab);
    T_CHECK(!up.logits && up.code == MS_EXIT_MODEL && strstr(up.err, "not for the model"),
            "a checkpoint changed in place after packing: its pack is refused (the cached hashes are stale): %s", up.err);
    free(up.logits);
    negate_middle(dir, "language_model.lm_head.weight"); /* back as it was */
    result back = run(dir, NULL, 16ull << 30, sh.vocab);
    T_CHECK(back.logits != NULL, "changed back: the pack is accepted again: %s", back.err);
    free(back.logits);
    char *err = NULL;
    int rc = ms_t_runf(NULL, &err, "%s run --model %s --ids 1,2,3 -n 2 --quiet", ms_t_bin("moestream"), copy);
    T_CHECK(rc == 3 && err && strstr(err, "not for the model"), "moestream run on the edited copy exits 3: %d %s", rc,
            err ? err : "");
    free(err);
}

static void test_released_like(void)
{
    const char *p = ms_t_shared("fixtures/kimi-k3/checkpoints/tiny-s1234");
    if (!p) return;
    char dir[4200], out[4300];
    snprintf(dir, sizeof dir, "%s", p);
    snprintf(out, sizeof out, "%s/tiny-s1234.trunk-pack", ms_t_tmpdir("ptrunk-s1234"));
    if (pack_cli(dir, out) != 0) return;
    check_same("tiny-s1234", dir, out, 256);
}

int main(void)
{
    ms_kern_init();
    test_synth();
    test_edited();
    test_released_like();
    return ms_t_done();
}
