/* ms_cpu: what this CPU can do and which kernel path runs (AVX-512, AVX2+FMA or scalar), chosen at run time. */
#ifndef MS_CPU_H
#define MS_CPU_H

/* Kernel paths, narrowest first. Every path gives the same bits (ms_kern.h's contract). */
enum { MS_SIMD_SCALAR = 0, MS_SIMD_AVX2 = 1, MS_SIMD_AVX512 = 2 };

/* Detect CPU features once (idempotent, thread-safe after the first call returns). The
 * environment may narrow the path: MS_NO_SIMD set to anything but 0 starts on the scalar path;
 * MS_SIMD=scalar|avx2|avx512 caps it (MS_SIMD=avx2 runs the AVX2 path on an AVX-512 machine).
 * The AVX-512 path needs AVX512F and AVX512BW (every AVX-512 server CPU since Skylake-SP). */
void ms_cpu_init(void);
/* 1 if the CPU supports AVX2 and FMA. */
int ms_cpu_simd_available(void);
/* The widest path this CPU runs (MS_SIMD_*), before any cap. */
int ms_cpu_best_level(void);
/* Select the widest path allowed (on = 1: the CPU's best under MS_SIMD's cap) or the scalar path
 * (on = 0) for all later kernel calls in the process. Results are identical either way. */
void ms_cpu_set_simd(int on);
/* Select a path (MS_SIMD_*), narrowed to what the CPU runs; returns the path selected. */
int ms_cpu_set_level(int level);
int ms_cpu_simd_enabled(void); /* 1 unless on the scalar path */
int ms_cpu_level(void);        /* the path kernels run now (MS_SIMD_*) */
const char *ms_cpu_level_name(int level); /* "scalar", "avx2", "avx512" */
/* 1 on an AMD CPU: where tile and panel kernels cross over differs by vendor (ms_gemm.c), never
 * what they compute. */
int ms_cpu_is_amd(void);
/* 1 if the CPU also has AVX512_VBMI and AVX512_VBMI2 (Ice Lake and later, Zen 4 and later; not
 * Skylake-SP): the trunk-pack decoder's AVX-512 path needs their byte permutes and expands. It
 * runs when the path is MS_SIMD_AVX512; a decode gives the same bytes on every path. */
int ms_cpu_has_vbmi2(void);

#endif
