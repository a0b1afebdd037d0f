/* ms_cli_ptrunk: `moestream pack-trunk`: write (and verify) the lossless trunk pack of a checkpoint, or measure the codec. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ms_xxh.h" /* XXH3, dispatched */

#include "ms_bfc.h"
#include "ms_cli.h"
#include "ms_cpu.h"
#include "ms_err.h"
#include "ms_families.h"
#include "ms_file.h"
#include "ms_ident.h"
#include "ms_kern.h"
#include "ms_opt.h"
#include "ms_progress.h"
#include "ms_size.h"
#include "ms_st.h"
#include "ms_tpack.h"

#define CMD "pack-trunk"
#define READ_BYTES (16u << 20)

static void usage(FILE *f)
{
    fputs("usage: moestream pack-trunk --model DIR --out DIR [--quiet]\n"
          "       moestream pack-trunk --bench [--mib N]\n"
          "\n"
          "Writes DIR/" MS_TPACK_FILE ": every BF16 trunk matrix of the checkpoint (all but the embedding and\n"
          "the routed experts) in a lossless compressed form, in blocks of whole rows of about 64 KiB,\n"
          "each with an XXH3 checksum, and the model's fingerprint (config.json and the XXH3-128 of every\n"
          "byte of each packed tensor, kept in the model's identity sidecar). The checkpoint is not modified. Every block is decoded and compared with\n"
          "the original before it is written, and the finished file is read back and checked against\n"
          "each tensor's XXH3. run/jobs/demo stream the trunk from it with --trunk-pack DIR, or by\n"
          "default from MODEL.trunk-pack beside the model (the same logits, fewer bytes read).\n"
          "Convention: --out MODEL.trunk-pack (e.g. --model /m/k3 --out /m/k3.trunk-pack).\n"
          "--bench measures the codec on N MiB (default 64) of Gaussian BF16 (like trained weights) and of\n"
          "uniform BF16 (like synth checkpoints): size ratio, and decode GB/s of output on one core for\n"
          "each decoder the CPU runs (scalar, avx2, avx512), checked (as streamed) and unchecked (pinned);\n"
          "then one block in cache: each decoder, and its XXH3 through libxxhash's dispatch and plain.\n"
          "Exit codes: 2 usage, 3 bad model, 4 I/O error (README).\n",
          f);
}

/* Read the written pack back: every tensor decodes to its recorded XXH3. */
static int verify(const char *path, uint64_t total)
{
    ms_tpack *p = ms_tpack_open(path);
    if (!p) return -1;
    uint64_t fsize;
    int fd = ms_file_open(path, "trunk pack", 0, 0, &fsize);
    if (fd < 0) {
        ms_tpack_close(p);
        return -1;
    }
    ms_progress_begin("pack-trunk: verify", total, MS_PROGRESS_BYTES);
    int rc = 0;
    uint8_t *src = NULL;
    uint16_t *dst = NULL;
    size_t src_cap = 0, dst_cap = 0;
    XXH3_state_t *h = XXH3_createState();
    char err[512];
    for (int i = 0; i < ms_tpack_count(p) && rc == 0; i++) {
        const ms_tpack_tensor *t = ms_tpack_at(p, i);
        XXH3_64bits_reset(h);
        uint32_t per = (uint32_t)(READ_BYTES / (uint64_t)(2 * t->rows_per_block * t->cols)) + 1;
        for (uint32_t b0 = 0; b0 < t->n_blocks && rc == 0; b0 += per) {
            uint32_t b1 = b0 + per < t->n_blocks ? b0 + per : t->n_blocks;
            uint64_t s = ms_tpack_block_start(t, b0), len = t->block_end[b1 - 1] - s;
            int64_t r0 = (int64_t)b0 * t->rows_per_block, r1 = (int64_t)b1 * t->rows_per_block;
            if (r1 > t->rows) r1 = t->rows;
            size_t nv = (size_t)((r1 - r0) * t->cols);
            if (len > src_cap) src = ms_realloc(src, src_cap = (size_t)len);
            if (nv > dst_cap) dst = ms_realloc(dst, 2 * (dst_cap = nv));
            if (ms_file_pread(fd, path, t->data_off + s, src, (size_t)len) != 0) {
                rc = -1;
                break;
            }
            if (ms_tpack_decode(path, t, b0, b1, src, dst, err, sizeof err) != 0) {
                ms_err_set("%s", err);
                rc = ms_err_set_code(MS_EXIT_IO);
                break;
            }
            XXH3_64bits_update(h, dst, 2 * nv);
            ms_progress_add(2 * nv);
        }
        if (rc == 0 && XXH3_64bits_digest(h) != t->raw_xxh3) {
            ms_err_set("%s: tensor %s read back does not match what was packed", path, t->name);
            rc = ms_err_set_code(MS_EXIT_IO);
        }
    }
    ms_progress_end();
    XXH3_freeState(h);
    free(src);
    free(dst);
    close(fd);
    ms_tpack_close(p);
    return rc;
}

