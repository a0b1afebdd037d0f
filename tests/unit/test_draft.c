/* test_draft: the draft sources (n-gram lookup, id list), the --draft-file reader and the
 * --speculate / --draft-file options of run and jobs. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ms_cli.h"
#include "ms_draft.h"
#include "ms_err.h"
#include "ms_synth.h"
#include "ms_test.h"

static int propose(ms_drafter *d, const int32_t *t, size_t n, size_t np, int max, int32_t *out)
{
    for (int i = 0; i < 16; i++) out[i] = -7;
    return ms_drafter_propose(d, t, n, np, out, max);
}

static void check_ngram(void)
{
    ms_drafter *d = ms_draft_ngram_new(1, 4);
    int32_t out[16];
    /* suffix "2 3" occurs at 1 and 5: the most recent earlier one (5) wins, its followers are 9 */
    const int32_t a[] = {1, 2, 3, 4, 7, 2, 3, 9, 8, 2, 3};
    int n = propose(d, a, 11, 2, 8, out);
    T_CHECK(n == 4 && out[0] == 9 && out[1] == 8 && out[2] == 2 && out[3] == 3 && out[4] == -7,
            "n-gram: most recent earlier match of the longest suffix, followed to the end: %d [%d %d %d %d]", n,
            out[0], out[1], out[2], out[3]);
    /* the longest suffix first: "5 6 7" matches at 0 (followed by 1) although "7" alone last
     * occurred at 6 (followed by 2) */
    const int32_t b[] = {5, 6, 7, 1, 0, 6, 7, 2, 5, 6, 7};
    n = propose(d, b, 11, 11, 3, out);
    T_CHECK(n == 3 && out[0] == 1 && out[1] == 0 && out[2] == 6, "n-gram: longest suffix first: %d [%d %d %d]", n,
            out[0], out[1], out[2]);
    n = propose(d, b, 11, 11, 2, out);
    T_CHECK(n == 2 && out[2] == -7, "n-gram: at most max tokens (%d)", n);
    const int32_t c[] = {1, 2, 3, 4};
    T_CHECK(propose(d, c, 4, 4, 8, out) == 0, "n-gram: no earlier occurrence, no draft");
    T_CHECK(propose(d, c, 1, 1, 8, out) == 0 && propose(d, c, 4, 4, 0, out) == 0, "n-gram: nothing to look in");
    ms_drafter_free(d);
    d = ms_draft_ngram_new(2, 4);
    const int32_t e[] = {3, 1, 5, 1};
    T_CHECK(propose(d, e, 4, 4, 8, out) == 0, "n-gram with min 2: a one-token match is not enough");
    ms_drafter_free(d);
    ms_drafter_free(NULL);
}

static void check_list(void)
{
    const int32_t ids[] = {10, 11, 12, 13, 14};
    ms_drafter *d = ms_draft_list_new(ids, 5);
    int32_t t[8] = {1, 2, 3, 10, 11}, out[16];
    /* prompt of 3, 2 generated: drafts stand for generated tokens 2, 3, 4 */
    int n = propose(d, t, 5, 3, 8, out);
    T_CHECK(n == 3 && out[0] == 12 && out[1] == 13 && out[2] == 14, "list: draft i is id i (%d: %d %d %d)", n, out[0],
            out[1], out[2]);
    T_CHECK(propose(d, t, 5, 3, 2, out) == 2 && out[2] == -7, "list: at most max");
    T_CHECK(propose(d, t, 8, 3, 8, out) == 0, "list: nothing past its end");
    ms_drafter_free(d);
}

static const char *tmp;

static int read_text(const char *text, int32_t **ids, size_t *n)
{
    const char *p = ms_t_path(tmp, "d.txt");
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
    return ms_draft_read_file(p, ids, n);
}

static void check_file(void)
{
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = read_text(" 5,6 ,\n 7,\t8\r\n", &ids, &n);
    T_CHECK(rc == 0 && n == 4 && ids[0] == 5 && ids[3] == 8, "draft file: ids with whitespace: %s",
            rc ? ms_err_msg() : "");
    free(ids);
    /* the syntax of --ids (issue 16: "1 2" was refused although documented as that syntax) */
    static const char *good[] = {"1 2", "1\n2\n3\n", "4, 5 6,7", "9"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int32_t *want = NULL;
        size_t nw = 0;
        ids = NULL;
        rc = read_text(good[i], &ids, &n);
        int ref = ms_cli_parse_ids(good[i], &want, &nw);
        T_CHECK(rc == 0 && ref == 0 && n == nw && !memcmp(ids, want, sizeof *ids * n),
                "draft file '%s': the ids --ids gives (%zu): %s", good[i], n, rc ? ms_err_msg() : "");
        free(ids);
        free(want);
    }
    /* the size limit of --ids-file (256 MiB; it was 64 MiB) */
    const char *big = ms_t_path(tmp, "big.txt");
    FILE *f = fopen(big, "w");
    static char spaces[1 << 20];
    memset(spaces, ' ', sizeof spaces);
    for (int i = 0; i < 65; i++) fwrite(spaces, 1, sizeof spaces, f);
    fputs("7\n", f);
    fclose(f);
    ids = NULL;
    rc = ms_draft_read_file(big, &ids, &n);
    T_CHECK(rc == 0 && n == 1 && ids[0] == 7, "a draft file of 65 MiB is read: %s", rc ? ms_err_msg() : "");
    free(ids);
    unlink(big);
    static const char *bad[] = {"", "  \n", "1,,2", ",1", "1,", "1,x", "-3", "99999999999", "1;2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ids = NULL;
        rc = read_text(bad[i], &ids, &n);
        T_CHECK(rc != 0 && ms_err_code() == MS_EXIT_INPUT && strstr(ms_err_msg(), "d.txt"),
                "draft file '%s' refused (class 5) naming the file: %s", bad[i], rc ? ms_err_msg() : "accepted");
        free(ids);
    }
    rc = ms_draft_read_file(ms_t_path(tmp, "absent"), &ids, &n);
    T_CHECK(rc != 0 && ms_err_code() == MS_EXIT_IO && strstr(ms_err_msg(), "absent"),
            "a missing draft file is an I/O error naming it: %s", ms_err_msg());
}

