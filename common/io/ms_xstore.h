/* ms_xstore: routed experts on SSD, read on demand (O_DIRECT) into a byte-bounded cache. */
#ifndef MS_XSTORE_H
#define MS_XSTORE_H

#include <stdint.h>

#include "ms_expert.h"
#include "ms_io.h"
#include "ms_pool.h"

/* Where the six tensors of one routed expert live, in the canonical order
 * w1.weight_packed, w1.weight_scale, w2.weight_packed, w2.weight_scale, w3.weight_packed,
 * w3.weight_scale (spec §4.5). In released checkpoints they are one contiguous run of one
 * file; otherwise each part is read separately into the same canonical layout. */
typedef struct {
    int file[6];         /* index into the store's ms_io_files */
    uint64_t off[6];     /* absolute byte offset of each part */
    uint64_t len[6];     /* bytes of each part */
    int has_xxh3;        /* 1: verify every read against xxh3 (packs); released files have none */
    uint64_t xxh3;       /* XXH3-64 of the six parts' bytes in canonical order */
} ms_xloc;

typedef struct {
    int n_layers, n_experts;
    int latent, inter;          /* L, I: w1, w3 are [I, L]; w2 is [L, I]; MXFP4 */
    float b1, b2;               /* SiTU constants */
    uint64_t cache_bytes;       /* expert cache capacity in bytes (may be 0) */
    int depth;                  /* reads in flight (>= 1; 8 or more recommended) */
    int lru;                    /* 1: plain LRU instead of the windowed-LFU policy (for benchmarks) */
} ms_xstore_opts;

typedef struct ms_xstore ms_xstore;

/* A store over files (borrowed; must outlive the store) and a compute pool (borrowed, may be
 * NULL). Memory it allocates: the cache (at most cache_bytes, in slots of one expert each)
 * plus `depth` staging buffers of one expert each (ms_xstore_fixed_bytes tells the total of
 * the latter). Returns NULL with ms_err set on failure. */
ms_xstore *ms_xstore_new(const ms_xstore_opts *o, ms_io_files *files, ms_pool *pool);
void ms_xstore_free(ms_xstore *s); /* accepts NULL */

/* Bytes of one expert in the canonical layout, and the staging bytes the store needs
 * whatever the cache size (depth staging buffers, aligned). */
uint64_t ms_xstore_expert_bytes(int latent, int inter);
uint64_t ms_xstore_fixed_bytes(int latent, int inter, int depth);
/* Bytes of one slot (cache entry or staging buffer): MS_IO_ALIGN-aligned, enough for the
 * worst-case aligned span of the expert read in one piece or in six parts. The cache holds
 * cache_bytes / ms_xstore_slot_bytes experts. */
uint64_t ms_xstore_slot_bytes(int latent, int inter);

/* Declare where expert (layer, expert) lives. Every expert that may be requested must be set;
 * a request for an unset expert is an error naming it. */
void ms_xstore_set(ms_xstore *s, int layer, int expert, const ms_xloc *loc);

/* The ms_experts interface: for one call, every distinct expert is looked up once; hits are
 * computed at once, misses are read in file-offset order with up to `depth` reads in flight,
 * and each is computed as soon as it arrives (reads overlap compute); an expert that the
 * policy keeps is read straight into its cache slot, others into a staging buffer. A failed
 * or short read is an error naming the expert and file; no partial output. */
ms_experts ms_xstore_iface(ms_xstore *s);

typedef struct {
    uint64_t requests;          /* (row, expert) pairs asked for */
    uint64_t hits, misses;      /* distinct experts per call found / not found in the cache */
    uint64_t evictions;
    uint64_t bytes_read;        /* expert bytes read from disk */
    uint64_t cache_bytes_used;  /* bytes held in the cache now (<= cache_bytes) */
    uint64_t cache_bytes_peak;
    double io_wait_seconds;     /* time the computing thread waited for reads */
    double read_busy_seconds;   /* wall time with at least one read in flight */
} ms_xstore_stats;
void ms_xstore_get_stats(ms_xstore *s, ms_xstore_stats *st);

#endif