static int pack(const char *model, const char *outdir, int quiet)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", model);
    size_t clen;
    char *cfgtext = ms_file_read_all(path, "config", 0, 64u << 20, MS_EXIT_MODEL, &clen);
    if (!cfgtext) return -1;
    const ms_family *fam = ms_families_detect(model);
    if (!fam) {
        free(cfgtext);
        return -1;
    }
    ms_st *st = ms_st_open_dir(model);
    int rc = -1;
    const ms_st_tensor **ts = NULL;
    ms_tpack_spec *specs = NULL;
    ms_tpack_writer *w = NULL;
    uint16_t *buf = NULL;
    if (!st) goto out;
    int n = fam->trunk_matrices(model, st, &ts); /* the family says which matrices its trunk has */
    if (n < 0) goto out;
    specs = ms_malloc(sizeof *specs * (size_t)(n ? n : 1));
    uint64_t fp = ms_tpack_fp_begin(cfgtext, clen), total = 0;
    /* the full hash of every packed tensor (ms_ident: kept in the model's sidecar, so the runs
     * that check this pack against the model do not read the trunk again to hash it) */
    const char **names = ms_malloc(sizeof *names * (size_t)(n ? n : 1));
    uint8_t(*h)[16] = ms_malloc(16 * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) names[i] = ts[i]->name;
    int hrc = ms_ident_hashes(model, st, names, (size_t)n, h);
    for (int i = 0; i < n && hrc == 0; i++) {
        specs[i] = (ms_tpack_spec){ts[i]->name, ts[i]->shape[0], ts[i]->shape[1]};
        fp = ms_tpack_fp_tensor(fp, ts[i]->name, ts[i]->shape[0], ts[i]->shape[1], ts[i]->nbytes, h[i]);
        total += ts[i]->nbytes;
    }
    free(names);
    free(h);
    if (hrc != 0) goto out;
    if (mkdir(outdir, 0755) != 0 && errno != EEXIST) {
        ms_err_set("cannot create %s: %s", outdir, strerror(errno));
        ms_err_set_code(MS_EXIT_IO);
        goto out;
    }
    snprintf(path, sizeof path, "%s/" MS_TPACK_FILE, outdir);
    w = ms_tpack_writer_new(path, fp, specs, n);
    if (!w) goto out;
    buf = ms_malloc(READ_BYTES + MS_TPACK_BLOCK_BYTES);
    ms_progress_begin("pack-trunk", total, MS_PROGRESS_BYTES);
    for (int i = 0; i < n; i++) {
        const ms_st_tensor *t = ts[i];
        int64_t cols = t->shape[1], rpb = ms_tpack_rows_per_block(t->shape[0], cols);
        int64_t per = (int64_t)(READ_BYTES / (uint64_t)(2 * cols)) / rpb * rpb;
        if (per < rpb) per = rpb;
        for (int64_t r0 = 0; r0 < t->shape[0]; r0 += per) {
            int64_t r = t->shape[0] - r0 < per ? t->shape[0] - r0 : per;
            uint16_t *b = per * cols * 2 > READ_BYTES + MS_TPACK_BLOCK_BYTES ? ms_malloc((size_t)(2 * r * cols)) : buf;
            int bad = ms_st_read(st, t, (uint64_t)(2 * r0 * cols), b, (size_t)(2 * r * cols)) != 0 ||
                      ms_tpack_writer_rows(w, b, r) != 0;
            if (b != buf) free(b);
            if (bad) {
                ms_progress_end();
                goto out;
            }
            ms_progress_add((uint64_t)(2 * r * cols));
        }
    }
    ms_progress_end();
    uint64_t packed = ms_tpack_writer_bytes(w);
    const uint64_t *kh = ms_tpack_writer_k_hist(w);
    if (ms_tpack_writer_finish(w) != 0 || verify(path, total) != 0) goto out;
    if (!quiet) {
        char a[32], b[32];
        ms_size_fmt(total, a, sizeof a);
        ms_size_fmt(packed, b, sizeof b);
        printf("packed %d trunk matrices: %s of BF16 -> %s (%.1f%% smaller), verified; blocks by code bits k: "
               "k0 %llu, k1 %llu, k2 %llu, k3 %llu, k4 %llu, raw %llu; %s\n",
               n, a, b, total ? 100.0 * (1.0 - (double)packed / (double)total) : 0.0, (unsigned long long)kh[0],
               (unsigned long long)kh[1], (unsigned long long)kh[2], (unsigned long long)kh[3],
               (unsigned long long)kh[4], (unsigned long long)kh[8], path);
    }
    rc = 0;
