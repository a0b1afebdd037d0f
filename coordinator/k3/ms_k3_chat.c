/* ms_k3_chat: renders chat messages in Kimi's format straight to token ids. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ms_k3_chat.h"
#include "ms_err.h"

/* Growing id array. */
typedef struct {
    int32_t *v;
    size_t n, cap;
} ids_buf;

static void push(ids_buf *b, const int32_t *ids, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 16;
        b->v = ms_realloc(b->v, sizeof(int32_t) * b->cap);
    }
    if (n) memcpy(b->v + b->n, ids, sizeof(int32_t) * n);
    b->n += n;
}

static int push_special(ids_buf *b, const ms_tok *t, const char *name)
{
    int id = ms_tok_special_id(t, name);
    if (id < 0) {
        ms_err_set("the tokenizer has no special token %s, which the chat format needs", name);
        return ms_err_set_code(MS_EXIT_INPUT);
    }
    int32_t v = id;
    push(b, &v, 1);
    return 0;
}

static int push_text(ids_buf *b, const ms_tok *t, const char *text, size_t len)
{
    int32_t *ids = NULL;
    size_t n = 0;
    if (ms_tok_encode(t, text, len, 0, &ids, &n) != 0) return ms_err_set_code(MS_EXIT_INPUT);
    push(b, ids, n);
    free(ids);
    return 0;
}

/* <|im_X|>role<|im_middle|> */
static int push_header(ids_buf *b, const ms_tok *t, const char *marker, const char *role)
{
    if (push_special(b, t, marker) != 0) return -1;
    if (push_text(b, t, role, strlen(role)) != 0) return -1;
    return push_special(b, t, "<|im_middle|>");
}

int ms_k3_chat_encode(const ms_tok *t, const ms_chat_msg *msgs, int n, int32_t **ids, size_t *n_ids)
{
    *ids = NULL;
    *n_ids = 0;
    if (n < 1) {
        ms_err_set("a chat needs at least one message");
        return ms_err_set_code(MS_EXIT_INPUT);
    }
    ids_buf b = {0};
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
            ms_err_set("message %d: unknown role '%s' (known: system, developer, user, assistant)", i, role);
            ms_err_set_code(MS_EXIT_INPUT);
            goto fail;
        }
        if (push_header(&b, t, marker, role) != 0) goto fail;
        if (push_text(&b, t, msgs[i].content, msgs[i].len) != 0) {
            ms_err_wrap("message %d", i);
            goto fail;
        }
        if (push_special(&b, t, "<|im_end|>") != 0) goto fail;
    }
    if (push_header(&b, t, "<|im_assistant|>", "assistant") != 0) goto fail;
    *ids = b.v;
    *n_ids = b.n;
    return 0;
fail:
    free(b.v);
    return -1;
}

int32_t ms_k3_chat_end_id(const ms_tok *t) { return ms_tok_special_id(t, "<|im_end|>"); }

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
    return ms_k3_chat_encode(t, msgs, n, ids, n_ids);
}

static int stops(const ms_tok *t, int32_t *ids, int max)
{
    int32_t e = ms_k3_chat_end_id(t);
    if (e < 0 || max < 1) return 0;
    ids[0] = e;
    return 1;
}

/* The answer ends with <|im_end|> (generated, or added when it was cut), then the messages are
 * rendered as encode renders them: no preamble, each message on its own. */
static int follow(const ms_tok *t, int32_t last, const ms_chat_msg *msgs, int n, const ms_chat_opts *o, int32_t **ids,
                  size_t *n_ids)
{
    int32_t end = ms_k3_chat_end_id(t), *rest = NULL;
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

const ms_chatfmt ms_k3_chat = {"kimi", encode_fmt, stops, NULL, NULL, follow, NULL, ""};
