/* ms_gptoss_experts: gpt-oss's row of the expert-family table: its config's expert fields, its descriptor, its per-layer expert tensors. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "ms_err.h"
#include "ms_st.h"
#include "ms_gptoss_experts.h"

#define ALPHA 1.702f /* the SwiGLU's sigmoid slope: a constant of the model, not in its config */

static int go_detect(json_t *root)
{
    const char *s = json_string_value(json_object_get(root, "model_type"));
    return s && !strcmp(s, "gpt_oss");
}

typedef struct {
    int n_layers, n_experts, top_k, hidden, inter;
    float limit;
} go_fields;

#define F(n, t, m, lo, hi) {n, NULL, t, 0, 0, offsetof(go_fields, m), lo, hi, NULL}
static const ms_jfield fields[] = {
    F("num_hidden_layers", MS_JF_INT, n_layers, 1, 1024),  F("num_local_experts", MS_JF_INT, n_experts, 1, 16384),
    F("experts_per_token", MS_JF_INT, top_k, 1, 64),       F("hidden_size", MS_JF_INT, hidden, 1, 1 << 16),
    F("intermediate_size", MS_JF_INT, inter, 1, 1 << 18),  F("swiglu_limit", MS_JF_FLOAT, limit, 0, 0),
};
#undef F

static int go_describe(ms_jcfg *j, ms_xmodel *out)
{
    ms_jscope sc = {{ms_jcfg_root(j)}, {""}, 1, 0, "", 0};
    go_fields v;
    memset(&v, 0, sizeof v);
    if (ms_jcfg_read(j, fields, sizeof fields / sizeof fields[0], &sc, &v, sizeof v) != 0) return -1;
    if (v.top_k > v.n_experts) {
        ms_jcfg_problem(j, "experts_per_token = %d exceeds num_local_experts = %d", v.top_k, v.n_experts);
        return -1;
    }
    /* every layer routes; the release stores biases as BF16 (ms_xfam_refine follows a checkpoint's headers) */
    return ms_xmodel_set(out, v.n_layers, 0, v.n_experts, v.top_k,
                         ms_gptoss_experts_fmt(v.hidden, v.inter, v.limit, MS_DT_BF16, &out->fmt));
}

int ms_gptoss_experts_fmt(int hidden, int inter, float limit, int bias_dtype, ms_xfmt *f)
{
    memset(f, 0, sizeof *f);
    if (ms_xfmt_widths_ok(hidden, inter, MS_XENC_MXFP4) != 0) return -1;
    float p[2] = {ALPHA, limit};
    ms_xfmt_begin(f, "gpt-oss", hidden, inter, MS_XACT_SWIGLU_CLAMP, p, 2);
    static const char *const gu[3] = {"gate_up_proj_blocks", "gate_up_proj_scales", "gate_up_proj_bias"};
    static const char *const dn[3] = {"down_proj_blocks", "down_proj_scales", "down_proj_bias"};
    ms_xfmt_add_mat(f, "gate_up", MS_XROLE_GATE_UP, MS_XENC_MXFP4, bias_dtype, gu);
    ms_xfmt_add_mat(f, "down", MS_XROLE_DOWN, MS_XENC_MXFP4, bias_dtype, dn);
    return 0;
}

/* Part `part` of expert e: slice e of the layer's [E, ...] tensor. */
static int go_locate(const ms_xfmt *f, int layer, int expert, int part, char *name, size_t n, int *slice,
                     int *n_slices)
{
    (void)expert;
    *slice = expert;
    *n_slices = -1; /* the tensor's first dimension: the layer's experts (checked against it) */
    int w = snprintf(name, n, "model.layers.%d.mlp.experts.%s", layer, f->part[part].name);
    return w >= 0 && (size_t)w < n ? 0 : -1;
}

static int go_make(const ms_xfmt *like, ms_xfmt *out)
{
    if (like->n_params != 2 || like->n_mats != 2) {
        ms_err_set("gpt-oss experts take 2 matrices and 2 activation constants");
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    return ms_gptoss_experts_fmt(like->latent, like->inter, like->param[1], like->mat[0].bias_dtype, out);
}

/* The biases' dtype as this checkpoint stores them (BF16 as released; F32 in a test model). */
static int go_refine(ms_xfmt *f, int first_moe, const ms_st *st)
{
    char name[160];
    snprintf(name, sizeof name, "model.layers.%d.mlp.experts.gate_up_proj_bias", first_moe);
    const ms_st_tensor *t = ms_st_find(st, name);
    if (!t) return 1; /* no experts here (a trunk), or reported as missing when located */
    if (t->dtype != MS_DT_BF16 && t->dtype != MS_DT_F32) {
        ms_err_set("tensor %s is %s; expert biases must be BF16 or F32", name, ms_dtype_name(t->dtype));
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    float limit = f->param[1];
    return ms_gptoss_experts_fmt(f->latent, f->inter, limit, (int)t->dtype, f);
}

const ms_xfam ms_gptoss_experts = {"gpt-oss", go_detect, go_describe, go_locate, go_make, go_refine};
