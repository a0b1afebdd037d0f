/* test_progress: the reports library code makes, the reporter a program installs, and the stderr bar. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ms_err.h"
#include "ms_progress.h"
#include "ms_test.h"

/* A reporter that keeps every event. */
typedef struct {
    ms_progress_ev ev[8192];
    char task[8192][16];
    int n;
} rec_t;
static rec_t rec;

static void record(void *ctx, const ms_progress_ev *ev)
{
    rec_t *r = ctx;
    if (r->n < 8192) {
        r->ev[r->n] = *ev;
        snprintf(r->task[r->n], sizeof r->task[0], "%s", ev->task);
        r->n++;
    }
}

static void test_events(void)
{
    ms_progress_begin("nobody", 10, MS_PROGRESS_ITEMS); /* no reporter: nothing happens */
    ms_progress_add(3);
    ms_progress_end();
    T_CHECK(!ms_progress_shown(), "no reporter by default");

    memset(&rec, 0, sizeof rec);
    ms_progress_set(record, &rec);
    T_CHECK(ms_progress_shown(), "a reporter installed is shown");
    ms_progress_begin("copy", 100, MS_PROGRESS_BYTES);
    ms_progress_add(30);
    ms_progress_add(30);
    ms_progress_set_done(90);
    ms_progress_end();
    ms_progress_end(); /* no task: no event */
    ms_progress_add(5); /* no task: no event */
    T_CHECK(rec.n == 5, "begin, add, add, set, end: 5 events (got %d)", rec.n);
    const uint64_t done[] = {0, 30, 60, 90, 90};
    int ok = rec.n == 5;
    for (int i = 0; ok && i < 5; i++)
        ok = rec.ev[i].done == done[i] && rec.ev[i].total == 100 && !strcmp(rec.task[i], "copy") &&
             rec.ev[i].unit == MS_PROGRESS_BYTES && rec.ev[i].start == (i == 0) && rec.ev[i].end == (i == 4);
    T_CHECK(ok, "each event carries the task, unit, count, total, start and end");
    ms_progress_set(NULL, NULL);
}

static void *adder(void *arg)
{
    (void)arg;
    for (int i = 0; i < 1000; i++) ms_progress_add(1);
    return NULL;
}

static void test_threads(void)
{
    memset(&rec, 0, sizeof rec);
    ms_progress_set(record, &rec);
    ms_progress_begin("threads", 4000, MS_PROGRESS_ITEMS);
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, adder, NULL);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    ms_progress_end();
    int rising = 1;
    for (int i = 1; i < rec.n - 1; i++) rising &= rec.ev[i].done == (uint64_t)i;
    T_CHECK(rec.n == 4002 && rising && rec.ev[rec.n - 1].done == 4000,
            "4 threads x 1000 adds: every count seen once, in order, ending at 4000 (%d events)", rec.n);
    ms_progress_set(NULL, NULL);
}

static size_t count(const char *s, char c)
{
    size_t k = 0;
    for (; *s; s++) k += *s == c;
    return k;
}

static int bar_full(void)
{
    ms_progress_set(ms_progress_bar, NULL);
    ms_progress_begin("prefill", 200, MS_PROGRESS_ITEMS);
    for (int i = 0; i < 200; i++) ms_progress_add(1);
    ms_progress_end();
    ms_progress_set(NULL, NULL);
    return 0;
}

static int bar_cut(void)
{
    ms_progress_set(ms_progress_bar, NULL);
    ms_progress_begin("shard", 2048, MS_PROGRESS_BYTES);
    ms_progress_add(1024);
    ms_progress_end(); /* failed half-way */
    ms_progress_begin("shard", 2048, MS_PROGRESS_BYTES);
    ms_progress_end();
    ms_progress_set(NULL, NULL);
    return 0;
}

/* A detail (a span's layer) redraws the bar at the same percentage, after the counts; the bar
 * narrows so that it fits the 80 columns. */
static int bar_detail(void)
{
    ms_progress_set(ms_progress_bar, NULL);
    ms_progress_begin("prefill", 100, MS_PROGRESS_ITEMS);
    ms_progress_detail(50, "layer %d/%d", 1, 2);
    ms_progress_detail(50, "layer %d/%d", 2, 2);
    ms_progress_detail(50, "layer %d/%d", 2, 2); /* nothing new: no redraw */
    ms_progress_end();
    ms_progress_set(NULL, NULL);
    return 0;
}

