/* ms_gentext: a generated answer's text, decoded an id at a time, cut at stop strings, routed by its chat format. */
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_gentext.h"
#include "ms_sbuf.h"

/* One id's bytes in the text, [start, start + len), and where its format routes them. */
typedef struct {
    size_t start, len;
    size_t id;                   /* which id of the answer (0..) */
    int to;                      /* MS_CHAT_TO_* */
} seg;

struct ms_gentext {
    const ms_tok *tok;
    const ms_chatfmt *chat;      /* routes when it has route; answers when it has answer */
    int keep_special;
    const char *const *stop;     /* [n_stop] borrowed */
    int n_stop;
    size_t hold;                 /* longest stop string - 1: bytes that may still be cut */
    ms_sbuf text;                /* every id's bytes so far */
    size_t n_ids;                /* ids added */
    size_t last_len;             /* the last id's bytes */
    int cut_set;
    size_t cut;                  /* a stop string begins here: the text ends here */
    ms_chat_stream cs;           /* the format's routing state */
    seg *segs;                   /* [head, n): the ids whose bytes are not all handed out */
    size_t head, n, cap;
    size_t text_sent;            /* text bytes handed out (kept over a restart) */
    size_t routed;               /* text bytes routed and handed out, or routed nowhere (kept too) */
    ms_sbuf content, reasoning;  /* the last take's */
    int32_t open[4];             /* [n_open] the prompt's ids that open the answer */
    int n_open;
};

ms_gentext *ms_gentext_new(const ms_tok *tok, const ms_chatfmt *chat, int keep_special, const char *const *stop,
                           int n_stop)
{
    ms_gentext *g = ms_malloc(sizeof *g);
    *g = (ms_gentext){.tok = tok, .chat = chat, .keep_special = keep_special, .stop = stop, .n_stop = n_stop};
    for (int i = 0; i < n_stop; i++)
        if (strlen(stop[i]) > g->hold + 1) g->hold = strlen(stop[i]) - 1;
    return g;
}

void ms_gentext_free(ms_gentext *g)
{
    if (!g) return;
    ms_sbuf_free(&g->text);
    ms_sbuf_free(&g->content);
    ms_sbuf_free(&g->reasoning);
    free(g->segs);
    free(g);
}

/* The routing state the answer starts in: after the ids that open it. */
static void route_open(ms_gentext *g)
{
    memset(&g->cs, 0, sizeof g->cs);
    for (int i = 0; i < g->n_open && g->chat && g->chat->route; i++) g->chat->route(g->tok, &g->cs, g->open[i]);
}

void ms_gentext_prompt(ms_gentext *g, const int32_t *prompt, size_t n)
{
    int k = g->chat && g->chat->opening ? g->chat->opening(g->tok, prompt, n) : 0;
    MS_ASSERT(k >= 0 && (size_t)k <= n && k <= (int)(sizeof g->open / sizeof g->open[0]) && g->n_ids == 0);
    g->n_open = k;
    memcpy(g->open, prompt + n - k, sizeof(int32_t) * (size_t)k);
    route_open(g);
}

void ms_gentext_restart(ms_gentext *g)
{
    g->text.n = 0;
    g->n_ids = 0;
    g->last_len = 0;
    g->cut_set = 0;
    g->cut = 0;
    route_open(g);
    g->head = g->n = 0;
}

/* The format's answer over the opening ids and then ids[n]. */
static int fmt_answer(const ms_gentext *g, const int32_t *ids, size_t n, ms_chat_answer *a)
{
    if (!g->n_open) return g->chat->answer(g->tok, ids, n, a);
    int32_t *all = ms_malloc(sizeof(int32_t) * (n + (size_t)g->n_open));
    memcpy(all, g->open, sizeof(int32_t) * (size_t)g->n_open);
    memcpy(all + g->n_open, ids, sizeof(int32_t) * n);
    int rc = g->chat->answer(g->tok, all, n + (size_t)g->n_open, a);
    free(all);
    return rc;
}

/* A stop string that completes in the bytes from `from` on: the earliest such start, cut there.
 * One that completed before was found then, so a match that begins within hold bytes before
 * `from` (and so ends in them) is the first there is. */
static void find_stop(ms_gentext *g, size_t from)
{
    size_t s0 = from > g->hold ? from - g->hold : 0, best = g->text.n;
    for (int i = 0; i < g->n_stop; i++) {
        size_t l = strlen(g->stop[i]);
        const char *hit = l ? memmem(g->text.s + s0, g->text.n - s0, g->stop[i], l) : NULL;
        if (hit && (size_t)(hit - g->text.s) < best) best = (size_t)(hit - g->text.s);
    }
    if (best < g->text.n) {
        g->cut_set = 1;
        g->cut = best;
    }
}

