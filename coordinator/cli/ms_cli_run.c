/* ms_cli_run: the `run` and `demo` commands: prefill, incremental decoding, output and stats. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <sys/resource.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ms_cli.h"
#include "ms_cli_eopt.h"
#include "ms_engine.h"
#include "ms_err.h"
#include "ms_proc.h"
#include "ms_file.h"
#include "ms_cli_grammar.h"
#include "ms_jtext.h"
#include "ms_opt.h"
#include "ms_plan.h"
#include "ms_progress.h"
#include "ms_size.h"
#include "ms_stdout.h"
#include "ms_families.h"
#include "ms_tok.h"
#include "ms_utf8.h"
#include "ms_xfmt.h"

typedef struct {
    ms_cli_eopts e; /* model, budget, I/O, threads, workers */
    const char *prompt, *prompt_file, *ids, *ids_file, *dump, *trace, *grammar, *json_schema;
    long long n, seed, plan_seqs;
    const char *family;        /* demo --family */
    float temperature, top_p;
    int json, allow_special, stop_eos, plan_only, raw, special;
} run_opts;

static void run_usage(FILE *f, int demo)
{
    if (demo) {
        char names[256], presets[512];
        size_t at = 0;
        for (int i = 0; i < ms_families_count() && at < sizeof presets; i++)
            at += (size_t)snprintf(presets + at, sizeof presets - at, "%s%s: synth preset %s%s", i ? "; " : "",
                                   ms_families_at(i)->name, ms_families_at(i)->demo_preset, i ? "" : ", the default");
        fprintf(f, "usage: moestream demo [--model DIR] [--family %s] [run options]\n\n",
                ms_cli_families(names, sizeof names, 1, "|", "|"));
        char para[1024];
        snprintf(para, sizeof para,
                 "Writes a small synthetic checkpoint of the family (%s; random weights) to DIR (default "
                 "$TMPDIR/moestream-demo-PRESET) unless one is there, then runs on it: by default 24 tokens after "
                 "the prompt \"The weather today is\". Every option of run applies:",
                 presets);
        ms_cli_put_wrapped(f, para);
        fputc('\n', f);
    }
    fputs("usage: moestream run --model DIR (--prompt TEXT | --prompt-file PATH | --ids 1,2,3 | --ids-file PATH)\n"
          "                     [--max-tokens N] [--temperature T] [--top-p P] [--seed S] [--threads N] [--json]\n"
          "                     [--dump-logits PATH] [--allow-special] [--stop-at-eos] [--quiet] [--raw] [--special]\n"
          "                     [--ram-budget SIZE] [--trace PATH] [--buffered-io] [--mmap auto|off] [--io-depth N]\n"
          "                     [--prefill-chunk N] [--prefill-span N|off] [--prefill-mixed off|auto|N] [--scratch-dir DIR|off]\n"
          "                     [--lru-cache] [--trunk-pack DIR|none]\n"
          "                     [--pin-threads]\n"
          "                     [--expert-prefetch auto|on|off] [--plan-only [--plan-seqs N]]\n"
          "                     [--workers EP[,EP...] | --cluster FILE | --local-workers N]\n"
          "                     [--curve-secret FILE] [--insecure] [--worker-timeout SEC]\n"
          "                     [--speculate auto|off|N] [--draft auto|ngram|mtp] [--draft-file PATH]\n"
          "                     [--grammar FILE | --json-schema FILE]\n"
          "\n"
          "Generates N tokens (default 16; -n N is the same) after the prompt. --temperature 0 (the\n"
          "default) is greedy.\n"
          "--prompt needs a tokenizer (tiktoken.model) in DIR; --ids works without one; --ids-file reads\n"
          "the ids (same syntax, whitespace allowed) from a file, for prompts longer than a command line.\n"
          "Without --json the prompt is printed, then the generated text as it comes, then a report on\n"
          "stderr; --quiet prints only the generated text (no prompt, report or progress). The text is\n"
          "valid UTF-8 (bytes that do not form a character show as U+FFFD) unless --raw, which prints\n"
          "the tokens' bytes as they are. Special tokens (<|im_end|>, ...) are left out of the text\n"
          "(printed and --json's) unless --special. Without a tokenizer the generated ids are printed.\n"
          "--json prints one JSON object: prompt_ids, generated_ids, text (with a tokenizer), stats.\n"
          "--grammar FILE constrains the text to the sentences of a grammar (docs/API.md, Grammars: rules\n"
          "`name ::= ...` with \"literals\", [classes], groups and * + ? {m,n}; the sentences are root's):\n"
          "each token is the one sampling picks from the tokens that keep the text a prefix of a sentence\n"
          "(greedy: the most likely of them); once the text is whole, the model's eos may end it. Needs a tokenizer.\n"
          "--json-schema FILE does the same with a JSON Schema (structured outputs: docs/API.md, response_format):\n"
          "the answer is a JSON text that validates; keywords it cannot be held to are refused, naming them.\n"
          "--dump-logits writes little-endian f32 rows of vocab_size values: every prompt position,\n"
          "then each generated position whose logits were computed (prompt + N - 1 rows).\n"
          "--threads 0 (default) uses one thread per CPU; results do not depend on it. --pin-threads binds\n"
          "each compute thread but the caller's to its own CPU (every core's first hardware thread before\n"
          "its siblings, socket by socket); off by default, as a bound thread cannot leave a busy CPU.\n"
          "--ram-budget SIZE (K/M/G/T = powers of 1024; default: the memory available now) bounds the\n"
          "peak resident memory of the run; routed experts are read from disk on demand into a cache,\n"
          "trunk matrices that do not fit stream from disk; the answer is the same at every budget.\n"
          "--trace PATH records every routed-expert request as little-endian int32 (layer, expert) pairs.\n"
          "--buffered-io reads through the page cache instead of O_DIRECT; --io-depth N reads in flight\n"
          "(default 8); --prefill-chunk N caps the tokens of a pass that also decodes; --lru-cache uses plain LRU.\n"
          "--mmap auto (default): where the budget would hold every routed expert (no budget, or one above the\n"
          "model), they and the pinned trunk are used in place from the checkpoint's files, mapped read-only:\n"
          "the page cache holds the model once, nothing is copied; off reads them into the cache as below it.\n"
          "A long prompt is prefilled in spans where that reads fewer bytes: passes of up to the whole prompt,\n"
          "layer by layer, so each weight is read once for all its tokens, in memory the expert cache (and the\n"
          "pinned trunk, read again after) lends; --prefill-span N asks for spans of up to N tokens, off\n"
          "prefills in chunks (the logits are the same). A prompt longer than memory holds in one span may go\n"
          "in one span anyway, its scratch in a file in --scratch-dir DIR (default $TMPDIR, else /tmp; never\n"
          "tmpfs; off: never) that the kernel keeps in memory as the budget allows, writing back the rest:\n"
          "taken where it reads fewer bytes and the file is at most 3 times that memory (beyond, it thrashes).\n"
          "--prefill-mixed auto|N|off (jobs, serve): a prompt\n"
          "arriving while others decode goes in passes beside them of up to N rows (auto: those touching 9/10\n"
          "of a layer's experts) instead of chunks: sooner first token, longer waits for the decoders.\n"
          "--expert-prefetch auto|on|off: with on, each MoE layer's router also runs on the hidden state before\n"
          "the layer's attention, and the experts it predicts are read while the attention computes (when the\n"
          "router's matrix is in memory); what the layer computes is decided by its own routing, so the output\n"
          "is the same either way. auto (the default) is on when experts are read with O_DIRECT and off when\n"
          "they are mapped (--mmap) or come through the page cache (--buffered-io, or a file system without\n"
          "O_DIRECT), where a wrong prediction's copy costs compute.\n"
          "--trunk-pack DIR streams the trunk from a pack written by moestream pack-trunk (fewer bytes\n"
          "read, the same logits); by default DIR.trunk-pack beside the model is used when present;\n"
          "none: never. A pack of another model or with a corrupt block is refused (exit 3).\n"
          "--workers / --cluster use moestream-worker processes already running (the cluster file is JSON:\n"
          "{\"workers\": [{\"endpoint\": \"tcp://host:port\", \"public_key\": \"<Z85>\"}]}); over tcp the\n"
          "connection is CURVE-encrypted with --curve-secret FILE (this side's key, from moestream keygen)\n"
          "unless --insecure. --local-workers N starts N workers on this box over ipc (0, the default,\n"
          "computes experts in this process) and splits the budget among all processes.\n"
          "--worker-timeout SEC is the deadline of one request (default 60).\n"
          "--plan-only opens and plans the run at --ram-budget, prints the plan and what a pass reads\n"
          "(--json: one object), and stops: no weight is read, so any budget can be asked about;\n"
          "--plan-seqs N plans for N sequences decoding together (as jobs --max-batch N does).\n"
          MS_CLI_EOPT_SPEC_HELP
          "Ctrl-C (SIGINT) or SIGTERM stops the run between steps: it exits 130 with a message, stops\n"
          "the local workers, and keeps no partial output (--dump-logits holds the rows computed);\n"
          "a second one ends the process at once (a long prompt's prefill can be one long step).\n",
          f);
}

