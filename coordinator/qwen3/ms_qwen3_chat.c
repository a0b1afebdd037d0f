/* ms_qwen3_chat: Qwen3's ChatML with <think> reasoning and <tool_call> JSON: messages -> prompt pieces -> ids, and generated ids -> content, reasoning and tool call. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_chatp.h"
#include "ms_sbuf.h"
#include "ms_err.h"
#include "ms_pyjson.h"
#include "ms_qwen3_chat.h"

/* The added tokens the template writes, as markers wherever its own text holds them. */
static const char *const markers[] = {"<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>",
                                      "</tool_response>", "<think>", "</think>"};
#define N_MARKERS (sizeof markers / sizeof markers[0])

/* The template's own text: its added-token strings are those tokens (the release's tokenizer
 * matches them anywhere); a message's text goes through ms_chatp_put as text only. */
static void lit(ms_chatp *p, const char *s)
{
    while (*s) {
        const char *best = NULL;
        size_t bl = 0;
        for (size_t i = 0; i < N_MARKERS; i++) {
            const char *f = strstr(s, markers[i]);
            if (f && (!best || f < best)) best = f, bl = strlen(markers[i]);
        }
        if (!best) {
            ms_chatp_text(p, s);
            return;
        }
        if (best > s) ms_chatp_put(p, s, (size_t)(best - s), 0);
        ms_chatp_put(p, best, bl, 1);
        s = best + bl;
    }
}

static int bad(int i, const char *why)
{
    ms_err_set("chat message %d: %s", i, why);
    return ms_err_set_code(MS_EXIT_INPUT);
}

static int is(const ms_chat_msg *m, const char *role) { return !strcmp(m->role, role); }
static int sys(const ms_chat_msg *m) { return is(m, "system") || is(m, "developer"); }

/* A string's piece [a, b) with the newlines at its ends taken off (which: 1 left, 2 right, 3 both). */
static void strip_nl(const char **a, const char **b, int which)
{
    while ((which & 1) && *a < *b && **a == '\n') (*a)++;
    while ((which & 2) && *b > *a && (*b)[-1] == '\n') (*b)--;
}

static const char *find(const char *s, size_t n, const char *what)
{
    return memmem(s, n, what, strlen(what));
}

static const char *find_last(const char *s, size_t n, const char *what)
{
    const char *r = NULL, *f;
    size_t w = strlen(what);
    while ((f = memmem(s, n, what, w))) {
        r = f;
        n -= (size_t)(f + w - s);
        s = f + w;
    }
    return r;
}

/* An assistant turn (the template's reasoning split, its placement by the last query, its call). */
static int assistant(ms_chatp *p, const ms_chat_msg *m, int i, int last, int after_query)
{
    const char *c = m->content ? m->content : "", *ce = c + (m->content ? m->len : 0);
    const char *r = "", *re = r;
    if (m->thinking) {
        r = m->thinking, re = r + m->thinking_len;
    } else if (find(c, (size_t)(ce - c), "</think>")) {
        /* reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n');
         * content = content.split('</think>')[-1].lstrip('\n') */
        const char *end = find(c, (size_t)(ce - c), "</think>");
        r = c, re = end;
        strip_nl(&r, &re, 2);
        const char *open = find_last(r, (size_t)(re - r), "<think>");
        if (open) r = open + 7;
        strip_nl(&r, &re, 1);
        c = find_last(c, (size_t)(ce - c), "</think>") + 8;
        strip_nl(&c, &ce, 1);
    }
    ms_chatp_mark(p, "<|im_start|>");
    ms_chatp_text(p, "assistant\n");
    const char *cl = c, *cle = ce;
    if (after_query && (last || re > r)) {
        strip_nl(&r, &re, 3);
        strip_nl(&cl, &cle, 1);
        ms_chatp_mark(p, "<think>");
        ms_chatp_text(p, "\n");
        ms_chatp_put(p, r, (size_t)(re - r), 0);
        ms_chatp_text(p, "\n");
        ms_chatp_mark(p, "</think>");
        ms_chatp_text(p, "\n\n");
    }
    ms_chatp_put(p, cl, (size_t)(cle - cl), 0);
    if (m->n_calls > 1)
        return bad(i, "has more than one tool call; this server renders one per assistant message: give each call its "
                      "own assistant message");
    if (m->n_calls == 1) {
        if (!m->call_name || !m->call_args) return bad(i, "a tool call needs a function name and arguments");
        if (ce > c) ms_chatp_text(p, "\n");
        ms_chatp_mark(p, "<tool_call>");
        ms_chatp_text(p, "\n{\"name\": \"");
        ms_chatp_text(p, m->call_name);
        ms_chatp_text(p, "\", \"arguments\": ");
        ms_chatp_put(p, m->call_args, m->call_args_len, 0);
        ms_chatp_text(p, "}\n");
        ms_chatp_mark(p, "</tool_call>");
    }
    ms_chatp_mark(p, "<|im_end|>");
    ms_chatp_text(p, "\n");
    return 0;
}

