/* test_serve_messages: POST /v1/messages (Anthropic's Messages API) against `moestream serve`:
 * the answer of a conversation equals the chat completion of the same conversation, whole and
 * streamed; stop sequences, count_tokens, errors in Anthropic's shape, the x-api-key header. */
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

#define CONV "\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story.\"},{\"role\":\"assistant\",\"content\":\"Once.\"}," \
             "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"More.\"}]}]"
#define CHAT_CONV "\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Tell me a story.\"}," \
                  "{\"role\":\"assistant\",\"content\":\"Once.\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"More.\"}]}]"

static json_t *post(const char *args, const char *path, const char *body, int want)
{
    char *out = NULL;
    int st = ms_st_http(&srv, args, path, body, &out, NULL);
    json_t *o = out ? json_loads(out, JSON_ALLOW_NUL, NULL) : NULL;
    T_CHECK(st == want && o, "%s %.200s: %d (want %d) %.300s", path, body, st, want, out ? out : "");
    free(out);
    return o;
}

static const char *text0(json_t *m)
{
    json_t *c = json_object_get(m, "content");
    for (size_t i = 0; i < json_array_size(c); i++)
        if (!strcmp(json_string_value(json_object_get(json_array_get(c, i), "type")), "text"))
            return json_string_value(json_object_get(json_array_get(c, i), "text"));
    return "";
}

static json_int_t usage(json_t *o, const char *k) { return json_integer_value(json_object_get(json_object_get(o, "usage"), k)); }

/* A streamed answer replayed as a client does: its text, stop reason and output tokens; 0 when
 * every event is well formed and in order (message_start first, message_stop last). */
static int replay(const char *sse, ms_sbuf *text, const char **reason, json_int_t *out_tokens, char *stop_seq, size_t sn)
{
    static char why[64];
    int i = 0, last_stop = 0;
    *reason = NULL;
    for (const char *p = sse; (p = strstr(p, "event: ")); i++) {
        const char *d = strstr(p, "\ndata: "), *end = d ? strstr(d, "\n\n") : NULL;
        if (!end) return 1;
        json_t *e = json_loadb(d + 7, (size_t)(end - d - 7), 0, NULL);
        const char *ty = json_string_value(json_object_get(e, "type"));
        if (!ty || strncmp(p + 7, ty, strlen(ty)) || (i == 0 && strcmp(ty, "message_start"))) {
            json_decref(e);
            return 2;
        }
        last_stop = !strcmp(ty, "message_stop");
        json_t *dl = json_object_get(e, "delta");
        if (!strcmp(ty, "content_block_delta") && !strcmp(json_string_value(json_object_get(dl, "type")), "text_delta"))
            ms_sbuf_adds(text, json_string_value(json_object_get(dl, "text")));
        if (!strcmp(ty, "message_delta")) {
            snprintf(why, sizeof why, "%s", json_string_value(json_object_get(dl, "stop_reason")));
            *reason = why;
            const char *ss = json_string_value(json_object_get(dl, "stop_sequence"));
            snprintf(stop_seq, sn, "%s", ss ? ss : "");
            *out_tokens = usage(e, "output_tokens");
        }
        json_decref(e);
        p = end;
    }
    return last_stop ? 0 : 3;
}

