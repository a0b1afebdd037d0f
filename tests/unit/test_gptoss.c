/* test_gptoss: the gpt-oss family against the official reference (fixtures), and its invariants: threads, SIMD, chunking, budgets, batches, speculation, snapshots, workers. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_cpu.h"
#include "ms_err.h"
#include "ms_families.h"
#include "ms_gptoss_model.h"
#include "ms_st.h"
#include "ms_mtest.h"
#include "ms_test.h"

/* Logits of every position of ids[n] (split > 0: fed in pieces of split). */
/* dir's checkpoint with each KV head repeated `rep` times (k_proj, v_proj rows and biases), so
 * query head h still meets the keys and values it met: written to out. */
static int widen_kv(const char *dir, int rep, const char *out)
{
    ms_st *st = ms_st_open_dir(dir);
    if (!st) return -1;
    ms_st_writer *w = ms_st_writer_new();
    int64_t d = 16; /* gpt-oss-tiny's head_dim */
    for (size_t i = 0; i < ms_st_count(st); i++) {
        const ms_st_tensor *t = ms_st_at(st, i);
        const unsigned char *b = ms_t_st_bytes(st, t);
        if (!b) return -1;
        if (!strstr(t->name, "self_attn.k_proj") && !strstr(t->name, "self_attn.v_proj")) {
            ms_st_writer_add_copy(w, t->name, t->dtype, t->ndim, t->shape, b);
            continue;
        }
        int64_t rows = t->shape[0], row_bytes = (int64_t)t->nbytes / rows, shape[MS_ST_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        shape[0] = rows * rep;
        unsigned char *wide = malloc((size_t)(t->nbytes * (uint64_t)rep));
        for (int64_t kvh = 0; kvh < rows / d; kvh++) /* [kv head][d] rows, each head rep times */
            for (int c = 0; c < rep; c++)
                memcpy(wide + ((kvh * rep + c) * d) * row_bytes, b + kvh * d * row_bytes, (size_t)(d * row_bytes));
        ms_st_writer_add_copy(w, t->name, t->dtype, t->ndim, shape, wide);
        free(wide);
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    int rc = ms_st_writer_write(w, path);
    ms_st_writer_free(w);
    ms_st_close(st);
    json_error_t je;
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *cfg = json_load_file(path, 0, &je);
    if (!cfg) return -1;
    json_int_t kv = json_integer_value(json_object_get(cfg, "num_key_value_heads"));
    json_object_set_new(cfg, "num_key_value_heads", json_integer(kv * rep));
    snprintf(path, sizeof path, "%s/config.json", out);
    rc |= json_dump_file(cfg, path, JSON_INDENT(2));
    json_decref(cfg);
    char cmd[2600];
    snprintf(cmd, sizeof cmd, "cp %s/tokenizer.json %s/", dir, out);
    return rc | ms_t_run(cmd, NULL);
}

/* The attention runs a KV head's group of query heads together, padded to whole vectors of 4:
 * groups of 2 and 1 (the tiny model's 2 KV heads widened to 4 and 8) give the logits of its
 * groups of 4, bit for bit, over a prompt past the sliding window, whole and in chunks. */
static void check_kv_groups(const char *dir)
{
    enum { N = 70, V = 512 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 89 + 7) % V);
    size_t bytes = sizeof(float) * (size_t)(N * V);
    ms_run_opts o = {.n_threads = 2};
    float *base = ms_t_logits(dir, &o, ids, N, 0, NULL);
    T_CHECK(base != NULL, "KV groups: the tiny model's logits");
    for (int rep = 2; rep <= 4 && base; rep *= 2) {
        char name[64];
        snprintf(name, sizeof name, "gptoss-kv%d", rep);
        const char *out = ms_t_tmpdir(name);
        T_CHECK(widen_kv(dir, rep, out) == 0, "KV heads x%d: checkpoint written (%s)", rep, ms_err_msg());
        float *wide = ms_t_logits(out, &o, ids, N, 0, NULL), *chunked = ms_t_logits(out, &o, ids, N, 9, NULL);
        T_CHECK(wide && !memcmp(base, wide, bytes), "groups of %d query heads: the logits of groups of 4, bit for bit",
                4 / rep);
        T_CHECK(chunked && !memcmp(base, chunked, bytes), "groups of %d, chunks of 9: the same logits", 4 / rep);
        free(wide);
        free(chunked);
    }
    free(base);
}

static void check_invariants(const char *dir, int64_t V)
{
    enum { N = 150 }; /* past the window of 128: the sliding layers' rings wrap */
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 97 + 13) % V);
    size_t bytes = sizeof(float) * (size_t)(N * V);
    ms_run_opts o1 = {.n_threads = 1}, o2 = {.n_threads = 2};
    float *base = ms_t_logits(dir, &o1, ids, N, 0, NULL);
    T_CHECK(base != NULL, "invariants: the reference run");
    if (!base) return;
    float *thr = ms_t_logits(dir, &o2, ids, N, 0, NULL);
    T_CHECK(thr && !memcmp(base, thr, bytes), "1 and 2 threads: bit-identical");
    float *inc = ms_t_logits(dir, &o2, ids, N, 1, NULL);
    T_CHECK(inc && !memcmp(base, inc, bytes), "token by token == one call, bit for bit");
    float *chk = ms_t_logits(dir, &o2, ids, N, 37, NULL);
    T_CHECK(chk && !memcmp(base, chk, bytes), "chunks of 37 == one call, bit for bit");
    if (ms_cpu_simd_available()) {
        ms_cpu_set_simd(0);
        float *sc = ms_t_logits(dir, &o2, ids, N, 0, NULL);
        ms_cpu_set_simd(1);
        T_CHECK(sc && !memcmp(base, sc, bytes), "scalar == SIMD, bit for bit");
        free(sc);
    } else {
        ms_t_skip("no AVX2+FMA on this CPU: scalar vs SIMD not compared");
    }
    ms_run_opts ob = {.n_threads = 2, .max_positions = N};
    ob.ram_budget = ms_t_least_budget(dir, ob, "gpt-oss");
    ob.baseline = 1;
    ms_model *m = ms_gptoss_model_open(dir, &ob);
    T_CHECK(m && ms_model_plan(m) && ms_model_plan(m)->streaming, "the least budget streams the trunk: %s",
            m ? "" : ms_err_msg());
    ms_model_free(m);
    float *lb = ms_t_logits(dir, &ob, ids, N, 0, NULL);
    T_CHECK(lb && !memcmp(base, lb, bytes), "the least budget (trunk streamed, experts read on demand) == no budget");
    /* Predicted routing (the router before the attention) only reads early: with it on, experts
     * read into the cache, token by token, the logits are the reference's and predictions were
     * read (no more used than read). */
    ms_run_opts op = {.n_threads = 2, .max_positions = N, .no_mmap = 1, .prefetch = MS_PREFETCH_ON};
    ms_model_stats pst = {0};
    float *pf = ms_t_logits(dir, &op, ids, N, 1, &pst);
    T_CHECK(pf && !memcmp(base, pf, bytes) && pst.expert_prefetched > 0 && pst.expert_prefetch_used <= pst.expert_prefetched,
            "predicted routing: the same bits, %llu predicted reads, %llu used", (unsigned long long)pst.expert_prefetched,
            (unsigned long long)pst.expert_prefetch_used);
    free(pf);
    free(thr);
    free(inc);
    free(chk);
    free(lb);

    /* A batch of three sequences at different positions == each alone; a speculative pass
     * settled to its first rows and a snapshot of the sequence continue as the plain run. */
    ms_run_opts os = {.n_threads = 2, .max_positions = N + 8, .spec_window = 4, .max_seqs = 3};
    m = ms_gptoss_model_open(dir, &os);
    T_CHECK(m != NULL, "open for batches: %s", ms_err_msg());
    if (m) {
        float *lg = malloc(sizeof(float) * (size_t)(N * V));
        ms_seq *a = ms_seq_new(m), *b = ms_seq_new(m), *c = ms_seq_new(m);
        int ok = ms_model_forward(m, a, ids, 130, 1, lg) == 0 && ms_model_forward(m, b, ids, 10, 1, lg) == 0;
        float *ra = malloc(sizeof(float) * (size_t)(5 * V)), *rb = malloc(sizeof(float) * (size_t)(3 * V)),
              *rc = malloc(sizeof(float) * (size_t)(7 * V));
        ms_batch_item it[3] = {{a, ids + 130, 5, 1, ra, 0}, {b, ids + 10, 3, 1, rb, 0}, {c, ids, 7, 1, rc, 0}};
        ok = ok && ms_model_forward_batch(m, it, 3) == 0;
        T_CHECK(ok && !memcmp(ra, base + 130 * V, sizeof(float) * (size_t)(5 * V)) &&
                    !memcmp(rb, base + 10 * V, sizeof(float) * (size_t)(3 * V)) &&
                    !memcmp(rc, base, sizeof(float) * (size_t)(7 * V)),
                "a batch of three sequences (positions 130, 10, 0) == each alone, bit for bit");
        /* a at 135: a speculative pass of 4 rows, 2 kept; then a snapshot; both go on */
        ms_batch_item sp = {a, ids + 135, 4, 1, ra, 1};
        ok = ms_model_forward_batch(m, &sp, 1) == 0;
        ms_seq_keep(a, 2);
        ms_seq *snap = ms_seq_clone(a);
        int64_t rest = N - 137;
        ok = ok && ms_model_forward(m, a, ids + 137, rest, 1, lg) == 0 &&
             !memcmp(lg, base + 137 * V, sizeof(float) * (size_t)(rest * V));
        ms_seq_free(a);
        int ok2 = ms_model_forward(m, snap, ids + 137, rest, 1, lg) == 0 &&
                  !memcmp(lg, base + 137 * V, sizeof(float) * (size_t)(rest * V));
        T_CHECK(ok && ok2, "a settled speculative pass across the window, and a snapshot of it, continue bit for bit");
        ms_seq_free(snap);
        ms_seq_free(b);
        ms_seq_free(c);
        free(ra);
        free(rb);
        free(rc);
        free(lg);
        ms_model_free(m);
    }
    free(base);
}

