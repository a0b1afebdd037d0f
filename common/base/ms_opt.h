/* ms_opt: command-line helpers of both programs (moestream, moestream-worker): errors, numbers, sizes. */
#ifndef MS_OPT_H
#define MS_OPT_H

#include <stdarg.h>
#include <stdint.h>

/* Print "who: message" on stderr (who names the program and command, e.g. "moestream run" or
 * "moestream-worker") and return code, so that a command can `return ms_opt_fail(...)`. */
int ms_opt_fail(const char *who, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int ms_opt_vfail(const char *who, int code, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));
/* ms_opt_fail with the last ms_err message; returns its exit-code class (ms_err_code). */
int ms_opt_fail_err(const char *who);

/* Strict parsing of a whole argument (no sign for sizes, no trailing text, no overflow).
 * Each returns 0, or -1 with ms_err set (class MS_EXIT_USAGE) naming the option and quoting s. */

/* A decimal integer in [lo, hi]: "NAME must be an integer in LO..HI, got 'S'". */
int ms_opt_int(const char *name, const char *s, long long lo, long long hi, long long *out);
/* A finite decimal number: "NAME must be a number, got 'S'" (range checks are the caller's). */
int ms_opt_f32(const char *name, const char *s, float *out);
/* A size in the syntax of ms_size_parse, at least 1 byte: "NAME must be a size such as 512M,
 * 8G or 64GB, got 'S'" (with the full syntax). */
int ms_opt_size(const char *name, const char *s, uint64_t *out);
/* A calendar date YYYY-MM-DD (years 1900..9999, the month's days): 0, or -1 with ms_err set
 * (MS_EXIT_USAGE) naming the option. */
int ms_opt_date(const char *name, const char *s);

/* The options both programs take, with one range each (0 threads: one per core). */
int ms_opt_threads(const char *s, long long *out); /* --threads 0..1024 */
int ms_opt_io_depth(const char *s, long long *out); /* --io-depth 1..256 */

#endif
