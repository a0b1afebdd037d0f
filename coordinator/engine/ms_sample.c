/* ms_sample: greedy and temperature/top-k/top-p/min-p sampling with xoshiro256** seeded by splitmix64. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_sample.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(uint64_t *s)
{
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

static int bias_cmp(const void *a, const void *b)
{
    const ms_logit_bias *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

void ms_sampler_setup(ms_sampler *s, const ms_sample_params *p, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    s->p = *p;
    if (!(s->p.top_p > 0.0f)) s->p.top_p = 1.0f;
    s->p.bias = NULL;
    s->p.n_bias = 0;
    if (p->n_bias > 0) {
        ms_logit_bias *b = ms_malloc(sizeof *b * (size_t)p->n_bias);
        memcpy(b, p->bias, sizeof *b * (size_t)p->n_bias);
        qsort(b, (size_t)p->n_bias, sizeof *b, bias_cmp);
        s->p.bias = b;
        s->p.n_bias = p->n_bias;
    }
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
}

void ms_sampler_init(ms_sampler *s, float temperature, float top_p, uint64_t seed)
{
    ms_sample_params p = {0};
    p.temperature = temperature;
    p.top_p = top_p;
    ms_sampler_setup(s, &p, seed);
}

void ms_sampler_free(ms_sampler *s)
{
    if (!s) return;
    free((void *)s->p.bias);
    free(s->seen);
    free(s->seen_count);
    s->p.bias = NULL;
    s->seen = s->seen_count = NULL;
    s->n_seen = s->cap_seen = 0;
}

void ms_sampler_copy(ms_sampler *dst, const ms_sampler *src)
{
    *dst = *src;
    ms_sample_params p = src->p;
    ms_sampler_setup(dst, &p, 0);
    memcpy(dst->rng, src->rng, sizeof dst->rng);
    if (src->n_seen) {
        dst->cap_seen = dst->n_seen = src->n_seen;
        dst->seen = ms_malloc(sizeof(int32_t) * src->n_seen);
        dst->seen_count = ms_malloc(sizeof(int32_t) * src->n_seen);
        memcpy(dst->seen, src->seen, sizeof(int32_t) * src->n_seen);
        memcpy(dst->seen_count, src->seen_count, sizeof(int32_t) * src->n_seen);
    }
}

int ms_sampler_adjusts(const ms_sampler *s)
{
    return s->p.n_bias > 0 || s->p.presence_penalty != 0.0f || s->p.frequency_penalty != 0.0f;
}

void ms_sampler_accept(ms_sampler *s, int32_t id)
{
    if (s->p.presence_penalty == 0.0f && s->p.frequency_penalty == 0.0f) return; /* nothing reads the counts */
    for (size_t i = 0; i < s->n_seen; i++)
        if (s->seen[i] == id) {
            s->seen_count[i]++;
            return;
        }
    if (s->n_seen == s->cap_seen) {
        s->cap_seen = s->cap_seen ? 2 * s->cap_seen : 16;
        s->seen = ms_realloc(s->seen, sizeof(int32_t) * s->cap_seen);
        s->seen_count = ms_realloc(s->seen_count, sizeof(int32_t) * s->cap_seen);
    }
    s->seen[s->n_seen] = id;
    s->seen_count[s->n_seen++] = 1;
}

int32_t ms_argmax(const float *logits, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return (int32_t)best;
}

typedef struct {
    double p;
    int32_t id;
} cand;

/* The candidates in the order (p descending, id ascending), the order a comparison sort by
 * those keys gives: a stable LSD radix sort of the bits of p (non-negative doubles order as
 * their bits) from id order, 11 bits a pass, skipping a pass whose digit all share. Linear in n
 * (a 201k vocabulary: a few ms where qsort took tens). Returns a or b. */
#define DIGIT_BITS 11
#define N_DIGITS ((64 + DIGIT_BITS - 1) / DIGIT_BITS)
static uint64_t key_of(double p)
{
    uint64_t b;
    memcpy(&b, &p, sizeof b);
    return ~b; /* descending p */
}

static int before(const cand *x, const cand *y) { return x->p > y->p || (x->p == y->p && x->id < y->id); }

/* The same order for a short list (the radix sort's counts would cost more than the list): a
 * bottom-up merge sort between a and b. */
static cand *merge_sort(cand *a, cand *b, int64_t n)
{
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, i = lo, j = mid, k = lo;
            while (i < mid && j < hi) b[k++] = before(&a[j], &a[i]) ? a[j++] : a[i++];
            while (i < mid) b[k++] = a[i++];
            while (j < hi) b[k++] = a[j++];
        }
        cand *t = a;
        a = b;
        b = t;
    }
    return a;
}

