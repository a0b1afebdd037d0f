/* test_rope: plain and YaRN tables against their formulas, the rotation's algebra, refusals. */
#include <math.h>
#include <string.h>

#include "ms_err.h"
#include "ms_rope.h"
#include "ms_test.h"

static void plain(void)
{
    ms_rope r;
    T_CHECK(ms_rope_init_plain(&r, 8, 10000.0) == 0 && r.half == 4 && r.concentration == 1.0f, "plain table: %s", ms_err_msg());
    int ok = 1;
    for (int i = 0; i < 4; i++) ok &= ms_t_close(r.inv_freq[i], (float)pow(10000.0, -2.0 * i / 8), 1e-9, 1e-6);
    T_CHECK(ok && r.inv_freq[0] == 1.0f, "plain: theta^(-2i/d)");
    /* position 0 is the identity; a rotation keeps each pair's length; p then q = p + q */
    float x[2 * 8], y[2 * 8];
    for (int i = 0; i < 16; i++) x[i] = (float)(i - 5) * 0.25f;
    memcpy(y, x, sizeof x);
    ms_rope_apply(&r, y, 2, 8, 0);
    T_CHECK(!memcmp(x, y, sizeof x), "position 0 leaves the heads as they are");
    ms_rope_apply(&r, y, 2, 8, 7);
    ok = 1;
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 4; i++) {
            double a = hypot(x[h * 8 + i], x[h * 8 + i + 4]), b = hypot(y[h * 8 + i], y[h * 8 + i + 4]);
            ok &= fabs(a - b) <= 1e-5 * (a + 1);
        }
    T_CHECK(ok, "a rotation keeps each (i, i + d/2) pair's length");
    /* the first pair at position 7 by hand: angle 7 rad */
    double c = cos(7.0), s = sin(7.0);
    T_CHECK(ms_t_close(y[0], (float)(x[0] * c - x[4] * s), 1e-6, 1e-5) && ms_t_close(y[4], (float)(x[4] * c + x[0] * s), 1e-6, 1e-5),
            "pair 0 at position 7: %g %g, want %g %g", (double)y[0], (double)y[4], x[0] * c - x[4] * s, x[4] * c + x[0] * s);
    /* a stride: heads 12 floats apart, the gap untouched */
    float z[24];
    for (int i = 0; i < 24; i++) z[i] = 1.0f;
    ms_rope_apply(&r, z, 2, 12, 3);
    T_CHECK(z[8] == 1.0f && z[11] == 1.0f && z[20] == 1.0f && z[12] != 1.0f, "stride: only each head's first d floats turn");
    ms_rope_free(&r);
    ms_rope_free(&r);
    ms_rope_free(NULL);
}

static void yarn(void)
{
    /* gpt-oss's numbers: d 64, theta 150000, factor 32, original context 4096, betas 32 and 1 */
    ms_rope r, p;
    T_CHECK(ms_rope_init_yarn(&r, 64, 150000.0, 32.0, 4096.0, 32.0, 1.0) == 0, "yarn: %s", ms_err_msg());
    ms_rope_init_plain(&p, 64, 150000.0);
    T_CHECK(ms_t_close(r.concentration, (float)(0.1 * log(32.0) + 1.0), 1e-7, 1e-6), "yarn: concentration %g",
            (double)r.concentration);
    /* fast dimensions (short wavelengths) extrapolate: as plain; slow ones interpolate: plain / 32 */
    double low = 32 * log(4096.0 / (32 * 2 * M_PI)) / log(150000.0), high = 32 * log(4096.0 / (1 * 2 * M_PI)) / log(150000.0);
    int ok = 1;
    for (int i = 0; i < 32; i++) {
        double ramp = (i - low) / (high - low), m = 1 - (ramp < 0 ? 0 : ramp > 1 ? 1 : ramp);
        double want = p.inv_freq[i] / 32.0 * (1 - m) + p.inv_freq[i] * m;
        ok &= ms_t_close(r.inv_freq[i], (float)want, 1e-12, 1e-5);
    }
    T_CHECK(ok && r.inv_freq[0] == p.inv_freq[0] && ms_t_close(r.inv_freq[31], p.inv_freq[31] / 32.0f, 1e-12, 1e-6),
            "yarn: the blend of interpolated and extrapolated frequencies by the ramp");
    ms_rope_free(&r);
    ms_rope_free(&p);
}

