/* test_arena: pieces aligned and reset by mark, in memory and in a scratch file: a reset gives
 * back large dead pieces of the file as zero pages (small ones untouched), a layer's discard
 * drops everything past its mark, the advice changes no value. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ms_arena.h"
#include "ms_err.h"
#include "ms_test.h"

static int all_equal(const float *p, size_t n, float v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) return 0;
    return 1;
}

static void fill(float *p, size_t n, float v)
{
    for (size_t i = 0; i < n; i++) p[i] = v;
}

static void check_heap(void)
{
    ms_arena a = {0};
    ms_arena_reserve(&a, 4 << 20);
    float *x = ms_arena_take(&a, 3);
    size_t mark = ms_arena_mark(&a);
    float *big = ms_arena_take(&a, 1 << 20); /* 4 MiB */
    T_CHECK(((uintptr_t)x % 64) == 0 && ((uintptr_t)big % 64) == 0, "pieces are 64-byte aligned");
    fill(big, 1 << 20, 7.0f);
    ms_arena_reset(&a, mark);
    T_CHECK(a.used == mark && all_equal(big, 1 << 20, 7.0f), "a heap arena's reset only moves the mark");
    ms_arena_free(&a);
}

static void check_file(const char *dir)
{
    ms_arena a = {0};
    if (ms_arena_reserve_file(&a, 8 << 20, dir) != 0) {
        T_CHECK(0, "a scratch file in %s: %s", dir, ms_err_msg());
        return;
    }
    T_CHECK(a.mapped, "the arena maps its scratch file");
    const size_t big_n = 1 << 20, small_n = 1 << 16; /* 4 MiB, 256 KiB */
    size_t m0 = ms_arena_mark(&a);
    float *big = ms_arena_take(&a, big_n);
    fill(big, big_n, 7.0f);
    ms_arena_advise_random(&a, big, big_n, 1);
    ms_arena_willneed(&a, big, big_n);
    ms_arena_advise_random(&a, big, big_n, 0);
    T_CHECK(all_equal(big, big_n, 7.0f), "the advice changes no value");
    ms_arena_reset(&a, m0);
    /* whole pages of the dead piece read as zeros again (ZERO_RANGE), where the filesystem can */
    int zeroed = all_equal(big, big_n, 0.0f), kept = all_equal(big, big_n, 7.0f);
    T_CHECK(zeroed || kept, "after a reset the large piece is all zeros (given back) or, where the filesystem "
            "cannot, unchanged: zeroed %d", zeroed);
    if (!zeroed) ms_t_skip("this filesystem does not zero ranges (FALLOC_FL_ZERO_RANGE): the give-back is untested");
    float *again = ms_arena_take(&a, big_n);
    T_CHECK(again == big, "the next piece starts where the reset one did");
    fill(again, big_n, 3.0f);
    T_CHECK(all_equal(again, big_n, 3.0f), "a piece written after a give-back holds what is written");
    ms_arena_reset(&a, m0);
    float *small = ms_arena_take(&a, small_n);
    fill(small, small_n, 5.0f);
    ms_arena_reset(&a, m0);
    T_CHECK(all_equal(small, small_n, 5.0f), "a small piece (under 2 MiB) is left as it was by its reset");
    /* a layer's discard: everything from the mark on */
    float *keep = ms_arena_take(&a, small_n);
    fill(keep, small_n, 9.0f);
    size_t m1 = ms_arena_mark(&a);
    float *tail = ms_arena_take(&a, big_n);
    fill(tail, big_n, 4.0f);
    ms_arena_reset(&a, m1);
    T_CHECK(ms_arena_discard(&a, m1) == 0, "discard from a mark: 0");
    T_CHECK(all_equal(keep, small_n, 9.0f), "discard keeps what lies before its mark");
    ms_arena_free(&a);
}

int main(void)
{
    check_heap();
    char cwd[4096], dir[4200];
    if (!getcwd(cwd, sizeof cwd)) return ms_t_done();
    snprintf(dir, sizeof dir, "%s/arena-scratch", cwd);
    mkdir(dir, 0700);
    if (!ms_arena_dir_on_disk(dir))
        ms_t_skip("scratch files: %s", ms_err_msg());
    else
        check_file(dir);
    rmdir(dir);
    return ms_t_done();
}
