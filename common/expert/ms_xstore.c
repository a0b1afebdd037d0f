/* ms_xstore: routed experts read from SSD on demand into a byte-bounded, policy-managed cache. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ms_xxh.h" /* XXH3, dispatched */

#include "ms_cpolicy.h"
#include "ms_clock.h"
#include "ms_err.h"
#include "ms_scratch.h"
#include "ms_ops.h"
#include "ms_xstore.h"

/*
 * Buffers. Every buffer is one "slot": ms_xstore_slot_bytes, MS_IO_ALIGN-aligned, large
 * enough for the worst-case aligned span(s) of one expert. A buffer is either free, holds a
 * cached (resident, valid) expert, or receives a read of this call. Buffers are
 * interchangeable, so "read straight into its cache slot" and "read into a staging buffer"
 * differ only in what happens after the compute: a key the policy still keeps becomes the
 * owner of the buffer (no copy), any other buffer goes back to the free list. At most
 * n_slots + depth buffers ever exist: cached keys + reads pending in this call never exceed
 * that (resident keys <= n_slots, pending reads <= depth); they are allocated lazily. Reads
 * issued before their call (ms_experts begin and prefetch: "early" reads) are at most depth too,
 * and become that call's first pending reads or are dropped.
 *
 * Every buffer is faulted in before a read lands in it (a fault inside an O_DIRECT read costs
 * several times the read on a VM): with grow_bg a background thread makes buffers ahead of need
 * at idle priority, paced (ms_xstore_mem.c); a call that finds none free makes one itself,
 * which its reader faults in just before the read (ms_io_req.prefault). The policy holds its planned n_slots from the start either way, so what is cached (hits, misses,
 * evictions) never depends on the grower's pace, and a cache that can hold every expert a run
 * touches never evicts one.
 *
 * Slot layout (fixed by the expert's ms_xloc, so a hit finds its parts again):
 *   contiguous expert: one read of span(off[0], E); the parts follow each other from
 *     buf + off[0] % MS_IO_ALIGN;
 *   scattered expert: part i is read into its own aligned region of span(off[i], len[i])
 *     bytes, regions back to back; part i starts at region_i + off[i] % MS_IO_ALIGN.
 */

#include "ms_xstore_int.h"

static void early_keep(ms_xstore *s, int layer, const uint32_t *keys, int n);

/* Largest aligned span a read of len bytes can need (start at the last byte of a block). */
static uint64_t worst_span(uint64_t len) { return (len + 2 * (uint64_t)MS_IO_ALIGN - 2) / MS_IO_ALIGN * MS_IO_ALIGN; }

/* The sum of the parts' worst spans also bounds the worst span of the whole run, so one
 * slot size serves both layouts. */
uint64_t ms_xstore_slot_bytes(const ms_xfmt *f)
{
    uint64_t t = 0;
    for (int i = 0; i < f->n_parts; i++) t += worst_span(f->part[i].bytes);
    return t;
}

uint64_t ms_xstore_fixed_bytes(const ms_xfmt *f, int depth)
{
    return (uint64_t)(depth < 1 ? 1 : depth) * ms_xstore_slot_bytes(f);
}

