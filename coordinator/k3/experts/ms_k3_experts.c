/* ms_k3_experts: Kimi K3's row of the expert-family table: its config's expert fields, its expert descriptor, its tensor names. */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "ms_err.h"
#include "ms_st.h"
#include "ms_k3_experts.h"

/* model_type as released (root "kimi_k3", text_config "kimi_linear"); the flat fixture shape
 * carries none. */
static int k3_detect(json_t *root)
{
    json_t *tc = json_object_get(root, "text_config");
    json_t *mt = json_object_get(root, "model_type"), *tmt = json_is_object(tc) ? json_object_get(tc, "model_type") : NULL;
    if (!mt && !tmt) return 1;
    const char *s = json_string_value(mt ? mt : tmt);
    return s && (!strcmp(s, "kimi_k3") || !strcmp(s, "kimi_linear"));
}

typedef struct {
    int n_layers, n_experts, top_k, first_dense, latent, inter;
    float b1, b2;
} k3_fields;

#define F(n, a, t, m, lo, hi) {n, a, t, 0, 0, offsetof(k3_fields, m), lo, hi, NULL}
static const ms_jfield fields[] = {
    F("num_hidden_layers", NULL, MS_JF_INT, n_layers, 1, 1024),
    F("num_experts", NULL, MS_JF_INT, n_experts, 1, 16384),
    F("num_experts_per_token", NULL, MS_JF_INT, top_k, 1, 64),
    F("first_k_dense_replace", NULL, MS_JF_INT, first_dense, 0, 1024),
    F("routed_expert_hidden_size", NULL, MS_JF_INT, latent, 1, 1 << 18),
    F("moe_intermediate_size", NULL, MS_JF_INT, inter, 1, 1 << 18),
    F("activation_situ_beta", "situ_beta", MS_JF_FLOAT, b1, 0, 0),
    F("activation_situ_linear_beta", "situ_linear_beta", MS_JF_FLOAT, b2, 0, 0),
};
#undef F

static int k3_describe(ms_jcfg *j, ms_xmodel *out)
{
    json_t *root = ms_jcfg_root(j);
    json_t *tc = ms_jcfg_object(j, root, "text_config", "text_config");
    json_t *lac = ms_jcfg_object(j, tc ? tc : root, "linear_attn_config", "linear_attn_config");
    /* non-KDA keys, where ms_k3_cfg looks for them */
    ms_jscope sc = tc ? (ms_jscope){{tc, lac, root}, {"text_config.", "text_config.linear_attn_config.", ""}, 3, 0,
                                    "text_config.", 1}
                      : (ms_jscope){{lac, root}, {"linear_attn_config.", ""}, 2, 0, "", 2};
    k3_fields v;
    memset(&v, 0, sizeof v);
    if (ms_jcfg_read(j, fields, sizeof fields / sizeof fields[0], &sc, &v, sizeof v) != 0) return -1;
    if (v.first_dense > v.n_layers) {
        ms_jcfg_problem(j, "first_k_dense_replace = %d is outside 0..%d", v.first_dense, v.n_layers);
        return -1;
    }
    if (v.top_k > v.n_experts) {
        ms_jcfg_problem(j, "num_experts_per_token = %d exceeds num_experts = %d", v.top_k, v.n_experts);
        return -1;
    }
    return ms_xmodel_set(out, v.n_layers, v.first_dense, v.n_experts, v.top_k,
                         ms_k3_experts_fmt(v.latent, v.inter, v.b1, v.b2, &out->fmt));
}

int ms_k3_experts_fmt(int latent, int inter, float b1, float b2, ms_xfmt *f)
{
    memset(f, 0, sizeof *f);
    if (ms_xfmt_widths_ok(latent, inter, MS_XENC_MXFP4) != 0) return -1;
    float p[2] = {b1, b2};
    ms_xfmt_begin(f, "kimi-k3", latent, inter, MS_XACT_SITU_GLU, p, 2);
    static const char *const w1[2] = {"w1.weight_packed", "w1.weight_scale"};
    static const char *const w2[2] = {"w2.weight_packed", "w2.weight_scale"};
    static const char *const w3[2] = {"w3.weight_packed", "w3.weight_scale"};
    ms_xfmt_add_mat(f, "w1", MS_XROLE_GATE, MS_XENC_MXFP4, MS_XFMT_NO_BIAS, w1);
    ms_xfmt_add_mat(f, "w2", MS_XROLE_DOWN, MS_XENC_MXFP4, MS_XFMT_NO_BIAS, w2);
    ms_xfmt_add_mat(f, "w3", MS_XROLE_UP, MS_XENC_MXFP4, MS_XFMT_NO_BIAS, w3);
    return 0;
}

int ms_k3_experts_tensor(int layer, int expert, const char *suffix, char *buf, size_t n)
{
    int w = snprintf(buf, n, "language_model.model.layers.%d.block_sparse_moe.experts.%d.%s", layer, expert, suffix);
    return w >= 0 && (size_t)w < n ? 0 : -1;
}

/* One tensor per part and expert. */
static int k3_locate(const ms_xfmt *f, int layer, int expert, int part, char *name, size_t n, int *slice,
                     int *n_slices)
{
    *slice = 0;
    *n_slices = 1;
    return ms_k3_experts_tensor(layer, expert, f->part[part].name, name, n);
}

static int k3_make(const ms_xfmt *like, ms_xfmt *out)
{
    if (like->n_params != 2) {
        ms_err_set("kimi-k3 experts take 2 activation constants, not %d", like->n_params);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    return ms_k3_experts_fmt(like->latent, like->inter, like->param[0], like->param[1], out);
}

const ms_xfam ms_k3_experts = {"kimi-k3", k3_detect, k3_describe, k3_locate, k3_make, NULL};
