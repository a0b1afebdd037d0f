/* test_conformance: what every registered family must hold, checked on each family's demo synth
 * preset: a new family gets all of it by adding its row (CMakeLists.txt's MS_FAMILIES). */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_cpu.h"
#include "ms_err.h"
#include "ms_families.h"
#include "ms_model.h"
#include "ms_sbuf.h"
#include "ms_st.h"
#include "ms_mtest.h"
#include "ms_test.h"

enum { N = 150 }; /* prompt rows: past a 128-row sliding window, so rings wrap */

/* Threads, SIMD paths, prefill chunking, the least budget, predicted routing: all the bits of
 * one call with 1 thread. A batch of three sequences at different positions = each alone; a
 * settled speculative pass, a clone and a saved-and-loaded state go on as the plain run. */
static void check_model(const char *fam, const char *dir, int64_t V)
{
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 97 + 13) % V);
    size_t bytes = sizeof(float) * (size_t)(N * V);
    ms_run_opts o1 = {.n_threads = 1, .max_positions = N + 8}, o2 = {.n_threads = 2, .max_positions = N + 8};
    float *base = ms_t_logits(dir, &o1, ids, N, 0, NULL);
    T_CHECK(base != NULL, "%s: the reference run", fam);
    if (!base) return;
    float *x = ms_t_logits(dir, &o2, ids, N, 0, NULL);
    T_CHECK(x && !memcmp(base, x, bytes), "%s: 1 and 2 threads: bit-identical", fam);
    free(x);
    x = ms_t_logits(dir, &o2, ids, N, 1, NULL);
    T_CHECK(x && !memcmp(base, x, bytes), "%s: token by token == one call, bit for bit", fam);
    free(x);
    x = ms_t_logits(dir, &o2, ids, N, 37, NULL);
    T_CHECK(x && !memcmp(base, x, bytes), "%s: chunks of 37 == one call, bit for bit", fam);
    free(x);
    if (ms_cpu_simd_available()) {
        ms_cpu_set_simd(0);
        x = ms_t_logits(dir, &o2, ids, N, 0, NULL);
        ms_cpu_set_simd(1);
        T_CHECK(x && !memcmp(base, x, bytes), "%s: scalar == SIMD, bit for bit", fam);
        free(x);
        if (ms_cpu_best_level() > MS_SIMD_AVX2) { /* the narrower path, forced on a wider machine */
            ms_cpu_set_level(MS_SIMD_AVX2);
            x = ms_t_logits(dir, &o2, ids, N, 0, NULL);
            ms_cpu_set_simd(1);
            T_CHECK(x && !memcmp(base, x, bytes), "%s: AVX2 == AVX-512, bit for bit", fam);
            free(x);
        }
    } else {
        ms_t_skip("%s: no AVX2+FMA on this CPU: scalar vs SIMD not compared", fam);
    }
    ms_run_opts ob = o2;
    ob.ram_budget = ms_t_least_budget(dir, ob, fam);
    ob.baseline = 1;
    ms_model *m = ms_families_open(dir, &ob);
    T_CHECK(m && ms_model_plan(m) && ms_model_plan(m)->streaming, "%s: the least budget streams the trunk: %s", fam,
            m ? "" : ms_err_msg());
    ms_model_free(m);
    x = ms_t_logits(dir, &ob, ids, N, 0, NULL);
    T_CHECK(x && !memcmp(base, x, bytes), "%s: the least budget (trunk streamed, experts read on demand) == no budget",
            fam);
    free(x);
    ms_run_opts op = o2;
    op.no_mmap = 1;
    op.prefetch = MS_PREFETCH_ON;
    ms_model_stats pst = {0};
    x = ms_t_logits(dir, &op, ids, N, 1, &pst);
    T_CHECK(x && !memcmp(base, x, bytes) && pst.expert_prefetched > 0 && pst.expert_prefetch_used <= pst.expert_prefetched,
            "%s: predicted routing: the same bits, %llu predicted reads, %llu used", fam,
            (unsigned long long)pst.expert_prefetched, (unsigned long long)pst.expert_prefetch_used);
    free(x);

    ms_run_opts os = o2;
    os.spec_window = 4;
    os.max_seqs = 3;
    m = ms_families_open(dir, &os);
    T_CHECK(m != NULL, "%s: open for batches: %s", fam, m ? "" : ms_err_msg());
    if (!m) {
        free(base);
        return;
    }
    float *lg = malloc(bytes), *ra = malloc(sizeof(float) * (size_t)(5 * V)), *rb = malloc(sizeof(float) * (size_t)(3 * V)),
          *rc = malloc(sizeof(float) * (size_t)(7 * V));
    ms_seq *a = ms_seq_new(m), *b = ms_seq_new(m), *c = ms_seq_new(m);
    int ok = ms_model_forward(m, a, ids, 130, 1, lg) == 0 && ms_model_forward(m, b, ids, 10, 1, lg) == 0;
    ms_batch_item it[3] = {{a, ids + 130, 5, 1, ra, 0}, {b, ids + 10, 3, 1, rb, 0}, {c, ids, 7, 1, rc, 0}};
    ok = ok && ms_model_forward_batch(m, it, 3) == 0;
    T_CHECK(ok && !memcmp(ra, base + 130 * V, sizeof(float) * (size_t)(5 * V)) &&
                !memcmp(rb, base + 10 * V, sizeof(float) * (size_t)(3 * V)) && !memcmp(rc, base, sizeof(float) * (size_t)(7 * V)),
            "%s: a batch of three sequences (positions 130, 10, 0) == each alone, bit for bit", fam);
    /* a at 135: a speculative pass of 4 rows, 2 kept; then a clone and a saved copy: all go on */
    ms_batch_item sp = {a, ids + 135, 4, 1, ra, 1};
    ok = ms_model_forward_batch(m, &sp, 1) == 0;
    ms_seq_keep(a, 2);
    ms_seq *snap = ms_seq_clone(a);
    ms_sbuf saved = {0};
    ms_seq_save(a, &saved);
    ms_seq *loaded = ms_seq_load(m, saved.s, saved.n);
    int64_t rest = N - 137;
    ms_seq *go[3] = {a, snap, loaded};
    const char *how[3] = {"the sequence", "its clone", "its saved and loaded state"};
    for (int k = 0; k < 3; k++) {
        int good = ok && go[k] && ms_model_forward(m, go[k], ids + 137, rest, 1, lg) == 0 &&
                   !memcmp(lg, base + 137 * V, sizeof(float) * (size_t)(rest * V));
        T_CHECK(good, "%s: after a settled speculative pass, %s continues bit for bit%s", fam, how[k],
                go[k] ? "" : ms_err_msg());
    }
    for (int k = 0; k < 3; k++) ms_seq_free(go[k]);
    ms_sbuf_free(&saved);
    ms_seq_free(b);
    ms_seq_free(c);
    free(ra);
    free(rb);
    free(rc);
    free(lg);
    ms_model_free(m);
    free(base);
}

