/* test_serve: `moestream serve` end to end with curl: answers equal `moestream run` on each
 * request alone (completions and chats, greedy and seeded), 8 concurrent requests equal 8
 * sequential ones, SSE chunks add up to the whole answer, 401/400/413/429 with the server still
 * serving, a client that disconnects frees its place, deadlines, and SIGTERM drains, exit 0. */
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ms_clock.h"
#include "ms_err.h"
#include "ms_sreq.h"
#include "ms_synth.h"
#include "ms_test.h"

#define KEY "test-key-0123456789"

static char dir[1100], noeos[1100], tmp[1024], bin[1100];

/* A copy of the model without an eos id: generations that run to max_tokens whatever comes. */
static void make_noeos(void)
{
    snprintf(noeos, sizeof noeos, "%.1024s/m-noeos", tmp);
    T_CHECK(ms_t_runf(NULL, NULL, "cp -r %s %s", dir, noeos) == 0, "copy the model");
    const char *cfg = ms_t_path(noeos, "config.json");
    json_t *c = json_load_file(cfg, 0, NULL);
    T_CHECK(c && json_object_del(json_object_get(c, "text_config"), "eos_token_id") == 0 && json_dump_file(c, cfg, 0) == 0,
            "drop the eos id of the copy");
    json_decref(c);
}

#define CHAT1 "<|im_system|>system<|im_middle|>Be brief.<|im_end|><|im_user|>user<|im_middle|>Name a color.<|im_end|><|im_assistant|>assistant<|im_middle|>"
#define CHAT2 "<|im_user|>user<|im_middle|>Tell me about \"quotes\" and\nnewlines.<|im_end|><|im_assistant|>assistant<|im_middle|>"

/* A request: its endpoint, body, and the `run` options that run it alone. */
typedef struct {
    const char *path, *body, *run;
} req;

static const req reqs[] = {
    {"/v1/completions", "{\"model\":\"m\",\"prompt\":\"The weather today is\",\"max_tokens\":6}", "--prompt 'The weather today is' -n 6"},
    {"/v1/completions", "{\"prompt\":[5,17,200,33,9,1,2,3,4,5,6,7],\"max_tokens\":9,\"temperature\":0.9,\"seed\":7}",
     "--ids 5,17,200,33,9,1,2,3,4,5,6,7 -n 9 --temperature 0.9 --seed 7"},
    {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":3,\"temperature\":0.7,\"top_p\":0.8,\"seed\":-5}",
     "--prompt a -n 3 --temperature 0.7 --top-p 0.8 --seed -5"},
    /* what clients send by default, each at its neutral value: accepted, the same answer */
    {"/v1/completions", "{\"prompt\":[300],\"max_tokens\":12,\"n\":1,\"logprobs\":0,\"echo\":false,\"presence_penalty\":0,"
     "\"frequency_penalty\":0,\"best_of\":1,\"logit_bias\":{},\"suffix\":null}", "--ids 300 -n 12"},
    {"/v1/chat/completions",
     "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Name a color.\"}],\"max_tokens\":7,\"reasoning_effort\":\"low\"}",
     "--prompt-file CHAT1 --allow-special -n 7"},
    {"/v1/chat/completions",
     "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me about \\\"quotes\\\" and\\nnewlines.\"}],\"max_tokens\":8,\"temperature\":1.0,\"seed\":99,"
     "\"logprobs\":false,\"top_logprobs\":0,\"response_format\":{\"type\":\"text\"},\"presence_penalty\":0.0,\"store\":false,"
     "\"parallel_tool_calls\":true,\"service_tier\":\"auto\",\"metadata\":{\"a\":\"b\"}}",
     "--prompt-file CHAT2 --allow-special -n 8 --temperature 1.0 --seed 99"},
    {"/v1/completions", "{\"prompt\":\"It was the best of times, it was the worst of times\",\"max_tokens\":5,\"temperature\":0.6,\"top_p\":0.95,\"seed\":3}",
     "--prompt 'It was the best of times, it was the worst of times' -n 5 --temperature 0.6 --top-p 0.95 --seed 3"},
    {"/v1/completions", "{\"prompt\":[11,22,33,44,55,66,77,88,99,110],\"max_tokens\":10,\"temperature\":0.5,\"seed\":1,\"stream\":false}",
     "--ids 11,22,33,44,55,66,77,88,99,110 -n 10 --temperature 0.5 --seed 1"},
    /* newer clients: one prompt in an array (LangChain's completions class), prompt_cache_key,
     * safety_identifier, verbosity at its default: accepted, the same answers */
    {"/v1/completions", "{\"prompt\":[\"The weather today is\"],\"max_tokens\":6,\"prompt_cache_key\":\"k1\",\"safety_identifier\":\"u1\"}",
     "--prompt 'The weather today is' -n 6"},
    {"/v1/chat/completions",
     "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Name a color.\"}],\"max_tokens\":7,"
     "\"verbosity\":\"medium\",\"prompt_cache_key\":\"k2\",\"safety_identifier\":\"u2\"}",
     "--prompt-file CHAT1 --allow-special -n 7"},
};
#define NREQ ((int)(sizeof reqs / sizeof reqs[0]))

static json_t *ref_ids[NREQ];
static json_t *ref_text[NREQ]; /* JSON strings: texts may hold U+0000 */

