/* ms_sengine: serve's engine thread: requests handed over by HTTP threads through a locked
 * queue join the continuous-batching scheduler (ms_sched) at the next step; their tokens flow
 * back as they are generated; a request given up by its client is cancelled between steps. */
#ifndef MS_SENGINE_H
#define MS_SENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "ms_engine.h"
#include "ms_sched.h"
#include "ms_smetrics.h"

typedef struct ms_sengine ms_sengine;
typedef struct ms_sreqh ms_sreqh;

/* Start the thread over e (borrowed; used only by that thread from now on) with at most
 * max_batch sequences decoding and max_queue more waiting. m (borrowed) receives TTFT,
 * per-token, batch and token figures. The thread observes the model's layers (where a pass is,
 * for ms_sengine_figures) and then calls the observer e's model had, on the engine thread;
 * ms_sengine_free puts that one back. NULL with ms_err set if the thread cannot start. */
struct ms_pcache;
/* pc (borrowed; NULL: none): the prefix cache the scheduler starts prompts from and keeps states in. */
ms_sengine *ms_sengine_start(ms_engine *e, int max_batch, int max_queue, ms_smetrics *m, struct ms_pcache *pc);
/* Drain (below) if not done, then free. Accepts NULL. */
void ms_sengine_free(ms_sengine *s);

/* Hand over a job (copied; user and stream are set here). deadline_s > 0: seconds after which
 * the job is cancelled and ends with timed_out. Returns the handle, or NULL with *status 429
 * (max_batch + max_queue requests in flight) or 503 (draining, or the engine failed). */
ms_sreqh *ms_sengine_submit(ms_sengine *s, const ms_sched_job *j, double deadline_s, int *status);

/* What a request got since the last take. */
typedef struct {
    int32_t *tokens;             /* [n_tokens] new ids (malloc'ed or NULL) */
    size_t n_tokens;
    ms_token_logprob *logprobs;  /* [n_tokens] theirs when the job asked (malloc'ed), else NULL */
    char *text;                  /* [text_len] new raw text bytes (malloc'ed or NULL) */
    size_t text_len;
    char *content, *reasoning;   /* of them, what a chat's format routed to the content and to the
                                    reasoning (malloc'ed or NULL; ms_sched_delta) */
    size_t content_len, reasoning_len;
    int choice;                  /* whose news (0 .. n_choices - 1): one choice's at a time */
    int done;                    /* this choice's generation ended: the fields below are set */
    int all_done;                /* every choice's ended: the request's last news */
    const char *finish;          /* "stop", "length", or NULL: failed (error) or timed out */
    int stop_index;              /* finish "stop" at one of the job's stop strings: its index; else -1 */
    int timed_out;
    char error[512];
    size_t prompt_tokens, completion_tokens; /* the prompt's, and this choice's */
    int has_answer;              /* done: a chat's answer as its format split it (owned) */
    ms_chat_answer answer;
} ms_sreq_news;
void ms_sreq_news_clear(ms_sreq_news *n);

/* Wait up to timeout_s for news of one choice (new tokens or its end) and take it into *n
 * (cleared first). Returns 1 if there is news (n->done set once per choice, at its end;
 * n->all_done on the last), 0 on a timeout. */
int ms_sreqh_wait(ms_sreqh *h, double timeout_s, ms_sreq_news *n);
/* The HTTP side is done with h (after the end, or because the client left): a generation
 * still running is cancelled at the next step and its memory freed. */
void ms_sreqh_release(ms_sreqh *h);

/* Stop accepting (submit answers 503), let every submitted request finish, end the thread. */
void ms_sengine_drain(ms_sengine *s);
/* The same without waiting: ms_sengine_drained says when the thread has ended (then call
 * ms_sengine_drain to join it). */
void ms_sengine_drain_begin(ms_sengine *s);
int ms_sengine_drained(ms_sengine *s);
/* A forced stop: stop accepting and cancel every request at the next step (each ends with an
 * error saying so); the thread then ends as after a drain. */
void ms_sengine_abort(ms_sengine *s);
/* 1 while the engine works; after a step failed, minus the failure's exit class (every request
 * then ends with an error and new ones get 503). */
int ms_sengine_ok(ms_sengine *s);
/* 0 while the engine can serve every request, -1 with why when it cannot (ms_engine_health). */
int ms_sengine_health(ms_sengine *s, char *why, size_t n);
/* Queue depth, batch size, the engine's read and cache counters, and where the running pass is
 * (layers done, rows, time left). Callable from any thread, the layer observer's included. */
void ms_sengine_figures(ms_sengine *s, ms_smetrics_engine *f);
/* The engine's counters as of the last step. */
void ms_sengine_engine_stats(ms_sengine *s, ms_engine_stats *es);
/* The engine (its plan and info are fixed once open: readable from any thread). */
ms_engine *ms_sengine_engine(ms_sengine *s);
/* Copies of the experts' use as of the last step: rows routed to each and, for experts in this
 * process, its reads from disk (*reads NULL with workers), [layer * n_experts + expert] over
 * the model's layers and its draft head's; malloc'ed. Returns their length. */
size_t ms_sengine_expert_use(ms_sengine *s, uint32_t **routes, uint32_t **reads);

#endif
