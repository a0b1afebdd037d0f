/* test_moe_block: the shared MoE steps: call order, rank-order combine in double, failures, prefetch. */
#include <math.h>
#include <string.h>

#include "ms_err.h"
#include "ms_moe_block.h"
#include "ms_test.h"

enum { T = 3, H = 4, NE = 6, K = 2 };

/* A fake expert store: expert e maps z to (e + 1) z; it logs the calls. */
typedef struct {
    char log[64];
    int fail;
    int32_t begun[T * K], prefetched[T * K];
} fake;

static void log_add(fake *f, char c)
{
    size_t n = strlen(f->log);
    if (n + 1 < sizeof f->log) f->log[n] = c;
}

static int f_compute(void *ctx, int layer, int64_t n, const float *z, int k, const int32_t *ids, float *out)
{
    fake *f = ctx;
    (void)layer;
    log_add(f, 'c');
    if (f->fail) return ms_err_set("worker 10.0.0.7:5555 went away");
    for (int64_t t = 0; t < n; t++)
        for (int j = 0; j < k; j++)
            for (int i = 0; i < H; i++) out[(t * k + j) * H + i] = (float)(ids[t * k + j] + 1) * z[t * H + i];
    return 0;
}

static void f_begin(void *ctx, int layer, int64_t n, int k, const int32_t *ids)
{
    fake *f = ctx;
    (void)layer;
    log_add(f, 'b');
    memcpy(f->begun, ids, sizeof(int32_t) * (size_t)(n * k));
}

static void f_prefetch(void *ctx, int layer, int64_t n, int k, const int32_t *ids)
{
    fake *f = ctx;
    (void)layer;
    log_add(f, 'p');
    memcpy(f->prefetched, ids, sizeof(int32_t) * (size_t)(n * k));
}

typedef struct {
    fake *f;
    float *z;
} ov_ctx;

static void ov_fn(void *vctx)
{
    ov_ctx *o = vctx;
    log_add(o->f, 'o');
    for (int i = 0; i < T * H; i++) o->z[i] = 0.5f * (float)(i + 1);
}

static void combine(void)
{
    /* 1e8 + 1 - 1e8 in float is 0; in double, rounded once, 1 */
    float w[3] = {1.0f, 1.0f, 1.0f}, eo[3] = {1e8f, 1.0f, -1e8f}, y = 5.0f;
    ms_moe_combine(w, eo, 1, 3, 1, &y, 0);
    T_CHECK(y == 1.0f, "combine sums in double in rank order: %g, want 1", (double)y);
    ms_moe_combine(w, eo, 1, 3, 1, &y, 1);
    T_CHECK(y == 2.0f, "combine accumulates into y: %g, want 2", (double)y);
}

