/* ms_smsg: the Anthropic Messages API: request bodies -> chat request bodies, answers -> message objects and typed SSE events. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_jtext.h"
#include "ms_sbuf.h"
#include "ms_smsg.h"
#include "ms_wire.h"

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

static const char *type_of(const json_t *block)
{
    const json_t *t = json_object_get(block, "type");
    return json_is_string(t) ? json_string_value(t) : NULL;
}

/* A text-only content (a string, or text blocks joined) into *out (a new string), or -1 with
 * the block at fault named in why. */
static int text_only(const json_t *c, json_t **out, const char *what, char *why, size_t n)
{
    if (json_is_string(c)) {
        *out = json_incref((json_t *)c);
        return 0;
    }
    if (!c || json_is_null(c)) {
        *out = json_string("");
        return 0;
    }
    if (!json_is_array(c)) return snprintf(why, n, "%s must be a string or an array of text blocks", what), -1;
    ms_sbuf b = {0};
    for (size_t k = 0; k < json_array_size(c); k++) {
        const json_t *x = json_array_get(c, k), *t = json_object_get(x, "text");
        const char *ty = type_of(x);
        if (!ty || strcmp(ty, "text") || !json_is_string(t)) {
            ms_sbuf_free(&b);
            return snprintf(why, n, "%s: block %zu must be {\"type\": \"text\", \"text\": \"...\"} (this server reads text)",
                            what, k),
                   -1;
        }
        if (k) ms_sbuf_adds(&b, "\n");
        ms_sbuf_add(&b, json_string_value(t), json_string_length(t));
    }
    *out = json_stringn(b.s ? b.s : "", b.n);
    ms_sbuf_free(&b);
    if (!*out) return snprintf(why, n, "%s is not valid UTF-8", what), -1;
    return 0;
}