/* The CLI: 2 local workers = in process; --speculate 4 with drafts half right = off; a checkpoint
 * sharded into 2 packs served by pack workers = in process. */
static void check_cli(const char *fam, const char *dir)
{
    char bin[1024], a[1200], b[1200], *js = NULL;
    snprintf(bin, sizeof bin, "%s", ms_t_bin("moestream"));
    snprintf(a, sizeof a, "%s/inproc.bin", ms_t_tmpdir("conf-a"));
    snprintf(b, sizeof b, "%s/workers.bin", ms_t_tmpdir("conf-b"));
    const char *ids = "3,1,4,1,5,9,2,6";
    int s1 = ms_t_runf(NULL, NULL, "%s run --model %s --ids %s -n 6 --quiet --dump-logits %s", bin, dir, ids, a);
    int s2 = ms_t_runf(NULL, NULL, "%s run --model %s --ids %s -n 6 --quiet --dump-logits %s --local-workers 2", bin, dir,
                       ids, b);
    T_CHECK(s1 == 0 && s2 == 0 && ms_t_same_file(a, b), "%s: 2 local workers == in process, bit for bit (status %d, %d)",
            fam, s1, s2);

    char dfile[1200], s0[1200], s4[1200], *gen = NULL;
    snprintf(dfile, sizeof dfile, "%s/drafts.txt", ms_t_tmpdir("conf-drafts"));
    snprintf(s0, sizeof s0, "%s/spec0.bin", ms_t_tmpdir("conf-spec0"));
    snprintf(s4, sizeof s4, "%s/spec4.bin", ms_t_tmpdir("conf-spec4"));
    ms_t_runf(&gen, NULL, "%s run --model %s --ids %s -n 24 --quiet --json", bin, dir, ids);
    json_error_t je;
    json_t *gj = gen ? json_loads(gen, 0, &je) : NULL, *g = json_object_get(gj, "generated_ids");
    FILE *df = fopen(dfile, "w");
    for (size_t i = 0; df && i < json_array_size(g); i++) /* the run's own continuation, every 4th wrong */
        fprintf(df, "%s%lld", i ? "," : "", (long long)(i % 4 == 3 ? 0 : json_integer_value(json_array_get(g, i))));
    if (df) fclose(df);
    json_decref(gj);
    free(gen);
    int r0 = ms_t_runf(NULL, NULL, "%s run --model %s --ids %s -n 24 --quiet --dump-logits %s", bin, dir, ids, s0);
    int r4 = ms_t_runf(&js, NULL, "%s run --model %s --ids %s -n 24 --quiet --json --dump-logits %s --speculate 4 "
                       "--draft-file %s", bin, dir, ids, s4, dfile);
    json_t *j = js ? json_loads(js, 0, &je) : NULL, *st = json_object_get(j, "stats");
    json_int_t drafted = json_integer_value(json_object_get(st, "draft_tokens"));
    json_int_t accepted = json_integer_value(json_object_get(st, "accepted_draft_tokens"));
    T_CHECK(r0 == 0 && r4 == 0 && ms_t_same_file(s0, s4) && drafted > accepted && accepted > 0,
            "%s: --speculate 4 == off, bit for bit, with %lld drafts verified, %lld accepted", fam, (long long)drafted,
            (long long)accepted);
    json_decref(j);
    free(js);

    /* the checkpoint's own draft head where its config has one (DeepSeek-V3's MTP layer): == off;
     * elsewhere --draft mtp is refused, naming what is missing */
    char cfgp[4200], sm[1200], *err = NULL;
    snprintf(cfgp, sizeof cfgp, "%s/config.json", dir);
    json_t *cj = json_load_file(cfgp, 0, &je);
    int head = json_integer_value(json_object_get(cj, "num_nextn_predict_layers")) > 0;
    json_decref(cj);
    snprintf(sm, sizeof sm, "%s/specm.bin", ms_t_tmpdir("conf-specm"));
    js = NULL;
    int rm = ms_t_runf(&js, &err, "%s run --model %s --ids %s -n 24 --quiet --json --dump-logits %s --speculate 4 "
                       "--draft mtp", bin, dir, ids, sm);
    j = js ? json_loads(js, 0, &je) : NULL;
    st = json_object_get(j, "stats");
    if (head)
        T_CHECK(rm == 0 && ms_t_same_file(s0, sm) && json_integer_value(json_object_get(st, "draft_tokens")) > 0 &&
                    !strcmp(json_string_value(json_object_get(st, "draft_source")) ? json_string_value(json_object_get(st, "draft_source")) : "", "mtp"),
                "%s: --speculate 4 --draft mtp (its MTP layer's drafts) == off, bit for bit (status %d: %s)", fam, rm,
                err ? err : "");
    else
        T_CHECK(rm == 2 && err && strstr(err, "has no draft head"), "%s: --draft mtp without a draft head is refused (status %d: %s)",
                fam, rm, err ? err : "");
    json_decref(j);
    free(js);
    free(err);
    if (head) { /* the MTP layer's routed experts computed by the workers, as the model's are */
        char sw[1200];
        snprintf(sw, sizeof sw, "%s/specmw.bin", ms_t_tmpdir("conf-specmw"));
        js = err = NULL;
        int rw = ms_t_runf(&js, &err, "%s run --model %s --ids %s -n 24 --quiet --json --dump-logits %s --speculate 4 "
                           "--draft mtp --local-workers 2", bin, dir, ids, sw);
        j = js ? json_loads(js, 0, &je) : NULL;
        st = json_object_get(j, "stats");
        T_CHECK(rw == 0 && ms_t_same_file(s0, sw) && json_integer_value(json_object_get(st, "draft_tokens")) > 0,
                "%s: --draft mtp beside 2 local workers == off, bit for bit (status %d: %s)", fam, rw, err ? err : "");
        json_decref(j);
        free(js);
        free(err);
    }

    char model[1200], packs[1200], c[1200];
    snprintf(model, sizeof model, "%s/m", ms_t_tmpdir("conf-shard"));
    snprintf(packs, sizeof packs, "%s/packs", ms_t_tmpdir("conf-shard-out"));
    snprintf(c, sizeof c, "%s/packs.bin", ms_t_tmpdir("conf-shard-logits"));
    int sh = ms_t_runf(NULL, NULL, "rm -rf %s && cp -r %s %s && %s shard --model %s --workers 2 --out %s 2>/dev/null", model,
                       dir, model, bin, model, packs);
    T_CHECK(sh == 0, "%s: shard into 2 packs (status %d)", fam, sh);
    ms_t_worker w[2];
    char pk[2][1300], ep[2][1500], sockp[2][700];
    const char *sd = ms_t_sockdir("conf");
    int ok = sh == 0, started = 0;
    for (int i = 0; i < 2 && ok; i++) {
        snprintf(pk[i], sizeof pk[i], "%s/worker-%d", packs, i);
        snprintf(sockp[i], sizeof sockp[i], "%s/w%d.sock", sd, i);
        snprintf(ep[i], sizeof ep[i], "ipc://%s", sockp[i]);
        char wb[1024];
        snprintf(wb, sizeof wb, "%s", ms_t_bin("moestream-worker"));
        const char *argv[] = {wb, "--pack", pk[i], "--listen", ep[i], "--quiet", NULL};
        ms_t_worker_opts wo = {.wait_path = sockp[i]};
        ok = ms_t_worker_start(&w[i], argv, &wo) == 0;
        started += ok;
    }
    T_CHECK(ok, "%s: two pack workers started", fam);
    if (ok) {
        char *err = NULL;
        int st2 = ms_t_runf(NULL, &err, "%s run --model %s/trunk --ids %s -n 6 --quiet --dump-logits %s --workers %s,%s", bin,
                            packs, ids, c, ep[0], ep[1]);
        T_CHECK(st2 == 0 && ms_t_same_file(a, c), "%s: the trunk with 2 pack workers == in process, bit for bit (status %d: %s)",
                fam, st2, err ? err : "");
        free(err);
        if (head) { /* the packs hold the MTP layer's experts too */
            err = NULL;
            int st3 = ms_t_runf(NULL, &err, "%s run --model %s/trunk --ids %s -n 24 --quiet --dump-logits %s --workers "
                                "%s,%s --speculate 4 --draft mtp", bin, packs, ids, c, ep[0], ep[1]);
            T_CHECK(st3 == 0 && ms_t_same_file(s0, c), "%s: --draft mtp with 2 pack workers == off, bit for bit (status %d: %s)",
                    fam, st3, err ? err : "");
            free(err);
        }
    }
    for (int i = 0; i < started; i++) ms_t_worker_kill(&w[i]);
}

