/* ms_engine: the inference engine every command drives: a model with its experts, sequences,
 * batched decoding steps, sampling, callbacks and stats. */
#ifndef MS_ENGINE_H
#define MS_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "ms_family.h"
#include "ms_model.h"
#include "ms_sample.h"
#include "ms_remote.h"
#include "ms_tok.h"

typedef struct ms_engine ms_engine;
typedef struct ms_eseq ms_eseq;

/* How to open an engine. Zero-initialised: routed experts in this process, no workers. */
typedef struct {
    const char *model_dir;     /* config.json + safetensors (+ tokenizer files, optional) */
    ms_run_opts run;           /* budget, threads, I/O; run.max_positions is per sequence */
    int max_seqs;              /* sequences that decode together (planning; 0 = 1); a count
                                  that does not fit is refused naming the largest that does */
    int fit_seqs;              /* > 0: instead, the largest count up to fit_seqs that fits the
                                  budget (ms_engine_max_seqs says which) */
    /* Where routed experts are computed: at most one of the three. */
    int local_workers;         /* > 0: start this many moestream-worker processes over ipc */
    const char *workers;       /* "tcp://h:p,ipc://path,...": workers already running */
    const char *cluster;       /* cluster file (JSON with endpoints and public keys) */
    const char *curve_secret;  /* this side's CURVE secret key file (tcp workers with keys) */
    int insecure;              /* allow plain tcp to workers listed without a key */
    float worker_timeout;      /* seconds per request (0 = 60) */
    /* Speculative decoding: a decoding sequence verifies drafted tokens as extra rows of its
     * pass and keeps the longest prefix the model itself would have produced (tokens and
     * logits bit-identical to off). 0 = off, N > 0 = up to N drafts per pass (a window the
     * budget cannot hold is refused naming the largest that fits), MS_SPEC_AUTO = adapt the
     * window (up to MS_SPEC_AUTO_MAX, or what fits) to the measured acceptance, pausing
     * drafting while drafts are rejected. */
    int speculate;
    const char *draft_file;    /* drafts from this id list (ms_draft_read_file) instead of n-gram
                                  lookup: the draft for generated token i is its i-th id */
    int draft_source;          /* MS_DRAFT_AUTO: the checkpoint's draft head (DeepSeek-V3's MTP
                                  layer) when it has one and the experts run here, else n-gram
                                  lookup; MS_DRAFT_NGRAM; MS_DRAFT_HEAD: the head or an error */
} ms_engine_opts;

enum { MS_DRAFT_AUTO = 0, MS_DRAFT_NGRAM = 1, MS_DRAFT_HEAD = 2 };

#define MS_SPEC_AUTO (-1)
#define MS_SPEC_AUTO_MAX 8
#define MS_SPEC_MAX 64 /* largest N of --speculate N */

/* Open the model with the family its config.json names (ms_families), its tokenizer when DIR
 * has one, and the experts' workers. Returns NULL with ms_err set and its exit class (MS_EXIT_USAGE for bad worker
 * options, MS_EXIT_MODEL/IO/BUDGET/WORKER otherwise). Local workers are stopped by
 * ms_engine_free. */
ms_engine *ms_engine_open(const ms_engine_opts *o);
void ms_engine_free(ms_engine *e); /* stops local workers; accepts NULL */

ms_model *ms_engine_model(ms_engine *e);
/* What the model is, and its family (its chat format). Borrowed, valid while e lives. */
const ms_model_info *ms_engine_info(const ms_engine *e);
const ms_family *ms_engine_family(const ms_engine *e);
/* The tokenizer, or NULL when the model directory has none. Owned by the engine. */
ms_tok *ms_engine_tok(ms_engine *e);
/* Sequences planned for (max_seqs, or what fit_seqs found): more alive at once may not fit. */
int ms_engine_max_seqs(const ms_engine *e);
/* Rows one forward pass may carry (the plan's prefill chunk): a step splits larger sets. */
int64_t ms_engine_pass_rows(const ms_engine *e);

