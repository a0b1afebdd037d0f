/* ms_ids: the one parser of token id lists (--ids, --ids-file, --draft-file). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_ids.h"

int ms_ids_parse(const char *s, int32_t **ids, size_t *n)
{
    size_t cap = 16, len = 0;
    int32_t *v = ms_malloc(sizeof(int32_t) * cap);
    const char *p = s;
    int after_comma = 0; /* a comma must be followed by an id: "1,,3", ",1" and "1," are refused */
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (*p == ',' || (!*p && after_comma)) {
            if (after_comma || len == 0) {
                free(v);
                ms_err_set("empty item %zu in the id list (byte %zu%s): ids are non-negative integers separated by "
                           "commas",
                           len + 1, (size_t)(p - s), *p ? "" : ", after a trailing comma");
                return ms_err_set_code(MS_EXIT_USAGE);
            }
            after_comma = 1;
            p++;
            continue;
        }
        if (!*p) break;
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX || (*end && !strchr(", \t\r\n", *end))) {
            free(v);
            ms_err_set("bad token id at item %zu (byte %zu) near '%.20s': ids are non-negative integers separated by "
                       "commas",
                       len + 1, (size_t)(p - s), p);
            return ms_err_set_code(MS_EXIT_USAGE);
        }
        if (len == cap) v = ms_realloc(v, sizeof(int32_t) * (cap *= 2));
        v[len++] = (int32_t)x;
        after_comma = 0;
        p = end;
    }
    *ids = v;
    *n = len;
    return 0;
}
