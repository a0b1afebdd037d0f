/* ms_sresp: OpenAI's Responses API: request bodies -> chat request bodies (with stored turns), answers -> response objects and typed SSE events, the store. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ms_err.h"
#include "ms_jtext.h"
#include "ms_sresp.h"
#include "ms_wire.h"

/* ---- the store ---- */

typedef struct {
    char id[64];
    json_t *msgs; /* the turn's chat messages, its answer last */
} entry;

struct ms_sresp_store {
    pthread_mutex_t mu;
    entry *e;     /* [cap] a ring: next is the oldest once full */
    int cap, next;
};

ms_sresp_store *ms_sresp_store_new(int cap)
{
    ms_sresp_store *s = ms_calloc(1, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    s->cap = cap > 0 ? cap : 1;
    s->e = ms_calloc((size_t)s->cap, sizeof *s->e);
    return s;
}

void ms_sresp_store_free(ms_sresp_store *s)
{
    if (!s) return;
    for (int i = 0; i < s->cap; i++) json_decref(s->e[i].msgs);
    free(s->e);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* A copy of the stored turn id (NULL: none kept). */
static json_t *store_get(ms_sresp_store *s, const char *id)
{
    json_t *r = NULL;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->cap && !r; i++)
        if (s->e[i].msgs && !strcmp(s->e[i].id, id)) r = json_deep_copy(s->e[i].msgs);
    pthread_mutex_unlock(&s->mu);
    return r;
}

void ms_sresp_store_put(ms_sresp_store *st, const ms_sresp_req *r, const ms_chat_answer *a)
{
    if (!st || !r->store || !r->history) return;
    json_t *msgs = json_deep_copy(r->history);
    json_t *m = json_pack("{s:s}", "role", "assistant");
    int call = a && a->call_name && a->call_args;
    size_t cl = a && a->content ? a->content_len : 0;
    json_object_set_new(m, "content", cl || !call ? ms_jtext(a && a->content ? a->content : "", cl) : json_null());
    if (a && a->reasoning && a->reasoning_len) json_object_set_new(m, "reasoning_content", ms_jtext(a->reasoning, a->reasoning_len));
    if (call)
        json_object_set_new(m, "tool_calls",
                            json_pack("[{s:s,s:s,s:{s:s,s:o}}]", "id", r->call_id, "type", "function", "function", "name",
                                      a->call_name, "arguments", ms_jtext(a->call_args, a->call_args_len)));
    json_array_append_new(msgs, m);
    pthread_mutex_lock(&st->mu);
    entry *e = &st->e[st->next];
    json_decref(e->msgs);
    snprintf(e->id, sizeof e->id, "%s", r->id);
    e->msgs = msgs;
    st->next = (st->next + 1) % st->cap;
    pthread_mutex_unlock(&st->mu);
}

void ms_sresp_req_clear(ms_sresp_req *r)
{
    if (!r) return;
    json_decref(r->echo);
    json_decref(r->history);
    memset(r, 0, sizeof *r);
}

/* ---- requests ---- */

static json_t *no(char *why, size_t n, const char **param, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static json_t *no(char *why, size_t n, const char **param, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    *param = field;
    return NULL;
}

static const char *str_of(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* A content (a string, or input_text / output_text parts) as text; NULL with why set. */
static json_t *content_text(const json_t *c, const char *what, char *why, size_t n)
{
    if (json_is_string(c)) return json_incref((json_t *)c);
    if (!json_is_array(c)) return snprintf(why, n, "%s: content must be a string or an array of parts", what), NULL;
    ms_sbuf b = {0};
    for (size_t k = 0; k < json_array_size(c); k++) {
        const json_t *p = json_array_get(c, k);
        const char *ty = str_of(p, "type"), *t = str_of(p, "text");
        if (!ty || (strcmp(ty, "input_text") && strcmp(ty, "output_text")) || !t) {
            ms_sbuf_free(&b);
            return snprintf(why, n, "%s: part %zu must be {\"type\": \"input_text\" or \"output_text\", \"text\": ...} "
                            "(this server reads text)", what, k),
                   NULL;
        }
        if (k) ms_sbuf_adds(&b, "\n");
        ms_sbuf_add(&b, t, strlen(t));
    }
    json_t *s = json_stringn(b.s ? b.s : "", b.n);
    ms_sbuf_free(&b);
    return s;
}

/* The input items appended to msgs as chat messages (calls: call_id -> name, for the results). */
static int input_items(const json_t *in, json_t *msgs, json_t *calls, char *why, size_t n, const char **param)
{
    if (json_is_string(in)) {
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", in));
        return 0;
    }
    if (!json_is_array(in)) return no(why, n, param, "input", "\"input\" must be a string or an array of items"), -1;
    ms_sbuf think = {0};
    int has_think = 0, rc = -1;
    for (size_t i = 0; i < json_array_size(in); i++) {
        const json_t *it = json_array_get(in, i);
        const char *ty = str_of(it, "type"), *role = str_of(it, "role");
        char what[48];
        snprintf(what, sizeof what, "input[%zu]", i);
        if (!json_is_object(it)) {
            no(why, n, param, "input", "%s must be an object", what);
            goto out;
        }
        if ((!ty && role) || (ty && !strcmp(ty, "message"))) {
            if (!role || (strcmp(role, "user") && strcmp(role, "system") && strcmp(role, "developer") && strcmp(role, "assistant"))) {
                no(why, n, param, "input", "%s: a message's role is user, system, developer or assistant", what);
                goto out;
            }
            json_t *t = content_text(json_object_get(it, "content"), what, why, n);
            if (!t) {
                *param = "input";
                goto out;
            }
            json_t *m = json_pack("{s:s,s:o}", "role", role, "content", t);
            if (!strcmp(role, "assistant") && has_think) {
                json_object_set_new(m, "reasoning_content", json_stringn(think.s ? think.s : "", think.n));
                think.n = 0, has_think = 0;
            }
            json_array_append_new(msgs, m);
        } else if (ty && !strcmp(ty, "function_call")) {
            const char *id = str_of(it, "call_id"), *name = str_of(it, "name"), *args = str_of(it, "arguments");
            if (!id || !name || !args) {
                no(why, n, param, "input", "%s: a function_call needs call_id, name and arguments (strings)", what);
                goto out;
            }
            json_t *call = json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function", "function", "name", name,
                                     "arguments", args);
            json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
            const char *lr = str_of(last, "role");
            if (last && lr && !strcmp(lr, "assistant") && !json_object_get(last, "tool_calls") && !has_think) {
                json_object_set_new(last, "tool_calls", json_pack("[o]", call));
            } else {
                json_t *m = json_pack("{s:s,s:n,s:[o]}", "role", "assistant", "content", "tool_calls", call);
                if (has_think) {
                    json_object_set_new(m, "reasoning_content", json_stringn(think.s ? think.s : "", think.n));
                    think.n = 0, has_think = 0;
                }
                json_array_append_new(msgs, m);
            }
            json_object_set_new(calls, id, json_string(name));
        } else if (ty && !strcmp(ty, "function_call_output")) {
            const char *id = str_of(it, "call_id");
            json_t *t = id ? content_text(json_object_get(it, "output"), what, why, n) : NULL;
            if (!t) {
                if (!id) no(why, n, param, "input", "%s: a function_call_output needs call_id (a string)", what);
                *param = "input";
                goto out;
            }
            json_t *m = json_pack("{s:s,s:s,s:o}", "role", "tool", "tool_call_id", id, "content", t);
            const char *name = str_of(calls, id);
            if (name) json_object_set_new(m, "name", json_string(name));
            json_array_append_new(msgs, m);
        } else if (ty && !strcmp(ty, "reasoning")) { /* its text goes with the next assistant turn */
            const json_t *parts[2] = {json_object_get(it, "content"), json_object_get(it, "summary")};
            for (int p = 0; p < 2; p++)
                for (size_t k = 0; k < json_array_size(parts[p]); k++) {
                    const char *t = str_of(json_array_get(parts[p], k), "text");
                    if (t) ms_sbuf_add(&think, t, strlen(t)), has_think = 1;
                }
        } else {
            no(why, n, param, "input", "%s: items of type \"%s\" are not served here (message, function_call, "
               "function_call_output, reasoning)", what, ty ? ty : "(none)");
            goto out;
        }
    }
    rc = 0;
out:
    ms_sbuf_free(&think);
    return rc;
}

static json_t *tools_of(const json_t *tools, char *why, size_t n, const char **param)
{
    if (!json_is_array(tools)) return no(why, n, param, "tools", "\"tools\" must be an array");
    json_t *out = json_array();
    for (size_t k = 0; k < json_array_size(tools); k++) {
        const json_t *t = json_array_get(tools, k);
        const char *ty = str_of(t, "type"), *name = str_of(t, "name");
        if (!ty || strcmp(ty, "function") || !name) {
            json_decref(out);
            return no(why, n, param, "tools", "tools[%zu]: function tools only ({\"type\": \"function\", \"name\", "
                      "\"parameters\", ...}; \"%s\" is the API's own)", k, ty ? ty : "(none)");
        }
        json_t *f = json_pack("{s:s}", "name", name);
        const char *keys[3] = {"description", "parameters", "strict"};
        for (int i = 0; i < 3; i++) {
            json_t *v = json_object_get(t, keys[i]);
            if (v && !json_is_null(v)) json_object_set(f, keys[i], v);
        }
        json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", f));
    }
    return out;
}

json_t *ms_sresp_to_chat(const char *body, size_t len, ms_sresp_store *st, const char *default_model, ms_sresp_req *r,
                         int *status, char *why, size_t n, const char **param)
{
    static const char *const known[] = {"model", "input", "instructions", "max_output_tokens", "temperature", "top_p",
                                        "stream", "tools", "tool_choice", "previous_response_id", "store", "metadata",
                                        "user", "parallel_tool_calls", "truncation", "include", "service_tier",
                                        "prompt_cache_key", "safety_identifier", "background", "reasoning", "text", NULL};
    memset(r, 0, sizeof *r);
    *status = 400;
    *param = NULL;
    json_error_t je;
    json_t *in = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je), *out = NULL, *v;
    if (!json_is_object(in)) {
        snprintf(why, n, "the body is not a JSON object%s%s", in ? "" : ": ", in ? "" : je.text);
        *param = "body";
        json_decref(in);
        return NULL;
    }
    const char *k;
    json_object_foreach(in, k, v) {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++) ok = !strcmp(k, known[i]);
        if (!ok) {
            no(why, n, param, k, "\"%s\" is not a field of /v1/responses that this server takes (see docs/API.md)", k);
            *param = "body";
            goto done;
        }
    }
    /* fields taken at the values that change nothing here */
    v = json_object_get(in, "truncation");
    if (v && !json_is_null(v) && !(json_is_string(v) && !strcmp(json_string_value(v), "disabled"))) {
        no(why, n, param, "truncation", "\"truncation\": only \"disabled\" (a prompt longer than the context is refused)");
        goto done;
    }
    v = json_object_get(in, "include");
    if (v && !json_is_null(v) && !(json_is_array(v) && !json_array_size(v))) {
        no(why, n, param, "include", "\"include\": nothing more to include here ([])");
        goto done;
    }
    v = json_object_get(in, "background");
    if (v && !json_is_null(v) && !json_is_false(v)) {
        no(why, n, param, "background", "\"background\": false only (answers are streamed or waited for)");
        goto done;
    }
    const json_t *text = json_object_get(in, "text"), *fmt = json_object_get(text, "format");
    if (text && !json_is_null(text)) {
        const char *ft = str_of(fmt, "type"), *verb = str_of(text, "verbosity");
        json_t *vb = json_object_get(text, "verbosity");
        if (!json_is_object(text) ||
            (fmt && !json_is_null(fmt) && (!ft || (strcmp(ft, "text") && strcmp(ft, "json_object") && strcmp(ft, "json_schema")))) ||
            (vb && !json_is_null(vb) && (!verb || strcmp(verb, "medium")))) {
            no(why, n, param, "text", "\"text\": format {\"type\": \"text\" | \"json_object\" | \"json_schema\"} and "
               "verbosity \"medium\"");
            goto done;
        }
    }
    const json_t *rs = json_object_get(in, "reasoning");
    if (rs && !json_is_null(rs)) {
        json_t *sum = json_object_get(rs, "summary");
        if (!json_is_object(rs) || (sum && !json_is_null(sum))) {
            no(why, n, param, "reasoning", "\"reasoning\": {\"effort\"} only (this server returns the reasoning itself, "
               "not a summary: leave \"summary\" out)");
            goto done;
        }
    }
    v = json_object_get(in, "store");
    if (v && !json_is_null(v) && !json_is_boolean(v)) {
        no(why, n, param, "store", "\"store\" must be a boolean");
        goto done;
    }
    r->store = !(v && json_is_false(v));
    json_t *msgs = json_array(), *calls = json_object();
    const char *prev = str_of(in, "previous_response_id");
    if (json_object_get(in, "previous_response_id") && !json_is_null(json_object_get(in, "previous_response_id")) && !prev) {
        json_decref(msgs);
        json_decref(calls);
        no(why, n, param, "previous_response_id", "\"previous_response_id\" must be a string");
        goto done;
    }
    if (prev) {
        json_t *old = st ? store_get(st, prev) : NULL;
        if (!old) {
            json_decref(msgs);
            json_decref(calls);
            *status = 404;
            no(why, n, param, "previous_response_id", "no stored response '%s' (responses are kept in memory, the most "
               "recent only, and not when \"store\" was false)", prev);
            goto done;
        }
        json_decref(msgs);
        msgs = old;
        for (size_t i = 0; i < json_array_size(msgs); i++) { /* its calls, for naming their results */
            json_t *tc = json_object_get(json_array_get(msgs, i), "tool_calls");
            for (size_t j = 0; j < json_array_size(tc); j++) {
                const char *id = str_of(json_array_get(tc, j), "id");
                const char *nm = str_of(json_object_get(json_array_get(tc, j), "function"), "name");
                if (id && nm) json_object_set_new(calls, id, json_string(nm));
            }
        }
    }
    const json_t *input = json_object_get(in, "input");
    if (!input || json_is_null(input)) {
        json_decref(msgs);
        json_decref(calls);
        no(why, n, param, "input", "\"input\" is required (a string or an array of items)");
        goto done;
    }
    int irc = input_items(input, msgs, calls, why, n, param);
    json_decref(calls);
    if (irc != 0) {
        json_decref(msgs);
        goto done;
    }
    r->history = msgs;
    json_t *chat = json_array();
    const json_t *ins = json_object_get(in, "instructions");
    if (ins && !json_is_null(ins)) {
        if (!json_is_string(ins)) {
            json_decref(chat);
            no(why, n, param, "instructions", "\"instructions\" must be a string");
            goto done;
        }
        json_array_append_new(chat, json_pack("{s:s,s:O}", "role", "system", "content", ins));
    }
    json_array_extend(chat, msgs);
    out = json_pack("{s:o}", "messages", chat);
    static const char *const same[] = {"model", "temperature", "top_p", "stream", NULL};
    for (int i = 0; same[i]; i++)
        if ((v = json_object_get(in, same[i]))) json_object_set(out, same[i], v);
    if ((v = json_object_get(in, "max_output_tokens")) && !json_is_null(v)) json_object_set(out, "max_tokens", v);
    if (fmt && !json_is_null(fmt) && str_of(fmt, "type") && strcmp(str_of(fmt, "type"), "text")) {
        /* structured outputs: the chat's response_format (json_schema's fields one level down there) */
        if (!strcmp(str_of(fmt, "type"), "json_object")) {
            json_object_set_new(out, "response_format", json_pack("{s:s}", "type", "json_object"));
        } else {
            json_t *js = json_object();
            const char *keys[4] = {"name", "schema", "strict", "description"};
            for (int i = 0; i < 4; i++)
                if (json_object_get(fmt, keys[i])) json_object_set(js, keys[i], json_object_get(fmt, keys[i]));
            json_object_set_new(out, "response_format", json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js));
        }
    }
    if ((v = json_object_get(in, "user")) && !json_is_null(v)) json_object_set(out, "user", v);
    if (rs && (v = json_object_get(rs, "effort")) && !json_is_null(v)) json_object_set(out, "reasoning_effort", v);
    if ((v = json_object_get(in, "tools")) && !json_is_null(v)) {
        json_t *t = tools_of(v, why, n, param);
        if (!t) goto fail;
        json_object_set_new(out, "tools", t);
    }
    if ((v = json_object_get(in, "tool_choice")) && !json_is_null(v)) {
        if (json_is_string(v)) {
            json_object_set(out, "tool_choice", v);
        } else if (str_of(v, "type") && !strcmp(str_of(v, "type"), "function") && str_of(v, "name")) {
            json_object_set_new(out, "tool_choice", json_pack("{s:s,s:{s:s}}", "type", "function", "function", "name",
                                                              str_of(v, "name")));
        } else {
            no(why, n, param, "tool_choice", "\"tool_choice\": \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
               "\"name\"}");
            goto fail;
        }
    }
    /* what the response object repeats */
    r->echo = json_object();
    static const char *const echo[] = {"instructions", "previous_response_id", "tools", "tool_choice", "temperature", "top_p",
                                       "max_output_tokens", "metadata", "user", "reasoning", "parallel_tool_calls", "text",
                                       NULL};
    for (int i = 0; echo[i]; i++)
        if ((v = json_object_get(in, echo[i])) && !json_is_null(v)) json_object_set(r->echo, echo[i], v);
    {
        ms_uuid u;
        char s[37];
        ms_uuid_new(&u);
        ms_uuid_str(&u, s);
        snprintf(r->id, sizeof r->id, "resp_%s", s);
        snprintf(r->msg_id, sizeof r->msg_id, "msg_%s", s);
        snprintf(r->rs_id, sizeof r->rs_id, "rs_%s", s);
        snprintf(r->fc_id, sizeof r->fc_id, "fc_%s", s);
        snprintf(r->call_id, sizeof r->call_id, "call_%s", s);
    }
    r->created = (int64_t)time(NULL);
    snprintf(r->model, sizeof r->model, "%s", str_of(in, "model") ? str_of(in, "model") : default_model);
    goto done;
