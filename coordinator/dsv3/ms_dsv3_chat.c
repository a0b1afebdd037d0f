/* ms_dsv3_chat: DeepSeek-V3's chat format (V3, R1, V3.1; spec §5): the system prompt after BOS, <｜User｜> and <｜Assistant｜> turns each answer closed by EOS, R1's <think> reasoning split from the answer and dropped from history, V3.1's thinking switch. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_chatp.h"
#include "ms_dsv3_model.h"
#include "ms_err.h"

#define DS_BOS "<｜begin▁of▁sentence｜>"
#define DS_EOS "<｜end▁of▁sentence｜>"
#define DS_USER "<｜User｜>"
#define DS_ASSISTANT "<｜Assistant｜>"

static int is(const ms_chat_msg *m, const char *role) { return !strcmp(m->role, role); }
static int sys(const ms_chat_msg *m) { return is(m, "system") || is(m, "developer"); }

static int refuse(const char *what)
{
    ms_err_set("the DeepSeek-V3 chat format does not render %s in this build", what);
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
    const char *s = m->content, *e = s + m->len;
    for (const char *q = s; q + 8 <= e; q++)
        if (!memcmp(q, "</think>", 8)) s = q + 8;
    ms_chatp_put(p, s, (size_t)(e - s), 0);
}

static int build(const ms_chat_msg *m, int n, const ms_chat_opts *o, ms_chatp *p, int follow)
{
    if (n <= 0 && !follow) {
        ms_err_set("the chat has no messages");
        return ms_err_set_code(MS_EXIT_INPUT);
    }
    if (o && o->tools && json_array_size((const json_t *)o->tools) > 0) return refuse("\"tools\"");
    int think = thinking_of(o);
    if (!follow) {
        /* every system message, wherever it is, joined by a blank line, right after BOS */
        ms_chatp_mark(p, DS_BOS);
        int first = 1;
        for (int i = 0; i < n; i++)
            if (sys(&m[i])) {
                if (!first) ms_chatp_text(p, "\n\n");
                ms_chatp_put(p, m[i].content ? m[i].content : "", m[i].content ? m[i].len : 0, 0);
                first = 0;
            }
    }
    for (int i = 0; i < n; i++) {
        if (m[i].n_calls > 0 || is(&m[i], "tool")) return refuse("tool calls or tool results");
        if (!m[i].content) {
            ms_err_set("message %d: needs content", i);
            return ms_err_set_code(MS_EXIT_INPUT);
        }
        if (!ms_chatp_valid_utf8(m[i].content, m[i].len)) {
            ms_err_set("message %d: its content is not valid UTF-8", i);
            return ms_err_set_code(MS_EXIT_INPUT);
        }
        if (sys(&m[i])) {
            if (follow) return refuse("a system message after the conversation began");
        } else if (is(&m[i], "user")) {
            ms_chatp_mark(p, DS_USER);
            ms_chatp_put(p, m[i].content, m[i].len, 0);
        } else if (is(&m[i], "assistant")) {
            ms_chatp_mark(p, DS_ASSISTANT);
            if (think >= 0) ms_chatp_mark(p, "</think>"); /* V3.1: earlier turns without their thinking */
            history_answer(p, &m[i]);
            ms_chatp_mark(p, DS_EOS);
        } else {
            ms_err_set("message %d: role \"%s\" is not one the DeepSeek-V3 chat format has (system, developer, user, "
                       "assistant)", i, m[i].role);
            return ms_err_set_code(MS_EXIT_INPUT);
        }
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
    return (a->content = text_of(t, ids, c0, n, &a->content_len)) ? 0 : -1;
}

/* Streaming: before the first id; in the <think> block before its text, in it; after </think>
 * before the content's text; in the content. */
enum { S_START = 0, S_THINK_HEAD, S_THINK, S_AFTER, S_CONTENT };

static int route(const ms_tok *t, ms_chat_stream *s, int32_t id)
{
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
 * (text, then </think>), then the content. No tool calls (the format has none here). */
static char *rules(const ms_tok *t, const ms_chat_rules *r)
{
    if (r->calls != MS_CHAT_CALLS_NO) {
        ms_err_set("the deepseek-v3 chat format has no tool calls here");
        return ms_err_set_code(MS_EXIT_INPUT), NULL;
    }
    if (ms_tok_special_id(t, "<think>") < 0 || ms_tok_special_id(t, "</think>") < 0) return ms_strdup("root ::= content\n");
    return ms_strdup(r->opened ? "root ::= .* </think> \"\\n\"{0,2} content\n"
                                : "root ::= ( <think> .* </think> \"\\n\"{0,2} )? content\n");
}

const ms_chatfmt ms_dsv3_chat = {"deepseek-v3", encode, stops, answer, route, follow, var, "thinking", opening, rules};
