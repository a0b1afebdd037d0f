/* test_cli: the moestream command line end to end (run, demo, tokenize, detokenize, synth). */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_clock.h"
#include "ms_test.h"

static char bin[4096];

static json_t *run_json(const char *args, int *status)
{
    char cmd[16384], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s %s", bin, args);
    *status = ms_t_run(cmd, &out);
    json_error_t je;
    json_t *j = out ? json_loads(out, 0, &je) : NULL;
    if (!j) fprintf(stderr, "no JSON from: %s\n%s\n", cmd, out ? out : "");
    free(out);
    return j;
}

static int status_of(const char *args)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s %s >/dev/null 2>&1", bin, args);
    return ms_t_run(cmd, NULL);
}

static char *stderr_of(const char *args)
{
    char cmd[16384], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s %s 2>&1 >/dev/null", bin, args);
    ms_t_run(cmd, &out);
    return out;
}

static void test_usage(void)
{
    T_CHECK(status_of("") == 2, "no command: exit 2");
    T_CHECK(status_of("frobnicate") == 2, "unknown command: exit 2");
    T_CHECK(status_of("--help") == 0, "--help: exit 0");
    char *v1 = NULL, *v2 = NULL, *h = NULL;
    T_CHECK(ms_t_runf(&v1, NULL, "%s --version", bin) == 0 && v1 && !strncmp(v1, "moestream ", 10),
            "--version: %s", v1 ? v1 : "");
    T_CHECK(ms_t_runf(&v2, NULL, "%s --version", ms_t_bin("moestream-worker")) == 0 && v2 && v1 &&
                !strncmp(v2, "moestream-worker ", 17) && !strcmp(v2 + 17, v1 + 10),
            "moestream-worker --version: the same version: %s", v2 ? v2 : "");
    T_CHECK(ms_t_runf(&h, NULL, "%s --help", bin) == 0 && h && strstr(h, "--version"), "--help names --version");
    free(v1);
    free(v2);
    free(h);
    const char *cmds[] = {"run", "demo", "tokenize", "detokenize", "synth"};
    for (int i = 0; i < 5; i++) {
        char a[64];
        snprintf(a, sizeof a, "%s --help", cmds[i]);
        T_CHECK(status_of(a) == 0, "%s --help: exit 0", cmds[i]);
    }
    T_CHECK(status_of("run --ids 1,2") == 2, "run without --model: exit 2");
    T_CHECK(status_of("run --model /nonexistent --ids 1 --prompt x") == 2, "two prompt sources: exit 2");
    T_CHECK(status_of("run --model /nonexistent --ids 1 -n -3") == 2, "negative -n: exit 2");
    T_CHECK(status_of("run --model /nonexistent --ids 1 --top-p 0") == 2, "top-p 0: exit 2");
    T_CHECK(status_of("run --model /nonexistent --ids 1,x") != 0, "bad id list refused");
    int st = status_of("run --model /nonexistent/model --ids 1");
    T_CHECK(st == 4, "missing model dir (config.json cannot be opened): exit 4 (I/O), got %d", st);
    char *e = stderr_of("run --model /nonexistent/model --ids 1");
    T_CHECK(e && strstr(e, "/nonexistent/model"), "message names the path: %s", e ? e : "");
    free(e);
    st = status_of("run --model /nonexistent/model --prompt hello");
    e = stderr_of("run --model /nonexistent/model --prompt hello");
    T_CHECK(st == 4 && e && strstr(e, "cannot open") && !strstr(e, "tokenizer"),
            "missing model with a text prompt: exit 4 'cannot open', not 'has no tokenizer' (%d): %s", st, e ? e : "");
    free(e);
}

