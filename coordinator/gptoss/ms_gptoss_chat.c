/* ms_gptoss_chat: harmony: messages -> the pieces of the prompt (markers and text) -> text or ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ms_err.h"
#include "ms_gptoss_chat.h"

/* A prompt as pieces: markers (special tokens) and text, text runs merged. */
typedef struct {
    char *buf;            /* all bytes back to back */
    size_t len, cap;
    size_t *start;        /* [n + 1] piece i is buf[start[i], start[i + 1]) */
    uint8_t *special;     /* [n] 1: a marker */
    int n, cap_p;
} pieces;

static void put(pieces *p, const char *s, size_t n, int special)
{
    if (!special && p->n > 0 && !p->special[p->n - 1]) { /* extend the text run */
    } else {
        if (p->n + 2 > p->cap_p) {
            p->cap_p = p->cap_p ? 2 * p->cap_p : 64;
            p->start = ms_realloc(p->start, sizeof *p->start * (size_t)(p->cap_p + 1));
            p->special = ms_realloc(p->special, (size_t)p->cap_p);
        }
        p->start[p->n] = p->len;
        p->special[p->n++] = (uint8_t)special;
    }
    if (p->len + n + 1 > p->cap) {
        p->cap = (p->len + n + 1) * 2;
        p->buf = ms_realloc(p->buf, p->cap);
    }
    memcpy(p->buf + p->len, s, n);
    p->len += n;
    p->start[p->n] = p->len;
}

static void text(pieces *p, const char *s) { put(p, s, strlen(s), 0); }
static void mark(pieces *p, const char *s) { put(p, s, strlen(s), 1); }

static int valid_utf8(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n || (k == 2 && c < 0xC2)) return 0;
        for (size_t j = 1; j < k; j++)
            if ((u[i + j] & 0xC0) != 0x80) return 0;
        if (k == 3 && ((c == 0xE0 && u[i + 1] < 0xA0) || (c == 0xED && u[i + 1] >= 0xA0))) return 0;
        if (k == 4 && ((c == 0xF0 && u[i + 1] < 0x90) || c > 0xF4 || (c == 0xF4 && u[i + 1] >= 0x90))) return 0;
        i += k;
    }
    return 1;
}

static int bad(int i, const char *why)
{
    ms_err_set("chat message %d: %s", i, why);
    return ms_err_set_code(MS_EXIT_INPUT);
}

static int build(const ms_chat_msg *m, int n, const ms_harmony_opts *o, pieces *p)
{
    memset(p, 0, sizeof *p);
    if (n < 1) {
        ms_err_set("a chat needs at least one message");
        return ms_err_set_code(MS_EXIT_INPUT);
    }
    const char *effort = o && o->reasoning_effort ? o->reasoning_effort : "medium";
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
        if (!valid_utf8(m[i].content, m[i].len)) return bad(i, "content is not valid UTF-8");
        if (!m[i].role) return bad(i, "has no role");
    }
    char head[512];
    snprintf(head, sizeof head, "%s\nKnowledge cutoff: 2024-06\nCurrent date: %s\n\nReasoning: %s\n\n",
             o && o->model_identity ? o->model_identity : "You are ChatGPT, a large language model trained by OpenAI.",
             date, effort);
    mark(p, "<|start|>");
    text(p, "system");
    mark(p, "<|message|>");
    text(p, head);
    text(p, "# Valid channels: analysis, commentary, final. Channel must be included for every message.");
    mark(p, "<|end|>");
    int first = 0;
    if (!strcmp(m[0].role, "system") || !strcmp(m[0].role, "developer")) {
        first = 1;
        if (m[0].len) { /* an empty instruction renders no developer message, as the template */
            mark(p, "<|start|>");
            text(p, "developer");
            mark(p, "<|message|>");
            text(p, "# Instructions\n\n");
            put(p, m[0].content, m[0].len, 0);
            text(p, "\n\n");
            mark(p, "<|end|>");
        }
    }
    for (int i = first; i < n; i++) {
        if (!strcmp(m[i].role, "user")) {
            mark(p, "<|start|>");
            text(p, "user");
        } else if (!strcmp(m[i].role, "assistant")) {
            if (memmem(m[i].content, m[i].len, "<|channel|>", 11))
                return bad(i, "an assistant content holds <|channel|> (give the final answer only)");
            mark(p, "<|start|>");
            text(p, "assistant");
            mark(p, "<|channel|>");
            text(p, "final");
        } else if (!strcmp(m[i].role, "system") || !strcmp(m[i].role, "developer")) {
            return bad(i, "a system or developer message is read first only in the harmony format");
        } else {
            return bad(i, "role is not system, developer, user or assistant (tools are not supported yet)");
        }
        mark(p, "<|message|>");
        put(p, m[i].content, m[i].len, 0);
        mark(p, "<|end|>");
    }
    mark(p, "<|start|>");
    text(p, "assistant");
    return 0;
}

static void pieces_free(pieces *p)
{
    free(p->buf);
    free(p->start);
    free(p->special);
}

int ms_gptoss_chat_render(const ms_chat_msg *msgs, int n, const ms_harmony_opts *o, char **text_out, size_t *len)
{
    pieces p;
    if (build(msgs, n, o, &p) != 0) {
        pieces_free(&p);
        return -1;
    }
    *text_out = p.buf;
    *len = p.len;
    p.buf = NULL;
    pieces_free(&p);
    return 0;
}

