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
    uint16_t *dec;   /* packed chunks: the decoded rows [r1 - r0][cols], else NULL */
    const ms_wstream_item *it; /* the item of c, for the reader thread */
    ms_mat_packed pm; /* packed chunks decoded in the kernel: the coded blocks handed out */
    uint64_t *ends;   /* [max blocks a chunk] pm.end */
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
    int code;                 /* exit code class of the failure */
    char err[1024];
    ms_mat_stream iface;
    ms_wstream_stats st;
};

static int64_t rows_per(const ms_wstream_item *it, uint64_t chunk_bytes)
{
    int64_t r = (int64_t)(chunk_bytes / (it->row_bytes ? it->row_bytes : 1));
    if (it->pk) { /* whole blocks */
        int64_t rpb = it->pk->rows_per_block;
        r = r / rpb * rpb;
        if (r < rpb) r = rpb;
    }
    if (it->row_align > 1) { /* whole scale blocks */
        r = r / it->row_align * it->row_align;
        if (r < it->row_align) r = it->row_align;
    }
    if (r < 1) r = 1;
    if (r > it->rows) r = it->rows;
    return r;
}

/* Blocks [b0, b1) of a packed chunk of rows [r0, r1). */
static void chunk_blocks(const ms_wstream_item *it, int64_t r0, int64_t r1, uint32_t *b0, uint32_t *b1)
{
    int64_t rpb = it->pk->rows_per_block;
    *b0 = (uint32_t)(r0 / rpb);
    *b1 = (uint32_t)((r1 + rpb - 1) / rpb);
}

/* Read buffer and decoded buffer a slot needs for every chunk of the items. */
static void slot_bytes(const ms_wstream_item *items, int n, uint64_t chunk_bytes, size_t *rd, size_t *dec)
{
    *rd = *dec = 0;
    for (int i = 0; i < n; i++) {
        const ms_wstream_item *it = &items[i];
        int64_t rpc = rows_per(it, chunk_bytes);
        uint64_t b = (uint64_t)rpc * it->row_bytes;
        if (!it->pk) {
            /* A chunk starts at off + r0 * row_bytes, so at any alignment: the worst is ALIGN - 1. */
            size_t s = ms_io_span(MS_IO_ALIGN - 1, (size_t)b);
            if (s > *rd) *rd = s;
            continue;
        }
        if (b > *dec && !it->pk_in_kernel) *dec = (size_t)b;
        for (int64_t r0 = 0; r0 < it->rows; r0 += rpc) { /* compressed chunks differ in size */
            uint32_t b0, b1;
            chunk_blocks(it, r0, r0 + rpc < it->rows ? r0 + rpc : it->rows, &b0, &b1);
            uint64_t len = it->pk->block_end[b1 - 1] - ms_tpack_block_start(it->pk, b0);
            size_t s = ms_io_span(MS_IO_ALIGN - 1, (size_t)len);
            if (s > *rd) *rd = s;
        }
    }
}

uint64_t ms_wstream_ring_bytes(const ms_wstream_item *items, int n, uint64_t chunk_bytes, int n_slots)
{
    size_t rd, dec;
    slot_bytes(items, n, chunk_bytes, &rd, &dec);
    return (uint64_t)(rd + dec) * (uint64_t)n_slots;
}

/* In the reader thread: decode a packed chunk into its slot (blocks checked). */
static int decode_then(ms_io_req *r)
{
    slot *s = r->user;
    const ms_wstream_item *it = s->it;
    uint32_t b0, b1;
    chunk_blocks(it, s->c.r0, s->c.r1, &b0, &b1);
    return ms_tpack_decode(it->pk_path, it->pk, b0, b1, r->data, s->dec, r->err, sizeof r->err);
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
    s->it = it;
    s->busy = 1;
    if (it->pk) {
        uint32_t b0, b1;
        chunk_blocks(it, s->c.r0, s->c.r1, &b0, &b1);
        uint64_t start = ms_tpack_block_start(it->pk, b0);
        s->req.file = it->pk_file;
        s->req.off = it->pk->data_off + start;
        s->req.len = (size_t)(it->pk->block_end[b1 - 1] - start);
        s->req.user = s;
        if (it->pk_in_kernel)
            ms_io_submit(w->io, &s->req);
        else
            ms_io_submit_then(w->io, &s->req, decode_then);
    } else {
        s->req.file = it->file;
        s->req.off = it->off + (uint64_t)s->c.r0 * it->row_bytes;
        s->req.len = (size_t)((uint64_t)(s->c.r1 - s->c.r0) * it->row_bytes);
        ms_io_submit(w->io, &s->req);
    }
    advance(w, &w->next);
}

