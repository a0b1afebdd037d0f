/* ms_io: reader threads doing aligned preads on O_DIRECT file descriptors, with wait accounting. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ms_clock.h"
#include "ms_err.h"
#include "ms_file.h"
#include "ms_io.h"

/* Every live mapping, for the SIGBUS handler: a page of a file cut short while mapped faults
 * (SIGBUS) where a read would come up short. The handler puts a page of zeros in its place and
 * marks the mapping broken; ms_io_files_map_check then fails the computation that used it with
 * an I/O error naming the file, as a short read would, and nothing computed from the zeros is
 * reported. Slots are claimed under map_reg_mu and read lock-free by the handler. */
#define MAP_REG 256
static struct {
    _Atomic(uintptr_t) base;   /* 0: free */
    _Atomic(size_t) size;
    atomic_int broken;         /* 1 once a page faulted */
    _Atomic(uint64_t) bad_off; /* the first faulting offset */
} map_reg[MAP_REG];
static pthread_mutex_t map_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction map_old_bus;
static int map_handler_on;

static void map_bus(int sig, siginfo_t *si, void *uc)
{
    uintptr_t a = (uintptr_t)si->si_addr;
    for (int i = 0; i < MAP_REG; i++) {
        uintptr_t b = atomic_load(&map_reg[i].base);
        if (!b || a < b || a - b >= atomic_load(&map_reg[i].size)) continue;
        long ps = sysconf(_SC_PAGESIZE); /* async-signal-safe in glibc; so are mmap and the atomics */
        uintptr_t pg = a & ~(uintptr_t)(ps - 1);
        if (mmap((void *)pg, (size_t)ps, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) break;
        uint64_t none = UINT64_MAX;
        atomic_compare_exchange_strong(&map_reg[i].bad_off, &none, (uint64_t)(a - b));
        atomic_store(&map_reg[i].broken, 1);
        return; /* the load runs again and reads zeros */
    }
    /* Not a mapping of ours: what would have happened without this handler. */
    if (map_old_bus.sa_flags & SA_SIGINFO && map_old_bus.sa_sigaction) {
        map_old_bus.sa_sigaction(sig, si, uc);
        return;
    }
    if (map_old_bus.sa_handler != SIG_DFL && map_old_bus.sa_handler != SIG_IGN && map_old_bus.sa_handler) {
        map_old_bus.sa_handler(sig);
        return;
    }
    signal(SIGBUS, SIG_DFL); /* the fault repeats on return and ends the process as it would have */
}

/* A registry slot for [p, p + n) (under map_reg_mu), or -1 when all are taken (the mapping then
 * goes unprotected: a truncation faults as it would without the handler). */
static int map_reg_add(const void *p, size_t n)
{
    pthread_mutex_lock(&map_reg_mu);
    if (!map_handler_on) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = map_bus;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        map_handler_on = sigaction(SIGBUS, &sa, &map_old_bus) == 0;
    }
    int slot = -1;
    for (int i = 0; i < MAP_REG && slot < 0; i++)
        if (!atomic_load(&map_reg[i].base)) slot = i;
    if (slot >= 0) {
        atomic_store(&map_reg[slot].size, n);
        atomic_store(&map_reg[slot].broken, 0);
        atomic_store(&map_reg[slot].bad_off, UINT64_MAX);
        atomic_store(&map_reg[slot].base, (uintptr_t)p);
    }
    pthread_mutex_unlock(&map_reg_mu);
    return slot;
}

static void map_reg_remove(int slot)
{
    if (slot < 0) return;
    pthread_mutex_lock(&map_reg_mu);
    atomic_store(&map_reg[slot].base, 0);
    pthread_mutex_unlock(&map_reg_mu);
}

struct ms_io_files {
    int n;
    int *fd;       /* [n] */
    int *direct;   /* [n] 1 if fd is O_DIRECT */
    char **path;   /* [n] */
    const uint8_t **map; /* [n] whole-file read-only mapping, made on first use (NULL: none yet) */
    uint64_t *map_size;  /* [n] its bytes */
    int *map_slot;       /* [n] its slot in map_reg, or -1 */
    pthread_mutex_t map_mu; /* guards map, map_size */
};

