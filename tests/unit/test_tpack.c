/* test_tpack: the trunk pack file: written and read back exactly; corrupt blocks, indexes and headers refused by name. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "ms_err.h"
#include "ms_kern.h"
#include "ms_test.h"
#include "ms_tpack.h"

static uint64_t rng = 99;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Two matrices: one of many short rows (several rows per block, a partial last block), one of
 * rows longer than a block (one row per block). */
static const ms_tpack_spec specs[2] = {{"a.weight", 1000, 96}, {"layers.0.b.weight", 7, 40000}};

static uint16_t *make(const ms_tpack_spec *s)
{
    size_t n = (size_t)(s->rows * s->cols);
    uint16_t *v = malloc(2 * n);
    for (size_t i = 0; i < n; i++) v[i] = (uint16_t)(((0x3a + next() % 6) << 8) | (next() & 0xff));
    return v;
}

static char *read_all(const char *path, size_t *len) { return ms_t_read_file(path, len); }

static void test_round_trip(void)
{
    const char *dir = ms_t_tmpdir("tpack");
    char path[4200];
    snprintf(path, sizeof path, "%s/" MS_TPACK_FILE, dir);
    uint16_t *data[2] = {make(&specs[0]), make(&specs[1])};
    ms_tpack_writer *w = ms_tpack_writer_new(path, 0xfeedull, specs, 2);
    T_CHECK(w != NULL, "writer: %s", ms_err_msg());
    /* rows in pieces of whole blocks: 2 blocks, then the rest */
    int64_t rpb = ms_tpack_rows_per_block(1000, 96);
    T_CHECK(ms_tpack_writer_rows(w, data[0], 2 * rpb) == 0, "first rows");
    T_CHECK(ms_tpack_writer_rows(w, data[0] + 2 * rpb * 96, 1000 - 2 * rpb) == 0, "the rest");
    T_CHECK(ms_tpack_writer_rows(w, data[1], 7) == 0, "second tensor");
    T_CHECK(ms_tpack_writer_finish(w) == 0, "finish: %s", ms_err_msg());
    ms_tpack_writer_free(w);

    ms_tpack *p = ms_tpack_open(path);
    T_CHECK(p != NULL, "open: %s", ms_err_msg());
    if (!p) return;
    T_CHECK(ms_tpack_fingerprint(p) == 0xfeedull && ms_tpack_count(p) == 2, "header read back");
    size_t flen;
    uint8_t *file = (uint8_t *)read_all(path, &flen);
    for (int i = 0; i < 2; i++) {
        const ms_tpack_tensor *t = ms_tpack_find(p, specs[i].name);
        T_CHECK(t && t->rows == specs[i].rows && t->cols == specs[i].cols, "tensor %s found with its shape", specs[i].name);
        if (!t) continue;
        T_CHECK(t->data_off % 4096 == 0, "%s starts at a 4096 boundary", t->name);
        T_CHECK(t->n_blocks == (uint32_t)((t->rows + t->rows_per_block - 1) / t->rows_per_block), "%s: block count", t->name);
        size_t n = (size_t)(t->rows * t->cols);
        uint16_t *d = malloc(2 * n);
        char err[512];
        int rc = ms_tpack_decode(path, t, 0, t->n_blocks, file + t->data_off, d, err, sizeof err);
        T_CHECK(rc == 0 && !memcmp(d, data[i], 2 * n), "%s decodes to the written rows exactly", t->name);
        T_CHECK(XXH3_64bits(data[i], 2 * n) == t->raw_xxh3, "%s: the recorded hash is the original's", t->name);
        /* a middle range of blocks alone */
        if (t->n_blocks > 3) {
            rc = ms_tpack_decode(path, t, 2, 3, file + t->data_off + ms_tpack_block_start(t, 2), d, err, sizeof err);
            T_CHECK(rc == 0 && !memcmp(d, data[i] + 2 * t->rows_per_block * t->cols, 2 * (size_t)(t->rows_per_block * t->cols)),
                    "%s: block 2 alone decodes to its rows", t->name);
        }
        free(d);
    }
    /* A corrupt block: the error names the pack file, the tensor and the block. */
    const ms_tpack_tensor *t = ms_tpack_find(p, "layers.0.b.weight");
    if (t) {
        uint64_t at = t->data_off + ms_tpack_block_start(t, 4) + 100;
        file[at] ^= 1;
        uint16_t *d = malloc(2 * (size_t)(t->rows * t->cols));
        char err[512] = "";
        int rc = ms_tpack_decode(path, t, 0, t->n_blocks, file + t->data_off, d, err, sizeof err);
        T_CHECK(rc == -1 && strstr(err, path) && strstr(err, "layers.0.b.weight") && strstr(err, "block 4") &&
                    strstr(err, "checksum"),
                "a corrupt block is refused naming pack, tensor and block: %s", err);
        free(d);
    }
    free(file);
    ms_tpack_close(p);
    free(data[0]);
    free(data[1]);
}

static void test_bad_files(void)
{
    const char *dir = ms_t_tmpdir("tpack-bad");
    char path[4200];
    snprintf(path, sizeof path, "%s/" MS_TPACK_FILE, dir);
    uint16_t *data = make(&specs[0]);
    ms_tpack_writer *w = ms_tpack_writer_new(path, 1, specs, 1);
    T_CHECK(w && ms_tpack_writer_rows(w, data, 1000) == 0 && ms_tpack_writer_finish(w) == 0, "write");
    ms_tpack_writer_free(w);
    free(data);
    /* index corrupt */
    ms_t_flip_byte(path, 64 + 5, 0x04);
    ms_tpack *p = ms_tpack_open(path);
    T_CHECK(!p && ms_err_code() == MS_EXIT_MODEL && strstr(ms_err_msg(), path) && strstr(ms_err_msg(), "index"),
            "a corrupt index is refused naming the file: %s", ms_err_msg());
    ms_t_flip_byte(path, 64 + 5, 0x04);
    p = ms_tpack_open(path);
    T_CHECK(p != NULL, "restored, it opens: %s", p ? "" : ms_err_msg());
    ms_tpack_close(p);
    /* not a pack */
    ms_t_flip_byte(path, 0, 0x04);
    p = ms_tpack_open(path);
    T_CHECK(!p && ms_err_code() == MS_EXIT_MODEL && strstr(ms_err_msg(), "magic"), "bad magic refused: %s", ms_err_msg());
    ms_t_flip_byte(path, 0, 0x04);
    /* truncated */
    T_CHECK(truncate(path, 100) == 0, "truncate");
    p = ms_tpack_open(path);
    T_CHECK(!p && strstr(ms_err_msg(), path), "a truncated pack is refused: %s", ms_err_msg());
    /* missing */
    p = ms_tpack_open(ms_t_path(dir, "nope/" MS_TPACK_FILE));
    T_CHECK(!p && ms_err_code() == MS_EXIT_IO, "a missing pack is an I/O error: %s", ms_err_msg());
    /* an unfinished writer leaves nothing behind */
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    w = ms_tpack_writer_new(path, 1, specs, 1);
    ms_tpack_writer_free(w);
    T_CHECK(access(tmp, F_OK) != 0, "an abandoned writer removes its .tmp");
}

int main(void)
{
    ms_kern_init();
    test_round_trip();
    test_bad_files();
    return ms_t_done();
}
