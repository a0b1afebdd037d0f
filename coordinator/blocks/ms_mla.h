/* ms_mla: Multi-head Latent Attention with a compressed cache (DeepSeek-V3, Kimi K2, Kimi K3's gated NoPE form). */
#ifndef MS_MLA_H
#define MS_MLA_H

#include "ms_kern.h"
#include "ms_pool.h"
#include "ms_rope.h"
#include "ms_rows.h"
#include "ms_arena.h"
#include "ms_sbuf.h"

/* A layer's shape (a value; rotary is borrowed). dq = qk_nope + qk_rope. */
typedef struct {
    int heads;              /* H */
    int q_lora;             /* Rq: the query's low rank (qa, its RMSNorm, qb) */
    int kv_lora;            /* Rkv: the cached latent's width */
    int qk_nope, qk_rope;   /* dn, dr: a head's query and key widths without and with position */
    int v_head;             /* dv */
    int out_gate;           /* 1: the heads' output times sigmoid(g x) before o (Kimi K3) */
    double scale;           /* of the scores: 1/sqrt(dq), times YaRN's m^2 where a model says so */
    const ms_rope *rotary;  /* rotates each head's query rope part and the shared rope key at
                               their positions (DeepSeek: interleaved pairs); NULL: none (K3) */
    float eps;              /* of the two RMSNorms */
} ms_mla_cfg;

/* Borrowed weights of one MLA layer. dq = dn + dr. */
typedef struct {
    ms_mat qa;           /* [Rq, E] */
    ms_mat qb;           /* [H*dq, Rq] */
    ms_mat kva;          /* [Rkv+dr, E] */
    ms_mat kvb;          /* [H*(dn+dv), Rkv] */
    ms_mat o;            /* [E, H*dv] */
    ms_mat g;            /* [H*dv, E]; data NULL when the output gate is off */
    const float *qa_norm;  /* [Rq] */
    const float *kva_norm; /* [Rkv] */
    ms_mat_buf *kvb_buf;   /* where a streamed kvb is pulled whole each pass (shared by the layers,
                            * owned by the model); NULL: a buffer of its own each time */
} ms_mla_w;

/* Per-sequence KV cache of one MLA layer in the compressed form: per position the normalised
 * latent and the shared rope key (rotated at its position when the layer rotates). Owned. */
typedef struct {
    int64_t n, cap;   /* positions cached, capacity */
    float *lat;       /* [cap][Rkv] */
    float *rope;      /* [cap][dr] */
} ms_mla_cache;

/* Bytes of a cache of n positions (ms_mla_cache_reserve). */
uint64_t ms_mla_cache_bytes(const ms_mla_cfg *c, int64_t n);
/* dst (uninitialised) := a copy of src with the same capacity. */
void ms_mla_cache_copy(ms_mla_cache *dst, const ms_mla_cache *src, const ms_mla_cfg *c);
/* Bytes one thread of the attention allocates for sequences of up to `positions` (outside the
 * pass's arena: the planner counts them per thread). */
uint64_t ms_mla_thread_bytes(const ms_mla_cfg *c, int64_t positions);
void ms_mla_cache_init(ms_mla_cache *kc);
void ms_mla_cache_reset(ms_mla_cache *kc);
/* Make room for n positions now (so the memory plan holds; the cache still grows if needed). */
void ms_mla_cache_reserve(ms_mla_cache *kc, const ms_mla_cfg *c, int64_t n);
void ms_mla_cache_free(ms_mla_cache *kc); /* accepts NULL */
/* A sequence's cache as bytes appended to out: its positions (int64), the latents, the rope keys. */
void ms_mla_cache_save(const ms_mla_cache *kc, const ms_mla_cfg *c, ms_sbuf *out);
/* Read back what ms_mla_cache_save wrote for a sequence at position pos: 0; -1 when it does not
 * fit (another count or width, cut short); -2 when it holds a non-finite value. */
int ms_mla_cache_load(ms_mla_cache *kc, const ms_mla_cfg *c, int64_t pos, ms_reader *in);

/* The MLA module for T consecutive tokens at positions kc->n .. kc->n+T-1 (causal), appending
 * them to the cache. x: float[T][E] (input_layernorm output), out: float[T][E].
 * Returns 0, or -1 when a streamed weight could not be read (ms_err set by the streamer). */
int ms_mla_forward(const ms_mla_cfg *c, const ms_mla_w *w, ms_mla_cache *kc, const float *x, int64_t T, float *out,
                    ms_pool *pool);
/* The MLA module for a batched pass of R rows made of n_seg sequences: segment s is rows
 * seg[s] of x and continues cache kc[s]. Projections run once over all R rows; cache appends
 * and attention run per sequence. Same return as ms_mla_forward. */
int ms_mla_forward_batch(const ms_mla_cfg *c, const ms_mla_w *w, ms_mla_cache *const *kc, const ms_rows *seg, int n_seg,
                         const float *x, int64_t R, float *out, ms_arena *ar, ms_pool *pool);
/* Scratch floats ms_mla_forward_batch takes from its arena for R rows (returned on exit). The
 * per-thread attention rows and a streamed kv_b pulled whole are counted apart by the planner. */
size_t ms_mla_work_floats(const ms_mla_cfg *c, int64_t R);

#endif
