/* test_jobs: `moestream jobs` end to end: every job bit-identical to `moestream run` on it alone
 * (ids and logits rows; completions and chats, greedy and sampled) at --max-batch 1, 3 and 8, in
 * process and with 2 local workers; bad lines answered, duplicates refused, kill -9 + --resume,
 * SIGTERM, a local worker killed mid-run (restarted; given up on after its restarts), and a budget
 * too small for the batch asked. */
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ms_err.h"
#include "ms_synth.h"
#include "ms_test.h"

static char dir[1100], tmp[1024], bin[1100];

/* A good job: its input line and the `run` options that run the same job alone. */
typedef struct {
    const char *id, *line, *run;
} job;

#define CHAT5 "<|im_system|>system<|im_middle|>Be brief.<|im_end|><|im_user|>user<|im_middle|>Name a color.<|im_end|><|im_assistant|>assistant<|im_middle|>"
#define CHAT6 "<|im_user|>user<|im_middle|>Tell me about \"quotes\" and\nnewlines.<|im_end|><|im_assistant|>assistant<|im_middle|>"

static const job jobs[] = {
    {"c1", "{\"custom_id\":\"c1\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"The weather today is\",\"max_tokens\":6}}",
     "--prompt 'The weather today is' -n 6"},
    {"c2", "{\"custom_id\":\"c2\",\"prompt\":[5,17,200,33,9,1,2,3,4,5,6,7],\"max_tokens\":9,\"temperature\":0.9,\"seed\":7}",
     "--ids 5,17,200,33,9,1,2,3,4,5,6,7 -n 9 --temperature 0.9 --seed 7"},
    {"c3", "{\"custom_id\":\"c3\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"a\",\"max_tokens\":3,\"temperature\":0.7,\"top_p\":0.8,\"seed\":-5}}",
     "--prompt a -n 3 --temperature 0.7 --top-p 0.8 --seed -5"},
    {"c4", "{\"custom_id\":\"c4\",\"prompt\":[300],\"max_tokens\":12}", "--ids 300 -n 12"},
    {"c5", "{\"custom_id\":\"c5\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Name a color.\"}],\"max_tokens\":7}}",
     "--prompt-file CHAT5 --allow-special -n 7"},
    {"c6", "{\"custom_id\":\"c6\",\"messages\":[{\"role\":\"user\",\"content\":\"Tell me about \\\"quotes\\\" and\\nnewlines.\"}],\"max_tokens\":8,\"temperature\":1.0,\"seed\":99}",
     "--prompt-file CHAT6 --allow-special -n 8 --temperature 1.0 --seed 99"},
    {"c7", "{\"custom_id\":\"c7\",\"prompt\":\"It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness\",\"max_tokens\":5,\"temperature\":0.6,\"top_p\":0.95,\"seed\":3}",
     "--prompt 'It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness' -n 5 --temperature 0.6 --top-p 0.95 --seed 3"},
    {"c8", "{\"custom_id\":\"c8\",\"prompt\":[11,22,33,44,55,66,77,88,99,110,121,132,143,154,165,176,187,198,209,220],\"max_tokens\":10,\"temperature\":0.5,\"seed\":1}",
     "--ids 11,22,33,44,55,66,77,88,99,110,121,132,143,154,165,176,187,198,209,220 -n 10 --temperature 0.5 --seed 1"},
    {"c9", "{\"custom_id\":\"c9\",\"prompt\":\"Hello\",\"max_tokens\":4}", "--prompt Hello -n 4"},
};
#define NJOBS ((int)(sizeof jobs / sizeof jobs[0]))