ms_io_files *ms_io_files_open(const char *const *paths, int n, int direct)
{
    ms_io_files *f = ms_calloc(1, sizeof *f);
    f->n = n;
    f->fd = ms_malloc(sizeof(int) * (size_t)(n ? n : 1));
    f->direct = ms_calloc((size_t)(n ? n : 1), sizeof(int));
    f->path = ms_calloc((size_t)(n ? n : 1), sizeof(char *));
    f->map = ms_calloc((size_t)(n ? n : 1), sizeof *f->map);
    f->map_size = ms_calloc((size_t)(n ? n : 1), sizeof *f->map_size);
    f->map_slot = ms_malloc(sizeof(int) * (size_t)(n ? n : 1));
    pthread_mutex_init(&f->map_mu, NULL);
    for (int i = 0; i < n; i++) f->fd[i] = -1, f->map_slot[i] = -1;
    for (int i = 0; i < n; i++) {
        f->path[i] = ms_strdup(paths[i]);
        /* Regular files only: a file replaced by a FIFO is refused, never waited on. */
        if (direct) {
            f->fd[i] = ms_file_open(paths[i], "model file", 0, O_DIRECT, NULL); /* may be unsupported: */
            f->direct[i] = f->fd[i] >= 0;
        }
        if (f->fd[i] < 0) f->fd[i] = ms_file_open(paths[i], "model file", 0, 0, NULL);
        if (f->fd[i] < 0) {
            ms_io_files_close(f);
            return NULL;
        }
    }
    return f;
}

void ms_io_files_close(ms_io_files *f)
{
    if (!f) return;
    for (int i = 0; i < f->n; i++) {
        map_reg_remove(f->map_slot[i]);
        if (f->map[i]) munmap((void *)f->map[i], (size_t)f->map_size[i]);
        if (f->fd[i] >= 0) close(f->fd[i]);
        free(f->path[i]);
    }
    pthread_mutex_destroy(&f->map_mu);
    free(f->map);
    free(f->map_size);
    free(f->map_slot);
    free(f->fd);
    free(f->direct);
    free(f->path);
    free(f);
}

int ms_io_files_direct(const ms_io_files *f, int file) { return f->direct[file]; }
const char *ms_io_files_path(const ms_io_files *f, int file) { return f->path[file]; }

const uint8_t *ms_io_files_map(ms_io_files *f, int file, uint64_t *size)
{
    pthread_mutex_lock(&f->map_mu);
    const uint8_t *p = f->map[file];
    if (!p) {
        struct stat st;
        if (fstat(f->fd[file], &st) != 0) {
            ms_err_set("%s: cannot stat: %s", f->path[file], strerror(errno));
        } else if (st.st_size <= 0) {
            ms_err_set("%s: empty file, nothing to map", f->path[file]);
        } else {
            /* The descriptor may be O_DIRECT: that flag governs read(2), not a mapping's faults. */
            void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, f->fd[file], 0);
            if (m == MAP_FAILED) {
                ms_err_set("%s: cannot map %lld bytes: %s", f->path[file], (long long)st.st_size, strerror(errno));
            } else {
                f->map[file] = p = m;
                f->map_size[file] = (uint64_t)st.st_size;
                f->map_slot[file] = map_reg_add(m, (size_t)st.st_size);
            }
        }
        if (!p) ms_err_set_code(MS_EXIT_IO);
    }
    if (p && size) *size = f->map_size[file];
    pthread_mutex_unlock(&f->map_mu);
    return p;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

/* [p, p + n) widened to whole pages: *base and the returned length. */
static size_t page_span(const void *p, size_t n, uint8_t **base)
{
    static size_t ps;
    if (!ps) {
        long v = sysconf(_SC_PAGESIZE);
        ps = v > 0 ? (size_t)v : 4096;
    }
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)(ps - 1);
    *base = (uint8_t *)a;
    return (size_t)((uintptr_t)p + n - a);
}

uint64_t ms_io_map_absent(const void *p, size_t n)
{
    uint8_t *base;
    size_t len = page_span(p, n, &base), ps = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char vec[512];
    uint64_t absent = 0;
    for (size_t at = 0; at < len; at += sizeof vec * ps) {
        size_t k = len - at < sizeof vec * ps ? len - at : sizeof vec * ps;
        if (mincore(base + at, k, vec) != 0) return 0; /* cannot tell: count nothing */
        for (size_t j = 0; j < (k + ps - 1) / ps; j++) absent += (vec[j] & 1) ? 0 : ps;
    }
    return absent;
}

void ms_io_map_willneed(const void *p, size_t n)
{
    uint8_t *base;
    size_t len = page_span(p, n, &base);
    (void)madvise(base, len, MADV_WILLNEED); /* advice: without it the pages come on first use */
}

