/* test_dsv3_chat: DeepSeek-V3's chat format (spec §5): prompts (text and ids), R1's <think> answers split whole and streamed alike, V3.1's non-thinking switch, tools and tool calls in V3's and V3.1's forms (rendered, split, forced in jobs), conversations going on, refusals naming what is missing. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_dsv3_model.h"
#include "ms_err.h"
#include "ms_families.h"
#include "ms_gentext.h"
#include "ms_jchat.h"
#include "ms_test.h"
#include "ms_tok.h"

#define BOS "<｜begin▁of▁sentence｜>"
#define EOS "<｜end▁of▁sentence｜>"
#define USER "<｜User｜>"
#define ASSISTANT "<｜Assistant｜>"

/* The prompt text a request body renders to, or NULL with *why set. */
static char *render(const char *body_json, char *why, size_t n)
{
    json_error_t je;
    json_t *body = json_loads(body_json, 0, &je);
    ms_jchat jc;
    const char *param;
    char *text = NULL;
    size_t len = 0;
    if (ms_jchat_read(body, &ms_dsv3_chat, NULL, 1, &jc, why, n, &param) == 0) {
        if (ms_dsv3_chat_render(jc.msgs, jc.n, &jc.opts, &text, &len) != 0) snprintf(why, n, "%s", ms_err_msg());
        ms_jchat_clear(&jc);
    }
    json_decref(body);
    return text;
}

static void check_text(const char *what, const char *body, const char *want)
{
    char why[600] = "";
    char *got = render(body, why, sizeof why);
    T_CHECK(got && !strcmp(got, want), "%s: renders as the template does (%s)", what, got ? got : why);
    if (got && strcmp(got, want)) fprintf(stderr, "  got  %s\n  want %s\n", got, want);
    free(got);
}

static void check_refused(const char *what, const char *body, const char *says)
{
    char why[600] = "";
    char *got = render(body, why, sizeof why);
    T_CHECK(!got && strstr(why, says), "%s: refused, saying \"%s\" (%s)", what, says, got ? got : why);
    free(got);
}

#define CALLS_B "<｜tool▁calls▁begin｜>"
#define CALLS_E "<｜tool▁calls▁end｜>"
#define CALL_B "<｜tool▁call▁begin｜>"
#define CALL_E "<｜tool▁call▁end｜>"
#define SEP "<｜tool▁sep｜>"
#define OUTS_B "<｜tool▁outputs▁begin｜>"
#define OUTS_E "<｜tool▁outputs▁end｜>"
#define OUT_B "<｜tool▁output▁begin｜>"
#define OUT_E "<｜tool▁output▁end｜>"

/* A tool, a call to it and its result, as a request sends them (thinking: "" for V3, else the
 * V3.1 variable's object member). */
#define TOOLS "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": " \
              "\"Weather now\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": " \
              "\"string\"}}}}}]"
#define CALL_TURNS "{\"role\": \"user\", \"content\": \"Oslo?\"}, {\"role\": \"assistant\", \"content\": null, " \
                   "\"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", " \
                   "\"arguments\": \"{\\\"city\\\": \\\"Oslo\\\"}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"c1\", " \
                   "\"content\": \"21C\"}, {\"role\": \"tool\", \"tool_call_id\": \"c2\", \"content\": \"dry\"}"
#define TOOLS_TEXT(FORMAT, CHAIN) "\n\n## Tools\nYou have access to the following tools:\n\n### get_weather\n" \
    "Description: Weather now\n\nParameters: {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}\n\n" \
    "IMPORTANT: ALWAYS adhere to this exact format for tool use:\n" CALLS_B CALL_B FORMAT CALL_E \
    "{additional_tool_calls}" CALLS_E "\n\nWhere:\n- `tool_call_name` must be an exact match to one of the available " \
    "tools\n- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n- For " \
    "multiple tool calls, " CHAIN