/* Route observer: append (layer, expert) int32 pairs in request order. */
static void trace_route(void *ctx, int layer, int64_t T, int k, const int32_t *ids)
{
    FILE *f = ctx;
    for (int64_t i = 0; i < T * k; i++) {
        int32_t pair[2] = {layer, ids[i]};
        fwrite(pair, sizeof pair, 1, f);
    }
}

static volatile sig_atomic_t got_signal;
static void on_signal(int sig) { got_signal = sig; }

/* What the callbacks of the one sequence of `run` need. */
typedef struct {
    const run_opts *o;
    ms_tok *tok;
    FILE *dump;
    int64_t V;
    const int32_t *prompt;     /* [n_prompt] shown before the first token (not with --quiet) */
    size_t n_prompt;
    ms_utf8_stream utf8;       /* the text so far ends inside a character (not with --raw) */
    int32_t end_id;            /* under a grammar, the id that ends the answer (its text is no part of it), else -1 */
} run_ctx;

static void print_text(run_ctx *r, const char *bytes, size_t len) { ms_cli_put_text(r->o->raw, &r->utf8, bytes, len); }

static void print_token(void *ctx, ms_eseq *s, int32_t token)
{
    run_ctx *r = ctx;
    size_t ng;
    ms_engine_seq_tokens(s, &ng);
    if (r->o->json || token == r->end_id) return;
    if (ng == 1) {
        ms_progress_end(); /* the prefill bar's line ends before the text starts */
        if (!r->o->e.quiet && r->tok) { /* the prompt, then its continuation */
            char *text = NULL;
            size_t len = 0;
            if (ms_tok_decode_text(r->tok, r->prompt, r->n_prompt, !r->o->special, &text, &len) == 0)
                print_text(r, text, len);
            free(text);
        }
    }
    if (r->tok) {
        char *piece = NULL;
        size_t plen = 0;
        if (ms_tok_decode_text(r->tok, &token, 1, !r->o->special, &piece, &plen) == 0) print_text(r, piece, plen);
        free(piece);
    } else {
        printf("%s%d", ng > 1 ? " " : "", token);
    }
    if (fflush(stdout) != 0) ms_stdout_note_error(errno); /* the run stops at the next step */
}

