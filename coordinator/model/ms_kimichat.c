/* ms_kimichat: Kimi's chat format (Kimi K3, Kimi K2): messages -> prompt pieces -> token ids. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ms_chatp.h"
#include "ms_kimichat.h"
#include "ms_err.h"

int ms_kimichat_encode(const ms_tok *t, const ms_chat_msg *msgs, int n, int32_t **ids, size_t *n_ids)
{
    *ids = NULL;
    *n_ids = 0;
    if (n < 1) {
        ms_err_set("a chat needs at least one message");
        return ms_err_set_code(MS_EXIT_INPUT);
    }
    ms_chatp p = {0};
    for (int i = 0; i < n; i++) {
        const char *role = msgs[i].role, *marker;
        /* Kimi's template gives every role but user and assistant the system marker, with the
         * role's own name: OpenAI's developer (the newer name of system) is one of those. */
        if (!strcmp(role, "system") || !strcmp(role, "developer"))
            marker = "<|im_system|>";
        else if (!strcmp(role, "user"))
            marker = "<|im_user|>";
        else if (!strcmp(role, "assistant"))
            marker = "<|im_assistant|>";
        else {
            ms_chatp_free(&p);
            ms_err_set("message %d: unknown role '%s' (known: system, developer, user, assistant)", i, role);
            return ms_err_set_code(MS_EXIT_INPUT);
        }
        if (msgs[i].content && !ms_chatp_valid_utf8(msgs[i].content, msgs[i].len)) {
            ms_chatp_free(&p);
            ms_err_set("message %d: content is not valid UTF-8", i);
            return ms_err_set_code(MS_EXIT_INPUT);
        }
        ms_chatp_mark(&p, marker);
        ms_chatp_text(&p, role);
        ms_chatp_mark(&p, "<|im_middle|>");
        ms_chatp_put(&p, msgs[i].content ? msgs[i].content : "", msgs[i].content ? msgs[i].len : 0, 0);
        ms_chatp_mark(&p, "<|im_end|>");
    }
    ms_chatp_mark(&p, "<|im_assistant|>");
    ms_chatp_text(&p, "assistant");
    ms_chatp_mark(&p, "<|im_middle|>");
    int rc = ms_chatp_encode(&p, t, "kimi", ids, n_ids);
    ms_chatp_free(&p);
    return rc;
}

int32_t ms_kimichat_end_id(const ms_tok *t) { return ms_tok_special_id(t, "<|im_end|>"); }

/* Kimi's format has no date, reasoning effort or model identity: those options do not change it
 * (a template ignores variables it does not read); a reasoning sent back with an earlier answer
 * is dropped, as for any earlier turn. Tools and the training form it does not render here. */
static int encode_fmt(const ms_tok *t, const ms_chat_msg *msgs, int n, const ms_chat_opts *o, int32_t **ids,
                      size_t *n_ids)
{
    *ids = NULL;
    *n_ids = 0;
    const char *no = NULL;
    if (o && o->tools && json_array_size((const json_t *)o->tools) > 0) no = "\"tools\"";
    else if (o && o->no_generation_prompt) no = "a chat without the generation prompt";
    if (no) {
        ms_err_set("the kimi chat format does not render %s in this build", no);
        return ms_err_set_code(MS_EXIT_INPUT);
    }
    for (int i = 0; i < n; i++)
        if (msgs[i].n_calls > 0 || !msgs[i].content) {
            ms_err_set("message %d: %s", i,
                       msgs[i].n_calls > 0 ? "tool calls are not rendered by the kimi chat format in this build"
                                           : "needs content");
            return ms_err_set_code(MS_EXIT_INPUT);
        }
    return ms_kimichat_encode(t, msgs, n, ids, n_ids);
}

static int stops(const ms_tok *t, int32_t *ids, int max)
{
    int32_t e = ms_kimichat_end_id(t);
    if (e < 0 || max < 1) return 0;
    ids[0] = e;
    return 1;
}

/* The answer ends with <|im_end|> (generated, or added when it was cut), then the messages are
 * rendered as encode renders them: no preamble, each message on its own. */
static int follow(const ms_tok *t, int32_t last, const ms_chat_msg *msgs, int n, const ms_chat_opts *o, int32_t **ids,
                  size_t *n_ids)
{
    int32_t end = ms_kimichat_end_id(t), *rest = NULL;
    size_t nr = 0;
    if (end < 0) {
        ms_err_set("the tokenizer has no <|im_end|>, which the kimi chat format needs");
        return ms_err_set_code(MS_EXIT_INPUT);
    }
    if (encode_fmt(t, msgs, n, o, &rest, &nr) != 0) return -1;
    size_t k = last == end ? 1 : 2;
    *ids = ms_malloc(sizeof(int32_t) * (nr + k));
    if (k == 2) (*ids)[0] = last;
    (*ids)[k - 1] = end;
    memcpy(*ids + k, rest, sizeof(int32_t) * nr);
    *n_ids = nr + k;
    free(rest);
    return 0;
}

const ms_chatfmt ms_kimichat = {"kimi", encode_fmt, stops, NULL, NULL, follow, NULL, ""};
