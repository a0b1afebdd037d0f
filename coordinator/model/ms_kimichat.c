/* ms_kimichat: Kimi's chat format (Kimi K3, Kimi K2): messages -> prompt pieces -> token ids. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ms_chatp.h"
#include "ms_kimichat.h"
#include "ms_err.h"
#include "ms_pyjson.h"
#include "ms_sbuf.h"

/* The template's name for a turn: the message's "name" when it has one, else its role. */
static const char *role_name(const ms_chat_msg *m) { return m->name ? m->name : m->role; }

static int bad(int i, const char *why)
{
    ms_err_set("chat message %d: %s", i, why);
    return ms_err_set_code(MS_EXIT_INPUT);
}

/* An assistant turn's tool call: <|tool_calls_section_begin|><|tool_call_begin|>ID
 * <|tool_call_argument_begin|>ARGS<|tool_call_end|><|tool_calls_section_end|>, ID as the client
 * sent it (functions.NAME:0 when it sent none: the form Kimi writes), ARGS the string sent, or
 * tojson of the object sent. */
static int call(ms_chatp *p, const ms_chat_msg *m, int i)
{
    if (m->n_calls > 1)
        return bad(i, "has more than one tool call; this server renders one per assistant message: give each call its "
                      "own assistant message");
    if (!m->call_name || !m->call_args) return bad(i, "a tool call needs a function name and arguments");
    ms_chatp_mark(p, "<|tool_calls_section_begin|>");
    ms_chatp_mark(p, "<|tool_call_begin|>");
    if (m->call_id) {
        ms_chatp_put(p, m->call_id, strlen(m->call_id), 0);
    } else {
        ms_chatp_text(p, "functions.");
        ms_chatp_text(p, m->call_name);
        ms_chatp_text(p, ":0");
    }
    ms_chatp_mark(p, "<|tool_call_argument_begin|>");
    if (m->call_args_sent)
        ms_chatp_put(p, m->call_args_sent, m->call_args_sent_len, 0);
    else
        ms_chatp_put(p, m->call_args, m->call_args_len, 0);
    ms_chatp_mark(p, "<|tool_call_end|>");
    ms_chatp_mark(p, "<|tool_calls_section_end|>");
    return 0;
}

static int render(const ms_tok *t, const ms_chat_msg *msgs, int n, const json_t *tools, int32_t **ids, size_t *n_ids)
{
    *ids = NULL;
    *n_ids = 0;
    if (n < 1) {
        ms_err_set("a chat needs at least one message");
        return ms_err_set_code(MS_EXIT_INPUT);
    }
    ms_chatp p = {0};
    int rc = -1;
    if (tools && json_array_size(tools) > 0) { /* the tool list first, in a turn of its own */
        size_t tl;
        char *tj = ms_pyjson_dumps_compact(tools, &tl);
        ms_chatp_mark(&p, "<|im_system|>");
        ms_chatp_text(&p, "tool_declare");
        ms_chatp_mark(&p, "<|im_middle|>");
        ms_chatp_put(&p, tj, tl, 0);
        ms_chatp_mark(&p, "<|im_end|>");
        free(tj);
    }
    for (int i = 0; i < n; i++) {
        const ms_chat_msg *m = &msgs[i];
        const char *role = m->role, *marker;
        /* Kimi's template gives every role but user and assistant the system marker, with the
         * role's own name: OpenAI's developer (the newer name of system) and tool results are
         * such turns. */
        if (!strcmp(role, "system") || !strcmp(role, "developer") || !strcmp(role, "tool"))
            marker = "<|im_system|>";
        else if (!strcmp(role, "user"))
            marker = "<|im_user|>";
        else if (!strcmp(role, "assistant"))
            marker = "<|im_assistant|>";
        else {
            ms_chatp_free(&p);
            ms_err_set("message %d: unknown role '%s' (known: system, developer, user, assistant, tool)", i, role);
            return ms_err_set_code(MS_EXIT_INPUT);
        }
        const char *why = NULL;
        if (m->content && !ms_chatp_valid_utf8(m->content, m->len)) why = "content is not valid UTF-8";
        else if (m->name && !ms_chatp_valid_utf8(m->name, strlen(m->name))) why = "name is not valid UTF-8";
        else if (m->tool_call_id && !ms_chatp_valid_utf8(m->tool_call_id, strlen(m->tool_call_id)))
            why = "tool_call_id is not valid UTF-8";
        else if (m->n_calls > 0 && strcmp(role, "assistant")) why = "only an assistant turn makes tool calls";
        else if (m->n_calls > 0 && ((m->call_id && !ms_chatp_valid_utf8(m->call_id, strlen(m->call_id))) ||
                                    (m->call_name && !ms_chatp_valid_utf8(m->call_name, strlen(m->call_name))) ||
                                    (m->call_args && !ms_chatp_valid_utf8(m->call_args, m->call_args_len)) ||
                                    (m->call_args_sent && !ms_chatp_valid_utf8(m->call_args_sent, m->call_args_sent_len))))
            why = "a tool call's id, name or arguments are not valid UTF-8";
        if (why) {
            ms_chatp_free(&p);
            return bad(i, why);
        }
        ms_chatp_mark(&p, marker);
        ms_chatp_text(&p, role_name(m));
        ms_chatp_mark(&p, "<|im_middle|>");
        if (!strcmp(role, "tool")) {
            ms_chatp_text(&p, "## Return of ");
            if (m->tool_call_id) ms_chatp_put(&p, m->tool_call_id, strlen(m->tool_call_id), 0);
            ms_chatp_text(&p, "\n");
        }
        ms_chatp_put(&p, m->content ? m->content : "", m->content ? m->len : 0, 0);
        if (m->n_calls > 0 && call(&p, m, i) != 0) goto out;
        ms_chatp_mark(&p, "<|im_end|>");
    }
    ms_chatp_mark(&p, "<|im_assistant|>");
    ms_chatp_text(&p, "assistant");
    ms_chatp_mark(&p, "<|im_middle|>");
    rc = ms_chatp_encode(&p, t, "kimi", ids, n_ids);
out:
    ms_chatp_free(&p);
    return rc;
}

