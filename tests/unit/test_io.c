/* test_io: the reader pool delivers the wanted bytes of reads at any offset into buffers from
 * ms_io_alloc (big ones 2 MiB-aligned, so they can be huge pages), faulted in by the reader first
 * (ms_io_prefault) or not, in O_DIRECT and buffered mode; a read past the end of a file fails
 * naming it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
    free(bytes);
    return ms_t_done();
}
