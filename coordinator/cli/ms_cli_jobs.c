/* ms_cli_jobs: the `jobs` command: a JSONL file of jobs through the continuous-batching
 * scheduler, results appended as they finish, resumable, with progress. */
#include <errno.h>
#include <jansson.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ms_families.h"
#include "ms_cli.h"
#include "ms_cli_eopt.h"
#include "ms_cli_pcache.h"
#include "ms_cli_shared.h"
#include "ms_engine.h"
#include "ms_err.h"
#include "ms_jobfile.h"
#include "ms_opt.h"
#include "ms_model.h"
#include "ms_plan.h"
#include "ms_jtext.h"
#include "ms_progress.h"
#include "ms_sched.h"
#include "ms_size.h"

#define FSYNC_EVERY_S 2.0

typedef struct {
    ms_cli_eopts e; /* model, budget, I/O, threads, workers */
    const char *input, *output, *dump;
    long long max_batch, max_context;
    const char *date;           /* --date: chat prompts carry this date (harmony) */
    int resume, json_progress;
    int no_share;               /* --no-shared-prefill */
    ms_cli_pcopts pc;           /* the prefix cache */
} jobs_opts;

static void jobs_usage(FILE *f)
{
    fputs("usage: moestream jobs --model DIR --input FILE|- --output FILE|- [--max-batch N] [--resume]\n"
          "                      [--ram-budget SIZE] [--max-context N] [--date YYYY-MM-DD] [--json-progress] [--quiet]\n"
          "                      [--threads N] [--buffered-io] [--mmap auto|off] [--io-depth N] [--prefill-chunk N] [--prefill-span N|off]\n"
          "                      [--prefill-mixed off|auto|N] [--scratch-dir DIR|off]\n"
          "                      [--lru-cache] [--trunk-pack DIR|none] [--pin-threads] [--expert-prefetch auto|on|off]\n"
          "                      [--workers EP[,EP...] | --cluster FILE | --local-workers N]\n"
          "                      [--curve-secret FILE] [--insecure] [--worker-timeout SEC] [--dump-logits DIR]\n"
          "                      [--speculate auto|off|N] [--draft auto|ngram|mtp] [--draft-file PATH] [--no-shared-prefill]\n"
          "                      " MS_CLI_PC_USAGE "\n"
          "\n"
          "Runs every job of FILE (JSON Lines, OpenAI Batch API shape; - reads standard input) and appends\n"
          "one result line per job to the output (- writes them to standard output), in completion order. A line is\n"
          "  {\"custom_id\": \"a1\", \"method\": \"POST\", \"url\": \"/v1/completions\" | \"/v1/chat/completions\",\n"
          "   \"body\": {\"prompt\": \"text\" | [ids] | \"messages\": [{\"role\", \"content\"}...], \"max_tokens\": 16,\n"
          "            \"temperature\": 0, \"top_p\": 1, \"seed\": 0, \"stop\": [\"...\"]}}\n"
          "or the body alone (short form; a chat when it has \"messages\"; custom_id \"line-N\" when absent\n"
          "or null, \"line-N.2\" if another line names itself \"line-N\").\n"
          "Up to --max-batch jobs decode together (default: as many as the budget holds); a finished job\n"
          "leaves and a waiting one joins at the next step. Each job's result is the same as `moestream run`\n"
          "on it alone. A bad line gets an error line and the run goes on; duplicate custom_ids are refused\n"
          "before anything runs. The output is locked while a run writes it: a second run on it is refused\n"
          "(exit 4). --resume continues an output file: jobs already there are skipped (a torn last line is\n"
          "dropped and redone); each output line carries the request_hash of the input line it answers, and\n"
          "an output written for other input lines is refused naming the first custom_id that differs\n"
          "(exit 5). --max-context N (default 8192) bounds prompt + max_tokens. --date fixes the date a chat's\n"
          "system message carries (gpt-oss's harmony; default today, UTC), so prompts can be reproduced.\n"
          "--json-progress keeps stderr to JSON objects, one per line: the plan ({\"plan\": ...}), progress once\n"
          "a second (the last with \"final\": true), log lines ({\"level\", \"message\"}), a failure ({\"level\":\n"
          "\"error\", \"message\", \"exit_code\"}) and the summary ({\"summary\": ...}). --dump-logits DIR writes each job's\n"
          "logits rows to DIR/line-N.f32 as `run --dump-logits` does (tests). Other options as for run;\n"
          "each job speculates on its own (--speculate, --draft-file: every job drafts the file's ids).\n"
          "The longest beginnings that jobs share (16 tokens or more: a system prompt; up to 8, those that spare\n"
          "the most tokens) are prefilled once, before the jobs, and every job starts from them (the same tokens\n"
          "and logits); their states are kept in RAM the plan reserves for them, beside --prefix-cache's. A budget\n"
          "without room for them runs without (said on stderr). --no-shared-prefill: each job prefills its whole\n"
          "prompt.\n"
          MS_CLI_PC_HELP
          "Ctrl-C or SIGTERM finishes the current step, keeps every finished result and exits 130; a\n"
          "second one ends the process at once (finished results are kept: they were written).\n"
          "Exit 0 when every line was answered (error lines included).\n",
          f);
}

