/* test_sresp: the Responses API's bodies as chat requests (input items, instructions, stored turns of previous_response_id, tools), refusals naming the field, and answers as response objects and typed events. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_sbuf.h"
#include "ms_sresp.h"
#include "ms_test.h"

static ms_sresp_store *store;

/* The chat body a Responses body becomes (its model dropped, ids vary), compared with want;
 * want NULL: refused with status, naming field. r is kept for the caller when given. */
static void check(const char *what, const char *body, const char *want, int status, const char *field, ms_sresp_req *keep)
{
    char why[600] = "";
    const char *param = NULL;
    int st = 0;
    ms_sresp_req r;
    json_t *got = ms_sresp_to_chat(body, strlen(body), store, "dflt", &r, &st, why, sizeof why, &param);
    if (want) {
        json_t *w = json_loads(want, 0, NULL);
        MS_ASSERT(w);
        char *gs = got ? json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        T_CHECK(got && json_equal(got, w) && !strncmp(r.id, "resp_", 5) && !strncmp(r.call_id, "call_", 5),
                "%s: becomes the chat body %s (got %s)", what, want, gs ? gs : why);
        free(gs);
        json_decref(w);
    } else {
        T_CHECK(!got && st == status && param && !strcmp(param, field) && why[0], "%s: refused (%d) naming %s (%d %s: %s)",
                what, status, field, st, param ? param : "-", why);
    }
    json_decref(got);
    if (keep && got) *keep = r;
    else ms_sresp_req_clear(&r);
}

