/* ms_cpu: what this CPU can do and which kernel path runs (AVX2+FMA or scalar), chosen at run time. */
#ifndef MS_CPU_H
#define MS_CPU_H

/* Detect CPU features once (idempotent, thread-safe after the first call returns); MS_NO_SIMD
 * set to anything but 0 starts on the scalar path. */
void ms_cpu_init(void);
/* 1 if the CPU supports AVX2 and FMA. */
int ms_cpu_simd_available(void);
/* Select the SIMD path (on = 1, default when available) or the scalar path (on = 0) for all
 * later kernel calls in the process. Results are identical either way. */
void ms_cpu_set_simd(int on);
int ms_cpu_simd_enabled(void);

#endif
