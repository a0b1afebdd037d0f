/* test_proc: the /proc readers against the kernel's own other accounts (getrusage, sysinfo) and fake files. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ms_proc.h"
#include "ms_test.h"

#define MIB (1ull << 20)

/* Write one byte per page through a volatile pointer (the compiler may not drop the stores). */
static void touch(char *p, size_t n, char v)
{
    volatile char *q = p;
    for (size_t i = 0; i < n; i += 4096) q[i] = v;
    q[n - 1] = v;
}

static void test_read_kb(void)
{
    const char *d = ms_t_tmpdir("test_proc");
    char path[4200];
    snprintf(path, sizeof path, "%s/status", d);
    FILE *f = fopen(path, "w");
    T_CHECK(f != NULL, "write a fake status file");
    if (!f) return;
    fputs("Name:\tfake\nVmPeak:\t  999 kB\nVmHWM:\t    1234 kB\nVmRSS:\t  77 kB\nVmHWM:\t 5 kB\n", f);
    fclose(f);
    T_CHECK(ms_proc_read_kb(path, "VmHWM:") == 1234 * 1024, "VmHWM: 1234 kB, the first line naming it");
    T_CHECK(ms_proc_read_kb(path, "VmRSS:") == 77 * 1024, "VmRSS: 77 kB");
    T_CHECK(ms_proc_read_kb(path, "VmSwap:") == 0, "a missing field is 0 (unknown)");
    T_CHECK(ms_proc_read_kb("/nonexistent/status", "VmRSS:") == 0, "a missing file is 0 (unknown)");
}

static void test_self(void)
{
    uint64_t rss0 = ms_proc_rss(), peak0 = ms_proc_peak_rss();
    T_CHECK(rss0 > MIB && peak0 >= rss0, "this process: RSS %llu, peak %llu", (unsigned long long)rss0,
            (unsigned long long)peak0);
    /* 64 MiB touched: the resident size grows by about that much, and so does the peak. */
    size_t n = 64 * MIB;
    char *p = malloc(n);
    T_CHECK(p != NULL, "allocate 64 MiB");
    if (!p) return;
    touch(p, n, 1);
    uint64_t rss1 = ms_proc_rss(), peak1 = ms_proc_peak_rss();
    T_CHECK(rss1 >= rss0 + 60 * MIB, "RSS grew by at least 60 MiB after touching 64 MiB (%llu -> %llu)",
            (unsigned long long)rss0, (unsigned long long)rss1);
    T_CHECK(peak1 >= rss1, "the peak (%llu) is at least the RSS (%llu)", (unsigned long long)peak1,
            (unsigned long long)rss1);
    /* getrusage keeps the same high-water mark in KiB. */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint64_t ru_peak = (uint64_t)ru.ru_maxrss * 1024, peak2 = ms_proc_peak_rss();
    T_CHECK(ru_peak + MIB >= peak1 && ru_peak <= peak2 + MIB, "peak %llu..%llu agrees with getrusage %llu",
            (unsigned long long)peak1, (unsigned long long)peak2, (unsigned long long)ru_peak);
    T_CHECK(p[n - 1] == 1, "touched");
    free(p);
    uint64_t me = ms_proc_pid_peak_rss((int)getpid());
    T_CHECK(me + MIB >= peak2, "own pid's peak %llu = self peak %llu", (unsigned long long)me,
            (unsigned long long)peak2);
}

static void test_child(void)
{
    int fds[2];
    T_CHECK(pipe(fds) == 0, "pipe");
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        size_t n = 48 * MIB;
        char *p = malloc(n);
        if (p) touch(p, n, 2);
        char c = p ? 'y' : 'n';
        if (write(fds[1], &c, 1) != 1) _exit(1);
        pause(); /* until killed */
        _exit(0);
    }
    close(fds[1]);
    char c = 0;
    T_CHECK(pid > 0 && read(fds[0], &c, 1) == 1 && c == 'y', "child touched 48 MiB");
    close(fds[0]);
    uint64_t peak = ms_proc_pid_peak_rss((int)pid);
    T_CHECK(peak >= 44 * MIB, "the child's peak is at least 44 MiB: %llu", (unsigned long long)peak);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    T_CHECK(ms_proc_pid_peak_rss((int)pid) == 0, "a reaped child is 0 (unknown)");
    T_CHECK(ms_proc_pid_peak_rss(0) == 0 && ms_proc_pid_peak_rss(-5) == 0, "pid <= 0 is 0");
}

static void test_mem_available(void)
{
    struct sysinfo si;
    T_CHECK(sysinfo(&si) == 0, "sysinfo");
    uint64_t total = (uint64_t)si.totalram * si.mem_unit, avail = ms_proc_mem_available();
    T_CHECK(avail > 0 && avail <= total, "MemAvailable %llu within (0, MemTotal %llu]", (unsigned long long)avail,
            (unsigned long long)total);
}

int main(void)
{
    test_read_kb();
    test_self();
    test_child();
    test_mem_available();
    return ms_t_done();
}
