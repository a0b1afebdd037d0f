/* ms_jcfg: strict config.json field reader: lookup by scope, typed conversion, ranges, one message for every problem. */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_file.h"
#include "ms_jcfg.h"

/* A growing separated list of messages. */
typedef struct {
    char *s;
    size_t len, cap;
    int n;
} plist;

struct ms_jcfg {
    json_t *doc;
    json_t *root;
    char *what;
    plist missing, probs;
};

static void plist_vadd(plist *p, const char *sep, const char *fmt, va_list ap)
{
    char tmp[512];
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    size_t need = p->len + strlen(sep) + strlen(tmp) + 1;
    if (need > p->cap) {
        p->cap = need * 2;
        p->s = ms_realloc(p->s, p->cap);
    }
    p->len += (size_t)sprintf(p->s + p->len, "%s%s", p->n ? sep : "", tmp);
    p->n++;
}

void ms_jcfg_missing(ms_jcfg *j, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    plist_vadd(&j->missing, ", ", fmt, ap);
    va_end(ap);
}

void ms_jcfg_problem(ms_jcfg *j, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    plist_vadd(&j->probs, "; ", fmt, ap);
    va_end(ap);
}

ms_jcfg *ms_jcfg_parse(const char *text, const char *what)
{
    MS_ASSERT(text);
    if (!what) what = "config";
    json_error_t je;
    json_t *doc = json_loadb(text, strlen(text), JSON_REJECT_DUPLICATES, &je);
    if (!doc) {
        ms_err_set("%s: invalid JSON (line %d, column %d): %s", what, je.line, je.column, je.text);
        ms_err_set_code(MS_EXIT_MODEL);
        return NULL;
    }
    if (!json_is_object(doc)) {
        json_decref(doc);
        ms_err_set("%s: config is not a JSON object", what);
        ms_err_set_code(MS_EXIT_MODEL);
        return NULL;
    }
    ms_jcfg *j = ms_calloc(1, sizeof *j);
    j->doc = doc;
    j->root = doc;
    json_t *wrap = json_object_get(doc, "config");
    if (json_is_object(wrap)) j->root = wrap; /* fixture files carry the flat config under "config" */
    j->what = ms_strdup(what);
    return j;
}

ms_jcfg *ms_jcfg_load(const char *path, size_t max_bytes)
{
    MS_ASSERT(path);
    size_t len = 0;
    char *buf = ms_file_read_all(path, "config", 0, max_bytes, MS_EXIT_MODEL, &len);
    if (!buf) return NULL;
    if (memchr(buf, 0, len)) {
        free(buf);
        ms_err_set("%s: config contains a NUL byte (not a JSON text)", path);
        ms_err_set_code(MS_EXIT_MODEL);
        return NULL;
    }
    ms_jcfg *j = ms_jcfg_parse(buf, path);
    free(buf);
    return j;
}

void ms_jcfg_free(ms_jcfg *j)
{
    if (!j) return;
    json_decref(j->doc);
    free(j->what);
    free(j->missing.s);
    free(j->probs.s);
    free(j);
}

json_t *ms_jcfg_root(const ms_jcfg *j) { return j->root; }
const char *ms_jcfg_what(const ms_jcfg *j) { return j->what; }
int ms_jcfg_n_problems(const ms_jcfg *j) { return j->missing.n + j->probs.n; }

void ms_jcfg_describe(const json_t *v, char *buf, size_t cap)
{
    switch (json_typeof(v)) {
    case JSON_STRING: snprintf(buf, cap, "the string \"%.40s\"", json_string_value(v)); break;
    case JSON_INTEGER: snprintf(buf, cap, "%lld", (long long)json_integer_value(v)); break;
    case JSON_REAL: snprintf(buf, cap, "%.17g", json_real_value(v)); break;
    case JSON_TRUE: snprintf(buf, cap, "true"); break;
    case JSON_FALSE: snprintf(buf, cap, "false"); break;
    case JSON_NULL: snprintf(buf, cap, "null"); break;
    case JSON_ARRAY: snprintf(buf, cap, "an array"); break;
    default: snprintf(buf, cap, "an object"); break;
    }
}

int ms_jcfg_int_field(const char *where, const json_t *obj, const char *ctx, const char *key, long long lo,
                      long long hi, long long *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v) return ms_err_fail_in(MS_EXIT_MODEL, where, "%sfield \"%s\" is missing", ctx, key);
    if (!json_is_integer(v)) return ms_err_fail_in(MS_EXIT_MODEL, where, "%sfield \"%s\" must be an integer", ctx, key);
    long long x = (long long)json_integer_value(v);
    if (x < lo || x > hi)
        return ms_err_fail_in(MS_EXIT_MODEL, where, "%sfield \"%s\" is %lld, must be in %lld..%lld", ctx, key, x, lo, hi);
    *out = x;
    return 0;
}

