/* ms_pcache: the prefix cache: saved sequence states keyed by the tokens they hold, in RAM within
 * a byte budget, spilled to a directory (size-limited, least recently used first), found by the
 * longest prefix of a new prompt. */
#ifndef MS_PCACHE_H
#define MS_PCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "ms_model.h"

typedef struct ms_pcache ms_pcache;

/* A cache for m's sequences (borrowed) of at most ram_bytes of states in memory; dir (NULL: no
 * spilling) receives what leaves memory, up to disk_bytes, as state files (ms_seqfile) of family
 * and fingerprint; files already there of the same model are indexed (a restart reuses them).
 * NULL with ms_err set when dir cannot be used. */
ms_pcache *ms_pcache_new(ms_model *m, uint64_t ram_bytes, const char *dir, uint64_t disk_bytes, const char *family,
                         const char *fingerprint);
void ms_pcache_free(ms_pcache *c); /* accepts NULL; files in dir stay */

/* The state of the longest cached prefix of ids[n] shorter than n (at least one token is left to
 * run, so that its logits come out): a new sequence (the caller's) holding ids[0..*len), or
 * NULL when none is cached. A spilled state that is refused (corrupt) is dropped and the next
 * longest tried. */
ms_seq *ms_pcache_take(ms_pcache *c, const int32_t *ids, size_t n, size_t *len);
/* Keep a copy of s (settled) as the state of ids[n] (n = its position). Evicts what it must
 * (least recently used first, never a pinned state); a state that cannot fit is not kept. */
void ms_pcache_put(ms_pcache *c, const int32_t *ids, size_t n, const ms_seq *s);
/* A prompt's state as it is prefilled: s holds prompt[0..fed); it is kept at the prompt's end
 * (the state then holds exactly the prompt) and each time `every` more tokens were fed since
 * *kept (0: only at the end), and *kept says how far the kept states reach. */
void ms_pcache_keep_prompt(ms_pcache *c, const int32_t *prompt, size_t n_prompt, size_t fed, size_t every, size_t *kept,
                           const ms_seq *s);
/* The same, pinned: kept in RAM until ms_pcache_free, never evicted or spilled (jobs' shared
 * prompt beginnings), in the room ms_pcache_set_pin_room gives, beside ram_bytes. One that does
 * not fit beside the pinned ones is not kept (logged). */
void ms_pcache_put_pinned(ms_pcache *c, const int32_t *ids, size_t n, const ms_seq *s);
/* Room for pinned states (0 by default; planned apart from ram_bytes). */
void ms_pcache_set_pin_room(ms_pcache *c, uint64_t bytes);

typedef struct {
    uint64_t lookups, hits;        /* ms_pcache_take calls, and those that found a prefix */
    uint64_t tokens_reused;        /* prompt tokens not prefilled thanks to hits */
    uint64_t bytes_restored;       /* state bytes read back (RAM or disk) */
    uint64_t entries_ram, bytes_ram, entries_disk, bytes_disk;
    uint64_t evictions, spills;    /* states dropped, states moved to dir */
} ms_pcache_stats;
void ms_pcache_get_stats(const ms_pcache *c, ms_pcache_stats *st);

#endif