/* A NaN in layer 0's first trunk matrix: the pass fails naming layer 0 (the pass's check after the
 * layer, or the expert store's of a non-finite input), no logits from it. */
static void check_nonfinite(const char *fam, const ms_family *f, const char *dir)
{
    char d[1200];
    snprintf(d, sizeof d, "%s/nan", ms_t_tmpdir("conf-nan"));
    int rc = ms_t_runf(NULL, NULL, "rm -rf %s && cp -r %s %s", d, dir, d);
    ms_st *st = rc == 0 ? ms_st_open_dir(d) : NULL;
    const ms_st_tensor **mats = NULL;
    int n = st && f->trunk_matrices ? f->trunk_matrices(d, st, &mats) : 0;
    const ms_st_tensor *t = NULL;
    for (int i = 0; i < n && !t; i++)
        if (strstr(mats[i]->name, "layers.0.") && mats[i]->dtype == MS_DT_BF16) t = mats[i];
    /* a checkpoint whose layer 0 is all FP8 (its trunk pack holds none of it): an FP8 NaN code */
    for (size_t i = 0; st && !t && i < ms_st_count(st); i++) {
        const ms_st_tensor *x = ms_st_at(st, i);
        if (strstr(x->name, "layers.0.") && x->dtype == MS_DT_F8_E4M3 && x->ndim == 2) t = x;
    }
    int poisoned = 0;
    if (t) {
        FILE *fp = fopen(ms_st_file_path(st, t->file), "r+b");
        uint16_t nan = 0x7fc0;
        uint8_t nan8 = 0x7f;
        poisoned = fp && fseek(fp, (long)t->offset, SEEK_SET) == 0 &&
                   (t->dtype == MS_DT_BF16 ? fwrite(&nan, 2, 1, fp) : fwrite(&nan8, 1, 1, fp)) == 1;
        if (fp && fclose(fp) != 0) poisoned = 0;
    }
    T_CHECK(poisoned, "%s: a NaN written into layer 0's first trunk matrix (%s)", fam, t ? t->name : "none found");
    free(mats);
    ms_st_close(st);
    if (!poisoned) return;
    ms_run_opts o = {.n_threads = 2, .max_positions = 16};
    ms_model *m = ms_families_open(d, &o);
    T_CHECK(m != NULL, "%s: open the poisoned checkpoint: %s", fam, m ? "" : ms_err_msg());
    if (!m) return;
    int64_t V = ms_model_get_info(m)->vocab;
    float *lg = malloc(sizeof(float) * (size_t)(3 * V));
    ms_seq *s = ms_seq_new(m);
    int32_t ids[3] = {5, 6, 7};
    rc = ms_model_forward(m, s, ids, 3, 1, lg);
    const char *e = ms_err_msg(); /* the pass's check, or the expert store's of its input */
    T_CHECK(rc == -1 && strstr(e, "layer 0") && (strstr(e, "non-finite") || strstr(e, "not finite")),
            "%s: the pass fails naming layer 0 (%d: %s)", fam, rc, ms_err_msg());
    free(lg);
    ms_seq_free(s);
    ms_model_free(m);
}

