/* ms_chatp: a chat prompt as pieces (markers and text) and their ids, for the families' chat formats. */
#ifndef MS_CHATP_H
#define MS_CHATP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ms_tok.h"

/* A prompt being rendered: markers (the tokenizer's special tokens, by their text) and text,
 * adjacent text merged into one run (so that a run is encoded whole, as a template's text
 * between two special tokens is). Zero-initialise; free with ms_chatp_free. buf is the rendered
 * text, markers included, NUL-terminated once anything was put. */
typedef struct {
    char *buf;            /* [len + 1] all bytes back to back, owned */
    size_t len, cap;
    size_t *start;        /* [n + 1] piece i is buf[start[i], start[i + 1]) */
    uint8_t *special;     /* [n] 1: a marker */
    int n, cap_p;
} ms_chatp;

/* Append s[n] as a marker (special 1) or text. */
void ms_chatp_put(ms_chatp *p, const char *s, size_t n, int special);
static inline void ms_chatp_text(ms_chatp *p, const char *s) { ms_chatp_put(p, s, strlen(s), 0); }
static inline void ms_chatp_mark(ms_chatp *p, const char *s) { ms_chatp_put(p, s, strlen(s), 1); }
void ms_chatp_free(ms_chatp *p); /* accepts a zeroed one; leaves it zeroed */
/* The ids of the pieces: a marker's special id, each text run encoded as text (a marker's text
 * inside a run stays text). *ids malloc'ed; 0, or -1 with ms_err set (MS_EXIT_INPUT: the
 * tokenizer lacks a marker, named with the format's name `fmt`). p is left as it was. */
int ms_chatp_encode(const ms_chatp *p, const ms_tok *t, const char *fmt, int32_t **ids, size_t *n_ids);
/* 0 when the tokenizer has every marker of marks[n]; else -1 with ms_err set (MS_EXIT_INPUT)
 * naming the first it lacks and what needs it (`what`: "tool calls in the kimi format"). */
int ms_chatp_need(const ms_tok *t, const char *const *marks, int n, const char *what);
/* 1 if s[n] is valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
int ms_chatp_valid_utf8(const char *s, size_t n);

#endif
