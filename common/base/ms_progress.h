/* ms_progress: progress of long tasks: library code reports it, the program decides how to show it. */
#ifndef MS_PROGRESS_H
#define MS_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

/* Units of a task's counts: bytes are shown as sizes (ms_size_fmt), items as "done/total". */
typedef enum { MS_PROGRESS_BYTES, MS_PROGRESS_ITEMS } ms_progress_unit;

/* One report: task is the name given to ms_progress_begin; done <= total unless the caller
 * overshoots; start is 1 on the first report of a task (from ms_progress_begin), end is 1 on
 * its last (from ms_progress_end, finished or not). */
typedef struct {
    const char *task;
    ms_progress_unit unit;
    uint64_t done, total;
    int start, end;
    double elapsed;       /* seconds since ms_progress_begin */
    const char *detail;   /* what the task is doing now (ms_progress_detail), "" if nothing */
} ms_progress_ev;

typedef void (*ms_progress_fn)(void *ctx, const ms_progress_ev *ev);

/* Install the reporter (NULL = none, the default: reports cost a mutex and nothing else).
 * Called by programs, never by library code. The reporter runs on the reporting thread with
 * the progress lock held: it must not call ms_progress_*. */
void ms_progress_set(ms_progress_fn fn, void *ctx);
/* Install the stderr bar below if stderr is a terminal and ms_log_level() >= 1 (not --quiet),
 * else no reporter. Returns 1 if the bar was installed. */
int ms_progress_use_stderr(void);
/* 1 if a reporter is installed (library code may then leave out its own per-step log lines). */
int ms_progress_shown(void);

/* The stderr bar: "\rTASK [####....]  42%   1.23 GiB of 2.92 GiB, 1:05 left; DETAIL", redrawn when
 * the percentage or the detail changes (the time left, from the rate so far, once 2 s passed), ended with a newline when the task completes or ends; the bar (40 columns) narrows
 * to fit a narrower terminal (ms_progress_line_draw). ctx is unused. */
void ms_progress_bar(void *ctx, const ms_progress_ev *ev);

/* A one-line status redrawn in place on a terminal (the bar, jobs' line): fitted to the terminal's
 * width, and redrawn whole when the width changes. */
typedef struct {
    int len;  /* visible bytes of the line drawn last (0: none open) */
    int cols; /* the width it was drawn at */
} ms_progress_line;
/* Columns of the terminal on fd (TIOCGWINSZ), else $COLUMNS, else 80. */
int ms_progress_cols(int fd);
/* Draw text (ASCII, no newline) over the open line: cut to cols - 1 bytes, the rest of a longer
 * previous line cleared; after the width changed, the previous line is cleared where a terminal
 * that reflows would show it (up to the row it starts on). */
void ms_progress_line_draw(ms_progress_line *l, FILE *f, int cols, const char *text);
/* End the open line with a newline (no-op when none is open). */
void ms_progress_line_end(ms_progress_line *l, FILE *f);

/* Library side. One task at a time per process (a new begin replaces the current one); add may
 * be called from any thread. task must stay valid until ms_progress_end. */
void ms_progress_begin(const char *task, uint64_t total, ms_progress_unit unit);
void ms_progress_add(uint64_t n);
/* Set the count outright (e.g. tokens done so far). */
void ms_progress_set_done(uint64_t done);
/* Set the count and say what the task is doing now (printf format, copied: e.g. "layer 3 of
 * 93, 1.2 GB read"); shown after the counts until the next detail. */
void ms_progress_detail(uint64_t done, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The task is over (complete or failed): the reporter gets end = 1. No-op without a task. */
void ms_progress_end(void);

#endif