/* How one sequence generates. */
typedef struct {
    float temperature;         /* 0 = greedy */
    float top_p;               /* (0, 1]; 0 is taken as 1 */
    uint64_t seed;             /* the sequence's own RNG: other sequences never change it */
    int64_t max_tokens;        /* tokens to generate (0: none, the prompt is not even run) */
    int stop_at_eos;           /* stop after the model's eos id */
    int all_logits;            /* on_logits receives every prompt row, not only the last */
    /* Called with each generated token, in order. */
    void (*on_token)(void *ctx, ms_eseq *s, int32_t token);
    /* Called with the logits rows computed for this sequence in a pass (float[n][V]): every
     * prompt row if all_logits (else the last prompt row), then one row per fed token. A
     * non-zero return fails the step with that return's ms_err (e.g. a write that failed). */
    int (*on_logits)(void *ctx, ms_eseq *s, const float *rows, int64_t n);
    void *ctx;
    int no_speculate;          /* 1: this sequence never drafts (whatever the engine's setting) */
    /* More sampling (ms_sample_params; zero = off): top_k, min_p, penalties, logit_bias (copied). */
    int top_k;
    float min_p, presence_penalty, frequency_penalty;
    const ms_logit_bias *logit_bias;
    int n_logit_bias;
    /* 1: keep the log-probability of each generated token under the model (log_softmax of its
     * logits row, before bias, penalties or temperature) and of the top_logprobs (0..
     * MS_MAX_TOP_LOGPROBS) most probable tokens there (ms_engine_seq_logprobs). */
    int logprobs, top_logprobs;
    /* Constrained decoding: every generated token keeps the text a prefix of a sentence of
     * grammar (borrowed, outliving the sequence; NULL: free text; needs the engine's
     * tokenizer). The token chosen is the one the sampler picks from the same logits with the
     * tokens that would break the text removed (greedy: the argmax over the allowed ones;
     * sampled: the same draw over them, renormalised). Once the text is a whole sentence the end
     * ids (end_ids[n_end_ids], borrowed: eos, a chat's end of turn) are allowed too, and alone
     * once nothing may follow; an end id, or a sentence that cannot go on when there are none,
     * ends the sequence ("stop"). */
    const struct ms_grammar *grammar;
    const int32_t *end_ids;
    int n_end_ids;
} ms_gen_params;

#define MS_MAX_TOP_LOGPROBS 20
/* One generated token's log-probabilities. */
typedef struct {
    float logprob;                           /* of the generated token */
    int n_top;                               /* alternatives below (the logprobs asked for) */
    int32_t top_id[MS_MAX_TOP_LOGPROBS];     /* most probable first; ties: lower id first */
    float top_logprob[MS_MAX_TOP_LOGPROBS];
} ms_token_logprob;

/* A new sequence that will prefill prompt[n] (copied; n >= 1, ids checked against the
 * vocabulary) and then generate. Its model state is its own. NULL with ms_err
 * set (MS_EXIT_INPUT) on a bad prompt. */
ms_eseq *ms_engine_seq_new(ms_engine *e, const int32_t *prompt, size_t n, const ms_gen_params *p);
void ms_engine_seq_free(ms_eseq *s); /* accepts NULL; any time between steps */
/* Another choice of the same prompt: a new sequence in s's state right after its prompt (s has
 * run its whole prompt and generated exactly one token, not fed yet), with its own parameters
 * p (the same prompt and max_tokens; its seed, callbacks and context its own). Its first token
 * is picked now from the prompt's last logits (on_logits gets that row, on_token the token),
 * so its tokens and logits are those of a sequence made by ms_engine_seq_new with p, without
 * running the prompt again. */
ms_eseq *ms_engine_seq_fork(const ms_eseq *s, const ms_gen_params *p);
/* A sequence that continues a model state: state (taken; settled, e.g. from ms_seq_load or
 * ms_engine_seq_take_state) already holds the tokens before prompt[n] (n >= 1, copied, ids
 * checked), which it prefills and then generates from, as ms_engine_seq_new would after those
 * tokens. NULL with ms_err set (MS_EXIT_INPUT) on a bad prompt (state then freed). */