/* Tools declared after the system prompt; an earlier call, its results and the answer after them,
 * as each variant's template renders them (V3 / R1: a call in a ```json fence, the results in
 * an outputs block; V3.1: NAME<｜tool▁sep｜>ARGS, each result alone). */
static void check_tools(void)
{
    check_text("V3: tools, a call, two results", "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, " CALL_TURNS
               "], " TOOLS "}",
               BOS "S" TOOLS_TEXT("function" SEP "tool_call_name\n```json\ntool_call_arguments\n```",
                                  "chain them with a newline as separator")
               USER "Oslo?" ASSISTANT CALLS_B CALL_B "function" SEP "get_weather\n```json\n{\"city\": \"Oslo\"}\n```" CALL_E
               CALLS_E EOS OUTS_B OUT_B "21C" OUT_E OUT_B "dry" OUT_E OUTS_E);
    check_text("V3: the answer after the results, then a user turn", "{\"messages\": [" CALL_TURNS ", {\"role\": "
               "\"assistant\", \"content\": \"Warm.\"}, {\"role\": \"user\", \"content\": \"Thanks\"}]}",
               BOS USER "Oslo?" ASSISTANT CALLS_B CALL_B "function" SEP "get_weather\n```json\n{\"city\": \"Oslo\"}\n```"
               CALL_E CALLS_E EOS OUTS_B OUT_B "21C" OUT_E OUT_B "dry" OUT_E OUTS_E "Warm." EOS USER "Thanks" ASSISTANT);
    check_text("V3.1: tools, a call, two results", "{\"messages\": [" CALL_TURNS "], " TOOLS ", \"chat_template_kwargs\": "
               "{\"thinking\": false}}",
               BOS TOOLS_TEXT("tool_call_name" SEP "tool_call_arguments", "chain them directly without separators or spaces")
               USER "Oslo?" ASSISTANT "</think>" CALLS_B CALL_B "get_weather" SEP "{\"city\": \"Oslo\"}" CALL_E CALLS_E EOS
               OUT_B "21C" OUT_E OUT_B "dry" OUT_E);
    check_text("V3.1: content before a call, the answer after the results", "{\"messages\": [{\"role\": \"user\", "
               "\"content\": \"Oslo?\"}, {\"role\": \"assistant\", \"content\": \"Looking.\", \"tool_calls\": [{\"id\": "
               "\"c1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": "
               "\"Oslo\"}}}]}, {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"21C\"}, {\"role\": "
               "\"assistant\", \"content\": \"Warm.\"}, {\"role\": \"user\", \"content\": \"Bye\"}], "
               "\"chat_template_kwargs\": {\"thinking\": true}}",
               BOS USER "Oslo?" ASSISTANT "</think>Looking." CALLS_B CALL_B "get_weather" SEP "{\"city\": \"Oslo\"}" CALL_E
               CALLS_E EOS OUT_B "21C" OUT_E "Warm." EOS USER "Bye" ASSISTANT "<think>");
    check_refused("two calls in one message", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": "
                  "\"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"a\", \"type\": \"function\", \"function\": "
                  "{\"name\": \"f\", \"arguments\": \"{}\"}}, {\"id\": \"b\", \"type\": \"function\", \"function\": "
                  "{\"name\": \"g\", \"arguments\": \"{}\"}}]}]}", "more than one tool call");
    check_refused("a tool result without content", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": "
                  "\"tool\", \"tool_call_id\": \"c1\"}]}", "content");
}

