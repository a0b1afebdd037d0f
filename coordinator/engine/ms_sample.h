/* ms_sample: next-token selection: greedy, or temperature + nucleus (top-p) with a seeded RNG. */
#ifndef MS_SAMPLE_H
#define MS_SAMPLE_H

#include <stdint.h>

typedef struct {
    float temperature; /* 0 = greedy (argmax, first maximal index on ties) */
    float top_p;       /* (0, 1]; 1 = no nucleus cut */
    uint64_t rng[4];   /* xoshiro256** state */
} ms_sampler;

/* Initialise with settings and seed (same seed, same logits -> same choices). */
void ms_sampler_init(ms_sampler *s, float temperature, float top_p, uint64_t seed);
/* Pick a token from logits[n]. Deterministic given the sampler state. */
int32_t ms_sampler_pick(ms_sampler *s, const float *logits, int64_t n);
/* Index of the first maximal logit. */
int32_t ms_argmax(const float *logits, int64_t n);

#endif