static int acquire(void *ctx, const void *key, int64_t *r0, int64_t *r1, const void **data, const uint8_t **scales,
                   ms_mat_packed **packed)
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
        w->code = it->pk && s->req.err[0] && strstr(s->req.err, "trunk pack") ? MS_EXIT_MODEL : MS_EXIT_IO;
        return -1;
    }
    w->st.wait_seconds += ms_now() - t0;
    uint64_t raw = (uint64_t)(s->c.r1 - s->c.r0) * it->row_bytes;
    w->st.bytes_read += raw;
    if (it->pk) {
        w->st.bytes_packed += s->req.len;
        w->st.bytes_unpacked += raw;
    }
    *r0 = s->c.r0;
    *r1 = s->c.r1;
    *data = it->pk ? (const void *)s->dec : (const void *)s->req.data;
    *scales = NULL;
    if (packed) *packed = NULL;
    if (it->pk && it->pk_in_kernel) {
        MS_ASSERT(packed != NULL);
        uint32_t b0, b1;
        chunk_blocks(it, s->c.r0, s->c.r1, &b0, &b1);
        uint64_t base = ms_tpack_block_start(it->pk, b0);
        for (uint32_t b = b0; b < b1; b++) s->ends[b - b0] = it->pk->block_end[b] - base;
        s->pm = (ms_mat_packed){s->req.data, s->ends, it->pk->rows_per_block, (int)(b1 - b0), -1};
        *packed = &s->pm;
        *data = NULL;
    }
    return 0;
}

/* A block the kernel could not decode: the failure, named (decoded again for the reason). */
static void packed_failed(ms_wstream *w, slot *s)
{
    const ms_wstream_item *it = s->it;
    uint32_t b0, b1;
    chunk_blocks(it, s->c.r0, s->c.r1, &b0, &b1);
    uint32_t b = b0 + (uint32_t)s->pm.bad_block;
    uint16_t *tmp = ms_malloc(sizeof(uint16_t) * (size_t)(it->pk->rows_per_block * it->pk->cols));
    char msg[512] = "";
    const uint8_t *src = s->req.data + (ms_tpack_block_start(it->pk, b) - ms_tpack_block_start(it->pk, b0));
    if (ms_tpack_decode(it->pk_path, it->pk, b, b + 1, src, tmp, msg, sizeof msg) == 0)
        snprintf(msg, sizeof msg, "trunk pack %s: tensor %s block %u did not decode", it->pk_path, it->name, b);
    free(tmp);
    w->failed = 1;
    w->code = MS_EXIT_MODEL;
    snprintf(w->err, sizeof w->err, "reading tensor %s: %s", it->name, msg);
}

static void release(void *ctx, const void *key)
{
    ms_wstream *w = ctx;
    (void)key;
    slot *s = &w->slots[w->consume];
    if (s->it->pk && s->it->pk_in_kernel && s->pm.bad_block >= 0 && !w->failed) packed_failed(w, s);
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
    size_t sb, db;
    slot_bytes(items, n, chunk_bytes, &sb, &db);
    size_t max_blocks = 1;
    for (int i = 0; i < n; i++)
        if (items[i].pk) {
            size_t mb = (size_t)(w->rows_per_chunk[i] / items[i].pk->rows_per_block) + 1;
            if (mb > max_blocks) max_blocks = mb;
        }
    w->next = (chunk){0, 0, 0};
    w->next.r1 = w->rows_per_chunk[0];
    for (int i = 0; i < n_slots; i++) {
        w->slots[i].req.buf = ms_io_alloc(sb);
        w->slots[i].dec = db ? ms_io_alloc(db) : NULL;
        w->slots[i].ends = ms_malloc(sizeof(uint64_t) * max_blocks);
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
        free(w->slots[i].dec);
        free(w->slots[i].ends);
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
    return ms_err_set_code(w->code);
}

void ms_wstream_get_stats(ms_wstream *w, ms_wstream_stats *st) { *st = w->st; }
