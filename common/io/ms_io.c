/* ms_io: reader threads doing aligned preads on O_DIRECT file descriptors, with wait accounting. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ms_clock.h"
#include "ms_err.h"
#include "ms_file.h"
#include "ms_io.h"

struct ms_io_files {
    int n;
    int *fd;       /* [n] */
    int *direct;   /* [n] 1 if fd is O_DIRECT */
    char **path;   /* [n] */
};

ms_io_files *ms_io_files_open(const char *const *paths, int n, int direct)
{
    ms_io_files *f = ms_calloc(1, sizeof *f);
    f->n = n;
    f->fd = ms_malloc(sizeof(int) * (size_t)(n ? n : 1));
    f->direct = ms_calloc((size_t)(n ? n : 1), sizeof(int));
    f->path = ms_calloc((size_t)(n ? n : 1), sizeof(char *));
    for (int i = 0; i < n; i++) f->fd[i] = -1;
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
        if (f->fd[i] >= 0) close(f->fd[i]);
        free(f->path[i]);
    }
    free(f->fd);
    free(f->direct);
    free(f->path);
    free(f);
}

int ms_io_files_direct(const ms_io_files *f, int file) { return f->direct[file]; }
const char *ms_io_files_path(const ms_io_files *f, int file) { return f->path[file]; }

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
