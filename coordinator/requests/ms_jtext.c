/* ms_jtext: JSON string values for bytes that may not be valid UTF-8 (answers, error messages quoting a request). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_jtext.h"
#include "ms_utf8.h"

json_t *ms_jtext(const char *bytes, size_t len)
{
    char *out = ms_malloc(len * 3 + 1);
    size_t o = ms_utf8_clean(bytes, len, out);
    json_t *s = json_stringn(out, o);
    free(out);
    return s;
}