static void block(void)
{
    /* gate rows: expert e's logit is x[e % H] * (e + 1) - e */
    float gate_w[NE * H], x[T * H], y[T * H], z[T * H];
    memset(gate_w, 0, sizeof gate_w);
    for (int e = 0; e < NE; e++) gate_w[e * H + e % H] = (float)(e + 1);
    float lbias[NE] = {0, -1, -2, -3, -4, -5};
    for (int i = 0; i < T * H; i++) x[i] = (float)((i * 7) % 5) - 1.5f;
    ms_mat G = {MS_WT_F32, NE, H, gate_w, NULL, NULL, NULL};
    ms_moe_gate g = {{MS_ROUTE_TOPK_THEN_SOFTMAX, NE, K, 0, 0, 0, 1.0f}, &G, lbias, NULL};
    fake f = {0};
    ms_experts ex = {f_compute, &f, f_begin, f_prefetch};
    ms_arena ar = {0};
    ms_arena_reserve(&ar, ms_moe_block_work_floats(&g, T, H) + 64);
    int32_t ids[T * K], want_ids[T * K];
    float wts[T * K];
    ms_moe_gate_route(&g, x, T, want_ids, wts, &ar, NULL);
    /* by hand: the logits, the top 2, their softmax */
    for (int t = 0; t < T; t++) {
        float lg[NE];
        for (int e = 0; e < NE; e++) lg[e] = x[t * H + e % H] * (float)(e + 1) + lbias[e];
        int a = 0;
        for (int e = 1; e < NE; e++)
            if (lg[e] > lg[a]) a = e;
        int b = a == 0 ? 1 : 0;
        for (int e = 0; e < NE; e++)
            if (e != a && lg[e] > lg[b]) b = e;
        T_CHECK(want_ids[t * K] == a && want_ids[t * K + 1] == b, "row %d: the gate picks %d %d, want %d %d", t,
                want_ids[t * K], want_ids[t * K + 1], a, b);
    }
    ms_moe_gate_prefetch(&g, &ex, 4, x, T, &ar, NULL);
    T_CHECK(!memcmp(f.prefetched, want_ids, sizeof want_ids) && !strcmp(f.log, "p"), "prefetch is told the route (%s)", f.log);
    T_CHECK(ar.used == 0, "prefetch returns its arena");
    /* the run: begin, then the overlapped work (which fills z), then compute on z, then combine */
    memset(f.log, 0, sizeof f.log);
    for (int i = 0; i < T * H; i++) y[i] = 100.0f;
    ov_ctx oc = {&f, z};
    ms_moe_overlap ov = {ov_fn, &oc};
    int rc = ms_moe_block_run(&g, &ex, 4, x, z, T, H, y, 1, ids, &ov, &ar, NULL);
    T_CHECK(rc == 0 && !strcmp(f.log, "boc"), "run: 0 and calls begin, overlap, compute (%d, %s)", rc, f.log);
    T_CHECK(!memcmp(ids, want_ids, sizeof ids) && !memcmp(f.begun, want_ids, sizeof ids), "run: ids out and begun = the route");
    int ok = 1;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < H; i++) {
            double acc = 0;
            for (int j = 0; j < K; j++) acc += (double)wts[t * K + j] * (double)((float)(ids[t * K + j] + 1) * z[t * H + i]);
            ok &= y[t * H + i] == 100.0f + (float)acc;
        }
    T_CHECK(ok, "run: y += the rank-order combine of the experts on z");
    T_CHECK(ar.used == 0, "run returns its arena");
    /* x as the experts' input, written over y; no overlap */
    memset(f.log, 0, sizeof f.log);
    rc = ms_moe_block_run(&g, &ex, 4, x, NULL, T, H, y, 0, NULL, NULL, &ar, NULL);
    ok = rc == 0 && !strcmp(f.log, "bc");
    for (int t = 0; t < T; t++)
        for (int i = 0; i < H; i++) {
            double acc = 0;
            for (int j = 0; j < K; j++) acc += (double)wts[t * K + j] * (double)((float)(ids[t * K + j] + 1) * x[t * H + i]);
            ok &= y[t * H + i] == (float)acc;
        }
    T_CHECK(ok, "run on x without overlap: y = the combine (%s)", f.log);
    /* no rows: the overlapped work runs (a matmul trace walks it), nothing is asked of the store */
    memset(f.log, 0, sizeof f.log);
    rc = ms_moe_block_run(&g, &ex, 4, x, z, 0, H, y, 1, NULL, &ov, &ar, NULL);
    T_CHECK(rc == 0 && !strcmp(f.log, "o"), "no rows: only the overlap runs (%s)", f.log);
    /* a failing store: -1, the layer named with the store's message */
    f.fail = 1;
    ms_err_clear();
    rc = ms_moe_block_run(&g, &ex, 9, x, NULL, T, H, y, 1, NULL, NULL, &ar, NULL);
    T_CHECK(rc == -1 && strstr(ms_err_msg(), "layer 9 routed experts") && strstr(ms_err_msg(), "10.0.0.7:5555") &&
                ar.used == 0,
            "a failing store: -1 naming the layer and the peer: %s", ms_err_msg());
    ms_arena_free(&ar);
}