static int dump_rows(void *ctx, ms_eseq *s, const float *rows, int64_t n)
{
    run_ctx *r = ctx;
    (void)s;
    if (!r->dump) return 0;
    if (fwrite(rows, sizeof(float), (size_t)(n * r->V), r->dump) != (size_t)(n * r->V)) {
        ms_err_set("cannot write logits to %s", r->o->dump);
        return ms_err_set_code(MS_EXIT_IO);
    }
    return 0;
}

/* The prompt as token ids, from --ids or through the tokenizer. */
static int read_prompt(const run_opts *o, ms_tok *tok, int32_t **prompt, size_t *np)
{
    const char *cmd = "run";
    if (o->ids) return ms_cli_parse_ids(o->ids, prompt, np) != 0 ? ms_cli_fail_err(cmd) : MS_EXIT_OK;
    if (o->ids_file) {
        char *buf = ms_cli_read_file(o->ids_file, NULL);
        if (!buf) return ms_cli_fail_err(cmd);
        int bad = ms_cli_parse_ids(buf, prompt, np);
        free(buf);
        if (bad) return ms_cli_fail(cmd, ms_err_code(), "%s: %s", o->ids_file, ms_err_msg());
        return MS_EXIT_OK;
    }
    if (!tok)
        return ms_cli_fail(cmd, MS_EXIT_USAGE,
                           "model %s has no tokenizer (tiktoken.model), so --prompt/--prompt-file cannot be used; "
                           "pass token ids with --ids",
                           o->e.model);
    size_t len = 0;
    char *buf = NULL;
    const char *text = o->prompt;
    if (o->prompt_file) {
        if (!(buf = ms_cli_read_file(o->prompt_file, &len))) return ms_cli_fail_err(cmd);
        text = buf;
    } else {
        len = strlen(text);
    }
    int e = ms_tok_encode(tok, text, len, o->allow_special, prompt, np);
    free(buf);
    if (e != 0) {
        ms_err_set_code(MS_EXIT_INPUT);
        return ms_cli_fail_err(cmd);
    }
    if (*np == 0) return ms_cli_fail(cmd, MS_EXIT_INPUT, "the prompt is empty (no tokens)");
    return MS_EXIT_OK;
}

/* CPU seconds of this process so far, all threads: [0] user, [1] system. */
typedef struct {
    double s[2];
} cpu_time;

static cpu_time cpu_now(void)
{
    struct rusage ru;
    cpu_time t = {{0, 0}};
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        t.s[0] = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec;
        t.s[1] = (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
    }
    return t;
}

/* CPU seconds at the start, after the model opened, after the prefill, at the end. */
typedef struct {
    cpu_time start, load, prefill, end;
} run_cpu;

/* Process resource use at the end of the prefill and of the decode (all threads): the decode's
 * page faults and CPU time tell what a budget costs besides reads (docs/PERFORMANCE.md). */
static struct rusage ru_dec[2];

