/* ms_wstream: streams non-resident trunk matrices from disk in row chunks through a small ring. */
#ifndef MS_WSTREAM_H
#define MS_WSTREAM_H

#include <stdint.h>

#include "ms_io.h"
#include "ms_kern.h"
#include "ms_tpack.h"

/* One streamed matrix: rows of row_bytes each, stored contiguously at file/off. */
typedef struct {
    const void *key;     /* the ms_mat that ms_matmul will pass back (its address) */
    const char *name;    /* tensor name, for messages (borrowed) */
    int file;
    uint64_t off;
    uint64_t row_bytes;
    int64_t rows;
    /* With a trunk pack: the tensor's entry (borrowed), the pack's file index and path; the
     * chunks are then read compressed from there and decoded by the reader thread. */
    const ms_tpack_tensor *pk;
    int pk_file;
    const char *pk_path;
    int pk_in_kernel;    /* 1: hand the coded blocks to the matmul kernel (ms_mat_packed), which
                            decodes them in cache; 0: the reader thread decodes into the slot */
    int64_t row_align;   /* > 1: every chunk starts at a multiple of this many rows (an FP8
                            matrix's 128-row scale blocks: the kernel takes the chunk's scales
                            from the resident grid); 0 or 1: any row */
} ms_wstream_item;

typedef struct ms_wstream ms_wstream;

/* A streamer over the schedule items[0..n) (copied), in the exact order the forward pass uses
 * them; after the last item it goes on with the first (the next forward pass), so reads for
 * the next layer and the next token overlap the current compute. Chunks hold as many whole
 * rows as fit in chunk_bytes (at least one row); the ring has n_slots chunk buffers, each a
 * read in flight or a chunk ready or in use. io is borrowed. Packed items' chunks hold whole
 * blocks; each slot then also has a decoded buffer, filled in the reader thread. */
ms_wstream *ms_wstream_new(ms_io *io, const ms_wstream_item *items, int n, uint64_t chunk_bytes, int n_slots);
void ms_wstream_free(ms_wstream *w); /* waits for reads in flight; accepts NULL */

/* Memory the ring will use for these settings (all slots), for the planner. */
uint64_t ms_wstream_ring_bytes(const ms_wstream_item *items, int n, uint64_t chunk_bytes, int n_slots);

/* The stream to set in each scheduled ms_mat (stream = this, key = its address). */
const ms_mat_stream *ms_wstream_iface(ms_wstream *w);

/* 0, or -1 after a read failed (ms_err is set to the first failure, naming the tensor and
 * file); a failed stream stays failed. */
int ms_wstream_check(ms_wstream *w);

typedef struct {
    uint64_t bytes_read;     /* trunk bytes delivered (as decoded) */
    uint64_t bytes_packed;   /* of which read compressed from a pack: bytes read for them */
    uint64_t bytes_unpacked; /* and the BF16 bytes those decoded to */
    double wait_seconds;     /* compute thread blocked waiting for chunks */
} ms_wstream_stats;
void ms_wstream_get_stats(ms_wstream *w, ms_wstream_stats *st);

#endif
