/* ms_xstore: routed experts on SSD, read on demand (O_DIRECT) into a byte-bounded cache. */
#ifndef MS_XSTORE_H
#define MS_XSTORE_H

#include <stdint.h>

#include "ms_expert.h"
#include "ms_io.h"
#include "ms_pool.h"

/* Where the parts of one routed expert live, in the order of its format's parts (for K3:
 * w1.weight_packed, w1.weight_scale, w2.weight_packed, w2.weight_scale, w3.weight_packed,
 * w3.weight_scale, spec §4.5). In released checkpoints they are one contiguous run of one
 * file; otherwise each part is read separately into the same canonical layout. Entries past
 * the format's n_parts are unused. */
typedef struct {
    int file[MS_XFMT_MAX_PARTS];      /* index into the store's ms_io_files */
    uint64_t off[MS_XFMT_MAX_PARTS];  /* absolute byte offset of each part */
    uint64_t len[MS_XFMT_MAX_PARTS];  /* bytes of each part */
    int has_xxh3;        /* 1: verify every read against xxh3 (packs); released files have none */
    uint64_t xxh3;       /* XXH3-64 of the parts' bytes in canonical order */
} ms_xloc;

typedef struct {
    int n_layers, n_experts;
    ms_xfmt fmt;                /* what an expert is and computes (ms_xfmt_check must pass) */
    uint64_t cache_bytes;       /* expert cache capacity in bytes (may be 0) */
    int depth;                  /* reads in flight (>= 1; 8 or more recommended) */
    int lru;                    /* 1: plain LRU instead of the windowed-LFU policy (for benchmarks) */
    int64_t gather_rows;        /* rows gathered per expert computation (0 = a whole group): bounds
                                 * the gather buffers to 2 x gather_rows x latent floats */
    int grow_bg;                /* 1: buffers are allocated and faulted in ahead of need by a
                                 * background thread at idle priority (paced: a small share of one
                                 * CPU); 0: by the call whose read needs one. Either way a read
                                 * never lands in memory not faulted in. A cache that holds every
                                 * expert holds them from the start (a call the grower has not
                                 * kept up with makes its buffers itself: it never evicts); a
                                 * smaller one lets a call of a few rows make at most two buffers
                                 * beyond the grower's, evicting otherwise (ms_xstore_mem.c) */
    int prefetch_reads;         /* reads a prefetch may issue: 0 = adaptive (as many as the disk can
                                 * finish in the measured time from a prefetch to its layer's call,
                                 * times the share of predictions used; one while unmeasured);
                                 * N > 0: up to N (at most depth) whatever the timing (tests) */
    uint64_t grow_sync_bytes;   /* with grow_bg: the first slots, up to this many bytes, are faulted
                                 * in by ms_xstore_new itself (at load, not in a step); 0: none */
    int mapped;                 /* 1: experts are used in place, from read-only shared mappings of
                                 * their files (ms_io_files_map: the page cache's own pages), with
                                 * no cache slots, staging buffers, reads or grower (cache_bytes,
                                 * grow_bg, lru and prefetch_reads are then ignored). For a plan
                                 * whose cache would hold every expert: the model then sits in RAM
                                 * once, not once in the page cache and again in the cache, and no
                                 * page is zeroed or copied. See "Mapped" below for the stats. */
} ms_xstore_opts;

typedef struct ms_xstore ms_xstore;

/* A store over files (borrowed; must outlive the store) and a compute pool (borrowed, may be
 * NULL). Memory it allocates: the cache (at most cache_bytes, in slots of one expert each)
 * plus `depth` staging buffers of one expert each (ms_xstore_fixed_bytes tells the total of
 * the latter). Returns NULL with ms_err set on failure.
 *
 * Why grow_bg: the first touch of fresh memory is the dearest part of a miss where the
 * kernel must zero pages (and, in a VM with free page reporting, the host must fault them
 * back in: 1-3 s per GiB measured, against 0.25 s per GiB to read them from disk). With
 * grow_bg no read ever lands in memory never touched before except the staging buffers,
 * so a larger cache never puts more work on the critical path than a smaller one; it only
 * adds hits as idle CPU time faults its slots in. */
ms_xstore *ms_xstore_new(const ms_xstore_opts *o, ms_io_files *files, ms_pool *pool);
void ms_xstore_free(ms_xstore *s); /* accepts NULL */
/* The expert format the store was made for. */
const ms_xfmt *ms_xstore_fmt(const ms_xstore *s);

/* The staging bytes the store needs whatever the cache size (depth staging buffers, aligned).
 * An expert's own bytes are ms_xfmt_expert_bytes. */
uint64_t ms_xstore_fixed_bytes(const ms_xfmt *f, int depth);
/* Bytes of one slot (cache entry or staging buffer): MS_IO_ALIGN-aligned, enough for the
 * worst-case aligned span of the expert read in one piece or part by part. The cache holds
 * cache_bytes / ms_xstore_slot_bytes experts. */
uint64_t ms_xstore_slot_bytes(const ms_xfmt *f);

/* Declare where expert (layer, expert) lives. Every expert that may be requested must be set;
 * a request for an unset expert is an error naming it. */
void ms_xstore_set(ms_xstore *s, int layer, int expert, const ms_xloc *loc);