/* One Anthropic message -> chat messages appended to out (names: tool_use id -> name). */
static json_t *message(const json_t *m, size_t i, json_t *out, json_t *names, char *why, size_t n, const char **param)
{
    const json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
    if (!json_is_object(m) || !json_is_string(role))
        return no(why, n, param, "messages", "messages[%zu] needs a \"role\" (\"user\" or \"assistant\")", i);
    const char *r = json_string_value(role);
    int user = !strcmp(r, "user");
    if (!user && strcmp(r, "assistant"))
        return no(why, n, param, "messages", "messages[%zu]: role \"%s\" (the Messages API has \"user\" and \"assistant\"; "
                  "system text goes in \"system\")", i, r);
    if (json_is_string(content)) {
        json_array_append_new(out, json_pack("{s:s,s:O}", "role", r, "content", content));
        return out;
    }
    if (!json_is_array(content))
        return no(why, n, param, "messages", "messages[%zu]: \"content\" must be a string or an array of blocks", i);
    json_t *parts = json_array(), *calls = json_array();
    ms_sbuf thinking = {0};
    int has_thinking = 0;
    for (size_t k = 0; k < json_array_size(content); k++) {
        const json_t *b = json_array_get(content, k);
        const char *ty = type_of(b);
        char what[96];
        snprintf(what, sizeof what, "messages[%zu].content[%zu]", i, k);
        if (!ty) {
            no(why, n, param, "messages", "%s needs a \"type\"", what);
            goto bad;
        }
        if (!strcmp(ty, "text")) {
            const json_t *t = json_object_get(b, "text");
            if (!json_is_string(t)) {
                no(why, n, param, "messages", "%s: a text block needs \"text\" (a string)", what);
                goto bad;
            }
            json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", t));
        } else if (!strcmp(ty, "tool_result") && user) {
            const json_t *id = json_object_get(b, "tool_use_id");
            if (!json_is_string(id)) {
                no(why, n, param, "messages", "%s: a tool_result block needs \"tool_use_id\" (a string)", what);
                goto bad;
            }
            json_t *text = NULL;
            if (text_only(json_object_get(b, "content"), &text, what, why, n) != 0) {
                *param = "messages";
                goto bad;
            }
            json_t *tm = json_pack("{s:s,s:O,s:o}", "role", "tool", "tool_call_id", id, "content", text);
            const json_t *name = json_object_get(names, json_string_value(id));
            if (name) json_object_set(tm, "name", (json_t *)name);
            json_array_append_new(out, tm); /* the results, then the user's text */
        } else if (!strcmp(ty, "tool_use") && !user) {
            const json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"), *in = json_object_get(b, "input");
            if (!json_is_string(id) || !json_is_string(name) || !json_is_object(in)) {
                no(why, n, param, "messages", "%s: a tool_use block needs \"id\" and \"name\" (strings) and \"input\" (an object)",
                   what);
                goto bad;
            }
            char *args = json_dumps(in, JSON_COMPACT | JSON_PRESERVE_ORDER);
            json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:s}}", "id", id, "type", "function", "function", "name",
                                                   name, "arguments", args));
            free(args);
            json_object_set(names, json_string_value(id), (json_t *)name);
        } else if (!strcmp(ty, "thinking") && !user) {
            const json_t *t = json_object_get(b, "thinking");
            if (!json_is_string(t)) {
                no(why, n, param, "messages", "%s: a thinking block needs \"thinking\" (a string)", what);
                goto bad;
            }
            ms_sbuf_add(&thinking, json_string_value(t), json_string_length(t));
            has_thinking = 1;
        } else {
            no(why, n, param, "messages", "%s: \"%s\" blocks are not supported in a%s message (this server reads text%s)", what,
               ty, user ? " user" : "n assistant", user ? " and tool_result blocks" : ", thinking and tool_use blocks");
            goto bad;
        }
    }
    if (json_array_size(parts) || json_array_size(calls) || has_thinking || !user) {
        json_t *msg = json_pack("{s:s}", "role", r);
        if (user) {
            json_object_set_new(msg, "content", parts);
            parts = NULL;
        } else { /* an assistant's text joined as one string; none: null (a turn that only calls) */
            ms_sbuf t = {0};
            for (size_t k = 0; k < json_array_size(parts); k++) {
                const json_t *x = json_object_get(json_array_get(parts, k), "text");
                ms_sbuf_add(&t, json_string_value(x), json_string_length(x));
            }
            json_object_set_new(msg, "content", t.n || !json_array_size(calls) ? json_stringn(t.s ? t.s : "", t.n) : json_null());
            ms_sbuf_free(&t);
        }
        if (json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
        if (has_thinking) json_object_set_new(msg, "reasoning_content", json_stringn(thinking.s ? thinking.s : "", thinking.n));
        json_array_append_new(out, msg);
    }
    json_decref(parts);
    json_decref(calls);
    ms_sbuf_free(&thinking);
    return out;
bad:
    json_decref(parts);
    json_decref(calls);
    ms_sbuf_free(&thinking);
    return NULL;
}

static json_t *tools_of(const json_t *tools, char *why, size_t n, const char **param)
{
    if (!json_is_array(tools)) return no(why, n, param, "tools", "\"tools\" must be an array");
    json_t *out = json_array();
    for (size_t k = 0; k < json_array_size(tools); k++) {
        const json_t *t = json_array_get(tools, k), *name = json_object_get(t, "name"), *d = json_object_get(t, "description");
        const json_t *schema = json_object_get(t, "input_schema");
        const char *ty = type_of(t);
        if (ty && strcmp(ty, "custom")) {
            json_decref(out);
            return no(why, n, param, "tools", "tools[%zu]: \"%s\" tools are the API's own, not served here (custom tools "
                      "only: name, description, input_schema)", k, ty);
        }
        if (!json_is_string(name) || !json_is_object(schema) || (d && !json_is_string(d))) {
            json_decref(out);
            return no(why, n, param, "tools", "tools[%zu] needs \"name\" (a string) and \"input_schema\" (an object); "
                      "\"description\" is a string", k);
        }
        json_t *f = json_pack("{s:O}", "name", name);
        if (d) json_object_set(f, "description", (json_t *)d);
        json_object_set(f, "parameters", (json_t *)schema);
        json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", f));
    }
    return out;
}

