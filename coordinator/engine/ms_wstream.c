/* ms_wstream: a ring of aligned chunk buffers kept full by the reader pool, consumed in schedule order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ms_clock.h"
#include "ms_err.h"
#include "ms_wstream.h"

typedef struct {
    int item;
    int64_t r0, r1;
} chunk;

typedef struct {
    ms_io_req req;
    chunk c;
    int busy;        /* submitted and not yet released */
} slot;

struct ms_wstream {
    ms_io *io;
    ms_wstream_item *items;   /* [n_items] */
    int n_items;
    int64_t *rows_per_chunk;  /* [n_items] */
    slot *slots;              /* [n_slots] */
    int n_slots;
    chunk next;               /* next chunk to submit */
    int consume;              /* ring index of the next chunk to hand out */
    int failed;
    char err[1024];
    ms_mat_stream iface;
    ms_wstream_stats st;
};

static int64_t rows_per(const ms_wstream_item *it, uint64_t chunk_bytes)
{
    int64_t r = (int64_t)(chunk_bytes / (it->row_bytes ? it->row_bytes : 1));
    if (r < 1) r = 1;
    if (r > it->rows) r = it->rows;
    return r;
}

static size_t slot_bytes(const ms_wstream_item *items, int n, uint64_t chunk_bytes)
{
    size_t mx = 0;
    for (int i = 0; i < n; i++) {
        uint64_t b = (uint64_t)rows_per(&items[i], chunk_bytes) * items[i].row_bytes;
        /* A chunk starts at off + r0 * row_bytes, so at any alignment: the worst is ALIGN - 1. */
        size_t s = ms_io_span(MS_IO_ALIGN - 1, (size_t)b);
        if (s > mx) mx = s;
    }
    return mx;
}

uint64_t ms_wstream_ring_bytes(const ms_wstream_item *items, int n, uint64_t chunk_bytes, int n_slots)
{
    return (uint64_t)slot_bytes(items, n, chunk_bytes) * (uint64_t)n_slots;
}

static void advance(ms_wstream *w, chunk *c)
{
    c->r0 = c->r1;
    if (c->r0 >= w->items[c->item].rows) {
        c->item = (c->item + 1) % w->n_items;
        c->r0 = 0;
    }
    c->r1 = c->r0 + w->rows_per_chunk[c->item];
    if (c->r1 > w->items[c->item].rows) c->r1 = w->items[c->item].rows;
}

static void submit(ms_wstream *w, slot *s)
{
    const ms_wstream_item *it = &w->items[w->next.item];
    s->c = w->next;
    s->req.file = it->file;
    s->req.off = it->off + (uint64_t)s->c.r0 * it->row_bytes;
    s->req.len = (size_t)((uint64_t)(s->c.r1 - s->c.r0) * it->row_bytes);
    s->busy = 1;
    ms_io_submit(w->io, &s->req);
    advance(w, &w->next);
}

static int acquire(void *ctx, const void *key, int64_t *r0, int64_t *r1, const void **data, const uint8_t **scales)
{
    ms_wstream *w = ctx;
    if (w->failed) return -1;
    slot *s = &w->slots[w->consume];
    const ms_wstream_item *it = &w->items[s->c.item];
    /* The forward pass must use streamed matrices exactly in schedule order. */
    if (it->key != key) {
        ms_log(0, "internal error: trunk stream expected %s next", it->name);
        MS_ASSERT(it->key == key);
    }
    double t0 = ms_now();
    if (ms_io_wait(w->io, &s->req) != 0) {
        w->failed = 1;
        snprintf(w->err, sizeof w->err, "reading tensor %s: %s", it->name, ms_err_msg());
        return -1;
    }
    w->st.wait_seconds += ms_now() - t0;
    w->st.bytes_read += s->req.len;
    *r0 = s->c.r0;
    *r1 = s->c.r1;
    *data = s->req.data;
    *scales = NULL;
    return 0;
}

static void release(void *ctx, const void *key)
{
    ms_wstream *w = ctx;
    (void)key;
    slot *s = &w->slots[w->consume];
    s->busy = 0;
    submit(w, s); /* refill this slot with the next chunk of the schedule */
    w->consume = (w->consume + 1) % w->n_slots;
}

ms_wstream *ms_wstream_new(ms_io *io, const ms_wstream_item *items, int n, uint64_t chunk_bytes, int n_slots)
{
    MS_ASSERT(n > 0 && n_slots > 0);
    ms_wstream *w = ms_calloc(1, sizeof *w);
    w->io = io;
    w->n_items = n;
    w->items = ms_malloc(sizeof *items * (size_t)n);
    memcpy(w->items, items, sizeof *items * (size_t)n);
    w->rows_per_chunk = ms_malloc(sizeof(int64_t) * (size_t)n);
    for (int i = 0; i < n; i++) w->rows_per_chunk[i] = rows_per(&items[i], chunk_bytes);
    w->n_slots = n_slots;
    w->slots = ms_calloc((size_t)n_slots, sizeof *w->slots);
    size_t sb = slot_bytes(items, n, chunk_bytes);
    w->next = (chunk){0, 0, 0};
    w->next.r1 = w->rows_per_chunk[0];
    for (int i = 0; i < n_slots; i++) {
        w->slots[i].req.buf = ms_io_alloc(sb);
        submit(w, &w->slots[i]);
    }
    w->iface = (ms_mat_stream){acquire, release, w};
    return w;
}

void ms_wstream_free(ms_wstream *w)
{
    if (!w) return;
    for (int i = 0; i < w->n_slots; i++) {
        if (w->slots[i].busy) ms_io_wait(w->io, &w->slots[i].req); /* a read may still target the buffer */
        free(w->slots[i].req.buf);
    }
    free(w->slots);
    free(w->rows_per_chunk);
    free(w->items);
    free(w);
}

const ms_mat_stream *ms_wstream_iface(ms_wstream *w) { return &w->iface; }

int ms_wstream_check(ms_wstream *w)
{
    if (!w || !w->failed) return 0;
    ms_err_set("%s", w->err);
    return ms_err_set_code(MS_EXIT_IO);
}

void ms_wstream_get_stats(ms_wstream *w, ms_wstream_stats *st) { *st = w->st; }
