/* ms_dsv3_chat: DeepSeek-V3's chat format (V3, R1, V3.1; spec §5): the system prompt after BOS, <｜User｜> and <｜Assistant｜> turns each answer closed by EOS, R1's <think> reasoning split from the answer and dropped from history, V3.1's thinking switch, tools and tool calls in each variant's form. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_chatp.h"
#include "ms_dsv3_model.h"
#include "ms_err.h"
#include "ms_pyjson.h"
#include "ms_sbuf.h"

#define DS_BOS "<｜begin▁of▁sentence｜>"
#define DS_EOS "<｜end▁of▁sentence｜>"
#define DS_USER "<｜User｜>"
#define DS_ASSISTANT "<｜Assistant｜>"
#define DS_CALLS_BEGIN "<｜tool▁calls▁begin｜>"
#define DS_CALLS_END "<｜tool▁calls▁end｜>"
#define DS_CALL_BEGIN "<｜tool▁call▁begin｜>"
#define DS_CALL_END "<｜tool▁call▁end｜>"
#define DS_SEP "<｜tool▁sep｜>"
#define DS_OUTPUTS_BEGIN "<｜tool▁outputs▁begin｜>"
#define DS_OUTPUTS_END "<｜tool▁outputs▁end｜>"
#define DS_OUTPUT_BEGIN "<｜tool▁output▁begin｜>"
#define DS_OUTPUT_END "<｜tool▁output▁end｜>"

static int is(const ms_chat_msg *m, const char *role) { return !strcmp(m->role, role); }
static int sys(const ms_chat_msg *m) { return is(m, "system") || is(m, "developer"); }

static int refuse(const char *what)
{
    ms_err_set("the DeepSeek-V3 chat format does not render %s in this build", what);
    return ms_err_set_code(MS_EXIT_INPUT);
}

static int bad(int i, const char *why)
{
    ms_err_set("chat message %d: %s", i, why);
    return ms_err_set_code(MS_EXIT_INPUT);
}

/* V3.1's `thinking` variable: -1 unset (V3, R1: the template's plain generation prompt), 0 false, 1 true. */
static int thinking_of(const ms_chat_opts *o)
{
    const json_t *v = o && o->vars ? json_object_get((const json_t *)o->vars, "thinking") : NULL;
    return v ? json_is_true(v) : -1;
}

/* An earlier answer as history: its text after the last </think> (R1's template drops the
 * reasoning of earlier turns; a reasoning sent apart, msgs[i].thinking, is dropped too). */
static void history_answer(ms_chatp *p, const ms_chat_msg *m)
{
    if (!m->content) return;
    const char *s = m->content, *e = s + m->len;
    for (const char *q = s; q + 8 <= e; q++)
        if (!memcmp(q, "</think>", 8)) s = q + 8;
    ms_chatp_put(p, s, (size_t)(e - s), 0);
}

/* The tools, as a block after the system prompt (always after a blank line, the system prompt
 * or not). V3.1's is its model card's, word for word: each tool's name, description and
 * parameters (json.dumps), then the call format. V3 and R1's released template declares no tools
 * (DeepSeek's API did it on its side): the same block, with the call format those models write
 * (`function`, the name, the arguments in a ```json fence), as vLLM's V3 tool template gives it. */
static void tools_block(ms_chatp *p, const json_t *tools, int v31)
{
    ms_chatp_text(p, "\n\n## Tools\nYou have access to the following tools:\n\n");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *f = json_object_get(json_array_get(tools, i), "function");
        const char *nm = json_string_value(json_object_get(f, "name")), *d = json_string_value(json_object_get(f, "description"));
        const json_t *ps = json_object_get(f, "parameters");
        json_t *none = ps ? NULL : json_object();
        size_t pl;
        char *pj = ms_pyjson_dumps(ps ? ps : none, &pl);
        json_decref(none);
        ms_chatp_text(p, "### ");
        ms_chatp_text(p, nm ? nm : "");
        ms_chatp_text(p, "\nDescription: ");
        ms_chatp_text(p, d ? d : "");
        ms_chatp_text(p, "\n\nParameters: ");
        ms_chatp_put(p, pj, pl, 0);
        ms_chatp_text(p, "\n\n");
        free(pj);
    }
    ms_chatp_text(p, "IMPORTANT: ALWAYS adhere to this exact format for tool use:\n");
    ms_chatp_mark(p, DS_CALLS_BEGIN);
    ms_chatp_mark(p, DS_CALL_BEGIN);
    ms_chatp_text(p, v31 ? "tool_call_name" : "function");
    ms_chatp_mark(p, DS_SEP);
    ms_chatp_text(p, v31 ? "tool_call_arguments" : "tool_call_name\n```json\ntool_call_arguments\n```");
    ms_chatp_mark(p, DS_CALL_END);
    ms_chatp_text(p, "{additional_tool_calls}");
    ms_chatp_mark(p, DS_CALLS_END);
    ms_chatp_text(p, "\n\nWhere:\n- `tool_call_name` must be an exact match to one of the available tools\n"
                     "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n");
    ms_chatp_text(p, v31 ? "- For multiple tool calls, chain them directly without separators or spaces"
                         : "- For multiple tool calls, chain them with a newline as separator");
}

