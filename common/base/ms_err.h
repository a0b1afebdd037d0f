/* ms_err: process exit codes, the thread-local last-error message, and logging. */
#ifndef MS_ERR_H
#define MS_ERR_H

#include <stdarg.h>
#include <stddef.h>

/* Exit codes of every moestream command (documented in README.md). */
enum {
    MS_EXIT_OK = 0,
    MS_EXIT_RUNTIME = 1, /* internal or unexpected runtime failure */
    MS_EXIT_USAGE = 2,   /* bad command line */
    MS_EXIT_MODEL = 3,   /* bad model: config.json, missing/mis-shaped tensor, bad shard */
    MS_EXIT_IO = 4,      /* a file could not be read or written */
    MS_EXIT_INPUT = 5,   /* bad input data: prompt, ids, tokenizer files, trace */
    MS_EXIT_BUDGET = 6,  /* impossible RAM budget */
    MS_EXIT_WORKER = 7,  /* an expert worker failed or is unreachable */
    MS_EXIT_INTERRUPTED = 130 /* stopped by SIGINT/SIGTERM (Ctrl-C): nothing partial is reported as done */
};

/* Set the calling thread's last error (printf-style). Always returns -1 so callers can
 * write `return ms_err_set(...)`. */
int ms_err_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prefix the current message with more context: "ctx: old message". Returns -1. */
int ms_err_wrap(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The calling thread's last error message ("" if none). Valid until the next ms_err_set. */
const char *ms_err_msg(void);
/* The exit code class stored with the last error (MS_EXIT_RUNTIME unless set). */
int ms_err_code(void);
/* Set the message and its exit-code class at once (ms_err_set + ms_err_set_code); returns -1. */
int ms_err_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ms_err_vfail(int code, const char *fmt, va_list ap);
/* The same with "where: " before the message (a file, a field); returns -1. */
int ms_err_fail_in(int code, const char *where, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Set the exit-code class of the last error; returns -1. */
int ms_err_set_code(int code);
void ms_err_clear(void);

/* Logging to stderr: level 0 = errors only, 1 = info (default), 2 = debug. */
void ms_log_set_level(int level);
int ms_log_level(void);
void ms_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Where ms_log lines and command failures (ms_opt_fail) go: fn(ctx, level, code, message without
 * prefix or newline) instead of stderr (NULL: stderr again); level -1 is a failure with its exit
 * code, else code is 0. For programs whose stderr must stay machine-readable. */
typedef void (*ms_log_fn)(void *ctx, int level, int code, const char *msg);
void ms_log_set_sink(ms_log_fn fn, void *ctx);
/* The failure of a command: "who: msg" on stderr, or to the sink (level -1). */
void ms_log_fail(const char *who, int code, const char *msg);

/* Always-on assertion for programmer errors (never for runtime input). */
#define MS_ASSERT(c)                                                                   \
    do {                                                                               \
        if (!(c)) ms_assert_fail(#c, __FILE__, __LINE__);                              \
    } while (0)
void ms_assert_fail(const char *cond, const char *file, int line) __attribute__((noreturn));

/* malloc/calloc/realloc that abort with a message when memory is exhausted. */
void *ms_malloc(size_t n);
void *ms_calloc(size_t n, size_t size);
void *ms_realloc(void *p, size_t n);
char *ms_strdup(const char *s);

#endif
