/* ms_model: the model-family interface: an opened model of any family, its sequences and its batched forward pass. */
#ifndef MS_MODEL_H
#define MS_MODEL_H

#include <stdint.h>

#include "ms_expert.h"
#include "ms_plan.h"
#include "ms_sbuf.h"
#include "ms_pool.h"
#include "ms_st.h"

/* The engine, scheduler, CLI, server and planner see a model only through this header: a
 * family (coordinator/k3/, ...) implements it on the runtime of ms_mrt.h, and the registry
 * (coordinator/families/) opens a checkpoint with the family its config.json names. */

/* Most sequences one batched pass can carry. */
#define MS_MODEL_MAX_SEQS 256

/* A tensor as a weight source presents it: borrowed data, valid while the source lives. */
typedef struct {
    ms_dtype dtype;
    int ndim;
    int64_t shape[MS_ST_MAX_DIMS];
    const void *data;   /* in-memory bytes, or NULL for a tensor in a file (read at binding) */
    const char *file;   /* where it lives, for messages */
    int fidx;           /* file index for direct reads (ms_tsrc.paths), or -1 if memory only */
    uint64_t foff;      /* absolute byte offset in that file */
} ms_tview;

/* Where weights come from, by released tensor name (spec §4.3). find returns 1 and fills *out
 * if the tensor exists, else 0. */
typedef struct {
    int (*find)(void *ctx, const char *name, ms_tview *out);
    void *ctx;
    const char *what;          /* e.g. the checkpoint directory, for messages */
    const char *const *paths;  /* files that fidx indexes (NULL: every tensor is in memory) */
    int n_paths;
} ms_tsrc;

typedef struct ms_model ms_model;
typedef struct ms_seq ms_seq;

/* What a caller may know of a model without knowing its family. */
typedef struct {
    const char *family;        /* "kimi-k3" */
    int vocab;                 /* V: logits per row */
    int hidden;                /* E */
    int n_layers;
    int first_moe;             /* layers [first_moe, n_layers) route to experts */
    int n_experts;             /* routed experts per MoE layer */
    int top_k;                 /* experts per token */
    int bos_id, eos_id;        /* -1 when the config names none */
    int have_xfmt;             /* 1: the routed experts have a streamable format, xfmt */
    ms_xfmt xfmt;
    char why_no_xfmt[256];     /* when have_xfmt is 0: why (e.g. widths not multiples of 32) */
    uint64_t state_bytes;      /* one sequence's state at the run's max_positions (4096 if unset),
                                  with what undoing its speculative rows needs */
    uint64_t scratch_row_bytes;/* the forward pass's scratch per row */
    int64_t max_context;       /* positions a sequence may reach; 0: no limit of the family's own */
    int draft_layers;          /* 1: a draft head is bound (ms_seq_draft) whose routed experts are
                                  the store's layer n_layers; 0: none */
} ms_model_info;

/* ms_run_opts.prefetch. Why auto: a read from the page cache is a copy on the computing cores,
 * so a wrong prediction costs compute (measured on the `small` model in RAM: 13% slower); an
 * O_DIRECT read costs the disk's time, which predictions use while it would idle. */
enum { MS_PREFETCH_AUTO = 0, MS_PREFETCH_ON = 1, MS_PREFETCH_OFF = 2 };

/* How to run: memory budget and I/O. Zero-initialised means: budget = the memory available
 * now, O_DIRECT reads, 8 reads in flight, prefill chunks of up to 64 tokens. */