/* An assistant turn's tool call, after its content: V3 and R1
 * <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>,
 * V3.1 ...<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>...; then EOS. ARGS: the
 * string sent, or tojson of the object sent. */
static int call(ms_chatp *p, const ms_chat_msg *m, int i, int v31)
{
    if (m->n_calls > 1)
        return bad(i, "has more than one tool call; this server renders one per assistant message: give each call its "
                      "own assistant message");
    if (!m->call_name || !m->call_args) return bad(i, "a tool call needs a function name and arguments");
    ms_chatp_mark(p, DS_CALLS_BEGIN);
    ms_chatp_mark(p, DS_CALL_BEGIN);
    if (!v31) {
        ms_chatp_text(p, "function");
        ms_chatp_mark(p, DS_SEP);
    }
    ms_chatp_text(p, m->call_name);
    if (v31) ms_chatp_mark(p, DS_SEP);
    else ms_chatp_text(p, "\n```json\n");
    if (m->call_args_sent) ms_chatp_put(p, m->call_args_sent, m->call_args_sent_len, 0);
    else ms_chatp_put(p, m->call_args, m->call_args_len, 0);
    if (!v31) ms_chatp_text(p, "\n```");
    ms_chatp_mark(p, DS_CALL_END);
    ms_chatp_mark(p, DS_CALLS_END);
    ms_chatp_mark(p, DS_EOS);
    return 0;
}

static int valid_msg(const ms_chat_msg *m, int i)
{
    if (m->content && !ms_chatp_valid_utf8(m->content, m->len)) return bad(i, "its content is not valid UTF-8");
    if (m->n_calls > 0 && strcmp(m->role, "assistant")) return bad(i, "only an assistant turn makes tool calls");
    if (m->n_calls > 0 && ((m->call_name && !ms_chatp_valid_utf8(m->call_name, strlen(m->call_name))) ||
                           (m->call_args && !ms_chatp_valid_utf8(m->call_args, m->call_args_len)) ||
                           (m->call_args_sent && !ms_chatp_valid_utf8(m->call_args_sent, m->call_args_sent_len))))
        return bad(i, "a tool call's name or arguments are not valid UTF-8");
    if (!m->content && m->n_calls == 0) return bad(i, "needs content");
    return 0;
}

/* The templates' turns. V3 and R1 (thinking unset): a run of tool results is
 * <｜tool▁outputs▁begin｜>, each <｜tool▁output▁begin｜>RESULT<｜tool▁output▁end｜>, and the answer
 * after them follows <｜tool▁outputs▁end｜> without <｜Assistant｜> (a user turn after them follows
 * at once, as the template has it); the released templates never reset their first-call and
 * first-output flags between turns (a second run would lose its opening markers): each run opens
 * here. V3.1: each result alone, the answer after them without a marker; <｜Assistant｜></think>
 * only after a user turn. A chat ending with results ends with what opens the answer: V3's
 * <｜tool▁outputs▁end｜>, nothing in V3.1. */