int main(void)
{
    ms_log_set_level(0);
    T_CHECK(ms_families_count() >= 2, "at least two families registered (%d)", ms_families_count());
    for (int i = 0; i < ms_families_count(); i++) {
        const ms_family *f = ms_families_at(i);
        if (!f->synth || !f->demo_preset) {
            T_CHECK(0, "family %s has a synth preset (the suite needs one)", f->name);
            continue;
        }
        /* the demo preset, then the family's other weight formats */
        for (int k = -1; k < 0 || (f->format_presets && f->format_presets[k]); k++) {
            const char *preset = k < 0 ? f->demo_preset : f->format_presets[k];
            char dir[1200];
            snprintf(dir, sizeof dir, "%s/m", ms_t_tmpdir(preset));
            if (f->synth(dir, preset, 0, 0, 7) != 0) {
                T_CHECK(0, "%s: synth %s: %s", f->name, preset, ms_err_msg());
                continue;
            }
            ms_model_info info;
            if (f->peek(dir, &info) != 0) {
                T_CHECK(0, "%s: peek: %s", preset, ms_err_msg());
                continue;
            }
            check_model(preset, dir, info.vocab);
            check_cli(preset, dir);
            check_nonfinite(preset, f, dir);
        }
    }
    return ms_t_done();
}
