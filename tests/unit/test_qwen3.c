/* test_qwen3: the Qwen3-MoE family against the official reference (fixtures: BF16, and FP8 in three shards), its FP8 trunk streamed and pinned, its synth presets. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_families.h"
#include "ms_qwen3_model.h"
#include "ms_st.h"
#include "ms_mtest.h"
#include "ms_test.h"

/* Logits of a fixed prompt with everything pinned and at the least budget (the FP8 trunk
 * streamed in 128-row chunks, experts read on demand): the same bits. */
static void check_budgets(const char *dir, const char *name)
{
    enum { N = 40 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 37 + 5) % 500);
    ms_run_opts o = {.n_threads = 2, .max_positions = N};
    float *base = ms_t_logits(dir, &o, ids, N, 0, NULL);
    ms_run_opts ob = o;
    ob.ram_budget = ms_t_least_budget(dir, ob, name);
    ob.baseline = 1;
    ms_model *m = ms_families_open(dir, &ob);
    T_CHECK(m && ms_model_plan(m) && ms_model_plan(m)->streaming, "%s: the least budget streams the trunk: %s", name,
            m ? "" : ms_err_msg());
    ms_model_free(m);
    float *lb = ms_t_logits(dir, &ob, ids, N, 7, NULL);
    T_CHECK(base && lb && !memcmp(base, lb, sizeof(float) * (size_t)N * 512),
            "%s: the least budget (trunk streamed, chunks of 7 rows) == everything pinned, bit for bit", name);
    free(base);
    free(lb);
}

/* tie_word_embeddings: a tied config's head is the embedding. Two copies of a tiny checkpoint:
 * one with lm_head's bytes overwritten by the embedding's (untied), one with the config tied
 * (lm_head then unread): the same logits, bit for bit; and not those of the original. */
static void check_tied(const char *dir)
{
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s/head-is-embed", ms_t_tmpdir("qwen3-tied-a"));
    snprintf(b, sizeof b, "%s/tied", ms_t_tmpdir("qwen3-tied-b"));
    int rc = ms_t_runf(NULL, NULL, "rm -rf %s %s && cp -r %s %s && cp -r %s %s", a, b, dir, a, dir, b);
    ms_st *st = rc == 0 ? ms_st_open_dir(a) : NULL;
    const ms_st_tensor *e = st ? ms_st_find(st, "model.embed_tokens.weight") : NULL;
    const ms_st_tensor *h = st ? ms_st_find(st, "lm_head.weight") : NULL;
    int copied = 0;
    if (e && h && e->nbytes == h->nbytes) {
        char *buf = malloc(e->nbytes);
        FILE *fe = fopen(ms_st_file_path(st, e->file), "rb"), *fh = fopen(ms_st_file_path(st, h->file), "r+b");
        copied = fe && fh && fseek(fe, (long)e->offset, SEEK_SET) == 0 && fread(buf, 1, e->nbytes, fe) == e->nbytes &&
                 fseek(fh, (long)h->offset, SEEK_SET) == 0 && fwrite(buf, 1, e->nbytes, fh) == e->nbytes;
        if (fe) fclose(fe);
        if (fh && fclose(fh) != 0) copied = 0;
        free(buf);
    }
    ms_st_close(st);
    char cfg[1300];
    snprintf(cfg, sizeof cfg, "%s/config.json", b);
    json_error_t je;
    json_t *c = json_load_file(cfg, 0, &je);
    json_object_set_new(c, "tie_word_embeddings", json_true());
    int wrote = c && json_dump_file(c, cfg, JSON_INDENT(2)) == 0;
    json_decref(c);
    T_CHECK(copied && wrote, "tied: the two copies written");
    enum { N = 12 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 41 + 7) % 480);
    ms_run_opts o = {.n_threads = 2, .max_positions = N};
    float *la = ms_t_logits(a, &o, ids, N, 0, NULL), *lb = ms_t_logits(b, &o, ids, N, 0, NULL),
          *l0 = ms_t_logits(dir, &o, ids, N, 0, NULL);
    size_t bytes = sizeof(float) * N * 512;
    T_CHECK(la && lb && l0 && !memcmp(la, lb, bytes) && memcmp(la, l0, bytes),
            "tie_word_embeddings true: the embedding is the head (= a head holding its bytes), not lm_head.weight");
    free(la);
    free(lb);
    free(l0);
}

/* synth's presets: the tiny ones (BF16 and FP8) run, with their tokenizer and chat format, in
 * jobs; a released width's layout (sparse) opens and generates at an 8 GiB budget. */
