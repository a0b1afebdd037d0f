/* ms_mrt: the runtime of a model on disk while it runs (spans' memory, embedding rows, stats, the pass's entry) and the interface calls of ms_model.h it answers or passes to the family; opening it is ms_mrt_setup.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_mpin.h"
#include "ms_mrt.h"
#include "ms_scratch.h"

/* The pass scratch of a planned chunk. */
void ms_mrt_reserve_chunk(ms_model *m)
{
    int64_t rows = m->plan.chunk, seqs = m->opts.max_seqs > 1 ? m->opts.max_seqs : 1;
    int64_t outs = seqs + ms_model_spec_window(m);
    int64_t out_rows = m->opts.all_logits ? rows : (outs < rows ? outs : rows);
    ms_arena_reserve(&m->work, m->ops->work_floats(m, rows, out_rows));
}
/* Mode 3: m->work maps a scratch file holding the pass's work (work_floats(R, out_rows)) and,
 * past it, the spill region the pass thread's matmul copies of its rows go to (the plan's
 * span_extra_per_token a row). Made again only when a pass needs more than it holds. */
static int scratch_reserve(ms_model *m, int64_t R, int64_t out_rows)
{
    size_t work = m->ops->work_floats(m, R, out_rows);
    work = (work + 15) / 16 * 16; /* the spill region 64-byte aligned */
    size_t spill = (size_t)((m->plan.in.span_extra_per_token * (uint64_t)R) / 4) + (1u << 16);
    if (m->in_span >= 3 && m->work.cap >= work + spill && m->work.cap - m->work_spill >= work) return 0;
    if (ms_arena_reserve_file(&m->work, work + spill, m->scratch_dir) != 0) {
        ms_err_wrap("a prefill span of %lld rows", (long long)R);
        return -1;
    }
    m->work_spill = m->work.cap - work;
    return 0;
}

/* Before a pass of R rows: a longer pass than the chunk borrows the expert cache's memory for
 * its scratch (which the family's pass then reserves), and a prefill-only span (!decode) with
 * plan.span_pins too long to fit beside the pins (plan.span_keeping_pins) the pinned trunk's too; the first shorter pass gives them back (and a pass with
 * decoding rows the pins). The scratch is freed in between, so the two never coexist. 0, or -1
 * with ms_err set (the pins could not be read again). */
static int span_switch(ms_model *m, int64_t R, int64_t out_rows, int decode)
{
    if (!m->planned) return 0;
    int file = m->plan.scratch && !decode && R > m->plan.span_in_memory;
    int mode = R <= m->plan.chunk                                                                ? 0
               : file ? (m->plan.scratch_pins && !m->map_trunk ? 4 : 3)
               : m->plan.span_pins && !m->map_trunk && !decode && R > m->plan.span_keeping_pins ? 2
                                                                                              : 1;
    if (mode >= 3 && m->in_span == mode) return scratch_reserve(m, R, out_rows);
    if (mode == m->in_span) return 0;
    int rc = 0, lent = m->in_span == 2 || m->in_span == 4, lend = mode == 2 || mode == 4;
    ms_arena_free(&m->work);
    m->work_spill = 0;
    if (lent && !lend) rc = ms_mrt_pins_restore(m);
    if (mode == 0) {
        ms_mrt_reserve_chunk(m);
        if (m->xs) ms_xstore_unlend(m->xs);
    }
    if (mode > 0 && m->in_span == 0 && m->xs) ms_xstore_lend(m->xs, (size_t)m->plan.span_cache_slots);
    if (lend && !lent) ms_mrt_pins_lend(m);
    m->in_span = mode == 3 ? 1 : mode == 4 ? 2 : mode;
    if (mode >= 3 && rc == 0) {
        if (scratch_reserve(m, R, out_rows) != 0) return -1; /* in memory until then: the next pass may fit */
        m->in_span = mode;
    }
    return rc;
}

/* free_fn(p), then p = NULL: released twice, a member is freed once. */
#define RELEASE(free_fn, p) ((free_fn)(p), (p) = NULL)

