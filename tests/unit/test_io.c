/* test_io: the reader pool delivers the wanted bytes of reads at any offset into buffers from
 * ms_io_alloc (big ones 2 MiB-aligned, so they can be huge pages), faulted in by the reader first
 * (ms_io_prefault) or not, in O_DIRECT and buffered mode; a read past the end of a file fails
 * naming it. A file's mapping holds its bytes; one cut short while mapped reads as zeros and is
 * reported naming the file, and a SIGBUS elsewhere still ends the process. */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ms_err.h"
#include "ms_io.h"
#include "ms_test.h"

#define SIZE ((size_t)9 << 20) /* above the 8 MiB from which buffers are 2 MiB-aligned */

static void check_mode(const char *path, const unsigned char *bytes, int direct)
{
    const char *paths[1] = {path};
    ms_io_files *files = ms_io_files_open(paths, 1, direct);
    T_CHECK(files != NULL, "open %s: %s", path, files ? "" : ms_err_msg());
    if (!files) return;
    ms_io *io = ms_io_new(files, 4);
    T_CHECK(io != NULL, "a pool of 4 readers");
    /* reads at odd offsets and lengths, big and small, prefaulted or not, 4 in flight */
    struct {
        uint64_t off;
        size_t len;
        int prefault;
    } want[6] = {{0, SIZE - 4096, 1}, {1, SIZE - 2, 0}, {4095, 12345, 1}, {8 << 20, 777, 0}, {5, (size_t)8 << 20, 1},
                 {SIZE - 1, 1, 1}};
    ms_io_req r[6];
    memset(r, 0, sizeof r);
    for (int i = 0; i < 6; i++) {
        r[i].off = want[i].off;
        r[i].len = want[i].len;
        size_t span = ms_io_span(r[i].off, r[i].len);
        r[i].buf = ms_io_alloc(span);
        r[i].prefault = want[i].prefault; /* fresh memory faulted in by the reader first: the same bytes */
        ms_io_submit(io, &r[i]);
    }
    int bad = 0, misaligned = 0;
    for (int i = 0; i < 6; i++) {
        size_t span = ms_io_span(r[i].off, r[i].len);
        if (ms_io_wait(io, &r[i]) != 0) {
            bad++;
            continue;
        }
        if (span >= ((size_t)8 << 20) && ((uintptr_t)r[i].buf & ((2u << 20) - 1)) != 0) misaligned++;
        if (memcmp(r[i].data, bytes + r[i].off, r[i].len) != 0) bad++;
    }
    T_CHECK(bad == 0, "%s: every read delivers the file's bytes (%d bad)", direct ? "O_DIRECT" : "buffered", bad);
    T_CHECK(misaligned == 0, "%s: buffers of 8 MiB and more start on a 2 MiB boundary", direct ? "O_DIRECT" : "buffered");
    for (int i = 0; i < 6; i++) free(r[i].buf);
    /* past the end: a clear failure naming the file */
    ms_io_req e;
    memset(&e, 0, sizeof e);
    e.off = SIZE - 10;
    e.len = 100;
    e.buf = ms_io_alloc(ms_io_span(e.off, e.len));
    ms_io_submit(io, &e);
    T_CHECK(ms_io_wait(io, &e) != 0 && strstr(e.err, "short read") && strstr(e.err, path),
            "%s: a read past the end fails naming the file: %s", direct ? "O_DIRECT" : "buffered", e.err);
    free(e.buf);
    ms_io_free(io);
    ms_io_files_close(files);
}

