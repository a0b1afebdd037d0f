/* ms_k3_experts: Kimi K3's routed experts for everything that handles experts without the model: its row of the expert-family table. */
#ifndef MS_K3_EXPERTS_H
#define MS_K3_EXPERTS_H

#include "ms_xfam.h"

/* Kimi K3's routed experts: three MXFP4 matrices w1 (gate) [I, L], w2 (down)
 * [L, I], w3 (up) [I, L] (six U8 parts "w1.weight_packed", "w1.weight_scale", ...) and
 * SiTU-GLU with beta b1 and linear beta b2. Returns 0, or -1 with ms_err set (MS_EXIT_MODEL) if
 * L or I is not a positive multiple of 32. */
extern const ms_xfam ms_k3_experts;
int ms_k3_experts_fmt(int latent, int inter, float b1, float b2, ms_xfmt *f);
/* The one spelling of a K3 expert tensor: "...layers.L.block_sparse_moe.experts.E.SUFFIX". */
int ms_k3_experts_tensor(int layer, int expert, const char *suffix, char *buf, size_t n);

#endif
