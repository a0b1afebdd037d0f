/* ms_progress: the one progress facility: a task counter, a pluggable reporter, a stderr bar. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "ms_clock.h"
#include "ms_err.h"
#include "ms_progress.h"
#include "ms_size.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static ms_progress_fn reporter;
static void *reporter_ctx;
static ms_progress_ev cur; /* cur.task == NULL: no task */
static double t_begin;     /* when the task began */
static char detail[160];   /* cur.detail's text */

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
    if (!reporter || !cur.task) return;
    cur.elapsed = ms_now() - t_begin;
    reporter(reporter_ctx, &cur);
}

void ms_progress_begin(const char *task, uint64_t total, ms_progress_unit unit)
{
    MS_ASSERT(task);
    pthread_mutex_lock(&lock);
    t_begin = ms_now();
    detail[0] = 0;
    cur = (ms_progress_ev){task, unit, 0, total, 1, 0, 0.0, detail};
    emit();
    cur.start = 0;
    pthread_mutex_unlock(&lock);
}

void ms_progress_detail(uint64_t done, const char *fmt, ...)
{
    pthread_mutex_lock(&lock);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    cur.done = done;
    emit();
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

int ms_progress_cols(int fd)
{
    struct winsize w;
    if (ioctl(fd, TIOCGWINSZ, &w) == 0 && w.ws_col > 0) return w.ws_col;
    const char *c = getenv("COLUMNS");
    int n = c ? atoi(c) : 0;
    return n > 0 ? n : 80;
}

void ms_progress_line_draw(ms_progress_line *l, FILE *f, int cols, const char *text)
{
    if (cols < 2) cols = 2;
    int len = (int)strlen(text);
    if (len > cols - 1) len = cols - 1;
    if (l->len > 0 && cols != l->cols && l->len > cols - 1) {
        /* The old line is wider than the terminal now: a terminal that reflows shows it over
         * several rows, the cursor on the last. Go to its first row and clear from there. */
        int up = (l->len - 1) / cols;
        if (up > 0) fprintf(f, "\r\033[%dA", up);
        fprintf(f, "\r\033[J%.*s", len, text);
    } else {
        fprintf(f, "\r%.*s%s", len, text, len < l->len ? "\033[K" : "");
    }
    l->len = len > 0 ? len : 1;
    l->cols = cols;
}

void ms_progress_line_end(ms_progress_line *l, FILE *f)
{
    if (l->len > 0) fputc('\n', f);
    l->len = 0;
}

/* The bar's state: what was drawn last, so that it redraws only on a new percentage. (The done
 * size is padded to 10 columns: "1.00 MiB" must cover "1023.00 KiB" on the same line.) */
static struct {
    int pct;              /* last percentage drawn, -1 = none */
    char detail[160];     /* the detail drawn with it */
    ms_progress_line line; /* the line drawn and not yet ended */
} bar;

void ms_progress_bar(void *ctx, const ms_progress_ev *ev)
{
    (void)ctx;
    if (ev->start) {
        ms_progress_line_end(&bar.line, stderr);
        bar.pct = -1;
    }
    if (ev->end) {
        ms_progress_line_end(&bar.line, stderr);
        return;
    }
    if (!ev->total) return;
    int pct = (int)(100.0 * (double)ev->done / (double)ev->total);
    if (pct > 100) pct = 100;
    const char *det = ev->detail ? ev->detail : "";
    if (pct == bar.pct && !strcmp(det, bar.detail)) return;
    bar.pct = pct;
    snprintf(bar.detail, sizeof bar.detail, "%s", det);
    char nums[96], a[32], b[32], text[512], left[48] = "";
    if (ev->elapsed >= 2 && ev->done > 0 && ev->done < ev->total) {
        double s = ev->elapsed * (double)(ev->total - ev->done) / (double)ev->done;
        long m = (long)(s / 60 + 0.5);
        if (s < 60)
            snprintf(left, sizeof left, ", %ld s left", (long)(s + 0.5));
        else if (m < 60)
            snprintf(left, sizeof left, ", %ld min left", m);
        else
            snprintf(left, sizeof left, ", %ld h %02ld min left", m / 60, m % 60);
    }
    if (ev->unit == MS_PROGRESS_BYTES)
        snprintf(nums, sizeof nums, "%3d%% %10s of %s", pct, ms_size_fmt(ev->done, a, sizeof a),
                 ms_size_fmt(ev->total, b, sizeof b));
    else
        snprintf(nums, sizeof nums, "%3d%% %llu/%llu", pct, (unsigned long long)ev->done,
                 (unsigned long long)ev->total);
    int cols = ms_progress_cols(2);
    /* "TASK [" "] " and the detail's "; ": the bar narrows first so the words fit */
    int width = cols - 1 - (int)(strlen(ev->task) + strlen(nums) + strlen(left) + 4 + (*det ? strlen(det) + 2 : 0));
    if (width > 40) width = 40;
    if (width < 4) width = 4; /* then the line is cut at the terminal's edge */
    char line[41];
    memset(line, '#', (size_t)(pct * width / 100));
    memset(line + pct * width / 100, '.', (size_t)(width - pct * width / 100));
    line[width] = 0;
    snprintf(text, sizeof text, "%s [%s] %s%s%s%s", ev->task, line, nums, left, *det ? "; " : "", det);
    ms_progress_line_draw(&bar.line, stderr, cols, text);
    if (ev->done >= ev->total) ms_progress_line_end(&bar.line, stderr);
}
