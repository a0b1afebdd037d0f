/* ms_clock: monotonic time in seconds, for timings, deadlines and the run report. */
#ifndef MS_CLOCK_H
#define MS_CLOCK_H

#include <time.h>

static inline double ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
