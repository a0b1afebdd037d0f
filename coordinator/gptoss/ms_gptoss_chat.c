/* ms_gptoss_chat: harmony: messages -> the pieces of the prompt (markers and text) -> text or ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ms_chatp.h"
#include "ms_err.h"
#include "ms_gptoss_chat.h"
#include "ms_gptoss_tools.h"
#include "ms_pyjson.h"
#include "ms_sbuf.h"

static int bad(int i, const char *why)
{
    ms_err_set("chat message %d: %s", i, why);
    return ms_err_set_code(MS_EXIT_INPUT);
}

/* An analysis or final message of the assistant: <|start|>assistant<|channel|>NAME<|message|>BODY END */
static void said(ms_chatp *p, const char *channel, const char *body, size_t n, const char *end)
{
    ms_chatp_mark(p, "<|start|>");
    ms_chatp_text(p, "assistant");
    ms_chatp_mark(p, "<|channel|>");
    ms_chatp_text(p, channel);
    ms_chatp_mark(p, "<|message|>");
    ms_chatp_put(p, body ? body : "", body ? n : 0, 0);
    ms_chatp_mark(p, end);
}

static int has_channel_tag(const char *s, size_t n)
{
    return s && (memmem(s, n, "<|channel|>analysis<|message|>", 30) || memmem(s, n, "<|channel|>final<|message|>", 27));
}

/* A template variable the request set (o->vars, checked by var below), or NULL. */
static const json_t *tvar(const ms_chat_opts *o, const char *name)
{
    return o && o->vars ? json_object_get((const json_t *)o->vars, name) : NULL;
}

/* chat_template_kwargs.builtin_tools as MS_GPTOSS_TOOL_* bits. */
static unsigned builtin_tools(const ms_chat_opts *o)
{
    const json_t *v = tvar(o, "builtin_tools");
    unsigned bits = 0;
    for (size_t i = 0; i < json_array_size(v); i++) {
        const char *s = json_string_value(json_array_get(v, i));
        bits |= !s ? 0 : !strcmp(s, "browser") ? MS_GPTOSS_TOOL_BROWSER : !strcmp(s, "python") ? MS_GPTOSS_TOOL_PYTHON : 0;
    }
    return bits;
}

/* The system message: identity, cutoff, date, reasoning, built-in tools, channels. */
static void system_message(ms_chatp *p, const ms_chat_opts *o, const char *date, const char *effort, int tools)
{
    char head[512];
    const char *identity = json_string_value(tvar(o, "model_identity"));
    unsigned builtin = builtin_tools(o);
    snprintf(head, sizeof head, "%s\nKnowledge cutoff: 2024-06\nCurrent date: %s\n\nReasoning: %s\n\n",
             identity ? identity : "You are ChatGPT, a large language model trained by OpenAI.", date, effort);
    ms_chatp_mark(p, "<|start|>");
    ms_chatp_text(p, "system");
    ms_chatp_mark(p, "<|message|>");
    ms_chatp_text(p, head);
    if (builtin) {
        ms_chatp_text(p, "# Tools\n\n");
        if (builtin & MS_GPTOSS_TOOL_BROWSER) ms_chatp_text(p, ms_gptoss_builtin_text(MS_GPTOSS_TOOL_BROWSER));
        if (builtin & MS_GPTOSS_TOOL_PYTHON) ms_chatp_text(p, ms_gptoss_builtin_text(MS_GPTOSS_TOOL_PYTHON));
    }
    ms_chatp_text(p, "# Valid channels: analysis, commentary, final. Channel must be included for every message.");
    if (tools) ms_chatp_text(p, "\nCalls to these tools must go to the commentary channel: 'functions'.");
    ms_chatp_mark(p, "<|end|>");
}

/* An assistant turn that calls a tool; its thinking (or content) as analysis first unless a later
 * assistant turn answers without a tool call (then the template drops it). */
