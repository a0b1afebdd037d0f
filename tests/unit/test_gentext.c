/* test_gentext: a generated answer's text as the scheduler makes it: what the takes hand out (text, content, reasoning) adds up to the result's text and the format's answer, for every stop-string cut; the held-back bytes; a restart hands nothing out twice. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_gentext.h"
#include "ms_gptoss_chat.h"
#include "ms_sbuf.h"
#include "ms_test.h"
#include "ms_tok.h"

/* What the takes of one answer handed out, concatenated. */
typedef struct {
    ms_sbuf text, content, reasoning;
} taken;

static void take_into(ms_gentext *g, int done, int drop_last, taken *t)
{
    ms_gentext_news nw;
    ms_gentext_take(g, done, drop_last, &nw);
    ms_sbuf_add(&t->text, nw.text, nw.text_len);
    ms_sbuf_add(&t->content, nw.content, nw.content_len);
    ms_sbuf_add(&t->reasoning, nw.reasoning, nw.reasoning_len);
}

static void taken_free(taken *t)
{
    ms_sbuf_free(&t->text);
    ms_sbuf_free(&t->content);
    ms_sbuf_free(&t->reasoning);
}

static int same(const ms_sbuf *b, const char *s, size_t n) { return b->n == n && (!n || !memcmp(b->s, s, n)); }

/* A job's run over ids[n]: ids added one by one with a take after each (as the scheduler's steps
 * do), stopping where a stop string completes; then the report's text, answer and last take.
 * restart_at > 0: the run fails after that many ids and starts again (a re-run). Checks that the
 * takes add up to the text, and for a format that splits, to the answer's content and
 * reasoning. Returns the number of failed checks. */
static int run(const ms_tok *t, const ms_chatfmt *chat, const int32_t *ids, size_t n, const char *stop, size_t restart_at,
               const char *what, size_t *text_len)
{
    const char *stops[1] = {stop};
    ms_gentext *g = ms_gentext_new(t, chat, 0, stops, stop ? 1 : 0);
    taken tk = {0};
    size_t used = 0, hold = stop ? strlen(stop) - 1 : 0;
    int bad = 0, cut = 0;
    if (restart_at) { /* the first run, cut short by a failed step */
        for (size_t i = 0; i < restart_at && i < n; i++) {
            if (ms_gentext_add(g, ids[i], 1) == 1) break;
            take_into(g, 0, 0, &tk);
        }
        ms_gentext_restart(g);
    }
    for (used = 0; used < n && !cut; used++) {
        cut = ms_gentext_add(g, ids[used], 1) == 1;
        if (!cut) take_into(g, 0, 0, &tk);
        size_t len;
        ms_gentext_text(g, 0, &len);
        /* before the end, all but the last hold bytes are handed out, and no more */
        if (!cut && (tk.text.n + hold < len || (!restart_at && len >= hold && tk.text.n + hold > len))) bad++;
    }
    int drop_last = !cut && chat; /* the format's texts end with a stop id (<|return|>, <|call|>): left out */
    size_t len;
    const char *text = ms_gentext_text(g, drop_last, &len);
    *text_len = len;
    ms_chat_answer a;
    int rc = ms_gentext_answer(g, ids, used, len, &a);
    take_into(g, 1, drop_last, &tk);
    T_CHECK(same(&tk.text, text, len), "%s: the takes add up to the text (%zu of %zu bytes)", what, tk.text.n, len);
    bad += !same(&tk.text, text, len);
    if (!chat) {
        T_CHECK(rc == 1 && same(&tk.content, text, len) && !tk.reasoning.n, "%s: without a format, all is content", what);
        bad += !(rc == 1 && same(&tk.content, text, len) && !tk.reasoning.n);
    } else {
        /* content routed nowhere (output in which the format finds no message) is the answer's,
         * sent at the end as a late content (serve) */
        int late = rc == 0 && !tk.content.n;
        int ok = rc == 0 && (late || same(&tk.content, a.content, a.content_len)) &&
                 same(&tk.reasoning, a.reasoning ? a.reasoning : "", a.reasoning ? a.reasoning_len : 0);
        T_CHECK(ok, "%s: streamed content '%.*s' reasoning '%.*s' = the answer's '%s' / '%s'", what, (int)tk.content.n,
                tk.content.s ? tk.content.s : "", (int)tk.reasoning.n, tk.reasoning.s ? tk.reasoning.s : "",
                rc == 0 && a.content ? a.content : "-", rc == 0 && a.reasoning ? a.reasoning : "-");
        bad += !ok;
    }
    if (rc == 0) ms_chat_answer_clear(&a);
    taken_free(&tk);
    ms_gentext_free(g);
    return bad;
}