ms_xstore *ms_xstore_new(const ms_xstore_opts *o, ms_io_files *files, ms_pool *pool)
{
    if (!o || !files) {
        ms_err_set("expert store: no options or no files");
        return NULL;
    }
    if (o->n_layers < 1 || o->n_experts < 1) {
        ms_err_set("expert store: %d layers x %d experts is empty", o->n_layers, o->n_experts);
        return NULL;
    }
    char why[400];
    if (ms_xfmt_check(&o->fmt, why, sizeof why) != 0) {
        ms_err_set("expert store: bad expert format: %s", why);
        return NULL;
    }
    if (o->depth < 1) {
        ms_err_set("expert store: read depth %d must be at least 1", o->depth);
        return NULL;
    }
    ms_xstore *s = ms_calloc(1, sizeof *s);
    s->o = *o;
    s->files = files;
    s->pool = pool;
    s->np = o->fmt.n_parts;
    for (int i = 0; i < s->np; i++) s->part_len[i] = o->fmt.part[i].bytes;
    s->E = ms_xfmt_expert_bytes(&o->fmt);
    s->slot_bytes = ms_xstore_slot_bytes(&o->fmt);
    s->n_keys = (size_t)o->n_layers * (size_t)o->n_experts;
    uint64_t slots = o->cache_bytes / s->slot_bytes;
    s->n_slots = slots < s->n_keys ? (size_t)slots : s->n_keys; /* more slots than keys are never used */
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->gmu, NULL);
    s->pol = o->lru ? ms_cpolicy_new_lru(s->n_keys, s->n_slots) : ms_cpolicy_new(s->n_keys, s->n_slots);
    if (!s->pol) {
        ms_err_wrap("expert store");
        ms_xstore_free(s);
        return NULL;
    }
    s->io = ms_io_new(files, o->depth);
    if (!s->io) {
        ms_err_wrap("expert store");
        ms_xstore_free(s);
        return NULL;
    }
    s->loc = ms_calloc(s->n_keys, sizeof *s->loc);
    s->loc_state = ms_calloc(s->n_keys, 1);
    s->key_buf = ms_calloc(s->n_keys, sizeof *s->key_buf);
    s->cap = s->n_slots + (size_t)o->depth;
    s->free_buf = ms_calloc(s->cap, sizeof *s->free_buf);
    s->used = ms_calloc(s->n_keys, 1);
    s->reads_by_key = ms_calloc(s->n_keys, sizeof *s->reads_by_key);
    /* The staging buffers exist whatever happens, faulted in; cache slots come ahead of need.
     * A mapped store has neither. */
    for (int i = 0; i < o->depth && !o->mapped; i++) {
        s->free_buf[s->n_free++] = xs_buf_new(s); /* faulted in before a read lands in it */
        s->n_alloc++;
    }
    s->pend = ms_calloc((size_t)o->depth, sizeof *s->pend);
    s->ring = ms_malloc(sizeof *s->ring * (size_t)o->depth);
    for (int i = 0; i < o->depth; i++) s->ring[i] = &s->pend[i];
    s->pf_precision = 1.0;
    s->dmap = ms_malloc(sizeof(int32_t) * (size_t)o->n_experts);
    for (int e = 0; e < o->n_experts; e++) s->dmap[e] = -1;
    s->xxh = XXH3_createState();
    if (!s->xxh) {
        ms_err_set("expert store: out of memory for the checksum state");
        ms_xstore_free(s);
        return NULL;
    }
    s->ready = ms_calloc(s->cap, sizeof *s->ready);
    if (o->grow_bg && s->n_slots > 0 && !o->mapped) {
        /* The head of the cache, faulted in here (at load, not in a step). */
        size_t k = (size_t)(o->grow_sync_bytes / s->slot_bytes);
        if (k > s->n_slots) k = s->n_slots;
        for (size_t i = 0; i < k; i++) {
            s->free_buf[s->n_free++] = xs_buf_new(s);
            s->n_alloc++;
        }
    }
    s->n_made = s->n_alloc;
    if (xs_grower_start(s) != 0) {
        ms_err_set("expert store: cannot start the cache's grower thread");
        ms_xstore_free(s);
        return NULL;
    }
    return s;
}

const ms_xfmt *ms_xstore_fmt(const ms_xstore *s) { return &s->o.fmt; }

void ms_xstore_free(ms_xstore *s)
{
    if (!s) return;
    if (s->grower_on) {
        pthread_mutex_lock(&s->gmu);
        s->stop = 1;
        pthread_mutex_unlock(&s->gmu);
        pthread_join(s->grower, NULL);
    }
    for (size_t i = 0; i < s->n_ready; i++) free(s->ready[i]);
    free(s->ready);
    pthread_mutex_destroy(&s->gmu);
    if (s->io) early_keep(s, -1, NULL, 0); /* early reads whose call never came */
    ms_io_free(s->io);
    if (s->key_buf)
        for (size_t k = 0; k < s->n_keys; k++) free(s->key_buf[k]);
    for (size_t i = 0; i < s->n_free; i++) free(s->free_buf[i]);
    ms_cpolicy_free(s->pol);
    pthread_mutex_destroy(&s->mu);
    free(s->loc);
    free(s->loc_state);
    free(s->used);
    free(s->reads_by_key);
    free(s->key_buf);
    free(s->free_buf);
    free(s->pend);
    free(s->ring);
    free(s->dmap);
    if (s->xxh) XXH3_freeState(s->xxh);
    free(s);
}

