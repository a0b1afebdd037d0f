/* fuzz_messages: libFuzzer harness for Anthropic Messages bodies (ms_smsg_to_chat, then the chat
 * parser serve runs on what it makes) and for the message objects and events built from any bytes. */
#include <jansson.h>

#include "fuzz_tok.h"
#include "ms_sreq.h"
#include "ms_smsg.h"

/* One JSON value, or (events) "event: T\ndata: {...}\n\n" records each holding one. */
static void check_out(char *s, size_t len, int events)
{
    FUZZ_CHECK(s != NULL && len > 0);
    if (!events) {
        json_t *v = json_loadb(s, len, JSON_ALLOW_NUL, NULL);
        FUZZ_CHECK(v != NULL);
        json_decref(v);
    } else {
        for (char *p = s; p < s + len;) {
            FUZZ_CHECK(!strncmp(p, "event: ", 7));
            char *d = strstr(p, "\ndata: "), *end = d ? strstr(d, "\n\n") : NULL;
            FUZZ_CHECK(end != NULL);
            json_t *v = json_loadb(d + 7, (size_t)(end - d - 7), JSON_ALLOW_NUL, NULL);
            FUZZ_CHECK(v != NULL && json_is_string(json_object_get(v, "type")));
            json_decref(v);
            p = end + 2;
        }
    }
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    if (len < 1) return 0;
    const ms_tok *tok = fuzz_tok();
    ms_jobfile_limits lim = {tok, ms_tok_n_vocab(tok), 4096};
    int count_only = data[0] & 1;
    const char *text = (const char *)data + 1;
    size_t n = len - 1;
    char why[600] = "";
    const char *param = NULL;
    json_t *body = ms_smsg_to_chat(text, n, count_only, why, sizeof why, &param);
    if (!body) {
        fuzz_refused(why);
        FUZZ_CHECK(why[0] && param);
        size_t el;
        check_out(ms_smsg_error_json(400, why, &el), el, 0);
    } else {
        char *cb = json_dumps(body, JSON_COMPACT);
        FUZZ_CHECK(cb != NULL);
        ms_sreq r = {0};
        if (ms_sreq_parse(cb, strlen(cb), 1, &lim, &r) != 0)
            FUZZ_CHECK(r.status >= 400 && r.status < 500 && r.message && r.message[0]);
        else
            FUZZ_CHECK(r.chat && r.spec.n_prompt >= 1);
        ms_sreq_clear(&r);
        free(cb);
        json_decref(body);
    }
    /* answers and events whose texts and call are the input's bytes */
    size_t h = n / 3, k;
    ms_chat_answer a = {(char *)text, h, (char *)text + h, h, data[0] & 2 ? "f" : NULL, (char *)text + 2 * h, n - 2 * h};
    const char *seq = data[0] & 4 ? "END" : NULL;
    check_out(ms_smsg_message("msg_f", "m", &a, data[0] & 8 ? "length" : "stop", seq, 3, 4, &k), k, 0);
    ms_smsg_stream st;
    check_out(ms_smsg_stream_start(&st, "msg_f", "m", 3, &k), k, 1);
    char *ev = ms_smsg_stream_text(&st, a.reasoning, ms_sreq_utf8_ready(a.reasoning, a.reasoning_len), a.content,
                                   ms_sreq_utf8_ready(a.content, a.content_len), &k);
    if (ev) check_out(ev, k, 1);
    check_out(ms_smsg_stream_end(&st, &a, "stop", seq, 4, &k), k, 1);
    check_out(ms_smsg_stream_error(500, n && text[0] ? "x" : "", &k), k, 1);
    return 0;
}
