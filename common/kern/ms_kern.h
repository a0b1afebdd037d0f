/* ms_kern: numeric kernels for f32, bf16, MXFP4, FP8 and INT4 weight matrices (scalar, AVX2+FMA, AVX-512). */
#ifndef MS_KERN_H
#define MS_KERN_H

#include <stddef.h>
#include <stdint.h>

#include "ms_pool.h"

/* Floating-point contract (ARCHITECTURE invariant 1, spec §0), two kinds of sums:
 *
 * Weight matmuls (ms_matmul, ms_matvec: every y = W x of the model, the experts included) are
 * FP32 with fused multiply-adds, in ONE canonical order per output element: sixteen float
 * lanes a[0..15] start at +0; element i of the row (decoded exactly to float) and of x goes into
 * lane i % 16 as a[i % 16] = fmaf(w[i], x[i], a[i % 16]), in increasing i; then the fixed tree
 * s8[j] = a[j] + a[j + 8] (j < 8), s4[j] = s8[j] + s8[j + 4] (j < 4), y = (s4[0] + s4[2]) +
 * (s4[1] + s4[3]). The scalar path does exactly this with fmaf (ms_gemm_dot); the AVX2 path
 * keeps a dot's lanes in two ymm registers, the AVX-512 path in one zmm, and both finish the
 * tail (cols % 16) and the tree as the scalar path does. (Which register position holds which
 * lane may differ: for MXFP4 the decodes yield lanes paired (AVX-512) or grouped by i % 4
 * (AVX2), for BF16 on AVX2 lanes 0-3 and 8-11 in one register and 4-7 and 12-15 in the other;
 * the token rows are permuted to match and the trees add the same lanes.) The lane count is 16 so that every
 * path holds whole lanes, and the order depends on nothing else: not on T or how rows and
 * tokens are tiled, the thread count, the instruction set, the budget, streamed or resident,
 * packed or raw rows, or which worker computes. (Before this contract the sums were in double:
 * the logits of every model changed once, at the commit that made it.)
 *
 * Other dot products and sums of squares (ms_dot_f32: norms, attention scores, routers) are
 * accumulated in double: eight double accumulators acc[0..7], element i added to acc[i % 8]
 * in increasing i (acc[j] += (double)a[i] * (double)b[i], exact products), combined as
 * ((acc0+acc1)+(acc2+acc3)) + ((acc4+acc5)+(acc6+acc7)) and rounded to float by the caller.
 * Both contracts are the same on every path; a result never depends on the thread count (work
 * is split by output rows only).
 *
 * The gated MLP activation of ms_act.h takes its exp and tanh from one fixed sequence in double each,
 * rounded to float once, the same on every path (ms_act.h); other elementwise functions call
 * libm's float functions, on every path alike. */

typedef enum {
    MS_WT_F32 = 0,  /* data: float[rows][cols] */
    MS_WT_BF16 = 1, /* data: uint16_t[rows][cols], bf16 bit patterns */
    MS_WT_MXFP4 = 2, /* data: uint8_t[rows][cols/2] packed E2M1 (low nibble = even column),
                       scales: uint8_t[rows][cols/32] E8M0 (2^(s-127); s = 255 gives 0) */
    MS_WT_FP8 = 3,  /* data: uint8_t[rows][cols] E4M3 codes; scales: the bytes of
                       float[ceil(rows/128)][ceil(cols/128)], one per 128 x 128 block, multiplied
                       (ms_fp8.h). Computed as the F32 kernels compute the dequantised matrix. */
    MS_WT_INT4 = 4  /* data: uint8_t[rows][cols/2] packed nibbles u (low nibble = even column),
                       scales: the bytes of uint16_t[rows][cols/32] BF16; value (u - 8) * scale
                       (ms_int4.h); cols % 32 == 0. Computed as the F32 kernels compute the
                       dequantised matrix. */
} ms_wtype;

/* BF16 rows still coded as ms_bfc blocks (a trunk pack's chunk): rows_per_block rows a block
 * (the last may hold fewer), block b at src + (b ? end[b - 1] : 0) .. src + end[b]. The kernel
 * decodes each block (or, for many tokens, a group of about 16 rows) into a small per-thread
 * buffer just before its dot products, so decoded rows never go to memory. A block that does
 * not decode (checksum, layout) gives zero rows and its index is stored in bad_block (-1 when
 * none; written with __atomic builtins). verified: 1 when every block passed ms_bfc_verify after
 * it was read and has stayed in memory since (a pinned matrix): the kernel then skips the
 * checksums (about a quarter of a one-token decode) and still checks each block's layout; 0 for
 * blocks just read (streamed): checked every use. */
typedef struct {
    const uint8_t *src;
    const uint64_t *end;   /* [n_blocks] */
    int64_t rows_per_block;
    int n_blocks;
    int bad_block;
    int verified;
} ms_mat_packed;

/* A source of a matrix that is not resident: it hands out consecutive row ranges that are,
 * in order (the trunk streamer). acquire returns 0 and sets rows [*r0, *r1) with their data
 * (and MXFP4 scales), or for BF16 with *packed set (data NULL) their coded blocks, valid until
 * release; or -1 after recording an error the caller of the forward pass will see (the kernel
 * then writes zeros for those rows). packed may be NULL: the stream must then not hand out
 * coded rows. */