ms_eseq *ms_engine_seq_continue(ms_engine *e, ms_seq *state, const int32_t *prompt, size_t n, const ms_gen_params *p);
/* The model state of a sequence between steps (settled), taken out: it holds every token fed
 * so far (the prompt and the generated tokens but the last, which was never fed). s keeps
 * nothing to run with: free it. */
ms_seq *ms_engine_seq_take_state(ms_eseq *s);
/* The model state of a sequence between steps (borrowed; settled while it prefills). */
const ms_seq *ms_engine_seq_state(const ms_eseq *s);

int ms_engine_seq_done(const ms_eseq *s);
/* "length" (max_tokens reached), "stop" (eos), or NULL while running. */
const char *ms_engine_seq_finish_reason(const ms_eseq *s);
/* Generated tokens so far (borrowed, valid until the next step or free). */
const int32_t *ms_engine_seq_tokens(const ms_eseq *s, size_t *n);
/* Prompt tokens already run through the model. */
size_t ms_engine_seq_prefilled(const ms_eseq *s);
size_t ms_engine_seq_prompt_len(const ms_eseq *s);
/* From on_token: end the sequence after this token ("stop"), e.g. at a stop id or string: no
 * further token of the step is generated or reported (a speculative pass stops where
 * non-speculative decoding would). */
void ms_engine_seq_stop(ms_eseq *s);
/* With logprobs: one entry per generated token, in order (borrowed, as the tokens), or
 * NULL otherwise. */
const ms_token_logprob *ms_engine_seq_logprobs(const ms_eseq *s, size_t *n);
/* Logits of the sequence's last computed row (float[V]), or NULL before its first pass. */
const float *ms_engine_seq_last_logits(const ms_eseq *s);

/* One step for a set of sequences, each at its own position: every sequence that is not done
 * advances once, by one prefill chunk of its prompt or by its last generated token (with its
 * drafts when speculating: then it may generate several tokens in the step, each reported to
 * on_logits and on_token in order exactly as one token per step would be); a sequence whose
 * prompt is then complete samples its next token. The rows of all sequences share
 * forward passes (ms_model_forward_batch) of at most ms_engine_pass_rows rows: every trunk
 * matrix is read once per pass and each routed expert once per layer per pass. Tokens and
 * logits of each sequence are bit-identical to stepping it alone. Returns 0, or -1 with ms_err
 * set: the sequences of a failed step must be freed. */
int ms_engine_step(ms_engine *e, ms_eseq *const *seqs, int n);

/* Counters and the resident memory of every local process. */
typedef struct {
    ms_model_stats model;
    uint64_t peak_rss_self;          /* this process (VmHWM) */
    uint64_t peak_rss_all;           /* this process and the local workers it started */
    int threads, threads_pinned;     /* compute threads; those bound to one CPU (--pin-threads) */
    int workers;                     /* 0 when experts run in this process */
    ms_remote_stats remote;          /* the workers' traffic (when workers > 0) */
    uint64_t passes, pass_rows;      /* forward passes run and the rows they carried */
    int spec_window;                 /* draft tokens per pass planned (0: not speculating) */
    uint64_t drafted, accepted;      /* draft tokens verified, and those the model confirmed */
    uint64_t decode_passes;          /* a decoding sequence's share of a pass (its verification) */
    uint64_t decode_tokens;          /* tokens those produced (accepted drafts + 1 each) */
    const char *draft_source;        /* "mtp", "ngram", "file", or "off" (not speculating) */
    double draft_seconds;            /* spent proposing drafts (the MTP head's steps) */
} ms_engine_stats;
void ms_engine_get_stats(ms_engine *e, ms_engine_stats *st);

/* 0 while the engine can serve every request; -1 with why filled when it cannot (some routed
 * experts have no worker left: ms_remote_health). Safe from any thread. */
int ms_engine_health(ms_engine *e, char *why, size_t n);

#endif