static void print_json(ms_engine *e, int special, int32_t end_id, const int32_t *prompt, size_t np, const int32_t *gen,
                       size_t ng, const ms_engine_stats *es, const ms_model_stats *after_prefill, double t_load,
                       double t_prefill, double t_decode, double wall, const run_cpu *cpu)
{
    const ms_model_stats *ms = &es->model;
    double dec_tps = ng > 1 && t_decode > 0 ? (double)(ng - 1) / t_decode : 0.0;
    double pre_tps = t_prefill > 0 ? (double)np / t_prefill : 0.0;
    double s_per_tok = ng > 1 ? t_decode / (double)(ng - 1) : 0.0;
    double read_rate = ms->read_busy_seconds > 0 ? (double)ms->bytes_read_experts / ms->read_busy_seconds : 0.0;
    json_t *pj = json_array(), *gj = json_array();
    for (size_t i = 0; i < np; i++) json_array_append_new(pj, json_integer(prompt[i]));
    for (size_t i = 0; i < ng; i++) json_array_append_new(gj, json_integer(gen[i]));
    json_t *stats = json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:I,s:I,s:I}", "load_seconds", t_load, "prefill_seconds",
                              t_prefill, "decode_seconds", t_decode, "decode_seconds_per_token", s_per_tok,
                              "prefill_tokens_per_second", pre_tps, "decode_tokens_per_second", dec_tps,
                              "prompt_tokens", (json_int_t)np, "generated_tokens", (json_int_t)ng, "threads",
                              (json_int_t)es->threads, "peak_rss_bytes", (json_int_t)es->peak_rss_all);
    json_object_set_new(stats, "threads_pinned", json_integer(es->threads_pinned));
    json_object_set_new(stats, "peak_rss_coordinator_bytes", json_integer((json_int_t)es->peak_rss_self));
    json_object_set_new(stats, "bytes_read_experts", json_integer((json_int_t)ms->bytes_read_experts));
    json_object_set_new(stats, "bytes_read_trunk", json_integer((json_int_t)ms->bytes_read_trunk));
    json_object_set_new(stats, "trunk_pack_bytes_read", json_integer((json_int_t)ms->trunk_pack_read));
    json_object_set_new(stats, "trunk_pack_bytes_decoded", json_integer((json_int_t)ms->trunk_pack_decoded));
    json_object_set_new(stats, "bytes_read_at_load", json_integer((json_int_t)ms->bytes_read_at_load));
    /* The process's block I/O: with a prefill span's scratch file, what it read beyond the
     * checkpoint and what it wrote are the file's traffic. */
    uint64_t io_r, io_w;
    ms_proc_io(&io_r, &io_w);
    json_object_set_new(stats, "process_bytes_read", json_integer((json_int_t)io_r));
    json_object_set_new(stats, "process_bytes_written", json_integer((json_int_t)io_w));
    uint64_t dec_bytes = ms->bytes_read_experts + ms->bytes_read_trunk - after_prefill->bytes_read_experts -
                         after_prefill->bytes_read_trunk;
    json_object_set_new(stats, "decode_bytes_read_per_token",
                        json_real(ng > 1 ? (double)dec_bytes / (double)(ng - 1) : 0.0));
    /* What each decode token read and cost the CPU (all threads, user and system). */
    double nd = ng > 1 ? (double)(ng - 1) : 0.0;
    json_object_set_new(stats, "decode_bytes_read_experts_per_token",
                        json_real(nd > 0 ? (double)(ms->bytes_read_experts - after_prefill->bytes_read_experts) / nd : 0.0));
    json_object_set_new(stats, "decode_bytes_read_trunk_per_token",
                        json_real(nd > 0 ? (double)(ms->bytes_read_trunk - after_prefill->bytes_read_trunk) / nd : 0.0));
    static const char *phase[3] = {"load", "prefill", "decode"};
    const cpu_time *at[4] = {&cpu->start, &cpu->load, &cpu->prefill, &cpu->end};
    for (int ph = 0; ph < 3; ph++)
        for (int k = 0; k < 2; k++) {
            char key[64];
            snprintf(key, sizeof key, "cpu_%s_seconds_%s", k ? "sys" : "user", phase[ph]);
            json_object_set_new(stats, key, json_real(at[ph + 1]->s[k] - at[ph]->s[k]));
        }
    double dec_cpu = (cpu->end.s[0] - cpu->prefill.s[0]) + (cpu->end.s[1] - cpu->prefill.s[1]);
    json_object_set_new(stats, "decode_cpu_seconds_per_token", json_real(nd > 0 ? dec_cpu / nd : 0.0));
    json_object_set_new(stats, "decode_cpu_user_seconds_per_token",
                        json_real(nd > 0 ? (cpu->end.s[0] - cpu->prefill.s[0]) / nd : 0.0));
    json_object_set_new(stats, "read_busy_seconds", json_real(ms->read_busy_seconds));
    json_object_set_new(stats, "expert_requests", json_integer((json_int_t)ms->expert_requests));
    json_object_set_new(stats, "expert_cache_hits", json_integer((json_int_t)ms->expert_cache_hits));
    json_object_set_new(stats, "expert_cache_misses", json_integer((json_int_t)ms->expert_cache_misses));
    json_object_set_new(stats, "expert_cache_evictions", json_integer((json_int_t)ms->expert_cache_evictions));
    json_object_set_new(stats, "experts_mapped", json_boolean(ms->experts_mapped));
    json_object_set_new(stats, "trunk_mapped", json_boolean(ms->trunk_mapped));
    json_object_set_new(stats, "expert_cache_peak_bytes", json_integer((json_int_t)ms->expert_cache_peak_bytes));
    json_object_set_new(stats, "expert_cache_capacity_bytes", json_integer((json_int_t)ms->expert_cache_capacity));
    json_object_set_new(stats, "expert_cache_buffers_made_in_steps",
                        json_integer((json_int_t)ms->expert_cache_buffers_made_in_steps));
    json_object_set_new(stats, "expert_bytes", json_integer((json_int_t)ms->expert_bytes));
    json_object_set_new(stats, "expert_prefetched", json_integer((json_int_t)ms->expert_prefetched));
    json_object_set_new(stats, "expert_prefetch_used", json_integer((json_int_t)ms->expert_prefetch_used));
    json_object_set_new(stats, "expert_read_bytes_per_second", json_real(read_rate));
    json_object_set_new(stats, "io_wait_seconds", json_real(ms->io_wait_seconds));
    json_object_set_new(stats, "io_wait_share", json_real(wall > 0 ? ms->io_wait_seconds / wall : 0.0));
    json_object_set_new(stats, "wall_seconds", json_real(wall));
    double tv[2][2];
    for (int i = 0; i < 2; i++) {
        tv[i][0] = (double)ru_dec[i].ru_utime.tv_sec + 1e-6 * (double)ru_dec[i].ru_utime.tv_usec;
        tv[i][1] = (double)ru_dec[i].ru_stime.tv_sec + 1e-6 * (double)ru_dec[i].ru_stime.tv_usec;
    }
    json_object_set_new(stats, "decode",
                        json_pack("{s:I,s:I,s:f,s:f,s:f,s:I,s:I}", "minor_faults",
                                  (json_int_t)(ru_dec[1].ru_minflt - ru_dec[0].ru_minflt), "major_faults",
                                  (json_int_t)(ru_dec[1].ru_majflt - ru_dec[0].ru_majflt), "user_seconds",
                                  tv[1][0] - tv[0][0], "sys_seconds", tv[1][1] - tv[0][1], "io_wait_seconds",
                                  ms->io_wait_seconds - after_prefill->io_wait_seconds, "expert_cache_hits",
                                  (json_int_t)(ms->expert_cache_hits - after_prefill->expert_cache_hits),
                                  "expert_cache_misses",
                                  (json_int_t)(ms->expert_cache_misses - after_prefill->expert_cache_misses)));
    json_object_set_new(stats, "forward_passes", json_integer((json_int_t)es->passes));
    json_object_set_new(stats, "speculate_window", json_integer(es->spec_window));
    json_object_set_new(stats, "draft_source", json_string(es->draft_source));
    json_object_set_new(stats, "draft_seconds", json_real(es->draft_seconds));
    json_object_set_new(stats, "draft_tokens", json_integer((json_int_t)es->drafted));
    json_object_set_new(stats, "accepted_draft_tokens", json_integer((json_int_t)es->accepted));
    json_object_set_new(stats, "decode_passes", json_integer((json_int_t)es->decode_passes));
    json_object_set_new(stats, "tokens_per_decode_pass",
                        json_real(es->decode_passes ? (double)es->decode_tokens / (double)es->decode_passes : 0.0));
    const ms_plan *plan = ms_model_plan(ms_engine_model(e));
    if (plan) json_object_set_new(stats, "plan", ms_plan_json(plan));
    if (es->workers)
        json_object_set_new(stats, "workers",
                            json_pack("{s:i,s:i,s:I,s:I,s:I,s:I,s:I}", "count", es->workers, "up",
                                      es->remote.workers_up, "requests", (json_int_t)es->remote.requests, "resends",
                                      (json_int_t)es->remote.resends, "failovers", (json_int_t)es->remote.failovers,
                                      "bytes_sent", (json_int_t)es->remote.bytes_sent, "bytes_received",
                                      (json_int_t)es->remote.bytes_received));
    json_t *out = json_pack("{s:o,s:o,s:o}", "prompt_ids", pj, "generated_ids", gj, "stats", stats);
    ms_tok *tok = ms_engine_tok(e);
    if (tok) {
        char *text = NULL;
        size_t len = 0;
        size_t nt = ng > 0 && gen[ng - 1] == end_id ? ng - 1 : ng; /* a grammar's end is no part of the text */
        if (ms_tok_decode_text(tok, gen, nt, !special, &text, &len) == 0) json_object_set_new(out, "text", ms_jtext(text, len));
        free(text);
    }
    json_dumpf(out, stdout, JSON_COMPACT);
    fputc('\n', stdout);
    json_decref(out);
}

