/* ms_ident: the full-content identity of a checkpoint: XXH3-128 of every byte of every tensor, kept in a sidecar. */
#ifndef MS_IDENT_H
#define MS_IDENT_H

#include <stddef.h>
#include <stdint.h>

#include "ms_st.h"

/* What a trunk pack or an expert worker substitutes for a checkpoint's bytes is tied to it by
 * hashes of every byte, never a sample. Hashing a checkpoint reads all of it (the full K3:
 * 1.56 TB, bound by the disk), so each tensor's hash is computed once and kept in a sidecar:
 *
 *   DIR/moestream.ident, or where DIR cannot be written (a read-only checkpoint) in
 *   $MS_CACHE_DIR, else $XDG_CACHE_HOME/moestream, else $HOME/.cache/moestream, as
 *   ident-<XXH3-64 of DIR's real path>.
 *
 * An entry is used only while its shard file has the size, mtime (ns), inode and device it had
 * when hashed, and the same tensors at the same offsets; otherwise that file is hashed again.
 * The sidecar is a cache: a missing, foreign or corrupt one (its own checksum) is ignored and
 * rewritten, written to a temporary file and renamed (concurrent runs are safe). Hashing shows
 * progress (ms_progress, task "hashing checkpoint") and logs what it costs.
 *
 * Layout (little-endian): "MSIDENT1", u32 version 1, u32 files; per file: u16 name length,
 * name, u64 size, i64 mtime s, i64 mtime ns, u64 inode, u64 device, u32 tensors, then per
 * tensor in offset order: u64 offset, u64 bytes, u8 known, 16 bytes XXH3-128; then u64 XXH3-64
 * of everything before it. */

/* The XXH3-128 (16 bytes, big-endian canonical form) of the bytes of each of names[0..n) of
 * the checkpoint st opened from dir (every tensor when names is NULL; out may then be NULL),
 * from the sidecar where it holds them, else by reading them (and the sidecar is updated;
 * a sidecar that cannot be written anywhere is logged once and the hashes are still returned).
 * Returns 0, or -1 with ms_err set (a name st does not have: MS_EXIT_MODEL; a read error or a
 * file that changed while it was hashed: MS_EXIT_IO, naming the file). */
int ms_ident_hashes(const char *dir, const ms_st *st, const char *const *names, size_t n, uint8_t (*out)[16]);

/* The model fingerprint of checkpoint dir, 16 lower-case hex digits: XXH3-64 chained over
 * config.json's bytes, then every tensor in name order: its name, dtype, shape and the
 * XXH3-128 of all its bytes (ms_ident_hashes). Independent of how tensors are split into
 * shard files. Returns 0, or -1 with ms_err set naming the file. */
int ms_ident_fingerprint(const char *dir, char out[17]);

/* The model fingerprint a coordinator, a worker or a pack presents for checkpoint dir: that of
 * ms_ident_fingerprint, except that a trunk-only checkpoint written by moestream shard holds
 * its source model's fingerprint in DIR/moestream.fingerprint (16 lower-case hex digits), which
 * is used instead. Returns 0, or -1 with ms_err set naming the file. */
int ms_ident_model(const char *dir, char out[17]);

/* Where the sidecar of dir is read from and written to (the first writable of the places
 * above; into buf, which holds cap bytes). Returns buf. For tests and docs. */
const char *ms_ident_sidecar_path(const char *dir, char *buf, size_t cap);
/* 1 when dir's sidecar is there and readable (the hashes are kept for the next run), else 0. A
 * sidecar outside dir must be in a directory of this user's alone (not writable by others);
 * without HOME the user's home comes from the password file, and with none there is no cache. */
int ms_ident_sidecar_kept(const char *dir);
/* The user's moestream cache directory (MS_CACHE_DIR, else $XDG_CACHE_HOME/moestream, else
 * ~/.cache/moestream) into buf, made (0700) when missing: 0 when it is there and this user's
 * alone, else -1 (nothing is to be cached). */
int ms_ident_cache_dir(char *buf, size_t cap);

#endif