int ms_jcfg_as_int(const json_t *v, int *out)
{
    if (json_is_integer(v)) {
        json_int_t x = json_integer_value(v);
        if (x < INT_MIN || x > INT_MAX) return -1;
        *out = (int)x;
        return 0;
    }
    if (!json_is_real(v)) return -1;
    double d = json_real_value(v);
    if (d != floor(d) || d < INT_MIN || d > INT_MAX) return -1;
    *out = (int)d;
    return 0;
}

int ms_jcfg_as_float(const json_t *v, float *out)
{
    if (!json_is_number(v)) return -1;
    float f = (float)json_number_value(v);
    if (!isfinite(f)) return -1;
    *out = f;
    return 0;
}

int ms_jcfg_as_bool(const json_t *v, int *out)
{
    if (json_is_boolean(v)) {
        *out = json_is_true(v);
        return 0;
    }
    if (json_is_integer(v) && (json_integer_value(v) == 0 || json_integer_value(v) == 1)) {
        *out = (int)json_integer_value(v);
        return 0;
    }
    return -1;
}

json_t *ms_jcfg_object(ms_jcfg *j, json_t *obj, const char *key, const char *label)
{
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (!v || json_is_object(v)) return v;
    char d[64];
    ms_jcfg_describe(v, d, sizeof d);
    ms_jcfg_problem(j, "%s must be an object, got %s", label, d);
    return NULL;
}

json_t *ms_jcfg_find(const ms_jscope *s, const char *name, const char *alias, char *label, size_t cap)
{
    const char *first = name, *second = alias;
    if (s->alias_first && alias) {
        first = alias;
        second = name;
    }
    for (int i = 0; i < s->n; i++) {
        if (!s->obj[i]) continue;
        json_t *v = json_object_get(s->obj[i], first);
        const char *k = first;
        if (!v && second) {
            v = json_object_get(s->obj[i], second);
            k = second;
        }
        if (v) {
            snprintf(label, cap, "%s%s", s->prefix[i] ? s->prefix[i] : "", k);
            return v;
        }
    }
    return NULL;
}

void ms_jcfg_missing_name(const ms_jscope *s, const char *name, const char *alias, char *buf, size_t cap)
{
    const char *p = s->missing_prefix ? s->missing_prefix : "";
    if (alias && s->missing_alias == 1)
        snprintf(buf, cap, "%s%s (or %s)", p, name, alias);
    else if (alias && s->missing_alias == 2)
        snprintf(buf, cap, "%s%s (or %s)", p, alias, name);
    else
        snprintf(buf, cap, "%s%s", p, name);
}

void ms_jcfg_fields(ms_jcfg *j, const ms_jfield *fields, size_t n, const ms_jscope *scopes, void *dst,
                    unsigned char *valid)
{
    char label[256], d[64];
    for (size_t i = 0; i < n; i++) {
        const ms_jfield *f = &fields[i];
        const ms_jscope *s = &scopes[f->scope];
        char *p = (char *)dst + f->off;
        json_t *v = ms_jcfg_find(s, f->name, f->alias, label, sizeof label);
        if (!v) {
            if (f->optional) {
                *(int *)p = 1;
                valid[f->off] = 1;
                continue;
            }
            ms_jcfg_missing_name(s, f->name, f->alias, label, sizeof label);
            ms_jcfg_missing(j, "%s", label);
            continue;
        }
        int rc;
        const char *want;
        switch (f->type) {
        case MS_JF_INT:
            rc = ms_jcfg_as_int(v, (int *)p);
            want = "an integer";
            break;
        case MS_JF_FLOAT:
            rc = ms_jcfg_as_float(v, (float *)p);
            want = "a finite number";
            break;
        default:
            rc = ms_jcfg_as_bool(v, (int *)p);
            want = "a boolean (true/false or 0/1)";
            break;
        }
        if (rc != 0 && f->if_null && json_is_null(v)) {
            ms_jcfg_problem(j, "%s %s", label, f->if_null);
            continue;
        }
        if (rc != 0) {
            ms_jcfg_describe(v, d, sizeof d);
            ms_jcfg_problem(j, "%s must be %s, got %s", label, want, d);
            continue;
        }
        valid[f->off] = 1;
    }
    /* Ranges, before anything is sized from them (a layer count of 1e9 must not allocate for
     * half a minute before failing): first the lower bounds of every field, then the upper. */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < n; i++) {
            const ms_jfield *f = &fields[i];
            if (f->type != MS_JF_INT || !valid[f->off]) continue;
            int v = *(int *)((char *)dst + f->off);
            const char *nm = f->alias && scopes[f->scope].missing_alias == 2 ? f->alias : f->name;
            if (pass == 0 && v < f->min) {
                if (f->min == 1)
                    ms_jcfg_problem(j, "%s must be > 0, got %d", nm, v);
                else
                    ms_jcfg_problem(j, "%s = %d is below the minimum of %d", nm, v, f->min);
                valid[f->off] = 0;
            } else if (pass == 1 && v > f->max) {
                ms_jcfg_problem(j, "%s = %d is beyond the supported maximum of %d", nm, v, f->max);
                valid[f->off] = 0;
            }
        }
}

