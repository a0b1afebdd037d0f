/* ms_k3_tensors: the one list of Kimi K3's released tensors (names, shapes, dtypes, roles) that
 * the binder and the synthetic checkpoint writer both walk (spec §4.3). */
#ifndef MS_K3_TENSORS_H
#define MS_K3_TENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "ms_k3_cfg.h"
#include "ms_st.h"

#define MS_K3_PFX "language_model.model."

/* Which layers carry a tensor. */
typedef enum {
    MS_K3_MODEL,     /* once, outside the layers (full name in suffix) */
    MS_K3_ALL,       /* every layer */
    MS_K3_KDA,       /* KDA layers */
    MS_K3_MLA,       /* MLA layers */
    MS_K3_MLA_GATE,  /* MLA layers when mla_use_output_gate */
    MS_K3_DENSE,     /* dense (first_k_dense_replace) layers */
    MS_K3_MOE        /* MoE layers (trunk part; routed experts: ms_k3_expert_name) */
} ms_k3_where;

/* What a tensor is: how it is bound and how a synthetic one is drawn. */
typedef enum {
    MS_K3_MAT,        /* dense matrix [rows, cols], streamed or pinned */
    MS_K3_EMBED,      /* the embedding table [V, E]: bound as a matrix, read by rows */
    MS_K3_NORM,       /* RMSNorm gain vector */
    MS_K3_RESPROJ,    /* AttnRes projection, [1, E] as released ([E] accepted) */
    MS_K3_CONV,       /* short-convolution kernel [P, 1, K] */
    MS_K3_ALOG,       /* KDA A_log: at least Hk values, the first Hk are the heads */
    MS_K3_DTBIAS,     /* KDA dt_bias [P] */
    MS_K3_RBIAS       /* router e_score_correction_bias [Ne] */
} ms_k3_kind;

/* Dimensions, resolved against a config by ms_k3_dim. */
typedef enum {
    MS_K3_D1, MS_K3_DE, MS_K3_DP, MS_K3_DD, MS_K3_DHK, MS_K3_DK, MS_K3_DNA, MS_K3_DRQ, MS_K3_DQB, MS_K3_DKVA,
    MS_K3_DRKV, MS_K3_DKVB, MS_K3_DHV, MS_K3_DID, MS_K3_DNE, MS_K3_DL, MS_K3_DSI, MS_K3_DV
} ms_k3_dim;

typedef struct {
    const char *suffix;   /* after "language_model.model.layers.N." (MS_K3_MODEL: the full name) */
    ms_k3_where where;
    ms_k3_kind kind;
    ms_dtype dtype;       /* as released */
    int ndim;
    ms_k3_dim dim[3];
    size_t field;         /* offset of the destination in ms_layer_w (ms_mat or const float *), or in
                             the K3 model (k3_model) for MS_K3_MODEL entries */
} ms_k3_tensor;

/* The table, n entries, in the released file order of a layer (model-level entries last). */
const ms_k3_tensor *ms_k3_tensors(int *n);
/* 1 if entry t exists in zero-based layer `layer` (never for MS_K3_MODEL). */
int ms_k3_in_layer(const ms_k3_tensor *t, const ms_k3_cfg *c, int layer);
int64_t ms_k3_dim_value(const ms_k3_cfg *c, ms_k3_dim d);
/* Full name of entry t in layer `layer` into buf. */
void ms_k3_tensor_name(const ms_k3_tensor *t, int layer, char *buf, size_t n);

/* Routed expert e of layer l: matrix m (0 = w1 gate [I, L], 1 = w2 down [L, I], 2 = w3 up
 * [I, L]), part p (0 = weight_packed, 1 = weight_scale, 2 = dense weight of the fp32 oracle). */
void ms_k3_expert_name(int layer, int expert, int m, int p, char *buf, size_t n);

/* The dense trunk matrices of the checkpoint st (every 2-D BF16 matrix of the table but the
 * embedding and the routed experts, layer by layer, then the model-level ones): what a trunk
 * pack holds. *out is malloc'ed (the caller frees it), pointing into st. Returns the count. */
int ms_k3_trunk_matrices(const ms_k3_cfg *c, const ms_st *st, const ms_st_tensor ***out);

#endif