static void test_bar(void)
{
    static char out[65536];
    ms_t_capture_stderr(out, sizeof out, bar_full);
    /* a redraw per new percentage: 0..100 of 200 steps is 101 lines, and one newline at 100% */
    T_CHECK(count(out, '\r') == 101 && count(out, '\n') == 1 && out[strlen(out) - 1] == '\n',
            "200 steps: 101 redraws, one newline at the end (%zu, %zu)", count(out, '\r'), count(out, '\n'));
    T_CHECK(strstr(out, "\rprefill [####################....................]  50% 100/200") != NULL,
            "the half-way line: %.80s", strstr(out, " 50%") ? strstr(out, " 50%") - 55 : out);
    T_CHECK(strstr(out, "] 100% 200/200\n") != NULL, "the last line");
    ms_t_capture_stderr(out, sizeof out, bar_cut);
    T_CHECK(strstr(out, " 50%   1.00 KiB of 2.00 KiB\n") != NULL && count(out, '\n') == 2,
            "a task cut short ends its line (bytes shown as sizes); an empty one too: '%s'", out);
    ms_t_capture_stderr(out, sizeof out, bar_detail);
    T_CHECK(strstr(out, "]  50% 50/100; layer 1/2") && strstr(out, "]  50% 50/100; layer 2/2") && count(out, '\r') == 3,
            "a new detail redraws the same percentage after the counts (3 draws): '%s'", out);
}

/* The redrawn line: cut to the width, a shorter line clears what is left of the longer one, and
 * after the terminal narrowed the old line is cleared from the row it starts on. */
static void test_line(void)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    ms_progress_line l = {0, 0};
    ms_progress_line_draw(&l, f, 80, "jobs 1/10  12.00 tok/s");
    ms_progress_line_draw(&l, f, 80, "jobs 2/10  9.00 tok/s");
    ms_progress_line_draw(&l, f, 10, "jobs 3/10  8.00 tok/s");
    ms_progress_line_draw(&l, f, 10, "jobs 4/10");
    ms_progress_line_end(&l, f);
    ms_progress_line_end(&l, f); /* nothing open: nothing */
    fclose(f);
    const char *want = "\rjobs 1/10  12.00 tok/s"
                       "\rjobs 2/10  9.00 tok/s\033[K"      /* one byte shorter: cleared */
                       "\r\033[2A\r\033[Jjobs 3/10"         /* 22 bytes at 10 columns: 3 rows, up 2 */
                       "\rjobs 4/10\n";
    T_CHECK(buf && !strcmp(buf, want), "the line's redraws: '%s'", buf ? buf : "");
    free(buf);
}

/* ms_progress_use_stderr with fd 2 on a pseudo-terminal: the bar, unless --quiet. */
static void test_use_stderr(void)
{
    ms_log_set_level(1);
    T_CHECK(ms_progress_use_stderr() == isatty(2), "stderr %s a terminal here", isatty(2) ? "is" : "is not");
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    if (m < 0 || grantpt(m) != 0 || unlockpt(m) != 0) {
        ms_t_skip("no pseudo-terminal available");
        if (m >= 0) close(m);
        return;
    }
    int s = open(ptsname(m), O_RDWR | O_NOCTTY);
    fflush(stderr);
    int saved = dup(2);
    dup2(s, 2);
    int on = ms_progress_use_stderr(), shown = ms_progress_shown();
    ms_log_set_level(0);
    int quiet = ms_progress_use_stderr(), quiet_shown = ms_progress_shown();
    dup2(saved, 2);
    close(saved);
    close(s);
    close(m);
    ms_log_set_level(1);
    T_CHECK(on == 1 && shown, "on a terminal the bar is installed");
    T_CHECK(quiet == 0 && !quiet_shown, "at log level 0 (--quiet) it is not");
    ms_progress_set(NULL, NULL);
}

int main(void)
{
    test_events();
    test_threads();
    setenv("COLUMNS", "80", 1); /* stderr is a pipe here: the bar's width comes from $COLUMNS */
    test_bar();
    test_line();
    test_use_stderr();
    return ms_t_done();
}