static int thinking_off(const ms_chat_opts *o)
{
    const json_t *v = o && o->vars ? json_object_get((const json_t *)o->vars, "enable_thinking") : NULL;
    return v && json_is_false(v);
}

/* The pieces of msgs[n]; follow: a conversation going on (no tools block, no first system). */
static int build(const ms_chat_msg *m, int n, const ms_chat_opts *o, ms_chatp *p, int follow)
{
    memset(p, 0, sizeof *p);
    if (n < 1) {
        ms_err_set("a chat needs at least one message");
        return ms_err_set_code(MS_EXIT_INPUT);
    }
    for (int i = 0; i < n; i++) {
        if (!is(&m[i], "user") && !sys(&m[i]) && !is(&m[i], "assistant") && !is(&m[i], "tool"))
            return bad(i, "has a role the Qwen3 format does not render (system, developer, user, assistant, tool)");
        if (m[i].content && !ms_chatp_valid_utf8(m[i].content, m[i].len)) return bad(i, "content is not valid UTF-8");
        if (m[i].thinking && !ms_chatp_valid_utf8(m[i].thinking, m[i].thinking_len))
            return bad(i, "thinking is not valid UTF-8");
        if (m[i].call_args && !ms_chatp_valid_utf8(m[i].call_args, m[i].call_args_len))
            return bad(i, "arguments are not valid UTF-8");
        if (m[i].call_name && !ms_chatp_valid_utf8(m[i].call_name, strlen(m[i].call_name)))
            return bad(i, "the function name is not valid UTF-8");
    }
    const json_t *tools = o ? (const json_t *)o->tools : NULL;
    int first = 0;
    if (!follow && tools && json_array_size(tools) > 0) {
        ms_chatp_mark(p, "<|im_start|>");
        ms_chatp_text(p, "system\n");
        if (sys(&m[0])) {
            ms_chatp_put(p, m[0].content ? m[0].content : "", m[0].content ? m[0].len : 0, 0);
            ms_chatp_text(p, "\n\n");
            first = 1;
        }
        ms_chatp_text(p, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided "
                         "with function signatures within <tools></tools> XML tags:\n<tools>");
        for (size_t k = 0; k < json_array_size(tools); k++) {
            size_t tl;
            char *t = ms_pyjson_dumps(json_array_get(tools, k), &tl);
            ms_chatp_text(p, "\n");
            ms_chatp_put(p, t, tl, 0);
            free(t);
        }
        lit(p, "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
               "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
               "<args-json-object>}\n</tool_call><|im_end|>\n");
    } else if (!follow && sys(&m[0])) {
        ms_chatp_mark(p, "<|im_start|>");
        ms_chatp_text(p, "system\n");
        ms_chatp_put(p, m[0].content ? m[0].content : "", m[0].content ? m[0].len : 0, 0);
        ms_chatp_mark(p, "<|im_end|>");
        ms_chatp_text(p, "\n");
        first = 1;
    }
    /* the last user query: a user message that is not a <tool_response> wrapper */
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--) {
        const char *c = m[i].content;
        size_t l = c ? m[i].len : 0;
        if (is(&m[i], "user") && c &&
            !(l >= 15 && !memcmp(c, "<tool_response>", 15) && l >= 16 && !memcmp(c + l - 16, "</tool_response>", 16))) {
            last_query = i;
            break;
        }
    }
    for (int i = first; i < n; i++) {
        const char *c = m[i].content ? m[i].content : "";
        size_t l = m[i].content ? m[i].len : 0;
        if (is(&m[i], "user") || sys(&m[i])) {
            ms_chatp_mark(p, "<|im_start|>");
            ms_chatp_text(p, is(&m[i], "user") ? "user\n" : "system\n");
            ms_chatp_put(p, c, l, 0);
            ms_chatp_mark(p, "<|im_end|>");
            ms_chatp_text(p, "\n");
        } else if (is(&m[i], "assistant")) {
            if (assistant(p, &m[i], i, i == n - 1, i > last_query) != 0) return -1;
        } else { /* tool */
            if (i == 0 || !is(&m[i - 1], "tool")) {
                ms_chatp_mark(p, "<|im_start|>");
                ms_chatp_text(p, "user");
            }
            ms_chatp_text(p, "\n");
            ms_chatp_mark(p, "<tool_response>");
            ms_chatp_text(p, "\n");
            ms_chatp_put(p, c, l, 0);
            ms_chatp_text(p, "\n");
            ms_chatp_mark(p, "</tool_response>");
            if (i == n - 1 || !is(&m[i + 1], "tool")) {
                ms_chatp_mark(p, "<|im_end|>");
                ms_chatp_text(p, "\n");
            }
        }
    }
    if (!(o && o->no_generation_prompt)) {
        ms_chatp_mark(p, "<|im_start|>");
        ms_chatp_text(p, "assistant\n");
        if (thinking_off(o)) lit(p, "<think>\n\n</think>\n\n");
    }
    return 0;
}

