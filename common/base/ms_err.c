/* ms_err: thread-local error messages, logging and checked allocation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"

static _Thread_local char err_buf[2048];
static _Thread_local int err_code = MS_EXIT_RUNTIME;
static int log_level = 1;

int ms_err_set(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
    err_code = MS_EXIT_RUNTIME;
    return -1;
}

int ms_err_vfail(int code, const char *fmt, va_list ap)
{
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    err_code = code;
    return -1;
}

int ms_err_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ms_err_vfail(code, fmt, ap);
    va_end(ap);
    return -1;
}

int ms_err_fail_in(int code, const char *where, const char *fmt, ...)
{
    char msg[sizeof err_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ms_err_fail(code, "%s: %s", where, msg);
}

int ms_err_wrap(const char *fmt, ...)
{
    char prefix[1024], old[sizeof err_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err_buf, sizeof old);
    size_t n = strlen(prefix);
    if (n > sizeof err_buf - 3) n = sizeof err_buf - 3;
    memcpy(err_buf, prefix, n);
    memcpy(err_buf + n, ": ", 2);
    size_t rest = sizeof err_buf - n - 3, ol = strlen(old);
    if (ol > rest) ol = rest;
    memcpy(err_buf + n + 2, old, ol);
    err_buf[n + 2 + ol] = 0;
    return -1;
}

const char *ms_err_msg(void) { return err_buf; }
int ms_err_code(void) { return err_code; }
int ms_err_set_code(int code)
{
    err_code = code;
    return -1;
}
void ms_err_clear(void)
{
    err_buf[0] = 0;
    err_code = MS_EXIT_RUNTIME;
}

void ms_log_set_level(int level) { log_level = level; }
int ms_log_level(void) { return log_level; }

static ms_log_fn log_sink;
static void *log_sink_ctx;
void ms_log_set_sink(ms_log_fn fn, void *ctx)
{
    log_sink = fn;
    log_sink_ctx = ctx;
}

void ms_log_fail(const char *who, int code, const char *msg)
{
    if (log_sink)
        log_sink(log_sink_ctx, -1, code, msg);
    else
        fprintf(stderr, "%s: %s\n", who, msg);
}

void ms_log(int level, const char *fmt, ...)
{
    if (level > log_level) return;
    va_list ap;
    va_start(ap, fmt);
    if (log_sink) {
        char msg[4096];
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        log_sink(log_sink_ctx, level, 0, msg);
        return;
    }
    fputs("moestream: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void ms_assert_fail(const char *cond, const char *file, int line)
{
    fprintf(stderr, "moestream: internal error: assertion '%s' failed at %s:%d\n", cond, file, line);
    abort();
}

static void oom(size_t n)
{
    fprintf(stderr, "moestream: out of memory allocating %zu bytes\n", n);
    abort();
}

void *ms_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *ms_calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom(n * size);
    return p;
}

void *ms_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}

char *ms_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = ms_malloc(n);
    memcpy(p, s, n);
    return p;
}
