/* ms_file: opening and reading files named by the user or a model: no hang on a FIFO or device,
 * bounded sizes, exact positional reads. */
#ifndef MS_FILE_H
#define MS_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Accept a pipe or FIFO as well as a regular file (user input such as `--file <(cmd)`); model
 * files are regular files only. */
#define MS_FILE_STREAM 1

/* Open `path` for reading without ever blocking in open(): it is opened O_NONBLOCK, checked
 * with fstat, and anything but a regular file (or, with MS_FILE_STREAM in flags, a pipe/FIFO)
 * is closed again and refused. `what` names the file's role in messages ("config", "prompt
 * file", ...). extra_oflags is or-ed into the open flags (e.g. O_DIRECT). Returns the fd
 * (blocking, close-on-exec; the caller closes it; for an accepted FIFO the call waits until
 * its writer has sent something or closed) and its size in *size (0 for a pipe; size may
 * be NULL), or -1 with ms_err set naming what and path (class MS_EXIT_IO). */
int ms_file_open(const char *path, const char *what, int flags, int extra_oflags, uint64_t *size);

/* Read all of `path` (opened as ms_file_open does) into a malloc'ed buffer with a NUL after the
 * last byte; *len (may be NULL) receives the length. A file longer than max_bytes is refused
 * without reading past the limit (message naming what, path and the limit; class too_big_code).
 * Returns NULL with ms_err set on failure (read errors: MS_EXIT_IO). */
char *ms_file_read_all(const char *path, const char *what, int flags, uint64_t max_bytes, int too_big_code,
                       size_t *len);

/* Read exactly len bytes at off of fd into buf (retrying short reads and EINTR). A file that
 * ends early (truncated or changed while in use) or a read error returns -1 with ms_err set
 * naming path and the offset (class MS_EXIT_IO). */
int ms_file_pread(int fd, const char *path, uint64_t off, void *buf, size_t len);

/* Files written whole and then put in place (a failure leaves the previous file):
 * ms_file_tmp_create makes a new file beside path, named path.tmp-XXXXXX (its name into
 * tmp[cap]), created exclusively by mkostemp: never an existing file, never through a symlink
 * planted at a guessable name; mode is set with fchmod (0600 for anything private). Returns
 * the fd, or -1 with ms_err set (MS_EXIT_IO) naming what and path. The caller writes it
 * (ms_file_write_all: 0, or -1 with errno set) and ends with ms_file_tmp_commit, which fsyncs,
 * closes and renames tmp over path; failed != 0 (the caller's write failed, errno set) or any
 * failure of its own removes tmp and returns -1 with ms_err set ("cannot write the WHAT PATH:
 * ...", MS_EXIT_IO); else 0. The fd is closed either way. */
int ms_file_tmp_create(const char *path, const char *what, mode_t mode, char *tmp, size_t cap);
int ms_file_write_all(int fd, const void *buf, size_t len);
int ms_file_tmp_commit(int fd, const char *tmp, const char *path, const char *what, int failed);

/* 0 when dir is a directory of this user's own (not a symlink, owned by the effective uid, not
 * writable by group or others), so files in it are ours: nobody else planted them or can
 * replace them. Else -1 with why[cap] saying what is wrong. */
int ms_file_private_dir(const char *dir, char *why, size_t cap);

#endif
