/* test_sample: ms_sample against its definition: greedy = first argmax; otherwise softmax at
 * temperature T, cut to the nucleus (the fewest most probable tokens whose mass reaches top_p),
 * renormalised; checked statistically with fixed seeds against probabilities computed here. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_sample.h"
#include "ms_test.h"

#define NMAX 1024

/* The definition, in double, written from the README / ms_sample.h and not from ms_sample.c:
 * p_i = exp(l_i / T) / sum_j exp(l_j / T); order tokens by p descending; keep the shortest
 * prefix whose cumulative mass is >= top_p (everything when top_p >= 1); renormalise. Tokens
 * outside the nucleus get 0. Returns the nucleus size. */
static int expected(const float *l, int n, double T, double top_p, double *p)
{
    double mx = -INFINITY, sum = 0.0;
    for (int i = 0; i < n; i++) mx = fmax(mx, (double)l[i]);
    for (int i = 0; i < n; i++) sum += p[i] = exp(((double)l[i] - mx) / T);
    for (int i = 0; i < n; i++) p[i] /= sum;
    int order[NMAX];
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 0; i < n; i++) /* selection sort: n is small */
        for (int j = i + 1; j < n; j++)
            if (p[order[j]] > p[order[i]]) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    int keep = n;
    if (top_p < 1.0) {
        double cum = 0.0;
        for (int i = 0; i < n; i++) {
            cum += p[order[i]];
            if (cum >= top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    double kept = 0.0;
    for (int i = 0; i < keep; i++) kept += p[order[i]];
    for (int i = 0; i < n; i++) p[i] = 0.0;
    for (int i = 0; i < keep; i++) {
        double q = exp(((double)l[order[i]] - mx) / T) / sum;
        p[order[i]] = q / kept;
    }
    return keep;
}

/* Upper critical value of chi-square with df degrees of freedom at z standard deviations
 * (Wilson-Hilferty); z = 4 is a false-alarm rate of about 3e-5. */
static double chi2_crit(int df, double z)
{
    double a = 2.0 / (9.0 * df);
    return df * pow(1.0 - a + z * sqrt(a), 3.0);
}

/* Draw N tokens and compare the counts with the expected distribution: no draw outside the
 * support, every bin within 5 sigma, and the chi-square over the support below its 4-sigma
 * critical value. */
static void check_dist(const char *what, const float *l, int n, float T, float top_p, uint64_t seed, int N)
{
    double p[NMAX];
    int keep = expected(l, n, T, top_p, p);
    static long cnt[NMAX];
    memset(cnt, 0, sizeof cnt);
    ms_sampler s;
    ms_sampler_init(&s, T, top_p, seed);
    int bad_id = 0;
    for (int k = 0; k < N; k++) {
        int32_t t = ms_sampler_pick(&s, l, n);
        if (t < 0 || t >= n)
            bad_id++;
        else
            cnt[t]++;
    }
    T_CHECK(bad_id == 0, "%s: %d picks out of range", what, bad_id);
    int outside = 0, worst_bin = -1;
    double chi2 = 0.0, worst_z = 0.0;
    for (int i = 0; i < n; i++) {
        if (p[i] == 0.0) {
            if (cnt[i]) {
                outside++;
                fprintf(stderr, "  %s: token %d outside the nucleus drawn %ld times\n", what, i, cnt[i]);
            }
            continue;
        }
        double e = N * p[i], sd = sqrt(N * p[i] * (1.0 - p[i]));
        double z = sd > 0 ? fabs((double)cnt[i] - e) / sd : ((double)cnt[i] == e ? 0.0 : INFINITY);
        if (z > worst_z) {
            worst_z = z;
            worst_bin = i;
        }
        chi2 += ((double)cnt[i] - e) * ((double)cnt[i] - e) / e;
    }
    double crit = keep > 1 ? chi2_crit(keep - 1, 4.0) : 0.0;
    printf("  %-40s nucleus %d of %d, chi2 %.2f (crit %.2f), worst bin %d at %.2f sigma\n", what, keep, n, chi2,
           crit, worst_bin, worst_z);
    T_CHECK(outside == 0, "%s: %d tokens outside the nucleus were drawn", what, outside);
    T_CHECK(worst_z <= 5.0, "%s: token %d drawn %ld times, expected %.1f (%.1f sigma)", what, worst_bin,
            worst_bin >= 0 ? cnt[worst_bin] : 0L, worst_bin >= 0 ? N * p[worst_bin] : 0.0, worst_z);
    T_CHECK(keep == 1 ? chi2 == 0.0 : chi2 <= crit, "%s: chi-square %.2f over %d bins exceeds %.2f", what, chi2, keep,
            crit);
}

/* Logits whose order differs from the index order and without ties, so that the sort, the cut
 * and the renormalisation all matter. At T = 1 the probabilities are about
 * [.457 .205 .102 .062 .023 .152]: sorted 0, 1, 5, 2, 3, 4 with cumulative mass .457 .662 .814
 * .915 .977 1. */
static const float L6[6] = {2.0f, 1.2f, 0.5f, 0.0f, -1.0f, 0.9f};

static void test_expected_is_sane(void)
{
    /* The reference itself on hand-checkable cases: equal logits are uniform; two tokens one
     * nat apart at T = 1 are e/(1+e) and 1/(1+e); top_p between them keeps one. */
    float eq[4] = {0.3f, 0.3f, 0.3f, 0.3f}, two[2] = {1.0f, 0.0f};
    double p[6];
    int k = expected(eq, 4, 1.0, 1.0, p);
    T_CHECK(k == 4 && fabs(p[0] - 0.25) < 1e-15 && fabs(p[3] - 0.25) < 1e-15, "reference: uniform");
    k = expected(two, 2, 1.0, 1.0, p);
    T_CHECK(k == 2 && fabs(p[0] - exp(1.0) / (1 + exp(1.0))) < 1e-15, "reference: two tokens");
    k = expected(two, 2, 1.0, 0.5, p);
    T_CHECK(k == 1 && p[0] == 1.0 && p[1] == 0.0, "reference: nucleus of one");
    /* The sizes of the nuclei the checks below rely on (so a wrong cut is really exercised). */
    T_CHECK(expected(L6, 6, 1.0, 0.75, p) == 3, "L6 at T=1, top_p .75: 3 tokens");
    T_CHECK(expected(L6, 6, 0.5, 0.75, p) == 2, "L6 at T=.5, top_p .75: 2 tokens");
    T_CHECK(expected(L6, 6, 1.0, 0.9, p) == 4, "L6 at T=1, top_p .9: 4 tokens");
    T_CHECK(expected(L6, 6, 2.0, 0.75, p) == 4, "L6 at T=2, top_p .75: 4 tokens");
}

static void test_greedy(void)
{
    ms_sampler s;
    float ties[5] = {1.0f, 3.0f, -2.0f, 3.0f, 2.9f};
    ms_sampler_init(&s, 0.0f, 1.0f, 7);
    int ok = 1;
    for (int k = 0; k < 100; k++) ok &= ms_sampler_pick(&s, ties, 5) == 1;
    T_CHECK(ok, "temperature 0: always the first maximal index (1), ties resolved to the lowest");
    T_CHECK(ms_argmax(ties, 5) == 1, "ms_argmax: first maximal index");
    float last[3] = {-5.0f, -4.0f, -1.0f};
    T_CHECK(ms_argmax(last, 3) == 2, "ms_argmax: maximum at the end");
    ms_sampler_init(&s, 0.0f, 0.3f, 7);
    T_CHECK(ms_sampler_pick(&s, L6, 6) == 0, "temperature 0 ignores top_p");
    /* A nucleus smaller than the top token's mass holds only the top token, whatever T. */
    ms_sampler_init(&s, 3.0f, 0.01f, 11);
    ok = 1;
    for (int k = 0; k < 2000; k++) ok &= ms_sampler_pick(&s, L6, 6) == 0;
    T_CHECK(ok, "top_p below the top token's mass: always the top token");
}

static void test_distributions(void)
{
    const int N = 200000;
    check_dist("T=1 top_p=1 (plain softmax)", L6, 6, 1.0f, 1.0f, 1, N);
    check_dist("T=0.5 top_p=1 (sharper)", L6, 6, 0.5f, 1.0f, 2, N);
    check_dist("T=2 top_p=1 (flatter)", L6, 6, 2.0f, 1.0f, 3, N);
    check_dist("T=1 top_p=0.75 (3 tokens)", L6, 6, 1.0f, 0.75f, 4, N);
    check_dist("T=1 top_p=0.9 (4 tokens)", L6, 6, 1.0f, 0.9f, 5, N);
    /* The nucleus is taken on the tempered distribution: 2 tokens at T=.5, 4 at T=2. */
    check_dist("T=0.5 top_p=0.75 (2 tokens)", L6, 6, 0.5f, 0.75f, 6, N);
    check_dist("T=2 top_p=0.75 (4 tokens)", L6, 6, 2.0f, 0.75f, 7, N);

    /* A longer vector: 256 random logits in [-3, 3), nucleus 0.9 at T=0.8. */
    static float big[256];
    ms_t_rng r = {0x5deece66dull};
    ms_t_fill_f32(&r, big, 256, -3.0f, 3.0f);
    double p[NMAX];
    int keep = expected(big, 256, 0.8, 0.9, p);
    T_CHECK(keep > 20 && keep < 256 - 20, "long vector: nucleus of %d tokens is a real cut", keep);
    check_dist("256 logits, T=0.8 top_p=0.9", big, 256, 0.8f, 0.9f, 8, 200000);
}

/* The checks above are strong enough to reject near misses: each wrong variant, fed to the
 * same comparison, must be told apart from the right one by more than the tolerance. */
static void test_power(void)
{
    double ok[6], wrong[6];
    const int N = 200000;
    struct {
        const char *what;
        double T_ok, p_ok, T_bad, p_bad;
    } v[] = {
        {"temperature applied twice (T=0.5 -> 0.25)", 0.5, 1.0, 0.25, 1.0},
        {"temperature ignored (T=2 -> 1)", 2.0, 1.0, 1.0, 1.0},
        {"nucleus one token too many (0.75 -> 4 tokens)", 1.0, 0.75, 1.0, 0.9},
        {"nucleus on the untempered distribution (3 tokens at T=.5)", 0.5, 0.75, 0.5, 0.9},
    };
    for (size_t k = 0; k < sizeof v / sizeof *v; k++) {
        expected(L6, 6, v[k].T_ok, v[k].p_ok, ok);
        expected(L6, 6, v[k].T_bad, v[k].p_bad, wrong);
        /* the chi-square the wrong sampler would score in expectation against the right law */
        double chi2 = 0.0, extra = 0.0;
        for (int i = 0; i < 6; i++) {
            if (ok[i] > 0)
                chi2 += N * (wrong[i] - ok[i]) * (wrong[i] - ok[i]) / ok[i];
            else
                extra += wrong[i];
        }
        T_CHECK(extra > 0 || chi2 > 10 * chi2_crit(5, 4.0), "%s: detectable (chi2 %.0f, mass outside %.3f)", v[k].what,
                chi2, extra);
    }
}

static void test_seeds(void)
{
    ms_sampler a, b, c;
    ms_sampler_init(&a, 1.0f, 1.0f, 42);
    ms_sampler_init(&b, 1.0f, 1.0f, 42);
    ms_sampler_init(&c, 1.0f, 1.0f, 43);
    float flat[6] = {0, 0, 0, 0, 0, 0};
    int same_ab = 1, diff_ac = 0;
    for (int k = 0; k < 1000; k++) {
        int32_t x = ms_sampler_pick(&a, flat, 6), y = ms_sampler_pick(&b, flat, 6), z = ms_sampler_pick(&c, flat, 6);
        same_ab &= x == y;
        diff_ac += x != z;
    }
    T_CHECK(same_ab, "same seed: same sequence of 1000 picks");
    /* independent uniform sequences agree on 1/6 of the picks: expect ~833 differences */
    T_CHECK(diff_ac > 700, "different seeds: different sequences (%d of 1000 picks differ)", diff_ac);
    ms_sampler_init(&a, 1.0f, 1.0f, 0);
    ms_sampler_init(&b, 1.0f, 1.0f, 1);
    int d01 = 0;
    for (int k = 0; k < 1000; k++) d01 += ms_sampler_pick(&a, flat, 6) != ms_sampler_pick(&b, flat, 6);
    T_CHECK(d01 > 700, "seeds 0 and 1 differ too (%d of 1000)", d01);
    /* Re-initialising restarts the sequence. */
    int32_t first[50];
    ms_sampler_init(&a, 0.7f, 0.95f, 9);
    for (int k = 0; k < 50; k++) first[k] = ms_sampler_pick(&a, L6, 6);
    ms_sampler_init(&a, 0.7f, 0.95f, 9);
    int again = 1;
    for (int k = 0; k < 50; k++) again &= ms_sampler_pick(&a, L6, 6) == first[k];
    T_CHECK(again, "re-initialising with the same seed replays the picks");
}

/* top_k, min_p, bias and penalties by their definitions (ms_sample.h), and the copy. */
static void test_more(void)
{
    const float l[6] = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f};
    ms_sample_params p = {0};
    p.temperature = 1.0f;
    p.top_k = 2;
    ms_sampler s;
    ms_sampler_setup(&s, &p, 5);
    int seen[6] = {0};
    for (int k = 0; k < 4000; k++) seen[ms_sampler_pick(&s, l, 6)]++;
    T_CHECK(seen[0] && seen[1] && !seen[2] && !seen[3] && !seen[4] && !seen[5], "top_k 2 draws only the two best");
    /* p_i / p_max = exp(l_i - 2): 1, 0.61, 0.37, ...: min_p 0.5 keeps the first two */
    ms_sampler_free(&s);
    p.top_k = 0;
    p.min_p = 0.5f;
    ms_sampler_setup(&s, &p, 5);
    memset(seen, 0, sizeof seen);
    for (int k = 0; k < 4000; k++) seen[ms_sampler_pick(&s, l, 6)]++;
    T_CHECK(seen[0] && seen[1] && !seen[2] && !seen[5], "min_p 0.5 keeps p >= 0.5 p_max");
    ms_sampler_free(&s);
    /* greedy with a bias and a frequency penalty: 0 wins, is penalised below 1, then 1 wins */
    ms_logit_bias b[1] = {{3, 1.6f}}; /* 0.5 + 1.6 = 2.1: token 3 first */
    ms_sample_params g = {0};
    g.frequency_penalty = 0.3f;
    g.bias = b;
    g.n_bias = 1;
    ms_sampler_setup(&s, &g, 1);
    b[0].bias = 0; /* the sampler copied the bias */
    T_CHECK(ms_sampler_adjusts(&s), "a bias adjusts the logits");
    int32_t t1 = ms_sampler_pick(&s, l, 6);
    ms_sampler_accept(&s, t1);
    int32_t t2 = ms_sampler_pick(&s, l, 6); /* 2.1 - 0.3 = 1.8 < 2.0 */
    ms_sampler_accept(&s, t2);
    ms_sampler c;
    ms_sampler_copy(&c, &s);
    int32_t t3 = ms_sampler_pick(&s, l, 6), t3c = ms_sampler_pick(&c, l, 6); /* 2.0 - 0.3 = 1.7 < 1.8 */
    T_CHECK(t1 == 3 && t2 == 0 && t3 == 3 && t3c == 3, "bias and frequency penalty, greedy: %d %d %d (copy %d)", t1, t2,
            t3, t3c);
    ms_sampler_free(&s);
    ms_sampler_free(&c);
    ms_sampler_free(&c); /* twice: a freed sampler is empty */
}

/* ---- the sort: the same picks as a comparison sort by (p descending, id ascending) ---- */

typedef struct {
    double p;
    int32_t id;
} ref_cand;

static int ref_cmp(const void *a, const void *b)
{
    const ref_cand *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? 1 : -1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

/* The pick as specified in ms_sample.h (no bias, no penalties), its candidates ordered by qsort. */
static int32_t ref_pick(uint64_t *rng, const ms_sample_params *sp, const float *l, int64_t n, ref_cand *c)
{
    int64_t am = 0;
    for (int64_t i = 1; i < n; i++)
        if (l[i] > l[am]) am = i;
    if (sp->temperature <= 0.0f) return (int32_t)am;
    double mx = l[am], sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        c[i].p = exp(((double)l[i] - mx) / (double)sp->temperature);
        c[i].id = (int32_t)i;
        sum += c[i].p;
    }
    qsort(c, (size_t)n, sizeof *c, ref_cmp);
    int64_t keep = n;
    if (sp->top_k > 0 && sp->top_k < keep) {
        keep = sp->top_k;
        sum = 0.0;
        for (int64_t i = 0; i < keep; i++) sum += c[i].p;
    }
    if (sp->top_p > 0.0f && sp->top_p < 1.0f) {
        double cum = 0.0;
        for (int64_t i = 0; i < keep; i++) {
            cum += c[i].p / sum;
            if (cum >= (double)sp->top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    if (sp->min_p > 0.0f) {
        double floor_p = (double)sp->min_p * c[0].p;
        int64_t k = 1;
        while (k < keep && c[k].p >= floor_p) k++;
        keep = k;
    }
    double kept = 0.0;
    for (int64_t i = 0; i < keep; i++) kept += c[i].p;
    /* The sampler's generator, copied here from the state given (xoshiro256**). */
    uint64_t *s = rng, r = ((s[1] * 5) << 7 | (s[1] * 5) >> 57) * 9, t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t, s[3] = s[3] << 45 | s[3] >> 19;
    double u = (double)(r >> 11) * (1.0 / 9007199254740992.0) * kept, cum = 0.0;
    for (int64_t i = 0; i < keep; i++) {
        cum += c[i].p;
        if (u < cum) return c[i].id;
    }
    return c[keep - 1].id;
}

/* Vocabularies up to 201,088 (gpt-oss's) with ties, tiny tails and underflow: every pick with a
 * kept work memory equals the reference's, over top-k, top-p and min-p cuts. */
static void test_sort_same(void)
{
    static const int64_t ns[] = {1, 2, 7, 1000, 4097, 201088};
    static const float temps[] = {0.0f, 0.3f, 0.9f, 1.7f};
    ms_sample_ws ws = {0};
    uint64_t x = 12345;
    int same = 1, picks = 0;
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        int64_t n = ns[a];
        float *l = malloc(sizeof(float) * (size_t)n);
        ref_cand *c = malloc(sizeof(ref_cand) * (size_t)n);
        for (int kind = 0; kind < 3; kind++) {
            for (int64_t i = 0; i < n; i++) {
                x = x * 6364136223846793005ULL + 1442695040888963407ULL;
                double u = (double)(x >> 11) / 9007199254740992.0;
                /* 0: spread logits; 1: few distinct values (ties); 2: a wide range (underflow at low T) */
                l[i] = kind == 0 ? (float)(12.0 * u) : kind == 1 ? (float)(int)(4.0 * u) : (float)(900.0 * u - 450.0);
            }
            for (size_t t = 0; t < sizeof temps / sizeof temps[0]; t++)
                for (int cut = 0; cut < 4 && (n < 5000 || t == 2); cut++) { /* the largest at one temperature */
                    ms_sample_params sp = {0};
                    sp.temperature = temps[t];
                    sp.top_p = cut == 1 ? 0.9f : cut == 3 ? 0.5f : 1.0f;
                    sp.top_k = cut == 2 ? 40 : cut == 3 ? 1000 : 0;
                    sp.min_p = cut == 3 ? 0.01f : 0.0f;
                    ms_sampler s;
                    ms_sampler_setup(&s, &sp, 99 + (uint64_t)cut);
                    uint64_t rng[4];
                    memcpy(rng, s.rng, sizeof rng);
                    for (int k = 0; k < 3; k++, picks++) {
                        int32_t got = ms_sampler_pick_ws(&s, l, n, &ws), want = ref_pick(rng, &sp, l, n, c);
                        if (got != want && same) {
                            fprintf(stderr, "n %lld kind %d T %g cut %d pick %d: %d, the reference %d\n", (long long)n,
                                    kind, temps[t], cut, k, got, want);
                            same = 0;
                        }
                    }
                    ms_sampler_free(&s);
                }
        }
        free(c);
        free(l);
    }
    ms_sample_ws_free(&ws);
    T_CHECK(same, "%d picks with a kept work memory (radix order) equal a qsort reference's", picks);
}

int main(void)
{
    test_more();
    test_expected_is_sane();
    test_greedy();
    test_distributions();
    test_power();
    test_seeds();
    test_sort_same();
    return ms_t_done();
}
