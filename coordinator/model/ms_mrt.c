/* ms_mrt: the runtime of a model on disk (plans the RAM budget, reads the pinned trunk, starts the trunk streamer and the on-disk expert store, counts) and the interface calls of ms_model.h it answers or passes to the family. */
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "ms_err.h"
#include "ms_ident.h"
#include "ms_file.h"
#include "ms_mpin.h"
#include "ms_mrt.h"
#include "ms_scratch.h"
#include "ms_proc.h"
#include "ms_progress.h"

#define CHUNK_MAX (16ull << 20) /* trunk ring chunk: big reads run at the disk's full speed */
#define MRT_CACHE_SYNC (32ull << 20) /* expert cache bytes faulted in at load (ms_xstore grow_sync_bytes) */

/* Is ref r used by ms_matmul through a stream (everything but the embedding)? */
static int is_trunk(const ms_model *m, int r) { return r != m->embed_ref; }

static int ref_of(const ms_model *m, const ms_mat *w)
{
    for (int r = 0; r < m->n_refs; r++)
        if (m->refs[r].dst == w) return r;
    return -1;
}

/* The trunk pack to use: opts.trunk_pack, or <model dir>.trunk-pack when it exists. Returns 0
 * with m->tpack set or left NULL (no pack), or -1 with ms_err set. */
static int pack_open(ms_model *m)
{
    const char *dir = m->opts.trunk_pack;
    char auto_dir[4096], path[4200];
    if (dir && strcmp(dir, "none") == 0) return 0;
    if (!dir) {
        if (!m->src.what) return 0;
        size_t l = strlen(m->src.what);
        while (l > 1 && m->src.what[l - 1] == '/') l--;
        snprintf(auto_dir, sizeof auto_dir, "%.*s.trunk-pack", (int)l, m->src.what);
        snprintf(path, sizeof path, "%s/" MS_TPACK_FILE, auto_dir);
        struct stat sb;
        if (stat(path, &sb) != 0) return 0;
    } else {
        snprintf(path, sizeof path, "%s/" MS_TPACK_FILE, dir);
    }
    m->tpack = ms_tpack_open(path);
    return m->tpack ? 0 : -1;
}

static int ref_by_name(const ms_model *m, const char *name)
{
    for (int r = 0; r < m->n_refs; r++)
        if (strcmp(m->refs[r].name, name) == 0) return r;
    return -1;
}

/* Is the pack this model's? Its fingerprint (ms_tpack_fp_*) recomputed from config.json and
 * the full hash of every packed tensor here (ms_ident: read once, then kept in a sidecar), each
 * of which must be a BF16 trunk matrix of the same shape here. */
static int pack_check(ms_model *m)
{
    const char *pp = ms_tpack_path(m->tpack);
    const char *dir = m->src.what ? m->src.what : ".";
    char cpath[4200];
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    size_t clen;
    char *cfg = ms_file_read_all(cpath, "config", 0, 64u << 20, MS_EXIT_MODEL, &clen);
    if (!cfg) return -1;
    uint64_t fp = ms_tpack_fp_begin(cfg, clen);
    free(cfg);
    int n = ms_tpack_count(m->tpack), rc = 0;
    const char **names = ms_malloc(sizeof *names * (size_t)(n ? n : 1));
    uint8_t(*h)[16] = ms_malloc(16 * (size_t)(n ? n : 1));
    for (int i = 0; i < n && rc == 0; i++) {
        const ms_tpack_tensor *t = ms_tpack_at(m->tpack, i);
        int r = ref_by_name(m, t->name);
        const ms_mat *w = r >= 0 ? m->refs[r].dst : NULL;
        if (!w || r == m->embed_ref || w->type != MS_WT_BF16 || w->rows != t->rows || w->cols != t->cols) {
            ms_err_set("trunk pack %s is not for the model %s: its tensor %s [%lld, %lld] is not a BF16 trunk "
                       "matrix of that shape there",
                       pp, m->src.what, t->name, (long long)t->rows, (long long)t->cols);
            rc = ms_err_set_code(MS_EXIT_MODEL);
        }
        names[i] = t->name;
    }
    if (rc == 0) rc = ms_ident_hashes(dir, m->st, names, (size_t)n, h);
    for (int i = 0; i < n && rc == 0; i++) {
        const ms_tpack_tensor *t = ms_tpack_at(m->tpack, i);
        fp = ms_tpack_fp_tensor(fp, t->name, t->rows, t->cols, m->refs[ref_by_name(m, t->name)].bytes, h[i]);
    }
    free(names);
    free(h);
    if (rc == 0 && fp != ms_tpack_fingerprint(m->tpack)) {
        ms_err_set("trunk pack %s is not for the model %s: fingerprint %016llx, the model's is %016llx (packed from "
                   "another checkpoint, or the checkpoint changed since: run moestream pack-trunk again, or pass "
                   "--trunk-pack none)",
                   pp, m->src.what, (unsigned long long)ms_tpack_fingerprint(m->tpack), (unsigned long long)fp);
        rc = ms_err_set_code(MS_EXIT_MODEL);
    }
    return rc;
}

