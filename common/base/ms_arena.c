/* ms_arena: a bump allocator over one buffer for the forward pass's scratch. */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "ms_arena.h"
#include "ms_err.h"

void ms_arena_reserve(ms_arena *a, size_t cap)
{
    if (cap <= a->cap) return;
    MS_ASSERT(a->used == 0 && !a->mapped); /* a file-backed arena is sized once */
    free(a->base);
    a->base = NULL;
    if (posix_memalign((void **)&a->base, 64, sizeof(float) * cap) != 0) {
        fprintf(stderr, "moestream: out of memory (scratch of %zu bytes)\n", sizeof(float) * cap);
        abort();
    }
    a->cap = cap;
}

struct ms_arena_flusher {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int fd, stop;
    char limit_path[512], stat_path[512]; /* this process's memory cgroup, or "" */
    const char *dirty_key;                  /* its memory.stat line of dirty file pages */
};

static uint64_t read_u64(const char *path)
{
    FILE *f = fopen(path, "r");
    unsigned long long v = 0;
    if (!f) return 0;
    if (fscanf(f, "%llu", &v) != 1) v = 0; /* v2's "max": no limit */
    fclose(f);
    return v;
}

/* This process's memory cgroup limit and usage files (v1 or v2), when it has a limit. */
static void find_cgroup(struct ms_arena_flusher *f)
{
    FILE *p = fopen("/proc/self/cgroup", "r");
    char line[600];
    while (p && fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b) continue;
        *b = 0;
        if (!strcmp(a + 1, "memory")) {
            snprintf(f->limit_path, sizeof f->limit_path, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", b + 1);
            snprintf(f->stat_path, sizeof f->stat_path, "/sys/fs/cgroup/memory%s/memory.stat", b + 1);
            f->dirty_key = "total_dirty ";
            break;
        }
        if (!strcmp(line, "0") && a[1] == 0) {
            snprintf(f->limit_path, sizeof f->limit_path, "/sys/fs/cgroup%s/memory.max", b + 1);
            snprintf(f->stat_path, sizeof f->stat_path, "/sys/fs/cgroup%s/memory.stat", b + 1);
            f->dirty_key = "file_dirty ";
        }
    }
    if (p) fclose(p);
    uint64_t lim = f->limit_path[0] ? read_u64(f->limit_path) : 0;
    if (lim == 0 || lim >= (1ull << 60)) f->limit_path[0] = f->stat_path[0] = 0; /* no limit: the kernel's writeback */
}

/* Whether the cgroup's dirty file pages exceed an eighth of its limit: its reclaim, which
 * cannot write them, would soon find nothing else to drop. */
static int too_dirty(const struct ms_arena_flusher *f)
{
    uint64_t lim = read_u64(f->limit_path), dirty = 0;
    FILE *p = fopen(f->stat_path, "r");
    char line[256];
    size_t kl = strlen(f->dirty_key);
    while (p && fgets(line, sizeof line, p))
        if (!strncmp(line, f->dirty_key, kl)) {
            dirty = strtoull(line + kl, NULL, 10);
            break;
        }
    if (p) fclose(p);
    return lim > 0 && dirty > lim / 8;
}

/* Every 10 ms, when the process's memory cgroup holds many dirty pages, starts the write-back of the
 * file's dirty pages: without it the cgroup fills with dirty pages of the mapping faster than
 * the kernel's flushers write them, and its reclaim, which may not write them itself, kills the
 * process. Only then: a page written back and dirtied again is written twice. */
static void *flusher_main(void *v)
{
    struct ms_arena_flusher *f = v;
    pthread_mutex_lock(&f->mu);
    while (!f->stop) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        t.tv_nsec += 10 * 1000 * 1000;
        if (t.tv_nsec >= 1000000000) t.tv_sec++, t.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&f->cv, &f->mu, &t);
        if (f->stop) break;
        pthread_mutex_unlock(&f->mu);
        if (too_dirty(f)) sync_file_range(f->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
        pthread_mutex_lock(&f->mu);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

static struct ms_arena_flusher *flusher_start(int fd)
{
    struct ms_arena_flusher *f = ms_calloc(1, sizeof *f);
    f->fd = fd;
    find_cgroup(f);
    if (!f->limit_path[0]) {
        free(f);
        return NULL; /* no memory cgroup limit: the kernel's flushers suffice */
    }
    pthread_mutex_init(&f->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&f->thread, NULL, flusher_main, f) != 0) {
        pthread_cond_destroy(&f->cv);
        pthread_mutex_destroy(&f->mu);
        free(f);
        return NULL; /* the kernel's own flushers only */
    }
    return f;
}

static void flusher_stop(struct ms_arena_flusher *f)
{
    if (!f) return;
    pthread_mutex_lock(&f->mu);
    f->stop = 1;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thread, NULL);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

void ms_arena_free(ms_arena *a)
{
    if (a->mapped) {
        flusher_stop(a->flusher);
        a->flusher = NULL;
        munmap(a->base, sizeof(float) * (a->cap ? a->cap : 1));
        close(a->fd);
        a->mapped = 0;
    } else {
        free(a->base);
    }
    a->base = NULL;
    a->cap = a->used = a->peak = 0;
}

size_t ms_arena_zero_min = (size_t)2 << 20;

