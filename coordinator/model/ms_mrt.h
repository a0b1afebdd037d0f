/* ms_mrt: the family-neutral model runtime a family builds on: binding tensors, the plan, pinning, trunk streaming, the expert store, stats. */
#ifndef MS_MRT_H
#define MS_MRT_H

#include "ms_arena.h"
#include "ms_io.h"
#include "ms_err.h"
#include "ms_model.h"
#include "ms_rows.h"
#include "ms_plan.h"
#include "ms_tpack.h"
#include "ms_wstream.h"
#include "ms_xstore.h"

/* For family implementers only (coordinator/<family>/); callers use ms_model.h. A family's
 * model struct starts with an ms_model (its `base`), its sequence struct with an ms_seq, and
 * it fills base.ops. The runtime owns everything below; the family owns its weights' structs
 * (whose ms_mat views the runtime fills when it pins or streams them). */

/* ---- the pass (ms_mrt_pass.c) ---- */

/* One pass as the family's functions see it, filled by the runtime (a family keeps its own
 * state of the pass, e.g. K3's snapshots, in its model: one pass runs at a time). */
typedef struct ms_pass {
    const ms_batch_item *items; /* [n] checked by ms_model_forward_batch; n = 0 traces the schedule */
    int n;
    ms_rows seg[MS_MODEL_MAX_SEQS]; /* item i's rows of the pass: [seg[i].r0, seg[i].r0 + items[i].T) */
    int64_t R, out_rows;        /* rows of the pass; rows whose logits are asked for */
    float *h;                   /* [R][hidden] the residual stream, embedded by the runtime */
    int32_t *route;             /* [R][top_k] the experts a routed layer chose (the observer's) */
    ms_arena *ar;               /* the pass's scratch: what a layer takes is returned after it */
} ms_pass;

/* What a family gives the pass (its ms_model_ops.pass). Scratch comes from p->ar, which the
 * runtime reserved at ms_model_ops.work_floats (that count includes the runtime's h, route,
 * the tail's rows and the logits). */
typedef struct {
    /* Before the first layer (a speculative item's seq->spec_rows already set to its rows):
     * take what the family carries across layers from p->ar (K3's AttnRes snapshots), ready
     * what undoing its rows needs (K3's recurrent-state records). NULL: nothing. */
    void (*pass_begin)(ms_model *m, ms_pass *p);
    /* Layer l over all R rows of p->h, in place, each item's rows against its own sequence's
     * state; a layer that routes writes p->route. With R = 0, every trunk matrix of the layer
     * goes through ms_matmul in its order (the streaming schedule is traced from it). 0, or -1
     * with ms_err set. */
    int (*layer)(ms_model *m, ms_pass *p, int l);
    /* 1 when layer l routes (the route observer is told its p->route). */
    int (*layer_routes)(const ms_model *m, int l);
    /* The LM head's input for row r (the last hidden state, normed) into out[hidden]. */
    void (*tail_row)(ms_model *m, const ms_pass *p, int64_t r, float *out);
    /* The LM head [vocab][hidden]. */
    const ms_mat *(*lm_head)(ms_model *m);
    /* After the last layer, before the tail (e.g. the draft head's input rows kept per
     * sequence); items' seq->pos still the positions before the pass. NULL: nothing. */
    void (*pass_end)(ms_model *m, ms_pass *p);
} ms_pass_ops;

/* What a family does; the runtime calls these. */
typedef struct {
    /* Release the family's own parts (the runtime frees the rest and the struct). */
    void (*free)(ms_model *m);
    /* The family's layers and tail; the runtime runs the pass (ms_mrt_pass_run). */
    const ms_pass_ops *pass;
    ms_seq *(*seq_new)(ms_model *m);
    void (*seq_free)(ms_seq *s);
    void (*seq_keep)(ms_seq *s, int64_t keep);
    ms_seq *(*seq_clone)(const ms_seq *s);
    /* The state of settled s (pos set) as bytes appended to out, and back into a new sequence d
     * (from seq_new, d->pos set): what continuing needs, independent of this run's options
     * (speculation window, capacity). load: 0, or -1 with ms_err set when the bytes do not fit
     * the model (a size that differs), leaving d to be freed. */
    void (*seq_save)(const ms_seq *s, ms_sbuf *out);
    int (*seq_load)(ms_seq *d, ms_reader *in);
    /* Scratch floats of one pass of R rows asking for out_rows logits rows: the one size the
     * pass's arena and the planner use. */
    size_t (*work_floats)(const ms_model *m, int64_t R, int64_t out_rows);
    /* Bytes of one sequence's state at `positions`, with what undoing spec_rows speculative
     * rows needs (0: none), sized by the functions that allocate it. */
    uint64_t (*state_bytes)(const ms_model *m, int64_t positions, int64_t spec_rows);
    /* The draft head (ms_seqs_draft, same contract); NULL: the family has none. */
    int (*seq_draft)(ms_seq *const *s, int k, const int32_t *const *toks, const size_t *n, float *logits, int *ok);
    /* Fixed buffers outside the arena for `threads` workers and sequences of up to `positions`
     * (e.g. attention rows per thread), sized by the functions that allocate them. */
    uint64_t (*fixed_bytes)(const ms_model *m, int threads, int64_t positions);
} ms_model_ops;

