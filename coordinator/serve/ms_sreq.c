/* ms_sreq: serve's request bodies (the jobs checks plus stream, n and unknown fields) and the
 * OpenAI completion, chunk and error objects. */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ms_err.h"
#include "ms_jtext.h"
#include "ms_reqfields.h"
#include "ms_sreq.h"
#include "ms_wire.h"

static int refuse(ms_sreq *r, int status, const char *code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int refuse(ms_sreq *r, int status, const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->status = status;
    r->code = code;
    free(r->message);
    r->message = ms_strdup(msg);
    return -1;
}

/* The fields (ms_reqfields), then the HTTP-only ones: stream, stream_options, and the strings
 * that change nothing. */
static int check_fields(ms_sreq *r, json_t *body)
{
    ms_reqfields_err e;
    json_t *v;
    if (ms_reqfields_check(body, r->chat, NULL, &e) != 0) {
        snprintf(r->param_own, sizeof r->param_own, "%s", e.param_own);
        r->param = e.param == e.param_own ? r->param_own : e.param;
        return refuse(r, 400, e.code, "%s", e.message);
    }
    v = json_object_get(body, "stream");
    if (v && !json_is_null(v) && !json_is_boolean(v)) return refuse(r, 400, "invalid_request", "\"stream\" must be a boolean");
    r->stream = json_is_true(v);
    v = json_object_get(body, "stream_options");
    if (v && !json_is_null(v)) {
        json_t *u = json_object_get(v, "include_usage");
        if (!json_is_object(v) || json_object_size(v) != (u ? 1u : 0u) || (u && !json_is_boolean(u)))
            return refuse(r, 400, "invalid_request", "\"stream_options\" must be {\"include_usage\": true|false}");
        if (!r->stream) return refuse(r, 400, "invalid_request", "\"stream_options\" needs \"stream\": true");
        r->include_usage = json_is_true(u);
    }
    static const char *const strings[] = {"user", "safety_identifier", "prompt_cache_key"};
    for (int i = 0; i < 3; i++) {
        v = json_object_get(body, strings[i]);
        if (v && !json_is_null(v) && !json_is_string(v)) {
            r->param = strings[i];
            return refuse(r, 400, "invalid_request", "\"%s\" must be a string", strings[i]);
        }
    }
    /* max_completion_tokens: read with max_tokens by the body parser (ms_jobspec_parse_body) */
    return 0;
}

int ms_sreq_parse(const char *text, size_t len, int chat, const ms_jobfile_limits *lim, ms_sreq *r)
{
    memset(r, 0, sizeof *r);
    r->chat = chat;
    json_error_t je;
    json_t *body = ms_jobfile_json_load(text, len, &je);
    if (!body && je.line < 0) return refuse(r, 400, "invalid_json", "the body is not valid JSON: %s", je.text);
    if (!body) return refuse(r, 400, "invalid_json", "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    int rc = 0;
    if (!json_is_object(body))
        rc = refuse(r, 400, "invalid_request", "the body must be a JSON object");
    else if (chat && json_object_get(body, "prompt"))
        rc = refuse(r, 400, "unsupported_field", "a chat takes \"messages\", not \"prompt\" (use /v1/completions)");
    else if (check_fields(r, body) != 0)
        rc = -1;
    /* OpenAI's batch of prompts ("prompt": ["a", "b"] or [[ids], [ids]]): a spec each, the
     * body otherwise the same */
    json_t *p = chat ? NULL : json_object_get(body, "prompt");
    size_t np = json_is_array(p) && json_array_size(p) > 1 &&
                        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0)))
                    ? json_array_size(p)
                    : 1;
    if (rc == 0 && np > 64) rc = refuse(r, 400, "invalid_request", "\"prompt\" holds %zu prompts: at most 64 a request", np);
    if (rc == 0 && np > 1) r->more = ms_calloc(np - 1, sizeof *r->more);
    for (size_t k = 0; rc == 0 && k < np; k++) {
        ms_jobspec *sp = k ? &r->more[k - 1] : &r->spec;
        json_t *one = body;
        if (np > 1) {
            one = json_copy(body);
            json_object_set(one, "prompt", json_array_get(p, k));
        }
        ms_jobspec_parse_body(one, chat ? MS_JOB_CHAT : MS_JOB_COMPLETION, lim, sp);
        if (one != body) json_decref(one);
        if (k) r->n_more = (int)k;
        if (sp->err_code) {
            rc = np > 1 ? refuse(r, 400, sp->err_code, "prompt %zu: %s", k, sp->err_msg)
                        : refuse(r, 400, sp->err_code, "%s", sp->err_msg);
            r->param = sp->err_param;
        }
    }
    json_decref(body);
    return rc;
}

void ms_sreq_clear(ms_sreq *r)
{
    ms_jobspec_clear(&r->spec);
    for (int k = 0; k < r->n_more; k++) ms_jobspec_clear(&r->more[k]);
    free(r->more);
    free(r->message);
    memset(r, 0, sizeof *r);
}

