/* ms_test: implementation of the unit-test harness. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ms_test.h"

int ms_t_passed, ms_t_failed, ms_t_skipped;

void ms_t_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("SKIP: ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    ms_t_skipped++;
}

const char *ms_t_shared(const char *rel)
{
    static char buf[4096];
    const char *root = getenv("MS_SHARED_DIR");
    if (!root || !*root) root = "../shared";
    snprintf(buf, sizeof buf, "%s/%s", root, rel);
    if (access(buf, R_OK) != 0) {
        ms_t_skip("%s not found (shared fixtures absent)", buf);
        return NULL;
    }
    return buf;
}

const char *ms_t_tmpdir(const char *name)
{
    static char buf[4096];
    const char *root = getenv("MS_TMP_DIR");
    char cmd[8300];
    if (!root || !*root) root = "/tmp/moestream-test";
    snprintf(buf, sizeof buf, "%s/%s", root, name);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", buf, buf);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot create %s\n", buf);
        exit(1);
    }
    return buf;
}

const char *ms_t_bin(const char *name)
{
    static char buf[4096];
    const char *root = getenv("MS_BIN_DIR");
    if (!root || !*root) root = ".";
    snprintf(buf, sizeof buf, "%s/%s", root, name);
    return buf;
}

int ms_t_run(const char *cmd, char **out)
{
    FILE *f = popen(cmd, "r");
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!f || !buf) {
        free(buf);
        if (f) pclose(f);
        return -1;
    }
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len < 1024) {
            cap *= 2;
            buf = realloc(buf, cap);
            if (!buf) abort();
        }
    }
    buf[len] = 0;
    int st = pclose(f);
    if (out)
        *out = buf;
    else
        free(buf);
    if (st == -1 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

char *ms_t_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return NULL;
    }
    buf[n] = 0;
    fclose(f);
    if (len) *len = (size_t)n;
    return buf;
}

int ms_t_same_file(const char *a, const char *b)
{
    size_t la = 0, lb = 0;
    char *x = ms_t_read_file(a, &la), *y = ms_t_read_file(b, &lb);
    int eq = x && y && la == lb && la > 0 && !memcmp(x, y, la);
    free(x);
    free(y);
    return eq;
}

void ms_t_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int ms_t_close(float got, float want, double abs_tol, double rel_tol)
{
    if (isnan(got) || isnan(want)) return 0;
    return fabs((double)got - (double)want) <= abs_tol + rel_tol * fabs((double)want);
}

int ms_t_done(void)
{
    printf("%d passed, %d failed, %d skipped\n", ms_t_passed, ms_t_failed, ms_t_skipped);
    if (ms_t_failed) return 1;
    if (ms_t_passed == 0) return 77;
    return 0;
}
