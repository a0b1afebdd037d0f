/* test_jobfile: `jobs` input lines -> specs (defaults, short form, chats, each bad-line code),
 * result lines, and the resume scan (torn last line, foreign lines). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ms_kimichat.h"
#include "ms_err.h"
#include "ms_jobfile.h"
#include "ms_test.h"

static ms_jobfile_limits lim;

static void parse(const char *text, int line, ms_jobspec *j) { ms_jobspec_parse(text, strlen(text), line, &lim, j); }

static void check_good(void)
{
    ms_jobspec j;
    parse("{\"prompt\": [1, 2, 3]}", 4, &j);
    T_CHECK(!j.err_code && !strcmp(j.custom_id, "line-4") && j.kind == MS_JOB_COMPLETION && j.n_prompt == 3 &&
                j.prompt[2] == 3 && j.max_tokens == 16 && j.temperature == 0.0f && j.top_p == 1.0f && j.seed == 0 &&
                j.n_stop == 0 && !j.model,
            "short form: custom_id line-N, defaults max_tokens 16, greedy, top_p 1, seed 0 (%s)", j.err_msg ? j.err_msg : "");
    ms_jobspec_clear(&j);
    parse("{\"custom_id\": \"q\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": {\"model\": \"k3\", "
          "\"prompt\": \"hello world\", \"max_tokens\": 5, \"temperature\": 0.5, \"top_p\": 0.25, \"seed\": -5, \"stop\": "
          "[\"a\", \"bc\"]}}",
          1, &j);
    int32_t *ids = NULL;
    size_t n = 0;
    ms_tok_encode(lim.tok, "hello world", 11, 0, &ids, &n);
    T_CHECK(!j.err_code && !strcmp(j.custom_id, "q") && j.n_prompt == n && !memcmp(j.prompt, ids, n * 4) &&
                j.max_tokens == 5 && j.temperature == 0.5f && j.top_p == 0.25f && j.seed == (uint64_t)-5 &&
                j.n_stop == 2 && !strcmp(j.stop[1], "bc") && !strcmp(j.model, "k3"),
            "full form: text prompt tokenized, every field taken (%s)", j.err_msg ? j.err_msg : "");
    free(ids);
    ms_jobspec_clear(&j);
    parse("{\"max_tokens\": null, \"max_completion_tokens\": 7, \"prompt\": [1]}", 3, &j);
    T_CHECK(!j.err_code && j.max_tokens == 7, "max_completion_tokens (with max_tokens null) sets max_tokens (%s)",
            j.err_msg ? j.err_msg : "");
    ms_jobspec_clear(&j);
    parse("{\"custom_id\": \"c\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"stop\": \"x\"}", 2, &j);
    ms_chat_msg m = {"user", "hi", 2};
    ms_kimichat_encode(lim.tok, &m, 1, &ids, &n);
    T_CHECK(!j.err_code && j.kind == MS_JOB_CHAT && j.n_prompt == n && !memcmp(j.prompt, ids, n * 4) && j.n_stop == 1,
            "short form with messages is a chat, rendered by ms_chat; stop as one string");
    free(ids);
    ms_jobspec_clear(&j);
}

static void check_bad(void)
{
    static const struct {
        const char *line, *code, *needle;
    } cases[] = {
        {"{\"prompt\": [1,", "invalid_json", "not valid JSON"},
        {"[1, 2]", "invalid_request", "JSON object"},
        {"{\"custom_id\": 7, \"prompt\": [1]}", "invalid_request", "custom_id"},
        {"{\"url\": \"/v1/completions\", \"prompt\": [1]}", "invalid_request", "both"},
        {"{\"method\": \"GET\", \"url\": \"/v1/completions\", \"body\": {\"prompt\": [1]}}", "invalid_request", "POST"},
        {"{\"url\": \"/v1/images\", \"body\": {\"prompt\": [1]}}", "invalid_url", "/v1/images"},
        {"{\"prompt\": [1, 512]}", "invalid_prompt", "position 1"},
        {"{\"prompt\": [1, \"a\"]}", "invalid_request", "item 1"},
        {"{\"prompt\": []}", "invalid_prompt", "empty"},
        {"{\"prompt\": [[1, 2]]}", NULL, NULL},                       /* one prompt of ids, in a batch array */
        /* the fields serve takes and no others: nothing is answered as if a field were absent */
        {"{\"prompt\": [1], \"bogus\": 1}", "unsupported_field", "\"bogus\""},
        {"{\"prompt\": [1], \"echo\": true}", "unsupported_value", "\"echo\" is not implemented"},
        {"{\"prompt\": [1], \"echo\": false, \"user\": \"u\", \"prompt_cache_key\": \"k\"}", NULL, NULL},
        {"{\"prompt\": [1], \"stream\": true}", "unsupported_value", "answered whole"},
        {"{\"url\": \"/v1/chat/completions\", \"body\": {\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
         "\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"s\", \"schema\": {\"type\": "
         "\"string\", \"pattern\": \"a+\"}}}}}", "invalid_request", "response_format"},
        {"{\"url\": \"/v1/completions\", \"body\": {\"prompt\": [1], \"custom_id\": \"x\"}}", "unsupported_field",
         "custom_id"}, /* in a body (the long form) it is not a request field */
        {"{\"prompt\": [[1], [2]]}", "unsupported_value", "2 prompts"}, /* several: a line each (serve splits them) */
        {"{\"prompt\": [[\"a\"]]}", "invalid_request", "prompt\"[0]"},
        {"{\"max_tokens\": 0, \"prompt\": [1]}", "invalid_max_tokens", "at least 1"},
        {"{\"max_tokens\": 1.5, \"prompt\": [1]}", "invalid_request", "max_tokens"},
        {"{\"max_completion_tokens\": 0, \"prompt\": [1]}", "invalid_max_tokens", "\"max_completion_tokens\" must"},
        {"{\"max_completion_tokens\": 2, \"max_tokens\": 2, \"prompt\": [1]}", "invalid_request", "not both"},
        {"{\"max_completion_tokens\": 2, \"max_tokens\": null, \"prompt\": [1]}", NULL, NULL},
        {"{\"temperature\": -1, \"prompt\": [1]}", "invalid_request", "temperature"},
        {"{\"top_p\": 0, \"prompt\": [1]}", "invalid_request", "top_p"},
        /* positive as a double, 0 as the sampler's float (it used to mean "no nucleus") */
        {"{\"top_p\": 1e-300, \"prompt\": [1]}", "invalid_request", "top_p"},
        {"{\"top_p\": 1e-46, \"prompt\": [1]}", "invalid_request", "32-bit float"},
        {"{\"top_p\": 1e-30, \"prompt\": [1]}", NULL, NULL}, /* a float > 0: fine */
        {"{\"stop\": [\"\"], \"prompt\": [1]}", "invalid_request", "stop"},
        {"{\"max_tokens\": 60, \"prompt\": [1, 2, 3, 4, 5]}", "context_length_exceeded", "64"},
        {"{\"messages\": []}", "invalid_request", "messages"},
        {"{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}", "invalid_prompt", "robot"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": [\"x\"]}]}", "invalid_request", "content"},
        {"{\"prompt\": \"x\\u00ff\"}", NULL, NULL}, /* valid UTF-8: fine */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ms_jobspec j;
        parse(cases[i].line, 9, &j);
        if (!cases[i].code) {
            T_CHECK(!j.err_code, "%s is good (%s)", cases[i].line, j.err_msg ? j.err_msg : "");
        } else {
            T_CHECK(j.err_code && !strcmp(j.err_code, cases[i].code) && j.err_msg && !strncmp(j.err_msg, "line 9: ", 8) &&
                        strstr(j.err_msg, cases[i].needle),
                    "%s -> %s naming line 9 and '%s' (got %s: %s)", cases[i].line, cases[i].code, cases[i].needle,
                    j.err_code ? j.err_code : "good", j.err_msg ? j.err_msg : "");
        }
        ms_jobspec_clear(&j);
    }
    /* A raw NUL byte is not JSON, but jansson skips one after a number (found by fuzz_request). */
    static const char nul[] = "{\"prompt\": [1], \"max_tokens\": 3\0, \"custom_id\": \"z\"}";
    ms_jobspec jn;
    ms_jobspec_parse(nul, sizeof nul - 1, 9, &lim, &jn);
    T_CHECK(jn.err_code && !strcmp(jn.err_code, "invalid_json") && strstr(jn.err_msg, "NUL byte at offset 31"),
            "a NUL byte inside a line is refused naming its offset (got %s: %s)", jn.err_code ? jn.err_code : "good",
            jn.err_msg ? jn.err_msg : "");
    ms_jobspec_clear(&jn);
    ms_jobfile_limits none = {NULL, 512, 64};
    ms_jobspec j;
    ms_jobspec_parse("{\"prompt\": \"x\"}", 15, 3, &none, &j);
    T_CHECK(j.err_code && !strcmp(j.err_code, "no_tokenizer"), "a text prompt without a tokenizer: no_tokenizer");
    ms_jobspec_clear(&j);
}