static void test_synth_run(void)
{
    const char *d = ms_t_tmpdir("cli");
    char dir[4096], a[16384], f1[4200], f2[4200], f3[4200];
    snprintf(dir, sizeof dir, "%s/m", d);
    snprintf(a, sizeof a, "synth --out %s --seed 5", dir);
    T_CHECK(status_of(a) == 0, "synth writes a checkpoint");
    int st;
    snprintf(f1, sizeof f1, "%s/l1.bin", d);
    snprintf(a, sizeof a, "run --model %s --ids 5,6,7,8,9,10 -n 6 --json --threads 1 --dump-logits %s", dir, f1);
    json_t *j = run_json(a, &st);
    T_CHECK(st == 0 && j, "run --json succeeds (status %d)", st);
    if (j) {
        T_CHECK(json_array_size(json_object_get(j, "prompt_ids")) == 6, "prompt_ids echoed");
        T_CHECK(json_array_size(json_object_get(j, "generated_ids")) == 6, "6 generated ids");
        T_CHECK(json_is_string(json_object_get(j, "text")), "text present with a tokenizer");
        json_t *stats = json_object_get(j, "stats");
        T_CHECK(json_is_object(stats) && json_object_get(stats, "decode_tokens_per_second") &&
                    json_object_get(stats, "prefill_seconds"),
                "stats has times and tokens/s");
    }
    size_t len = 0;
    char *buf = ms_t_read_file(f1, &len);
    T_CHECK(buf && len == (size_t)(6 + 6 - 1) * 512 * 4, "dump has prompt + n - 1 rows of vocab f32 (%zu bytes)", len);
    /* The greedy token at each step is the argmax of the dumped row that chose it. */
    if (buf && j && len == (size_t)11 * 512 * 4) {
        const float *rows = (const float *)buf;
        int ok = 1;
        for (int t = 0; t < 6; t++) {
            const float *r = rows + (size_t)(5 + t) * 512;
            int best = 0;
            for (int i = 1; i < 512; i++)
                if (r[i] > r[best]) best = i;
            ok &= best == json_integer_value(json_array_get(json_object_get(j, "generated_ids"), (size_t)t));
        }
        T_CHECK(ok, "each generated id is the argmax of its dumped logits row");
    }
    free(buf);
    json_decref(j);
    /* Invariants through the CLI: threads and SIMD do not change a bit. */
    snprintf(f2, sizeof f2, "%s/l2.bin", d);
    snprintf(a, sizeof a, "run --model %s --ids 5,6,7,8,9,10 -n 6 --json --threads 2 --dump-logits %s", dir, f2);
    json_decref(run_json(a, &st));
    T_CHECK(st == 0 && ms_t_same_file(f1, f2), "dumped logits identical with 1 and 2 threads");
    snprintf(f3, sizeof f3, "%s/l3.bin", d);
    char b[16500];
    snprintf(b, sizeof b, "env MS_NO_SIMD=1 %s run --model %s --ids 5,6,7,8,9,10 -n 6 --json --dump-logits %s",
             bin, dir, f3);
    T_CHECK(ms_t_run(b, NULL) == 0 && ms_t_same_file(f1, f3), "dumped logits identical with MS_NO_SIMD=1");
    /* Prompt text through the tokenizer; the text equals detokenize of the ids. */
    snprintf(a, sizeof a, "run --model %s --prompt 'Hello world, the weather' -n 5 --json", dir);
    j = run_json(a, &st);
    T_CHECK(st == 0 && j && json_array_size(json_object_get(j, "prompt_ids")) > 0, "run --prompt");
    if (j) {
        char ids[1024] = "";
        json_t *g = json_object_get(j, "generated_ids");
        for (size_t i = 0; i < json_array_size(g); i++)
            snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%lld", i ? "," : "",
                     (long long)json_integer_value(json_array_get(g, i)));
        snprintf(a, sizeof a, "detokenize --tokenizer %s --ids %s --json --skip-special", dir, ids);
        json_t *dj = run_json(a, &st);
        T_CHECK(dj && json_equal(json_object_get(dj, "text"), json_object_get(j, "text")),
                "run's text equals detokenize of generated_ids");
        json_decref(dj);
        snprintf(a, sizeof a, "tokenize --tokenizer %s --text 'Hello world, the weather' --json", dir);
        dj = run_json(a, &st);
        T_CHECK(dj && json_equal(json_object_get(dj, "ids"), json_object_get(j, "prompt_ids")),
                "tokenize gives run's prompt_ids");
        json_decref(dj);
    }
    json_decref(j);
    /* Sampling is reproducible per seed. */
    snprintf(a, sizeof a, "run --model %s --ids 1,2,3 -n 8 --temperature 0.9 --top-p 0.9 --seed 11 --json", dir);
    json_t *s1 = run_json(a, &st), *s2 = run_json(a, &st);
    T_CHECK(s1 && s2 && json_equal(json_object_get(s1, "generated_ids"), json_object_get(s2, "generated_ids")),
            "same seed, same sampled tokens");
    json_decref(s1);
    json_decref(s2);
    /* Out-of-vocabulary id and a prompt without a tokenizer are refused clearly. */
    snprintf(a, sizeof a, "run --model %s --ids 1,99999", dir);
    T_CHECK(status_of(a) == 5, "out-of-vocabulary id: exit 5");
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "rm -f '%s/tiktoken.model'", dir);
    T_CHECK(system(cmd) == 0, "remove tokenizer");
    snprintf(a, sizeof a, "run --model %s --prompt hi", dir);
    char *e = stderr_of(a);
    T_CHECK(status_of(a) == 2 && e && strstr(e, "--ids"), "--prompt without tokenizer refused, suggests --ids: %s",
            e ? e : "");
    free(e);
    snprintf(a, sizeof a, "run --model %s --ids 1,2 -n 2 --json", dir);
    j = run_json(a, &st);
    T_CHECK(st == 0 && j && !json_object_get(j, "text"), "--ids works without a tokenizer, no text field");
    json_decref(j);
    /* A truncated shard is refused, naming the file. */
    snprintf(cmd, sizeof cmd, "truncate -s 5000 '%s/model-00001-of-000002.safetensors'", dir);
    T_CHECK(system(cmd) == 0, "truncate shard");
    snprintf(a, sizeof a, "run --model %s --ids 1,2", dir);
    e = stderr_of(a);
    st = status_of(a);
    T_CHECK(st == 3, "truncated shard: exit 3 (malformed shard), got %d", st);
    T_CHECK(e && strstr(e, "model-00001-of-000002.safetensors"), "message names the shard: %s", e ? e : "");
    free(e);
}