int ms_qwen3_chat_render(const ms_chat_msg *msgs, int n, const ms_chat_opts *o, char **text, size_t *len)
{
    ms_chatp p;
    if (build(msgs, n, o, &p, 0) != 0) {
        ms_chatp_free(&p);
        return -1;
    }
    *text = p.buf ? p.buf : ms_calloc(1, 1);
    *len = p.len;
    p.buf = NULL;
    ms_chatp_free(&p);
    return 0;
}

static int encode(const ms_tok *t, const ms_chat_msg *msgs, int n, const ms_chat_opts *o, int32_t **ids, size_t *n_ids)
{
    ms_chatp p;
    int rc = build(msgs, n, o, &p, 0);
    if (rc == 0) rc = ms_chatp_encode(&p, t, "Qwen3", ids, n_ids);
    ms_chatp_free(&p);
    return rc;
}

static int stops(const ms_tok *t, int32_t *ids, int max)
{
    static const char *const names[2] = {"<|im_end|>", "<|endoftext|>"};
    int n = 0;
    for (int i = 0; i < 2 && n < max; i++)
        if ((ids[n] = ms_tok_special_id(t, names[i])) >= 0) n++;
    return n;
}

/* After an answer: it ends with <|im_end|> (generated, or added when it was cut, after its last
 * id), then "\n" and the messages as user turns, then the generation prompt. */
static int follow(const ms_tok *t, int32_t last, const ms_chat_msg *msgs, int n, const ms_chat_opts *o, int32_t **ids,
                  size_t *n_ids)
{
    int32_t end = ms_tok_special_id(t, "<|im_end|>"), eot = ms_tok_special_id(t, "<|endoftext|>");
    if (end < 0) {
        ms_err_set("the tokenizer has no <|im_end|>, which the Qwen3 chat format needs");
        return ms_err_set_code(MS_EXIT_INPUT);
    }
    ms_chatp p;
    int32_t *rest = NULL;
    size_t nr = 0;
    int rc = build(msgs, n, o, &p, 1);
    if (rc == 0) rc = ms_chatp_encode(&p, t, "Qwen3", &rest, &nr);
    ms_chatp_free(&p);
    int32_t nl[4];
    size_t nn = 0;
    int32_t *v = NULL;
    if (rc == 0 && ms_tok_encode(t, "\n", 1, 0, &v, &nn) != 0) rc = -1;
    if (rc != 0 || nn > 2) {
        free(rest);
        free(v);
        return rc != 0 ? -1 : (ms_err_set("the tokenizer writes a newline in %zu ids", nn), ms_err_set_code(MS_EXIT_INPUT));
    }
    memcpy(nl, v, sizeof *v * nn);
    free(v);
    int32_t head[4];
    size_t k = 0;
    if (last != end && last != eot) head[k++] = last;
    head[k++] = end;
    *ids = ms_malloc(sizeof(int32_t) * (nr + k + nn));
    memcpy(*ids, head, sizeof(int32_t) * k);
    memcpy(*ids + k, nl, sizeof(int32_t) * nn);
    memcpy(*ids + k + nn, rest, sizeof(int32_t) * nr);
    *n_ids = nr + k + nn;
    free(rest);
    return 0;
}

