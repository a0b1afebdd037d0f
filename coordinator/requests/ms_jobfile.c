/* ms_jobfile: parses `jobs` input lines into checked job specs and writes result/error lines. */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ms_xxh.h" /* XXH3, dispatched */

#include "ms_err.h"
#include "ms_jgram.h"
#include "ms_jchat.h"
#include "ms_jobfile.h"
#include "ms_reqfields.h"
#include "ms_jtext.h"
#include "ms_wire.h"

/* Mark j bad: code and "line N: message". Returns -1. */
static int bad(ms_jobspec *j, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(ms_jobspec *j, const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t n = strlen(msg) + 32;
    j->err_msg = ms_malloc(n);
    if (j->line > 0)
        snprintf(j->err_msg, n, "line %d: %s", j->line, msg);
    else
        snprintf(j->err_msg, n, "%s", msg);
    j->err_code = code;
    return -1;
}

static int get_int(ms_jobspec *j, json_t *body, const char *key, long long lo, long long hi, long long *out)
{
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return j->err_param = key, bad(j, "invalid_request", "\"%s\" must be an integer in %lld..%lld", key, lo, hi);
    *out = json_integer_value(v);
    return 0;
}

static int get_num(ms_jobspec *j, json_t *body, const char *key, double lo, double hi, int lo_open, float *out)
{
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v)) return 0;
    /* Checked as the float the sampler uses: 1e-300 is positive as a double but 0 as a float. */
    double d = json_number_value(v);
    float f = (float)d;
    if (!json_is_number(v) || !isfinite(d) || !isfinite(f) || f < lo || f > hi || (lo_open && f <= lo))
        return j->err_param = key, bad(j, "invalid_request", "\"%s\" must be a number in %s%g, %g] (as a 32-bit float)", key,
                   lo_open ? "(" : "[", lo, hi);
    *out = f;
    return 0;
}

static int get_stop(ms_jobspec *j, json_t *body)
{
    json_t *v = json_object_get(body, "stop");
    if (!v || json_is_null(v)) return 0;
    size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : 0;
    j->err_param = "stop";
    if (!json_is_string(v) && !json_is_array(v))
        return bad(j, "invalid_request", "\"stop\" must be a string or an array of strings");
    if (n > 4) return bad(j, "invalid_request", "\"stop\" holds %zu sequences: at most 4, as OpenAI's API takes", n);
    j->stop = ms_calloc(n + 1, sizeof *j->stop);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_string(v) ? v : json_array_get(v, i);
        if (!json_is_string(s) || json_string_length(s) == 0 || strlen(json_string_value(s)) != json_string_length(s))
            return bad(j, "invalid_request", "\"stop\" item %zu must be a non-empty string", i);
        j->stop[j->n_stop++] = ms_strdup(json_string_value(s));
    }
    j->err_param = NULL;
    return 0;
}

/* "logit_bias": {"<token id>": bias} with ids in the vocabulary and biases in [-100, 100]. */
static int get_logit_bias(ms_jobspec *j, json_t *body, const ms_jobfile_limits *lim)
{
    json_t *v = json_object_get(body, "logit_bias");
    if (!v || json_is_null(v)) return 0;
    j->err_param = "logit_bias";
    if (!json_is_object(v)) return bad(j, "invalid_request", "\"logit_bias\" must be an object {\"token id\": bias}");
    j->logit_bias = ms_malloc(sizeof *j->logit_bias * (json_object_size(v) + 1));
    const char *key;
    json_t *b;
    json_object_foreach(v, key, b)
    {
        char *end;
        long long id = strtoll(key, &end, 10);
        if (!*key || *end || id < 0 || id >= lim->vocab)
            return bad(j, "invalid_request", "\"logit_bias\" key '%.40s' is not a token id of the vocabulary (0..%lld)", key,
                       (long long)lim->vocab - 1);
        double d = json_number_value(b);
        if (!json_is_number(b) || !(d >= -100 && d <= 100))
            return bad(j, "invalid_request", "\"logit_bias\" of token %lld must be a number in [-100, 100]", id);
        j->logit_bias[j->n_logit_bias].id = (int32_t)id;
        j->logit_bias[j->n_logit_bias++].bias = (float)d;
    }
    j->err_param = NULL;
    return 0;
}