static void test_demo(void)
{
    const char *d = ms_t_tmpdir("cli-demo");
    char a[8400];
    snprintf(a, sizeof a, "demo --model %s/m -n 4 --json", d);
    int st;
    json_t *j = run_json(a, &st);
    T_CHECK(st == 0 && j && json_array_size(json_object_get(j, "generated_ids")) == 4, "demo runs end to end");
    json_decref(j);
    /* a scratch directory asked for that is not there: exit 4 naming it */
    snprintf(a, sizeof a, "run --model %s/m --ids 1,2,3 -n 1 --scratch-dir /nonexistent/scratch", d);
    st = status_of(a);
    char *se = stderr_of(a);
    T_CHECK(st == 4 && se && strstr(se, "/nonexistent/scratch"), "--scratch-dir missing: exit %d (4): %s", st, se ? se : "");
    free(se);

    /* What a terminal shows: the prompt, then the text as valid UTF-8 (random weights give broken
     * sequences); --quiet: only the text; --raw: the tokens' bytes as they are. */
    snprintf(a, sizeof a, "demo --model %s/m -n 24 --json", d);
    j = run_json(a, &st);
    const char *text = json_string_value(json_object_get(j, "text"));
    char ids[2048] = "";
    json_t *g = json_object_get(j, "generated_ids");
    for (size_t i = 0; i < json_array_size(g); i++)
        snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%lld", i ? "," : "",
                 (long long)json_integer_value(json_array_get(g, i)));
    char *quiet = NULL, *plain = NULL, *raw = NULL, *detok = NULL, *err = NULL;
    int s1 = ms_t_runf(&quiet, &err, "%s demo --model %s/m -n 24 --quiet", bin, d);
    T_CHECK(s1 == 0 && err && !*err, "demo --quiet: exit %d, nothing on stderr: %s", s1, err ? err : "");
    free(err);
    int s2 = ms_t_runf(&plain, NULL, "%s demo --model %s/m -n 24 2>/dev/null", bin, d);
    int s3 = ms_t_runf(&raw, NULL, "%s demo --model %s/m -n 24 --quiet --raw", bin, d);
    int s4 = ms_t_runf(&detok, NULL, "%s detokenize --tokenizer %s/m --ids %s --skip-special", bin, d, ids);
    T_CHECK(text && quiet && s1 == 0 && strlen(quiet) == strlen(text) + 1 && !strncmp(quiet, text, strlen(text)) &&
                quiet[strlen(text)] == '\n',
            "demo --quiet prints the generated text (valid UTF-8, as --json's text) and a newline: '%s'",
            quiet ? quiet : "");
    const char *pr = "The weather today is";
    T_CHECK(s2 == 0 && plain && quiet && !strncmp(plain, pr, strlen(pr)) && !strcmp(plain + strlen(pr), quiet),
            "demo prints the prompt, then the text: '%s'", plain ? plain : "");
    T_CHECK(s3 == 0 && s4 == 0 && raw && detok && !strcmp(raw, detok) && strcmp(raw, quiet),
            "--raw prints the tokens' bytes (= detokenize and its newline), which here differ from the repaired text");
    free(quiet);
    free(plain);
    free(raw);
    free(detok);
    json_decref(j);
}

/* Issue 12: lost output is an I/O error; an empty id item is refused; I/O failures exit 4. */

/* Run with stdout on /dev/full (a full disk); returns the status, stderr in *err (malloc'ed). */
static int status_full(const char *prog, const char *args, char **err)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1 >/dev/full", prog, args);
    return ms_t_run(cmd, err);
}

