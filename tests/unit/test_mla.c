/* test_mla: the MLA fixture (6 causal tokens from an empty cache) and its token-split invariants. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_k3_cfg.h"
#include "ms_layer.h"
#include "ms_cpu.h"
#include "ms_err.h"
#include "ms_fix.h"
#include "ms_kern.h"
#include "ms_mla.h"
#include "ms_pool.h"
#include "ms_test.h"


/* K3's shape of the block (ms_k3_mla_cfg), in a static: the calls take its address. */
static const ms_mla_cfg *MC(const ms_k3_cfg *c)
{
    static ms_mla_cfg m;
    m = ms_k3_mla_cfg(c);
    return &m;
}
static ms_fix_tol tol;
static ms_k3_cfg cfg;

/* A small random-ish MLA built in memory (no fixtures): E 16, H 2, Rq 8, Rkv 8, dn 4, dr 2, dv 4. */
static float lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return ((float)(*s >> 8) / 16777216.0f - 0.5f);
}

static void self_checks(void)
{
    ms_k3_cfg c;
    memset(&c, 0, sizeof c);
    c.hidden = 16;
    c.mla_heads = 2;
    c.q_lora = 8;
    c.kv_lora = 8;
    c.qk_nope = 4;
    c.qk_rope = 2;
    c.v_head = 4;
    c.mla_out_gate = 1;
    c.eps = 1e-5f;
    int E = 16, H = 2, Rq = 8, Rkv = 8, dn = 4, dr = 2, dv = 4, dq = dn + dr;
    size_t nw = (size_t)(Rq * E + H * dq * Rq + (Rkv + dr) * E + H * (dn + dv) * Rkv + E * H * dv + H * dv * E +
                         Rq + Rkv);
    float *buf = malloc(sizeof(float) * nw);
    uint32_t seed = 7;
    for (size_t i = 0; i < nw; i++) buf[i] = lcg(&seed);
    float *p = buf;
    ms_mla_w w;
    memset(&w, 0, sizeof w);
#define TAKE(m, r, cc)                                                                                              \
    do {                                                                                                           \
        m.type = MS_WT_F32;                                                                                        \
        m.rows = r;                                                                                                \
        m.cols = cc;                                                                                               \
        m.data = p;                                                                                                \
        p += (r) * (cc);                                                                                           \
    } while (0)
    TAKE(w.qa, Rq, E);
    TAKE(w.qb, H * dq, Rq);
    TAKE(w.kva, Rkv + dr, E);
    TAKE(w.kvb, H * (dn + dv), Rkv);
    TAKE(w.o, E, H * dv);
    TAKE(w.g, H * dv, E);
#undef TAKE
    w.qa_norm = p;
    p += Rq;
    w.kva_norm = p;
    float x[5 * 16], y1[5 * 16], y2[5 * 16];
    for (int i = 0; i < 5 * 16; i++) x[i] = lcg(&seed) * 4.0f;
    ms_mla_cache a, b;
    ms_mla_cache_init(&a);
    ms_mla_cache_init(&b);
    ms_mla_forward(MC(&c), &w, &a, x, 5, y1, NULL);
    T_CHECK(a.n == 5, "cache holds %lld positions after 5 tokens", (long long)a.n);
    /* Causality: the first token's output does not depend on later tokens. */
    ms_mla_forward(MC(&c), &w, &b, x, 1, y2, NULL);
    T_CHECK(ms_fix_maxdiff(y1, y2, 16) <= 1e-5, "token 0 output changes when later tokens are present");
    /* The cached rope key is the raw tail of kv_a (never normalised or rotated). */
    float c0[10];
    ms_matvec(&w.kva, x, c0, NULL);
    T_CHECK(ms_fix_maxdiff(a.rope, c0 + Rkv, dr) <= 1e-6, "cached rope key is not the raw kv_a tail");
    /* With a rotary (DeepSeek's form, no gate): 5 tokens at once = one at a time, bit for bit;
     * the cached rope key is the kv_a tail turned at its position (position 0: as it is), so
     * token 0 is as without the rotary and later tokens are not. */
    ms_rope rot;
    ms_rope_init_deepseek_yarn(&rot, dr, 10000.0, 40.0, 4096.0, 32.0, 1.0);
    ms_mla_cfg rc = ms_k3_mla_cfg(&c), plain = rc;
    rc.rotary = &rot;
    rc.out_gate = plain.out_gate = 0;
    float y3[5 * 16], y4[5 * 16];
    ms_mla_cache r1, r2, r3;
    ms_mla_cache_init(&r1);
    ms_mla_cache_init(&r2);
    ms_mla_cache_init(&r3);
    ms_mla_forward(&rc, &w, &r1, x, 5, y3, NULL);
    for (int t = 0; t < 5; t++) ms_mla_forward(&rc, &w, &r2, x + t * 16, 1, y4 + t * 16, NULL);
    T_CHECK(!memcmp(y3, y4, sizeof y3), "rotary: 5 tokens at once = one at a time, bit for bit");
    ms_mla_forward(&plain, &w, &r3, x, 5, y4, NULL);
    float k4[10], turned[2];
    ms_matvec(&w.kva, x + 4 * 16, k4, NULL);
    memcpy(turned, k4 + Rkv, sizeof turned);
    ms_rope_apply(&rot, turned, 1, dr, 4);
    T_CHECK(!memcmp(y3, y4, sizeof(float) * 16) && ms_fix_maxdiff(y3 + 16, y4 + 16, 4 * 16) > 1e-4 &&
                ms_fix_maxdiff(r1.rope + 4 * dr, turned, dr) <= 1e-6,
            "rotary: token 0 as without it, later ones not; position 4's key is the kv_a tail turned by 4");
    ms_mla_cache_free(&r1);
    ms_mla_cache_free(&r2);
    ms_mla_cache_free(&r3);
    ms_rope_free(&rot);
    ms_mla_cache_reset(&a);
    T_CHECK(a.n == 0, "ms_mla_cache_reset leaves %lld positions", (long long)a.n);
    ms_mla_cache_free(&a);
    ms_mla_cache_free(&b);
    ms_mla_cache_free(NULL);
    free(buf);
}