fail:
    json_decref(out);
    out = NULL;
done:
    if (!out) ms_sresp_req_clear(r);
    json_decref(in);
    return out;
}

/* ---- answers ---- */

static json_t *reasoning_item(const ms_sresp_req *r, const char *t, size_t n)
{
    return json_pack("{s:s,s:s,s:[],s:[{s:s,s:o}]}", "type", "reasoning", "id", r->rs_id, "summary", "content", "type",
                     "reasoning_text", "text", ms_jtext(t, n));
}

static json_t *text_part(const char *t, size_t n)
{
    return json_pack("{s:s,s:o,s:[],s:[]}", "type", "output_text", "text", ms_jtext(t, n), "annotations", "logprobs");
}

static json_t *message_item(const ms_sresp_req *r, const char *t, size_t n, const char *status)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:[o]}", "type", "message", "id", r->msg_id, "status", status, "role", "assistant",
                     "content", text_part(t, n));
}

static json_t *call_item(const ms_sresp_req *r, const ms_chat_answer *a, int done)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:o,s:s}", "type", "function_call", "id", r->fc_id, "call_id", r->call_id, "name",
                     a->call_name, "arguments", done ? ms_jtext(a->call_args, a->call_args_len) : json_string(""), "status",
                     done ? "completed" : "in_progress");
}

