/* ms_xfp8: the fine-grained FP8 release format as configs and checkpoints state it. */
#include <string.h>

#include "ms_err.h"
#include "ms_st.h"
#include "ms_xfp8.h"

int ms_xfp8_config_enc(ms_jcfg *j, json_t *root)
{
    json_t *q = json_object_get(root, "quantization_config");
    if (!q || json_is_null(q)) return MS_XENC_BF16;
    if (!json_is_object(q)) {
        ms_jcfg_problem(j, "quantization_config must be an object");
        return 0;
    }
    const char *m = json_string_value(json_object_get(q, "quant_method"));
    if (!m || strcmp(m, "fp8")) {
        ms_jcfg_problem(j, "quantization_config.quant_method must be \"fp8\" (the fine-grained FP8 release); "
                           "other quantizations are not read");
        return 0;
    }
    json_t *b = json_object_get(q, "weight_block_size");
    int b0, b1;
    if (!json_is_array(b) || json_array_size(b) != 2 || ms_jcfg_as_int(json_array_get(b, 0), &b0) != 0 ||
        ms_jcfg_as_int(json_array_get(b, 1), &b1) != 0 || b0 != 128 || b1 != 128) {
        ms_jcfg_problem(j, "quantization_config.weight_block_size must be [128, 128]");
        return 0;
    }
    const char *fmt = json_string_value(json_object_get(q, "fmt"));
    if (json_object_get(q, "fmt") && (!fmt || strcmp(fmt, "e4m3"))) {
        ms_jcfg_problem(j, "quantization_config.fmt must be \"e4m3\"");
        return 0;
    }
    const char *act = json_string_value(json_object_get(q, "activation_scheme"));
    if (json_object_get(q, "activation_scheme") && (!act || strcmp(act, "dynamic"))) {
        /* static activation scales would be tensors of their own; the releases are dynamic
         * (computed weight-only here: activations stay float, as the references) */
        ms_jcfg_problem(j, "quantization_config.activation_scheme must be \"dynamic\"");
        return 0;
    }
    return MS_XENC_FP8;
}

int ms_xfp8_scale_enc(const struct ms_st *st, const char *scale_name, int *enc)
{
    const ms_st_tensor *t = ms_st_find(st, scale_name);
    if (!t) return 1;
    if (t->dtype != MS_DT_F32 && t->dtype != MS_DT_BF16) {
        ms_err_set("tensor %s is %s; FP8 block scales must be F32 or BF16", scale_name, ms_dtype_name(t->dtype));
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    *enc = t->dtype == MS_DT_BF16 ? MS_XENC_FP8_BF16S : MS_XENC_FP8;
    return 0;
}

/* compressed-tensors' pack-quantized INT4 (Kimi K2-Thinking): one config group of weight-only,
 * symmetric, 4-bit integers in groups of 32 along the input. */
static int int4_group(ms_jcfg *j, json_t *q)
{
    const char *fmt = json_string_value(json_object_get(q, "format"));
    if (!fmt || strcmp(fmt, "pack-quantized")) {
        ms_jcfg_problem(j, "quantization_config.format must be \"pack-quantized\" (compressed-tensors' packed INT4)");
        return 0;
    }
    json_t *groups = json_object_get(q, "config_groups");
    if (!json_is_object(groups) || json_object_size(groups) != 1) {
        ms_jcfg_problem(j, "quantization_config.config_groups must hold exactly one group (INT4 weights)");
        return 0;
    }
    json_t *g = json_object_iter_value(json_object_iter(groups)), *w = json_object_get(g, "weights");
    const char *gname = json_object_iter_key(json_object_iter(groups));
    int bits = 0, size = 0;
    const char *type = json_string_value(json_object_get(w, "type"));
    const char *strategy = json_string_value(json_object_get(w, "strategy"));
    if (!json_is_object(w) || ms_jcfg_as_int(json_object_get(w, "num_bits"), &bits) != 0 || bits != 4 || !type ||
        strcmp(type, "int") || !json_is_true(json_object_get(w, "symmetric")) ||
        ms_jcfg_as_int(json_object_get(w, "group_size"), &size) != 0 || size != 32 ||
        (json_object_get(w, "strategy") && (!strategy || strcmp(strategy, "group")))) {
        ms_jcfg_problem(j, "quantization_config.config_groups.%s.weights must be 4-bit symmetric \"int\" in groups of 32 "
                           "(num_bits 4, type \"int\", symmetric true, group_size 32, strategy \"group\")",
                        gname);
        return 0;
    }
    json_t *ia = json_object_get(g, "input_activations");
    if (ia && !json_is_null(ia)) { /* activation quantization would change every product */
        ms_jcfg_problem(j, "quantization_config.config_groups.%s.input_activations must be null (weight-only INT4)", gname);
        return 0;
    }
    return MS_XENC_INT4_G32;
}

int ms_xquant_config_enc(ms_jcfg *j, json_t *root)
{
    json_t *q = json_object_get(root, "quantization_config");
    const char *m = json_is_object(q) ? json_string_value(json_object_get(q, "quant_method")) : NULL;
    if (m && !strcmp(m, "compressed-tensors")) return int4_group(j, q);
    return ms_xfp8_config_enc(j, root);
}