/* Log-probabilities: a chat's "logprobs": bool and "top_logprobs": 0..20 (which needs logprobs);
 * a completion's "logprobs": 0..20 (the alternatives; the token's own always comes). */
static int get_logprobs(ms_jobspec *j, json_t *body)
{
    json_t *v = json_object_get(body, "logprobs"), *t = json_object_get(body, "top_logprobs");
    int has_v = v && !json_is_null(v), has_t = t && !json_is_null(t);
    if (j->kind == MS_JOB_CHAT) {
        if (has_v && !json_is_boolean(v))
            return j->err_param = "logprobs", bad(j, "invalid_request", "\"logprobs\" must be true or false");
        j->logprobs = json_is_true(v);
        if (has_t) {
            long long k = 0;
            if (get_int(j, body, "top_logprobs", 0, MS_MAX_TOP_LOGPROBS, &k) != 0) return -1;
            if (!j->logprobs && k > 0)
                return j->err_param = "top_logprobs", bad(j, "invalid_request", "\"top_logprobs\" needs \"logprobs\": true");
            j->top_logprobs = (int)k;
        }
        return 0;
    }
    if (has_t) return j->err_param = "top_logprobs", bad(j, "invalid_request", "\"top_logprobs\" is a chat field: a completion gives \"logprobs\": N");
    if (!has_v) return 0;
    long long k = 0;
    if (get_int(j, body, "logprobs", 0, MS_MAX_TOP_LOGPROBS, &k) != 0) return -1;
    j->logprobs = 1;
    j->top_logprobs = (int)k;
    return 0;
}

/* Sampling beyond temperature and top_p: top_k, min_p, the penalties, logit_bias. */
static int get_sampling(ms_jobspec *j, json_t *body, const ms_jobfile_limits *lim)
{
    long long k = 0;
    if (get_int(j, body, "top_k", -1, INT32_MAX, &k) != 0) return -1;
    j->top_k = k > 0 ? (int)k : 0;
    if (get_num(j, body, "min_p", 0, 1, 0, &j->min_p) != 0 ||
        get_num(j, body, "presence_penalty", -2, 2, 0, &j->presence_penalty) != 0 ||
        get_num(j, body, "frequency_penalty", -2, 2, 0, &j->frequency_penalty) != 0)
        return -1;
    return get_logit_bias(j, body, lim) != 0 || get_logprobs(j, body) != 0 ? -1 : 0;
}

static int get_prompt(ms_jobspec *j, json_t *body, const ms_jobfile_limits *lim)
{
    j->err_param = "prompt";
    json_t *p = json_object_get(body, "prompt");
    if (!p) return bad(j, "invalid_request", "a completion needs \"prompt\" (text or an array of token ids)");
    /* OpenAI's batch forms with one prompt: ["text"] (LangChain's completions class sends it),
     * [[ids]]; several: serve splits them before (ms_sreq), a jobs line takes one (a line each,
     * as its n is 1) */
    if (json_is_array(p) && json_array_size(p) >= 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0)))) {
        if (json_array_size(p) > 1)
            return bad(j, "unsupported_value", "\"prompt\" holds %zu prompts: a jobs line takes one (a line each)",
                       json_array_size(p));
        p = json_array_get(p, 0);
        if (json_is_array(p) && json_array_size(p) > 0 && !json_is_integer(json_array_get(p, 0)))
            return bad(j, "invalid_request", "\"prompt\"[0] must be text or an array of token ids");
    }
    if (json_is_string(p)) {
        if (!lim->tok)
            return bad(j, "no_tokenizer", "the model has no tokenizer (tiktoken.model): give the prompt as token ids");
        if (ms_tok_encode(lim->tok, json_string_value(p), json_string_length(p), 0, &j->prompt, &j->n_prompt) != 0)
            return bad(j, "invalid_prompt", "%s", ms_err_msg());
        return 0;
    }
    if (!json_is_array(p)) return bad(j, "invalid_request", "\"prompt\" must be a string or an array of token ids");
    size_t n = json_array_size(p);
    j->prompt = ms_malloc(sizeof(int32_t) * (n + 1));
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(p, i);
        if (!json_is_integer(v))
            return bad(j, "invalid_request", "\"prompt\" item %zu is not an integer token id (one prompt per line)", i);
        json_int_t id = json_integer_value(v);
        if (id < 0 || id >= lim->vocab)
            return bad(j, "invalid_prompt", "prompt token id %lld (position %zu) is outside the model's vocabulary (%lld ids)",
                       (long long)id, i, (long long)lim->vocab);
        j->prompt[i] = (int32_t)id;
    }
    j->n_prompt = n;
    return 0;
}

