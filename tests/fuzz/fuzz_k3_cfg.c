/* fuzz_k3_cfg: libFuzzer harness for config.json (flat, nested and fixture-wrapped) through ms_k3_cfg_parse. */
#include "fuzz_util.h"
#include "ms_k3_cfg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    fuzz_dir(); /* silences logs */
    char *text = fuzz_cstr(data, len);
    ms_k3_cfg c;
    int rc = ms_k3_cfg_parse(text, "fuzz config.json", &c);
    free(text);
    if (rc != 0) {
        fuzz_refused(ms_err_msg());
        FUZZ_CHECK(ms_err_msg()[0] != 0);
        FUZZ_CHECK(c.is_mla == NULL && c.full_attn == NULL); /* left empty */
        ms_k3_cfg_free(&c);
        return 0;
    }
    /* Accepted: positive sizes, a layer map as long as the model, MLA layers named in range. */
    FUZZ_CHECK(c.hidden > 0 && c.n_layers > 0 && c.vocab > 0 && c.n_experts > 0);
    FUZZ_CHECK(c.top_k > 0 && c.top_k <= c.n_experts && c.top_k <= MS_K3_CFG_MAX_TOPK);
    FUZZ_CHECK(c.attn_res_block > 0 && c.first_dense >= 0 && c.first_dense <= c.n_layers);
    FUZZ_CHECK(c.is_mla != NULL);
    int mla = 0;
    for (int i = 0; i < c.n_layers; i++) {
        FUZZ_CHECK(c.is_mla[i] <= 1);
        mla += c.is_mla[i];
    }
    FUZZ_CHECK(c.n_full_attn >= 0);
    for (int i = 0; i < c.n_full_attn; i++) {
        FUZZ_CHECK(c.full_attn[i] >= 1 && c.full_attn[i] <= c.n_layers);
        FUZZ_CHECK(c.is_mla[c.full_attn[i] - 1] == 1);
    }
    FUZZ_CHECK(mla <= c.n_full_attn);
    ms_k3_cfg_free(&c);
    return 0;
}