/* The response object: status, output (NULL: []), usage (NULL: null). */
static json_t *response_obj(const ms_sresp_req *r, const char *status, json_t *output, json_t *usage, int incomplete)
{
    const json_t *e = r->echo;
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:n,s:s,s:o,s:b,s:s}", "id", r->id, "object", "response", "created_at",
                          (json_int_t)r->created, "status", status, "error", "model", r->model, "output",
                          output ? output : json_array(), "store", r->store, "truncation", "disabled");
    json_object_set_new(o, "incomplete_details", incomplete ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null());
    static const char *const keys[] = {"instructions", "previous_response_id", "max_output_tokens", "user", NULL};
    for (int i = 0; keys[i]; i++) {
        json_t *v = json_object_get(e, keys[i]);
        json_object_set(o, keys[i], v ? v : json_null());
    }
    json_t *v;
    json_object_set_new(o, "temperature", (v = json_object_get(e, "temperature")) ? json_incref(v) : json_real(1.0));
    json_object_set_new(o, "top_p", (v = json_object_get(e, "top_p")) ? json_incref(v) : json_real(1.0));
    json_object_set_new(o, "tools", (v = json_object_get(e, "tools")) ? json_incref(v) : json_array());
    json_object_set_new(o, "tool_choice", (v = json_object_get(e, "tool_choice")) ? json_incref(v) : json_string("auto"));
    json_object_set_new(o, "metadata", (v = json_object_get(e, "metadata")) ? json_incref(v) : json_object());
    json_object_set_new(o, "parallel_tool_calls", (v = json_object_get(e, "parallel_tool_calls")) ? json_incref(v) : json_true());
    v = json_object_get(json_object_get(e, "reasoning"), "effort");
    json_object_set_new(o, "reasoning", json_pack("{s:O,s:n}", "effort", v ? v : json_null(), "summary"));
    json_object_set_new(o, "text", (v = json_object_get(e, "text")) ? json_incref(v) : json_pack("{s:{s:s}}", "format", "type", "text"));
    json_object_set_new(o, "usage", usage ? usage : json_null());
    return o;
}