static int get_messages(ms_jobspec *j, json_t *body, const ms_jobfile_limits *lim)
{
    if (!lim->tok) return bad(j, "no_tokenizer", "the model has no tokenizer (tiktoken.model), which chats need");
    if (!lim->chat) return bad(j, "no_chat_format", "this model family has no chat format yet: send a prompt instead");
    ms_jchat c;
    char why[768];
    const char *param = NULL;
    if (ms_jchat_read(body, lim->chat, lim->chat_date, lim->render_only, &c, why, sizeof why, &param) != 0) {
        j->err_param = param;
        return bad(j, "invalid_request", "%s", why);
    }
    int rc = 0;
    if (lim->chat->encode(lim->tok, c.msgs, c.n, &c.opts, &j->prompt, &j->n_prompt) != 0) {
        j->err_param = strstr(ms_err_msg(), "tools[") == ms_err_msg() ? "tools" : "messages";
        rc = bad(j, "invalid_prompt", "%s", ms_err_msg());
    }
    ms_jchat_clear(&c);
    return rc;
}

/* What holds the answer (response_format, tool_choice, strict tools: ms_jgram), as a grammar
 * the engine compiles for the job's sequences; none when nothing asks. */
static int get_answer_grammar(ms_jobspec *j, json_t *body, const ms_jobfile_limits *lim)
{
    char why[800] = "";
    const char *param = NULL;
    if (ms_jgram_chat(body, lim->chat, lim->tok, j->prompt, j->n_prompt, &j->grammar, why, sizeof why, &param) != 0) {
        j->err_param = param;
        return bad(j, "invalid_request", "%s", why);
    }
    return 0;
}