static void deepseek(void)
{
    /* DeepSeek-V3 (rope dims 64, theta 10000, factor 40, betas 32 and 1): pairs 0..10 unscaled,
     * 23..31 divided by 40, a line between; Kimi K2 (theta 50000, factor 32, betas 1 and 1):
     * a step, pairs 0..19 unscaled, 20..31 divided by 32 (its spec §3.4) */
    struct {
        double theta, factor, bf, bs;
        int lo, hi;
        const char *name;
    } m[2] = {{10000, 40, 32, 1, 10, 23, "V3"}, {50000, 32, 1, 1, 19, 20, "K2"}};
    for (int k = 0; k < 2; k++) {
        ms_rope r, p;
        T_CHECK(ms_rope_init_deepseek_yarn(&r, 64, m[k].theta, m[k].factor, 4096, m[k].bf, m[k].bs) == 0 && r.interleaved &&
                    r.concentration == 1.0f,
                "%s: table: %s", m[k].name, ms_err_msg());
        ms_rope_init_plain(&p, 64, m[k].theta);
        int ok = 1;
        for (int i = 0; i < 32; i++) {
            if (i <= m[k].lo) ok &= r.inv_freq[i] == p.inv_freq[i];
            if (i >= m[k].hi) ok &= ms_t_close(r.inv_freq[i], p.inv_freq[i] / (float)m[k].factor, 1e-12, 1e-6);
            if (i > m[k].lo && i < m[k].hi) ok &= r.inv_freq[i] < p.inv_freq[i] && r.inv_freq[i] > p.inv_freq[i] / (float)m[k].factor;
        }
        T_CHECK(ok, "%s: pairs up to %d unscaled, from %d divided by %g", m[k].name, m[k].lo, m[k].hi, m[k].factor);
        ms_rope_free(&r);
        ms_rope_free(&p);
    }
    /* the scores' factor: 192^-0.5 m^2 (V3 0.13523378, K2 0.13086080) */
    double v3 = ms_rope_mscale(40, 1.0), k2 = ms_rope_mscale(32, 1.0);
    T_CHECK(fabs(v3 * v3 / sqrt(192.0) - 0.13523378) < 1e-8 && fabs(k2 * k2 / sqrt(192.0) - 0.13086080) < 1e-8 &&
                ms_rope_mscale(1.0, 1.0) == 1.0,
            "mscale: V3 %.8f, K2 %.8f", v3 * v3 / sqrt(192.0), k2 * k2 / sqrt(192.0));
    /* interleaved pairs: (2i, 2i + 1) turn together, pair 0 at position 5 by 5 rad */
    ms_rope r;
    ms_rope_init_deepseek_yarn(&r, 8, 10000, 1, 4096, 32, 1);
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8];
    memcpy(y, x, sizeof x);
    ms_rope_apply(&r, y, 1, 8, 5);
    double c = cos(5.0), s = sin(5.0);
    T_CHECK(ms_t_close(y[0], (float)(1 * c - 2 * s), 1e-6, 1e-5) && ms_t_close(y[1], (float)(2 * c + 1 * s), 1e-6, 1e-5),
            "interleaved pair 0: %g %g, want %g %g", (double)y[0], (double)y[1], c - 2 * s, 2 * c + s);
    ms_rope_free(&r);
}

static void refusals(void)
{
    ms_rope r;
    T_CHECK(ms_rope_init_plain(&r, 7, 10000.0) != 0 && strstr(ms_err_msg(), "head dimension 7") && !r.inv_freq,
            "odd head dimension refused: %s", ms_err_msg());
    T_CHECK(ms_rope_init_plain(&r, 8, 1.0) != 0 && strstr(ms_err_msg(), "rope_theta"), "theta 1 refused: %s", ms_err_msg());
    T_CHECK(ms_rope_init_yarn(&r, 8, 10000.0, 4.0, 4096.0, 2.0, 2.0) != 0 && strstr(ms_err_msg(), "YaRN"),
            "equal betas refused: %s", ms_err_msg());
    T_CHECK(ms_rope_init_yarn(&r, 8, 10000.0, 0.5, 4096.0, 32.0, 1.0) != 0, "a factor below 1 refused");
    ms_rope_free(&r);
}

int main(void)
{
    plain();
    yarn();
    deepseek();
    refusals();
    return ms_t_done();
}