/* ---- answers ---- */

typedef struct {
    int32_t think, think_end, call, call_end;
} qw_ids;

static void ids_of(const ms_tok *t, qw_ids *q)
{
    q->think = ms_tok_special_id(t, "<think>");
    q->think_end = ms_tok_special_id(t, "</think>");
    q->call = ms_tok_special_id(t, "<tool_call>");
    q->call_end = ms_tok_special_id(t, "</tool_call>");
}

/* The text of ids[a, b) (malloc'ed, *len bytes), or NULL with ms_err set. */
static char *text_of(const ms_tok *t, const int32_t *ids, size_t a, size_t b, size_t *len)
{
    char *s = NULL;
    *len = 0;
    if (ms_tok_decode(t, ids + a, b - a, &s, len) != 0) return NULL;
    return s;
}

/* Ids [a, b) without the leading ones whose text is only newlines (a run of them is one id in
 * Qwen's pre-tokenizer, so the split is the same at every id, streamed or whole). */
static size_t skip_newlines(const ms_tok *t, const int32_t *ids, size_t a, size_t b)
{
    for (; a < b; a++) {
        size_t l;
        char *s = text_of(t, ids, a, a + 1, &l);
        int nl = s && l > 0 && strspn(s, "\n") == l;
        free(s);
        if (!nl) break;
    }
    return a;
}

static size_t find_id(const int32_t *ids, size_t a, size_t n, int32_t id)
{
    for (size_t i = a; i < n; i++)
        if (ids[i] == id) return i;
    return n;
}

/* A tool call's text: {"name": NAME, "arguments": ARGS}, into a; 0, or -1 when it is not one. */
static int parse_call(const char *s, size_t n, ms_chat_answer *a)
{
    json_error_t je;
    json_t *o = json_loadb(s, n, JSON_REJECT_DUPLICATES, &je);
    const json_t *name = json_object_get(o, "name"), *args = json_object_get(o, "arguments");
    if (!json_is_string(name) || !args) {
        json_decref(o);
        return -1;
    }
    a->call_name = ms_strdup(json_string_value(name));
    a->call_args = json_is_string(args) ? ms_strdup(json_string_value(args))
                                        : json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
    a->call_args_len = strlen(a->call_args);
    json_decref(o);
    return 0;
}

static int answer(const ms_tok *t, const int32_t *ids, size_t n, ms_chat_answer *a)
{
    memset(a, 0, sizeof *a);
    qw_ids q;
    ids_of(t, &q);
    size_t c0 = 0, te = find_id(ids, 0, n, q.think_end);
    if (n > 0 && ids[0] == q.think) { /* reasoning: to </think>, or to the end when it was cut */
        size_t r0 = skip_newlines(t, ids, 1, te);
        if (!(a->reasoning = text_of(t, ids, r0, te, &a->reasoning_len))) return -1;
        c0 = te < n ? skip_newlines(t, ids, te + 1, n) : n;
    }
    size_t tc = find_id(ids, c0, n, q.call);
    if (!(a->content = text_of(t, ids, c0, tc, &a->content_len))) return -1;
    if (tc < n) {
        size_t ce = find_id(ids, tc + 1, n, q.call_end), len;
        char *body = text_of(t, ids, tc + 1, ce, &len);
        if (!body) return -1;
        if (parse_call(body, len, a) != 0) { /* not a call: its text stays the content's */
            size_t l2;
            char *all = text_of(t, ids, c0, n, &l2);
            if (!all) {
                free(body);
                return -1;
            }
            free(a->content);
            a->content = all, a->content_len = l2;
        }
        free(body);
    }
    return 0;
}

