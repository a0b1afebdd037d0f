/* ms_mtest: a model's logits over a prompt, and its least budget from the planner's refusal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_families.h"
#include "ms_mtest.h"
#include "ms_test.h"

float *ms_t_logits(const char *dir, const ms_run_opts *o, const int32_t *ids, int64_t n, int split, ms_model_stats *st)
{
    ms_model *m = ms_families_open(dir, o);
    if (!m) {
        fprintf(stderr, "open %s: %s\n", dir, ms_err_msg());
        return NULL;
    }
    int64_t V = ms_model_get_info(m)->vocab;
    float *all = malloc(sizeof(float) * (size_t)(n * V)); /* [n][V] */
    ms_seq *s = ms_seq_new(m);
    int rc = 0;
    for (int64_t t = 0; t < n && rc == 0; t += split > 0 ? split : n) {
        int64_t c = split > 0 && n - t > split ? split : n - t;
        rc = ms_model_forward(m, s, ids + t, c, 1, all + t * V);
    }
    if (rc) fprintf(stderr, "a pass over %s: %s\n", dir, ms_err_msg());
    if (st) ms_model_get_stats(m, st);
    ms_seq_free(s);
    ms_model_free(m);
    if (rc) free(all);
    return rc ? NULL : all;
}

uint64_t ms_t_least_budget(const char *dir, ms_run_opts o, const char *what)
{
    o.ram_budget = 1;
    o.baseline = 1;
    ms_model_free(ms_families_open(dir, &o));
    const char *p = strrchr(ms_err_msg(), '(');
    T_CHECK(ms_err_code() == MS_EXIT_BUDGET && p, "%s: a 1-byte budget is refused naming the least: %s", what,
            ms_err_msg());
    return p ? strtoull(p + 1, NULL, 10) : 0;
}