out:
    ms_tpack_writer_free(w);
    free(buf);
    free(specs);
    free(ts);
    ms_st_close(st);
    free(cfgtext);
    return rc;
}

/* ---- --bench ---- */

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static double u01(uint64_t i) { return ((double)(mix(i) >> 11) + 0.5) / 9007199254740992.0; }

/* The library's plain XXH3 entry point (ms_xxh.h maps the name to its dispatcher), to show what
 * the dispatch buys. */
#if defined(__x86_64__) || defined(__i386__)
#undef XXH3_64bits
static XXH64_hash_t xxh3_plain(const void *p, size_t n) { return XXH3_64bits(p, n); }
#define XXH3_64bits XXH3_64bits_dispatch
#else
static XXH64_hash_t xxh3_plain(const void *p, size_t n) { return XXH3_64bits(p, n); }
#endif

/* Best seconds of 500 calls of f on block 0 (kept in cache): decode unchecked (kind 0) or its XXH3
 * (1: the dispatched entry point, 2: the plain one). */
static double hot(const uint8_t *blk, size_t size, uint16_t *dst, size_t m, int kind)
{
    double best = 1e30;
    volatile XXH64_hash_t sink = 0;
    for (int r = 0; r < 500; r++) {
        double t0 = ms_cli_now();
        if (kind == 0) {
            if (ms_bfc_decode_verified(blk, size, dst, m) != 0) abort();
        } else {
            sink ^= kind == 1 ? XXH3_64bits(blk + 8, size - 8) : xxh3_plain(blk + 8, size - 8);
        }
        double t = ms_cli_now() - t0;
        if (t < best) best = t;
    }
    (void)sink;
    return best;
}

