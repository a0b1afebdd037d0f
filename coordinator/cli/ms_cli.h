/* ms_cli: the moestream subcommands and their shared argument helpers. */
#ifndef MS_CLI_H
#define MS_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ms_utf8.h"

/* Each command takes argv after the command name (argv[0] = command name) and returns a
 * process exit code (ms_err.h); it prints its own errors. */
int ms_cli_run(int argc, char **argv);
int ms_cli_chat(int argc, char **argv);
int ms_cli_demo(int argc, char **argv);
int ms_cli_jobs(int argc, char **argv);  /* ms_cli_jobs.c: a file of jobs, batched, resumable */
int ms_cli_serve(int argc, char **argv); /* ms_cli_serve.c: the OpenAI-compatible HTTP server */
int ms_cli_tokenize(int argc, char **argv);
int ms_cli_detokenize(int argc, char **argv);
int ms_cli_synth(int argc, char **argv);
int ms_cli_shard(int argc, char **argv); /* ms_cli_shard.c: per-worker expert packs */
int ms_cli_keygen(int argc, char **argv);
int ms_cli_pack_trunk(int argc, char **argv); /* ms_cli_ptrunk.c: the lossless trunk pack */
int ms_cli_ident(int argc, char **argv);      /* ms_cli_ident.c: a checkpoint's full-content fingerprint */
int ms_cli_bench(int argc, char **argv);      /* ms_cli_bench.c: FMA peak, bandwidth, kernels against them */

/* ms_opt_fail / ms_opt_fail_err as "moestream <cmd>: message"; return code (its class). */
int ms_cli_fail(const char *cmd, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int ms_cli_fail_err(const char *cmd);
/* Set the log level from --quiet (errors only) and install the progress bar (ms_progress) when
 * stderr is a terminal and not quiet. Every command calls it once its options are parsed. */
void ms_cli_set_output(int quiet);
/* Generated text to stdout as it comes: the bytes as they are (raw), else valid UTF-8 through st
 * (a character split across tokens waits for its end; a broken one shows as U+FFFD). */
void ms_cli_put_text(int raw, ms_utf8_stream *st, const char *bytes, size_t len);

/* Parse "1,2,3" (commas and/or whitespace) into a malloc'ed array; an empty item ("1,,3", a
 * leading or trailing comma) is refused. Returns 0 or -1 with ms_err set (MS_EXIT_USAGE) naming
 * the bad item's number and byte offset. */
int ms_cli_parse_ids(const char *s, int32_t **ids, size_t *n);
/* Largest user input file read whole (prompt text, ids, detokenize input): 256 MiB. */
#define MS_CLI_MAX_INPUT ((uint64_t)256 << 20)
/* Whole file (regular file or pipe; at most MS_CLI_MAX_INPUT bytes) into a malloc'ed
 * NUL-terminated buffer, or NULL with ms_err set: MS_EXIT_IO if it cannot be opened or read or
 * is not a regular file or pipe, MS_EXIT_INPUT if it is larger than the limit. */
char *ms_cli_read_file(const char *path, size_t *len);
/* Monotonic seconds. */
double ms_cli_now(void);
/* The registered families joined for help texts: their titles (names = 0: "Kimi K3") or names
 * ("kimi-k3"), separated by sep and the last by last_sep (" or "); into buf[n], which it returns. */
const char *ms_cli_families(char *buf, size_t n, int names, const char *sep, const char *last_sep);
/* text to f wrapped at 96 columns (words are not split), then a newline. */
void ms_cli_put_wrapped(FILE *f, const char *text);

#endif