/* Streaming states: before the first id; in a <think> block before its text, in it; after
 * </think> before the content's text; in the content; from a <tool_call> on. */
enum { S_START = 0, S_THINK_HEAD, S_THINK, S_AFTER, S_CONTENT, S_CALL };

static int route(const ms_tok *t, ms_chat_stream *s, int32_t id)
{
    qw_ids q;
    ids_of(t, &q);
    if (s->mode == S_CALL) return MS_CHAT_TO_NONE;
    if (id == q.think && s->mode == S_START) return s->mode = S_THINK_HEAD, MS_CHAT_TO_NONE;
    if (id == q.think_end && (s->mode == S_THINK_HEAD || s->mode == S_THINK)) return s->mode = S_AFTER, MS_CHAT_TO_NONE;
    if (id == q.call && s->mode != S_THINK_HEAD && s->mode != S_THINK) return s->mode = S_CALL, MS_CHAT_TO_NONE;
    if (s->mode == S_THINK_HEAD || s->mode == S_AFTER) {
        size_t one = skip_newlines(t, &id, 0, 1);
        if (one == 1) return MS_CHAT_TO_NONE; /* a leading newline run */
        s->mode = s->mode == S_THINK_HEAD ? S_THINK : S_CONTENT;
    }
    if (s->mode == S_START) s->mode = S_CONTENT;
    return s->mode == S_THINK ? MS_CHAT_TO_REASONING : MS_CHAT_TO_CONTENT;
}

/* enable_thinking (a boolean): false renders the empty think block that turns thinking off. */
static int var(const char *name, const json_t *v, const ms_chat_opts *o, char *why, size_t n)
{
    (void)o;
    if (strcmp(name, "enable_thinking")) return 1;
    if (!json_is_boolean(v)) return snprintf(why, n, "chat_template_kwargs.enable_thinking must be a boolean"), -1;
    return 0;
}

/* A constrained answer: a <think> block (when the model thinks), then the content, or text and
 * one <tool_call> holding {"name": NAME, "arguments": ARGS} as the system prompt asks. */
static char *rules(const ms_tok *t, const ms_chat_rules *r)
{
    static const char *const marks[] = {"<think>", "</think>", "<tool_call>", "</tool_call>"};
    if (ms_chatp_need(t, marks, r->calls != MS_CHAT_CALLS_NO ? 4 : 2, "constrained answers in the qwen3 chat format") != 0)
        return NULL;
    ms_sbuf b = {0};
    ms_sbuf_adds(&b, "root ::= qwen-think? qwen-body\nqwen-think ::= <think> .* </think> \"\\n\"{0,2}\n");
    ms_sbuf_adds(&b, r->calls == MS_CHAT_CALLS_NO    ? "qwen-body ::= content\n"
                     : r->calls == MS_CHAT_CALLS_MAY ? "qwen-body ::= content | .* qwen-call\n"
                                                     : "qwen-body ::= qwen-call\n");
    if (r->calls != MS_CHAT_CALLS_NO) {
        ms_sbuf_adds(&b, "qwen-call ::= <tool_call> \"\\n{\\\"name\\\": \\\"\" ( ");
        for (int i = 0; i < r->n_tools; i++)
            ms_sbuf_addf(&b, "%s\"%s\\\", \\\"arguments\\\": \" args-%d", i ? " | " : "", r->names[i], i);
        ms_sbuf_adds(&b, " ) \"}\\n\" </tool_call>\n");
    }
    size_t l;
    return ms_sbuf_take(&b, &l);
}

const ms_chatfmt ms_qwen3_chat = {"qwen3", encode, stops, answer, route, follow, var, "enable_thinking", NULL, rules};