/* Working memory per row of a pass and fixed. The forward pass's scratch is the model's arena,
 * whose size (the family's work_floats) is linear in the rows: its slope and intercept are the
 * planner's per-token and fixed work; the rest are buffers outside it. */
static void work_bytes(const ms_model *m, uint64_t *per_token, uint64_t *fixed)
{
    uint64_t V = (uint64_t)m->info.vocab;
    int all = m->opts.all_logits;
    int64_t seqs = m->opts.max_seqs > 1 ? m->opts.max_seqs : 1;
    /* logits rows of a decoding pass: one per sequence, plus the drafts of the speculation
     * window (shared by the sequences of a pass) */
    int64_t win = ms_model_spec_window(m), outs = seqs + win;
    uint64_t w0 = m->ops->work_floats(m, 0, all ? 0 : outs), w1 = m->ops->work_floats(m, 1, all ? 1 : outs);
    /* + a streamed chunk's output rows (ms_matmul's staging) */
    *per_token = 4 * (w1 - w0) + 4 * 4096;
    uint64_t threads = (uint64_t)ms_pool_size(m->pool);
    /* the arena's fixed part; per sequence its last logits row and a speculative pass's rows;
     * the sampler's candidates (16 B per id); the family's buffers outside the arena */
    *fixed = 4 * w0 + 4 * V * ((uint64_t)seqs + (win ? (uint64_t)outs : 0)) + 16 * V +
             m->ops->fixed_bytes(m, (int)threads, m->opts.max_positions);
    if (m->tpack) { /* the pack's index (block tables); per thread a block and its outputs (in-kernel decoding) */
        *fixed += ms_tpack_mem_bytes(m->tpack);
        uint64_t blk = 0, rows = (uint64_t)(m->opts.max_chunk > 0 ? m->opts.max_chunk : 64) * (uint64_t)seqs + (uint64_t)win;
        for (int i = 0; i < ms_tpack_count(m->tpack); i++) {
            const ms_tpack_tensor *t = ms_tpack_at(m->tpack, i);
            uint64_t b = 2 * (uint64_t)(t->rows_per_block * t->cols) + 4 * rows * (uint64_t)t->rows_per_block;
            if (b > blk) blk = b;
        }
        *fixed += threads * blk;
    }
}

static uint64_t state_bytes(const ms_model *m)
{
    int64_t pos = m->opts.max_positions > 0 ? m->opts.max_positions : 4096;
    int win = ms_model_spec_window(m);
    uint64_t one = m->ops->state_bytes(m, pos, win > 0 ? 1 + win : 0);
    return one * (uint64_t)(m->opts.max_seqs > 1 ? m->opts.max_seqs : 1);
}

/* The plan's per-sequence inputs for m->opts.max_seqs sequences, then the plan. */
static int plan_for(ms_model *m, ms_plan_in *in)
{
    uint64_t per_tok, wfixed;
    work_bytes(m, &per_tok, &wfixed);
    in->state = state_bytes(m);
    in->work_fixed = wfixed;
    /* sequences prefilled together share a span: up to the longest prompt each */
    if (in->max_span > 0 && m->opts.max_span <= 0) in->max_span = in->prompt_tokens * (m->opts.max_seqs > 1 ? m->opts.max_seqs : 1);
    in->work_per_token = per_tok;
    /* a pass holds every decoding sequence's row and the window's drafts */
    in->min_chunk = (m->opts.max_seqs > 1 ? m->opts.max_seqs : 1) + ms_model_spec_window(m);
    return ms_plan_make(in, &m->plan);
}