static json_t *tool_choice_of(const json_t *tc, char *why, size_t n, const char **param)
{
    const char *ty = type_of(tc);
    if (!json_is_object(tc) || !ty) return no(why, n, param, "tool_choice", "\"tool_choice\" must be {\"type\": ...}");
    if (!strcmp(ty, "auto")) return json_string("auto");
    if (!strcmp(ty, "any")) return json_string("required");
    if (!strcmp(ty, "none")) return json_string("none");
    if (!strcmp(ty, "tool")) {
        const json_t *name = json_object_get(tc, "name");
        if (!json_is_string(name)) return no(why, n, param, "tool_choice", "tool_choice {\"type\": \"tool\"} needs \"name\"");
        return json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", name);
    }
    return no(why, n, param, "tool_choice", "tool_choice type \"%s\" (known: auto, any, tool, none)", ty);
}

json_t *ms_smsg_to_chat(const char *body, size_t len, int count_only, char *why, size_t n, const char **param)
{
    static const char *const known[] = {"model", "messages", "max_tokens", "system", "stop_sequences", "stream",
                                        "temperature", "top_p", "top_k", "tools", "tool_choice", "metadata", NULL};
    json_error_t je;
    json_t *in = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    *param = NULL;
    if (!json_is_object(in)) {
        json_decref(in);
        snprintf(why, n, "the body is not a JSON object%s%s", in ? "" : ": ", in ? "" : je.text);
        *param = "body";
        return NULL;
    }
    const char *k;
    json_t *v, *out = NULL;
    json_object_foreach(in, k, v) {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++) ok = !strcmp(k, known[i]);
        if (count_only && (!strcmp(k, "max_tokens") || !strcmp(k, "stream") || !strcmp(k, "stop_sequences"))) ok = 0;
        if (!ok) {
            snprintf(why, n, "\"%s\" is not a field of /v1/messages%s that this server takes (see docs/API.md)", k,
                     count_only ? "/count_tokens" : "");
            *param = "body";
            goto done;
        }
    }
    const json_t *msgs = json_object_get(in, "messages"), *mt = json_object_get(in, "max_tokens");
    if (!json_is_array(msgs) || !json_array_size(msgs)) {
        no(why, n, param, "messages", "\"messages\" must be a non-empty array");
        goto done;
    }
    if (!count_only && !json_is_integer(mt)) {
        no(why, n, param, "max_tokens", "\"max_tokens\" (an integer) is required");
        goto done;
    }
    json_t *chat = json_array(), *names = json_object();
    const json_t *sys = json_object_get(in, "system");
    if (sys && !json_is_null(sys)) {
        json_t *text = NULL;
        if (text_only(sys, &text, "\"system\"", why, n) != 0) {
            *param = "system";
            json_decref(chat);
            json_decref(names);
            goto done;
        }
        json_array_append_new(chat, json_pack("{s:s,s:o}", "role", "system", "content", text));
    }
    for (size_t i = 0; i < json_array_size(msgs); i++)
        if (!message(json_array_get(msgs, i), i, chat, names, why, n, param)) {
            json_decref(chat);
            json_decref(names);
            goto done;
        }
    json_decref(names);
    out = json_pack("{s:o}", "messages", chat);
    static const char *const same[] = {"model", "max_tokens", "temperature", "top_p", "top_k", "stream", NULL};
    for (int i = 0; same[i]; i++)
        if ((v = json_object_get(in, same[i]))) json_object_set(out, same[i], v);
    if ((v = json_object_get(in, "stop_sequences")) && !json_is_null(v)) json_object_set(out, "stop", v);
    const json_t *md = json_object_get(in, "metadata");
    if (md && !json_is_null(md) && !json_is_object(md)) {
        no(why, n, param, "metadata", "\"metadata\" must be an object");
        goto fail;
    }
    if ((v = json_object_get(in, "tools")) && !json_is_null(v)) {
        json_t *t = tools_of(v, why, n, param);
        if (!t) goto fail;
        json_object_set_new(out, "tools", t);
    }
    if ((v = json_object_get(in, "tool_choice")) && !json_is_null(v)) {
        json_t *t = tool_choice_of(v, why, n, param);
        if (!t) goto fail;
        json_object_set_new(out, "tool_choice", t);
    }
    goto done;
fail:
    json_decref(out);
    out = NULL;
done:
    json_decref(in);
    return out;
}

