/* test_file: safe opens (FIFOs and devices refused without blocking), bounded reads, exact preads. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ms_err.h"
#include "ms_file.h"
#include "ms_test.h"

static int has(const char *s, const char *n) { return strstr(s, n) != NULL; }

int main(void)
{
    alarm(60); /* a regression (a blocking open) fails the test instead of hanging it */
    const char *d = ms_t_tmpdir("file");
    char reg[4200], fifo[4200];
    snprintf(reg, sizeof reg, "%s/reg.txt", d);
    snprintf(fifo, sizeof fifo, "%s/fifo", d);
    FILE *f = fopen(reg, "wb");
    T_CHECK(f && fwrite("hello world", 1, 11, f) == 11 && fclose(f) == 0, "write regular file");
    T_CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");

    /* A regular file opens, with its size, in blocking mode. */
    uint64_t size = 0;
    int fd = ms_file_open(reg, "test file", 0, 0, &size);
    T_CHECK(fd >= 0 && size == 11, "regular file: fd %d size %llu", fd, (unsigned long long)size);
    T_CHECK(fd >= 0 && !(fcntl(fd, F_GETFL) & O_NONBLOCK), "blocking mode restored");
    char buf[16] = {0};
    T_CHECK(fd >= 0 && ms_file_pread(fd, reg, 6, buf, 5) == 0 && !memcmp(buf, "world", 5), "pread exact");
    ms_err_clear();
    T_CHECK(fd >= 0 && ms_file_pread(fd, reg, 8, buf, 5) == -1 && ms_err_code() == MS_EXIT_IO &&
                has(ms_err_msg(), reg) && has(ms_err_msg(), "truncated"),
            "pread past the end: %s", ms_err_msg());
    if (fd >= 0) close(fd);

    /* A FIFO without a writer, a directory and a device: refused at once, naming role and path. */
    const char *bad[3] = {fifo, d, "/dev/null"};
    const char *kind[3] = {"FIFO", "directory", "character device"};
    for (int i = 0; i < 3; i++) {
        ms_err_clear();
        fd = ms_file_open(bad[i], "shard", 0, 0, NULL);
        T_CHECK(fd == -1 && ms_err_code() == MS_EXIT_IO && has(ms_err_msg(), bad[i]) && has(ms_err_msg(), "shard") &&
                    has(ms_err_msg(), kind[i]),
                "%s refused: %s", kind[i], ms_err_msg());
        if (fd >= 0) close(fd);
    }
    /* A pipe is accepted as a stream (waiting for its writer, see below); a device still is not. */
    T_CHECK(ms_file_open("/dev/zero", "prompt file", MS_FILE_STREAM, 0, NULL) == -1, "/dev/zero refused");
    ms_err_clear();
    T_CHECK(ms_file_open("/no/such/file", "config", 0, 0, NULL) == -1 && ms_err_code() == MS_EXIT_IO &&
                has(ms_err_msg(), "/no/such/file"),
            "missing file: %s", ms_err_msg());

    /* Whole reads: NUL-terminated, and bounded with the caller's class. */
    size_t len = 0;
    char *t = ms_file_read_all(reg, "test file", 0, 11, MS_EXIT_INPUT, &len);
    T_CHECK(t && len == 11 && !strcmp(t, "hello world"), "read_all at the limit");
    free(t);
    ms_err_clear();
    t = ms_file_read_all(reg, "test file", 0, 10, MS_EXIT_INPUT, &len);
    T_CHECK(!t && ms_err_code() == MS_EXIT_INPUT && has(ms_err_msg(), "limit") && has(ms_err_msg(), reg),
            "one byte over the limit: %s", ms_err_msg());
    free(t);
    /* Through a pipe (no size known): the limit stops the read. */
    char cmd[8600];
    snprintf(cmd, sizeof cmd, "(head -c 5000000 /dev/zero > %s 2>/dev/null &) >/dev/null 2>&1", fifo);
    T_CHECK(system(cmd) == 0, "writer");
    ms_err_clear();
    t = ms_file_read_all(fifo, "prompt file", MS_FILE_STREAM, 1 << 20, MS_EXIT_INPUT, &len);
    T_CHECK(!t && ms_err_code() == MS_EXIT_INPUT && has(ms_err_msg(), "1.00 MiB"), "pipe over the limit: %s",
            ms_err_msg());
    free(t);
    /* A second FIFO: the first one's writer may still be writing until it sees EPIPE. */
    snprintf(fifo, sizeof fifo, "%s/fifo2", d);
    T_CHECK(mkfifo(fifo, 0600) == 0, "mkfifo 2");
    snprintf(cmd, sizeof cmd, "(printf 'abc' > %s &) >/dev/null 2>&1", fifo);
    T_CHECK(system(cmd) == 0, "writer 2");
    t = ms_file_read_all(fifo, "prompt file", MS_FILE_STREAM, 1 << 20, MS_EXIT_INPUT, &len);
    T_CHECK(t && len == 3 && !strcmp(t, "abc"), "small pipe read whole: %s", t ? t : ms_err_msg());
    free(t);
    return ms_t_done();
}