static json_t *usage_of(size_t in, size_t out)
{
    return json_pack("{s:I,s:{s:i},s:I,s:{s:i},s:I}", "input_tokens", (json_int_t)in, "input_tokens_details", "cached_tokens",
                     0, "output_tokens", (json_int_t)out, "output_tokens_details", "reasoning_tokens", 0, "total_tokens",
                     (json_int_t)(in + out));
}

/* The output items of an answer (content and reasoning as given). */
static json_t *output_of(const ms_sresp_req *r, const ms_chat_answer *a, const char *content, size_t cl,
                         const char *reasoning, size_t rl, int incomplete)
{
    json_t *out = json_array();
    int call = a && a->call_name && a->call_args;
    if (rl) json_array_append_new(out, reasoning_item(r, reasoning, rl));
    if (cl || !call) json_array_append_new(out, message_item(r, content ? content : "", cl, incomplete ? "incomplete" : "completed"));
    if (call) json_array_append_new(out, call_item(r, a, 1));
    return out;
}

static char *dump_nl(json_t *o, size_t *len)
{
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    size_t l = strlen(s);
    s = ms_realloc(s, l + 2);
    memcpy(s + l, "\n", 2);
    *len = l + 1;
    return s;
}

char *ms_sresp_response(const ms_sresp_req *r, const ms_chat_answer *a, const char *finish, size_t input_tokens,
                        size_t output_tokens, size_t *len)
{
    int inc = finish && !strcmp(finish, "length");
    json_t *out = output_of(r, a, a ? a->content : "", a && a->content ? a->content_len : 0, a ? a->reasoning : NULL,
                            a && a->reasoning ? a->reasoning_len : 0, inc);
    return dump_nl(response_obj(r, inc ? "incomplete" : "completed", out, usage_of(input_tokens, output_tokens), inc), len);
}