static int build(const ms_chat_msg *m, int n, const ms_chat_opts *o, ms_chatp *p, int follow)
{
    if (n <= 0 && !follow) {
        ms_err_set("the chat has no messages");
        return ms_err_set_code(MS_EXIT_INPUT);
    }
    int think = thinking_of(o), v31 = think >= 0;
    const json_t *tools = o && o->tools && json_array_size((const json_t *)o->tools) > 0 ? (const json_t *)o->tools : NULL;
    if (!follow) {
        /* every system message, wherever it is, joined by a blank line, right after BOS; the tools after them */
        ms_chatp_mark(p, DS_BOS);
        int first = 1;
        for (int i = 0; i < n; i++)
            if (sys(&m[i])) {
                if (!first) ms_chatp_text(p, "\n\n");
                ms_chatp_put(p, m[i].content ? m[i].content : "", m[i].content ? m[i].len : 0, 0);
                first = 0;
            }
        if (tools) tools_block(p, tools, v31);
    }
    int last_user = 0, in_tools = 0;
    for (int i = 0; i < n; i++) {
        if (valid_msg(&m[i], i) != 0) return -1;
        if (sys(&m[i])) {
            if (follow) return refuse("a system message after the conversation began");
        } else if (is(&m[i], "user")) {
            ms_chatp_mark(p, DS_USER);
            ms_chatp_put(p, m[i].content, m[i].len, 0);
            last_user = 1, in_tools = 0;
        } else if (is(&m[i], "assistant")) {
            if (in_tools) {
                if (!v31) ms_chatp_mark(p, DS_OUTPUTS_END);
            } else if (!v31 || last_user) {
                ms_chatp_mark(p, DS_ASSISTANT);
                if (v31) ms_chatp_mark(p, "</think>"); /* V3.1: earlier turns without their thinking */
            }
            history_answer(p, &m[i]);
            if (m[i].n_calls > 0) {
                if (call(p, &m[i], i, v31) != 0) return -1;
            } else {
                ms_chatp_mark(p, DS_EOS);
            }
            last_user = 0, in_tools = 0;
        } else if (is(&m[i], "tool")) {
            if (!v31 && !in_tools) ms_chatp_mark(p, DS_OUTPUTS_BEGIN);
            ms_chatp_mark(p, DS_OUTPUT_BEGIN);
            ms_chatp_put(p, m[i].content, m[i].len, 0);
            ms_chatp_mark(p, DS_OUTPUT_END);
            last_user = 0, in_tools = 1;
        } else {
            ms_err_set("message %d: role \"%s\" is not one the DeepSeek-V3 chat format has (system, developer, user, "
                       "assistant, tool)", i, m[i].role);
            return ms_err_set_code(MS_EXIT_INPUT);
        }
    }
    if (in_tools) { /* the answer to the results goes on from them */
        if (!v31 && !(o && o->no_generation_prompt)) ms_chatp_mark(p, DS_OUTPUTS_END);
        return 0;
    }
    if (!(o && o->no_generation_prompt)) { /* V3.1 thinks after <think>, answers at once after </think> */
        ms_chatp_mark(p, DS_ASSISTANT);
        if (think >= 0) ms_chatp_mark(p, think ? "<think>" : "</think>");
    }
    return 0;
}

static int encode(const ms_tok *t, const ms_chat_msg *msgs, int n, const ms_chat_opts *o, int32_t **ids, size_t *n_ids)
{
    ms_chatp p = {0};
    *ids = NULL;
    *n_ids = 0;
    int rc = build(msgs, n, o, &p, 0);
    if (rc == 0) rc = ms_chatp_encode(&p, t, "deepseek-v3", ids, n_ids);
    ms_chatp_free(&p);
    return rc;
}

int ms_dsv3_chat_render(const ms_chat_msg *msgs, int n, const ms_chat_opts *o, char **text, size_t *len)
{
    ms_chatp p = {0};
    int rc = build(msgs, n, o, &p, 0);
    *text = rc == 0 ? p.buf : NULL;
    *len = rc == 0 ? p.len : 0;
    if (rc == 0) p.buf = NULL;
    ms_chatp_free(&p);
    return rc;
}

static int stops(const ms_tok *t, int32_t *ids, int max)
{
    int32_t e = ms_tok_special_id(t, DS_EOS);
    if (e < 0 || max < 1) return 0;
    ids[0] = e;
    return 1;
}

/* An answer that was cut gets its EOS; then the user turns and the generation prompt. */
static int follow(const ms_tok *t, int32_t last, const ms_chat_msg *msgs, int n, const ms_chat_opts *o, int32_t **ids,
                  size_t *n_ids)
{
    int32_t eos = ms_tok_special_id(t, DS_EOS), *rest = NULL;
    size_t nr = 0;
    *ids = NULL;
    *n_ids = 0;
    if (eos < 0) {
        ms_err_set("the tokenizer has no %s, which the DeepSeek-V3 chat format needs", DS_EOS);
        return ms_err_set_code(MS_EXIT_INPUT);
    }
    ms_chatp p = {0};
    int rc = build(msgs, n, o, &p, 1);
    if (rc == 0) rc = ms_chatp_encode(&p, t, "deepseek-v3", &rest, &nr);
    ms_chatp_free(&p);
    if (rc != 0) return -1;
    size_t k = last == eos ? 1 : 2;
    *ids = ms_malloc(sizeof(int32_t) * (nr + k));
    if (k == 2) (*ids)[0] = last;
    (*ids)[k - 1] = eos;
    memcpy(*ids + k, rest, sizeof(int32_t) * nr);
    *n_ids = nr + k;
    free(rest);
    return 0;
}

