/* test_wstream: the trunk ring streams every chunk's bytes in schedule order, and each slot holds
 * the aligned span of any chunk, whatever the alignment of the matrix's offset and rows. */
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_io.h"
#include "ms_test.h"
#include "ms_wstream.h"

/* Stream items[0..n) twice round with chunks of chunk_bytes; check spans and bytes. */
static void check(const unsigned char *bytes, const char *path, const ms_wstream_item *items, int n, const char *what)
{
    const uint64_t chunk_bytes = 3000;
    const int n_slots = 3;
    uint64_t per_slot = ms_wstream_ring_bytes(items, n, chunk_bytes, n_slots) / n_slots;
    /* every chunk's aligned span fits a slot (the reads fill whole aligned blocks) */
    int fits = 1;
    for (int i = 0; i < n; i++) {
        int64_t rpc = (int64_t)(chunk_bytes / items[i].row_bytes);
        if (rpc < 1) rpc = 1;
        for (int64_t r0 = 0; r0 < items[i].rows; r0 += rpc) {
            int64_t r1 = r0 + rpc < items[i].rows ? r0 + rpc : items[i].rows;
            size_t span = ms_io_span(items[i].off + (uint64_t)r0 * items[i].row_bytes,
                                     (size_t)((uint64_t)(r1 - r0) * items[i].row_bytes));
            if (span > per_slot) fits = 0;
        }
    }
    T_CHECK(fits, "%s: every chunk's aligned span fits a ring slot (%llu bytes)", what, (unsigned long long)per_slot);
    if (!fits) return; /* streaming would overflow the slots */
    const char *paths[1] = {path};
    ms_io_files *fs = ms_io_files_open(paths, 1, 0);
    ms_io *io = fs ? ms_io_new(fs, 4) : NULL;
    T_CHECK(io != NULL, "open: %s", ms_err_msg());
    if (!io) return;
    ms_wstream *w = ms_wstream_new(io, items, n, chunk_bytes, n_slots);
    const ms_mat_stream *st = ms_wstream_iface(w);
    int same = 1;
    for (int pass = 0; pass < 2; pass++) /* twice round the schedule */
        for (int i = 0; i < n; i++)
            for (int64_t done = 0; done < items[i].rows;) {
                int64_t r0, r1;
                const void *data;
                const uint8_t *scales;
                if (st->acquire(st->ctx, items[i].key, &r0, &r1, &data, &scales) != 0) {
                    T_CHECK(0, "acquire: %s", ms_err_msg());
                    same = 0;
                    break;
                }
                same &= r0 == done && r1 > r0 &&
                        !memcmp(data, bytes + items[i].off + (uint64_t)r0 * items[i].row_bytes,
                                (size_t)((uint64_t)(r1 - r0) * items[i].row_bytes));
                st->release(st->ctx, items[i].key);
                done = r1;
            }
    T_CHECK(same, "%s: two passes over the schedule deliver every row's bytes in order", what);
    ms_wstream_free(w);
    ms_io_free(io);
    ms_io_files_close(fs);
}

int main(void)
{
    ms_log_set_level(0);
    const char *dir = ms_t_tmpdir("wstream");
    const char *path = ms_t_path(dir, "w.bin");
    enum { SIZE = 96 * 1024 };
    unsigned char *bytes = malloc(SIZE);
    ms_t_rng rng = {77};
    ms_t_fill_u8(&rng, bytes, SIZE, 0, 255);
    FILE *f = fopen(path, "wb");
    T_CHECK(f && fwrite(bytes, 1, SIZE, f) == SIZE && fclose(f) == 0, "write %s", path);
    /* Matrices at odd offsets with rows of odd sizes: chunks start at every alignment. */
    static int keys[3];
    ms_wstream_item items[3] = {{&keys[0], "a", 0, 1, 1000, 10},
                                {&keys[1], "b", 0, 12289, 777, 21},
                                {&keys[2], "c", 0, 4096 * 8 + 4095, 3001, 7}};
    check(bytes, path, items, 1, "a matrix at offset 1, 1000-byte rows");
    check(bytes, path, items + 1, 1, "a matrix at offset 12289, 777-byte rows");
    check(bytes, path, items + 2, 1, "one row per chunk");
    check(bytes, path, items, 3, "the three in one schedule");
    free(bytes);
    return ms_t_done();
}
