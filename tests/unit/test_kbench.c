/* test_kbench: the machine probes answer sensibly (speeds are benchmarks, not checked here: tests/bench/kernels.sh). */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "ms_err.h"
#include "ms_kbench.h"
#include "ms_pool.h"
#include "ms_test.h"

int main(void)
{
    ms_log_set_level(0);
    ms_pool *pool = ms_pool_new(2);
    T_CHECK(pool != NULL, "a pool of 2");
    int any = 0;
    for (int i = 0; i < MS_KB_N; i++) {
        double g = ms_kbench_fma_peak(pool, (ms_kb_isa)i, 0.02);
        if (ms_kbench_has((ms_kb_isa)i)) {
            T_CHECK(isfinite(g) && g > 0, "%s: a positive peak (%.1f GFLOP/s)", ms_kbench_name((ms_kb_isa)i), g);
            any = 1;
        } else
            T_CHECK(g == 0, "%s: not on this CPU, 0", ms_kbench_name((ms_kb_isa)i));
    }
    if (!any) ms_t_skip("no SIMD on this CPU: no peak measured");
    T_CHECK(!strcmp(ms_kbench_name(MS_KB_F32_AVX512), "fp32-avx512"), "names");
    double bw = ms_kbench_read_bw(pool, 32u << 20, 0.02);
    T_CHECK(isfinite(bw) && bw > 0, "read bandwidth over 32 MiB: %.1f GB/s", bw);
    double none = ms_kbench_read_bw(NULL, (size_t)1 << 62, 0.01);
    T_CHECK(none == -1 && strstr(ms_err_msg(), "cannot allocate"), "an impossible buffer is an error: %s", ms_err_msg());
    double tiny = ms_kbench_read_bw(pool, 16u << 10, 0.01); /* 8 KiB a thread: under the 16 KiB a slice needs */
    T_CHECK(tiny == -1 && strstr(ms_err_msg(), "too small"), "a buffer too small for the threads is an error: %s",
            ms_err_msg());
    ms_pool_free(pool);
    /* the command's usage errors (its runs are benchmarks) */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s bench --rows 0 2>/dev/null", ms_t_bin("moestream"));
    T_CHECK(ms_t_run(cmd, NULL) == 2, "bench --rows 0: exit 2");
    snprintf(cmd, sizeof cmd, "%s bench --seconds 0 2>/dev/null", ms_t_bin("moestream"));
    T_CHECK(ms_t_run(cmd, NULL) == 2, "bench --seconds 0: exit 2");
    snprintf(cmd, sizeof cmd, "%s bench --path avx3 2>/dev/null", ms_t_bin("moestream"));
    T_CHECK(ms_t_run(cmd, NULL) == 2, "bench --path avx3: exit 2");
    snprintf(cmd, sizeof cmd, "%s bench --help | grep -q 'FMA peak'", ms_t_bin("moestream"));
    T_CHECK(ms_t_run(cmd, NULL) == 0, "bench --help says what it measures");
    return ms_t_done();
}