/* ---- the answer: R1's <think> block is the reasoning ---- */

static char *text_of(const ms_tok *t, const int32_t *ids, size_t a, size_t b, size_t *len)
{
    char *s = NULL;
    *len = 0;
    if (ms_tok_decode(t, ids + a, b - a, &s, len) != 0) return NULL;
    return s;
}

/* Ids [a, b) without the leading ones whose text is only newlines. */
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
    for (size_t i = a; id >= 0 && i < n; i++)
        if (ids[i] == id) return i;
    return n;
}

/* The first call of a tool-calls block in ids[a, n): <｜tool▁call▁begin｜>X<｜tool▁sep｜>Y<｜tool▁call▁end｜>,
 * V3's form when X is "function" and Y is NAME\n```json\nARGS\n```, else V3.1's (X the name, Y
 * the arguments). Nothing set when the call is not whole. 0, or -1 with ms_err set. */
static int split_call(const ms_tok *t, const int32_t *ids, size_t a, size_t n, ms_chat_answer *out)
{
    size_t b = find_id(ids, a, n, ms_tok_special_id(t, DS_CALL_BEGIN));
    size_t s = find_id(ids, b + 1, n, ms_tok_special_id(t, DS_SEP)), e = find_id(ids, s + 1, n, ms_tok_special_id(t, DS_CALL_END));
    if (b >= n || s >= n || e >= n) return 0;
    size_t xl, yl;
    char *x = text_of(t, ids, b + 1, s, &xl), *y = x ? text_of(t, ids, s + 1, e, &yl) : NULL;
    if (!y) {
        free(x);
        return -1;
    }
    const char *nm = x, *args = y;
    size_t nl = xl, al = yl;
    static const char fence[] = "\n```json\n";
    if (xl == 8 && !memcmp(x, "function", 8)) { /* V3: NAME\n```json\nARGS\n``` */
        const char *f = memmem(y, yl, fence, sizeof fence - 1);
        nm = y, nl = f ? (size_t)(f - y) : 0;
        args = f ? f + sizeof fence - 1 : y;
        al = f ? yl - (size_t)(args - y) : 0;
        if (al >= 4 && !memcmp(args + al - 4, "\n```", 4)) al -= 4;
        else nl = 0; /* no closing fence: not a whole call */
    }
    if (nl > 0) {
        out->call_name = ms_malloc(nl + 1);
        memcpy(out->call_name, nm, nl);
        out->call_name[nl] = 0;
        out->call_args = ms_malloc(al + 1);
        memcpy(out->call_args, args, al);
        out->call_args[al] = 0;
        out->call_args_len = al;
    }
    free(x);
    free(y);
    return 0;
}

static int answer(const ms_tok *t, const int32_t *ids, size_t n, ms_chat_answer *a)
{
    memset(a, 0, sizeof *a);
    int32_t think = ms_tok_special_id(t, "<think>"), think_end = ms_tok_special_id(t, "</think>");
    size_t c0 = 0;
    if (n > 0 && think >= 0 && ids[0] == think) { /* reasoning: to </think>, or to the end when cut */
        size_t te = 1;
        while (te < n && ids[te] != think_end) te++;
        size_t r0 = skip_newlines(t, ids, 1, te);
        if (!(a->reasoning = text_of(t, ids, r0, te, &a->reasoning_len))) return -1;
        c0 = te < n ? skip_newlines(t, ids, te + 1, n) : n;
    }
    /* the content ends where a whole call's block begins */
    size_t cb = find_id(ids, c0, n, ms_tok_special_id(t, DS_CALLS_BEGIN)), c1 = n;
    if (cb < n) {
        if (split_call(t, ids, cb + 1, n, a) != 0) return -1;
        if (a->call_name) c1 = cb;
    }
    return (a->content = text_of(t, ids, c0, c1, &a->content_len)) ? 0 : -1;
}

/* Streaming: before the first id; in the <think> block before its text, in it; after </think>
 * before the content's text; in the content. */
enum { S_START = 0, S_THINK_HEAD, S_THINK, S_AFTER, S_CONTENT, S_CALLS };

