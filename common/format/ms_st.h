/* ms_st: safetensors checkpoints (single file or sharded with an index): reader and writer. */
#ifndef MS_ST_H
#define MS_ST_H

#include <stddef.h>
#include <stdint.h>

/* I32: compressed-tensors' packed INT4 words and weight shapes (Kimi K2-Thinking's experts). */
typedef enum { MS_DT_F32 = 0, MS_DT_BF16 = 1, MS_DT_F16 = 2, MS_DT_U8 = 3, MS_DT_F8_E4M3 = 4, MS_DT_I32 = 5 } ms_dtype;
#define MS_DT_COUNT 6

#define MS_ST_MAX_DIMS 8

/* One tensor of an opened checkpoint. Owned by the ms_st that returned it. */
typedef struct {
    const char *name;      /* full tensor name as in the header (JSON-unescaped) */
    ms_dtype dtype;
    int ndim;              /* 0 for a scalar */
    int64_t shape[MS_ST_MAX_DIMS];
    int64_t numel;         /* product of shape (1 for a scalar; may be 0) */
    int file;              /* index of the shard file that holds it */
    uint64_t offset;       /* absolute byte offset of the data in that file */
    uint64_t nbytes;       /* numel * element size */
} ms_st_tensor;

typedef struct ms_st ms_st;

/* Open a checkpoint directory: if DIR/model.safetensors.index.json exists, open every shard
 * its weight_map names (a tensor must be in the shard the index says); otherwise open
 * DIR/model.safetensors; otherwise every DIR/NAME.safetensors in name order. Duplicate names
 * across shards are an error. Every header is validated strictly (JSON syntax, known dtype,
 * offsets inside the data section, end - begin == numel * element size, and the tensors sorted
 * by offset tile the data section exactly: no overlap, no hole, no trailing byte). Only the
 * headers are read; files are never mapped (tensor bytes: ms_st_read).
 * Returns NULL on failure with ms_err set (class MS_EXIT_MODEL or MS_EXIT_IO) naming the file
 * and, where it applies, the tensor. */
ms_st *ms_st_open_dir(const char *dir);
/* Open one .safetensors file. Same rules. */
ms_st *ms_st_open_file(const char *path);
/* Free. Accepts NULL. */
void ms_st_close(ms_st *st);

/* Tensor by exact name, or NULL. */
const ms_st_tensor *ms_st_find(const ms_st *st, const char *name);
/* All tensors, in file order then header offset order. */
size_t ms_st_count(const ms_st *st);
const ms_st_tensor *ms_st_at(const ms_st *st, size_t i);
/* Read bytes [off, off+len) of tensor t into buf (pread on a fresh descriptor: no mapping, so
 * a file truncated or replaced since the open gives an error, never SIGBUS). Returns 0, or -1
 * with ms_err set naming the file, tensor and offset (class MS_EXIT_IO). */
int ms_st_read(const ms_st *st, const ms_st_tensor *t, uint64_t off, void *buf, size_t len);
/* Path of shard file i, and the number of shard files. */
const char *ms_st_file_path(const ms_st *st, int file);
int ms_st_file_count(const ms_st *st);

/* Element size of a dtype in bytes, and its safetensors name ("F32", "BF16", "F16", "U8",
 * "F8_E4M3": FP8 weights, whose 128 x 128 block scales are tensors of their own, ms_fp8.h). */
size_t ms_dtype_size(ms_dtype dt);
const char *ms_dtype_name(ms_dtype dt);

/* ---- writer ----
 * Tensors are declared first, then ms_st_writer_write() writes the header and streams every
 * tensor's bytes through its fill callback in chunks, so a file of any size can be written
 * with little memory. */
typedef struct ms_st_writer ms_st_writer;

/* Fill buf[0..len) with the bytes [off, off+len) of tensor `name`. Return 0, or -1 with
 * ms_err set to abort the write. */
typedef int (*ms_st_fill_fn)(void *ctx, const char *name, uint64_t off, uint8_t *buf, size_t len);

ms_st_writer *ms_st_writer_new(void);
void ms_st_writer_free(ms_st_writer *w); /* accepts NULL */
/* Declare a tensor; data comes from fill(ctx, ...) at write time. name is copied. */
void ms_st_writer_add(ms_st_writer *w, const char *name, ms_dtype dt, int ndim, const int64_t *shape,
                      ms_st_fill_fn fill, void *ctx);
/* Declare a tensor whose bytes are copied now from data (numel * element size bytes). */
void ms_st_writer_add_copy(ms_st_writer *w, const char *name, ms_dtype dt, int ndim, const int64_t *shape,
                           const void *data);
/* Declare a tensor of zeros that is not written: the writer seeks past it, so the file gets a
 * hole (a sparse file takes no disk for it; reading it gives zeros). */
void ms_st_writer_add_hole(ms_st_writer *w, const char *name, ms_dtype dt, int ndim, const int64_t *shape);
/* Number of bytes the data section will have. */
uint64_t ms_st_writer_data_bytes(const ms_st_writer *w);
/* Write the file (header with tensors in declaration order, 8-byte aligned header). Returns 0,
 * or -1 with ms_err set (the partial file is removed). */
int ms_st_writer_write(ms_st_writer *w, const char *path);

#endif
