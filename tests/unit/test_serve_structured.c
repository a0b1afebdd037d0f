/* test_serve_structured: structured outputs in serve and jobs: response_format json_schema and
 * json_object (and the Responses API's text.format) give answers that parse and validate, whole
 * = streamed = jobs, the same with speculative drafts as without, on a random-weight model. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_families.h"
#include "ms_sbuf.h"
#include "ms_stest.h"
#include "ms_synth.h"
#include "ms_test.h"

static char dir[1100], tmp[1024];
static ms_st_server srv;

#define SCHEMA                                                                                                        \
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},\"age\":{\"type\":\"integer\"},"  \
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"enum\":[\"a\",\"b\"]},\"maxItems\":3}},"                 \
    "\"required\":[\"name\",\"age\",\"tags\"],\"additionalProperties\":false}"

/* The answer validates against SCHEMA (checked by hand: every keyword it uses). */
static int valid(const char *text)
{
    json_t *v = text ? json_loads(text, 0, NULL) : NULL, *name = json_object_get(v, "name"), *tags = json_object_get(v, "tags");
    int ok = json_is_object(v) && json_object_size(v) == 3 && json_is_string(name) && json_is_integer(json_object_get(v, "age")) &&
             json_is_array(tags) && json_array_size(tags) <= 3;
    /* maxLength counts characters */
    size_t chars = 0;
    for (const unsigned char *p = (const unsigned char *)json_string_value(name); ok && *p; p++) chars += (*p & 0xC0) != 0x80;
    ok = ok && chars <= 12;
    for (size_t i = 0; ok && i < json_array_size(tags); i++) {
        const char *t = json_string_value(json_array_get(tags, i));
        ok = t && (!strcmp(t, "a") || !strcmp(t, "b"));
    }
    json_decref(v);
    return ok;
}

static char *chat_content(const char *sampling, int stream)
{
    char b[1500], *out = NULL;
    snprintf(b, sizeof b, "{\"messages\":[{\"role\":\"user\",\"content\":\"Give me a person.\"}],\"max_tokens\":300,%s,%s"
             "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"person\",\"strict\":true,\"schema\":"
             SCHEMA "}}}", sampling, stream ? "\"stream\":true," : "");
    int st = ms_st_http(&srv, NULL, "/v1/chat/completions", b, &out, NULL);
    char *r = NULL;
    if (st == 200 && out && !stream) {
        json_t *o = json_loads(out, 0, NULL);
        json_t *c = json_array_get(json_object_get(o, "choices"), 0);
        const char *t = json_string_value(json_object_get(json_object_get(c, "message"), "content"));
        const char *f = json_string_value(json_object_get(c, "finish_reason"));
        if (t && f && !strcmp(f, "stop")) r = ms_strdup(t);
        json_decref(o);
    } else if (st == 200 && out) { /* the deltas' content joined */
        ms_sbuf t = {0};
        for (char *p = out; (p = strstr(p, "data: {"));) {
            char *e = strstr(p, "\n\n");
            json_t *o = e ? json_loadb(p + 6, (size_t)(e - p - 6), 0, NULL) : NULL;
            const char *d = json_string_value(json_object_get(json_object_get(json_array_get(json_object_get(o, "choices"), 0),
                                                                              "delta"), "content"));
            if (d) ms_sbuf_adds(&t, d);
            json_decref(o);
            p = e ? e : p + 6;
        }
        size_t l;
        r = t.s ? ms_sbuf_take(&t, &l) : ms_strdup("");
    }
    free(out);
    return r;
}

/* Three seeds and greedy: every answer ends and validates; streamed the same. Into got[4]. */
static void check_chats(char *got[4], const char *what)
{
    static const char *const samp[4] = {"\"temperature\":0", "\"temperature\":0.8,\"seed\":1", "\"temperature\":0.8,\"seed\":2",
                                        "\"temperature\":1.0,\"top_p\":0.9,\"seed\":3"};
    for (int i = 0; i < 4; i++) {
        got[i] = chat_content(samp[i], 0);
        char *s = chat_content(samp[i], 1);
        T_CHECK(got[i] && valid(got[i]) && s && !strcmp(s, got[i]),
                "%s, %s: the answer ends, parses and validates against the schema, streamed the same (%s)", what, samp[i],
                got[i] ? got[i] : "(none)");
        free(s);
    }
}