static void check_synth(void)
{
    char dir[1024], cmd[9000], bin[1024];
    snprintf(bin, sizeof bin, "%s", ms_t_bin("moestream"));
    snprintf(dir, sizeof dir, "%s/tiny-fp8", ms_t_tmpdir("qwen3-synth"));
    T_CHECK(ms_qwen3_synth(dir, "qwen3-moe-tiny-fp8", 0, 0, 3) == 0, "synth qwen3-moe-tiny-fp8: %s", ms_err_msg());
    ms_st *st = ms_st_open_dir(dir);
    const ms_st_tensor *q = st ? ms_st_find(st, "model.layers.1.mlp.experts.0.down_proj.weight") : NULL;
    const ms_st_tensor *sc = st ? ms_st_find(st, "model.layers.1.mlp.experts.0.down_proj.weight_scale_inv") : NULL;
    T_CHECK(q && q->dtype == MS_DT_F8_E4M3 && sc && sc->dtype == MS_DT_F32 && sc->shape[0] == 1 && sc->shape[1] == 1,
            "synth -fp8: F8_E4M3 experts with an F32 [ceil(128/128), ceil(64/128)] scale grid");
    ms_st_close(st);
    check_tied(dir);
    check_budgets(dir, "synth qwen3-moe-tiny-fp8");
    /* the same values with BF16 scale grids (experts and trunk): the same bits */
    char d16[1024];
    snprintf(d16, sizeof d16, "%s/tiny-fp8-bf16s", ms_t_tmpdir("qwen3-synth-bf16s"));
    T_CHECK(ms_qwen3_synth(d16, "qwen3-moe-tiny-fp8-bf16s", 0, 0, 3) == 0, "synth qwen3-moe-tiny-fp8-bf16s: %s", ms_err_msg());
    enum { NB = 24 };
    int32_t bids[NB];
    for (int i = 0; i < NB; i++) bids[i] = (int32_t)((i * 53 + 11) % 480);
    ms_run_opts o2 = {.n_threads = 2, .max_positions = NB};
    float *l32 = ms_t_logits(dir, &o2, bids, NB, 0, NULL), *l16 = ms_t_logits(d16, &o2, bids, NB, 0, NULL);
    T_CHECK(l32 && l16 && !memcmp(l32, l16, sizeof(float) * NB * 512),
            "FP8 with BF16 scale grids == with F32 grids of the same values, bit for bit");
    free(l32);
    free(l16);
    /* a chat through jobs: ChatML prompt, thinking off, the answer without markers */
    char in[1200], outp[1200];
    snprintf(in, sizeof in, "%s/in.jsonl", ms_t_tmpdir("qwen3-jobs"));
    snprintf(outp, sizeof outp, "%s/out.jsonl", ms_t_tmpdir("qwen3-jobs-out"));
    FILE *jf = fopen(in, "w");
    fputs("{\"custom_id\": \"c\", \"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
          "\"content\": \"Hi!\"}], \"max_tokens\": 12, \"chat_template_kwargs\": {\"enable_thinking\": false}}\n",
          jf);
    fclose(jf);
    snprintf(cmd, sizeof cmd, "%s jobs --model %s --input %s --output %s --quiet", bin, dir, in, outp);
    int js = ms_t_run(cmd, NULL);
    json_error_t je;
    json_t *res = json_load_file(outp, 0, &je);
    json_t *msg = json_object_get(
        json_array_get(json_object_get(json_object_get(json_object_get(res, "response"), "body"), "choices"), 0), "message");
    const char *content = json_string_value(json_object_get(msg, "content"));
    T_CHECK(js == 0 && content && !strstr(content, "<|im_"), "jobs: a Qwen3 chat answered, its content without markers "
            "(status %d)", js);
    json_decref(res);
    snprintf(cmd, sizeof cmd, "TMPDIR=%s %s demo --family qwen3-moe -n 4 --quiet > /dev/null 2>&1", ms_t_tmpdir("qwen3-demo"),
             bin);
    T_CHECK(ms_t_run(cmd, NULL) == 0, "demo --family qwen3-moe writes its tiny checkpoint and runs it");
    char big[1024];
    snprintf(big, sizeof big, "%s/30b", ms_t_tmpdir("qwen3-synth-30b"));
    snprintf(cmd, sizeof cmd, "%s synth --preset qwen3-30b-a3b-fp8 --sparse --out %s 2>/dev/null && %s run --model %s "
             "--ids 1,2,3 -n 2 --ram-budget 8G --json > /dev/null", bin, big, bin, big);
    T_CHECK(ms_t_run(cmd, NULL) == 0, "synth --preset qwen3-30b-a3b-fp8 --sparse (31 GB of holes) runs at --ram-budget 8G");
}

int main(void)
{
    ms_log_set_level(0);
    check_synth();
    const char *names[2] = {"tiny-s11", "tiny-fp8-released-like"};
    for (int i = 0; i < 2; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "fixtures/qwen3-moe/checkpoints/%s", names[i]);
        const char *p = ms_t_shared(rel);
        if (!p) continue;
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", p);
        ms_run_opts o = {.n_threads = 2};
        ms_t_check_reference(dir, names[i], "qwen3-moe", &o, "pinned");
        ms_run_opts ob = {.n_threads = 2, .max_positions = 128};
        ob.ram_budget = ms_t_least_budget(dir, ob, names[i]);
        ob.baseline = 1;
        ms_t_check_reference(dir, names[i], "qwen3-moe", &ob, "least budget, trunk streamed");
    }
    return ms_t_done();
}