/* synth's gpt-oss presets: the tiny one runs with its tokenizer and chat format; the 120b
 * layout (sparse) opens, plans and runs a token at an 8 GiB budget. */
static void check_synth(const char *dir)
{
    ms_tok *t = ms_tok_load(dir);
    T_CHECK(t && ms_tok_special_id(t, "<|return|>") == 491 + 4, "synth tiny: tokenizer.json with the harmony specials");
    int32_t *ids = NULL;
    size_t n = 0;
    char *back = NULL;
    size_t nb = 0;
    static const char txt[] = "The weather today is cold, and 2023's forecast said: snow!";
    T_CHECK(t && ms_tok_encode(t, txt, sizeof txt - 1, 0, &ids, &n) == 0 && ms_tok_decode(t, ids, n, &back, &nb) == 0 &&
                nb == sizeof txt - 1 && !memcmp(back, txt, nb),
            "synth tiny: its tokenizer round-trips text (%zu ids)", n);
    free(ids);
    free(back);
    ms_tok_free(t);
    /* a chat through jobs: harmony prompt, the answer without markers */
    char in[1200], outp[1200], cmdj[8000];
    snprintf(in, sizeof in, "%s/in.jsonl", ms_t_tmpdir("gptoss-jobs"));
    snprintf(outp, sizeof outp, "%s/out.jsonl", ms_t_tmpdir("gptoss-jobs-out"));
    FILE *jf = fopen(in, "w");
    fputs("{\"custom_id\": \"c\", \"messages\": [{\"role\": \"developer\", \"content\": \"Be brief.\"}, {\"role\": "
          "\"user\", \"content\": \"Hi!\"}], \"max_tokens\": 12, \"reasoning_effort\": \"high\"}\n",
          jf);
    fclose(jf);
    char binj[1024];
    snprintf(binj, sizeof binj, "%s", ms_t_bin("moestream"));
    snprintf(cmdj, sizeof cmdj, "%s jobs --model %s --input %s --output %s --date 2025-08-05 --quiet", binj, dir, in, outp);
    int js = ms_t_run(cmdj, NULL);
    json_error_t je;
    json_t *res = json_load_file(outp, 0, &je);
    json_t *msg = json_object_get(json_array_get(json_object_get(json_object_get(json_object_get(res, "response"), "body"),
                                                                 "choices"),
                                                 0),
                                  "message");
    const char *content = json_string_value(json_object_get(msg, "content"));
    T_CHECK(js == 0 && content && !strstr(content, "<|"), "jobs: a harmony chat answered, its content without markers "
            "(status %d)", js);
    json_decref(res);
    char big[1024], cmd[4400];
    snprintf(big, sizeof big, "%s/120b", ms_t_tmpdir("gptoss-synth-120b"));
    char bin[1024];
    snprintf(bin, sizeof bin, "%s", ms_t_bin("moestream"));
    /* on a terminal (script(1) gives it one) the gigabytes of pinned trunk read at open show a bar */
    int tty = ms_t_run("script --version >/dev/null 2>&1", NULL) == 0;
    snprintf(cmd, sizeof cmd, "%s synth --preset gpt-oss-120b --sparse --out %s 2>/dev/null && %s%s run --model %s --ids 1,2,3 -n 1 "
             "--ram-budget 8G --json > /dev/null%s", bin, big, tty ? "script -qec \"" : "", bin, big, tty ? "\" /dev/null" : "");
    char *shown = NULL;
    T_CHECK(ms_t_run(cmd, &shown) == 0, "synth --preset gpt-oss-120b --sparse (61 GiB of holes) runs at --ram-budget 8G");
    if (tty)
        T_CHECK(shown && strstr(shown, "loading the pinned trunk [") && strstr(shown, "100%"),
                "opening it on a terminal shows the pinned trunk's reading as a bar");
    else
        ms_t_skip("SKIP: script(1) is not installed (bsdutils): the load bar is not checked");
    free(shown);
    snprintf(cmd, sizeof cmd, "TMPDIR=%s %s demo --family gpt-oss -n 4 --quiet > /dev/null 2>&1", ms_t_tmpdir("gptoss-demo"), bin);
    T_CHECK(ms_t_run(cmd, NULL) == 0, "demo --family gpt-oss writes its tiny checkpoint and runs it");
}

int main(void)
{
    ms_log_set_level(0);
    /* the synthetic tiny model (window 32): what every family holds (threads, SIMD, chunks,
     * budgets, batches, states, workers, packs) is test_conformance's; here gpt-oss's own */
    char syn[1024];
    snprintf(syn, sizeof syn, "%s/tiny", ms_t_tmpdir("gptoss-synth"));
    T_CHECK(ms_gptoss_synth(syn, "gpt-oss-tiny", 0, 0, 7) == 0, "synth gpt-oss-tiny: %s", ms_err_msg());
    check_kv_groups(syn);
    check_synth(syn);
    const char *names[2] = {"tiny-s7", "tiny-released-like"};
    for (int i = 0; i < 2; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "fixtures/gpt-oss/checkpoints/%s", names[i]);
        const char *p = ms_t_shared(rel);
        if (!p) continue;
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", p);
        ms_run_opts o = {.n_threads = 2};
        ms_t_check_reference(dir, names[i], "gpt-oss", &o, "pinned");
        if (i == 0) check_invariants(dir, 384); /* the released config's shapes (the suite's on synth) */
    }
    return ms_t_done();
}
