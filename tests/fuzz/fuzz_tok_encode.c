/* fuzz_tok_encode: libFuzzer harness for ms_tok_encode on arbitrary bytes (first byte: allow specials). */
#include "fuzz_tok.h"

/* 1 if s[0..n) is valid UTF-8 (no overlongs, surrogates or code points above U+10FFFF). */
static int utf8_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            k = 1, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return 0;
        }
        if (n - i <= k) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += k + 1;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    const ms_tok *t = fuzz_tok();
    if (len == 0) return 0;
    int special = data[0] & 1;
    const char *text = (const char *)data + 1;
    size_t n = len - 1;
    int32_t *ids = NULL;
    size_t nid = 0;
    int rc = ms_tok_encode(t, text, n, special, &ids, &nid);
    /* Valid UTF-8 always encodes; anything else is refused with a message. */
    FUZZ_CHECK((rc == 0) == utf8_valid((const uint8_t *)text, n));
    if (rc != 0) {
        fuzz_refused(ms_err_msg());
        FUZZ_CHECK(ms_err_msg()[0] != 0);
        return 0;
    }
    /* Every id is in the vocabulary and decoding gives the text back byte for byte. */
    int nv = ms_tok_n_vocab(t);
    for (size_t i = 0; i < nid; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < nv);
    FUZZ_CHECK(nid <= n);
    char *back = NULL;
    size_t blen = 0;
    FUZZ_CHECK(ms_tok_decode(t, ids, nid, &back, &blen) == 0);
    FUZZ_CHECK(blen == n && memcmp(back, text, n) == 0);
    free(back);
    free(ids);
    return 0;
}
