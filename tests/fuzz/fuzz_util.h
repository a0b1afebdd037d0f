/* fuzz_util: helpers shared by the libFuzzer harnesses (scratch directory, whole-file writes, oracle failures). */
#ifndef FUZZ_UTIL_H
#define FUZZ_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "ms_err.h"

/* jansson seeds its hash tables from /dev/urandom, which would make the paths a given input
 * takes (and so the coverage that steers the fixed-seed run) differ from run to run. */
__attribute__((constructor)) static void fuzz_fixed_json_seed(void) { json_object_seed(1); }

/* A broken invariant (as opposed to a refused input): abort so libFuzzer records a crash. */
#define FUZZ_CHECK(c)                                                                  \
    do {                                                                               \
        if (!(c)) {                                                                    \
            fprintf(stderr, "FUZZ ORACLE FAILED %s:%d: %s\n", __FILE__, __LINE__, #c); \
            abort();                                                                   \
        }                                                                              \
    } while (0)

static char fuzz_dir_path[256];

static int fuzz_rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    remove(p);
    return 0;
}

static void fuzz_dir_remove(void)
{
    if (fuzz_dir_path[0]) nftw(fuzz_dir_path, fuzz_rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* A private scratch directory (under $TMPDIR, else /dev/shm, else /tmp), removed at exit. The
 * library's info logs are silenced: the harness runs millions of refused inputs. */
static inline const char *fuzz_dir(void)
{
    if (fuzz_dir_path[0]) return fuzz_dir_path;
    ms_log_set_level(0);
    const char *base = getenv("TMPDIR");
    if (!base || access(base, W_OK) != 0) base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/msfuzz-XXXXXX", base);
    if (!mkdtemp(fuzz_dir_path)) {
        perror("mkdtemp");
        abort();
    }
    atexit(fuzz_dir_remove);
    return fuzz_dir_path;
}

/* DIR/name as a static path (one at a time per slot). */
static inline const char *fuzz_path(int slot, const char *name)
{
    static char paths[4][512];
    snprintf(paths[slot], sizeof paths[slot], "%s/%s", fuzz_dir(), name);
    return paths[slot];
}

/* Replace the file at path by exactly len bytes of data. */
static inline void fuzz_write(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror(path);
        abort();
    }
    const uint8_t *p = data;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            perror(path);
            abort();
        }
        p += w;
        len -= (size_t)w;
    }
    close(fd);
}

/* With FUZZ_VERBOSE set, say why an input was refused (to check that seeds are accepted). */
static inline void fuzz_refused(const char *why)
{
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("FUZZ_VERBOSE") != NULL;
    if (verbose) fprintf(stderr, "fuzz: refused: %s\n", why);
}

/* A NUL-terminated malloc'ed copy of the input. */
static inline char *fuzz_cstr(const uint8_t *data, size_t len)
{
    char *s = malloc(len + 1);
    if (!s) abort();
    if (len) memcpy(s, data, len);
    s[len] = 0;
    return s;
}

#endif