static void test_lost_output(void)
{
    const char *d = ms_t_tmpdir("cli-io");
    char a[8400], *e = NULL;
    snprintf(a, sizeof a, "synth --out %s/m --seed 3", d);
    T_CHECK(status_of(a) == 0, "synth for the I/O checks");
    const char *want = "cannot write to standard output: No space left on device";

    snprintf(a, sizeof a, "tokenize --tokenizer %s/m --text 'Hello world'", d);
    int st = status_full(bin, a, &e);
    T_CHECK(st == 4 && e && strstr(e, want), "tokenize > /dev/full: exit %d (want 4), stderr: %s", st, e ? e : "");
    free(e);
    /* More output than one stdio buffer: the failure happens before the final flush. */
    snprintf(a, sizeof a, "tokenize --tokenizer %s/m --file %s/m/tiktoken.model", d, d);
    st = status_full(bin, a, &e);
    T_CHECK(st == 4 && e && strstr(e, want), "tokenize of a long file > /dev/full: exit %d, stderr: %s", st, e ? e : "");
    free(e);
    snprintf(a, sizeof a, "run --model %s/m --ids 5,6,7 -n 2 --json", d);
    st = status_full(bin, a, &e);
    T_CHECK(st == 4 && e && strstr(e, want), "run --json > /dev/full: exit %d (want 4), stderr: %s", st, e ? e : "");
    free(e);
    snprintf(a, sizeof a, "run --model %s/m --ids 5,6,7 -n 2", d);
    st = status_full(bin, a, &e);
    T_CHECK(st == 4 && e && strstr(e, want), "run (streamed ids) > /dev/full: exit %d, stderr: %s", st, e ? e : "");
    free(e);
    snprintf(a, sizeof a, "detokenize --tokenizer %s/m --ids 72,101", d);
    st = status_full(bin, a, &e);
    T_CHECK(st == 4 && e && strstr(e, want), "detokenize > /dev/full: exit %d, stderr: %s", st, e ? e : "");
    free(e);
    st = status_full(bin, "--help", &e);
    T_CHECK(st == 4 && e && strstr(e, want), "--help > /dev/full: exit %d, stderr: %s", st, e ? e : "");
    free(e);
    st = status_full(ms_t_bin("moestream-worker"), "--help", &e);
    T_CHECK(st == 4 && e && strstr(e, want), "moestream-worker --help > /dev/full: exit %d, stderr: %s", st,
            e ? e : "");
    free(e);
    /* An error exit keeps its own code when stdout is full too. */
    snprintf(a, sizeof a, "run --model %s/m --ids 1,99999 --json", d);
    st = status_full(bin, a, &e);
    T_CHECK(st == 5, "out-of-vocabulary id with stdout full: exit %d, want 5", st);
    free(e);
    /* The same commands succeed when the output has somewhere to go. */
    snprintf(a, sizeof a, "tokenize --tokenizer %s/m --file %s/m/tiktoken.model", d, d);
    T_CHECK(status_of(a) == 0, "tokenize > /dev/null: exit 0");

    /* Empty items of an id list are refused, naming the item. */
    static const struct {
        const char *ids, *msg;
    } bad[] = {{"1,,3", "empty item 2"}, {",1", "empty item 1"}, {"1,2,", "empty item 3"}, {"1, ,2", "empty item 2"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(a, sizeof a, "detokenize --tokenizer %s/m --ids '%s'", d, bad[i].ids);
        e = stderr_of(a);
        st = status_of(a);
        T_CHECK(st == 2 && e && strstr(e, bad[i].msg), "--ids '%s': exit %d (want 2), stderr: %s", bad[i].ids, st,
                e ? e : "");
        free(e);
        snprintf(a, sizeof a, "run --model %s/m --ids '%s' -n 1", d, bad[i].ids);
        T_CHECK(status_of(a) == 2, "run --ids '%s': exit 2", bad[i].ids);
    }
    snprintf(a, sizeof a, "detokenize --tokenizer %s/m --ids ' 72 , 101 102'", d);
    T_CHECK(status_of(a) == 0, "ids separated by commas and blanks are accepted");

    /* An unopenable tokenizer file is an I/O error (4), a malformed one bad input (5). */
    snprintf(a, sizeof a, "tokenize --tokenizer %s/no-such-dir --text hi", d);
    e = stderr_of(a);
    st = status_of(a);
    T_CHECK(st == 4 && e && strstr(e, "no-such-dir/tiktoken.model"), "missing tokenizer: exit %d (want 4): %s", st,
            e ? e : "");
    free(e);
    char cmd[8600];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/t2", d);
    T_CHECK(ms_t_run(cmd, NULL) == 0, "mkdir t2");
    snprintf(cmd, sizeof cmd, "printf 'not base64\\n' > %s/t2/tiktoken.model", d);
    T_CHECK(ms_t_run(cmd, NULL) == 0, "malformed tokenizer");
    snprintf(a, sizeof a, "tokenize --tokenizer %s/t2 --text hi", d);
    T_CHECK(status_of(a) == 5, "malformed tiktoken.model: exit 5");
}

/* The small preset: real sharding, 256 MXFP4 experts a layer, 4096-id tokenizer. */
static void test_small_preset(void)
{
    const char *d = ms_t_tmpdir("cli-small");
    char a[8400];
    snprintf(a, sizeof a, "synth --preset small --out %s/m --seed 2", d);
    T_CHECK(status_of(a) == 0, "synth --preset small");
    snprintf(a, sizeof a, "run --model %s/m --prompt 'Rain later today' -n 3 --json", d);
    int st;
    json_t *j = run_json(a, &st);
    T_CHECK(st == 0 && j && json_array_size(json_object_get(j, "generated_ids")) == 3, "small preset runs");
    json_decref(j);
    /* Memory that is there is used: with no budget the cache holds every expert, and from the
     * first step (a 300-token prompt touches most of them before a paced grower could have
     * faulted them in): no eviction, so no expert is read twice, in both I/O modes. */
    char ids[2400];
    int at = 0;
    for (int i = 0; i < 300; i++) at += snprintf(ids + at, sizeof ids - (size_t)at, "%s%d", i ? "," : "", (i * 977 + 13) % 4000 + 1);
    for (int buffered = 0; buffered < 2; buffered++) {
        snprintf(a, sizeof a, "run --model %s/m --ids %s -n 2 --json --expert-prefetch off%s", d, ids,
                 buffered ? " --buffered-io" : "");
        j = run_json(a, &st);
        json_t *s = json_object_get(j, "stats");
        json_int_t ev = json_integer_value(json_object_get(s, "expert_cache_evictions")),
                   mi = json_integer_value(json_object_get(s, "expert_cache_misses")),
                   rd = json_integer_value(json_object_get(s, "bytes_read_experts")),
                   eb = json_integer_value(json_object_get(s, "expert_bytes"));
        T_CHECK(st == 0 && s && ev == 0 && mi > 256 && rd <= mi * (eb + 8192),
                "no budget%s: %lld expert misses, %lld evictions, %lld bytes read (experts of %lld)",
                buffered ? ", buffered I/O" : "", (long long)mi, (long long)ev, (long long)rd, (long long)eb);
        json_decref(j);
    }
    /* The trunk pack never costs bytes: at (1 MiB above) the least budget that runs with it, the
     * run with the pack reads no more trunk than the same run without (its identity check's
     * transient memory once made the plan pin less; and a plan without the pack is taken when it
     * streams less). The MiB covers the resident baseline's run-to-run noise (~0.3 MiB; it was
     * 4 MiB before the parse's freed heap went back to the system), so no run is refused. */
    snprintf(a, sizeof a, "pack-trunk --model %s/m --out %s/m.trunk-pack --quiet", d, d);
    T_CHECK(status_of(a) == 0, "pack-trunk small");
    snprintf(a, sizeof a, "run --model %s/m --ids 1 --ram-budget 1", d);
    char *refusal = stderr_of(a);
    const char *least = refusal ? strstr(refusal, "would work is about") : NULL;
    least = least ? strchr(least, '(') : NULL;
    unsigned long long minb = least ? strtoull(least + 1, NULL, 10) : 0;
    free(refusal);
    json_int_t tr[2] = {-1, -1};
    for (int none = 0; none < 2 && minb; none++) {
        snprintf(a, sizeof a, "run --model %s/m --ids 1,2,3,4,5,6,7,8 -n 8 --ram-budget %llu --json%s", d, minb + (1u << 20),
                 none ? " --trunk-pack none" : "");
        j = run_json(a, &st);
        tr[none] = st == 0 ? json_integer_value(json_object_get(json_object_get(j, "stats"), "bytes_read_trunk")) : -1;
        json_decref(j);
    }
    T_CHECK(minb && tr[0] >= 0 && tr[1] >= 0 && tr[0] <= tr[1], "least budget with the pack (%llu): %lld trunk bytes "
            "read with it, %lld without", minb, (long long)tr[0], (long long)tr[1]);
    snprintf(a, sizeof a, "run --model %s/m --ids 1 --prefill-mixed 0", d);
    T_CHECK(status_of(a) == 2, "--prefill-mixed 0 refused (off, auto or a count)");
    snprintf(a, sizeof a, "synth --preset k3-slice --layers 0 --out %s/x", d);
    T_CHECK(status_of(a) == 2, "--layers 0 refused");
    snprintf(a, sizeof a, "synth --preset nope --out %s/x", d);
    T_CHECK(status_of(a) == 2, "unknown preset refused");
    /* Issue 16, defect 6: an existing checkpoint is not overwritten unless --force */
    char cfg[4300];
    snprintf(cfg, sizeof cfg, "%s/m/config.json", d);
    size_t l0 = 0;
    char *before = ms_t_read_file(cfg, &l0);
    snprintf(a, sizeof a, "synth --out %s/m --seed 9", d);
    char *e = stderr_of(a);
    T_CHECK(status_of(a) == 2 && e && strstr(e, "not empty") && strstr(e, "--force"),
            "synth into an existing checkpoint: exit 2 naming --force: %s", e ? e : "");
    free(e);
    size_t l1 = 0;
    char *after = ms_t_read_file(cfg, &l1);
    T_CHECK(before && after && l0 == l1 && !memcmp(before, after, l0), "and its config.json is untouched");
    free(after);
    snprintf(a, sizeof a, "synth --out %s/m --seed 9 --force", d);
    T_CHECK(status_of(a) == 0, "--force writes over it");
    after = ms_t_read_file(cfg, &l1);
    T_CHECK(after && (l0 != l1 || memcmp(before, after, l0)), "with the tiny preset's config now");
    free(after);
    free(before);
    snprintf(a, sizeof a, "synth --out %s/m/config.json", d);
    T_CHECK(status_of(a) == 2, "--out a file: exit 2");
}

/* --trace records every routed-expert request; layer-major prefill reads each routed expert at
 * most once per layer per chunk (the byte counter agrees with the distinct experts per call). */
static void test_trace(void)
{
    const char *d = ms_t_tmpdir("cli-trace");
    char a[8400], tr[4200];
    snprintf(a, sizeof a, "synth --out %s/m --seed 4", d);
    T_CHECK(status_of(a) == 0, "synth");
    snprintf(tr, sizeof tr, "%s/run.trace", d);
    char ids[256] = "";
    for (int i = 0; i < 20; i++) snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%d", i ? "," : "", 7 * i + 3);
    /* a cache of top-k slots only: the minimum the planner accepts, so nearly every use is a read */
    snprintf(a, sizeof a, "run --model %s/m --ids %s -n 4 --prefill-chunk 8 --ram-budget 1K --json", d, ids);
    char *e = stderr_of(a);
    const char *p = e ? strrchr(e, '(') : NULL;
    unsigned long long minb = p ? strtoull(p + 1, NULL, 10) : 0;
    free(e);
    T_CHECK(minb > 0, "the refusal names the minimum in bytes");
    /* --speculate off, --prefill-span off: the pass structure below is chunks, then one token per
     * step; --mmap off: the cache this budget gives holds every expert, which would otherwise be
     * used in place (test_mapped), and this checks what reads cost */
    snprintf(a, sizeof a, "run --model %s/m --ids %s -n 4 --prefill-chunk 8 --prefill-span off --ram-budget %llu --trace %s --json --speculate off --mmap off", d,
             ids, minb + (minb >> 3), tr);
    int st;
    json_t *j = run_json(a, &st);
    T_CHECK(st == 0 && j, "run with --trace (status %d)", st);
    size_t len = 0;
    int32_t *t = (int32_t *)ms_t_read_file(tr, &len);
    /* tiny preset: layers 1..5 are MoE, top-2; prefill chunks 8, 8, 4, then 3 decode steps */
    const int moe_layers = 5, k = 2, calls[] = {8, 8, 4, 1, 1, 1};
    size_t want = 0;
    for (int c = 0; c < 6; c++) want += (size_t)calls[c] * k * moe_layers;
    T_CHECK(t && len == want * 8, "trace has one (layer, expert) pair per request: %zu bytes, want %zu", len, want * 8);
    if (t && j && len == want * 8) {
        size_t at = 0, distinct = 0;
        int layers_ok = 1;
        for (int c = 0; c < 6; c++)
            for (int l = 1; l <= moe_layers; l++) {
                int seen[64] = {0};
                for (int r = 0; r < calls[c] * k; r++, at++) {
                    layers_ok &= t[2 * at] == l && t[2 * at + 1] >= 0 && t[2 * at + 1] < 8;
                    if (t[2 * at + 1] >= 0 && t[2 * at + 1] < 64 && !seen[t[2 * at + 1]]++) distinct++;
                }
            }
        T_CHECK(layers_ok, "trace pairs are (MoE layer in order, valid expert)");
        json_t *s = json_object_get(j, "stats");
        unsigned long long br = (unsigned long long)json_integer_value(json_object_get(s, "bytes_read_experts"));
        unsigned long long eb = (unsigned long long)json_integer_value(json_object_get(s, "expert_bytes"));
        unsigned long long miss = (unsigned long long)json_integer_value(json_object_get(s, "expert_cache_misses"));
        unsigned long long hits = (unsigned long long)json_integer_value(json_object_get(s, "expert_cache_hits"));
        /* predicted reads (--expert-prefetch, on by default) that no layer used were read too */
        unsigned long long pf = (unsigned long long)json_integer_value(json_object_get(s, "expert_prefetched"));
        unsigned long long pfu = (unsigned long long)json_integer_value(json_object_get(s, "expert_prefetch_used"));
        unsigned long long unused = pf >= pfu ? pf - pfu : 0;
        T_CHECK(pfu <= pf && pfu <= miss, "predicted reads used (%llu) <= issued (%llu) and <= misses (%llu)", pfu, pf,
                miss);
        T_CHECK(eb > 0 && br == (miss + unused) * eb,
                "bytes read = (misses + unused predicted reads) x expert bytes (%llu = (%llu + %llu) x %llu)", br, miss,
                unused, eb);
        T_CHECK(hits + miss == distinct, "each distinct expert of a layer call is looked up once: %llu + %llu vs %zu",
                hits, miss, distinct);
        T_CHECK(br - unused * eb <= distinct * eb,
                "at most one read per expert per layer per chunk, besides unused predictions (%llu <= %zu)",
                br - unused * eb, (size_t)(distinct * eb));
    }
    free(t);
    json_decref(j);
    /* the same run with a full cache: identical tokens */
    snprintf(a, sizeof a, "run --model %s/m --ids %s -n 4 --json", d, ids);
    json_t *j2 = run_json(a, &st);
    snprintf(a, sizeof a, "run --model %s/m --ids %s -n 4 --prefill-chunk 8 --ram-budget %llu --json", d, ids,
             minb + (minb >> 3));
    json_t *j3 = run_json(a, &st);
    T_CHECK(j2 && j3 && json_equal(json_object_get(j2, "generated_ids"), json_object_get(j3, "generated_ids")),
            "same tokens at the smallest budget and with everything in memory");
    json_decref(j2);
    json_decref(j3);
    T_CHECK(status_of("run --model /x --ids 1 --ram-budget 12Q") == 2, "a bad size is a usage error");
    T_CHECK(status_of("run --model /x --ids 1 --mmap sometimes") == 2, "--mmap takes auto or off: a usage error");
}

/* The small preset under a memory cgroup whose limit equals the budget: not killed, RSS within. */
static void test_cgroup_budget(void)
{
#ifdef __SANITIZE_ADDRESS__
    ms_t_skip("AddressSanitizer build: its shadow memory and quarantine are not the program's, so the cgroup "
              "RSS bound is checked in the plain build only");
    return;
#endif
    const char *d = ms_t_tmpdir("cli-cgroup");
    char a[8400], cmd[16800], rep[4200];
    snprintf(a, sizeof a, "synth --preset small --out %s/m --seed 3", d);
    T_CHECK(status_of(a) == 0, "synth small");
    snprintf(rep, sizeof rep, "%s/cgroup.txt", d);
    snprintf(cmd, sizeof cmd,
             "bash %s/tests/cgroup-run.sh %llu %s %s run --model %s/m --prompt 'Rain later, then sun and wind "
             "from the north west' -n 6 --ram-budget 256M --json",
             getenv("MS_SOURCE_DIR") ? getenv("MS_SOURCE_DIR") : "..", 256ull << 20, rep, bin, d);
    char *out = NULL;
    int st = ms_t_run(cmd, &out);
    if (st == 77) {
        ms_t_skip("memory cgroups cannot be created here (needs root and a memory controller): cgroup limit check");
        free(out);
        return;
    }
    json_error_t je;
    json_t *j = out ? json_loads(out, 0, &je) : NULL;
    T_CHECK(st == 0 && j, "small preset at --ram-budget 256M under a 256 MiB cgroup: exit %d", st);
    char *r = ms_t_read_file(rep, NULL);
    T_CHECK(r && strstr(r, "oom_kills=0"), "no OOM kill in the cgroup: %s", r ? r : "(no report)");
    if (j) {
        json_t *s = json_object_get(j, "stats");
        long long rss = json_integer_value(json_object_get(s, "peak_rss_bytes"));
        long long br = json_integer_value(json_object_get(s, "bytes_read_experts"));
        long long cap = json_integer_value(json_object_get(s, "expert_cache_capacity_bytes"));
        T_CHECK(rss > 0 && rss <= (256ll << 20), "peak RSS %lld within the budget", rss);
        T_CHECK(br > 0 && cap > 0 && cap < 300ll << 20, "experts streamed through a cache of %lld bytes", cap);
    }
    printf("cgroup: %s", r ? r : "\n");
    free(r);
    free(out);
    json_decref(j);
}

/* The shared released-layout checkpoints through the CLI, as a user would run them. */
static void test_shared_checkpoint(const char *name)
{
    char rel[512], dir[4096], path[4200], a[16384], dump[4200];
    snprintf(rel, sizeof rel, "fixtures/kimi-k3/checkpoints/%s", name);
    const char *p = ms_t_shared(rel);
    if (!p) return;
    snprintf(dir, sizeof dir, "%s", p);
    json_error_t je;
    snprintf(path, sizeof path, "%s/ref_greedy.json", dir);
    json_t *rg = json_load_file(path, 0, &je);
    snprintf(path, sizeof path, "%s/ref_logits.json", dir);
    json_t *rl = json_load_file(path, 0, &je);
    if (!rg || !rl) {
        T_CHECK(0, "reference files of %s load", name);
        return;
    }
    json_t *pids = json_object_get(rl, "prompt_ids");
    char ids[1024] = "";
    for (size_t i = 0; i < json_array_size(pids); i++)
        snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%lld", i ? "," : "",
                 (long long)json_integer_value(json_array_get(pids, i)));
    snprintf(dump, sizeof dump, "%s/%s.logits", ms_t_tmpdir(name), name);
    snprintf(a, sizeof a, "run --model %s --ids %s -n 16 --temperature 0 --json --dump-logits %s", dir, ids, dump);
    int st;
    json_t *j = run_json(a, &st);
    T_CHECK(st == 0 && j, "%s: run succeeds", name);
    T_CHECK(j && json_equal(json_object_get(j, "generated_ids"), json_object_get(rg, "generated_ids")),
            "%s: the 16 greedy tokens equal ref_greedy.json", name);
    size_t len = 0;
    float *rows = (float *)ms_t_read_file(dump, &len);
    size_t np = json_array_size(pids), V = (size_t)json_integer_value(json_object_get(rl, "vocab"));
    T_CHECK(rows && len == (np + 15) * V * 4, "%s: dump size", name);
    if (rows && len == (np + 15) * V * 4) {
        json_t *bits = json_object_get(rl, "logits_bits");
        double mx = 0, worst = 0;
        for (size_t i = 0; i < V; i++) {
            uint32_t u = (uint32_t)json_integer_value(json_array_get(bits, i));
            float f;
            memcpy(&f, &u, 4);
            mx = fmax(mx, fabs(f));
            worst = fmax(worst, fabs((double)rows[(np - 1) * V + i] - f));
        }
        T_CHECK(worst <= 1e-4 * mx, "%s: row len(prompt)-1 within 1e-4 of max|logit| (%.3g)", name, worst / mx);
    }
    free(rows);
    json_decref(j);
    json_decref(rg);
    json_decref(rl);
}

