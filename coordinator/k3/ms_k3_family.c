/* ms_k3_family: Kimi K3's row of the family registry: peek at a config, open, chat format, trunk matrices. */
#include <stdio.h>
#include <string.h>

#include "ms_err.h"
#include "ms_kimichat.h"
#include "ms_k3_model.h"
#include "ms_k3_tensors.h"
#include "ms_synth.h"
#include "ms_k3_experts.h"

static int load_cfg(const char *dir, ms_k3_cfg *c)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    return ms_k3_cfg_load(path, c);
}

static int k3_peek(const char *dir, ms_model_info *in)
{
    ms_k3_cfg c;
    memset(in, 0, sizeof *in);
    if (load_cfg(dir, &c) != 0) return -1;
    ms_k3_info_of_cfg(&c, in);
    ms_k3_cfg_free(&c);
    return 0;
}

static int k3_trunk(const char *dir, const ms_st *st, const ms_st_tensor ***out)
{
    ms_k3_cfg c;
    if (load_cfg(dir, &c) != 0) return -1;
    int n = ms_k3_trunk_matrices(&c, st, out);
    ms_k3_cfg_free(&c);
    return n;
}

static int k3_synth(const char *dir, const char *preset, int layers, int sparse, uint64_t seed)
{
    ms_synth_shape sh;
    if (ms_synth_preset(preset, &sh) != 0) return -1;
    if (layers < 0 || layers > MS_SYNTH_MAX_LAYERS) {
        ms_err_set("--layers %d: a synthetic Kimi K3 checkpoint has 1..%d layers", layers, MS_SYNTH_MAX_LAYERS);
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    if (layers) ms_synth_set_layers(&sh, layers);
    sh.sparse = sparse;
    return ms_synth_write(dir, &sh, seed);
}

const ms_family ms_k3_family = {
    .name = "kimi-k3",
    .title = "Kimi K3",
    .xfam = &ms_k3_experts,
    .open = ms_k3_model_open,
    .peek = k3_peek,
    .chat = &ms_kimichat,
    .trunk_matrices = k3_trunk,
    .synth = k3_synth,
    .demo_preset = "tiny",
    .synth_help = "nested config.json, BF16 trunk, F32 small tensors, MXFP4 routed experts, sharded safetensors "
                  "with an index, a small tiktoken tokenizer: tiny (default, < 1 MB), small (about 650 MB, 512 "
                  "experts a layer), k3-slice (the released K3 widths with --layers N layers, default 3: about "
                  "40 GB), k3-full (the whole 93-layer K3 text path in the release's shard names: 1.56 TB, use "
                  "with --sparse)",
};