int ms_gentext_add(ms_gentext *g, int32_t id, int search)
{
    if (g->cut_set) return 1;
    char *t = NULL;
    size_t l = 0;
    if (ms_tok_decode_text(g->tok, &id, 1, !g->keep_special, &t, &l) != 0) return -1;
    size_t start = g->text.n;
    ms_sbuf_add(&g->text, t ? t : "", l);
    free(t);
    int to = g->chat && g->chat->route ? g->chat->route(g->tok, &g->cs, id) : MS_CHAT_TO_CONTENT;
    if (g->n == g->cap) {
        if (g->head > 0) { /* ids handed out leave room at the front */
            memmove(g->segs, g->segs + g->head, sizeof *g->segs * (g->n - g->head));
            g->n -= g->head;
            g->head = 0;
        }
        if (g->n == g->cap) {
            g->cap = g->cap * 2 + 16;
            g->segs = ms_realloc(g->segs, sizeof *g->segs * g->cap);
        }
    }
    g->segs[g->n++] = (seg){start, l, g->n_ids++, to};
    g->last_len = l;
    if (search && g->n_stop && l) find_stop(g, start);
    return g->cut_set;
}

/* Where the text ends now: at a cut, or (drop_last) before the last id's bytes. */
static size_t text_end(const ms_gentext *g, int drop_last)
{
    if (g->cut_set) return g->cut;
    return drop_last ? g->text.n - g->last_len : g->text.n;
}

int ms_gentext_stop_index(const ms_gentext *g)
{
    if (!g->cut_set) return -1;
    for (int i = 0; i < g->n_stop; i++) {
        size_t l = strlen(g->stop[i]);
        if (l && g->text.n - g->cut >= l && !memcmp(g->text.s + g->cut, g->stop[i], l)) return i;
    }
    return -1;
}

const char *ms_gentext_text(const ms_gentext *g, int drop_last, size_t *len)
{
    *len = text_end(g, drop_last);
    return g->text.s ? g->text.s : "";
}

void ms_gentext_take(ms_gentext *g, int done, int drop_last, ms_gentext_news *nw)
{
    size_t end = text_end(g, drop_last);
    size_t fin = done ? end : end > g->hold ? end - g->hold : 0;
    memset(nw, 0, sizeof *nw);
    g->content.n = g->reasoning.n = 0;
    if (fin > g->text_sent) {
        nw->text = g->text.s + g->text_sent;
        nw->text_len = fin - g->text_sent;
        g->text_sent = fin;
    }
    /* each id's bytes before fin go where it was routed, once */
    for (; g->head < g->n; g->head++) {
        const seg *s = &g->segs[g->head];
        size_t a = s->start > g->routed ? s->start : g->routed, b = s->start + s->len < fin ? s->start + s->len : fin;
        if (a < b && s->to == MS_CHAT_TO_CONTENT) ms_sbuf_add(&g->content, g->text.s + a, b - a);
        if (a < b && s->to == MS_CHAT_TO_REASONING) ms_sbuf_add(&g->reasoning, g->text.s + a, b - a);
        if (b > g->routed) g->routed = b;
        if (s->start + s->len > fin) break; /* its rest is not final yet */
    }
    if (done) g->head = g->n;
    nw->content = g->content.s;
    nw->content_len = g->content.n;
    nw->reasoning = g->reasoning.s;
    nw->reasoning_len = g->reasoning.n;
}

int ms_gentext_answer(const ms_gentext *g, const int32_t *ids, size_t n, size_t text_len, ms_chat_answer *a)
{
    memset(a, 0, sizeof *a);
    if (!g->chat || !g->chat->answer) return 1;
    if (n == 0) return fmt_answer(g, ids, 0, a) == 0 ? 0 : -1;
    /* the id the end falls in (its bytes run past it), among those not handed out */
    size_t k = n, over = 0;
    const seg *s = NULL;
    for (size_t i = g->head; text_len < g->text.n && i < g->n; i++)
        if (g->segs[i].start + g->segs[i].len > text_len && g->segs[i].len) {
            s = &g->segs[i];
            k = s->id;
            over = s->start + s->len - text_len;
            break;
        }
    if (!s) return fmt_answer(g, ids, n, a) == 0 ? 0 : -1;
    if (k + 1 > n) k = n - 1;
    if (fmt_answer(g, ids, k + 1, a) != 0) return -1;
    /* that id's text ends the field it went to: the reasoning, or the content (also for an id
     * routed nowhere: output in which the format found no message is the answer's content whole;
     * a marker or a call's header is in no field, and its text ends none) */
    char **f = s->to == MS_CHAT_TO_REASONING ? &a->reasoning : &a->content;
    size_t *fl = s->to == MS_CHAT_TO_REASONING ? &a->reasoning_len : &a->content_len;
    if (*f && *fl >= s->len && !memcmp(*f + *fl - s->len, g->text.s + s->start, s->len)) {
        *fl -= over;
        (*f)[*fl] = 0;
    }
    return 0;
}