/* ---- streaming ---- */

static void event(ms_sresp_stream *s, ms_sbuf *b, const char *type, json_t *data)
{
    json_object_set_new(data, "type", json_string(type));
    json_object_set_new(data, "sequence_number", json_integer(s->seq++));
    char *t = json_dumps(data, JSON_COMPACT);
    json_decref(data);
    ms_sbuf_adds(b, "event: ");
    ms_sbuf_adds(b, type);
    ms_sbuf_adds(b, "\ndata: ");
    ms_sbuf_adds(b, t);
    ms_sbuf_adds(b, "\n\n");
    free(t);
}

static char *take(ms_sbuf *b, size_t *len)
{
    if (!b->n) {
        ms_sbuf_free(b);
        *len = 0;
        return NULL;
    }
    return ms_sbuf_take(b, len);
}

char *ms_sresp_stream_start(ms_sresp_stream *s, const ms_sresp_req *r, size_t *len)
{
    *s = (ms_sresp_stream){0, 0, -1, -1, -1, {0}, {0}};
    ms_sbuf b = {0};
    event(s, &b, "response.created", json_pack("{s:o}", "response", response_obj(r, "in_progress", NULL, NULL, 0)));
    event(s, &b, "response.in_progress", json_pack("{s:o}", "response", response_obj(r, "in_progress", NULL, NULL, 0)));
    return take(&b, len);
}

