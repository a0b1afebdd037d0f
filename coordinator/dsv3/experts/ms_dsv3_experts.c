/* ms_dsv3_experts: DeepSeek-V3's and Kimi K2's row of the expert-family table: the config's expert fields, the descriptor (FP8 block-scaled or BF16 SwiGLU), where each expert's tensors are. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "ms_dsv3_experts.h"
#include "ms_err.h"
#include "ms_st.h"
#include "ms_xfp8.h"
#include "ms_xhf.h"

static int ds_detect(json_t *root)
{
    const char *s = json_string_value(json_object_get(root, "model_type"));
    return s && (!strcmp(s, "deepseek_v3") || !strcmp(s, "kimi_k2"));
}

typedef struct {
    int n_layers, n_dense, n_experts, top_k, hidden, inter;
} ds_fields;

#define F(n, t, m, lo, hi) {n, NULL, t, 0, 0, offsetof(ds_fields, m), lo, hi, NULL}
static const ms_jfield fields[] = {
    F("num_hidden_layers", MS_JF_INT, n_layers, 1, 1024),       F("first_k_dense_replace", MS_JF_INT, n_dense, 0, 1024),
    F("n_routed_experts", MS_JF_INT, n_experts, 1, 16384),      F("num_experts_per_tok", MS_JF_INT, top_k, 1, 64),
    F("hidden_size", MS_JF_INT, hidden, 1, 1 << 16),            F("moe_intermediate_size", MS_JF_INT, inter, 1, 1 << 18),
};
#undef F

static int ds_describe(ms_jcfg *j, ms_xmodel *out)
{
    json_t *root = ms_jcfg_root(j);
    ms_jscope sc = {{root}, {""}, 1, 0, "", 0};
    ds_fields v;
    memset(&v, 0, sizeof v);
    if (ms_jcfg_read(j, fields, sizeof fields / sizeof fields[0], &sc, &v, sizeof v) != 0) return -1;
    if (v.top_k > v.n_experts) {
        ms_jcfg_problem(j, "num_experts_per_tok = %d exceeds n_routed_experts = %d", v.top_k, v.n_experts);
        return -1;
    }
    if (v.n_dense >= v.n_layers) {
        ms_jcfg_problem(j, "first_k_dense_replace = %d leaves no MoE layer of %d", v.n_dense, v.n_layers);
        return -1;
    }
    int enc = ms_xquant_config_enc(j, root);
    if (!enc) return -1;
    /* the MTP layer (layer num_hidden_layers) routes like the others; the model reads one */
    out->draft_layers = json_integer_value(json_object_get(root, "num_nextn_predict_layers")) > 0;
    return ms_xmodel_set(out, v.n_layers, v.n_dense, v.n_experts, v.top_k,
                         ms_dsv3_experts_fmt(v.hidden, v.inter, enc, &out->fmt));
}

int ms_dsv3_experts_fmt(int hidden, int inter, int enc, ms_xfmt *f)
{
    return ms_xhf_swiglu_fmt(f, "deepseek-v3", hidden, inter, enc);
}

static int ds_make(const ms_xfmt *like, ms_xfmt *out)
{
    if (like->n_mats != 3 || like->n_params != 0) {
        ms_err_set("DeepSeek-V3 experts take 3 matrices and no activation constants");
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    return ms_dsv3_experts_fmt(like->latent, like->inter, like->mat[0].enc, out);
}

const ms_xfam ms_dsv3_experts = {"deepseek-v3", ds_detect, ds_describe, ms_xhf_locate, ds_make, ms_xhf_refine};