/* Bad lines: the error code each must get. */
static const struct {
    const char *line, *code;
} bads[] = {
    {"{\"custom_id\":\"b1\",\"prompt\":[1,99999]}", "invalid_prompt"},
    {"this is not json", "invalid_json"},
    {"{\"custom_id\":\"b3\",\"prompt\":\"x\",\"max_tokens\":0}", "invalid_max_tokens"},
    {"{\"custom_id\":\"b4\",\"prompt\":[1,2],\"max_tokens\":500}", "context_length_exceeded"},
    {"{\"custom_id\":\"b5\",\"url\":\"/v1/embeddings\",\"body\":{\"input\":\"x\"}}", "invalid_url"},
    {"{\"custom_id\":\"b6\",\"prompt\":\"x\",\"temperature\":\"hot\"}", "invalid_request"},
    {"{\"custom_id\":\"b7\",\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "invalid_prompt"},
};
#define NBADS ((int)(sizeof bads / sizeof bads[0]))

/* What `run` gave for job i. */
static json_t *ref_ids[16];
static char ref_dump[16][1200];

static void make_refs(void)
{
    ms_t_write_file(ms_t_path(tmp, "chat5.txt"), CHAT5);
    ms_t_write_file(ms_t_path(tmp, "chat6.txt"), CHAT6);
    for (int i = 0; i < NJOBS; i++) {
        char args[1024];
        snprintf(args, sizeof args, "%s", jobs[i].run);
        char *p;
        if ((p = strstr(args, "CHAT5")) || (p = strstr(args, "CHAT6"))) {
            char rest[1024];
            snprintf(rest, sizeof rest, "%s", p + 5);
            snprintf(p, sizeof args - (size_t)(p - args), "%s/chat%c.txt%s", tmp, p[4], rest);
        }
        snprintf(ref_dump[i], sizeof ref_dump[i], "%s/ref-%s.f32", tmp, jobs[i].id);
        char *out = NULL;
        int st = ms_t_runf(&out, NULL, "%s run --model %s %s --stop-at-eos --json --quiet --ram-budget 2G --dump-logits %s",
                           bin, dir, args, ref_dump[i]);
        json_t *o = out ? json_loads(out, JSON_ALLOW_NUL, NULL) : NULL;
        ref_ids[i] = o ? json_incref(json_object_get(o, "generated_ids")) : NULL;
        T_CHECK(st == 0 && ref_ids[i], "run %s alone: exit %d", jobs[i].id, st);
        json_decref(o);
        free(out);
    }
}

/* Line numbers of good job i / bad line b in make_input's file. */
static int job_line[NJOBS], bad_line[NBADS];
static int line_of_job(int i) { return job_line[i]; }
static int line_of_bad(int b) { return bad_line[b]; }

/* The input file: the good jobs in order, bad lines interleaved. Returns its path. */
static const char *make_input(const char *name)
{
    const char *path = ms_t_path(tmp, name);
    FILE *f = fopen(path, "w");
    int line = 0;
    for (int i = 0, b = 0; i < NJOBS || b < NBADS; i++) {
        if (i < NJOBS) {
            fprintf(f, "%s\n", jobs[i].line);
            job_line[i] = ++line;
        }
        if (b < NBADS) {
            bad_line[b] = ++line;
            fprintf(f, "%s\n", bads[b++].line);
        }
        if (i == 2) { /* a blank line is skipped, and counted */
            fputs("\n", f);
            line++;
        }
    }
    fclose(f);
    return path;
}

/* Parse the output lines: each custom_id once, in *objs by the order above. Returns the line count. */
static int read_output(const char *path, json_t **good, json_t **bad_out, int *dups)
{
    size_t len = 0;
    char *buf = ms_t_read_file(path, &len);
    int n = 0;
    *dups = 0;
    for (int i = 0; i < NJOBS; i++) good[i] = NULL;
    for (int b = 0; b < NBADS; b++) bad_out[b] = NULL;
    for (char *s = buf; s && *s;) {
        char *nl = strchr(s, '\n');
        if (!nl) break;
        *nl = 0;
        n++;
        json_t *o = json_loads(s, JSON_ALLOW_NUL, NULL);
        const char *cid = json_string_value(json_object_get(o, "custom_id"));
        int placed = 0;
        for (int i = 0; cid && i < NJOBS && !placed; i++)
            if (!strcmp(cid, jobs[i].id)) {
                *dups += good[i] != NULL;
                json_decref(good[i]);
                good[i] = json_incref(o);
                placed = 1;
            }
        for (int b = 0; cid && b < NBADS && !placed; b++) {
            char want[32];
            snprintf(want, sizeof want, "b%d", b + 1);
            char alt[32];
            snprintf(alt, sizeof alt, "line-%d", line_of_bad(b));
            if (!strcmp(cid, want) || !strcmp(cid, alt)) {
                *dups += bad_out[b] != NULL;
                json_decref(bad_out[b]);
                bad_out[b] = json_incref(o);
                placed = 1;
            }
        }
        json_decref(o);
        s = nl + 1;
    }
    free(buf);
    return n;
}

/* 1 if file a is a non-empty prefix of file b. */
static int prefix_file(const char *a, const char *b)
{
    size_t la = 0, lb = 0;
    char *x = ms_t_read_file(a, &la), *y = ms_t_read_file(b, &lb);
    int ok = x && y && la > 0 && la <= lb && !memcmp(x, y, la);
    free(x);
    free(y);
    return ok;
}

/* Job i's result against run's: ids equal (a prefix only when the job stopped), logits rows a prefix. */
static int same_as_run(int i, json_t *o, const char *dump_dir, const char *what)
{
    json_t *choice = json_array_get(json_object_get(json_object_get(json_object_get(o, "response"), "body"), "choices"), 0);
    json_t *ids = json_object_get(choice, "token_ids");
    const char *fin = json_string_value(json_object_get(choice, "finish_reason"));
    size_t n = json_array_size(ids), nr = json_array_size(ref_ids[i]);
    int ok = ids && fin && n >= 1 && n <= nr && (n == nr || !strcmp(fin, "stop"));
    for (size_t k = 0; ok && k < n; k++)
        ok = json_integer_value(json_array_get(ids, k)) == json_integer_value(json_array_get(ref_ids[i], k));
    char path[1300];
    snprintf(path, sizeof path, "%.1200s/line-%d.f32", dump_dir ? dump_dir : "", line_of_job(i));
    int rows = !dump_dir || prefix_file(path, ref_dump[i]);
    T_CHECK(ok && rows, "%s: job %s: %zu ids equal run's alone (%zu), logits rows %s", what, jobs[i].id, n, nr,
            dump_dir ? (rows ? "bit-identical" : "DIFFER") : "not dumped");
    return ok && rows;
}

static void check_batch(int batch, int workers)
{
    char what[64], out[1200], dump[1200];
    snprintf(what, sizeof what, "--max-batch %d, %d local workers", batch, workers);
    snprintf(out, sizeof out, "%s/out-%d-%d.jsonl", tmp, batch, workers);
    snprintf(dump, sizeof dump, "%s/dump-%d-%d", tmp, batch, workers);
    mkdir(dump, 0755);
    const char *in = make_input("in.jsonl");
    char *err = NULL;
    int st = ms_t_runf(NULL, &err,
                       "%s jobs --model %s --input %s --output %s --max-batch %d --local-workers %d --ram-budget 2G "
                       "--max-context 200 --dump-logits %s --quiet",
                       bin, dir, in, out, batch, workers, dump);
    T_CHECK(st == 0, "%s: exit 0 with bad lines answered (got %d): %s", what, st, err ? err : "");
    free(err);
    json_t *good[NJOBS], *bad[NBADS];
    int dups = 0, n = read_output(out, good, bad, &dups);
    T_CHECK(n == NJOBS + NBADS && dups == 0, "%s: %d lines, one per input line (%d), no duplicates", what, n,
            NJOBS + NBADS);
    for (int i = 0; i < NJOBS; i++) {
        if (good[i]) same_as_run(i, good[i], dump, what);
        else T_CHECK(0, "%s: job %s answered", what, jobs[i].id);
        json_decref(good[i]);
    }
    for (int b = 0; b < NBADS; b++) {
        json_t *e = bad[b] ? json_object_get(bad[b], "error") : NULL;
        const char *code = json_string_value(json_object_get(e, "code"));
        const char *msg = json_string_value(json_object_get(e, "message"));
        char ln[32];
        snprintf(ln, sizeof ln, "line %d:", line_of_bad(b));
        T_CHECK(code && !strcmp(code, bads[b].code) && msg && strstr(msg, ln) &&
                    json_is_null(json_object_get(bad[b], "response")),
                "%s: bad line %d answered with error %s naming its line (%s: %s)", what, line_of_bad(b), bads[b].code,
                code ? code : "none", msg ? msg : "");
        json_decref(bad[b]);
    }
}

/* The shapes of a result line (OpenAI Batch API plus token_ids). */
static void check_shape(void)
{
    char out[1200];
    snprintf(out, sizeof out, "%s/out-3-0.jsonl", tmp);
    json_t *good[NJOBS], *bad[NBADS];
    int dups;
    read_output(out, good, bad, &dups);
    json_t *c1 = good[0], *c5 = good[4];
    json_t *b1 = json_object_get(json_object_get(c1, "response"), "body");
    json_t *b5 = json_object_get(json_object_get(c5, "response"), "body");
    const char *id = json_string_value(json_object_get(c1, "id"));
    json_t *usage = json_object_get(b1, "usage");
    json_t *ch1 = json_array_get(json_object_get(b1, "choices"), 0);
    json_t *ch5 = json_array_get(json_object_get(b5, "choices"), 0);
    T_CHECK(id && !strncmp(id, "batch_req_", 10) && strlen(id) == 10 + 36 && json_is_null(json_object_get(c1, "error")) &&
                json_integer_value(json_object_get(json_object_get(c1, "response"), "status_code")) == 200 &&
                strlen(json_string_value(json_object_get(json_object_get(c1, "response"), "request_id")) ?: "") == 36,
            "result envelope: batch_req_<uuid>, status 200, request_id uuid, error null");
    T_CHECK(!strcmp(json_string_value(json_object_get(b1, "object")) ?: "", "text_completion") &&
                json_is_string(json_object_get(ch1, "text")) &&
                json_integer_value(json_object_get(usage, "total_tokens")) ==
                    json_integer_value(json_object_get(usage, "prompt_tokens")) +
                        json_integer_value(json_object_get(usage, "completion_tokens")) &&
                (size_t)json_integer_value(json_object_get(usage, "completion_tokens")) ==
                    json_array_size(json_object_get(ch1, "token_ids")) &&
                json_is_integer(json_object_get(b1, "created")),
            "completion body: object, text, usage adds up");
    T_CHECK(!strcmp(json_string_value(json_object_get(b5, "object")) ?: "", "chat.completion") &&
                !strcmp(json_string_value(json_object_get(json_object_get(ch5, "message"), "role")) ?: "", "assistant") &&
                json_is_string(json_object_get(json_object_get(ch5, "message"), "content")),
            "chat body: object chat.completion, message from the assistant");
    T_CHECK(json_is_null(json_object_get(ch1, "logprobs")) && json_object_get(ch1, "logprobs") &&
                json_is_null(json_object_get(ch5, "logprobs")) && json_object_get(ch5, "logprobs"),
            "every choice carries \"logprobs\": null, as OpenAI's (scripts read choice[\"logprobs\"])");
    /* --output -: the lines on standard output, the same answers; --resume cannot go with it */
    char *so = NULL, *err = NULL;
    const char *in = make_input("in-stdout.jsonl");
    int st = ms_t_runf(&so, NULL, "%s jobs --model %s --input %s --output - --max-batch 3 --ram-budget 2G --max-context 200 --quiet",
                       bin, dir, in);
    int lines = 0, same = so != NULL;
    for (char *l = so; same && l && *l;) {
        char *e = strchr(l, '\n');
        json_t *o = json_loadb(l, e ? (size_t)(e - l) : strlen(l), 0, NULL);
        same = o != NULL;
        const char *cid = json_string_value(json_object_get(o, "custom_id"));
        for (int i = 0; same && cid && i < NJOBS; i++) {
            if (strcmp(cid, jobs[i].id)) continue;
            json_t *want = json_object_get(json_array_get(json_object_get(json_object_get(json_object_get(good[i], "response"),
                                                                                             "body"), "choices"), 0), "token_ids");
            json_t *got = json_object_get(json_array_get(json_object_get(json_object_get(json_object_get(o, "response"), "body"),
                                                                        "choices"), 0), "token_ids");
            same = json_equal(want, got);
        }
        json_decref(o);
        lines++;
        l = e ? e + 1 : NULL;
    }
    T_CHECK(st == 0 && same && lines == NJOBS + NBADS, "--output - writes every line to standard output (%d lines, exit %d)",
            lines, st);
    free(so);
    st = ms_t_runf(NULL, &err, "%s jobs --model %s --input %s --output - --resume --quiet", bin, dir, in);
    T_CHECK(st == MS_EXIT_USAGE && err && strstr(err, "--resume"), "--output - --resume is refused (exit 2): %s", err ? err : "");
    free(err);
    for (int i = 0; i < NJOBS; i++) json_decref(good[i]);
    for (int b = 0; b < NBADS; b++) json_decref(bad[b]);
}

static void check_duplicates(void)
{
    const char *in = ms_t_path(tmp, "dup.jsonl");
    ms_t_write_file(in, "{\"custom_id\":\"x\",\"prompt\":[1]}\n{\"custom_id\":\"y\",\"prompt\":[2]}\n{\"custom_id\":\"x\",\"prompt\":[3]}\n");
    const char *out = ms_t_path(tmp, "dup.out");
    char *err = NULL;
    int st = ms_t_runf(NULL, &err, "%s jobs --model %s --input %s --output %s --ram-budget 2G --quiet", bin, dir, in, out);
    struct stat sb;
    T_CHECK(st == MS_EXIT_INPUT && err && strstr(err, "'x'") && strstr(err, "lines 1 and 3") && stat(out, &sb) != 0,
            "duplicate custom_ids are refused up front (exit 5, both lines named, no output): %d %s", st, err ? err : "");
    free(err);
}

/* Lines in the file at path (0 if absent). */
static int count_lines(const char *path)
{
    size_t len = 0;
    char *b = ms_t_read_file(path, &len);
    int lines = 0;
    for (size_t i = 0; b && i < len; i++) lines += b[i] == '\n';
    free(b);
    return lines;
}

/* Wait (up to about 60 s: a loaded machine is slow) until the file at path has n lines. */
static void wait_lines(const char *path, int n)
{
    for (int k = 0; k < 30000 && count_lines(path) < n; k++) ms_t_sleep_ms(2);
}

/* The generated ids of each answered line of a jobs output, by custom_id. Counts lines, custom_ids
 * seen twice, and the error codes of error lines (into errors: code -> count) when asked. */
static json_t *ids_by_custom_id(const char *path, int *dup, int *n_lines, json_t *errors)
{
    json_t *map = json_object(), *seen = json_object();
    char *buf = ms_t_read_file(path, NULL);
    for (char *s = buf; s && *s;) {
        char *nl = strchr(s, '\n');
        if (!nl) break;
        *nl = 0;
        json_t *o = json_loads(s, JSON_ALLOW_NUL, NULL);
        const char *cid = json_string_value(json_object_get(o, "custom_id"));
        json_t *ids = json_object_get(json_array_get(json_object_get(json_object_get(json_object_get(o, "response"), "body"), "choices"), 0), "token_ids");
        const char *code = json_string_value(json_object_get(json_object_get(o, "error"), "code"));
        if (n_lines) ++*n_lines;
        if (cid && json_object_get(seen, cid) && dup) ++*dup;
        if (cid) json_object_set_new(seen, cid, json_true());
        if (cid && ids) json_object_set(map, cid, ids);
        if (code && errors)
            json_object_set_new(errors, code, json_integer(json_integer_value(json_object_get(errors, code)) + 1));
        json_decref(o);
        s = nl + 1;
    }
    free(buf);
    json_decref(seen);
    return map;
}

/* `jobs` of in into out in the background (batch 2, one thread: slow), stderr discarded. */
static pid_t start_jobs_bg(const char *in, const char *out)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(127);
        execl(bin, bin, "jobs", "--model", dir, "--input", in, "--output", out, "--max-batch", "2", "--threads", "1",
              "--ram-budget", "2G", "--quiet", (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Many slow jobs; stop the run after a few lines are out (kill -9 or SIGTERM), resume it. */
static void check_resume(int sig)
{
    char in[1200], out[1200], full[1200];
    snprintf(in, sizeof in, "%s/slow.jsonl", tmp);
    snprintf(out, sizeof out, "%s/slow-%d.out", tmp, sig);
    snprintf(full, sizeof full, "%s/slow-full.out", tmp);
    FILE *f = fopen(in, "w");
    for (int i = 0; i < 24; i++)
        fprintf(f, "{\"custom_id\":\"s%d\",\"prompt\":[%d,%d,%d],\"max_tokens\":160,\"temperature\":%s,\"seed\":%d}\n", i,
                i + 1, 2 * i + 7, 3 * i + 11, i % 2 ? "0.8" : "0", i);
    fclose(f);
    struct stat sb;
    if (stat(full, &sb) != 0) {
        int st = ms_t_runf(NULL, NULL, "%s jobs --model %s --input %s --output %s --max-batch 3 --ram-budget 2G --quiet",
                           bin, dir, in, full);
        T_CHECK(st == 0, "the uninterrupted run: exit %d", st);
    }
    pid_t pid = start_jobs_bg(in, out);
    wait_lines(out, 2);
    kill(pid, sig);
    int status = 0;
    waitpid(pid, &status, 0);
    int stopped = sig == SIGKILL ? WIFSIGNALED(status) : WIFEXITED(status) && WEXITSTATUS(status) == 130;
    T_CHECK(stopped, "signal %d stops the run mid-way (status 0x%x)", sig, status);
    if (sig == SIGKILL) { /* a torn last line, as a write cut short would leave */
        f = fopen(out, "a");
        fputs("{\"id\":\"batch_req_torn\",\"custom_id\":\"s2", f);
        fclose(f);
    }
    int lines0 = count_lines(out);
    T_CHECK(lines0 >= 2 && lines0 < 24, "%d of 24 jobs were written before the stop", lines0);
    char *err = NULL;
    int st = ms_t_runf(NULL, &err, "%s jobs --model %s --input %s --output %s --max-batch 4 --ram-budget 2G --resume", bin,
                       dir, in, out);
    T_CHECK(st == 0 && err && strstr(err, "skipped"), "--resume completes (exit %d)", st);
    free(err);
    /* every custom_id exactly once, with the uninterrupted run's ids */
    int dup = 0, n_lines = 0;
    json_t *want = ids_by_custom_id(full, NULL, NULL, NULL);
    json_t *got = ids_by_custom_id(out, &dup, &n_lines, NULL);
    T_CHECK(dup == 0 && n_lines == 24 && json_object_size(got) == 24 && json_equal(want, got),
            "after signal %d and --resume: 24 lines, each custom_id once, the same ids as an uninterrupted run "
            "(%d lines, %d duplicates)",
            sig, n_lines, dup);
    json_decref(want);
    json_decref(got);
}

/* Issue 16, defects 4 and 5: a second run on an output being written is refused (the output is
 * locked), and --resume refuses an output written for another input (request_hash). */
static void check_output_guard(void)
{
    char in[1200], out[1200];
    snprintf(in, sizeof in, "%s/slow.jsonl", tmp); /* written by check_resume */
    snprintf(out, sizeof out, "%s/locked.out", tmp);
    unlink(out);
    pid_t pid = start_jobs_bg(in, out);
    wait_lines(out, 1);
    for (int resume = 0; resume < 2; resume++) {
        char *err = NULL;
        int st = ms_t_runf(NULL, &err, "%s jobs --model %s --input %s --output %s --ram-budget 2G --quiet%s", bin, dir, in,
                           out, resume ? " --resume" : "");
        T_CHECK(st == MS_EXIT_IO && err && strstr(err, "another moestream jobs run") && strstr(err, out),
                "a second run%s on an output being written is refused: exit 4 naming it (%d): %s",
                resume ? " with --resume" : "", st, err ? err : "");
        free(err);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    int dup = 0, n_lines = 0;
    json_t *got = ids_by_custom_id(out, &dup, &n_lines, NULL);
    T_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0 && dup == 0 && n_lines == 24,
            "the first run finishes alone: 24 lines, no duplicate (%d lines, %d duplicates)", n_lines, dup);
    json_decref(got);

    /* the same custom_ids with another prompt: --resume names the first that differs */
    char in2[1200], out2[1200];
    snprintf(in2, sizeof in2, "%s/guard-a.jsonl", tmp);
    snprintf(out2, sizeof out2, "%s/guard.out", tmp);
    unlink(out2);
    ms_t_write_file(in2, "{\"custom_id\":\"a\",\"prompt\":[1,2],\"max_tokens\":3}\n"
                         "{\"custom_id\":\"b\",\"prompt\":[3,4],\"max_tokens\":3}\n");
    T_CHECK(ms_t_runf(NULL, NULL, "%s jobs --model %s --input %s --output %s --ram-budget 2G --quiet", bin, dir, in2,
                      out2) == 0,
            "jobs on two lines");
    ms_t_write_file(in2, "{\"custom_id\":\"a\",\"prompt\":[1,2],\"max_tokens\":3}\n"
                         "{\"custom_id\":\"b\",\"prompt\":[3,5],\"max_tokens\":3}\n"
                         "{\"custom_id\":\"c\",\"prompt\":[6],\"max_tokens\":3}\n");
    char *err = NULL;
    int st = ms_t_runf(NULL, &err, "%s jobs --model %s --input %s --output %s --ram-budget 2G --quiet --resume", bin, dir,
                       in2, out2);
    T_CHECK(st == MS_EXIT_INPUT && err && strstr(err, "'b'") && strstr(err, "input line 2") && count_lines(out2) == 2,
            "--resume on an output of another input: exit 5 naming custom_id 'b', output untouched (%d): %s", st,
            err ? err : "");
    free(err);
    ms_t_write_file(in2, "{\"custom_id\":\"a\",\"prompt\":[1,2],\"max_tokens\":3}  \r\n"
                         "{\"custom_id\":\"b\",\"prompt\":[3,4],\"max_tokens\":3}\n"
                         "{\"custom_id\":\"c\",\"prompt\":[6],\"max_tokens\":3}\n");
    st = ms_t_runf(NULL, NULL, "%s jobs --model %s --input %s --output %s --ram-budget 2G --quiet --resume", bin, dir, in2,
                   out2);
    T_CHECK(st == 0 && count_lines(out2) == 3, "the same lines (trailing blanks aside) plus a new one: resumed (%d)", st);

    /* ids: a line without custom_id never collides with an explicit "line-N"; null is absent */
    ms_t_write_file(in2, "{\"prompt\":[1],\"max_tokens\":2}\n"
                         "{\"custom_id\":\"line-1\",\"prompt\":[2],\"max_tokens\":2}\n"
                         "{\"custom_id\":null,\"prompt\":[3],\"max_tokens\":2}\n");
    snprintf(out2, sizeof out2, "%s/guard-ids.out", tmp);
    unlink(out2);
    err = NULL;
    st = ms_t_runf(NULL, &err, "%s jobs --model %s --input %s --output %s --ram-budget 2G --quiet", bin, dir, in2, out2);
    json_t *ids = ids_by_custom_id(out2, &dup, NULL, NULL);
    T_CHECK(st == 0 && json_object_size(ids) == 3 && json_object_get(ids, "line-1") && json_object_get(ids, "line-1.2") &&
                json_object_get(ids, "line-3"),
            "custom_ids line-1 (explicit), line-1.2 (line 1, none given), line-3 (null): all run (%d): %s", st,
            err ? err : "");
    json_decref(ids);
    free(err);
    err = NULL;
    st = ms_t_runf(NULL, &err, "%s jobs --model %s --input %s --output %s --quiet", bin, dir, in2, tmp);
    T_CHECK(st == MS_EXIT_USAGE && err && strstr(err, "is a directory"), "--output DIR: exit 2, 'is a directory' (%d): %s",
            st, err ? err : "");
    free(err);
}


/* Local worker 0 SIGKILLed `kills` times mid-run (each time it is back), no replica. Once: it is
 * restarted, and every job completes with the ids of the uninterrupted in-process run. Four
 * times (past the 3 restarts): it is given up on, the jobs that need it get worker_failure lines
 * at once and the others their ids; every custom_id once, exit 0 either way. Runs after
 * check_resume (its input and reference). */
static void check_worker_lost(int kills)
{
    char in[1200], out[1200], full[1200], errf[1200];
    snprintf(in, sizeof in, "%s/slow.jsonl", tmp);
    snprintf(out, sizeof out, "%s/slow-wlost%d.out", tmp, kills);
    snprintf(errf, sizeof errf, "%s/slow-wlost%d.err", tmp, kills);
    snprintf(full, sizeof full, "%s/slow-full.out", tmp);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(errf, "w", stderr)) _exit(127);
        execl(bin, bin, "jobs", "--model", dir, "--input", in, "--output", out, "--max-batch", "2", "--local-workers",
              "2", "--threads", "1", "--ram-budget", "2G", (char *)NULL);
        _exit(127);
    }
    wait_lines(out, 2);
    int killed = 0, last = 0;
    for (int k = 0; k < 6000 && killed < kills; k++) { /* up to about 30 s for each restart */
        int w = ms_t_local_worker(pid, 0);
        if (w > 0 && w != last) {
            kill(w, SIGKILL);
            last = w;
            killed++;
        }
        ms_t_sleep_ms(5);
    }
    T_CHECK(killed == kills, "local worker 0 killed %d times (each time back), %d asked", killed, kills);
    int status = 0;
    waitpid(pid, &status, 0);
    T_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "jobs exits 0 after losing a worker %d times (status 0x%x)",
            kills, status);
    int dup = 0, n_lines = 0, same = 1;
    json_t *errors = json_object();
    json_t *want = ids_by_custom_id(full, NULL, NULL, NULL);
    json_t *got = ids_by_custom_id(out, &dup, &n_lines, errors);
    const char *cid;
    json_t *ids;
    json_object_foreach(got, cid, ids) same &= json_equal(ids, json_object_get(want, cid));
    int failed = (int)json_integer_value(json_object_get(errors, "worker_failure"));
    T_CHECK(n_lines == 24 && dup == 0 && (int)json_object_size(got) + failed == 24 && json_object_size(errors) <= 1,
            "every job answered once: %d lines, %d duplicates, %zu with ids, %d worker_failure lines, %zu error codes",
            n_lines, dup, json_object_size(got), failed, json_object_size(errors));
    T_CHECK(same, "the jobs that completed have the ids of the uninterrupted run");
    if (kills <= 3) {
        T_CHECK(failed == 0, "a killed local worker is restarted: no job fails (%d worker_failure lines)", failed);
        T_CHECK(ms_t_file_has(errf, "restarted (1 of 3 restarts)"), "the restart is reported");
    } else {
        T_CHECK(failed > 0, "past its restarts, the jobs that need the lost worker get worker_failure lines (%d)",
                failed);
        T_CHECK(ms_t_file_has(errf, "after 3 restarts in a row"), "giving up on the worker is reported");
    }
    json_decref(want);
    json_decref(got);
    json_decref(errors);
}