int ms_kimichat_encode(const ms_tok *t, const ms_chat_msg *msgs, int n, int32_t **ids, size_t *n_ids)
{
    return render(t, msgs, n, NULL, ids, n_ids);
}

int32_t ms_kimichat_end_id(const ms_tok *t) { return ms_tok_special_id(t, "<|im_end|>"); }

/* Kimi's format has no date, reasoning effort or model identity: those options do not change it
 * (a template ignores variables it does not read); a reasoning sent back with an earlier answer
 * is dropped, as the template drops it. The training form it does not render here. */
static int encode_fmt(const ms_tok *t, const ms_chat_msg *msgs, int n, const ms_chat_opts *o, int32_t **ids,
                      size_t *n_ids)
{
    *ids = NULL;
    *n_ids = 0;
    if (o && o->no_generation_prompt) {
        ms_err_set("the kimi chat format does not render a chat without the generation prompt in this build");
        return ms_err_set_code(MS_EXIT_INPUT);
    }
    for (int i = 0; i < n; i++)
        if (!msgs[i].content && msgs[i].n_calls == 0) return bad(i, "needs content");
    /* a model whose tokenizer cannot write a call is not given tools it could never call */
    if (o && o->tools && json_array_size((const json_t *)o->tools) > 0 &&
        ms_tok_special_id(t, "<|tool_calls_section_begin|>") < 0) {
        ms_err_set("\"tools\": the tokenizer has no <|tool_calls_section_begin|>, which tool calls in the kimi chat "
                   "format need");
        return ms_err_set_code(MS_EXIT_INPUT);
    }
    return render(t, msgs, n, o ? (const json_t *)o->tools : NULL, ids, n_ids);
}

static int stops(const ms_tok *t, int32_t *ids, int max)
{
    int32_t e = ms_kimichat_end_id(t);
    if (e < 0 || max < 1) return 0;
    ids[0] = e;
    return 1;
}

/* The answer ends with <|im_end|> (generated, or added when it was cut), then the messages are
 * rendered as encode renders them: no preamble, each message on its own. */
static int follow(const ms_tok *t, int32_t last, const ms_chat_msg *msgs, int n, const ms_chat_opts *o, int32_t **ids,
                  size_t *n_ids)
{
    int32_t end = ms_kimichat_end_id(t), *rest = NULL;
    size_t nr = 0;
    if (end < 0) {
        ms_err_set("the tokenizer has no <|im_end|>, which the kimi chat format needs");
        return ms_err_set_code(MS_EXIT_INPUT);
    }
    ms_chat_opts later = o ? *o : (ms_chat_opts){0};
    later.tools = NULL; /* the tool list was declared at the conversation's start */
    if (encode_fmt(t, msgs, n, &later, &rest, &nr) != 0) return -1;
    size_t k = last == end ? 1 : 2;
    *ids = ms_malloc(sizeof(int32_t) * (nr + k));
    if (k == 2) (*ids)[0] = last;
    (*ids)[k - 1] = end;
    memcpy(*ids + k, rest, sizeof(int32_t) * nr);
    *n_ids = nr + k;
    free(rest);
    return 0;
}

