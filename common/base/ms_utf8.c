/* ms_utf8: UTF-8 validation and repair: every invalid byte becomes U+FFFD, as ms_jtext does for JSON. */
#include <string.h>

#include "ms_utf8.h"

size_t ms_utf8_seq_len(const unsigned char *p, size_t avail)
{
    unsigned c = p[0];
    size_t n;
    unsigned min;
    if (c < 0x80) return 1;
    if ((c & 0xe0) == 0xc0) n = 2, min = 0x80;
    else if ((c & 0xf0) == 0xe0) n = 3, min = 0x800;
    else if ((c & 0xf8) == 0xf0) n = 4, min = 0x10000;
    else return 0;
    if (n > avail) return 0;
    unsigned cp = c & (0x7f >> n);
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return n;
}

static const char FFFD[3] = {(char)0xef, (char)0xbf, (char)0xbd};

size_t ms_utf8_clean(const char *bytes, size_t len, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t n = ms_utf8_seq_len((const unsigned char *)bytes + i, len - i);
        if (n == 0) {
            memcpy(out + o, FFFD, 3);
            o += 3;
            i++;
        } else {
            memcpy(out + o, bytes + i, n);
            o += n;
            i += n;
        }
    }
    return o;
}

/* 1 if p[0..n) (n < the length its lead byte announces) can still become a valid character:
 * the lead byte and the continuation bytes so far are possible, with the second byte's range
 * limits (no overlong, surrogate or too-large form can follow). */
static int may_complete(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    size_t need = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (need == 0 || n >= need) return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80) return 0;
    if (n >= 2) {
        unsigned d = p[1];
        if ((c == 0xe0 && d < 0xa0) || (c == 0xed && d > 0x9f) || (c == 0xf0 && d < 0x90) || (c == 0xf4 && d > 0x8f))
            return 0;
    }
    return 1;
}

size_t ms_utf8_stream_put(ms_utf8_stream *s, const char *bytes, size_t len, char *out)
{
    /* Work on held + bytes; only the last (up to 3) bytes can be held again. */
    unsigned char buf[8];
    size_t o = 0, i = 0;
    const unsigned char *src = (const unsigned char *)bytes;
    /* First finish the held character with the first bytes of the piece. */
    while (s->n_held > 0) {
        size_t take = len - i < 4 ? len - i : 4;
        memcpy(buf, s->held, s->n_held);
        memcpy(buf + s->n_held, src + i, take);
        size_t avail = s->n_held + take;
        size_t n = ms_utf8_seq_len(buf, avail);
        if (n > 0) {
            memcpy(out + o, buf, n);
            o += n;
            i += n - s->n_held;
            s->n_held = 0;
        } else if (may_complete(buf, avail)) { /* still incomplete: the piece ended inside it */
            memcpy(s->held, buf, avail);
            s->n_held = avail;
            return o;
        } else { /* the held lead byte can never complete: U+FFFD, retry from the next byte */
            memcpy(out + o, FFFD, 3);
            o += 3;
            memmove(s->held, s->held + 1, --s->n_held);
        }
    }
    while (i < len) {
        size_t n = ms_utf8_seq_len(src + i, len - i);
        if (n > 0) {
            memcpy(out + o, src + i, n);
            o += n;
            i += n;
        } else if (may_complete(src + i, len - i)) {
            memcpy(s->held, src + i, len - i);
            s->n_held = len - i;
            break;
        } else {
            memcpy(out + o, FFFD, 3);
            o += 3;
            i++;
        }
    }
    return o;
}

size_t ms_utf8_stream_end(ms_utf8_stream *s, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < s->n_held; i++, o += 3) memcpy(out + o, FFFD, 3);
    s->n_held = 0;
    return o;
}