/* --ids-file gives the same run as --ids; Ctrl-C stops a run with exit 130 and a message,
 * in process and with local workers (which are stopped too). */
static void test_ids_file_and_interrupt(void)
{
    const char *d = ms_t_tmpdir("cli-int");
    char dir[4096], a[16384], f[4200], g[4200], cmd[20000];
    snprintf(dir, sizeof dir, "%s/m", d);
    snprintf(a, sizeof a, "synth --out %s --seed 9", dir);
    T_CHECK(status_of(a) == 0, "synth writes a checkpoint");
    snprintf(f, sizeof f, "%s/ids.txt", d);
    FILE *fp = fopen(f, "w");
    if (fp) {
        fputs("5, 6,7\n 8 ,9,\t10\n", fp);
        fclose(fp);
    }
    int s1, s2;
    snprintf(a, sizeof a, "run --model %s --ids 5,6,7,8,9,10 -n 4 --json --quiet", dir);
    json_t *j1 = run_json(a, &s1);
    snprintf(a, sizeof a, "run --model %s --ids-file %s -n 4 --json --quiet", dir, f);
    json_t *j2 = run_json(a, &s2);
    T_CHECK(s1 == 0 && s2 == 0 && j1 && j2 &&
                json_equal(json_object_get(j1, "prompt_ids"), json_object_get(j2, "prompt_ids")) &&
                json_equal(json_object_get(j1, "generated_ids"), json_object_get(j2, "generated_ids")),
            "--ids-file (whitespace and newlines allowed) runs the same prompt as --ids");
    json_decref(j1);
    json_decref(j2);
    snprintf(a, sizeof a, "run --model %s --ids-file %s/missing.txt -n 1", dir, d);
    T_CHECK(status_of(a) == 4, "a missing --ids-file is an I/O error (exit 4)");
    snprintf(a, sizeof a, "run --model %s --ids 1 --ids-file %s -n 1", dir, f);
    T_CHECK(status_of(a) == 2, "--ids and --ids-file together are a usage error");
    for (int workers = 0; workers <= 2; workers += 2) {
        snprintf(g, sizeof g, "%s/int%d.err", d, workers);
        snprintf(cmd, sizeof cmd,
                 "%s run --model %s --ids 5,6 -n 100000 --quiet --local-workers %d 2>%s & p=$!; sleep 1; "
                 "kill -INT $p; wait $p",
                 bin, dir, workers, g);
        int st = ms_t_run(cmd, NULL);
        char *err = ms_t_read_file(g, NULL);
        T_CHECK(st == 130 && err && strstr(err, "interrupted"),
                "Ctrl-C with %d local workers: exit 130 with a message (status %d: %s)", workers, st, err ? err : "");
        free(err);
        snprintf(cmd, sizeof cmd, "pgrep -f '[m]oestream-worker.*%s' >/dev/null", dir);
        T_CHECK(ms_t_run(cmd, NULL) == 1, "no worker left running after Ctrl-C (%d local workers)", workers);
    }
}

