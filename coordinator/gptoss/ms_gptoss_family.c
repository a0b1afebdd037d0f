/* ms_gptoss_family: gpt-oss's row of the family registry: peek at a config, open, trunk matrices. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_gptoss_chat.h"
#include "ms_gptoss_model.h"
#include "ms_gptoss_experts.h"

static int load_cfg(const char *dir, ms_gptoss_cfg *c)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    return ms_gptoss_cfg_load(path, c);
}

static int go_peek(const char *dir, ms_model_info *in)
{
    ms_gptoss_cfg c;
    memset(in, 0, sizeof *in);
    if (load_cfg(dir, &c) != 0) return -1;
    ms_gptoss_info_of_cfg(&c, in);
    ms_gptoss_cfg_free(&c);
    return 0;
}

/* The dense matrices of the trunk (attention projections, routers, the LM head), layer by
 * layer: what a trunk pack holds. The embedding is read by rows and is not among them. */
static int go_trunk(const char *dir, const ms_st *st, const ms_st_tensor ***out)
{
    ms_gptoss_cfg c;
    if (load_cfg(dir, &c) != 0) return -1;
    static const char *const per_layer[5] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                             "self_attn.v_proj.weight", "self_attn.o_proj.weight", "mlp.router.weight"};
    const ms_st_tensor **v = ms_malloc(sizeof *v * (size_t)(5 * c.n_layers + 1));
    int n = 0, rc = 0;
    char name[200];
    for (int l = 0; l <= c.n_layers && rc == 0; l++)
        for (int i = 0; i < (l < c.n_layers ? 5 : 1) && rc == 0; i++) {
            if (l < c.n_layers)
                snprintf(name, sizeof name, "model.layers.%d.%s", l, per_layer[i]);
            else
                snprintf(name, sizeof name, "lm_head.weight");
            const ms_st_tensor *t = ms_st_find(st, name);
            if (!t) {
                ms_err_set("%s: tensor %s is missing", dir, name);
                rc = ms_err_set_code(MS_EXIT_MODEL);
            } else if (t->dtype == MS_DT_BF16 && t->ndim == 2) {
                v[n++] = t;
            }
        }
    ms_gptoss_cfg_free(&c);
    if (rc != 0) {
        free(v);
        return -1;
    }
    *out = v;
    return n;
}

const ms_family ms_gptoss_family = {
    .name = "gpt-oss",
    .title = "gpt-oss",
    .xfam = &ms_gptoss_experts,
    .open = ms_gptoss_model_open,
    .peek = go_peek,
    .chat = &ms_gptoss_chat,
    .trunk_matrices = go_trunk,
    .synth = ms_gptoss_synth,
    .demo_preset = "gpt-oss-tiny",
    .synth_help = "the Hugging Face layout: its config fields, zero-based shards + index, BF16 trunk and biases, "
                  "MXFP4 experts [E, ...] per layer, a tokenizer.json with the harmony specials: gpt-oss-tiny (a "
                  "few MB), gpt-oss-20b (the released widths: about 13 GiB), gpt-oss-120b (61 GiB, use with "
                  "--sparse)",
};