static void check_prompts(void)
{
    check_text("system and user", "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
               "\"content\": \"Hi\"}]}", BOS "Be brief." USER "Hi" ASSISTANT);
    check_text("no system", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", BOS USER "Hi" ASSISTANT);
    /* every system message, wherever it stands, after BOS, joined by a blank line (developer too) */
    check_text("two system messages", "{\"messages\": [{\"role\": \"system\", \"content\": \"A\"}, {\"role\": \"user\", "
               "\"content\": \"Hi\"}, {\"role\": \"developer\", \"content\": \"B\"}]}", BOS "A\n\nB" USER "Hi" ASSISTANT);
    /* an earlier answer: its reasoning dropped (R1), closed by EOS */
    check_text("history", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": "
               "\"<think>\\nhm\\n</think>\\n\\nHello\", \"reasoning_content\": \"apart\"}, {\"role\": \"user\", \"content\": "
               "\"2+2?\"}]}", BOS USER "Hi" ASSISTANT "\n\nHello" EOS USER "2+2?" ASSISTANT);
    /* V3.1's non-thinking form: </think> after each <｜Assistant｜> */
    check_text("V3.1 thinking false", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", "
               "\"content\": \"Hello\"}, {\"role\": \"user\", \"content\": \"Bye\"}], \"chat_template_kwargs\": {\"thinking\": "
               "false}}", BOS USER "Hi" ASSISTANT "</think>Hello" EOS USER "Bye" ASSISTANT "</think>");
    check_tools();
    /* V3.1's thinking form: the generation prompt opens the reasoning; earlier turns without theirs */
    check_text("V3.1 thinking true", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": "
               "\"assistant\", \"content\": \"Hello\"}, {\"role\": \"user\", \"content\": \"Bye\"}], "
               "\"chat_template_kwargs\": {\"thinking\": true}}",
               BOS USER "Hi" ASSISTANT "</think>Hello" EOS USER "Bye" ASSISTANT "<think>");
    check_refused("thinking not a boolean", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], "
                  "\"chat_template_kwargs\": {\"thinking\": 1}}", "must be a boolean");
}

/* ids of text (no specials), appended to v at *n */
static void add_text(const ms_tok *t, const char *s, int32_t *v, size_t *n)
{
    int32_t *ids = NULL;
    size_t k = 0;
    ms_tok_encode(t, s, strlen(s), 0, &ids, &k);
    memcpy(v + *n, ids, sizeof(int32_t) * k);
    *n += k;
    free(ids);
}

/* An answer split whole and streamed: the same reasoning and content. */
static void check_answer(const ms_tok *t, const char *what, const int32_t *ids, size_t n, const char *reasoning,
                         const char *content)
{
    ms_chat_answer a;
    int rc = ms_dsv3_chat.answer(t, ids, n, &a);
    int ok = rc == 0 && !strcmp(a.content, content) &&
             (reasoning ? a.reasoning && !strcmp(a.reasoning, reasoning) : a.reasoning == NULL);
    T_CHECK(ok, "%s: reasoning \"%s\", content \"%s\" (got \"%s\", \"%s\")", what, reasoning ? reasoning : "(none)", content,
            rc == 0 && a.reasoning ? a.reasoning : "(none)", rc == 0 ? a.content : ms_err_msg());
    /* streamed: each id's text where route sends it */
    ms_chat_stream cs = {0};
    char r[400] = "", c[400] = "";
    for (size_t i = 0; i < n; i++) {
        int to = ms_dsv3_chat.route(t, &cs, ids[i]);
        char *s = NULL;
        size_t l = 0;
        ms_tok_decode(t, ids + i, 1, &s, &l);
        if (to == MS_CHAT_TO_REASONING) strncat(r, s, sizeof r - strlen(r) - 1);
        if (to == MS_CHAT_TO_CONTENT) strncat(c, s, sizeof c - strlen(c) - 1);
        free(s);
    }
    T_CHECK(!strcmp(c, content) && !strcmp(r, reasoning ? reasoning : ""), "%s: streamed id by id alike (\"%s\", \"%s\")",
            what, r, c);
    ms_chat_answer_clear(&a);
}