/* With grow_bg: wait until the grower is done and hand its buffers to the cache (tests,
 * benchmarks). It is done when every buffer the store may need exists, or earlier when the
 * machine has less than 1 GiB available (MemAvailable): other processes took memory the plan
 * counted on (calls then make what they need). */
void ms_xstore_grow_wait(ms_xstore *s);

/* Lend the cache's memory (a prefill span, which reads each expert of a layer once, so a cache
 * would hold nothing it needs again): between calls, every cached expert is dropped and the
 * buffers beyond keep_slots slots (and the read buffers) are freed (given back to the system);
 * the background grower, if running, is stopped. Until ms_xstore_unlend the cache holds at
 * most keep_slots experts. Outputs never depend on it (only hits and reads do). */
void ms_xstore_lend(ms_xstore *s, size_t keep_slots);
/* The cache may hold its planned size again: with grow_bg the grower restarts (its buffers
 * faulted in off the critical path), else calls make them as they need them. No-op when not
 * lent. */
void ms_xstore_unlend(ms_xstore *s);

/* The ms_experts interface: groups the call's (row, rank) items by expert (ms_xgroup_build)
 * and computes them with ms_xstore_compute_items. Its begin issues the reads of the call's
 * first window of missed experts (up to `depth`, in file order, into free buffers, without
 * touching the cache's policy), which the call then takes over; its prefetch is
 * ms_xstore_prefetch_items. */
ms_experts ms_xstore_iface(ms_xstore *s);

/* Reads of experts a layer is predicted to route to, before its router has run (ms_experts
 * prefetch): the distinct experts of g not in the cache, in g's order (most likely first), up
 * to opts.prefetch_reads of them (0: adaptive, see there), into free buffers without touching
 * the cache's policy. Early reads of another layer, or of experts not in g, are dropped first.
 * The layer's begin and compute then take over the reads they need, whatever their order, and
 * drop (wait for, and free) the others: outputs never depend on it, and a wrong prediction costs
 * only the disk time of its reads. */
void ms_xstore_prefetch_items(ms_xstore *s, int layer, const ms_xgroup *g);

/* Compute grouped items of one layer: item q (g->item order) is row item_row[q] of
 * z [rows][L] through expert g->dexp[d]; out [n][L] receives item q's output at row q. Every
 * distinct expert is looked up once; hits are computed at once (with a pool and at least two
 * hits per thread of at most 4 rows each, as in decode steps, whole experts run one per
 * thread, each a few matmuls too short to split well; larger ones split each matmul over the
 * pool; the bits are the same either way; arrived misses likewise, up to two per thread at a
 * time, while the later reads stay in flight), misses are read in file-offset
 * order with up to `depth` reads in flight, and each is computed as soon as it arrives (reads
 * overlap compute); an expert that the policy keeps is read straight into its cache slot,
 * others into a staging buffer. Returns 0, or -1 with ms_err set naming the expert, and
 * classed: MS_EXIT_IO when a read failed or came up short (naming the file), MS_EXIT_MODEL
 * when an expert's bytes do not match their checksum (packs), MS_EXIT_RUNTIME for a request
 * outside the store (layer, expert without a location). No partial output is reported. */
int ms_xstore_compute_items(ms_xstore *s, int layer, const float *z, const uint32_t *item_row, const ms_xgroup *g,
                            float *out);

/* Mapped (opts.mapped): an expert's first use in the run checks its parts lie inside their
 * files (else MS_EXIT_IO naming the file) and, for packs, its checksum (else MS_EXIT_MODEL),
 * asks the kernel for all of a call's first-used experts at once (MADV_WILLNEED: the disk
 * reads them in parallel when they are not in the page cache) and maps their pages in
 * (MADV_POPULATE_READ). Begin and prefetch ask for their experts the same way; lend and unlend
 * do nothing (there is no cache memory to lend). In the stats, misses count first uses and
 * hits later ones; bytes_read is what first uses found outside the page cache (mincore, pages
 * rounded out: what the disk gave); cache_bytes_used and _peak the bytes of the experts used so
 * far; evictions stay 0 (the kernel may drop clean pages under memory pressure and fault them
 * in again: slower, never different). */
typedef struct {
    uint64_t requests;          /* (row, expert) pairs asked for */
    uint64_t hits, misses;      /* distinct experts per call found / not found in the cache */
    uint64_t evictions;
    uint64_t bytes_read;        /* expert bytes read from disk */
    uint64_t cache_bytes_used;  /* bytes held in the cache now (<= cache_bytes) */
    uint64_t cache_bytes_peak;
    uint64_t cache_bytes_grown; /* bytes of cache buffers made so far (beyond the depth staging
                                 * ones; the grower's and the calls'), at most cache_bytes */
    uint64_t slots_made_in_calls; /* of those, buffers a call made itself (the grower was behind,
                                 * or there is none: grow_bg 0) */
    uint64_t prefetched;        /* expert reads issued by a prefetch (predicted routing) */
    uint64_t prefetch_used;     /* of those, the ones the layer's call then needed */
    double io_wait_seconds;     /* time the computing thread waited for reads */
    double read_busy_seconds;   /* wall time with at least one read in flight */
} ms_xstore_stats;
void ms_xstore_get_stats(ms_xstore *s, ms_xstore_stats *st);
/* How many times each expert was read from its file (its misses), [layer * n_experts + expert]
 * for the store's layers (borrowed; counts change as calls run: read between them). */
const uint32_t *ms_xstore_reads_by_expert(const ms_xstore *s);

#endif
