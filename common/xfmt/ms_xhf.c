/* ms_xhf: routed experts stored one tensor per matrix and expert (DeepSeek-V3, Kimi K2, Qwen3-MoE). */
#include <stdio.h>
#include <string.h>

#include "ms_err.h"
#include "ms_xfp8.h"
#include "ms_xhf.h"

int ms_xhf_swiglu_fmt(ms_xfmt *f, const char *family, int hidden, int inter, int enc)
{
    memset(f, 0, sizeof *f);
    if (enc != MS_XENC_BF16 && enc != MS_XENC_FP8 && enc != MS_XENC_FP8_BF16S && enc != MS_XENC_INT4_G32) {
        ms_err_set("%s experts are BF16, FP8 (e4m3, 128 x 128 blocks) or INT4 (pack-quantized, groups of 32)", family);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    if (ms_xfmt_widths_ok(hidden, inter, (ms_xenc)enc) != 0) return -1;
    ms_xfmt_begin(f, family, hidden, inter, MS_XACT_SWIGLU, NULL, 0);
    static const char *const names[3] = {"gate", "up", "down"};
    static const ms_xrole roles[3] = {MS_XROLE_GATE, MS_XROLE_UP, MS_XROLE_DOWN};
    for (int i = 0; i < 3; i++) {
        char w[40], s[40];
        int q4 = enc == MS_XENC_INT4_G32; /* compressed-tensors' names */
        snprintf(w, sizeof w, "%s_proj.weight%s", names[i], q4 ? "_packed" : "");
        snprintf(s, sizeof s, "%s_proj.weight_scale%s", names[i], q4 ? "" : "_inv");
        const char *parts[2] = {w, s};
        ms_xfmt_add_mat(f, names[i], roles[i], (ms_xenc)enc, MS_XFMT_NO_BIAS, parts);
    }
    return 0;
}

int ms_xhf_locate(const ms_xfmt *f, int layer, int expert, int part, char *name, size_t n, int *slice, int *n_slices)
{
    *slice = 0;
    *n_slices = 1;
    int w = snprintf(name, n, "model.layers.%d.mlp.experts.%d.%s", layer, expert, f->part[part].name);
    return w >= 0 && (size_t)w < n ? 0 : -1;
}

int ms_xhf_refine(ms_xfmt *f, int first_moe, const struct ms_st *st)
{
    if (f->mat[0].enc != MS_XENC_FP8 && f->mat[0].enc != MS_XENC_FP8_BF16S) return 0;
    char name[160];
    snprintf(name, sizeof name, "model.layers.%d.mlp.experts.0.gate_proj.weight_scale_inv", first_moe);
    int enc = 0, rc = ms_xfp8_scale_enc(st, name, &enc);
    if (rc != 0) return rc;
    char family[sizeof f->family];
    snprintf(family, sizeof family, "%s", f->family);
    return ms_xhf_swiglu_fmt(f, family, f->latent, f->inter, enc);
}
