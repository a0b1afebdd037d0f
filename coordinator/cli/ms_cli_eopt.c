/* ms_cli_eopt: the engine options shared by run, demo and jobs: one table, one parser. */
#include <signal.h>
#include <string.h>

#include "ms_cli.h"
#include "ms_cli_eopt.h"
#include "ms_cli_pcache.h"
#include "ms_err.h"
#include "ms_opt.h"
#include "ms_pool.h"

enum { MS_CLI_OPT_SPECULATE = 1001, MS_CLI_OPT_DRAFT, MS_CLI_OPT_PIN, MS_CLI_OPT_PREFETCH, MS_CLI_OPT_SPAN,
       MS_CLI_OPT_MIXED, MS_CLI_OPT_MMAP, MS_CLI_OPT_SCRATCH, MS_CLI_OPT_DRAFTS }; /* long-only options */

static const struct option shared[MS_CLI_EOPT_COUNT] = {
    {"model", required_argument, 0, 'm'},         {"ram-budget", required_argument, 0, 'B'},
    {"threads", required_argument, 0, 'T'},       {"buffered-io", no_argument, 0, 'U'},
    {"io-depth", required_argument, 0, 'D'},      {"prefill-chunk", required_argument, 0, 'C'},
    {"lru-cache", no_argument, 0, 'L'},           {"workers", required_argument, 0, 'W'},
    {"cluster", required_argument, 0, 'K'},       {"local-workers", required_argument, 0, 'N'},
    {"curve-secret", required_argument, 0, 'S'},  {"insecure", no_argument, 0, 'I'},
    {"worker-timeout", required_argument, 0, 'O'}, {"quiet", no_argument, 0, 'q'},
    {"trunk-pack", required_argument, 0, 0x7470},
    {"speculate", required_argument, 0, MS_CLI_OPT_SPECULATE}, {"draft-file", required_argument, 0, MS_CLI_OPT_DRAFT},
    {"pin-threads", no_argument, 0, MS_CLI_OPT_PIN},
    {"expert-prefetch", required_argument, 0, MS_CLI_OPT_PREFETCH},
    {"prefill-span", required_argument, 0, MS_CLI_OPT_SPAN},
    {"prefill-mixed", required_argument, 0, MS_CLI_OPT_MIXED},
    {"mmap", required_argument, 0, MS_CLI_OPT_MMAP},
    {"scratch-dir", required_argument, 0, MS_CLI_OPT_SCRATCH},
    {"draft", required_argument, 0, MS_CLI_OPT_DRAFTS},
};

void ms_cli_eopt_table(const struct option *own, int n_own, struct option *out)
{
    memcpy(out, own, sizeof *own * (size_t)n_own);
    memcpy(out + n_own, shared, sizeof shared);
    memset(out + n_own + MS_CLI_EOPT_COUNT, 0, sizeof *out);
}

int ms_cli_eopt_take(ms_cli_eopts *o, const char *cmd, int c, const char *arg, int *code)
{
    int bad = 0;
    switch (c) {
    case 'm': o->model = arg; break;
    case 0x7470: o->trunk_pack = arg; break;
    case 'W': o->workers = arg; break;
    case 'K': o->cluster = arg; break;
    case 'S': o->curve_secret = arg; break;
    case 'I': o->insecure = 1; break;
    case 'U': o->buffered = 1; break;
    case 'L': o->lru = 1; break;
    case 'q': o->quiet = 1; break;
    case MS_CLI_OPT_PIN: o->pin = 1; break;
    case 'B': bad = ms_opt_size("--ram-budget", arg, &o->budget); break;
    case 'T': bad = ms_opt_threads(arg, &o->threads); break;
    case 'D': bad = ms_opt_io_depth(arg, &o->io_depth); break;
    case 'C': bad = ms_opt_int("--prefill-chunk", arg, 1, 65536, &o->chunk); break;
    case 'N': bad = ms_opt_int("--local-workers", arg, 0, 64, &o->local_workers); break;
    case MS_CLI_OPT_DRAFT: o->draft_file = arg; break;
    case MS_CLI_OPT_SCRATCH: o->scratch_dir = arg; break;
    case MS_CLI_OPT_DRAFTS:
        if (!strcmp(arg, "auto"))
            o->draft_source = MS_DRAFT_AUTO;
        else if (!strcmp(arg, "ngram"))
            o->draft_source = MS_DRAFT_NGRAM;
        else if (!strcmp(arg, "mtp"))
            o->draft_source = MS_DRAFT_HEAD;
        else {
            *code = ms_cli_fail(cmd, MS_EXIT_USAGE, "--draft takes auto, ngram or mtp, got '%s'", arg);
            return -1;
        }
        break;
    case MS_CLI_OPT_SPAN:
        if (!strcmp(arg, "off"))
            o->span = -1;
        else if (ms_opt_int("--prefill-span", arg, 1, 1 << 24, &o->span) != 0) {
            *code = ms_cli_fail(cmd, MS_EXIT_USAGE, "--prefill-span takes off or a count of tokens, got '%s'", arg);
            return -1;
        }
        break;
    case MS_CLI_OPT_MIXED:
        if (!strcmp(arg, "off") || !strcmp(arg, "auto"))
            o->mixed = !strcmp(arg, "auto") ? -1 : 0;
        else if (ms_opt_int("--prefill-mixed", arg, 1, 1 << 24, &o->mixed) != 0) {
            *code = ms_cli_fail(cmd, MS_EXIT_USAGE, "--prefill-mixed takes off, auto or a count of rows, got '%s'", arg);
            return -1;
        }
        break;
    case MS_CLI_OPT_MMAP:
        if (strcmp(arg, "auto") && strcmp(arg, "off")) {
            *code = ms_cli_fail(cmd, MS_EXIT_USAGE, "--mmap takes auto or off, got '%s'", arg);
            return -1;
        }
        o->no_mmap = !strcmp(arg, "off");
        break;
    case MS_CLI_OPT_PREFETCH:
        if (strcmp(arg, "auto") && strcmp(arg, "on") && strcmp(arg, "off")) {
            *code = ms_cli_fail(cmd, MS_EXIT_USAGE, "--expert-prefetch takes auto, on or off, got '%s'", arg);
            return -1;
        }
        o->prefetch = !strcmp(arg, "on") ? MS_PREFETCH_ON : !strcmp(arg, "off") ? MS_PREFETCH_OFF : MS_PREFETCH_AUTO;
        break;
    case MS_CLI_OPT_SPECULATE: {
        long long n = 0;
        o->speculate_set = 1;
        if (!strcmp(arg, "auto"))
            o->speculate = MS_SPEC_AUTO;
        else if (!strcmp(arg, "off"))
            o->speculate = 0;
        else if (ms_opt_int("--speculate", arg, 0, MS_SPEC_MAX, &n) != 0) {
            *code = ms_cli_fail(cmd, MS_EXIT_USAGE, "--speculate takes auto, off or a count of draft tokens 0..%d, "
                                "got '%s'", MS_SPEC_MAX, arg);
            return -1;
        } else
            o->speculate = (int)n;
        break;
    }
    case 'O':
        bad = ms_opt_f32("--worker-timeout", arg, &o->worker_timeout);
        if (!bad && o->worker_timeout <= 0) {
            *code = ms_cli_fail(cmd, MS_EXIT_USAGE, "--worker-timeout must be a positive number, got '%s'", arg);
            return -1;
        }
        break;
    default: return 0;
    }
    if (bad) {
        *code = ms_cli_fail_err(cmd);
        return -1;
    }
    return 1;
}