void ms_xstore_set(ms_xstore *s, int layer, int expert, const ms_xloc *loc)
{
    MS_ASSERT(layer >= 0 && layer < s->o.n_layers && expert >= 0 && expert < s->o.n_experts);
    int contiguous = 1;
    for (int i = 0; i < s->np; i++) {
        MS_ASSERT(loc->file[i] >= 0 && loc->len[i] == s->part_len[i]);
        if (i > 0 && (loc->file[i] != loc->file[0] || loc->off[i] != loc->off[i - 1] + loc->len[i - 1]))
            contiguous = 0;
    }
    size_t key = (size_t)layer * (size_t)s->o.n_experts + (size_t)expert;
    pthread_mutex_lock(&s->mu);
    /* A new location invalidates cached bytes of the old one. */
    if (s->key_buf[key]) {
        s->free_buf[s->n_free++] = s->key_buf[key];
        s->key_buf[key] = NULL;
    }
    ms_cpolicy_remove(s->pol, (uint32_t)key);
    s->loc[key] = *loc;
    if (!s->loc_state[key]) s->n_located++;
    s->loc_state[key] = contiguous ? 2 : 1;
    if (s->used[key]) s->st.cache_bytes_used -= s->E;
    s->used[key] = 0; /* mapped: checked again at its next use */
    pthread_mutex_unlock(&s->mu);
}

/* Offsets of the six parts within a slot holding the expert at loc (see the layout above). */
void xs_slot_offsets(const ms_xstore *s, size_t key, uint64_t off[XS_PARTS])
{
    const ms_xloc *l = &s->loc[key];
    if (s->loc_state[key] == 2) {
        off[0] = l->off[0] % MS_IO_ALIGN;
        for (int i = 1; i < s->np; i++) off[i] = off[i - 1] + l->len[i - 1];
    } else {
        uint64_t region = 0;
        for (int i = 0; i < s->np; i++) {
            off[i] = region + l->off[i] % MS_IO_ALIGN;
            region += ms_io_span(l->off[i], (size_t)l->len[i]);
        }
    }
}

static void buf_put(ms_xstore *s, uint8_t *b) { s->free_buf[s->n_free++] = b; }

typedef struct {
    int file;
    uint64_t off;
    int d;
} xs_miss;

static int miss_cmp(const void *a, const void *b)
{
    const xs_miss *x = a, *y = b;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->d < y->d ? -1 : x->d > y->d;
}

/* The policy access of a missed expert (evicting a victim if it must). */
static void miss_access(ms_xstore *s, xs_call *c, int d)
{
    size_t key = (size_t)c->layer * (size_t)s->o.n_experts + (size_t)c->g->dexp[d];
    uint32_t victim = UINT32_MAX;
    int r = ms_cpolicy_access(s->pol, (uint32_t)key, &victim);
    MS_ASSERT(r != MS_CPOLICY_HIT);
    s->st.misses++;
    s->reads_by_key[key]++;
    if (r == MS_CPOLICY_EVICT) {
        s->st.evictions++;
        /* A victim with a cached buffer gives it back. If it is a hit of this very call that
         * is not computed yet, compute it first (it is in memory; order never changes bits).
         * A victim that is a read pending in this call keeps its buffer until computed. */
        if (s->key_buf[victim]) {
            size_t vl = victim / (size_t)s->o.n_experts;
            int32_t vd = vl == (size_t)c->layer ? s->dmap[victim % (size_t)s->o.n_experts] : -1;
            if (vd >= 0 && c->hit[vd] && !c->done[vd]) xs_compute_one(s, c, vd, s->key_buf[victim]);
            buf_put(s, s->key_buf[victim]);
            s->key_buf[victim] = NULL;
        }
    }
    uint64_t used = (uint64_t)ms_cpolicy_resident(s->pol) * s->slot_bytes;
    if (used > s->st.cache_bytes_peak) s->st.cache_bytes_peak = used;
}

/* The read(s) of expert `key` into a free buffer. */
static void read_submit(ms_xstore *s, size_t key, xs_pend *p)
{
    const ms_xloc *l = &s->loc[key];
    p->key = (uint32_t)key;
    p->d = -1;
    p->predicted = 0;
    int fresh;
    p->buf = xs_buf_get(s, &fresh);
    memset(p->req, 0, sizeof p->req);
    if (s->loc_state[key] == 2) {
        p->n_req = 1;
        p->req[0].file = l->file[0];
        p->req[0].off = l->off[0];
        p->req[0].len = (size_t)s->E;
        p->req[0].buf = p->buf;
        p->req[0].prefault = fresh;
    } else {
        p->n_req = s->np;
        uint64_t region = 0;
        for (int i = 0; i < s->np; i++) {
            p->req[i].file = l->file[i];
            p->req[i].off = l->off[i];
            p->req[i].len = (size_t)l->len[i];
            p->req[i].buf = p->buf + region;
            p->req[i].prefault = fresh;
            region += ms_io_span(l->off[i], (size_t)l->len[i]);
        }
    }
    for (int i = 0; i < p->n_req; i++) ms_io_submit(s->io, &p->req[i]);
}

