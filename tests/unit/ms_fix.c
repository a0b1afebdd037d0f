/* ms_fix: loader and comparison helpers for the Kimi K3 op/layer JSON fixtures. */
#include <jansson.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_fix.h"
#include "ms_test.h"

/* A decoded tensor (or a scratch buffer) kept until ms_fix_free. */
typedef struct fix_item {
    struct fix_item *next;
    char *key;          /* NULL for scratch buffers */
    ms_fix_tensor t;
} fix_item;

struct ms_fix {
    char *name;
    json_t *root;
    fix_item *items;
};

/* Record a failure from inside the loader (same output format as T_CHECK). */
static void fix_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fix_fail(const char *fmt, ...)
{
    va_list ap;
    ms_t_failed++;
    fputs("FAIL ms_fix: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

ms_fix *ms_fix_load(const char *path, const char *name)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root || !json_is_object(root)) {
        fix_fail("%s: cannot parse (line %d: %s)", path, jerr.line, root ? "not an object" : jerr.text);
        json_decref(root);
        return NULL;
    }
    ms_fix *f = ms_calloc(1, sizeof *f);
    f->name = ms_strdup(name ? name : path);
    f->root = root;
    return f;
}

ms_fix *ms_fix_open(const char *name)
{
    char rel[512];
    snprintf(rel, sizeof rel, "fixtures/kimi-k3/ops/%s.json", name);
    const char *path = ms_t_shared(rel);
    if (!path) return NULL;
    return ms_fix_load(path, name);
}

void ms_fix_free(ms_fix *f)
{
    if (!f) return;
    fix_item *it = f->items;
    while (it) {
        fix_item *nx = it->next;
        free(it->key);
        free(it->t.data);
        free(it);
        it = nx;
    }
    json_decref(f->root);
    free(f->name);
    free(f);
}

const char *ms_fix_name(const ms_fix *f) { return f->name; }

int ms_fix_has(const ms_fix *f, const char *key) { return json_object_get(f->root, key) != NULL; }

int ms_fix_opt_num(const ms_fix *f, const char *key, double *out)
{
    json_t *v = json_object_get(f->root, key);
    if (!v) return 0;
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return 1;
    }
    if (json_is_boolean(v)) {
        *out = json_is_true(v) ? 1.0 : 0.0;
        return 1;
    }
    return 0;
}

double ms_fix_num(const ms_fix *f, const char *key)
{
    double v;
    if (ms_fix_opt_num(f, key, &v)) return v;
    fix_fail("fixture %s: scalar \"%s\" missing or not a number", f->name, key);
    return NAN;
}

int ms_fix_override_int(const ms_fix *f, const char *key, int *field)
{
    double v;
    if (!ms_fix_opt_num(f, key, &v)) return 0;
    *field = (int)v;
    return 1;
}

int ms_fix_override_float(const ms_fix *f, const char *key, float *field)
{
    double v;
    if (!ms_fix_opt_num(f, key, &v)) return 0;
    *field = (float)v;
    return 1;
}

static fix_item *fix_add(ms_fix *f, const char *key)
{
    fix_item *it = ms_calloc(1, sizeof *it);
    it->key = key ? ms_strdup(key) : NULL;
    it->next = f->items;
    f->items = it;
    return it;
}

/* Decode {"shape": [...], "data": [...]} into t; 0 on success. */
static int fix_decode(json_t *obj, ms_fix_tensor *t)
{
    json_t *shape = json_object_get(obj, "shape");
    json_t *data = json_object_get(obj, "data");
    if (!json_is_object(obj) || !json_is_array(shape) || !json_is_array(data)) return -1;
    size_t nd = json_array_size(shape);
    if (nd > MS_FIX_MAXDIM) return -1;
    int64_t n = 1;
    t->ndim = (int)nd;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(shape, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0) return -1;
        t->shape[i] = (int64_t)json_integer_value(d);
        n *= t->shape[i];
    }
    if ((int64_t)json_array_size(data) != n) return -1;
    t->n = n;
    t->data = ms_malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        json_t *v = json_array_get(data, (size_t)i);
        if (!json_is_number(v)) {
            free(t->data);
            t->data = NULL;
            return -1;
        }
        t->data[i] = (float)json_number_value(v);
    }
    return 0;
}

const ms_fix_tensor *ms_fix_tensor_get(ms_fix *f, const char *key)
{
    for (fix_item *it = f->items; it; it = it->next)
        if (it->key && strcmp(it->key, key) == 0) return &it->t;
    json_t *obj = json_object_get(f->root, key);
    if (!obj) return NULL;
    ms_fix_tensor t;
    memset(&t, 0, sizeof t);
    if (fix_decode(obj, &t) != 0) return NULL;
    fix_item *it = fix_add(f, key);
    it->t = t;
    return &it->t;
}

float *ms_fix_scratch(ms_fix *f, int64_t n)
{
    fix_item *it = fix_add(f, NULL);
    it->t.ndim = 1;
    it->t.shape[0] = n;
    it->t.n = n;
    it->t.data = ms_calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    return it->t.data;
}

static void fix_shape_str(const ms_fix_tensor *t, char *buf, size_t cap)
{
    size_t len = 0;
    len += (size_t)snprintf(buf + len, cap - len, "[");
    for (int i = 0; i < t->ndim && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? "," : "", (long long)t->shape[i]);
    if (len < cap) snprintf(buf + len, cap - len, "]");
}

