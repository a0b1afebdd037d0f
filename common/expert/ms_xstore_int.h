/* ms_xstore_int: the expert store's state, shared by its files (ms_xstore.c: cache, reads,
 * calls; ms_xstore_run.c: computing the experts of a call). Not for use outside the module. */
#ifndef MS_XSTORE_INT_H
#define MS_XSTORE_INT_H

#include <pthread.h>
#include <stdint.h>
#include "ms_xxh.h" /* XXH3, dispatched */

#include "ms_cpolicy.h"
#include "ms_xstore.h"

#define XS_PARTS MS_XFMT_MAX_PARTS /* array size; s->np parts are used */

typedef struct {
    uint32_t key;
    int d;                     /* index of the expert among this call's distinct experts */
    int predicted;             /* 1: issued by a prefetch (predicted routing), not taken by a call yet */
    uint8_t *buf;              /* slot_bytes, aligned */
    int n_req;
    ms_io_req req[XS_PARTS];
} xs_pend;

struct ms_xstore {
    ms_xstore_opts o;
    ms_io_files *files;        /* borrowed */
    ms_pool *pool;             /* borrowed, may be NULL */
    ms_io *io;
    ms_cpolicy *pol;
    int np;                    /* parts of an expert (o.fmt.n_parts) */
    uint64_t part_len[XS_PARTS];
    uint64_t E, slot_bytes;
    size_t n_keys, n_slots;
    size_t n_located;          /* keys with a location: the experts there are */
    ms_xloc *loc;              /* [n_keys] */
    uint32_t *reads_by_key;    /* [n_keys] times each expert was read from its file (a miss) */
    uint8_t *loc_state;        /* [n_keys] 0 unset, 1 scattered, 2 contiguous */
    uint8_t **key_buf;         /* [n_keys] buffer of a resident key with valid bytes, else NULL */
    uint8_t **free_buf;        /* [cap] free buffers */
    size_t n_free, n_alloc, cap;
    xs_pend *pend;             /* [depth] the reads' state; never moves while a read is in flight */
    xs_pend **ring;            /* [depth] a permutation of pend: a call's ring of reads in flight /
                                * awaiting compute; early reads are ring[0 .. early_n) */
    int early_n, early_layer;  /* reads issued before their call (begin, prefetch) (0: none) */
    uint64_t pf_round_issued, pf_round_used; /* predicted reads since the last prefetch */
    double pf_precision;       /* running share of predicted reads that a call used (starts at 1) */
    double pf_t;               /* when the last prefetch came (0: its call has come since) */
    int pf_layer;              /* the layer it was for */
    double pf_lead;            /* running time from a prefetch to its layer's call, s (0: none yet) */
    int32_t *dmap;             /* [n_experts] index among this call's distinct experts, -1 outside a call */
    XXH3_state_t *xxh;         /* checksum of scattered experts (part by part) */
    /* buffers made ahead by the grower thread (grow_bg), or by a call when it is behind */
    pthread_t grower;
    int grower_on;             /* the thread exists and is not joined */
    pthread_mutex_t gmu;       /* guards ready, n_ready, n_made, stop (never held for long) */
    uint8_t **ready;           /* [cap] faulted-in buffers not yet adopted */
    size_t n_ready;            /* waiting for adoption */
    size_t n_made;             /* buffers that exist or are being made (<= cap): n_alloc + n_ready
                                  + the one the grower may be faulting in */
    int stop;
    int lent;                  /* 1 between ms_xstore_lend and ms_xstore_unlend */
    uint8_t *used;             /* [n_keys] mapped: 1 once the expert was used (checked, mapped in) */
    pthread_mutex_t mu;
    ms_xstore_stats st;
};

/* State of one compute call. */
typedef struct {
    int layer;
    const float *z;            /* [rows][L] */
    const uint32_t *item_row;  /* [n] row of each item */
    float *out;                /* [n][L] */
    const int64_t *slot;       /* [n] where item i's output goes in out (NULL: at i) */
    const ms_xgroup *g;        /* the items grouped by expert: group d is expert g->dexp[d] */
    int64_t gather;            /* rows per expert computation */
    uint8_t *hit;              /* [nd] 1 if the expert was a hit */
    uint8_t *done;             /* [nd] 1 once its outputs are written */
    float *zin, *zout;         /* [gather][L] gathered rows and their outputs */
    int bad;                   /* 1 once an output was NaN or Inf (bad_msg says where) */
    char bad_msg[512];
} xs_call;