char *ms_smsg_error_json(int status, const char *message, size_t *len)
{
    const char *ty = status == 400 || status == 405 ? "invalid_request_error"
                     : status == 401                ? "authentication_error"
                     : status == 404                ? "not_found_error"
                     : status == 413                ? "request_too_large"
                     : status == 429                ? "rate_limit_error"
                     : status == 503                ? "overloaded_error"
                                                    : "api_error";
    json_t *o = json_pack("{s:s,s:{s:s,s:o}}", "type", "error", "error", "type", ty, "message",
                          ms_jtext(message, strlen(message)));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    size_t l = strlen(s);
    s = ms_realloc(s, l + 2);
    memcpy(s + l, "\n", 2);
    *len = l + 1;
    return s;
}

void ms_smsg_id_new(char id[64])
{
    ms_uuid u;
    char s[37];
    ms_uuid_new(&u);
    ms_uuid_str(&u, s);
    snprintf(id, 64, "msg_%s", s);
}

/* The call's input: its arguments when they are a JSON object (a new reference), else NULL. */
static json_t *call_input(const ms_chat_answer *a)
{
    if (!a || !a->call_name || !a->call_args) return NULL;
    json_error_t je;
    json_t *o = json_loadb(a->call_args, a->call_args_len, JSON_REJECT_DUPLICATES, &je);
    if (json_is_object(o)) return o;
    json_decref(o);
    return NULL;
}

static const char *stop_reason(int call, const char *finish, const char *stop_seq)
{
    return call ? "tool_use" : stop_seq ? "stop_sequence" : finish && !strcmp(finish, "length") ? "max_tokens" : "end_turn";
}

const char *ms_smsg_stop_reason(const ms_chat_answer *a, const char *finish, const char *stop_seq)
{
    json_t *in = call_input(a);
    const char *r = stop_reason(in != NULL, finish, stop_seq);
    json_decref(in);
    return r;
}

static json_t *tool_use_block(const ms_chat_answer *a, json_t *input)
{
    ms_uuid u;
    char s[37], id[64];
    ms_uuid_new(&u);
    ms_uuid_str(&u, s);
    snprintf(id, sizeof id, "toolu_%s", s);
    return json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", id, "name", a->call_name, "input", input);
}

/* A call whose arguments are no JSON object stays the model's text: appended to the content. */
static json_t *content_text(const ms_chat_answer *a, int call_ok)
{
    if (!a) return json_string("");
    if (call_ok || !a->call_name || !a->call_args) return ms_jtext(a->content ? a->content : "", a->content_len);
    ms_sbuf b = {0};
    ms_sbuf_add(&b, a->content ? a->content : "", a->content_len);
    ms_sbuf_add(&b, a->call_args, a->call_args_len);
    json_t *t = ms_jtext(b.s ? b.s : "", b.n);
    ms_sbuf_free(&b);
    return t;
}

char *ms_smsg_message(const char *id, const char *model, const ms_chat_answer *a, const char *finish, const char *stop_seq,
                      size_t input_tokens, size_t output_tokens, size_t *len)
{
    json_t *input = call_input(a), *content = json_array();
    if (a && a->reasoning && a->reasoning_len)
        json_array_append_new(content, json_pack("{s:s,s:o,s:s}", "type", "thinking", "thinking",
                                                 ms_jtext(a->reasoning, a->reasoning_len), "signature", ""));
    json_t *text = content_text(a, input != NULL);
    if (json_string_length(text) || (!input && !json_array_size(content)))
        json_array_append_new(content, json_pack("{s:s,s:o}", "type", "text", "text", text));
    else
        json_decref(text);
    const char *reason = stop_reason(input != NULL, finish, stop_seq);
    if (input) json_array_append_new(content, tool_use_block(a, input));
    json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:o,s:{s:I,s:I}}", "id", id, "type", "message", "role", "assistant",
                          "model", model, "content", content, "stop_reason", reason, "stop_sequence",
                          stop_seq ? json_string(stop_seq) : json_null(), "usage", "input_tokens", (json_int_t)input_tokens,
                          "output_tokens", (json_int_t)output_tokens);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    size_t l = strlen(s);
    s = ms_realloc(s, l + 2);
    memcpy(s + l, "\n", 2);
    *len = l + 1;
    return s;
}

/* ---- streaming ---- */