static int tool_call(ms_chatp *p, const ms_chat_msg *m, int n, int i)
{
    if (m[i].n_calls > 1)
        return bad(i, "has more than one tool call; harmony renders one per assistant message (the template reads "
                      "only the first): give each call its own assistant message");
    if (!m[i].call_name || !m[i].call_args) return bad(i, "a tool call needs a function name and arguments");
    int later = 0;
    for (int k = i + 1; k < n; k++) later |= !strcmp(m[k].role, "assistant") && m[k].n_calls == 0;
    if (m[i].len && m[i].thinking_len) return bad(i, "a tool call's message has both content and thinking: give one");
    if (!later && m[i].len)
        said(p, "analysis", m[i].content, m[i].len, "<|end|>");
    else if (!later && m[i].thinking_len)
        said(p, "analysis", m[i].thinking, m[i].thinking_len, "<|end|>");
    ms_chatp_mark(p, "<|start|>");
    ms_chatp_text(p, "assistant to=functions.");
    ms_chatp_text(p, m[i].call_name);
    ms_chatp_mark(p, "<|channel|>");
    ms_chatp_text(p, "commentary json");
    ms_chatp_mark(p, "<|message|>");
    ms_chatp_put(p, m[i].call_args, m[i].call_args_len, 0);
    ms_chatp_mark(p, "<|call|>");
    return 0;
}

