/* test_kv: a ring's positions across wraps, copies, and saved caches loaded into other ring sizes. */
#include <math.h>
#include <string.h>

#include "ms_err.h"
#include "ms_kv.h"
#include "ms_test.h"

enum { W = 3 };

static void fill(float *k, float *v, int64_t p0, int64_t T)
{
    for (int64_t s = 0; s < T; s++)
        for (int i = 0; i < W; i++) {
            k[s * W + i] = (float)((p0 + s) * 10 + i);
            v[s * W + i] = -(float)((p0 + s) * 10 + i);
        }
}

static int holds(const ms_kv *kv, int64_t from, int64_t to)
{
    for (int64_t p = from; p < to; p++)
        for (int i = 0; i < W; i++)
            if (ms_kv_key(kv, p)[i] != (float)(p * 10 + i) || ms_kv_value(kv, p)[i] != -(float)(p * 10 + i)) return 0;
    return 1;
}

int main(void)
{
    float k[40 * W], v[40 * W];
    /* a ring of 6 (a window of 4 and 2 rows of a pass) through 25 positions in passes of 1-3 */
    ms_kv ring, full;
    ms_kv_init(&ring, W, 6);
    ms_kv_init(&full, W, 0);
    int64_t p = 0;
    int ok = 1;
    for (int step = 0; p < 25; step++) {
        int64_t T = 1 + step % 3;
        fill(k, v, p, T);
        ms_kv_append(&ring, p, k, v, T);
        ms_kv_append(&full, p, k, v, T);
        p += T;
        ok &= holds(&ring, p - 4 > 0 ? p - 4 : 0, p) && ring.alloc <= 6;
    }
    T_CHECK(ok, "a ring of 6 holds the last 4 positions after every pass, never more than 6 rows");
    T_CHECK(holds(&full, 0, p) && full.alloc >= p, "a full cache holds every position (%lld rows)", (long long)full.alloc);
    /* a copy is deep */
    ms_kv c;
    ms_kv_copy(&c, &ring);
    fill(k, v, 100, 1);
    ms_kv_append(&ring, p, k, v, 1);
    T_CHECK(holds(&c, p - 4, p) && c.ring == 6 && c.width == W, "a copy keeps its rows when the original moves on");
    ms_kv_free(&c);
    /* saved from a ring of 6 at position p, loaded into a ring of 9 and into a full cache:
     * the window's positions, in place */
    ms_sbuf sb = {0};
    ms_kv_save(&full, p, 4, &sb); /* a full cache saves everything */
    size_t full_len = sb.n;
    ms_kv_free(&ring);
    ms_kv_init(&ring, W, 6);
    for (int64_t q = 0; q < p; q++) {
        fill(k, v, q, 1);
        ms_kv_append(&ring, q, k, v, 1);
    }
    ms_sbuf rs = {0};
    ms_kv_save(&ring, p, 4, &rs);
    T_CHECK(rs.n == 16 + 2 * 4 * W * sizeof(float) && full_len == 16 + 2 * (size_t)p * W * sizeof(float),
            "a ring saves its window (%zu bytes), a full cache every position (%zu)", rs.n, full_len);
    ms_kv other;
    ms_kv_init(&other, W, 9);
    ms_reader rd = {rs.s, rs.n, 0};
    T_CHECK(ms_kv_load(&other, p, 4, &rd, 2) == 0 && holds(&other, p - 4, p) && rd.at == rd.n,
            "a ring's save loads into a ring of 9: %s", ms_err_msg());
    ms_kv_free(&other);
    /* a count that does not fit, a cut-short state, a NaN: refused */
    ms_kv_init(&other, W, 9);
    rd = (ms_reader){rs.s, rs.n, 0};
    T_CHECK(ms_kv_load(&other, p + 1, 4, &rd, 2) != 0 && strstr(ms_err_msg(), "does not fit"), "another position: %s",
            ms_err_msg());
    rd = (ms_reader){rs.s, rs.n - 4, 0};
    T_CHECK(ms_kv_load(&other, p, 4, &rd, 2) != 0 && strstr(ms_err_msg(), "cut short"), "cut short: %s", ms_err_msg());
    float nan = NAN;
    memcpy(rs.s + 16 + sizeof(float), &nan, sizeof nan);
    rd = (ms_reader){rs.s, rs.n, 0};
    T_CHECK(ms_kv_load(&other, p, 4, &rd, 2) != 0 && strstr(ms_err_msg(), "non-finite") && strstr(ms_err_msg(), "layer 2"),
            "a NaN is refused naming the layer: %s", ms_err_msg());
    ms_kv_free(&other);
    ms_kv_free(&ring);
    ms_kv_free(&full);
    ms_kv_free(NULL);
    ms_sbuf_free(&sb);
    ms_sbuf_free(&rs);
    return ms_t_done();
}
