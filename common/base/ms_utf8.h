/* ms_utf8: valid UTF-8 out of arbitrary bytes (whole buffers, or a stream cut anywhere). */
#ifndef MS_UTF8_H
#define MS_UTF8_H

#include <stddef.h>

/* Length (1..4) of the valid UTF-8 sequence at p[0..avail), or 0 if none starts there
 * (overlong forms, surrogates and code points past U+10FFFF are invalid). */
size_t ms_utf8_seq_len(const unsigned char *p, size_t avail);

/* bytes[0..len) as valid UTF-8 into out (room for 3 * len bytes): each valid sequence kept,
 * every byte that is not part of one replaced by U+FFFD. Returns the bytes written. */
size_t ms_utf8_clean(const char *bytes, size_t len, char *out);

/* A stream of bytes delivered in pieces (tokens) whose UTF-8 characters may straddle pieces:
 * the start of a character that may still complete is held back until the next piece. */
typedef struct {
    unsigned char held[4];
    size_t n_held;
} ms_utf8_stream;

/* The valid text of the next piece into out (room for 3 * (len + 4) bytes): held bytes first,
 * then bytes; an incomplete character at the end is held. Returns the bytes written. */
size_t ms_utf8_stream_put(ms_utf8_stream *s, const char *bytes, size_t len, char *out);
/* End of the stream: a held incomplete character becomes U+FFFD per byte (out: 12 bytes). */
size_t ms_utf8_stream_end(ms_utf8_stream *s, char *out);

#endif
