/* ms_dpolicy: the speculation policy: how many drafts a sequence asks for in its next pass. */
#ifndef MS_DPOLICY_H
#define MS_DPOLICY_H

#include <stdint.h>

#include "ms_dcost.h"

/* A sequence's policy state (a plain value; no destructor). Fixed: every pass asks for the
 * window. Auto (MS_SPEC_AUTO): the window adapts to the drafts' acceptance, and once the pass
 * times fit (ms_dcost), to what pays best; drafting pauses while drafts miss, and probes again. */
typedef struct {
    int window;           /* the most drafts a pass holds (as planned) */
    int automatic;        /* 1: auto */
    int k_cur;            /* auto: drafts to ask for next (before a fit) */
    int pause, backoff;   /* auto: passes left without drafting; the next pause's length */
    int probe;            /* auto: after a pause, one draft to see whether drafts land now */
    double acc_w, miss_w; /* auto: drafts right, and passes with a wrong one (decayed counts) */
} ms_dpolicy;

/* auto's opening window before any pass has been timed: where the plan streams the trunk, a pass
 * costs its streamed bytes whatever its rows, so a wrong draft costs little next to a pass and
 * the whole window opens (a ramp would cost whole passes); else 2: right drafts reach the window
 * of 8 on the next pass (x4), wrong ones pause at once (/4). */
int ms_dpolicy_opening(int window, int streaming);

void ms_dpolicy_init(ms_dpolicy *d, int window, int automatic, int streaming);

/* Before a pass: 1 while drafting pauses (one pass of the pause counted off), else 0. */
int ms_dpolicy_paused(ms_dpolicy *d);

/* The drafts to ask for, at most kmax (the pass's room and the tokens left), n_base the pass's
 * rows without them: fixed, the window; auto, once cost fits, the count that pays best for
 * this sequence's acceptance so far (none starts a pause that ends with a one-draft probe),
 * before a fit k_cur. */
int64_t ms_dpolicy_want(ms_dpolicy *d, const ms_dcost *cost, int64_t kmax, int64_t n_base);

/* After a pass that verified k drafts of which acc were right (auto only: fixed keeps nothing).
 * A full acceptance quadruples the window (a short answer has few passes to ramp up in), a
 * partial one sets it just past what was right, a complete miss quarters it; at zero, drafting
 * pauses for a number of passes that grows fourfold with each consecutive miss (1, 4, 16, ...
 * 256), and at least the probe gap the measured pass cost gives (ms_dcost_probe_gap: a wrong row
 * costs a whole pass where the trunk is pinned, little where it streams), then one draft probes
 * again. Drafts that never land cost the opening window's rows at pass 1, then one row at
 * passes 3, 8, 25, 90, ... where rows are cheap, or about every 50 passes where a row costs a
 * pass. */
void ms_dpolicy_verified(ms_dpolicy *d, const ms_dcost *cost, int k, int acc);

#endif