static void check_lines(void)
{
    ms_jobspec j;
    parse("{\"custom_id\": \"r\", \"url\": \"/v1/chat/completions\", \"body\": {\"messages\": [{\"role\": \"user\", "
          "\"content\": \"hi\"}]}}",
          1, &j);
    int32_t toks[3] = {65, 0, 66};
    ms_sched_result r = {0};
    r.prompt_tokens = j.n_prompt;
    r.tokens = toks;
    r.n_tokens = 3;
    r.finish = "length";
    r.text = "A\0B";
    r.text_len = 3;
    size_t len = 0;
    char *line = ms_jobline_result(&j, "m", 1700000000, &r, &len);
    json_t *o = json_loadb(line, len, JSON_ALLOW_NUL, NULL);
    json_t *ch = json_array_get(json_object_get(json_object_get(json_object_get(o, "response"), "body"), "choices"), 0);
    json_t *content = json_object_get(json_object_get(ch, "message"), "content");
    T_CHECK(len > 0 && line[len - 1] == '\n' && !memchr(line, '\n', len - 1) && o && json_string_length(content) == 3 &&
                !memcmp(json_string_value(content), "A\0B", 3) && json_array_size(json_object_get(ch, "token_ids")) == 3,
            "a result line is one line; a NUL in the text survives as \\u0000");
    json_decref(o);
    /* an error message that quotes bytes that are not UTF-8 (a parser's "near ..." text): still one
     * JSON line with the error, the bad byte as U+FFFD (found by fuzz_request: the error was lost) */
    {
        size_t le = 0;
        char *bad = ms_jobline_error(&j, "invalid_json", "line 1: invalid escape near '\"hi \\u0\xd0'", &le);
        json_t *eo = bad ? json_loadb(bad, le, 0, NULL) : NULL;
        const char *msg = json_string_value(json_object_get(json_object_get(eo, "error"), "message"));
        T_CHECK(eo && msg && strstr(msg, "\xef\xbf\xbd"), "an error line keeps a message with invalid UTF-8 (as U+FFFD)");
        json_decref(eo);
        free(bad);
    }
    /* resume scan: two lines, then a torn one */
    size_t l2 = 0;
    char *err = ms_jobline_error(&j, "invalid_json", "line 1: x", &l2);
    size_t total = len + l2 + 10;
    char *buf = ms_malloc(total + 1);
    memcpy(buf, line, len);
    memcpy(buf + len, err, l2);
    memcpy(buf + len + l2, "{\"id\":\"ba", 9);
    buf[total - 1] = 0;
    char **ids = NULL;
    size_t n = 0, keep = 0;
    int rc = ms_jobline_scan(buf, len + l2 + 9, &ids, &n, &keep);
    T_CHECK(rc == 0 && n == 2 && keep == len + l2 && !strcmp(ids[0], "r") && !strcmp(ids[1], "r"),
            "scan: two answered lines kept, the torn third dropped");
    for (size_t i = 0; i < n; i++) free(ids[i]);
    free(ids);
    memcpy(buf + len, "{\"x\": 1}\n", 9);
    rc = ms_jobline_scan(buf, len + 9, &ids, &n, &keep);
    T_CHECK(rc == -1 && ms_err_code() == MS_EXIT_INPUT && strstr(ms_err_msg(), "line 2"),
            "scan: a foreign complete line is refused by number: %s", ms_err_msg());
    free(buf);
    free(err);
    free(line);
    ms_jobspec_clear(&j);
}

