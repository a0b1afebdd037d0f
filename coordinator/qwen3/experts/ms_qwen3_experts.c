/* ms_qwen3_experts: Qwen3-MoE's row of the expert-family table: its config's expert fields, its descriptor (BF16 or FP8 block-scaled SwiGLU), where each expert's tensors are. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "ms_err.h"
#include "ms_st.h"
#include "ms_qwen3_experts.h"
#include "ms_xfp8.h"
#include "ms_xhf.h"

static int qw_detect(json_t *root)
{
    const char *s = json_string_value(json_object_get(root, "model_type"));
    return s && !strcmp(s, "qwen3_moe");
}

int ms_qwen3_layer_is_moe(int l, int n_experts, int sparse_step, const uint8_t *mlp_only)
{
    if (mlp_only && mlp_only[l]) return 0;
    return n_experts > 0 && sparse_step > 0 && (l + 1) % sparse_step == 0;
}

typedef struct {
    int n_layers, n_experts, top_k, hidden, inter, step;
} qw_fields;

#define F(n, a, t, m, lo, hi) {n, a, t, 0, 0, offsetof(qw_fields, m), lo, hi, NULL}
static const ms_jfield fields[] = {
    F("num_hidden_layers", NULL, MS_JF_INT, n_layers, 1, 1024),
    F("num_experts", "num_local_experts", MS_JF_INT, n_experts, 1, 16384),
    F("num_experts_per_tok", NULL, MS_JF_INT, top_k, 1, 64),
    F("hidden_size", NULL, MS_JF_INT, hidden, 1, 1 << 16),
    F("moe_intermediate_size", NULL, MS_JF_INT, inter, 1, 1 << 18),
    F("decoder_sparse_step", NULL, MS_JF_INT, step, 1, 1024),
};
#undef F

/* The MoE layers must be the last ones, from the first on (the expert store's layout: layers
 * [first_moe, n_layers) route); every release routes in every layer. */
static int moe_suffix(ms_jcfg *j, json_t *root, const qw_fields *v, int *first_moe)
{
    uint8_t only[1024];
    memset(only, 0, sizeof only);
    json_t *mo = json_object_get(root, "mlp_only_layers");
    if (!mo) {
        ms_jcfg_missing(j, "mlp_only_layers");
        return -1;
    }
    size_t i;
    json_t *x;
    json_array_foreach(mo, i, x)
    {
        int l;
        if (ms_jcfg_as_int(x, &l) != 0 || l < 0 || l >= v->n_layers) {
            ms_jcfg_problem(j, "mlp_only_layers[%zu] must be a layer index 0..%d", i, v->n_layers - 1);
            return -1;
        }
        only[l] = 1;
    }
    if (!json_is_array(mo)) {
        ms_jcfg_problem(j, "mlp_only_layers must be an array of layer indexes");
        return -1;
    }
    int first = v->n_layers;
    for (int l = 0; l < v->n_layers; l++)
        if (ms_qwen3_layer_is_moe(l, v->n_experts, v->step, only)) {
            if (first == v->n_layers) first = l;
        } else if (first < v->n_layers) {
            ms_jcfg_problem(j, "layer %d is dense after MoE layer %d (mlp_only_layers, decoder_sparse_step = %d): "
                               "dense layers are read only before the first MoE layer",
                            l, first, v->step);
            return -1;
        }
    if (first == v->n_layers) {
        ms_jcfg_problem(j, "no layer routes (mlp_only_layers, decoder_sparse_step = %d)", v->step);
        return -1;
    }
    *first_moe = first;
    return 0;
}

static int qw_describe(ms_jcfg *j, ms_xmodel *out)
{
    json_t *root = ms_jcfg_root(j);
    ms_jscope sc = {{root}, {""}, 1, 0, "", 1};
    qw_fields v;
    memset(&v, 0, sizeof v);
    if (ms_jcfg_read(j, fields, sizeof fields / sizeof fields[0], &sc, &v, sizeof v) != 0) return -1;
    if (v.top_k > v.n_experts) {
        ms_jcfg_problem(j, "num_experts_per_tok = %d exceeds num_experts = %d", v.top_k, v.n_experts);
        return -1;
    }
    int first = 0, enc = ms_xfp8_config_enc(j, root);
    if (!enc || moe_suffix(j, root, &v, &first) != 0) return -1;
    return ms_xmodel_set(out, v.n_layers, first, v.n_experts, v.top_k, ms_qwen3_experts_fmt(v.hidden, v.inter, enc, &out->fmt));
}

int ms_qwen3_experts_fmt(int hidden, int inter, int enc, ms_xfmt *f)
{
    return ms_xhf_swiglu_fmt(f, "qwen3-moe", hidden, inter, enc);
}

static int qw_make(const ms_xfmt *like, ms_xfmt *out)
{
    if (like->n_mats != 3 || like->n_params != 0) {
        ms_err_set("Qwen3-MoE experts take 3 matrices and no activation constants");
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    return ms_qwen3_experts_fmt(like->latent, like->inter, like->mat[0].enc, out);
}

const ms_xfam ms_qwen3_experts = {"qwen3-moe", qw_detect, qw_describe, ms_xhf_locate, qw_make, ms_xhf_refine};