static void make_refs(void)
{
    ms_t_write_file(ms_t_path(tmp, "chat1.txt"), CHAT1);
    ms_t_write_file(ms_t_path(tmp, "chat2.txt"), CHAT2);
    for (int i = 0; i < NREQ; i++) {
        char args[1024];
        snprintf(args, sizeof args, "%s", reqs[i].run);
        char *p;
        if ((p = strstr(args, "CHAT1")) || (p = strstr(args, "CHAT2"))) {
            char rest[1024];
            snprintf(rest, sizeof rest, "%s", p + 5);
            snprintf(p, sizeof args - (size_t)(p - args), "%s/chat%c.txt%s", tmp, p[4], rest);
        }
        char *out = NULL;
        int st = ms_t_runf(&out, NULL, "%s run --model %s %s --stop-at-eos --json --quiet --ram-budget 2G", bin, dir, args);
        json_t *o = out ? json_loads(out, JSON_ALLOW_NUL, NULL) : NULL;
        ref_ids[i] = o ? json_incref(json_object_get(o, "generated_ids")) : NULL;
        json_t *t = o ? json_object_get(o, "text") : NULL;
        ref_text[i] = json_is_string(t) ? json_incref(t) : json_string("");
        T_CHECK(st == 0 && ref_ids[i], "run request %d alone: exit %d", i, st);
        json_decref(o);
        free(out);
    }
}

/* ---- the server and curl ---- */

static ms_t_worker srv;
static char url[256];

static int start_server_env(const char *model, const char *extra, const char *env);
static int start_server(const char *model, const char *extra) { return start_server_env(model, extra, NULL); }

static int start_server_env(const char *model, const char *extra, const char *env)
{
    static int k;
    char log[1100], cmd[4096];
    snprintf(log, sizeof log, "%s/serve-%d.log", tmp, k++);
    snprintf(cmd, sizeof cmd, "--model %s --listen 127.0.0.1:0 --ram-budget 2G --api-key-file %s/key %s", model, tmp, extra);
    const char *argv[40];
    int n = 0;
    argv[n++] = bin;
    argv[n++] = "serve";
    static char words[4096];
    snprintf(words, sizeof words, "%s", cmd);
    for (char *w = strtok(words, " "); w && n < 38; w = strtok(NULL, " ")) argv[n++] = w;
    argv[n] = NULL;
    ms_t_worker_opts o = {log, env, NULL, 60};
    int st = ms_t_worker_start(&srv, argv, &o);
    snprintf(url, sizeof url, "%.200s", srv.ep);
    T_CHECK(st == 0 && !strncmp(url, "http://127.0.0.1:", 17), "serve %s starts and names its address (%s)", extra, url);
    return st;
}

/* curl with the key (unless noauth) on path; the body from a file. Returns the HTTP status;
 * the answer's body into *out (malloc'ed) when out != NULL. */
static int http(const char *path, const char *body, const char *extra, char **out)
{
    static int k;
    char bf[1100], of[1100];
    snprintf(bf, sizeof bf, "%s/body-%d.json", tmp, k);
    snprintf(of, sizeof of, "%s/out-%d.txt", tmp, k++);
    if (body) ms_t_write_file(bf, body);
    char *code = NULL;
    int st = ms_t_runf(&code, NULL, "curl -s -N -o %s -w '%%{http_code}' %s %s%s%s '%s%s'", of,
                       extra ? extra : "-H 'Authorization: Bearer " KEY "'", body ? "--data-binary @" : "", body ? bf : "",
                       body ? " -H 'Content-Type: application/json'" : "", url, path);
    int status = st == 0 && code ? atoi(code) : -st;
    free(code);
    if (out) *out = ms_t_read_file(of, NULL);
    return status;
}

/* The whole answer's token_ids and text ("" for a null), or NULL. */
static json_t *answer_ids(const char *body, int chat, json_t **text)
{
    json_t *o = body ? json_loads(body, JSON_ALLOW_NUL, NULL) : NULL;
    json_t *c = json_array_get(json_object_get(o, "choices"), 0);
    json_t *ids = json_incref(json_object_get(c, "token_ids"));
    json_t *t = chat ? json_object_get(json_object_get(c, "message"), "content") : json_object_get(c, "text");
    if (text) *text = json_is_string(t) ? json_incref(t) : json_string("");
    json_decref(o);
    return ids;
}

/* SSE events: concatenated token_ids and texts; 1 if well formed and ending in [DONE]. */
static int parse_sse(const char *s, int chat, json_t **ids, json_t **text, char *finish, size_t fn)
{
    *ids = json_array();
    size_t cap = 4096, n = 0;
    char *tb = calloc(1, cap);
    finish[0] = 0;
    int done = 0, ok = 1;
    for (const char *p = s; p && *p;) {
        const char *e = strstr(p, "\n\n");
        if (!e) {
            ok = 0;
            break;
        }
        if (strncmp(p, "data: ", 6) != 0 || done) ok = 0;
        if (!strncmp(p, "data: [DONE]", 12)) {
            done = 1;
        } else {
            json_t *o = json_loadb(p + 6, (size_t)(e - p - 6), JSON_ALLOW_NUL, NULL);
            json_t *c = json_array_get(json_object_get(o, "choices"), 0);
            if (!o) ok = 0;
            if (c) {
                json_array_extend(*ids, json_object_get(c, "token_ids"));
                json_t *t = chat ? json_object_get(json_object_get(c, "delta"), "content") : json_object_get(c, "text");
                const char *ts = json_is_string(t) ? json_string_value(t) : "";
                size_t tl = json_is_string(t) ? json_string_length(t) : 0;
                if (n + tl + 1 > cap) tb = realloc(tb, cap = (n + tl) * 2 + 1);
                memcpy(tb + n, ts, tl);
                n += tl;
                json_t *f = json_object_get(c, "finish_reason");
                if (json_is_string(f)) snprintf(finish, fn, "%s", json_string_value(f));
            }
            json_decref(o);
        }
        p = e + 2;
    }
    *text = json_stringn(tb, n);
    free(tb);
    return ok && done;
}

static int is_chat(int i) { return strstr(reqs[i].path, "chat") != NULL; }

/* Every request, one after another: the same ids and text as run. */
static void check_sequential(json_t **got)
{
    for (int i = 0; i < NREQ; i++) {
        char *body = NULL;
        json_t *text = NULL;
        int st = http(reqs[i].path, reqs[i].body, NULL, &body);
        got[i] = answer_ids(body, is_chat(i), &text);
        T_CHECK(st == 200 && json_equal(got[i], ref_ids[i]) && json_equal(text, ref_text[i]),
                "request %d alone over HTTP: status %d, the ids and text of run", i, st);
        free(body);
        json_decref(text);
    }
}

