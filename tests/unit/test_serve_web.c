/* test_serve_web: the chat page (ms_sweb): GET / and its files served from the binary with their
 * types and headers, without the API key the API asks for; then in a real browser (Debian's
 * chromium, headless, tests/node/web.mjs): the key asked for, an answer seen growing token by
 * token, one stopped mid-way, the conversation kept over a reload, usable at 320 px, dark and
 * light, no console errors, screenshots written. Skips the browser part visibly without chromium
 * or npm. MS_WEB_SCREENSHOT_DIR: where the screenshots go (docs/images for the README's). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ms_err.h"
#include "ms_stest.h"
#include "ms_sweb.h"
#include "ms_synth.h"
#include "ms_test.h"

#define KEY "web-key-0123456789"

static ms_st_server srv;

static void check_files(void)
{
    T_CHECK(ms_sweb_find("/") && !strcmp(ms_sweb_find("/")->path, "/index.html") && ms_sweb_find("/app.js") &&
                ms_sweb_find("/app.css") && ms_sweb_find("/?x=1") && !ms_sweb_find("/nope") && !ms_sweb_find("/v1/models"),
            "the page's files: / is index.html, app.js, app.css; nothing else");
    char *out = NULL, *hd = NULL;
    int st = ms_st_http(&srv, NULL, "/", NULL, &out, &hd);
    T_CHECK(st == 200 && out && strstr(out, "<!doctype html>") && strstr(out, "/app.js") && hd &&
                strstr(hd, "text/html; charset=utf-8") && strstr(hd, "Content-Security-Policy: default-src 'self'") &&
                strstr(hd, "X-Content-Type-Options: nosniff"),
            "GET / without a key: the page, text/html, a CSP allowing this server only (%d)", st);
    free(out);
    free(hd);
    out = hd = NULL;
    st = ms_st_http(&srv, NULL, "/app.js", NULL, &out, &hd);
    T_CHECK(st == 200 && out && strstr(out, "/v1/chat/completions") && hd && strstr(hd, "text/javascript"),
            "GET /app.js: the script, text/javascript (%d)", st);
    free(out);
    free(hd);
    out = NULL;
    st = ms_st_http(&srv, "-X POST", "/", "{}", &out, NULL);
    T_CHECK(st == 405, "POST / is 405 (%d)", st);
    free(out);
    out = NULL;
    st = ms_st_http(&srv, "-H 'Authorization: Bearer nope'", "/v1/models", NULL, &out, NULL);
    T_CHECK(st == 401, "the API still wants the key (%d)", st);
    free(out);
    out = NULL;
    st = ms_st_http(&srv, NULL, "/health", NULL, &out, NULL);
    T_CHECK(st == 200 && out && strstr(out, "\"api_key\":\"required\""), "/health says a key is required (%s)", out ? out : "-");
    free(out);
}

/* /api/engine after a request: every MoE layer saw the same rows (top_k routes each), the reads
 * by expert add up to the store's misses, the budget's parts to at most the budget. */
static void check_view(void)
{
    char *out = NULL;
    int st = ms_st_http(&srv, "-H 'Authorization: Bearer " KEY "'", "/v1/chat/completions",
                        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":6}", &out, NULL);
    free(out);
    out = NULL;
    int st2 = ms_st_http(&srv, "-H 'Authorization: Bearer " KEY "'", "/api/engine", NULL, &out, NULL);
    json_t *o = out ? json_loads(out, 0, NULL) : NULL;
    json_t *ex = json_object_get(o, "experts"), *layers = json_object_get(ex, "layers"), *c = json_object_get(o, "counters");
    json_int_t k = json_integer_value(json_object_get(ex, "top_k")), first = -1, reads = 0;
    int same = json_array_size(layers) > 0;
    for (size_t l = 0; l < json_array_size(layers); l++) {
        json_t *L = json_array_get(layers, l);
        json_int_t sum = 0;
        for (size_t e = 0; e < json_array_size(json_object_get(L, "routes")); e++)
            sum += json_integer_value(json_array_get(json_object_get(L, "routes"), e));
        for (size_t e = 0; e < json_array_size(json_object_get(L, "reads")); e++)
            reads += json_integer_value(json_array_get(json_object_get(L, "reads"), e));
        if (first < 0) first = sum;
        same &= sum == first && sum > 0 && k > 0 && sum % k == 0;
    }
    json_int_t misses = json_integer_value(json_object_get(c, "expert_cache_misses"));
    json_t *b = json_object_get(o, "budget");
    json_int_t parts = 0;
    for (size_t i = 0; i < json_array_size(json_object_get(b, "parts")); i++)
        parts += json_integer_value(json_object_get(json_array_get(json_object_get(b, "parts"), i), "bytes"));
    T_CHECK(st == 200 && st2 == 200 && same && reads == misses && parts > 0 && parts <= json_integer_value(json_object_get(b, "total")) &&
                json_integer_value(json_object_get(c, "generated_tokens")) >= 1,
            "/api/engine: every MoE layer routed the same rows (%lld, top_k %lld each), reads by expert = the cache's misses "
            "(%lld, %lld), the budget's parts within it (%lld of %lld)", (long long)first, (long long)k, (long long)reads,
            (long long)misses, (long long)parts, (long long)json_integer_value(json_object_get(b, "total")));
    json_decref(o);
    free(out);
    out = NULL;
    st = ms_st_http(&srv, NULL, "/api/engine", NULL, &out, NULL);
    T_CHECK(st == 401, "/api/engine wants the key (%d)", st);
    free(out);
}