int ms_gptoss_chat_encode_opts(const ms_tok *t, const ms_chat_msg *msgs, int n, const ms_harmony_opts *o,
                               int32_t **ids, size_t *n_ids)
{
    pieces p;
    int rc = build(msgs, n, o, &p);
    int32_t *out = NULL;
    size_t no = 0, cap = 0;
    for (int i = 0; i < p.n && rc == 0; i++) {
        const char *s = p.buf + p.start[i];
        size_t l = p.start[i + 1] - p.start[i];
        int32_t *v = NULL;
        size_t nv = 0;
        if (p.special[i]) {
            char name[32];
            snprintf(name, sizeof name, "%.*s", (int)l, s);
            int id = ms_tok_special_id(t, name);
            if (id < 0) {
                ms_err_set("the tokenizer has no special token %s, which the harmony format needs", name);
                rc = ms_err_set_code(MS_EXIT_INPUT);
                break;
            }
            v = ms_malloc(sizeof *v);
            v[0] = id;
            nv = 1;
        } else if (ms_tok_encode(t, s, l, 0, &v, &nv) != 0) {
            rc = -1;
            break;
        }
        if (no + nv > cap) out = ms_realloc(out, sizeof *out * (cap = 2 * (no + nv) + 64));
        memcpy(out + no, v, sizeof *v * nv);
        no += nv;
        free(v);
    }
    pieces_free(&p);
    if (rc != 0) {
        free(out);
        return -1;
    }
    *ids = out;
    *n_ids = no;
    return 0;
}

static int encode_fmt(const ms_tok *t, const ms_chat_msg *msgs, int n, const ms_chat_opts *o, int32_t **ids,
                      size_t *n_ids)
{
    ms_harmony_opts h = {o ? o->date : NULL, o ? o->reasoning_effort : NULL, NULL};
    return ms_gptoss_chat_encode_opts(t, msgs, n, &h, ids, n_ids);
}

static int stops(const ms_tok *t, int32_t *ids, int max)
{
    static const char *const names[2] = {"<|return|>", "<|call|>"};
    int n = 0;
    for (int i = 0; i < 2 && n < max; i++)
        if ((ids[n] = ms_tok_special_id(t, names[i])) >= 0) n++;
    return n;
}

/* The text of ids [a, b), malloc'ed (NULL with ms_err set on failure). */
static char *text_of(const ms_tok *t, const int32_t *ids, size_t a, size_t b, size_t *len)
{
    char *s = NULL;
    *len = 0;
    if (ms_tok_decode(t, ids + a, b - a, &s, len) != 0) return NULL;
    return s;
}

int ms_gptoss_chat_answer(const ms_tok *t, const int32_t *ids, size_t n, char **content, size_t *clen, char **reasoning,
                          size_t *rlen)
{
    int32_t ch = ms_tok_special_id(t, "<|channel|>"), msg = ms_tok_special_id(t, "<|message|>");
    *content = *reasoning = NULL;
    *clen = *rlen = 0;
    /* messages: [<|start|>assistant] <|channel|>NAME <|message|> BODY (<|end|> | <|return|> | <|call|> | the end) */
    size_t i = 0;
    char *final = NULL, *analysis = NULL;
    size_t fl = 0, al = 0;
    int rc = 0;
    while (i < n && rc == 0) {
        while (i < n && ids[i] != ch) i++;
        size_t name0 = ++i;
        while (i < n && ids[i] != msg) i++;
        if (i >= n) break;
        size_t nl;
        char *name = text_of(t, ids, name0, i, &nl);
        size_t body0 = ++i;
        while (i < n && ms_tok_is_special(t, ids[i]) == 0) i++;
        size_t bl;
        char *body = name ? text_of(t, ids, body0, i, &bl) : NULL;
        if (!name || !body) {
            rc = -1;
        } else if (!strncmp(name, "final", 5)) {
            free(final);
            final = body, fl = bl, body = NULL;
        } else if (!strncmp(name, "analysis", 8)) {
            analysis = ms_realloc(analysis, al + bl + 1);
            memcpy(analysis + al, body, bl);
            al += bl;
            analysis[al] = 0;
        }
        free(name);
        free(body);
    }
    if (rc == 0 && !final && !analysis) { /* no channel at all: the whole text, markers dropped */
        size_t o = 0;
        int32_t *plain = ms_malloc(sizeof *plain * (n ? n : 1));
        for (size_t k = 0; k < n; k++)
            if (!ms_tok_is_special(t, ids[k])) plain[o++] = ids[k];
        final = text_of(t, plain, 0, o, &fl);
        free(plain);
        if (!final) rc = -1;
    }
    if (rc != 0) {
        free(final);
        free(analysis);
        return -1;
    }
    if (!final) final = ms_strdup("");
    *content = final;
    *clen = fl;
    *reasoning = analysis;
    *rlen = al;
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
    return s->mode == S_INIT || s->mode == S_CONTENT ? MS_CHAT_TO_CONTENT
           : s->mode == S_REASONING                  ? MS_CHAT_TO_REASONING
                                                     : MS_CHAT_TO_NONE;
}

const ms_chatfmt ms_gptoss_chat = {"harmony", encode_fmt, stops, ms_gptoss_chat_answer, ms_gptoss_chat_route};
