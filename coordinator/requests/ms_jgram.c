/* ms_jgram: response_format + tool_choice + strict tools -> the rules content and args-I, and the family's root over them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_grammar.h"
#include "ms_jchat.h"
#include "ms_jgram.h"
#include "ms_jschema.h"
#include "ms_sbuf.h"

/* The rule `content`: free text, any JSON object, or a JSON text under a schema. *json 1 for the
 * last two. */
static int content_rules(const json_t *body, ms_sbuf *b, int *json, char *why, size_t n, const char **param)
{
    const json_t *rf = ms_jchat_field(body, "response_format");
    const char *ty = json_string_value(json_object_get(rf, "type"));
    *json = 0;
    if (rf && (!json_is_object(rf) || !ty))
        return ms_jchat_refuse(why, n, param, "response_format",
                  "\"response_format\" must be {\"type\": \"text\" | \"json_object\" | \"json_schema\"}");
    if (!rf || !strcmp(ty, "text")) {
        ms_sbuf_adds(b, "content ::= .*\n");
        return 0;
    }
    *json = 1;
    if (!strcmp(ty, "json_object")) {
        ms_sbuf_adds(b, "content ::= ws jobject ws\n");
        return 0;
    }
    if (strcmp(ty, "json_schema"))
        return ms_jchat_refuse(why, n, param, "response_format", "response_format type \"%s\" (text, json_object, json_schema)", ty);
    const json_t *js = json_object_get(rf, "json_schema"), *schema = json_object_get(js, "schema");
    if (!json_is_object(js) || !json_is_string(json_object_get(js, "name")))
        return ms_jchat_refuse(why, n, param, "response_format",
                  "response_format json_schema needs \"json_schema\": {\"name\", \"schema\", ...}");
    char w[600] = "";
    char *r = ms_jschema_rules(schema ? schema : json_true(), "schema", w, sizeof w);
    if (!r) return ms_jchat_refuse(why, n, param, "response_format", "response_format.json_schema.schema: %s", w);
    ms_sbuf_adds(b, "content ::= ws schema ws\n");
    ms_sbuf_adds(b, r);
    free(r);
    return 0;
}

/* A name the call syntaxes write as it is (OpenAI's own rule for function names). */
static int plain_name(const char *s)
{
    size_t l = s ? strlen(s) : 0;
    return l >= 1 && l <= 64 && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == l;
}