static void event(ms_sbuf *b, const char *type, json_t *data)
{
    char *s = json_dumps(data, JSON_COMPACT);
    json_decref(data);
    ms_sbuf_adds(b, "event: ");
    ms_sbuf_adds(b, type);
    ms_sbuf_adds(b, "\ndata: ");
    ms_sbuf_adds(b, s);
    ms_sbuf_adds(b, "\n\n");
    free(s);
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

char *ms_smsg_stream_start(ms_smsg_stream *s, const char *id, const char *model, size_t input_tokens, size_t *len)
{
    *s = (ms_smsg_stream){-1, 0, 0};
    ms_sbuf b = {0};
    event(&b, "message_start",
          json_pack("{s:s,s:{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:{s:I,s:i}}}", "type", "message_start", "message", "id", id, "type",
                    "message", "role", "assistant", "model", model, "content", "stop_reason", "stop_sequence", "usage",
                    "input_tokens", (json_int_t)input_tokens, "output_tokens", 0));
    event(&b, "ping", json_pack("{s:s}", "type", "ping"));
    return take(&b, len);
}

static void close_block(ms_smsg_stream *s, ms_sbuf *b)
{
    if (!s->open) return;
    if (s->open == 2) /* a thinking block ends with its signature (none here) */
        event(b, "content_block_delta",
              json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index", s->index, "delta", "type",
                        "signature_delta", "signature", ""));
    event(b, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", s->index));
    s->open = 0;
}

/* Text into a block of kind (1 text, 2 thinking), opening it when another is open. */
static void put_text(ms_smsg_stream *s, ms_sbuf *b, int kind, const char *t, size_t n)
{
    if (!n) return;
    if (s->open != kind) {
        close_block(s, b);
        s->index++;
        s->open = kind;
        event(b, "content_block_start",
              json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_start", "index", s->index, "content_block", "type",
                        kind == 1 ? "text" : "thinking", kind == 1 ? "text" : "thinking", ""));
    }
    event(b, "content_block_delta",
          json_pack("{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index", s->index, "delta", "type",
                    kind == 1 ? "text_delta" : "thinking_delta", kind == 1 ? "text" : "thinking", ms_jtext(t, n)));
}

char *ms_smsg_stream_text(ms_smsg_stream *s, const char *reasoning, size_t rlen, const char *content, size_t clen,
                          size_t *len)
{
    ms_sbuf b = {0};
    put_text(s, &b, 2, reasoning, rlen);
    put_text(s, &b, 1, content, clen);
    s->content_sent += clen;
    return take(&b, len);
}

char *ms_smsg_stream_end(ms_smsg_stream *s, const ms_chat_answer *a, const char *finish, const char *stop_seq,
                         size_t output_tokens, size_t *len)
{
    ms_sbuf b = {0};
    json_t *input = call_input(a);
    if (!s->content_sent && a) { /* what no routing sent: a format that found no message */
        json_t *t = content_text(a, input != NULL);
        put_text(s, &b, 1, json_string_value(t), json_string_length(t));
        json_decref(t);
    } else if (a && a->call_name && a->call_args && !input) { /* a call that is no call stays text */
        put_text(s, &b, 1, a->call_args, a->call_args_len);
    }
    close_block(s, &b);
    const char *reason = stop_reason(input != NULL, finish, stop_seq);
    if (input) {
        char *args = json_dumps(input, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_t *blk = tool_use_block(a, json_object());
        s->index++;
        event(&b, "content_block_start",
              json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index", s->index, "content_block", blk));
        event(&b, "content_block_delta",
              json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index", s->index, "delta", "type",
                        "input_json_delta", "partial_json", args));
        event(&b, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", s->index));
        free(args);
        json_decref(input);
    }
    event(&b, "message_delta",
          json_pack("{s:s,s:{s:s,s:o},s:{s:I}}", "type", "message_delta", "delta", "stop_reason", reason, "stop_sequence",
                    stop_seq ? json_string(stop_seq) : json_null(), "usage", "output_tokens", (json_int_t)output_tokens));
    event(&b, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    return take(&b, len);
}

char *ms_smsg_stream_error(int status, const char *message, size_t *len)
{
    size_t el;
    char *e = ms_smsg_error_json(status, message, &el);
    ms_sbuf b = {0};
    ms_sbuf_adds(&b, "event: error\ndata: ");
    ms_sbuf_add(&b, e, el - 1);
    ms_sbuf_adds(&b, "\n\n");
    free(e);
    return ms_sbuf_take(&b, len);
}
