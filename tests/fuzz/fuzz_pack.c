/* fuzz_pack: libFuzzer harness for a pack's manifest.json (beside a sparse experts.bin) through ms_pack_open. */
#include "fuzz_util.h"
#include "ms_pack.h"

#define BIN_BYTES ((off_t)64 << 20) /* sparse: no disk used */

static void write_pack(void)
{
    static int done;
    if (done) return;
    done = 1;
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
        fuzz_refused(ms_err_msg());
        FUZZ_CHECK(ms_err_msg()[0] != 0);
        FUZZ_CHECK(p.entries == NULL && p.n == 0);
        return 0;
    }
    /* Accepted: a consistent expert format; entries in MoE layers, inside experts.bin, made of
     * the format's parts, distinct and not sharing bytes. */
    FUZZ_CHECK(p.worker >= 0 && p.worker < p.workers && p.replicas >= 1 && p.replicas <= p.workers);
    char why[256];
    FUZZ_CHECK(ms_xfmt_check(&p.fmt, why, sizeof why) == 0);
    FUZZ_CHECK(p.expert_bytes > 0 && p.expert_bytes == ms_xfmt_expert_bytes(&p.fmt));
    for (size_t i = 0; i < p.n; i++) {
        const ms_pack_entry *e = &p.entries[i];
        FUZZ_CHECK(e->layer >= p.first_moe && e->layer < p.n_layers && e->expert >= 0 && e->expert < p.n_experts);
        FUZZ_CHECK(e->offset <= (uint64_t)BIN_BYTES && p.expert_bytes <= (uint64_t)BIN_BYTES - e->offset);
        uint64_t sum = 0;
        for (int k = 0; k < p.fmt.n_parts; k++) {
            FUZZ_CHECK(e->len[k] == p.fmt.part[k].bytes);
            sum += e->len[k];
        }
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
