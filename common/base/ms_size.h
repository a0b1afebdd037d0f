/* ms_size: the one size syntax of every option (--ram-budget, --capacity), and its printing. */
#ifndef MS_SIZE_H
#define MS_SIZE_H

#include <stddef.h>
#include <stdint.h>

/* Parse a size as dd does: plain bytes ("4096", "4096B"), or a decimal number with a unit:
 * K, M, G, T or KiB, MiB, GiB, TiB = powers of 1024; KB, MB, GB, TB = powers of 1000
 * (case-insensitive; "1.5G" is allowed and rounds down to whole bytes). No sign, exponent or
 * hex. Returns 0 with *bytes set, or -1 with ms_err set (class MS_EXIT_USAGE) quoting s. */
int ms_size_parse(const char *s, uint64_t *bytes);

/* "1.50 GiB"-style text (B, KiB, MiB, GiB, TiB) into buf; returns buf. */
const char *ms_size_fmt(uint64_t bytes, char *buf, size_t n);

#endif