/* All 8 at once (one curl each, in parallel): the same answers as one after another. */
static void check_concurrent(json_t **seq)
{
    char cmd[16384];
    int o = snprintf(cmd, sizeof cmd, "cd %s; ", tmp);
    for (int i = 0; i < NREQ; i++) {
        char bf[1100];
        snprintf(bf, sizeof bf, "%s/conc-body-%d.json", tmp, i);
        ms_t_write_file(bf, reqs[i].body);
        o += snprintf(cmd + o, sizeof cmd - (size_t)o,
                      "curl -s -o conc-%d.json -H 'Authorization: Bearer " KEY "' --data-binary @%s '%s%s' & ", i, bf, url,
                      reqs[i].path);
    }
    snprintf(cmd + o, sizeof cmd - (size_t)o, "wait");
    T_CHECK(ms_t_run(cmd, NULL) == 0, "8 concurrent curls ran");
    for (int i = 0; i < NREQ; i++) {
        char name[64];
        snprintf(name, sizeof name, "conc-%d.json", i);
        char *body = ms_t_read_file(ms_t_path(tmp, name), NULL);
        json_t *ids = answer_ids(body, is_chat(i), NULL);
        T_CHECK(ids && json_equal(ids, seq[i]) && json_equal(ids, ref_ids[i]),
                "request %d among 8 concurrent ones: the ids of the sequential request and of run", i);
        json_decref(ids);
        free(body);
    }
}

/* Streamed: the chunks add up to the whole answer; curl -N, events end with [DONE]. */
static void check_stream(json_t **seq)
{
    for (int i = 0; i < NREQ; i++) {
        json_t *b = json_loads(reqs[i].body, 0, NULL);
        json_object_set_new(b, "stream", json_true());
        if (i % 2) json_object_set_new(b, "stream_options", json_pack("{s:b}", "include_usage", 1));
        char *body = json_dumps(b, JSON_COMPACT);
        json_decref(b);
        char *out = NULL, finish[16];
        int st = http(reqs[i].path, body, NULL, &out);
        json_t *ids = NULL, *text = NULL;
        int ok = parse_sse(out, is_chat(i), &ids, &text, finish, sizeof finish);
        T_CHECK(st == 200 && ok && json_equal(ids, seq[i]) && json_equal(text, ref_text[i]) && finish[0],
                "request %d streamed: status %d, SSE well formed (%d) ending in [DONE], chunks add up to the whole "
                "answer (finish %s)",
                i, st, ok, finish);
        if (i % 2) T_CHECK(out && strstr(out, "\"usage\":{\"prompt_tokens\""), "request %d: include_usage gives a usage chunk", i);
        json_decref(ids);
        json_decref(text);
        free(out);
        free(body);
    }
}

