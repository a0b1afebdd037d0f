/* ms_gptoss_experts: gpt-oss's routed experts for everything that handles experts without the model: its row of the expert-family table. */
#ifndef MS_GPTOSS_EXPERTS_H
#define MS_GPTOSS_EXPERTS_H

#include "ms_xfam.h"

/* gpt-oss's routed experts (its spec §3.4, §4): gate_up [2I, H] (gate and up rows interleaved)
 * and down [H, I], both MXFP4 with a bias, and the clamped SwiGLU (alpha 1.702, limit
 * swiglu_limit). In a checkpoint each part is slice e of a per-layer tensor [E, ...]:
 * model.layers.L.mlp.experts.{gate_up_proj,down_proj}_{blocks,scales,bias}. */
extern const ms_xfam ms_gptoss_experts;
/* The descriptor for hidden width H, expert width I, clamp limit and bias dtype (F32 or BF16).
 * Returns 0, or -1 with ms_err set (MS_EXIT_MODEL) if H or I is not a positive multiple of 32. */
int ms_gptoss_experts_fmt(int hidden, int inter, float limit, int bias_dtype, ms_xfmt *f);

#endif
