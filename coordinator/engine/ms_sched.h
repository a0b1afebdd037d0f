/* ms_sched: continuous batching over ms_engine: queued jobs decode together, up to max_batch at
 * once; a finished job leaves and a waiting one joins at the next step. */
#ifndef MS_SCHED_H
#define MS_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "ms_engine.h"
#include "ms_family.h"

typedef struct ms_sched ms_sched;

/* One job. Everything is copied by ms_sched_add. */
#define MS_SCHED_MAX_END 8 /* end ids a grammar's job can have */
typedef struct {
    const int32_t *prompt;       /* [n_prompt] ids, checked against the vocabulary when admitted */
    size_t n_prompt;
    float temperature, top_p;    /* as ms_gen_params */
    uint64_t seed;
    int64_t max_tokens;          /* >= 1 */
    int stop_at_eos;             /* the config's eos ends the job ("stop") */
    const int32_t *stop_ids;     /* [n_stop_ids] more ids that end the job ("stop"), e.g. <|im_end|> */
    int n_stop_ids;
    const char *const *stop;     /* [n_stop] stop strings, found in the detokenized generated text */
    int n_stop;
    int keep_logits;             /* hand every logits row to the result (the engine must be opened
                                    with run.all_logits) */
    int stream;                  /* hand the tokens and final text to the stream callback after every
                                    step that generated some (ms_sched_set_stream) */
    void *user;                  /* returned in the result; also the job's handle for ms_sched_cancel */
    /* More sampling and log-probabilities, as ms_gen_params (zero = off; logit_bias copied). */
    int top_k;
    float min_p, presence_penalty, frequency_penalty;
    const ms_logit_bias *logit_bias;
    int n_logit_bias;
    int logprobs, top_logprobs;
    /* Choices of the prompt (0 or 1: one; at most max_batch): choice i samples with seed + i and is
     * reported on its own (ms_sched_result.choice), all sharing one prefill: the prompt runs once
     * and the others continue from a clone of its state. Admitted when the batch has room for all. */
    int n_choices;
    /* The output constrained to the sentences of this grammar (ms_grammar's text, copied; it must
     * compile, as the request parsers check; NULL: free text): ms_gen_params.grammar, its end ids
     * the stop ids and eos with stop_at_eos. */
    const char *grammar_text;
    int keep_special;            /* 1: special tokens' text in the result text (default: left out) */
    const ms_chatfmt *chat;      /* a chat's format (borrowed; NULL: plain text): splits the
                                    streamed text into content and reasoning as it comes, and the
                                    result into its answer */
} ms_sched_job;

/* What a job produced, handed to the done callback (everything borrowed for the call). */
typedef struct {
    void *user;
    size_t prompt_tokens;
    const int32_t *tokens;       /* [n_tokens] every generated id, a final stop id included */
    size_t n_tokens;
    const char *finish;          /* "stop" (eos, a stop id or a stop string) or "length"; NULL: failed */
    int stop_index;              /* finish "stop" at a stop string: its index in the job's list; else -1 */
    const char *text;            /* the generated text without a final stop id (and without special
                                    tokens unless keep_special), cut before the first stop string;
                                    NULL when the engine has no tokenizer */
    size_t text_len;
    const float *logits;         /* keep_logits: [n_rows][V]: every prompt row, then one per fed
                                    generated token (as `run --dump-logits`) */
    int64_t n_rows;
    const ms_token_logprob *logprobs; /* [n_tokens] when the job asked for them, else NULL */
    int choice;                  /* which of the job's n_choices this is (0..) */
    const ms_chat_answer *answer; /* a chat job's answer split by its format (content, reasoning,
                                    a tool call; the text's cut applied); NULL: no format that
                                    splits, no tokenizer, or the format could not read it */
    int error_code;              /* failed: the exit class and message of the step that failed */
    const char *error;
} ms_sched_result;

/* Called once per job and choice, in completion order. A non-zero return (with ms_err set) makes
 * ms_sched_step fail. */
typedef int (*ms_sched_done_fn)(void *ctx, const ms_sched_result *r);

/* What a streamed job generated in one step (borrowed for the call). The text is the part of
 * the result's text that can no longer change: with stop strings, the last (longest stop - 1)
 * bytes wait until a later step shows whether a stop string begins there. The concatenation of
 * a job's deltas gives exactly its result's tokens and text (the last delta comes just before
 * the done callback). Bytes are raw tokenizer bytes: a UTF-8 character may span two deltas. */