/* Placed outputs (a span's many items): the block gives compute_placed each item's slot in the
 * grouped order (a permutation; each expert's items consecutive, rows increasing), and the
 * combine reads them there: y is the bits of the unplaced run. */
enum { TP = 600 };
typedef struct {
    int placed_calls, grouped;
} pfake;

static int p_compute(void *ctx, int layer, int64_t n, const float *z, int k, const int32_t *ids, float *out)
{
    (void)ctx;
    (void)layer;
    for (int64_t t = 0; t < n; t++)
        for (int j = 0; j < k; j++)
            for (int i = 0; i < H; i++) out[(t * k + j) * H + i] = (float)(ids[t * k + j] + 1) * z[t * H + i];
    return 0;
}

static int p_compute_placed(void *ctx, int layer, int64_t n, const float *z, int k, const int32_t *ids,
                            const int64_t *slot, float *out)
{
    pfake *f = ctx;
    (void)layer;
    f->placed_calls++;
    static int64_t at[TP * K];
    for (int64_t i = 0; i < n * k; i++) at[i] = -1;
    int ok = 1;
    for (int64_t i = 0; i < n * k; i++) {
        ok &= slot[i] >= 0 && slot[i] < n * k && at[slot[i]] < 0;
        if (ok) at[slot[i]] = i;
    }
    /* grouped: along the slots, an expert's items are consecutive and their rows increase */
    int seen[NE] = {0};
    for (int64_t s = 0; ok && s < n * k; s++) {
        int e = ids[at[s]];
        if (s > 0 && ids[at[s - 1]] != e) ok &= !seen[e];
        if (s > 0 && ids[at[s - 1]] == e) ok &= at[s] / k > at[s - 1] / k;
        seen[e] = 1;
    }
    f->grouped = ok;
    for (int64_t t = 0; t < n; t++)
        for (int j = 0; j < k; j++)
            for (int i = 0; i < H; i++) out[slot[t * k + j] * H + i] = (float)(ids[t * k + j] + 1) * z[t * H + i];
    return 0;
}

static void placed(void)
{
    static float gate_w[NE * H], x[TP * H], y1[TP * H], y2[TP * H];
    for (int e = 0; e < NE; e++) gate_w[e * H + e % H] = (float)(e + 1);
    for (int i = 0; i < TP * H; i++) x[i] = (float)((i * 7) % 11) * 0.37f - 1.5f;
    ms_mat G = {MS_WT_F32, NE, H, gate_w, NULL, NULL, NULL};
    ms_moe_gate g = {{MS_ROUTE_TOPK_THEN_SOFTMAX, NE, K, 0, 0, 0, 1.0f}, &G, NULL, NULL};
    pfake f = {0};
    ms_experts plain = {p_compute, &f, NULL, NULL}, with = plain;
    with.compute_placed = p_compute_placed;
    ms_arena ar = {0};
    ms_arena_reserve(&ar, ms_moe_block_work_floats(&g, TP, H) + 64);
    int rc1 = ms_moe_block_run(&g, &plain, 0, x, NULL, TP, H, y1, 0, NULL, NULL, &ar, NULL);
    int rc2 = ms_moe_block_run(&g, &with, 0, x, NULL, TP, H, y2, 0, NULL, NULL, &ar, NULL);
    T_CHECK(rc1 == 0 && rc2 == 0 && f.placed_calls == 1 && f.grouped && !memcmp(y1, y2, sizeof y1) && ar.used == 0,
            "%d rows x %d experts: outputs placed in grouped order (%d call, grouped %d), y the bits of the unplaced run",
            TP, K, f.placed_calls, f.grouped);
    /* a decode step's few rows: not placed */
    f.placed_calls = 0;
    rc2 = ms_moe_block_run(&g, &with, 0, x, NULL, T, H, y2, 0, NULL, NULL, &ar, NULL);
    T_CHECK(rc2 == 0 && f.placed_calls == 0, "%d rows: compute, not placed", T);
    ms_arena_free(&ar);
}

int main(void)
{
    ms_kern_init();
    combine();
    block();
    placed();
    return ms_t_done();
}
