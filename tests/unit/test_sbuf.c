/* test_sbuf: the growable string: adds, formatted adds, taking the text, freeing. */
#include <stdlib.h>
#include <string.h>

#include "ms_sbuf.h"
#include "ms_test.h"

int main(void)
{
    ms_sbuf b = {0};
    size_t n = 99;
    char *s = ms_sbuf_take(&b, &n);
    T_CHECK(s && !strcmp(s, "") && n == 0 && !b.s, "an empty buffer gives \"\" and is empty again");
    free(s);
    ms_sbuf_adds(&b, "ab");
    ms_sbuf_add(&b, "c\0d", 3); /* bytes, a NUL among them */
    for (int i = 0; i < 1000; i++) ms_sbuf_addf(&b, "%d,", i % 10);
    T_CHECK(b.n == 5 + 2000 && b.s[b.n] == 0 && !memcmp(b.s, "abc\0d0,1,", 9) && !memcmp(b.s + b.n - 4, "8,9,", 4),
            "adds grow the text, NUL-terminated (%zu bytes)", b.n);
    s = ms_sbuf_take(&b, &n);
    T_CHECK(n == 2005 && !b.s && b.n == 0, "take hands the text over");
    free(s);
    ms_sbuf_adds(&b, "x");
    ms_sbuf_free(&b);
    T_CHECK(!b.s && b.n == 0, "free empties it");
    ms_sbuf_free(NULL);
    return ms_t_done();
}