void ms_mrt_release(ms_model *m)
{
    RELEASE(ms_wstream_free, m->span_ws);
    for (int i = 0; m->pin_buf && i < m->plan.n_pinned; i++) free(m->pin_buf[i]);
    RELEASE(free, m->pin_buf);
    RELEASE(free, m->sched);
    RELEASE(free, m->sched_items);
    RELEASE(ms_xstore_free, m->xs);
    free(m->routes);
    m->routes = NULL;
    RELEASE(ms_wstream_free, m->ws);
    RELEASE(ms_wstream_free, m->draft_ws);
    RELEASE(ms_io_free, m->io);
    RELEASE(ms_io_files_close, m->iof);
    if (m->io_paths)
        for (int i = 0; i <= m->src.n_paths; i++) free(m->io_paths[i]);
    RELEASE(free, m->io_paths);
    RELEASE(ms_mpin_free, m->mpin); /* borrows the pack's index */
    RELEASE(ms_tpack_close, m->tpack);
    RELEASE(free, m->embed_io);
    m->embed_io_bytes = 0;
}
#undef RELEASE

int ms_mrt_head_item(const ms_model *m, const ms_wstream_item *items, int n)
{
    const ms_mat *hd = m->ops->pass->lm_head((ms_model *)m);
    for (int i = 0; i < n; i++)
        if (items[i].key == hd) return i;
    return -1;
}

const ms_mat *ms_mrt_draft_lm_head(ms_model *m)
{
    const ms_mat *hd = m->ops->pass->lm_head(m);
    if (hd->data || !hd->stream || hd->stream->resident) return hd; /* pinned (raw or packed) now */
    if (!m->draft_ws) {
        int i = ms_mrt_head_item(m, m->sched_items, m->n_sched);
        MS_ASSERT(i >= 0);
        ms_wstream_item it = m->sched_items[i];
        it.key = &m->draft_lm_head;
        m->draft_lm_head = *hd;
        m->draft_ws = ms_wstream_new(m->io, &it, 1, m->chunk_bytes, MS_MRT_RING_SLOTS);
        m->draft_lm_head.stream = ms_wstream_iface(m->draft_ws);
        m->draft_lm_head.key = &m->draft_lm_head;
    }
    return &m->draft_lm_head;
}

int ms_mrt_draft_check(ms_model *m) { return m->draft_ws ? ms_wstream_check(m->draft_ws) : 0; }

int ms_mrt_embed_row(ms_model *m, int32_t id, float *out)
{
    if (m->embed->data) {
        ms_mat_row_f32(m->embed, id, out);
        return 0;
    }
    const ms_wref *r = &m->refs[m->embed_ref];
    uint64_t rb = r->bytes / (uint64_t)m->embed->rows;
    ms_io_req q = {.file = r->file, .off = r->off + (uint64_t)id * rb, .len = (size_t)rb};
    size_t span = ms_io_span(q.off, q.len); /* rows start anywhere: the span varies by a block */
    if (span > m->embed_io_bytes) {
        free(m->embed_io);
        m->embed_io_bytes = ms_io_span(MS_IO_ALIGN - 1, (size_t)rb); /* the most a row's span can be */
        m->embed_io = ms_io_alloc(m->embed_io_bytes);
    }
    q.buf = m->embed_io;
    ms_io_submit(m->io, &q);
    int rc = ms_io_wait(m->io, &q);
    if (rc == 0) {
        ms_mat row = {m->embed->type, 1, m->embed->cols, q.data, NULL, NULL, NULL};
        ms_mat_row_f32(&row, 0, out);
    } else {
        ms_err_wrap("reading row %d of %s", id, r->name);
    }
    return rc;
}

