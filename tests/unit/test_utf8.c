/* test_utf8: UTF-8 repair: known sequences, and a stream cut anywhere equal to the whole text repaired. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ms_test.h"
#include "ms_utf8.h"

#define R "\xef\xbf\xbd" /* U+FFFD */

static int clean_is(const char *in, size_t len, const char *want)
{
    char out[256];
    size_t n = ms_utf8_clean(in, len, out);
    return n == strlen(want) && !memcmp(out, want, n);
}

/* The pieces of in[0..len) cut at the positions of mask's set bits, through one stream. */
static size_t streamed(const char *in, size_t len, uint64_t mask, char *out)
{
    ms_utf8_stream st = {{0}, 0};
    size_t o = 0, from = 0;
    for (size_t i = 1; i <= len; i++)
        if (i == len || (mask >> (i % 64)) & 1) {
            o += ms_utf8_stream_put(&st, in + from, i - from, out + o);
            from = i;
        }
    o += ms_utf8_stream_put(&st, in, 0, out + o); /* an empty piece changes nothing */
    return o + ms_utf8_stream_end(&st, out + o);
}

static uint64_t next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

int main(void)
{
    T_CHECK(clean_is("abc", 3, "abc"), "ASCII kept");
    char o[64];
    T_CHECK(ms_utf8_clean("a\0b", 3, o) == 3 && !memcmp(o, "a\0b", 3), "U+0000 kept");
    T_CHECK(clean_is("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"),
            "2-, 3- and 4-byte characters kept");
    T_CHECK(clean_is("\x80x", 2, R "x"), "a lone continuation byte -> U+FFFD");
    T_CHECK(clean_is("\xc0\xaf", 2, R R), "an overlong form -> U+FFFD per byte");
    T_CHECK(clean_is("\xed\xa0\x80", 3, R R R), "a surrogate -> U+FFFD per byte");
    T_CHECK(clean_is("\xf4\x90\x80\x80", 4, R R R R), "past U+10FFFF -> U+FFFD per byte");
    T_CHECK(clean_is("\xe2\x82", 2, R R), "a truncated character -> U+FFFD per byte");
    T_CHECK(clean_is("\xe2\x82x", 3, R R "x"), "a broken character, then ASCII");

    /* A character split across pieces comes out whole, once its last byte arrives. */
    ms_utf8_stream st = {{0}, 0};
    char out[64];
    T_CHECK(ms_utf8_stream_put(&st, "a\xe2", 2, out) == 1 && out[0] == 'a', "the start of a character is held");
    T_CHECK(ms_utf8_stream_put(&st, "\x82", 1, out) == 0, "still held");
    size_t n = ms_utf8_stream_put(&st, "\xac!", 2, out);
    T_CHECK(n == 4 && !memcmp(out, "\xe2\x82\xac!", 4), "completed: the character and what follows");
    T_CHECK(ms_utf8_stream_put(&st, "\xf0\x9f", 2, out) == 0 && ms_utf8_stream_end(&st, out) == 6 &&
                !memcmp(out, R R, 6), "a character the stream ends inside -> U+FFFD per byte");
    T_CHECK(ms_utf8_stream_put(&st, "\xe0\x80", 2, out) == 6 && !memcmp(out, R R, 6),
            "a start that can never complete (E0 80: overlong) is not held");

    /* Invariant: however the bytes are cut, the stream gives what repairing the whole gives. */
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    const unsigned char pool[] = {'a', ' ', 0x80, 0xbf, 0xc2, 0xc3, 0xa9, 0xe0, 0xa0, 0xe2, 0x82, 0xac,
                                  0xed, 0x9f, 0xf0, 0x90, 0x9f, 0x98, 0xf4, 0x8f, 0xf5, 0xff, 0xc0};
    int bad = 0;
    for (int iter = 0; iter < 20000; iter++) {
        char in[48], a[48 * 3 + 16], b[48 * 3 + 16];
        size_t len = 1 + next(&x) % 47;
        for (size_t i = 0; i < len; i++) in[i] = (char)pool[next(&x) % sizeof pool];
        size_t na = ms_utf8_clean(in, len, a), nb = streamed(in, len, next(&x), b);
        if (na != nb || memcmp(a, b, na)) bad++;
        /* and the result is valid UTF-8: cleaning it again changes nothing */
        char c[48 * 9 + 16];
        if (ms_utf8_clean(a, na, c) != na || memcmp(a, c, na)) bad++;
    }
    T_CHECK(bad == 0, "20000 random byte strings, cut at random: streamed = whole, and valid (%d differ)", bad);
    return ms_t_done();
}
