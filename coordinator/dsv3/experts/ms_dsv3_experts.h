/* ms_dsv3_experts: DeepSeek-V3's (and Kimi K2's) routed experts for everything that handles experts without the model: its row of the expert-family table. */
#ifndef MS_DSV3_EXPERTS_H
#define MS_DSV3_EXPERTS_H

#include "ms_xfam.h"

/* DeepSeek-V3 / Kimi K2 routed experts (their spec §3.5, §4): three tensors per expert,
 * model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight, gate and up [I, H], down [H, I],
 * plain SwiGLU, no biases; F8_E4M3 with a weight_scale_inv per 128 x 128 block as released (F32,
 * or BF16: the grids' dtype read from the checkpoint), or BF16 in a dequantised copy. Layers
 * [first_k_dense_replace, num_hidden_layers) route; the MTP layer's experts are not among them. */
extern const ms_xfam ms_dsv3_experts;

/* The descriptor for hidden width H and expert width I, encoding MS_XENC_BF16, MS_XENC_FP8 or
 * MS_XENC_FP8_BF16S. Returns 0, or -1 with ms_err set (MS_EXIT_MODEL). */
int ms_dsv3_experts_fmt(int hidden, int inter, int enc, ms_xfmt *f);

#endif