/* One policy access for a missed expert, then its read(s) into a free buffer. */
static void submit_miss(ms_xstore *s, xs_call *c, int d, xs_pend *p)
{
    miss_access(s, c, d);
    read_submit(s, (size_t)c->layer * (size_t)s->o.n_experts + (size_t)c->g->dexp[d], p);
    p->d = d;
}

/* XXH3-64 of the expert held in buf (slot layout of key), over its six parts in canonical order. */
static uint64_t slot_xxh3(ms_xstore *s, size_t key, const uint8_t *buf)
{
    uint64_t off[XS_PARTS];
    xs_slot_offsets(s, key, off);
    if (s->loc_state[key] == 2) return XXH3_64bits(buf + off[0], (size_t)s->E);
    XXH3_64bits_reset(s->xxh);
    for (int i = 0; i < s->np; i++) XXH3_64bits_update(s->xxh, buf + off[i], (size_t)s->part_len[i]);
    return XXH3_64bits_digest(s->xxh);
}

/* Wait for every part of p; returns the index of the first failed part, or -1. */
static int wait_pend(ms_xstore *s, xs_pend *p)
{
    int bad = -1;
    double t0 = ms_now();
    for (int i = 0; i < p->n_req; i++)
        if (ms_io_wait(s->io, &p->req[i]) != 0 && bad < 0) bad = i;
    s->st.io_wait_seconds += ms_now() - t0;
    return bad;
}

/* The distinct experts of g in layer that the cache does not hold, sorted by file offset (the
 * order their reads are issued in); returns how many. miss has room for g->nd. */
static int sorted_misses(ms_xstore *s, int layer, const ms_xgroup *g, xs_miss *miss)
{
    int n = 0;
    for (int d = 0; d < g->nd; d++) {
        size_t key = (size_t)layer * (size_t)s->o.n_experts + (size_t)g->dexp[d];
        if (ms_cpolicy_contains(s->pol, (uint32_t)key)) continue;
        miss[n++] = (xs_miss){s->loc[key].file[0], s->loc[key].off[0], d};
    }
    qsort(miss, (size_t)n, sizeof *miss, miss_cmp);
    return n;
}

static uint32_t key_of(const ms_xstore *s, int layer, int32_t e)
{
    return (uint32_t)((size_t)layer * (size_t)s->o.n_experts + (size_t)e);
}

/* Keep the early reads of `layer` whose key is among keys[0..n), in their order, at the head of
 * the ring; wait for the others (a buffer cannot be reused while the disk writes into it) and
 * give their buffers back. Their bytes were read. Pointers move, never a read in flight. */
void xs_early_drop(ms_xstore *s) { early_keep(s, -1, NULL, 0); }

static void early_keep(ms_xstore *s, int layer, const uint32_t *keys, int n)
{
    int kept = 0;
    for (int i = 0; i < s->early_n; i++) {
        xs_pend *p = s->ring[i];
        int want = 0;
        for (int j = 0; j < n && !want && layer == s->early_layer; j++) want = p->key == keys[j];
        if (want) {
            s->ring[i] = s->ring[kept];
            s->ring[kept++] = p;
            continue;
        }
        wait_pend(s, p);
        s->st.bytes_read += s->E;
        buf_put(s, p->buf);
        p->predicted = 0;
    }
    s->early_n = kept;
}

/* Issue reads of misses[0..n) (keys of layer, in the order given) that are not early reads
 * already, until there are `upto` early reads. */
static void early_add(ms_xstore *s, int layer, const uint32_t *keys, int n, int upto, int predicted)
{
    int had = s->early_n;
    for (int i = 0; i < n && s->early_n < upto; i++) {
        int dup = 0;
        for (int j = 0; j < had && !dup; j++) dup = s->ring[j]->key == keys[i];
        if (dup) continue;
        xs_pend *p = s->ring[s->early_n++];
        read_submit(s, keys[i], p);
        p->predicted = predicted;
        s->st.prefetched += (uint64_t)predicted;
        s->pf_round_issued += (uint64_t)predicted;
    }
    s->early_layer = layer;
}

