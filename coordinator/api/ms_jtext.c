/* ms_jtext: JSON string values for bytes that may not be valid UTF-8 (answers, error messages quoting a request). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_jtext.h"

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if invalid. */
static size_t utf8_len(const unsigned char *p, size_t avail)
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

json_t *ms_jtext(const char *bytes, size_t len)
{
    char *out = ms_malloc(len * 3 + 1);
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t n = utf8_len((const unsigned char *)bytes + i, len - i);
        if (n == 0) {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        } else {
            memcpy(out + o, bytes + i, n);
            o += n;
            i += n;
        }
    }
    json_t *s = json_stringn(out, o);
    free(out);
    return s;
}