/* The fields of a body (model, prompt or messages, max_tokens, sampling, stop) into j. */
static void parse_body(ms_jobspec *j, json_t *body, const ms_jobfile_limits *lim)
{
    json_t *model = json_object_get(body, "model");
    if (model && !json_is_string(model)) {
        bad(j, "invalid_request", "\"model\" must be a string");
        return;
    }
    if (model) j->model = ms_strdup(json_string_value(model));
    long long mt = 16, seed = 0;
    /* max_completion_tokens is the newer name of max_tokens: either may be given (a null one
     * counts as absent), not both; messages name the one given */
    json_t *mtv = json_object_get(body, "max_tokens"), *mcv = json_object_get(body, "max_completion_tokens");
    int has_mt = mtv && !json_is_null(mtv), has_mc = mcv && !json_is_null(mcv);
    if (has_mt && has_mc) {
        bad(j, "invalid_request", "give \"max_tokens\" or \"max_completion_tokens\", not both");
        return;
    }
    const char *mt_name = has_mc ? "max_completion_tokens" : "max_tokens";
    if (get_int(j, body, mt_name, LLONG_MIN, LLONG_MAX, &mt) != 0 || get_int(j, body, "seed", LLONG_MIN, LLONG_MAX, &seed) != 0 ||
        get_num(j, body, "temperature", 0, 1e6, 0, &j->temperature) != 0 || get_num(j, body, "top_p", 0, 1, 1, &j->top_p) != 0 ||
        get_stop(j, body) != 0 || get_sampling(j, body, lim) != 0)
        return;
    json_t *sk = json_object_get(body, "skip_special_tokens");
    if (sk && !json_is_null(sk) && !json_is_boolean(sk)) {
        j->err_param = "skip_special_tokens";
        bad(j, "invalid_request", "\"skip_special_tokens\" must be true or false");
        return;
    }
    j->keep_special = json_is_false(sk);
    long long n = 1;
    if (get_int(j, body, "n", 1, LLONG_MAX, &n) != 0) return;
    if (n > (lim->max_n > 1 ? lim->max_n : 1)) {
        j->err_param = "n";
        bad(j, "invalid_request", "\"n\" is %lld: at most %d choices here (%s)", n, lim->max_n > 1 ? lim->max_n : 1,
            lim->max_n > 1 ? "the batch holds them all: --max-batch" : "one choice per line: give each its own line and seed");
        return;
    }
    j->n = (int)n;
    if (mt < 1) {
        j->err_param = mt_name;
        bad(j, "invalid_max_tokens", "\"%s\" must be at least 1, got %lld", mt_name, mt);
        return;
    }
    j->max_tokens = mt;
    j->seed = (uint64_t)seed;
    if ((j->kind == MS_JOB_CHAT ? get_messages(j, body, lim) : get_prompt(j, body, lim)) != 0) return;
    if (j->kind == MS_JOB_CHAT && get_answer_grammar(j, body, lim) != 0) return;
    if (j->n_prompt == 0) {
        bad(j, "invalid_prompt", "the prompt is empty (no tokens)");
        return;
    }
    /* A chat without a limit runs to its end of turn, or to the end of the context. */
    if (j->kind == MS_JOB_CHAT && !has_mt && !has_mc && (int64_t)j->n_prompt < lim->max_context)
        j->max_tokens = lim->max_context - (int64_t)j->n_prompt;
    if ((int64_t)j->n_prompt > lim->max_context || j->max_tokens > lim->max_context - (int64_t)j->n_prompt)
        j->err_param = j->kind == MS_JOB_CHAT ? "messages" : "prompt",
        bad(j, "context_length_exceeded", "%zu prompt tokens + max_tokens %lld exceed the context of %lld tokens (--max-context)",
            j->n_prompt, (long long)j->max_tokens, (long long)lim->max_context);
}

json_t *ms_jobfile_json_load(const char *text, size_t len, json_error_t *je)
{
    /* A raw NUL is never valid JSON (RFC 8259 has no unescaped control characters), but jansson
     * is inconsistent about it: after a number it skips one and accepts the object. */
    const char *z = memchr(text, 0, len);
    if (z) {
        memset(je, 0, sizeof *je);
        snprintf(je->text, sizeof je->text, "a NUL byte at offset %zu (write it as \\u0000 inside a string)",
                 (size_t)(z - text));
        je->line = -1;
        je->column = -1;
        je->position = (int)(z - text);
        return NULL;
    }
    return json_loadb(text, len, JSON_REJECT_DUPLICATES, je);
}