void ms_model_get_stats(ms_model *m, ms_model_stats *st)
{
    memset(st, 0, sizeof *st);
    st->experts_mapped = m->mapped;
    st->trunk_mapped = m->map_trunk;
    if (m->xs) {
        ms_xstore_stats x;
        ms_xstore_get_stats(m->xs, &x);
        st->bytes_read_experts = x.bytes_read;
        st->expert_requests = x.requests;
        st->expert_cache_hits = x.hits;
        st->expert_cache_misses = x.misses;
        st->expert_cache_evictions = x.evictions;
        st->expert_cache_bytes = x.cache_bytes_used;
        st->expert_cache_peak_bytes = x.cache_bytes_peak;
        st->expert_cache_capacity = m->plan.cache;
        st->expert_cache_buffers_made_in_steps = x.slots_made_in_calls;
        st->expert_bytes = ms_xfmt_expert_bytes(ms_xstore_fmt(m->xs));
        st->expert_prefetched = x.prefetched;
        st->expert_prefetch_used = x.prefetch_used;
        st->io_wait_seconds += x.io_wait_seconds;
        st->read_busy_seconds = x.read_busy_seconds;
    }
    ms_wstream_stats w = m->span_ws_done, v = {0}; /* the main ring's, finished span rings' and the open one's */
    if (m->ws) ms_wstream_get_stats(m->ws, &v);
    w.bytes_read += v.bytes_read, w.bytes_packed += v.bytes_packed, w.bytes_unpacked += v.bytes_unpacked;
    w.wait_seconds += v.wait_seconds;
    if (m->span_ws) ms_wstream_get_stats(m->span_ws, &v);
    if (m->span_ws) w.bytes_read += v.bytes_read, w.bytes_packed += v.bytes_packed, w.bytes_unpacked += v.bytes_unpacked;
    if (m->span_ws) w.wait_seconds += v.wait_seconds;
    if (m->draft_ws) ms_wstream_get_stats(m->draft_ws, &v);
    if (m->draft_ws) w.bytes_read += v.bytes_read, w.bytes_packed += v.bytes_packed, w.bytes_unpacked += v.bytes_unpacked;
    if (m->draft_ws) w.wait_seconds += v.wait_seconds;
    st->io_wait_seconds += w.wait_seconds;
    st->trunk_bytes_streamed = w.bytes_read;
    st->trunk_pack_read = w.bytes_packed;
    st->trunk_pack_decoded = w.bytes_unpacked;
    if (m->io) {
        ms_io_stats s;
        ms_io_get_stats(m->io, &s);
        /* streamed chunks and embedding rows; the pinned prefix read at open is counted apart */
        st->bytes_read_trunk = s.bytes - m->load_io_bytes;
        st->bytes_read_at_load = m->load_bytes;
    }
}

int ms_mrt_stream_check(ms_model *m)
{
    return ms_mpin_check(m->mpin) != 0 || ms_wstream_check(m->ws) != 0 || ms_wstream_check(m->span_ws) != 0 ||
                   (m->mapped && ms_io_files_map_check(m->iof) != 0)
               ? -1
               : 0;
}

int64_t ms_mrt_nonfinite_row(const float *x, int64_t R, int64_t W)
{
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < W; j++)
            if (!isfinite(x[r * W + j])) return r;
    return -1;
}

int ms_mrt_finish_pass(ms_model *m, const ms_mat *lm_head, const float *x, int64_t out_rows, float *lg,
                       const ms_batch_item *items, int n)
{
    int64_t V = m->info.vocab;
    ms_matmul(lm_head, x, out_rows, lg, m->pool);
    if (ms_mrt_stream_check(m) != 0) return -1;
    int64_t bad = ms_mrt_nonfinite_row(lg, out_rows, V);
    if (bad >= 0) {
        ms_err_set("the LM head produced a non-finite logit (logits row %lld of the pass); the weights are corrupt",
                   (long long)bad);
        return -1;
    }
    int64_t o = 0;
    for (int i = 0; i < n; i++) {
        int64_t nr = items[i].all_rows ? items[i].T : 1;
        memcpy(items[i].logits, lg + o * V, sizeof(float) * (size_t)(nr * V));
        o += nr;
        items[i].seq->pos += items[i].T;
    }
    return 0;
}

int ms_mrt_schedule(ms_model *m, ms_mat ***out)
{
    ms_mat_trace tr = {0};
    ms_mat_trace_begin(&tr);
    int rc = ms_mrt_pass_run(m, m->ops->pass, NULL, 0);
    ms_mat_trace_end();
    MS_ASSERT(rc == 0);
    *out = (ms_mat **)tr.mats; /* the family's own matrices: the runtime may set their data and stream */
    return tr.n;
}

/* ---- the interface (ms_model.h) ---- */