/* Every stop string of 2 and 3 bytes the text holds (each cut position), and a restart at every
 * id: the takes add up. */
static void every_cut(const ms_tok *t, const ms_chatfmt *chat, const char *src, const char *what)
{
    int32_t *ids = NULL;
    size_t n = 0, all = 0;
    T_CHECK(ms_tok_encode(t, src, strlen(src), 1, &ids, &n) == 0, "encode %s", what);
    int bad = run(t, chat, ids, n, NULL, 0, what, &all), cuts = 0;
    char *text = NULL;
    size_t tl = 0;
    ms_tok_decode_text(t, ids, n, 1, &text, &tl);
    for (size_t at = 0; at + 3 <= tl; at++)
        for (size_t l = 2; l <= 3; l++) {
            char stop[4] = {0}, w[96];
            memcpy(stop, text + at, l);
            if (memchr(stop, 0, l)) continue;
            size_t len = 0;
            snprintf(w, sizeof w, "%s, stop \"%s\"", what, stop);
            bad += run(t, chat, ids, n, stop, 0, w, &len);
            const char *first = memmem(text, tl, stop, l);
            T_CHECK(len == (size_t)(first - text), "%s: the text ends where the stop string first begins (%zu, %zu)", w,
                    len, (size_t)(first - text));
            cuts++;
        }
    for (size_t r = 1; r < n; r++) {
        char w[96];
        size_t len;
        snprintf(w, sizeof w, "%s, re-run after %zu ids", what, r);
        bad += run(t, chat, ids, n, r % 2 ? "." : NULL, r, w, &len);
    }
    T_CHECK(bad == 0 && cuts > 20, "%s: %d cuts and %zu re-runs add up (%d wrong)", what, cuts, n - 1, bad);
    free(text);
    free(ids);
}

int main(void)
{
    ms_log_set_level(0);
    const char *d = ms_t_tmpdir("gentext");
    char plain[1024], harmony[1024];
    snprintf(plain, sizeof plain, "%s/plain", d);
    snprintf(harmony, sizeof harmony, "%s/harmony", d);
    static const char *const specials[] = {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>",
                                           "<|call|>", "<|constrain|>"};
    T_CHECK(ms_tok_write_synth(plain, 600) == 0, "a synthetic tokenizer: %s", ms_err_msg());
    T_CHECK(ms_tok_write_synth_hf(harmony, 600, "\\s*[^\\s<]+|<[^<]*|\\s+", specials, 7) == 0,
            "a synthetic tokenizer with harmony's markers: %s", ms_err_msg());
    ms_tok *tp = ms_tok_load(plain), *th = ms_tok_load(harmony);
    T_CHECK(tp && th, "tokenizers load: %s", ms_err_msg());
    if (!tp || !th) return ms_t_done();

    /* plain text: every cut, every re-run */
    every_cut(tp, NULL, "The quick brown fox. It jumps over the lazy dog, then rests.", "plain");
    /* harmony: reasoning then content; a tool call (its arguments routed nowhere, the answer has
     * them); output without any message (the answer takes it whole as content at the end) */
    every_cut(th, &ms_gptoss_chat,
              "<|channel|>analysis<|message|>Think first.<|end|><|start|>assistant<|channel|>final<|message|>Sky is "
              "blue.<|return|>",
              "channels");
    every_cut(th, &ms_gptoss_chat,
              "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
              "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
              "tool call");

    /* the tool call is the answer's, not the streamed content's */
    {
        static const char src[] = "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":1}<|call|>";
        int32_t *ids = NULL;
        size_t n = 0, len;
        ms_tok_encode(th, src, sizeof src - 1, 1, &ids, &n);
        ms_gentext *g = ms_gentext_new(th, &ms_gptoss_chat, 0, NULL, 0);
        for (size_t i = 0; i < n; i++) ms_gentext_add(g, ids[i], 1);
        ms_gentext_text(g, 1, &len);
        ms_chat_answer a;
        int rc = ms_gentext_answer(g, ids, n, len, &a);
        ms_gentext_news nw;
        ms_gentext_take(g, 1, 1, &nw);
        T_CHECK(rc == 0 && a.call_name && !strcmp(a.call_name, "f") && a.call_args_len == 7 && !nw.content_len,
                "a tool call: %s(%.*s), nothing streamed as content (%zu bytes)", rc == 0 && a.call_name ? a.call_name : "-",
                rc == 0 ? (int)a.call_args_len : 0, rc == 0 && a.call_args ? a.call_args : "", nw.content_len);
        if (rc == 0) ms_chat_answer_clear(&a);
        ms_gentext_free(g);
        free(ids);
    }
    ms_tok_free(tp);
    ms_tok_free(th);
    return ms_t_done();
}
