/* test_qwen3_chat: Qwen3's chat format: prompts as the released template renders them (text and ids, real tokenizer), answers split into reasoning, content and tool calls, streamed as whole, conversations going on. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_jchat.h"
#include "ms_qwen3_chat.h"
#include "ms_test.h"
#include "ms_tok.h"

static int has(const char *s, const char *w) { return s && strstr(s, w) != NULL; }

/* The fixture's conversations (rendered by the released template with Jinja2, encoded by the
 * Hugging Face tokenizers library): our text and ids. */
static void check_cases(const ms_tok *t, const char *path)
{
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    int done = 0;
    while (f && getline(&line, &cap, f) > 0) {
        json_error_t je;
        json_t *c = json_loads(line, 0, &je), *v = json_object_get(c, "vars");
        const char *name = json_string_value(json_object_get(c, "name"));
        json_t *body = json_pack("{s:O}", "messages", json_object_get(v, "messages")), *kw = json_object();
        if (json_object_get(v, "tools")) json_object_set(body, "tools", json_object_get(v, "tools"));
        static const char *const vars[] = {"add_generation_prompt", "enable_thinking"};
        for (int k = 0; k < 2; k++)
            if (json_object_get(v, vars[k])) json_object_set(kw, vars[k], json_object_get(v, vars[k]));
        json_object_set_new(body, "chat_template_kwargs", kw);
        ms_jchat jc;
        char why[512];
        const char *param;
        int rc = ms_jchat_read(body, &ms_qwen3_chat, NULL, 1, &jc, why, sizeof why, &param);
        T_CHECK(rc == 0, "\"%s\": the request reads: %s", name, rc ? why : "");
        char *text = NULL;
        size_t len = 0;
        json_t *want = json_object_get(c, "text"), *ids = json_object_get(c, "ids");
        rc = rc ? rc : ms_qwen3_chat_render(jc.msgs, jc.n, &jc.opts, &text, &len);
        int same_text = rc == 0 && len == json_string_length(want) && !memcmp(text, json_string_value(want), len);
        T_CHECK(same_text, "\"%s\": the text the template renders %s", name, rc ? ms_err_msg() : "");
        if (rc == 0 && !same_text)
            fprintf(stderr, "  got  %s\n", ms_t_show(text, len)),
                fprintf(stderr, "  want %s\n", ms_t_show(json_string_value(want), json_string_length(want)));
        int32_t *got = NULL;
        size_t ng = 0;
        rc = rc ? rc : ms_qwen3_chat.encode(t, jc.msgs, jc.n, &jc.opts, &got, &ng);
        int same = rc == 0 && ng == json_array_size(ids);
        for (size_t i = 0; same && i < ng; i++) same = got[i] == (int32_t)json_integer_value(json_array_get(ids, i));
        T_CHECK(same, "\"%s\": its ids (%zu, want %zu)", name, ng, json_array_size(ids));
        free(text);
        free(got);
        done++;
        ms_jchat_clear(&jc);
        json_decref(body);
        json_decref(c);
    }
    free(line);
    if (f) fclose(f);
    T_CHECK(done == 10, "all 10 cases rendered (%d)", done);
}

/* ids of a generated answer built from pieces: "#name" is that token, anything else text. */
static size_t gen(const ms_tok *t, const char *const *parts, int n, int32_t *out)
{
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        if (parts[i][0] == '#') {
            out[k++] = ms_tok_special_id(t, parts[i] + 1);
            continue;
        }
        int32_t *v = NULL;
        size_t nv = 0;
        ms_tok_encode(t, parts[i], strlen(parts[i]), 0, &v, &nv);
        memcpy(out + k, v, sizeof *v * nv);
        k += nv;
        free(v);
    }
    return k;
}

/* An answer split whole, and streamed id by id: the same content and reasoning. */
static void check_answer(const ms_tok *t, const char *what, const char *const *parts, int n, const char *content,
                         const char *reasoning, const char *call_name, const char *call_args)
{
    int32_t ids[512];
    size_t k = gen(t, parts, n, ids);
    ms_chat_answer a;
    int rc = ms_qwen3_chat.answer(t, ids, k, &a);
    T_CHECK(rc == 0 && a.content && !strcmp(a.content, content), "%s: content \"%s\" (got \"%s\")", what, content,
            a.content ? a.content : "(null)");
    T_CHECK(rc == 0 && (reasoning ? a.reasoning && !strcmp(a.reasoning, reasoning) : !a.reasoning),
            "%s: reasoning \"%s\" (got \"%s\")", what, reasoning ? reasoning : "(none)", a.reasoning ? a.reasoning : "(none)");
    T_CHECK(rc == 0 && (call_name ? a.call_name && !strcmp(a.call_name, call_name) && !strcmp(a.call_args, call_args)
                                  : !a.call_name),
            "%s: tool call %s %s", what, call_name ? call_name : "(none)", call_args ? call_args : "");
    /* streamed: each id's text to where route says */
    char sc[2048] = "", sr[2048] = "";
    ms_chat_stream st;
    memset(&st, 0, sizeof st);
    for (size_t i = 0; i < k; i++) {
        int to = ms_qwen3_chat.route(t, &st, ids[i]);
        char *s = NULL;
        size_t l = 0;
        if (to == MS_CHAT_TO_NONE || ms_tok_decode(t, ids + i, 1, &s, &l) != 0) continue;
        strncat(to == MS_CHAT_TO_CONTENT ? sc : sr, s, l);
        free(s);
    }
    T_CHECK(!strcmp(sc, a.content ? a.content : "") && !strcmp(sr, a.reasoning ? a.reasoning : ""),
            "%s: streamed id by id, the same content and reasoning", what);
    ms_chat_answer_clear(&a);
}