static void check_budget(void)
{
    const char *in = ms_t_path(tmp, "many.jsonl");
    FILE *f = fopen(in, "w");
    /* one long job: every sequence's KV cache is planned for 2000 positions, so that a sequence's
     * share of the budget is large beside the variation of the process's resident baseline */
    for (int i = 0; i < 64; i++)
        fprintf(f, "{\"custom_id\":\"m%d\",\"prompt\":[%d],\"max_tokens\":%d}\n", i, i + 1, i ? 2 : 2000);
    fputs("{\"custom_id\":\"bad\",\"prompt\":[]}\n", f); /* answered only once the model opens */
    fclose(f);
    const char *out = ms_t_path(tmp, "many.out");
    /* the smallest budgets of 1 and of 64 sequences, from the refusals of a 1-byte budget; half
     * way between them (far from either: the process's resident baseline varies a little) */
    unsigned long long mins[2] = {0, 0};
    for (int m = 0; m < 2; m++) {
        char *err = NULL;
        int st = ms_t_runf(NULL, &err, "%s jobs --model %s --input %s --output %s --ram-budget 1 --max-batch %d --quiet "
                           "--max-context 4096",
                           bin, dir, in, out, m ? 64 : 1);
        const char *p = err ? strrchr(err, '(') : NULL;
        mins[m] = p ? strtoull(p + 1, NULL, 10) : 0;
        T_CHECK(st == MS_EXIT_BUDGET && mins[m] > 0, "a 1-byte budget is refused naming the minimum (exit %d)", st);
        free(err);
        unlink(out);
    }
    if (!mins[0] || mins[1] <= mins[0]) return;
    unsigned long long mid = (mins[0] + mins[1]) / 2;
    char *err = NULL;
    int st = ms_t_runf(NULL, &err, "%s jobs --model %s --input %s --output %s --ram-budget %llu --max-batch 64 --quiet "
                       "--max-context 4096",
                       bin, dir, in, out, mid);
    const char *p;
    p = err ? strstr(err, "the largest batch that fits is ") : NULL;
    int k = p ? atoi(p + strlen("the largest batch that fits is ")) : 0;
    T_CHECK(st == MS_EXIT_BUDGET && k >= 1 && k < 64,
            "--max-batch 64 at a one-sequence budget is refused (exit 6) naming the largest batch that fits (%d): %s",
            k, err ? err : "");
    struct stat sb;
    T_CHECK(stat(out, &sb) != 0 || sb.st_size == 0, "the refused run wrote nothing, not even the bad line's answer");
    free(err);
    unlink(out);
    if (k < 1) return;
    /* the default batch is what the budget holds */
    err = NULL;
    st = ms_t_runf(NULL, &err, "%s jobs --model %s --input %s --output %s --ram-budget %llu --max-context 4096", bin, dir, in,
                   out, mid);
    p = err ? strstr(err, "up to ") : NULL;
    int d = p ? atoi(p + 6) : 0;
    /* (the process's resident baseline differs a little between runs, so the count may too) */
    T_CHECK(st == 0 && d >= 1 && 2 * d >= k && d <= 2 * k,
            "without --max-batch the same budget runs %d together, about what the refusal named (%d): exit %d %s", d, k,
            st, st ? err : "");
    free(err);
}

