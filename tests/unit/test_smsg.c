/* test_smsg: the Anthropic Messages API's bodies as chat requests (blocks, tool use and results, system, tools, tool_choice), refusals naming the field, and answers as message objects and typed events. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_sbuf.h"
#include "ms_smsg.h"
#include "ms_test.h"

/* The chat body a Messages body becomes, compared as JSON with want (NULL: refused, why holding
 * `says` and param `field`). */
static void check(const char *what, const char *body, int count_only, const char *want, const char *says, const char *field)
{
    char why[600] = "";
    const char *param = NULL;
    json_t *got = ms_smsg_to_chat(body, strlen(body), count_only, why, sizeof why, &param);
    if (want) {
        json_error_t je;
        json_t *w = json_loads(want, 0, &je);
        MS_ASSERT(w);
        char *gs = got ? json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        T_CHECK(got && json_equal(got, w), "%s: becomes the chat body %s (got %s)", what, want, gs ? gs : why);
        free(gs);
        json_decref(w);
    } else {
        T_CHECK(!got && strstr(why, says) && param && !strcmp(param, field), "%s: refused naming %s, saying \"%s\" (%s: %s)",
                what, field, says, param ? param : "no param", why);
    }
    json_decref(got);
}

static void check_requests(void)
{
    check("a plain message", "{\"model\": \"m\", \"max_tokens\": 9, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", 0,
          "{\"model\": \"m\", \"max_tokens\": 9, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", NULL, NULL);
    check("system blocks, sampling, stop sequences, stream",
          "{\"model\": \"m\", \"max_tokens\": 9, \"system\": [{\"type\": \"text\", \"text\": \"Be brief.\"}, {\"type\": \"text\", "
          "\"text\": \"Be kind.\", \"cache_control\": {\"type\": \"ephemeral\"}}], \"messages\": [{\"role\": \"user\", \"content\": "
          "\"Hi\"}], \"temperature\": 0.5, \"top_p\": 0.9, \"top_k\": 40, \"stop_sequences\": [\"END\"], \"stream\": true, "
          "\"metadata\": {\"user_id\": \"u1\"}}",
          0,
          "{\"model\": \"m\", \"max_tokens\": 9, \"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\\nBe kind.\"}, "
          "{\"role\": \"user\", \"content\": \"Hi\"}], \"temperature\": 0.5, \"top_p\": 0.9, \"top_k\": 40, \"stop\": [\"END\"], "
          "\"stream\": true}",
          NULL, NULL);
    /* a tool conversation: the call, its result (named from the call) before the user's text */
    check("tool use and tool result",
          "{\"model\": \"m\", \"max_tokens\": 9, \"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"}, {\"role\": "
          "\"assistant\", \"content\": [{\"type\": \"thinking\", \"thinking\": \"Look it up.\", \"signature\": \"s\"}, {\"type\": "
          "\"text\", \"text\": \"Checking.\"}, {\"type\": \"tool_use\", \"id\": \"toolu_1\", \"name\": \"get_weather\", \"input\": "
          "{\"city\": \"Oslo\", \"days\": 2}}]}, {\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": "
          "\"toolu_1\", \"content\": [{\"type\": \"text\", \"text\": \"-3C\"}]}, {\"type\": \"text\", \"text\": \"And tomorrow?\"}]}], "
          "\"tools\": [{\"name\": \"get_weather\", \"description\": \"Weather now\", \"input_schema\": {\"type\": \"object\", "
          "\"properties\": {\"city\": {\"type\": \"string\"}}}}], \"tool_choice\": {\"type\": \"auto\"}}",
          0,
          "{\"model\": \"m\", \"max_tokens\": 9, \"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"}, {\"role\": "
          "\"assistant\", \"content\": \"Checking.\", \"reasoning_content\": \"Look it up.\", \"tool_calls\": [{\"id\": \"toolu_1\", "
          "\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Oslo\\\",\\\"days\\\":2}\"}}]}, "
          "{\"role\": \"tool\", \"tool_call_id\": \"toolu_1\", \"name\": \"get_weather\", \"content\": \"-3C\"}, {\"role\": \"user\", "
          "\"content\": [{\"type\": \"text\", \"text\": \"And tomorrow?\"}]}], \"tools\": [{\"type\": \"function\", \"function\": "
          "{\"name\": \"get_weather\", \"description\": \"Weather now\", \"parameters\": {\"type\": \"object\", \"properties\": "
          "{\"city\": {\"type\": \"string\"}}}}}], \"tool_choice\": \"auto\"}",
          NULL, NULL);
    check("a turn that only calls: content null",
          "{\"max_tokens\": 9, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"content\": "
          "[{\"type\": \"tool_use\", \"id\": \"t\", \"name\": \"f\", \"input\": {}}]}]}",
          0,
          "{\"max_tokens\": 9, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"content\": null, "
          "\"tool_calls\": [{\"id\": \"t\", \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{}\"}}]}]}",
          NULL, NULL);
    check("tool_choice any -> required", "{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
          "\"tool_choice\": {\"type\": \"any\"}}", 0,
          "{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": \"required\"}", NULL, NULL);
    check("tool_choice tool -> the named function", "{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": "
          "\"x\"}], \"tool_choice\": {\"type\": \"tool\", \"name\": \"f\"}}", 0,
          "{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": {\"type\": \"function\", "
          "\"function\": {\"name\": \"f\"}}}", NULL, NULL);
    check("count_tokens needs no max_tokens", "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", 1,
          "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", NULL, NULL);

    /* refusals */
    check("no max_tokens", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", 0, NULL, "required", "max_tokens");
    check("no messages", "{\"max_tokens\": 1, \"messages\": []}", 0, NULL, "non-empty", "messages");
    check("an unknown field", "{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"thinking\": "
          "{\"type\": \"enabled\", \"budget_tokens\": 1024}}", 0, NULL, "\"thinking\"", "body");
    check("max_tokens in count_tokens", "{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", 1, NULL,
          "\"max_tokens\"", "body");
    check("a system role in messages", "{\"max_tokens\": 1, \"messages\": [{\"role\": \"system\", \"content\": \"x\"}]}", 0, NULL,
          "messages[0]", "messages");
    check("an image block", "{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image\", "
          "\"source\": {}}]}]}", 0, NULL, "messages[0].content[0]: \"image\"", "messages");
    check("a tool_use in a user turn", "{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
          "\"tool_use\", \"id\": \"t\", \"name\": \"f\", \"input\": {}}]}]}", 0, NULL, "\"tool_use\"", "messages");
    check("a tool_use without input", "{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": "
          "\"assistant\", \"content\": [{\"type\": \"tool_use\", \"id\": \"t\", \"name\": \"f\"}]}]}", 0, NULL,
          "messages[1].content[0]", "messages");
    check("a tool_result with an image", "{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
          "\"tool_result\", \"tool_use_id\": \"t\", \"content\": [{\"type\": \"image\"}]}]}]}", 0, NULL, "block 0", "messages");
    check("a server tool", "{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": "
          "\"web_search_20250305\", \"name\": \"web_search\"}]}", 0, NULL, "tools[0]", "tools");
    check("a tool without input_schema", "{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
          "\"tools\": [{\"name\": \"f\"}]}", 0, NULL, "input_schema", "tools");
    check("an unknown tool_choice", "{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
          "\"tool_choice\": {\"type\": \"some\"}}", 0, NULL, "\"some\"", "tool_choice");
    check("not JSON", "{\"max_tokens\": 1,", 0, NULL, "not a JSON object", "body");
}

static json_t *parse(const char *s, size_t n)
{
    json_error_t je;
    return json_loadb(s, n, 0, &je);
}

/* The answers: a message object, and the events whose text and blocks add up to it. */
static void check_answers(void)
{
    ms_chat_answer a = {ms_strdup("It is cold."), 11, ms_strdup("Check the tool."), 15, ms_strdup("get_weather"),
                        ms_strdup("{\"city\": \"Oslo\"}"), 16};
    size_t len;
    char *s = ms_smsg_message("msg_1", "m", &a, "stop", NULL, 12, 7, &len);
    json_t *o = parse(s, len), *c = json_object_get(o, "content");
    const char *t0 = json_string_value(json_object_get(json_array_get(c, 0), "type"));
    const char *t1 = json_string_value(json_object_get(json_array_get(c, 1), "type"));
    const char *t2 = json_string_value(json_object_get(json_array_get(c, 2), "type"));
    json_t *in = json_object_get(json_array_get(c, 2), "input");
    T_CHECK(o && json_array_size(c) == 3 && t0 && !strcmp(t0, "thinking") && t1 && !strcmp(t1, "text") && t2 &&
                !strcmp(t2, "tool_use") && !strcmp(json_string_value(json_object_get(in, "city")), "Oslo") &&
                !strcmp(json_string_value(json_object_get(o, "stop_reason")), "tool_use") &&
                json_integer_value(json_object_get(json_object_get(o, "usage"), "input_tokens")) == 12 &&
                json_integer_value(json_object_get(json_object_get(o, "usage"), "output_tokens")) == 7 &&
                !strncmp(json_string_value(json_object_get(json_array_get(c, 2), "id")), "toolu_", 6),
            "an answer with reasoning, text and a call: thinking, text and tool_use blocks, stop_reason tool_use (%s)", s);
    json_decref(o);
    free(s);
    s = ms_smsg_message("msg_2", "m", &(ms_chat_answer){"Hi", 2, NULL, 0, NULL, NULL, 0}, "stop", "END", 3, 2, &len);
    o = parse(s, len);
    T_CHECK(o && !strcmp(json_string_value(json_object_get(o, "stop_reason")), "stop_sequence") &&
                !strcmp(json_string_value(json_object_get(o, "stop_sequence")), "END"),
            "an answer cut at a stop sequence says which (%s)", s);
    json_decref(o);
    free(s);
    s = ms_smsg_message("msg_3", "m", &(ms_chat_answer){"", 0, NULL, 0, "f", "not json", 8}, "length", NULL, 3, 2, &len);
    o = parse(s, len);
    c = json_object_get(o, "content");
    T_CHECK(o && json_array_size(c) == 1 && !strcmp(json_string_value(json_object_get(json_array_get(c, 0), "text")), "not json") &&
                !strcmp(json_string_value(json_object_get(o, "stop_reason")), "max_tokens"),
            "a call whose arguments are no object stays text; cut by max_tokens (%s)", s);
    json_decref(o);
    free(s);

    /* the stream: reasoning, then text in two pieces, then the call */
    ms_smsg_stream st;
    ms_sbuf all = {0};
    s = ms_smsg_stream_start(&st, "msg_4", "m", 12, &len);
    ms_sbuf_add(&all, s, len);
    free(s);
    const char *pieces[3][2] = {{"Check the tool.", ""}, {"", "It is "}, {"", "cold."}};
    for (int i = 0; i < 3; i++) {
        s = ms_smsg_stream_text(&st, pieces[i][0], strlen(pieces[i][0]), pieces[i][1], strlen(pieces[i][1]), &len);
        if (s) ms_sbuf_add(&all, s, len);
        free(s);
    }
    s = ms_smsg_stream_end(&st, &a, "stop", NULL, 7, &len);
    ms_sbuf_add(&all, s, len);
    free(s);
    /* replay the events as a client does */
    ms_sbuf text = {0}, think = {0}, args = {0};
    char order[16] = "";
    int bad = 0, n_ev = 0, stopped = 0;
    const char *reason = NULL;
    json_t *keep = json_array();
    for (char *p = all.s; p && (p = strstr(p, "event: "));) {
        char *nl = strchr(p, '\n'), *d = nl ? strstr(nl, "data: ") : NULL, *end = d ? strstr(d, "\n\n") : NULL;
        if (!end) {
            bad = 1;
            break;
        }
        json_t *e = parse(d + 6, (size_t)(end - d - 6));
        const char *ty = json_string_value(json_object_get(e, "type"));
        if (!e || !ty || strncmp(p + 7, ty, strlen(ty))) bad = 1;
        n_ev++;
        if (ty && !strcmp(ty, "content_block_start")) {
            const char *bt = json_string_value(json_object_get(json_object_get(e, "content_block"), "type"));
            size_t k = strlen(order);
            if (bt && k < sizeof order - 1) order[k] = bt[0] == 't' && bt[1] == 'h' ? 'R' : bt[1] == 'e' ? 'T' : 'U';
        }
        if (ty && !strcmp(ty, "content_block_delta")) {
            json_t *dl = json_object_get(e, "delta");
            const char *dt = json_string_value(json_object_get(dl, "type"));
            const char *key = !strcmp(dt, "text_delta") ? "text" : !strcmp(dt, "thinking_delta") ? "thinking"
                              : !strcmp(dt, "input_json_delta") ? "partial_json" : NULL;
            const char *v = key ? json_string_value(json_object_get(dl, key)) : NULL;
            ms_sbuf *b = !key ? NULL : key[0] == 't' && key[1] == 'e' ? &text : key[0] == 't' ? &think : &args;
            if (b && v) ms_sbuf_adds(b, v);
        }
        if (ty && !strcmp(ty, "message_delta")) {
            json_array_append(keep, e);
            reason = json_string_value(json_object_get(json_object_get(e, "delta"), "stop_reason"));
        }
        if (ty && !strcmp(ty, "message_stop")) stopped = 1;
        json_decref(e);
        p = end;
    }
    T_CHECK(!bad && stopped && !strcmp(order, "RTU") && text.s && !strcmp(text.s, "It is cold.") && think.s &&
                !strcmp(think.s, "Check the tool.") && args.s && !strcmp(args.s, "{\"city\":\"Oslo\"}") && reason &&
                !strcmp(reason, "tool_use"),
            "streamed: a thinking, a text and a tool_use block whose deltas add up to the answer, then message_delta "
            "(tool_use) and message_stop (%d events, blocks %s)", n_ev, order);
    json_decref(keep);
    ms_sbuf_free(&all);
    ms_sbuf_free(&text);
    ms_sbuf_free(&think);
    ms_sbuf_free(&args);
    ms_chat_answer_clear(&a);

    s = ms_smsg_error_json(429, "full", &len);
    o = parse(s, len);
    T_CHECK(o && !strcmp(json_string_value(json_object_get(o, "type")), "error") &&
                !strcmp(json_string_value(json_object_get(json_object_get(o, "error"), "type")), "rate_limit_error"),
            "429 is a rate_limit_error in Anthropic's error shape (%s)", s);
    json_decref(o);
    free(s);
}

int main(void)
{
    check_requests();
    check_answers();
    return ms_t_done();
}