/* A trunk matrix with a file location: resident when pinned, else streamed. */
typedef struct {
    ms_mat *dst;        /* the view inside the family's weight structs */
    char *name;         /* tensor name, owned */
    int file;
    uint64_t off;       /* absolute offset of its bytes */
    uint64_t bytes;
    int layer;          /* -1: model level */
} ms_wref;

struct ms_model {
    const ms_model_ops *ops;
    ms_model_info info;
    ms_pool *pool;
    ms_st *st;                 /* when opened from a directory */
    ms_tsrc src;
    ms_run_opts opts;
    int files;                 /* 1: tensors have file locations: plan, pin, stream */
    ms_io_files *iof;          /* the shards, opened for direct reads */
    ms_io *io;                 /* trunk reader pool (pinned loads, ring, embedding rows) */
    ms_wref *refs;             /* [n_refs] trunk matrices with file locations */
    int n_refs, cap_refs;
    ms_mat *embed;             /* the family's embedding [V, E] (rows read one by one when streamed) */
    int embed_ref;             /* index of the embedding in refs, or -1 */
    uint8_t *embed_io;         /* [embed_io_bytes] aligned buffer for reading one row, made at first use */
    size_t embed_io_bytes;
    ms_wstream *ws;            /* streamer of the unpinned trunk, or NULL */
    ms_tpack *tpack;           /* the trunk pack in use, or NULL */
    struct ms_mpin *mpin;      /* the pinned matrices kept packed (decoded in the kernel), or NULL */
    char **io_paths;           /* [n_paths + 1] the shards and the pack, as opened in iof */
    ms_xstore *xs;             /* routed experts on disk, or NULL */
    ms_xloc *xlocs;            /* [N][Ne] expert locations while binding */
    ms_plan plan;
    int planned;
    ms_arena work;             /* the forward pass's scratch (ops->work_floats), one per model */
    int in_span;               /* the last pass: 0 a chunk; 1 longer (work holds its scratch, the
                                  expert cache is lent down to plan.span_cache_slots); 2 a span
                                  that also lent the pinned trunk (plan.span_pins); 3 longer than
                                  plan.span_in_memory: work maps a scratch file (plan.scratch);
                                  4 the same lending the pinned trunk (plan.scratch_pins) */
    char *scratch_dir;         /* owned: the scratch file's directory when plan.in.scratch */
    size_t work_spill;         /* in modes 3 and 4: floats of work past its pass scratch, the spill
                                  region of the pass thread's ms_scratch */
    /* The trunk schedule, kept for spans that lend the pinned trunk (plan.span_pins): */
    ms_mat **sched;            /* [n_sched] the family's matrices in forward order */
    ms_wstream_item *sched_items; /* [n_sched] how each streams */
    int n_sched, pin_packed;   /* pin_packed: pinned matrices are kept packed (ms_mpin) */
    uint64_t chunk_bytes;      /* a ring chunk */
    void **pin_buf;            /* [plan.n_pinned] the pinned matrices' buffers (NULL while lent) */
    ms_wstream *span_ws;       /* the ring over the whole schedule while a span holds the pins */
    ms_wstream_stats span_ws_done; /* what the span rings streamed, summed */
    uint64_t load_bytes;       /* trunk bytes read while opening (the pinned prefix; mapped: what
                                  the page cache lacked) */
    uint64_t load_io_bytes;    /* of those, read by m->io (not mapped) */
    int mapped;                /* 1: routed experts used in place from the files' mappings (the
                                  plan's cache would hold them all; ms_run_opts.no_mmap) */
    int map_trunk;             /* 1: the pinned trunk too (all of it pinned, raw) */
    ms_expert_table *table;    /* routed experts bound in memory */
    ms_experts experts;        /* the provider in use, counting into routes (mrt_experts_set) */
    uint32_t *routes;          /* [(n_layers + draft_layers) * n_experts] rows routed to each expert */
    ms_route_fn route_fn;
    void *route_ctx;
    ms_layer_fn layer_fn;
    void *layer_ctx;
    void **owned;              /* widened vectors and converted matrices */
    size_t n_owned, cap_owned;
    int bind_resident;         /* 1 while binding matrices that are read whole into memory at
                                  once (a draft head's: used outside the pass's schedule) */
    ms_mat draft_lm_head;      /* the LM head as the draft head uses it, between passes: the
                                  pass's own when resident, else streamed through draft_ws */
    ms_wstream *draft_ws;      /* a ring over the LM head alone, or NULL */
    int n_errors;              /* binding problems found so far */
    int bind_io;               /* 1 if one of them was a failed read (exit code MS_EXIT_IO) */
    char errors[1500];
};

