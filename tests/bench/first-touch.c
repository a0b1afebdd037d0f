/* first-touch: what a weight buffer costs from allocation to its first use, by how it is faulted
 * in: 1 GiB read from FILE into fresh anonymous memory, then swept twice (one read a cache line).
 * Modes: 0 small pages, filled by the read alone (the pinned trunk until 2026-12-04); 1 small
 * pages, written once a page from user space first; 2 small pages, MADV_POPULATE_WRITE first;
 * 3 huge pages (MADV_HUGEPAGE), MADV_POPULATE_WRITE first; 4 as 2, then one read a page from user
 * space (ms_io_prefault on small pages); 5 as 3, then one read a page (ms_io_prefault now).
 * Usage: first-touch FILE MODE [direct]; prints one line of seconds. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t sweep(const volatile uint8_t *p, size_t n, size_t step)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i += step) s += p[i];
    return s;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: first-touch FILE MODE [direct]\n");
        return 2;
    }
    size_t n = (size_t)1 << 30;
    int mode = atoi(argv[2]), direct = argc > 3;
    uint8_t *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    madvise(p, n, mode == 3 || mode == 5 ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    double t0 = now();
    if (mode == 1)
        for (size_t i = 0; i < n; i += 4096) ((volatile uint8_t *)p)[i] = 0;
    if (mode >= 2) madvise(p, n, MADV_POPULATE_WRITE);
    uint64_t s = mode >= 4 ? sweep(p, n, 4096) : 0;
    double t1 = now();
    int fd = open(argv[1], O_RDONLY | (direct ? O_DIRECT : 0));
    if (fd < 0) return 1;
    for (size_t got = 0; got < n;) {
        ssize_t r = pread(fd, p + got, n - got > (16u << 20) ? (16u << 20) : n - got, (off_t)got);
        if (r <= 0) return 1;
        got += (size_t)r;
    }
    double t2 = now();
    s += sweep(p, n, 64);
    double t3 = now();
    s += sweep(p, n, 64);
    double t4 = now();
    printf("mode %d%s: fault-in %.2f s, read %.2f s, first sweep %.2f s, second sweep %.2f s, total %.2f s (%llu)\n",
           mode, direct ? " O_DIRECT" : " buffered", t1 - t0, t2 - t1, t3 - t2, t4 - t3, t3 - t0, (unsigned long long)(s & 1));
    close(fd);
    return 0;
}