/* ms_xstore_mem.c: fault in every page of buf now; the grower thread's body; hand the grown
 * buffers to the cache (under s->mu; wait: block for the grower's lock, else skip if busy). */
/* A buffer of slot_bytes in small pages (xs_buf_alloc), or one faulted in now (xs_buf_new). */
uint8_t *xs_buf_alloc(const ms_xstore *s);
uint8_t *xs_buf_new(const ms_xstore *s);
void *xs_grow_main(void *arg);
void xs_adopt(ms_xstore *s, int wait);
/* A free buffer for a read (under s->mu): from the free list, the grower's, or made now (never
 * more than cap buffers in all), then *fresh = 1: not faulted in yet (the read's prefault). */
uint8_t *xs_buf_get(ms_xstore *s, int *fresh);
/* With grow_bg, the policy's capacity for a call of n items on rows item_row (under s->mu): its
 * planned slots for a call of many rows (a prefill: the buffers it makes pay for themselves),
 * for a call of a few (a decode step) the buffers made so far and two more, so a step waits on
 * at most two buffers' page faults (the memory ladder stays monotonic) and a cache the grower
 * is slow to fill still stops evicting. */
void xs_capacity_for(ms_xstore *s, const uint32_t *item_row, int64_t n);
/* Start the grower if grow_bg and buffers are still to be made; -1 if the thread cannot start. */
int xs_grower_start(ms_xstore *s);
/* ms_xstore.c: drop the early reads whose call never came (under s->mu). */
void xs_early_drop(ms_xstore *s);

/* Offsets of the parts within a slot holding expert `key` (the slot layout in ms_xstore.c). */
void xs_slot_offsets(const ms_xstore *s, size_t key, uint64_t off[XS_PARTS]);
/* The parts of expert `key`: in the slot buf, or (buf NULL, opts.mapped) in its files' mappings,
 * which xs_map_call has checked before. */
void xs_parts(ms_xstore *s, size_t key, const uint8_t *buf, const uint8_t *part[XS_PARTS]);

/* ms_xstore_map.c (opts.mapped): compute call c (under s->mu; c's buffers made): first uses
 * checked and mapped in, then every expert computed as a hit. Returns 0, or -1 with ms_err set
 * (code set) naming the expert and file; no output is reported then. */
int xs_map_call(ms_xstore *s, xs_call *c);
/* Ask the kernel to read the parts of g's experts of layer not used yet (begin, prefetch). */
void xs_map_willneed(ms_xstore *s, int layer, const ms_xgroup *g);
/* Stats of the mapped store (under s->mu): what is in use. */
void xs_map_stats(const ms_xstore *s, ms_xstore_stats *st);

/* Experts of at most XS_PAR_ROWS rows run whole, one per thread, when there are enough of them
 * (hits, and misses whose reads have arrived): such an expert is a few small matmuls (a decode
 * step's, one row each), too short to split over the pool without its hand-overs costing more
 * than the work. Where an expert is computed never changes a bit (every output element is one
 * canonical dot). */
#define XS_PAR_ROWS 4
#define XS_MAX_THREADS_GROUP 64 /* a group of arrived misses is at most 2 x this */

/* 1 if distinct expert d of the call has at most XS_PAR_ROWS rows. */
int xs_small_group(const xs_call *c, int d);
/* Distinct expert d of the call from the slot buf, on the caller's thread, each matmul split
 * over the pool; a non-finite output sets c->bad. */
void xs_compute_one(ms_xstore *s, xs_call *c, int d, const uint8_t *buf);
/* list[n] (each of at most XS_PAR_ROWS rows, in slots buf[n]) one per thread of the pool. */
void xs_compute_par(ms_xstore *s, xs_call *c, const int *list, const uint8_t *const *buf, int n);
/* Every hit of the call not computed yet (a hit evicted by an early miss already was). */
void xs_compute_hits(ms_xstore *s, xs_call *c);

#endif
