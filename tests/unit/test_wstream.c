/* test_wstream: the trunk ring streams every chunk's bytes in schedule order, and each slot holds
 * the aligned span of any chunk, whatever the alignment of the matrix's offset and rows; packed
 * matrices stream the same bytes, and a corrupt block is refused by name. */
#include <stdlib.h>
#include <string.h>

#include "ms_bfc.h"
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
                if (st->acquire(st->ctx, items[i].key, &r0, &r1, &data, &scales, NULL) != 0) {
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

/* A packed matrix streams the same rows as its raw copy (decoded by the reader threads), beside
 * a raw one in the same schedule; a corrupt block fails the stream naming pack, tensor, block. */
static void test_packed(const char *dir)
{
    enum { ROWS = 300, COLS = 100 };
    uint16_t *m = malloc(2 * ROWS * COLS);
    ms_t_rng rng = {5};
    for (int i = 0; i < ROWS * COLS; i++) {
        uint8_t b[2];
        ms_t_fill_u8(&rng, b, 2, 0, 255);
        m[i] = (uint16_t)(((0x3c + b[0] % 5) << 8) | b[1]); /* few high bytes: compresses */
    }
    const char *raw = ms_t_path(dir, "m.bin");
    char rawp[4200], packp[4200];
    snprintf(rawp, sizeof rawp, "%s", raw);
    snprintf(packp, sizeof packp, "%s", ms_t_path(dir, "m.pack"));
    FILE *f = fopen(rawp, "wb");
    T_CHECK(f && fwrite(m, 2, ROWS * COLS, f) == ROWS * COLS && fclose(f) == 0, "write %s", rawp);
    ms_tpack_spec spec = {"layers.0.m.weight", ROWS, COLS};
    ms_tpack_writer *pw = ms_tpack_writer_new(packp, 1, &spec, 1);
    T_CHECK(pw && ms_tpack_writer_rows(pw, m, ROWS) == 0 && ms_tpack_writer_finish(pw) == 0, "pack: %s", ms_err_msg());
    ms_tpack_writer_free(pw);
    for (int mode = 0; mode < 4; mode++) {
        int corrupt = mode & 1, in_kernel = mode >> 1;
        const char *how = in_kernel ? "decoded by the kernel" : "decoded by the reader threads";
        if (mode == 2) { /* a fresh pack again */
            pw = ms_tpack_writer_new(packp, 1, &spec, 1);
            T_CHECK(pw && ms_tpack_writer_rows(pw, m, ROWS) == 0 && ms_tpack_writer_finish(pw) == 0, "pack");
            ms_tpack_writer_free(pw);
        }
        ms_tpack *pk = ms_tpack_open(packp);
        T_CHECK(pk != NULL, "open pack: %s", ms_err_msg());
        if (!pk) break;
        const ms_tpack_tensor *t = ms_tpack_at(pk, 0);
        if (corrupt) { /* flip a byte inside block 5 */
            FILE *g = fopen(packp, "r+b");
            uint8_t b = 0;
            long at = (long)(t->data_off + ms_tpack_block_start(t, 5) + 60);
            T_CHECK(g && fseek(g, at, SEEK_SET) == 0 && fread(&b, 1, 1, g) == 1, "read pack byte");
            b ^= 0x40;
            T_CHECK(g && fseek(g, at, SEEK_SET) == 0 && fwrite(&b, 1, 1, g) == 1 && fclose(g) == 0, "flip pack byte");
        }
        static int keys[2];
        ms_wstream_item items[2] = {{&keys[0], "layers.0.m.weight", 0, 0, 2 * COLS, ROWS, t, 1, packp, in_kernel},
                                    {&keys[1], "raw", 0, 2 * COLS * 7, 2 * COLS, 50, NULL, 0, NULL, 0}};
        const char *paths[2] = {rawp, packp};
        ms_io_files *fs = ms_io_files_open(paths, 2, 0);
        ms_io *io = fs ? ms_io_new(fs, 3) : NULL;
        ms_wstream *w = ms_wstream_new(io, items, 2, 3000, 3);
        const ms_mat_stream *st = ms_wstream_iface(w);
        int same = 1, failed = 0;
        for (int pass = 0; pass < 2 && !failed; pass++)
            for (int i = 0; i < 2 && !failed; i++)
                for (int64_t done = 0; done < items[i].rows;) {
                    int64_t r0, r1;
                    const void *data;
                    const uint8_t *scales;
                    ms_mat_packed *pm = NULL;
                    if (st->acquire(st->ctx, items[i].key, &r0, &r1, &data, &scales, &pm) != 0) {
                        failed = 1;
                        break;
                    }
                    uint16_t *dec = NULL;
                    if (pm) { /* what the kernel does: decode block by block, noting a bad one */
                        dec = malloc(2 * (size_t)((r1 - r0) * COLS));
                        for (int b = 0; b < pm->n_blocks; b++) {
                            int64_t br = b * pm->rows_per_block;
                            int64_t nr = r1 - r0 - br < pm->rows_per_block ? r1 - r0 - br : pm->rows_per_block;
                            uint64_t s0 = b ? pm->end[b - 1] : 0;
                            if (ms_bfc_decode(pm->src + s0, (size_t)(pm->end[b] - s0), dec + br * COLS, (size_t)(nr * COLS)) != 0 &&
                                pm->bad_block < 0)
                                pm->bad_block = b;
                        }
                        data = dec;
                    }
                    same &= r0 == done && r1 > r0 && (pm != NULL) == (i == 0 && in_kernel) &&
                            !memcmp(data, (const uint8_t *)m + items[i].off + (uint64_t)r0 * items[i].row_bytes,
                                    (size_t)((uint64_t)(r1 - r0) * items[i].row_bytes));
                    st->release(st->ctx, items[i].key);
                    free(dec);
                    if (ms_wstream_check(w) != 0) failed = 1;
                    done = r1;
                }
        ms_wstream_stats ws;
        ms_wstream_get_stats(w, &ws);
        if (!corrupt) {
            T_CHECK(!failed && same, "%s: packed and raw matrices stream their exact rows, twice round", how);
            T_CHECK(ws.bytes_packed > 0 && ws.bytes_packed < ws.bytes_unpacked,
                    "%s: the packed one read fewer bytes than it delivered (%llu < %llu)", how,
                    (unsigned long long)ws.bytes_packed, (unsigned long long)ws.bytes_unpacked);
        } else {
            int rc = ms_wstream_check(w);
            T_CHECK(failed && rc == -1 && ms_err_code() == MS_EXIT_MODEL && strstr(ms_err_msg(), packp) &&
                        strstr(ms_err_msg(), "layers.0.m.weight") && strstr(ms_err_msg(), "block 5"),
                    "%s: a corrupt block fails the stream (class 3) naming pack, tensor and block: %s", how, ms_err_msg());
        }
        ms_wstream_free(w);
        ms_io_free(io);
        ms_io_files_close(fs);
        ms_tpack_close(pk);
    }
    free(m);
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
    ms_wstream_item items[3] = {{&keys[0], "a", 0, 1, 1000, 10, NULL, 0, NULL},
                                {&keys[1], "b", 0, 12289, 777, 21, NULL, 0, NULL},
                                {&keys[2], "c", 0, 4096 * 8 + 4095, 3001, 7, NULL, 0, NULL}};
    check(bytes, path, items, 1, "a matrix at offset 1, 1000-byte rows");
    check(bytes, path, items + 1, 1, "a matrix at offset 12289, 777-byte rows");
    check(bytes, path, items + 2, 1, "one row per chunk");
    check(bytes, path, items, 3, "the three in one schedule");
    free(bytes);
    test_packed(dir);
    return ms_t_done();
}