void ms_io_map_populate(const void *p, size_t n)
{
    uint8_t *base;
    size_t len = page_span(p, n, &base), ps = (size_t)sysconf(_SC_PAGESIZE);
    if (madvise(base, len, MADV_POPULATE_READ) == 0) return;
    volatile uint8_t sink = 0; /* an older kernel: fault each page in by reading it */
    for (size_t at = 0; at < len; at += ps) sink ^= base[at];
    (void)sink;
}

int ms_io_files_map_all(ms_io_files *f)
{
    for (int i = 0; i < f->n; i++)
        if (!ms_io_files_map(f, i, NULL)) return -1;
    return 0;
}

int ms_io_files_size(ms_io_files *f, int file, uint64_t *size)
{
    struct stat st;
    if (fstat(f->fd[file], &st) != 0) return ms_err_fail(MS_EXIT_IO, "%s: cannot stat: %s", f->path[file], strerror(errno));
    *size = st.st_size > 0 ? (uint64_t)st.st_size : 0;
    return 0;
}

int ms_io_files_map_check(ms_io_files *f)
{
    for (int i = 0; i < f->n; i++) {
        int slot = f->map_slot[i];
        if (slot < 0 || !atomic_load(&map_reg[slot].broken)) continue;
        return ms_err_fail(MS_EXIT_IO, "cannot read %s: the file was cut short while in use (no bytes at offset %llu "
                           "of the %llu it had when mapped)", f->path[i],
                           (unsigned long long)atomic_load(&map_reg[slot].bad_off), (unsigned long long)f->map_size[i]);
    }
    return 0;
}

size_t ms_io_span(uint64_t off, size_t len)
{
    uint64_t a0 = off & ~(uint64_t)(MS_IO_ALIGN - 1);
    uint64_t a1 = (off + len + MS_IO_ALIGN - 1) & ~(uint64_t)(MS_IO_ALIGN - 1);
    return (size_t)(a1 - a0);
}

/* n bytes rounded up to MS_IO_ALIGN; big buffers (8 MiB and more: weights, expert slots) start
 * on a 2 MiB boundary and ask for huge pages. */
void *ms_io_alloc(size_t n)
{
    void *p = NULL;
    size_t r = (n + MS_IO_ALIGN - 1) & ~(size_t)(MS_IO_ALIGN - 1);
    size_t align = r >= (8u << 20) ? (2u << 20) : MS_IO_ALIGN;
    if (posix_memalign(&p, align, r ? r : MS_IO_ALIGN) != 0) {
        fprintf(stderr, "moestream: out of memory allocating %zu aligned bytes\n", r);
        abort();
    }
    if (align > MS_IO_ALIGN) madvise(p, r & ~(size_t)((2u << 20) - 1), MADV_HUGEPAGE);
    return p;
}

void ms_io_prefault(void *p, size_t n)
{
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
    if (!n) return;
    volatile uint8_t *b = p;
    if (madvise(p, n, MADV_POPULATE_WRITE) != 0) {
        for (size_t i = 0; i < n; i += 4096) b[i] = 0;
        b[n - 1] = 0;
        return;
    }
    /* The kernel's populate maps the pages for the kernel only: in a VM with shadow page
     * tables (this project's), the first user access to each 4 KiB page then traps to the host,
     * ~5 us a page (1.4 s a GiB), in whatever thread touches it first: the compute's first pass
     * if not here. One read a page installs the translations now (one a huge page: cheap). */
    uint8_t sink = 0;
    for (size_t i = 0; i < n; i += 4096) sink ^= b[i];
    sink ^= b[n - 1];
    (void)sink;
}

struct ms_io {
    ms_io_files *files;
    int depth;
    pthread_t *threads;
    int n_threads;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    ms_io_req *head, *tail;  /* pending queue, FIFO */
    int stop;
    int in_flight;
    double busy_since;
    ms_io_stats st;
};

/* Read the enclosing aligned range of r's wanted bytes; the file may end inside the last
 * block, which is fine as long as every wanted byte arrived. */
static int do_read(ms_io *io, ms_io_req *r)
{
    int fd = io->files->fd[r->file];
    uint64_t a0 = r->off & ~(uint64_t)(MS_IO_ALIGN - 1);
    size_t span = ms_io_span(r->off, r->len), got = 0, need = (size_t)(r->off - a0) + r->len;
    if (r->prefault) ms_io_prefault(r->buf, span);
    while (got < need) {
        ssize_t n = pread(fd, r->buf + got, span - got, (off_t)(a0 + got));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            snprintf(r->err, sizeof r->err, "%s %s at byte %llu of %s",
                     n < 0 ? "read error" : "short read (file truncated?)", n < 0 ? strerror(errno) : "",
                     (unsigned long long)(a0 + got), io->files->path[r->file]);
            return -1;
        }
        got += (size_t)n;
    }
    r->data = r->buf + (r->off - a0);
    return 1;
}

