/* ms_sample: greedy and temperature/top-p sampling with xoshiro256** seeded by splitmix64. */
#include <math.h>
#include <stdlib.h>

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

void ms_sampler_init(ms_sampler *s, float temperature, float top_p, uint64_t seed)
{
    s->temperature = temperature;
    s->top_p = top_p;
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
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

int32_t ms_sampler_pick(ms_sampler *s, const float *logits, int64_t n)
{
    if (s->temperature <= 0.0f) return ms_argmax(logits, n);
    cand *c = ms_malloc(sizeof(cand) * (size_t)n);
    double mx = logits[ms_argmax(logits, n)], sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        c[i].p = exp(((double)logits[i] - mx) / (double)s->temperature);
        c[i].id = (int32_t)i;
        sum += c[i].p;
    }
    qsort(c, (size_t)n, sizeof *c, cand_cmp);
    /* Keep the smallest prefix whose mass reaches top_p. */
    int64_t keep = n;
    if (s->top_p < 1.0f) {
        double cum = 0.0;
        for (int64_t i = 0; i < n; i++) {
            cum += c[i].p / sum;
            if (cum >= (double)s->top_p) {
                keep = i + 1;
                break;
            }
        }
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
    return pick;
}
