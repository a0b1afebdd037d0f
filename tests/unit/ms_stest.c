/* ms_stest: a serve process and curl requests for the serve tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_stest.h"

int ms_st_start(ms_st_server *s, const char *tmp, const char *model, const char *extra)
{
    memset(s, 0, sizeof *s);
    snprintf(s->tmp, sizeof s->tmp, "%s", tmp);
    static char words[4096], log[1100];
    static int n_started;
    snprintf(log, sizeof log, "%s/serve-%d.log", tmp, n_started++);
    /* a fixed date: harmony's prompts carry it, so today's would make the answers (and any
     * check of their text) depend on the day the test runs */
    snprintf(words, sizeof words, "--model %s --listen 127.0.0.1:0 --ram-budget 2G%s %s", model,
             extra && strstr(extra, "--date") ? "" : " --date 2025-08-05", extra ? extra : "");
    const char *argv[64];
    int n = 0;
    argv[n++] = ms_t_bin("moestream");
    argv[n++] = "serve";
    for (char *w = strtok(words, " "); w && n < 62; w = strtok(NULL, " ")) argv[n++] = w;
    argv[n] = NULL;
    ms_t_worker_opts o = {log, NULL, NULL, 60};
    int st = ms_t_worker_start(&s->w, argv, &o);
    snprintf(s->url, sizeof s->url, "%.200s", s->w.ep);
    T_CHECK(st == 0 && !strncmp(s->url, "http://127.0.0.1:", 17), "serve %s starts (%s)", extra ? extra : "", s->url);
    return st;
}

int ms_st_stop(ms_st_server *s) { return ms_t_worker_stop(&s->w, 30, NULL); }

int ms_st_http(ms_st_server *s, const char *curl_args, const char *path, const char *body, char **out, char **headers)
{
    char bf[1100], of[1100], hf[1100];
    snprintf(bf, sizeof bf, "%s/st-body-%d.json", s->tmp, s->k);
    snprintf(of, sizeof of, "%s/st-out-%d.txt", s->tmp, s->k);
    snprintf(hf, sizeof hf, "%s/st-head-%d.txt", s->tmp, s->k++);
    if (body) ms_t_write_file(bf, body);
    char *code = NULL;
    int st = ms_t_runf(&code, NULL, "curl -s -N -o %s -D %s -w '%%{http_code}' %s %s%s%s '%s%s'", of, hf,
                       curl_args ? curl_args : "", body ? "--data-binary @" : "", body ? bf : "",
                       body ? " -H 'Content-Type: application/json'" : "", s->url, path);
    int status = st == 0 && code ? atoi(code) : -(st ? st : 1);
    free(code);
    if (out) *out = ms_t_read_file(of, NULL);
    if (headers) *headers = ms_t_read_file(hf, NULL);
    return status;
}

const char *ms_st_node(const char *what)
{
    static char nd[1200];
    const char *src = getenv("MS_SOURCE_DIR"), *b = getenv("MS_BIN_DIR");
    if (ms_t_run("node --version >/dev/null 2>&1 && npm --version >/dev/null 2>&1", NULL) != 0) {
        ms_t_skip("SKIP: node or npm is not installed (deploy/install-deps.sh installs them): %s did not run", what);
        return NULL;
    }
    if (!src || !b) {
        ms_t_skip("SKIP: MS_SOURCE_DIR / MS_BIN_DIR unset (run through ctest): %s did not run", what);
        return NULL;
    }
    snprintf(nd, sizeof nd, "%.1000s/node-tests", b);
    if (ms_t_runf(NULL, NULL, "mkdir -p %s && cp %s/tests/node/package.json %s/tests/node/package-lock.json %s/tests/node/*.mjs %s/",
                  nd, src, src, src, nd) != 0) {
        T_CHECK(0, "copy tests/node to %s", nd);
        return NULL;
    }
    /* npm ci once for every test that needs it (the lock: two at once would clobber each other);
     * again when package-lock.json changed */
    char *err = NULL;
    int st = ms_t_runf(NULL, &err,
                       "cd %s && flock .npm-lock sh -c 'cmp -s package-lock.json node_modules/.installed-lock || "
                       "(timeout 300 npm ci --no-audit --no-fund --loglevel=error >/dev/null 2>&1 && "
                       "cp package-lock.json node_modules/.installed-lock)'", nd);
    free(err);
    if (st != 0) {
        ms_t_skip("SKIP: `npm ci` in %s failed (no npm registry?): %s did not run", nd, what);
        return NULL;
    }
    return nd;
}