/* follow = 1: the messages only (a conversation going on: no system or developer message). */
static int build_from(const ms_chat_msg *m, int n, const ms_chat_opts *o, ms_chatp *p, int follow)
{
    memset(p, 0, sizeof *p);
    if (n < 1) {
        ms_err_set("a chat needs at least one message");
        return ms_err_set_code(MS_EXIT_INPUT);
    }
    const char *effort = json_string_value(tvar(o, "reasoning_effort")); /* the same as the field, when both */
    if (!effort) effort = o && o->reasoning_effort ? o->reasoning_effort : "medium";
    if (strcmp(effort, "low") && strcmp(effort, "medium") && strcmp(effort, "high")) {
        ms_err_set("reasoning_effort must be low, medium or high, not \"%.20s\"", effort);
        return ms_err_set_code(MS_EXIT_INPUT);
    }
    char date[16];
    if (o && o->date) {
        snprintf(date, sizeof date, "%.10s", o->date);
    } else {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(date, sizeof date, "%Y-%m-%d", &tm);
    }
    for (int i = 0; i < n; i++) {
        if (!m[i].role) return bad(i, "has no role");
        if (m[i].content && !ms_chatp_valid_utf8(m[i].content, m[i].len)) return bad(i, "content is not valid UTF-8");
        if (m[i].thinking && !ms_chatp_valid_utf8(m[i].thinking, m[i].thinking_len)) return bad(i, "thinking is not valid UTF-8");
        if (m[i].call_args && !ms_chatp_valid_utf8(m[i].call_args, m[i].call_args_len)) return bad(i, "arguments are not valid UTF-8");
    }
    const json_t *tools = o && o->tools && json_array_size((const json_t *)o->tools) ? (const json_t *)o->tools : NULL;
    char *ns = NULL;
    size_t nsl = 0;
    if (tools && !(ns = ms_gptoss_tools_namespace(tools, &nsl))) return -1;
    if (!follow) system_message(p, o, date, effort, tools != NULL);
    int first = 0;
    const char *dev = "";
    size_t devl = 0;
    if (!follow && (!strcmp(m[0].role, "system") || !strcmp(m[0].role, "developer"))) {
        first = 1;
        if (m[0].content) dev = m[0].content, devl = m[0].len;
    }
    if (!follow && (devl || tools)) { /* an empty instruction and no tools: no developer message, as the template */
        ms_chatp_mark(p, "<|start|>");
        ms_chatp_text(p, "developer");
        ms_chatp_mark(p, "<|message|>");
        if (devl) {
            ms_chatp_text(p, "# Instructions\n\n");
            ms_chatp_put(p, dev, devl, 0);
            ms_chatp_text(p, "\n\n");
        }
        if (tools) {
            ms_chatp_text(p, "# Tools\n\n");
            ms_chatp_put(p, ns, nsl, 0);
        }
        ms_chatp_mark(p, "<|end|>");
    }
    free(ns);
    const char *last_call = NULL; /* a tool message answers the latest tool call */
    int gen = !(o && o->no_generation_prompt);
    for (int i = first; i < n; i++) {
        const ms_chat_msg *x = &m[i];
        if (!strcmp(x->role, "user")) {
            if (!x->content) return bad(i, "a user message needs content");
            ms_chatp_mark(p, "<|start|>");
            ms_chatp_text(p, "user");
            ms_chatp_mark(p, "<|message|>");
            ms_chatp_put(p, x->content, x->len, 0);
            ms_chatp_mark(p, "<|end|>");
        } else if (!strcmp(x->role, "assistant")) {
            if (has_channel_tag(x->content, x->len) || has_channel_tag(x->thinking, x->thinking_len))
                return bad(i, "an assistant message holds <|channel|> tags: give the analysis as \"thinking\" and "
                              "the final answer as \"content\"");
            if (x->n_calls > 0) {
                if (tool_call(p, m, n, i) != 0) return -1;
                last_call = x->call_name;
            } else if (!x->content) {
                return bad(i, "an assistant message needs content or tool_calls");
            } else if (i == n - 1 && !gen) { /* the training form: the last turn's reasoning and <|return|> */
                if (x->thinking) said(p, "analysis", x->thinking, x->thinking_len, "<|end|>");
                said(p, "final", x->content, x->len, "<|return|>");
            } else { /* earlier turns: the final answer only, reasoning dropped */
                said(p, "final", x->content, x->len, "<|end|>");
                last_call = NULL;
            }
        } else if (!strcmp(x->role, "tool")) {
            if (!last_call) return bad(i, "a tool message must follow an assistant message that calls a tool");
            json_t *c = x->content ? json_stringn(x->content, x->len) : json_null();
            size_t cl;
            char *cj = ms_pyjson_dumps(c, &cl); /* the result as a JSON string, as tojson writes it */
            json_decref(c);
            ms_chatp_mark(p, "<|start|>");
            ms_chatp_text(p, "functions.");
            ms_chatp_text(p, last_call);
            ms_chatp_text(p, " to=assistant");
            ms_chatp_mark(p, "<|channel|>");
            ms_chatp_text(p, "commentary");
            ms_chatp_mark(p, "<|message|>");
            ms_chatp_put(p, cj, cl, 0);
            ms_chatp_mark(p, "<|end|>");
            free(cj);
        } else if (!strcmp(x->role, "system") || !strcmp(x->role, "developer")) {
            return bad(i, "a system or developer message is read first only in the harmony format");
        } else {
            return bad(i, "role is not system, developer, user, assistant or tool");
        }
    }
    if (gen) {
        ms_chatp_mark(p, "<|start|>");
        ms_chatp_text(p, "assistant");
    }
    return 0;
}

static int build(const ms_chat_msg *m, int n, const ms_chat_opts *o, ms_chatp *p) { return build_from(m, n, o, p, 0); }

int ms_gptoss_chat_render(const ms_chat_msg *msgs, int n, const ms_chat_opts *o, char **text_out, size_t *len)
{
    ms_chatp p;
    if (build(msgs, n, o, &p) != 0) {
        ms_chatp_free(&p);
        return -1;
    }
    *text_out = p.buf;
    *len = p.len;
    p.buf = NULL;
    ms_chatp_free(&p);
    return 0;
}

static int encode_pieces(const ms_tok *t, ms_chatp *p, int rc, int32_t **ids, size_t *n_ids);