typedef struct {
    void *user;
    const int32_t *tokens;       /* [n_tokens] ids new since the last delta (a final stop id included) */
    size_t n_tokens;
    const ms_token_logprob *logprobs; /* [n_tokens] theirs when the job asked, else NULL */
    int choice;                  /* as ms_sched_result.choice */
    const char *text;            /* [text_len] new text bytes; NULL without a tokenizer */
    size_t text_len;
    /* The same bytes as the chat's format routes them (all content without a format that
     * routes): to the content, to the reasoning, or nowhere (markers, a tool call's arguments,
     * which the result's answer has). */
    const char *content, *reasoning;
    size_t content_len, reasoning_len;
} ms_sched_delta;
typedef void (*ms_sched_stream_fn)(void *ctx, const ms_sched_delta *d);

/* A scheduler over e (borrowed) running at most max_batch jobs at once (1..MS_MODEL_MAX_SEQS,
 * at most ms_engine_max_seqs(e)). */
ms_sched *ms_sched_new(ms_engine *e, int max_batch, ms_sched_done_fn done, void *ctx);
void ms_sched_free(ms_sched *s); /* frees jobs not finished; accepts NULL */

/* The callback of jobs added with stream = 1 (called with the done callback's ctx). */
void ms_sched_set_stream(ms_sched *s, ms_sched_stream_fn fn);
/* A prefix cache (borrowed; NULL: none): a job starts from the state of the longest cached
 * prefix of its prompt (its tokens and logits are the same: the state is bit for bit the one a
 * prefill leaves), and the states of prompts are kept as they are prefilled: at every `every`
 * tokens (0: not) and at each prompt's end. Jobs that keep their logits rows do not use it. */
struct ms_pcache;
void ms_sched_set_pcache(ms_sched *s, struct ms_pcache *c, size_t every);
/* Called (with the done callback's ctx) when a job's prompt starts to run: it left the queue. */
typedef void (*ms_sched_admit_fn)(void *ctx, void *user);
void ms_sched_set_admit(ms_sched *s, ms_sched_admit_fn fn);

/* Queue a job (first in, first admitted). */
void ms_sched_add(ms_sched *s, const ms_sched_job *j);
/* The deep copy ms_sched_add keeps (prompt, stop ids and strings owned by dst), and its release
 * (dst zeroed; accepts a zeroed job). For callers that hold a job before handing it over. */
void ms_sched_job_copy(ms_sched_job *dst, const ms_sched_job *src);
void ms_sched_job_clear(ms_sched_job *j);
/* Drop the job whose user pointer is user, waiting or running, between steps: its sequence and
 * memory are freed now and it is never reported; a running batch goes on without it and a
 * waiting job takes its place at the next step. Returns 1 if found, 0 if not (unknown or
 * already reported). */
int ms_sched_cancel(ms_sched *s, const void *user);
/* Jobs queued or running. */
int ms_sched_pending(const ms_sched *s);

/* One step: admit waiting jobs up to max_batch, advance every running job once through one
 * ms_engine_step (their rows share forward passes), then report the jobs that finished. Each
 * job's tokens and logits are bit-identical to running it alone.
 * A step that fails with a worker error (MS_EXIT_WORKER: experts that no worker can compute)
 * does not fail the run: its jobs are discarded and run again from their prompt, one at a time
 * and alone, before any other job is admitted; a job whose solo run fails is reported with the
 * error (finish NULL) and the others complete (their results are those of a solo run, so
 * unchanged). Returns 0, or -1 with ms_err set on any other failure (I/O, model, the done
 * callback): running jobs are then not reported. */
int ms_sched_step(ms_sched *s);

typedef struct {
    int waiting, running;        /* jobs queued, jobs in the batch */
    int last_batch;              /* jobs the last step advanced */
    uint64_t finished, failed;   /* jobs reported (failed: with an error) */
    uint64_t cancelled;          /* jobs dropped by ms_sched_cancel */
    uint64_t tokens;             /* tokens generated by reported jobs */
    uint64_t steps, retries;     /* steps run; jobs re-run alone after a failed step */
    uint64_t generated;          /* tokens generated so far, running jobs and re-runs included */
    uint64_t decoded;            /* token ids decoded to text (stop strings, streamed deltas, reports):
                                  * a few times `generated`, never its square (an answer's text is
                                  * extended as it grows, not decoded again) */
} ms_sched_stats;
void ms_sched_get_stats(const ms_sched *s, ms_sched_stats *st);

#endif
