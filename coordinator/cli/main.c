/* moestream: the coordinator command line (run, demo, jobs, serve, tokenize, detokenize, synth, ...). */
#include <stdio.h>
#include <string.h>

#include "ms_cachesim.h"
#include "ms_cli.h"
#include "ms_err.h"
#include "ms_stdout.h"

static void usage(FILE *f)
{
    char fams[256], fams_or[256];
    ms_cli_families(fams, sizeof fams, 0, ", ", ", ");
    ms_cli_families(fams_or, sizeof fams_or, 0, ", ", " or ");
    fprintf(f, "usage: moestream <command> [options]\n"
               "\n"
               "commands:\n"
               "  run         generate from a checkpoint (%s, told by its config.json)\n", fams_or);
    fputs("  demo        write a small synthetic checkpoint and generate from it\n"
          "  jobs        run a JSON Lines file of jobs, batched together, resumable\n"
          "  serve       serve an OpenAI-compatible HTTP API, requests batched together\n"
          "  chat        a conversation on the terminal that goes on from its own state (no re-prefill)\n"
          "  tokenize    text -> token ids\n"
          "  detokenize  token ids -> text\n",
          f);
    fprintf(f, "  synth       write a random checkpoint in a family's released layout (%s)\n", fams);
    fputs("  cache-sim   replay a routed-expert trace through LRU, the cache policy and Belady\n"
          "  pack-trunk  write a lossless compressed copy of the BF16 trunk (fewer bytes streamed)\n"
          "  shard       split a checkpoint's experts into per-worker packs (+ a trunk-only checkpoint)\n"
          "  keygen      write a CURVE key pair for workers and coordinators\n"
          "  ident       hash every byte of a checkpoint once and print its fingerprint\n"
          "  bench       measure this machine's FMA peak and read bandwidth, and the kernels against them\n"
          "\n"
          "`moestream <command> --help` describes each command; `moestream --version` prints the version.\n"
          "Exit codes: 0 ok, 1 runtime error,\n"
          "2 usage, 3 bad model, 4 I/O error, 5 bad input, 6 impossible budget, 7 worker failure,\n"
          "130 interrupted (Ctrl-C or SIGTERM).\n",
          f);
}

static int dispatch(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return MS_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return MS_EXIT_OK;
    }
    if (!strcmp(cmd, "--version")) {
        puts("moestream " MS_VERSION);
        return MS_EXIT_OK;
    }
    if (!strcmp(cmd, "run")) return ms_cli_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "demo")) return ms_cli_demo(argc - 1, argv + 1);
    if (!strcmp(cmd, "jobs")) return ms_cli_jobs(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return ms_cli_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "chat")) return ms_cli_chat(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return ms_cli_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "detokenize")) return ms_cli_detokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "synth")) return ms_cli_synth(argc - 1, argv + 1);
    if (!strcmp(cmd, "cache-sim")) return ms_cli_cache_sim(argc - 1, argv + 1);
    if (!strcmp(cmd, "keygen")) return ms_cli_keygen(argc - 1, argv + 1);
    if (!strcmp(cmd, "shard")) return ms_cli_shard(argc - 1, argv + 1);
    if (!strcmp(cmd, "pack-trunk")) return ms_cli_pack_trunk(argc - 1, argv + 1);
    if (!strcmp(cmd, "ident")) return ms_cli_ident(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return ms_cli_bench(argc - 1, argv + 1);
    fprintf(stderr, "moestream: unknown command '%s'\n", cmd);
    usage(stderr);
    return MS_EXIT_USAGE;
}

/* Output lost on the way (a full disk, a failing device) must not look like success:
 * every command's stdout is checked here once, after it returns. */
int main(int argc, char **argv)
{
    int rc = dispatch(argc, argv);
    if (ms_stdout_close() != 0) {
        fprintf(stderr, "moestream%s%s: %s\n", argc > 1 ? " " : "", argc > 1 ? argv[1] : "", ms_err_msg());
        if (rc == MS_EXIT_OK) rc = MS_EXIT_IO;
    }
    return rc;
}
