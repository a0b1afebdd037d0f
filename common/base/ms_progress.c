/* ms_progress: the one progress facility: a task counter, a pluggable reporter, a stderr bar. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ms_err.h"
#include "ms_progress.h"
#include "ms_size.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static ms_progress_fn reporter;
static void *reporter_ctx;
static ms_progress_ev cur; /* cur.task == NULL: no task */

void ms_progress_set(ms_progress_fn fn, void *ctx)
{
    pthread_mutex_lock(&lock);
    reporter = fn;
    reporter_ctx = ctx;
    pthread_mutex_unlock(&lock);
}

int ms_progress_use_stderr(void)
{
    int on = isatty(2) && ms_log_level() >= 1;
    ms_progress_set(on ? ms_progress_bar : NULL, NULL);
    return on;
}

int ms_progress_shown(void)
{
    pthread_mutex_lock(&lock);
    int on = reporter != NULL;
    pthread_mutex_unlock(&lock);
    return on;
}

static void emit(void)
{
    if (reporter && cur.task) reporter(reporter_ctx, &cur);
}

void ms_progress_begin(const char *task, uint64_t total, ms_progress_unit unit)
{
    MS_ASSERT(task);
    pthread_mutex_lock(&lock);
    cur = (ms_progress_ev){task, unit, 0, total, 1, 0};
    emit();
    cur.start = 0;
    pthread_mutex_unlock(&lock);
}

void ms_progress_add(uint64_t n)
{
    pthread_mutex_lock(&lock);
    cur.done += n;
    emit();
    pthread_mutex_unlock(&lock);
}

void ms_progress_set_done(uint64_t done)
{
    pthread_mutex_lock(&lock);
    cur.done = done;
    emit();
    pthread_mutex_unlock(&lock);
}

void ms_progress_end(void)
{
    pthread_mutex_lock(&lock);
    cur.end = 1;
    emit();
    memset(&cur, 0, sizeof cur);
    pthread_mutex_unlock(&lock);
}

/* The bar's state: what was drawn last, so that it redraws only on a new percentage. (The done
 * size is padded to 10 columns: "1.00 MiB" must cover "1023.00 KiB" on the same line.) */
static struct {
    int pct;  /* last percentage drawn, -1 = none */
    int open; /* a line is drawn and not yet ended */
} bar;

void ms_progress_bar(void *ctx, const ms_progress_ev *ev)
{
    (void)ctx;
    if (ev->start) {
        if (bar.open) fputc('\n', stderr);
        bar.pct = -1;
        bar.open = 0;
    }
    if (ev->end) {
        if (bar.open) fputc('\n', stderr);
        bar.open = 0;
        return;
    }
    if (!ev->total) return;
    int pct = (int)(100.0 * (double)ev->done / (double)ev->total);
    if (pct > 100) pct = 100;
    if (pct == bar.pct) return;
    bar.pct = pct;
    char line[41], a[32], b[32];
    memset(line, '#', (size_t)(pct * 40 / 100));
    memset(line + pct * 40 / 100, '.', (size_t)(40 - pct * 40 / 100));
    line[40] = 0;
    if (ev->unit == MS_PROGRESS_BYTES)
        fprintf(stderr, "\r%s [%s] %3d%% %10s of %s", ev->task, line, pct, ms_size_fmt(ev->done, a, sizeof a),
                ms_size_fmt(ev->total, b, sizeof b));
    else
        fprintf(stderr, "\r%s [%s] %3d%% %llu/%llu", ev->task, line, pct, (unsigned long long)ev->done,
                (unsigned long long)ev->total);
    bar.open = 1;
    if (ev->done >= ev->total) {
        fputc('\n', stderr);
        bar.open = 0;
    }
}
