/* ms_jchat: a chat request's messages, tools and template options -> ms_chat_msg + ms_chat_opts. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_jchat.h"
#include "ms_pyjson.h"
#include "ms_sbuf.h"

int ms_jchat_refuse(char *why, size_t n, const char **param, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    *param = field;
    return -1;
}

const json_t *ms_jchat_field(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return v && !json_is_null(v) ? v : NULL;
}

/* A tool call's arguments as the template's tojson writes them: OpenAI sends a string of JSON
 * text, templates are written for the parsed object; text that is not JSON stays a string. */
static char *arguments(const json_t *a, size_t *len)
{
    if (json_is_string(a)) {
        json_error_t je;
        json_t *p = json_loadb(json_string_value(a), json_string_length(a), JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
        if (p) {
            char *s = ms_pyjson_dumps(p, len);
            json_decref(p);
            return s;
        }
    }
    return ms_pyjson_dumps(a, len);
}

static int message(ms_jchat *c, const json_t *o, size_t i, char *why, size_t n, const char **param)
{
    const json_t *role = json_object_get(o, "role"), *content = ms_jchat_field(o, "content");
    const json_t *th = ms_jchat_field(o, "thinking"), *rc = ms_jchat_field(o, "reasoning_content"), *calls = ms_jchat_field(o, "tool_calls");
    if (!json_is_object(o) || !json_is_string(role))
        return ms_jchat_refuse(why, n, param, "messages", "message %zu needs a \"role\" string", i);
    const char *text = content ? json_string_value(content) : NULL;
    size_t text_len = content ? json_string_length(content) : 0;
    if (content && json_is_array(content)) { /* parts: the text ones joined by newlines, as vLLM does */
        ms_sbuf b = {0};
        for (size_t k = 0; k < json_array_size(content); k++) {
            const json_t *p = json_array_get(content, k), *ty = json_object_get(p, "type"), *t = json_object_get(p, "text");
            if (!json_is_string(ty) || strcmp(json_string_value(ty), "text") || !json_is_string(t)) {
                ms_sbuf_free(&b);
                return ms_jchat_refuse(why, n, param, "messages",
                          "message %zu: content part %zu must be {\"type\": \"text\", \"text\": \"...\"} (this server reads "
                          "text only)", i, k);
            }
            if (k) ms_sbuf_adds(&b, "\n");
            ms_sbuf_add(&b, json_string_value(t), json_string_length(t));
        }
        c->owned = ms_realloc(c->owned, sizeof *c->owned * (size_t)(c->n_owned + 1));
        text = c->owned[c->n_owned++] = ms_sbuf_take(&b, &text_len);
    } else if (content && !json_is_string(content)) {
        return ms_jchat_refuse(why, n, param, "messages", "message %zu: \"content\" must be a string or an array of text parts", i);
    }
    if ((th && !json_is_string(th)) || (rc && !json_is_string(rc)))
        return ms_jchat_refuse(why, n, param, "messages", "message %zu: \"%s\" must be a string", i, th ? "thinking" : "reasoning_content");
    if (th && rc) return ms_jchat_refuse(why, n, param, "messages", "message %zu: give \"thinking\" or \"reasoning_content\", not both", i);
    if (calls && !json_is_array(calls))
        return ms_jchat_refuse(why, n, param, "messages", "message %zu: \"tool_calls\" must be an array", i);
    if (!content && !(calls && json_array_size(calls)))
        return ms_jchat_refuse(why, n, param, "messages", "message %zu needs \"content\" (a string)%s", i,
                  strcmp(json_string_value(role), "assistant") ? "" : " or \"tool_calls\"");
    ms_chat_msg *m = &c->msgs[c->n];
    *m = (ms_chat_msg){json_string_value(role), text, text_len};
    if (th || rc) m->thinking = json_string_value(th ? th : rc), m->thinking_len = json_string_length(th ? th : rc);
    const json_t *tcid = ms_jchat_field(o, "tool_call_id"), *nm = ms_jchat_field(o, "name");
    if ((tcid && !json_is_string(tcid)) || (nm && !json_is_string(nm)))
        return ms_jchat_refuse(why, n, param, "messages", "message %zu: \"%s\" must be a string", i,
                  tcid && !json_is_string(tcid) ? "tool_call_id" : "name");
    m->tool_call_id = tcid ? json_string_value(tcid) : NULL;
    m->name = nm ? json_string_value(nm) : NULL;
    if (calls && json_array_size(calls)) {
        const json_t *f = json_object_get(json_array_get(calls, 0), "function"), *name = json_object_get(f, "name");
        const json_t *a = json_object_get(f, "arguments"), *ty = json_object_get(json_array_get(calls, 0), "type");
        if (ty && !json_is_null(ty) && !(json_is_string(ty) && !strcmp(json_string_value(ty), "function")))
            return ms_jchat_refuse(why, n, param, "messages", "message %zu: tool_calls[0].type must be \"function\"", i);
        if (!json_is_string(name) || !json_string_length(name) || !a || json_is_null(a))
            return ms_jchat_refuse(why, n, param, "messages", "message %zu: tool_calls[0] needs function.name and function.arguments", i);
        const json_t *id = json_object_get(json_array_get(calls, 0), "id");
        if (id && !json_is_null(id) && !json_is_string(id))
            return ms_jchat_refuse(why, n, param, "messages", "message %zu: tool_calls[0].id must be a string", i);
        m->n_calls = (int)json_array_size(calls);
        m->call_name = json_string_value(name);
        m->call_id = json_is_string(id) ? json_string_value(id) : NULL;
        if (json_is_string(a)) m->call_args_sent = json_string_value(a), m->call_args_sent_len = json_string_length(a);
        c->owned = ms_realloc(c->owned, sizeof *c->owned * (size_t)(c->n_owned + 1));
        m->call_args = c->owned[c->n_owned++] = arguments(a, &m->call_args_len);
    }
    c->n++;
    return 0;
}

/* "chat_template_kwargs": the template's variables (vLLM's name for them): add_generation_prompt
 * here, the rest the family's format reads (ms_chatfmt.var). */
static int kwargs(ms_jchat *c, const json_t *kw, const ms_chatfmt *fmt, int render_only, char *why, size_t n,
                  const char **param)
{
    const char *k;
    json_t *v;
    if (!json_is_object(kw)) return ms_jchat_refuse(why, n, param, "chat_template_kwargs", "\"chat_template_kwargs\" must be an object");
    json_object_foreach((json_t *)kw, k, v) {
        if (!strcmp(k, "add_generation_prompt")) {
            if (!json_is_boolean(v))
                return ms_jchat_refuse(why, n, param, "chat_template_kwargs", "chat_template_kwargs.add_generation_prompt must be a boolean");
            if (json_is_false(v) && !render_only)
                return ms_jchat_refuse(why, n, param, "chat_template_kwargs",
                          "chat_template_kwargs.add_generation_prompt false renders a chat for training: only "
                          "`moestream tokenize --chat` takes it");
            c->opts.no_generation_prompt = json_is_false(v);
            continue;
        }
        int r = fmt && fmt->var ? fmt->var(k, v, &c->opts, why, n) : 1;
        if (r < 0) {
            *param = "chat_template_kwargs";
            return -1;
        }
        if (r > 0)
            return ms_jchat_refuse(why, n, param, "chat_template_kwargs",
                      "chat_template_kwargs.%s is not a variable the %s chat format reads (%s%sadd_generation_prompt)", k,
                      fmt ? fmt->name : "model's", fmt && fmt->vars ? fmt->vars : "",
                      fmt && fmt->vars && *fmt->vars ? ", " : "");
    }
    return 0;
}

int ms_jchat_read(json_t *body, const ms_chatfmt *fmt, const char *date, int render_only, ms_jchat *c, char *why, size_t n,
                  const char **param)
{
    memset(c, 0, sizeof *c);
    *param = NULL;
    const json_t *m = json_object_get(body, "messages");
    if (!json_is_array(m) || json_array_size(m) == 0)
        return ms_jchat_refuse(why, n, param, "messages", "a chat needs \"messages\": a non-empty array of {\"role\", \"content\"}");
    c->msgs = ms_calloc(json_array_size(m), sizeof *c->msgs);
    c->opts.date = date;
    int rc = 0;
    for (size_t i = 0; i < json_array_size(m) && rc == 0; i++) rc = message(c, json_array_get(m, i), i, why, n, param);
    const json_t *re = ms_jchat_field(body, "reasoning_effort"), *tools = ms_jchat_field(body, "tools");
    const json_t *kw = ms_jchat_field(body, "chat_template_kwargs");
    if (rc == 0 && re && !json_is_string(re))
        rc = ms_jchat_refuse(why, n, param, "reasoning_effort", "\"reasoning_effort\" must be a string (low, medium, high)");
    if (rc == 0 && re && fmt && fmt->var) { /* the format's values (a format without the variable ignores it) */
        ms_chat_opts none = {0};
        int r = fmt->var("reasoning_effort", re, &none, why, n);
        if (r < 0) {
            *param = "reasoning_effort";
            rc = -1;
        }
    }
    if (rc == 0 && re) c->opts.reasoning_effort = json_string_value(re);
    if (rc == 0 && tools && !json_is_array(tools))
        rc = ms_jchat_refuse(why, n, param, "tools", "\"tools\" must be an array of {\"type\": \"function\", \"function\": {...}}");
    if (rc == 0 && tools) c->opts.tools = tools;
    if (rc == 0 && kw) rc = kwargs(c, kw, fmt, render_only, why, n, param);
    if (rc == 0 && kw) c->opts.vars = kw; /* checked: the format reads its own */
    if (rc != 0) ms_jchat_clear(c);
    return rc;
}

void ms_jchat_clear(ms_jchat *c)
{
    if (!c) return;
    for (int i = 0; i < c->n_owned; i++) free(c->owned[i]);
    free(c->owned);
    free(c->msgs);
    memset(c, 0, sizeof *c);
}