int ms_jgram_chat(const json_t *body, const ms_chatfmt *fmt, const ms_tok *t, const int32_t *prompt, size_t n_prompt,
                  char **grammar, char *why, size_t n, const char **param)
{
    *grammar = NULL;
    *param = NULL;
    const json_t *tools = ms_jchat_field(body, "tools"), *tc = ms_jchat_field(body, "tool_choice");
    size_t nt = json_is_array(tools) ? json_array_size(tools) : 0;
    /* tool_choice: auto (the default), none, required, or one function */
    const char *mode = "auto", *named = NULL;
    if (tc && json_is_string(tc)) {
        mode = json_string_value(tc);
        if (strcmp(mode, "auto") && strcmp(mode, "none") && strcmp(mode, "required"))
            return ms_jchat_refuse(why, n, param, "tool_choice",
                      "\"tool_choice\" is \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": "
                      "{\"name\": ...}}, not \"%.40s\"", mode);
    } else if (tc) {
        const char *ty = json_string_value(json_object_get(tc, "type"));
        named = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
        if (!json_is_object(tc) || !ty || strcmp(ty, "function") || !named)
            return ms_jchat_refuse(why, n, param, "tool_choice",
                      "\"tool_choice\" as an object is {\"type\": \"function\", \"function\": {\"name\": ...}}");
        mode = "named";
    }
    if (!nt && (!strcmp(mode, "required") || named))
        return ms_jchat_refuse(why, n, param, "tool_choice", "\"tool_choice\" \"%s\" needs \"tools\"", named ? named : mode);
    /* which tools a call may name; is any strict */
    int strict = 0, found = !named;
    for (size_t i = 0; i < nt; i++) {
        const json_t *f = json_object_get(json_array_get(tools, i), "function");
        const char *nm = json_string_value(json_object_get(f, "name"));
        strict |= json_is_true(json_object_get(f, "strict"));
        if (named && nm && !strcmp(nm, named)) found = 1;
    }
    if (!found) return ms_jchat_refuse(why, n, param, "tool_choice", "tool_choice names \"%.64s\", which is not one of the tools", named);
    int calls = !nt || !strcmp(mode, "none") ? MS_CHAT_CALLS_NO : !strcmp(mode, "auto") ? MS_CHAT_CALLS_MAY : MS_CHAT_CALLS_MUST;
    ms_sbuf b = {0};
    int json = 0;
    if (content_rules(body, &b, &json, why, n, param) != 0) goto fail;
    int forced = nt && strcmp(mode, "auto"); /* none, required, a name */
    if (!json && !forced && !strict) { /* nothing to hold the answer to */
        ms_sbuf_free(&b);
        return 0;
    }
    /* the arguments of each tool a call may name */
    const char **names = ms_calloc(nt ? nt : 1, sizeof *names);
    int k = 0;
    for (size_t i = 0; calls != MS_CHAT_CALLS_NO && i < nt; i++) {
        const json_t *f = json_object_get(json_array_get(tools, i), "function");
        const char *nm = json_string_value(json_object_get(f, "name"));
        if (named && (!nm || strcmp(nm, named))) continue;
        if (!plain_name(nm)) {
            free(names);
            ms_jchat_refuse(why, n, param, "tools", "tools[%zu].function.name must be 1 to 64 of a-z, A-Z, 0-9, _, . and - (to hold "
                                        "a call to it)", i);
            goto fail;
        }
        char rule[24];
        snprintf(rule, sizeof rule, "args-%d", k);
        const json_t *ps = json_object_get(f, "parameters");
        if (json_is_true(json_object_get(f, "strict"))) {
            char w[600] = "";
            json_t *any = ps ? NULL : json_pack("{s:s}", "type", "object"); /* no parameters: any object */
            char *r = ms_jschema_rules(ps ? ps : any, rule, w, sizeof w);
            json_decref(any);
            if (!r) {
                free(names);
                ms_jchat_refuse(why, n, param, "tools", "tools[%zu].function.parameters (strict): %s", i, w);
                goto fail;
            }
            ms_sbuf_adds(&b, r);
            free(r);
        } else {
            ms_sbuf_addf(&b, "%s ::= jobject\n", rule);
        }
        names[k++] = nm;
    }
    ms_sbuf_adds(&b, ms_jschema_common());
    char *root = NULL;
    if (fmt && fmt->rules) {
        ms_chat_rules r = {calls, k, names, prompt && fmt->opening && fmt->opening(t, prompt, n_prompt) > 0,
                           ms_jchat_field(body, "chat_template_kwargs")};
        root = fmt->rules(t, &r);
    } else if (calls == MS_CHAT_CALLS_NO) {
        root = ms_strdup("root ::= content\n");
    } else {
        ms_err_set("the %s chat format has no tool calls", fmt ? fmt->name : "model's");
    }
    free(names);
    if (!root) {
        ms_jchat_refuse(why, n, param, calls != MS_CHAT_CALLS_NO ? "tools" : "response_format", "%s", ms_err_msg());
        goto fail;
    }
    ms_sbuf_adds(&b, root);
    free(root);
    size_t len;
    char *g = ms_sbuf_take(&b, &len);
    ms_grammar *cg = ms_grammar_parse(g, len); /* what the engine will compile */
    if (!cg) {
        ms_jchat_refuse(why, n, param, json ? "response_format" : "tools", "the answer's grammar: %s", ms_err_msg());
        free(g);
        return -1;
    }
    ms_grammar_free(cg);
    *grammar = g;
    return 0;
fail:
    ms_sbuf_free(&b);
    return -1;
}
