/* test_gqa: the GQA layer against a naive double reference; one call = chunks = rows one at a time, bit for bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_gqa.h"
#include "ms_pool.h"
#include "ms_test.h"

enum { H = 12, NH = 4, NKV = 2, D = 20, QD = NH * D, KVD = NKV * D, ROWS = 300 };

static uint32_t seed = 12345;
static float rnd(void)
{
    seed = seed * 1664525u + 1013904223u;
    return (float)((int32_t)(seed >> 8) % 2000) / 1000.0f;
}

typedef struct {
    float wq[QD * H], wk[KVD * H], wv[KVD * H], wo[H * QD];
    float bq[QD], bk[KVD], bv[KVD], bo[H], qn[D], kn[D], sinks[NH];
} weights;

static ms_gqa_w bind(const weights *w, int biases, int norms, int sinks)
{
    ms_gqa_w g = {{MS_WT_F32, QD, H, w->wq, NULL, NULL, NULL}, {MS_WT_F32, KVD, H, w->wk, NULL, NULL, NULL},
                  {MS_WT_F32, KVD, H, w->wv, NULL, NULL, NULL}, {MS_WT_F32, H, QD, w->wo, NULL, NULL, NULL},
                  biases ? w->bq : NULL, biases ? w->bk : NULL, biases ? w->bv : NULL, biases ? w->bo : NULL,
                  norms ? w->qn : NULL, norms ? w->kn : NULL, sinks ? w->sinks : NULL};
    return g;
}

/* rows [0, n) of x through the layer in calls of `step` rows on a fresh cache */
static void run(const ms_gqa *a, const ms_gqa_w *w, const ms_rope *rope, const float *x, int n, int step, float *out,
                ms_pool *pool)
{
    ms_kv kv;
    ms_kv_init(&kv, KVD, a->window ? a->window : 0);
    ms_kv *kvs[1] = {&kv};
    ms_arena ar = {0};
    ms_arena_reserve(&ar, ms_gqa_work_floats(a, step) + 64);
    for (int p = 0; p < n; p += step) {
        int T = n - p < step ? n - p : step;
        int64_t p0[1] = {p};
        ms_rows seg = {0, T};
        ms_gqa_forward(a, w, rope, kvs, p0, &seg, 1, x + (size_t)p * H, T, out + (size_t)p * H, &ar, pool);
    }
    ms_arena_free(&ar);
    ms_kv_free(&kv);
}

static void norm_d(double *x, const float *g, int n, float eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) x[i] = x[i] * r * g[i];
}

static void rot_d(double *x, const ms_rope *r, int64_t p)
{
    for (int i = 0; i < D / 2; i++) {
        double ang = (double)((float)p * r->inv_freq[i]), c = cos(ang) * r->concentration, s = sin(ang) * r->concentration;
        double a = x[i], b = x[i + D / 2];
        x[i] = a * c - b * s;
        x[i + D / 2] = b * c + a * s;
    }
}