void ms_jobspec_parse(const char *text, size_t len, int line, const ms_jobfile_limits *lim, ms_jobspec *j)
{
    memset(j, 0, sizeof *j);
    j->line = line;
    j->max_tokens = 16;
    j->top_p = 1.0f;
    json_error_t je;
    json_t *root = ms_jobfile_json_load(text, len, &je);
    size_t hl = len;
    while (hl > 0 && (text[hl - 1] == ' ' || text[hl - 1] == '\t' || text[hl - 1] == '\r')) hl--;
    snprintf(j->request_hash, sizeof j->request_hash, "%016llx", (unsigned long long)XXH3_64bits(text, hl));
    json_t *cid = root ? json_object_get(root, "custom_id") : NULL;
    if (json_is_string(cid)) j->custom_id = ms_strdup(json_string_value(cid));
    if (!j->custom_id) {
        char buf[32];
        snprintf(buf, sizeof buf, "line-%d", line);
        j->custom_id = ms_strdup(buf);
        j->auto_id = 1;
    }
    if (!root) {
        if (je.column < 0)
            bad(j, "invalid_json", "not valid JSON: %s", je.text);
        else
            bad(j, "invalid_json", "not valid JSON: %s (column %d)", je.text, je.column);
        return;
    }
    json_t *body = json_object_get(root, "body"), *url = json_object_get(root, "url"), *method = json_object_get(root, "method");
    if (!json_is_object(root)) {
        bad(j, "invalid_request", "a line must be a JSON object");
        goto out;
    }
    if (cid && !json_is_string(cid) && !json_is_null(cid)) { /* null: as if absent */
        bad(j, "invalid_request", "\"custom_id\" must be a string");
        goto out;
    }
    if (!body && !url) { /* short form: the line is the body */
        body = root;
        j->kind = json_object_get(body, "messages") ? MS_JOB_CHAT : MS_JOB_COMPLETION;
    } else {
        if (!json_is_object(body) || !json_is_string(url)) {
            bad(j, "invalid_request", "give both \"url\" (a string) and \"body\" (an object), or neither (short form)");
            goto out;
        }
        if (method && !(json_is_string(method) && !strcmp(json_string_value(method), "POST"))) {
            bad(j, "invalid_request", "\"method\" must be \"POST\"");
            goto out;
        }
        const char *u = json_string_value(url);
        if (!strcmp(u, "/v1/completions"))
            j->kind = MS_JOB_COMPLETION;
        else if (!strcmp(u, "/v1/chat/completions"))
            j->kind = MS_JOB_CHAT;
        else {
            bad(j, "invalid_url", "unknown \"url\" '%s' (known: /v1/completions, /v1/chat/completions)", u);
            goto out;
        }
    }
    /* the fields serve takes, and no others (a field this build does not implement is not
     * answered as if it were absent); a line's answer is whole */
    ms_reqfields_err fe;
    if (ms_reqfields_check(body, j->kind == MS_JOB_CHAT, body == root ? "custom_id" : NULL, &fe) != 0) {
        j->err_param = fe.param == fe.param_own ? NULL : fe.param; /* an unknown field: the message names it */
        bad(j, fe.code, "%s", fe.message);
        goto out;
    }
    static const char *const whole[2] = {"stream", "stream_options"};
    for (int i = 0; i < 2; i++) {
        json_t *w = json_object_get(body, whole[i]);
        if (w && !json_is_null(w) && !json_is_false(w)) {
            j->err_param = whole[i];
            bad(j, "unsupported_value", "\"%s\": a jobs line is answered whole (leave it out)", whole[i]);
            goto out;
        }
    }
    parse_body(j, body, lim);
out:
    json_decref(root);
}

void ms_jobspec_parse_body(json_t *body, ms_job_kind kind, const ms_jobfile_limits *lim, ms_jobspec *j)
{
    memset(j, 0, sizeof *j);
    j->max_tokens = 16;
    j->top_p = 1.0f;
    j->kind = kind;
    parse_body(j, body, lim);
}

void ms_jobspec_clear(ms_jobspec *j)
{
    free(j->custom_id);
    free(j->model);
    free(j->prompt);
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    free(j->stop);
    free(j->logit_bias);
    free(j->grammar);
    free(j->err_msg);
    memset(j, 0, sizeof *j);
}

void ms_jobspec_sched_job(const ms_jobspec *j, const ms_chatfmt *chat, const int32_t *chat_stop, int n_chat_stop,
                          ms_sched_job *sj)
{
    memset(sj, 0, sizeof *sj);
    sj->prompt = j->prompt;
    sj->n_prompt = j->n_prompt;
    sj->temperature = j->temperature;
    sj->top_p = j->top_p;
    sj->seed = j->seed;
    sj->max_tokens = j->max_tokens;
    sj->stop_at_eos = 1;
    if (j->kind == MS_JOB_CHAT && n_chat_stop > 0) { /* the end of the assistant's turn */
        sj->stop_ids = chat_stop;
        sj->n_stop_ids = n_chat_stop;
    }
    sj->stop = (const char *const *)j->stop;
    sj->n_stop = j->n_stop;
    sj->top_k = j->top_k;
    sj->min_p = j->min_p;
    sj->presence_penalty = j->presence_penalty;
    sj->frequency_penalty = j->frequency_penalty;
    sj->logit_bias = j->logit_bias;
    sj->n_logit_bias = j->n_logit_bias;
    sj->logprobs = j->logprobs;
    sj->top_logprobs = j->top_logprobs;
    sj->keep_special = j->keep_special;
    sj->grammar_text = j->grammar;
    if (j->kind == MS_JOB_CHAT) sj->chat = chat;
}