static void print_report(const char *cmd, size_t np, size_t ng, const ms_engine_stats *es, double t_load,
                         double t_prefill, double t_decode, double wall, const ms_model_stats *after_prefill,
                         const run_cpu *cpu)
{
    const ms_model_stats *ms = &es->model;
    double pre_tps = t_prefill > 0 ? (double)np / t_prefill : 0.0;
    double s_per_tok = ng > 1 ? t_decode / (double)(ng - 1) : 0.0;
    double read_rate = ms->read_busy_seconds > 0 ? (double)ms->bytes_read_experts / ms->read_busy_seconds : 0.0;
    char a[64], b[64], d[64];
    fprintf(stderr,
            "moestream %s: %zu prompt tokens in %.3f s (%.1f tok/s), %zu generated in %.3f s (%.3f s/token), "
            "load %.3f s, %d threads, peak RSS %s\n",
            cmd, np, t_prefill, pre_tps, ng, t_decode, s_per_tok, t_load, es->threads,
            ms_size_fmt(es->peak_rss_all, a, sizeof a));
    char pf[96] = "";
    if (ms->expert_prefetched)
        snprintf(pf, sizeof pf, " %llu of %llu predicted reads used;", (unsigned long long)ms->expert_prefetch_used,
                 (unsigned long long)ms->expert_prefetched);
    if (ms->expert_requests || ms->bytes_read_trunk)
        fprintf(stderr,
                "moestream %s: read %s of experts (%.0f MB/s while reading)%s, %s of trunk; expert cache %llu hits, "
                "%llu misses, %llu evictions;%s waiting on I/O %.0f%% of %.2f s\n",
                cmd, ms_size_fmt(ms->bytes_read_experts, b, sizeof b), read_rate / 1e6,
                ms->experts_mapped ? " (mapped: what the page cache lacked)" : "",
                ms_size_fmt(ms->bytes_read_trunk, d, sizeof d), (unsigned long long)ms->expert_cache_hits,
                (unsigned long long)ms->expert_cache_misses, (unsigned long long)ms->expert_cache_evictions, pf,
                100.0 * (wall > 0 ? ms->io_wait_seconds / wall : 0.0), wall);
    if (ng > 1) { /* per decode token: CPU of all threads, and what it read */
        double nd = (double)(ng - 1), u = cpu->end.s[0] - cpu->prefill.s[0], sy = cpu->end.s[1] - cpu->prefill.s[1];
        uint64_t tb = ms->bytes_read_trunk - after_prefill->bytes_read_trunk;
        uint64_t xb = ms->bytes_read_experts - after_prefill->bytes_read_experts;
        fprintf(stderr,
                "moestream %s: per decode token: %.2f CPU s (user %.2f, system %.2f), read %s (trunk %s, experts %s)\n",
                cmd, (u + sy) / nd, u / nd, sy / nd, ms_size_fmt((uint64_t)((double)(tb + xb) / nd), a, sizeof a),
                ms_size_fmt((uint64_t)((double)tb / nd), b, sizeof b), ms_size_fmt((uint64_t)((double)xb / nd), d, sizeof d));
    }
    if (es->drafted)
        fprintf(stderr,
                "moestream %s: speculation: %llu %s draft tokens, %llu accepted (%.0f%%), %.2f tokens per decoding pass "
                "(window %d), %.3f s drafting\n",
                cmd, (unsigned long long)es->drafted, es->draft_source, (unsigned long long)es->accepted,
                100.0 * (double)es->accepted / (double)es->drafted,
                es->decode_passes ? (double)es->decode_tokens / (double)es->decode_passes : 0.0, es->spec_window,
                es->draft_seconds);
}

/* --plan-only: the plan and the bytes one pass reads with it (trunk streamed; routed experts
 * when every one misses the cache: the caller applies a hit rate). */