/* The layer by its definition, in double, for row t of n: out[H]. */
static void naive(const ms_gqa *a, const weights *w, int biases, int norms, int sinks, const ms_rope *rope, const float *x,
                  int t, double *out)
{
    static double q[QD], k[ROWS][KVD], v[ROWS][KVD], o[QD];
    for (int s = 0; s <= t; s++)
        for (int j = 0; j < KVD; j++) {
            double ak = biases ? w->bk[j] : 0, av = biases ? w->bv[j] : 0;
            for (int c = 0; c < H; c++) {
                ak += (double)w->wk[j * H + c] * x[s * H + c];
                av += (double)w->wv[j * H + c] * x[s * H + c];
            }
            k[s][j] = ak, v[s][j] = av;
        }
    for (int s = 0; s <= t; s++)
        for (int g = 0; g < NKV; g++) {
            if (norms) norm_d(k[s] + g * D, w->kn, D, a->eps);
            if (rope) rot_d(k[s] + g * D, rope, s);
        }
    for (int j = 0; j < QD; j++) {
        double aq = biases ? w->bq[j] : 0;
        for (int c = 0; c < H; c++) aq += (double)w->wq[j * H + c] * x[t * H + c];
        q[j] = aq;
    }
    for (int h = 0; h < NH; h++) {
        if (norms) norm_d(q + h * D, w->qn, D, a->eps);
        if (rope) rot_d(q + h * D, rope, t);
        int g = h / (NH / NKV), lo = a->window && t - a->window + 1 > 0 ? t - a->window + 1 : 0;
        double sc[ROWS], mx = sinks ? w->sinks[h] : -INFINITY, den = 0;
        for (int s = lo; s <= t; s++) {
            double d = 0;
            for (int i = 0; i < D; i++) d += q[h * D + i] * k[s][g * D + i];
            sc[s] = d / sqrt((double)D);
            if (sc[s] > mx) mx = sc[s];
        }
        if (sinks) den = exp(w->sinks[h] - mx);
        for (int s = lo; s <= t; s++) den += (sc[s] = exp(sc[s] - mx));
        for (int i = 0; i < D; i++) {
            double acc = 0;
            for (int s = lo; s <= t; s++) acc += sc[s] * v[s][g * D + i];
            o[h * D + i] = acc / den;
        }
    }
    for (int j = 0; j < H; j++) {
        double acc = biases ? w->bo[j] : 0;
        for (int c = 0; c < QD; c++) acc += (double)w->wo[j * QD + c] * o[c];
        out[j] = acc;
    }
}

int main(void)
{
    ms_kern_init();
    static weights w;
    float *ws = (float *)&w;
    for (size_t i = 0; i < sizeof w / sizeof(float); i++) ws[i] = rnd() * 0.3f;
    for (int i = 0; i < D; i++) w.qn[i] = 1.0f + 0.5f * rnd(), w.kn[i] = 1.0f + 0.5f * rnd();
    static float x[ROWS * H], one[ROWS * H], chunks[ROWS * H], threads[ROWS * H];
    for (int i = 0; i < ROWS * H; i++) x[i] = rnd();
    ms_rope rope;
    ms_rope_init_plain(&rope, D, 10000.0);
    ms_pool *pool = ms_pool_new(3);
    /* gpt-oss's shape (biases, sinks, a window of 7) and Qwen3's (per-head norms, no bias, full) */
    struct {
        int window, biases, norms, sinks;
        const char *name;
    } cases[3] = {{7, 1, 0, 1, "biases, sinks, window 7"}, {0, 0, 1, 0, "q/k norms, full"}, {0, 1, 1, 1, "all"}};
    for (int c = 0; c < 3; c++) {
        ms_gqa a = {NH, NKV, D, cases[c].window, 1e-6f};
        ms_gqa_w g = bind(&w, cases[c].biases, cases[c].norms, cases[c].sinks);
        run(&a, &g, &rope, x, ROWS, ROWS, one, NULL);   /* one call: tiles of 128 query rows */
        run(&a, &g, &rope, x, ROWS, 37, chunks, NULL);  /* chunks of 37 */
        run(&a, &g, &rope, x, ROWS, ROWS, threads, pool); /* one call on 3 threads */
        T_CHECK(!memcmp(one, chunks, sizeof one), "%s: 300 rows in one call = chunks of 37, bit for bit", cases[c].name);
        T_CHECK(!memcmp(one, threads, sizeof one), "%s: 3 threads = 1, bit for bit", cases[c].name);
        float step[ROWS * H];
        run(&a, &g, &rope, x, 140, 1, step, NULL);
        T_CHECK(!memcmp(one, step, sizeof(float) * 140 * H), "%s: rows one at a time = one call", cases[c].name);
        int bad = 0;
        double worst = 0;
        for (int t = 0; t < ROWS; t += 23) {
            double ref[H];
            naive(&a, &w, cases[c].biases, cases[c].norms, cases[c].sinks, &rope, x, t, ref);
            for (int j = 0; j < H; j++) {
                double e = fabs(one[t * H + j] - ref[j]) / (1e-3 + fabs(ref[j]));
                worst = e > worst ? e : worst;
                bad += e > 1e-4;
            }
        }
        T_CHECK(!bad, "%s: every 23rd row within 1e-4 of the naive double layer (worst %g)", cases[c].name, worst);
    }
    ms_pool_free(pool);
    ms_rope_free(&rope);
    return ms_t_done();
}
