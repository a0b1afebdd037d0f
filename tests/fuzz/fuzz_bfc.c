/* fuzz_bfc: libFuzzer harness for the trunk-pack block decoder (ms_bfc) on every path this CPU runs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "ms_bfc.h"
#include "ms_cpu.h"
#include "ms_kern.h"

/* Input: u16 n (little-endian, taken mod 4097: the values the container expects), then the
 * block. Pinned blocks are decoded without their checksum (ms_bfc_decode_verified), so a bad
 * block reaches every layout check of every decoder directly; the oracle: each path (scalar,
 * AVX2, AVX-512 with VBMI2) gives the same result code and, on success, the same values, and
 * none writes outside dst[n] (ASan: dst is exactly n values). ms_bfc_verify and the checked
 * decode agree with it: a block they accept decodes as the unchecked one does.
 *
 * FUZZ_BFC_SEEDS=DIR writes the seed corpus (valid blocks of each layout) to DIR and exits. */

static uint64_t seed_rng = 42;
static uint16_t seed_value(int spread)
{
    seed_rng ^= seed_rng << 13, seed_rng ^= seed_rng >> 7, seed_rng ^= seed_rng << 17;
    return (uint16_t)(((0x38 + seed_rng % (unsigned)spread) << 8) | ((seed_rng >> 20) & 0xff));
}

static void write_seeds(const char *dir)
{
    static const size_t ns[] = {1, 31, 32, 64, 100, 129, 700};
    static const int ks[] = {-1, 0, 1, 2, 3, 4, 8};
    uint16_t v[700];
    uint8_t *buf = malloc(2 + ms_bfc_bound(700));
    if (!buf) abort();
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) {
            size_t n = ns[i];
            int k = ks[j];
            for (size_t t = 0; t < n; t++) v[t] = seed_value(k == 0 ? 1 : 3 + (int)j * 3);
            buf[0] = (uint8_t)n, buf[1] = (uint8_t)(n >> 8);
            size_t sz = ms_bfc_encode(v, n, k, buf + 2);
            char path[4096];
            snprintf(path, sizeof path, "%s/n%zu-k%d", dir, n, k);
            FILE *f = fopen(path, "wb");
            if (!f || fwrite(buf, 1, 2 + sz, f) != 2 + sz || fclose(f) != 0) abort();
        }
    free(buf);
    exit(0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    ms_kern_init();
    const char *seeds = getenv("FUZZ_BFC_SEEDS");
    if (seeds) write_seeds(seeds);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    if (len < 2) return 0;
    size_t n = ((size_t)data[0] | (size_t)data[1] << 8) % 4097;
    size_t size = len - 2;
    /* the block in its own allocation of exactly its size: a read past it is caught */
    uint8_t *blk = malloc(size ? size : 1);
    uint16_t *ref = malloc(2 * n + 2), *out = malloc(2 * n + 2);
    if (!blk || !ref || !out) abort();
    memcpy(blk, data + 2, size);
    int best = ms_cpu_best_level();
    int rc0 = -9;
    for (int l = MS_SIMD_SCALAR; l <= best; l++) {
        ms_cpu_set_level(l);
        uint16_t *d = l == MS_SIMD_SCALAR ? ref : out;
        int rc = ms_bfc_decode_verified(blk, size, d, n);
        FUZZ_CHECK(rc == 0 || rc == MS_BFC_BAD_FORM); /* no checksum here */
        if (l == MS_SIMD_SCALAR)
            rc0 = rc;
        else
            FUZZ_CHECK(rc == rc0 && (rc != 0 || n == 0 || memcmp(ref, out, 2 * n) == 0));
        int vr = ms_bfc_verify(blk, size, n), cr = ms_bfc_decode(blk, size, out, n);
        FUZZ_CHECK(vr == 0 || vr == MS_BFC_BAD_SUM || vr == MS_BFC_BAD_FORM);
        /* the checked decode: the checksum's verdict, then the same as unchecked */
        FUZZ_CHECK(cr == (vr != 0 ? vr : rc0));
        if (cr == 0 && n) FUZZ_CHECK(memcmp(ref, out, 2 * n) == 0);
    }
    if (rc0 != 0) fuzz_refused("bfc: malformed block");
    ms_cpu_set_simd(1);
    free(blk);
    free(ref);
    free(out);
    return 0;
}
