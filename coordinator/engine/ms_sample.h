/* ms_sample: next-token selection: greedy, or temperature with top-k, top-p and min-p cuts and a
 * seeded RNG; logit bias and presence/frequency penalties applied first. */
#ifndef MS_SAMPLE_H
#define MS_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

/* One logit_bias entry: bias is added to the logit of id. */
typedef struct {
    int32_t id;
    float bias;
} ms_logit_bias;

/* How to pick. Zero fields are "off"; temperature 0 is greedy. */
typedef struct {
    float temperature;        /* 0 = greedy: the first maximal (adjusted) logit */
    float top_p;              /* (0, 1]; 1 (or 0, taken as 1) = no nucleus cut */
    int top_k;                /* keep the k most probable tokens; 0 = all */
    float min_p;              /* keep tokens with p >= min_p * p_max; 0 = all */
    float presence_penalty;   /* subtracted once from the logit of every token generated so far */
    float frequency_penalty;  /* subtracted from a token's logit per time it was generated */
    const ms_logit_bias *bias; /* [n_bias] added to the logits (copied by ms_sampler_setup) */
    int n_bias;
} ms_sample_params;

typedef struct {
    ms_sample_params p;       /* p.bias owned (sorted by id) */
    uint64_t rng[4];          /* xoshiro256** state */
    int32_t *seen;            /* [n_seen] distinct tokens generated so far, with their counts */
    int32_t *seen_count;
    size_t n_seen, cap_seen;
} ms_sampler;

/* Initialise with settings and seed (same seed, same logits, same tokens accepted -> same
 * choices). ms_sampler_init is the temperature/top-p-only form. Free with ms_sampler_free. */
void ms_sampler_setup(ms_sampler *s, const ms_sample_params *p, uint64_t seed);
void ms_sampler_init(ms_sampler *s, float temperature, float top_p, uint64_t seed);
void ms_sampler_free(ms_sampler *s); /* accepts a zeroed sampler */
/* A deep copy (the RNG state and the counts included). */
void ms_sampler_copy(ms_sampler *dst, const ms_sampler *src);
/* 1 when the logits are changed before picking (a bias or a penalty is set). */
int ms_sampler_adjusts(const ms_sampler *s);
/* Record a generated token (the penalties count them). */
void ms_sampler_accept(ms_sampler *s, int32_t id);
/* Pick a token from logits[n] (not modified). The order: logit_bias added, penalties subtracted
 * (logit -= count * frequency_penalty + (count > 0) * presence_penalty); then greedy, or softmax at
 * the temperature, top-k, top-p (the fewest most probable of those whose mass, renormalised,
 * reaches it), min-p (of what is left, p >= min_p * p_max), renormalise and draw. Deterministic given the sampler state; does not record the token. */
int32_t ms_sampler_pick(ms_sampler *s, const float *logits, int64_t n);
/* Work memory of picks, kept from one to the next (grown to the largest n; about 36 bytes a
 * token of the vocabulary): its owner's picks allocate nothing once warm. One thread at a time. */
typedef struct {
    void *cand;  /* [2][cap] candidates and the sort's second buffer */
    float *adj;  /* [cap] adjusted logits */
    uint32_t *count; /* the sort's digit counts */
    int64_t cap;
} ms_sample_ws;
void ms_sample_ws_free(ms_sample_ws *w); /* accepts a zeroed one; leaves it zeroed */
/* ms_sampler_pick with w's memory (ms_sampler_pick makes and frees one): the same token. */
int32_t ms_sampler_pick_ws(ms_sampler *s, const float *logits, int64_t n, ms_sample_ws *w);
/* Index of the first maximal logit. */
int32_t ms_argmax(const float *logits, int64_t n);

#endif