/* A command's exit status, its stderr (malloc'ed) and how long it took; `timeout` turns a
 * hang into status 124. */
static int timed(const char *args, char **err, double *secs)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "timeout 30 %s %s 2>&1 >/dev/null", bin, args);
    double t0 = ms_now();
    int st = ms_t_run(cmd, err);
    *secs = ms_now() - t0;
    return st;
}

/* Issue 12, defect 4: files that are FIFOs or devices are refused before anything blocks;
 * config sizes are bounded and checked against the tensors first; user input is bounded. */
static void test_hostile_files(void)
{
    const char *d = ms_t_tmpdir("cli-hostile");
    char m[1024], c[1100], a[16384], f[1200], *err = NULL;
    double secs;
    int st;
    snprintf(m, sizeof m, "%.1000s/m", d);
    snprintf(a, sizeof a, "synth --out %s --seed 7", m);
    T_CHECK(status_of(a) == 0, "synth");
    snprintf(c, sizeof c, "%.1000s/c", d);

    /* config.json, a shard, the index and the tokenizer file as FIFOs nobody writes to. */
    static const char *fifo_files[] = {"config.json", "model-00002-of-000002.safetensors",
                                       "model.safetensors.index.json", "tiktoken.model"};
    for (int i = 0; i < 4; i++) {
        snprintf(a, sizeof a, "rm -rf %s && cp -r %s %s && rm %s/%s && mkfifo %s/%s", c, m, c, c, fifo_files[i], c,
                 fifo_files[i]);
        T_CHECK(ms_t_run(a, NULL) == 0, "make FIFO %s", fifo_files[i]);
        if (i == 3)
            snprintf(a, sizeof a, "tokenize --tokenizer %s --text hello", c);
        else
            snprintf(a, sizeof a, "run --model %s --ids 1,2 -n 1 --threads 1", c);
        st = timed(a, &err, &secs);
        T_CHECK(st == 4 && err && strstr(err, fifo_files[i]) && strstr(err, "FIFO"),
                "%s as a FIFO: refused at once with exit 4 naming it (%d, %.1f s): %s", fifo_files[i], st, secs,
                err ? err : "");
        free(err);
        err = NULL;
    }

    /* num_hidden_layers of 1e9: refused before anything is sized from it; one layer more than
     * the checkpoint: refused by the tensors before the tables are allocated. */
    static const int layers[2] = {1000000000, 7};
    static const char *want[2] = {"num_hidden_layers = 1000000000 is beyond", "config says num_hidden_layers = 7"};
    for (int i = 0; i < 2; i++) {
        snprintf(a, sizeof a, "rm -rf %s && cp -r %s %s", c, m, c);
        T_CHECK(ms_t_run(a, NULL) == 0, "copy");
        snprintf(f, sizeof f, "%s/config.json", c);
        json_error_t je;
        json_t *j = json_load_file(f, 0, &je), *tc = j ? json_object_get(j, "text_config") : NULL;
        json_t *lac = tc ? json_object_get(tc, "linear_attn_config") : NULL;
        T_CHECK(tc && lac, "nested synthetic config");
        if (!tc || !lac) {
            json_decref(j);
            continue;
        }
        json_object_set_new(tc, "num_hidden_layers", json_integer(layers[i]));
        json_array_append_new(json_object_get(lac, "full_attn_layers"), json_integer(7)); /* layer 7: MLA */
        T_CHECK(json_dump_file(j, f, 0) == 0, "write config");
        json_decref(j);
        snprintf(a, sizeof a, "run --model %s --ids 1,2 -n 1 --threads 1", c);
        st = timed(a, &err, &secs);
        T_CHECK(st == 3 && err && strstr(err, want[i]) && secs < 10,
                "num_hidden_layers %d: exit 3 at once (%d, %.1f s): %s", layers[i], st, secs, err ? err : "");
        free(err);
        err = NULL;
    }

    /* User input: a device is refused, a pipe is read up to the 256 MiB limit, then refused. */
    snprintf(a, sizeof a, "tokenize --tokenizer %s --file /dev/zero", m);
    st = timed(a, &err, &secs);
    T_CHECK(st == 4 && err && strstr(err, "/dev/zero") && strstr(err, "character device"),
            "tokenize --file /dev/zero: refused at once (%d, %.1f s): %s", st, secs, err ? err : "");
    free(err);
    err = NULL;
    snprintf(f, sizeof f, "%.1000s/pipe", d);
    /* (the subshell's own stdout must not hold ms_t_run's pipe while its writer waits) */
    snprintf(a, sizeof a, "rm -f %s && mkfifo %s && (head -c 300000000 /dev/zero > %s 2>/dev/null &) >/dev/null 2>&1",
             f, f, f);
    T_CHECK(ms_t_run(a, NULL) == 0, "FIFO with a writer");
    snprintf(a, sizeof a, "tokenize --tokenizer %s --file %s", m, f);
    st = timed(a, &err, &secs);
    T_CHECK(st == 5 && err && strstr(err, "larger than the limit of 256"),
            "tokenize of 300 MB through a pipe: exit 5 at the limit (%d, %.1f s): %s", st, secs, err ? err : "");
    free(err);
    err = NULL;
    snprintf(a, sizeof a, "run --model %s --prompt-file /dev/zero -n 1", m);
    st = timed(a, &err, &secs);
    T_CHECK(st == 4 && err && strstr(err, "/dev/zero"), "run --prompt-file /dev/zero: refused (%d): %s", st,
            err ? err : "");
    free(err);
    err = NULL;
    snprintf(a, sizeof a, "run --model %s --ids-file /dev/zero -n 1", m);
    st = timed(a, &err, &secs);
    T_CHECK(st == 4 && err && strstr(err, "/dev/zero"), "run --ids-file /dev/zero: refused (%d): %s", st,
            err ? err : "");
    free(err);
    err = NULL;
    snprintf(a, sizeof a, "cache-sim --trace /dev/zero --expert-bytes 1000 --slots 4");
    st = timed(a, &err, &secs);
    T_CHECK(st == 4 && err && strstr(err, "/dev/zero"), "cache-sim --trace /dev/zero: refused (%d): %s", st,
            err ? err : "");
    free(err);
}

int main(void)
{
    snprintf(bin, sizeof bin, "%s", ms_t_bin("moestream"));
    test_usage();
    test_hostile_files();
    test_synth_run();
    test_demo();
    test_lost_output();
    test_small_preset();
    test_trace();
    test_cgroup_budget();
    test_ids_file_and_interrupt();
    test_shared_checkpoint("tiny-s1234");
    test_shared_checkpoint("tiny-released-like");
    return ms_t_done();
}