void ms_arena_reset(ms_arena *a, size_t mark)
{
    if (a->mapped && a->used > mark && sizeof(float) * (a->used - mark) >= ms_arena_zero_min) {
        const size_t page = 4096;
        size_t at = (sizeof(float) * mark + page - 1) / page * page, end = sizeof(float) * a->used / page * page;
        if (at < end) (void)fallocate(a->fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, (off_t)at, (off_t)(end - at));
    }
    a->used = mark;
}

int ms_arena_discard(ms_arena *a, size_t from)
{
    if (!a->mapped) return 0;
    const size_t page = 4096, end = sizeof(float) * (a->cap ? a->cap : 1);
    size_t at = (sizeof(float) * from + page - 1) / page * page;
    if (at >= end) return 0;
    /* zeroed in place where the filesystem can: the blocks stay, nothing to allocate again */
    if (fallocate(a->fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, (off_t)at, (off_t)(end - at)) == 0) return 0;
    if (fallocate(a->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)at, (off_t)(end - at)) != 0)
        return 0; /* no holes on this filesystem: the pages stay and are written back as needed */
    int e = posix_fallocate(a->fd, (off_t)at, (off_t)(end - at));
    if (e != 0) {
        ms_err_set("the scratch file of a prefill span: cannot allocate %zu bytes again: %s", end - at, strerror(e));
        return ms_err_set_code(MS_EXIT_IO);
    }
    return 0;
}

/* The pages of [p, p + n floats) within a's mapping: 0, or -1 when there are none. */
static int page_range(const ms_arena *a, const float *p, size_t n, char **at, size_t *len)
{
    if (!a->mapped || n == 0) return -1;
    const uintptr_t page = 4096, lo = (uintptr_t)a->base, hi = lo + sizeof(float) * a->cap;
    uintptr_t s = (uintptr_t)p & ~(page - 1), e = ((uintptr_t)(p + n) + page - 1) & ~(page - 1);
    if (s < lo) s = lo;
    if (e > hi) e = hi;
    if (s >= e) return -1;
    *at = (char *)s;
    *len = e - s;
    return 0;
}

void ms_arena_advise_random(ms_arena *a, const float *p, size_t n, int random)
{
    char *at;
    size_t len;
    if (page_range(a, p, n, &at, &len) == 0) (void)madvise(at, len, random ? MADV_RANDOM : MADV_NORMAL);
}

void ms_arena_willneed(ms_arena *a, const float *p, size_t n)
{
    char *at;
    size_t len;
    if (page_range(a, p, n, &at, &len) == 0) (void)madvise(at, len, MADV_WILLNEED);
}

#define TMPFS_MAGIC_ 0x01021994
#define RAMFS_MAGIC_ 0x858458f6

int ms_arena_dir_on_disk(const char *dir)
{
    struct statfs sf;
    if (statfs(dir, &sf) != 0) {
        ms_err_set("scratch directory %s: %s", dir, strerror(errno));
        return 0;
    }
    if (sf.f_type == TMPFS_MAGIC_ || sf.f_type == RAMFS_MAGIC_) {
        ms_err_set("scratch directory %s is in memory (tmpfs or ramfs): a scratch file there would be RAM "
                   "the kernel cannot reclaim", dir);
        return 0;
    }
    return 1;
}

int ms_arena_reserve_file(ms_arena *a, size_t cap, const char *dir)
{
    ms_arena_free(a);
    if (!ms_arena_dir_on_disk(dir)) return ms_err_set_code(MS_EXIT_IO);
    size_t bytes = sizeof(float) * (cap ? cap : 1);
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
        /* no unnamed files on this filesystem: a named one, unlinked at once */
        char path[4096];
        snprintf(path, sizeof path, "%s/moestream-scratch-XXXXXX", dir);
        fd = mkstemp(path);
        if (fd >= 0) unlink(path);
    }
    if (fd < 0) {
        ms_err_set("cannot create a scratch file in %s: %s", dir, strerror(errno));
        return ms_err_set_code(MS_EXIT_IO);
    }
    int e = posix_fallocate(fd, 0, (off_t)bytes);
    if (e != 0) {
        close(fd);
        ms_err_set("cannot write a scratch file of %zu bytes in %s: %s", bytes, dir, strerror(e));
        return ms_err_set_code(MS_EXIT_IO);
    }
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        ms_err_set("cannot map a scratch file of %zu bytes in %s: %s", bytes, dir, strerror(errno));
        return ms_err_set_code(MS_EXIT_IO);
    }
    a->base = p;
    a->cap = cap;
    a->fd = fd;
    a->mapped = 1;
    a->flusher = flusher_start(fd);
    return 0;
}

float *ms_arena_take(ms_arena *a, size_t n)
{
    size_t at = (a->used + MS_ARENA_ALIGN_FLOATS - 1) / MS_ARENA_ALIGN_FLOATS * MS_ARENA_ALIGN_FLOATS;
    if (at + n > a->cap) {
        fprintf(stderr, "moestream: internal error: scratch arena of %zu floats is short of %zu more\n", a->cap,
                at + n - a->cap);
        MS_ASSERT(at + n <= a->cap);
    }
    a->used = at + n;
    if (a->used > a->peak) a->peak = a->used;
    return a->base + at;
}