/* The compact JSON of o (consumed), with a prefix and a suffix. */
static char *dump(json_t *o, const char *pre, const char *post, size_t *len)
{
    char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(o);
    MS_ASSERT(s);
    size_t a = strlen(pre), n = strlen(s), b = strlen(post);
    char *out = ms_malloc(a + n + b + 1);
    memcpy(out, pre, a);
    memcpy(out + a, s, n);
    memcpy(out + a + n, post, b + 1);
    free(s);
    *len = a + n + b;
    return out;
}

char *ms_sreq_error_json(int status, const char *code, const char *message, const char *param, size_t *len)
{
    /* the message may quote the request's bytes, which need not be UTF-8 (json_pack would fail) */
    /* OpenAI's types: rate limits are "requests" (what its clients' RateLimitError carries) */
    json_t *e = json_pack("{s:o,s:s,s:o,s:s}", "message", ms_jtext(message, strlen(message)), "type",
                          status == 429 ? "requests" : status < 500 ? "invalid_request_error" : "server_error", "param",
                          param ? ms_jtext(param, strlen(param)) : json_null(), "code", code);
    return dump(json_pack("{s:o}", "error", e), "", "\n", len);
}

char *ms_sreq_models_json(const char *model, int64_t max_context, const char *id, int *status, size_t *len)
{
    json_t *m = json_pack("{s:s,s:s,s:I,s:s,s:I,s:I}", "id", model, "object", "model", "created", (json_int_t)0, "owned_by",
                          "moestream", "context_length", (json_int_t)max_context, "max_model_len", (json_int_t)max_context);
    *status = 200;
    if (id && strcmp(id, model)) {
        json_decref(m);
        char msg[400];
        snprintf(msg, sizeof msg, "the model '%.200s' does not exist here (this server has '%.60s')", id, model);
        *status = 404;
        return ms_sreq_error_json(404, "model_not_found", msg, "model", len);
    }
    return dump(id ? m : json_pack("{s:s,s:[o]}", "object", "list", "data", m), "", "", len);
}

void ms_sreq_ident_new(const ms_sreq *r, const char *default_model, ms_sreq_ident *id)
{
    ms_uuid u;
    char s[37];
    ms_uuid_new(&u);
    ms_uuid_str(&u, s);
    snprintf(id->id, sizeof id->id, "%s%s", r->chat ? "chatcmpl-" : "cmpl-", s);
    id->model = r->spec.model ? r->spec.model : default_model;
    id->created = (int64_t)time(NULL);
}

static json_t *ids_of(const int32_t *tok, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(tok[i]));
    return a;
}

static json_t *usage_of(size_t p, size_t c)
{
    return json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)p, "completion_tokens", (json_int_t)c,
                     "total_tokens", (json_int_t)(p + c));
}

static json_t *head(const ms_sreq_ident *id, const char *object)
{
    return json_pack("{s:s,s:s,s:I,s:s}", "id", id->id, "object", object, "created", (json_int_t)id->created, "model",
                     id->model);
}

char *ms_sreq_completion(const ms_sreq *r, const ms_sreq_ident *id, const int32_t *tok, size_t n_tok, const char *text,
                         size_t text_len, const char *finish, size_t prompt_tokens, json_t *logprobs, size_t *len)
{
    ms_chat_answer plain = {(char *)text, text_len, NULL, 0, NULL, NULL, 0}; /* borrowed: never cleared */
    return ms_sreq_chat_completion(r, id, tok, n_tok, &plain, finish, prompt_tokens, logprobs, len);
}

json_t *ms_sreq_choice(const ms_sreq *r, int index, const int32_t *tok, size_t n_tok, const ms_chat_answer *a,
                       const char *finish, json_t *logprobs)
{
    json_t *c = json_object();
    json_object_set_new(c, "index", json_integer(index));
    if (r->chat) {
        json_object_set_new(c, "message", ms_jobfile_message_json(a));
    } else { /* a model without a tokenizer: "" as in the streamed chunks */
        json_object_set_new(c, "text", ms_jtext(a->content ? a->content : "", a->content ? a->content_len : 0));
    }
    json_object_set_new(c, "logprobs", logprobs ? logprobs : json_null());
    json_object_set_new(c, "finish_reason", json_string(ms_jobfile_finish(a, finish)));
    json_object_set_new(c, "token_ids", ids_of(tok, n_tok));
    return c;
}

char *ms_sreq_completion_choices(const ms_sreq *r, const ms_sreq_ident *id, json_t *choices, size_t prompt_tokens,
                                 size_t completion_tokens, size_t *len)
{
    json_t *o = head(id, r->chat ? "chat.completion" : "text_completion");
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", usage_of(prompt_tokens, completion_tokens));
    return dump(o, "", "\n", len);
}