static void check_errors(void)
{
    char *out = NULL;
    const char *good = reqs[3].body;
    int st = http("/v1/completions", good, "-H 'X-None: 1'", &out);
    T_CHECK(st == 401 && out && strstr(out, "invalid_api_key"), "no key: 401 (%d)", st);
    free(out);
    st = http("/v1/completions", good, "-H 'Authorization: Bearer test-key-0123456788'", NULL);
    T_CHECK(st == 401, "a wrong key: 401 (%d)", st);
    st = http("/v1/models", NULL, "-H 'Authorization: Bearer " KEY "x'", NULL);
    T_CHECK(st == 401, "a longer key: 401 (%d)", st);
    st = http("/health", NULL, "-H 'X-None: 1'", &out);
    T_CHECK(st == 200 && out && strstr(out, "\"ok\""), "/health needs no key: %d %s", st, out ? out : "");
    free(out);
    st = http("/v1/models", NULL, NULL, &out);
    T_CHECK(st == 200 && out && strstr(out, "\"id\":\"m\"") && strstr(out, "\"context_length\":"),
            "/v1/models names the model and its context length: %d %s", st, out ? out : "");
    free(out);
    st = http("/v1/models/m", NULL, NULL, &out); /* the client's models.retrieve */
    T_CHECK(st == 200 && out && strstr(out, "\"id\":\"m\"") && strstr(out, "\"object\":\"model\"") && !strstr(out, "\"list\""),
            "/v1/models/m is the model object: %d %s", st, out ? out : "");
    free(out);
    st = http("/v1/models/other", NULL, NULL, &out);
    T_CHECK(st == 404 && out && strstr(out, "model_not_found") && strstr(out, "\"param\":\"model\""),
            "/v1/models/other: 404 model_not_found: %d %s", st, out ? out : "");
    free(out);
    static const struct {
        const char *path, *body, *code;
        int status;
        const char *param; /* the error's "param", when the case checks it */
    } bad[] = {
        {"/v1/completions", "{\"prompt\":[1,2,", "invalid_json", 400},
        /* the parser's message quotes the bad bytes, which are not UTF-8 (found by fuzz_request: the
         * answer could not be built and the server aborted) */
        {"/v1/completions", "{\"prompt\":\"hi \\u0\xd0\xa4" "9\"}", "invalid_json", 400},
        {"/v1/completions", "[1,2]", "invalid_request", 400},
        {"/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":\"many\"}", "invalid_request", 400},
        {"/v1/completions", "{\"prompt\":\"x\",\"temperature\":\"hot\"}", "invalid_request", 400},
        {"/v1/completions", "{\"prompt\":[1],\"top_p\":1e-300,\"temperature\":1,\"seed\":5}", "invalid_request", 400},
        {"/v1/completions", "{\"prompt\":\"x\",\"stream\":1}", "invalid_request", 400},
        {"/v1/completions", "{\"prompt\":\"x\",\"echo\":true}", "unsupported_value", 400, "echo"},
        {"/v1/completions", "{\"prompt\":\"x\",\"logprobs\":21}", "invalid_request", 400, "logprobs"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"presence_penalty\":2.5}",
         "invalid_request", 400, "presence_penalty"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}",
         "invalid_request", 400, "top_logprobs"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"99999\":1}}",
         "invalid_request", 400, "logit_bias"},
        {"/v1/completions", "{\"prompt\":\"x\",\"min_p\":1.5}", "invalid_request", 400, "min_p"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":"
         "\"json_schema\",\"json_schema\":{\"name\":\"s\",\"schema\":{\"type\":\"string\",\"format\":\"email\"}}}}",
         "invalid_request", 400, "response_format"},
        {"/v1/completions", "{\"prompt\":\"x\",\"frobnicate\":1}", "unsupported_field", 400, "frobnicate"},
        {"/v1/completions", "{\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "invalid_request", 400, "stop"},
        {"/v1/completions", "{\"prompt\":\"x\",\"temperature\":\"hot\"}", "invalid_request", 400, "temperature"},
        {"/v1/completions", "{\"prompt\":\"x\",\"n\":9}", "invalid_request", 400, "n"},
        {"/v1/completions", "{\"prompt\":[1,99999]}", "invalid_prompt", 400},
        {"/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":0}", "invalid_max_tokens", 400},
        {"/v1/completions", "{\"prompt\":[1,2],\"max_tokens\":200}", "context_length_exceeded", 400},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "invalid_prompt", 400, "messages"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}",
         "invalid_request", 400, "tool_choice"},
        /* tools for a Kimi tokenizer without the call markers (this synthetic one): said, not ignored */
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
         "\"function\",\"function\":{\"name\":\"f\",\"description\":\"d\"}}]}", "invalid_prompt", 400, "messages"},
        {"/v1/chat/completions", "{\"prompt\":\"x\"}", "unsupported_field", 400},
        {"/v1/embeddings", "{\"input\":\"x\"}", "not_found", 404},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        st = http(bad[i].path, bad[i].body, NULL, &out);
        json_t *o = out ? json_loads(out, 0, NULL) : NULL;
        json_t *e = json_object_get(o, "error");
        const char *code = json_string_value(json_object_get(e, "code"));
        const char *param = json_string_value(json_object_get(e, "param"));
        T_CHECK(st == bad[i].status && code && !strcmp(code, bad[i].code) && json_is_string(json_object_get(e, "message")) &&
                    (!bad[i].param || (param && !strcmp(param, bad[i].param))),
                "bad request %zu (%s): %d %s (param %s), got %d %s", i, bad[i].body, bad[i].status, bad[i].code,
                bad[i].param ? bad[i].param : "-", st, out ? out : "");
        json_decref(o);
        free(out);
    }
    /* a too-long prompt: prompt + max_tokens over --max-context */
    char big[2048] = "{\"prompt\":[";
    for (int i = 0; i < 130; i++) snprintf(big + strlen(big), sizeof big - strlen(big), "%s%d", i ? "," : "", i + 1);
    strcat(big, "],\"max_tokens\":1}");
    st = http("/v1/completions", big, NULL, &out);
    T_CHECK(st == 400 && out && strstr(out, "context_length_exceeded"), "a prompt longer than --max-context: 400 (%d)", st);
    free(out);
    /* a body over --max-body */
    char *huge = malloc(9000);
    memset(huge, ' ', 8999);
    huge[8999] = 0;
    memcpy(huge, "{\"prompt\":\"x\"}", 14);
    st = http("/v1/completions", huge, NULL, &out);
    T_CHECK(st == 413 && out && strstr(out, "body_too_large"), "a body over --max-body: 413 (%d)", st);
    free(out);
    free(huge);
    st = http("/v1/completions", "{\"prompt\":\"x\"}", "-X GET -H 'Authorization: Bearer " KEY "'", NULL);
    T_CHECK(st == 405, "GET on a POST endpoint: 405 (%d)", st);
    /* still serving */
    st = http(reqs[0].path, reqs[0].body, NULL, &out);
    json_t *ids = answer_ids(out, 0, NULL);
    T_CHECK(st == 200 && json_equal(ids, ref_ids[0]), "after the bad requests the server still answers right (%d)", st);
    json_decref(ids);
    free(out);
}

/* One metric's value from /metrics, or -1. */
static double metric(const char *name)
{
    char *out = NULL;
    http("/metrics", NULL, NULL, &out);
    double v = -1;
    char key[256];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = out ? strstr(out, key) : NULL;
    if (p) v = atof(p + strlen(key));
    free(out);
    return v;
}

