/* ms_opt: failing with a message and strict option values, for moestream and moestream-worker. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "ms_err.h"
#include "ms_opt.h"
#include "ms_size.h"

int ms_opt_vfail(const char *who, int code, const char *fmt, va_list ap)
{
    char msg[4096];
    vsnprintf(msg, sizeof msg, fmt, ap);
    ms_log_fail(who, code, msg);
    return code;
}

int ms_opt_fail(const char *who, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ms_opt_vfail(who, code, fmt, ap);
    va_end(ap);
    return code;
}

int ms_opt_fail_err(const char *who) { return ms_opt_fail(who, ms_err_code(), "%s", ms_err_msg()); }

int ms_opt_int(const char *name, const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || isspace((unsigned char)*s) || v < lo || v > hi) {
        ms_err_set("%s must be an integer in %lld..%lld, got '%s'", name, lo, hi, s);
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    *out = v;
    return 0;
}

int ms_opt_f32(const char *name, const char *s, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || isspace((unsigned char)*s) || !isfinite(v) || !isfinite((float)v)) {
        ms_err_set("%s must be a number, got '%s'", name, s);
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    *out = (float)v;
    return 0;
}

int ms_opt_size(const char *name, const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (ms_size_parse(s, &v) != 0 || v == 0) {
        ms_err_set("%s must be a size such as 512M, 8G or 64GB (bytes, K/M/G/T or KiB..TiB = powers of 1024, "
                   "KB/MB/GB/TB = powers of 1000), got '%s'",
                   name, s);
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    *out = v;
    return 0;
}

int ms_opt_date(const char *name, const char *s)
{
    int y, m, d;
    char tail;
    static const int days[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (strlen(s) == 10 && sscanf(s, "%4d-%2d-%2d%c", &y, &m, &d, &tail) == 3 && s[4] == '-' && s[7] == '-' &&
        y >= 1900 && m >= 1 && m <= 12 && d >= 1 && d <= days[m - 1] &&
        (m != 2 || d < 29 || (y % 4 == 0 && (y % 100 != 0 || y % 400 == 0))))
        return 0;
    ms_err_set("%s '%s': give a date as YYYY-MM-DD", name, s);
    return ms_err_set_code(MS_EXIT_USAGE);
}

int ms_opt_threads(const char *s, long long *out) { return ms_opt_int("--threads", s, 0, 1024, out); }

int ms_opt_io_depth(const char *s, long long *out) { return ms_opt_int("--io-depth", s, 1, 256, out); }
