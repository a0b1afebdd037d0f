/* ms_kda: Kimi Delta Attention (spec §3.5) with its recurrent and short-conv decode state. */
#ifndef MS_KDA_H
#define MS_KDA_H

#include "ms_k3_cfg.h"
#include "ms_kern.h"
#include "ms_pool.h"
#include "ms_rows.h"
#include "ms_arena.h"

/* Borrowed weights of one KDA layer. P = Hk*D. */
typedef struct {
    ms_mat q, k, v, g;   /* [P, E] */
    ms_mat o;            /* [E, P] */
    ms_mat fa;           /* [D, E] */
    ms_mat fb;           /* [P, D] */
    ms_mat b;            /* [Hk, E] */
    const float *q_conv, *k_conv, *v_conv; /* [P][K] */
    const float *A_log;  /* [Hk] (first Hk values of the released tensor) */
    const float *dt_bias;/* [P] */
    const float *o_norm; /* [D] */
} ms_kda_w;

/* Per-sequence state of one KDA layer, owned. */
typedef struct {
    float *S;              /* [Hk][D][D]: row = key channel, column = value channel */
    float *hq, *hk, *hv;   /* [P][K-1] raw pre-conv inputs, oldest first */
    /* A speculative pass (ms_kda_spec_begin .. ms_kda_spec_end): the state before it and each
     * row's recurrence inputs, so that rejected rows can be undone exactly. */
    float *S0, *h0;        /* [Hk][D][D], [3][P][K-1] (hq, hk, hv) before the pass */
    float *rec;            /* [cap_rec][MS_KDA_REC(P, Hk)]: per row raw q, k, v, then the
                              recurrence's q, k, v, alpha [P] each and beta [Hk] */
    int64_t cap_rec, n_rec;
    int recording;
} ms_kda_state;

/* Floats recorded per row of a speculative pass. */
#define MS_KDA_REC(P, Hk) (7 * (size_t)(P) + (size_t)(Hk))

/* Speculative passes. reserve: room for passes of up to rows rows (allocates once). begin:
 * remember the state and record the rows of the next ms_kda_forward_batch. end: keep the
 * first keep rows recorded (1 <= keep <= rows recorded): if fewer than all, the state is
 * restored and the kept rows' short convolutions and recurrence are replayed from the record,
 * so it is bit for bit the state a pass of only those rows leaves. */
void ms_kda_spec_reserve(ms_kda_state *st, const ms_k3_cfg *c, int64_t rows);
void ms_kda_spec_begin(ms_kda_state *st, const ms_k3_cfg *c);
void ms_kda_spec_end(ms_kda_state *st, const ms_k3_cfg *c, const ms_kda_w *w, int64_t keep, ms_pool *pool);
/* Bytes one sequence's KDA layer needs for speculative passes of up to rows rows (planner). */
uint64_t ms_kda_spec_bytes(const ms_k3_cfg *c, int64_t rows);

/* Bytes ms_kda_state_init allocates for one layer's state. */
uint64_t ms_kda_state_bytes(const ms_k3_cfg *c);
/* dst (uninitialised) := a copy of the settled state src (no speculative pass open). */
void ms_kda_state_copy(ms_kda_state *dst, const ms_kda_state *src, const ms_k3_cfg *c);
/* Buffers a KDA layer allocates outside the pass's arena (the planner's fixed costs). */
uint64_t ms_kda_fixed_bytes(const ms_k3_cfg *c);
void ms_kda_state_init(ms_kda_state *st, const ms_k3_cfg *c);  /* allocates, zeroed */
void ms_kda_state_reset(ms_kda_state *st, const ms_k3_cfg *c); /* zero */
void ms_kda_state_free(ms_kda_state *st);                   /* accepts NULL */

/* Decay (spec §3.5 step 4) from z[P] (= fb*(fa*x), before dt_bias): alpha[P] = exp(g),
 * g = lb * sigmoid(exp(A_log[h]) * (z + dt_bias)). g_out may be NULL. */
void ms_kda_decay(const float *z, const float *A_log, const float *dt_bias, int Hk, int D, float lb, float *g_out,
                  float *alpha);

/* One recurrence step for all heads (spec §3.5 step 6). q must already be scaled by D^-1/2.
 * S: [Hk][D][D]; q, k, v, alpha: [Hk*D]; beta: [Hk]; o: [Hk*D]. */
void ms_kda_recur_step(float *S, int Hk, int D, const float *q, const float *k, const float *v, const float *alpha,
                       const float *beta, float *o);

/* The whole KDA module for a batched pass of R rows made of n_seg sequences: segment s is
 * rows seg[s] of x and continues the state st[s]. Projections run once over all R rows (each
 * weight read once); the short convolutions and the recurrence run per sequence, so a row's
 * output never depends on the other sequences. x: float[R][E] (the input_layernorm output),
 * out: float[R][E]. */
void ms_kda_forward_batch(const ms_k3_cfg *c, const ms_kda_w *w, ms_kda_state *const *st, const ms_rows *seg,
                          int n_seg, const float *x, int64_t R, float *out, ms_arena *ar, ms_pool *pool);
/* Scratch floats ms_kda_forward_batch takes from its arena for R rows (returned on exit). */
size_t ms_kda_work_floats(const ms_k3_cfg *c, int64_t R);
/* One sequence: T consecutive tokens carrying state (ms_kda_forward_batch with one segment). */
void ms_kda_forward(const ms_k3_cfg *c, const ms_kda_w *w, ms_kda_state *st, const float *x, int64_t T, float *out,
                    ms_pool *pool);

#endif