int ms_jcfg_read(ms_jcfg *j, const ms_jfield *f, size_t n, const ms_jscope *scopes, void *dst, size_t dst_size)
{
    unsigned char *valid = ms_calloc(dst_size, 1);
    int n0 = ms_jcfg_n_problems(j);
    ms_jcfg_fields(j, f, n, scopes, dst, valid);
    free(valid);
    return ms_jcfg_n_problems(j) > n0 ? -1 : 0;
}

int ms_jcfg_index_list(ms_jcfg *j, const json_t *v, const char *label, int n_max, int **out)
{
    char d[64];
    if (!json_is_array(v)) {
        ms_jcfg_describe(v, d, sizeof d);
        ms_jcfg_problem(j, "%s must be an array of one-based layer numbers, got %s", label, d);
        return -1;
    }
    size_t n = json_array_size(v);
    int *a = ms_malloc((n ? n : 1) * sizeof *a);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(v, i);
        if (ms_jcfg_as_int(e, &a[i]) != 0) {
            ms_jcfg_describe(e, d, sizeof d);
            ms_jcfg_problem(j, "%s[%zu] must be an integer layer number, got %s", label, i, d);
            bad = 1;
            continue;
        }
        if (n_max > 0 && (a[i] < 1 || a[i] > n_max)) {
            ms_jcfg_problem(j, "%s[%zu] = %d is outside 1..%d (layer numbers are one-based, num_hidden_layers = %d)",
                            label, i, a[i], n_max, n_max);
            bad = 1;
            continue;
        }
        for (size_t k = 0; k < i; k++)
            if (a[k] == a[i]) {
                ms_jcfg_problem(j, "%s lists layer %d twice", label, a[i]);
                bad = 1;
                break;
            }
    }
    if (bad) {
        free(a);
        return -1;
    }
    *out = a;
    return (int)n;
}

int ms_jcfg_finish(ms_jcfg *j)
{
    if (!j->missing.n && !j->probs.n) return 0;
    size_t ml = 64 + strlen(j->what) + j->missing.len + j->probs.len;
    char *msg = ms_malloc(ml);
    snprintf(msg, ml, "%s: %s%s%s%s%s", j->what, j->missing.n ? "missing required key" : "",
             j->missing.n > 1 ? "s: " : (j->missing.n ? ": " : ""), j->missing.n ? j->missing.s : "",
             j->missing.n && j->probs.n ? "; " : "", j->probs.n ? j->probs.s : "");
    ms_err_set("%s", msg);
    free(msg);
    return ms_err_set_code(MS_EXIT_MODEL);
}

void ms_jcfg_want_string(ms_jcfg *j, json_t *obj, const char *key, const char *label, const char *want)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        ms_jcfg_missing(j, "%s", label);
    else if (!json_is_string(v) || strcmp(json_string_value(v), want))
        ms_jcfg_problem(j, "%s must be \"%s\"", label, want);
}

void ms_jcfg_want_bool(ms_jcfg *j, json_t *obj, const char *key, const char *label, int want, const char *why)
{
    json_t *v = json_object_get(obj, key);
    int b;
    if (!v)
        ms_jcfg_missing(j, "%s", label);
    else if (ms_jcfg_as_bool(v, &b) != 0)
        ms_jcfg_problem(j, "%s must be a boolean", label);
    else if (b != want)
        ms_jcfg_problem(j, "%s is %s; it must be %s (%s)", label, b ? "true" : "false", want ? "true" : "false", why);
}

void ms_jcfg_read_bool(ms_jcfg *j, json_t *obj, const char *key, int *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        ms_jcfg_missing(j, "%s", key);
    else if (ms_jcfg_as_bool(v, out) != 0)
        ms_jcfg_problem(j, "%s must be a boolean", key);
}
