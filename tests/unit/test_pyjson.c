/* test_pyjson: tojson text as CPython's json.dumps(x, ensure_ascii=False) prints it. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ms_pyjson.h"
#include "ms_test.h"

int main(void)
{
    /* Expected texts: printed by CPython 3.11's json.dumps (repr of each float), not by this code. */
    static const struct {
        double v;
        const char *want;
    } fl[] = {{0.1, "0.1"},
              {-0.0, "-0.0"},
              {0.0, "0.0"},
              {1e16, "1e+16"},
              {1e15, "1000000000000000.0"},
              {123456789012345678.0, "1.2345678901234568e+17"},
              {1.5e-7, "1.5e-07"},
              {1e-5, "1e-05"},
              {0.0001, "0.0001"},
              {100.0, "100.0"},
              {3.14159, "3.14159"},
              {5e-324, "5e-324"},
              {1.7976931348623157e308, "1.7976931348623157e+308"},
              {-12.5, "-12.5"},
              {1.0 / 3.0, "0.3333333333333333"},
              {0.30000000000000004, "0.30000000000000004"},
              {9007199254740992.0, "9007199254740992.0"},
              {1e22, "1e+22"},
              {12345600.0, "12345600.0"}};
    for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++) {
        char buf[40];
        ms_pyjson_float(fl[i].v, buf, sizeof buf);
        T_CHECK(!strcmp(buf, fl[i].want), "repr(%.17g) = %s, want %s", fl[i].v, buf, fl[i].want);
    }
    /* strings (escapes: only '"', '\\' and controls; U+007F, '/' and non-ASCII as they are), key
     * order as given, separators ", " and ": " */
    static const char in[] = "{\"a\": \"x\\\"y\\\\z\\n\\t\\b\\f\\r\\u0001\\u001f\\u007f/\\u00e9\\ud83d\\ude00\","
                             " \"b\": [1, 2.0, true, false, null, {}], \"c\": [], \"d\": {\"z\": 1, \"a\": -3}}";
    static const char want[] = "{\"a\": \"x\\\"y\\\\z\\n\\t\\b\\f\\r\\u0001\\u001f\x7f/\xc3\xa9\xf0\x9f\x98\x80\", "
                               "\"b\": [1, 2.0, true, false, null, {}], \"c\": [], \"d\": {\"z\": 1, \"a\": -3}}";
    json_error_t je;
    json_t *v = json_loads(in, 0, &je);
    T_CHECK(v != NULL, "the input parses: %s", je.text);
    size_t n = 0;
    char *got = v ? ms_pyjson_dumps(v, &n) : NULL;
    T_CHECK(got && n == sizeof want - 1 && !memcmp(got, want, n), "dumps: %s", got ? got : "(null)");
    free(got);
    json_decref(v);
    /* a bare string, as a tool result is rendered */
    json_t *s = json_string("{\"t\": 18}");
    got = ms_pyjson_dumps(s, &n);
    T_CHECK(!strcmp(got, "\"{\\\"t\\\": 18}\""), "a string: %s", got);
    free(got);
    json_decref(s);
    return ms_t_done();
}