struct ms_seq {
    ms_model *m;
    int64_t pos;
    int64_t spec_rows;         /* rows of the last speculative pass not yet settled by ms_seq_keep */
};

/* ---- binding (ms_mbind.c) ---- */

/* Start m (the family's struct, zeroed, base first): ops, the weight source (borrowed; must
 * outlive the model), options (o may be NULL), the thread pool, and the in-memory expert table
 * for info's layers and experts of latent width `latent` computing act with params. Returns 0, or -1 with ms_err set. */
int ms_mrt_init(ms_model *m, const ms_model_ops *ops, const ms_tsrc *src, const ms_run_opts *o, ms_xact act,
                const float *params, int latent);
/* Keep p until the model is freed; returns p. */
void *ms_mrt_own(ms_model *m, void *p);
/* Record a binding problem (the first 8 are reported together by ms_mrt_bind_done). */
void ms_mrt_error(ms_model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Look up name and check its shape (ndim dims; -1 = any). 1 if usable, else 0 and a problem. */
int ms_mrt_get(ms_model *m, const char *name, ms_tview *tv, int ndim, const int64_t *shape);
/* n floats widened from an F32/BF16/F16 tensor (in place when F32 in memory). NULL after a problem. */
const float *ms_mrt_widen(ms_model *m, const char *name, const ms_tview *tv, int64_t n);
/* A vector of n floats of any shape with n elements (shape checked as in ms_mrt_get). */
const float *ms_mrt_vec(ms_model *m, const char *name, int64_t n, int ndim, const int64_t *shape);
/* Bind a dense matrix [rows, cols] into *w: F32/BF16 in a file become trunk refs (pinned or
 * streamed as planned); in memory, used in place; F16 converted to F32. */
void ms_mrt_mat(ms_model *m, ms_mat *w, const char *name, int64_t rows, int64_t cols);
/* Bind routed expert (layer, expert) by the expert format f, whose parts are found with
 * ms_xfam_locate: into the on-disk store (files) or the in-memory table. Returns 1 if bound, 0
 * if the checkpoint has none of its parts (the family may bind another form), -1 after a problem. */
int ms_mrt_expert(ms_model *m, const ms_xfmt *f, int layer, int expert);
/* Set the weights of an expert bound by the family in memory (e.g. dense F32 test experts). */
void ms_mrt_expert_set(ms_model *m, int layer, int expert, const ms_expert_w *w);
/* After binding: the problems in one message (MS_EXIT_MODEL, or MS_EXIT_IO after a failed
 * read), or with files the plan, the pinned reads, the streamer and the expert store
 * (ms_mrt_setup). Returns 0, or -1 with ms_err set (the caller frees the model). */
int ms_mrt_bind_done(ms_model *m);
/* Layer of the refs added since n_refs0 (for messages and the pack). */
void ms_mrt_refs_layer(ms_model *m, int n_refs0, int layer);

/* Every routed expert of `layer` bound by the model's expert format (info.xfmt), a missing one
 * reported by its first part's name; nothing with remote experts; a problem when the widths made
 * no format (info.why_no_xfmt). */
void ms_mrt_bind_experts(ms_model *m, int layer);

/* A weight source over the checkpoint st opened from dir: tensors are read from its files
 * (never mapped). src->paths is malloc'ed: free it, or let the model adopt it. */
void ms_mrt_source(ms_st *st, const char *dir, ms_tsrc *src);
/* After binding m from ms_mrt_source(st, ...): the model owns st and the paths (freed with it). */
void ms_mrt_adopt(ms_model *m, ms_st *st, const ms_tsrc *src);
/* A family's binder over a weight source: cfg is the family's parsed config, f its experts'
 * descriptor as the checkpoint's headers refined it. */
typedef ms_model *(*ms_mrt_bind_fn)(const void *cfg, const ms_tsrc *src, const ms_run_opts *o, const ms_xfmt *f);
/* Open DIR's safetensors (one file, or shards + index), refine f (the experts' descriptor the
 * config makes, of layers from first_moe; NULL: none to refine) from the headers, and bind: the
 * model owns the checkpoint. NULL with ms_err set on failure (nothing left open). */
ms_model *ms_mrt_open_dir(const char *dir, const ms_run_opts *o, ms_xfmt *f, int first_moe, ms_mrt_bind_fn bind,
                          const void *cfg);

/* ---- the pinned trunk (ms_mpins.c) ---- */

#define MS_MRT_RING_SLOTS 8 /* chunks of a trunk ring */

/* Pinned matrices kept packed (in-kernel decoding of a trunk pack). */
int ms_mrt_packed_pins(const ms_model *m);
/* The pinned prefix of the schedule: with m->map_trunk used in place in the files' mappings (all
 * of it asked of the kernel at once, then mapped in; what the page cache lacked is counted in
 * m->load_bytes), else read into fresh aligned buffers (m->pin_buf), all reads in flight
 * together; each matrix pointed at its bytes (or, packed, added to m->mpin). At open, and again
 * after a span that lent them. 0, or -1 with ms_err set naming the tensor. */
int ms_mrt_pin_read(ms_model *m);
/* A span that lends the pinned trunk: its buffers freed, and every trunk matrix streamed for the
 * span through a ring over the whole schedule. */
void ms_mrt_pins_lend(ms_model *m);
/* After such spans: the span ring gone, the unpinned part back on its ring, the pins read again. */
int ms_mrt_pins_restore(ms_model *m);

/* ---- opening (ms_mrt_setup.c) ---- */

/* Plan the budget, read the pinned matrices, start the streamer and the expert store. */
int ms_mrt_setup(ms_model *m);
/* The pass scratch of the planned chunk (m->work). */
void ms_mrt_reserve_chunk(ms_model *m);

/* ---- running (ms_mrt.c) ---- */

/* Row `id` of the embedding as floats into out[E] (read from the file when streamed). */
int ms_mrt_embed_row(ms_model *m, int32_t id, float *out);
/* The index of the LM head's item in items[0, n) (a schedule's), or -1. */
int ms_mrt_head_item(const ms_model *m, const ms_wstream_item *items, int n);
/* The LM head as a draft head uses it between passes: the pass's own while it is resident
 * (pinned, raw or packed), else a view streamed through a ring of its own over the head alone
 * (made at first use; the plan counts its memory when info.draft_layers is set). */
const ms_mat *ms_mrt_draft_lm_head(ms_model *m);
/* 0, or -1 with ms_err set when that ring's read failed (no draft from partial weights). */
int ms_mrt_draft_check(ms_model *m);
/* After layer `layer` of a pass of R rows: the layer observer, if any (the family's pass calls it). */
void ms_mrt_layer_done(ms_model *m, int layer, int64_t R);
/* 0, or -1 with ms_err set if a streamed trunk read failed (no answer from partial weights). */
int ms_mrt_stream_check(ms_model *m);
/* The end of every family's pass: logits lg [out_rows][V] = lm_head x for the rows asked for,
 * checked (a failed trunk read, a non-finite logit: -1 with ms_err set), handed to each item
 * (its T rows or its last) and each sequence advanced by its T. */
int ms_mrt_finish_pass(ms_model *m, const ms_mat *lm_head, const float *x, int64_t out_rows, float *lg,
                       const ms_batch_item *items, int n);
/* The first row of x [R][W] holding a NaN or an infinity, or -1. */
int64_t ms_mrt_nonfinite_row(const float *x, int64_t R, int64_t W);
/* Run the pass (items as ms_model_forward_batch checked them): embedding, each layer, after each
 * a failed trunk read or a non-finite hidden state stops it naming the layer, the route observer
 * and the layer observer; then the tail's rows, the LM head and the logits handed over
 * (ms_mrt_finish_pass). 0, or -1 with ms_err set. */
int ms_mrt_pass_run(ms_model *m, const ms_pass_ops *ops, const ms_batch_item *items, int n);
/* Release everything the runtime holds (the family's free has run). */
void ms_mrt_release(ms_model *m);
/* The trunk matrices in the order a forward pass uses them (a traced pass of zero rows).
 * *out is malloc'ed; returns the count. */
int ms_mrt_schedule(ms_model *m, ms_mat ***out);

/* Make ex the routed-expert provider, its routes counted into m->routes (made here once). */
static inline void mrt_experts_set(ms_model *m, ms_experts ex)
{
    if (!m->routes)
        m->routes = ms_calloc((size_t)(m->info.n_layers + m->info.draft_layers) * (size_t)m->info.n_experts, sizeof *m->routes);
    m->experts = ex;
    m->experts.routes = m->routes;
    m->experts.routes_n = m->info.n_experts;
}

#endif
