/* test_dsv3_cfg: the strict DeepSeek-V3 / Kimi K2 config reader on the released files and broken copies of them. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_dsv3_cfg.h"
#include "ms_err.h"
#include "ms_test.h"
#include "ms_xfmt.h"

static int has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

static int read_json(json_t *j, const char *dir, const char *name, ms_dsv3_cfg *c)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    json_dump_file(j, path, 0);
    return ms_dsv3_cfg_load(path, c);
}

int main(void)
{
    ms_log_set_level(0);
    const char *pv = ms_t_shared("fixtures/deepseek-v3/released/config-v3.json");
    const char *pk = pv ? ms_t_shared("fixtures/deepseek-v3/released/config-k2.json") : NULL;
    if (!pv || !pk) return ms_t_done();
    char v3[4096], k2[4096];
    snprintf(v3, sizeof v3, "%s", pv);
    snprintf(k2, sizeof k2, "%s", pk);
    ms_dsv3_cfg c;
    int rc = ms_dsv3_cfg_load(v3, &c);
    T_CHECK(rc == 0 && c.n_layers == 61 && c.n_dense == 3 && c.hidden == 7168 && c.inter == 18432 && c.moe_inter == 2048 &&
                c.n_heads == 128 && c.q_lora == 1536 && c.kv_lora == 512 && c.qk_nope == 128 && c.qk_rope == 64 &&
                c.v_head == 128 && c.n_experts == 256 && c.top_k == 8 && c.n_shared == 1 && c.n_group == 8 &&
                c.topk_group == 4 && c.routed_scale == 2.5f && c.rope_theta == 10000.0f && c.yarn_factor == 40.0f &&
                c.yarn_beta_fast == 32.0f && c.yarn_beta_slow == 1.0f && c.yarn_mscale == 1.0f && c.yarn_orig_ctx == 4096 &&
                c.vocab == 129280 && c.n_mtp == 1 && c.xenc == MS_XENC_FP8 && !c.kimi && c.bos_id == 0 && c.eos_id == 1,
            "DeepSeek-V3 as released: the spec's dimensions (%s)", rc ? ms_err_msg() : "ok");
    rc = ms_dsv3_cfg_load(k2, &c);
    T_CHECK(rc == 0 && c.n_dense == 1 && c.n_heads == 64 && c.n_experts == 384 && c.n_group == 1 && c.topk_group == 1 &&
                c.routed_scale == 2.827f && c.rope_theta == 50000.0f && c.yarn_factor == 32.0f && c.yarn_beta_fast == 1.0f &&
                c.vocab == 163840 && c.n_mtp == 0 && c.kimi && c.bos_id == 163584,
            "Kimi K2 as released (model_type kimi_k2): the spec's dimensions (%s)", rc ? ms_err_msg() : "ok");
    const char *d = ms_t_tmpdir("dsv3-cfg");
    json_error_t je;
    static const struct {
        const char *what, *key, *value, *want; /* value: JSON text, or NULL to remove the key */
    } bad[] = {
        {"no q_lora_rank", "q_lora_rank", NULL, "missing required key: q_lora_rank"},
        {"a plain q_proj", "q_lora_rank", "null", "q_lora_rank is null"},
        {"MoE every other layer", "moe_layer_freq", "2", "moe_layer_freq must be 1"},
        {"another top-k method", "topk_method", "\"greedy\"", "topk_method must be \"noaux_tc\""},
        {"softmax scores", "scoring_func", "\"softmax\"", "scoring_func must be \"sigmoid\""},
        {"unnormalised weights", "norm_topk_prob", "false", "norm_topk_prob is false; it must be true"},
        {"groups that do not divide the experts", "n_group", "7", "not a multiple of n_group"},
        {"more kept groups than groups", "topk_group", "9", "topk_group = 9 exceeds n_group = 8"},
        {"an odd rope width", "qk_rope_head_dim", "63", "qk_rope_head_dim = 63 is odd"},
        {"mscale apart from mscale_all_dim", "rope_scaling",
         "{\"type\": \"yarn\", \"factor\": 40, \"beta_fast\": 32, \"beta_slow\": 1, \"mscale\": 0.707, \"mscale_all_dim\": 1.0, "
         "\"original_max_position_embeddings\": 4096}",
         "rope_scaling.mscale must equal mscale_all_dim"},
        {"no YaRN", "rope_scaling", NULL, "missing required key: rope_scaling"},
        {"tied embeddings", "tie_word_embeddings", "true", "tie_word_embeddings is true; it must be false"},
        {"another quantization", "quantization_config", "{\"quant_method\": \"awq\"}", "quant_method must be \"fp8\""},
        {"no dense layers left over", "first_k_dense_replace", "61", "leaves no MoE layer"},
        {"two MTP layers", "num_nextn_predict_layers", "2", "one MTP layer is read"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *j = json_load_file(v3, 0, &je);
        if (!bad[i].value)
            json_object_del(j, bad[i].key);
        else
            json_object_set_new(j, bad[i].key, json_loads(bad[i].value, JSON_DECODE_ANY, &je));
        char name[32];
        snprintf(name, sizeof name, "bad%zu", i);
        rc = read_json(j, d, name, &c);
        T_CHECK(rc == -1 && ms_err_code() == MS_EXIT_MODEL && has(ms_err_msg(), bad[i].want), "%s: refused naming it (%s)",
                bad[i].what, ms_err_msg());
        json_decref(j);
    }
    /* a BF16 copy (quantization_config absent) reads as BF16 */
    json_t *j = json_load_file(v3, 0, &je);
    json_object_del(j, "quantization_config");
    T_CHECK(read_json(j, d, "bf16", &c) == 0 && c.xenc == MS_XENC_BF16, "without quantization_config: BF16 weights");
    json_decref(j);
    /* Kimi K2-Thinking: compressed-tensors' pack-quantized INT4 experts (spec §4), and what it must be */
    static const char q4[] =
        "{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"quantization_status\": "
        "\"compressed\", \"ignore\": [\"lm_head\"], \"kv_cache_scheme\": null, \"config_groups\": {\"group_0\": "
        "{\"targets\": [\"Linear\"], \"input_activations\": null, \"output_activations\": null, \"weights\": "
        "{\"num_bits\": 4, \"type\": \"int\", \"symmetric\": true, \"group_size\": 32, \"strategy\": \"group\", "
        "\"dynamic\": false, \"actorder\": null, \"observer\": \"minmax\"}}}}";
    static const struct {
        const char *what, *from, *to, *want; /* the INT4 config with `from` replaced by `to` */
    } q4bad[] = {
        {NULL, NULL, NULL, NULL},
        {"8-bit integers", "\"num_bits\": 4", "\"num_bits\": 8", "must be 4-bit symmetric"},
        {"groups of 128", "\"group_size\": 32", "\"group_size\": 128", "in groups of 32"},
        {"asymmetric", "\"symmetric\": true", "\"symmetric\": false", "config_groups.group_0.weights"},
        {"floats", "\"type\": \"int\"", "\"type\": \"float\"", "config_groups.group_0.weights"},
        {"quantized activations", "\"input_activations\": null", "\"input_activations\": {\"num_bits\": 8}",
         "input_activations must be null"},
        {"another packing", "\"pack-quantized\"", "\"float-quantized\"", "format must be \"pack-quantized\""},
    };
    for (size_t i = 0; i < sizeof q4bad / sizeof q4bad[0]; i++) {
        char text[2048];
        snprintf(text, sizeof text, "%s", q4);
        if (q4bad[i].from) {
            char *at = strstr(text, q4bad[i].from), rest[2048];
            if (!at) continue;
            snprintf(rest, sizeof rest, "%s", at + strlen(q4bad[i].from));
            snprintf(at, sizeof text - (size_t)(at - text), "%s%s", q4bad[i].to, rest);
        }
        json_t *k = json_load_file(k2, 0, &je);
        json_object_set_new(k, "quantization_config", json_loads(text, 0, &je));
        char name[32];
        snprintf(name, sizeof name, "q4-%zu", i);
        rc = read_json(k, d, name, &c);
        if (!q4bad[i].from)
            T_CHECK(rc == 0 && c.xenc == MS_XENC_INT4_G32, "Kimi K2-Thinking's quantization_config: INT4 experts (%s)",
                    rc ? ms_err_msg() : "ok");
        else
            T_CHECK(rc == -1 && ms_err_code() == MS_EXIT_MODEL && has(ms_err_msg(), q4bad[i].want),
                    "INT4 with %s: refused naming it (%s)", q4bad[i].what, ms_err_msg());
        json_decref(k);
    }
    return ms_t_done();
}