static void check_usage(void)
{
    const char *in = make_input("in-usage.jsonl");
    const char *out = ms_t_path(tmp, "usage.out");
    char *o = NULL;
    int st = ms_t_runf(&o, NULL, "%s jobs --help", bin);
    T_CHECK(st == 0 && o && strstr(o, "--max-batch") && strstr(o, "--resume"), "jobs --help: exit 0, lists the options");
    free(o);
    T_CHECK(ms_t_runf(NULL, NULL, "%s jobs --model %s --input %s 2>/dev/null", bin, dir, in) == 2, "no --output: exit 2");
    T_CHECK(ms_t_runf(NULL, NULL, "%s jobs --model %s --input %s --output %s --max-batch 0 2>/dev/null", bin, dir, in,
                      out) == 2,
            "--max-batch 0: exit 2");
    T_CHECK(ms_t_runf(NULL, NULL, "%s jobs --model %s --input %s/none.jsonl --output %s 2>/dev/null", bin, dir, tmp,
                      out) == 4,
            "an input that cannot be read: exit 4");
    ms_t_write_file(out, "{\"not\": \"ours\"}\n");
    char *err = NULL;
    st = ms_t_runf(NULL, &err, "%s jobs --model %s --input %s --output %s --quiet", bin, dir, in, out);
    T_CHECK(st == 2 && err && strstr(err, "--resume"), "an existing output without --resume: exit 2 (%d)", st);
    free(err);
    err = NULL;
    st = ms_t_runf(NULL, &err, "%s jobs --model %s --input %s --output %s --resume --quiet", bin, dir, in, out);
    T_CHECK(st == 5 && err && strstr(err, "line 1"), "resuming a file that is not ours: exit 5 naming the line (%d)", st);
    free(err);
}

