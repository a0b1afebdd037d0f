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
#include "ms_sbuf.h"
#include "ms_st.h"
#include "ms_test.h"

/* synth's presets: the tiny one runs; the released layouts (sparse, six layers) open and generate at 8 GiB. */
static void check_synth(void)
{
    char cmd[9000], bin[1024];
    snprintf(bin, sizeof bin, "%s", ms_t_bin("moestream"));
    snprintf(cmd, sizeof cmd, "TMPDIR=%s %s demo --family deepseek-v3 -n 4 --quiet > /dev/null 2>&1",
             ms_t_tmpdir("dsv3-demo"), bin);
    T_CHECK(ms_t_run(cmd, NULL) == 0, "demo --family deepseek-v3 writes its tiny checkpoint and runs it");
    static const char *const big[3] = {"deepseek-v3", "kimi-k2", "kimi-k2-thinking"};
    for (int i = 0; i < 3; i++) {
        char d[1024];
        snprintf(d, sizeof d, "%s/m", ms_t_tmpdir(big[i]));
        /* the released widths, 6 of the 61 layers (the whole depth is tests/bench/deepseek.sh's: a
         * token of it takes seconds here and minutes under the sanitizers) */
        snprintf(cmd, sizeof cmd, "%s synth --preset %s --sparse --layers 6 --out %s 2>/dev/null && %s run --model %s "
                 "--ids 1,2,3 -n 2 --ram-budget 8G --json > /dev/null", bin, big[i], d, bin, d);
        T_CHECK(ms_t_run(cmd, NULL) == 0, "synth --preset %s --sparse --layers 6 (the released widths) runs at --ram-budget 8G",
                big[i]);
        /* a chat: Kimi K2's tokenizer renders Kimi's format, DeepSeek's DeepSeek-V3's */
        char body[1200], *out = NULL, *err = NULL;
        snprintf(body, sizeof body, "%s/chat.json", ms_t_tmpdir("dsv3-chat"));
        FILE *f = fopen(body, "w");
        if (f) fputs("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", f), fclose(f);
        int st = ms_t_runf(&out, &err, "%s tokenize --model %s --chat %s --json", bin, d, body);
        if (i > 0)
            T_CHECK(st == 0 && out && strstr(out, "<|im_user|>user<|im_middle|>Hi<|im_end|><|im_assistant|>assistant<|im_middle|>"),
                    "%s: a chat renders in Kimi's format (%s)", big[i], out ? out : "");
        else
            T_CHECK(st == 0 && out && strstr(out, "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>"),
                    "deepseek-v3: a chat renders in DeepSeek's format (status %d: %s)", st, out ? out : "");
        free(out);
        free(err);
    }
}