typedef struct {
    int n_threads;           /* <= 0: one per CPU */
    uint64_t ram_budget;     /* peak RSS allowed for the run; 0 = MemAvailable */
    int buffered;            /* 1: buffered reads instead of O_DIRECT */
    int no_mmap;             /* 1: routed experts are always read into the expert cache; 0: where
                                the plan's cache holds every one of them, they are used in place
                                from read-only mappings of the checkpoint instead (ms_xstore
                                mapped: the model in RAM once, as the page cache) */
    int io_depth;            /* reads in flight (0 = 8) */
    int64_t prompt_tokens;   /* tokens the run will prefill (planning) */
    int64_t max_positions;   /* prompt + generated tokens of one sequence (KV cache planning) */
    int max_seqs;            /* sequences alive at once, each with its state (0 = 1); a count
                                that does not fit is refused naming the largest that does */
    int fit_seqs;            /* > 0: plan for the largest count of sequences up to fit_seqs that
                                fits the budget instead (ms_model_max_seqs says which) */
    int64_t max_chunk;       /* largest prefill chunk (0 = 64) */
    int64_t max_span;        /* largest prefill span, a pass of prefilling sequences only that runs
                                layer by layer over more rows than a chunk with memory the expert
                                cache lends (0: as long as prompt_tokens and the budget allow;
                                < 0: none, every pass is a chunk) */
    int64_t mixed_rows;      /* rows of a pass that prefills while other sequences decode, with
                                spans (ms_model_mix_rows): 0 the chunk; -1 auto, those touching
                                9/10 of a layer's experts; N up to N; both no more than memory
                                allows keeping the pins */
    const char *scratch_dir; /* a directory on disk where a prefill span whose scratch memory
                                cannot hold may keep it in a file (ms_plan: when that reads
                                fewer bytes than spans in memory and the file is at most
                                MS_PLAN_SCRATCH_RATIO times its window); NULL: $TMPDIR, else
                                /tmp (not used, logged, when in memory); "off": never; one asked
                                for in memory (tmpfs) is refused (MS_EXIT_IO) */
    int scratch_forced;      /* 1: the file whenever memory cannot hold the longest span (tests) */
    int all_logits;          /* logits of every prefill row will be asked for */
    int lru;                 /* plain LRU expert cache (benchmarks) */
    int prefetch;            /* predicted-routing reads of routed experts (--expert-prefetch): MS_PREFETCH_AUTO
                                (0: on when every expert read bypasses the page cache, O_DIRECT), _ON, _OFF */
    int spec_window;         /* draft tokens a decoding sequence may verify per pass (each pass
                                then carries up to 1 + spec_window rows per sequence, and each
                                sequence keeps what undoing rejected rows needs); 0 = none */
    int spec_fit;            /* 1: plan for the largest window up to spec_window that fits
                                (ms_model_spec_window says which) instead of refusing */
    int draft_head;          /* 1: bind the checkpoint's draft head when it has one (DeepSeek-V3's
                                MTP layer: ms_seq_draft), its matrices resident and its routed
                                experts in the store; 0: never read it */
    uint64_t baseline;       /* planner's resident baseline; 0 = measure this process (tests
                                set it to make plans independent of the allocator's state) */
    int remote_experts;      /* routed experts come from workers: not bound here (the checkpoint
                                may hold only the trunk); set them with ms_model_set_experts */
    int local_workers;       /* workers this run will start on this box: the plan reserves their
                                fixed costs, and its expert cache is theirs to share */
    int plan_only;           /* 1: open, bind and plan (ms_model_plan), then stop: nothing is read
                                or reserved for passes, so the model cannot run a forward pass
                                (what a budget would do, e.g. one larger than this machine's RAM) */
    uint64_t state_cache;    /* bytes of saved sequence states kept in RAM (a prefix cache): the
                                plan reserves them among the fixed costs; 0: none */
    int state_cache_seqs;    /* and room for this many more saved states (jobs' shared prompt
                                beginnings), each of state_cache_positions positions: the plan
                                adds what the family's state of that length takes (ms_model_plan's
                                in.state_cache is the total) */
    int64_t state_cache_positions;
    const char *trunk_pack;  /* directory of a trunk pack (moestream pack-trunk) to stream the
                                trunk from; NULL: <model dir>.trunk-pack when it exists; "none":
                                never. A pack of another model or with a corrupt block is refused
                                (MS_EXIT_MODEL) naming the pack, tensor and block. */
} ms_run_opts;

/* Opening is the family's (ms_families_open picks it from config.json): it binds every tensor
 * the config implies, checking presence, dtype and shape, plans the memory budget, reads the
 * pinned trunk and sets up streaming and the expert store; NULL with ms_err set (class
 * MS_EXIT_MODEL, MS_EXIT_IO or MS_EXIT_BUDGET) on failure. */

void ms_model_free(ms_model *m); /* accepts NULL */

/* What the model is (borrowed, valid while m lives). */
const ms_model_info *ms_model_get_info(const ms_model *m);
/* The memory plan, or NULL when the model runs from memory (no files). */
const ms_plan *ms_model_plan(const ms_model *m);
/* Sequences the plan counts (run options' max_seqs, or what fit_seqs found). */
int ms_model_max_seqs(const ms_model *m);
/* Draft tokens per pass the plan counts (run options' spec_window, or what spec_fit found). */
int ms_model_spec_window(const ms_model *m);
/* Largest prefill chunk the plan allows (rows of any pass, e.g. one that also decodes). */
int64_t ms_model_chunk(const ms_model *m);
/* Largest prefill span (>= the chunk): rows of a pass whose items all prefill. Such a pass runs
 * layer by layer over all its rows like any pass, so each trunk matrix and each routed expert
 * a layer needs is read once for all of them; a pass longer than the chunk borrows its working
 * memory from the expert cache (ms_xstore_lend), given back at the next shorter pass. */