static int print_plan(const run_opts *o, ms_engine *e, size_t np)
{
    const ms_model_info *c = ms_engine_info(e);
    const ms_plan *p = ms_model_plan(ms_engine_model(e));
    if (!p) return ms_cli_fail("run", MS_EXIT_MODEL, "%s: the model runs from memory: there is no plan", o->e.model);
    uint64_t xb = c->have_xfmt ? ms_xfmt_expert_bytes(&c->xfmt) : 0;
    int moe_layers = c->n_layers - c->first_moe;
    uint64_t cold = (uint64_t)moe_layers * (uint64_t)c->top_k * xb;
    if (o->json) {
        json_t *out = json_pack("{s:I,s:i,s:o,s:{s:i,s:i,s:i,s:I,s:I,s:I}}", "prompt_tokens", (json_int_t)np,
                            "sequences", ms_model_max_seqs(ms_engine_model(e)), "plan",
                                ms_plan_json(p), "per_token", "layers", c->n_layers, "moe_layers", moe_layers,
                                "top_k", c->top_k, "expert_bytes", (json_int_t)xb, "expert_bytes_all_misses",
                                (json_int_t)cold, "trunk_streamed_bytes", (json_int_t)p->streamed_bytes);
        int rc = json_dumpf(out, stdout, JSON_COMPACT) == 0 && fputc('\n', stdout) != EOF ? MS_EXIT_OK : MS_EXIT_IO;
        json_decref(out);
        return rc;
    }
    char a[32], b[32], d[32];
    printf("plan: %d of %d trunk matrices pinned (%s), %s streamed per pass; expert cache %llu slots of %s\n",
           p->n_pinned, p->in.n_trunk, ms_size_fmt(p->pinned_bytes, a, sizeof a),
           ms_size_fmt(p->streamed_bytes, b, sizeof b), (unsigned long long)p->cache_slots,
           ms_size_fmt(xb, d, sizeof d));
    printf("per token: %s of trunk streamed, %s of routed experts if every one misses (%d MoE layers x top-%d)\n",
           ms_size_fmt(p->streamed_bytes, a, sizeof a), ms_size_fmt(cold, b, sizeof b), moe_layers, c->top_k);
    return MS_EXIT_OK;
}

/* `run`: one sequence through the engine: prefill in the plan's chunks, then one token per step. */
/* The prefill bar inside a pass: a span runs the whole model layer by layer over its rows, so
 * it advances by layers (tokens in the bar: the pass's rows times the share of layers done). */
typedef struct {
    ms_engine *e;
    ms_eseq *seq;
    uint64_t read0; /* bytes read from disk when the prefill began */
} prefill_view;

static void prefill_layer(void *ctx, int layer, int n_layers, int64_t rows)
{
    prefill_view *v = ctx;
    ms_model_stats st;
    ms_model_get_stats(ms_engine_model(v->e), &st);
    char a[32];
    uint64_t done = (uint64_t)ms_engine_seq_prefilled(v->seq) + (uint64_t)rows * (uint64_t)(layer + 1) / (uint64_t)n_layers;
    ms_progress_detail(done, "layer %d/%d, %lld-token pass, %s read", layer + 1, n_layers, (long long)rows,
                       ms_size_fmt(st.bytes_read_experts + st.bytes_read_trunk - v->read0, a, sizeof a));
}