/* The assistant message and finish_reason of a split answer, as jobs and serve send them. */
static void check_answers(void)
{
    ms_chat_answer a = {ms_strdup(""), 0, ms_strdup("Need weather."), 13, ms_strdup("get_weather"),
                        ms_strdup("{\"city\":\"Paris\"}"), 16};
    json_t *m = ms_jobfile_message_json(&a);
    json_t *tc = json_array_get(json_object_get(m, "tool_calls"), 0), *f = json_object_get(tc, "function");
    const char *id = json_string_value(json_object_get(tc, "id"));
    T_CHECK(json_is_null(json_object_get(m, "content")) &&
                !strcmp(json_string_value(json_object_get(m, "reasoning_content")), "Need weather.") &&
                json_array_size(json_object_get(m, "tool_calls")) == 1 && id && !strncmp(id, "call_", 5) &&
                !strcmp(json_string_value(json_object_get(tc, "type")), "function") &&
                !strcmp(json_string_value(json_object_get(f, "name")), "get_weather") &&
                !strcmp(json_string_value(json_object_get(f, "arguments")), "{\"city\":\"Paris\"}") &&
                !json_object_get(tc, "index"),
            "a tool call: content null, tool_calls [{id call_..., type function, function {name, arguments}}]");
    T_CHECK(!strcmp(ms_jobfile_finish(&a, "stop"), "tool_calls") && !strcmp(ms_jobfile_finish(&a, "length"), "length"),
            "finish_reason tool_calls when it stopped at the call; length stays length");
    json_decref(m);
    json_t *st = ms_jobfile_tool_calls_json(&a, 1);
    T_CHECK(json_integer_value(json_object_get(json_array_get(st, 0), "index")) == 0 &&
                json_object_get(json_array_get(st, 0), "index"),
            "a streamed delta's tool call carries index 0");
    json_decref(st);
    ms_chat_answer_clear(&a);
    ms_chat_answer b = {ms_strdup("Hi"), 2, NULL, 0, NULL, NULL, 0};
    m = ms_jobfile_message_json(&b);
    T_CHECK(!strcmp(json_string_value(json_object_get(m, "content")), "Hi") && !json_object_get(m, "tool_calls") &&
                !json_object_get(m, "reasoning_content") && !strcmp(ms_jobfile_finish(&b, "stop"), "stop"),
            "a plain answer: content, no tool_calls, no reasoning_content, finish stop");
    json_decref(m);
    ms_chat_answer_clear(&b);
}

int main(void)
{
    ms_log_set_level(0);
    check_answers();
    const char *d = ms_t_tmpdir("jobfile");
    T_CHECK(ms_tok_write_synth(d, 502) == 0, "synth tokenizer: %s", ms_err_msg());
    ms_tok *t = ms_tok_load(d);
    if (!t) return ms_t_done();
    lim = (ms_jobfile_limits){t, 512, 64, &ms_kimichat}; /* a Kimi-style tokenizer: the Kimi chat format */
    check_good();
    check_bad();
    check_lines();
    ms_tok_free(t);
    return ms_t_done();
}
