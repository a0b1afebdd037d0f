/* test_serve_node: the official OpenAI client for Node (tests/node) against `moestream serve`:
 * whole, concurrent and streamed answers equal `moestream run` on each request alone; a wrong
 * key gives 401 and a mistyped field 400, the server still serving. Skips visibly without node,
 * npm or the npm registry. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ms_err.h"
#include "ms_sbuf.h"
#include "ms_smsg.h"
#include "ms_family.h"
#include "ms_sreq.h"
#include "ms_synth.h"
#include "ms_stest.h"
#include "ms_test.h"

#define KEY "node-key-0123456789"
#define CHAT1 "<|im_system|>system<|im_middle|>Be brief.<|im_end|><|im_user|>user<|im_middle|>Name a color.<|im_end|><|im_assistant|>assistant<|im_middle|>"

static char dir[1100], tmp[1024], bin[1100];

static const struct {
    int chat;
    const char *body, *run;
} reqs[] = {
    {0, "{\"model\":\"m\",\"prompt\":\"The weather today is\",\"max_tokens\":6}", "--prompt 'The weather today is' -n 6"},
    {0, "{\"model\":\"m\",\"prompt\":[5,17,200,33,9],\"max_tokens\":9,\"temperature\":0.9,\"seed\":7}",
     "--ids 5,17,200,33,9 -n 9 --temperature 0.9 --seed 7"},
    {1, "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Name a color.\"}],\"max_tokens\":7}",
     "--prompt-file CHAT1 --allow-special -n 7"},
    {1, "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Name a color.\"}],\"max_tokens\":8,\"temperature\":0.8,\"top_p\":0.9,\"seed\":5}",
     "--prompt-file CHAT1 --allow-special -n 8 --temperature 0.8 --top-p 0.9 --seed 5"},
};
#define NREQ ((int)(sizeof reqs / sizeof reqs[0]))


/* The openai client's stream helper (`.stream()`) on the events serve sends for an answer that
 * ends with a tool call: it closes the call's arguments (tool_calls.function.arguments.done). */
static void check_tool_stream(const char *nd)
{
    ms_sreq r = {.chat = 1};
    ms_sreq_ident id = {"chatcmpl-x", "m", 1};
    ms_chat_answer a = {ms_strdup(""), 0, NULL, 0, ms_strdup("get_weather"), ms_strdup("{\"city\":\"Oslo\"}"), 15};
    size_t len;
    char *ev = ms_sreq_tool_chunk(&r, &id, 0, &a, 1, &len);
    ms_t_write_file(ms_t_path(tmp, "tool-events.txt"), ev);
    char *out = NULL, *err = NULL;
    int st = ms_t_runf(&out, &err, "cd %s && node tool-stream.mjs %s", nd, ms_t_path(tmp, "tool-events.txt"));
    json_t *o = out ? json_loads(out, 0, NULL) : NULL;
    json_t *d = json_array_get(json_object_get(o, "done"), 0);
    T_CHECK(st == 0 && json_array_size(json_object_get(o, "done")) == 1 &&
                !strcmp(json_string_value(json_object_get(d, "name")), "get_weather") &&
                !strcmp(json_string_value(json_object_get(d, "arguments")), "{\"city\":\"Oslo\"}") &&
                !strcmp(json_string_value(json_object_get(o, "finish")), "tool_calls"),
            "openai client .stream(): tool_calls.function.arguments.done fires once with the call (exit %d): %s %s", st,
            out ? out : "", err ? err : "");
    json_decref(o);
    free(out);
    free(err);
    free(ev);
    ms_chat_answer_clear(&a);
}

/* The Anthropic client on serve at url (key): a message whole and streamed equal `text` (the
 * reference: `run` alone, or the same chat through /v1/chat/completions when tools is set, which
 * the script fetches), count_tokens its input_tokens, 401 for a wrong key, 400 for an image; its
 * stream helper on ms_smsg's events of an answer that calls a tool rebuilds the call. */
