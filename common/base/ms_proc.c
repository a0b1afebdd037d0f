/* ms_proc: /proc/self/status, /proc/PID/status and /proc/meminfo fields in bytes (0 = unknown). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_proc.h"

uint64_t ms_proc_read_kb(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t kl = strlen(key);
    char line[256];
    uint64_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl)) {
            kb = strtoull(line + kl, NULL, 10);
            break;
        }
    fclose(f);
    return kb * 1024;
}

uint64_t ms_proc_rss(void) { return ms_proc_read_kb("/proc/self/status", "VmRSS:"); }

uint64_t ms_proc_peak_rss(void) { return ms_proc_read_kb("/proc/self/status", "VmHWM:"); }

uint64_t ms_proc_pid_peak_rss(int pid)
{
    if (pid <= 0) return 0;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    return ms_proc_read_kb(path, "VmHWM:");
}

uint64_t ms_proc_mem_available(void) { return ms_proc_read_kb("/proc/meminfo", "MemAvailable:"); }
