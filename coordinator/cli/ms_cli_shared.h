/* ms_cli_shared: jobs' shared prompt beginnings: found among the jobs, prefilled once, kept pinned. */
#ifndef MS_CLI_SHARED_H
#define MS_CLI_SHARED_H

#include <stddef.h>
#include <stdint.h>

#include "ms_engine.h"
#include "ms_jobfile.h"
#include "ms_pcache.h"

/* Jobs whose prompts begin alike (a shared system prompt): each longest beginning two of them
 * share, 16 tokens or more (and 16 or more beyond a shorter one it extends), is prefilled once
 * before the jobs run and kept pinned in the prefix cache, in room the plan reserves for it, so
 * that they all start from it (shorter ones first: a longer one starts from a shorter's state).
 * At most MS_CLI_MAX_SHARED of them: those that spare the most prompt tokens. */
#define MS_CLI_MAX_SHARED 8

typedef struct {
    const int32_t *ids; /* [n] borrowed from a spec */
    size_t n;
    uint64_t spared;    /* prompt tokens not prefilled again: the tokens beyond the shorter beginning
                           it extends x (prompts beginning with it - 1) */
} ms_cli_prefix;

/* The shared beginnings of specs[n_specs] still to run (line >= 0, no error): *out malloc'ed
 * (the caller frees it; its ids point into specs), shortest first (then by ids); their count
 * (0: *out may still be set). */
int ms_cli_shared_find(const ms_jobspec *specs, int n_specs, ms_cli_prefix **out);
/* Prefill each of pf[n] once (from the state of a shorter one when kept) and keep its state
 * pinned in pc. 0, or the exit code after printing the failure. */
int ms_cli_shared_warm(ms_engine *e, ms_pcache *pc, const ms_cli_prefix *pf, int n);

#endif
