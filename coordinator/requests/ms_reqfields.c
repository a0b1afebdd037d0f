/* ms_reqfields: the fields of request bodies serve and jobs take. */
#include <stdio.h>
#include <string.h>

#include "ms_reqfields.h"

/* "user", "safety_identifier" and "prompt_cache_key" (a client's name for itself, and a hint
 * for a cache this server keeps by prompt anyway) are strings that change nothing. */
/* max_completion_tokens, OpenAI's newer name of max_tokens in chats, is taken in completions too. */
static const char *const completion_fields[] = {"model", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed",
                                                "stop", "stream", "stream_options", "n", "user", "logprobs",
                                                "presence_penalty", "frequency_penalty", "logit_bias", "top_k",
                                                "min_p", "skip_special_tokens", "safety_identifier",
                                                "prompt_cache_key", NULL};
static const char *const chat_fields[] = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature",
                                          "top_p", "seed", "stop", "stream", "stream_options", "n", "user",
                                          "reasoning_effort", "tools", "tool_choice", "chat_template_kwargs",
                                          "logprobs", "top_logprobs", "presence_penalty", "frequency_penalty",
                                          "logit_bias", "top_k", "min_p", "skip_special_tokens", "safety_identifier",
                                          "prompt_cache_key", "response_format", NULL};

/* Fields of OpenAI's request schema this server does not implement, accepted at the value that
 * means "off" (null always counts as absent); any other value is refused naming the field. */
typedef enum { NEU_ZERO, NEU_FALSE, NEU_ONE, NEU_EMPTY, NEU_TEXT_FORMAT, NEU_TEXT_ONLY, NEU_TIER, NEU_BOOL, NEU_OBJECT,
               NEU_MEDIUM, NEU_NONE } neu_kind;
static const struct {
    const char *name;
    int chat;      /* 1: chat, 0: completions, 2: both */
    neu_kind kind;
    const char *neutral; /* for the message */
} neutral_fields[] = {
    {"echo", 0, NEU_FALSE, "false"},
    {"best_of", 0, NEU_ONE, "1"},
    {"suffix", 0, NEU_EMPTY, "\"\""},
    {"parallel_tool_calls", 1, NEU_BOOL, "true or false (one call a message either way)"},
    {"store", 1, NEU_FALSE, "false"},
    {"metadata", 1, NEU_OBJECT, "an object (nothing is stored)"},
    {"service_tier", 2, NEU_TIER, "\"auto\" or \"default\""},
    {"modalities", 1, NEU_TEXT_ONLY, "[\"text\"]"},
    {"audio", 1, NEU_NONE, "null"},
    {"prediction", 1, NEU_NONE, "null"},
    {"web_search_options", 1, NEU_NONE, "null"},
    {"functions", 1, NEU_EMPTY, "[] (use \"tools\")"},
    {"function_call", 1, NEU_NONE, "null (use \"tool_choice\")"},
    {"verbosity", 1, NEU_MEDIUM, "\"medium\""},
};

static int is_neutral(neu_kind k, const json_t *v)
{
    switch (k) {
    case NEU_ZERO: return json_is_number(v) && json_number_value(v) == 0;
    case NEU_FALSE: return json_is_false(v);
    case NEU_ONE: return json_is_integer(v) && json_integer_value(v) == 1;
    case NEU_EMPTY:
        return (json_is_object(v) && json_object_size(v) == 0) || (json_is_array(v) && json_array_size(v) == 0) ||
               (json_is_string(v) && json_string_length(v) == 0);
    case NEU_TEXT_FORMAT:
        return json_is_object(v) && json_object_size(v) == 1 && json_is_string(json_object_get(v, "type")) &&
               !strcmp(json_string_value(json_object_get(v, "type")), "text");
    case NEU_TEXT_ONLY:
        return json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0)) &&
               !strcmp(json_string_value(json_array_get(v, 0)), "text");
    case NEU_TIER:
        return json_is_string(v) && (!strcmp(json_string_value(v), "auto") || !strcmp(json_string_value(v), "default"));
    case NEU_BOOL: return json_is_boolean(v);
    case NEU_OBJECT: return json_is_object(v);
    case NEU_MEDIUM: return json_is_string(v) && !strcmp(json_string_value(v), "medium");
    case NEU_NONE: return 0;
    }
    return 0;
}

int ms_reqfields_check(const json_t *body, int chat, const char *extra, ms_reqfields_err *e)
{
    memset(e, 0, sizeof *e);
    const char *const *known = chat ? chat_fields : completion_fields;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)body, key, v)
    {
        int ok = extra && !strcmp(key, extra);
        for (int i = 0; known[i] && !ok; i++) ok = !strcmp(key, known[i]);
        for (size_t i = 0; i < sizeof neutral_fields / sizeof neutral_fields[0] && !ok; i++) {
            if (strcmp(key, neutral_fields[i].name) || (neutral_fields[i].chat != 2 && neutral_fields[i].chat != chat))
                continue;
            if (!json_is_null(v) && !is_neutral(neutral_fields[i].kind, v)) {
                e->code = "unsupported_value";
                e->param = neutral_fields[i].name;
                snprintf(e->message, sizeof e->message, "\"%s\" is not implemented: only %s (off) is accepted", key,
                         neutral_fields[i].neutral);
                return -1;
            }
            ok = 1;
        }
        if (!ok) {
            char list[512] = "";
            for (int i = 0; known[i]; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", known[i]);
            e->code = "unsupported_field";
            snprintf(e->param_own, sizeof e->param_own, "%s", key);
            e->param = e->param_own;
            snprintf(e->message, sizeof e->message, "unknown or unsupported field \"%.100s\" (supported: %s; docs/API.md "
                     "lists the fields accepted at their neutral value)", key, list);
            return -1;
        }
    }
    return 0;
}
