/* test_jgram: tool_choice, strict tools and response_format held by one grammar in each family's
 * chat format: the grammar takes the answers the format's own parser reads as calls (and refuses
 * what the choice forbids); jobs on every family's tiny model answer with calls to the offered
 * tools whose arguments validate (required, a named function), with none when asked for none;
 * requests the grammar cannot hold refused naming the field. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_families.h"
#include "ms_grammar.h"
#include "ms_jgram.h"
#include "ms_test.h"

static char tmp[1024];

#define TOOLS                                                                                                          \
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"strict\":true,\"parameters\":{\"type\":\"object\"," \
    "\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12},\"unit\":{\"enum\":[\"c\",\"f\"]}},"              \
    "\"required\":[\"city\",\"unit\"]}}},"                                                                             \
    "{\"type\":\"function\",\"function\":{\"name\":\"add\",\"strict\":true,\"parameters\":{\"type\":\"object\","        \
    "\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"]}}}]"

/* The arguments validate against the tool's schema (checked by hand). */
static int args_valid(const char *name, const char *args)
{
    json_t *v = args ? json_loads(args, 0, NULL) : NULL;
    int ok = 0;
    if (name && !strcmp(name, "get_weather")) {
        const char *c = json_string_value(json_object_get(v, "city")), *u = json_string_value(json_object_get(v, "unit"));
        size_t chars = 0;
        for (const unsigned char *p = (const unsigned char *)c; c && *p; p++) chars += (*p & 0xC0) != 0x80;
        ok = json_object_size(v) == 2 && c && chars <= 12 && u && (!strcmp(u, "c") || !strcmp(u, "f"));
    } else if (name && !strcmp(name, "add")) {
        ok = json_object_size(v) == 2 && json_is_integer(json_object_get(v, "a")) && json_is_integer(json_object_get(v, "b"));
    }
    json_decref(v);
    return ok;
}

static json_t *body_of(const char *extra)
{
    char b[4096];
    snprintf(b, sizeof b, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]%s}", extra);
    json_t *o = json_loads(b, 0, NULL);
    MS_ASSERT(o);
    return o;
}

/* Requests the grammar cannot hold: refused naming the field; nothing asked: no grammar. */
static void check_refusals(const ms_chatfmt *fmt, const ms_tok *t)
{
    static const struct {
        const char *extra, *param, *says;
    } bad[] = {
        {",\"tool_choice\":\"sometimes\"", "tool_choice", "\"sometimes\""},
        {",\"tool_choice\":\"required\"", "tool_choice", "needs \"tools\""},
        {",\"tools\":" TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}", "tool_choice",
         "\"nope\", which is not one of the tools"},
        {",\"tools\":" TOOLS ",\"tool_choice\":{\"type\":\"function\"}", "tool_choice", "{\"type\": \"function\""},
        {",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":true,\"parameters\":{\"type\":\"object\","
         "\"properties\":{\"s\":{\"type\":\"string\",\"pattern\":\"^a\"}}}}}]",
         "tools", "tools[0].function.parameters (strict): properties.s: \"pattern\""},
        {",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}],\"tool_choice\":\"required\"", "tools",
         "tools[0].function.name"},
        {",\"response_format\":{\"type\":\"xml\"}", "response_format", "\"xml\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *b = body_of(bad[i].extra);
        char why[800] = "", *g = NULL;
        const char *param = NULL;
        int rc = ms_jgram_chat(b, fmt, t, NULL, 0, &g, why, sizeof why, &param);
        T_CHECK(rc == -1 && !g && param && !strcmp(param, bad[i].param) && strstr(why, bad[i].says),
                "refused naming %s: %s (%s: %s)", bad[i].param, bad[i].extra, param ? param : "-", why);
        free(g);
        json_decref(b);
    }
    static const char *const free_[] = {"", ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]",
                                        ",\"tool_choice\":\"auto\",\"response_format\":{\"type\":\"text\"}",
                                        ",\"tool_choice\":\"none\""};
    for (int i = 0; i < 4; i++) {
        json_t *b = body_of(free_[i]);
        char why[800] = "", *g = (char *)"x";
        const char *param = NULL;
        int rc = ms_jgram_chat(b, fmt, t, NULL, 0, &g, why, sizeof why, &param);
        T_CHECK(rc == 0 && !g, "nothing to hold (no grammar): '%s' (%s)", free_[i], why);
        json_decref(b);
    }
}

/* Does the grammar take text (markers as special ids) whole, and what does the format's parser
 * read from the same ids? */
