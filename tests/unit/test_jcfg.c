/* test_jcfg: the family-neutral config field reader: scopes, aliases, types, ranges, one message naming every problem. */
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_jcfg.h"
#include "ms_test.h"

typedef struct {
    int layers, heads, flag;
    float eps;
} cfg;

#define F(n, a, t, sc, opt, m, lo, hi) {n, a, t, sc, opt, offsetof(cfg, m), lo, hi, NULL}
static const ms_jfield fields[] = {
    F("num_layers", NULL, MS_JF_INT, 0, 0, layers, 1, 100),
    F("num_heads", "n_heads", MS_JF_INT, 1, 0, heads, 1, 64),
    F("use_flag", NULL, MS_JF_BOOL, 0, 1, flag, 0, 0),
    {"eps", NULL, MS_JF_FLOAT, 0, 0, offsetof(cfg, eps), 0, 0, "is null (give a number)"},
};
#undef F

/* Parse text with scope 0 = [inner ("inner."), root], scope 1 = [root] (alias first). */
static int read(const char *text, cfg *c, char *msg, size_t n)
{
    memset(c, 0, sizeof *c);
    ms_jcfg *j = ms_jcfg_parse(text, "test.json");
    if (!j) {
        snprintf(msg, n, "%s", ms_err_msg());
        return -2;
    }
    json_t *root = ms_jcfg_root(j), *inner = ms_jcfg_object(j, root, "inner", "inner");
    ms_jscope sc[2] = {{{inner, root}, {"inner.", ""}, 2, 0, "", 1}, {{root}, {""}, 1, 1, "", 2}};
    unsigned char valid[sizeof(cfg)] = {0};
    ms_jcfg_fields(j, fields, sizeof fields / sizeof fields[0], sc, c, valid);
    int rc = ms_jcfg_finish(j);
    snprintf(msg, n, "%s", rc ? ms_err_msg() : "");
    ms_jcfg_free(j);
    return rc;
}

static int has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

int main(void)
{
    ms_log_set_level(0);
    cfg c;
    char m[2048];
    T_CHECK(read("{\"num_layers\": 4, \"num_heads\": 8, \"eps\": 1e-6}", &c, m, sizeof m) == 0 && c.layers == 4 &&
                c.heads == 8 && c.flag == 1 && c.eps == 1e-6f,
            "every field read, the optional bool absent means true (%s)", m);
    T_CHECK(read("{\"inner\": {\"num_layers\": 5}, \"num_layers\": 4, \"n_heads\": 2, \"num_heads\": 9, \"eps\": 1, "
                 "\"use_flag\": 0}",
                 &c, m, sizeof m) == 0 &&
                c.layers == 5 && c.heads == 2 && c.flag == 0,
            "the scope's first object wins; an alias-first scope takes the alias; 0 is false (%s)", m);
    T_CHECK(read("{\"config\": {\"num_layers\": 3, \"num_heads\": 1, \"eps\": 2.0}}", &c, m, sizeof m) == 0 &&
                c.layers == 3,
            "a fixture's \"config\" object is unwrapped");
    int rc = read("{\"num_layers\": 0, \"num_heads\": \"x\", \"eps\": null, \"inner\": 3}", &c, m, sizeof m);
    T_CHECK(rc == -1 && ms_err_code() == MS_EXIT_MODEL && has(m, "test.json: ") && has(m, "num_layers must be > 0, got 0") &&
                has(m, "num_heads must be an integer, got the string \"x\"") && has(m, "eps is null (give a number)") &&
                has(m, "inner must be an object, got 3"),
            "every problem in one message, each named: %s", m);
    rc = read("{\"num_layers\": 1000, \"eps\": 1}", &c, m, sizeof m);
    T_CHECK(rc == -1 && has(m, "missing required key: n_heads (or num_heads)") &&
                has(m, "num_layers = 1000 is beyond the supported maximum of 100"),
            "a missing key named with its other spelling, a value beyond the bound: %s", m);
    rc = read("{\"num_layers\": 2.5, \"num_heads\": 1e12, \"eps\": 1e39}", &c, m, sizeof m);
    T_CHECK(rc == -1 && has(m, "num_layers must be an integer, got 2.5") && has(m, "n_heads") == 0 &&
                has(m, "num_heads must be an integer") && has(m, "eps must be a finite number"),
            "a fraction, an int overflow and a float overflow refused: %s", m);
    T_CHECK(read("[1, 2]", &c, m, sizeof m) == -2 && has(m, "not a JSON object"), "an array is not a config: %s", m);
    T_CHECK(read("{\"a\": 1, \"a\": 2}", &c, m, sizeof m) == -2 && has(m, "invalid JSON"), "duplicate keys refused: %s",
            m);
    /* index lists */
    ms_jcfg *j = ms_jcfg_parse("{\"l\": [1, 3, 3, 9, \"x\"], \"ok\": [2, 1]}", "t");
    int *a = NULL;
    T_CHECK(ms_jcfg_index_list(j, json_object_get(ms_jcfg_root(j), "l"), "l", 4, &a) == -1 &&
                ms_jcfg_index_list(j, json_object_get(ms_jcfg_root(j), "ok"), "ok", 4, &a) == 2 && a[0] == 2 && a[1] == 1,
            "index lists: a good one read in order");
    T_CHECK(ms_jcfg_finish(j) == -1 && has(ms_err_msg(), "l lists layer 3 twice") && has(ms_err_msg(), "l[3] = 9 is outside 1..4") &&
                has(ms_err_msg(), "l[4] must be an integer layer number"),
            "index lists: repeats, range and type named: %s", ms_err_msg());
    free(a);
    ms_jcfg_free(j);
    /* files */
    const char *d = ms_t_tmpdir("jcfg");
    char path[1024];
    snprintf(path, sizeof path, "%s/nul.json", d);
    FILE *f = fopen(path, "wb");
    fwrite("{\"a\": 1}\0", 1, 9, f);
    fclose(f);
    T_CHECK(!ms_jcfg_load(path, 1 << 20) && ms_err_code() == MS_EXIT_MODEL && has(ms_err_msg(), "NUL byte"),
            "a NUL byte in the file refused: %s", ms_err_msg());
    snprintf(path, sizeof path, "%s/none.json", d);
    T_CHECK(!ms_jcfg_load(path, 1 << 20) && ms_err_code() == MS_EXIT_IO, "a missing file is an I/O error");
    return ms_t_done();
}