int ms_gptoss_chat_encode(const ms_tok *t, const ms_chat_msg *msgs, int n, const ms_chat_opts *o, int32_t **ids,
                          size_t *n_ids)
{
    ms_chatp p;
    int rc = build(msgs, n, o, &p);
    return encode_pieces(t, &p, rc, ids, n_ids);
}

/* After an answer: <|return|> is written <|end|> in a conversation's history (as the template
 * writes earlier final answers), <|call|> stays, a cut answer gets its <|end|>; then the
 * messages and the generation prompt. */
static int follow(const ms_tok *t, int32_t last, const ms_chat_msg *msgs, int n, const ms_chat_opts *o, int32_t **ids,
                  size_t *n_ids)
{
    int32_t ret = ms_tok_special_id(t, "<|return|>"), call = ms_tok_special_id(t, "<|call|>"),
            end = ms_tok_special_id(t, "<|end|>");
    if (end < 0) {
        ms_err_set("the tokenizer has no <|end|>, which the harmony format needs");
        return ms_err_set_code(MS_EXIT_INPUT);
    }
    ms_chatp p;
    int32_t *rest = NULL;
    size_t nr = 0;
    if (encode_pieces(t, &p, build_from(msgs, n, o, &p, 1), &rest, &nr) != 0) return -1;
    int32_t head[2];
    size_t k = 0;
    if (last == ret || last == end) head[k++] = end;
    else if (last == call) head[k++] = call;
    else head[k++] = last, head[k++] = end;
    *ids = ms_malloc(sizeof(int32_t) * (nr + k));
    memcpy(*ids, head, sizeof(int32_t) * k);
    memcpy(*ids + k, rest, sizeof(int32_t) * nr);
    *n_ids = nr + k;
    free(rest);
    return 0;
}

static int encode_pieces(const ms_tok *t, ms_chatp *p, int rc, int32_t **ids, size_t *n_ids)
{
    if (rc == 0) rc = ms_chatp_encode(p, t, "harmony", ids, n_ids);
    ms_chatp_free(p);
    return rc;
}

static int stops(const ms_tok *t, int32_t *ids, int max)
{
    static const char *const names[2] = {"<|return|>", "<|call|>"};
    int n = 0;
    for (int i = 0; i < 2 && n < max; i++)
        if ((ids[n] = ms_tok_special_id(t, names[i])) >= 0) n++;
    return n;
}

/* The text of ids[n], malloc'ed (NULL with ms_err set on failure). */
static char *text_of(const ms_tok *t, const int32_t *ids, size_t n, size_t *len)
{
    char *s = NULL;
    *len = 0;
    if (ms_tok_decode(t, ids, n, &s, len) != 0) return NULL;
    return s;
}

/* The recipient in a header's text ("to=functions.get_weather"), malloc'ed, or NULL. */
static char *recipient(const char *h)
{
    const char *r = strstr(h, "to=");
    if (!r || (r > h && r[-1] != ' ')) return NULL;
    r += 3;
    size_t n = strcspn(r, " <");
    if (!n) return NULL;
    char *s = ms_malloc(n + 1);
    memcpy(s, r, n);
    s[n] = 0;
    return s;
}

