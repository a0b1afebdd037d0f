/* ms_jobfile: the files of `moestream jobs`: input lines (OpenAI Batch API shape) -> job specs,
 * result and error lines, and the scan of an output file to resume. */
#ifndef MS_JOBFILE_H
#define MS_JOBFILE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "ms_sched.h"
#include "ms_family.h"
#include "ms_tok.h"

typedef enum { MS_JOB_COMPLETION, MS_JOB_CHAT } ms_job_kind;

/* One input line, parsed and checked. Owns its strings and arrays. */
typedef struct {
    int line;                  /* 1-based line number in the input */
    char *custom_id;           /* as given, or "line-N" when the line gives none, null or is not JSON */
    int auto_id;               /* 1: custom_id was made up ("line-N"); the caller may rename it */
    char request_hash[17];     /* XXH3-64 (hex) of the line's bytes, trailing blanks and \r
                                * dropped: what an output line answers ("" for a body) */
    ms_job_kind kind;
    char *model;               /* body.model, or NULL */
    int32_t *prompt;           /* [n_prompt] ids: the prompt's, or the chat rendered (ms_chat) */
    size_t n_prompt;
    int64_t max_tokens;        /* completions: default 16; chats: default the rest of the context */
    float temperature, top_p;  /* defaults 0 (greedy) and 1 */
    uint64_t seed;             /* default 0 */
    char **stop;               /* [n_stop] non-empty stop strings */
    int n_stop;
    int top_k;                 /* 0 = off (as -1) */
    float min_p;               /* 0 = off */
    float presence_penalty, frequency_penalty; /* [-2, 2], 0 = off */
    ms_logit_bias *logit_bias; /* [n_logit_bias] "logit_bias": {"id": bias in [-100, 100]} */
    int n_logit_bias;
    int logprobs, top_logprobs; /* chat "logprobs": true + "top_logprobs": N; completions "logprobs": N */
    int n;                     /* choices ("n", default 1; serve only, jobs refuses n > 1) */
    int keep_special;          /* "skip_special_tokens": false (vLLM's field): special tokens stay in the text */
    char *grammar;             /* a chat's "response_format" json_object / json_schema as grammar text
                                  (ms_jschema; checked to compile), or NULL: free text */
    /* A bad line: answered with an error line, never run. */
    const char *err_code;      /* static string, e.g. "invalid_json"; NULL when good */
    char *err_msg;             /* "line N: ..." */
    const char *err_param;     /* static string: the request field at fault ("messages", "tools"), or NULL */
} ms_jobspec;

/* Limits a line is checked against. */
typedef struct {
    const ms_tok *tok;         /* NULL: the model has no tokenizer (text prompts and chats are bad lines) */
    int64_t vocab;             /* ids must be in [0, vocab) */
    int64_t max_context;       /* prompt + max_tokens must not exceed it */
    const ms_chatfmt *chat;    /* the model family's chat format (chats need it and tok) */
    const char *chat_date;     /* the date chat prompts carry (--date), or NULL: today */
    int render_only;           /* 1: a chat may be rendered without the generation prompt (tokenize --chat) */
    int max_n;                 /* the largest "n" (choices) a request may ask for (serve: its batch); 0 = 1 */
} ms_jobfile_limits;

/* Parse one line (len bytes, without its newline). Always fills *j: a bad line gets err_code and
 * err_msg (naming the line). Never fails otherwise. */
void ms_jobspec_parse(const char *text, size_t len, int line, const ms_jobfile_limits *lim, ms_jobspec *j);

/* json_loadb (duplicate keys refused) of len bytes, except that a raw NUL byte anywhere is
 * refused (jansson accepts one after a number): NULL with je->text naming its offset and
 * je->line = je->column = -1. The parser of every request body and jobs line. */
json_t *ms_jobfile_json_load(const char *text, size_t len, json_error_t *je);
/* Parse one request body (a JSON object) of the given kind, as the body of an input line: the
 * same fields, defaults and checks, with messages not prefixed by a line (j->line is 0 and
 * custom_id NULL). Used by `serve`. */
struct json_t;
void ms_jobspec_parse_body(struct json_t *body, ms_job_kind kind, const ms_jobfile_limits *lim, ms_jobspec *j);
void ms_jobspec_clear(ms_jobspec *j); /* frees the members; accepts a zeroed spec */
/* The scheduler job of a good spec (borrowing j's prompt, stops and bias): sampling, limits, eos,
 * and for a chat its format (chat, borrowed; NULL: none), which splits its answer, and the ids
 * that end the assistant's turn (chat_stop[n_chat_stop]). The caller sets user, stream and
 * keep_logits. */
