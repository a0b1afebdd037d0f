/* test_seqfile: saved sequence states: continuing a state read back from its file gives the
 * logits of prefilling the whole text at once, bit for bit (both families, every split point,
 * mid-chunk, another speculation window, with a speculative rollback before the save); a corrupt,
 * cut, foreign or other-version file, a NaN in a state and a huge file are refused, naming the
 * file; writes never follow a planted symlink; the state cache refuses a FIFO among its files
 * (without waiting on it) and a directory others can write to. */
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ms_clock.h"
#include "ms_err.h"
#include "ms_families.h"
#include "ms_pcache.h"
#include "ms_proc.h"
#include "ms_gptoss_model.h"
#include "ms_sbuf.h"
#include "ms_seqfile.h"
#include "ms_synth.h"
#include "ms_test.h"

#define N 44 /* tokens: crosses the tiny gpt-oss's 32-token window */

static ms_model *open_model_at(const char *dir, int spec, int64_t positions)
{
    ms_run_opts o = {.n_threads = 2, .ram_budget = 4ull << 30, .baseline = 1, .max_positions = positions, .prompt_tokens = 16,
                     .all_logits = 1, .spec_window = spec};
    ms_model *m = ms_families_open(dir, &o);
    T_CHECK(m != NULL, "%s opens (spec %d): %s", dir, spec, m ? "" : ms_err_msg());
    return m;
}
static ms_model *open_model(const char *dir, int spec) { return open_model_at(dir, spec, 64); }

/* What the planner reserves for a kept state of n positions (jobs' shared beginnings): the
 * family's state of n positions without speculation's room, + MS_SEQ_SAVE_SLACK. */
static uint64_t planned_for(const char *dir, int64_t n)
{
    ms_model *m = open_model_at(dir, 0, n);
    uint64_t b = m ? ms_model_get_info(m)->state_bytes + MS_SEQ_SAVE_SLACK : 0;
    ms_model_free(m);
    return b;
}

/* s, holding ids[0..n), written to path as family's with the tests' fingerprint. */
static int save_state(const char *path, const char *family, int32_t *ids, size_t n, const ms_seq *s)
{
    ms_seqfile_info info = {0};
    snprintf(info.family, sizeof info.family, "%s", family);
    snprintf(info.fingerprint, sizeof info.fingerprint, "0123456789abcdef");
    info.tokens = ids;
    info.n_tokens = n;
    return ms_seqfile_write(path, &info, s);
}

/* ids[0..n) in chunks of `chunk` rows, every row's logits into out (may be NULL). */
static int feed(ms_model *m, ms_seq *s, const int32_t *ids, int64_t n, int64_t chunk, float *out)
{
    int64_t V = ms_model_get_info(m)->vocab;
    float *tmp = malloc(sizeof(float) * (size_t)(chunk * V));
    int rc = 0;
    for (int64_t i = 0; i < n && rc == 0; i += chunk) {
        int64_t t = n - i < chunk ? n - i : chunk;
        rc = ms_model_forward(m, s, ids + i, t, 1, tmp);
        if (out && rc == 0) memcpy(out + i * V, tmp, sizeof(float) * (size_t)(t * V));
    }
    free(tmp);
    return rc;
}