/* With a local worker holding the experts: the view lists it, up, and counts routes (no reads:
 * the worker reads). */
static void check_view_workers(const char *tmp, const char *dir)
{
    ms_st_server w;
    if (ms_st_start(&w, tmp, dir, "--max-context 512 --local-workers 1") != 0) return;
    char *out = NULL;
    int st = ms_st_http(&w, NULL, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4}",
                        &out, NULL);
    free(out);
    out = NULL;
    int st2 = ms_st_http(&w, NULL, "/api/engine", NULL, &out, NULL);
    json_t *o = out ? json_loads(out, 0, NULL) : NULL, *wk = json_object_get(o, "workers"), *ex = json_object_get(o, "experts");
    json_t *w0 = json_array_get(json_object_get(wk, "list"), 0), *l0 = json_array_get(json_object_get(ex, "layers"), 0);
    json_int_t routed = 0;
    for (size_t e = 0; e < json_array_size(json_object_get(l0, "routes")); e++)
        routed += json_integer_value(json_array_get(json_object_get(l0, "routes"), e));
    const char *src = json_string_value(json_object_get(ex, "source")), *state = json_string_value(json_object_get(w0, "state"));
    T_CHECK(st == 200 && st2 == 200 && json_integer_value(json_object_get(wk, "listed")) == 1 &&
                json_integer_value(json_object_get(wk, "up")) == 1 && state && !strcmp(state, "up") && src &&
                !strcmp(src, "workers") && json_is_null(json_object_get(l0, "reads")) && routed > 0,
            "/api/engine with a local worker: listed and up (%s), experts from workers, %lld rows routed in the first layer",
            state ? state : "-", (long long)routed);
    /* the worker's own counts: every request of the total went to it (the only worker), each
     * answered, their mean latency positive and under a minute */
    json_int_t wreq = json_integer_value(json_object_get(w0, "requests")), wrep = json_integer_value(json_object_get(w0, "replies"));
    double wsec = json_real_value(json_object_get(w0, "reply_seconds"));
    T_CHECK(wreq > 0 && wreq == json_integer_value(json_object_get(wk, "requests")) && wrep == wreq && wsec > 0 &&
                wsec / (double)wrep < 60,
            "the worker's line: %lld requests (of %lld in all), %lld replies, %.1f ms a reply", (long long)wreq,
            (long long)json_integer_value(json_object_get(wk, "requests")), (long long)wrep,
            wrep ? 1000 * wsec / (double)wrep : 0.0);
    json_decref(o);
    free(out);
    T_CHECK(ms_st_stop(&w) == 0, "SIGTERM (with a worker): exit 0");
}

