/* test_chat: `moestream chat` with messages on stdin (one per line, one answer line each): a turn
 * continues the conversation's state and prefills only its new tokens, its answer is what
 * prefilling the whole history at once gives, /save then --session goes on exactly as an
 * unbroken session, and a state of another model or a corrupt one is refused. (The terminal
 * side, Ctrl-C and line editing: tests/chat_pty.py.) */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_gptoss_model.h"
#include "ms_synth.h"
#include "ms_test.h"

static char bin[1100], tmp[1100];

/* chat on model with stdin `in`: stdout (answers) into *out, stderr into *err. */
static int chat(const char *model, const char *in, const char *extra, char **out, char **err)
{
    static int k;
    char f[1200];
    snprintf(f, sizeof f, "%s/in-%d.txt", tmp, k++);
    ms_t_write_file(f, in);
    return ms_t_runf(out, err, "%s chat --model %s --max-tokens 12 --date 2026-01-01 %s < %s", bin, model, extra ? extra : "",
                     f);
}

/* The JSON header of a state file (after its magic, version and length). */
static json_t *state_header(const char *path)
{
    size_t len = 0;
    char *b = ms_t_read_file(path, &len);
    json_t *h = NULL;
    if (b && len > 16) {
        uint32_t hl;
        memcpy(&hl, b + 12, 4);
        if (hl < len) h = json_loadb(b + 16, hl, 0, NULL);
    }
    free(b);
    return h;
}

static size_t field(const char *err, const char *after)
{
    const char *p = err ? strstr(err, after) : NULL;
    return p ? (size_t)strtoull(p + strlen(after), NULL, 10) : (size_t)-1;
}

static void check_model(const char *model, const char *name)
{
    const char *three = "Hello there\nWhat is next?\nAnd after that?\n";
    char *a = NULL, *e = NULL;
    int st = chat(model, three, NULL, &a, NULL);
    int lines = 0;
    for (const char *p = a; p && *p; p++) lines += *p == '\n';
    T_CHECK(st == 0 && lines == 3, "%s: three messages, three answer lines (exit %d, %d lines)", name, st, lines);
    /* the same two turns, saved; then the third from the file: the same answer */
    char *b = NULL, *c = NULL;
    const char *path = ms_t_path(tmp, "s.state");
    char in[600];
    snprintf(in, sizeof in, "Hello there\nWhat is next?\n/stats\n/save %s\n", path);
    st = chat(model, in, NULL, &b, &e);
    size_t reused = field(e, "new tokens prefilled, "), fed = field(e, "last turn: "), gen = field(e, "reused from the state, ");
    T_CHECK(st == 0 && e && strstr(e, "saved") && reused > 0 && fed > 0 && gen > 0,
            "%s: /stats: the second turn prefilled %zu new tokens and reused %zu from the state", name, fed, reused);
    char arg[1300];
    snprintf(arg, sizeof arg, "--session %s", path);
    st = chat(model, "And after that?\n", arg, &c, NULL);
    const char *third = a;
    for (int i = 0; i < 2 && third; i++) third = strchr(third, '\n') ? strchr(third, '\n') + 1 : NULL;
    T_CHECK(st == 0 && c && third && !strcmp(c, third), "%s: --session goes on as the unbroken session: '%s' vs '%s'", name,
            c ? c : "", third ? third : "");
    /* the second answer = greedy `run` on the whole history before it, prefilled at once */
    json_t *h = state_header(path), *toks = json_object_get(h, "tokens"), *pend = json_object_get(h, "pending");
    size_t nt = json_array_size(toks);
    int ok = h && nt == reused + fed + gen - 1 && json_array_size(pend) == 1;
    if (ok) {
        static char ids[65536];
        ids[0] = 0;
        for (size_t i = 0; i < reused + fed; i++)
            snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%lld", i ? "," : "",
                     (long long)json_integer_value(json_array_get(toks, i)));
        char *r = NULL;
        int rs = ms_t_runf(&r, NULL, "%s run --model %s --ids %s -n %zu --json --quiet", bin, model, ids, gen);
        json_t *j = r ? json_loads(r, 0, NULL) : NULL;
        json_t *g = json_object_get(j, "generated_ids");
        ok = rs == 0 && json_array_size(g) >= gen;
        for (size_t i = 0; ok && i < gen; i++) {
            json_t *want = i + 1 < gen ? json_array_get(toks, reused + fed + i) : json_array_get(pend, 0);
            ok = json_integer_value(json_array_get(g, i)) == json_integer_value(want);
        }
        json_decref(j);
        free(r);
    }
    T_CHECK(ok, "%s: the second answer's %zu ids = run on the %zu history ids prefilled at once", name, gen, reused + fed);
    json_decref(h);
    /* refused states: another model's, and a corrupt one; the session is not started */
    free(e);
    e = NULL;
    size_t len = 0;
    char *bytes = ms_t_read_file(path, &len);
    bytes[len - 20] ^= 1;
    ms_t_write_file_n(path, bytes, len);
    free(bytes);
    st = chat(model, "x\n", arg, NULL, &e);
    T_CHECK(st == 5 && e && strstr(e, "checksum") && strstr(e, path), "%s: a corrupt --session: exit 5 naming it: %s", name,
            e ? e : "");
    free(a);
    free(b);
    free(c);
    free(e);
}