static void check_answers(const ms_tok *t)
{
    const char *think[] = {"#<think>", "\nThe user greets.\n", "#</think>", "\n\nHello! How can I help?", "#<|im_end|>"};
    check_answer(t, "thinking, then an answer", think, 4, "Hello! How can I help?", "The user greets.\n", NULL, NULL);
    const char *plain[] = {"Hello there.", "#<|im_end|>"};
    check_answer(t, "no thinking (enable_thinking false)", plain, 1, "Hello there.", NULL, NULL, NULL);
    const char *cut[] = {"#<think>", "\nStill thinking about"};
    check_answer(t, "cut inside the thinking", cut, 2, "", "Still thinking about", NULL, NULL);
    const char *call[] = {"#<think>", "\nWeather needs a tool.\n", "#</think>", "\n\n", "#<tool_call>",
                          "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n", "#</tool_call>"};
    check_answer(t, "a tool call", call, 7, "", "Weather needs a tool.\n", "get_weather", "{\"city\":\"Paris\"}");
    const char *said[] = {"Let me check.\n", "#<tool_call>", "\n{\"name\": \"f\", \"arguments\": {}}\n", "#</tool_call>"};
    check_answer(t, "content, then a tool call", said, 4, "Let me check.\n", NULL, "f", "{}");
}

/* A conversation going on from its own tokens: the answer closed, "\n", the user turn, the
 * generation prompt: the ids the template's text gives for them. */
static void check_follow(const ms_tok *t)
{
    ms_chat_msg u = {"user", "And now?", 8};
    int32_t end = ms_tok_special_id(t, "<|im_end|>"), *got = NULL, want[64];
    size_t ng = 0;
    const char *tail[] = {"#<|im_end|>", "\n", "#<|im_start|>", "user\nAnd now?", "#<|im_end|>", "\n", "#<|im_start|>",
                          "assistant\n"};
    size_t nw = gen(t, tail, 8, want);
    int rc = ms_qwen3_chat.follow(t, end, &u, 1, NULL, &got, &ng);
    T_CHECK(rc == 0 && ng == nw && !memcmp(got, want, sizeof *got * nw), "follow after <|im_end|>: \\n, the user turn, "
            "the generation prompt");
    free(got);
    int32_t word = want[3];
    rc = ms_qwen3_chat.follow(t, word, &u, 1, NULL, &got, &ng);
    T_CHECK(rc == 0 && ng == nw + 1 && got[0] == word && !memcmp(got + 1, want, sizeof *got * nw),
            "follow after a cut answer: its last id, then <|im_end|> and the rest");
    free(got);
}

static void check_refusals(const ms_tok *t)
{
    char *text = NULL;
    size_t len = 0;
    ms_chat_msg who[1] = {{"narrator", "a", 1}};
    T_CHECK(ms_qwen3_chat_render(who, 1, NULL, &text, &len) == -1 && ms_err_code() == MS_EXIT_INPUT &&
                has(ms_err_msg(), "message 0"),
            "an unknown role is refused, naming the message: %s", ms_err_msg());
    ms_chat_msg two[2] = {{"user", "a", 1}, {"assistant", NULL, 0, NULL, 0, 2, "f", "{}", 2}};
    T_CHECK(ms_qwen3_chat_render(two, 2, NULL, &text, &len) == -1 && has(ms_err_msg(), "more than one tool call"),
            "two tool calls in one message are refused: %s", ms_err_msg());
    ms_chat_msg bad[1] = {{"user", "\xff", 1}};
    T_CHECK(ms_qwen3_chat_render(bad, 1, NULL, &text, &len) == -1 && has(ms_err_msg(), "UTF-8"),
            "invalid UTF-8 is refused: %s", ms_err_msg());
    char why[200] = "";
    json_t *s = json_string("yes");
    T_CHECK(ms_qwen3_chat.var("enable_thinking", s, NULL, why, sizeof why) == -1 && has(why, "boolean"),
            "enable_thinking must be a boolean: %s", why);
    T_CHECK(ms_qwen3_chat.var("reasoning_effort", s, NULL, why, sizeof why) == 1, "other variables are not Qwen3's");
    json_decref(s);
    /* a developer message is rendered as the system message (the template would drop it) */
    ms_chat_msg dev[2] = {{"developer", "Be brief.", 9}, {"user", "Hi", 2}};
    T_CHECK(ms_qwen3_chat_render(dev, 2, NULL, &text, &len) == 0 &&
                !strcmp(text, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
            "a developer message renders as the system message");
    free(text);
    /* a marker written in a message stays text */
    ms_chat_msg mk[1] = {{"user", "<|im_end|>", 10}};
    int32_t *ids = NULL;
    size_t n = 0;
    int32_t end = ms_tok_special_id(t, "<|im_end|>");
    T_CHECK(ms_qwen3_chat.encode(t, mk, 1, NULL, &ids, &n) == 0 && n > 6 && ids[3] != end,
            "a marker's text in a message is encoded as text");
    free(ids);
}

int main(void)
{
    ms_log_set_level(0);
    const char *p = ms_t_shared("fixtures/tokenizer/qwen3");
    if (!p) return ms_t_done();
    char dir[4096], cases[4200];
    snprintf(dir, sizeof dir, "%s", p);
    snprintf(cases, sizeof cases, "%s/chat-cases.jsonl", dir);
    ms_tok *t = ms_tok_load(dir);
    T_CHECK(t != NULL, "the Qwen3 tokenizer: %s", ms_err_msg());
    if (!t) return ms_t_done();
    check_cases(t, cases);
    check_answers(t);
    check_follow(t);
    check_refusals(t);
    ms_tok_free(t);
    return ms_t_done();
}
