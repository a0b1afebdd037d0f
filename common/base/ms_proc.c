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

void ms_proc_io(uint64_t *read_bytes, uint64_t *written_bytes)
{
    uint64_t r = 0, w = 0, c = 0;
    FILE *f = fopen("/proc/self/io", "r");
    if (f) {
        char line[128];
        while (fgets(line, sizeof line, f)) {
            unsigned long long v = 0;
            if (sscanf(line, "read_bytes: %llu", &v) == 1) r = v;
            else if (sscanf(line, "write_bytes: %llu", &v) == 1) w = v;
            else if (sscanf(line, "cancelled_write_bytes: %llu", &v) == 1) c = v;
        }
        fclose(f);
    }
    *read_bytes = r;
    *written_bytes = w > c ? w - c : 0;
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