static char *uuid_str(const char *prefix)
{
    ms_uuid u;
    char s[37];
    ms_uuid_new(&u);
    ms_uuid_str(&u, s);
    size_t n = strlen(prefix) + 37;
    char *out = ms_malloc(n);
    snprintf(out, n, "%s%s", prefix, s);
    return out;
}

/* The line of root (consumed): compact JSON and '\n'. */
static char *line_of(json_t *root, size_t *len)
{
    char *s = json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(root);
    MS_ASSERT(s);
    size_t n = strlen(s);
    char *out = ms_malloc(n + 2);
    memcpy(out, s, n);
    out[n] = '\n';
    out[n + 1] = 0;
    free(s);
    *len = n + 1;
    return out;
}

static json_t *envelope(const ms_jobspec *j, json_t *response, json_t *error)
{
    char *id = uuid_str("batch_req_");
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(id));
    json_object_set_new(o, "custom_id", json_string(j->custom_id));
    if (j->request_hash[0]) json_object_set_new(o, "request_hash", json_string(j->request_hash));
    json_object_set_new(o, "response", response ? response : json_null());
    json_object_set_new(o, "error", error ? error : json_null());
    free(id);
    return o;
}

char *ms_jobline_error(const ms_jobspec *j, const char *code, const char *message, size_t *len)
{
    /* the message may quote the line's bytes, which need not be UTF-8 (json_pack would fail) */
    json_t *err = json_pack("{s:s,s:o}", "code", code, "message", ms_jtext(message, strlen(message)));
    return line_of(envelope(j, NULL, err), len);
}

json_t *ms_jobfile_tool_calls_json(const ms_chat_answer *a, int stream)
{
    char *id = uuid_str("call_");
    json_t *f = json_pack("{s:s,s:o}", "name", a->call_name, "arguments", ms_jtext(a->call_args, a->call_args_len));
    json_t *c = json_pack("{s:s,s:s,s:o}", "id", id, "type", "function", "function", f);
    if (stream) json_object_set_new(c, "index", json_integer(0));
    free(id);
    return json_pack("[o]", c);
}

json_t *ms_jobfile_message_json(const ms_chat_answer *a)
{
    /* a tool call without text: content null, as OpenAI answers */
    json_t *text = a->content && !(a->call_name && !a->content_len) ? ms_jtext(a->content, a->content_len) : json_null();
    json_t *m = json_pack("{s:s,s:o}", "role", "assistant", "content", text);
    if (a->reasoning) json_object_set_new(m, "reasoning_content", ms_jtext(a->reasoning, a->reasoning_len));
    if (a->call_name) json_object_set_new(m, "tool_calls", ms_jobfile_tool_calls_json(a, 0));
    return m;
}

const char *ms_jobfile_finish(const ms_chat_answer *a, const char *finish)
{
    return a && a->call_name && finish && !strcmp(finish, "stop") ? "tool_calls" : finish;
}

/* One token's name and bytes (tok NULL: "token_id:N" and no bytes). */
static void token_text(const ms_tok *tok, int32_t id, json_t **name, json_t **bytes, size_t *n_bytes)
{
    char *t = NULL;
    size_t tl = 0;
    *bytes = json_array();
    if (tok && ms_tok_decode(tok, &id, 1, &t, &tl) == 0) {
        *name = ms_jtext(t, tl);
        for (size_t i = 0; i < tl; i++) json_array_append_new(*bytes, json_integer((unsigned char)t[i]));
    } else {
        char b[32];
        snprintf(b, sizeof b, "token_id:%d", id);
        *name = json_string(b);
        tl = 0;
    }
    free(t);
    if (n_bytes) *n_bytes = tl;
}