static void check_family(const char *dir, const char *family)
{
    ms_model *m = open_model(dir, 0), *m2 = open_model(dir, 4); /* m2: another ring size (gpt-oss) */
    if (!m || !m2) return;
    int64_t V = ms_model_get_info(m)->vocab;
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 37 + 11) % (V - 20));
    float *ref = malloc(sizeof(float) * (size_t)(N * V)), *got = malloc(sizeof(float) * (size_t)(N * V));
    ms_seq *whole = ms_seq_new(m);
    T_CHECK(feed(m, whole, ids, N, N, ref) == 0, "%s: the whole text at once", family);
    ms_seq_free(whole);
    const char *path = ms_t_path(ms_t_tmpdir("seqfile"), "state.bin");
    const int splits[] = {1, 5, 16, 31, 33, 43};
    for (size_t k = 0; k < sizeof splits / sizeof splits[0]; k++) {
        int at = splits[k];
        ms_seq *a = ms_seq_new(m);
        int ok = feed(m, a, ids, at, 7, NULL) == 0; /* mid-chunk: 7-row passes */
        ms_sbuf saved = {0};
        ms_seq_save(a, &saved);
        uint64_t room = planned_for(dir, at);
        T_CHECK(saved.n <= room && room <= saved.n + MS_SEQ_SAVE_SLACK + saved.n / 8, "%s: a state of %d tokens saves to %zu bytes, %llu planned",
                family, at, saved.n, (unsigned long long)room);
        ms_sbuf_free(&saved);
        ok = ok && save_state(path, family, ids, (size_t)at, a) == 0;
        ms_seq_free(a);
        for (int which = 0; which < 2 && ok; which++) {
            ms_model *into = which ? m2 : m;
            ms_seqfile_info back;
            ms_seq *b = NULL;
            int rd = ms_seqfile_read(path, into, family, "0123456789abcdef", &back, &b);
            int same = rd == 0 && back.n_tokens == (size_t)at && !memcmp(back.tokens, ids, sizeof(int32_t) * (size_t)at) &&
                       feed(into, b, ids + at, N - at, 5, got + at * V) == 0 &&
                       !memcmp(got + at * V, ref + at * V, sizeof(float) * (size_t)((N - at) * V));
            T_CHECK(same, "%s: saved after %d tokens, read back%s: the rest's logits bit-identical to the whole text (%s)",
                    family, at, which ? " into a model with another speculation window" : "", rd ? ms_err_msg() : "");
            ms_seq_free(b);
            ms_seqfile_info_clear(&back);
        }
    }
    /* after a speculative pass that kept 2 of its 4 rows: the state saved is the settled one */
    {
        ms_seq *a = ms_seq_new(m2);
        float *l4 = malloc(sizeof(float) * 4 * (size_t)V);
        int ok = feed(m2, a, ids, 20, 20, NULL) == 0;
        int32_t guess[4] = {ids[20], ids[21], 3, 4};
        ms_batch_item it = {a, guess, 4, 1, l4, 1};
        ok = ok && ms_model_forward_batch(m2, &it, 1) == 0;
        if (ok) ms_seq_keep(a, 2);
        ok = ok && save_state(path, family, ids, 22, a) == 0;
        ms_seq_free(a);
        ms_seqfile_info back;
        ms_seq *b = NULL;
        ok = ok && ms_seqfile_read(path, m, family, "0123456789abcdef", &back, &b) == 0 &&
             feed(m, b, ids + 22, N - 22, 9, got + 22 * V) == 0 &&
             !memcmp(got + 22 * V, ref + 22 * V, sizeof(float) * (size_t)((N - 22) * V));
        T_CHECK(ok, "%s: saved right after a speculative rollback: the continuation is bit-identical", family);
        ms_seq_free(b);
        ms_seqfile_info_clear(&back);
        free(l4);
    }
    /* refusals: each names the file and says why */
    size_t len = 0;
    char *good = ms_t_read_file(path, &len);
    ms_seqfile_info back;
    ms_seq *b = NULL;
    int rd = ms_seqfile_read(path, m, family, "fedcba9876543210", &back, &b);
    T_CHECK(rd == -1 && !b && ms_err_code() == MS_EXIT_INPUT && strstr(ms_err_msg(), "another model") &&
                strstr(ms_err_msg(), path),
            "%s: another model's state is refused: %s", family, ms_err_msg());
    rd = ms_seqfile_read(path, m, "other-family", "0123456789abcdef", &back, &b);
    T_CHECK(rd == -1 && !b && strstr(ms_err_msg(), "other-family"), "%s: another family's state is refused: %s", family,
            ms_err_msg());
    char *spoilt = malloc(len);
    memcpy(spoilt, good, len);
    spoilt[len / 2] ^= 0x10;
    ms_t_write_file_n(path, spoilt, len);
    rd = ms_seqfile_read(path, m, family, "0123456789abcdef", &back, &b);
    T_CHECK(rd == -1 && !b && strstr(ms_err_msg(), "checksum"), "%s: a flipped byte is refused: %s", family, ms_err_msg());
    ms_t_write_file_n(path, good, len - 100);
    rd = ms_seqfile_read(path, m, family, "0123456789abcdef", &back, &b);
    T_CHECK(rd == -1 && !b && strstr(ms_err_msg(), "cut short"), "%s: a cut file is refused: %s", family, ms_err_msg());
    memcpy(spoilt, good, len);
    spoilt[8] = 7; /* version 7, checksum made to match: refused for its version */
    uint64_t sum = XXH3_64bits(spoilt, len - 8);
    memcpy(spoilt + len - 8, &sum, 8);
    ms_t_write_file_n(path, spoilt, len);
    rd = ms_seqfile_read(path, m, family, "0123456789abcdef", &back, &b);
    T_CHECK(rd == -1 && !b && strstr(ms_err_msg(), "version 7"), "%s: another version is refused: %s", family, ms_err_msg());
    ms_t_write_file_n(path, "not a state", 11);
    rd = ms_seqfile_read(path, m, family, "0123456789abcdef", &back, &b);
    T_CHECK(rd == -1 && !b && strstr(ms_err_msg(), "not a moestream state file"), "%s: another file is refused: %s",
            family, ms_err_msg());
    /* a state holding a NaN (checksum made to match): the file is blamed, not the weights */
    {
        uint32_t hl;
        memcpy(&hl, good + 12, 4);
        memcpy(spoilt, good, len);
        size_t at = 16 + hl + (len - 24 - hl) / 2;
        at -= (at - (16 + hl)) % 4;
        int nan = 0;
        for (int k = 0; k < 64 && !nan; k++, at += 4) { /* a float of the body, not a count */
            float f;
            memcpy(&f, good + at, 4);
            if (f != 0.0f && f > -1e6f && f < 1e6f) nan = 1;
        }
        at -= 4;
        float qn = __builtin_nanf("");
        memcpy(spoilt + at, &qn, 4);
        uint64_t sum2 = XXH3_64bits(spoilt, len - 8);
        memcpy(spoilt + len - 8, &sum2, 8);
        ms_t_write_file_n(path, spoilt, len);
        rd = ms_seqfile_read(path, m, family, "0123456789abcdef", &back, &b);
        T_CHECK(nan && rd == -1 && !b && ms_err_code() == MS_EXIT_INPUT && strstr(ms_err_msg(), "non-finite") &&
                    strstr(ms_err_msg(), path),
                "%s: a state holding a NaN is refused, naming the file: %s", family, ms_err_msg());
    }
    /* a huge file with a good header that claims more state than the model has: refused from
     * its header, without reading or allocating its body (a sparse 40 GB file) */
    {
        char hp[1300];
        snprintf(hp, sizeof hp, "%s.huge", path);
        uint64_t big = 40ull << 30;
        char hdr[512];
        int hn = 0;
        for (int pass = 0; pass < 2; pass++) /* state_bytes = what follows the header: its length settles */
            hn = snprintf(hdr, sizeof hdr,
                          "{\"family\":\"%s\",\"fingerprint\":\"0123456789abcdef\",\"tokens\":[1,2,3],\"pending\":[],"
                          "\"state_bytes\":%llu}",
                          family, (unsigned long long)(big - 24 - (uint64_t)hn));
        FILE *f = fopen(hp, "wb");
        uint32_t ver = MS_SEQFILE_VERSION, hl = (uint32_t)hn;
        fwrite("MOESEQST", 1, 8, f);
        fwrite(&ver, 4, 1, f);
        fwrite(&hl, 4, 1, f);
        fwrite(hdr, 1, (size_t)hn, f);
        int ok = ftruncate(fileno(f), (off_t)big) == 0;
        fclose(f);
        uint64_t rss0 = ms_proc_peak_rss();
        double t0 = ms_now();
        rd = ok ? ms_seqfile_read(hp, m, family, "0123456789abcdef", &back, &b) : 0;
        double dt = ms_now() - t0;
        uint64_t grew = ms_proc_peak_rss() - rss0;
        T_CHECK(ok && rd == -1 && !b && ms_err_code() == MS_EXIT_INPUT && strstr(ms_err_msg(), "claims") &&
                    strstr(ms_err_msg(), hp) && grew < (64u << 20),
                "%s: a 40 GB file whose header claims 3 positions in 40 GB is refused from its header (%.2f s, peak "
                "RSS +%llu KiB): %s",
                family, dt, (unsigned long long)(grew >> 10), ms_err_msg());
        unlink(hp);
    }
    /* the writer never follows a symlink planted beside the file (the old names were
     * FILE.tmp-<pid>): the symlinks' targets keep their bytes */
    {
        char victim[1300], lnk[1300];
        snprintf(victim, sizeof victim, "%s.victim", path);
        ms_t_write_file(victim, "precious");
        snprintf(lnk, sizeof lnk, "%s.tmp-%d", path, (int)getpid());
        unlink(lnk);
        int ok = symlink(victim, lnk) == 0;
        ms_seq *a = ms_seq_new(m);
        ok = ok && feed(m, a, ids, 5, 5, NULL) == 0;
        ok = ok && save_state(path, family, ids, 5, a) == 0;
        char *v = ms_t_read_file(victim, NULL);
        struct stat sb;
        T_CHECK(ok && v && !strcmp(v, "precious") && lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) &&
                    (sb.st_mode & 0777) == 0600,
                "%s: a symlink at the old temporary name is not followed; the state file is private (0600)", family);
        free(v);
        ms_seq_free(a);
        unlink(lnk);
        unlink(victim);
    }
    free(spoilt);
    free(good);
    free(ref);
    free(got);
    ms_model_free(m);
    ms_model_free(m2);
}