typedef struct ms_mat_stream {
    int (*acquire)(void *ctx, const void *key, int64_t *r0, int64_t *r1, const void **data, const uint8_t **scales,
                   ms_mat_packed **packed);
    void (*release)(void *ctx, const void *key);
    void *ctx;
    int resident;  /* 1: every acquire is served at once from memory, in any order (pinned blocks) */
} ms_mat_stream;

/* A borrowed view of a weight matrix W[rows, cols]: y = W x means y[r] = sum_c W[r][c] x[c].
 * The view does not own data or scales. When data is NULL and stream is set, ms_matmul
 * pulls the rows chunk by chunk from the stream (key identifies the matrix to it); every
 * output element is the same canonical dot as with resident data. */
typedef struct {
    ms_wtype type;
    int64_t rows, cols;
    const void *data;
    const uint8_t *scales; /* MXFP4 only, else NULL */
    const ms_mat_stream *stream;
    const void *key;
} ms_mat;

/* 1 if W can be used out of the order of its stream: its rows are in memory (raw, or pinned
 * blocks), not streamed. */
static inline int ms_mat_resident(const ms_mat *W) { return W->data != NULL || (W->stream && W->stream->resident); }

/* Build the decoding tables and detect the CPU (ms_cpu) once; idempotent, thread-safe after
 * the first call returns. The SIMD path's switch: ms_cpu.h. */
void ms_kern_init(void);

/* bf16 bits -> float (exact: shift left 16). */
static inline float ms_bf16_to_f32(uint16_t h)
{
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)h << 16;
    return v.f;
}
/* IEEE half bits -> float (exact, handles subnormals, inf, NaN). */
float ms_f16_to_f32(uint16_t h);
/* float -> bf16 by truncation (drop the low 16 bits), as the released tools do. */
uint16_t ms_f32_to_bf16_trunc(float f);

/* The E2M1 value of nibble n (0..15): 0,0.5,1,1.5,2,3,4,6 and their negatives. */
float ms_e2m1_value(unsigned n);
/* Dequantise one MXFP4 row of `cols` logical elements (cols % 32 == 0) into out[cols].
 * Exact. packed: uint8[cols/2]; scales: uint8[cols/32]. */
void ms_mxfp4_dequant_row(const uint8_t *packed, const uint8_t *scales, int64_t cols, float *out);

/* Decode row r of W into out[W->cols] as float (exact for every type). */
void ms_mat_row_f32(const ms_mat *W, int64_t r, float *out);

/* Canonical double-accumulated dot product (see the contract above), not yet rounded. */
double ms_dot_f32(const float *a, const float *b, int64_t n);
/* The canonical FP32 dot of a weight row w (already float) and x: what ms_matmul gives for one
 * element (scalar, with fmaf; the reference of the SIMD paths). */
float ms_gemm_dot(const float *w, const float *x, int64_t n);

/* Y[t][r] = the canonical FP32 dot (above) of row r of W and X[t] for t < T, r < W->rows.
 * X: float[T][W->cols], Y: float[T][W->rows] (must not alias X). pool may be NULL.
 * The result of each element is the same for every T, thread count and SIMD setting. */
void ms_matmul(const ms_mat *W, const float *X, int64_t T, float *Y, ms_pool *pool);

/* A resident view of W: W itself when resident, else the whole matrix pulled from its stream
 * into *owned (malloc'ed; caller frees; NULL when W is resident). Returns 0, or -1 when the
 * stream failed (the view is then zero-filled). */
int ms_mat_materialize(const ms_mat *W, ms_mat *out, void **owned);
/* A buffer kept for ms_mat_materialize_in: grown to the largest matrix pulled into it, so a
 * matrix pulled every pass is allocated once. */
typedef struct {
    uint8_t *p; /* [cap] owned */
    size_t cap;
} ms_mat_buf;
void ms_mat_buf_free(ms_mat_buf *b); /* accepts a zeroed one; leaves it zeroed */
/* ms_mat_materialize into b (out points into it until b's next use): the same view and result. */
int ms_mat_materialize_in(const ms_mat *W, ms_mat *out, ms_mat_buf *b);

/* Recording the order of matrix use. While a trace is active on the calling thread, every
 * ms_matmul and ms_mat_materialize appends its matrix to it; a call with T = 0 (a pass of no
 * rows) then does nothing else, so a zero-row forward pass lists the matrices in the exact
 * order a real pass uses them: that list is the trunk streaming schedule. */
typedef struct {
    const ms_mat **mats;  /* [n] in order of use, malloc'ed; the caller frees */
    int n, cap;
} ms_mat_trace;
void ms_mat_trace_begin(ms_mat_trace *t); /* t zero-initialised */
void ms_mat_trace_end(void);

/* Same as ms_matmul with T = 1. */
void ms_matvec(const ms_mat *W, const float *x, float *y, ms_pool *pool);

/* Bytes of the matrix data (+ scales) as stored. */
uint64_t ms_mat_bytes(const ms_mat *W);

#endif