static void check_requests(void)
{
    check("a string input", "{\"model\": \"m\", \"input\": \"Hi\", \"max_output_tokens\": 5}",
          "{\"model\": \"m\", \"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", 0, NULL, NULL);
    check("instructions, items, tools, sampling",
          "{\"input\": [{\"role\": \"developer\", \"content\": \"Terse.\"}, {\"type\": \"message\", \"role\": \"user\", \"content\": "
          "[{\"type\": \"input_text\", \"text\": \"Weather?\"}]}, {\"type\": \"reasoning\", \"id\": \"rs_1\", \"summary\": [], "
          "\"content\": [{\"type\": \"reasoning_text\", \"text\": \"Look.\"}]}, {\"type\": \"function_call\", \"call_id\": \"c1\", "
          "\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Oslo\\\"}\"}, {\"type\": \"function_call_output\", "
          "\"call_id\": \"c1\", \"output\": \"-3C\"}], \"instructions\": \"Be brief.\", \"temperature\": 0.5, \"top_p\": 0.9, "
          "\"stream\": true, \"tools\": [{\"type\": \"function\", \"name\": \"get_weather\", \"description\": \"Weather\", "
          "\"parameters\": {\"type\": \"object\"}, \"strict\": false}], \"tool_choice\": \"auto\", \"store\": false, "
          "\"metadata\": {\"a\": \"b\"}, \"parallel_tool_calls\": true, \"truncation\": \"disabled\", \"include\": [], "
          "\"text\": {\"format\": {\"type\": \"text\"}}, \"reasoning\": {\"effort\": \"low\"}, \"user\": \"u\"}",
          "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"developer\", \"content\": \"Terse.\"}, "
          "{\"role\": \"user\", \"content\": \"Weather?\"}, {\"role\": \"assistant\", \"content\": null, \"reasoning_content\": "
          "\"Look.\", \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
          "\"arguments\": \"{\\\"city\\\":\\\"Oslo\\\"}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"name\": "
          "\"get_weather\", \"content\": \"-3C\"}], \"temperature\": 0.5, \"top_p\": 0.9, \"stream\": true, \"user\": \"u\", "
          "\"reasoning_effort\": \"low\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
          "\"description\": \"Weather\", \"parameters\": {\"type\": \"object\"}, \"strict\": false}}], \"tool_choice\": \"auto\"}",
          0, NULL, NULL);
    check("a named tool_choice", "{\"input\": \"x\", \"tool_choice\": {\"type\": \"function\", \"name\": \"f\"}}",
          "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": {\"type\": \"function\", \"function\": "
          "{\"name\": \"f\"}}}",
          0, NULL, NULL);

    /* a stored turn and its follow-up: the earlier turn's messages and answer, not its instructions */
    ms_sresp_req first;
    memset(&first, 0, sizeof first);
    check("a first turn", "{\"input\": \"Weather in Oslo?\", \"instructions\": \"Be brief.\"}",
          "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": "
          "\"Weather in Oslo?\"}]}",
          0, NULL, &first);
    ms_chat_answer a = {"Checking.", 9, "Use the tool.", 13, "get_weather", "{\"city\": \"Oslo\"}", 16};
    ms_sresp_store_put(store, &first, &a);
    char body[800], want[1600];
    snprintf(body, sizeof body, "{\"input\": [{\"type\": \"function_call_output\", \"call_id\": \"%s\", \"output\": \"-3C\"}], "
             "\"previous_response_id\": \"%s\", \"instructions\": \"Be kind.\"}", first.call_id, first.id);
    snprintf(want, sizeof want, "{\"messages\": [{\"role\": \"system\", \"content\": \"Be kind.\"}, {\"role\": \"user\", "
             "\"content\": \"Weather in Oslo?\"}, {\"role\": \"assistant\", \"content\": \"Checking.\", \"reasoning_content\": "
             "\"Use the tool.\", \"tool_calls\": [{\"id\": \"%s\", \"type\": \"function\", \"function\": {\"name\": "
             "\"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Oslo\\\"}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"%s\", "
             "\"name\": \"get_weather\", \"content\": \"-3C\"}]}", first.call_id, first.call_id);
    check("a follow-up by previous_response_id: the stored turn and its call, the result named by it", body, want, 0, NULL,
          NULL);
    ms_sresp_req nostore;
    memset(&nostore, 0, sizeof nostore);
    check("store false", "{\"input\": \"x\", \"store\": false}", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", 0,
          NULL, &nostore);
    ms_sresp_store_put(store, &nostore, &a);
    snprintf(body, sizeof body, "{\"input\": \"y\", \"previous_response_id\": \"%s\"}", nostore.id);
    check("a follow-up of a turn not stored", body, NULL, 404, "previous_response_id", NULL);
    ms_sresp_req_clear(&first);
    ms_sresp_req_clear(&nostore);

    check("no input", "{\"model\": \"m\"}", NULL, 400, "input", NULL);
    check("an unknown field", "{\"input\": \"x\", \"prompt\": {\"id\": \"p\"}}", NULL, 400, "body", NULL);
    check("structured outputs: text.format json_schema is the chat's response_format",
          "{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"json_schema\", \"name\": \"a\", \"strict\": true, \"schema\": "
          "{\"type\": \"object\"}}}}",
          "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": {\"type\": \"json_schema\", "
          "\"json_schema\": {\"name\": \"a\", \"strict\": true, \"schema\": {\"type\": \"object\"}}}}",
          0, NULL, NULL);
    check("an unknown text.format", "{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"xml\"}}}", NULL, 400, "text", NULL);
    check("a reasoning summary", "{\"input\": \"x\", \"reasoning\": {\"summary\": \"auto\"}}", NULL, 400, "reasoning", NULL);
    check("background", "{\"input\": \"x\", \"background\": true}", NULL, 400, "background", NULL);
    check("an image part", "{\"input\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_image\", \"image_url\": \"x\"}]}]}",
          NULL, 400, "input", NULL);
    check("an unknown item", "{\"input\": [{\"type\": \"item_reference\", \"id\": \"x\"}]}", NULL, 400, "input", NULL);
    check("a built-in tool", "{\"input\": \"x\", \"tools\": [{\"type\": \"web_search\"}]}", NULL, 400, "tools", NULL);
    check("an unknown previous_response_id", "{\"input\": \"x\", \"previous_response_id\": \"resp_nope\"}", NULL, 404,
          "previous_response_id", NULL);
}

/* The answers: the object, and the events whose items add up to it. */
static void check_answers(void)
{
    ms_sresp_req r;
    char why[200];
    const char *param;
    int st;
    const char *req = "{\"input\": \"x\", \"instructions\": \"I\", \"temperature\": 0.5}";
    json_t *b = ms_sresp_to_chat(req, strlen(req), store, "m", &r, &st, why, sizeof why, &param);
    T_CHECK(b != NULL, "a request: %s", b ? "" : why);
    json_decref(b);
    if (!b) return;
    ms_chat_answer a = {"It is cold.", 11, "Check.", 6, "get_weather", "{\"city\":\"Oslo\"}", 15};
    size_t len;
    char *s = ms_sresp_response(&r, &a, "stop", 10, 7, &len);
    json_t *o = json_loadb(s, len, 0, NULL), *out = json_object_get(o, "output");
    const char *t0 = json_string_value(json_object_get(json_array_get(out, 0), "type"));
    const char *t1 = json_string_value(json_object_get(json_array_get(out, 1), "type"));
    const char *t2 = json_string_value(json_object_get(json_array_get(out, 2), "type"));
    T_CHECK(o && json_array_size(out) == 3 && t0 && !strcmp(t0, "reasoning") && t1 && !strcmp(t1, "message") && t2 &&
                !strcmp(t2, "function_call") &&
                !strcmp(json_string_value(json_object_get(json_array_get(out, 2), "call_id")), r.call_id) &&
                !strcmp(json_string_value(json_object_get(o, "status")), "completed") &&
                !strcmp(json_string_value(json_object_get(o, "instructions")), "I") &&
                json_real_value(json_object_get(o, "temperature")) == 0.5 &&
                json_integer_value(json_object_get(json_object_get(o, "usage"), "total_tokens")) == 17,
            "a response: reasoning, message and function_call items, the request's fields, usage (%s)", s);
    json_decref(o);
    free(s);

    /* the stream: reasoning, then text in two pieces, then the call; replayed as a client does */
    ms_sresp_stream ss;
    ms_sbuf all = {0};
    s = ms_sresp_stream_start(&ss, &r, &len);
    ms_sbuf_add(&all, s, len);
    free(s);
    const char *pieces[3][2] = {{"Check.", ""}, {"", "It is "}, {"", "cold."}};
    for (int i = 0; i < 3; i++) {
        s = ms_sresp_stream_text(&ss, &r, pieces[i][0], strlen(pieces[i][0]), pieces[i][1], strlen(pieces[i][1]), &len);
        if (s) ms_sbuf_add(&all, s, len);
        free(s);
    }
    s = ms_sresp_stream_end(&ss, &r, &a, "stop", 10, 7, &len);
    ms_sbuf_add(&all, s, len);
    free(s);
    ms_sresp_stream_clear(&ss);
    ms_sbuf text = {0}, think = {0}, args = {0};
    int bad = 0, seq = 0, done = 0;
    json_t *final = NULL;
    for (char *p = all.s; p && (p = strstr(p, "event: "));) {
        char *d = strstr(p, "\ndata: "), *end = d ? strstr(d, "\n\n") : NULL;
        if (!end) {
            bad = 1;
            break;
        }
        json_t *e = json_loadb(d + 7, (size_t)(end - d - 7), 0, NULL);
        const char *ty = json_string_value(json_object_get(e, "type"));
        if (!ty || strncmp(p + 7, ty, strlen(ty)) || json_integer_value(json_object_get(e, "sequence_number")) != seq++) bad = 1;
        const char *dl = json_string_value(json_object_get(e, "delta"));
        if (ty && dl && !strcmp(ty, "response.output_text.delta")) ms_sbuf_adds(&text, dl);
        if (ty && dl && !strcmp(ty, "response.reasoning_text.delta")) ms_sbuf_adds(&think, dl);
        if (ty && dl && !strcmp(ty, "response.function_call_arguments.delta")) ms_sbuf_adds(&args, dl);
        if (ty && !strcmp(ty, "response.completed")) {
            done = 1;
            final = json_incref(json_object_get(e, "response"));
        }
        json_decref(e);
        p = end;
    }
    json_t *fo = json_object_get(final, "output");
    T_CHECK(!bad && done && text.s && !strcmp(text.s, "It is cold.") && think.s && !strcmp(think.s, "Check.") && args.s &&
                !strcmp(args.s, "{\"city\":\"Oslo\"}") && json_array_size(fo) == 3 &&
                !strcmp(json_string_value(json_object_get(json_array_get(json_object_get(json_array_get(fo, 1), "content"), 0),
                                                          "text")),
                        "It is cold."),
            "streamed: numbered events whose deltas add up to the answer, response.completed holding it (%d events)", seq);
    json_decref(final);
    ms_sbuf_free(&all);
    ms_sbuf_free(&text);
    ms_sbuf_free(&think);
    ms_sbuf_free(&args);
    s = ms_sresp_response(&r, &(ms_chat_answer){"Hi", 2, NULL, 0, NULL, NULL, 0}, "length", 3, 2, &len);
    o = json_loadb(s, len, 0, NULL);
    T_CHECK(o && !strcmp(json_string_value(json_object_get(o, "status")), "incomplete") &&
                !strcmp(json_string_value(json_object_get(json_object_get(o, "incomplete_details"), "reason")),
                        "max_output_tokens"),
            "cut by max_output_tokens: status incomplete, its reason (%s)", s);
    json_decref(o);
    free(s);
    ms_sresp_req_clear(&r);
}

int main(void)
{
    store = ms_sresp_store_new(4);
    check_requests();
    check_answers();
    ms_sresp_store_free(store);
    return ms_t_done();
}
