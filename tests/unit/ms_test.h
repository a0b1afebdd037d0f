/* ms_test: the tiny assertion harness shared by the unit tests. */
#ifndef MS_TEST_H
#define MS_TEST_H

#include <stddef.h>
#include <stdio.h>

extern int ms_t_passed, ms_t_failed, ms_t_skipped;

/* Record one check. On failure print the location and the formatted message. */
#define T_CHECK(cond, ...)                                                                   \
    do {                                                                                     \
        if (cond) {                                                                          \
            ms_t_passed++;                                                                   \
        } else {                                                                             \
            ms_t_failed++;                                                                   \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                            \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fputc('\n', stderr);                                                             \
        }                                                                                    \
    } while (0)

/* Record a skipped group of checks with a visible reason. */
void ms_t_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Path of a file under the shared folder (MS_SHARED_DIR, default ../shared), or NULL after
 * printing "SKIP: ... (shared fixtures absent)" and counting a skip. Result is static storage
 * valid until the next call. */
const char *ms_t_shared(const char *rel);

/* A fresh, empty directory for this test under MS_TMP_DIR (static storage). */
const char *ms_t_tmpdir(const char *name);

/* Path of a built binary (MS_BIN_DIR/name), static storage. */
const char *ms_t_bin(const char *name);

/* Run a shell command; capture stdout into *out (malloc'ed, may be NULL if not wanted).
 * Returns the exit status (0..255), or -1 if it could not be run / was killed. */
int ms_t_run(const char *cmd, char **out);

/* Read a whole file (malloc'ed, NUL-terminated), or NULL. */
char *ms_t_read_file(const char *path, size_t *len);

/* 1 if both files exist, are non-empty and hold the same bytes. */
int ms_t_same_file(const char *a, const char *b);

/* Sleep for ms milliseconds. */
void ms_t_sleep_ms(int ms);

/* |got - want| <= abs + rel * |want| */
int ms_t_close(float got, float want, double abs_tol, double rel_tol);

/* Print "N passed, N failed, N skipped" and return the exit code for main: 0 if nothing
 * failed and something ran, 1 on failure, 77 (ctest SKIP) if every check was skipped. */
int ms_t_done(void);

#endif
