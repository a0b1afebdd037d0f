/* ms_file: safe opens (regular files only, never blocking on a FIFO), bounded whole-file reads
 * and exact positional reads. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ms_err.h"
#include "ms_file.h"
#include "ms_size.h"

static const char *kind_name(mode_t m)
{
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO or pipe";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

int ms_file_open(const char *path, const char *what, int flags, int extra_oflags, uint64_t *size)
{
    MS_ASSERT(path && what);
    /* O_NONBLOCK: opening a FIFO without a writer (or some devices) would block forever. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | extra_oflags);
    if (fd < 0) {
        ms_err_set("%s %s: cannot open: %s", what, path, strerror(errno));
        return ms_err_set_code(MS_EXIT_IO);
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        ms_err_set("%s %s: cannot stat: %s", what, path, strerror(e));
        return ms_err_set_code(MS_EXIT_IO);
    }
    int ok = S_ISREG(sb.st_mode) || ((flags & MS_FILE_STREAM) && S_ISFIFO(sb.st_mode));
    if (!ok) {
        close(fd);
        ms_err_set("%s %s: is %s; a regular file is required%s", what, path, kind_name(sb.st_mode),
                   (flags & MS_FILE_STREAM) ? " (or a pipe)" : "");
        return ms_err_set_code(MS_EXIT_IO);
    }
    if (S_ISFIFO(sb.st_mode)) {
        /* A named FIFO the user gave as input: wait (as cat does) until its writer has sent
         * something or come and gone; a read before that would see an empty input. Linux
         * reports no POLLHUP on this descriptor before a writer has been seen. (Opening it again
         * blocking would race with a writer that this open already let through.) */
        struct pollfd pf = {fd, POLLIN, 0};
        while (poll(&pf, 1, -1) < 0 && errno == EINTR) {
        }
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        ms_err_set("%s %s: cannot set blocking mode: %s", what, path, strerror(e));
        return ms_err_set_code(MS_EXIT_IO);
    }
    if (size) *size = S_ISREG(sb.st_mode) ? (uint64_t)sb.st_size : 0;
    return fd;
}

static int too_big(const char *path, const char *what, uint64_t max_bytes, int code)
{
    char a[64];
    ms_err_set("%s %s: larger than the limit of %s (%llu bytes)", what, path, ms_size_fmt(max_bytes, a, sizeof a),
               (unsigned long long)max_bytes);
    return ms_err_set_code(code);
}

char *ms_file_read_all(const char *path, const char *what, int flags, uint64_t max_bytes, int too_big_code,
                       size_t *len)
{
    uint64_t size = 0;
    int fd = ms_file_open(path, what, flags, 0, &size);
    if (fd < 0) return NULL;
    if (size > max_bytes) {
        close(fd);
        too_big(path, what, max_bytes, too_big_code);
        return NULL;
    }
    /* The size is a hint only: the file may grow or shrink while read, and pipes have none. */
    size_t cap = size ? (size_t)size + 1 : 65536, n = 0;
    if (cap > max_bytes + 1) cap = (size_t)max_bytes + 1;
    char *buf = ms_malloc(cap + 1);
    for (;;) {
        if (n == cap) {
            if (n > max_bytes) break;
            size_t nc = cap * 2 > max_bytes + 1 ? (size_t)max_bytes + 1 : cap * 2;
            buf = ms_realloc(buf, nc + 1);
            cap = nc;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int e = errno;
            close(fd);
            free(buf);
            ms_err_set("%s %s: read error: %s", what, path, strerror(e));
            ms_err_set_code(MS_EXIT_IO);
            return NULL;
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    close(fd);
    if (n > max_bytes) {
        free(buf);
        too_big(path, what, max_bytes, too_big_code);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

int ms_file_pread(int fd, const char *path, uint64_t off, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (n < 0)
                ms_err_set("%s: read error at byte %llu: %s", path, (unsigned long long)(off + got), strerror(errno));
            else
                ms_err_set("%s: the file ends at byte %llu, %llu bytes early (truncated or changed while in use?)",
                           path, (unsigned long long)(off + got), (unsigned long long)(len - got));
            return ms_err_set_code(MS_EXIT_IO);
        }
        got += (size_t)n;
    }
    return 0;
}

int ms_file_tmp_create(const char *path, const char *what, mode_t mode, char *tmp, size_t cap)
{
    if ((size_t)snprintf(tmp, cap, "%s.tmp-XXXXXX", path) >= cap) {
        ms_err_set("%s %s: the path is too long", what, path);
        return ms_err_set_code(MS_EXIT_IO);
    }
    /* mkstemp opens O_CREAT|O_EXCL: a name that exists, as a file or a symlink planted there,
     * is never opened; it tries other names */
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        ms_err_set("%s %s: cannot create a file beside it: %s", what, path, strerror(errno));
        return ms_err_set_code(MS_EXIT_IO);
    }
    if (fchmod(fd, mode) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        ms_err_set("%s %s: cannot set the mode of %s: %s", what, path, tmp, strerror(e));
        return ms_err_set_code(MS_EXIT_IO);
    }
    return fd;
}

int ms_file_write_all(int fd, const void *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, (const char *)buf + done, len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        done += (size_t)n;
    }
    return 0;
}

int ms_file_tmp_commit(int fd, const char *tmp, const char *path, const char *what, int failed)
{
    int e = failed ? errno : 0;
    if (!failed && fsync(fd) != 0) failed = 1, e = errno;
    if (close(fd) != 0 && !failed) failed = 1, e = errno;
    if (!failed && rename(tmp, path) != 0) failed = 1, e = errno;
    if (!failed) return 0;
    unlink(tmp);
    ms_err_set("cannot write the %s %s: %s", what, path, strerror(e ? e : EIO));
    return ms_err_set_code(MS_EXIT_IO);
}

int ms_file_private_dir(const char *dir, char *why, size_t cap)
{
    struct stat sb;
    if (lstat(dir, &sb) != 0) return snprintf(why, cap, "cannot stat it: %s", strerror(errno)), -1;
    if (S_ISLNK(sb.st_mode)) return snprintf(why, cap, "it is a symbolic link"), -1;
    if (!S_ISDIR(sb.st_mode)) return snprintf(why, cap, "it is not a directory"), -1;
    if (sb.st_uid != geteuid())
        return snprintf(why, cap, "it belongs to uid %u, not to this user (uid %u)", (unsigned)sb.st_uid,
                        (unsigned)geteuid()),
               -1;
    if (sb.st_mode & 022) return snprintf(why, cap, "others can write to it (mode %03o)", (unsigned)(sb.st_mode & 0777)), -1;
    return 0;
}
