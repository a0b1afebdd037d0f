/* fuzz_ids: libFuzzer harness for the CLI's id-list parser ms_cli_parse_ids (--ids, --ids-file). */
#include <inttypes.h>

#include "fuzz_util.h"
#include "ms_cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    fuzz_dir();
    char *s = fuzz_cstr(data, len);
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = ms_cli_parse_ids(s, &ids, &n);
    if (rc != 0) {
        fuzz_refused(ms_err_msg());
        FUZZ_CHECK(ms_err_msg()[0] != 0 && ms_err_code() == MS_EXIT_USAGE);
        free(s);
        return 0;
    }
    /* Accepted: non-negative ids, at most one per two bytes; printing them back as "a,b,c"
     * parses to the same list. */
    FUZZ_CHECK(n <= (len + 1) / 2);
    size_t cap = n * 12 + 1, k = 0;
    char *out = malloc(cap);
    if (!out) abort();
    out[0] = 0;
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(ids[i] >= 0);
        k += (size_t)snprintf(out + k, cap - k, "%s%" PRId32, i ? "," : "", ids[i]);
    }
    int32_t *again = NULL;
    size_t n2 = 0;
    FUZZ_CHECK(ms_cli_parse_ids(out, &again, &n2) == 0);
    FUZZ_CHECK(n2 == n && (n == 0 || memcmp(again, ids, n * sizeof *ids) == 0));
    free(again);
    free(out);
    free(ids);
    free(s);
    return 0;
}
