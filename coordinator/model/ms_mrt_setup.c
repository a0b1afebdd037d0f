/* ms_mrt_setup: a model's runtime opened in named steps: files and the trunk pack, the schedule, the plan, the pinned trunk and its streamer, the expert store. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "ms_err.h"
#include "ms_fp8.h"
#include "ms_ident.h"
#include "ms_file.h"
#include "ms_mpin.h"
#include "ms_mrt.h"
#include "ms_proc.h"

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

/* The trunk's schedule as setup builds it: the forward pass's order of matrices (all with file
 * locations), each one's bytes raw and as pinned packed, its streaming item; owned by setup
 * until handed to the model. */
typedef struct {
    ms_mat **sched;          /* [ns] */
    uint64_t *sizes;         /* [ns] raw bytes */
    uint64_t *packed_sizes;  /* [ns] what each holds pinned packed */
    ms_wstream_item *items;  /* [ns] */
    int *refidx;             /* [ns] */
    int ns;
    uint64_t total;          /* of sizes */
    uint64_t chunk_bytes;    /* of the ring */
    int in_kernel;           /* pack blocks decoded in the matmul kernel (else by the readers) */
} setup_sched;

static void setup_sched_free(setup_sched *s)
{
    free(s->sched);
    free(s->sizes);
    free(s->packed_sizes);
    free(s->items);
    free(s->refidx);
    memset(s, 0, sizeof *s);
}

/* Step 1: the trunk pack, the checkpoint's files and the reader; *baseline the RSS the plan
 * starts from. 0, or -1 with ms_err set. */
static int open_files(ms_model *m, int depth, uint64_t *baseline)
{
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
    uint64_t now = ms_proc_rss();
    *baseline = peak_before > now ? peak_before : now;
    return 0;
}