/* The state cache's directory: a FIFO named *.state in it is passed over at once (it once hung
 * jobs and serve at start, deaf to SIGTERM); a directory others can write to is refused. */
static void check_cache_dir(const char *model)
{
    ms_model *m = open_model(model, 0);
    if (!m) return;
    char d[1300], fifo[1400];
    snprintf(d, sizeof d, "%s", ms_t_tmpdir("seqfile-cache"));
    T_CHECK(chmod(d, 0700) == 0, "chmod 0700 %s", d);
    snprintf(fifo, sizeof fifo, "%s/planted.state", d);
    unlink(fifo);
    T_CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    alarm(30); /* a hang fails the test by SIGALRM instead of by ctest's timeout */
    ms_pcache *c = ms_pcache_new(m, 1 << 20, d, 1 << 30, "kimi-k3", "0123456789abcdef");
    alarm(0);
    T_CHECK(c != NULL, "a FIFO named *.state in the state cache is passed over: %s", c ? "" : ms_err_msg());
    ms_pcache_free(c);
    T_CHECK(chmod(d, 0777) == 0, "chmod 0777 %s", d);
    c = ms_pcache_new(m, 1 << 20, d, 1 << 30, "kimi-k3", "0123456789abcdef");
    T_CHECK(!c && strstr(ms_err_msg(), d) && strstr(ms_err_msg(), "others can write"),
            "a state cache others can write to is refused: %s", c ? "(opened)" : ms_err_msg());
    ms_pcache_free(c);
    chmod(d, 0700);
    unlink(fifo);
    ms_model_free(m);
}

int main(void)
{
    ms_log_set_level(0);
    char k3[1200], go[1200];
    snprintf(k3, sizeof k3, "%s/k3", ms_t_tmpdir("seqfile-models"));
    snprintf(go, sizeof go, "%s/go", ms_t_tmpdir("seqfile-models"));
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    T_CHECK(ms_synth_write(k3, &sh, 3) == 0, "synth tiny: %s", ms_err_msg());
    T_CHECK(ms_gptoss_synth(go, "gpt-oss-tiny", 0, 0, 7) == 0, "synth gpt-oss-tiny: %s", ms_err_msg());
    check_family(k3, "kimi-k3");
    check_family(go, "gpt-oss");
    check_cache_dir(k3);
    return ms_t_done();
}