static int route(const ms_tok *t, ms_chat_stream *s, int32_t id)
{
    if (s->mode == S_CALLS) return MS_CHAT_TO_NONE; /* a tool call: sent whole at the end */
    if (s->mode != S_THINK_HEAD && s->mode != S_THINK && id == ms_tok_special_id(t, DS_CALLS_BEGIN))
        return s->mode = S_CALLS, MS_CHAT_TO_NONE;
    if (s->mode == S_START && id == ms_tok_special_id(t, "<think>")) return s->mode = S_THINK_HEAD, MS_CHAT_TO_NONE;
    if ((s->mode == S_THINK_HEAD || s->mode == S_THINK) && id == ms_tok_special_id(t, "</think>"))
        return s->mode = S_AFTER, MS_CHAT_TO_NONE;
    if (s->mode == S_THINK_HEAD || s->mode == S_AFTER) {
        if (skip_newlines(t, &id, 0, 1) == 1) return MS_CHAT_TO_NONE; /* a leading newline run */
        s->mode = s->mode == S_THINK_HEAD ? S_THINK : S_CONTENT;
    }
    if (s->mode == S_START) s->mode = S_CONTENT;
    return s->mode == S_THINK ? MS_CHAT_TO_REASONING : MS_CHAT_TO_CONTENT;
}

/* V3.1's `thinking` (a boolean): true ends the generation prompt with <think> (the answer's
 * reasoning comes first: `opening` tells the split), false with </think>. */
static int var(const char *name, const json_t *v, const ms_chat_opts *o, char *why, size_t n)
{
    (void)o;
    if (strcmp(name, "thinking")) return 1;
    if (!json_is_boolean(v)) return snprintf(why, n, "chat_template_kwargs.thinking must be a boolean"), -1;
    return 0;
}

/* A prompt that ends with <think> opens the answer's reasoning. */
static int opening(const ms_tok *t, const int32_t *prompt, size_t n)
{
    return n > 0 && prompt[n - 1] == ms_tok_special_id(t, "<think>") ? 1 : 0;
}

/* A constrained answer: R1's <think> block, or V3.1's reasoning after a prompt that opened it
 * (text, then </think>), then the content, or text and one call in the form the variant writes
 * (V3.1 when the request sets `thinking`, as encode renders it). */
static char *rules(const ms_tok *t, const ms_chat_rules *r)
{
    static const char *const marks[] = {DS_CALLS_BEGIN, DS_CALL_BEGIN, DS_SEP, DS_CALL_END, DS_CALLS_END};
    if (r->calls != MS_CHAT_CALLS_NO && ms_chatp_need(t, marks, 5, "tool calls in the deepseek-v3 chat format") != 0)
        return NULL;
    int v31 = r->vars && json_object_get((const json_t *)r->vars, "thinking") != NULL;
    int thinks = ms_tok_special_id(t, "<think>") >= 0 && ms_tok_special_id(t, "</think>") >= 0;
    ms_sbuf b = {0};
    ms_sbuf_adds(&b, "root ::= ");
    /* R1 may open a <think> block; V3.1 thinks only after a prompt that opened it (its </think> closed it) */
    if (thinks && r->opened) ms_sbuf_adds(&b, ".* </think> \"\\n\"{0,2} ");
    else if (thinks && !v31) ms_sbuf_adds(&b, "( <think> .* </think> \"\\n\"{0,2} )? ");
    ms_sbuf_adds(&b, r->calls == MS_CHAT_CALLS_NO    ? "content\n"
                     : r->calls == MS_CHAT_CALLS_MAY ? "( content | .* ds-calls )\n"
                                                     : "ds-calls\n");
    if (r->calls != MS_CHAT_CALLS_NO) {
        ms_sbuf_addf(&b, "ds-calls ::= %s %s ds-call %s %s\nds-call ::= ", DS_CALLS_BEGIN, DS_CALL_BEGIN, DS_CALL_END,
                     DS_CALLS_END);
        for (int i = 0; i < r->n_tools; i++) {
            if (v31) ms_sbuf_addf(&b, "%s\"%s\" %s args-%d", i ? " | " : "", r->names[i], DS_SEP, i);
            else ms_sbuf_addf(&b, "%s\"function\" %s \"%s\\n```json\\n\" args-%d \"\\n```\"", i ? " | " : "", DS_SEP, r->names[i], i);
        }
        ms_sbuf_adds(&b, "\n");
    }
    size_t l;
    return ms_sbuf_take(&b, &l);
}

const ms_chatfmt ms_dsv3_chat = {"deepseek-v3", encode, stops, answer, route, follow, var, "thinking", opening, rules};