static void *reader_main(void *arg)
{
    ms_io *io = arg;
    pthread_mutex_lock(&io->mu);
    for (;;) {
        while (!io->stop && !io->head) pthread_cond_wait(&io->work_cv, &io->mu);
        if (!io->head) break; /* stop with nothing left */
        ms_io_req *r = io->head;
        io->head = r->next;
        if (!io->head) io->tail = NULL;
        if (io->in_flight++ == 0) io->busy_since = ms_now();
        pthread_mutex_unlock(&io->mu);
        int st = do_read(io, r);
        if (st == 1 && r->then && r->then(r) != 0) st = -1; /* e.g. a block that does not decode */
        pthread_mutex_lock(&io->mu);
        if (--io->in_flight == 0) io->st.busy_seconds += ms_now() - io->busy_since;
        if (st == 1) {
            io->st.reads++;
            io->st.bytes += r->len;
        }
        /* Published under the lock, last: the waiter may free r as soon as it sees it. */
        r->status = st;
        pthread_cond_broadcast(&io->done_cv);
    }
    pthread_mutex_unlock(&io->mu);
    return NULL;
}

ms_io *ms_io_new(ms_io_files *files, int depth)
{
    ms_io *io = ms_calloc(1, sizeof *io);
    io->files = files;
    io->depth = depth < 1 ? 1 : depth;
    pthread_mutex_init(&io->mu, NULL);
    pthread_cond_init(&io->work_cv, NULL);
    pthread_cond_init(&io->done_cv, NULL);
    io->threads = ms_calloc((size_t)io->depth, sizeof(pthread_t));
    for (int i = 0; i < io->depth; i++) {
        if (pthread_create(&io->threads[i], NULL, reader_main, io) != 0) {
            ms_err_set("cannot start I/O thread %d", i);
            ms_io_free(io);
            return NULL;
        }
        io->n_threads++;
    }
    return io;
}

void ms_io_free(ms_io *io)
{
    if (!io) return;
    pthread_mutex_lock(&io->mu);
    io->stop = 1;
    pthread_cond_broadcast(&io->work_cv);
    pthread_mutex_unlock(&io->mu);
    for (int i = 0; i < io->n_threads; i++) pthread_join(io->threads[i], NULL);
    pthread_mutex_destroy(&io->mu);
    pthread_cond_destroy(&io->work_cv);
    pthread_cond_destroy(&io->done_cv);
    free(io->threads);
    free(io);
}

void ms_io_submit(ms_io *io, ms_io_req *r) { ms_io_submit_then(io, r, NULL); }

void ms_io_submit_then(ms_io *io, ms_io_req *r, int (*then)(ms_io_req *r))
{
    r->then = then;
    MS_ASSERT(((uintptr_t)r->buf & (MS_IO_ALIGN - 1)) == 0);
    MS_ASSERT(r->file >= 0 && r->file < io->files->n);
    r->status = 0;
    r->data = NULL;
    r->err[0] = 0;
    r->next = NULL;
    pthread_mutex_lock(&io->mu);
    if (io->tail)
        io->tail->next = r;
    else
        io->head = r;
    io->tail = r;
    pthread_cond_signal(&io->work_cv);
    pthread_mutex_unlock(&io->mu);
}

int ms_io_wait(ms_io *io, ms_io_req *r)
{
    pthread_mutex_lock(&io->mu);
    if (r->status == 0) {
        double t0 = ms_now();
        while (r->status == 0) pthread_cond_wait(&io->done_cv, &io->mu);
        io->st.wait_seconds += ms_now() - t0;
    }
    int st = r->status;
    pthread_mutex_unlock(&io->mu);
    if (st < 0) {
        ms_err_set("%s", r->err);
        return ms_err_set_code(MS_EXIT_IO);
    }
    return 0;
}

int ms_io_read(ms_io *io, int file, uint64_t off, size_t len, void *buf)
{
    ms_io_req r;
    memset(&r, 0, sizeof r);
    r.file = file;
    r.off = off;
    r.len = len;
    r.buf = ms_io_alloc(ms_io_span(off, len));
    ms_io_submit(io, &r);
    int rc = ms_io_wait(io, &r);
    if (rc == 0) memcpy(buf, r.data, len);
    free(r.buf);
    return rc;
}

void ms_io_get_stats(ms_io *io, ms_io_stats *st)
{
    pthread_mutex_lock(&io->mu);
    *st = io->st;
    pthread_mutex_unlock(&io->mu);
}