/* Plan for opts.max_seqs sequences; with opts.fit_seqs, for the largest count up to it that
 * fits. When the asked count does not fit, the error names the largest that does. Sets
 * opts.max_seqs to the count planned. */
static int plan_seqs(ms_model *m, ms_plan_in *in)
{
    int want = m->opts.fit_seqs > 0 ? m->opts.fit_seqs : (m->opts.max_seqs > 1 ? m->opts.max_seqs : 1);
    m->opts.max_seqs = want;
    if (plan_for(m, in) == 0) return 0;
    if (want == 1 || ms_err_code() != MS_EXIT_BUDGET) return -1;
    char first[1024];
    snprintf(first, sizeof first, "%s", ms_err_msg());
    /* Fewer sequences need less state and smaller passes: the largest count that fits. */
    int fits = 0;
    for (int n = want - 1; n >= 1 && !fits; n--) {
        m->opts.max_seqs = n;
        if (plan_for(m, in) == 0) fits = n;
    }
    if (fits && m->opts.fit_seqs > 0) return 0;
    if (!fits) { /* the refusal of the count asked for, with its minimum budget */
        ms_err_set("not even one sequence fits the budget; for %d: %s", want, first);
        return ms_err_set_code(MS_EXIT_BUDGET);
    }
    ms_err_set("%d sequences together do not fit the budget: the largest batch that fits is %d; %s", want, fits, first);
    return ms_err_set_code(MS_EXIT_BUDGET);
}

/* Plan with the speculation window opts.spec_window: when it does not fit, the largest that
 * does is taken (spec_fit) or named in the refusal. Sets opts.spec_window to the window planned. */
static int plan_window(ms_model *m, ms_plan_in *in)
{
    int want = ms_model_spec_window(m), seqs = m->opts.max_seqs;
    if (plan_seqs(m, in) == 0) return 0;
    if (want == 0 || ms_err_code() != MS_EXIT_BUDGET) return -1;
    char first[1024];
    snprintf(first, sizeof first, "%s", ms_err_msg());
    /* A smaller window needs less state and smaller logits buffers: the largest that fits. */
    for (int w = want - 1; w >= 0; w--) {
        m->opts.spec_window = w;
        m->opts.max_seqs = seqs;
        if (plan_seqs(m, in) != 0) continue;
        if (m->opts.spec_fit) return 0;
        ms_err_set("a speculation window of %d draft tokens does not fit the budget: the largest that fits is %d "
                   "(--speculate %d%s); %s",
                   want, w, w, w == 0 ? ", i.e. off" : "", first);
        return ms_err_set_code(MS_EXIT_BUDGET);
    }
    if (m->opts.spec_fit) return -1; /* not even without drafts: that refusal names the least that runs */
    m->opts.spec_window = want;      /* the refusal of the window asked for */
    ms_err_set("%s", first);
    return ms_err_set_code(MS_EXIT_BUDGET);
}

/* The pass scratch of a planned chunk. */
static void reserve_chunk(ms_model *m)
{
    int64_t rows = m->plan.chunk, seqs = m->opts.max_seqs > 1 ? m->opts.max_seqs : 1;
    int64_t outs = seqs + ms_model_spec_window(m);
    int64_t out_rows = m->opts.all_logits ? rows : (outs < rows ? outs : rows);
    ms_arena_reserve(&m->work, m->ops->work_floats(m, rows, out_rows));
}

/* The scratch file's directory (ms_run_opts.scratch_dir) into m->scratch_dir, *ok = 1 when it
 * is on a disk. The default ($TMPDIR, else /tmp) in memory or missing only goes without (logged);
 * a directory asked for that cannot hold one is an error: -1 with ms_err set (MS_EXIT_IO). */