/* The prefix cache (on by default): a new conversation after /reset that begins with the same
 * long system message starts from its kept state (at 256-token marks), with the same answers
 * as without one (--no-prefix-cache). */
static void check_prefix_cache(const char *model, const char *name)
{
    char sys[4096] = "--system '";
    for (int i = 0; i < 30; i++) strcat(sys, "You are a careful assistant who answers briefly and checks every fact twice. ");
    strcat(sys, "' --temperature 0.8 --seed 3");
    char no[4200];
    snprintf(no, sizeof no, "%s --no-prefix-cache", sys);
    const char *in = "Hello there\n/reset\nSomething else\n/stats\n";
    char *o1 = NULL, *e1 = NULL, *o2 = NULL, *e2 = NULL;
    int s1 = chat(model, in, sys, &o1, &e1), s2 = chat(model, in, no, &o2, &e2);
    size_t r1 = field(e1, "new tokens prefilled, "), r2 = field(e2, "new tokens prefilled, ");
    T_CHECK(s1 == 0 && s2 == 0 && o1 && o2 && !strcmp(o1, o2), "%s: the same answers with the prefix cache as without",
            name);
    T_CHECK(r1 != (size_t)-1 && r1 >= 256 && r2 == 0,
            "%s: the second conversation started from the kept system message (%zu tokens reused; %zu without)", name, r1,
            r2);
    free(o1);
    free(e1);
    free(o2);
    free(e2);
}

int main(void)
{
    ms_log_set_level(0);
    snprintf(tmp, sizeof tmp, "%s", ms_t_tmpdir("chat"));
    snprintf(bin, sizeof bin, "%s", ms_t_bin("moestream"));
    char k3[1200], k3b[1200], go[1200];
    snprintf(k3, sizeof k3, "%s/k3", tmp);
    snprintf(k3b, sizeof k3b, "%s/k3b", tmp);
    snprintf(go, sizeof go, "%s/go", tmp);
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    T_CHECK(ms_synth_write(k3, &sh, 3) == 0 && ms_synth_write(k3b, &sh, 4) == 0, "synth: %s", ms_err_msg());
    T_CHECK(ms_gptoss_synth(go, "gpt-oss-tiny", 0, 0, 7) == 0, "synth gpt-oss-tiny: %s", ms_err_msg());
    check_model(k3, "kimi-k3");
    check_model(go, "gpt-oss");
    check_prefix_cache(k3, "kimi-k3");
    check_prefix_cache(go, "gpt-oss");
    /* a state of another checkpoint (same shapes, other weights): refused, the fingerprint differs */
    char *e = NULL, in[1400];
    snprintf(in, sizeof in, "hi\n/save %s/k3.state\n", tmp);
    chat(k3, in, NULL, NULL, NULL);
    snprintf(in, sizeof in, "--session %s/k3.state", tmp);
    int st = chat(k3b, "x\n", in, NULL, &e);
    T_CHECK(st == 5 && e && strstr(e, "another model"), "another checkpoint's state: exit 5: %s", e ? e : "");
    free(e);
    e = NULL;
    st = chat(go, "x\n", in, NULL, &e);
    T_CHECK(st == 5 && e && strstr(e, "kimi-k3"), "another family's state: exit 5: %s", e ? e : "");
    free(e);
    e = NULL;
    st = chat(k3, "/frob\n/help\n", NULL, NULL, &e);
    T_CHECK(st == 2 && e && strstr(e, "unknown command") && strstr(e, "/reset"),
            "commands: an unknown one is said (and, stdin not a terminal, is the exit code: 2), /help lists: %d", st);
    free(e);
    return ms_t_done();
}
