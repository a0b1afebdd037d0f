/* ms_gqa: grouped-query attention with a KV cache: biases, per-head q/k RMSNorm, RoPE, sinks, sliding windows. */
#ifndef MS_GQA_H
#define MS_GQA_H

#include "ms_arena.h"
#include "ms_kern.h"
#include "ms_kv.h"
#include "ms_pool.h"
#include "ms_rope.h"
#include "ms_rows.h"

/* A layer's shape (a value). */
typedef struct {
    int n_heads, n_kv, head_dim; /* query heads, KV heads (n_heads % n_kv == 0), their width */
    int64_t window;              /* a row sees the last `window` positions, itself included; 0: all */
    float eps;                   /* of the per-head norms */
} ms_gqa;

/* A layer's weights: borrowed views, owned by the family's model. */
typedef struct {
    ms_mat q, k, v, o;              /* [nh*d, H], [nkv*d, H], [nkv*d, H], [H, nh*d] */
    const float *bq, *bk, *bv, *bo; /* [nh*d], [nkv*d], [nkv*d], [H], or NULL */
    const float *q_norm, *k_norm;   /* [d] RMSNorm of each head before the rotation (Qwen3), or NULL */
    const float *sinks;             /* [nh] a learned logit per head in each softmax's denominator
                                       (gpt-oss), or NULL */
} ms_gqa_w;

/* Floats of arena ms_gqa_forward takes for R rows (returned on exit). */
size_t ms_gqa_work_floats(const ms_gqa *a, int64_t R);
/* Bytes of scratch each pool thread takes attending rows that see up to `positions` keys. */
uint64_t ms_gqa_thread_bytes(const ms_gqa *a, int64_t positions);

/* Attention of R rows x[R][H] (already normed) from n sequences: segment i is rows
 * seg[i].r0 .. + seg[i].T at positions p0[i].. with the cache kv[i]. Projections (+ biases),
 * per-head norms, the rotation (rope NULL: none), each row over the cache and the rows up to
 * its own in its sequence, then the rows' keys and values join the cache; out[R][H] = o(.) + bo.
 * Every score and output sums in double in key order, a head and a key at a time, whatever
 * the grouping of rows, threads or tiles. */
void ms_gqa_forward(const ms_gqa *a, const ms_gqa_w *w, const ms_rope *rope, ms_kv *const *kv, const int64_t *p0,
                    const ms_rows *seg, int n, const float *x, int64_t R, float *out, ms_arena *ar, ms_pool *pool);

/* The attention alone: T rows q[T][nh*d] (rotated) at positions p0.. over kv (positions < p0)
 * and the rows' own keys and values k, v [T][nkv*d]: out[T][nh*d]. The cache is not changed. */
void ms_gqa_attend(const ms_gqa *a, const float *sinks, const ms_kv *kv, const float *q, const float *k, const float *v,
                   int64_t p0, int64_t T, float *out, ms_pool *pool);

#endif
