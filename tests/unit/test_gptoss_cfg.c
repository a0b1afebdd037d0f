/* test_gptoss_cfg: the strict gpt-oss config reader on the released 120b and 20b files and on broken copies of them. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_gptoss_cfg.h"
#include "ms_test.h"

static int has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

/* Write the config j (with one edit applied by the caller) to dir/name and read it. */
static int read_json(json_t *j, const char *dir, const char *name, ms_gptoss_cfg *c)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    json_dump_file(j, path, 0);
    return ms_gptoss_cfg_load(path, c);
}

int main(void)
{
    ms_log_set_level(0);
    const char *p120 = ms_t_shared("fixtures/gpt-oss/released/config-120b.json");
    const char *p20 = p120 ? ms_t_shared("fixtures/gpt-oss/released/config-20b.json") : NULL;
    if (!p120 || !p20) return ms_t_done();
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s", p120);
    snprintf(b, sizeof b, "%s", p20);
    ms_gptoss_cfg c;
    T_CHECK(ms_gptoss_cfg_load(a, &c) == 0, "the released 120b config as is: %s", ms_err_msg());
    T_CHECK(c.n_layers == 36 && c.hidden == 2880 && c.inter == 2880 && c.n_heads == 64 && c.n_kv == 8 &&
                c.head_dim == 64 && c.n_experts == 128 && c.top_k == 4 && c.vocab == 201088 && c.window == 128 &&
                c.eos_id == 200002 && c.pad_id == 199999 && c.swiglu_limit == 7.0f && c.yarn_factor == 32.0f &&
                c.yarn_orig_ctx == 4096 && c.rope_theta == 150000.0f && c.max_positions == 131072,
            "120b: the spec's dimensions");
    int alt = 1;
    for (int i = 0; i < c.n_layers; i++) alt &= c.sliding[i] == (i % 2 == 0);
    T_CHECK(alt, "120b: sliding on even layers, full on odd (layer_types)");
    ms_gptoss_cfg_free(&c);
    T_CHECK(ms_gptoss_cfg_load(b, &c) == 0 && c.n_layers == 24 && c.n_experts == 32, "the released 20b config: %s",
            ms_err_msg());
    ms_gptoss_cfg_free(&c);

    const char *d = ms_t_tmpdir("gptoss-cfg");
    json_error_t je;
    static const struct {
        const char *what, *key, *value, *want; /* value: JSON text, or NULL to remove the key */
    } bad[] = {
        {"layer_types too short", "layer_types", "[\"full_attention\"]", "layer_types has 1 entries"},
        {"an unknown layer type", "layer_types", NULL, "layer_types[3]"},
        {"window 0", "sliding_window", "0", "sliding_window must be > 0"},
        {"heads not a multiple of kv heads", "num_key_value_heads", "7", "not a multiple of num_key_value_heads"},
        {"odd head_dim", "head_dim", "63", "head_dim = 63 is odd"},
        {"the alias disagreeing", "num_experts_per_tok", "5", "num_experts_per_tok must equal experts_per_token"},
        {"no swiglu_limit", "swiglu_limit", NULL, "missing required key: swiglu_limit"},
        {"rope not yarn", "rope_scaling", "{\"rope_type\": \"linear\", \"factor\": 32.0, \"beta_fast\": 32.0, "
                                          "\"beta_slow\": 1.0, \"original_max_position_embeddings\": 4096, "
                                          "\"truncate\": false}",
         "rope_scaling.rope_type must be \"yarn\""},
        {"truncated yarn", "rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 32.0, \"beta_fast\": 32.0, "
                                           "\"beta_slow\": 1.0, \"original_max_position_embeddings\": 4096, "
                                           "\"truncate\": true}",
         "rope_scaling.truncate is true"},
        {"tied embeddings", "tie_word_embeddings", "true", "tie_word_embeddings is true"},
        {"another quantization", "quantization_config", "{\"quant_method\": \"fp8\"}", "quant_method must be \"mxfp4\""},
        {"no eos", "eos_token_id", NULL, "eos_token_id"},
        {"a hidden width MXFP4 cannot block", "hidden_size", "2900", "hidden_size = 2900 is not a multiple of 32"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *j = json_load_file(b, 0, &je);
        if (!bad[i].value && !strcmp(bad[i].key, "layer_types"))
            json_array_set_new(json_object_get(j, "layer_types"), 3, json_string("local_attention"));
        else if (!bad[i].value)
            json_object_del(j, bad[i].key);
        else
            json_object_set_new(j, bad[i].key, json_loads(bad[i].value, JSON_DECODE_ANY, &je));
        char name[32];
        snprintf(name, sizeof name, "bad%zu", i);
        int rc = read_json(j, d, name, &c);
        T_CHECK(rc == -1 && ms_err_code() == MS_EXIT_MODEL && has(ms_err_msg(), bad[i].want) && c.sliding == NULL,
                "%s: refused naming it (%s)", bad[i].what, ms_err_msg());
        json_decref(j);
    }
    /* several problems, one message */
    json_t *j = json_load_file(b, 0, &je);
    json_object_del(j, "rms_norm_eps");
    json_object_set_new(j, "num_local_experts", json_integer(2));
    int rc = read_json(j, d, "many", &c);
    T_CHECK(rc == -1 && has(ms_err_msg(), "missing required key: rms_norm_eps") &&
                has(ms_err_msg(), "experts_per_token = 4 exceeds num_local_experts = 2"),
            "every problem in one message: %s", ms_err_msg());
    json_decref(j);
    return ms_t_done();
}
