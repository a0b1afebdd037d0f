/* ms_seqfile: a sequence's saved state as a file: versioned, tied to one model, checksummed. */
#ifndef MS_SEQFILE_H
#define MS_SEQFILE_H

#include <stddef.h>
#include <stdint.h>

#include "ms_model.h"

#define MS_SEQFILE_VERSION 1

/* What a state file says besides the state. Owns its arrays (ms_seqfile_info_clear). */
typedef struct {
    char family[32];         /* the model family's name ("kimi-k3") */
    char fingerprint[17];    /* the model's (ms_ident_model: every byte of the checkpoint) */
    int32_t *tokens;         /* [n_tokens] the ids the state holds, in order (n_tokens = its position) */
    size_t n_tokens;
    int32_t *pending;        /* [n_pending] ids to feed before anything new (e.g. an answer's last token) */
    size_t n_pending;
    char *meta;              /* the writer's own JSON text (a chat's messages), or NULL */
} ms_seqfile_info;
void ms_seqfile_info_clear(ms_seqfile_info *i); /* accepts a zeroed one */

/* Write s (settled) with info to path: "MOESEQST", version, a JSON header, the state bytes
 * (ms_seq_save), an XXH3-64 of all of it; written beside path and renamed over it, so a
 * failure leaves the previous file. 0, or -1 with ms_err set (MS_EXIT_IO, naming the file). */
int ms_seqfile_write(const char *path, const ms_seqfile_info *info, const ms_seq *s);

/* Read path back into a new sequence of m (*s) and *info. Refused with -1 and ms_err set
 * naming the file (MS_EXIT_INPUT), nothing returned: not a state file, another version, a
 * checksum that does not match (corrupt or cut short), another family or model fingerprint
 * than family/fingerprint (a state of another model gives wrong answers, so it is never used),
 * or a state that does not fit m. The header is checked first (its positions and state bytes
 * against m's own state size) and the body is read into the one buffer it loads from, so a
 * huge or hostile file costs no more memory than m's state; a state holding a NaN or infinity
 * is refused. MS_EXIT_IO when it cannot be read (a FIFO or device is refused, not waited on). */
int ms_seqfile_read(const char *path, ms_model *m, const char *family, const char *fingerprint, ms_seqfile_info *info,
                    ms_seq **s);

/* The header of path alone (family, fingerprint, tokens, pending; the state is not read nor
 * checked: ms_seqfile_read does that). 0, or -1 with ms_err set. For indexing a directory of
 * states. */
int ms_seqfile_peek(const char *path, ms_seqfile_info *info);

#endif