int64_t ms_model_span(const ms_model *m);
/* Rows of a pass that prefills beside decoding sequences (chunk <= mix <= span): up to the rows
 * that touch nine tenths of a layer's experts, its scratch borrowed from the expert cache as a
 * span's is, never from the pinned trunk (plan.mix). */
int64_t ms_model_mix_rows(const ms_model *m);

/* Streaming and cache counters since open. */
typedef struct {
    uint64_t bytes_read_experts, bytes_read_trunk; /* during forward passes */
    uint64_t bytes_read_at_load;                   /* the pinned trunk, read at open */
    uint64_t trunk_bytes_streamed;                 /* streamed trunk bytes the passes consumed (reads
                                                      done ahead for the next pass not counted) */
    uint64_t trunk_pack_read, trunk_pack_decoded;  /* of those, bytes read from a trunk pack and the
                                                      BF16 bytes they decoded to */
    uint64_t expert_requests, expert_cache_hits, expert_cache_misses, expert_cache_evictions;
    uint64_t expert_cache_bytes, expert_cache_peak_bytes, expert_cache_capacity;
    uint64_t expert_cache_buffers_made_in_steps; /* cache buffers a step faulted in itself (the
                                                    background grower had not made them yet) */
    uint64_t expert_bytes;       /* bytes of one routed expert as stored */
    uint64_t expert_prefetched, expert_prefetch_used; /* predicted expert reads, and those a layer used */
    double io_wait_seconds;      /* compute waiting for reads (experts + trunk) */
    double read_busy_seconds;    /* wall time with expert reads in flight */
    int experts_mapped;          /* 1: routed experts used in place from the files' mappings
                                    (ms_run_opts.no_mmap): misses are first uses, bytes read what
                                    the page cache lacked, the cache's bytes those of the experts
                                    used so far, no evictions */
    int trunk_mapped;            /* 1: the pinned trunk too (bytes_read_at_load: what the page
                                    cache lacked) */
} ms_model_stats;
void ms_model_get_stats(ms_model *m, ms_model_stats *st);
ms_pool *ms_model_pool(ms_model *m);
/* Replace the routed-expert provider (default: the in-process table bound at load). */
void ms_model_set_experts(ms_model *m, ms_experts ex);
/* The routed-expert provider in use (to wrap it, e.g. in tests). */
ms_experts ms_model_experts(ms_model *m);
ms_experts ms_model_local_experts(ms_model *m);
/* Rows routed to each expert so far, [layer * n_experts + expert] over the model's layers and its
 * draft head's (borrowed; NULL before any provider; counts grow as passes run: read between
 * them, on the thread that runs them). And each expert's reads from its file (the local store's;
 * NULL when workers hold the experts). */
const uint32_t *ms_model_expert_routes(const ms_model *m);
const uint32_t *ms_model_expert_reads(const ms_model *m);

/* Per-sequence state (the family's: recurrent states, caches) and position. */
ms_seq *ms_seq_new(ms_model *m);
void ms_seq_free(ms_seq *s); /* accepts NULL */
int64_t ms_seq_pos(const ms_seq *s);
/* A new sequence in exactly s's state (s settled: no speculative rows pending): continuing
 * either gives the same logits bit for bit as continuing the other, the snapshot that prefix
 * reuse restores. */
ms_seq *ms_seq_clone(const ms_seq *s);
/* The state of settled s as bytes (appended to out: the position, then the family's states and
 * caches, little-endian floats), and a new sequence of m from such bytes, in exactly that
 * state: continuing it gives the logits continuing s gives, bit for bit, whatever either run's
 * speculation or budget. load: NULL with ms_err set (MS_EXIT_INPUT) when the bytes are not a
 * state of this model's shape (truncated, or another model's sizes). The file around them
 * (version, model fingerprint, checksum) is ms_seqfile's. */
void ms_seq_save(const ms_seq *s, ms_sbuf *out);
ms_seq *ms_seq_load(ms_model *m, const void *bytes, size_t n);
/* ms_seq_save's bytes are at most the family's state of that many positions (without
 * speculation's room) plus this: the position and the families' per-layer counts. */
#define MS_SEQ_SAVE_SLACK 4096
/* The most bytes ms_seq_save can give for a sequence of m at `positions` (the bound above):
 * what a state file's body may hold before anything of it is read. */
uint64_t ms_model_saved_state_max(const ms_model *m, int64_t positions);