void ms_model_free(ms_model *m)
{
    if (!m) return;
    if (m->ops && m->ops->free) m->ops->free(m);
    ms_mrt_release(m);
    for (size_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    for (int i = 0; i < m->n_refs; i++) free(m->refs[i].name);
    free(m->refs);
    free(m->xlocs);
    ms_expert_table_free(m->table);
    ms_arena_free(&m->work);
    free(m->scratch_dir);
    ms_pool_free(m->pool);
    if (m->st) free((void *)m->src.paths);
    ms_st_close(m->st);
    free(m);
}

const ms_model_info *ms_model_get_info(const ms_model *m) { return &m->info; }
uint64_t ms_model_saved_state_max(const ms_model *m, int64_t positions)
{
    return m->ops->state_bytes(m, positions, 0) + MS_SEQ_SAVE_SLACK;
}
const ms_plan *ms_model_plan(const ms_model *m) { return m->planned ? &m->plan : NULL; }
int64_t ms_model_chunk(const ms_model *m) { return m->planned ? m->plan.chunk : 64; }
int64_t ms_model_span(const ms_model *m) { return m->planned ? m->plan.span : 64; }
int64_t ms_model_mix_rows(const ms_model *m) { return m->planned ? m->plan.mix : ms_model_chunk(m); }
int ms_model_max_seqs(const ms_model *m)
{
    if (!m->planned && m->opts.fit_seqs > 0) return m->opts.fit_seqs;
    return m->opts.max_seqs > 1 ? m->opts.max_seqs : 1;
}
int ms_model_spec_window(const ms_model *m) { return m->opts.spec_window > 0 ? m->opts.spec_window : 0; }
ms_pool *ms_model_pool(ms_model *m) { return m->pool; }
void ms_model_set_experts(ms_model *m, ms_experts ex) { mrt_experts_set(m, ex); }

const uint32_t *ms_model_expert_routes(const ms_model *m) { return m->routes; }
const uint32_t *ms_model_expert_reads(const ms_model *m) { return m->xs ? ms_xstore_reads_by_expert(m->xs) : NULL; }
ms_experts ms_model_experts(ms_model *m) { return m->experts; }
ms_experts ms_model_local_experts(ms_model *m) { return ms_expert_table_iface(m->table); }

void ms_model_set_layer_observer(ms_model *m, ms_layer_fn fn, void *ctx)
{
    m->layer_fn = fn;
    m->layer_ctx = ctx;
}

void ms_model_get_layer_observer(const ms_model *m, ms_layer_fn *fn, void **ctx)
{
    *fn = m->layer_fn;
    *ctx = m->layer_ctx;
}

void ms_mrt_layer_done(ms_model *m, int layer, int64_t R)
{
    if (m->layer_fn && R > 0) m->layer_fn(m->layer_ctx, layer, m->info.n_layers, R);
}

void ms_model_set_route_observer(ms_model *m, ms_route_fn fn, void *ctx)
{
    m->route_fn = fn;
    m->route_ctx = ctx;
}

int ms_model_forward_batch(ms_model *m, const ms_batch_item *items, int n)
{
    MS_ASSERT(n >= 0 && n <= MS_MODEL_MAX_SEQS);
    for (int i = 0; i < n; i++) {
        MS_ASSERT(items[i].T >= 1 && items[i].seq && items[i].seq->m == m && items[i].seq->spec_rows == 0);
        for (int j = 0; j < i; j++) MS_ASSERT(items[j].seq != items[i].seq);
        for (int64_t t = 0; t < items[i].T; t++)
            if (items[i].ids[t] < 0 || items[i].ids[t] >= m->info.vocab) {
                ms_err_set("token id %d at position %lld is outside the vocabulary (0..%lld)", items[i].ids[t],
                           (long long)(items[i].seq->pos + t), (long long)(m->info.vocab - 1));
                ms_err_set_code(MS_EXIT_INPUT);
                return -1;
            }
    }
    int64_t R = 0, out_rows = 0;
    int decode = 0;
    for (int i = 0; i < n; i++) R += items[i].T, out_rows += items[i].all_rows ? items[i].T : 1, decode |= items[i].decode;
    if (span_switch(m, R, out_rows, decode) != 0) return -1;
    if (m->in_span < 3) return ms_mrt_pass_run(m, m->ops->pass, items, n);
    /* The rows' matmul copies go to the file too (the pass thread's big scratch pieces). */
    ms_scratch_spill_set(m->work.base + (m->work.cap - m->work_spill), sizeof(float) * m->work_spill);
    int rc = ms_mrt_pass_run(m, m->ops->pass, items, n);
    ms_scratch_spill_set(NULL, 0);
    return rc;
}

int ms_model_forward(ms_model *m, ms_seq *s, const int32_t *ids, int64_t T, int all_rows, float *logits)
{
    ms_batch_item it = {s, ids, T, all_rows, logits};
    return ms_model_forward_batch(m, &it, 1);
}
