/* test_seqfile: saved sequence states: continuing a state read back from its file gives the
 * logits of prefilling the whole text at once, bit for bit (both families, every split point,
 * mid-chunk, another speculation window, with a speculative rollback before the save); a corrupt,
 * cut, foreign or other-version file is refused, naming the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ms_err.h"
#include "ms_families.h"
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
        ms_seqfile_info info = {0};
        snprintf(info.family, sizeof info.family, "%s", family);
        snprintf(info.fingerprint, sizeof info.fingerprint, "0123456789abcdef");
        info.tokens = ids;
        info.n_tokens = (size_t)at;
        ok = ok && ms_seqfile_write(path, &info, a) == 0;
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
        ms_seqfile_info info = {0};
        snprintf(info.family, sizeof info.family, "%s", family);
        snprintf(info.fingerprint, sizeof info.fingerprint, "0123456789abcdef");
        info.tokens = ids;
        info.n_tokens = 22;
        ok = ok && ms_seqfile_write(path, &info, a) == 0;
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
    T_CHECK(rd == -1 && !b && strstr(ms_err_msg(), "checksum"), "%s: a cut file is refused: %s", family, ms_err_msg());
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
    free(spoilt);
    free(good);
    free(ref);
    free(got);
    ms_model_free(m);
    ms_model_free(m2);
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
    return ms_t_done();
}
