/* ms_dsv3_family: DeepSeek-V3's (and Kimi K2's) row of the family registry: peek at a config, open, trunk matrices. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_dsv3_experts.h"
#include "ms_dsv3_model.h"
#include "ms_err.h"
#include "ms_kimichat.h"

static int load_cfg(const char *dir, ms_dsv3_cfg *c)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    return ms_dsv3_cfg_load(path, c);
}

static int ds_peek(const char *dir, ms_model_info *in)
{
    ms_dsv3_cfg c;
    memset(in, 0, sizeof *in);
    if (load_cfg(dir, &c) != 0) return -1;
    ms_dsv3_info_of_cfg(&c, in);
    return 0;
}

/* The dense BF16 matrices of the trunk, layer by layer (as released: the routers and the LM
 * head; in a BF16 copy every projection too): what a trunk pack holds. The embedding is read
 * by rows and is not among them. */
static int ds_trunk(const char *dir, const ms_st *st, const ms_st_tensor ***out)
{
    ms_dsv3_cfg c;
    if (load_cfg(dir, &c) != 0) return -1;
    static const char *const attn[5] = {"self_attn.q_a_proj.weight", "self_attn.q_b_proj.weight",
                                        "self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_b_proj.weight",
                                        "self_attn.o_proj.weight"};
    static const char *const dense[3] = {"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"};
    static const char *const moe[4] = {"mlp.gate.weight", "mlp.shared_experts.gate_proj.weight",
                                       "mlp.shared_experts.up_proj.weight", "mlp.shared_experts.down_proj.weight"};
    const ms_st_tensor **v = ms_malloc(sizeof *v * (size_t)(9 * c.n_layers + 1));
    int n = 0, rc = 0;
    char name[200];
    for (int l = 0; l <= c.n_layers && rc == 0; l++) {
        int k = l == c.n_layers ? 1 : l < c.n_dense ? 8 : 5 + (c.n_shared > 0 ? 4 : 1);
        for (int i = 0; i < k && rc == 0; i++) {
            if (l == c.n_layers)
                snprintf(name, sizeof name, "lm_head.weight");
            else
                snprintf(name, sizeof name, "model.layers.%d.%s", l,
                         i < 5 ? attn[i] : l < c.n_dense ? dense[i - 5] : moe[i - 5]);
            const ms_st_tensor *t = ms_st_find(st, name);
            if (!t) {
                ms_err_set("%s: tensor %s is missing", dir, name);
                rc = ms_err_set_code(MS_EXIT_MODEL);
            } else if (t->dtype == MS_DT_BF16 && t->ndim == 2) {
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

/* The chat format by the tokenizer the checkpoint ships: Kimi K2's (the Kimi tokenizer, whose
 * <|im_user|> marks Kimi's format) is Kimi's; DeepSeek's is DeepSeek-V3's (ms_dsv3_chat). */
static int is_kimi(const ms_tok *t) { return ms_tok_special_id(t, "<|im_user|>") >= 0; }

static int ds_chat_encode(const ms_tok *t, const ms_chat_msg *msgs, int n, const ms_chat_opts *o, int32_t **ids,
                          size_t *n_ids)
{
    return (is_kimi(t) ? &ms_kimichat : &ms_dsv3_chat)->encode(t, msgs, n, o, ids, n_ids);
}

static int ds_chat_stops(const ms_tok *t, int32_t *ids, int max)
{
    return (is_kimi(t) ? &ms_kimichat : &ms_dsv3_chat)->stop_ids(t, ids, max);
}

static int ds_chat_answer(const ms_tok *t, const int32_t *ids, size_t n, ms_chat_answer *a)
{
    return (is_kimi(t) ? &ms_kimichat : &ms_dsv3_chat)->answer(t, ids, n, a);
}

static int ds_chat_route(const ms_tok *t, ms_chat_stream *s, int32_t id)
{
    return (is_kimi(t) ? &ms_kimichat : &ms_dsv3_chat)->route(t, s, id);
}

static int ds_chat_follow(const ms_tok *t, int32_t last, const ms_chat_msg *msgs, int n, const ms_chat_opts *o,
                          int32_t **ids, size_t *n_ids)
{
    return (is_kimi(t) ? &ms_kimichat : &ms_dsv3_chat)->follow(t, last, msgs, n, o, ids, n_ids);
}

/* The variables are DeepSeek-V3.1's (Kimi's format reads none, and ignores them as a template
 * does a variable it does not read). */
static int ds_chat_var(const char *name, const struct json_t *v, const ms_chat_opts *o, char *why, size_t n)
{
    return ms_dsv3_chat.var(name, v, o, why, n);
}

static int ds_chat_opening(const ms_tok *t, const int32_t *prompt, size_t n)
{
    return is_kimi(t) ? 0 : ms_dsv3_chat.opening(t, prompt, n);
}

static char *ds_chat_rules(const ms_tok *t, const ms_chat_rules *r)
{
    return (is_kimi(t) ? &ms_kimichat : &ms_dsv3_chat)->rules(t, r);
}

static const ms_chatfmt ds_chat = {"deepseek-v3 (Kimi K2: kimi)", ds_chat_encode, ds_chat_stops, ds_chat_answer,
                                   ds_chat_route, ds_chat_follow, ds_chat_var, "thinking", ds_chat_opening, ds_chat_rules};

/* The conformance suite's other weight formats: K2-Thinking's (BF16 trunk, INT4 experts). */
static const char *const ds_format_presets[] = {"deepseek-v3-tiny-int4", "kimi-k2-tiny", NULL};

const ms_family ms_dsv3_family = {
    .name = "deepseek-v3",
    .title = "DeepSeek-V3 / Kimi K2",
    .xfam = &ms_dsv3_experts,
    .open = ms_dsv3_model_open,
    .peek = ds_peek,
    .chat = &ds_chat,
    .trunk_matrices = ds_trunk,
    .synth = ms_dsv3_synth,
    .demo_preset = "deepseek-v3-tiny",
    .format_presets = ds_format_presets,
    .synth_help = "the Hugging Face layout: its config fields, one-based shards with a six-digit total + index, FP8 "
                  "projections and experts with an F32 weight_scale_inv per 128 x 128 block, BF16 embeddings, routers "
                  "and head, the MTP layer where the release has one: deepseek-v3-tiny (a few MB), deepseek-v3-tiny-mtp (the same "
                  "shape, its layers adding little and its MTP layer passing the next token's embedding to the head: "
                  "drafts the model accepts, for measuring MTP speculation), deepseek-v3-tiny-int4 (the same in Kimi "
                  "K2-Thinking's form: a BF16 trunk, routed experts compressed-tensors INT4 in groups of 32), "
                  "kimi-k2-tiny (the tiny shape in Kimi K2's form: no expert groups, no MTP layer, Kimi's tokenizer "
                  "with its tool-call markers), deepseek-v3 (the "
                  "released 671B: 641 GiB), deepseek-v3-slice (its widths in 16 layers of 16 experts, 18 GB of real bytes), kimi-k2 "
                  "(958 GiB), kimi-k2-thinking (594 GB), the last two and deepseek-v3 for --sparse",
};
