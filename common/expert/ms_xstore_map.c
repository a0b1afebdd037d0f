/* ms_xstore_map: the mapped expert store (opts.mapped): experts used in place from read-only mappings of their files. */
#include <stdlib.h>

#include "ms_clock.h"
#include "ms_err.h"
#include "ms_scratch.h"
#include "ms_xstore_int.h"

void xs_parts(ms_xstore *s, size_t key, const uint8_t *buf, const uint8_t *part[XS_PARTS])
{
    if (buf) {
        uint64_t off[XS_PARTS];
        xs_slot_offsets(s, key, off);
        for (int i = 0; i < s->np; i++) part[i] = buf + off[i];
        return;
    }
    const ms_xloc *l = &s->loc[key];
    for (int i = 0; i < s->np; i++) part[i] = ms_io_files_map(s->files, l->file[i], NULL) + l->off[i];
}

/* The parts of expert key lie inside their files as they are now (a file cut short since it was
 * mapped too), which are mapped: 0, or -1 with ms_err set. */
static int parts_check(ms_xstore *s, size_t key)
{
    const ms_xloc *l = &s->loc[key];
    int layer = (int)(key / (size_t)s->o.n_experts), e = (int)(key % (size_t)s->o.n_experts);
    for (int i = 0; i < s->np; i++) {
        uint64_t size = 0, now = 0;
        if (!ms_io_files_map(s->files, l->file[i], &size) || ms_io_files_size(s->files, l->file[i], &now) != 0) {
            ms_err_wrap("layer %d expert %d", layer, e);
            return -1;
        }
        if (now < size) size = now;
        if (l->off[i] > size || l->len[i] > size - l->off[i])
            return ms_err_fail(MS_EXIT_IO, "layer %d expert %d: cannot read %s: bytes %llu..%llu are past its end (%llu bytes; "
                               "the file was cut short?)", layer, e, ms_io_files_path(s->files, l->file[i]),
                               (unsigned long long)l->off[i], (unsigned long long)(l->off[i] + l->len[i]),
                               (unsigned long long)size);
    }
    return 0;
}

/* Bytes of the parts not in the page cache now. */
static uint64_t bytes_absent(ms_xstore *s, const uint8_t *const *part)
{
    uint64_t absent = 0;
    for (int i = 0; i < s->np; i++) absent += ms_io_map_absent(part[i], (size_t)s->part_len[i]);
    return absent;
}

static void advise_parts(ms_xstore *s, const uint8_t *const *part, int populate)
{
    for (int i = 0; i < s->np; i++) {
        if (populate)
            ms_io_map_populate(part[i], (size_t)s->part_len[i]);
        else
            ms_io_map_willneed(part[i], (size_t)s->part_len[i]);
    }
}

int xs_map_call(ms_xstore *s, xs_call *c)
{
    const ms_xgroup *g = c->g;
    size_t NE = (size_t)s->o.n_experts;
    int n_first = 0;
    int *first = ms_scratch_push(sizeof(int) * (size_t)(g->nd + 1)); /* [nd] distinct experts used for the first time */
    for (int d = 0; d < g->nd; d++) {
        size_t key = (size_t)c->layer * NE + (size_t)g->dexp[d];
        if (!s->used[key]) {
            if (parts_check(s, key) != 0) {
                ms_scratch_pop(first);
                return -1;
            }
            first[n_first++] = d;
        }
        c->hit[d] = 1; /* computed in place, as hits are */
    }
    double t0 = ms_now();
    const uint8_t *part[XS_PARTS];
    /* All of them asked for first, so a cold page cache reads them in parallel. */
    for (int i = 0; i < n_first; i++) {
        size_t key = (size_t)c->layer * NE + (size_t)g->dexp[first[i]];
        xs_parts(s, key, NULL, part);
        s->st.bytes_read += bytes_absent(s, part);
        advise_parts(s, part, 0);
    }
    for (int i = 0; i < n_first; i++) {
        size_t key = (size_t)c->layer * NE + (size_t)g->dexp[first[i]];
        xs_parts(s, key, NULL, part);
        advise_parts(s, part, 1);
        if (s->loc[key].has_xxh3) {
            /* Packs carry a checksum: bytes that do not match are never computed. */
            XXH3_64bits_reset(s->xxh);
            for (int p = 0; p < s->np; p++) XXH3_64bits_update(s->xxh, part[p], (size_t)s->part_len[p]);
            uint64_t got = XXH3_64bits_digest(s->xxh), want = s->loc[key].xxh3;
            if (got != want && ms_io_files_map_check(s->files) != 0) { /* zeros of a file cut short */
                s->st.io_wait_seconds += ms_now() - t0;
                ms_err_wrap("layer %d expert %d", c->layer, g->dexp[first[i]]);
                ms_scratch_pop(first);
                return -1;
            }
            if (got != want) {
                const ms_xloc *l = &s->loc[key];
                ms_err_set("layer %d expert %d: checksum mismatch in %s at byte %llu (xxh3 %016llx expected, %016llx read)",
                           c->layer, g->dexp[first[i]], ms_io_files_path(s->files, l->file[0]),
                           (unsigned long long)l->off[0], (unsigned long long)want, (unsigned long long)got);
                ms_err_set_code(MS_EXIT_MODEL);
                s->st.io_wait_seconds += ms_now() - t0;
                ms_scratch_pop(first);
                return -1;
            }
        }
        s->used[key] = 1;
        s->st.misses++;
        s->reads_by_key[key]++;
        s->st.cache_bytes_used += s->E;
    }
    s->st.io_wait_seconds += ms_now() - t0;
    s->st.hits += (uint64_t)(g->nd - n_first);
    if (s->st.cache_bytes_used > s->st.cache_bytes_peak) s->st.cache_bytes_peak = s->st.cache_bytes_used;
    ms_scratch_pop(first);
    xs_compute_hits(s, c);
    /* A file cut short since it was mapped read as zeros: fail as a short read would. */
    if (ms_io_files_map_check(s->files) != 0) return ms_err_wrap("layer %d", c->layer);
    return 0;
}

void xs_map_willneed(ms_xstore *s, int layer, const ms_xgroup *g)
{
    pthread_mutex_lock(&s->mu);
    const uint8_t *part[XS_PARTS];
    for (int d = 0; d < g->nd; d++) {
        size_t key = (size_t)layer * (size_t)s->o.n_experts + (size_t)g->dexp[d];
        if (s->used[key] || !s->loc_state[key] || parts_check(s, key) != 0) continue; /* the call will say so */
        xs_parts(s, key, NULL, part);
        advise_parts(s, part, 0);
    }
    ms_err_clear();
    pthread_mutex_unlock(&s->mu);
}

void xs_map_stats(const ms_xstore *s, ms_xstore_stats *st)
{
    *st = s->st;
    st->cache_bytes_grown = 0;
    st->slots_made_in_calls = 0;
}