static void bench_one(const char *what, const uint16_t *v, size_t n)
{
    size_t bv = MS_TPACK_BLOCK_BYTES / 2, nb = (n + bv - 1) / bv;
    uint8_t *enc = ms_malloc(nb * ms_bfc_bound(bv));
    size_t *off = ms_malloc(sizeof(size_t) * (nb + 1));
    uint16_t *dec = ms_malloc(2 * n);
    off[0] = 0;
    for (size_t b = 0; b < nb; b++) {
        size_t m = n - b * bv < bv ? n - b * bv : bv;
        off[b + 1] = off[b] + ms_bfc_encode(v + b * bv, m, -1, enc + off[b]);
    }
    /* Each decoder (scalar, AVX2, and AVX-512 where the CPU has VBMI2: ms_bfc.c), checked (XXH3, as
     * a streamed block) and unchecked (a pinned one), each block into one cache-resident buffer as
     * the kernel decodes it; then every block once more into place, compared with the input. */
    double best[3][2] = {{1e30, 1e30}, {1e30, 1e30}, {1e30, 1e30}};
    for (int l = MS_SIMD_SCALAR; l <= MS_SIMD_AVX512; l++) {
        if (ms_cpu_set_level(l) != l || (l == MS_SIMD_AVX512 && !ms_cpu_has_vbmi2())) continue;
        for (int chk = 0; chk < 2; chk++)
            for (int rep = 0; rep < 5; rep++) {
                double t0 = ms_cli_now();
                for (size_t b = 0; b < nb; b++) {
                    size_t m = n - b * bv < bv ? n - b * bv : bv;
                    int rc = chk ? ms_bfc_decode(enc + off[b], off[b + 1] - off[b], dec, m)
                                 : ms_bfc_decode_verified(enc + off[b], off[b + 1] - off[b], dec, m);
                    if (rc != 0) abort();
                }
                double t = ms_cli_now() - t0;
                if (t < best[l][chk]) best[l][chk] = t;
            }
        for (size_t b = 0; b < nb; b++) {
            size_t m = n - b * bv < bv ? n - b * bv : bv;
            if (ms_bfc_decode(enc + off[b], off[b + 1] - off[b], dec + b * bv, m) != 0) abort();
        }
        if (memcmp(dec, v, 2 * n) != 0) abort(); /* lossless, or the codec is broken */
    }
    ms_cpu_set_simd(1);
    printf("%-9s %8.1f MiB BF16 -> %8.1f MiB  %5.1f%% smaller   decode 1 core, GB/s of BF16 checked / unchecked:", what,
           (double)(2 * n) / 1048576.0, (double)off[nb] / 1048576.0, 100.0 * (1.0 - (double)off[nb] / (double)(2 * n)));
    for (int l = MS_SIMD_SCALAR; l <= MS_SIMD_AVX512; l++)
        if (best[l][0] < 1e30)
            printf("%s %s %.2f / %.2f", l ? "," : "", ms_cpu_level_name(l), (double)(2 * n) / best[l][1] / 1e9,
                   (double)(2 * n) / best[l][0] / 1e9);
    printf("\n");
    /* One block in cache, as the kernel's next block after its prefetch: the decoders and the checksum alone. */
    size_t m0 = n < bv ? n : bv, sz0 = off[1];
    printf("%-9s in cache (one block of %zu KiB of BF16, repeated): unchecked decode GB/s of BF16:", "", 2 * m0 >> 10);
    for (int l = MS_SIMD_SCALAR; l <= MS_SIMD_AVX512; l++) {
        if (ms_cpu_set_level(l) != l || (l == MS_SIMD_AVX512 && !ms_cpu_has_vbmi2())) continue;
        printf("%s %s %.2f", l ? "," : "", ms_cpu_level_name(l), (double)(2 * m0) / hot(enc, sz0, dec, m0, 0) / 1e9);
    }
    ms_cpu_set_simd(1);
    printf("; its XXH3, GB/s of block: %.1f dispatched, %.1f plain\n", (double)(sz0 - 8) / hot(enc, sz0, dec, m0, 1) / 1e9,
           (double)(sz0 - 8) / hot(enc, sz0, dec, m0, 2) / 1e9);
    free(enc);
    free(off);
    free(dec);
}

static int bench(long long mib)
{
    size_t n = (size_t)mib << 19;
    uint16_t *v = ms_malloc(2 * n);
    /* Gaussian, sigma 0.02 (a typical trained weight scale), Box-Muller, truncated to BF16 */
    for (size_t i = 0; i < n; i++) {
        double z = sqrt(-2.0 * log(u01(2 * i))) * cos(6.283185307179586 * u01(2 * i + 1));
        v[i] = ms_f32_to_bf16_trunc((float)(0.02 * z));
    }
    bench_one("gaussian", v, n);
    /* uniform in [-a, a) with a = 1/sqrt(cols) as synth draws a 7168-column matrix */
    for (size_t i = 0; i < n; i++) v[i] = ms_f32_to_bf16_trunc((float)((2.0 * u01(i) - 1.0) / sqrt(7168.0)));
    bench_one("uniform", v, n);
    free(v);
    return MS_EXIT_OK;
}

int ms_cli_pack_trunk(int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'}, {"out", required_argument, 0, 'o'},
                                         {"quiet", no_argument, 0, 'q'},       {"bench", no_argument, 0, 'b'},
                                         {"mib", required_argument, 0, 'n'},    {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *model = NULL, *out = NULL;
    int quiet = 0, do_bench = 0, c;
    long long mib = 64;
    optind = 1;
    while ((c = getopt_long(argc, argv, "hq", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'o': out = optarg; break;
        case 'q': quiet = 1; break;
        case 'b': do_bench = 1; break;
        case 'n':
            if (ms_opt_int("--mib", optarg, 1, 4096, &mib) != 0) return ms_cli_fail_err(CMD);
            break;
        case 'h': usage(stdout); return MS_EXIT_OK;
        default: usage(stderr); return MS_EXIT_USAGE;
        }
    }
    if (optind != argc) return ms_cli_fail(CMD, MS_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    ms_cli_set_output(quiet);
    ms_kern_init();
    if (do_bench) return bench(mib);
    if (!model || !out) return ms_cli_fail(CMD, MS_EXIT_USAGE, "--model DIR and --out DIR are required (see --help)");
    if (pack(model, out, quiet) != 0) return ms_cli_fail_err(CMD);
    return MS_EXIT_OK;
}
