/* ms_reqfields: which fields of OpenAI's request bodies are taken, for serve and jobs alike: the ones implemented, the ones accepted only at their neutral value, and the rest refused naming the field. */
#ifndef MS_REQFIELDS_H
#define MS_REQFIELDS_H

#include <jansson.h>

/* Why a body was refused: an OpenAI error code ("unsupported_field", "unsupported_value"), the
 * message, and the field (param: static, or param_own). */
typedef struct {
    const char *code;
    const char *param;
    char param_own[64];
    char message[768];
} ms_reqfields_err;

/* Every field of body for a chat (chat = 1) or a completion: one this build implements, one of
 * OpenAI's that it does not, at the value that means off (null always counts as absent), or
 * `extra` (another name the caller takes, e.g. a jobs line's "custom_id"; NULL: none). 0, or -1
 * with *e filled for the first field that is neither. */
int ms_reqfields_check(const json_t *body, int chat, const char *extra, ms_reqfields_err *e);

#endif