static void close_item(ms_sresp_stream *s, const ms_sresp_req *r, ms_sbuf *b)
{
    if (!s->open) return;
    const char *id = s->open == 1 ? r->msg_id : r->rs_id;
    ms_sbuf *t = s->open == 1 ? &s->content : &s->reasoning;
    const char *tx = t->s ? t->s : "";
    if (s->open == 1) {
        event(s, b, "response.output_text.done",
              json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", id, "output_index", s->index, "content_index", 0, "text",
                        ms_jtext(tx, t->n), "logprobs"));
        event(s, b, "response.content_part.done",
              json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", s->index, "content_index", 0, "part",
                        text_part(tx, t->n)));
        event(s, b, "response.output_item.done",
              json_pack("{s:i,s:o}", "output_index", s->index, "item", message_item(r, tx, t->n, "completed")));
    } else {
        event(s, b, "response.reasoning_text.done",
              json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", s->index, "content_index", 0, "text",
                        ms_jtext(tx, t->n)));
        event(s, b, "response.content_part.done",
              json_pack("{s:s,s:i,s:i,s:{s:s,s:o}}", "item_id", id, "output_index", s->index, "content_index", 0, "part",
                        "type", "reasoning_text", "text", ms_jtext(tx, t->n)));
        event(s, b, "response.output_item.done",
              json_pack("{s:i,s:o}", "output_index", s->index, "item", reasoning_item(r, tx, t->n)));
    }
    s->open = 0;
}

