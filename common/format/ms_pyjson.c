/* ms_pyjson: JSON text as Python's json.dumps(x, ensure_ascii=False) writes it. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_pyjson.h"
#include "ms_sbuf.h"


void ms_pyjson_float(double d, char *buf, size_t n)
{
    assert(n >= 32 && isfinite(d));
    if (d == 0) {
        snprintf(buf, n, "%s", signbit(d) ? "-0.0" : "0.0");
        return;
    }
    /* the fewest significant digits that read back to d (what repr prints) */
    char e[40];
    for (int p = 0; p < 17; p++) {
        snprintf(e, sizeof e, "%.*e", p, d);
        if (strtod(e, NULL) == d) break;
    }
    /* e: [-]D[.DDD]e(+|-)XX -> sign, digits, decimal exponent of the first digit */
    const char *c = e;
    int neg = *c == '-';
    if (neg) c++;
    char dig[24];
    int nd = 0;
    for (; *c && *c != 'e'; c++)
        if (*c != '.') dig[nd++] = *c;
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    dig[nd] = 0;
    int x = atoi(c + 1);
    char *o = buf;
    size_t left = n;
#define OUT(...)                                                                                                               \
    do {                                                                                                                       \
        int w_ = snprintf(o, left, __VA_ARGS__);                                                                               \
        o += w_, left -= (size_t)w_;                                                                                           \
    } while (0)
    if (neg) OUT("-");
    if (x < -4 || x >= 16) { /* repr's scientific form: 1e+16, 1.5e-07 */
        OUT("%c", dig[0]);
        if (nd > 1) OUT(".%s", dig + 1);
        OUT("e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
    } else if (x < 0) { /* 0.000123 */
        OUT("0.");
        for (int i = 0; i < -x - 1; i++) OUT("0");
        OUT("%s", dig);
    } else { /* 123.45, 100.0 */
        for (int i = 0; i <= x; i++) OUT("%c", i < nd ? dig[i] : '0');
        OUT(".");
        if (nd > x + 1)
            OUT("%s", dig + x + 1);
        else
            OUT("0");
    }
#undef OUT
}

static void str(ms_sbuf *b, const char *s, size_t n)
{
    ms_sbuf_add(b, "\"", 1);
    size_t run = 0; /* bytes copied as they are, in one go */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        if (!esc && c >= 0x20) continue;
        ms_sbuf_add(b, s + run, i - run);
        run = i + 1;
        if (esc) {
            ms_sbuf_adds(b, esc);
        } else {
            char u[8];
            snprintf(u, sizeof u, "\\u%04x", c);
            ms_sbuf_adds(b, u);
        }
    }
    ms_sbuf_add(b, s + run, n - run);
    ms_sbuf_add(b, "\"", 1);
}

static void dump(ms_sbuf *b, const json_t *v, int compact)
{
    char num[40];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *x;
        int first = 1;
        ms_sbuf_add(b, "{", 1);
        json_object_foreach((json_t *)v, k, x) { /* jansson keeps insertion order, as Python's dict */
            if (!first) ms_sbuf_add(b, ", ", compact ? 1 : 2);
            first = 0;
            str(b, k, strlen(k));
            ms_sbuf_add(b, ": ", compact ? 1 : 2);
            dump(b, x, compact);
        }
        ms_sbuf_add(b, "}", 1);
        break;
    }
    case JSON_ARRAY:
        ms_sbuf_add(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) ms_sbuf_add(b, ", ", compact ? 1 : 2);
            dump(b, json_array_get(v, i), compact);
        }
        ms_sbuf_add(b, "]", 1);
        break;
    case JSON_STRING: str(b, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        ms_sbuf_adds(b, num);
        break;
    case JSON_REAL:
        ms_pyjson_float(json_real_value(v), num, sizeof num);
        ms_sbuf_adds(b, num);
        break;
    case JSON_TRUE: ms_sbuf_adds(b, "true"); break;
    case JSON_FALSE: ms_sbuf_adds(b, "false"); break;
    case JSON_NULL: ms_sbuf_adds(b, "null"); break;
    }
}

char *ms_pyjson_dumps(const json_t *v, size_t *len)
{
    assert(v);
    ms_sbuf b = {0};
    dump(&b, v, 0);
    return ms_sbuf_take(&b, len);
}

char *ms_pyjson_dumps_compact(const json_t *v, size_t *len)
{
    assert(v);
    ms_sbuf b = {0};
    dump(&b, v, 1);
    return ms_sbuf_take(&b, len);
}