/* The keys of g's distinct experts of layer that the cache does not hold, in g's order. */
static int miss_keys(ms_xstore *s, int layer, const ms_xgroup *g, uint32_t *keys)
{
    int n = 0;
    for (int d = 0; d < g->nd; d++) {
        uint32_t key = key_of(s, layer, g->dexp[d]);
        if (!ms_cpolicy_contains(s->pol, key)) keys[n++] = key;
    }
    return n;
}

/* The call of the layer the last prefetch was for has come: how long after it (under s->mu). */
static void lead_end(ms_xstore *s, int layer)
{
    if (s->pf_t <= 0.0 || s->pf_layer != layer) return;
    double lead = ms_now() - s->pf_t;
    s->pf_lead = s->pf_lead > 0.0 ? 0.75 * s->pf_lead + 0.25 * lead : lead;
    s->pf_t = 0.0;
}

/* The first window of a call's reads, issued before the call (ms_experts begin): early reads of
 * its misses are kept (a prefetch's that the router confirmed), the others dropped, and the
 * misses are read in the order ms_xstore_compute_items would issue them, up to depth early reads,
 * into free buffers without touching the policy; the call then makes the policy accesses and
 * takes the reads over. Without a prefetch, what is cached, and every output, is what it would
 * be without begin; with one, only the order of the policy's accesses within the call can
 * differ, never an output. */
static void begin_items(ms_xstore *s, int layer, const ms_xgroup *g)
{
    pthread_mutex_lock(&s->mu);
    lead_end(s, layer);
    xs_miss *miss = ms_scratch_push(sizeof(xs_miss) * (size_t)(g->nd + 1));    /* [nd] */
    uint32_t *keys = ms_scratch_push(sizeof(uint32_t) * (size_t)(g->nd + 1)); /* [nd] */
    int n_miss = sorted_misses(s, layer, g, miss);
    for (int i = 0; i < n_miss; i++) keys[i] = key_of(s, layer, g->dexp[miss[i].d]);
    early_keep(s, layer, keys, n_miss);
    early_add(s, layer, keys, n_miss, s->o.depth, 0);
    ms_scratch_pop(keys);
    ms_scratch_pop(miss);
    pthread_mutex_unlock(&s->mu);
}

void ms_xstore_prefetch_items(ms_xstore *s, int layer, const ms_xgroup *g)
{
    if (s->o.mapped) {
        xs_map_willneed(s, layer, g);
        return;
    }
    pthread_mutex_lock(&s->mu);
    /* The last round's precision: what share of its predicted reads a call took. */
    if (s->pf_round_issued > 0)
        s->pf_precision = 0.75 * s->pf_precision + 0.25 * (double)s->pf_round_used / (double)s->pf_round_issued;
    s->pf_round_issued = s->pf_round_used = 0;
    /* As many as the disk can read before the router has run (the lead over the time a read
     * takes while reads are in flight; more would only queue before the layer's own reads),
     * scaled by the precision; one until a lead is known. */
    int upto = (int)(s->o.depth * s->pf_precision + 0.999);
    if (upto < 1) upto = 1;
    if (upto > s->o.depth) upto = s->o.depth;
    ms_io_stats io;
    ms_io_get_stats(s->io, &io);
    double per_read = s->st.bytes_read > 0 ? io.busy_seconds * (double)s->E / (double)s->st.bytes_read : 0.0;
    if (s->o.prefetch_reads > 0) {
        upto = s->o.prefetch_reads < s->o.depth ? s->o.prefetch_reads : s->o.depth;
    } else if (s->pf_lead <= 0.0 || per_read <= 0.0) {
        upto = 1;
    } else {
        double fit = s->pf_precision * s->pf_lead / per_read + 0.5;
        if (fit < (double)upto) upto = (int)fit;
    }
    s->pf_t = ms_now();
    s->pf_layer = layer;
    uint32_t *keys = ms_scratch_push(sizeof(uint32_t) * (size_t)(g->nd + 1)); /* [nd] */
    int n = miss_keys(s, layer, g, keys);
    early_keep(s, layer, keys, n);
    early_add(s, layer, keys, n, upto, 1);
    ms_scratch_pop(keys);
    pthread_mutex_unlock(&s->mu);
}

static int compute_items(ms_xstore *s, int layer, const float *z, const uint32_t *item_row, const ms_xgroup *g,
                         const int64_t *slot, float *out);

