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

static int cand_cmp(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? 1 : -1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

/* The logits with bias and penalties, into a new buffer (in float, as the logits are). */
static float *adjusted(const ms_sampler *s, const float *logits, int64_t n)
{
    float *a = ms_malloc(sizeof(float) * (size_t)n);
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
    float *adj = ms_sampler_adjusts(s) ? adjusted(s, logits, n) : NULL;
    const float *l = adj ? adj : logits;
    if (s->p.temperature <= 0.0f) {
        int32_t best = ms_argmax(l, n);
        free(adj);
        return best;
    }
    cand *c = ms_malloc(sizeof(cand) * (size_t)n);
    double mx = l[ms_argmax(l, n)], sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        c[i].p = exp(((double)l[i] - mx) / (double)s->p.temperature);
        c[i].id = (int32_t)i;
        sum += c[i].p;
    }
    qsort(c, (size_t)n, sizeof *c, cand_cmp);
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
    free(c);
    free(adj);
    return pick;
}
