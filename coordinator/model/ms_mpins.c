/* ms_mpins: the runtime's pinned trunk: read into its own buffers, or used in place from the files' mappings, at open; lent to spans and read again after. */
#include <stdlib.h>

#include "ms_err.h"
#include "ms_mpin.h"
#include "ms_mrt.h"
#include "ms_progress.h"

int ms_mrt_packed_pins(const ms_model *m)
{
    int n = 0;
    for (int i = 0; m->pin_packed && i < m->plan.n_pinned; i++) n += m->sched_items[i].pk != NULL;
    return n;
}

/* The pinned trunk of a mapped model (m->map_trunk): each matrix used in place in its file's
 * mapping; all of them asked of the kernel at once, then mapped in (the disk reads what the page
 * cache lacks, counted in m->load_bytes). 0, or -1 with ms_err set naming the tensor and file. */
static int pin_map(ms_model *m)
{
    int np = m->plan.n_pinned;
    const uint8_t **at = ms_calloc((size_t)np + 1, sizeof *at); /* [np] each matrix's bytes */
    for (int i = 0; i < np; i++) {
        const ms_wstream_item *it = &m->sched_items[i];
        uint64_t size = 0, len = it->row_bytes * (uint64_t)it->rows;
        const uint8_t *base = ms_io_files_map(m->iof, it->file, &size);
        if (!base || it->off > size || len > size - it->off) {
            if (base)
                ms_err_fail(MS_EXIT_IO, "%s: bytes %llu..%llu are past its end (%llu bytes; the file was cut short?)",
                            ms_io_files_path(m->iof, it->file), (unsigned long long)it->off,
                            (unsigned long long)(it->off + len), (unsigned long long)size);
            ms_err_wrap("reading tensor %s", it->name);
            free(at);
            return -1;
        }
        at[i] = base + it->off;
        m->load_bytes += ms_io_map_absent(at[i], (size_t)len);
        ms_io_map_willneed(at[i], (size_t)len);
    }
    int shown = m->plan.pinned_bytes >= ((uint64_t)256 << 20) && m->load_bytes >= ((uint64_t)256 << 20);
    if (shown) ms_progress_begin("loading the pinned trunk", m->plan.pinned_bytes, MS_PROGRESS_BYTES);
    for (int i = 0; i < np; i++) {
        size_t len = (size_t)(m->sched_items[i].row_bytes * (uint64_t)m->sched_items[i].rows);
        ms_io_map_populate(at[i], len);
        m->sched[i]->data = at[i];
        m->pin_buf[i] = NULL; /* the file's pages: nothing to free */
        if (shown) ms_progress_add(len);
    }
    if (shown) ms_progress_end();
    free(at);
    return 0;
}

int ms_mrt_pin_read(ms_model *m)
{
    if (m->map_trunk) return pin_map(m);
    int np = m->plan.n_pinned, npaths = m->src.n_paths, bad = 0;
    ms_io_req *reqs = ms_calloc((size_t)np + 1, sizeof *reqs);
    for (int i = 0; i < np; i++) {
        const ms_wstream_item *it = &m->sched_items[i];
        const ms_tpack_tensor *pk = m->pin_packed ? it->pk : NULL;
        reqs[i].file = pk ? npaths : it->file;
        reqs[i].off = pk ? pk->data_off : it->off;
        reqs[i].len = (size_t)(pk ? pk->data_bytes : it->row_bytes * (uint64_t)it->rows);
        /* huge pages, faulted in (and mapped for this process: ms_io_prefault) by the reader
         * just before its read, in parallel with the other reads: with small pages filled by
         * the kernel the first pass paid ~1.4 s a GiB of traps on this VM (PERFORMANCE.md) */
        reqs[i].buf = m->pin_buf[i] = ms_io_alloc(ms_io_span(reqs[i].off, reqs[i].len));
        reqs[i].prefault = 1;
        ms_io_submit(m->io, &reqs[i]);
    }
    /* A large pinned trunk takes a while to read (GBs from an SSD): show it, as prefill is shown. */
    int shown = m->plan.pinned_bytes >= ((uint64_t)256 << 20);
    if (shown) ms_progress_begin("loading the pinned trunk", m->plan.pinned_bytes, MS_PROGRESS_BYTES);
    for (int i = 0; i < np; i++) {
        if (ms_io_wait(m->io, &reqs[i]) != 0 && !bad) {
            bad = 1;
            ms_err_wrap("reading tensor %s", m->sched_items[i].name);
        }
        if (m->pin_packed && m->sched_items[i].pk) {
            /* verified here, while the later reads are still in flight */
            if (!bad && ms_mpin_add(m->mpin, m->sched[i], m->sched_items[i].pk, reqs[i].data, m->sched_items[i].name) != 0)
                bad = 1;
        } else
            m->sched[i]->data = reqs[i].data;
        if (shown) ms_progress_add(reqs[i].len);
    }
    if (shown) ms_progress_end();
    free(reqs);
    return bad ? -1 : 0;
}

void ms_mrt_pins_lend(ms_model *m)
{
    for (int i = 0; i < m->plan.n_pinned; i++) {
        free(m->pin_buf[i]);
        m->pin_buf[i] = NULL;
        m->sched[i]->data = NULL;
    }
    m->span_ws = ms_wstream_new(m->io, m->sched_items, m->n_sched, m->chunk_bytes, MS_MRT_RING_SLOTS);
    for (int i = 0; i < m->n_sched; i++) {
        m->sched[i]->stream = ms_wstream_iface(m->span_ws);
        m->sched[i]->key = m->sched[i];
    }
}

int ms_mrt_pins_restore(ms_model *m)
{
    ms_wstream_stats w;
    ms_wstream_get_stats(m->span_ws, &w);
    m->span_ws_done.bytes_read += w.bytes_read;
    m->span_ws_done.bytes_packed += w.bytes_packed;
    m->span_ws_done.bytes_unpacked += w.bytes_unpacked;
    m->span_ws_done.wait_seconds += w.wait_seconds;
    ms_wstream_free(m->span_ws);
    m->span_ws = NULL;
    for (int i = 0; i < m->n_sched; i++)
        m->sched[i]->stream = i < m->plan.n_pinned ? NULL : ms_wstream_iface(m->ws);
    return ms_mrt_pin_read(m);
}