/* The messages answer = the chat completion of the same conversation (greedy, then seeded). */
static void check_equal_chat(const char *sampling)
{
    char mb[1200], cb[1200];
    snprintf(mb, sizeof mb, "{\"model\":\"m\",\"max_tokens\":12,\"system\":\"Be brief.\",%s,%s}", CONV, sampling);
    snprintf(cb, sizeof cb, "{\"model\":\"m\",\"max_tokens\":12,%s,%s}", CHAT_CONV, sampling);
    json_t *m = post(NULL, "/v1/messages", mb, 200), *c = post(NULL, "/v1/chat/completions", cb, 200);
    json_t *ch = json_array_get(json_object_get(c, "choices"), 0);
    const char *ct = json_string_value(json_object_get(json_object_get(ch, "message"), "content"));
    const char *fin = json_string_value(json_object_get(ch, "finish_reason"));
    const char *sr = json_string_value(json_object_get(m, "stop_reason"));
    T_CHECK(m && c && ct && !strcmp(text0(m), ct) && usage(m, "input_tokens") == usage(c, "prompt_tokens") &&
                usage(m, "output_tokens") == usage(c, "completion_tokens") && sr && fin &&
                !strcmp(sr, !strcmp(fin, "length") ? "max_tokens" : "end_turn") &&
                !strcmp(json_string_value(json_object_get(m, "type")), "message") &&
                !strncmp(json_string_value(json_object_get(m, "id")), "msg_", 4),
            "/v1/messages (%s) = /v1/chat/completions of the same conversation: text, tokens, stop_reason %s", sampling,
            sr ? sr : "-");
    /* streamed: the deltas add up to the same text */
    char sb[1300], *sse = NULL;
    snprintf(sb, sizeof sb, "{\"model\":\"m\",\"max_tokens\":12,\"stream\":true,\"system\":\"Be brief.\",%s,%s}", CONV, sampling);
    int st = ms_st_http(&srv, NULL, "/v1/messages", sb, &sse, NULL);
    ms_sbuf t = {0};
    const char *reason = NULL;
    json_int_t ot = -1;
    char seq[64];
    int rc = sse ? replay(sse, &t, &reason, &ot, seq, sizeof seq) : -1;
    T_CHECK(st == 200 && rc == 0 && ct && !strcmp(t.s ? t.s : "", ct) && reason && sr && !strcmp(reason, sr) &&
                ot == usage(m, "output_tokens"),
            "/v1/messages streamed (%s): well-formed events (%d) whose text deltas add up to the whole answer", sampling, rc);
    ms_sbuf_free(&t);
    free(sse);
    /* a stop sequence from inside the answer: cut there, stop_reason stop_sequence naming it */
    size_t at = 1; /* two plain ASCII characters after the answer's first */
    while (ct && ct[at] && ct[at + 1] &&
           !((unsigned char)ct[at] > 32 && (unsigned char)ct[at] < 127 && (unsigned char)ct[at + 1] > 32 &&
             (unsigned char)ct[at + 1] < 127 && !strchr("\"\\", ct[at]) && !strchr("\"\\", ct[at + 1])))
        at++;
    T_CHECK(ct && ct[at] && ct[at + 1], "the answer (%s) holds two plain characters to stop at", ct ? ct : "-");
    if (ct && ct[at] && ct[at + 1]) {
        char stop[3] = {ct[at], ct[at + 1], 0}, qb[1400];
        {
            snprintf(qb, sizeof qb, "{\"model\":\"m\",\"max_tokens\":12,\"system\":\"Be brief.\",\"stop_sequences\":[\"%s\"],%s,%s}",
                     stop, CONV, sampling);
            json_t *q = post(NULL, "/v1/messages", qb, 200);
            const char *qt = text0(q), *first = strstr(ct, stop);
            T_CHECK(q && first && strlen(qt) == (size_t)(first - ct) && !strncmp(qt, ct, strlen(qt)) &&
                        !strcmp(json_string_value(json_object_get(q, "stop_reason")), "stop_sequence") &&
                        !strcmp(json_string_value(json_object_get(q, "stop_sequence")), stop),
                    "stop_sequences [\"%s\"]: the text cut before it, stop_reason stop_sequence naming it (%s)", stop, qt);
            json_decref(q);
        }
    }
    /* count_tokens: the prompt the request renders to */
    char kb[1200];
    snprintf(kb, sizeof kb, "{\"model\":\"m\",\"system\":\"Be brief.\",%s}", CONV);
    json_t *k = post(NULL, "/v1/messages/count_tokens", kb, 200);
    T_CHECK(k && json_integer_value(json_object_get(k, "input_tokens")) == usage(c, "prompt_tokens"),
            "count_tokens: input_tokens = the chat's prompt_tokens (%lld)", (long long)usage(c, "prompt_tokens"));
    json_decref(k);
    json_decref(m);
    json_decref(c);
}

