/* ms_mtest: what the tests of any family do with a model: its logits over a prompt, its least budget. */
#ifndef MS_MTEST_H
#define MS_MTEST_H

#include <stdint.h>

#include "ms_model.h"

/* The logits [n][V] (malloc'ed) of ids fed to a fresh sequence in passes of `split` rows (0:
 * one pass), the model opened from dir with o by its family (ms_families_open), and the run's
 * stats into st (may be NULL); NULL after printing why when it cannot open or a pass fails. */
float *ms_t_logits(const char *dir, const ms_run_opts *o, const int32_t *ids, int64_t n, int split, ms_model_stats *st);

/* The least budget the planner accepts for o (baseline 1 byte): the number its refusal of a
 * 1-byte budget names; a check that it is refused that way (what names the caller in its message). */
uint64_t ms_t_least_budget(const char *dir, ms_run_opts o, const char *what);

/* A family's fixture checkpoint dir against its official reference (ref_logits.json,
 * ref_greedy.json): it opens as `family` with o, the prompt's logits and the 16 greedy steps'
 * within 1e-4 of the reference's (relative to the largest), the greedy tokens exact; `how` names
 * the options in the checks' lines (pinned, streamed). */
void ms_t_check_reference(const char *dir, const char *name, const char *family, const ms_run_opts *o, const char *how);

#endif