int ms_xstore_compute_items(ms_xstore *s, int layer, const float *z, const uint32_t *item_row, const ms_xgroup *g,
                            float *out)
{
    return compute_items(s, layer, z, item_row, g, NULL, out);
}

static int compute_items(ms_xstore *s, int layer, const float *z, const uint32_t *item_row, const ms_xgroup *g,
                         const int64_t *slot, float *out)
{
    int NE = s->o.n_experts;
    if (layer < 0 || layer >= s->o.n_layers)
        return ms_err_set("expert request for layer %d out of range (0..%d)", layer, s->o.n_layers - 1);
    for (int d = 0; d < g->nd; d++) {
        if (g->dexp[d] < 0 || g->dexp[d] >= NE)
            return ms_err_set("expert id %d out of range (0..%d) in layer %d", g->dexp[d], NE - 1, layer);
        if (!s->loc_state[(size_t)layer * (size_t)NE + (size_t)g->dexp[d]])
            return ms_err_set("layer %d expert %d has no location in the expert store", layer, g->dexp[d]);
    }
    if (g->nd == 0) return 0;
    int64_t L = s->o.fmt.latent, n = g->start[g->nd];

    pthread_mutex_lock(&s->mu);
    xs_adopt(s, 0);
    xs_capacity_for(s, item_row, g->start[g->nd]);
    lead_end(s, layer);
    s->st.requests += (uint64_t)n;
    xs_call c = {.layer = layer, .z = z, .item_row = item_row, .out = out, .slot = slot, .g = g};
    for (int d = 0; d < g->nd; d++) s->dmap[g->dexp[d]] = d;
    c.gather = s->o.gather_rows > 0 && s->o.gather_rows < g->max_m ? s->o.gather_rows : g->max_m;
    c.hit = ms_scratch_push_zero((size_t)g->nd);                    /* [nd] */
    c.done = ms_scratch_push_zero((size_t)g->nd);                   /* [nd] */
    c.zin = ms_scratch_push(sizeof(float) * (size_t)(c.gather * L));  /* [gather][L] */
    c.zout = ms_scratch_push(sizeof(float) * (size_t)(c.gather * L)); /* [gather][L] */
    xs_miss *miss = NULL;
    int rc = 0;
    if (s->o.mapped) {
        rc = xs_map_call(s, &c);
        goto done;
    }
    /* Hits first (accesses of hits never change residency), misses sorted by file offset. */
    for (int d = 0; d < g->nd; d++) {
        size_t key = (size_t)layer * (size_t)NE + (size_t)g->dexp[d];
        if (ms_cpolicy_contains(s->pol, (uint32_t)key)) {
            MS_ASSERT(s->key_buf[key] != NULL);
            int r = ms_cpolicy_access(s->pol, (uint32_t)key, NULL);
            MS_ASSERT(r == MS_CPOLICY_HIT);
            c.hit[d] = 1;
            s->st.hits++;
        }
    }
    miss = ms_scratch_push(sizeof(xs_miss) * (size_t)(g->nd + 1)); /* [nd] */
    int n_miss = sorted_misses(s, layer, g, miss);

    /* A ring of up to depth misses read in flight; the first window is issued before the
     * hits are computed so the disk works while they are (or was, by begin and prefetch: the
     * early reads of this call's misses are taken over first, in their order, and the misses
     * follow them; the others are dropped). */
    int depth = s->o.depth, head = 0, n_pend = 0, next = 0;
    {
        uint32_t *keys = ms_scratch_push(sizeof(uint32_t) * (size_t)(n_miss + 1)); /* [n_miss] */
        for (int i = 0; i < n_miss; i++) keys[i] = key_of(s, layer, g->dexp[miss[i].d]);
        early_keep(s, layer, keys, n_miss);
        for (int e = 0; e < s->early_n; e++) { /* move early read e's miss to position e */
            int j = e;
            while (keys[j] != s->ring[e]->key) j++; /* present: early_keep kept only misses */
            xs_miss m = miss[j];
            uint32_t kj = keys[j];
            memmove(miss + e + 1, miss + e, sizeof *miss * (size_t)(j - e));
            memmove(keys + e + 1, keys + e, sizeof *keys * (size_t)(j - e));
            miss[e] = m;
            keys[e] = kj;
        }
        ms_scratch_pop(keys);
    }
    for (; next < s->early_n; next++, n_pend++) {
        xs_pend *p = s->ring[next];
        miss_access(s, &c, miss[next].d);
        p->d = miss[next].d;
        if (p->predicted) s->st.prefetch_used++, s->pf_round_used++;
        p->predicted = 0;
    }
    s->early_n = 0;
    while (next < n_miss && n_pend < depth) {
        submit_miss(s, &c, miss[next++].d, s->ring[(head + n_pend) % depth]);
        n_pend++;
    }
    xs_compute_hits(s, &c);
    /* Misses in arrival order: the oldest reads in flight, up to two per thread, are taken as a
     * group when each has at most XS_PAR_ROWS rows and computed one per thread while the rest
     * stay in flight; otherwise the oldest alone, each of its matmuls split over the pool. */
    int nt = ms_pool_size(s->pool);
    int gl[2 * XS_MAX_THREADS_GROUP];
    const uint8_t *gb[2 * XS_MAX_THREADS_GROUP];
    while (n_pend > 0) {
        int G = nt > 1 ? (n_pend < 2 * nt ? n_pend : 2 * nt) : 1;
        if (G > 2 * XS_MAX_THREADS_GROUP) G = 2 * XS_MAX_THREADS_GROUP;
        for (int i = 0; i < G && G > 1; i++)
            if (!xs_small_group(&c, s->ring[(head + i) % depth]->d)) G = 1;
        int bad = -1, code = MS_EXIT_IO, waited = 0;
        char msg[768];
        for (; waited < G && bad < 0; waited++) {
            xs_pend *p = s->ring[(head + waited) % depth];
            bad = wait_pend(s, p);
            if (bad >= 0) {
                snprintf(msg, sizeof msg, "layer %d expert %d: cannot read %s: %s", layer, g->dexp[p->d],
                         ms_io_files_path(s->files, p->req[bad].file), p->req[bad].err);
            } else if (s->loc[p->key].has_xxh3) {
                /* Packs carry a checksum: bytes that do not match are never computed or cached. */
                uint64_t got = slot_xxh3(s, p->key, p->buf), want = s->loc[p->key].xxh3;
                if (got != want) {
                    const ms_xloc *l = &s->loc[p->key];
                    snprintf(msg, sizeof msg,
                             "layer %d expert %d: checksum mismatch in %s at byte %llu "
                             "(xxh3 %016llx expected, %016llx read)",
                             layer, g->dexp[p->d], ms_io_files_path(s->files, l->file[0]), (unsigned long long)l->off[0],
                             (unsigned long long)want, (unsigned long long)got);
                    bad = 0;
                    code = MS_EXIT_MODEL;
                }
            }
        }
        if (bad >= 0) {
            /* Drain every read of this call; none of their bytes may be trusted or kept. */
            for (int i = 0; i < n_pend; i++) {
                xs_pend *q = s->ring[(head + i) % depth];
                if (i >= waited) wait_pend(s, q);
                ms_cpolicy_remove(s->pol, q->key);
                buf_put(s, q->buf);
            }
            ms_err_set("%s", msg);
            ms_err_set_code(code);
            rc = -1;
            break;
        }
        if (G > 1) {
            for (int i = 0; i < G; i++) {
                gl[i] = s->ring[(head + i) % depth]->d;
                gb[i] = s->ring[(head + i) % depth]->buf;
            }
            xs_compute_par(s, &c, gl, gb, G);
        } else {
            xs_compute_one(s, &c, s->ring[head]->d, s->ring[head]->buf);
        }
        for (int i = 0; i < G; i++) {
            xs_pend *p = s->ring[head];
            s->st.bytes_read += s->E;
            if (ms_cpolicy_contains(s->pol, p->key))
                s->key_buf[p->key] = p->buf; /* the policy keeps it: the buffer becomes its slot */
            else
                buf_put(s, p->buf);
            head = (head + 1) % depth;
            n_pend--;
        }
        for (int i = 0; i < G && next < n_miss; i++) {
            submit_miss(s, &c, miss[next++].d, s->ring[(head + n_pend) % depth]);
            n_pend++;
        }
    }

done:
    for (int d = 0; d < g->nd; d++) s->dmap[g->dexp[d]] = -1;
    pthread_mutex_unlock(&s->mu);
    if (rc == 0 && c.bad) {
        ms_err_set("%s", c.bad_msg);
        ms_err_set_code(MS_EXIT_RUNTIME);
        rc = -1;
    }
    ms_scratch_pop(miss);
    ms_scratch_pop(c.zout);
    ms_scratch_pop(c.zin);
    ms_scratch_pop(c.done);
    ms_scratch_pop(c.hit);
    return rc;
}

