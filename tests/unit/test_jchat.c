/* test_jchat: chat requests in OpenAI's shape (tool calls, tools, template options) read for the family formats, and their refusals. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_families.h"
#include "ms_gptoss_chat.h"
#include "ms_kimichat.h"
#include "ms_jchat.h"
#include "ms_jobfile.h"
#include "ms_test.h"

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

/* The bodies read: the structs borrow their strings, so they are kept to the end of the test. */
static json_t *keep[64];
static int nk;

/* Read body (JSON text); returns ms_jchat_read's result, why and param filled. */
static int rd(const char *text, int render_only, ms_jchat *c, char *why, size_t n, const char **param)
{
    json_error_t je;
    json_t *b = json_loads(text, 0, &je);
    MS_ASSERT(b && nk < 64);
    keep[nk++] = b;
    why[0] = 0;
    return ms_jchat_read(b, &ms_gptoss_chat, "2025-08-05", render_only, c, why, n, param);
}

int main(void)
{
    ms_log_set_level(0);
    char why[768];
    const char *param;
    ms_jchat c;
    /* OpenAI's tool call: arguments as JSON text, re-written as the template's tojson writes the object */
    T_CHECK(rd("{\"messages\": [{\"role\": \"user\", \"content\": \"w?\"}, {\"role\": \"assistant\", \"content\": null, "
               "\"reasoning_content\": \"call it\", \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": "
               "{\"name\": \"get_weather\", \"arguments\": \"{\\\"location\\\":\\\"Paris\\\",\\\"n\\\":1.50}\"}}]}, "
               "{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"18C\"}], \"tool_choice\": \"auto\"}",
               0, &c, why, sizeof why, &param) == 0 && c.n == 3,
            "a tool-call round trip reads: %s", why);
    if (c.n == 3) {
        T_CHECK(!c.msgs[1].content && c.msgs[1].n_calls == 1 && !strcmp(c.msgs[1].call_name, "get_weather") &&
                    c.msgs[1].call_args_len == strlen("{\"location\": \"Paris\", \"n\": 1.5}") &&
                    !memcmp(c.msgs[1].call_args, "{\"location\": \"Paris\", \"n\": 1.5}", c.msgs[1].call_args_len) &&
                    c.msgs[1].thinking_len == 7,
                "the call: name, arguments as tojson writes them (%.*s), reasoning_content as thinking",
                (int)c.msgs[1].call_args_len, c.msgs[1].call_args);
        T_CHECK(!strcmp(c.msgs[2].role, "tool") && c.msgs[2].len == 3, "the tool result");
    }
    ms_jchat_clear(&c);
    T_CHECK(rd("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": "
               "\"not json\"}}]}]}", 0, &c, why, sizeof why, &param) == 0 && c.n == 1 &&
                !strcmp(c.msgs[0].call_args, "\"not json\""),
            "arguments that are not JSON stay a string, JSON-quoted as tojson quotes one: %s", c.n ? c.msgs[0].call_args : why);
    ms_jchat_clear(&c);
    /* template variables */
    T_CHECK(rd("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"reasoning_effort\": \"high\", "
               "\"chat_template_kwargs\": {\"model_identity\": \"I am M.\", \"builtin_tools\": [\"python\", \"browser\"]}}",
               0, &c, why, sizeof why, &param) == 0 && !strcmp(c.opts.reasoning_effort, "high") &&
                !strcmp(json_string_value(json_object_get(c.opts.vars, "model_identity")), "I am M.") &&
                json_array_size(json_object_get(c.opts.vars, "builtin_tools")) == 2 && !strcmp(c.opts.date, "2025-08-05"),
            "reasoning_effort; model_identity and builtin_tools checked by the format and passed on: %s", why);
    ms_jchat_clear(&c);
    /* refusals, each naming the field */
    static const struct {
        const char *body, *param, *says;
        int render_only;
    } no[] = {
        {"{\"messages\": []}", "messages", "non-empty", 0},
        {"{\"messages\": [{\"role\": \"user\"}]}", "messages", "needs \"content\"", 0},
        {"{\"messages\": [{\"role\": \"user\", \"content\": 3}]}", "messages", "must be a string", 0},
        {"{\"messages\": [{\"role\": \"assistant\", \"content\": \"a\", \"thinking\": \"t\", \"reasoning_content\": \"r\"}]}",
         "messages", "not both", 0},
        {"{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"f\"}}]}]}", "messages",
         "function.arguments", 0},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": {}}", "tools", "array", 0},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"chat_template_kwargs\": {\"foo\": 1}}",
         "chat_template_kwargs", "foo is not a variable the harmony chat format reads (reasoning_effort, model_identity, "
         "builtin_tools, add_generation_prompt)", 0},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"chat_template_kwargs\": {\"builtin_tools\": "
         "[\"shell\"]}}", "chat_template_kwargs", "builtin_tools[0]", 0},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"chat_template_kwargs\": {\"add_generation_prompt\": "
         "false}}", "chat_template_kwargs", "tokenize --chat", 0},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"reasoning_effort\": \"low\", "
         "\"chat_template_kwargs\": {\"reasoning_effort\": \"high\"}}", "chat_template_kwargs", "differ", 0},
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        int rc = rd(no[i].body, no[i].render_only, &c, why, sizeof why, &param);
        T_CHECK(rc == -1 && param && !strcmp(param, no[i].param) && has(why, no[i].says) && c.n == 0 && !c.msgs,
                "refused, param %s: %s", param ? param : "(null)", why);
    }
    T_CHECK(rd("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"chat_template_kwargs\": "
               "{\"add_generation_prompt\": false}}", 1, &c, why, sizeof why, &param) == 0 && c.opts.no_generation_prompt,
            "add_generation_prompt false where rendering only (tokenize --chat): %s", why);
    ms_jchat_clear(&c);
    /* the variables are the family's: Kimi's format reads none of harmony's; with no format, none */
    json_t *kb = json_loads("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"chat_template_kwargs\": "
                            "{\"reasoning_effort\": \"high\"}}", 0, NULL);
    T_CHECK(ms_jchat_read(kb, &ms_kimichat, NULL, 0, &c, why, sizeof why, &param) == -1 && param &&
                !strcmp(param, "chat_template_kwargs") &&
                has(why, "reasoning_effort is not a variable the kimi chat format reads (add_generation_prompt)"),
            "Kimi's format refuses harmony's variable: %s", why);
    T_CHECK(ms_jchat_read(kb, NULL, NULL, 0, &c, why, sizeof why, &param) == -1 && has(why, "reasoning_effort"),
            "no format: no variables: %s", why);
    T_CHECK(ms_jchat_read(kb, &ms_gptoss_chat, NULL, 0, &c, why, sizeof why, &param) == 0 &&
                !strcmp(json_string_value(json_object_get(c.opts.vars, "reasoning_effort")), "high"),
            "harmony's format reads it (passed on in opts.vars): %s", why);
    ms_jchat_clear(&c);
    json_decref(kb);
    /* the request's reasoning_effort is the format's to check: harmony refuses "minimal" naming
     * the field; Kimi's, which has none, lets it be */
    kb = json_loads("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"reasoning_effort\": \"minimal\"}", 0, NULL);
    T_CHECK(ms_jchat_read(kb, &ms_gptoss_chat, NULL, 0, &c, why, sizeof why, &param) == -1 && param &&
                !strcmp(param, "reasoning_effort") && has(why, "low, medium and high"),
            "harmony: reasoning_effort \"minimal\" refused naming reasoning_effort: %s", why);
    T_CHECK(ms_jchat_read(kb, &ms_kimichat, NULL, 0, &c, why, sizeof why, &param) == 0, "Kimi: reasoning_effort ignored: %s",
            why);
    ms_jchat_clear(&c);
    json_decref(kb);

    /* Through a job line and each family's format: harmony renders tools; Kimi's refuses them. */
    const char *d = ms_t_tmpdir("jchat");
    char go[1024], k3[1024];
    snprintf(go, sizeof go, "%s/gpt-oss", d);
    snprintf(k3, sizeof k3, "%s/k3", d);
    const ms_family *fg = ms_families_find("gpt-oss"), *fk = ms_families_find("kimi-k3");
    T_CHECK(fg && fk && fg->synth(go, "gpt-oss-tiny", 0, 0, 1) == 0 && fk->synth(k3, "tiny", 0, 0, 1) == 0,
            "both families' synthetic checkpoints: %s", ms_err_msg());
    ms_tok *tg = ms_tok_load(go), *tk = ms_tok_load(k3);
    T_CHECK(tg && tk, "their tokenizers: %s", ms_err_msg());
    if (tg && tk) {
        static const char line[] =
            "{\"custom_id\": \"t\", \"url\": \"/v1/chat/completions\", \"body\": {\"messages\": [{\"role\": \"user\", "
            "\"content\": \"w?\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
            "\"description\": \"Weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
            "\"string\"}}}}}]}}";
        ms_jobfile_limits lg = {tg, ms_tok_n_vocab(tg), 1 << 20, fg->chat, "2025-08-05", 0};
        ms_jobspec j;
        ms_jobspec_parse(line, sizeof line - 1, 1, &lg, &j);
        char *txt = NULL;
        size_t tl = 0;
        T_CHECK(!j.err_code && ms_tok_decode(tg, j.prompt, j.n_prompt, &txt, &tl) == 0 &&
                    has(txt, "namespace functions {\n\n// Weather\ntype get_weather = (_: {\ncity?: string,\n}) => any;") &&
                    has(txt, "Calls to these tools must go to the commentary channel: 'functions'."),
                "harmony renders the function: %s", j.err_code ? j.err_msg : "");
        free(txt);
        ms_jobspec_clear(&j);
        ms_jobfile_limits lk = {tk, ms_tok_n_vocab(tk), 1 << 20, fk->chat, NULL, 0};
        ms_jobspec_parse(line, sizeof line - 1, 1, &lk, &j);
        T_CHECK(j.err_code && !strcmp(j.err_code, "invalid_prompt") && has(j.err_msg, "kimi") && has(j.err_msg, "tools") &&
                    j.err_param && !strcmp(j.err_param, "messages"),
                "Kimi's format refuses tools, saying so: %s", j.err_msg ? j.err_msg : "(accepted)");
        ms_jobspec_clear(&j);
        static const char bad_tool[] =
            "{\"body\": {\"messages\": [{\"role\": \"user\", \"content\": \"w?\"}], \"tools\": [{\"type\": \"function\", "
            "\"function\": {\"name\": \"f\", \"description\": 7}}]}, \"url\": \"/v1/chat/completions\"}";
        ms_jobspec_parse(bad_tool, sizeof bad_tool - 1, 2, &lg, &j);
        T_CHECK(j.err_code && has(j.err_msg, "tools[0].function") && has(j.err_msg, "description") && j.err_param &&
                    !strcmp(j.err_param, "tools"),
                "a function whose description is not a string is named: %s", j.err_msg ? j.err_msg : "(accepted)");
        ms_jobspec_clear(&j);
        static const char no_desc[] =
            "{\"body\": {\"messages\": [{\"role\": \"user\", \"content\": \"w?\"}], \"tools\": [{\"type\": \"function\", "
            "\"function\": {\"name\": \"f\"}}]}, \"url\": \"/v1/chat/completions\"}";
        ms_jobspec_parse(no_desc, sizeof no_desc - 1, 3, &lg, &j);
        T_CHECK(!j.err_code, "a function without a description (optional in OpenAI's API) is taken: %s",
                j.err_msg ? j.err_msg : "");
        ms_jobspec_clear(&j);
    }
    ms_tok_free(tg);
    ms_tok_free(tk);
    for (int i = 0; i < nk; i++) json_decref(keep[i]);
    return ms_t_done();
}
