/* ms_proc: what Linux reports about memory: this process's resident size and peak, another process's peak, MemAvailable. */
#ifndef MS_PROC_H
#define MS_PROC_H

#include <stdint.h>

/* Every reader here follows one rule: the value comes from /proc, in bytes; when /proc does not
 * say (not mounted, the process is gone, the field is missing), the answer is 0 = unknown and the
 * caller picks its own default. No reader sets ms_err or prints. */

/* Resident memory of this process now (VmRSS of /proc/self/status). */
uint64_t ms_proc_rss(void);
/* Peak resident memory of this process so far (VmHWM of /proc/self/status). */
uint64_t ms_proc_peak_rss(void);
/* Peak resident memory of process pid so far (VmHWM of /proc/PID/status); 0 for pid <= 0. */
uint64_t ms_proc_pid_peak_rss(int pid);
/* Memory the kernel could give to new allocations without swapping (MemAvailable of /proc/meminfo). */
uint64_t ms_proc_mem_available(void);

/* This process's block I/O so far (/proc/self/io, all threads): bytes read from storage
 * (O_DIRECT reads and page-cache misses alike), and bytes written (dirtied pages, less those
 * dropped before write-back: write_bytes - cancelled_write_bytes). 0 where the kernel does not
 * keep them. */
void ms_proc_io(uint64_t *read_bytes, uint64_t *written_bytes);

/* The reader under all four: the "Key:  N kB" line of file path, as bytes (N x 1024); 0 when the
 * file cannot be opened or has no such line. key includes the colon ("VmHWM:"). */
uint64_t ms_proc_read_kb(const char *path, const char *key);

#endif
