/* ms_chatp: a chat prompt as pieces (markers and text) and their ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_chatp.h"
#include "ms_err.h"

void ms_chatp_put(ms_chatp *p, const char *s, size_t n, int special)
{
    if (special || p->n == 0 || p->special[p->n - 1]) { /* a new piece; else extend the text run */
        if (p->n + 2 > p->cap_p) {
            p->cap_p = p->cap_p ? 2 * p->cap_p : 64;
            p->start = ms_realloc(p->start, sizeof *p->start * (size_t)(p->cap_p + 1));
            p->special = ms_realloc(p->special, (size_t)p->cap_p);
        }
        p->start[p->n] = p->len;
        p->special[p->n++] = (uint8_t)special;
    }
    if (p->len + n + 1 > p->cap) {
        p->cap = (p->len + n + 1) * 2;
        p->buf = ms_realloc(p->buf, p->cap);
    }
    if (n) memcpy(p->buf + p->len, s, n);
    p->len += n;
    p->buf[p->len] = 0;
    p->start[p->n] = p->len;
}

void ms_chatp_free(ms_chatp *p)
{
    if (!p) return;
    free(p->buf);
    free(p->start);
    free(p->special);
    memset(p, 0, sizeof *p);
}

int ms_chatp_encode(const ms_chatp *p, const ms_tok *t, const char *fmt, int32_t **ids, size_t *n_ids)
{
    int32_t *out = NULL;
    size_t no = 0, cap = 0;
    *ids = NULL;
    *n_ids = 0;
    for (int i = 0; i < p->n; i++) {
        const char *s = p->buf + p->start[i];
        size_t l = p->start[i + 1] - p->start[i];
        int32_t one, *v = &one;
        size_t nv = 1;
        if (p->special[i]) {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)l, s);
            if ((one = ms_tok_special_id(t, name)) < 0) {
                free(out);
                ms_err_set("the tokenizer has no special token %s, which the %s chat format needs", name, fmt);
                return ms_err_set_code(MS_EXIT_INPUT);
            }
        } else if (ms_tok_encode(t, s, l, 0, &v, &nv) != 0) {
            free(out);
            return -1;
        }
        if (no + nv > cap) out = ms_realloc(out, sizeof *out * (cap = 2 * (no + nv) + 64));
        memcpy(out + no, v, sizeof *v * nv);
        no += nv;
        if (v != &one) free(v);
    }
    *ids = out ? out : ms_malloc(sizeof *out);
    *n_ids = no;
    return 0;
}

int ms_chatp_valid_utf8(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n || (k == 2 && c < 0xC2)) return 0;
        for (size_t j = 1; j < k; j++)
            if ((u[i + j] & 0xC0) != 0x80) return 0;
        if (k == 3 && ((c == 0xE0 && u[i + 1] < 0xA0) || (c == 0xED && u[i + 1] >= 0xA0))) return 0;
        if (k == 4 && ((c == 0xF0 && u[i + 1] < 0x90) || c > 0xF4 || (c == 0xF4 && u[i + 1] >= 0x90))) return 0;
        i += k;
    }
    return 1;
}

int ms_chatp_need(const ms_tok *t, const char *const *marks, int n, const char *what)
{
    for (int i = 0; i < n; i++)
        if (ms_tok_special_id(t, marks[i]) < 0) {
            ms_err_set("%s need %s, which the tokenizer lacks", what, marks[i]);
            return ms_err_set_code(MS_EXIT_INPUT);
        }
    return 0;
}