static int xs_compute_placed(void *ctx, int layer, int64_t n_rows, const float *z, int k, const int32_t *ids,
                             const int64_t *slot, float *out)
{
    ms_xstore *s = ctx;
    if (layer < 0 || layer >= s->o.n_layers)
        return ms_err_set("expert request for layer %d out of range (0..%d)", layer, s->o.n_layers - 1);
    if (n_rows < 0 || k < 1) return ms_err_set("expert request for layer %d: %lld rows x %d experts", layer,
                                               (long long)n_rows, k);
    int64_t n = n_rows * k;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= s->o.n_experts)
            return ms_err_set("expert id %d out of range (0..%d) in layer %d", ids[i], s->o.n_experts - 1, layer);
    ms_xgroup g;
    if (ms_xgroup_build_scratch(&g, n, (const uint32_t *)ids, s->o.n_experts) != 0) return -1;
    uint32_t *row = ms_scratch_push(sizeof(uint32_t) * (size_t)(n ? n : 1)); /* [n] item (r, j) is row r */
    for (int64_t q = 0; q < n; q++) row[q] = (uint32_t)(q / k);
    int rc = compute_items(s, layer, z, row, &g, slot, out);
    ms_scratch_pop(row);
    ms_xgroup_free(&g);
    return rc;
}

