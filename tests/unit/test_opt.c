/* test_opt: strict option values and the "who: message" failure of both programs. */
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ms_err.h"
#include "ms_opt.h"
#include "ms_test.h"

static void test_int(void)
{
    static const struct {
        const char *s;
        long long v;
    } ok[] = {{"0", 0}, {"7", 7}, {"-3", -3}, {"64", 64}, {"+5", 5}, {"007", 7}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        long long v = 99;
        T_CHECK(ms_opt_int("--n", ok[i].s, -10, 64, &v) == 0 && v == ok[i].v, "'%s' = %lld (got %lld)", ok[i].s,
                ok[i].v, v);
    }
    const char *bad[] = {"", "65", "-11", "1x", "x", " 1", "1 ", "1.0", "0x10", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        long long v = 99;
        ms_err_clear();
        int rc = ms_opt_int("--threads", bad[i], -10, 64, &v);
        T_CHECK(rc == -1 && v == 99 && ms_err_code() == MS_EXIT_USAGE && strstr(ms_err_msg(), "--threads") &&
                    strstr(ms_err_msg(), "-10..64"),
                "'%s' refused naming the option and the range: %s", bad[i], ms_err_msg());
        char q[64];
        snprintf(q, sizeof q, "'%s'", bad[i]);
        T_CHECK(strstr(ms_err_msg(), q) != NULL, "the message quotes '%s'", bad[i]);
    }
    long long v = 0;
    T_CHECK(ms_opt_int("--seed", "-9223372036854775808", LLONG_MIN, LLONG_MAX, &v) == 0 && v == LLONG_MIN,
            "the whole long long range");
}

static void test_f32(void)
{
    float v = 0;
    T_CHECK(ms_opt_f32("--t", "0.5", &v) == 0 && v == 0.5f, "0.5");
    T_CHECK(ms_opt_f32("--t", "-2", &v) == 0 && v == -2.0f, "-2 (ranges are the caller's)");
    T_CHECK(ms_opt_f32("--t", "1e3", &v) == 0 && v == 1000.0f, "1e3");
    const char *bad[] = {"", "nan", "inf", "-inf", "1e39", "1,5", "0.5x", "x", " 1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = 7;
        T_CHECK(ms_opt_f32("--top-p", bad[i], &v) == -1 && v == 7 && ms_err_code() == MS_EXIT_USAGE &&
                    strstr(ms_err_msg(), "--top-p"),
                "'%s' refused: %s", bad[i], ms_err_msg());
    }
}

static void test_size(void)
{
    uint64_t v = 0;
    T_CHECK(ms_opt_size("--ram-budget", "8G", &v) == 0 && v == 8ull << 30, "8G = 8 x 2^30");
    T_CHECK(ms_opt_size("--ram-budget", "64GB", &v) == 0 && v == 64000000000ull, "64GB = 64 x 10^9");
    const char *bad[] = {"0", "0K", "12Q", "", "-1G"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = 5;
        T_CHECK(ms_opt_size("--ram-budget", bad[i], &v) == -1 && v == 5 && ms_err_code() == MS_EXIT_USAGE &&
                    strstr(ms_err_msg(), "--ram-budget"),
                "size '%s' refused (zero is no budget): %s", bad[i], ms_err_msg());
    }
}

static int fail_one(void) { return ms_opt_fail("moestream-worker", 2, "--listen %s is required", "ENDPOINT"); }
static int fail_err(void)
{
    ms_err_set("disk on fire");
    ms_err_set_code(MS_EXIT_IO);
    return ms_opt_fail_err("moestream run");
}

static void test_fail(void)
{
    char out[512];
    int rc = ms_t_capture_stderr(out, sizeof out, fail_one);
    T_CHECK(rc == 2 && !strcmp(out, "moestream-worker: --listen ENDPOINT is required\n"), "fail: rc %d, '%s'", rc, out);
    rc = ms_t_capture_stderr(out, sizeof out, fail_err);
    T_CHECK(rc == MS_EXIT_IO && !strcmp(out, "moestream run: disk on fire\n"), "fail_err: the class (%d) and '%s'", rc,
            out);
}

int main(void)
{
    test_int();
    test_f32();
    test_size();
    test_fail();
    return ms_t_done();
}
