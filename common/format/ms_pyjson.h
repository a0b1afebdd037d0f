/* ms_pyjson: JSON text as Python's json.dumps(x, ensure_ascii=False) writes it, which is what chat templates' tojson emit. */
#ifndef MS_PYJSON_H
#define MS_PYJSON_H

#include <jansson.h>
#include <stddef.h>

/* Hugging Face chat templates render values with `tojson`, which transformers implements as
 * json.dumps(x, ensure_ascii=False): separators ", " and ": ", keys in their order, non-ASCII
 * kept, only '"', '\\' and control characters escaped (\n \r \t \b \f, else \u00xx), floats as
 * Python's repr (the shortest text that reads back to the same double: 0.1, 1e-05, 1e+16,
 * 100.0). A prompt rendered by such a template must match byte for byte, which jansson's own
 * dump (17 significant digits, "/" unescaped but spacing its own) does not give.
 *
 * The text of v, malloc'ed, NUL-terminated (*len bytes when len is not NULL). Never fails
 * (jansson values are always representable); v must not be NULL. */
char *ms_pyjson_dumps(const json_t *v, size_t *len);
/* The same with separators "," and ":" (tojson(separators=(',', ':')), Kimi's tool list). */
char *ms_pyjson_dumps_compact(const json_t *v, size_t *len);

/* Python's repr of a double into buf (at least 32 bytes): "0.1", "-0.0", "1e+16", "1.5e-07". */
void ms_pyjson_float(double d, char *buf, size_t n);

#endif
