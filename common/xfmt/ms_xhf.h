/* ms_xhf: routed experts stored as Hugging Face checkpoints of DeepSeek-V3, Kimi K2 and Qwen3-MoE keep them: one tensor per matrix and expert, FP8 scale grids beside them. */
#ifndef MS_XHF_H
#define MS_XHF_H

#include <stddef.h>

#include "ms_xfmt.h"

struct ms_st;

/* The descriptor of SwiGLU experts (gate, up [I, H], down [H, I], no biases) stored as
 * model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight (+ .weight_scale_inv for FP8), for
 * the family named `family`, encoding MS_XENC_BF16, MS_XENC_FP8 or MS_XENC_FP8_BF16S.
 * 0, or -1 with ms_err set (MS_EXIT_MODEL). */
int ms_xhf_swiglu_fmt(ms_xfmt *f, const char *family, int hidden, int inter, int enc);

/* ms_xfam.locate for that layout: part k of (layer, expert) is the whole tensor
 * model.layers.L.mlp.experts.E.<part name>. */
int ms_xhf_locate(const ms_xfmt *f, int layer, int expert, int part, char *name, size_t n, int *slice, int *n_slices);

/* ms_xfam.refine for that layout: an FP8 descriptor takes the dtype of layer first_moe's expert
 * 0 gate scale grid (F32 or BF16) as the checkpoint stores it. 0; 1 when st has no such tensor;
 * -1 with ms_err set. */
int ms_xhf_refine(ms_xfmt *f, int first_moe, const struct ms_st *st);

#endif
