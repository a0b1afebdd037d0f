/* ms_qwen3_family: Qwen3-MoE's row of the family registry: peek at a config, open, trunk matrices. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_qwen3_chat.h"
#include "ms_qwen3_experts.h"
#include "ms_qwen3_model.h"

static int load_cfg(const char *dir, ms_qwen3_cfg *c)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    return ms_qwen3_cfg_load(path, c);
}

static int qw_peek(const char *dir, ms_model_info *in)
{
    ms_qwen3_cfg c;
    memset(in, 0, sizeof *in);
    if (load_cfg(dir, &c) != 0) return -1;
    ms_qwen3_info_of_cfg(&c, in);
    return 0;
}

/* The dense BF16 matrices of the trunk (attention projections, routers or dense MLPs, the LM
 * head), layer by layer: what a trunk pack holds (FP8 ones stay as released). The embedding is
 * read by rows and is not among them. */
static int qw_trunk(const char *dir, const ms_st *st, const ms_st_tensor ***out)
{
    ms_qwen3_cfg c;
    if (load_cfg(dir, &c) != 0) return -1;
    static const char *const attn[4] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                        "self_attn.o_proj.weight"};
    static const char *const dense[3] = {"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"};
    const ms_st_tensor **v = ms_malloc(sizeof *v * (size_t)(7 * c.n_layers + 1));
    int n = 0, rc = 0;
    char name[200];
    for (int l = 0; l <= c.n_layers && rc == 0; l++) {
        int k = l == c.n_layers ? 1 : l < c.first_moe ? 7 : 5;
        for (int i = 0; i < k && rc == 0; i++) {
            if (l == c.n_layers)
                snprintf(name, sizeof name, "%s", c.tied ? "model.embed_tokens.weight" : "lm_head.weight");
            else
                snprintf(name, sizeof name, "model.layers.%d.%s", l,
                         i < 4 ? attn[i] : l < c.first_moe ? dense[i - 4] : "mlp.gate.weight");
            const ms_st_tensor *t = ms_st_find(st, name);
            if (!t) {
                ms_err_set("%s: tensor %s is missing", dir, name);
                rc = ms_err_set_code(MS_EXIT_MODEL);
            } else if (t->dtype == MS_DT_BF16 && t->ndim == 2 && !(c.tied && l == c.n_layers)) {
                v[n++] = t;
            }
        }
    }
    if (rc != 0) {
        free(v);
        return -1;
    }
    *out = v;
    return n;
}

static const char *const format_presets[] = {"qwen3-moe-tiny-fp8", "qwen3-moe-tiny-fp8-bf16s", NULL};

const ms_family ms_qwen3_family = {
    .name = "qwen3-moe",
    .title = "Qwen3-MoE",
    .xfam = &ms_qwen3_experts,
    .open = ms_qwen3_model_open,
    .peek = qw_peek,
    .chat = &ms_qwen3_chat,
    .trunk_matrices = qw_trunk,
    .synth = ms_qwen3_synth,
    .demo_preset = "qwen3-moe-tiny",
    .format_presets = format_presets,
    .synth_help = "the Hugging Face layout: its config fields, one-based shards + index, BF16 trunk and experts (three "
                  "tensors each), or with -fp8 F8_E4M3 projections with an F32 weight_scale_inv per 128 x 128 block (-fp8-bf16s: BF16 "
                  "grids), a "
                  "tokenizer.json with Qwen's added tokens: qwen3-moe-tiny (a few MB), qwen3-30b-a3b (the released "
                  "widths: 61 GB; -fp8 31 GB), qwen3-235b-a22b (470 GB, -fp8 236 GB: use with --sparse)",
};