static void check_answers(const ms_tok *t)
{
    int32_t think = ms_tok_special_id(t, "<think>"), end = ms_tok_special_id(t, "</think>"), v[64];
    size_t n = 0;
    v[n++] = think;
    add_text(t, "\n", v, &n);
    add_text(t, "let me see", v, &n);
    size_t cut = n;
    v[n++] = end;
    add_text(t, "\n\n", v, &n);
    add_text(t, "Four.", v, &n);
    check_answer(t, "R1's answer", v, n, "let me see", "Four.");
    check_answer(t, "R1's answer cut in its reasoning", v, cut, "let me see", "");
    n = 0;
    add_text(t, "Four.", v, &n);
    check_answer(t, "V3's answer", v, n, NULL, "Four.");
    /* V3.1 thinking: the prompt ends with <think>, the answer opens with its reasoning; the
     * engine's text (ms_gentext, as jobs, serve and chat make it) splits it whole and streamed */
    int32_t prompt[2] = {ms_tok_special_id(t, ASSISTANT), think};
    T_CHECK(ms_dsv3_chat.opening(t, prompt, 2) == 1 && ms_dsv3_chat.opening(t, prompt, 1) == 0,
            "a prompt ending with <think> opens the answer's reasoning");
    n = 0;
    add_text(t, "let me see", v, &n);
    v[n++] = end;
    add_text(t, "\n\n", v, &n);
    add_text(t, "Four.", v, &n);
    ms_gentext *g = ms_gentext_new(t, &ms_dsv3_chat, 0, NULL, 0);
    ms_gentext_prompt(g, prompt, 2);
    char r[200] = "", c[200] = "";
    for (size_t i = 0; i < n; i++) {
        ms_gentext_news nw;
        ms_gentext_add(g, v[i], 1);
        ms_gentext_take(g, i + 1 == n, 0, &nw);
        strncat(r, nw.reasoning ? nw.reasoning : "", nw.reasoning_len);
        strncat(c, nw.content ? nw.content : "", nw.content_len);
    }
    ms_gentext_restart(g); /* a re-run makes the same ids: the split starts after the opening again */
    for (size_t i = 0; i < n; i++) ms_gentext_add(g, v[i], 1);
    size_t tl;
    ms_gentext_text(g, 0, &tl);
    ms_chat_answer a;
    int rc = ms_gentext_answer(g, v, n, tl, &a);
    T_CHECK(rc == 0 && a.reasoning && !strcmp(a.reasoning, "let me see") && !strcmp(a.content, "Four.") &&
                !strcmp(r, "let me see") && !strcmp(c, "Four."),
            "V3.1 thinking: reasoning \"let me see\", content \"Four.\", whole and streamed (\"%s\", \"%s\")", r, c);
    if (rc == 0) ms_chat_answer_clear(&a);
    ms_gentext_free(g);
}