static json_t *lp_entry(const ms_tok *tok, int32_t id, float logprob)
{
    json_t *name, *bytes;
    token_text(tok, id, &name, &bytes, NULL);
    return json_pack("{s:o,s:f,s:o,s:i}", "token", name, "logprob", (double)logprob, "bytes", bytes, "token_id", id);
}

json_t *ms_jobfile_logprobs_json(int chat, const ms_tok *tok, const int32_t *ids, const ms_token_logprob *lp, size_t n,
                                 int top, size_t *offset)
{
    if (chat) {
        json_t *content = json_array();
        for (size_t i = 0; i < n; i++) {
            json_t *e = lp_entry(tok, ids[i], lp[i].logprob), *alts = json_array();
            for (int k = 0; k < lp[i].n_top && k < top; k++)
                json_array_append_new(alts, lp_entry(tok, lp[i].top_id[k], lp[i].top_logprob[k]));
            json_object_set_new(e, "top_logprobs", alts);
            json_array_append_new(content, e);
        }
        return json_pack("{s:o,s:n}", "content", content, "refusal");
    }
    json_t *tokens = json_array(), *lps = json_array(), *tops = top > 0 ? json_array() : json_null(), *offs = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *name, *bytes;
        size_t nb = 0;
        token_text(tok, ids[i], &name, &bytes, &nb);
        json_decref(bytes);
        json_array_append_new(tokens, name);
        json_array_append_new(lps, json_real((double)lp[i].logprob));
        json_array_append_new(offs, json_integer((json_int_t)*offset));
        *offset += nb;
        if (top > 0) {
            json_t *d = json_object();
            for (int k = 0; k < lp[i].n_top && k < top; k++) {
                json_t *an, *ab;
                token_text(tok, lp[i].top_id[k], &an, &ab, NULL);
                json_decref(ab);
                if (!json_object_get(d, json_string_value(an))) /* two ids may decode alike: the likelier stays */
                    json_object_set_new(d, json_string_value(an), json_real((double)lp[i].top_logprob[k]));
                json_decref(an);
            }
            json_array_append_new(tops, d);
        }
    }
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops, "text_offset", offs);
}

/* a: the chat's answer split by its format, or NULL (a completion, or a format that does not
 * split: r's text is the content) */
static char *result_line(const ms_jobspec *j, const char *model, int64_t created, const ms_sched_result *r,
                         const ms_chat_answer *a, const ms_tok *tok, size_t *len)
{
    if (!r->finish) {
        char msg[1200];
        snprintf(msg, sizeof msg, "line %d: %s", j->line, r->error ? r->error : "failed");
        return ms_jobline_error(j, r->error_code == MS_EXIT_WORKER ? "worker_failure" : "runtime_error", msg, len);
    }
    int chat = j->kind == MS_JOB_CHAT;
    json_t *ids = json_array();
    for (size_t i = 0; i < r->n_tokens; i++) json_array_append_new(ids, json_integer(r->tokens[i]));
    ms_chat_answer plain = {(char *)r->text, r->text_len, NULL, 0, NULL, NULL, 0}; /* borrowed: never cleared */
    const ms_chat_answer *ans = a ? a : &plain;
    json_t *choice = json_object();
    json_object_set_new(choice, "index", json_integer(0));
    if (chat)
        json_object_set_new(choice, "message", ms_jobfile_message_json(ans));
    else /* a model without a tokenizer answers ids only: the text is empty, as in serve */
        json_object_set_new(choice, "text", ms_jtext(ans->content ? ans->content : "", ans->content ? ans->content_len : 0));
    size_t off = 0;
    json_object_set_new(choice, "logprobs", /* OpenAI always sends the key */
                        r->logprobs ? ms_jobfile_logprobs_json(chat, tok, r->tokens, r->logprobs, r->n_tokens,
                                                               j->top_logprobs, &off)
                                    : json_null());
    json_object_set_new(choice, "finish_reason", json_string(ms_jobfile_finish(a, r->finish)));
    json_object_set_new(choice, "token_ids", ids);
    char *bid = uuid_str(chat ? "chatcmpl-" : "cmpl-"), *rid = uuid_str("");
    json_t *usage = json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)r->prompt_tokens, "completion_tokens",
                              (json_int_t)r->n_tokens, "total_tokens", (json_int_t)(r->prompt_tokens + r->n_tokens));
    json_t *body = json_pack("{s:s,s:s,s:I,s:s,s:[o],s:o}", "id", bid, "object", chat ? "chat.completion" : "text_completion",
                             "created", (json_int_t)created, "model", j->model ? j->model : model, "choices", choice,
                             "usage", usage);
    json_t *resp = json_pack("{s:i,s:s,s:o}", "status_code", 200, "request_id", rid, "body", body);
    free(bid);
    free(rid);
    return line_of(envelope(j, resp, NULL), len);
}