int ms_gptoss_chat_answer(const ms_tok *t, const int32_t *ids, size_t n, ms_chat_answer *a)
{
    memset(a, 0, sizeof *a);
    int32_t start = ms_tok_special_id(t, "<|start|>"), ch = ms_tok_special_id(t, "<|channel|>");
    int32_t msg = ms_tok_special_id(t, "<|message|>");
    /* messages: [<|start|>ROLE] <|channel|>CHANNEL [<|constrain|>TYPE] <|message|>BODY (a marker | the end);
     * a recipient (to=functions.NAME) in ROLE or CHANNEL makes BODY a tool call's arguments */
    int32_t *role = ms_malloc(sizeof *role * (n + 1)), *chan = ms_malloc(sizeof *chan * (n + 1));
    size_t nr = 0, nc = 0, i = 0;
    int part = 0, messages = 0, rc = 0; /* part: 0 role, 1 channel, 2 neither */
    while (i < n && rc == 0) {
        if (ids[i] != msg) {
            if (ids[i] == start) nr = nc = 0, part = 0;
            else if (ids[i] == ch) nc = 0, part = 1;
            else if (ms_tok_is_special(t, ids[i])) part = 2;
            else if (part == 0) role[nr++] = ids[i];
            else if (part == 1) chan[nc++] = ids[i];
            i++;
            continue;
        }
        size_t body0 = ++i;
        while (i < n && ms_tok_is_special(t, ids[i]) == 0) i++;
        size_t rl, cl, bl;
        char *rt = text_of(t, role, nr, &rl), *ct = rt ? text_of(t, chan, nc, &cl) : NULL;
        char *body = ct ? text_of(t, ids + body0, i - body0, &bl) : NULL;
        char *to = body ? recipient(rt) : NULL;
        if (body && !to) to = recipient(ct);
        if (!body) {
            rc = -1;
        } else if (to && !strncmp(to, "functions.", 10) && to[10]) {
            free(a->call_name);
            free(a->call_args);
            a->call_name = ms_strdup(to + 10);
            a->call_args = body, a->call_args_len = bl, body = NULL;
        } else if (!to && !strncmp(ct, "final", 5)) {
            free(a->content);
            a->content = body, a->content_len = bl, body = NULL;
        } else if (!to && !strncmp(ct, "analysis", 8)) {
            a->reasoning = ms_realloc(a->reasoning, a->reasoning_len + bl + 1);
            memcpy(a->reasoning + a->reasoning_len, body, bl);
            a->reasoning_len += bl;
            a->reasoning[a->reasoning_len] = 0;
        }
        messages++;
        nr = nc = 0;
        part = 2;
        free(rt);
        free(ct);
        free(body);
        free(to);
    }
    if (rc == 0 && !messages) { /* no message at all: the whole text, markers dropped */
        size_t o = 0;
        for (size_t k = 0; k < n; k++)
            if (!ms_tok_is_special(t, ids[k])) role[o++] = ids[k];
        if (!(a->content = text_of(t, role, o, &a->content_len))) rc = -1;
    }
    free(role);
    free(chan);
    if (rc != 0) {
        ms_chat_answer_clear(a);
        return -1;
    }
    if (!a->content) a->content = ms_strdup("");
    return 0;
}

enum { S_INIT = 0, S_HEADER, S_CONTENT, S_REASONING, S_NONE };

int ms_gptoss_chat_route(const ms_tok *t, ms_chat_stream *s, int32_t id)
{
    if (ms_tok_is_special(t, id)) {
        if (id == ms_tok_special_id(t, "<|channel|>")) {
            s->mode = S_HEADER;
            s->name_n = 0;
        } else if (id == ms_tok_special_id(t, "<|message|>") && s->mode == S_HEADER) {
            s->mode = s->name_n >= 5 && !strncmp(s->name, "final", 5)      ? S_CONTENT
                      : s->name_n >= 8 && !strncmp(s->name, "analysis", 8) ? S_REASONING
                                                                          : S_NONE;
        } else {
            s->mode = S_NONE; /* <|end|>, <|start|> and its role, <|return|>, <|call|> */
        }
        return MS_CHAT_TO_NONE;
    }
    if (s->mode == S_HEADER) { /* the channel's name */
        char *txt = NULL;
        size_t n = 0;
        if (ms_tok_decode(t, &id, 1, &txt, &n) == 0)
            for (size_t i = 0; i < n && s->name_n + 1 < sizeof s->name; i++) s->name[s->name_n++] = txt[i];
        free(txt);
        return MS_CHAT_TO_NONE;
    }
    /* text before the first channel continues the generation prompt's header (" to=functions.f"):
     * nowhere, as answer() reads it; output with no message at all is answer()'s content, which
     * the caller sends at the end (ms_chatfmt.route) */
    return s->mode == S_CONTENT ? MS_CHAT_TO_CONTENT
           : s->mode == S_REASONING                  ? MS_CHAT_TO_REASONING
                                                     : MS_CHAT_TO_NONE;
}

