/* ms_sbuf: a growable byte string (always NUL-terminated) for text or bytes built piece by piece, and a reader of such bytes. */
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

/* A cursor over n borrowed bytes, read in order. */
typedef struct {
    const char *p;
    size_t n, at;
} ms_reader;
/* The next len bytes into dst: 0, or -1 (nothing read) when fewer are left. */
int ms_reader_take(ms_reader *r, void *dst, size_t len);
/* The next n floats into dst, each finite: 0; -1 (nothing read) when fewer bytes are left; -2
 * (read, r->at left at the first non-finite one) when one is NaN or infinite. Saved states
 * hold only finite values: a NaN there is the file's fault, not the weights'. */
int ms_reader_take_floats(ms_reader *r, float *dst, size_t n);

#endif
