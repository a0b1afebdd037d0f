/* test_serve_responses: POST /v1/responses (OpenAI's Responses API) against `moestream serve`: a
 * response equals the chat completion of the same conversation, whole and streamed; a follow-up
 * by previous_response_id equals the chat of the whole conversation and starts from the prefix
 * cache; store false keeps nothing; refusals name their field. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_sbuf.h"
#include "ms_stest.h"
#include "ms_synth.h"
#include "ms_test.h"

static char dir[1100], tmp[1024];
static ms_st_server srv;

static json_t *post(const char *path, const char *body, int want)
{
    char *out = NULL;
    int st = ms_st_http(&srv, NULL, path, body, &out, NULL);
    json_t *o = out ? json_loads(out, JSON_ALLOW_NUL, NULL) : NULL;
    T_CHECK(st == want && o, "%s %.200s: %d (want %d) %.300s", path, body, st, want, out ? out : "");
    free(out);
    return o;
}

/* The text of a response's message item ("" when none). */
static const char *output_text(json_t *r)
{
    json_t *out = json_object_get(r, "output");
    for (size_t i = 0; i < json_array_size(out); i++) {
        json_t *it = json_array_get(out, i);
        if (!strcmp(json_string_value(json_object_get(it, "type")), "message"))
            return json_string_value(json_object_get(json_array_get(json_object_get(it, "content"), 0), "text"));
    }
    return "";
}

static json_int_t usage(json_t *o, const char *k) { return json_integer_value(json_object_get(json_object_get(o, "usage"), k)); }

static const char *chat_text(json_t *c)
{
    return json_string_value(json_object_get(json_object_get(json_array_get(json_object_get(c, "choices"), 0), "message"), "content"));
}

static double metric_of(const char *name)
{
    char *out = NULL;
    ms_st_http(&srv, NULL, "/metrics", NULL, &out, NULL);
    char key[256];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = out ? strstr(out, key) : NULL;
    double v = p ? atof(p + strlen(key)) : -1;
    free(out);
    return v;
}

static void check_equal_chat(const char *sampling)
{
    char rb[1200], cb[1200];
    snprintf(rb, sizeof rb, "{\"model\":\"m\",\"instructions\":\"Be brief.\",\"input\":[{\"role\":\"user\",\"content\":\"Tell me a "
             "story.\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Once.\"}]},{\"type\":\"message\","
             "\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"More.\"}]}],\"max_output_tokens\":12,%s}", sampling);
    snprintf(cb, sizeof cb, "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\","
             "\"content\":\"Tell me a story.\"},{\"role\":\"assistant\",\"content\":\"Once.\"},{\"role\":\"user\",\"content\":"
             "\"More.\"}],\"max_tokens\":12,%s}", sampling);
    json_t *r = post("/v1/responses", rb, 200), *c = post("/v1/chat/completions", cb, 200);
    const char *ct = chat_text(c);
    T_CHECK(r && c && ct && !strcmp(output_text(r), ct) && usage(r, "input_tokens") == usage(c, "prompt_tokens") &&
                usage(r, "output_tokens") == usage(c, "completion_tokens") &&
                !strcmp(json_string_value(json_object_get(r, "object")), "response") &&
                !strncmp(json_string_value(json_object_get(r, "id")), "resp_", 5),
            "/v1/responses (%s) = /v1/chat/completions of the same conversation: text and tokens", sampling);
    /* streamed: the deltas add up, response.completed holds the same */
    char sb[1300], *sse = NULL;
    snprintf(sb, sizeof sb, "%.*s,\"stream\":true}", (int)strlen(rb) - 1, rb);
    int st = ms_st_http(&srv, NULL, "/v1/responses", sb, &sse, NULL);
    ms_sbuf t = {0};
    json_t *fin = NULL;
    int seq = 0, bad = 0;
    for (const char *p = sse; p && (p = strstr(p, "event: "));) {
        const char *d = strstr(p, "\ndata: "), *end = d ? strstr(d, "\n\n") : NULL;
        if (!end) {
            bad = 1;
            break;
        }
        json_t *e = json_loadb(d + 7, (size_t)(end - d - 7), 0, NULL);
        const char *ty = json_string_value(json_object_get(e, "type"));
        if (!ty || json_integer_value(json_object_get(e, "sequence_number")) != seq++) bad = 1;
        if (ty && !strcmp(ty, "response.output_text.delta")) ms_sbuf_adds(&t, json_string_value(json_object_get(e, "delta")));
        if (ty && (!strcmp(ty, "response.completed") || !strcmp(ty, "response.incomplete")))
            fin = json_incref(json_object_get(e, "response"));
        json_decref(e);
        p = end;
    }
    T_CHECK(st == 200 && !bad && fin && ct && !strcmp(t.s ? t.s : "", ct) && !strcmp(output_text(fin), ct) &&
                usage(fin, "output_tokens") == usage(c, "completion_tokens"),
            "/v1/responses streamed (%s): numbered events whose deltas add up to the chat's text, the last holding it", sampling);
    json_decref(fin);
    ms_sbuf_free(&t);
    free(sse);
    json_decref(r);
    json_decref(c);
}