/* A tool call in each variant's form: split from the content whole, streamed without it. */
static void check_call_answers(const ms_tok *t)
{
    static const struct { const char *what, *text, *content, *name, *args; } cases[] = {
        {"V3's call", "Checking." CALLS_B CALL_B "function" SEP "get_weather\n```json\n{\"city\":\"Oslo\"}\n```" CALL_E
         CALLS_E, "Checking.", "get_weather", "{\"city\":\"Oslo\"}"},
        {"V3.1's call", CALLS_B CALL_B "get_weather" SEP "{\"city\":\"Oslo\"}" CALL_E CALLS_E, "", "get_weather",
         "{\"city\":\"Oslo\"}"},
        {"a call cut before its end", "Hm." CALLS_B CALL_B "get_weather" SEP "{\"ci", NULL, NULL, NULL},
        {"V3's call without its closing fence", CALLS_B CALL_B "function" SEP "f\n```json\n{}" CALL_E CALLS_E, NULL, NULL,
         NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        ms_chat_answer a;
        int rc = ms_tok_encode(t, cases[i].text, strlen(cases[i].text), 1, &ids, &n) == 0 ? ms_dsv3_chat.answer(t, ids, n, &a) : -1;
        if (cases[i].name) {
            T_CHECK(rc == 0 && !strcmp(a.content, cases[i].content) && a.call_name && !strcmp(a.call_name, cases[i].name) &&
                        a.call_args && !strcmp(a.call_args, cases[i].args) && a.call_args_len == strlen(cases[i].args),
                    "%s: content \"%s\", a call to %s with %s (got \"%s\", %s, %s)", cases[i].what, cases[i].content,
                    cases[i].name, cases[i].args, rc == 0 ? a.content : ms_err_msg(), rc == 0 && a.call_name ? a.call_name : "-",
                    rc == 0 && a.call_args ? a.call_args : "-");
            ms_chat_stream cs = {0};
            char c[200] = "";
            for (size_t k = 0; k < n; k++)
                if (ms_dsv3_chat.route(t, &cs, ids[k]) == MS_CHAT_TO_CONTENT) {
                    char *x = NULL;
                    size_t l = 0;
                    ms_tok_decode(t, ids + k, 1, &x, &l);
                    strncat(c, x, sizeof c - strlen(c) - 1);
                    free(x);
                }
            T_CHECK(!strcmp(c, cases[i].content), "%s: streamed, the content alone (\"%s\")", cases[i].what, c);
        } else {
            T_CHECK(rc == 0 && !a.call_name && a.content_len > strlen(cases[i].text) / 4,
                    "%s: no call; its text stays the content's (\"%s\")", cases[i].what, rc == 0 ? a.content : ms_err_msg());
        }
        if (rc == 0) ms_chat_answer_clear(&a);
        free(ids);
    }
}

static void check_conversation(const ms_tok *t)
{
    int32_t eos = ms_tok_special_id(t, EOS), st[4];
    T_CHECK(ms_dsv3_chat.stop_ids(t, st, 4) == 1 && st[0] == eos, "the answer stops at %s", EOS);
    ms_chat_msg m = {.role = "user", .content = "More", .len = 4};
    int32_t *ids = NULL, *want = NULL;
    size_t n = 0, nw = 0;
    int rc = ms_dsv3_chat.follow(t, eos, &m, 1, NULL, &ids, &n);
    /* EOS (the stop id, not fed), then the user turn and the generation prompt */
    int32_t tail[3] = {ms_tok_special_id(t, USER), 0, ms_tok_special_id(t, ASSISTANT)};
    ms_tok_encode(t, "More", 4, 0, &want, &nw);
    int ok = rc == 0 && n == 3 + nw && ids[0] == eos && ids[1] == tail[0] && !memcmp(ids + 2, want, sizeof(int32_t) * nw) &&
             ids[n - 1] == tail[2];
    T_CHECK(ok, "a conversation goes on: %s, then the user's turn and %s (%zu ids)", EOS, ASSISTANT, n);
    free(ids);
    /* an answer that was cut: its last id, then EOS */
    rc = ms_dsv3_chat.follow(t, 7, &m, 1, NULL, &ids, &n);
    T_CHECK(rc == 0 && n == 4 + nw && ids[0] == 7 && ids[1] == eos, "a cut answer is closed with %s before the next turn", EOS);
    free(ids);
    free(want);
    /* encode = the rendered text's pieces: markers are special ids, text runs encoded whole */
    ms_chat_msg u = {.role = "user", .content = "Hi", .len = 2};
    rc = ms_dsv3_chat.encode(t, &u, 1, NULL, &ids, &n);
    int32_t hi[8];
    size_t nh = 0;
    add_text(t, "Hi", hi, &nh);
    ok = rc == 0 && n == 3 + nh && ids[0] == ms_tok_special_id(t, BOS) && ids[1] == tail[0] && ids[n - 1] == tail[2] &&
         !memcmp(ids + 2, hi, sizeof(int32_t) * nh);
    T_CHECK(ok, "a user turn's ids: BOS, %s, the text's ids, %s", USER, ASSISTANT);
    free(ids);
}

/* synth PRESET into a test directory (dir), and a jobs file's and its output's paths (in, out);
 * the moestream binary. */
static const char *synth_for_jobs(const char *preset, const char *tag, char dir[1100], char in[1200], char out[1200])
{
    char jt[64];
    snprintf(dir, 1100, "%s/m", ms_t_tmpdir(tag));
    const char *bin = ms_t_bin("moestream");
    int sy = ms_t_runf(NULL, NULL, "%s synth --preset %s --out %s --force", bin, preset, dir);
    T_CHECK(sy == 0, "synth --preset %s (status %d)", preset, sy);
    snprintf(jt, sizeof jt, "%s-jobs", tag);
    snprintf(in, 1200, "%s/jobs.jsonl", ms_t_tmpdir(jt));
    snprintf(out, 1200, "%s/out.jsonl", ms_t_tmpdir(jt));
    return bin;
}

/* Kimi K2 (kimi-k2-tiny: Kimi's tokenizer with its call markers): the family chats in Kimi's
 * format, tools and all: an answer's call is split out through the family's format, and a
 * request with tools, a call and its result runs in jobs. */
static void check_kimi_k2_tools(void)
{
    char dir[1100], in[1200], out[1200];
    const char *bin = synth_for_jobs("kimi-k2-tiny", "dsv3-chat-k2", dir, in, out);
    const ms_family *fam = ms_families_detect(dir);
    ms_tok *t = ms_tok_load(dir);
    T_CHECK(fam && fam->chat && t, "kimi-k2-tiny: its family and tokenizer load: %s", ms_err_msg());
    if (!fam || !fam->chat || !t) {
        ms_tok_free(t);
        return;
    }
    const char *ans = "Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
                      "<|tool_call_argument_begin|>{\"city\":\"Oslo\"}<|tool_call_end|><|tool_calls_section_end|>";
    int32_t *ids = NULL;
    size_t n = 0;
    ms_chat_answer a;
    int rc = ms_tok_encode(t, ans, strlen(ans), 1, &ids, &n) == 0 ? fam->chat->answer(t, ids, n, &a) : -1;
    T_CHECK(rc == 0 && !strcmp(a.content, "Checking.") && a.call_name && !strcmp(a.call_name, "get_weather") &&
                a.call_args_len == 15 && !memcmp(a.call_args, "{\"city\":\"Oslo\"}", 15),
            "kimi-k2-tiny: the family's format splits a Kimi tool call from the content");
    if (rc == 0) ms_chat_answer_clear(&a);
    free(ids);
    ms_tok_free(t);
    FILE *f = fopen(in, "w");
    if (f) {
        fputs("{\"custom_id\": \"a\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\", \"body\": {\"messages\": "
              "[{\"role\": \"user\", \"content\": \"Weather in Paris?\"}, {\"role\": \"assistant\", \"content\": null, "
              "\"tool_calls\": [{\"id\": \"functions.get_weather:0\", \"type\": \"function\", \"function\": {\"name\": "
              "\"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Paris\\\"}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": "
              "\"functions.get_weather:0\", \"name\": \"get_weather\", \"content\": \"21C\"}], \"tools\": [{\"type\": "
              "\"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather now\", \"parameters\": "
              "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}], \"max_tokens\": 4, "
              "\"temperature\": 0}}\n",
              f);
        fclose(f);
    }
    char *err = NULL;
    int j = ms_t_runf(NULL, &err, "%s jobs --model %s --input %s --output %s --quiet", bin, dir, in, out);
    json_error_t je;
    json_t *line = json_load_file(out, JSON_DISABLE_EOF_CHECK, &je);
    json_t *resp = json_object_get(line, "response");
    T_CHECK(j == 0 && json_integer_value(json_object_get(resp, "status_code")) == 200,
            "kimi-k2-tiny: a chat with tools, a call and its result runs in jobs (status %d: %s)", j, err ? err : "");
    json_decref(line);
    free(err);
}

/* DeepSeek-V3 (deepseek-v3-tiny) answers a forced call in jobs, in each variant's form: the
 * grammar holds the random model to a call, and the answer comes back as OpenAI's tool_calls. */
static void check_forced_calls(void)
{
    char dir[1100], in[1200], out[1200];
    const char *bin = synth_for_jobs("deepseek-v3-tiny", "dsv3-chat-calls", dir, in, out);
    FILE *f = fopen(in, "w");
    static const char *const extra[2] = {"\"tool_choice\": \"required\"",
                                         "\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": "
                                         "\"get_weather\"}}, \"chat_template_kwargs\": {\"thinking\": false}"};
    for (int v = 0; f && v < 2; v++)
        fprintf(f, "{\"custom_id\": \"v%d\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\", \"body\": "
                   "{\"messages\": [{\"role\": \"user\", \"content\": \"Weather in Oslo?\"}], \"tools\": [{\"type\": "
                   "\"function\", \"function\": {\"name\": \"get_weather\", \"strict\": true, \"parameters\": {\"type\": "
                   "\"object\", \"properties\": {\"city\": {\"enum\": [\"Oslo\", \"Paris\"]}}, \"required\": [\"city\"], "
                   "\"additionalProperties\": false}}}], %s, \"max_tokens\": 96, \"temperature\": 0}}\n",
                v, extra[v]);
    if (f) fclose(f);
    char *err = NULL;
    int j = ms_t_runf(NULL, &err, "%s jobs --model %s --input %s --output %s --quiet", bin, dir, in, out);
    T_CHECK(j == 0, "deepseek-v3-tiny: forced calls run in jobs (status %d: %s)", j, err ? err : "");
    free(err);
    FILE *o = fopen(out, "r");
    char line[8192];
    int seen = 0;
    while (o && fgets(line, sizeof line, o)) {
        json_error_t je;
        json_t *l = json_loads(line, 0, &je);
        const char *id = json_string_value(json_object_get(l, "custom_id"));
        json_t *ch = json_array_get(json_object_get(json_object_get(json_object_get(l, "response"), "body"), "choices"), 0);
        json_t *call = json_array_get(json_object_get(json_object_get(ch, "message"), "tool_calls"), 0);
        json_t *fn = json_object_get(call, "function");
        const char *nm = json_string_value(json_object_get(fn, "name")), *args = json_string_value(json_object_get(fn, "arguments"));
        json_t *a = args ? json_loads(args, 0, &je) : NULL;
        const char *city = json_string_value(json_object_get(a, "city"));
        T_CHECK(nm && !strcmp(nm, "get_weather") && city && (!strcmp(city, "Oslo") || !strcmp(city, "Paris")) &&
                    !strcmp(json_string_value(json_object_get(ch, "finish_reason")) ? json_string_value(json_object_get(ch, "finish_reason")) : "", "tool_calls"),
                "%s (%s form): the answer is a call to get_weather with a city of the schema, finish_reason tool_calls "
                "(%s %s)", id ? id : "?", id && !strcmp(id, "v1") ? "V3.1" : "V3", nm ? nm : "-", args ? args : "-");
        json_decref(a);
        json_decref(l);
        seen++;
    }
    if (o) fclose(o);
    T_CHECK(seen == 2, "both requests answered (%d)", seen);
}

int main(void)
{
    ms_log_set_level(0);
    check_prompts();
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/m", ms_t_tmpdir("dsv3-chat-tok"));
    T_CHECK(ms_dsv3_synth(dir, "deepseek-v3-tiny", 0, 1, 1) == 0, "synth deepseek-v3-tiny (its tokenizer.json): %s",
            ms_err_msg());
    ms_tok *t = ms_tok_load(dir);
    T_CHECK(t != NULL, "the DeepSeek tokenizer loads: %s", ms_err_msg());
    if (t) {
        check_answers(t);
        check_conversation(t);
        check_call_answers(t);
    }
    ms_tok_free(t);
    check_kimi_k2_tools();
    check_forced_calls();
    return ms_t_done();
}