static int xs_compute(void *ctx, int layer, int64_t n_rows, const float *z, int k, const int32_t *ids,
                      float *out)
{
    return xs_compute_placed(ctx, layer, n_rows, z, k, ids, NULL, out);
}


static void xs_begin(void *ctx, int layer, int64_t n_rows, int k, const int32_t *ids)
{
    ms_xstore *s = ctx;
    if (layer < 0 || layer >= s->o.n_layers || n_rows < 0 || k < 1) return; /* compute will say so */
    ms_xgroup g;
    if (ms_xgroup_build_scratch(&g, n_rows * k, (const uint32_t *)ids, s->o.n_experts) != 0) return;
    int ok = 1;
    for (int d = 0; d < g.nd; d++) ok &= s->loc_state[(size_t)layer * (size_t)s->o.n_experts + (size_t)g.dexp[d]] != 0;
    if (ok && g.nd > 0 && s->o.mapped) xs_map_willneed(s, layer, &g);
    else if (ok && g.nd > 0) begin_items(s, layer, &g);
    ms_xgroup_free(&g);
}

static void xs_prefetch(void *ctx, int layer, int64_t n_rows, int k, const int32_t *ids)
{
    ms_xstore *s = ctx;
    if (layer < 0 || layer >= s->o.n_layers || n_rows <= 0 || k < 1) return;
    ms_xgroup g;
    if (ms_xgroup_build_scratch(&g, n_rows * k, (const uint32_t *)ids, s->o.n_experts) != 0) return;
    int ok = 1;
    for (int d = 0; d < g.nd; d++) ok &= s->loc_state[key_of(s, layer, g.dexp[d])] != 0;
    if (ok && s->o.mapped) xs_map_willneed(s, layer, &g);
    else if (ok) ms_xstore_prefetch_items(s, layer, &g);
    ms_xgroup_free(&g);
}

ms_experts ms_xstore_iface(ms_xstore *s)
{
    ms_experts ex = {xs_compute, s, xs_begin, xs_prefetch};
    ex.compute_placed = xs_compute_placed;
    return ex;
}

const uint32_t *ms_xstore_reads_by_expert(const ms_xstore *s) { return s->reads_by_key; }

void ms_xstore_get_stats(ms_xstore *s, ms_xstore_stats *st)
{
    pthread_mutex_lock(&s->mu);
    if (s->o.mapped) {
        xs_map_stats(s, st);
        pthread_mutex_unlock(&s->mu);
        return;
    }
    *st = s->st;
    st->cache_bytes_used = (uint64_t)ms_cpolicy_resident(s->pol) * s->slot_bytes;
    xs_adopt(s, 1);
    st->cache_bytes_grown = (uint64_t)(s->n_alloc > (size_t)s->o.depth ? s->n_alloc - (size_t)s->o.depth : 0) * s->slot_bytes;
    ms_io_stats io;
    ms_io_get_stats(s->io, &io);
    st->read_busy_seconds = io.busy_seconds;
    pthread_mutex_unlock(&s->mu);
}
