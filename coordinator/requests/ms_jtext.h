/* ms_jtext: bytes as a JSON string value, valid UTF-8 whatever the bytes. */
#ifndef MS_JTEXT_H
#define MS_JTEXT_H

#include <jansson.h>
#include <stddef.h>

/* A new JSON string of bytes[0..len): each valid UTF-8 sequence kept (U+0000 included), every
 * byte that is not part of one replaced by U+FFFD. Never NULL. The caller owns the reference. */
json_t *ms_jtext(const char *bytes, size_t len);

#endif