static int generate(const run_opts *o, const char *cmd)
{
    double t0 = ms_cli_now();
    run_cpu cpu;
    memset(&cpu, 0, sizeof cpu);
    cpu.start = cpu_now();
    ms_engine *e = NULL;
    ms_eseq *seq = NULL;
    ms_grammar *grammar = NULL; /* --grammar: outlives seq */
    int32_t *prompt = NULL;
    size_t np = 0;
    FILE *dump = NULL, *trace = NULL;
    int rc = MS_EXIT_OK;
    ms_engine_opts eo = {0};
    ms_cli_eopt_engine(&o->e, &eo);
    eo.run.all_logits = o->dump != NULL;
    if (o->grammar && o->json_schema) return ms_cli_fail(cmd, MS_EXIT_USAGE, "give --grammar or --json-schema, not both");
    /* read and checked before the model opens: a bad one fails at once */
    if ((o->grammar || o->json_schema) && !(grammar = ms_cli_grammar_load(o->grammar ? o->grammar : o->json_schema, !o->grammar)))
        return ms_cli_fail_err(cmd);
    /* The prompt is read before the model opens so that the plan knows its length; the
     * tokenizer it may need is the model directory's. */
    {
        /* a model that is not there is "cannot open" (exit 4), not "has no tokenizer" (exit 2) */
        char cpath[4200];
        snprintf(cpath, sizeof cpath, "%s/config.json", o->e.model);
        int cfd = ms_file_open(cpath, "config", 0, 0, NULL);
        if (cfd < 0) {
            rc = ms_cli_fail_err(cmd);
            goto out;
        }
        close(cfd);
        ms_tok *tok = NULL;
        if (!o->ids && !o->ids_file && ms_tok_present(o->e.model) && !(tok = ms_tok_load(o->e.model))) {
            rc = ms_cli_fail_err(cmd);
            goto out;
        }
        rc = read_prompt(o, tok, &prompt, &np);
        ms_tok_free(tok);
        if (rc != MS_EXIT_OK) goto out;
    }
    eo.run.prompt_tokens = (int64_t)np;
    eo.run.max_positions = (int64_t)np + o->n + 1;
    eo.run.plan_only = o->plan_only;
    if (o->plan_only && o->plan_seqs > 1) eo.max_seqs = (int)o->plan_seqs;
    ms_cli_catch_signals(on_signal);
    if (!(e = ms_engine_open(&eo))) {
        rc = ms_cli_fail_err(cmd);
        goto out;
    }
    if (o->plan_only) {
        rc = print_plan(o, e, np);
        goto out;
    }
    const ms_model_info *c = ms_engine_info(e);
    if (o->dump && !(dump = fopen(o->dump, "wb"))) {
        rc = ms_cli_fail(cmd, MS_EXIT_IO, "cannot create %s", o->dump);
        goto out;
    }
    if (o->trace) {
        if (!(trace = fopen(o->trace, "wb"))) {
            rc = ms_cli_fail(cmd, MS_EXIT_IO, "cannot create %s", o->trace);
            goto out;
        }
        ms_model_set_route_observer(ms_engine_model(e), trace_route, trace);
    }
    double t_load = ms_cli_now() - t0;
    cpu.load = cpu_now();
    run_ctx rctx = {o, ms_engine_tok(e), dump, c->vocab, prompt, np, {{0}, 0}, -1};
    ms_gen_params gp = {o->temperature, o->top_p, (uint64_t)o->seed, o->n, o->stop_eos, dump != NULL,
                        print_token, dump_rows, &rctx};
    int32_t eos = c->eos_id;
    if (grammar) {
        if (!ms_engine_tok(e)) {
            rc = ms_cli_fail(cmd, MS_EXIT_USAGE, "--grammar needs a tokenizer in the model directory (the mask is over its "
                             "tokens' text)");
            goto out;
        }
        gp.grammar = grammar;
        gp.end_ids = &eos; /* a whole sentence may end at the model's eos */
        gp.n_end_ids = eos >= 0 ? 1 : 0;
        rctx.end_id = eos;
    }
    if (!(seq = ms_engine_seq_new(e, prompt, np, &gp))) {
        rc = ms_cli_fail_err(cmd);
        goto out;
    }
    ms_model_stats after_prefill;
    memset(&after_prefill, 0, sizeof after_prefill);
    double t1 = ms_cli_now(), t_prefill = 0.0, t2 = t1;
    ms_progress_begin("prefill", np, MS_PROGRESS_ITEMS);
    prefill_view pv = {e, seq, 0};
    ms_model_stats st0;
    ms_model_get_stats(ms_engine_model(e), &st0);
    pv.read0 = st0.bytes_read_experts + st0.bytes_read_trunk;
    ms_model_set_layer_observer(ms_engine_model(e), prefill_layer, &pv);
    while (!ms_engine_seq_done(seq)) {
        if (got_signal) {
            rc = ms_cli_fail(cmd, MS_EXIT_INTERRUPTED, "interrupted (signal %d); nothing more was generated",
                             (int)got_signal);
            goto out;
        }
        if (ferror(stdout)) { /* printed tokens were lost: stop; main reports it (ms_stdout_close) */
            rc = MS_EXIT_IO;
            goto out;
        }
        size_t ng0;
        ms_engine_seq_tokens(seq, &ng0);
        if (ms_engine_step(e, &seq, 1) != 0) {
            ms_progress_end();
            if (got_signal)
                rc = ms_cli_fail(cmd, MS_EXIT_INTERRUPTED, "interrupted (signal %d): %s", (int)got_signal,
                                 ms_err_msg());
            else
                rc = ms_cli_fail_err(cmd);
            goto out;
        }
        size_t ng;
        ms_engine_seq_tokens(seq, &ng);
        if (ng0 == 0) {
            ms_progress_set_done(ms_engine_seq_prefilled(seq));
            if (ng) { /* the prompt is in and the first token sampled */
                ms_model_set_layer_observer(ms_engine_model(e), NULL, NULL);
                ms_progress_end();
                t2 = ms_cli_now();
                t_prefill = t2 - t1;
                cpu.prefill = cpu_now();
                ms_model_get_stats(ms_engine_model(e), &after_prefill);
                getrusage(RUSAGE_SELF, &ru_dec[0]);
            }
        } else if (o->json && !ms_engine_seq_done(seq)) { /* without --json the tokens show themselves */
            if (ng0 == 1) ms_progress_begin("decode", (uint64_t)o->n, MS_PROGRESS_ITEMS);
            ms_progress_set_done(ng);
        }
    }
    size_t ng;
    const int32_t *gen = ms_engine_seq_tokens(seq, &ng);
    double t_decode = ng ? ms_cli_now() - t2 : 0.0;
    getrusage(RUSAGE_SELF, &ru_dec[1]);
    ms_progress_end();
    if (trace) {
        int bad = fclose(trace) != 0;
        trace = NULL;
        if (bad) {
            rc = ms_cli_fail(cmd, MS_EXIT_IO, "cannot write %s", o->trace);
            goto out;
        }
    }
    if (dump) {
        int bad = fclose(dump) != 0;
        dump = NULL;
        if (bad) {
            rc = ms_cli_fail(cmd, MS_EXIT_IO, "cannot write %s", o->dump);
            goto out;
        }
    }
    ms_engine_stats es;
    ms_engine_get_stats(e, &es);
    double wall = ms_cli_now() - t0;
    cpu.end = cpu_now();
    if (o->json) {
        print_json(e, o->special, rctx.end_id, prompt, np, gen, ng, &es, &after_prefill, t_load, t_prefill, t_decode, wall, &cpu);
    } else {
        char tail[12];
        fwrite(tail, 1, ms_utf8_stream_end(&rctx.utf8, tail), stdout);
        if (ng) fputc('\n', stdout);
        fflush(stdout); /* the text's line ends before the report on stderr starts */
    }
    if (!o->e.quiet) print_report(cmd, np, ng, &es, t_load, t_prefill, t_decode, wall, &after_prefill, &cpu);
out:
    ms_progress_end(); /* no-op unless a bar is still drawn */
    if (dump) fclose(dump);
    if (trace) fclose(trace);
    ms_engine_seq_free(seq);
    ms_grammar_free(grammar);
    ms_engine_free(e);
    free(prompt);
    return rc;
}

