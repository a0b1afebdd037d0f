/* ms_qwen3_experts: Qwen3-MoE's routed experts for everything that handles experts without the model: its row of the expert-family table. */
#ifndef MS_QWEN3_EXPERTS_H
#define MS_QWEN3_EXPERTS_H

#include <stdint.h>

#include "ms_xfam.h"

/* Qwen3-MoE's routed experts (its spec §3.4, §4): three tensors per expert,
 * model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight, gate and up [I, H], down [H, I],
 * plain SwiGLU, no biases; BF16 as released, or F8_E4M3 with a weight_scale_inv per 128 x 128
 * block, F32 or BF16 (the -FP8 releases, quantization_config.quant_method "fp8"; the grids'
 * dtype is read from the checkpoint by the row's refine). */
extern const ms_xfam ms_qwen3_experts;

/* The descriptor for hidden width H and expert width I, encoding MS_XENC_BF16, MS_XENC_FP8 or
 * MS_XENC_FP8_BF16S.
 * Returns 0, or -1 with ms_err set (MS_EXIT_MODEL). */
int ms_qwen3_experts_fmt(int hidden, int inter, int enc, ms_xfmt *f);

/* Layer l's kind as the official config class decides it: 1 if it is a MoE layer (l not in
 * mlp_only_layers, num_experts > 0 and (l + 1) % decoder_sparse_step == 0), 0 if a dense MLP.
 * mlp_only: [n_layers] 1 for a listed layer (NULL: none). */
int ms_qwen3_layer_is_moe(int l, int n_experts, int sparse_step, const uint8_t *mlp_only);

#endif