/* --json-progress: every stderr line is one JSON object: the plan, progress, logs, the summary,
 * and a failure with its exit code. */
static void check_json_progress(void)
{
    const char *in = make_input("in-jp.jsonl");
    const char *out = ms_t_path(tmp, "jp.out");
    char *err = NULL;
    int st = ms_t_runf(NULL, &err, "%s jobs --model %s --input %s --output %s --max-batch 4 --json-progress", bin, dir, in, out);
    int lines = 0, objects = 0, plan = 0, summary = 0, final = 0;
    for (char *l = err ? strtok(err, "\n") : NULL; l; l = strtok(NULL, "\n")) {
        lines++;
        json_t *o = json_loads(l, 0, NULL);
        if (json_is_object(o)) objects++;
        plan += json_object_get(o, "plan") && json_integer_value(json_object_get(json_object_get(o, "plan"), "prefill_chunk")) > 0;
        summary += json_object_get(o, "summary") != NULL;
        final += json_is_true(json_object_get(o, "final"));
        json_decref(o);
    }
    T_CHECK(st == 0 && lines > 3 && objects == lines && plan == 1 && summary == 1 && final == 1,
            "--json-progress: %d stderr lines, %d JSON objects, plan %d, summary %d, final %d", lines, objects, plan,
            summary, final);
    free(err);
    err = NULL;
    st = ms_t_runf(NULL, &err, "%s jobs --model %s --input %s --output %s --json-progress", bin, dir, in, out);
    json_t *o = err ? json_loads(err, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    T_CHECK(st == 2 && json_integer_value(json_object_get(o, "exit_code")) == 2 &&
                !strcmp(json_string_value(json_object_get(o, "level")) ? json_string_value(json_object_get(o, "level")) : "",
                        "error") &&
                strstr(json_string_value(json_object_get(o, "message")) ? json_string_value(json_object_get(o, "message")) : "",
                       "--resume"),
            "a failure with --json-progress is a JSON object with its exit code: %s", err ? err : "");
    json_decref(o);
    free(err);
}

/* Token ids by custom_id of a jobs output. */
static json_t *ids_by_id(char *out)
{
    json_t *r = json_object();
    for (char *l = out ? strtok(out, "\n") : NULL; l; l = strtok(NULL, "\n")) {
        json_t *o = json_loads(l, 0, NULL);
        json_t *c = json_array_get(json_object_get(json_object_get(json_object_get(o, "response"), "body"), "choices"), 0);
        const char *id = json_string_value(json_object_get(o, "custom_id"));
        if (id) json_object_set(r, id, json_object_get(c, "token_ids"));
        json_decref(o);
    }
    return r;
}

/* The summary's prefix_cache object in a --json-progress stderr, or NULL. */
static json_t *pc_summary(const char *err)
{
    const char *sum = err ? strstr(err, "\"prefix_cache\"") : NULL;
    return sum ? json_loads(strchr(sum, '{'), JSON_DISABLE_EOF_CHECK, NULL) : NULL;
}

/* Jobs sharing a system prompt: by default its beginning is prefilled once and kept in room the
 * plan reserves, and every job starts from it; the results are those of --no-shared-prefill (each
 * job prefills its whole prompt), with --prefix-cache too. A budget with no room for the kept
 * state runs without it and says so. */
static void check_prefix_cache(void)
{
    const char *in = ms_t_path(tmp, "in-shared.jsonl");
    char lines[8192] = "";
    for (int i = 0; i < 6; i++)
        snprintf(lines + strlen(lines), sizeof lines - strlen(lines),
                 "{\"custom_id\":\"s%d\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[{\"role\":\"system\","
                 "\"content\":\"You are a careful assistant who answers in full sentences and checks every fact twice.\"},"
                 "{\"role\":\"user\",\"content\":\"Question %d?\"}],\"max_tokens\":6}}\n", i, i);
    ms_t_write_file(in, lines);
    char *a = NULL, *b = NULL, *c = NULL, *err_a = NULL, *err_b = NULL, *err_c = NULL;
    int s1 = ms_t_runf(&a, &err_a, "%s jobs --model %s --input %s --output - --no-shared-prefill --json-progress", bin, dir, in);
    int s2 = ms_t_runf(&b, &err_b, "%s jobs --model %s --input %s --output - --json-progress", bin, dir, in);
    int s3 = ms_t_runf(&c, &err_c, "%s jobs --model %s --input %s --output - --prefix-cache 16M --json-progress", bin, dir, in);
    json_t *ra = ids_by_id(a), *rb = ids_by_id(b), *rc = ids_by_id(c);
    T_CHECK(s1 == 0 && s2 == 0 && s3 == 0 && json_object_size(ra) == 6 && json_equal(ra, rb) && json_equal(ra, rc),
            "6 jobs sharing a system prompt: the same results shared (by default, and with --prefix-cache) as not");
    json_t *pa = pc_summary(err_a), *pb = pc_summary(err_b), *pcc = pc_summary(err_c);
    T_CHECK(!pa, "--no-shared-prefill: no prefix cache at all (summary: %s)", err_a ? err_a : "-");
    for (int k = 0; k < 2; k++) {
        json_t *p = k ? pcc : pb;
        T_CHECK(p && json_integer_value(json_object_get(p, "hits")) >= 6 &&
                    json_integer_value(json_object_get(p, "tokens_reused")) > 6 * 16,
                "%s: every job started from the shared beginning's state", k ? "--prefix-cache 16M" : "by default");
    }
    /* The plan reserves the kept state's room (and --prefix-cache's on top of it). */
    json_t *plan_a = err_a ? json_loads(err_a, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    json_t *plan_b = err_b ? json_loads(err_b, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    json_t *plan_c = err_c ? json_loads(err_c, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    json_int_t ka = json_integer_value(json_object_get(json_object_get(plan_a, "plan"), "prefix_cache_bytes"));
    json_int_t kb = json_integer_value(json_object_get(json_object_get(plan_b, "plan"), "prefix_cache_bytes"));
    json_int_t kc = json_integer_value(json_object_get(json_object_get(plan_c, "plan"), "prefix_cache_bytes"));
    T_CHECK(plan_a && plan_b && plan_c && ka == 0 && kb > 0 && kc == kb + (16 << 20),
            "planned prefix-cache bytes: %lld unshared, %lld shared, %lld shared + 16M", (long long)ka, (long long)kb,
            (long long)kc);
    json_t *refs[] = {plan_a, plan_b, plan_c, pa, pb, pcc};
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++) json_decref(refs[i]);
    /* No room: said, then the plan without the kept state (here refused as well: 1 byte). */
    char *e1 = NULL;
    int s4 = ms_t_runf(NULL, &e1, "%s jobs --model %s --input %s --output - --ram-budget 1", bin, dir, in);
    T_CHECK(s4 == MS_EXIT_BUDGET && e1 && strstr(e1, "no room in the budget to keep 1 shared prompt beginning") &&
                strstr(e1, "the minimum that would work"),
            "a budget without room for the shared state: said, then planned without it (exit %d): %s", s4, e1 ? e1 : "-");
    free(e1);
    json_decref(ra), json_decref(rb), json_decref(rc);
    char *bufs[] = {a, b, c, err_a, err_b, err_c};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
}

/* On a terminal the progress line fits its width (here 40 columns, through script(1)). */
static void check_tty_width(void)
{
    if (ms_t_run("script --version >/dev/null 2>&1", NULL) != 0) {
        ms_t_skip("SKIP: script(1) is not installed (bsdutils): the terminal line is not checked");
        return;
    }
    const char *in = make_input("in-tty.jsonl");
    const char *out = ms_t_path(tmp, "tty.out");
    char *shown = NULL;
    int st = ms_t_runf(&shown, NULL, "script -qec \"stty cols 40; %s jobs --model %s --input %s --output %s --max-batch 1\" /dev/null",
                       bin, dir, in, out);
    int drawn = 0, widest = 0;
    for (char *l = shown ? strtok(shown, "\r\n") : NULL; l; l = strtok(NULL, "\r\n")) {
        if (strncmp(l, "jobs [", 6)) continue;
        drawn++;
        int w = (int)strcspn(l, "\033");
        if (w > widest) widest = w;
    }
    T_CHECK(st == 0 && drawn >= 1 && widest <= 39, "the jobs line at 40 columns: %d redraws, widest %d", drawn, widest);
    free(shown);
}

int main(void)
{
    ms_log_set_level(0);
    snprintf(tmp, sizeof tmp, "%s", ms_t_tmpdir("jobs"));
    snprintf(dir, sizeof dir, "%.1024s/m", tmp);
    snprintf(bin, sizeof bin, "%s", ms_t_bin("moestream"));
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    T_CHECK(ms_synth_write(dir, &sh, 11) == 0, "synth tiny: %s", ms_err_msg());
    make_refs();
    int batches[3] = {1, 3, 8};
    for (int w = 0; w <= 2; w += 2)
        for (int b = 0; b < 3; b++) check_batch(batches[b], w);
    check_shape();
    check_duplicates();
    check_usage();
    check_json_progress();
    check_tty_width();
    check_prefix_cache();
    check_resume(SIGKILL);
    check_resume(SIGTERM);
    check_output_guard();
    check_worker_lost(1);
    check_worker_lost(4);
    check_budget();
    for (int i = 0; i < NJOBS; i++) json_decref(ref_ids[i]);
    return ms_t_done();
}