const float *ms_fix_f32(ms_fix *f, const char *key, int64_t n)
{
    const ms_fix_tensor *t = ms_fix_tensor_get(f, key);
    if (!t) {
        fix_fail("fixture %s: tensor \"%s\" missing or malformed", f->name, key);
        return ms_fix_scratch(f, n);
    }
    if (t->n != n) {
        char s[128];
        fix_shape_str(t, s, sizeof s);
        fix_fail("fixture %s: tensor \"%s\" has shape %s (%lld elements), expected %lld elements", f->name, key, s,
                 (long long)t->n, (long long)n);
        return ms_fix_scratch(f, n);
    }
    return t->data;
}

ms_mat ms_fix_mat(ms_fix *f, const char *key, int64_t rows, int64_t cols)
{
    ms_mat m;
    memset(&m, 0, sizeof m);
    m.type = MS_WT_F32;
    m.rows = rows;
    m.cols = cols;
    const ms_fix_tensor *t = ms_fix_tensor_get(f, key);
    if (!t) {
        fix_fail("fixture %s: matrix \"%s\" missing or malformed", f->name, key);
        m.data = ms_fix_scratch(f, rows * cols);
    } else if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols) {
        char s[128];
        fix_shape_str(t, s, sizeof s);
        fix_fail("fixture %s: matrix \"%s\" has shape %s, expected [%lld,%lld]", f->name, key, s, (long long)rows,
                 (long long)cols);
        m.data = ms_fix_scratch(f, rows * cols);
    } else {
        m.data = t->data;
    }
    return m;
}

int ms_fix_manifest(ms_k3_cfg *cfg, ms_fix_tol *tol)
{
    memset(cfg, 0, sizeof *cfg);
    const char *path = ms_t_shared("fixtures/kimi-k3/ops/MANIFEST.json");
    if (!path) return -1;
    char *text = ms_t_read_file(path, NULL);
    if (!text) {
        fix_fail("%s: cannot read", path);
        return -1;
    }
    json_error_t jerr;
    json_t *root = json_loads(text, 0, &jerr);
    json_t *tj = root ? json_object_get(root, "tolerance") : NULL;
    json_t *ja = tj ? json_object_get(tj, "fp32_abs") : NULL;
    json_t *jr = tj ? json_object_get(tj, "fp32_rel") : NULL;
    int rc = 0;
    if (!json_is_number(ja) || !json_is_number(jr)) {
        fix_fail("%s: no tolerance.fp32_abs / fp32_rel numbers", path);
        rc = -1;
    } else {
        tol->abs = json_number_value(ja);
        tol->rel = json_number_value(jr);
    }
    if (rc == 0 && ms_k3_cfg_parse(text, path, cfg) != 0) {
        fix_fail("%s: ms_k3_cfg_parse failed: %s", path, ms_err_msg());
        rc = -1;
    }
    json_decref(root);
    free(text);
    return rc;
}

int64_t ms_fix_cmp(ms_fix_stat *st, const char *what, const float *got, const float *want, int64_t n,
                   ms_fix_tol tol)
{
    double max_abs = 0.0, worst = 0.0;
    int64_t bad = 0, worst_i = 0;
    for (int64_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - (double)want[i]);
        double lim = tol.abs + tol.rel * fabs((double)want[i]);
        if (isnan(got[i]) || isnan(want[i])) err = INFINITY;
        double ratio = err / lim;
        if (err > max_abs) max_abs = err;
        if (ratio > worst) {
            worst = ratio;
            worst_i = i;
        }
        if (!(err <= lim)) {
            if (bad < 4)
                fprintf(stderr, "  %s[%lld]: got %.9g want %.9g (err %.3g > tol %.3g)\n", what, (long long)i,
                        (double)got[i], (double)want[i], err, lim);
            bad++;
        }
    }
    printf("  %-34s n=%-5lld max_abs=%.3e worst_ratio=%.4f%s", what, (long long)n, max_abs, worst,
           bad ? "" : "\n");
    if (bad) printf("  (%lld over tolerance, worst at [%lld])\n", (long long)bad, (long long)worst_i);
    /* nothing compared is no match */
    T_CHECK(n > 0 && bad == 0, "%s: %lld of %lld elements over tolerance (max_abs %.3e, worst ratio %.3f)", what,
            (long long)bad, (long long)n, max_abs, worst);
    if (st) {
        if (max_abs > st->max_abs) st->max_abs = max_abs;
        if (worst > st->worst_ratio) st->worst_ratio = worst;
        st->n += n;
        st->n_bad += bad;
    }
    return bad;
}

void ms_fix_report(const char *name, const ms_fix_stat *st)
{
    printf("fixture %-12s max_abs=%.3e worst_ratio=%.4f over %lld elements: %s\n", name, st->max_abs,
           st->worst_ratio, (long long)st->n, st->n_bad ? "FAIL" : "PASS");
}

int64_t ms_fix_bitdiff(const float *a, const float *b, int64_t n)
{
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) d++;
    return d;
}

double ms_fix_maxdiff(const float *a, const float *b, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) return INFINITY;
        if (d > m) m = d;
    }
    return m;
}
