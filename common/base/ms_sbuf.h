/* ms_sbuf: a growable byte string (always NUL-terminated) for text built piece by piece. */
#ifndef MS_SBUF_H
#define MS_SBUF_H

#include <stddef.h>

/* Zero-initialise ({0}) to start. s is malloc'ed and owned by the buffer until taken: give it
 * away with ms_sbuf_take or release it with ms_sbuf_free. Allocation failure aborts (ms_malloc). */
typedef struct {
    char *s;     /* NULL until the first add */
    size_t n;    /* bytes, excluding the NUL */
    size_t cap;
} ms_sbuf;

void ms_sbuf_add(ms_sbuf *b, const char *s, size_t n);
void ms_sbuf_adds(ms_sbuf *b, const char *s);
void ms_sbuf_addf(ms_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The text (never NULL: "" when nothing was added), now the caller's to free; the buffer is empty again. */
char *ms_sbuf_take(ms_sbuf *b, size_t *len);
void ms_sbuf_free(ms_sbuf *b);

#endif