static cand *radix_sort(cand *a, cand *b, int64_t n, uint32_t (*count)[1 << DIGIT_BITS])
{
    if (n < 4096) return merge_sort(a, b, n);
    memset(count, 0, sizeof(uint32_t) * N_DIGITS * (1u << DIGIT_BITS));
    const uint64_t mask = (1u << DIGIT_BITS) - 1;
    for (int64_t i = 0; i < n; i++) {
        uint64_t k = key_of(a[i].p);
        for (int d = 0; d < N_DIGITS; d++) count[d][(k >> (d * DIGIT_BITS)) & mask]++;
    }
    for (int d = 0; d < N_DIGITS; d++) {
        uint32_t *c = count[d];
        int shift = d * DIGIT_BITS;
        if (n == 0 || c[(key_of(a[0].p) >> shift) & mask] == (uint32_t)n) continue; /* one digit: no change */
        uint32_t sum = 0;
        for (uint64_t v = 0; v <= mask; v++) {
            uint32_t t = c[v];
            c[v] = sum;
            sum += t;
        }
        for (int64_t i = 0; i < n; i++) b[c[(key_of(a[i].p) >> shift) & mask]++] = a[i];
        cand *t = a;
        a = b;
        b = t;
    }
    return a;
}

void ms_sample_ws_free(ms_sample_ws *w)
{
    if (!w) return;
    free(w->cand);
    free(w->adj);
    free(w->count);
    memset(w, 0, sizeof *w);
}

static void ws_reserve(ms_sample_ws *w, int64_t n)
{
    if (n <= w->cap) return;
    ms_sample_ws_free(w);
    w->cand = ms_malloc(sizeof(cand) * 2 * (size_t)n); /* [2][n] the sort's two buffers */
    w->adj = ms_malloc(sizeof(float) * (size_t)n);     /* [n] */
    w->count = ms_malloc(sizeof(uint32_t) * N_DIGITS * (1u << DIGIT_BITS)); /* [N_DIGITS][2^DIGIT_BITS] */
    w->cap = n;
}

/* The logits with bias and penalties, into adj (in float, as the logits are). */
static float *adjusted(const ms_sampler *s, const float *logits, int64_t n, float *a)
{
    memcpy(a, logits, sizeof(float) * (size_t)n);
    for (int i = 0; i < s->p.n_bias; i++)
        if (s->p.bias[i].id >= 0 && s->p.bias[i].id < n) a[s->p.bias[i].id] += s->p.bias[i].bias;
    for (size_t i = 0; i < s->n_seen; i++)
        if (s->seen[i] < n)
            a[s->seen[i]] -= (float)s->seen_count[i] * s->p.frequency_penalty + s->p.presence_penalty;
    return a;
}

int32_t ms_sampler_pick(ms_sampler *s, const float *logits, int64_t n)
{
    ms_sample_ws w = {0};
    int32_t t = ms_sampler_pick_ws(s, logits, n, &w);
    ms_sample_ws_free(&w);
    return t;
}

int32_t ms_sampler_pick_ws(ms_sampler *s, const float *logits, int64_t n, ms_sample_ws *w)
{
    ws_reserve(w, n);
    const float *l = ms_sampler_adjusts(s) ? adjusted(s, logits, n, w->adj) : logits;
    if (s->p.temperature <= 0.0f) return ms_argmax(l, n);
    cand *c = w->cand;
    double mx = l[ms_argmax(l, n)], sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        c[i].p = exp(((double)l[i] - mx) / (double)s->p.temperature);
        c[i].id = (int32_t)i;
        sum += c[i].p;
    }
    c = radix_sort(c, (cand *)w->cand + n, n, (uint32_t(*)[1 << DIGIT_BITS])w->count);
    int64_t keep = n;
    if (s->p.top_k > 0 && s->p.top_k < keep) { /* top-k first; top-p then cuts its renormalised mass */
        keep = s->p.top_k;
        sum = 0.0;
        for (int64_t i = 0; i < keep; i++) sum += c[i].p;
    }
    /* Keep the smallest prefix whose mass reaches top_p. */
    if (s->p.top_p < 1.0f) {
        double cum = 0.0;
        for (int64_t i = 0; i < keep; i++) {
            cum += c[i].p / sum;
            if (cum >= (double)s->p.top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    if (s->p.min_p > 0.0f) { /* c[0] is the most probable: p_i >= min_p * p_max */
        double floor_p = (double)s->p.min_p * c[0].p;
        int64_t k = 1;
        while (k < keep && c[k].p >= floor_p) k++;
        keep = k;
    }
    double kept = 0.0;
    for (int64_t i = 0; i < keep; i++) kept += c[i].p;
    double u = (double)(next_u64(s->rng) >> 11) * (1.0 / 9007199254740992.0) * kept;
    int32_t pick = c[keep - 1].id;
    double cum = 0.0;
    for (int64_t i = 0; i < keep; i++) {
        cum += c[i].p;
        if (u < cum) {
            pick = c[i].id;
            break;
        }
    }
    return pick;
}