static int32_t *ids_of(json_t *a, size_t *n)
{
    *n = json_array_size(a);
    int32_t *v = malloc(sizeof(int32_t) * (*n ? *n : 1));
    for (size_t i = 0; i < *n; i++) v[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return v;
}

static int64_t argmax(const float *x, int64_t n)
{
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* The MTP layer as the draft head against ref_mtp.json's SGLang / technical-report variant
 * (every embedding used, position 0's too): decoding token by token, each row's draft logits
 * within 1e-4 and their argmax exact; a clone and a saved-and-loaded state draft the same bits;
 * the head filled over chunks of the prompt drafts the bits it drafts token by token. */
static void check_mtp(const char *dir, const char *name, ms_run_opts o, const char *how)
{
    char path[4200];
    json_error_t je;
    snprintf(path, sizeof path, "%s/ref_mtp.json", dir);
    json_t *rm = json_load_file(path, 0, &je);
    T_CHECK(rm != NULL, "%s: ref_mtp.json", name);
    o.draft_head = 1;
    ms_model *m = rm ? ms_families_open(dir, &o) : NULL;
    T_CHECK(m && ms_model_get_info(m)->draft_layers == 1, "%s (%s): opens with its MTP layer as the draft head: %s", name,
            how, m ? "" : ms_err_msg());
    if (!m) {
        json_decref(rm);
        return;
    }
    if (strstr(how, "streamed")) {
        const ms_plan *pl = ms_model_plan(m);
        T_CHECK(pl && pl->streaming && pl->n_pinned < pl->in.n_trunk, "%s (%s): the plan streams the trunk's tail (the LM head)",
                name, how);
    }
    int64_t V = ms_model_get_info(m)->vocab;
    size_t L, np;
    int32_t *full = ids_of(json_object_get(rm, "full_ids"), &L);
    int32_t *posn = ids_of(json_object_get(rm, "positions"), &np);
    int32_t *amax = ids_of(json_object_get(rm, "mtp_argmax"), &np);
    json_t *bits = json_object_get(rm, "mtp_logits_bits");
    float *lg = malloc(sizeof(float) * (size_t)V), *lc = malloc(sizeof(float) * (size_t)V);
    size_t P = (size_t)posn[0] + 1;
    ms_seq *s = ms_seq_new(m);
    int ok = ms_model_forward(m, s, full, (int64_t)P, 0, lc) == 0;
    double worst = 0;
    int args = 1, same = 1;
    for (size_t j = 0; j < np && ok; j++) {
        size_t i = (size_t)posn[j]; /* the row of position i drafts full[i + 2] from full[i + 1] */
        ok = ms_seq_draft(s, full, i + 2, lg) == 1;
        if (!ok) break;
        worst = fmax(worst, ms_t_rel_err_bits(lg, json_array_get(bits, j), V));
        args &= argmax(lg, V) == amax[j];
        if (j == np / 2) { /* a clone and a saved state draft the next row alike */
            ms_seq *c = ms_seq_clone(s);
            ms_sbuf b = {0};
            ms_seq_save(s, &b);
            ms_seq *d = ms_seq_load(m, b.s, b.n);
            for (int k = 0; k < 2; k++) {
                ms_seq *x = k ? d : c;
                same &= x && ms_model_forward(m, x, &full[i + 1], 1, 0, lc) == 0 &&
                        ms_seq_draft(x, full, i + 3, lc) == 1 && ms_t_rel_err_bits(lc, json_array_get(bits, j + 1), V) <= 1e-4;
            }
            ms_seq_free(c);
            ms_seq_free(d);
            ms_sbuf_free(&b);
        }
        if (j + 1 < np) ok = ms_model_forward(m, s, &full[i + 1], 1, 0, lc) == 0;
    }
    T_CHECK(ok && np == 16, "%s (%s): the MTP head drafts at each of the 16 positions: %s", name, how, ok ? "" : ms_err_msg());
    T_CHECK(worst <= 1e-4, "%s (%s): every MTP row's logits within 1e-4 of ref_mtp.json's mtp_logits_bits (worst %.3g)",
            name, how, worst);
    T_CHECK(args, "%s (%s): every MTP row's argmax is the reference's", name, how);
    T_CHECK(same, "%s (%s): a clone and a saved-and-loaded state draft the reference's next row", name, how);
    printf("%s (%s): MTP rows worst rel err %.3g, argmax %s\n", name, how, worst, args ? "exact" : "MISMATCH");
    /* the whole text in chunks of 7, the head filled after each (the engine's order): its last
     * draft is the bits of the one made token by token */
    ms_seq *t = ms_seq_new(m);
    int ok2 = 1;
    for (size_t at = 0; at + 1 < L && ok2; at += 7) {
        size_t k = L - 1 - at < 7 ? L - 1 - at : 7;
        ok2 = ms_model_forward(m, t, full + at, (int64_t)k, 0, lc) == 0 && ms_seq_draft(t, full, L, NULL) >= 0;
    }
    ok2 = ok2 && ms_seq_draft(t, full, L, lc) == 1;
    T_CHECK(ok2 && !memcmp(lc, lg, sizeof(float) * (size_t)V),
            "%s (%s): the head filled over chunks of 7 drafts the last row bit for bit as token by token", name, how);
    ms_seq_free(t);
    /* three sequences at different places, their heads behind by different counts, drafted
     * together (the head read once): each the bits it drafts alone */
    enum { K = 3 };
    ms_seq *b[K], *solo[K];
    const int32_t *bt[K];
    size_t bn[K];
    int bok[K] = {0}, okb = 1, sameb = 1;
    float *bl = malloc(sizeof(float) * (size_t)V * K); /* [K][V] */
    for (int i = 0; i < K; i++) {
        bn[i] = P + 1 + (size_t)(3 * i); /* < L: the fixture's text is longer */
        b[i] = ms_seq_new(m);
        okb &= bn[i] < L && ms_model_forward(m, b[i], full, (int64_t)bn[i] - 1, 0, lc) == 0;
        solo[i] = ms_seq_clone(b[i]);
        bt[i] = full;
    }
    okb = okb && ms_seqs_draft(b, K, bt, bn, bl, bok) == K;
    for (int i = 0; i < K && okb; i++) {
        okb &= bok[i] == 1 && ms_seq_draft(solo[i], full, bn[i], lc) == 1;
        sameb &= okb && !memcmp(lc, bl + (size_t)i * (size_t)V, sizeof(float) * (size_t)V);
    }
    T_CHECK(okb && sameb, "%s (%s): three sequences drafted together, each the bits drafted alone: %s", name, how,
            okb ? "" : ms_err_msg());
    for (int i = 0; i < K; i++) {
        ms_seq_free(b[i]);
        ms_seq_free(solo[i]);
    }
    free(bl);
    ms_seq_free(s);
    ms_model_free(m);
    free(lg);
    free(lc);
    free(full);
    free(posn);
    free(amax);
    json_decref(rm);
}

/* An MTP layer that agrees with its model (synth deepseek-v3-tiny-mtp): --speculate 4 --draft mtp
 * gives off's logits bit for bit at over 1.5 tokens a pass, in a run and in jobs (three prompts
 * sharing a beginning, prefilled once: the head's state is cloned with it). */
static void check_mtp_unowned(const char *d, const char *ids);

static void check_mtp_agrees(void)
{
    char bin[1024], d[1100], a[1200], b[1200], ja[1200], jb[1200], in[1200], *js = NULL, *err = NULL;
    snprintf(bin, sizeof bin, "%s", ms_t_bin("moestream"));
    snprintf(d, sizeof d, "%s/m", ms_t_tmpdir("dsv3-mtp"));
    snprintf(a, sizeof a, "%s/off.bin", ms_t_tmpdir("dsv3-mtp-off"));
    snprintf(b, sizeof b, "%s/mtp.bin", ms_t_tmpdir("dsv3-mtp-on"));
    int sy = ms_t_runf(NULL, NULL, "%s synth --preset deepseek-v3-tiny-mtp --out %s --force", bin, d);
    T_CHECK(sy == 0, "synth --preset deepseek-v3-tiny-mtp (status %d)", sy);
    const char *ids = "11,12,13,14,15,16,17,18";
    int r0 = ms_t_runf(NULL, NULL, "%s run --model %s --ids %s -n 48 --quiet --speculate off --dump-logits %s", bin, d, ids, a);
    int r1 = ms_t_runf(&js, &err, "%s run --model %s --ids %s -n 48 --quiet --json --speculate 4 --draft mtp --dump-logits %s",
                       bin, d, ids, b);
    json_error_t je;
    json_t *j = js ? json_loads(js, 0, &je) : NULL, *st = json_object_get(j, "stats");
    double tpp = json_real_value(json_object_get(st, "tokens_per_decode_pass"));
    T_CHECK(r0 == 0 && r1 == 0 && ms_t_same_file(a, b), "tiny-mtp: MTP drafts == off, bit for bit (status %d, %d: %s)", r0,
            r1, err ? err : "");
    T_CHECK(tpp >= 1.5 && json_integer_value(json_object_get(st, "accepted_draft_tokens")) > 0,
            "tiny-mtp: an agreeing MTP layer gives over 1.5 tokens a decoding pass (%.2f; at most 2: one draft a pass)", tpp);
    printf("tiny-mtp: %.2f tokens a decoding pass with MTP drafts\n", tpp);
    json_decref(j);
    free(js);
    free(err);
    /* jobs: a shared beginning of 20 tokens, three endings */
    snprintf(in, sizeof in, "%s/jobs.jsonl", ms_t_tmpdir("dsv3-mtp-jobs"));
    FILE *f = fopen(in, "w");
    for (int k = 0; f && k < 3; k++) {
        fprintf(f, "{\"prompt\": [");
        for (int t = 0; t < 20; t++) fprintf(f, "%d,", 30 + t);
        fprintf(f, "%d, %d], \"max_tokens\": %d, \"temperature\": 0}\n", 100 + k, 200 + k, 12 + 4 * k);
    }
    if (f) fclose(f);
    snprintf(ja, sizeof ja, "%s", ms_t_tmpdir("dsv3-mtp-jobs-off"));
    snprintf(jb, sizeof jb, "%s", ms_t_tmpdir("dsv3-mtp-jobs-on"));
    int j0 = ms_t_runf(NULL, NULL, "%s jobs --model %s --input %s --output %s/out.jsonl --quiet --speculate off --dump-logits %s",
                       bin, d, in, ja, ja);
    int j1 = ms_t_runf(NULL, &err, "%s jobs --model %s --input %s --output %s/out.jsonl --quiet --speculate 4 --draft mtp "
                       "--dump-logits %s", bin, d, in, jb, jb);
    int same = j0 == 0 && j1 == 0;
    for (int k = 1; k <= 3 && same; k++) {
        char x[1300], y[1300];
        snprintf(x, sizeof x, "%s/line-%d.f32", ja, k);
        snprintf(y, sizeof y, "%s/line-%d.f32", jb, k);
        same = ms_t_same_file(x, y);
    }
    T_CHECK(same, "tiny-mtp: jobs sharing a prefilled beginning, MTP drafts == off for each, bit for bit (status %d, %d: %s)",
            j0, j1, err ? err : "");
    free(err);
    /* usage: not with --speculate off or a draft file */
    static const char *const bad[2][2] = {{"--speculate off", "not with --speculate off"},
                                         {"--draft-file /dev/null", "at most one of --draft mtp and --draft-file"}};
    for (int i = 0; i < 2; i++) {
        err = NULL;
        int st = ms_t_runf(NULL, &err, "%s run --model %s --ids %s -n 2 --quiet --draft mtp %s", bin, d, ids, bad[i][0]);
        T_CHECK(st == 2 && err && strstr(err, bad[i][1]), "--draft mtp with %s: a usage error saying so (status %d: %s)",
                bad[i][0], st, err ? err : "");
        free(err);
    }
    check_mtp_unowned(d, ids);
}

/* A worker that serves every MoE layer but the MTP layer's experts: --draft mtp fails naming the
 * layer (exit 7), auto drafts n-grams, the tokens those of off. */
static void check_mtp_unowned(const char *d, const char *ids)
{
    char sock[700], ep[800], wb[1024], spec[64];
    snprintf(sock, sizeof sock, "%s/w.sock", ms_t_sockdir("dsv3-mtp-w"));
    snprintf(ep, sizeof ep, "ipc://%s", sock);
    snprintf(wb, sizeof wb, "%s", ms_t_bin("moestream-worker"));
    ms_model_info in;
    T_CHECK(ms_dsv3_family.peek(d, &in) == 0, "tiny-mtp: its shape");
    snprintf(spec, sizeof spec, "%d-%d:*", in.first_moe, in.n_layers - 1);
    const char *argv[] = {wb, "--model", d, "--experts", spec, "--listen", ep, "--quiet", NULL};
    ms_t_worker w;
    ms_t_worker_opts wo = {.wait_path = sock};
    if (ms_t_worker_start(&w, argv, &wo) != 0) {
        T_CHECK(0, "tiny-mtp: a worker with --experts %s started", spec);
        return;
    }
    const char *bin = ms_t_bin("moestream");
    char *err = NULL, *a = NULL, *b = NULL;
    int st = ms_t_runf(NULL, &err, "%s run --model %s --ids %s -n 8 --quiet --draft mtp --speculate 2 --workers %s", bin, d,
                       ids, ep);
    char want[64];
    snprintf(want, sizeof want, "MTP layer (layer %d)", in.n_layers);
    T_CHECK(st == 7 && err && strstr(err, want), "--draft mtp beside a worker without the MTP layer's experts: exit 7 naming "
            "%s (status %d: %s)", want, st, err ? err : "");
    free(err);
    int s0 = ms_t_runf(&a, NULL, "%s run --model %s --ids %s -n 8 --quiet --json --speculate off", bin, d, ids);
    int s1 = ms_t_runf(&b, NULL, "%s run --model %s --ids %s -n 8 --quiet --json --workers %s", bin, d, ids, ep);
    json_t *ja = a ? json_loads(a, 0, NULL) : NULL, *jb = b ? json_loads(b, 0, NULL) : NULL;
    const char *src = json_string_value(json_object_get(json_object_get(jb, "stats"), "draft_source"));
    T_CHECK(s0 == 0 && s1 == 0 && json_equal(json_object_get(ja, "generated_ids"), json_object_get(jb, "generated_ids")) &&
                src && !strcmp(src, "ngram"),
            "auto beside that worker: n-gram drafts (%s), the tokens of off", src ? src : "-");
    json_decref(ja);
    json_decref(jb);
    free(a);
    free(b);
    ms_t_worker_kill(&w);
}

int main(void)
{
    ms_log_set_level(0);
    check_synth();
    check_mtp_agrees();
    const char *names[2] = {"tiny-s3", "tiny-released-like"};
    for (int i = 0; i < 2; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "fixtures/deepseek-v3/checkpoints/%s", names[i]);
        const char *p = ms_t_shared(rel);
        if (!p) continue;
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", p);
        ms_run_opts o = {.n_threads = 2};
        ms_t_check_reference(dir, names[i], "deepseek-v3", &o, "pinned");
        ms_run_opts ob = {.n_threads = 2, .max_positions = 128};
        ob.ram_budget = ms_t_least_budget(dir, ob, names[i]);
        ob.baseline = 1;
        ms_t_check_reference(dir, names[i], "deepseek-v3", &ob, "least budget, trunk streamed");
        check_mtp(dir, names[i], o, "pinned");
        ms_run_opts om = {.n_threads = 2, .max_positions = 128, .draft_head = 1};
        om.ram_budget = ms_t_least_budget(dir, om, names[i]);
        om.baseline = 1;
        /* tiny-s3's whole trunk is smaller than a ring: its least budget pins it all */
        check_mtp(dir, names[i], om, i ? "least budget, LM head streamed through the draft ring" : "least budget");
    }
    return ms_t_done();
}
