/* ms_io: a pool of reader threads that serves aligned O_DIRECT (or buffered) reads in order. */
#ifndef MS_IO_H
#define MS_IO_H

#include <stddef.h>
#include <stdint.h>

#define MS_IO_ALIGN 4096u

/* Files opened for reading: O_DIRECT when asked and supported, else buffered. Owned. */
typedef struct ms_io_files ms_io_files;

/* Open n paths. direct = 1 asks for O_DIRECT; a file system that refuses it falls back to
 * buffered reads for that file (ms_io_files_direct() tells). Returns NULL with ms_err set
 * (class MS_EXIT_IO) naming the file on failure. */
ms_io_files *ms_io_files_open(const char *const *paths, int n, int direct);
void ms_io_files_close(ms_io_files *f); /* accepts NULL */
int ms_io_files_direct(const ms_io_files *f, int file);
const char *ms_io_files_path(const ms_io_files *f, int file);
/* The whole of `file` mapped read-only and shared (its bytes are the page cache's, never copied),
 * made on the first call and kept until ms_io_files_close; *size (may be NULL) gets its length.
 * Thread-safe. Returns NULL with ms_err set naming the file (class MS_EXIT_IO) on failure.
 * Callers check their ranges against *size. A file cut short while mapped would fault (SIGBUS)
 * where a read comes up short: a process-wide SIGBUS handler (installed with the first mapping;
 * faults outside the mappings go to the handler before it, or end the process as they would
 * have) reads such pages as zeros and marks the mapping broken, which ms_io_files_map_check
 * reports: call it after computing from mapped bytes and before reporting anything. */
const uint8_t *ms_io_files_map(ms_io_files *f, int file, uint64_t *size);
/* Map every file of f (ms_io_files_map): 0, or -1 with ms_err set naming the first that cannot
 * be (a file system without mappings: callers then read instead). */
int ms_io_files_map_all(ms_io_files *f);
/* The file's size now (fstat), into *size: 0, or -1 with ms_err set naming it (MS_EXIT_IO). */
int ms_io_files_size(ms_io_files *f, int file, uint64_t *size);
/* 0, or -1 with ms_err set (class MS_EXIT_IO) naming a mapped file of f that was cut short
 * while in use (what was computed from it since is wrong and must be dropped; the flag stays). */
int ms_io_files_map_check(ms_io_files *f);
/* On a range of such a mapping: the bytes of its pages not in the page cache now (0 where the
 * kernel cannot tell); ask the kernel to start reading them (returns at once); map them in now
 * (reading what is absent), so that their first use neither traps nor waits. */
uint64_t ms_io_map_absent(const void *p, size_t n);
void ms_io_map_willneed(const void *p, size_t n);
void ms_io_map_populate(const void *p, size_t n);

/* One read request. The caller owns it and keeps it alive until it completes. */
typedef struct ms_io_req {
    int file;             /* index into the ms_io_files */
    uint64_t off;         /* wanted byte range [off, off + len) of the file */
    size_t len;
    uint8_t *buf;         /* MS_IO_ALIGN-aligned, at least ms_io_span(off, len) bytes */
    const uint8_t *data;  /* on completion: the wanted bytes (buf + off % MS_IO_ALIGN) */
    int status;           /* 0 pending, 1 done, -1 failed (message in err) */
    char err[256];
    struct ms_io_req *next; /* queue link, private */
    void *user;           /* free for the caller */
    int prefault;         /* 1: buf's span is fresh memory, faulted in by the reader before the read
                             (a page faulted inside an O_DIRECT read costs several times the read) */
    int (*then)(struct ms_io_req *r); /* private: set by ms_io_submit_then */
} ms_io_req;

/* Bytes of aligned buffer a read of [off, off+len) needs: the enclosing aligned range. */
size_t ms_io_span(uint64_t off, size_t len);
/* An MS_IO_ALIGN-aligned buffer of n bytes (rounded up); free with free(). Aborts on OOM.
 * From 8 MiB on it starts on a 2 MiB boundary and asks for huge pages: weights and expert slots
 * are reused pass after pass, and on this project's VM (shadow page tables) a buffer in small
 * pages filled by a read cost ~1.4 s a GiB of traps at its first use, against a faster fault of
 * the huge pages (PERFORMANCE.md, "Memory ladder"). Not faulted in: see ms_io_prefault. */
void *ms_io_alloc(size_t n);
/* Fault in every page of [p, p + n) now (MADV_POPULATE_WRITE where the kernel has it, then one
 * read a page from this thread, so that no later first touch traps). */
void ms_io_prefault(void *p, size_t n);

typedef struct ms_io ms_io;

/* A reader pool with `depth` threads, so up to `depth` reads are in flight. files is
 * borrowed. Returns NULL with ms_err set if a thread cannot be started. */
ms_io *ms_io_new(ms_io_files *files, int depth);
void ms_io_free(ms_io *io); /* waits for reads in flight; accepts NULL */

/* Queue a read (requests start in submission order: submit in file-offset order). */
void ms_io_submit(ms_io *io, ms_io_req *r);
/* The same, and then(r) runs in the reader thread after a successful read, before r
 * completes (work that should overlap the caller's, e.g. decoding); it returns 0, or -1 after
 * writing r->err, and r then fails. */
void ms_io_submit_then(ms_io *io, ms_io_req *r, int (*then)(ms_io_req *r));
/* Block until r completes; returns 0 or -1 (r->err says why: short read, I/O error). The time
 * spent blocked is added to the pool's wait counter. */
int ms_io_wait(ms_io *io, ms_io_req *r);
/* Synchronous read of [off, off+len) into buf (len bytes, any alignment), through the pool's
 * files; returns 0 or -1 with ms_err set naming the file. */
int ms_io_read(ms_io *io, int file, uint64_t off, size_t len, void *buf);

typedef struct {
    uint64_t reads, bytes;   /* completed reads and the wanted bytes they delivered */
    double wait_seconds;     /* time callers spent blocked in ms_io_wait / ms_io_read */
    double busy_seconds;     /* wall time during which at least one read was in flight */
} ms_io_stats;
void ms_io_get_stats(ms_io *io, ms_io_stats *st);

#endif