static int parse_run(int argc, char **argv, run_opts *o, int demo)
{
    static const struct option own[] = {
        {"prompt", required_argument, 0, 'p'},
        {"prompt-file", required_argument, 0, 'P'},
        {"ids", required_argument, 0, 'i'},
        {"ids-file", required_argument, 0, 'F'},
        {"temperature", required_argument, 0, 't'},
        {"top-p", required_argument, 0, 'k'},
        {"seed", required_argument, 0, 's'},
        {"json", no_argument, 0, 'j'},
        {"dump-logits", required_argument, 0, 'd'},
        {"allow-special", no_argument, 0, 'a'},
        {"raw", no_argument, 0, 0x7277},
        {"special", no_argument, 0, 0x7370},
        {"stop-at-eos", no_argument, 0, 'e'},
        {"help", no_argument, 0, 'h'},
        {"trace", required_argument, 0, 'R'},
        {"plan-only", no_argument, 0, 'Y'},
        {"plan-seqs", required_argument, 0, 'Q'},
        {"family", required_argument, 0, 0x6661},
        {"max-tokens", required_argument, 0, 'n'},
        {"grammar", required_argument, 0, 0x6772},
        {"json-schema", required_argument, 0, 0x6a73},
    };
    enum { N_OWN = sizeof own / sizeof own[0] };
    struct option opts[N_OWN + MS_CLI_EOPT_COUNT + 1];
    ms_cli_eopt_table(own, N_OWN, opts);
    const char *cmd = demo ? "demo" : "run";
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
        switch (c) {
        case 'p': o->prompt = optarg; break;
        case 'P': o->prompt_file = optarg; break;
        case 'i': o->ids = optarg; break;
        case 'F': o->ids_file = optarg; break;
        case 'd': o->dump = optarg; break;
        case 'j': o->json = 1; break;
        case 'a': o->allow_special = 1; break;
        case 0x7277: o->raw = 1; break;     /* --raw */
        case 0x7370: o->special = 1; break; /* --special */
        case 'e': o->stop_eos = 1; break;
        case 'R': o->trace = optarg; break;
        case 0x6772: o->grammar = optarg; break; /* --grammar */
        case 0x6a73: o->json_schema = optarg; break; /* --json-schema */
        case 'Y': o->plan_only = 1; break;
        case 0x6661: /* --family (demo) */
            if (!demo) return ms_cli_fail(cmd, MS_EXIT_USAGE, "--family goes with demo (run reads the family from config.json)");
            if (!ms_families_find(optarg) || !ms_families_find(optarg)->synth)
            {
                char names[256];
                return ms_cli_fail(cmd, MS_EXIT_USAGE, "--family %s: give %s", optarg,
                                   ms_cli_families(names, sizeof names, 1, ", ", " or "));
            }
            o->family = optarg;
            break;
        case 'Q':
            if (ms_opt_int("--plan-seqs", optarg, 1, MS_MODEL_MAX_SEQS, &o->plan_seqs) != 0) return ms_cli_fail_err(cmd);
            break;
        case 'n':
            if (ms_opt_int("--max-tokens", optarg, 0, 1000000, &o->n) != 0) return ms_cli_fail_err(cmd);
            break;
        case 's':
            if (ms_opt_int("--seed", optarg, LLONG_MIN, LLONG_MAX, &o->seed) != 0) return ms_cli_fail_err(cmd);
            break;
        case 't':
            if (ms_opt_f32("--temperature", optarg, &o->temperature) != 0) return ms_cli_fail_err(cmd);
            if (o->temperature < 0)
                return ms_cli_fail(cmd, MS_EXIT_USAGE, "--temperature must be a number >= 0, got '%s'", optarg);
            break;
        case 'k':
            if (ms_opt_f32("--top-p", optarg, &o->top_p) != 0) return ms_cli_fail_err(cmd);
            if (!(o->top_p > 0 && o->top_p <= 1))
                return ms_cli_fail(cmd, MS_EXIT_USAGE, "--top-p must be in (0, 1], got '%s'", optarg);
            break;
        case 'h':
            run_usage(stdout, demo);
            return -1;
        default: {
            int code, t = ms_cli_eopt_take_all(&o->e, NULL, cmd, c, optarg, &code);
            if (t > 0) break;
            if (t == 0) run_usage(stderr, demo);
            return code;
        }
        }
    }
    if (optind != argc) return ms_cli_fail(cmd, MS_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    if (o->plan_seqs && !o->plan_only) return ms_cli_fail(cmd, MS_EXIT_USAGE, "--plan-seqs goes with --plan-only");
    ms_cli_set_output(o->e.quiet);
    return 0;
}

int ms_cli_run(int argc, char **argv)
{
    run_opts o = {.n = 16, .top_p = 1.0f};
    int rc = parse_run(argc, argv, &o, 0);
    if (rc) return rc < 0 ? MS_EXIT_OK : rc;
    if ((rc = ms_cli_eopt_check(&o.e, "run")) != MS_EXIT_OK) return rc;
    if (!!o.prompt + !!o.prompt_file + !!o.ids + !!o.ids_file != 1)
        return ms_cli_fail("run", MS_EXIT_USAGE, "give exactly one of --prompt, --prompt-file, --ids or --ids-file");
    return generate(&o, "run");
}

int ms_cli_demo(int argc, char **argv)
{
    run_opts o = {.n = 24, .top_p = 1.0f};
    int rc = parse_run(argc, argv, &o, 1);
    if (rc) return rc < 0 ? MS_EXIT_OK : rc;
    char dir[4096];
    const ms_family *f = o.family ? ms_families_find(o.family) : ms_families_default();
    if (!o.e.model) {
        const char *base = getenv("TMPDIR");
        if (f == ms_families_default())
            snprintf(dir, sizeof dir, "%s/moestream-demo-tiny", base && *base ? base : "/tmp");
        else
            snprintf(dir, sizeof dir, "%s/moestream-demo-%s", base && *base ? base : "/tmp", f->demo_preset);
        o.e.model = dir;
    }
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/config.json", o.e.model);
    if (access(cfg, R_OK) != 0) {
        if (!o.e.quiet) fprintf(stderr, "moestream demo: writing a synthetic tiny %s checkpoint to %s\n", f->name, o.e.model);
        if (f->synth(o.e.model, f->demo_preset, 0, 0, 1) != 0) return ms_cli_fail_err("demo");
    }
    if ((rc = ms_cli_eopt_check(&o.e, "demo")) != MS_EXIT_OK) return rc;
    if (!o.prompt && !o.prompt_file && !o.ids && !o.ids_file) o.prompt = "The weather today is";
    if (!o.e.quiet) fprintf(stderr, "moestream demo: random weights, so the text is gibberish; the engine is real.\n");
    return generate(&o, "demo");
}
