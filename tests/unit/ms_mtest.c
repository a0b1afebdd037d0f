/* ms_mtest: a model's logits over a prompt, its least budget from the planner's refusal, a fixture checkpoint against its reference. */
#include <math.h>
#include <jansson.h>
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

static int32_t *ids_of(json_t *a, size_t *n)
{
    *n = json_array_size(a);
    int32_t *v = malloc(sizeof(int32_t) * (*n ? *n : 1));
    for (size_t i = 0; i < *n; i++) v[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return v;
}

static int argmax(const float *x, int64_t n)
{
    int b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = (int)i;
    return b;
}

void ms_t_check_reference(const char *dir, const char *name, const char *family, const ms_run_opts *o, const char *how)
{
    char path[4200];
    json_error_t je;
    snprintf(path, sizeof path, "%s/ref_greedy.json", dir);
    json_t *rg = json_load_file(path, 0, &je);
    snprintf(path, sizeof path, "%s/ref_logits.json", dir);
    json_t *rl = json_load_file(path, 0, &je);
    T_CHECK(rg && rl, "%s: reference files", name);
    ms_model *m = rg && rl ? ms_families_open(dir, o) : NULL;
    T_CHECK(m && !strcmp(ms_model_get_info(m)->family, family), "%s opens as %s (%s): %s", name, family, how,
            ms_err_msg());
    if (m) {
        int64_t V = ms_model_get_info(m)->vocab;
        size_t np, ng;
        int32_t *prompt = ids_of(json_object_get(rg, "prompt_ids"), &np);
        int32_t *gen = ids_of(json_object_get(rg, "generated_ids"), &ng);
        float *lg = malloc(sizeof(float) * (size_t)V);
        ms_seq *s = ms_seq_new(m);
        int ok = ms_model_forward(m, s, prompt, (int64_t)np, 0, lg) == 0;
        double e0 = ok ? ms_t_rel_err_bits(lg, json_object_get(rl, "logits_bits"), V) : 1;
        T_CHECK(ok && e0 <= 1e-4, "%s (%s): prompt logits within 1e-4 of the reference (rel err %.3g)", name, how, e0);
        double worst = 0;
        json_t *steps = json_object_get(rg, "step_logits_bits");
        for (size_t t = 0; t < ng && ok; t++) {
            worst = fmax(worst, ms_t_rel_err_bits(lg, json_array_get(steps, t), V));
            int32_t next = argmax(lg, V);
            ok = next == gen[t];
            if (ok && t + 1 < ng) ok = ms_model_forward(m, s, &next, 1, 0, lg) == 0;
        }
        T_CHECK(ok && ng == 16, "%s (%s): 16 greedy tokens equal the reference's", name, how);
        T_CHECK(worst <= 1e-4, "%s (%s): every step's logits within 1e-4 (worst %.3g)", name, how, worst);
        printf("%s (%s): prompt rel err %.3g, steps worst %.3g, greedy %s\n", name, how, e0, worst, ok ? "exact" : "MISMATCH");
        ms_seq_free(s);
        free(lg);
        free(prompt);
        free(gen);
    }
    ms_model_free(m);
    json_decref(rg);
    json_decref(rl);
}
