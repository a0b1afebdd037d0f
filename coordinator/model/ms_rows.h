/* ms_rows: a run of consecutive rows of one sequence inside a batched forward pass. */
#ifndef MS_ROWS_H
#define MS_ROWS_H

#include <stdint.h>

/* Rows [r0, r0 + T) of a pass belong to one sequence, in position order. A family's layers run
 * their matmuls once over all rows of the pass and their per-sequence parts (recurrences,
 * caches, attention) segment by segment, so no row ever depends on another sequence. */
typedef struct {
    int64_t r0, T;
} ms_rows;

#endif