static ms_mla_w mla_weights(ms_fix *f, const ms_k3_cfg *c)
{
    int64_t E = c->hidden, H = c->mla_heads, dq = c->qk_nope + c->qk_rope;
    ms_mla_w w;
    memset(&w, 0, sizeof w);
    w.qa = ms_fix_mat(f, "q_a_proj_weight", c->q_lora, E);
    w.qb = ms_fix_mat(f, "q_b_proj_weight", H * dq, c->q_lora);
    w.kva = ms_fix_mat(f, "kv_a_proj_with_mqa_weight", c->kv_lora + c->qk_rope, E);
    w.kvb = ms_fix_mat(f, "kv_b_proj_weight", H * (c->qk_nope + c->v_head), c->kv_lora);
    w.o = ms_fix_mat(f, "o_proj_weight", E, H * c->v_head);
    w.g = ms_fix_mat(f, "g_proj_weight", H * c->v_head, E);
    w.qa_norm = ms_fix_f32(f, "q_a_layernorm_weight", c->q_lora);
    w.kva_norm = ms_fix_f32(f, "kv_a_layernorm_weight", c->kv_lora);
    return w;
}

static void fx_mla(void)
{
    ms_fix *f = ms_fix_open("mla");
    if (!f) return;
    ms_fix_stat st = {0};
    ms_k3_cfg c = cfg; /* shallow copy, fixture scalars override */
    ms_fix_override_int(f, "qk_nope", &c.qk_nope);
    ms_fix_override_int(f, "qk_rope", &c.qk_rope);
    ms_fix_override_int(f, "kv_lora", &c.kv_lora);
    ms_fix_override_int(f, "q_lora", &c.q_lora);
    ms_fix_override_int(f, "v_head", &c.v_head);
    ms_fix_override_int(f, "n_heads", &c.mla_heads);
    ms_fix_override_float(f, "rms_eps", &c.eps);
    T_CHECK(c.qk_nope == cfg.qk_nope && c.qk_rope == cfg.qk_rope && c.kv_lora == cfg.kv_lora &&
                c.q_lora == cfg.q_lora && c.v_head == cfg.v_head && c.mla_heads == cfg.mla_heads && c.eps == cfg.eps,
            "mla: fixture scalars disagree with the MANIFEST config");
    double scale = ms_fix_num(f, "scale");
    T_CHECK(fabs(scale - 1.0 / sqrt((double)(c.qk_nope + c.qk_rope))) < 1e-7,
            "mla: fixture scale %.9g is not (dn+dr)^-1/2", scale);
    T_CHECK(c.mla_out_gate == 1, "mla: the MANIFEST config has the output gate off");
    const int T = 6;
    int64_t E = c.hidden, Rkv = c.kv_lora, dr = c.qk_rope;
    ms_mla_w w = mla_weights(f, &c);
    const float *in = ms_fix_f32(f, "in", T * E);     /* [1][T][E] */
    const float *want = ms_fix_f32(f, "out", T * E);  /* [1][T][E] */
    const float *want_lat = ms_fix_f32(f, "kv_latent", T * Rkv); /* [1][T][Rkv] normalised */
    const float *want_rope = ms_fix_f32(f, "k_rope", T * dr);    /* [1][T][dr] raw */
    float *out = ms_fix_scratch(f, T * E);
    ms_mla_cache kc;
    ms_mla_cache_init(&kc);
    ms_mla_forward(MC(&c), &w, &kc, in, T, out, NULL);
    T_CHECK(kc.n == T, "mla: cache holds %lld positions, want %d", (long long)kc.n, T);
    ms_fix_cmp(&st, "mla.out", out, want, T * E, tol);
    if (kc.n == T && kc.lat && kc.rope) {
        ms_fix_cmp(&st, "mla.kv_latent (cache lat)", kc.lat, want_lat, T * Rkv, tol);
        ms_fix_cmp(&st, "mla.k_rope (cache rope)", kc.rope, want_rope, T * dr, tol);
    }
    ms_fix_report("mla", &st);

    /* Invariant: 6 one-token calls against a growing cache == one 6-token call. */
    ms_mla_cache k1;
    ms_mla_cache_init(&k1);
    float *o1 = ms_fix_scratch(f, T * E);
    for (int t = 0; t < T; t++) ms_mla_forward(MC(&c), &w, &k1, in + t * E, 1, o1 + t * E, NULL);
    ms_fix_stat st1 = {0};
    ms_fix_cmp(&st1, "mla 6x1-token vs fixture", o1, want, T * E, tol);
    double md = ms_fix_maxdiff(o1, out, T * E);
    int64_t bd = ms_fix_bitdiff(o1, out, T * E);
    int64_t bc = (k1.n == kc.n) ? ms_fix_bitdiff(k1.lat, kc.lat, T * Rkv) + ms_fix_bitdiff(k1.rope, kc.rope, T * dr)
                                : -1;
    printf("  mla: 6 x 1-token vs 1 x 6-token: max |diff| %.3e, %lld output / %lld cache elements differ in bits\n",
           md, (long long)bd, (long long)bc);
    T_CHECK(md <= tol.abs, "mla: token-by-token differs from one call by %.3e", md);
    T_CHECK(bd == 0 && bc == 0, "mla: token-by-token not bit-identical to one call (%lld / %lld elements)",
            (long long)bd, (long long)bc);

    /* Invariant: 2+4 split on a 2-thread pool with scalar kernels gives the same bits. */
    ms_pool *pool = ms_pool_new(2);
    T_CHECK(pool != NULL, "ms_pool_new(2): %s", ms_err_msg());
    ms_mla_cache k2;
    ms_mla_cache_init(&k2);
    float *o2 = ms_fix_scratch(f, T * E);
    int simd = ms_cpu_simd_enabled();
    ms_cpu_set_simd(0);
    ms_mla_forward(MC(&c), &w, &k2, in, 2, o2, pool);
    ms_mla_forward(MC(&c), &w, &k2, in + 2 * E, T - 2, o2 + 2 * E, pool);
    ms_cpu_set_simd(simd);
    int64_t d2 = ms_fix_bitdiff(o2, out, T * E);
    printf("  mla: 2+4 split, 2 threads, scalar kernels vs 1 call: %lld elements differ in bits\n", (long long)d2);
    T_CHECK(d2 == 0, "mla: split/threads/scalar run differs from one call in %lld elements", (long long)d2);

    /* After a reset the cache restarts at position 0. */
    ms_mla_cache_reset(&k2);
    ms_mla_forward(MC(&c), &w, &k2, in, T, o2, NULL);
    T_CHECK(ms_fix_bitdiff(o2, out, T * E) == 0 && k2.n == T, "mla: output after ms_mla_cache_reset differs");

    ms_pool_free(pool);
    ms_mla_cache_free(&k2);
    ms_mla_cache_free(&k1);
    ms_mla_cache_free(&kc);
    ms_fix_free(f);
}

int main(void)
{
    ms_kern_init();
    self_checks();
    if (ms_fix_manifest(&cfg, &tol) == 0) {
        printf("tolerance: abs %g rel %g\n", tol.abs, tol.rel);
        fx_mla();
    }
    ms_k3_cfg_free(&cfg);
    return ms_t_done();
}
