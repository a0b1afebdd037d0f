/* ms_size: parsing and printing byte sizes with binary (K, KiB) and decimal (KB) units. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "ms_err.h"
#include "ms_size.h"

static int bad(const char *s)
{
    ms_err_set("bad size '%s' (bytes, or a number with K/M/G/T or KiB..TiB = powers of 1024, or KB/MB/GB/TB = "
               "powers of 1000, e.g. 64GB or 8GiB)",
               s ? s : "");
    return ms_err_set_code(MS_EXIT_USAGE);
}

int ms_size_parse(const char *s, uint64_t *bytes)
{
    if (!s) return bad(s);
    /* Integer part and up to 18 fraction digits, kept exact in integers. */
    const char *p = s;
    uint64_t ip = 0, frac = 0, frac_den = 1;
    int n_int = 0, n_frac = 0;
    while (isdigit((unsigned char)*p)) {
        if (__builtin_mul_overflow(ip, 10, &ip) || __builtin_add_overflow(ip, (uint64_t)(*p - '0'), &ip))
            return bad(s);
        n_int++;
        p++;
    }
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) {
            if (n_frac < 18) {
                frac = frac * 10 + (uint64_t)(*p - '0');
                frac_den *= 10;
            }
            n_frac++;
            p++;
        }
    }
    if (n_int + n_frac == 0) return bad(s);
    /* Unit: a letter of K/M/G/T, then nothing (binary), "iB" (binary) or "B" (decimal). */
    int power = 0;
    const char *units = "KMGT";
    const char *u = *p ? strchr(units, toupper((unsigned char)*p)) : NULL;
    uint64_t base = 1024;
    if (u) {
        power = (int)(u - units) + 1;
        p++;
        if ((*p == 'i' || *p == 'I') && (p[1] == 'B' || p[1] == 'b'))
            p += 2;
        else if (*p == 'B' || *p == 'b') {
            base = 1000;
            p++;
        }
    } else if (*p == 'B' || *p == 'b') {
        p++;
    }
    if (*p) return bad(s);
    uint64_t mult = 1;
    for (int i = 0; i < power; i++) mult *= base;
    uint64_t whole, part;
    if (__builtin_mul_overflow(ip, mult, &whole)) return bad(s);
    /* frac / frac_den * mult, rounded down; frac < frac_den <= 1e18 and mult <= 2^40 need 128 bits. */
    __extension__ typedef unsigned __int128 u128;
    part = (uint64_t)((u128)frac * mult / frac_den);
    if (__builtin_add_overflow(whole, part, bytes)) return bad(s);
    return 0;
}

const char *ms_size_fmt(uint64_t bytes, char *buf, size_t n)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int i = 0;
    while (v >= 1024.0 && i < 4) {
        v /= 1024.0;
        i++;
    }
    if (i == 0)
        snprintf(buf, n, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, n, "%.2f %s", v, unit[i]);
    return buf;
}