/* Text into the item of kind (1 the message, 2 the reasoning), opening it when another is open. */
static void put_text(ms_sresp_stream *s, const ms_sresp_req *r, ms_sbuf *b, int kind, const char *t, size_t n)
{
    if (!n) return;
    const char *id = kind == 1 ? r->msg_id : r->rs_id;
    if (s->open != kind) {
        close_item(s, r, b);
        s->open = kind;
        s->index++;
        if (kind == 1) {
            s->msg_index = s->index;
            event(s, b, "response.output_item.added",
                  json_pack("{s:i,s:{s:s,s:s,s:s,s:s,s:[]}}", "output_index", s->index, "item", "type", "message", "id", id,
                            "status", "in_progress", "role", "assistant", "content"));
            event(s, b, "response.content_part.added",
                  json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", s->index, "content_index", 0, "part",
                            text_part("", 0)));
        } else {
            s->rs_index = s->index;
            event(s, b, "response.output_item.added",
                  json_pack("{s:i,s:{s:s,s:s,s:[],s:[]}}", "output_index", s->index, "item", "type", "reasoning", "id", id,
                            "summary", "content"));
            event(s, b, "response.content_part.added",
                  json_pack("{s:s,s:i,s:i,s:{s:s,s:s}}", "item_id", id, "output_index", s->index, "content_index", 0,
                            "part", "type", "reasoning_text", "text", ""));
        }
    }
    ms_sbuf_add(kind == 1 ? &s->content : &s->reasoning, t, n);
    if (kind == 1)
        event(s, b, "response.output_text.delta",
              json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", id, "output_index", s->index, "content_index", 0, "delta",
                        ms_jtext(t, n), "logprobs"));
    else
        event(s, b, "response.reasoning_text.delta",
              json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", s->index, "content_index", 0, "delta",
                        ms_jtext(t, n)));
}

