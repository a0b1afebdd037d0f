/* ms_dcost: what a draft costs, measured: a fit of decoding-pass time against the rows in the pass, and the draft count that pays best. */
#ifndef MS_DCOST_H
#define MS_DCOST_H

#include <stdint.h>

/* Pass time as a + b * rows, fitted by least squares over the decoding passes seen, each
 * older pass weighted down by MS_DCOST_DECAY per newer one (budgets, caches and batch sizes
 * change what a row costs, so recent passes count most). a is what a pass costs whatever its
 * rows (at a small budget: streaming the trunk), b what each row adds (its compute, its
 * routed experts' reads, the LM head). A plain value: zero-initialise, no destructor. */
#define MS_DCOST_DECAY 0.95
typedef struct {
    double w, x, y, xx, xy; /* decayed sums: weight, rows, seconds, rows^2, rows * seconds */
    int n;                  /* passes added */
} ms_dcost;

/* Add a decoding pass of `rows` rows that took `seconds`. */
void ms_dcost_add(ms_dcost *c, int64_t rows, double seconds);

/* The fit: 0 and *a, *b (b >= 0, a >= 0), or -1 while the passes seen do not determine it (fewer
 * than 3, or their row counts too alike: one row count fits any slope). */
int ms_dcost_fit(const ms_dcost *c, double *a, double *b);

/* Expected tokens from a pass over one sequence's row and k drafts when each draft is right
 * with probability p, independently, and verification stops at the first wrong one:
 * 1 + p + p^2 + ... + p^k. */
double ms_dcost_expected(double p, int k);

/* The draft count k in [0, kmax] that maximises the pass's tokens per second,
 * (n_base - 1 + ms_dcost_expected(p, k)) / (a + b * (n_base + k)), where n_base is the pass's rows
 * without this sequence's drafts (its own row and the other sequences'). Ties go to fewer
 * drafts; a draft must gain at least 1% to be worth its risk. */
int ms_dcost_best_k(double p, double a, double b, int64_t n_base, int kmax);

/* The fewest passes between one-draft probes while drafts do not pay, so that a wrong probe
 * (one row more: b / (a + b) of a pass) costs at most MS_DCOST_PROBE_SHARE of the passes it is
 * spread over: ceil(b / (a + b) / share), from 1 to 256. Where a pass's fixed cost dominates
 * (the trunk streamed at a small budget) a probe is nearly free and comes often; where each
 * row pays its own reads (the trunk pinned) a probe costs a pass and comes rarely. */
#define MS_DCOST_PROBE_SHARE 0.02
int ms_dcost_probe_gap(double a, double b);

#endif