static void check_others(void)
{
    char *out = NULL;
    int st = ms_st_http(&srv, NULL, "/v1/chat/completions",
                        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":200,\"temperature\":0.5,\"seed\":9,"
                        "\"response_format\":{\"type\":\"json_object\"}}",
                        &out, NULL);
    json_t *o = out ? json_loads(out, 0, NULL) : NULL;
    json_t *c = json_array_get(json_object_get(o, "choices"), 0);
    const char *t = json_string_value(json_object_get(json_object_get(c, "message"), "content"));
    const char *f = json_string_value(json_object_get(c, "finish_reason"));
    json_t *v = t ? json_loads(t, 0, NULL) : NULL;
    T_CHECK(st == 200 && (!f || strcmp(f, "stop") || json_is_object(v)) && (f && !strcmp(f, "length") ? 1 : json_is_object(v)),
            "json_object: a finished answer is a JSON object (%s, %s)", f ? f : "-", t ? t : "-");
    json_decref(v);
    json_decref(o);
    free(out);
    /* the Responses API's text.format */
    out = NULL;
    st = ms_st_http(&srv, NULL, "/v1/responses",
                    "{\"input\":\"Give me a person.\",\"max_output_tokens\":300,\"temperature\":0.8,\"text\":{\"format\":"
                    "{\"type\":\"json_schema\",\"name\":\"person\",\"strict\":true,\"schema\":" SCHEMA "}}}",
                    &out, NULL);
    o = out ? json_loads(out, 0, NULL) : NULL;
    json_t *item = json_array_get(json_object_get(o, "output"), 0);
    t = json_string_value(json_object_get(json_array_get(json_object_get(item, "content"), 0), "text"));
    T_CHECK(st == 200 && !strcmp(json_string_value(json_object_get(o, "status")), "completed") && valid(t),
            "/v1/responses text.format json_schema: the output_text validates (%s)", t ? t : "-");
    json_decref(o);
    free(out);
}

/* Every family's demo model under its own chat format (harmony, ChatML with thinking, DeepSeek's,
 * Kimi's): jobs with a json_schema answer, after the format's reasoning, JSON that validates;
 * run --json-schema (a raw prompt: the whole text) the same. */
static void check_families(void)
{
    const char *bin = ms_t_bin("moestream");
    for (int f = 0; f < ms_families_count(); f++) {
        const ms_family *fam = ms_families_at(f);
        if (!fam->synth || !fam->demo_preset || !fam->chat) continue;
        char d[1200], in[1300], outp[1300], sc[1300];
        snprintf(d, sizeof d, "%s/fam-%s", tmp, fam->name);
        snprintf(in, sizeof in, "%s/jobs.jsonl", d);
        snprintf(outp, sizeof outp, "%s/out.jsonl", d);
        snprintf(sc, sizeof sc, "%s/schema.json", d);
        int sy = fam->synth(d, fam->demo_preset, 0, 0, 3);
        FILE *fp = sy == 0 ? fopen(in, "w") : NULL;
        for (int k = 0; fp && k < 3; k++)
            fprintf(fp, "{\"custom_id\":\"p%d\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[{\"role\":\"user\","
                        "\"content\":\"Give me a person.\"}],\"max_tokens\":300,\"temperature\":%s,\"seed\":%d,\"response_format\":"
                        "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"person\",\"strict\":true,\"schema\":" SCHEMA "}}}}\n",
                    k, k ? "0.8" : "0", k);
        if (fp) fclose(fp);
        ms_t_write_file(sc, SCHEMA);
        int st = ms_t_runf(NULL, NULL, "%s jobs --model %s --input %s --output %s --quiet --ram-budget 2G --max-context 512", bin,
                           d, in, outp);
        int good = 0, finished = 0;
        FILE *r = st == 0 ? fopen(outp, "r") : NULL;
        char line[1 << 16];
        while (r && fgets(line, sizeof line, r)) {
            json_t *o = json_loads(line, JSON_ALLOW_NUL, NULL);
            json_t *c = json_array_get(json_object_get(json_object_get(json_object_get(o, "response"), "body"), "choices"), 0);
            const char *t = json_string_value(json_object_get(json_object_get(c, "message"), "content"));
            const char *fin = json_string_value(json_object_get(c, "finish_reason"));
            int done = fin && !strcmp(fin, "stop"); /* a cut answer (length) may still be reasoning */
            finished += done;
            good += done && valid(t);
            json_decref(o);
        }
        if (r) fclose(r);
        char *out = NULL;
        int rs = ms_t_runf(&out, NULL, "%s run --model %s --prompt 'A person:' -n 300 --json-schema %s --json --quiet "
                           "--ram-budget 2G --temperature 0.7 --seed 5", bin, d, sc);
        json_t *o = out ? json_loads(out, 0, NULL) : NULL;
        int rv = valid(json_string_value(json_object_get(o, "text")));
        json_decref(o);
        free(out);
        T_CHECK(sy == 0 && st == 0 && finished >= 1 && good == finished && rs == 0 && rv,
                "%s (%s's chat format): the jobs answers that finished (%d of 3; a reasoning format's may run out of "
                "tokens first) and run --json-schema's validate (%d good; run %d)", fam->demo_preset, fam->name, finished, good, rs);
    }
}