void ms_jobspec_sched_job(const ms_jobspec *j, const ms_chatfmt *chat, const int32_t *chat_stop, int n_chat_stop,
                          ms_sched_job *sj);

/* The output line of a finished job (malloc'ed, one line ending in '\n', *len bytes):
 * {"id": "batch_req_<uuid>", "custom_id", "request_hash" (j->request_hash, when set: which input
 * line it answers, checked by --resume), "response": {"status_code": 200, "request_id",
 * "body": {"id", "object", "created", "model", "choices": [{"index": 0, "text" | "message",
 * "finish_reason", "token_ids"}], "usage"}}, "error": null}, or with r->finish NULL the error
 * line of a job that failed while running (code "worker_failure" for MS_EXIT_WORKER, else
 * "runtime_error"). */
char *ms_jobline_result(const ms_jobspec *j, const char *model, int64_t created, const ms_sched_result *r,
                        size_t *len);
/* The same with logprobs (when r has them) named through tok (NULL: by id). */
char *ms_jobline_result_tok(const ms_jobspec *j, const char *model, int64_t created, const ms_sched_result *r,
                            const ms_tok *tok, size_t *len);
/* The same for a chat whose result the format split (r->answer, from a job made with its format):
 * the message's content is the answer without markers, its reasoning (harmony's analysis
 * channel) is "reasoning_content", a tool call it ends with is "tool_calls" (finish_reason
 * "tool_calls"). Completions and results without an answer: ms_jobline_result_tok. */
char *ms_jobline_result_chat(const ms_jobspec *j, const char *model, int64_t created, const ms_sched_result *r,
                             const ms_jobfile_limits *lim, size_t *len);
/* The "logprobs" of a choice for generated ids[n] with their log-probabilities lp[n] (tok NULL:
 * no tokenizer, tokens are named "token_id:N"). A chat's: {"content": [{"token", "logprob",
 * "bytes", "token_id", "top_logprobs": [{"token", "logprob", "bytes", "token_id"}...]}...],
 * "refusal": null}; a completion's: {"tokens", "token_logprobs", "top_logprobs" ([{token:
 * logprob}...], null without alternatives), "text_offset" (from *offset, which advances by the
 * tokens' bytes)}. Never NULL; the caller owns it. */
struct json_t *ms_jobfile_logprobs_json(int chat, const ms_tok *tok, const int32_t *ids, const ms_token_logprob *lp,
                                        size_t n, int top, size_t *offset);
/* The assistant message of an answer, as jobs and serve send it: {"role": "assistant",
 * "content" (null for a tool call without text), "reasoning_content" (when a->reasoning),
 * "tool_calls" (when a->call_name)}. */
json_t *ms_jobfile_message_json(const ms_chat_answer *a);
/* [{"id": "call_<uuid>", "type": "function", "function": {"name", "arguments"}}], with
 * "index": 0 in each for a streamed delta. */
json_t *ms_jobfile_tool_calls_json(const ms_chat_answer *a, int stream);
/* The finish_reason of an answer: "tool_calls" when it ends with a tool call and generation
 * stopped at the format's end ("stop"); otherwise finish (a may be NULL). */
const char *ms_jobfile_finish(const ms_chat_answer *a, const char *finish);
/* The error line of a bad input line: {"id", "custom_id", "response": null, "error": {"code",
 * "message"}}. */
char *ms_jobline_error(const ms_jobspec *j, const char *code, const char *message, size_t *len);

/* Scan an output file's bytes to resume it: the custom_id of every complete line (ending in
 * '\n') into *ids (malloc'ed array of malloc'ed strings, *n of them), and in *keep the bytes of
 * those lines: what follows (a torn last line) is to be dropped. Returns 0, or -1 with ms_err set
 * (MS_EXIT_INPUT) naming the first complete line that is not an output line of `jobs`. */
int ms_jobline_scan(const char *buf, size_t len, char ***ids, size_t *n, size_t *keep);
/* The same, also collecting each line's "request_hash" into *hashes (malloc'ed array parallel to
 * *ids; an entry is NULL for a line without one, written by an older moestream). */
int ms_jobline_scan_hashes(const char *buf, size_t len, char ***ids, char ***hashes, size_t *n, size_t *keep);

#endif