static long size_of(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

static void check_browser(const char *tmp)
{
    if (ms_t_run("test -x /usr/bin/chromium", NULL) != 0) {
        ms_t_skip("SKIP: /usr/bin/chromium is not installed (deploy/install-deps.sh installs it): the browser test did not run");
        return;
    }
    const char *nd = ms_st_node("the browser test of the chat page");
    if (!nd) return;
    const char *shots = getenv("MS_WEB_SCREENSHOT_DIR");
    if (!shots || !*shots) shots = tmp;
    char *out = NULL, *err = NULL;
    int st = ms_t_runf(&out, &err, "cd %s && timeout 240 node web.mjs %s %s %s", nd, srv.url, KEY, shots);
    json_t *o = out ? json_loads(out, 0, NULL) : NULL;
    T_CHECK(st == 0 && o && !json_object_get(o, "error"), "web.mjs ran (exit %d): %s at %s %s", st,
            json_string_value(json_object_get(o, "error")) ? json_string_value(json_object_get(o, "error")) : "",
            json_string_value(json_object_get(o, "step")) ? json_string_value(json_object_get(o, "step")) : "-", err ? err : "");
    char *dump = o ? json_dumps(o, JSON_COMPACT) : NULL;
    T_CHECK(json_array_size(json_object_get(o, "console_errors")) == 0 && json_array_size(json_object_get(o, "page_errors")) == 0,
            "no console errors, no page errors (%s)", dump ? dump : "-");
    T_CHECK(json_is_true(json_object_get(o, "asked_key")) && json_is_string(json_object_get(o, "model")),
            "the page asked for the key, then named the model");
    json_int_t grew = json_integer_value(json_object_get(o, "growth_steps"));
    T_CHECK(grew >= 3, "the answer appeared token by token (%lld lengths seen)", (long long)grew);
    json_t *ends = json_object_get(o, "stopped");
    const char *last = json_string_value(json_array_get(ends, json_array_size(ends) - 1));
    T_CHECK(last && !strcmp(last, "stopped") && json_integer_value(json_object_get(o, "stopped_len")) > 0,
            "Stop ends an answer mid-way, what came kept (%s)", last ? last : "-");
    T_CHECK(json_integer_value(json_object_get(o, "after_reload")) >= 4, "a reload shows the conversation (kept in the browser)");
    T_CHECK(json_integer_value(json_object_get(o, "heatmap_after_reload")) > 0,
            "after the reload the heatmap still shows the conversation's experts (%s: %lld cells)",
            json_string_value(json_object_get(o, "since_after_reload")) ? json_string_value(json_object_get(o, "since_after_reload")) : "-",
            (long long)json_integer_value(json_object_get(o, "heatmap_after_reload")));
    json_t *nw = json_object_get(o, "narrow");
    T_CHECK(json_integer_value(json_object_get(nw, "scroll")) <= 320 && json_is_true(json_object_get(nw, "side_hidden")) &&
                json_real_value(json_object_get(nw, "send_right")) <= 320.0,
            "at 320 px: no sideways scrolling, the list behind its button, Send within the width");
    json_t *eb = json_object_get(o, "engine_before"), *ea = json_object_get(o, "engine_after");
    const char *gen_b = json_string_value(json_array_get(eb, 7)), *gen_a = json_string_value(json_array_get(ea, 7));
    const char *spt = json_string_value(json_array_get(ea, 0));
    T_CHECK(json_integer_value(json_object_get(o, "budget_parts")) == 8 && json_real_value(json_object_get(o, "budget_width")) > 0.5 &&
                json_real_value(json_object_get(o, "budget_width")) <= 100.01,
            "the engine view's budget bar: 8 parts within the budget (%.2f%% of it)", json_real_value(json_object_get(o, "budget_width")));
    T_CHECK(gen_b && gen_a && atoi(gen_a) > atoi(gen_b) && spt && strcmp(spt, "-") &&
                json_integer_value(json_object_get(o, "heatmap_cells")) > 0,
            "the engine view after an answer: tokens %s -> %s, s/token %s, %lld heatmap pixels lit", gen_b ? gen_b : "-",
            gen_a ? gen_a : "-", spt ? spt : "-", (long long)json_integer_value(json_object_get(o, "heatmap_cells")));
    const char *th = json_string_value(json_object_get(o, "theme"));
    T_CHECK(th && (!strcmp(th, "dark") || !strcmp(th, "light")), "the theme toggles (%s)", th ? th : "-");
    char p1[1300], p2[1300];
    snprintf(p1, sizeof p1, "%s/page-desktop.png", shots);
    snprintf(p2, sizeof p2, "%s/page-narrow.png", shots);
    T_CHECK(size_of(p1) > 8000 && size_of(p2) > 4000, "screenshots written: %s (%ld bytes), %s (%ld bytes)", p1, size_of(p1), p2,
            size_of(p2));
    free(dump);
    json_decref(o);
    free(out);
    free(err);
}

int main(void)
{
    ms_log_set_level(0);
    if (ms_t_run("curl --version >/dev/null 2>&1", NULL) != 0) {
        ms_t_skip("SKIP: curl is not installed (deploy/install-deps.sh installs it)");
        return ms_t_done();
    }
    char tmp[1024], dir[1100], key[1100];
    snprintf(tmp, sizeof tmp, "%s", ms_t_tmpdir("serve-web"));
    snprintf(dir, sizeof dir, "%.1024s/m", tmp);
    snprintf(key, sizeof key, "%.1024s/key", tmp);
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    T_CHECK(ms_synth_write(dir, &sh, 11) == 0, "synth tiny: %s", ms_err_msg());
    ms_t_write_file(key, KEY "\n");
    char extra[1300];
    snprintf(extra, sizeof extra, "--max-context 1024 --api-key-file %s", key);
    if (ms_st_start(&srv, tmp, dir, extra) == 0) {
        check_files();
        check_view();
        check_browser(tmp);
        T_CHECK(ms_st_stop(&srv) == 0, "SIGTERM: exit 0");
    }
    check_view_workers(tmp, dir);
    return ms_t_done();
}
