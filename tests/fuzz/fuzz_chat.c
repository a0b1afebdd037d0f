/* fuzz_chat: libFuzzer harness for chat requests (OpenAI shape: messages, tool calls, tools, template options) rendered by the families' formats (harmony, Kimi, DeepSeek-V3), and for the tojson writer. */
#include "fuzz_tok.h"
#include "fuzz_util.h"
#include "ms_dsv3_model.h"
#include "ms_families.h"
#include "ms_gptoss_chat.h"
#include "ms_jchat.h"
#include "ms_jobfile.h"
#include "ms_pyjson.h"

static int valid_utf8(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n) return 0;
        for (size_t j = 1; j < k; j++)
            if ((u[i + j] & 0xC0) != 0x80) return 0;
        i += k;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    if (len < 1) return 0;
    int render_only = data[0] & 1;
    json_error_t je;
    json_t *body = ms_jobfile_json_load((const char *)data + 1, len - 1, &je);
    if (!body) return 0;
    /* tojson: what it writes reads back to the same value (floats in their shortest form) */
    size_t pl;
    char *py = ms_pyjson_dumps(body, &pl);
    FUZZ_CHECK(py && strlen(py) == pl && valid_utf8(py, pl));
    json_t *back = json_loadb(py, pl, JSON_DECODE_ANY, &je);
    FUZZ_CHECK(back && json_equal(back, body));
    json_decref(back);
    free(py);
    ms_jchat c;
    char why[768];
    const char *param = NULL;
    /* the template variables a chat may set are its format's: harmony's, (bit 1) Kimi's none, or
     * (bit 2) DeepSeek-V3's thinking */
    const ms_chatfmt *fmt = data[0] & 4   ? &ms_dsv3_chat
                            : data[0] & 2 ? ms_families_find("kimi-k3")->chat
                                          : &ms_gptoss_chat;
    if (json_is_object(body) && ms_jchat_read(body, fmt, "2025-08-05", render_only, &c, why, sizeof why, &param) == 0) {
        FUZZ_CHECK(c.n >= 1 && c.msgs);
        char *text = NULL;
        size_t tl = 0;
        if (ms_gptoss_chat_render(c.msgs, c.n, &c.opts, &text, &tl) == 0) {
            /* a rendered prompt: the system message first, valid UTF-8 (every input string is) */
            FUZZ_CHECK(text && tl > 26 && !memcmp(text, "<|start|>system<|message|>", 26) && valid_utf8(text, tl));
            FUZZ_CHECK(c.opts.no_generation_prompt || (tl >= 18 && !memcmp(text + tl - 18, "<|start|>assistant", 18)));
        } else {
            FUZZ_CHECK(ms_err_code() == MS_EXIT_INPUT && ms_err_msg()[0]);
        }
        free(text);
        /* Kimi's format: renders or refuses, never crashes */
        const ms_family *k3 = ms_families_find("kimi-k3");
        int32_t *ids = NULL;
        size_t ni = 0;
        const ms_tok *tok = fuzz_tok();
        if (k3->chat->encode(tok, c.msgs, c.n, &c.opts, &ids, &ni) == 0) FUZZ_CHECK(ni > 0);
        free(ids);
        /* DeepSeek-V3's: BOS first, valid UTF-8 (tools, calls and results in either variant's form) */
        if (ms_dsv3_chat_render(c.msgs, c.n, &c.opts, &text, &tl) == 0) {
            static const char bos[] = "<｜begin▁of▁sentence｜>";
            FUZZ_CHECK(text && tl >= sizeof bos - 1 && !memcmp(text, bos, sizeof bos - 1) && valid_utf8(text, tl));
            free(text);
        } else {
            FUZZ_CHECK(ms_err_code() == MS_EXIT_INPUT && ms_err_msg()[0]);
        }
        ms_jchat_clear(&c);
    } else if (json_is_object(body)) {
        FUZZ_CHECK(param && why[0]);
    }
    json_decref(body);
    return 0;
}