/* run's options and stats. */
static void check_cli(void)
{
    char m[1200];
    snprintf(m, sizeof m, "%s/m", tmp);
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    T_CHECK(ms_synth_write(m, &sh, 3) == 0, "synth: %s", ms_err_msg());
    const char *bin = ms_t_bin("moestream");
    char *out = NULL, *err = NULL;
    int st = ms_t_runf(NULL, &err, "%s run --model %s --ids 1,2 -n 2 --speculate maybe", bin, m);
    T_CHECK(st == 2 && err && strstr(err, "--speculate"), "--speculate maybe: usage error (%d): %s", st, err);
    free(err);
    st = ms_t_runf(NULL, &err, "%s run --model %s --ids 1,2 -n 2 --speculate 65", bin, m);
    T_CHECK(st == 2, "--speculate 65: usage error (%d)", st);
    free(err);
    const char *df = ms_t_path(tmp, "bad.txt");
    FILE *f = fopen(df, "w");
    fputs("4,,5", f);
    fclose(f);
    st = ms_t_runf(NULL, &err, "%s run --model %s --ids 1,2 -n 2 --draft-file %s", bin, m, df);
    T_CHECK(st == 5 && err && strstr(err, "bad.txt") && strstr(err, "item 2"),
            "a bad --draft-file: exit 5 naming the file and item: %d %s", st, err);
    free(err);
    f = fopen(df, "w");
    fprintf(f, "4, %d", sh.vocab);
    fclose(f);
    st = ms_t_runf(NULL, &err, "%s run --model %s --ids 1,2 -n 2 --draft-file %s", bin, m, df);
    T_CHECK(st == 5 && err && strstr(err, "vocabulary"), "a draft id outside the vocabulary: exit 5: %d %s", st, err);
    free(err);
    /* off, then its generated ids as drafts: identical ids, every draft accepted */
    st = ms_t_runf(&out, NULL, "%s run --model %s --ids 1,2,3 -n 12 --speculate off --json --quiet", bin, m);
    json_t *j0 = out ? json_loads(out, 0, NULL) : NULL;
    free(out);
    T_CHECK(st == 0 && j0, "run --speculate off --json");
    if (!j0) return;
    json_t *g0 = json_object_get(j0, "generated_ids");
    f = fopen(df, "w");
    for (size_t i = 0; i < json_array_size(g0); i++)
        fprintf(f, "%s%lld", i ? "," : "", (long long)json_integer_value(json_array_get(g0, i)));
    fclose(f);
    st = ms_t_runf(&out, NULL, "%s run --model %s --ids 1,2,3 -n 12 --speculate 4 --draft-file %s --json --quiet", bin,
                   m, df);
    json_t *j1 = out ? json_loads(out, 0, NULL) : NULL;
    free(out);
    json_t *s1 = j1 ? json_object_get(j1, "stats") : NULL;
    long long dr = (long long)json_integer_value(json_object_get(s1, "draft_tokens"));
    long long ac = (long long)json_integer_value(json_object_get(s1, "accepted_draft_tokens"));
    double tpp = json_real_value(json_object_get(s1, "tokens_per_decode_pass"));
    T_CHECK(st == 0 && j1 && json_equal(json_object_get(j1, "generated_ids"), g0) && dr == 8 && ac == 8 &&
                tpp > 3.6 && json_integer_value(json_object_get(s1, "speculate_window")) == 4,
            "--speculate 4 with the ids as drafts: same ids, 8 of 8 drafts accepted (%lld), %.2f tokens per pass", ac, tpp);
    json_decref(j0);
    json_decref(j1);
}

int main(void)
{
    ms_log_set_level(0);
    tmp = ms_t_tmpdir("draft");
    check_ngram();
    check_list();
    check_file();
    check_cli();
    return ms_t_done();
}