char *ms_sresp_stream_text(ms_sresp_stream *s, const ms_sresp_req *r, const char *reasoning, size_t rlen,
                           const char *content, size_t clen, size_t *len)
{
    ms_sbuf b = {0};
    put_text(s, r, &b, 2, reasoning, rlen);
    put_text(s, r, &b, 1, content, clen);
    return take(&b, len);
}

char *ms_sresp_stream_end(ms_sresp_stream *s, const ms_sresp_req *r, const ms_chat_answer *a, const char *finish,
                          size_t input_tokens, size_t output_tokens, size_t *len)
{
    ms_sbuf b = {0};
    int call = a && a->call_name && a->call_args, inc = finish && !strcmp(finish, "length");
    if (!s->content.n && a && a->content_len) put_text(s, r, &b, 1, a->content, a->content_len); /* what no routing sent */
    if (!s->content.n && !call && s->msg_index < 0) { /* an empty answer is an empty message */
        s->open = 1;
        s->index++;
        s->msg_index = s->index;
        event(s, &b, "response.output_item.added",
              json_pack("{s:i,s:{s:s,s:s,s:s,s:s,s:[]}}", "output_index", s->index, "item", "type", "message", "id",
                        r->msg_id, "status", "in_progress", "role", "assistant", "content"));
        event(s, &b, "response.content_part.added",
              json_pack("{s:s,s:i,s:i,s:o}", "item_id", r->msg_id, "output_index", s->index, "content_index", 0, "part",
                        text_part("", 0)));
    }
    close_item(s, r, &b);
    if (call) {
        s->index++;
        event(s, &b, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", s->index, "item", call_item(r, a, 0)));
        event(s, &b, "response.function_call_arguments.delta",
              json_pack("{s:s,s:i,s:o}", "item_id", r->fc_id, "output_index", s->index, "delta",
                        ms_jtext(a->call_args, a->call_args_len)));
        event(s, &b, "response.function_call_arguments.done",
              json_pack("{s:s,s:i,s:s,s:o}", "item_id", r->fc_id, "output_index", s->index, "name", a->call_name,
                        "arguments", ms_jtext(a->call_args, a->call_args_len)));
        event(s, &b, "response.output_item.done", json_pack("{s:i,s:o}", "output_index", s->index, "item", call_item(r, a, 1)));
    }
    /* the final object: what was streamed (the answer's split, as the whole answer is) */
    json_t *out = output_of(r, a, s->content.s, s->content.n, s->reasoning.s, s->reasoning.n, inc);
    event(s, &b, inc ? "response.incomplete" : "response.completed",
          json_pack("{s:o}", "response",
                    response_obj(r, inc ? "incomplete" : "completed", out, usage_of(input_tokens, output_tokens), inc)));
    return take(&b, len);
}

char *ms_sresp_stream_error(ms_sresp_stream *s, const ms_sresp_req *r, const char *message, size_t *len)
{
    ms_sbuf b = {0};
    json_t *o = response_obj(r, "failed", NULL, NULL, 0);
    json_object_set_new(o, "error", json_pack("{s:s,s:o}", "code", "server_error", "message", ms_jtext(message, strlen(message))));
    event(s, &b, "response.failed", json_pack("{s:o}", "response", o));
    return take(&b, len);
}

void ms_sresp_stream_clear(ms_sresp_stream *s)
{
    ms_sbuf_free(&s->content);
    ms_sbuf_free(&s->reasoning);
}
