/* ms_sbuf: a growable byte string (always NUL-terminated). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "ms_err.h"
#include "ms_sbuf.h"

static void room(ms_sbuf *b, size_t n)
{
    if (b->n + n + 1 <= b->cap) return;
    b->cap = (b->n + n + 1) * 2 + 32;
    b->s = ms_realloc(b->s, b->cap);
}

void ms_sbuf_add(ms_sbuf *b, const char *s, size_t n)
{
    room(b, n);
    if (n) memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

void ms_sbuf_adds(ms_sbuf *b, const char *s) { ms_sbuf_add(b, s, strlen(s)); }

void ms_sbuf_addf(ms_sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (w < 0) return;
    room(b, (size_t)w);
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)w + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)w;
}

char *ms_sbuf_take(ms_sbuf *b, size_t *len)
{
    if (!b->s) ms_sbuf_add(b, "", 0);
    char *s = b->s;
    if (len) *len = b->n;
    *b = (ms_sbuf){0};
    return s;
}

void ms_sbuf_free(ms_sbuf *b)
{
    if (!b) return;
    free(b->s);
    *b = (ms_sbuf){0};
}

int ms_reader_take(ms_reader *r, void *dst, size_t len)
{
    if (len > r->n - r->at) return -1;
    if (len) memcpy(dst, r->p + r->at, len);
    r->at += len;
    return 0;
}

int ms_reader_take_floats(ms_reader *r, float *dst, size_t n)
{
    size_t at = r->at;
    if (n > (r->n - r->at) / sizeof(float)) return -1;
    if (ms_reader_take(r, dst, n * sizeof(float)) != 0) return -1;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(dst[i])) {
            r->at = at + i * sizeof(float);
            return -2;
        }
    return 0;
}