static int takes(const ms_grammar *g, const ms_gvocab *v, const ms_tok *t, const char *text, int32_t **ids, size_t *n)
{
    *ids = NULL;
    *n = 0;
    if (ms_tok_encode(t, text, strlen(text), 1, ids, n) != 0) return -1;
    ms_gstate *s = ms_gstate_new(g);
    int ok = 1;
    for (size_t i = 0; i < *n && ok; i++) ok = ms_gstate_accept_id(s, v, (*ids)[i]);
    ok = ok && ms_gstate_complete(s);
    ms_gstate_free(s);
    return ok;
}

typedef struct {
    const char *preset;
    const char *call;    /* a call to get_weather in the format, as the model writes it */
    const char *content; /* a plain answer */
} form;

static const form forms[] = {
    {"gpt-oss-tiny",
     "<|channel|>analysis<|message|>The user asks.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
     "<|constrain|>json<|message|>{\"city\": \"Paris\", \"unit\": \"c\"}<|call|>",
     "<|channel|>final<|message|>Sunny."},
    {"qwen3-moe-tiny",
     "<think>\nThe user asks.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
     "\"unit\": \"c\"}}\n</tool_call>",
     "<think>\nok\n</think>\n\nSunny."},
    {"kimi-k2-tiny",
     "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": "
     "\"Paris\", \"unit\": \"c\"}<|tool_call_end|><|tool_calls_section_end|>",
     "Sunny."},
    {"deepseek-v3-tiny",
     "<think>\nThe user asks.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
     "```json\n{\"city\": \"Paris\", \"unit\": \"c\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     "<think>\nok\n</think>\n\nSunny."},
};

static void check_forms(const ms_chatfmt *fmt, const ms_tok *t, const char *preset, const form *f)
{
    ms_gvocab *v = ms_gvocab_new(t);
    const char *modes[] = {",\"tool_choice\":\"required\"", ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
                                                            "\"get_weather\"}}",
                           ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"add\"}}",
                           ",\"tool_choice\":\"none\"", ",\"tool_choice\":\"auto\""};
    /* what each mode takes: the call, the plain answer */
    const int want_call[] = {1, 1, 0, 0, 1}, want_plain[] = {0, 0, 0, 1, 1};
    for (int m = 0; m < 5; m++) {
        char extra[2048];
        snprintf(extra, sizeof extra, ",\"tools\":" TOOLS "%s", modes[m]);
        json_t *b = body_of(extra);
        char why[800] = "", *gt = NULL;
        const char *param = NULL;
        int rc = ms_jgram_chat(b, fmt, t, NULL, 0, &gt, why, sizeof why, &param);
        ms_grammar *g = gt ? ms_grammar_parse(gt, strlen(gt)) : NULL;
        T_CHECK(rc == 0 && g, "%s%s: a grammar (%s)", preset, modes[m], why);
        if (g) {
            int32_t *ids = NULL;
            size_t n = 0;
            int c = takes(g, v, t, f->call, &ids, &n);
            ms_chat_answer a;
            int parsed = fmt->answer(t, ids, n, &a) == 0 && a.call_name && !strcmp(a.call_name, "get_weather") &&
                         args_valid(a.call_name, a.call_args);
            ms_chat_answer_clear(&a);
            free(ids);
            int p = takes(g, v, t, f->content, &ids, &n);
            free(ids);
            T_CHECK(c == want_call[m] && p == want_plain[m] && parsed,
                    "%s%s: the call %s, a plain answer %s (the format's parser reads the call: %d)", preset, modes[m],
                    c ? "taken" : "refused", p ? "taken" : "refused", parsed);
        }
        ms_grammar_free(g);
        free(gt);
        json_decref(b);
    }
    /* a JSON answer and no calls: the content is the schema's */
    json_t *b = body_of(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"w\",\"schema\":{\"type\":"
                        "\"object\",\"properties\":{\"t\":{\"type\":\"integer\"}},\"required\":[\"t\"]}}}");
    char why[800] = "", *gt = NULL;
    const char *param = NULL;
    ms_jgram_chat(b, fmt, t, NULL, 0, &gt, why, sizeof why, &param);
    ms_grammar *g = gt ? ms_grammar_parse(gt, strlen(gt)) : NULL;
    char json_answer[256], text_answer[256];
    const char *pre = strstr(f->content, "Sunny.");
    snprintf(json_answer, sizeof json_answer, "%.*s{\"t\": 21}", (int)(pre - f->content), f->content);
    int32_t *ids = NULL;
    size_t n = 0;
    int j = g && takes(g, v, t, json_answer, &ids, &n) == 1;
    free(ids);
    snprintf(text_answer, sizeof text_answer, "%s", f->content);
    int x = g && takes(g, v, t, text_answer, &ids, &n) == 1;
    free(ids);
    T_CHECK(g && j && !x, "%s json_schema: '%s' taken, '%s' refused (%s)", preset, json_answer, text_answer, why);
    ms_grammar_free(g);
    free(gt);
    json_decref(b);
    ms_gvocab_free(v);
}

/* Jobs on the tiny model: required and a named function answer with calls (those that finish)
 * to the offered tools, arguments valid; none answers without. DeepSeek-V3 in V3.1's form (its
 * V3 form: test_dsv3_chat). */
static void check_jobs(const char *d, const char *preset)
{
    static const char *const modes[] = {"\"required\"", "{\"type\":\"function\",\"function\":{\"name\":\"add\"}}", "\"none\""};
    for (int m = 0; m < 3; m++) {
        char in[1300], outp[1300];
        snprintf(in, sizeof in, "%s/jobs.jsonl", d);
        snprintf(outp, sizeof outp, "%s/out-%d.jsonl", d, m);
        FILE *fp = fopen(in, "w");
        for (int k = 0; fp && k < 4; k++)
            fprintf(fp, "{\"custom_id\":\"c%d\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[{\"role\":\"user\","
                        "\"content\":\"Weather in Paris?\"}],\"max_tokens\":%d,\"temperature\":%s,\"seed\":%d,\"tools\":" TOOLS
                        ",\"tool_choice\":%s,\"chat_template_kwargs\":%s}}\n",
                    /* DeepSeek's tiny vocabulary of 560 ends a free answer less often: room for its EOS */
                    k, strstr(preset, "deepseek") ? 1400 : 400, k ? "0.8" : "0", k, modes[m],
                    strstr(preset, "gpt-oss")    ? "{\"reasoning_effort\":\"low\"}"
                    : strstr(preset, "deepseek") ? "{\"thinking\":false}" /* V3.1's form: no reasoning to ramble in */
                                                 : "{}");
        if (fp) fclose(fp);
        int st = ms_t_runf(NULL, NULL, "%s jobs --model %s --input %s --output %s --quiet --ram-budget 2G --max-context 2048",
                           ms_t_bin("moestream"), d, in, outp);
        int calls = 0, good = 0, finished = 0, lines = 0;
        FILE *r = st == 0 ? fopen(outp, "r") : NULL;
        char line[1 << 16];
        while (r && fgets(line, sizeof line, r)) {
            json_t *o = json_loads(line, JSON_ALLOW_NUL, NULL);
            json_t *c = json_array_get(json_object_get(json_object_get(json_object_get(o, "response"), "body"), "choices"), 0);
            const char *fin = json_string_value(json_object_get(c, "finish_reason"));
            json_t *tc = json_object_get(json_object_get(c, "message"), "tool_calls");
            json_t *fn = json_object_get(json_array_get(tc, 0), "function");
            const char *name = json_string_value(json_object_get(fn, "name"));
            lines++;
            finished += fin && strcmp(fin, "length");
            calls += json_array_size(tc) > 0;
            if (m < 2)
                good += fin && !strcmp(fin, "tool_calls") && args_valid(name, json_string_value(json_object_get(fn, "arguments"))) &&
                        (m == 0 || !strcmp(name, "add"));
            else
                good += fin && !strcmp(fin, "stop") && !tc;
            json_decref(o);
        }
        if (r) fclose(r);
        /* every answer that finished is what the choice asks (a cut one may be a call cut short) */
        T_CHECK(st == 0 && lines == 4 && finished >= 2 && good == finished && (m == 2 ? calls == 0 : 1),
                "%s tool_choice %s: %d of 4 finished, each %s (%d good; exit %d)", preset, modes[m], finished,
                m == 2 ? "without a call" : m == 1 ? "a call to add, arguments valid" : "a call, arguments valid", good, st);
    }
}

int main(void)
{
    ms_log_set_level(0);
    snprintf(tmp, sizeof tmp, "%s", ms_t_tmpdir("jgram"));
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        char d[1200];
        snprintf(d, sizeof d, "%s/%s", tmp, forms[i].preset);
        int sy = ms_families_synth(d, forms[i].preset, 0, 0, 3);
        const ms_family *fam = sy == 0 ? ms_families_detect(d) : NULL;
        ms_tok *t = fam ? ms_tok_load(d) : NULL;
        T_CHECK(fam && fam->chat && t, "%s: synth, family, tokenizer (%s)", forms[i].preset, ms_err_msg());
        if (!fam || !fam->chat || !t) {
            ms_tok_free(t);
            continue;
        }
        if (i == 0) check_refusals(fam->chat, t);
        check_forms(fam->chat, t, forms[i].preset, &forms[i]);
        ms_tok_free(t);
        check_jobs(d, forms[i].preset);
    }
    return ms_t_done();
}