static volatile sig_atomic_t got_signal;
static void on_signal(int sig) { got_signal = sig; }

/* --json-progress: every stderr line is a JSON object. Log lines become {"level", "message"}; a
 * failure {"level": "error", "message", "exit_code"}; the plan's text lines are left out, as the
 * plan comes whole ({"plan": ...}) once the model is open. */
static void json_log(void *ctx, int level, int code, const char *msg)
{
    (void)ctx;
    if (level >= 0 && !strncmp(msg, "plan: ", 6)) return;
    json_t *o = json_pack("{s:s,s:o}", "level", level < 0 ? "error" : level == 0 ? "warning" : level == 1 ? "info" : "debug",
                          "message", ms_jtext(msg, strlen(msg)));
    if (level < 0) json_object_set_new(o, "exit_code", json_integer(code));
    json_dumpf(o, stderr, JSON_COMPACT);
    fputc('\n', stderr);
    json_decref(o);
}

/* One JSON object on its own stderr line (--json-progress); o is taken. */
static void json_line(json_t *o)
{
    json_dumpf(o, stderr, JSON_COMPACT);
    fputc('\n', stderr);
    json_decref(o);
}

/* The run's state shared with the scheduler's done callback. */
typedef struct {
    const jobs_opts *o;
    ms_jobspec *specs;
    int fd;
    const char *model_name;
    int64_t V;
    double last_sync;
    uint64_t answered, errors;
    ms_jobfile_limits lim;      /* the tokenizer and chat format, for chat answers */
} jobs_run;

/* One line, with one write (retried only when partial). */
static int put_line(jobs_run *r, const char *line, size_t len)
{
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(r->fd, line + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            ms_err_set("cannot write to %s: %s", r->o->output, strerror(errno));
            return ms_err_set_code(MS_EXIT_IO);
        }
        off += (size_t)w;
    }
    r->answered++;
    double now = ms_cli_now();
    if (now - r->last_sync >= FSYNC_EVERY_S) {
        if (fsync(r->fd) != 0 && errno != EINVAL) {
            ms_err_set("cannot sync %s: %s", r->o->output, strerror(errno));
            return ms_err_set_code(MS_EXIT_IO);
        }
        r->last_sync = now;
    }
    return 0;
}

static int dump_logits(jobs_run *r, const ms_jobspec *j, const ms_sched_result *res)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/line-%d.f32", r->o->dump, j->line);
    FILE *f = fopen(path, "wb");
    size_t n = (size_t)(res->n_rows * r->V);
    int ok = f && fwrite(res->logits, sizeof(float), n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) {
        ms_err_set("cannot write %s", path);
        return ms_err_set_code(MS_EXIT_IO);
    }
    return 0;
}

static int on_done(void *ctx, const ms_sched_result *res)
{
    jobs_run *r = ctx;
    const ms_jobspec *j = res->user;
    if (!res->finish) r->errors++;
    if (res->finish && r->o->dump && dump_logits(r, j, res) != 0) return -1;
    size_t len;
    char *line = ms_jobline_result_chat(j, r->model_name, (int64_t)time(NULL), res, &r->lim, &len);
    int rc = put_line(r, line, len);
    free(line);
    return rc;
}