int ms_cli_eopt_check(const ms_cli_eopts *o, const char *cmd)
{
    if (!o->model)
        return ms_cli_fail(cmd, MS_EXIT_USAGE, "--model DIR is required (see moestream %s --help)", cmd);
    if (!!o->workers + !!o->cluster + (o->local_workers > 0) > 1)
        return ms_cli_fail(cmd, MS_EXIT_USAGE, "give at most one of --workers, --cluster and --local-workers");
    if (o->draft_source == MS_DRAFT_HEAD && o->draft_file)
        return ms_cli_fail(cmd, MS_EXIT_USAGE, "give at most one of --draft mtp and --draft-file");
    if (o->draft_source == MS_DRAFT_HEAD && o->speculate_set && o->speculate == 0)
        return ms_cli_fail(cmd, MS_EXIT_USAGE, "--draft mtp drafts for speculation: not with --speculate off");
    return MS_EXIT_OK;
}

void ms_cli_eopt_engine(const ms_cli_eopts *o, ms_engine_opts *eo)
{
    eo->model_dir = o->model;
    eo->run.n_threads = (int)o->threads;
    ms_pool_set_pinning(o->pin); /* process-wide: read when the engine's pools are made */
    eo->run.ram_budget = o->budget;
    eo->run.buffered = o->buffered;
    eo->run.no_mmap = o->no_mmap;
    eo->run.io_depth = (int)o->io_depth;
    eo->run.max_chunk = o->chunk;
    eo->run.max_span = o->span;
    eo->run.mixed_rows = o->mixed;
    eo->run.scratch_dir = o->scratch_dir;
    eo->run.lru = o->lru;
    eo->run.trunk_pack = o->trunk_pack;
    eo->run.prefetch = o->prefetch;
    eo->local_workers = o->local_workers > 0 ? (int)o->local_workers : 0;
    eo->workers = o->workers;
    eo->cluster = o->cluster;
    eo->curve_secret = o->curve_secret;
    eo->insecure = o->insecure;
    eo->worker_timeout = o->worker_timeout;
    eo->speculate = o->speculate_set ? o->speculate : MS_SPEC_AUTO;
    eo->draft_file = o->draft_file;
    eo->draft_source = o->draft_source;
}

int ms_cli_eopt_take_all(ms_cli_eopts *o, struct ms_cli_pcopts_s *pc, const char *cmd, int c, const char *arg, int *code)
{
    *code = MS_EXIT_USAGE;
    int t = pc ? ms_cli_pc_take(pc, cmd, c, arg, code) : 0;
    return t ? t : ms_cli_eopt_take(o, cmd, c, arg, code);
}

void ms_cli_catch_signals(void (*handler)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    /* once: the next signal has its default effect (the process ends at once), for a step that
     * takes long (a long prompt's span is one step) */
    sa.sa_flags = SA_RESTART | SA_RESETHAND;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int ms_cli_eopt_end(int argc, char **argv, const ms_cli_eopts *o, const char *cmd)
{
    if (optind != argc) return ms_cli_fail(cmd, MS_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    int rc = ms_cli_eopt_check(o, cmd);
    if (rc == MS_EXIT_OK) ms_cli_set_output(o->quiet);
    return rc;
}