char *ms_jobline_result(const ms_jobspec *j, const char *model, int64_t created, const ms_sched_result *r,
                        size_t *len)
{
    return result_line(j, model, created, r, NULL, NULL, len);
}

char *ms_jobline_result_tok(const ms_jobspec *j, const char *model, int64_t created, const ms_sched_result *r,
                            const ms_tok *tok, size_t *len)
{
    return result_line(j, model, created, r, NULL, tok, len);
}

char *ms_jobline_result_chat(const ms_jobspec *j, const char *model, int64_t created, const ms_sched_result *r,
                             const ms_jobfile_limits *lim, size_t *len)
{
    if (!r->finish || j->kind != MS_JOB_CHAT || !r->answer) return ms_jobline_result_tok(j, model, created, r, lim->tok, len);
    return result_line(j, model, created, r, r->answer, lim->tok, len);
}

int ms_jobline_scan_hashes(const char *buf, size_t len, char ***ids, char ***hashes, size_t *n, size_t *keep)
{
    *ids = NULL;
    if (hashes) *hashes = NULL;
    *n = 0;
    *keep = 0;
    size_t cap = 0, pos = 0;
    int line = 0;
    while (pos < len) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        if (!nl) break; /* a torn last line */
        line++;
        size_t l = (size_t)(nl - (buf + pos));
        json_t *o = json_loadb(buf + pos, l, JSON_ALLOW_NUL, NULL); /* texts may hold U+0000 */
        json_t *cid = o ? json_object_get(o, "custom_id") : NULL, *rh = o ? json_object_get(o, "request_hash") : NULL;
        if (!json_is_string(cid) || !json_object_get(o, "response") || !json_object_get(o, "error") ||
            (rh && !json_is_string(rh))) {
            json_decref(o);
            for (size_t i = 0; i < *n; i++) {
                free((*ids)[i]);
                if (hashes) free((*hashes)[i]);
            }
            free(*ids);
            *ids = NULL;
            if (hashes) {
                free(*hashes);
                *hashes = NULL;
            }
            *n = 0;
            ms_err_set("line %d is not an output line of moestream jobs (a JSON object with custom_id, response and "
                       "error)", line);
            return ms_err_set_code(MS_EXIT_INPUT);
        }
        if (*n == cap) {
            cap = cap * 2 + 16;
            *ids = ms_realloc(*ids, sizeof **ids * cap);
            if (hashes) *hashes = ms_realloc(*hashes, sizeof **hashes * cap);
        }
        if (hashes) (*hashes)[*n] = rh ? ms_strdup(json_string_value(rh)) : NULL;
        (*ids)[(*n)++] = ms_strdup(json_string_value(cid));
        json_decref(o);
        pos += l + 1;
        *keep = pos;
    }
    return 0;
}

int ms_jobline_scan(const char *buf, size_t len, char ***ids, size_t *n, size_t *keep)
{
    return ms_jobline_scan_hashes(buf, len, ids, NULL, n, keep);
}
