/* fuzz_pack: libFuzzer harness for a pack's manifest.json (beside a sparse experts.bin and a config) through ms_pack_open. */
#include "fuzz_util.h"
#include "ms_pack.h"

#define BIN_BYTES ((off_t)64 << 20) /* sparse: no disk used */

/* The model of the packs the seeds come from (tests/fuzz/corpus/fuzz_pack: the fixture
 * tiny-s1234 sharded over 2 workers): ms_pack_open checks the manifest against it. */
static const char config_json[] =
    "{\"hidden_size\": 128, \"num_hidden_layers\": 13, \"vocab_size\": 256, \"rms_norm_eps\": 1e-05,"
    " \"kda_num_heads\": 4, \"kda_head_dim\": 16, \"short_conv_kernel_size\": 4, \"gate_lower_bound\": -5.0,"
    " \"num_attention_heads\": 4, \"q_lora_rank\": 64, \"kv_lora_rank\": 32, \"qk_nope_head_dim\": 24,"
    " \"qk_rope_head_dim\": 8, \"v_head_dim\": 16, \"mla_use_output_gate\": true, \"num_experts\": 8,"
    " \"num_experts_per_token\": 2, \"num_shared_experts\": 2, \"routed_expert_hidden_size\": 64,"
    " \"moe_intermediate_size\": 64, \"routed_scaling_factor\": 1.0, \"moe_renormalize\": true,"
    " \"latent_moe_use_norm\": true, \"first_k_dense_replace\": 1, \"intermediate_size\": 96,"
    " \"attn_res_block_size\": 3, \"situ_beta\": 4.0, \"situ_linear_beta\": 25.0,"
    " \"full_attn_layers\": [4, 8, 12, 13]}";

static void write_pack(void)
{
    static int done;
    if (done) return;
    done = 1;
    fuzz_write(fuzz_path(1, "config.json"), config_json, sizeof config_json - 1);
    const char *bin = fuzz_path(1, "experts.bin");
    fuzz_write(bin, "", 0);
    if (truncate(bin, BIN_BYTES) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    write_pack();
    fuzz_write(fuzz_path(0, "manifest.json"), data, len);
    ms_pack p;
    if (ms_pack_open(fuzz_dir(), &p) != 0) {
        FUZZ_CHECK(ms_err_msg()[0] != 0);
        FUZZ_CHECK(p.entries == NULL && p.n == 0);
        return 0;
    }
    /* Accepted: entries in range, inside experts.bin, distinct and not sharing bytes. */
    FUZZ_CHECK(p.worker >= 0 && p.worker < p.workers && p.replicas >= 1 && p.replicas <= p.workers);
    FUZZ_CHECK(p.expert_bytes > 0);
    for (size_t i = 0; i < p.n; i++) {
        const ms_pack_entry *e = &p.entries[i];
        FUZZ_CHECK(e->layer >= 0 && e->layer < p.n_layers && e->expert >= 0 && e->expert < p.n_experts);
        FUZZ_CHECK(e->offset <= (uint64_t)BIN_BYTES && p.expert_bytes <= (uint64_t)BIN_BYTES - e->offset);
        uint64_t sum = 0;
        for (int k = 0; k < 6; k++) sum += e->len[k];
        FUZZ_CHECK(sum == p.expert_bytes);
        for (size_t j = 0; j < i && p.n < 512; j++) {
            const ms_pack_entry *f = &p.entries[j];
            FUZZ_CHECK(f->layer != e->layer || f->expert != e->expert);
            FUZZ_CHECK(f->offset + p.expert_bytes <= e->offset || e->offset + p.expert_bytes <= f->offset);
        }
    }
    ms_pack_close(&p);
    return 0;
}