/* Step 2: the schedule of trunk matrices, their sizes and streaming items, the ring's chunk. */
static void build_schedule(ms_model *m, setup_sched *s)
{
    int npaths = m->src.n_paths;
    /* Where streamed blocks are decoded: in the matmul kernel (default) or, with
     * MS_TPACK_DECODE=reader, by the reader threads into the ring (docs/TRUNK-PACK.md). */
    const char *dmode = getenv("MS_TPACK_DECODE");
    int in_kernel = s->in_kernel = !(dmode && strcmp(dmode, "reader") == 0);

    /* The schedule of trunk matrices (all with file locations): the forward pass's own order. */
    ms_mat **sched = NULL;
    int ns = s->ns = ms_mrt_schedule(m, &sched);
    s->sched = sched;
    uint64_t *sizes = s->sizes = ms_malloc(sizeof(uint64_t) * (size_t)ns);
    uint64_t *packed_sizes = s->packed_sizes = ms_malloc(sizeof(uint64_t) * (size_t)ns);
    uint64_t trunk_total = 0;
    ms_wstream_item *items = s->items = ms_malloc(sizeof *items * (size_t)ns);
    int *refidx = s->refidx = ms_malloc(sizeof(int) * (size_t)ns);
    for (int i = 0; i < ns; i++) {
        refidx[i] = ref_of(m, sched[i]);
        MS_ASSERT(refidx[i] >= 0 && is_trunk(m, refidx[i]));
        const ms_wref *r = &m->refs[refidx[i]];
        sizes[i] = packed_sizes[i] = r->bytes;
        trunk_total += r->bytes;
        items[i] = (ms_wstream_item){sched[i], r->name, r->file, r->off, r->bytes / (uint64_t)sched[i]->rows,
                                     sched[i]->rows, NULL, 0, NULL, 0, sched[i]->type == MS_WT_FP8 ? MS_FP8_BLOCK : 0};
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
    s->total = trunk_total;
    s->chunk_bytes = trunk_total / 64 < cmax ? trunk_total / 64 : cmax;
    if (s->chunk_bytes < 4096) s->chunk_bytes = 4096;
}

/* Step 3: what the plan is asked (budget, prompt, spans, experts, ring, state cache). */
static void plan_inputs(ms_model *m, const setup_sched *s, uint64_t baseline, int depth, ms_plan_in *in)
{
    const ms_model_info *c = &m->info;
    ms_xfmt xf = c->xfmt;
    int have_xf = c->have_xfmt;
    ms_mat **sched = s->sched;
    int ns = s->ns;
    in->budget = m->opts.ram_budget ? m->opts.ram_budget : ms_plan_default_budget(100);
    in->baseline = m->opts.baseline ? m->opts.baseline : baseline;
    in->prompt_tokens = m->opts.prompt_tokens > 0 ? m->opts.prompt_tokens : 64;
    in->max_chunk = m->opts.max_chunk > 0 ? m->opts.max_chunk : 64;
    /* Spans: prefill-only passes longer than a chunk, up to the longest prompt, with memory the
     * coordinator's expert cache lends (with workers the cache is in their processes: only the
     * spare and the pins lend; each worker still gets a layer's rows for its experts once, in
     * requests grouped by expert). Per row they need the pass's work and the rows' copy a matmul
     * prepares for its kernel (ms_gemm_prep_x: up to the widest trunk matrix's columns, padded
     * to 16). */
    if (m->opts.max_span >= 0) {
        in->max_span = m->opts.max_span > 0 ? m->opts.max_span : in->prompt_tokens; /* x sequences: plan_for */
        int64_t wide = 0;
        for (int i = 0; i < ns; i++)
            if (sched[i]->cols > wide) wide = sched[i]->cols;
        in->span_extra_per_token = 4 * (uint64_t)((wide + 15) / 16 * 16);
        in->span_pins = 1;
        in->span_forced = m->opts.max_span > 0;
        in->mix_wanted = m->opts.mixed_rows;
        in->expert_read = have_xf ? ms_xfmt_expert_bytes(&xf) : 0;
        in->route_share = c->n_experts > 0 ? (double)c->top_k / (double)c->n_experts : 0;
        in->span_cache_kept = m->opts.remote_experts;
        in->n_layers = c->n_layers;
        in->scratch_forced = m->opts.scratch_forced;
    }
    /* Local workers each need their read buffers and a process of their own; remote workers
     * plan their own memory. */
    int nproc = m->opts.remote_experts ? m->opts.local_workers : 1;
    in->expert_fixed = (uint64_t)nproc * (have_xf ? ms_xstore_fixed_bytes(&xf, depth) : 0);
    if (m->opts.remote_experts) in->expert_fixed += (uint64_t)nproc * MS_PLAN_WORKER_PROCESS;
    /* With only remote workers the coordinator keeps no expert cache: they plan their own. */
    in->expert_bytes = nproc && have_xf ? ms_xstore_slot_bytes(&xf) : 0;
    in->min_cache = (uint64_t)(2 * nproc) * in->expert_bytes; /* at least two experts per process */
    in->max_slots = (uint64_t)(c->n_layers + c->draft_layers - c->first_moe) * (uint64_t)c->n_experts;
    in->trunk = s->sizes;
    in->n_trunk = ns;
    in->ring = ms_wstream_ring_bytes(s->items, ns, s->chunk_bytes, MS_MRT_RING_SLOTS);
    int hi = c->draft_layers ? ms_mrt_head_item(m, s->items, ns) : -1;
    if (hi >= 0) /* the draft head's own ring over the LM head, should the plan stream it */
        in->ring += ms_wstream_ring_bytes(&s->items[hi], 1, s->chunk_bytes, MS_MRT_RING_SLOTS);
    in->state_cache = m->opts.state_cache;
    if (m->opts.state_cache_seqs > 0) /* + the saved form's own few bytes (position, counts) */
        in->state_cache += (uint64_t)m->opts.state_cache_seqs *
                          (m->ops->state_bytes(m, m->opts.state_cache_positions, 0) + MS_SEQ_SAVE_SLACK);
}

/* Step 4: the plan: with the speculation window and sequences that fit; pinned matrices packed
 * where the raw trunk does not fit; the trunk pack kept only where it streams fewer bytes. */
static int plan_choose(ms_model *m, setup_sched *s, ms_plan_in *in, int *pin_packed)
{
    int ns = s->ns, in_kernel = s->in_kernel;
    ms_wstream_item *items = s->items;
    uint64_t *sizes = s->sizes;
    if (m->opts.max_span >= 0 && scratch_dir_pick(m, &in->scratch) != 0) return -1;
    if (plan_window(m, in) != 0) return -1;
    /* When the raw trunk does not fit, pinned matrices stay packed (ms_mpin, decoded in the
     * kernel like the streamed ones): the plan counts what they hold, so the budget pins more
     * and streams less. When it fits, they are kept raw: decoding them every pass would cost
     * compute and save no reads. MS_TPACK_PINS=raw keeps them raw anyway (few cores, a fast
     * disk: decoding every pinned byte each pass can cost more than the reads it saves). */
    *pin_packed = 0;
    const char *pins = getenv("MS_TPACK_PINS");
    if (m->plan.streaming && m->tpack && in_kernel && !(pins && !strcmp(pins, "raw"))) {
        in->trunk = s->packed_sizes;
        in->span_pins = 0; /* packed pins (ms_mpin) stay: they are small already */
        if (plan_window(m, in) != 0) return -1;
        *pin_packed = 1;
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
        ms_plan_in in2 = *in;
        in2.trunk = sizes;
        in2.span_pins = m->opts.max_span >= 0;
        in2.ring = ms_wstream_ring_bytes(raw, ns, s->chunk_bytes, MS_MRT_RING_SLOTS);
        m->tpack = NULL; /* work_bytes counts the pack's costs when it is there */
        int ok = plan_window(m, &in2) == 0;
        if (ok && m->plan.streamed_bytes < with) {
            ms_log(1, "trunk pack %s not used at this budget: without it the plan pins more and streams %.1f MB a pass, "
                   "with it %.1f MB", ms_tpack_path(pack), (double)m->plan.streamed_bytes / 1e6, (double)with / 1e6);
            ms_tpack_close(pack);
            memcpy(items, raw, sizeof *raw * (size_t)ns);
            *pin_packed = 0;
        } else {
            m->tpack = pack;
            m->plan = packed;
            m->opts = saved;
        }
        free(raw);
        ms_err_clear();
    }
    m->plan.in.trunk = NULL; /* the sizes are setup's */
    m->planned = 1;
    return 0;
}


/* Step 5: the schedule handed to the model; the trunk pinned (in place where the cache would
 * hold every expert) and the rest streamed through its ring. 0, or -1 with ms_err set. */
static int load_trunk(ms_model *m, setup_sched *s, int pin_packed, uint64_t *n_routed)
{
    const ms_model_info *c = &m->info;
    ms_xfmt xf = c->xfmt;
    int have_xf = c->have_xfmt, ns = s->ns;
    m->sched = s->sched;
    m->sched_items = s->items;
    m->n_sched = ns;
    m->pin_packed = pin_packed;
    m->chunk_bytes = s->chunk_bytes;
    s->sched = NULL;
    s->items = NULL;
    /* Where the plan's cache would hold every routed expert, copying them into it would only put
     * the model in RAM twice (the page cache and the cache) and zero every slot first: they are
     * used in place from the files' mappings instead, and so is the trunk when all of it is
     * pinned, raw (not from a pack) and never lent to a span. */
    *n_routed = 0;
    size_t n_xl = (size_t)(c->n_layers + c->draft_layers);
    for (size_t i = 0; m->xlocs && i < n_xl * (size_t)c->n_experts; i++) *n_routed += m->xlocs[i].len[0] > 0;
    m->mapped = !m->opts.no_mmap && *n_routed > 0 && have_xf && m->plan.cache / ms_xstore_slot_bytes(&xf) >= *n_routed;
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
    if (ms_mrt_pin_read(m) != 0) return -1;
    ms_io_stats ios;
    ms_io_get_stats(m->io, &ios);
    m->load_io_bytes = ios.bytes;
    m->load_bytes += ios.bytes;

    /* Stream the rest. */
    if (m->plan.n_pinned < ns) {
        m->ws = ms_wstream_new(m->io, m->sched_items + m->plan.n_pinned, ns - m->plan.n_pinned, s->chunk_bytes, MS_MRT_RING_SLOTS);
        for (int i = m->plan.n_pinned; i < ns; i++) {
            m->sched[i]->stream = ms_wstream_iface(m->ws);
            m->sched[i]->key = m->sched[i];
        }
    }
    return 0;
}

/* Step 6: the store of routed experts on disk (none when every expert is elsewhere). 0, or -1
 * with ms_err set. */
static int open_experts(ms_model *m, int depth, uint64_t n_routed)
{
    const ms_model_info *c = &m->info;
    ms_xfmt xf = c->xfmt;
    int have_xf = c->have_xfmt;
    /* grow_bg: the cache's memory is faulted in ahead of need, off the critical path where the
     * grower keeps up (docs/PERFORMANCE.md "The RAM dial"), and never inside a read; its first
     * MRT_CACHE_SYNC bytes at load */
    int n_xl = c->n_layers + c->draft_layers; /* a draft head's experts: layer n_layers */
    ms_xstore_opts xo = {.n_layers = n_xl,
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
        return -1;
    }
    if (any) {
        m->xs = ms_xstore_new(&xo, m->iof, m->pool);
        if (!m->xs) return -1;
        for (int i = 0; i < n_xl; i++)
            for (int e = 0; e < c->n_experts; e++) {
                const ms_xloc *x = &m->xlocs[(size_t)i * (size_t)c->n_experts + (size_t)e];
                if (x->len[0]) ms_xstore_set(m->xs, i, e, x);
            }
        mrt_experts_set(m, ms_xstore_iface(m->xs));
        int direct = 1; /* every file an expert is read from bypasses the page cache */
        for (size_t i = 0; i < (size_t)n_xl * (size_t)c->n_experts; i++)
            for (int p = 0; p < MS_XFMT_MAX_PARTS && m->xlocs[i].len[0]; p++)
                if (m->xlocs[i].len[p]) direct &= ms_io_files_direct(m->iof, m->xlocs[i].file[p]) != 0;
        if (m->opts.prefetch == MS_PREFETCH_OFF || (m->opts.prefetch == MS_PREFETCH_AUTO && (!direct || xo.mapped)))
            m->experts.prefetch = NULL; /* (the counting kept: mrt_experts_set) */
    }
    return 0;
}

int ms_mrt_setup(ms_model *m)
{
    int depth = m->opts.io_depth > 0 ? m->opts.io_depth : 8;
    uint64_t baseline = 0, n_routed = 0;
    if (open_files(m, depth, &baseline) != 0) return -1;
    setup_sched s = {0};
    build_schedule(m, &s);
    ms_plan_in in = {0};
    plan_inputs(m, &s, baseline, depth, &in);
    int pin_packed = 0, rc = -1;
    if (plan_choose(m, &s, &in, &pin_packed) != 0) goto out;
    if (m->opts.plan_only) {
        ms_plan_log(&m->plan);
        rc = 0;
        goto out;
    }
    ms_mrt_reserve_chunk(m);
    ms_plan_log(&m->plan);
    if (load_trunk(m, &s, pin_packed, &n_routed) != 0 || open_experts(m, depth, n_routed) != 0) goto out;
    rc = 0;
out:
    setup_sched_free(&s);
    return rc;
}