/* A follow-up by previous_response_id: the chat of the whole conversation (the earlier answer as
 * the assistant's turn), prefilled from the kept state of the first turn. */
static void check_follow_up(void)
{
    json_t *r1 = post("/v1/responses", "{\"input\":\"Tell me a story.\",\"max_output_tokens\":6,\"temperature\":0}", 200);
    const char *id = json_string_value(json_object_get(r1, "id")), *a1 = output_text(r1);
    double before = metric_of("moestream_prefix_cache_tokens_reused_total");
    char b[600], cb[1600];
    snprintf(b, sizeof b, "{\"input\":\"More.\",\"previous_response_id\":\"%s\",\"max_output_tokens\":6,\"temperature\":0}",
             id ? id : "");
    json_t *r2 = post("/v1/responses", b, 200);
    double reused = metric_of("moestream_prefix_cache_tokens_reused_total") - before;
    json_t *q = json_pack("{s:[{s:s,s:s},{s:s,s:s},{s:s,s:s}],s:i,s:i}", "messages", "role", "user", "content",
                          "Tell me a story.", "role", "assistant", "content", a1 ? a1 : "", "role", "user", "content", "More.",
                          "max_tokens", 6, "temperature", 0);
    char *qs = json_dumps(q, JSON_COMPACT);
    snprintf(cb, sizeof cb, "%s", qs);
    free(qs);
    json_decref(q);
    json_t *c = post("/v1/chat/completions", cb, 200);
    T_CHECK(r2 && c && chat_text(c) && !strcmp(output_text(r2), chat_text(c)) &&
                usage(r2, "input_tokens") == usage(c, "prompt_tokens") &&
                !strcmp(json_string_value(json_object_get(r2, "previous_response_id")), id ? id : ""),
            "a follow-up by previous_response_id = the chat of the whole conversation (%lld prompt tokens)",
            (long long)usage(r2, "input_tokens"));
    T_CHECK(reused >= (double)usage(r1, "input_tokens"),
            "the follow-up started from the first turn's kept state: %g tokens not prefilled (its prompt had %lld)", reused,
            (long long)usage(r1, "input_tokens"));
    json_decref(r1);
    json_decref(r2);
    json_decref(c);
    /* store false: nothing to follow */
    json_t *r3 = post("/v1/responses", "{\"input\":\"x\",\"max_output_tokens\":2,\"store\":false}", 200);
    snprintf(b, sizeof b, "{\"input\":\"y\",\"previous_response_id\":\"%s\"}", json_string_value(json_object_get(r3, "id")));
    json_t *e = post("/v1/responses", b, 404);
    json_t *er = json_object_get(e, "error");
    T_CHECK(r3 && json_is_false(json_object_get(r3, "store")) &&
                !strcmp(json_string_value(json_object_get(er, "code")), "previous_response_not_found") &&
                !strcmp(json_string_value(json_object_get(er, "param")), "previous_response_id"),
            "store false: kept nowhere, its follow-up is 404 previous_response_not_found");
    json_decref(r3);
    json_decref(e);
}

static void check_errors(void)
{
    static const struct {
        const char *body, *param;
    } bad[] = {
        {"{\"model\":\"m\"}", "input"},
        {"{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"a\",\"schema\":{\"pattern\":\"x\"}}}}",
         "response_format"},
        {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"http://x\"}]}]}", "input"},
        {"{\"input\":\"x\",\"tools\":[{\"type\":\"file_search\"}]}", "tools"},
        {"{\"input\":\"x\",\"temperature\":\"hot\"}", "temperature"},
        {"{\"input\":\"x\",\"tool_choice\":\"required\"}",
         "tool_choice"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *o = post("/v1/responses", bad[i].body, 400);
        const char *p = json_string_value(json_object_get(json_object_get(o, "error"), "param"));
        T_CHECK(o && p && !strcmp(p, bad[i].param), "bad request %zu: 400 naming %s (%s)", i, bad[i].param, p ? p : "-");
        json_decref(o);
    }
}

int main(void)
{
    ms_log_set_level(0);
    if (ms_t_run("curl --version >/dev/null 2>&1", NULL) != 0) {
        ms_t_skip("SKIP: curl is not installed (deploy/install-deps.sh installs it)");
        return ms_t_done();
    }
    snprintf(tmp, sizeof tmp, "%s", ms_t_tmpdir("serve-responses"));
    snprintf(dir, sizeof dir, "%.1024s/m", tmp);
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    T_CHECK(ms_synth_write(dir, &sh, 11) == 0, "synth tiny: %s", ms_err_msg());
    char extra[1400];
    snprintf(extra, sizeof extra, "--max-batch 4 --max-context 256 --prefix-cache 64M --state-cache %s/states", tmp);
    if (ms_st_start(&srv, tmp, dir, extra) == 0) {
        check_equal_chat("\"temperature\":0");
        check_equal_chat("\"temperature\":0.9,\"top_p\":0.9");
        check_follow_up();
        check_errors();
        T_CHECK(ms_st_stop(&srv) == 0, "SIGTERM: exit 0");
    }
    return ms_t_done();
}