/* ---- answers ---- */

static size_t find_id(const int32_t *ids, size_t a, size_t n, int32_t id)
{
    for (size_t i = a; id >= 0 && i < n; i++)
        if (ids[i] == id) return i;
    return n;
}

/* The content is the text before <|tool_calls_section_begin|>; the section's first call
 * <|tool_call_begin|>ID<|tool_call_argument_begin|>ARGS<|tool_call_end|> is the tool call, its
 * function's name from ID (functions.NAME:INDEX, as Kimi writes it; a bare NAME or NAME:INDEX
 * read alike). A section without a whole first call is no call: its text stays the content's. */
static int answer(const ms_tok *t, const int32_t *ids, size_t n, ms_chat_answer *a)
{
    memset(a, 0, sizeof *a);
    int32_t sec = ms_tok_special_id(t, "<|tool_calls_section_begin|>"), cb = ms_tok_special_id(t, "<|tool_call_begin|>");
    int32_t ab = ms_tok_special_id(t, "<|tool_call_argument_begin|>"), ce = ms_tok_special_id(t, "<|tool_call_end|>");
    size_t s0 = find_id(ids, 0, n, sec), b = find_id(ids, s0 + 1, n, cb), g = find_id(ids, b + 1, n, ab);
    size_t e = find_id(ids, g + 1, n, ce);
    char *id = NULL;
    size_t il = 0;
    if (s0 < n && e < n) {
        if (ms_tok_decode(t, ids + b + 1, g - b - 1, &id, &il) != 0) return -1;
        const char *nm = id, *ne = id + il;
        if (il >= 10 && !memcmp(id, "functions.", 10)) nm += 10;
        const char *colon = memrchr(nm, ':', (size_t)(ne - nm));
        if (colon && colon + 1 < ne && strspn(colon + 1, "0123456789") == (size_t)(ne - colon - 1)) ne = colon;
        if (ne > nm) {
            a->call_name = ms_malloc((size_t)(ne - nm) + 1);
            memcpy(a->call_name, nm, (size_t)(ne - nm));
            a->call_name[ne - nm] = 0;
            if (ms_tok_decode(t, ids + g + 1, e - g - 1, &a->call_args, &a->call_args_len) != 0) {
                free(id);
                return -1;
            }
        }
        free(id);
    }
    /* the content as a reader is shown it (special ids left out, as the streamed text has them) */
    size_t upto = a->call_name ? s0 : n;
    return ms_tok_decode_text(t, ids, upto, 1, &a->content, &a->content_len);
}

/* Content until <|tool_calls_section_begin|>; the call, from there on, is sent at the end. */
static int route(const ms_tok *t, ms_chat_stream *s, int32_t id)
{
    if (s->mode == 1) return MS_CHAT_TO_NONE;
    int32_t sec = ms_tok_special_id(t, "<|tool_calls_section_begin|>");
    if (sec >= 0 && id == sec) return s->mode = 1, MS_CHAT_TO_NONE;
    return MS_CHAT_TO_CONTENT;
}

/* A constrained answer: the content, or text and one call in a tool-calls section as answer
 * reads it (functions.NAME:INDEX). */
static char *rules(const ms_tok *t, const ms_chat_rules *r)
{
    static const char *const marks[] = {"<|tool_calls_section_begin|>", "<|tool_call_begin|>",
                                        "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|tool_calls_section_end|>"};
    if (r->calls != MS_CHAT_CALLS_NO && ms_chatp_need(t, marks, 5, "tool calls in the kimi chat format") != 0) return NULL;
    ms_sbuf b = {0};
    ms_sbuf_adds(&b, r->calls == MS_CHAT_CALLS_NO    ? "root ::= content\n"
                     : r->calls == MS_CHAT_CALLS_MAY ? "root ::= content | .* kimi-section\n"
                                                     : "root ::= kimi-section\n");
    if (r->calls != MS_CHAT_CALLS_NO) {
        ms_sbuf_adds(&b, "kimi-section ::= <|tool_calls_section_begin|> <|tool_call_begin|> kimi-call <|tool_call_end|> "
                         "<|tool_calls_section_end|>\nkimi-call ::= ");
        for (int i = 0; i < r->n_tools; i++)
            ms_sbuf_addf(&b, "%s\"functions.%s:\" [0-9]{1,3} <|tool_call_argument_begin|> args-%d", i ? " | " : "",
                         r->names[i], i);
        ms_sbuf_adds(&b, "\n");
    }
    size_t l;
    return ms_sbuf_take(&b, &l);
}

const ms_chatfmt ms_kimichat = {"kimi", encode_fmt, stops, answer, route, follow, NULL, "", NULL, rules};