/* harmony's variables: reasoning_effort (as the request's own field), model_identity,
 * builtin_tools (browser, python). */
static int var(const char *name, const json_t *v, const ms_chat_opts *o, char *why, size_t n)
{
    if (!strcmp(name, "reasoning_effort") || !strcmp(name, "model_identity")) {
        if (!json_is_string(v)) return snprintf(why, n, "chat_template_kwargs.%s must be a string", name), -1;
        const char *s = json_string_value(v);
        if (name[0] == 'r' && strcmp(s, "low") && strcmp(s, "medium") && strcmp(s, "high"))
            return snprintf(why, n, "reasoning_effort \"%.20s\": harmony's are low, medium and high", s), -1;
        if (name[0] == 'r' && o->reasoning_effort && strcmp(o->reasoning_effort, json_string_value(v)))
            return snprintf(why, n, "\"reasoning_effort\" and chat_template_kwargs.reasoning_effort differ"), -1;
        return 0;
    }
    if (strcmp(name, "builtin_tools")) return 1;
    if (!json_is_array(v))
        return snprintf(why, n, "chat_template_kwargs.builtin_tools must be an array (\"browser\", \"python\")"), -1;
    for (size_t i = 0; i < json_array_size(v); i++) {
        const char *s = json_string_value(json_array_get(v, i));
        if (!s || (strcmp(s, "browser") && strcmp(s, "python")))
            return snprintf(why, n, "chat_template_kwargs.builtin_tools[%zu] is not \"browser\" or \"python\"", i), -1;
    }
    return 0;
}

/* A constrained answer: analysis messages (free text), then the final message's content, or a
 * call on the commentary channel (to=functions.NAME <|constrain|>json) ended by <|call|>. */
static char *rules(const ms_tok *t, const ms_chat_rules *r)
{
    static const char *const marks[] = {"<|channel|>", "<|message|>", "<|end|>", "<|start|>", "<|constrain|>", "<|call|>"};
    if (ms_chatp_need(t, marks, r->calls != MS_CHAT_CALLS_NO ? 6 : 4, "constrained answers in the harmony format") != 0)
        return NULL;
    ms_sbuf b = {0};
    ms_sbuf_adds(&b, "root ::= harmony-analysis* harmony-body\n"
                     "harmony-analysis ::= <|channel|> \"analysis\" <|message|> .* <|end|> <|start|> \"assistant\"\n"
                     "harmony-final ::= <|channel|> \"final\" <|message|> content\n");
    ms_sbuf_adds(&b, r->calls == MS_CHAT_CALLS_NO    ? "harmony-body ::= harmony-final\n"
                     : r->calls == MS_CHAT_CALLS_MAY ? "harmony-body ::= harmony-final | harmony-call\n"
                                                     : "harmony-body ::= harmony-call\n");
    if (r->calls != MS_CHAT_CALLS_NO) {
        ms_sbuf_adds(&b, "harmony-call ::= <|channel|> \"commentary to=functions.\" ( ");
        for (int i = 0; i < r->n_tools; i++)
            ms_sbuf_addf(&b, "%s\"%s \" <|constrain|> \"json\" <|message|> args-%d", i ? " | " : "", r->names[i], i);
        ms_sbuf_adds(&b, " ) <|call|>\n");
    }
    size_t l;
    return ms_sbuf_take(&b, &l);
}

const ms_chatfmt ms_gptoss_chat = {"harmony", ms_gptoss_chat_encode, stops, ms_gptoss_chat_answer, ms_gptoss_chat_route,
                                   follow, var, "reasoning_effort, model_identity, builtin_tools", NULL, rules};
