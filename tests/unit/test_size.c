/* test_size: the one size syntax (dd's: K = 1024, KB = 1000) and the one size printer. */
#include <stdint.h>
#include <string.h>

#include "ms_err.h"
#include "ms_size.h"
#include "ms_test.h"

static void test_parse(void)
{
    /* Expected values from the definitions of the units, not from the parser. */
    static const struct {
        const char *s;
        uint64_t v;
    } ok[] = {{"0", 0},
              {"4096", 4096},
              {"4096B", 4096},
              {"512b", 512},
              {"1K", 1024},
              {"1k", 1024},
              {"1KiB", 1024},
              {"3kib", 3072},
              {"1KB", 1000},
              {"2MB", 2000000},
              {"512MiB", 512ull << 20},
              {"8G", 8ull << 30},
              {"8GiB", 8ull << 30},
              {"64G", 68719476736ull},
              {"64GB", 64000000000ull},
              {"2T", 2ull << 40},
              {"3TB", 3000000000000ull},
              {"1.5TB", 1500000000000ull},
              {"1.5K", 1536},
              {"0.5G", 1ull << 29},
              {"1.0000001K", 1024}, /* rounds down to whole bytes */
              {"2.5", 2},
              {"17547264", 17547264},
              {"16777215T", 16777215ull << 40}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t v = 7;
        int rc = ms_size_parse(ok[i].s, &v);
        T_CHECK(rc == 0 && v == ok[i].v, "size '%s' = %llu (got rc %d, %llu)", ok[i].s, (unsigned long long)ok[i].v, rc,
                (unsigned long long)v);
    }
    const char *bad[] = {"",     "-1",   "+1",    "1e3",  "G",  "1.2.3", "8GiBx", "0x10", "8 G", " 5", "12X", "64GG",
                         "64Gi", "1Ki",  ".",     "99999999999999999999", "20000000T", "16777216T"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 7;
        ms_err_clear();
        T_CHECK(ms_size_parse(bad[i], &v) != 0 && ms_err_code() == MS_EXIT_USAGE && strstr(ms_err_msg(), bad[i]) &&
                    v == 7,
                "size '%s' refused with a usage error quoting it, output untouched", bad[i]);
    }
    uint64_t v = 7;
    T_CHECK(ms_size_parse(NULL, &v) != 0 && ms_err_code() == MS_EXIT_USAGE, "NULL refused");
}

static void test_fmt(void)
{
    static const struct {
        uint64_t b;
        const char *want;
    } cases[] = {{0, "0 B"},
                 {100, "100 B"},
                 {1023, "1023 B"},
                 {1024, "1.00 KiB"},
                 {1536, "1.50 KiB"},
                 {3ull << 29, "1.50 GiB"},
                 {17547264, "16.73 MiB"}, /* 17547264 / 2^20 = 16.734 */
                 {5ull << 40, "5.00 TiB"},
                 {2048ull << 40, "2048.00 TiB"}}; /* TiB is the largest unit */
    char b[64];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        T_CHECK(!strcmp(ms_size_fmt(cases[i].b, b, sizeof b), cases[i].want), "fmt %llu: '%s', want '%s'",
                (unsigned long long)cases[i].b, b, cases[i].want);
    /* what it prints parses back to the same size to 3 significant digits */
    uint64_t back = 0;
    ms_size_fmt(3ull << 29, b, sizeof b);
    b[strlen(b) - 4] = 0; /* "1.50" + "GiB" without the space */
    strcat(b, "GiB");
    T_CHECK(ms_size_parse(b, &back) == 0 && back == 3ull << 29, "'%s' parses back to 1.5 GiB", b);
    char tiny[6];
    ms_size_fmt(3ull << 29, tiny, sizeof tiny);
    T_CHECK(strlen(tiny) == 5, "a short buffer is cut, not overrun: '%s'", tiny);
}

int main(void)
{
    test_parse();
    test_fmt();
    return ms_t_done();
}