char *ms_sreq_chat_completion(const ms_sreq *r, const ms_sreq_ident *id, const int32_t *tok, size_t n_tok,
                              const ms_chat_answer *a, const char *finish, size_t prompt_tokens, json_t *logprobs,
                              size_t *len)
{
    json_t *c = ms_sreq_choice(r, 0, tok, n_tok, a, finish, logprobs);
    return ms_sreq_completion_choices(r, id, json_pack("[o]", c), prompt_tokens, n_tok, len);
}

char *ms_sreq_chunk(const ms_sreq *r, const ms_sreq_ident *id, int index, const int32_t *tok, size_t n_tok,
                    const char *text, size_t text_len, const char *finish, int first, json_t *logprobs, size_t *len)
{
    return ms_sreq_chat_chunk(r, id, index, tok, n_tok, text, text_len, NULL, 0, finish, first, logprobs, len);
}

char *ms_sreq_chat_chunk(const ms_sreq *r, const ms_sreq_ident *id, int index, const int32_t *tok, size_t n_tok,
                         const char *text, size_t text_len, const char *reasoning, size_t rlen, const char *finish,
                         int first, json_t *logprobs, size_t *len)
{
    json_t *c = json_object();
    json_object_set_new(c, "index", json_integer(index));
    json_t *t = text ? ms_jtext(text, text_len) : json_string("");
    if (r->chat) {
        json_t *d = json_object();
        if (first) json_object_set_new(d, "role", json_string("assistant"));
        if (text_len || (!finish && !rlen))
            json_object_set_new(d, "content", t);
        else
            json_decref(t);
        if (rlen) json_object_set_new(d, "reasoning_content", ms_jtext(reasoning, rlen));
        json_object_set_new(c, "delta", d);
    } else {
        json_object_set_new(c, "text", t);
    }
    json_object_set_new(c, "logprobs", logprobs ? logprobs : json_null());
    json_object_set_new(c, "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(c, "token_ids", ids_of(tok, n_tok));
    json_t *o = head(id, r->chat ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(o, "choices", json_pack("[o]", c));
    if (r->include_usage) json_object_set_new(o, "usage", json_null());
    return dump(o, "data: ", "\n\n", len);
}

char *ms_sreq_tool_chunk(const ms_sreq *r, const ms_sreq_ident *id, int index, const ms_chat_answer *a, int first,
                         size_t *len)
{
    /* As OpenAI streams a call: its id and name with empty arguments, then the arguments, then
     * the finish alone (clients close a call's arguments when the next event comes). */
    json_t *calls = ms_jobfile_tool_calls_json(a, 1);
    json_t *fn = json_object_get(json_array_get(calls, 0), "function");
    json_t *args = json_incref(json_object_get(fn, "arguments"));
    json_object_set_new(fn, "arguments", json_string(""));
    char *out = NULL;
    size_t n = 0;
    for (int part = 0; part < 3; part++) {
        json_t *d = json_object();
        if (part == 0 && first) json_object_set_new(d, "role", json_string("assistant"));
        if (part == 0) json_object_set_new(d, "tool_calls", json_incref(calls));
        if (part == 1)
            json_object_set_new(d, "tool_calls", json_pack("[{s:i,s:{s:O}}]", "index", 0, "function", "arguments", args));
        json_t *c = json_pack("{s:i,s:o,s:n,s:o,s:[]}", "index", index, "delta", d, "logprobs", "finish_reason",
                              part == 2 ? json_string("tool_calls") : json_null(), "token_ids");
        json_t *o = head(id, "chat.completion.chunk");
        json_object_set_new(o, "choices", json_pack("[o]", c));
        if (r->include_usage) json_object_set_new(o, "usage", json_null());
        size_t l;
        char *ev = dump(o, "data: ", "\n\n", &l);
        out = ms_realloc(out, n + l + 1);
        memcpy(out + n, ev, l + 1);
        n += l;
        free(ev);
    }
    json_decref(args);
    json_decref(calls);
    *len = n;
    return out;
}

char *ms_sreq_usage_chunk(const ms_sreq *r, const ms_sreq_ident *id, size_t prompt_tokens, size_t completion_tokens,
                          size_t *len)
{
    json_t *o = head(id, r->chat ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(o, "choices", json_array());
    json_object_set_new(o, "usage", usage_of(prompt_tokens, completion_tokens));
    return dump(o, "data: ", "\n\n", len);
}

size_t ms_sreq_utf8_ready(const char *text, size_t len)
{
    /* A lead byte in the last 3 bytes whose character needs more bytes than there are; the
     * continuation bytes between must be valid, or the lead byte is invalid already (it then
     * becomes U+FFFD whatever follows). */
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        unsigned c = (unsigned char)text[len - back];
        if ((c & 0xc0) == 0x80) continue; /* a continuation byte */
        size_t need = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
        return need > back ? len - back : len;
    }
    return len;
}