/* Forced tool calls through every client (tools.mjs): a call to the tool the choice allows,
 * arguments that validate where the tool is strict (get_weather: city a string of at most 12
 * characters, unit c or f; add: integers a and b), none under tool_choice none. */
static int weather_args(const char *a)
{
    json_t *v = a ? json_loads(a, 0, NULL) : NULL;
    const char *c = json_string_value(json_object_get(v, "city")), *u = json_string_value(json_object_get(v, "unit"));
    size_t chars = 0;
    for (const unsigned char *p = (const unsigned char *)c; c && *p; p++) chars += (*p & 0xC0) != 0x80;
    int ok = json_object_size(v) == 2 && c && chars <= 12 && u && (!strcmp(u, "c") || !strcmp(u, "f"));
    json_decref(v);
    return ok;
}

static void check_tools(const char *nd, const char *url)
{
    char *out = NULL, *err = NULL;
    int st = ms_t_runf(&out, &err, "cd %s && node tools.mjs %s %s", nd, url, KEY);
    json_t *o = out ? json_loads(out, JSON_ALLOW_NUL, NULL) : NULL;
    T_CHECK(st == 0 && o, "the forced-tool-call script ran (exit %d): %s", st, err ? err : "");
    static const struct {
        const char *key, *name, *finish;
        int strict;
    } want[] = {
        {"openai_required", NULL, "tool_calls", 1},   {"openai_named", "add", "tool_calls", 1},
        {"openai_responses_required", "get_weather", "completed", 1}, {"ai_required", "get_weather", "tool-calls", 1},
        {"lc_any", "get_weather", "tool_calls", 1},   {"anthropic_any", "get_weather", "tool_use", 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        json_t *r = json_object_get(o, want[i].key);
        const char *name = json_string_value(json_object_get(r, "name")), *args = json_string_value(json_object_get(r, "args"));
        const char *fin = json_string_value(json_object_get(r, "finish"));
        json_t *av = args ? json_loads(args, 0, NULL) : NULL;
        int ok = name && fin && !strcmp(fin, want[i].finish) && json_is_object(av) &&
                 (want[i].name ? !strcmp(name, want[i].name) : !strcmp(name, "get_weather") || !strcmp(name, "add"));
        if (ok && want[i].strict && !strcmp(name, "get_weather")) ok = weather_args(args);
        if (ok && want[i].strict && !strcmp(name, "add"))
            ok = json_object_size(av) == 2 && json_is_integer(json_object_get(av, "a")) && json_is_integer(json_object_get(av, "b"));
        json_decref(av);
        char ek[64];
        snprintf(ek, sizeof ek, "%s_error", want[i].key);
        T_CHECK(ok, "%s: a call to %s%s (%s %s; %s)", want[i].key, want[i].name ? want[i].name : "an offered tool",
                want[i].strict ? ", arguments valid" : ", arguments an object", name ? name : "-", args ? args : "-",
                json_string_value(json_object_get(o, ek)) ? json_string_value(json_object_get(o, ek)) : "");
    }
    json_t *none = json_object_get(o, "openai_none");
    T_CHECK(json_is_integer(json_object_get(none, "calls")) && json_integer_value(json_object_get(none, "calls")) == 0,
            "tool_choice none: no call");
    json_decref(o);
    free(out);
    free(err);
}

static void check_anthropic(const char *nd, const char *url, const char *text, size_t n_tok, int tools, const char *what)
{
    ms_chat_answer a = {ms_strdup("Let me look."), 12, NULL, 0, ms_strdup("get_weather"), ms_strdup("{\"city\":\"Oslo\"}"), 15};
    ms_sbuf ev = {0};
    ms_smsg_stream ss;
    size_t len;
    char *e = ms_smsg_stream_start(&ss, "msg_x", "m", 9, &len);
    ms_sbuf_add(&ev, e, len);
    free(e);
    e = ms_smsg_stream_text(&ss, "", 0, a.content, a.content_len, &len);
    ms_sbuf_add(&ev, e, len);
    free(e);
    e = ms_smsg_stream_end(&ss, &a, "stop", NULL, 6, &len);
    ms_sbuf_add(&ev, e, len);
    free(e);
    ms_t_write_file(ms_t_path(tmp, "anthropic-tool-events.txt"), ev.s);
    ms_sbuf_free(&ev);
    ms_chat_answer_clear(&a);
    char *out = NULL, *err = NULL;
    int st = ms_t_runf(&out, &err, "cd %s && node serve-anthropic.mjs %s %s %s%s", nd, url, KEY,
                       ms_t_path(tmp, "anthropic-tool-events.txt"), tools ? " tools" : "");
    json_t *r = out ? json_loads(out, JSON_ALLOW_NUL, NULL) : NULL;
    T_CHECK(st == 0 && r, "%s: the Anthropic client ran (exit %d): %s", what, st, err ? err : "");
    json_t *w = json_object_get(r, "whole"), *s = json_object_get(r, "stream"), *c = json_object_get(r, "chat");
    const char *want = tools ? json_string_value(json_object_get(c, "text")) : text;
    json_int_t want_n = tools ? json_integer_value(json_object_get(json_object_get(c, "usage"), "completion_tokens")) : (json_int_t)n_tok;
    const char *wt = json_string_value(json_object_get(w, "text")), *st_t = json_string_value(json_object_get(s, "text"));
    if (!tools)
        T_CHECK(wt && want && !strcmp(wt, want) &&
                    json_integer_value(json_object_get(json_object_get(w, "usage"), "output_tokens")) == want_n &&
                    !strcmp(json_string_value(json_object_get(w, "type")), "message"),
                "%s: messages.create answers run's text and token count", what);
    T_CHECK(st_t && want && !strcmp(st_t, want) && json_integer_value(json_object_get(s, "deltas")) >= 1 &&
                json_integer_value(json_object_get(json_object_get(s, "usage"), "output_tokens")) == want_n,
            "%s: messages.stream%s: finalMessage's text and tokens are %s's (%s / %s)", what, tools ? " with a tool" : "",
            tools ? "the same chat completion" : "run", st_t ? st_t : "-", want ? want : "-");
    T_CHECK(json_integer_value(json_object_get(r, "count")) ==
                json_integer_value(json_object_get(json_object_get(w, "usage"), "input_tokens")) &&
                json_integer_value(json_object_get(r, "count")) > 0,
            "%s: messages.countTokens = the message's input_tokens", what);
    T_CHECK(json_integer_value(json_object_get(r, "wrong_key")) == 401 && json_integer_value(json_object_get(r, "bad")) == 400,
            "%s: a wrong key: the client sees 401; an image block: 400", what);
    json_t *tc = json_object_get(json_object_get(r, "tool"), "content"), *tu = json_array_get(tc, 1);
    T_CHECK(json_array_size(tc) == 2 && !strcmp(json_string_value(json_object_get(tu, "type")), "tool_use") &&
                !strcmp(json_string_value(json_object_get(tu, "name")), "get_weather") &&
                !strcmp(json_string_value(json_object_get(json_object_get(tu, "input"), "city")), "Oslo") &&
                !strcmp(json_string_value(json_object_get(json_object_get(r, "tool"), "stop")), "tool_use"),
            "%s: the client's MessageStream rebuilds a text block and the tool_use (input parsed) from serve's events", what);
    json_decref(r);
    free(out);
    free(err);
}

int main(void)
{
    ms_log_set_level(0);
    const char *nd = ms_st_node("the OpenAI Node client test");
    if (!nd) return ms_t_done();
    snprintf(tmp, sizeof tmp, "%s", ms_t_tmpdir("serve-node"));
    check_tool_stream(nd);
    snprintf(dir, sizeof dir, "%.1024s/m", tmp);
    snprintf(bin, sizeof bin, "%s", ms_t_bin("moestream"));
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    T_CHECK(ms_synth_write(dir, &sh, 11) == 0, "synth tiny: %s", ms_err_msg());
    ms_t_write_file(ms_t_path(tmp, "key"), KEY "\n");
    ms_t_write_file(ms_t_path(tmp, "chat1.txt"), CHAT1);

    /* the references: run on each request alone */
    json_t *ref_ids[NREQ], *ref_text[NREQ], *list = json_array();
    for (int i = 0; i < NREQ; i++) {
        char args[1024];
        snprintf(args, sizeof args, "%s", reqs[i].run);
        char *p = strstr(args, "CHAT1");
        if (p) {
            char rest[1024];
            snprintf(rest, sizeof rest, "%s", p + 5);
            snprintf(p, sizeof args - (size_t)(p - args), "%s/chat1.txt%s", tmp, rest);
        }
        char *out = NULL;
        int st = ms_t_runf(&out, NULL, "%s run --model %s %s --stop-at-eos --json --quiet --ram-budget 2G", bin, dir, args);
        json_t *o = out ? json_loads(out, JSON_ALLOW_NUL, NULL) : NULL;
        ref_ids[i] = json_incref(json_object_get(o, "generated_ids"));
        json_t *t = json_object_get(o, "text");
        ref_text[i] = json_is_string(t) ? json_incref(t) : json_string("");
        T_CHECK(st == 0 && ref_ids[i], "run request %d alone: exit %d", i, st);
        json_decref(o);
        free(out);
        json_array_append_new(list, json_pack("{s:b,s:o}", "chat", reqs[i].chat, "body", json_loads(reqs[i].body, 0, NULL)));
    }
    json_dump_file(list, ms_t_path(tmp, "reqs.json"), 0);
    json_decref(list);

    char logf[1100], key[1100];
    snprintf(logf, sizeof logf, "%s/serve.log", tmp);
    snprintf(key, sizeof key, "%s/key", tmp);
    const char *argv[] = {bin, "serve", "--model", dir, "--listen", "127.0.0.1:0", "--ram-budget", "2G", "--max-batch",
                          "4", "--max-context", "256", "--api-key-file", key, NULL};
    ms_t_worker srv;
    ms_t_worker_opts wo = {logf, NULL, NULL, 60};
    int st = ms_t_worker_start(&srv, argv, &wo);
    T_CHECK(st == 0, "serve starts (%d)", st);
    if (st != 0) return ms_t_done();
    char *out = NULL, *err = NULL;
    st = ms_t_runf(&out, &err, "cd %s && node serve-openai.mjs %s %s %s", nd, srv.ep, KEY, ms_t_path(tmp, "reqs.json"));
    json_t *r = out ? json_loads(out, JSON_ALLOW_NUL, NULL) : NULL;
    T_CHECK(st == 0 && r, "the Node client ran (exit %d): %s", st, err ? err : "");
    const char *parts[] = {"seq", "conc", "stream"};
    for (int p = 0; r && p < 3; p++)
        for (int i = 0; i < NREQ; i++) {
            json_t *a = json_array_get(json_object_get(r, parts[p]), (size_t)i);
            json_t *u = json_object_get(a, "usage");
            T_CHECK(json_equal(json_object_get(a, "ids"), ref_ids[i]) && json_equal(json_object_get(a, "text"), ref_text[i]) &&
                        json_is_string(json_object_get(a, "finish")) &&
                        json_integer_value(json_object_get(u, "completion_tokens")) == (json_int_t)json_array_size(ref_ids[i]),
                    "openai client, %s, request %d: the ids and text of run, a finish reason and usage", parts[p], i);
            if (p == 2) { /* a step may yield up to 1 + 8 tokens (speculative decoding, auto) */
                json_int_t chunks = json_integer_value(json_object_get(a, "chunks"));
                json_int_t n_tok = (json_int_t)json_array_size(ref_ids[i]);
                T_CHECK(chunks >= (n_tok > 1 ? 2 : 1) && 9 * chunks >= n_tok,
                        "request %d streamed as it was made: %lld chunks for %lld tokens", i, (long long)chunks,
                        (long long)n_tok);
            }
        }
    T_CHECK(r && json_integer_value(json_object_get(r, "wrong_key")) == 401, "a wrong key: the client sees 401");
    T_CHECK(r && json_integer_value(json_object_get(r, "bad_field")) == 400, "a mistyped field: the client sees 400");
    json_t *m = json_object_get(r, "models");
    const char *mid = json_string_value(json_array_get(m, 0));
    T_CHECK(json_array_size(m) == 1 && mid && !strcmp(mid, "m"), "models.list names m");
    const char *rid = json_string_value(json_object_get(r, "retrieved"));
    T_CHECK(rid && !strcmp(rid, "m"), "models.retrieve('m') works");
    T_CHECK(r && json_integer_value(json_object_get(r, "neutral")) == 200,
            "a chat with logprobs false, penalties 0 and response_format text (client defaults) is accepted");
    /* logprobs: log_softmax of the rows `run --dump-logits` writes for the same ids */
    json_t *lp = json_object_get(r, "logprobs"), *lids = json_object_get(lp, "ids");
    char idl[256] = "5,9,13", dump[1200];
    for (size_t i = 0; i + 1 < json_array_size(lids); i++)
        snprintf(idl + strlen(idl), sizeof idl - strlen(idl), ",%lld", (long long)json_integer_value(json_array_get(lids, i)));
    snprintf(dump, sizeof dump, "%s/lp.f32", tmp);
    int dst = ms_t_runf(NULL, NULL, "%s run --model %s --ids %s -n 1 --dump-logits %s --quiet >/dev/null", bin, dir, idl, dump);
    size_t dl = 0;
    float *rows = dst == 0 ? (float *)ms_t_read_file(dump, &dl) : NULL;
    int64_t V = sh.vocab;
    double worst = 0;
    int lp_ok = rows && json_array_size(lids) >= 1 && json_array_size(json_object_get(lp, "token_logprobs")) == json_array_size(lids);
    for (size_t k = 0; lp_ok && k < json_array_size(lids); k++) {
        const float *row = rows + (2 + k) * V;
        double mx = -INFINITY, sum = 0;
        for (int64_t i = 0; i < V; i++) mx = fmax(mx, row[i]);
        for (int64_t i = 0; i < V; i++) sum += exp((double)row[i] - mx);
        double want = (double)row[json_integer_value(json_array_get(lids, k))] - mx - log(sum);
        worst = fmax(worst, fabs(json_number_value(json_array_get(json_object_get(lp, "token_logprobs"), k)) - want));
    }
    T_CHECK(lp_ok && worst < 1e-5, "openai client: completion logprobs = log_softmax of the dumped rows (worst %.2g)", worst);
    free(rows);
    json_t *cl = json_object_get(r, "chat_logprobs"), *cc = json_object_get(cl, "content");
    int cl_ok = json_array_size(cc) == (size_t)json_integer_value(json_object_get(cl, "n")) && json_array_size(cc) > 0;
    for (size_t k = 0; cl_ok && k < json_array_size(cc); k++)
        cl_ok = json_integer_value(json_object_get(json_array_get(cc, k), "top")) == 2 &&
                json_number_value(json_object_get(json_array_get(cc, k), "logprob")) <= 0;
    T_CHECK(cl_ok, "openai client: chat logprobs, one entry per token with 2 alternatives");
    json_t *n3 = json_object_get(r, "n3"), *solo = json_object_get(r, "solo");
    int n_ok = json_array_size(n3) == 3 && json_array_size(solo) == 3;
    for (size_t i = 0; n_ok && i < 3; i++)
        n_ok = json_integer_value(json_object_get(json_array_get(n3, i), "index")) == (json_int_t)i &&
               json_equal(json_object_get(json_array_get(n3, i), "ids"), json_array_get(solo, i));
    T_CHECK(n_ok, "openai client: n 3 gives three choices equal to solo requests with seeds 5, 6, 7");
    json_t *pen = json_object_get(r, "pen");
    T_CHECK(json_array_size(pen) == 2 && json_array_size(json_array_get(pen, 0)) > 0 &&
                json_equal(json_array_get(pen, 0), json_array_get(pen, 1)),
            "openai client: penalties and logit_bias accepted, the same answer twice");
    T_CHECK(r && json_equal(json_object_get(json_object_get(r, "after"), "ids"), ref_ids[0]), "still serving afterwards");
    json_decref(r);
    free(out);
    free(err);
    /* the Responses API: request 2's chat as a response, whole, streamed and through the helper */
    out = err = NULL;
    st = ms_t_runf(&out, &err, "cd %s && node responses-openai.mjs %s %s", nd, srv.ep, KEY);
    json_t *rr = out ? json_loads(out, JSON_ALLOW_NUL, NULL) : NULL;
    T_CHECK(st == 0 && rr, "the OpenAI client's Responses API ran (exit %d): %s", st, err ? err : "");
    json_t *rw = json_object_get(rr, "whole"), *rs = json_object_get(rr, "streamed"), *fo = json_object_get(rr, "follow");
    T_CHECK(json_equal(json_object_get(rw, "text"), ref_text[2]) &&
                json_integer_value(json_object_get(json_object_get(rw, "usage"), "output_tokens")) ==
                    (json_int_t)json_array_size(ref_ids[2]),
            "openai client: responses.create's output_text and tokens are run's");
    T_CHECK(json_equal(json_object_get(rs, "text"), ref_text[2]) && json_integer_value(json_object_get(rs, "deltas")) >= 1 &&
                json_equal(json_object_get(rr, "streamed_final"), ref_text[2]),
            "openai client: responses.create streamed: the output_text deltas and the final response are run's text");
    T_CHECK(json_equal(json_object_get(json_object_get(rr, "helper"), "text"), ref_text[2]),
            "openai client: responses.stream().finalResponse() has run's text");
    T_CHECK(json_equal(json_object_get(fo, "prev"), json_object_get(rw, "id")) &&
                json_integer_value(json_object_get(fo, "input_tokens")) >
                    json_integer_value(json_object_get(json_object_get(rw, "usage"), "input_tokens")) &&
                json_integer_value(json_object_get(rr, "unknown")) == 404,
            "openai client: a follow-up by previous_response_id carries the first turn; an unknown id is 404");
    json_decref(rr);
    free(out);
    free(err);
    /* the Vercel AI SDK and LangChain: request 2's chat through each one's default and chat
     * models, request 0's prompt through LangChain's completions class (a prompt array) */
    out = err = NULL;
    st = ms_t_runf(&out, &err, "cd %s && node ai-langchain.mjs %s %s", nd, srv.ep, KEY);
    json_t *al = out ? json_loads(out, JSON_ALLOW_NUL, NULL) : NULL;
    T_CHECK(st == 0 && al, "the AI SDK / LangChain script ran (exit %d): %s", st, err ? err : "");
    static const char *const via[] = {"ai_responses", "ai_responses_stream", "ai_chat", "lc_responses", "lc_chat"};
    for (int i = 0; i < 5; i++) {
        char ek[64];
        snprintf(ek, sizeof ek, "%s_error", via[i]);
        T_CHECK(json_equal(json_object_get(al, via[i]), ref_text[2]), "%s: run's text (%s)", via[i],
                json_string_value(json_object_get(al, ek)) ? json_string_value(json_object_get(al, ek)) : "");
    }
    T_CHECK(json_equal(json_object_get(al, "lc_completions"), ref_text[0]), "LangChain's completions class: run's text (%s)",
            json_string_value(json_object_get(al, "lc_completions_error")) ? json_string_value(json_object_get(al, "lc_completions_error")) : "");
    json_decref(al);
    free(out);
    free(err);
    /* structured outputs through every client: objects that validate, the same from each (one
     * schema, one prompt, the default sampling with seed 0) */
    out = err = NULL;
    st = ms_t_runf(&out, &err, "cd %s && node structured.mjs %s %s", nd, srv.ep, KEY);
    json_t *so = out ? json_loads(out, JSON_ALLOW_NUL, NULL) : NULL;
    T_CHECK(st == 0 && so, "the structured-output script ran (exit %d): %s", st, err ? err : "");
    static const char *const sov[] = {"ai_object", "ai_object_chat", "lc_structured", "openai_parse", "openai_responses_parse"};
    json_t *first = json_object_get(so, sov[0]);
    for (int i = 0; i < 5; i++) {
        json_t *ob = json_object_get(so, sov[i]), *nm = json_object_get(ob, "name"), *tg = json_object_get(ob, "tags");
        char ek[64];
        snprintf(ek, sizeof ek, "%s_error", sov[i]);
        int ok = json_is_object(ob) && json_object_size(ob) == 3 && json_is_string(nm) &&
                 json_is_integer(json_object_get(ob, "age")) && json_is_array(tg) && json_array_size(tg) <= 3 &&
                 json_equal(ob, first);
        for (size_t k = 0; ok && k < json_array_size(tg); k++)
            ok = json_is_string(json_array_get(tg, k)) && (!strcmp(json_string_value(json_array_get(tg, k)), "a") ||
                                                          !strcmp(json_string_value(json_array_get(tg, k)), "b"));
        T_CHECK(ok, "%s: an object that validates against the schema, the same as %s's (%s)", sov[i], sov[0],
                json_string_value(json_object_get(so, ek)) ? json_string_value(json_object_get(so, ek)) : "");
    }
    json_decref(so);
    free(out);
    free(err);
    /* the Anthropic client: request 2's chat as a message */
    check_anthropic(nd, srv.ep, json_string_value(ref_text[2]), json_array_size(ref_ids[2]), 0, "tiny");
    T_CHECK(ms_t_worker_stop(&srv, 20, NULL) == 0, "SIGTERM: exit 0");
    /* a model whose chat format takes tools (Kimi K2's): the stream offers one */
    char k2[1100];
    snprintf(k2, sizeof k2, "%.1024s/k2", tmp);
    int sy = ms_t_runf(NULL, NULL, "%s synth --preset kimi-k2-tiny --out %s --force", bin, k2);
    T_CHECK(sy == 0, "synth kimi-k2-tiny (%d)", sy);
    const char *argv2[] = {bin, "serve", "--model", k2, "--listen", "127.0.0.1:0", "--ram-budget", "2G", "--max-context", "1024",
                           "--api-key-file", key, NULL};
    char logf2[1100];
    snprintf(logf2, sizeof logf2, "%s/serve-k2.log", tmp); /* its own: the listening line is read from it */
    ms_t_worker_opts wo2 = {logf2, NULL, NULL, 60};
    if (sy == 0 && ms_t_worker_start(&srv, argv2, &wo2) == 0) {
        check_anthropic(nd, srv.ep, NULL, 0, 1, "kimi-k2-tiny");
        check_tools(nd, srv.ep);
        T_CHECK(ms_t_worker_stop(&srv, 20, NULL) == 0, "SIGTERM: exit 0");
    }
    for (int i = 0; i < NREQ; i++) {
        json_decref(ref_ids[i]);
        json_decref(ref_text[i]);
    }
    return ms_t_done();
}
