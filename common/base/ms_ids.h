/* ms_ids: parse a list of token ids ("1,2,3", commas and/or whitespace). */
#ifndef MS_IDS_H
#define MS_IDS_H

#include <stddef.h>
#include <stdint.h>

/* Parse s (NUL-terminated) into a malloc'ed array *ids of *n ids (the caller frees it): non-
 * negative integers up to INT32_MAX separated by commas and/or whitespace; an empty item
 * ("1,,3", a leading or trailing comma) or a bad id is refused. Returns 0, or -1 with ms_err
 * set (MS_EXIT_USAGE) naming the bad item's number and byte offset (nothing allocated). */
int ms_ids_parse(const char *s, int32_t **ids, size_t *n);

#endif