/* In a child (the truncations must not touch the parent's files): 0 when it went as expected. */
static int in_child(int (*fn)(const char *, const unsigned char *), const char *path, const unsigned char *bytes,
                    int *signal_out)
{
    pid_t pid = fork();
    if (pid == 0) _exit(fn(path, bytes));
    int st = 0;
    waitpid(pid, &st, 0);
    *signal_out = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A mapped file cut short: the lost pages read as zeros, the check names the file. */
static int cut_mapped(const char *path, const unsigned char *bytes)
{
    const char *paths[1] = {path};
    ms_io_files *files = ms_io_files_open(paths, 1, 1);
    uint64_t size = 0;
    const uint8_t *p = files ? ms_io_files_map(files, 0, &size) : NULL;
    if (!p || size != SIZE || memcmp(p, bytes, SIZE) != 0) return 10; /* the mapping holds the file */
    if (ms_io_files_map_check(files) != 0) return 11;
    if (truncate(path, SIZE / 2) != 0) return 12;
    volatile uint8_t sum = 0;
    for (size_t i = SIZE / 2; i < SIZE; i += 4096) sum |= p[i]; /* pages gone: zeros, no SIGBUS */
    if (sum != 0) return 13;
    if (memcmp(p, bytes, SIZE / 2) != 0) return 14; /* what is left still reads right */
    if (ms_io_files_map_check(files) != -1 || ms_err_code() != MS_EXIT_IO || !strstr(ms_err_msg(), path) ||
        !strstr(ms_err_msg(), "cut short"))
        return 15;
    ms_io_files_close(files);
    return 0;
}

static void bus_exit(int sig) { _exit(sig == SIGBUS ? 42 : 43); }
static int foreign_mode; /* 0: no handler before ms_io's (SIG_DFL), 1: bus_exit before it */

/* With the handler installed, a SIGBUS from a mapping not made by ms_io goes where it would have
 * gone without it: the default action (the process ends by SIGBUS), or the handler before. */
static int cut_foreign(const char *path, const unsigned char *bytes)
{
    (void)bytes;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = foreign_mode ? bus_exit : SIG_DFL; /* also replaces a sanitizer's own handler */
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, NULL) != 0) return 19;
    const char *paths[1] = {path};
    ms_io_files *files = ms_io_files_open(paths, 1, 0);
    if (!files || !ms_io_files_map(files, 0, NULL)) return 20;
    int fd = open(path, O_RDONLY);
    const volatile uint8_t *q = fd >= 0 ? mmap(NULL, SIZE, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (q == MAP_FAILED) return 21;
    if (truncate(path, 4096) != 0) return 22;
    uint8_t x = q[SIZE - 1]; /* SIGBUS: not ours */
    return 23 + (x & 0);
}

int main(void)
{
    ms_log_set_level(0);
    const char *path = ms_t_path(ms_t_tmpdir("io"), "f.bin");
    unsigned char *bytes = malloc(SIZE);
    ms_t_rng rng = {5};
    ms_t_fill_u8(&rng, bytes, SIZE, 0, 255);
    FILE *f = fopen(path, "wb");
    T_CHECK(f && fwrite(bytes, 1, SIZE, f) == SIZE && fclose(f) == 0, "write %s", path);
    check_mode(path, bytes, 1);
    check_mode(path, bytes, 0);
    const char *cut = ms_t_path(ms_t_tmpdir("io"), "cut.bin");
    for (int k = 0; k < 3; k++) {
        f = fopen(cut, "wb");
        T_CHECK(f && fwrite(bytes, 1, SIZE, f) == SIZE && fclose(f) == 0, "write %s", cut);
        foreign_mode = k == 2;
        int sig = 0, rc = in_child(k ? cut_foreign : cut_mapped, cut, bytes, &sig);
        if (k == 0)
            T_CHECK(rc == 0 && sig == 0, "a mapped file cut short reads zeros and is reported naming it (exit %d, signal %d)",
                    rc, sig);
        else if (k == 1)
            T_CHECK(sig == SIGBUS, "a SIGBUS outside the mappings still ends the process (exit %d, signal %d)", rc, sig);
        else
            T_CHECK(rc == 42 && sig == 0, "a SIGBUS outside the mappings goes to the handler before (exit %d, signal %d)", rc,
                    sig);
    }
    free(bytes);
    return ms_t_done();
}