static int scratch_dir_pick(ms_model *m, int *ok)
{
    *ok = 0;
    const char *d = m->opts.scratch_dir;
    if (d && !strcmp(d, "off")) return 0;
    int asked = d && *d;
    if (!asked) d = getenv("TMPDIR");
    if (!d || !*d) d = "/tmp";
    if (!ms_arena_dir_on_disk(d)) {
        if (asked) {
            ms_err_wrap("--scratch-dir");
            return ms_err_set_code(MS_EXIT_IO);
        }
        ms_log(2, "prefill spans keep their scratch in memory only: %s (--scratch-dir names another)", ms_err_msg());
        ms_err_clear();
        return 0;
    }
    free(m->scratch_dir);
    m->scratch_dir = ms_strdup(d);
    *ok = 1;
    return 0;
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
        reserve_chunk(m);
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

int ms_mrt_setup(ms_model *m)
{
    const ms_model_info *c = &m->info;
    int depth = m->opts.io_depth > 0 ? m->opts.io_depth : 8;
    /* The routed experts' format; an error only if experts are read from disk (fp32 test models
     * have other widths). */
    ms_xfmt xf = c->xfmt;
    int have_xf = c->have_xfmt;
    if (pack_open(m) != 0) return -1;
    int npaths = m->src.n_paths;
    m->io_paths = ms_calloc((size_t)npaths + 1, sizeof(char *));
    for (int i = 0; i < npaths; i++) m->io_paths[i] = ms_strdup(m->src.paths[i]);
    if (m->tpack) m->io_paths[npaths] = ms_strdup(ms_tpack_path(m->tpack));
    m->iof = ms_io_files_open((const char *const *)m->io_paths, npaths + (m->tpack ? 1 : 0), !m->opts.buffered);
    if (!m->iof) return -1;
    m->io = ms_io_new(m->iof, depth);
    if (!m->io) return -1;
    /* The pack's check parses the identity sidecar (a few MB for a model of many experts, freed
     * after): a peak that never comes back, so it must not count in the plan's baseline (it
     * would pin less with the pack than without). */
    uint64_t peak_before = ms_proc_peak_rss();
    if (m->tpack && pack_check(m) != 0) return -1;
    malloc_trim(0); /* the freed parse back to the system, or the RSS below counts it by chance */
    uint64_t now = ms_proc_rss(), baseline = peak_before > now ? peak_before : now;
    /* Where streamed blocks are decoded: in the matmul kernel (default) or, with
     * MS_TPACK_DECODE=reader, by the reader threads into the ring (docs/TRUNK-PACK.md). */
    const char *dmode = getenv("MS_TPACK_DECODE");
    int in_kernel = !(dmode && strcmp(dmode, "reader") == 0);

    /* The schedule of trunk matrices (all with file locations): the forward pass's own order. */
    ms_mat **sched = NULL;
    int ns = ms_mrt_schedule(m, &sched);
    uint64_t *sizes = ms_malloc(sizeof(uint64_t) * (size_t)ns);
    uint64_t *packed_sizes = ms_malloc(sizeof(uint64_t) * (size_t)ns); /* what each holds pinned packed */
    uint64_t trunk_total = 0;
    ms_wstream_item *items = ms_malloc(sizeof *items * (size_t)ns);
    int *refidx = ms_malloc(sizeof(int) * (size_t)ns);
    for (int i = 0; i < ns; i++) {
        refidx[i] = ref_of(m, sched[i]);
        MS_ASSERT(refidx[i] >= 0 && is_trunk(m, refidx[i]));
        const ms_wref *r = &m->refs[refidx[i]];
        sizes[i] = packed_sizes[i] = r->bytes;
        trunk_total += r->bytes;
        items[i] = (ms_wstream_item){sched[i], r->name, r->file, r->off, r->bytes / (uint64_t)sched[i]->rows,
                                     sched[i]->rows, NULL, 0, NULL};
        if (m->tpack && sched[i]->type == MS_WT_BF16) {
            items[i].pk = ms_tpack_find(m->tpack, r->name); /* shape checked by pack_check */
            items[i].pk_file = npaths;
            items[i].pk_path = ms_tpack_path(m->tpack);
            items[i].pk_in_kernel = in_kernel;
            if (items[i].pk && in_kernel) packed_sizes[i] = ms_mpin_bytes(items[i].pk);
        }
    }

    /* A small model gets small chunks, so that its ring stays far below its trunk. With a
     * pack, a slot holds a compressed and a decoded chunk: half the chunk keeps the ring's size. */
    uint64_t cmax = m->tpack && !in_kernel ? CHUNK_MAX / 2 : CHUNK_MAX;
    uint64_t chunk_bytes = trunk_total / 64 < cmax ? trunk_total / 64 : cmax;
    if (chunk_bytes < 4096) chunk_bytes = 4096;

    /* Plan. */
    ms_plan_in in = {0};
    in.budget = m->opts.ram_budget ? m->opts.ram_budget : ms_plan_default_budget(100);
    in.baseline = m->opts.baseline ? m->opts.baseline : baseline;
    in.prompt_tokens = m->opts.prompt_tokens > 0 ? m->opts.prompt_tokens : 64;
    in.max_chunk = m->opts.max_chunk > 0 ? m->opts.max_chunk : 64;
    /* Spans: prefill-only passes longer than a chunk, up to the longest prompt, with memory the
     * coordinator's expert cache lends (with workers the cache is in their processes: only the
     * spare and the pins lend; each worker still gets a layer's rows for its experts once, in
     * requests grouped by expert). Per row they need the pass's work and the rows' copy a matmul
     * prepares for its kernel (ms_gemm_prep_x: up to the widest trunk matrix's columns, padded
     * to 16). */
    if (m->opts.max_span >= 0) {
        in.max_span = m->opts.max_span > 0 ? m->opts.max_span : in.prompt_tokens; /* x sequences: plan_for */
        int64_t wide = 0;
        for (int i = 0; i < ns; i++)
            if (sched[i]->cols > wide) wide = sched[i]->cols;
        in.span_extra_per_token = 4 * (uint64_t)((wide + 15) / 16 * 16);
        in.span_pins = 1;
        in.span_forced = m->opts.max_span > 0;
        in.mix_wanted = m->opts.mixed_rows;
        in.expert_read = have_xf ? ms_xfmt_expert_bytes(&xf) : 0;
        in.route_share = c->n_experts > 0 ? (double)c->top_k / (double)c->n_experts : 0;
        in.span_cache_kept = m->opts.remote_experts;
        in.n_layers = c->n_layers;
        in.scratch_forced = m->opts.scratch_forced;
    }
    /* Local workers each need their read buffers and a process of their own; remote workers
     * plan their own memory. */
    int nproc = m->opts.remote_experts ? m->opts.local_workers : 1;
    in.expert_fixed = (uint64_t)nproc * (have_xf ? ms_xstore_fixed_bytes(&xf, depth) : 0);
    if (m->opts.remote_experts) in.expert_fixed += (uint64_t)nproc * MS_PLAN_WORKER_PROCESS;
    /* With only remote workers the coordinator keeps no expert cache: they plan their own. */
    in.expert_bytes = nproc && have_xf ? ms_xstore_slot_bytes(&xf) : 0;
    in.min_cache = (uint64_t)(2 * nproc) * in.expert_bytes; /* at least two experts per process */
    in.max_slots = (uint64_t)(c->n_layers - c->first_moe) * (uint64_t)c->n_experts;
    in.trunk = sizes;
    in.n_trunk = ns;
    in.ring = ms_wstream_ring_bytes(items, ns, chunk_bytes, MS_MRT_RING_SLOTS);
    in.state_cache = m->opts.state_cache;
    if (m->opts.state_cache_seqs > 0) /* + the saved form's own few bytes (position, counts) */
        in.state_cache += (uint64_t)m->opts.state_cache_seqs *
                          (m->ops->state_bytes(m, m->opts.state_cache_positions, 0) + MS_SEQ_SAVE_SLACK);
    int rc = -1;
    if (m->opts.max_span >= 0 && scratch_dir_pick(m, &in.scratch) != 0) goto out;
    if (plan_window(m, &in) != 0) goto out;
    /* When the raw trunk does not fit, pinned matrices stay packed (ms_mpin, decoded in the
     * kernel like the streamed ones): the plan counts what they hold, so the budget pins more
     * and streams less. When it fits, they are kept raw: decoding them every pass would cost
     * compute and save no reads. MS_TPACK_PINS=raw keeps them raw anyway (few cores, a fast
     * disk: decoding every pinned byte each pass can cost more than the reads it saves). */
    int pin_packed = 0;
    const char *pins = getenv("MS_TPACK_PINS");
    if (m->plan.streaming && m->tpack && in_kernel && !(pins && !strcmp(pins, "raw"))) {
        in.trunk = packed_sizes;
        in.span_pins = 0; /* packed pins (ms_mpin) stay: they are small already */
        if (plan_window(m, &in) != 0) goto out;
        pin_packed = 1;
    }
    /* The pack is there to read fewer bytes, but its fixed costs (index, block buffers) can pin
     * less than the raw trunk would: plan without it too, and keep the pack only when it streams
     * fewer bytes a pass (at a tight budget it may not). */
    if (m->tpack && m->plan.streaming) {
        uint64_t with = 0;
        for (int i = m->plan.n_pinned; i < ns; i++) with += items[i].pk ? items[i].pk->data_bytes : sizes[i];
        ms_plan packed = m->plan;
        ms_run_opts saved = m->opts;
        ms_tpack *pack = m->tpack;
        ms_wstream_item *raw = ms_malloc(sizeof *raw * (size_t)ns);
        for (int i = 0; i < ns; i++) raw[i] = items[i], raw[i].pk = NULL;
        ms_plan_in in2 = in;
        in2.trunk = sizes;
        in2.span_pins = m->opts.max_span >= 0;
        in2.ring = ms_wstream_ring_bytes(raw, ns, chunk_bytes, MS_MRT_RING_SLOTS);
        m->tpack = NULL; /* work_bytes counts the pack's costs when it is there */
        int ok = plan_window(m, &in2) == 0;
        if (ok && m->plan.streamed_bytes < with) {
            ms_log(1, "trunk pack %s not used at this budget: without it the plan pins more and streams %.1f MB a pass, "
                   "with it %.1f MB", ms_tpack_path(pack), (double)m->plan.streamed_bytes / 1e6, (double)with / 1e6);
            ms_tpack_close(pack);
            memcpy(items, raw, sizeof *raw * (size_t)ns);
            pin_packed = 0;
        } else {
            m->tpack = pack;
            m->plan = packed;
            m->opts = saved;
        }
        free(raw);
        ms_err_clear();
    }
    m->plan.in.trunk = NULL; /* sizes is freed below */
    m->planned = 1;
    if (m->opts.plan_only) {
        ms_plan_log(&m->plan);
        rc = 0;
        goto out;
    }
    reserve_chunk(m);
    ms_plan_log(&m->plan);

    /* Read the pinned prefix. */
    m->sched = sched;
    m->sched_items = items;
    m->n_sched = ns;
    m->pin_packed = pin_packed;
    m->chunk_bytes = chunk_bytes;
    sched = NULL;
    items = NULL;
    /* Where the plan's cache would hold every routed expert, copying them into it would only put
     * the model in RAM twice (the page cache and the cache) and zero every slot first: they are
     * used in place from the files' mappings instead, and so is the trunk when all of it is
     * pinned, raw (not from a pack) and never lent to a span. */
    uint64_t n_routed = 0;
    for (size_t i = 0; m->xlocs && i < (size_t)c->n_layers * (size_t)c->n_experts; i++) n_routed += m->xlocs[i].len[0] > 0;
    m->mapped = !m->opts.no_mmap && n_routed > 0 && have_xf && m->plan.cache / ms_xstore_slot_bytes(&xf) >= n_routed;
    if (m->mapped && ms_io_files_map_all(m->iof) != 0) {
        ms_log(1, "plan: %s; reading experts into the cache instead", ms_err_msg());
        ms_err_clear();
        m->mapped = 0;
    }
    m->map_trunk = m->mapped && m->plan.n_pinned == ns && !pin_packed;
    if (m->mapped)
        ms_log(1, "plan: the cache would hold every routed expert: they%s are used in place from the checkpoint's "
               "files instead (mapped: the page cache holds them once; --mmap off reads them into the cache)",
               m->map_trunk ? " and the pinned trunk" : "");
    m->pin_buf = ms_calloc((size_t)m->plan.n_pinned + 1, sizeof *m->pin_buf);
    if (ms_mrt_packed_pins(m)) m->mpin = ms_mpin_new(ms_mrt_packed_pins(m), ms_tpack_path(m->tpack));
    if (ms_mrt_pin_read(m) != 0) goto out;
    ms_io_stats ios;
    ms_io_get_stats(m->io, &ios);
    m->load_io_bytes = ios.bytes;
    m->load_bytes += ios.bytes;

    /* Stream the rest. */
    if (m->plan.n_pinned < ns) {
        m->ws = ms_wstream_new(m->io, m->sched_items + m->plan.n_pinned, ns - m->plan.n_pinned, chunk_bytes, MS_MRT_RING_SLOTS);
        for (int i = m->plan.n_pinned; i < ns; i++) {
            m->sched[i]->stream = ms_wstream_iface(m->ws);
            m->sched[i]->key = m->sched[i];
        }
    }

    /* Routed experts on disk. */
    /* grow_bg: the cache's memory is faulted in ahead of need, off the critical path where the
     * grower keeps up (docs/PERFORMANCE.md "The RAM dial"), and never inside a read; its first
     * MRT_CACHE_SYNC bytes at load */
    ms_xstore_opts xo = {.n_layers = c->n_layers,
                         .n_experts = c->n_experts,
                         .fmt = xf,
                         .cache_bytes = m->plan.cache,
                         .depth = depth,
                         .lru = m->opts.lru,
                         .gather_rows = 0,
                         .grow_bg = 1,
                         .grow_sync_bytes = MRT_CACHE_SYNC};
    int any = n_routed > 0;
    xo.mapped = m->mapped;
    if (any && !have_xf) {
        ms_err_set("%s/config.json: %s", m->src.what ? m->src.what : ".", c->why_no_xfmt);
        ms_err_set_code(MS_EXIT_MODEL);
        goto out;
    }
    if (any) {
        m->xs = ms_xstore_new(&xo, m->iof, m->pool);
        if (!m->xs) goto out;
        for (int i = 0; i < c->n_layers; i++)
            for (int e = 0; e < c->n_experts; e++) {
                const ms_xloc *x = &m->xlocs[(size_t)i * (size_t)c->n_experts + (size_t)e];
                if (x->len[0]) ms_xstore_set(m->xs, i, e, x);
            }
        m->experts = ms_xstore_iface(m->xs);
        int direct = 1; /* every file an expert is read from bypasses the page cache */
        for (size_t i = 0; i < (size_t)c->n_layers * (size_t)c->n_experts; i++)
            for (int p = 0; p < MS_XFMT_MAX_PARTS && m->xlocs[i].len[0]; p++)
                if (m->xlocs[i].len[p]) direct &= ms_io_files_direct(m->iof, m->xlocs[i].file[p]) != 0;
        if (m->opts.prefetch == MS_PREFETCH_OFF || (m->opts.prefetch == MS_PREFETCH_AUTO && (!direct || xo.mapped)))
            m->experts.prefetch = NULL;
    }
    rc = 0;
out:
    free(sched);
    free(sizes);
    free(packed_sizes);
    free(items);
    free(refidx);
    return rc;
}

void ms_mrt_release(ms_model *m)
{
    ms_wstream_free(m->span_ws);
    m->span_ws = NULL;
    for (int i = 0; m->pin_buf && i < m->plan.n_pinned; i++) free(m->pin_buf[i]);
    free(m->pin_buf);
    m->pin_buf = NULL;
    free(m->sched);
    m->sched = NULL;
    free(m->sched_items);
    m->sched_items = NULL;
    ms_xstore_free(m->xs);
    m->xs = NULL;
    ms_wstream_free(m->ws);
    m->ws = NULL;
    ms_io_free(m->io);
    m->io = NULL;
    ms_io_files_close(m->iof);
    m->iof = NULL;
    if (m->io_paths)
        for (int i = 0; i <= m->src.n_paths; i++) free(m->io_paths[i]);
    free(m->io_paths);
    m->io_paths = NULL;
    ms_mpin_free(m->mpin); /* borrows the pack's index */
    m->mpin = NULL;
    ms_tpack_close(m->tpack);
    m->tpack = NULL;
    free(m->embed_io);
    m->embed_io = NULL;
    m->embed_io_bytes = 0;
}

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
void ms_model_set_experts(ms_model *m, ms_experts ex) { m->experts = ex; }
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
