/* test_qwen3_cfg: the strict Qwen3-MoE config reader on the six released files, newer re-saves' spellings, and broken copies. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_qwen3_cfg.h"
#include "ms_test.h"

static int has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

static int read_json(json_t *j, const char *dir, const char *name, ms_qwen3_cfg *c)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    json_dump_file(j, path, 0);
    return ms_qwen3_cfg_load(path, c);
}

int main(void)
{
    ms_log_set_level(0);
    const char *dirp = ms_t_shared("fixtures/qwen3-moe/released");
    if (!dirp) return ms_t_done();
    char rel[4096];
    snprintf(rel, sizeof rel, "%s", dirp);
    static const struct {
        const char *file;
        int layers, hidden, moe_inter, heads, experts, fp8;
        float theta;
        int max_pos;
    } released[] = {
        {"config-30b-a3b.json", 48, 2048, 768, 32, 128, 0, 1e6f, 40960},
        {"config-30b-a3b-fp8.json", 48, 2048, 768, 32, 128, 1, 1e6f, 40960},
        {"config-30b-a3b-2507.json", 48, 2048, 768, 32, 128, 0, 1e7f, 262144},
        {"config-235b-a22b.json", 94, 4096, 1536, 64, 128, 0, 1e6f, 40960},
        {"config-235b-a22b-fp8.json", 94, 4096, 1536, 64, 128, 1, 1e6f, 40960},
        {"config-235b-a22b-2507.json", 94, 4096, 1536, 64, 128, 0, 5e6f, 262144},
    };
    ms_qwen3_cfg c;
    char path[4300];
    for (size_t i = 0; i < sizeof released / sizeof released[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", rel, released[i].file);
        int rc = ms_qwen3_cfg_load(path, &c);
        T_CHECK(rc == 0 && c.n_layers == released[i].layers && c.hidden == released[i].hidden &&
                    c.moe_inter == released[i].moe_inter && c.n_heads == released[i].heads && c.n_kv == 4 &&
                    c.head_dim == 128 && c.n_experts == released[i].experts && c.top_k == 8 && c.norm_topk &&
                    c.first_moe == 0 && c.vocab == 151936 && c.fp8 == released[i].fp8 &&
                    c.rope_theta == released[i].theta && c.max_positions == released[i].max_pos && c.eos_id == 151645 &&
                    c.bos_id == 151643 && !c.tied && c.eps == 1e-6f,
                "%s as released: the spec's dimensions (%s)", released[i].file, rc ? ms_err_msg() : "ok");
    }
    const char *d = ms_t_tmpdir("qwen3-cfg");
    json_error_t je;
    snprintf(path, sizeof path, "%s/config-30b-a3b.json", rel);
    /* newer re-saves: num_local_experts, rope_parameters */
    json_t *j = json_load_file(path, 0, &je);
    json_object_del(j, "num_experts");
    json_object_set_new(j, "num_local_experts", json_integer(128));
    json_object_del(j, "rope_theta");
    json_object_set_new(j, "rope_parameters", json_pack("{s:f,s:s}", "rope_theta", 1e6, "rope_type", "default"));
    T_CHECK(read_json(j, d, "resave", &c) == 0 && c.n_experts == 128 && c.rope_theta == 1e6f,
            "num_local_experts and rope_parameters.rope_theta (newer spellings) read: %s", ms_err_msg());
    json_decref(j);
    /* dense layers first: mlp_only_layers [0, 1] */
    j = json_load_file(path, 0, &je);
    json_object_set_new(j, "mlp_only_layers", json_pack("[i,i]", 0, 1));
    T_CHECK(read_json(j, d, "dense", &c) == 0 && c.first_moe == 2, "mlp_only_layers [0, 1]: MoE from layer 2");
    json_decref(j);
    static const struct {
        const char *what, *key, *value, *want; /* value: JSON text, or NULL to remove the key */
    } bad[] = {
        {"no norm_topk_prob", "norm_topk_prob", NULL, "missing required key: norm_topk_prob"},
        {"no head_dim", "head_dim", NULL, "head_dim"},
        {"sliding window on", "use_sliding_window", "true", "use_sliding_window must be false"},
        {"YaRN by rope_scaling", "rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4.0}", "rope_scaling must be null"},
        {"biases", "attention_bias", "true", "attention_bias must be false"},
        {"another activation", "hidden_act", "\"gelu\"", "hidden_act must be \"silu\""},
        {"heads not a multiple of kv heads", "num_key_value_heads", "5", "not a multiple of num_key_value_heads"},
        {"top-k above the experts", "num_experts", "4", "exceeds num_experts"},
        {"another quantization", "quantization_config", "{\"quant_method\": \"awq\"}", "quant_method must be \"fp8\""},
        {"other FP8 blocks", "quantization_config", "{\"quant_method\": \"fp8\", \"weight_block_size\": [64, 64]}",
         "weight_block_size must be [128, 128]"},
        {"a dense layer after MoE ones", "mlp_only_layers", "[47]", "layer 47 is dense after MoE layer 0"},
        {"every other layer MoE", "decoder_sparse_step", "2", "dense after MoE layer"},
        {"eos outside the vocabulary", "eos_token_id", "200000", "eos_token_id must be an id of the vocabulary"},
        {"no rope_theta", "rope_theta", NULL, "rope_theta (or rope_parameters.rope_theta)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        j = json_load_file(path, 0, &je);
        if (!bad[i].value)
            json_object_del(j, bad[i].key);
        else
            json_object_set_new(j, bad[i].key, json_loads(bad[i].value, JSON_DECODE_ANY, &je));
        char name[32];
        snprintf(name, sizeof name, "bad%zu", i);
        int rc = read_json(j, d, name, &c);
        T_CHECK(rc == -1 && ms_err_code() == MS_EXIT_MODEL && has(ms_err_msg(), bad[i].want), "%s: refused naming it (%s)",
                bad[i].what, ms_err_msg());
        json_decref(j);
    }
    j = json_load_file(path, 0, &je);
    json_object_del(j, "rms_norm_eps");
    json_object_set_new(j, "num_experts", json_integer(4));
    int rc = read_json(j, d, "many", &c);
    T_CHECK(rc == -1 && has(ms_err_msg(), "missing required key: rms_norm_eps") &&
                has(ms_err_msg(), "num_experts_per_tok = 8 exceeds num_experts = 4"),
            "every problem in one message: %s", ms_err_msg());
    json_decref(j);
    return ms_t_done();
}