/* Optional observer of routing: called once per MoE layer and call with ids[T][k]. */
typedef void (*ms_route_fn)(void *ctx, int layer, int64_t T, int k, const int32_t *ids);
void ms_model_set_route_observer(ms_model *m, ms_route_fn fn, void *ctx);
/* Called on the pass's thread after each layer of a pass of `rows` rows (progress of a long
 * prefill span); fn NULL removes it. */
typedef void (*ms_layer_fn)(void *ctx, int layer, int n_layers, int64_t rows);
void ms_model_set_layer_observer(ms_model *m, ms_layer_fn fn, void *ctx);
/* The observer set now (NULL, NULL: none), e.g. to chain to it. */
void ms_model_get_layer_observer(const ms_model *m, ms_layer_fn *fn, void **ctx);

/* Run T tokens through the model, continuing the sequence (incremental: the state carries the
 * prefix, nothing is recomputed). logits: float[T][V] for every row if all_rows, else
 * float[V] for the last row only. Returns 0, or -1 with ms_err set (an id out of range, expert
 * failure); the sequence must then be discarded. */
int ms_model_forward(ms_model *m, ms_seq *s, const int32_t *ids, int64_t T, int all_rows, float *logits);

/* One sequence's share of a batched pass. */
typedef struct {
    ms_seq *seq;          /* continued by this pass; each sequence at most once per pass */
    const int32_t *ids;   /* [T] the next tokens of the sequence (T >= 1) */
    int64_t T;
    int all_rows;         /* 1: logits of every row; 0: of the last row only */
    float *logits;        /* out: float[T][V] if all_rows, else float[V] */
    int spec;             /* 1: speculative rows: after the pass, ms_seq_keep says how many stay */
    int decode;           /* 1: a decoding sequence's row (and drafts): a longer pass that carries
                             it keeps the pinned trunk (ms_model_mix_rows) */
} ms_batch_item;

/* After a pass that carried s as a speculative item (spec = 1) of T rows: keep its first keep
 * rows (1 <= keep <= T) and undo the others without a trace (caches cut back, recurrent states
 * restored and the kept rows replayed: the family's), so the sequence is bit for bit as if the
 * pass had carried only the kept rows. Must be called before the sequence's next pass. */
void ms_seq_keep(ms_seq *s, int64_t keep);

/* The draft head (a checkpoint's own next-token predictor, DeepSeek-V3's MTP layer; bound with
 * ms_run_opts.draft_head, info.draft_layers = 1) proposes a token from a sequence's last hidden
 * state. Its state (a cache of its own and the model's final hidden states not yet through it)
 * is part of the sequence: kept, cut back by ms_seq_keep, cloned and saved with it. Drafts are
 * guesses the main model verifies: nothing here changes a logit of the main model.
 *
 * toks[0, n) are the sequence's tokens (toks[p] the one at position p: the prompt, then what was
 * generated), n >= ms_seq_pos(s) (tokens not yet through the model may follow). Without logits
 * (NULL): the head catches up with every position whose next token is known, but the last one
 * when toks[n - 1] is the next token to feed (a draft's row). With logits [vocab]: n must be
 * ms_seq_pos(s) + 1; the head's logits for the token after toks[n - 1]; returns 1, or 0 when this
 * sequence cannot draft (its state was saved by a run without the head: logits untouched).
 * Without a draft head: 0 and nothing done. -1 with ms_err set when an expert read failed. */
int ms_seq_draft(ms_seq *s, const int32_t *toks, size_t n, float *logits);
/* The same for k sequences of one model at once (k <= MS_MODEL_MAX_SEQS): sequence i's tokens
 * toks[i][0, n[i]); with logits [k][vocab], row i is sequence i's, computed together (the LM head
 * read once for all) and the bits each would have alone; ok[i] (when not NULL) 1 where a row was
 * drafted (0: that sequence cannot draft, its row untouched). Returns the count drafted (or
 * caught up), 0 without a draft head, -1 with ms_err set and every sequence as it was. */
int ms_seqs_draft(ms_seq *const *s, int k, const int32_t *const *toks, const size_t *n, float *logits, int *ok);

/* One pass over n sequences at once (n <= MS_MODEL_MAX_SEQS, each at its own position, with its
 * own state): the rows of all items go through each layer together, so every trunk matrix is
 * read once per pass and each routed expert is read and computed once per layer for all the
 * rows routed to it. Each item's logits are bit-identical to ms_model_forward on that sequence
 * alone. Returns 0, or -1 with ms_err set (an id out of range, a failed read or expert, a
 * non-finite hidden state or logit naming the layer); the sequences of a failed pass must be
 * discarded. */
int ms_model_forward_batch(ms_model *m, const ms_batch_item *items, int n);

#endif
