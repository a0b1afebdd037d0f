/* ms_cli_pcache: the prefix-cache options of jobs and serve (--prefix-cache, --state-cache,
 * --state-cache-size) and the cache they open. */
#ifndef MS_CLI_PCACHE_H
#define MS_CLI_PCACHE_H

#include <getopt.h>
#include <stdint.h>

#include "ms_engine.h"
#include "ms_pcache.h"

typedef struct ms_cli_pcopts_s {
    uint64_t ram;        /* --prefix-cache SIZE: states kept in RAM (the plan reserves them); 0: off */
    const char *dir;     /* --state-cache DIR: where states leave RAM for (and are found at the next run) */
    uint64_t disk;       /* --state-cache-size SIZE (default 10G) */
    int ram_set;         /* --prefix-cache was given */
    int off;             /* --no-prefix-cache */
} ms_cli_pcopts;

#define MS_CLI_PC_COUNT 4
#define MS_CLI_PC_OPTIONS                                                                     \
    {"prefix-cache", required_argument, 0, 0x7063}, {"state-cache", required_argument, 0, 0x7064}, \
        {"state-cache-size", required_argument, 0, 0x7065}, {"no-prefix-cache", no_argument, 0, 0x7066}
#define MS_CLI_PC_USAGE "[--prefix-cache SIZE | --no-prefix-cache] [--state-cache DIR [--state-cache-size SIZE]]"
#define MS_CLI_PC_HELP                                                                                               \
    "--prefix-cache SIZE keeps the states of prompts (at their end and every 256 tokens) in SIZE of RAM, planned\n"   \
    "with the budget: a prompt that begins as a kept one starts from its state and prefills only the rest (the\n"     \
    "same tokens and logits). --state-cache DIR (a directory of this user's alone: others must not be able to\n"     \
    "write to it) spills states that leave RAM to DIR (up to --state-cache-size, default 10G, least recently\n"     \
    "used first) and finds them again at the next run (it identifies the model by hashing its bytes once).\n"      \
    "serve and chat keep one by default: a sixteenth of the budget, at most 4G (none when the budget cannot\n"    \
    "spare it); jobs only when asked. --no-prefix-cache: none.\n"

/* Open the engine of eo (its other options set) with room planned for the prefix cache of *o:
 * as asked, else (by_default, neither --prefix-cache nor --no-prefix-cache given) a sixteenth
 * of the budget (MemAvailable when 0), at most 4 GiB, given up (a log line, o->ram 0) when the
 * budget cannot spare it. o->ram is left what was planned. NULL with ms_err set as
 * ms_engine_open. */
ms_engine *ms_cli_pc_engine_open(ms_cli_pcopts *o, int by_default, uint64_t budget, const char *cmd, ms_engine_opts *eo);

/* Take getopt's c if it is one of these: 1, 0 if not, -1 after printing a bad value (*code set). */
int ms_cli_pc_take(ms_cli_pcopts *o, const char *cmd, int c, const char *arg, int *code);
/* The cache for e (NULL when off): --prefix-cache's RAM plus pinned_room (planned for states kept
 * pinned: jobs' shared beginnings; 0 for none). *code: 0, or the exit code after printing why it
 * cannot open. */
ms_pcache *ms_cli_pc_open(const ms_cli_pcopts *o, uint64_t pinned_room, ms_engine *e, const char *model_dir,
                          const char *cmd, int *code);
/* One line about what the cache did ("prefix cache: ..."), into buf. */
void ms_cli_pc_summary(const ms_pcache *c, char *buf, size_t n);

#endif