/* Input lines (split at '\n'; a final line without one counts; blank lines are skipped). */
static int read_input(const char *path, char **buf, size_t *len)
{
    if (strcmp(path, "-") != 0) return (*buf = ms_cli_read_file(path, len)) ? 0 : -1;
    size_t cap = 1 << 16, n = 0;
    char *b = ms_malloc(cap);
    size_t got;
    while ((got = fread(b + n, 1, cap - n - 1, stdin)) > 0) {
        n += got;
        if (cap - n < 2) b = ms_realloc(b, cap *= 2);
    }
    if (ferror(stdin)) {
        free(b);
        ms_err_set("cannot read standard input");
        return ms_err_set_code(MS_EXIT_IO);
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return 0;
}

/* Progress: a line on a terminal, or one JSON object per second with --json-progress. */
typedef struct {
    double t0, last;
    uint64_t total, base_bytes;
    double base_wait;
    int tty, max_batch;
    int layer, layers;     /* the pass in progress: layers done of its model's (0: between passes) */
    int64_t pass_rows;     /* its rows (a prefill span's can be thousands) */
    ms_progress_line line; /* the terminal line (tty) */
} progress;

static void show_progress(progress *p, const jobs_run *r, ms_engine *e, ms_sched *s, int final)
{
    double now = ms_cli_now();
    if (!final && now - p->last < (r->o->json_progress ? 1.0 : 0.25)) return;
    p->last = now;
    ms_sched_stats st;
    ms_sched_get_stats(s, &st);
    ms_engine_stats es;
    ms_engine_get_stats(e, &es);
    double el = now - p->t0;
    uint64_t bytes = es.model.bytes_read_experts + es.model.bytes_read_trunk - p->base_bytes;
    double tps = el > 0 ? (double)st.generated / el : 0.0;
    double per_tok = st.generated ? (double)bytes / (double)st.generated : 0.0;
    uint64_t done = r->answered;
    double eta = done > 0 && done < p->total ? el / (double)st.finished * (double)(p->total - done) : 0.0;
    if (st.finished == 0) eta = -1;
    if (r->o->json_progress) {
        fprintf(stderr,
                "{\"elapsed_seconds\":%.3f,\"jobs_done\":%llu,\"jobs_total\":%llu,\"jobs_failed\":%llu,\"running\":%d,"
                "\"waiting\":%d,\"generated_tokens\":%llu,\"tokens_per_second\":%.3f,\"eta_seconds\":%.1f,\"batch\":%d,\"max_batch\":%d,"
                "\"bytes_read_per_token\":%.0f,\"bytes_read\":%llu,\"steps\":%llu,\"passes\":%llu,"
                "\"io_wait_seconds\":%.3f,\"peak_rss_bytes\":%llu,\"draft_tokens\":%llu,\"accepted_draft_tokens\":%llu,"
                "\"tokens_per_decode_pass\":%.3f,\"pass_layer\":%d,\"pass_layers\":%d,\"pass_rows\":%lld,\"final\":%s}\n",
                el, (unsigned long long)done, (unsigned long long)p->total, (unsigned long long)r->errors, st.running,
                st.waiting, (unsigned long long)st.generated, tps, eta, st.running, p->max_batch, per_tok, (unsigned long long)bytes,
                (unsigned long long)st.steps, (unsigned long long)es.passes, es.model.io_wait_seconds - p->base_wait,
                (unsigned long long)es.peak_rss_all, (unsigned long long)es.drafted, (unsigned long long)es.accepted,
                es.decode_passes ? (double)es.decode_tokens / (double)es.decode_passes : 0.0, p->layer, p->layers,
                (long long)p->pass_rows, final ? "true" : "false");
    } else if (p->tty) {
        char a[32], etas[32];
        if (eta < 0)
            snprintf(etas, sizeof etas, "?");
        else
            snprintf(etas, sizeof etas, "%dm%02ds", (int)(eta / 60), (int)eta % 60);
        /* The line fits the terminal: the bar narrows first, then the least useful parts go. */
        int cols = ms_progress_cols(2), bw = cols >= 100 ? 20 : 10;
        char bar[21], text[512], part[6][64];
        int fill = p->total ? (int)(bw * done / p->total) : bw;
        for (int i = 0; i < bw; i++) bar[i] = i < fill ? '#' : '.';
        bar[bw] = 0;
        int n = snprintf(text, sizeof text, "jobs [%s] %llu/%llu", bar, (unsigned long long)done,
                         (unsigned long long)p->total);
        snprintf(part[0], sizeof part[0], "  %.2f tok/s", tps);
        snprintf(part[1], sizeof part[1], "  ETA %s", etas);
        snprintf(part[2], sizeof part[2], " (%llu errors)", (unsigned long long)r->errors);
        snprintf(part[3], sizeof part[3], "  batch %d/%d", st.running, p->max_batch);
        snprintf(part[4], sizeof part[4], "  %s read/token", ms_size_fmt((uint64_t)per_tok, a, sizeof a));
        part[5][0] = 0;
        if (p->layer > 0)
            snprintf(part[5], sizeof part[5], "  layer %d/%d of %lld rows", p->layer, p->layers, (long long)p->pass_rows);
        int take[6] = {0}, len = n;
        for (int i = 0; i < 6; i++)
            if (len + (int)strlen(part[i]) <= cols - 1) len += (int)strlen(part[i]), take[i] = 1;
        static const int order[6] = {2, 5, 0, 1, 3, 4}; /* shown in this order: errors right after the counts */
        for (int k = 0; k < 6; k++)
            if (take[order[k]]) n += snprintf(text + n, sizeof text - (size_t)n, "%s", part[order[k]]);
        ms_progress_line_draw(&p->line, stderr, cols, text);
        if (final) ms_progress_line_end(&p->line, stderr);
    }
}

/* Inside a pass (a long prefill span runs for minutes): its layers as progress. */
typedef struct {
    progress *p;
    const jobs_run *r;
    ms_engine *e;
    ms_sched *s;
} layer_view;

static void jobs_layer(void *ctx, int layer, int n_layers, int64_t rows)
{
    layer_view *v = ctx;
    v->p->layer = layer + 1;
    v->p->layers = n_layers;
    v->p->pass_rows = rows;
    show_progress(v->p, v->r, v->e, v->s, 0);
}

/* Take the output file for this run: open (create) it and hold an exclusive lock on it for the
 * whole run, so that a second jobs run on the same output is refused instead of interleaving
 * its lines. Returns 0 with *fd, or the exit code after reporting. */
static int lock_output(const jobs_opts *o, int *fd)
{
    struct stat sb;
    if (!strcmp(o->output, "-")) { /* standard output: the lines as they finish, nothing to lock or resume */
        if (o->resume)
            return ms_cli_fail("jobs", MS_EXIT_USAGE, "--resume continues an output file: it does not go with --output -");
        if ((*fd = dup(STDOUT_FILENO)) < 0)
            return ms_cli_fail("jobs", MS_EXIT_IO, "cannot write to standard output: %s", strerror(errno));
        return 0;
    }
    if (stat(o->output, &sb) == 0 && S_ISDIR(sb.st_mode))
        return ms_cli_fail("jobs", MS_EXIT_USAGE, "--output %s is a directory: give a file to write the results to",
                           o->output);
    if ((*fd = open(o->output, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) < 0)
        return ms_cli_fail("jobs", MS_EXIT_IO, "cannot open %s: %s", o->output, strerror(errno));
    if (flock(*fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno, rc;
        close(*fd);
        *fd = -1;
        if (e == EWOULDBLOCK)
            rc = ms_cli_fail("jobs", MS_EXIT_IO,
                             "%s is being written by another moestream jobs run (it holds the file's lock): wait for it "
                             "to finish, then --resume, or give another --output",
                             o->output);
        else
            rc = ms_cli_fail("jobs", MS_EXIT_IO, "cannot lock %s: %s", o->output, strerror(e));
        return rc;
    }
    return 0;
}

/* Drop the torn tail of an output file and collect the custom_ids it answers (with the request
 * hash of each, parallel). Called with the output locked. */
static int scan_output(const jobs_opts *o, char ***done, char ***hashes, size_t *n_done)
{
    *done = NULL;
    *hashes = NULL;
    *n_done = 0;
    struct stat sb;
    if (!strcmp(o->output, "-") || stat(o->output, &sb) != 0 || sb.st_size == 0) return 0;
    if (!o->resume)
        return ms_cli_fail("jobs", MS_EXIT_USAGE, "%s exists: pass --resume to continue it, or remove it", o->output);
    size_t len = 0, keep = 0;
    char *buf = ms_cli_read_file(o->output, &len);
    if (!buf) return ms_cli_fail_err("jobs");
    int rc = ms_jobline_scan_hashes(buf, len, done, hashes, n_done, &keep);
    free(buf);
    if (rc != 0) return ms_cli_fail("jobs", MS_EXIT_INPUT, "cannot resume %s: %s", o->output, ms_err_msg());
    if (keep < len) {
        if (truncate(o->output, (off_t)keep) != 0)
            return ms_cli_fail("jobs", MS_EXIT_IO, "cannot drop the torn last line of %s: %s", o->output, strerror(errno));
        ms_log(1, "jobs: dropped a torn last line of %zu bytes from %s", len - keep, o->output);
    }
    return 0;
}

typedef struct {
    const char *id, *hash;
} answered;

static int cmp_answered(const void *a, const void *b) { return strcmp(((const answered *)a)->id, ((const answered *)b)->id); }

/* A resumed output must answer this input: every answered custom_id's request hash equals its
 * input line's. Refuses the first input line (in input order) that does not, or whose answer
 * has no hash, naming it. */
static int check_answers(const jobs_opts *o, const ms_jobspec *specs, int n_specs, char **done, char **hashes,
                         size_t n_done)
{
    if (n_done == 0) return 0;
    answered *v = ms_malloc(sizeof *v * n_done);
    for (size_t k = 0; k < n_done; k++) v[k] = (answered){done[k], hashes[k]};
    qsort(v, n_done, sizeof *v, cmp_answered);
    int rc = 0;
    for (int i = 0; i < n_specs && rc == 0; i++) {
        answered key = {specs[i].custom_id, NULL}, *a = bsearch(&key, v, n_done, sizeof *v, cmp_answered);
        if (!a) continue;
        if (!a->hash)
            rc = ms_cli_fail("jobs", MS_EXIT_INPUT,
                             "cannot resume %s: its line for custom_id '%s' has no request_hash (written by an older "
                             "moestream), so it cannot be checked against input line %d: remove the output or give "
                             "another --output",
                             o->output, a->id, specs[i].line);
        else if (strcmp(a->hash, specs[i].request_hash) != 0)
            rc = ms_cli_fail("jobs", MS_EXIT_INPUT,
                             "cannot resume %s: custom_id '%s' (input line %d) is not the request that output answered "
                             "(request_hash %s there, %s here): the output was written for another input. Give another "
                             "--output, or remove that line from it",
                             o->output, a->id, specs[i].line, a->hash, specs[i].request_hash);
    }
    free(v);
    return rc;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A made-up "line-N" custom_id that an explicit one also uses gets a suffix ("line-N.2", ...),
 * so that lines without custom_id never make the file's ids collide. */
static void rename_auto_ids(ms_jobspec *specs, int n)
{
    char **ids = ms_malloc(sizeof *ids * (size_t)(n + 1));
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!specs[i].auto_id) ids[m++] = specs[i].custom_id;
    qsort(ids, (size_t)m, sizeof *ids, cmp_str);
    for (int i = 0; i < n; i++) {
        if (!specs[i].auto_id) continue;
        for (int k = 2; bsearch(&specs[i].custom_id, ids, (size_t)m, sizeof *ids, cmp_str); k++) {
            char buf[48];
            snprintf(buf, sizeof buf, "line-%d.%d", specs[i].line, k);
            free(specs[i].custom_id);
            specs[i].custom_id = ms_strdup(buf);
        }
    }
    free(ids);
}

static int cmp_spec(const void *a, const void *b)
{
    const ms_jobspec *x = *(ms_jobspec *const *)a, *y = *(ms_jobspec *const *)b;
    int c = strcmp(x->custom_id, y->custom_id);
    return c ? c : (x->line > y->line) - (x->line < y->line);
}

/* Refuse duplicate custom_ids, naming two lines of the first found. */
static int check_duplicates(ms_jobspec *specs, int n)
{
    ms_jobspec **v = ms_malloc(sizeof *v * (size_t)(n + 1));
    for (int i = 0; i < n; i++) v[i] = &specs[i];
    qsort(v, (size_t)n, sizeof *v, cmp_spec);
    int rc = 0;
    for (int i = 1; i < n && !rc; i++)
        if (!strcmp(v[i]->custom_id, v[i - 1]->custom_id))
            rc = ms_cli_fail("jobs", MS_EXIT_INPUT, "custom_id '%s' appears on lines %d and %d: custom_ids must be unique",
                             v[i]->custom_id, v[i - 1]->line, v[i]->line);
    free(v);
    return rc;
}

/* Open the engine for todo jobs of at most longest positions (prompt + max_tokens + 1), with room
 * for n_shared kept states of at most shared_len positions. */
static int open_engine(const jobs_opts *o, int todo, int64_t longest, int64_t max_prompt, int n_shared,
                       int64_t shared_len, ms_engine **out)
{
    ms_engine *e = NULL;
    int rc = MS_EXIT_OK;
    ms_cli_catch_signals(on_signal);
    ms_engine_opts eo = {0};
    ms_cli_eopt_engine(&o->e, &eo);
    eo.run.all_logits = o->dump != NULL;
    eo.run.prompt_tokens = max_prompt;
    eo.run.max_positions = longest;
    eo.run.state_cache = o->pc.ram;
    eo.run.state_cache_seqs = n_shared;
    eo.run.state_cache_positions = shared_len;
    int cap_batch = todo < MS_MODEL_MAX_SEQS ? todo : MS_MODEL_MAX_SEQS;
    if (o->max_batch > 0)
        eo.max_seqs = (int)(o->max_batch < cap_batch ? o->max_batch : cap_batch);
    else
        eo.fit_seqs = cap_batch;
    if (!(e = ms_engine_open(&eo)) && n_shared > 0 && ms_err_code() == MS_EXIT_BUDGET) {
        /* Sharing is an optimisation: a budget too small for it runs without (the same answers). */
        ms_log(1, "jobs: no room in the budget to keep %d shared prompt beginning%s (%s); each job prefills its whole prompt",
               n_shared, n_shared > 1 ? "s" : "", ms_err_msg());
        eo.run.state_cache_seqs = 0;
        e = ms_engine_open(&eo);
    }
    if (!e) rc = ms_cli_fail_err("jobs");
    else if (o->json_progress && !o->e.quiet && ms_model_plan(ms_engine_model(e)))
        json_line(json_pack("{s:o}", "plan", ms_plan_json(ms_model_plan(ms_engine_model(e)))));
    *out = e;
    return rc;
}

/* Step: every line of the input parsed into specs[*n] (bad lines kept, with their error) with the
 * model's tokenizer and chat format; *lim what they were checked against. 0, or an exit code. */
static int parse_jobs(const jobs_opts *o, const ms_family *fam, const ms_model_info *info, ms_jobspec **specs, int *n,
                      ms_jobfile_limits *lim)
{
    const char *cmd = "jobs";
    ms_tok *tok = NULL;
    char *in = NULL;
    size_t in_len = 0;
    if (ms_tok_present(o->e.model) && !(tok = ms_tok_load(o->e.model))) return ms_cli_fail_err(cmd);
    if (read_input(o->input, &in, &in_len) != 0) {
        ms_tok_free(tok);
        return ms_cli_fail_err(cmd);
    }
    *lim = (ms_jobfile_limits){tok, info->vocab, o->max_context, fam->chat, o->date};
    int cap = 0, line = 0;
    for (size_t pos = 0; pos < in_len;) {
        const char *nl = memchr(in + pos, '\n', in_len - pos);
        size_t l = nl ? (size_t)(nl - (in + pos)) : in_len - pos;
        line++;
        size_t k = 0;
        while (k < l && (in[pos + k] == ' ' || in[pos + k] == '\t' || in[pos + k] == '\r')) k++;
        if (k < l) {
            if (*n == cap) *specs = ms_realloc(*specs, sizeof **specs * (size_t)(cap = cap * 2 + 64));
            ms_jobspec_parse(in + pos, l, line, lim, &(*specs)[(*n)++]);
        }
        pos += l + 1;
    }
    free(in);
    ms_tok_free(tok); /* the engine loads its own */
    lim->tok = NULL;
    rename_auto_ids(*specs, *n);
    return 0;
}

/* What is left to run: jobs answered already (done, sorted) marked (line < 0) and counted in
 * *skipped; the good ones counted in *todo, with the longest prompt plus answer and prompt. */
typedef struct {
    int todo, skipped;
    int64_t longest, max_prompt;
} jobs_todo;

static jobs_todo count_todo(ms_jobspec *specs, int n, char **done, size_t n_done)
{
    jobs_todo t = {0, 0, 1, 1};
    for (int i = 0; i < n; i++) {
        ms_jobspec *j = &specs[i];
        if (n_done && bsearch(&j->custom_id, done, n_done, sizeof *done, cmp_str)) {
            t.skipped++;
            j->line = -j->line; /* answered already */
            continue;
        }
        if (j->err_code) continue;
        t.todo++;
        if ((int64_t)j->n_prompt + j->max_tokens + 1 > t.longest) t.longest = (int64_t)j->n_prompt + j->max_tokens + 1;
        if ((int64_t)j->n_prompt > t.max_prompt) t.max_prompt = (int64_t)j->n_prompt;
    }
    return t;
}

/* Step: the bad lines' error lines written (once the model is open, so that a refused model or
 * budget leaves the output as it was). 0, or an exit code. */
static int answer_bad_lines(jobs_run *run, const ms_jobspec *specs, int n)
{
    for (int i = 0; i < n; i++) {
        const ms_jobspec *j = &specs[i];
        if (j->line < 0 || !j->err_code) continue;
        size_t len;
        char *l = ms_jobline_error(j, j->err_code, j->err_msg, &len);
        run->errors++;
        int w = put_line(run, l, len);
        free(l);
        if (w != 0) return ms_cli_fail_err("jobs");
    }
    return 0;
}

/* Step: the prefix cache (--prefix-cache, and the plan's room for the shared beginnings' states,
 * none of which are kept without it: *n_shared 0) on the scheduler, the shared beginnings
 * prefilled into it. 0, or an exit code. */
static int open_cache(const jobs_opts *o, ms_engine *e, ms_sched *s, const ms_cli_prefix *shared, int *n_shared,
                      ms_pcache **pc)
{
    int pcode = 0;
    const ms_plan *plan = ms_model_plan(ms_engine_model(e));
    uint64_t room = plan && plan->in.state_cache > o->pc.ram ? plan->in.state_cache - o->pc.ram : 0;
    if (!room) *n_shared = 0;
    *pc = ms_cli_pc_open(&o->pc, room, e, o->e.model, "jobs", &pcode);
    if (pcode) return pcode;
    if (!*pc) return 0;
    ms_sched_set_pcache(s, *pc, 256);
    return ms_cli_shared_warm(e, *pc, shared, *n_shared);
}

/* Step: every job still to run handed to the scheduler (a chat's turn ends at its format's stops). */
static void queue_jobs(const jobs_opts *o, const ms_family *fam, ms_engine *e, ms_sched *s, ms_jobspec *specs, int n)
{
    int32_t stops[MS_CHAT_MAX_STOPS];
    int n_stops = ms_engine_tok(e) && fam->chat ? fam->chat->stop_ids(ms_engine_tok(e), stops, MS_CHAT_MAX_STOPS) : 0;
    for (int i = 0; i < n; i++) {
        ms_jobspec *j = &specs[i];
        if (j->line < 0 || j->err_code) continue;
        ms_sched_job sj;
        ms_jobspec_sched_job(j, fam->chat, stops, n_stops, &sj);
        sj.keep_logits = o->dump != NULL;
        sj.user = j;
        ms_sched_add(s, &sj);
    }
}

/* Step: the scheduler's steps until every job is answered or a signal comes, with the progress
 * line (or JSON events). 0, or an exit code (a failed step, an interruption). */
static int run_jobs(const jobs_opts *o, jobs_run *run, ms_engine *e, ms_sched *s, uint64_t total, int batch)
{
    const char *cmd = "jobs";
    int rc = 0;
    progress pg = {ms_cli_now(), 0, total, 0, 0, isatty(2) && !o->e.quiet && !o->json_progress, 0, 0, 0, 0, {0, 0}};
    layer_view lv = {&pg, run, e, s};
    ms_model_set_layer_observer(ms_engine_model(e), jobs_layer, &lv);
    ms_engine_stats es;
    ms_engine_get_stats(e, &es);
    pg.base_bytes = es.model.bytes_read_experts + es.model.bytes_read_trunk;
    pg.base_wait = es.model.io_wait_seconds;
    pg.max_batch = batch;
    while (ms_sched_pending(s) && !got_signal) {
        if (ms_sched_step(s) != 0) {
            ms_progress_line_end(&pg.line, stderr);
            rc = got_signal ? ms_cli_fail(cmd, MS_EXIT_INTERRUPTED, "interrupted (signal %d): %s", (int)got_signal, ms_err_msg())
                            : ms_cli_fail_err(cmd);
            break;
        }
        pg.layer = pg.layers = 0;
        pg.pass_rows = 0;
        show_progress(&pg, run, e, s, 0);
    }
    ms_model_set_layer_observer(ms_engine_model(e), NULL, NULL);
    if (rc) return rc;
    show_progress(&pg, run, e, s, 1);
    if (got_signal) {
        ms_sched_stats st;
        ms_sched_get_stats(s, &st);
        return ms_cli_fail(cmd, MS_EXIT_INTERRUPTED,
                           "interrupted (signal %d): %llu jobs written to %s, %d not finished (--resume runs them)",
                           (int)got_signal, (unsigned long long)run->answered, o->output, st.running + st.waiting);
    }
    return 0;
}

/* Step: the closing summary (a JSON line with --json-progress, else lines on stderr). */
static void summarize(const jobs_opts *o, const jobs_run *run, ms_engine *e, ms_pcache *pc, int skipped)
{
    if (o->e.quiet) return;
    ms_engine_stats es;
    if (e) ms_engine_get_stats(e, &es);
    if (o->json_progress) {
        json_t *sum = json_pack("{s:I,s:s,s:I,s:i,s:I,s:I}", "answered", (json_int_t)run->answered, "output",
                                o->output, "errors", (json_int_t)run->errors, "skipped", skipped, "draft_tokens",
                                (json_int_t)(e ? es.drafted : 0), "accepted_draft_tokens", (json_int_t)(e ? es.accepted : 0));
        if (pc) {
            ms_pcache_stats ps;
            ms_pcache_get_stats(pc, &ps);
            json_object_set_new(sum, "prefix_cache", json_pack("{s:I,s:I,s:I,s:I}", "lookups", (json_int_t)ps.lookups, "hits",
                                                               (json_int_t)ps.hits, "tokens_reused",
                                                               (json_int_t)ps.tokens_reused, "state_bytes_restored",
                                                               (json_int_t)ps.bytes_restored));
        }
        json_line(json_pack("{s:o}", "summary", sum));
        return;
    }
    fprintf(stderr, "moestream jobs: %llu lines answered in %s (%llu with errors), %d skipped as already there\n",
            (unsigned long long)run->answered, o->output, (unsigned long long)run->errors, skipped);
    if (pc) {
        char line[512];
        ms_cli_pc_summary(pc, line, sizeof line);
        fprintf(stderr, "moestream jobs: %s\n", line);
    }
    if (e && es.drafted)
        fprintf(stderr, "moestream jobs: speculation: %llu draft tokens, %llu accepted, %.2f tokens per decoding pass\n",
                (unsigned long long)es.drafted, (unsigned long long)es.accepted,
                es.decode_passes ? (double)es.decode_tokens / (double)es.decode_passes : 0.0);
}

/* jobs: parse and check every line before the model opens (the plan needs the longest job),
 * lock and scan the output (--resume), open the engine for what is left, answer bad lines, run
 * the rest through the scheduler, summarize. */
static int jobs_main(const jobs_opts *o)
{
    const char *cmd = "jobs";
    int rc = MS_EXIT_OK, n_specs = 0, n_shared = 0;
    char **done = NULL, **hashes = NULL;
    size_t n_done = 0;
    ms_jobspec *specs = NULL;
    ms_engine *e = NULL;
    ms_sched *s = NULL;
    ms_pcache *pc = NULL;
    ms_cli_prefix *shared = NULL; /* [n_shared] the jobs' shared prompt beginnings */
    jobs_run run = {.o = o, .fd = -1};
    const ms_family *fam = ms_families_detect(o->e.model);
    ms_model_info info;
    if (!fam || fam->peek(o->e.model, &info) != 0) return ms_cli_fail_err(cmd);
    if ((rc = parse_jobs(o, fam, &info, &specs, &n_specs, &run.lim)) != 0) goto out;
    if ((rc = check_duplicates(specs, n_specs)) != 0) goto out;
    if ((rc = lock_output(o, &run.fd)) != 0) goto out;
    if ((rc = scan_output(o, &done, &hashes, &n_done)) != 0) goto out;
    if ((rc = check_answers(o, specs, n_specs, done, hashes, n_done)) != 0) goto out;
    if (n_done) qsort(done, n_done, sizeof *done, cmp_str);
    run.specs = specs;
    run.last_sync = ms_cli_now();
    const char *slash = strrchr(o->e.model, '/');
    run.model_name = slash && slash[1] ? slash + 1 : o->e.model;
    run.V = info.vocab;
    jobs_todo t = count_todo(specs, n_specs, done, n_done);
    if (t.skipped) ms_log(1, "jobs: %d jobs already in %s are skipped", t.skipped, o->output);
    /* Shared beginnings (without --no-shared-prefill, and not for --dump-logits, whose jobs run
     * every prompt row themselves). */
    if (!o->no_share && !o->dump) n_shared = ms_cli_shared_find(specs, n_specs, &shared);
    if (t.todo > 0 && (rc = open_engine(o, t.todo, t.longest, t.max_prompt, n_shared,
                                        n_shared ? (int64_t)shared[n_shared - 1].n : 0, &e)) != 0)
        goto out;
    run.lim.tok = e ? ms_engine_tok(e) : NULL; /* answers use the engine's tokenizer */
    if ((rc = answer_bad_lines(&run, specs, n_specs)) != 0) goto out;
    if (t.todo > 0) {
        int batch = ms_engine_max_seqs(e);
        ms_log(1, "jobs: %d jobs to run, up to %d together", t.todo, batch);
        s = ms_sched_new(e, batch, on_done, &run);
        if ((rc = open_cache(o, e, s, shared, &n_shared, &pc)) != 0) goto out;
        queue_jobs(o, fam, e, s, specs, n_specs);
        if ((rc = run_jobs(o, &run, e, s, (uint64_t)(n_specs - t.skipped), batch)) != 0) goto out;
    }
    summarize(o, &run, e, pc, t.skipped);
out:
    if (run.fd >= 0) {
        int bad = fsync(run.fd) != 0 && errno != EINVAL;
        if (close(run.fd) != 0) bad = 1;
        if (bad && rc == MS_EXIT_OK) rc = ms_cli_fail(cmd, MS_EXIT_IO, "cannot write %s: %s", o->output, strerror(errno));
    }
    ms_sched_free(s);
    ms_pcache_free(pc);
    ms_engine_free(e);
    free(shared); /* its ids point into specs */
    for (int i = 0; i < n_specs; i++) ms_jobspec_clear(&specs[i]);
    free(specs);
    for (size_t i = 0; i < n_done; i++) {
        free(done[i]);
        free(hashes[i]);
    }
    free(done);
    free(hashes);
    return rc;
}

int ms_cli_jobs(int argc, char **argv)
{
    static const struct option own[] = {
        {"input", required_argument, 0, 'i'},
        {"output", required_argument, 0, 'o'},
        {"max-batch", required_argument, 0, 'b'},
        {"resume", no_argument, 0, 'r'},
        {"max-context", required_argument, 0, 'X'},
        {"date", required_argument, 0, 0x6461},
        {"json-progress", no_argument, 0, 'J'},
        {"no-shared-prefill", no_argument, 0, 'S'},
        {"dump-logits", required_argument, 0, 'd'},
        {"help", no_argument, 0, 'h'},
        MS_CLI_PC_OPTIONS,
    };
    enum { N_OWN = sizeof own / sizeof own[0] };
    struct option opts[N_OWN + MS_CLI_EOPT_COUNT + 1];
    ms_cli_eopt_table(own, N_OWN, opts);
    const char *cmd = "jobs";
    jobs_opts o = {.max_context = 8192};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'i': o.input = optarg; break;
        case 'o': o.output = optarg; break;
        case 'r': o.resume = 1; break;
        case 'J': o.json_progress = 1; break;
        case 'S': o.no_share = 1; break;
        case 0x6461: /* --date */
            if (ms_opt_date("--date", optarg) != 0) return ms_cli_fail_err(cmd);
            o.date = optarg;
            break;
        case 'd': o.dump = optarg; break;
        case 'b':
            if (ms_opt_int("--max-batch", optarg, 1, MS_MODEL_MAX_SEQS, &o.max_batch) != 0) return ms_cli_fail_err(cmd);
            break;
        case 'X':
            if (ms_opt_int("--max-context", optarg, 2, 1 << 24, &o.max_context) != 0) return ms_cli_fail_err(cmd);
            break;
        case 'h': jobs_usage(stdout); return MS_EXIT_OK;
        default: {
            int code, t = ms_cli_eopt_take_all(&o.e, &o.pc, cmd, c, optarg, &code);
            if (t > 0) break;
            if (t == 0) jobs_usage(stderr);
            return code;
        }
        }
    }
    if (optind != argc) return ms_cli_fail(cmd, MS_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    if (o.json_progress) ms_log_set_sink(json_log, NULL);
    if (!o.e.model || !o.input || !o.output)
        return ms_cli_fail(cmd, MS_EXIT_USAGE, "--model, --input and --output are required (see moestream jobs --help)");
    int rc = ms_cli_eopt_check(&o.e, cmd);
    if (rc != MS_EXIT_OK) return rc;
    ms_cli_set_output(o.e.quiet);
    return jobs_main(&o);
}
