/* ms_kbench: what this machine can do, measured: FMA peak of each instruction set and memory read bandwidth. */
#ifndef MS_KBENCH_H
#define MS_KBENCH_H

#include <stddef.h>

#include "ms_pool.h"

/* The loops a kernel's speed is judged against (docs/PERFORMANCE.md, "Kernels"): */
typedef enum {
    MS_KB_F32_AVX2,   /* 8-lane FP32 FMAs (ymm) */
    MS_KB_F32_AVX512, /* 16-lane FP32 FMAs (zmm) */
    MS_KB_F64_AVX2,   /* 4-lane FP64 FMAs (ymm): the bound of double-accumulated kernels */
    MS_KB_N
} ms_kb_isa;

/* 1 if the CPU runs isa's loop. */
int ms_kbench_has(ms_kb_isa isa);
const char *ms_kbench_name(ms_kb_isa isa); /* "fp32-avx2", ... */

/* GFLOP/s of independent FMA chains in registers on every thread of pool (NULL: one thread), for
 * about `seconds`: the machine's compute peak for that instruction set (2 flops per lane per
 * FMA). 0 when the CPU lacks isa. */
double ms_kbench_fma_peak(ms_pool *pool, ms_kb_isa isa, double seconds);

/* GB/s (1e9) of reading a buffer of `bytes` (much larger than the caches) on every thread of
 * pool, each its own slices (first touched by that thread), for about `seconds`: a STREAM-like
 * read, the best of passes of 64 MiB that go round the buffer. Returns -1 with ms_err set when
 * the buffer cannot be allocated. */
double ms_kbench_read_bw(ms_pool *pool, size_t bytes, double seconds);

#endif
