/* ms_tpack: the trunk pack file (BF16 trunk matrices in ms_bfc blocks, with the model's fingerprint): writer and reader. */
#ifndef MS_TPACK_H
#define MS_TPACK_H

#include <stddef.h>
#include <stdint.h>

/* File DIR/trunk.pack (docs/TRUNK-PACK.md), little-endian:
 *   header (64 B): "MSTPACK1", u32 version 2, u32 tensors, u64 fingerprint, u64 index bytes,
 *                  u64 XXH3-64 of the index, u64 data start, 16 zero bytes
 *   index: per tensor: u16 name length, name, i64 rows, i64 cols, i64 rows per block,
 *          u64 data offset (absolute), u64 data bytes, u64 XXH3-64 of the original BF16 bytes,
 *          u32 blocks, then u64 end of each block (relative to the data offset)
 *   data: each tensor's blocks back to back (ms_bfc layout, each with its own XXH3), each
 *         tensor starting at a 4096-byte boundary.
 * Blocks hold whole rows: rows_per_block rows (the last block may hold fewer). */

#define MS_TPACK_FILE "trunk.pack"
#define MS_TPACK_BLOCK_BYTES 65536 /* target BF16 bytes per block (at least one row) */

typedef struct {
    const char *name;
    int64_t rows, cols, rows_per_block;
    uint64_t data_off, data_bytes, raw_xxh3;
    uint32_t n_blocks;
    const uint64_t *block_end; /* [n_blocks] end of block b relative to data_off */
} ms_tpack_tensor;

/* Start of block b relative to data_off. */
static inline uint64_t ms_tpack_block_start(const ms_tpack_tensor *t, uint32_t b) { return b ? t->block_end[b - 1] : 0; }

/* Rows per block of a [rows, cols] BF16 matrix: about MS_TPACK_BLOCK_BYTES, at most rows/16
 * (at least 1). */
int64_t ms_tpack_rows_per_block(int64_t rows, int64_t cols);

/* The model fingerprint (what ties a pack to a checkpoint): XXH3-64 chained over config.json's
 * bytes, then for each packed tensor in pack order its name, rows, cols, byte count and the
 * XXH3-128 of all its bytes in the checkpoint (ms_ident_hashes: every byte, never a sample).
 * Layout (shard files, offsets) is not part of it: a resharded copy of the same weights keeps
 * its pack. (Version 1 packs hashed the first 4 KiB of each tensor; they are refused.) */
uint64_t ms_tpack_fp_begin(const void *config, size_t len);
uint64_t ms_tpack_fp_tensor(uint64_t fp, const char *name, int64_t rows, int64_t cols, uint64_t bytes,
                            const uint8_t hash[16]);

/* ---- writing ---- */
typedef struct ms_tpack_writer ms_tpack_writer;
typedef struct {
    const char *name;
    int64_t rows, cols;
} ms_tpack_spec;

/* Create path (written as path.tmp, renamed by finish) for the tensors specs[0..n) in that
 * order. Returns NULL with ms_err set (MS_EXIT_IO) naming the file. */
ms_tpack_writer *ms_tpack_writer_new(const char *path, uint64_t fingerprint, const ms_tpack_spec *specs, int n);
/* Append the next rows of the current tensor (tensors in spec order, rows in order, whole
 * blocks except at a tensor's end): data = uint16_t[nrows][cols]. Every block is decoded again
 * and compared with data before it is written (a mismatch is an internal error). Returns 0 or
 * -1 with ms_err set. */
int ms_tpack_writer_rows(ms_tpack_writer *w, const uint16_t *data, int64_t nrows);
/* Write the index and header, fsync, rename into place. Returns 0 or -1 (ms_err set). */
int ms_tpack_writer_finish(ms_tpack_writer *w);
void ms_tpack_writer_free(ms_tpack_writer *w); /* removes an unfinished .tmp; accepts NULL */
/* Bytes written so far (data), and blocks per k (k = 0..8) for statistics. */
uint64_t ms_tpack_writer_bytes(const ms_tpack_writer *w);
const uint64_t *ms_tpack_writer_k_hist(const ms_tpack_writer *w);

/* ---- reading ---- */
typedef struct ms_tpack ms_tpack;
/* Open and validate a pack file (magic, version, index checksum, every offset inside the
 * file). NULL with ms_err set (MS_EXIT_MODEL for a bad pack, MS_EXIT_IO for a failed read)
 * naming the file. */
ms_tpack *ms_tpack_open(const char *path);
void ms_tpack_close(ms_tpack *p); /* accepts NULL */
const char *ms_tpack_path(const ms_tpack *p);
/* Memory the open pack holds (its index), for the planner. */
uint64_t ms_tpack_mem_bytes(const ms_tpack *p);
uint64_t ms_tpack_fingerprint(const ms_tpack *p);
int ms_tpack_count(const ms_tpack *p);
const ms_tpack_tensor *ms_tpack_at(const ms_tpack *p, int i);
const ms_tpack_tensor *ms_tpack_find(const ms_tpack *p, const char *name); /* NULL if absent */

/* Decode blocks [b0, b1) of t from src (the bytes from ms_tpack_block_start(t, b0) on) into
 * dst (uint16_t[rows of those blocks][cols]). Returns 0, or -1 with a message in err naming
 * the pack file `path`, the tensor and the block (corrupt: checksum; or malformed). */
int ms_tpack_decode(const char *path, const ms_tpack_tensor *t, uint32_t b0, uint32_t b1, const uint8_t *src,
                    uint16_t *dst, char *err, size_t errn);

/* Check every block of t at src (all t->data_bytes) with ms_bfc_verify, without decoding: for
 * blocks kept in memory and decoded later with ms_bfc_decode_verified. 0, or -1 with the
 * message of ms_tpack_decode for the first bad block. */
int ms_tpack_verify(const char *path, const ms_tpack_tensor *t, const uint8_t *src, char *err, size_t errn);

#endif
