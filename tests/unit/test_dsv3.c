/* test_dsv3: the DeepSeek-V3 / Kimi K2 family against the official reference (fixtures: a small FP8 checkpoint and a released-like one in four shards), pinned and streamed; its synth presets. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_dsv3_model.h"
#include "ms_err.h"
#include "ms_families.h"
#include "ms_mtest.h"
#include "ms_st.h"
#include "ms_test.h"

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

/* The reference's prompt logits and 16 greedy tokens with the logits that chose them, at the
 * options o (no budget: everything pinned; the least budget: the trunk streamed). */
static void check_reference(const char *dir, const char *name, const ms_run_opts *o, const char *how)
{
    char path[4200];
    json_error_t je;
    snprintf(path, sizeof path, "%s/ref_greedy.json", dir);
    json_t *rg = json_load_file(path, 0, &je);
    snprintf(path, sizeof path, "%s/ref_logits.json", dir);
    json_t *rl = json_load_file(path, 0, &je);
    T_CHECK(rg && rl, "%s: reference files", name);
    ms_model *m = rg && rl ? ms_families_open(dir, o) : NULL;
    T_CHECK(m && !strcmp(ms_model_get_info(m)->family, "deepseek-v3"), "%s opens as deepseek-v3 (%s): %s", name, how,
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

/* synth's presets: the tiny one runs; the released layouts (sparse) open and generate at 8 GiB. */
static void check_synth(void)
{
    char cmd[9000], bin[1024];
    snprintf(bin, sizeof bin, "%s", ms_t_bin("moestream"));
    snprintf(cmd, sizeof cmd, "TMPDIR=%s %s demo --family deepseek-v3 -n 4 --quiet > /dev/null 2>&1",
             ms_t_tmpdir("dsv3-demo"), bin);
    T_CHECK(ms_t_run(cmd, NULL) == 0, "demo --family deepseek-v3 writes its tiny checkpoint and runs it");
    static const char *const big[2] = {"deepseek-v3", "kimi-k2"};
    for (int i = 0; i < 2; i++) {
        char d[1024];
        snprintf(d, sizeof d, "%s/m", ms_t_tmpdir(big[i]));
        snprintf(cmd, sizeof cmd, "%s synth --preset %s --sparse --out %s 2>/dev/null && %s run --model %s --ids 1,2,3 -n 2 "
                 "--ram-budget 8G --json > /dev/null", bin, big[i], d, bin, d);
        T_CHECK(ms_t_run(cmd, NULL) == 0, "synth --preset %s --sparse runs at --ram-budget 8G", big[i]);
        /* a chat: Kimi K2's tokenizer renders Kimi's format; DeepSeek's template is refused, saying so */
        char body[1200], *out = NULL, *err = NULL;
        snprintf(body, sizeof body, "%s/chat.json", ms_t_tmpdir("dsv3-chat"));
        FILE *f = fopen(body, "w");
        if (f) fputs("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", f), fclose(f);
        int st = ms_t_runf(&out, &err, "%s tokenize --model %s --chat %s --json", bin, d, body);
        if (i == 1)
            T_CHECK(st == 0 && out && strstr(out, "<|im_user|>user<|im_middle|>Hi<|im_end|><|im_assistant|>assistant<|im_middle|>"),
                    "kimi-k2: a chat renders in Kimi's format (%s)", out ? out : "");
        else
            T_CHECK(st == 5 && err && strstr(err, "DeepSeek-V3 chat template is not rendered"),
                    "deepseek-v3: a chat is refused, naming what is missing (status %d: %s)", st, err ? err : "");
        free(out);
        free(err);
    }
}

int main(void)
{
    ms_log_set_level(0);
    check_synth();
    const char *names[2] = {"tiny-s3", "tiny-released-like"};
    for (int i = 0; i < 2; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "fixtures/deepseek-v3/checkpoints/%s", names[i]);
        const char *p = ms_t_shared(rel);
        if (!p) continue;
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", p);
        ms_run_opts o = {.n_threads = 2};
        check_reference(dir, names[i], &o, "pinned");
        ms_run_opts ob = {.n_threads = 2, .max_positions = 128};
        ob.ram_budget = ms_t_least_budget(dir, ob, names[i]);
        ob.baseline = 1;
        check_reference(dir, names[i], &ob, "least budget, trunk streamed");
    }
    return ms_t_done();
}
