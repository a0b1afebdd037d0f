/* ms_cli_eopt: the options of every command that opens an engine (run, demo, jobs): the model,
 * its RAM budget and I/O, threads, and where routed experts are computed. */
#ifndef MS_CLI_EOPT_H
#define MS_CLI_EOPT_H

#include <getopt.h>
#include <stdint.h>

#include "ms_engine.h"

typedef struct {
    const char *model;                       /* --model DIR */
    const char *trunk_pack;                  /* --trunk-pack DIR|none (NULL: beside the model) */
    const char *workers, *cluster, *curve_secret;
    long long local_workers, threads, io_depth, chunk;
    long long span;          /* --prefill-span: 0 default, -1 off, else the most rows of a span */
    long long mixed;         /* --prefill-mixed: 0 off (the default), -1 auto, else the most rows */
    float worker_timeout;                    /* 0 = the default */
    uint64_t budget;                         /* 0 = the memory available */
    int insecure, buffered, lru, quiet, pin; /* pin: --pin-threads */
    int no_mmap;                             /* --mmap off */
    int prefetch;                            /* --expert-prefetch: MS_PREFETCH_AUTO (0), _ON, _OFF */
    int speculate;                           /* --speculate: MS_SPEC_AUTO (the default), 0 = off, N */
    int speculate_set;                       /* --speculate was given (else auto) */
    const char *draft_file;                  /* --draft-file PATH */
    int draft_source;                        /* --draft: MS_DRAFT_AUTO (0), _NGRAM, _HEAD */
    const char *scratch_dir;                 /* --scratch-dir DIR|off (NULL: $TMPDIR or /tmp) */
} ms_cli_eopts;

/* Entries of the shared options in a getopt_long table. */
#define MS_CLI_EOPT_COUNT 24

/* Lines of a command's usage text for the speculation options (run, jobs, serve). */
#define MS_CLI_EOPT_SPEC_HELP                                                                                    \
    "--speculate auto|off|N (default auto) verifies up to N drafted tokens in each decoding pass and keeps the\n" \
    "longest prefix the model itself produces: tokens and logits are identical to off; auto adapts N (up to 8)\n"  \
    "to the drafts' acceptance and pauses drafting while they miss. --draft auto|ngram|mtp (default auto): where\n" \
    "drafts come from: the checkpoint's own MTP layer (DeepSeek-V3/R1/V3.1: one draft a pass, from the model's\n"  \
    "last hidden state) when it has one and no workers run the experts, else n-gram lookup in the sequence's\n"    \
    "own tokens; --draft-file PATH drafts an id list (syntax of --ids; draft i is id i).\n"

/* A command's getopt_long table: its own n_own entries, then the shared ones, then the zero
 * entry. out has room for n_own + MS_CLI_EOPT_COUNT + 1 entries. */
void ms_cli_eopt_table(const struct option *own, int n_own, struct option *out);

/* Apply getopt_long's result c with argument arg if it is a shared option. Returns 1 when taken,
 * 0 when c is not a shared option, or -1 after printing the error of a bad value ("moestream
 * CMD: ...", *code = MS_EXIT_USAGE). */
int ms_cli_eopt_take(ms_cli_eopts *o, const char *cmd, int c, const char *arg, int *code);

/* Checks after parsing (--model given, at most one expert source). MS_EXIT_OK, or the printed
 * usage error's code. */
int ms_cli_eopt_check(const ms_cli_eopts *o, const char *cmd);

/* After getopt: no argument left over, the checks of ms_cli_eopt_check, the output set up for
 * --quiet. MS_EXIT_OK, or the printed usage error's code. */
int ms_cli_eopt_end(int argc, char **argv, const ms_cli_eopts *o, const char *cmd);

struct ms_cli_pcopts_s;
/* getopt's c for a command with the shared options and (pc not NULL) the prefix-cache ones:
 * 1 when one of them took it; 0 when it is none of them (the caller prints its usage and returns
 * *code, MS_EXIT_USAGE); -1 after printing a bad value (*code set). */
int ms_cli_eopt_take_all(ms_cli_eopts *o, struct ms_cli_pcopts_s *pc, const char *cmd, int c, const char *arg, int *code);

/* SIGINT and SIGTERM to handler, with the calls they land in restarted: a write to a terminal or
 * pipe would otherwise return EINTR (always while the terminal's output is stopped, Ctrl-S) and
 * break stdout. */
void ms_cli_catch_signals(void (*handler)(int));

/* Fill the engine options these describe; the command adds what is its own (prompt_tokens,
 * max_positions, all_logits, max_seqs). */
void ms_cli_eopt_engine(const ms_cli_eopts *o, ms_engine_opts *eo);

#endif