static void check_metrics(void)
{
    char *out = NULL;
    int st = http("/metrics", NULL, NULL, &out);
    const char *names[] = {"moestream_requests_total{endpoint=\"completions\",code=\"200\"}", "moestream_generated_tokens_total",
                           "moestream_queue_depth", "moestream_batch_size", "moestream_bytes_read_total",
                           "moestream_expert_cache_hit_ratio", "moestream_time_to_first_token_seconds_bucket",
                           "moestream_time_per_token_seconds_count", "moestream_step_batch_size_bucket",
                           "moestream_pass_layers_done", "moestream_pass_rows", "moestream_pass_seconds_left"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        T_CHECK(st == 200 && out && strstr(out, names[i]), "/metrics has %s", names[i]);
    free(out);
    T_CHECK(metric("moestream_generated_tokens_total") > 0 && metric("moestream_bytes_read_total") > 0, "tokens and bytes counted");
    /* the concurrent requests shared steps: fewer steps with one sequence than steps */
    double one = -1, all = metric("moestream_step_batch_size_count");
    http("/metrics", NULL, NULL, &out);
    const char *p = out ? strstr(out, "moestream_step_batch_size_bucket{le=\"1\"} ") : NULL;
    if (p) one = atof(p + strlen("moestream_step_batch_size_bucket{le=\"1\"} "));
    free(out);
    T_CHECK(one >= 0 && all > one, "some steps carried more than one request (%g of %g steps had one)", one, all);
    /* the process, the build, the split of bytes read, the cache, latency and queue wait */
    double trunk = metric("moestream_bytes_read_trunk_total"), experts = metric("moestream_bytes_read_experts_total");
    /* experts >= 0: the model fits, so its experts are used in place from the page cache (mapped),
     * and what counts as read is what the page cache lacked: nothing once it is warm */
    T_CHECK(trunk >= 0 && experts >= 0 && trunk + experts == metric("moestream_bytes_read_total"),
            "bytes read split trunk %g + experts %g = the total", trunk, experts);
    T_CHECK(metric("process_resident_memory_bytes") > 1e6 && metric("process_cpu_seconds_total") > 0 &&
                metric("process_start_time_seconds") > 1.7e9,
            "process RSS, CPU seconds and start time");
    T_CHECK(metric("moestream_expert_cache_capacity_bytes") > 0 && metric("moestream_expert_cache_used_bytes") > 0 &&
                metric("moestream_expert_cache_used_bytes") <= metric("moestream_expert_cache_capacity_bytes") &&
                metric("moestream_expert_cache_evictions_total") >= 0,
            "expert cache capacity, use and evictions");
    T_CHECK(metric("moestream_request_duration_seconds_count") >= NREQ && metric("moestream_queue_wait_seconds_count") >= NREQ &&
                metric("moestream_workers") == 0 && metric("moestream_draft_tokens_total") >= 0,
            "request durations and queue waits counted (%g, %g)", metric("moestream_request_duration_seconds_count"),
            metric("moestream_queue_wait_seconds_count"));
    char *o2 = NULL;
    http("/metrics", NULL, NULL, &o2);
    T_CHECK(o2 && strstr(o2, "moestream_build_info{version=\"" MS_VERSION "\"} 1"), "build info names the version");
    free(o2);
}

/* A batch of 1 and no queue: a second request while one runs gets 429 + Retry-After; a client
 * that disconnects mid-stream frees the place for the next request. */
static void check_disconnect(void)
{
    if (start_server(noeos, "--max-batch 1 --max-queue 0 --max-context 40000") != 0) return;
    const char *longb = "{\"prompt\":[5,6,7],\"max_tokens\":39000,\"stream\":true}";
    ms_t_write_file(ms_t_path(tmp, "long.json"), longb);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd %s; (curl -s -N --max-time 1.5 -o long.out -H 'Authorization: Bearer " KEY "' --data-binary @long.json "
             "'%s/v1/completions'; echo $? > long.rc) >/dev/null 2>&1 &",
             tmp, url);
    ms_t_run(cmd, NULL);
    ms_t_sleep_ms(600);
    char *out = NULL;
    char hdr[1200];
    snprintf(hdr, sizeof hdr, "-D %s/h429.txt -H 'Authorization: Bearer " KEY "'", tmp);
    int st = http("/v1/completions", reqs[3].body, hdr, &out);
    char *h = ms_t_read_file(ms_t_path(tmp, "h429.txt"), NULL);
    T_CHECK(st == 429 && out && strstr(out, "queue_full") && h && strcasestr(h, "Retry-After: 1"),
            "full (batch 1, queue 0): 429 with Retry-After (%d)", st);
    free(h);
    free(out);
    for (int i = 0; i < 100 && !ms_t_file_has(ms_t_path(tmp, "long.rc"), "\n"); i++) ms_t_sleep_ms(50);
    T_CHECK(ms_t_file_has(ms_t_path(tmp, "long.rc"), "28"), "the long stream's client gave up (curl timeout, exit 28)");
    T_CHECK(ms_t_file_has(ms_t_path(tmp, "long.out"), "data: {"), "the long stream had started streaming");
    double c = -1;
    for (int i = 0; i < 50 && (c = metric("moestream_cancelled_total")) < 1; i++) ms_t_sleep_ms(50);
    T_CHECK(c == 1, "the disconnected stream was cancelled (moestream_cancelled_total %g)", c);
    double c499 = metric("moestream_requests_total{endpoint=\"completions\",code=\"499\"}");
    T_CHECK(c499 == 1, "/metrics counts the stream whose client left as code 499, not 200 (%g)", c499);
    st = http(reqs[3].path, reqs[3].body, NULL, &out);
    json_t *ids = answer_ids(out, 0, NULL);
    T_CHECK(st == 200 && json_equal(ids, ref_ids[3]), "the freed place serves the next request (%d)", st);
    json_decref(ids);
    free(out);
    /* the same without streaming: the whole answer was still being gathered */
    ms_t_write_file(ms_t_path(tmp, "longw.json"), "{\"prompt\":[5,6,7],\"max_tokens\":39000}");
    st = ms_t_runf(NULL, NULL, "curl -s --max-time 1 -o /dev/null -H 'Authorization: Bearer " KEY "' --data-binary @%s '%s/v1/completions'",
                   ms_t_path(tmp, "longw.json"), url);
    T_CHECK(st == 28, "the long whole-answer client gave up (curl exit %d)", st);
    for (int i = 0; i < 50 && (c = metric("moestream_cancelled_total")) < 2; i++) ms_t_sleep_ms(50);
    T_CHECK(c == 2, "the disconnected whole-answer request was cancelled (moestream_cancelled_total %g)", c);
    st = http(reqs[3].path, reqs[3].body, NULL, &out);
    ids = answer_ids(out, 0, NULL);
    T_CHECK(st == 200 && json_equal(ids, ref_ids[3]), "its place serves the next request (%d)", st);
    json_decref(ids);
    free(out);
    T_CHECK(ms_t_worker_log_has(&srv, "client_gone") && !ms_t_worker_log_has(&srv, "weather"),
            "the access log names the disconnect and holds no prompt text");
    T_CHECK(ms_t_worker_stop(&srv, 20, NULL) == 0, "SIGTERM: exit 0");
}

/* SIGTERM while a stream runs: it finishes whole, probes see 503 draining, new requests 503, exit 0. */
static void check_drain(void)
{
    /* long enough to be running still when the probes come (600 tokens of this model took 0.17 s) */
    if (start_server(noeos, "--max-batch 2 --max-context 8000") != 0) return;
    ms_t_write_file(ms_t_path(tmp, "drain.json"), "{\"prompt\":[9,8,7],\"max_tokens\":6000,\"stream\":true}");
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd %s; (curl -s -N -o drain.out -H 'Authorization: Bearer " KEY "' --data-binary @drain.json "
             "'%s/v1/completions'; echo $? > drain.rc) >/dev/null 2>&1 &",
             tmp, url);
    ms_t_run(cmd, NULL);
    for (int i = 0; i < 100 && !ms_t_file_has(ms_t_path(tmp, "drain.out"), "data: {"); i++) ms_t_sleep_ms(20);
    kill(srv.pid, SIGTERM);
    ms_t_sleep_ms(100);
    char *hb = NULL, *cb = NULL;
    int st = http("/health", NULL, NULL, &hb);
    T_CHECK(st == 503 && hb && strstr(hb, "\"status\":\"draining\""), "draining: /health answers 503 draining (%d %s)", st,
            hb ? hb : "");
    st = http("/v1/completions", "{\"prompt\":[1],\"max_tokens\":1}", NULL, &cb);
    T_CHECK(st == 503 && cb && strstr(cb, "unavailable"), "draining: a new request gets 503 unavailable (%d)", st);
    free(hb);
    free(cb);
    double t0 = ms_now();
    while (!ms_t_worker_reaped(&srv) && ms_now() - t0 < 240) ms_t_sleep_ms(20); /* one SIGTERM only */
    int rc = srv.status;
    double took = ms_now() - t0;
    T_CHECK(rc == 0, "SIGTERM with a stream running: exit 0 (%d) after %.1f s", rc, took);
    for (int i = 0; i < 100 && !ms_t_file_has(ms_t_path(tmp, "drain.rc"), "\n"); i++) ms_t_sleep_ms(50);
    char *out = ms_t_read_file(ms_t_path(tmp, "drain.out"), NULL), finish[16];
    json_t *ids = NULL, *text = NULL;
    int ok = parse_sse(out, 0, &ids, &text, finish, sizeof finish);
    T_CHECK(ms_t_file_has(ms_t_path(tmp, "drain.rc"), "0") && ok && json_array_size(ids) == 6000 && !strcmp(finish, "length"),
            "the running stream finished whole: %zu tokens, finish %s, [DONE] %d", json_array_size(ids), finish, ok);
    json_decref(ids);
    json_decref(text);
    free(out);
}

/* --request-timeout: a generation still running is cancelled: 504, or an error event. */
static void check_deadline(void)
{
    if (start_server(noeos, "--max-batch 2 --max-context 40000 --request-timeout 0.5") != 0) return;
    char *out = NULL;
    int st = http("/v1/completions", "{\"prompt\":[4,5],\"max_tokens\":39000}", NULL, &out);
    T_CHECK(st == 504 && out && strstr(out, "deadline_exceeded"), "past --request-timeout: 504 (%d)", st);
    free(out);
    st = http("/v1/completions", "{\"prompt\":[4,5],\"max_tokens\":39000,\"stream\":true}", NULL, &out);
    T_CHECK(st == 200 && out && strstr(out, "data: {\"error\"") && strstr(out, "deadline_exceeded") &&
                strstr(out, "data: [DONE]\n\n"),
            "a stream past --request-timeout ends with an error event and [DONE] (%d)", st);
    free(out);
    T_CHECK(metric("moestream_cancelled_total") == 2, "both were cancelled");
    double c504 = metric("moestream_requests_total{endpoint=\"completions\",code=\"504\"}");
    double c200 = metric("moestream_requests_total{endpoint=\"completions\",code=\"200\"}");
    T_CHECK(c504 == 2 && c200 <= 0, "/metrics counts both as code 504, the stream too (504: %g, 200: %g)", c504, c200);
    T_CHECK(ms_t_worker_stop(&srv, 20, NULL) == 0, "SIGTERM: exit 0");
    /* the access log: a UTC timestamp, and the tokens a request cut short used */
    char *log = ms_t_read_file(srv.log, NULL);
    const char *l = log ? strstr(log, "\" 504 prompt_tokens=2 completion_tokens=") : NULL;
    const char *ts = log ? strstr(log, "serve: 20") : NULL;
    T_CHECK(l && atoi(l + strlen("\" 504 prompt_tokens=2 completion_tokens=")) > 0 && ts && ts[17] == 'T' && strchr(ts, 'Z'),
            "the 504's log line has a timestamp and the tokens it generated: %.200s", l ? l : log ? log : "");
    free(log);
}

static void check_usage(void)
{
    char *err = NULL;
    int st = ms_t_runf(NULL, &err, "%s serve --model %s --listen 0.0.0.0:0 --ram-budget 2G", bin, dir);
    T_CHECK(st == MS_EXIT_USAGE && err && strstr(err, "--api-key-file"), "non-loopback without a key is refused (%d)", st);
    free(err);
    err = NULL;
    st = ms_t_runf(NULL, &err, "%s serve --model %s --listen nohostport", bin, dir);
    T_CHECK(st == MS_EXIT_USAGE && err && strstr(err, "HOST:PORT"), "a bad --listen is refused (%d)", st);
    free(err);
    char *out = NULL;
    st = ms_t_runf(&out, NULL, "%s serve --help", bin);
    const char *opts[] = {"--listen", "--api-key-file", "--max-batch", "--max-queue", "--max-context", "--max-body",
                          "--request-timeout", "--model-name", "--insecure", "--local-workers", "--speculate",
                          "--trunk-pack"};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        T_CHECK(st == 0 && out && strstr(out, opts[i]), "serve --help names %s", opts[i]);
    free(out);
}

/* Kill local worker 0 of the server `kills` times, each time once it is back and has run
 * `healthy_ms`, with a request after each kill (the coordinator restarts a dead worker when a
 * request needs it). Returns how many of those requests were answered 200 with the reference ids. */
static int kill_worker0(int kills, int healthy_ms)
{
    int good = 0, last = 0;
    for (int k = 0; k < kills; k++) {
        int w = 0;
        for (int i = 0; i < 3000 && ((w = ms_t_local_worker(srv.pid, 0)) == 0 || w == last); i++) ms_t_sleep_ms(10);
        if (!w || w == last) break;
        ms_t_sleep_ms(healthy_ms);
        kill(w, SIGKILL);
        last = w;
        ms_t_sleep_ms(100);
        char *out = NULL;
        int st = http(reqs[3].path, reqs[3].body, NULL, &out);
        json_t *ids = answer_ids(out, 0, NULL);
        good += st == 200 && json_equal(ids, ref_ids[3]);
        json_decref(ids);
        free(out);
    }
    return good;
}

/* Issue 16, defect 10: after 3 restarts of one local worker the server answered every request
 * with 500 while /health said ok, forever. A worker that ran healthy gets a fresh restart
 * budget; one given up on makes /health say 503 with the reason. */
/* --quiet: errors only, and the one line scripts wait for (the address), said once. */
static void check_quiet(void)
{
    if (start_server(dir, "--quiet") != 0) return;
    char *log = ms_t_read_file(srv.log, NULL);
    int n = 0;
    for (const char *p = log; p && (p = strstr(p, "listening on ")); p++) n++;
    T_CHECK(n == 1, "serve --quiet says where it listens once (%d times): %s", n, log ? log : "");
    free(log);
    T_CHECK(ms_t_worker_stop(&srv, 20, NULL) == 0, "SIGTERM: exit 0");
}

static void check_local_restarts(void)
{
    /* healthy after 1 s: killed 5 times, 1.2 s apart, every request still answered */
    if (start_server_env(dir, "--local-workers 2 --max-batch 2", "MS_LOCAL_HEALTHY_S=1") != 0) return;
    int good = kill_worker0(5, 1200);
    T_CHECK(good == 5, "local worker 0 killed 5 times, each after running healthy: every request answered (%d of 5)",
            good);
    char *out = NULL;
    int st = http("/health", NULL, "-H 'X-None: 1'", &out);
    T_CHECK(st == 200 && out && strstr(out, "\"ok\""), "/health ok (%d %s)", st, out ? out : "");
    free(out);
    T_CHECK(ms_t_worker_log_has(&srv, "a fresh budget of 3 restarts"), "the fresh budgets are logged");
    T_CHECK(ms_t_worker_stop(&srv, 20, NULL) == 0, "SIGTERM: exit 0");
    /* killed 4 times in a row at once: given up on; requests needing it fail, /health says so */
    if (start_server(dir, "--local-workers 2 --max-batch 2") != 0) return;
    good = kill_worker0(4, 0);
    T_CHECK(good == 3, "killed 4 times in a row: the first 3 restarted (%d requests answered)", good);
    st = http(reqs[3].path, reqs[3].body, NULL, &out);
    T_CHECK(st == 500 && out && strstr(out, "unreachable"), "then a request that needs it: 500 naming it (%d)", st);
    free(out);
    st = http("/health", NULL, "-H 'X-None: 1'", &out);
    T_CHECK(st == 503 && out && strstr(out, "\"degraded\"") && strstr(out, "no worker left"),
            "/health: 503 degraded with the reason, so an orchestrator restarts serve (%d %s)", st, out ? out : "");
    free(out);
    T_CHECK(ms_t_worker_stop(&srv, 20, NULL) == 0, "SIGTERM: exit 0");
}

/* A completion with a batch of prompts ("prompt": [p0, p1], OpenAI's form): choice k*n + c is
 * choice c of prompt k, each equal to the prompt's answer alone, whole and streamed; usage sums
 * the prompts. */
static void check_prompt_batch(void)
{
    static const char *const one[2] = {"{\"prompt\":\"The weather today is\",\"max_tokens\":6,\"n\":2,\"temperature\":0.8,\"seed\":5}",
                                       "{\"prompt\":[7,8,9],\"max_tokens\":6,\"n\":2,\"temperature\":0.8,\"seed\":5}"};
    json_t *want[4] = {0};
    for (int k = 0; k < 2; k++) {
        char *out = NULL;
        int st = http("/v1/completions", one[k], NULL, &out);
        json_t *o = out ? json_loads(out, 0, NULL) : NULL;
        for (int c = 0; c < 2; c++)
            want[2 * k + c] = json_incref(json_object_get(json_array_get(json_object_get(o, "choices"), c), "token_ids"));
        T_CHECK(st == 200 && want[2 * k] && want[2 * k + 1], "prompt %d alone: 200 (%d)", k, st);
        json_decref(o);
        free(out);
    }
    for (int streamed = 0; streamed < 2; streamed++) {
        char body[512], *out = NULL;
        snprintf(body, sizeof body, "{\"prompt\":[\"The weather today is\",[7,8,9]],\"max_tokens\":6,\"n\":2,"
                 "\"temperature\":0.8,\"seed\":5%s}", streamed ? ",\"stream\":true,\"stream_options\":{\"include_usage\":true}" : "");
        int st = http("/v1/completions", body, NULL, &out);
        json_t *got[4], *usage = NULL;
        for (int i = 0; i < 4; i++) got[i] = json_array();
        if (!streamed) {
            json_t *o = out ? json_loads(out, 0, NULL) : NULL;
            json_t *ch = json_object_get(o, "choices");
            for (size_t i = 0; i < json_array_size(ch); i++) {
                json_t *c = json_array_get(ch, i);
                json_int_t ix = json_integer_value(json_object_get(c, "index"));
                if (ix >= 0 && ix < 4) json_array_extend(got[ix], json_object_get(c, "token_ids"));
            }
            usage = json_incref(json_object_get(o, "usage"));
            json_decref(o);
        } else {
            for (char *p = out ? strstr(out, "data: {") : NULL; p; p = strstr(p + 1, "data: {")) {
                char *e = strstr(p, "\n\n");
                json_t *o = json_loadb(p + 6, e ? (size_t)(e - p - 6) : strlen(p + 6), 0, NULL);
                json_t *c = json_array_get(json_object_get(o, "choices"), 0);
                json_int_t ix = json_integer_value(json_object_get(c, "index"));
                if (c && ix >= 0 && ix < 4) json_array_extend(got[ix], json_object_get(c, "token_ids"));
                if (json_object_get(o, "usage") && !json_is_null(json_object_get(o, "usage"))) usage = json_incref(json_object_get(o, "usage"));
                json_decref(o);
            }
        }
        int same = st == 200;
        for (int i = 0; i < 4; i++) same &= json_equal(got[i], want[i]);
        T_CHECK(same, "%s batch of 2 prompts x n 2: choices 0-1 prompt 0's, 2-3 prompt 1's, each as alone (%d)",
                streamed ? "streamed" : "whole", st);
        T_CHECK(json_integer_value(json_object_get(usage, "prompt_tokens")) > 3 &&
                    json_integer_value(json_object_get(usage, "completion_tokens")) == 24,
                "%s: usage counts both prompts and the 4 choices' 24 tokens", streamed ? "streamed" : "whole");
        for (int i = 0; i < 4; i++) json_decref(got[i]);
        json_decref(usage);
        free(out);
    }
    for (int i = 0; i < 4; i++) json_decref(want[i]);
    char *out = NULL;
    int st = http("/v1/completions", "{\"prompt\":[\"a\",[99999999]],\"max_tokens\":2}", NULL, &out);
    T_CHECK(st == 400 && out && strstr(out, "prompt 1:") && strstr(out, "\"param\":\"prompt\""),
            "a bad prompt in a batch: 400 naming it (%d %s)", st, out ? out : "");
    free(out);
}

/* The last streamed events of an answer that ends with a tool call, as OpenAI sends them: the
 * call's id and name, then its arguments, then the finish alone (the openai client's stream
 * helper closes a call's arguments when a later event comes: test_serve_node runs it on these). */
static void check_tool_chunk(void)
{
    ms_sreq r = {.chat = 1};
    ms_sreq_ident id = {"chatcmpl-x", "m", 1};
    ms_chat_answer a = {ms_strdup(""), 0, NULL, 0, ms_strdup("f"), ms_strdup("{\"a\":1}"), 7};
    size_t len;
    char *ev = ms_sreq_tool_chunk(&r, &id, 0, &a, 0, &len);
    json_t *o[3] = {0};
    int n = 0;
    for (char *l = strtok(ev, "\n"); l; l = strtok(NULL, "\n"))
        if (!strncmp(l, "data: ", 6) && n < 3) o[n++] = json_loads(l + 6, 0, NULL);
    json_t *c[3], *tc[3];
    for (int i = 0; i < 3; i++) {
        c[i] = json_array_get(json_object_get(o[i], "choices"), 0);
        tc[i] = json_array_get(json_object_get(json_object_get(c[i], "delta"), "tool_calls"), 0);
    }
    json_t *f0 = json_object_get(tc[0], "function"), *f1 = json_object_get(tc[1], "function");
    T_CHECK(n == 3 && json_is_null(json_object_get(c[0], "finish_reason")) && json_object_get(tc[0], "index") &&
                json_is_string(json_object_get(tc[0], "id")) && !strcmp(json_string_value(json_object_get(f0, "name")), "f") &&
                !strcmp(json_string_value(json_object_get(f0, "arguments")), "") &&
                !strcmp(json_string_value(json_object_get(o[0], "object")), "chat.completion.chunk"),
            "a tool call's first event: delta.tool_calls[0] with index, id and name, empty arguments, no finish");
    T_CHECK(json_is_null(json_object_get(c[1], "finish_reason")) && json_integer_value(json_object_get(tc[1], "index")) == 0 &&
                !strcmp(json_string_value(json_object_get(f1, "arguments")), "{\"a\":1}"),
            "its second event: the arguments, no finish");
    T_CHECK(!tc[2] && !strcmp(json_string_value(json_object_get(c[2], "finish_reason")), "tool_calls"),
            "its last event: finish_reason tool_calls alone");
    for (int i = 0; i < 3; i++) json_decref(o[i]);
    free(ev);
    ms_chat_answer_clear(&a);
}

int main(void)
{
    ms_log_set_level(0);
    check_tool_chunk();
    if (ms_t_run("curl --version >/dev/null 2>&1", NULL) != 0) {
        ms_t_skip("SKIP: curl is not installed (deploy/install-deps.sh installs it)");
        return ms_t_done();
    }
    snprintf(tmp, sizeof tmp, "%s", ms_t_tmpdir("serve"));
    snprintf(dir, sizeof dir, "%.1024s/m", tmp);
    snprintf(bin, sizeof bin, "%s", ms_t_bin("moestream"));
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    T_CHECK(ms_synth_write(dir, &sh, 11) == 0, "synth tiny: %s", ms_err_msg());
    ms_t_write_file(ms_t_path(tmp, "key"), KEY "\n");
    make_refs();
    make_noeos();
    check_usage();
    if (start_server(dir, "--max-batch 8 --max-context 128 --max-body 8K") == 0) {
        json_t *seq[NREQ] = {0};
        check_sequential(seq);
        check_concurrent(seq);
        check_stream(seq);
        check_prompt_batch();
        check_errors();
        check_metrics();
        T_CHECK(ms_t_worker_stop(&srv, 20, NULL) == 0, "SIGTERM when idle: exit 0");
        for (int i = 0; i < NREQ; i++) json_decref(seq[i]);
    }
    check_disconnect();
    check_deadline();
    check_drain();
    check_quiet();
    check_local_restarts();
    for (int i = 0; i < NREQ; i++) {
        json_decref(ref_ids[i]);
        json_decref(ref_text[i]);
    }
    return ms_t_done();
}
