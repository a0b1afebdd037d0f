/* ms_dsv3_experts: DeepSeek-V3's and Kimi K2's row of the expert-family table: the config's expert fields, the descriptor (FP8 block-scaled or BF16 SwiGLU), where each expert's tensors are. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "ms_dsv3_experts.h"
#include "ms_err.h"
#include "ms_st.h"
#include "ms_xfp8.h"

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
    int enc = ms_xfp8_config_enc(j, root);
    if (!enc) return -1;
    return ms_xmodel_set(out, v.n_layers, v.n_dense, v.n_experts, v.top_k,
                         ms_dsv3_experts_fmt(v.hidden, v.inter, enc, &out->fmt));
}

int ms_dsv3_experts_fmt(int hidden, int inter, int enc, ms_xfmt *f)
{
    memset(f, 0, sizeof *f);
    if (enc != MS_XENC_BF16 && enc != MS_XENC_FP8 && enc != MS_XENC_FP8_BF16S) {
        ms_err_set("DeepSeek-V3 experts are FP8 (e4m3, 128 x 128 blocks) or BF16");
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    if (ms_xfmt_widths_ok(hidden, inter, (ms_xenc)enc) != 0) return -1;
    ms_xfmt_begin(f, "deepseek-v3", hidden, inter, MS_XACT_SWIGLU, NULL, 0);
    static const char *const names[3] = {"gate", "up", "down"};
    static const ms_xrole roles[3] = {MS_XROLE_GATE, MS_XROLE_UP, MS_XROLE_DOWN};
    for (int i = 0; i < 3; i++) {
        char w[40], s[40];
        snprintf(w, sizeof w, "%s_proj.weight", names[i]);
        snprintf(s, sizeof s, "%s_proj.weight_scale_inv", names[i]);
        const char *parts[2] = {w, s};
        ms_xfmt_add_mat(f, names[i], roles[i], (ms_xenc)enc, MS_XFMT_NO_BIAS, parts);
    }
    return 0;
}

/* Part `part` of expert e: the whole tensor model.layers.L.mlp.experts.E.<part name>. */
static int ds_locate(const ms_xfmt *f, int layer, int expert, int part, char *name, size_t n, int *slice,
                     int *n_slices)
{
    *slice = 0;
    *n_slices = 1;
    int w = snprintf(name, n, "model.layers.%d.mlp.experts.%d.%s", layer, expert, f->part[part].name);
    return w >= 0 && (size_t)w < n ? 0 : -1;
}

static int ds_make(const ms_xfmt *like, ms_xfmt *out)
{
    if (like->n_mats != 3 || like->n_params != 0) {
        ms_err_set("DeepSeek-V3 experts take 3 matrices and no activation constants");
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    return ms_dsv3_experts_fmt(like->latent, like->inter, like->mat[0].enc, out);
}

/* The scale grids' dtype as this checkpoint stores them. */
static int ds_refine(ms_xfmt *f, int first_moe, const ms_st *st)
{
    if (f->mat[0].enc == MS_XENC_BF16) return 0;
    char name[160];
    snprintf(name, sizeof name, "model.layers.%d.mlp.experts.0.gate_proj.weight_scale_inv", first_moe);
    int enc = 0, rc = ms_xfp8_scale_enc(st, name, &enc);
    return rc != 0 ? rc : ms_dsv3_experts_fmt(f->latent, f->inter, enc, f);
}

const ms_xfam ms_dsv3_experts = {"deepseek-v3", ds_detect, ds_describe, ds_locate, ds_make, ds_refine};
