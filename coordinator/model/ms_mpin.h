/* ms_mpin: pinned trunk matrices kept as their trunk-pack blocks in memory and decoded inside the matmul, as the streamed part is. */
#ifndef MS_MPIN_H
#define MS_MPIN_H

#include "ms_kern.h"
#include "ms_tpack.h"

/* The matrices are handed to the kernels as a stream that is always ready (ms_mat_stream):
 * one acquire gives all the rows as coded blocks, so every output is the same canonical dot as
 * from raw rows, and a budget pins about a third more of a trunk than raw BF16 would. Each
 * block's checksum is verified once, when it is added (just read from the pack); the kernels
 * then skip it (ms_bfc_decode_verified: the bytes stayed in memory, as raw pinned rows do,
 * which are never checked again either) and still check every block's layout. A block that
 * does not decode gives zero rows in that pass and is recorded: the forward pass's check
 * (ms_mpin_check) then fails naming the pack, tensor and block, so no answer is built on it. */
typedef struct ms_mpin ms_mpin;

/* A set for up to n matrices; pack_path names the pack in messages (borrowed, must outlive it). */
ms_mpin *ms_mpin_new(int n, const char *pack_path);
void ms_mpin_free(ms_mpin *p); /* accepts NULL; the matrices must not be used after */

/* Keep W (BF16 [t->rows, t->cols]) as the blocks of pack entry t, whose data (t->data_bytes
 * from t->data_off) is at src, after verifying every block's checksum: W->data becomes NULL and
 * W->stream this set's. t, src and name are borrowed and must outlive the set. Returns 0, or
 * -1 with ms_err set (MS_EXIT_MODEL) naming the tensor, the pack and the block, W unchanged. */
int ms_mpin_add(ms_mpin *p, ms_mat *W, const ms_tpack_tensor *t, const uint8_t *src, const char *name);

/* 0, or -1 with ms_err set (MS_EXIT_MODEL) if a block failed to decode since the set was made. */
int ms_mpin_check(const ms_mpin *p);

/* Bytes a pinned packed matrix holds: its blocks and the set's entry for it (the block table
 * stays in the pack's index, counted with it). */
uint64_t ms_mpin_bytes(const ms_tpack_tensor *t);

#endif
