/* fuzz_responses: libFuzzer harness for Responses API bodies (ms_sresp_to_chat, then the chat
 * parser serve runs on what it makes) and for the response objects and events built from any bytes. */
#include <jansson.h>

#include "fuzz_tok.h"
#include "ms_sreq.h"
#include "ms_sresp.h"

/* One JSON value, or (events) "event: T\ndata: {...}\n\n" records each holding one with its type. */
static void check_out(char *s, size_t len, int events)
{
    FUZZ_CHECK(s != NULL && len > 0);
    if (!events) {
        json_t *v = json_loadb(s, len, JSON_ALLOW_NUL, NULL);
        FUZZ_CHECK(v != NULL && json_is_object(v));
        json_decref(v);
    } else {
        for (char *p = s; p < s + len;) {
            FUZZ_CHECK(!strncmp(p, "event: ", 7));
            char *d = strstr(p, "\ndata: "), *end = d ? strstr(d, "\n\n") : NULL;
            FUZZ_CHECK(end != NULL);
            json_t *v = json_loadb(d + 7, (size_t)(end - d - 7), JSON_ALLOW_NUL, NULL);
            FUZZ_CHECK(v != NULL && json_is_string(json_object_get(v, "type")) &&
                       json_is_integer(json_object_get(v, "sequence_number")));
            json_decref(v);
            p = end + 2;
        }
    }
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    static ms_sresp_store *store;
    if (!store) store = ms_sresp_store_new(4);
    if (len < 1) return 0;
    const ms_tok *tok = fuzz_tok();
    ms_jobfile_limits lim = {tok, ms_tok_n_vocab(tok), 4096};
    const char *text = (const char *)data + 1;
    size_t n = len - 1;
    char why[600] = "";
    const char *param = NULL;
    int status = 0;
    ms_sresp_req r;
    json_t *body = ms_sresp_to_chat(text, n, store, "m", &r, &status, why, sizeof why, &param);
    if (!body) {
        fuzz_refused(why);
        FUZZ_CHECK(why[0] && param && (status == 400 || status == 404));
        return 0;
    }
    char *cb = json_dumps(body, JSON_COMPACT);
    FUZZ_CHECK(cb != NULL && r.history && !strncmp(r.id, "resp_", 5));
    ms_sreq q = {0};
    if (ms_sreq_parse(cb, strlen(cb), 1, &lim, &q) != 0)
        FUZZ_CHECK(q.status >= 400 && q.status < 500 && q.message && q.message[0]);
    else
        FUZZ_CHECK(q.chat && q.spec.n_prompt >= 1);
    ms_sreq_clear(&q);
    free(cb);
    json_decref(body);
    /* answers and events whose texts and call are the input's bytes; the turn kept */
    size_t h = n / 3, k;
    ms_chat_answer a = {(char *)text, h, (char *)text + h, h, data[0] & 2 ? "f" : NULL, (char *)text + 2 * h, n - 2 * h};
    const char *fin = data[0] & 8 ? "length" : "stop";
    check_out(ms_sresp_response(&r, &a, fin, 3, 4, &k), k, 0);
    ms_sresp_stream st;
    check_out(ms_sresp_stream_start(&st, &r, &k), k, 1);
    char *ev = ms_sresp_stream_text(&st, &r, a.reasoning, ms_sreq_utf8_ready(a.reasoning, a.reasoning_len), a.content,
                                    ms_sreq_utf8_ready(a.content, a.content_len), &k);
    if (ev) check_out(ev, k, 1);
    check_out(ms_sresp_stream_end(&st, &r, &a, fin, 3, 4, &k), k, 1);
    check_out(ms_sresp_stream_error(&st, &r, "x", &k), k, 1);
    ms_sresp_stream_clear(&st);
    ms_sresp_store_put(store, &r, &a);
    ms_sresp_req_clear(&r);
    return 0;
}
