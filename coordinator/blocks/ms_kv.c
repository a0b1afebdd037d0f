/* ms_kv: reserve, append, copy, save and load of a layer's keys and values. */
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_kv.h"

void ms_kv_init(ms_kv *kv, int64_t width, int64_t ring)
{
    memset(kv, 0, sizeof *kv);
    kv->width = width;
    kv->ring = ring;
}

void ms_kv_free(ms_kv *kv)
{
    if (!kv) return;
    free(kv->k);
    free(kv->v);
    kv->k = kv->v = NULL;
    kv->alloc = 0;
}

void ms_kv_copy(ms_kv *dst, const ms_kv *src)
{
    size_t row = sizeof(float) * (size_t)src->width, n = (size_t)(src->alloc ? src->alloc : 1);
    *dst = *src;
    dst->k = ms_malloc(row * n);
    dst->v = ms_malloc(row * n);
    if (src->alloc) {
        memcpy(dst->k, src->k, row * (size_t)src->alloc);
        memcpy(dst->v, src->v, row * (size_t)src->alloc);
    }
}

void ms_kv_reserve(ms_kv *kv, int64_t p)
{
    int64_t need = (kv->ring ? (p < kv->ring ? p : kv->ring - 1) : p) + 1;
    if (need <= kv->alloc) return;
    int64_t cap = kv->alloc ? kv->alloc : 64;
    while (cap < need) cap *= 2;
    if (kv->ring && cap > kv->ring) cap = kv->ring;
    kv->k = ms_realloc(kv->k, sizeof(float) * (size_t)(cap * kv->width));
    kv->v = ms_realloc(kv->v, sizeof(float) * (size_t)(cap * kv->width));
    kv->alloc = cap;
}

void ms_kv_append(ms_kv *kv, int64_t p0, const float *k, const float *v, int64_t T)
{
    if (T <= 0) return;
    ms_kv_reserve(kv, p0 + T - 1);
    size_t row = sizeof(float) * (size_t)kv->width;
    for (int64_t s = 0; s < T; s++) {
        int64_t at = ms_kv_row(kv, p0 + s);
        memcpy(kv->k + at * kv->width, k + s * kv->width, row);
        memcpy(kv->v + at * kv->width, v + s * kv->width, row);
    }
}

static int64_t first_kept(const ms_kv *kv, int64_t pos, int64_t window)
{
    return kv->ring && window > 0 && pos > window ? pos - window : 0;
}

void ms_kv_save(const ms_kv *kv, int64_t pos, int64_t window, ms_sbuf *out)
{
    int64_t first = first_kept(kv, pos, window), count = pos - first;
    size_t row = sizeof(float) * (size_t)kv->width;
    ms_sbuf_add(out, (const char *)&first, sizeof first);
    ms_sbuf_add(out, (const char *)&count, sizeof count);
    for (int pass = 0; pass < 2; pass++)
        for (int64_t p = first; p < pos; p++)
            ms_sbuf_add(out, (const char *)(pass ? ms_kv_value(kv, p) : ms_kv_key(kv, p)), row);
}

int ms_kv_load(ms_kv *kv, int64_t pos, int64_t window, ms_reader *in, int layer)
{
    int64_t first, count;
    size_t row = sizeof(float) * (size_t)kv->width;
    if (ms_reader_take(in, &first, sizeof first) != 0 || ms_reader_take(in, &count, sizeof count) != 0) goto bad;
    if (first != first_kept(kv, pos, window) || count != pos - first || (size_t)count * row * 2 > in->n - in->at) goto bad;
    if (pos > 0) ms_kv_reserve(kv, pos - 1);
    for (int pass = 0; pass < 2; pass++)
        for (int64_t p = first; p < pos; p++) {
            int64_t at = ms_kv_row(kv, p);
            int rc = ms_reader_take_floats(in, (pass ? kv->v : kv->k) + at * kv->width, (size_t)kv->width);
            if (rc == -2)
                return ms_err_set("the sequence state holds a non-finite value (NaN or infinity) in layer %d, at byte %zu",
                                  layer, in->at);
            if (rc != 0) goto bad;
        }
    return 0;
bad:
    return ms_err_set("the sequence state does not fit this model (layer sizes differ, or it was cut short)");
}