static void check_errors(void)
{
    static const struct {
        const char *body, *type, *says;
        int status;
    } bad[] = {
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "invalid_request_error", "max_tokens", 400},
        {"{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}",
         "invalid_request_error", "image", 400},
        {"{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":\"hot\"}", "invalid_request_error",
         "temperature", 400},
        {"{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":{\"type\":\"some\"},\"tools\":"
         "[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}]}",
         "invalid_request_error", "tool_choice", 400},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *o = post(NULL, "/v1/messages", bad[i].body, bad[i].status);
        json_t *e = json_object_get(o, "error");
        const char *ty = json_string_value(json_object_get(e, "type")), *msg = json_string_value(json_object_get(e, "message"));
        T_CHECK(o && !strcmp(json_string_value(json_object_get(o, "type")), "error") && ty && !strcmp(ty, bad[i].type) && msg &&
                    strstr(msg, bad[i].says),
                "bad request %zu: %d %s naming %s (%s)", i, bad[i].status, bad[i].type, bad[i].says, msg ? msg : "-");
        json_decref(o);
    }
    char *out = NULL;
    int st = ms_st_http(&srv, "-X GET", "/v1/messages", NULL, &out, NULL);
    T_CHECK(st == 405 && out && strstr(out, "invalid_request_error"), "GET /v1/messages: 405 in Anthropic's shape (%d)", st);
    free(out);
    json_t *ok = post(NULL, "/v1/messages", "{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"still here?\"}]}", 200);
    json_decref(ok);
}

/* With an API key: x-api-key (Anthropic's clients) and Bearer (OpenAI's) both let in, others not. */
static void check_keys(void)
{
    const char *body = "{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    json_t *a = post("-H 'x-api-key: messages-key-0123'", "/v1/messages", body, 200);
    json_t *b = post("-H 'Authorization: Bearer messages-key-0123'", "/v1/messages", body, 200);
    json_t *c = post("-H 'x-api-key: messages-key-0124'", "/v1/messages", body, 401);
    json_t *d = post(NULL, "/v1/messages", body, 401);
    json_t *e = post("-H 'x-api-key: messages-key-0123'", "/v1/chat/completions",
                     "{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 200);
    const char *ty = json_string_value(json_object_get(json_object_get(c, "error"), "type"));
    T_CHECK(a && b && e && ty && !strcmp(ty, "authentication_error") && d,
            "x-api-key and Bearer both let in (also on the OpenAI endpoints); a wrong or missing key: 401 "
            "authentication_error");
    json_decref(a);
    json_decref(b);
    json_decref(c);
    json_decref(d);
    json_decref(e);
}

int main(void)
{
    ms_log_set_level(0);
    if (ms_t_run("curl --version >/dev/null 2>&1", NULL) != 0) {
        ms_t_skip("SKIP: curl is not installed (deploy/install-deps.sh installs it)");
        return ms_t_done();
    }
    snprintf(tmp, sizeof tmp, "%s", ms_t_tmpdir("serve-messages"));
    snprintf(dir, sizeof dir, "%.1024s/m", tmp);
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    T_CHECK(ms_synth_write(dir, &sh, 11) == 0, "synth tiny: %s", ms_err_msg());
    if (ms_st_start(&srv, tmp, dir, "--max-batch 4 --max-context 256") == 0) {
        check_equal_chat("\"temperature\":0");
        check_equal_chat("\"temperature\":0.9,\"top_p\":0.9,\"top_k\":40");
        check_errors();
        T_CHECK(ms_st_stop(&srv) == 0, "SIGTERM: exit 0");
    }
    char key[1200], extra[1300];
    snprintf(key, sizeof key, "%s/key", tmp);
    FILE *f = fopen(key, "w");
    if (f) {
        fputs("messages-key-0123\n", f);
        fclose(f);
    }
    snprintf(extra, sizeof extra, "--api-key-file %s", key);
    if (ms_st_start(&srv, tmp, dir, extra) == 0) {
        check_keys();
        T_CHECK(ms_st_stop(&srv) == 0, "SIGTERM: exit 0");
    }
    return ms_t_done();
}
