/* fuzz_request: libFuzzer harness for the request parsers of jobs lines (ms_jobspec_parse) and of
 * serve's completion bodies (ms_sreq_parse), and for the answer JSON built from what they accept. */
#include <jansson.h>
#include <math.h>

#include "fuzz_tok.h"
#include "ms_jobfile.h"
#include "ms_sreq.h"

#define MAX_CONTEXT 4096

/* What every accepted request must satisfy, whichever parser accepted it. */
static void check_spec(const ms_jobspec *j, int64_t vocab)
{
    FUZZ_CHECK(j->err_code == NULL);
    FUZZ_CHECK(j->n_prompt >= 1 && j->prompt != NULL);
    for (size_t i = 0; i < j->n_prompt; i++) FUZZ_CHECK(j->prompt[i] >= 0 && j->prompt[i] < vocab);
    FUZZ_CHECK(j->max_tokens >= 1 && (int64_t)j->n_prompt + j->max_tokens <= MAX_CONTEXT);
    FUZZ_CHECK(isfinite(j->temperature) && j->temperature >= 0);
    FUZZ_CHECK(isfinite(j->top_p) && j->top_p > 0 && j->top_p <= 1);
    for (int i = 0; i < j->n_stop; i++) FUZZ_CHECK(j->stop[i] && j->stop[i][0]);
    FUZZ_CHECK(j->n_stop <= 4 && j->top_k >= 0 && j->min_p >= 0 && j->min_p <= 1);
    FUZZ_CHECK(fabsf(j->presence_penalty) <= 2 && fabsf(j->frequency_penalty) <= 2);
    for (int i = 0; i < j->n_logit_bias; i++)
        FUZZ_CHECK(j->logit_bias[i].id >= 0 && j->logit_bias[i].id < vocab && fabsf(j->logit_bias[i].bias) <= 100);
    FUZZ_CHECK(j->top_logprobs >= 0 && j->top_logprobs <= MS_MAX_TOP_LOGPROBS && (j->logprobs || !j->top_logprobs));
    FUZZ_CHECK(j->n >= 1);
}

/* An answer object must be one valid JSON value (text with any bytes becomes valid UTF-8). */
static void check_json(char *s, size_t len, int sse)
{
    FUZZ_CHECK(s != NULL);
    const char *p = s;
    size_t n = len;
    if (sse) { /* "data: {...}\n\n" */
        FUZZ_CHECK(len > 8 && !memcmp(s, "data: ", 6) && s[len - 2] == '\n' && s[len - 1] == '\n');
        p += 6;
        n -= 8;
    }
    json_error_t e;
    json_t *v = json_loadb(p, n, JSON_ALLOW_NUL, &e); /* generated text may hold U+0000: "\u0000" is valid JSON */
    FUZZ_CHECK(v != NULL);
    json_decref(v);
    free(s);
}

/* Names logprobs through the tokenizer or as "token_id:N" (the input's length decides). */
static int i_tok_mode(const uint8_t *data) { return data[0] / 3 % 2 == 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    if (len < 1) return 0;
    const ms_tok *tok = fuzz_tok();
    ms_jobfile_limits lim = {tok, ms_tok_n_vocab(tok), MAX_CONTEXT};
    int mode = data[0] % 3; /* 0: a jobs line, 1: a completions body, 2: a chat body */
    const char *text = (const char *)data + 1;
    size_t n = len - 1;
    if (mode == 0) {
        ms_jobspec j;
        ms_jobspec_parse(text, n, 7, &lim, &j);
        FUZZ_CHECK(j.custom_id != NULL);
        if (j.err_code) {
            fuzz_refused(j.err_msg);
            FUZZ_CHECK(j.err_msg && !strncmp(j.err_msg, "line 7", 6));
            /* its error line: one JSON object with the error (the message may quote any bytes) */
            size_t el = 0;
            char *line = ms_jobline_error(&j, j.err_code, j.err_msg, &el);
            FUZZ_CHECK(line && el > 0 && line[el - 1] == '\n');
            json_t *o = json_loadb(line, el, 0, NULL);
            FUZZ_CHECK(o && json_is_object(json_object_get(o, "error")) &&
                       json_is_string(json_object_get(json_object_get(o, "error"), "message")));
            json_decref(o);
            free(line);
        } else {
            FUZZ_CHECK(memchr(text, 0, n) == NULL); /* a raw NUL is not JSON (jansson skips some) */
            check_spec(&j, lim.vocab);
        }
        ms_jobspec_clear(&j);
        return 0;
    }
    ms_sreq r = {0};
    if (ms_sreq_parse(text, n, mode == 2, &lim, &r) != 0) {
        fuzz_refused(r.message);
        FUZZ_CHECK(r.status >= 400 && r.status < 500 && r.code && r.message && r.message[0]);
        size_t el = 0;
        check_json(ms_sreq_error_json(r.status, r.code, r.message, r.param, &el), el, 0);
        ms_sreq_clear(&r);
        return 0;
    }
    FUZZ_CHECK(memchr(text, 0, n) == NULL);
    check_spec(&r.spec, lim.vocab);
    FUZZ_CHECK(r.chat == (mode == 2));
    /* Answers with the request's own bytes as generated text (any bytes) and its prompt as ids. */
    ms_sreq_ident id;
    ms_sreq_ident_new(&r, "fuzz-model", &id);
    size_t k = 0;
    check_json(ms_sreq_completion(&r, &id, r.spec.prompt, r.spec.n_prompt, text, n, "stop", r.spec.n_prompt, NULL, &k), k, 0);
    /* logprobs of the prompt's ids as if generated: their names through the tokenizer and raw */
    ms_token_logprob *lp = ms_calloc(r.spec.n_prompt, sizeof *lp);
    for (size_t i = 0; i < r.spec.n_prompt; i++) {
        lp[i].logprob = -(float)i;
        lp[i].n_top = r.spec.top_logprobs;
        for (int t = 0; t < lp[i].n_top; t++) lp[i].top_id[t] = r.spec.prompt[(i + (size_t)t) % r.spec.n_prompt];
    }
    size_t off = 0;
    json_t *lj = ms_jobfile_logprobs_json(r.chat, (i_tok_mode(data) ? tok : NULL), r.spec.prompt, lp, r.spec.n_prompt,
                                          r.spec.top_logprobs, &off);
    check_json(ms_sreq_completion(&r, &id, r.spec.prompt, r.spec.n_prompt, text, n, "stop", r.spec.n_prompt, lj, &k), k, 0);
    free(lp);
    size_t ready = ms_sreq_utf8_ready(text, n);
    FUZZ_CHECK(ready <= n && n - ready < 4);
    check_json(ms_sreq_chunk(&r, &id, 0, r.spec.prompt, r.spec.n_prompt, text, ready, NULL, 1, NULL, &k), k, 1);
    check_json(ms_sreq_chunk(&r, &id, 0, NULL, 0, "", 0, "length", 0, NULL, &k), k, 1);
    check_json(ms_sreq_usage_chunk(&r, &id, r.spec.n_prompt, 3, &k), k, 1);
    ms_sreq_clear(&r);
    return 0;
}