int main(void)
{
    ms_log_set_level(0);
    if (ms_t_run("curl --version >/dev/null 2>&1", NULL) != 0) {
        ms_t_skip("SKIP: curl is not installed (deploy/install-deps.sh installs it)");
        return ms_t_done();
    }
    snprintf(tmp, sizeof tmp, "%s", ms_t_tmpdir("serve-structured"));
    snprintf(dir, sizeof dir, "%.1024s/m", tmp);
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    T_CHECK(ms_synth_write(dir, &sh, 11) == 0, "synth tiny: %s", ms_err_msg());
    char *off[4] = {0}, *on[4] = {0};
    if (ms_st_start(&srv, tmp, dir, "--max-batch 4 --max-context 512 --speculate off") == 0) {
        check_chats(off, "drafts off");
        check_others();
        T_CHECK(ms_st_stop(&srv) == 0, "SIGTERM: exit 0");
    }
    if (ms_st_start(&srv, tmp, dir, "--max-batch 4 --max-context 512 --speculate 4") == 0) {
        check_chats(on, "--speculate 4");
        T_CHECK(ms_st_stop(&srv) == 0, "SIGTERM: exit 0");
    }
    int same = 1;
    for (int i = 0; i < 4; i++) same &= off[i] && on[i] && !strcmp(off[i], on[i]);
    T_CHECK(same, "with drafts (verified under the grammar) the answers are those without");
    /* jobs: the same body, the same answer */
    char in[1200], outp[1200];
    snprintf(in, sizeof in, "%s/jobs.jsonl", tmp);
    snprintf(outp, sizeof outp, "%s/out.jsonl", tmp);
    FILE *f = fopen(in, "w");
    if (f) {
        fputs("{\"custom_id\":\"p\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[{\"role\":\"user\",\"content\":\"Give me a person.\"}],\"max_tokens\":300,"
              "\"temperature\":0.8,\"seed\":1,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"person\","
              "\"strict\":true,\"schema\":" SCHEMA "}}}}\n",
              f);
        fclose(f);
    }
    int st = ms_t_runf(NULL, NULL, "%s jobs --model %s --input %s --output %s --quiet --ram-budget 2G --max-context 512",
                       ms_t_bin("moestream"), dir, in, outp);
    json_t *line = json_load_file(outp, JSON_DISABLE_EOF_CHECK, NULL);
    const char *jt = json_string_value(json_object_get(
        json_object_get(json_array_get(json_object_get(json_object_get(json_object_get(line, "response"), "body"), "choices"), 0),
                        "message"),
        "content"));
    T_CHECK(st == 0 && jt && off[1] && !strcmp(jt, off[1]), "jobs: the same body, serve's answer (%s)", jt ? jt : "-");
    json_decref(line);
    for (int i = 0; i < 4; i++) {
        free(off[i]);
        free(on[i]);
    }
    check_families();
    return ms_t_done();
}
