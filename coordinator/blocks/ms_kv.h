/* ms_kv: one attention layer's keys and values for a sequence: growing, or a ring for a window. */
#ifndef MS_KV_H
#define MS_KV_H

#include <stdint.h>

#include "ms_sbuf.h"

/* Position p lives at row p (ring 0) or p % ring. A ring holds a sliding window's last
 * positions plus room for a speculative pass's rows, so rows a pass appends never overwrite
 * one that pass still reads. Owns k and v. */
typedef struct {
    float *k, *v;   /* [alloc][width] keys (as the attention reads them: rotated), values */
    int64_t alloc;  /* rows allocated (a ring grows up to `ring`, then wraps) */
    int64_t ring;   /* 0: every position kept, else the ring's rows */
    int64_t width;  /* floats per row: KV heads x head dimension */
} ms_kv;

void ms_kv_init(ms_kv *kv, int64_t width, int64_t ring);
void ms_kv_free(ms_kv *kv); /* accepts NULL; leaves an empty cache of the same shape */
/* A deep copy into dst (uninitialised). */
void ms_kv_copy(ms_kv *dst, const ms_kv *src);
/* Room for position p (grows; a ring only before it wraps, so every position stays at p % ring). */
void ms_kv_reserve(ms_kv *kv, int64_t p);

static inline int64_t ms_kv_row(const ms_kv *kv, int64_t pos) { return kv->ring ? pos % kv->ring : pos; }
static inline const float *ms_kv_key(const ms_kv *kv, int64_t pos) { return kv->k + ms_kv_row(kv, pos) * kv->width; }
static inline const float *ms_kv_value(const ms_kv *kv, int64_t pos) { return kv->v + ms_kv_row(kv, pos) * kv->width; }

/* T rows k[T][width], v[T][width] stored as positions p0 .. p0 + T - 1. */
void ms_kv_append(ms_kv *kv, int64_t p0, const float *k, const float *v, int64_t T);

/* A saved cache of a sequence at position pos whose attention reads the last `window`
 * positions (0: all): the first position kept and the count (int64 each), then the keys and
 * the values in position order, so that a cache with another ring size loads it. */
void ms_kv_save(const ms_kv *kv, int64_t pos, int64_t window, ms_sbuf *out);
/* Reads what ms_kv_save wrote into kv. Returns 0, or -1 with ms_err: a count that does not fit
 * this cache ("does not fit this model"), or a non-finite value (naming `layer` and the byte). */
int ms_kv_load(ms_kv *kv, int64_t pos, int64_t window, ms_reader *in, int layer);

#endif
