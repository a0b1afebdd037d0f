/* ms_cli_bench: `moestream bench`: this machine's FMA peaks and read bandwidth, and every weight kernel at the K3 and gpt-oss shapes against them. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_bfc.h"
#include "ms_cli.h"
#include "ms_clock.h"
#include "ms_cpu.h"
#include "ms_err.h"
#include "ms_kbench.h"
#include "ms_kern.h"
#include "ms_opt.h"
#include "ms_pool.h"
#include "ms_tpack.h"

static void usage(FILE *f)
{
    fputs("usage: moestream bench [--threads N] [--pin-threads] [--seconds S] [--bw-bytes SIZE] [--rows LIST]\n"
          "                       [--path NAME] [--json]\n"
          "\n"
          "Measures what this machine can do and how close the weight kernels come to it:\n"
          "  - the FMA peak of every instruction set it has (FP32 AVX2, FP32 AVX-512, FP64 AVX2: 2 flops a\n"
          "    lane per FMA, independent chains in registers, on every thread);\n"
          "  - its memory read bandwidth (each thread reads its own slices of a buffer of --bw-bytes), before\n"
          "    and again after the kernels (--json's ratios are of the larger);\n"
          "  - every weight kernel (f32; bf16; bf16 decoded from trunk-pack blocks, each checked as when\n"
          "    streamed (bf16-packed) or verified once as when pinned (bf16-pinned); mxfp4) at a Kimi K3 and\n"
          "    a gpt-oss shape, fp8 (E4M3 with 128 x 128 block scales) at a DeepSeek-V3 and a Qwen3 shape, and\n"
          "    int4 (compressed-tensors group-32 INT4 with BF16 scales) at a Kimi K2-Thinking expert's,\n"
          "    for each row count T of --rows: GFLOP/s (2 x rows x cols x T per call), GB/s of\n"
          "    weights read, and their ratios to the widest FP32 peak and to the bandwidth. Weights are resident\n"
          "    (several copies cycled, more than the caches hold).\n"
          "\n"
          "  --threads N      threads (default: one per CPU)\n"
          "  --pin-threads    bind each thread but the caller's to its own CPU (as run --pin-threads)\n"
          "  --seconds S      time per measurement, the best run kept (default 0.4)\n"
          "  --bw-bytes SIZE  bandwidth buffer (default 1G)\n"
          "  --rows LIST      row counts T (default 1,2,4,8,16,32,64)\n"
          "  --path NAME      the kernels' path: scalar, avx2 or avx512 (default: the widest the CPU has;\n"
          "                   every path gives the same bits; the peaks stay the CPU's)\n"
          "  --json           one JSON object on stdout instead of the table\n",
          f);
}

typedef struct {
    const char *kernel; /* f32, bf16, bf16-packed, bf16-pinned, mxfp4 */
    const char *shape;  /* what it is in a model */
    int64_t rows, cols;
} bench_case;

static const bench_case cases[] = {
    {"f32", "k3 attention projection", 8192, 7168},
    {"f32", "gpt-oss qkv", 5120, 2880},
    {"bf16", "k3 attention projection", 8192, 7168},
    {"bf16", "gpt-oss qkv", 5120, 2880},
    {"bf16-packed", "k3 attention projection", 8192, 7168},
    {"bf16-packed", "gpt-oss qkv", 5120, 2880},
    /* trunk-pack blocks verified once when loaded (a pinned matrix kept packed): no checksums */
    {"bf16-pinned", "k3 attention projection", 8192, 7168},
    {"bf16-pinned", "gpt-oss qkv", 5120, 2880},
    {"mxfp4", "k3 expert up (I x L)", 3072, 3584},
    {"mxfp4", "gpt-oss expert gate_up", 5760, 2880},
    {"fp8", "deepseek-v3 expert gate", 2048, 7168},
    {"fp8", "qwen3-30b expert gate", 768, 2048},
    {"int4", "kimi-k2-thinking expert gate", 2048, 7168},
};

enum { MAX_COPIES = 64 }; /* copies of a case's matrix cycled through (small matrices need many) */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* Weights like a trained matrix's: BF16 of N(0, 0.02)-ish values, MXFP4 nibbles with scales near 2^-7. */
static float small(uint64_t *s)
{
    double u = 0;
    for (int k = 0; k < 4; k++) u += (double)(rng_next(s) >> 11) / 9007199254740992.0;
    return (float)((u - 2.0) * 0.035);
}

/* A trunk-pack-like coded copy of a BF16 matrix: a stream handing out all rows as coded blocks. */
typedef struct {
    ms_mat_packed pk;
    uint8_t *src;
    uint64_t *end;
    uint64_t coded;
    int64_t rows;
} packed_copy;

static int pk_acquire(void *ctx, const void *key, int64_t *r0, int64_t *r1, const void **data, const uint8_t **scales,
                      ms_mat_packed **packed)
{
    packed_copy *p = ctx;
    (void)key;
    *r0 = 0;
    *r1 = p->rows;
    *data = NULL;
    *scales = NULL;
    *packed = &p->pk;
    return 0;
}

static void pk_release(void *ctx, const void *key) { (void)ctx, (void)key; }

static void packed_make(packed_copy *p, const uint16_t *w, int64_t rows, int64_t cols, int verified)
{
    int64_t rpb = ms_tpack_rows_per_block(rows, cols);
    int nb = (int)((rows + rpb - 1) / rpb);
    p->end = ms_malloc(sizeof *p->end * (size_t)nb);
    p->src = ms_malloc(ms_bfc_bound((size_t)(rows * cols)) + (size_t)nb * MS_BFC_HDR);
    uint64_t at = 0;
    for (int b = 0; b < nb; b++) {
        int64_t r = b * rpb, n = rows - r < rpb ? rows - r : rpb;
        at += ms_bfc_encode(w + r * cols, (size_t)(n * cols), -1, p->src + at);
        p->end[b] = at;
    }
    p->coded = at;
    p->rows = rows;
    p->pk = (ms_mat_packed){p->src, p->end, rpb, nb, -1, verified};
}

/* One case at one T: the best GFLOP/s of repeated calls over the copies. */
static double time_case(ms_mat *W, int copies, const float *X, int64_t T, float *Y, ms_pool *pool, double seconds)
{
    double best = 1e30, until = ms_now() + seconds;
    int runs = 0, k = 0;
    do {
        double t0 = ms_now();
        ms_matmul(&W[k], X, T, Y, pool);
        double dt = ms_now() - t0;
        if (dt < best) best = dt;
        k = (k + 1) % copies;
        runs++;
    } while (ms_now() < until || runs < 2);
    return best;
}

int ms_cli_bench(int argc, char **argv)
{
    static const struct option opts[] = {{"threads", required_argument, 0, 't'}, {"seconds", required_argument, 0, 's'},
                                         {"bw-bytes", required_argument, 0, 'b'}, {"rows", required_argument, 0, 'r'},
                                         {"path", required_argument, 0, 'P'},     {"json", no_argument, 0, 'j'},
                                         {"pin-threads", no_argument, 0, 'p'},    {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    long long threads = 0;
    float seconds = 0.4f;
    uint64_t bw_bytes = 1ull << 30;
    const char *rows_list = "1,2,4,8,16,32,64";
    int js = 0, path = -1, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 't':
            if (ms_opt_threads(optarg, &threads) != 0) return ms_cli_fail_err("bench");
            break;
        case 's':
            if (ms_opt_f32("--seconds", optarg, &seconds) != 0) return ms_cli_fail_err("bench");
            if (!(seconds > 0 && seconds <= 60)) return ms_cli_fail("bench", MS_EXIT_USAGE, "--seconds must be in (0, 60]");
            break;
        case 'b':
            if (ms_opt_size("--bw-bytes", optarg, &bw_bytes) != 0) return ms_cli_fail_err("bench");
            if (bw_bytes < (16u << 20)) return ms_cli_fail("bench", MS_EXIT_USAGE, "--bw-bytes must be at least 16M");
            break;
        case 'r': rows_list = optarg; break;
        case 'P':
            path = !strcmp(optarg, "scalar") ? MS_SIMD_SCALAR : !strcmp(optarg, "avx2") ? MS_SIMD_AVX2
                   : !strcmp(optarg, "avx512")                                   ? MS_SIMD_AVX512
                                                                                 : -2;
            if (path == -2) return ms_cli_fail("bench", MS_EXIT_USAGE, "--path must be scalar, avx2 or avx512");
            break;
        case 'j': js = 1; break;
        case 'p': ms_pool_set_pinning(1); break;
        case 'h': usage(stdout); return MS_EXIT_OK;
        default: usage(stderr); return MS_EXIT_USAGE;
        }
    }
    if (optind != argc) return ms_cli_fail("bench", MS_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    int32_t *Ts = NULL;
    size_t nT = 0;
    if (ms_cli_parse_ids(rows_list, &Ts, &nT) != 0) return ms_cli_fail("bench", MS_EXIT_USAGE, "--rows: %s", ms_err_msg());
    for (size_t i = 0; i < nT; i++)
        if (Ts[i] < 1 || Ts[i] > 1024) {
            free(Ts);
            return ms_cli_fail("bench", MS_EXIT_USAGE, "--rows: each row count must be in 1..1024");
        }
    ms_kern_init();
    if (path >= 0 && ms_cpu_set_level(path) != path)
        return ms_cli_fail("bench", MS_EXIT_USAGE, "--path %s: this CPU does not run it (widest: %s)", ms_cpu_level_name(path),
                           ms_cpu_level_name(ms_cpu_best_level()));
    ms_pool *pool = ms_pool_new((int)threads);
    if (!pool) {
        free(Ts);
        return ms_cli_fail_err("bench");
    }
    int nth = ms_pool_size(pool), pinned = ms_pool_pinned(pool);
    json_t *out = json_object(), *peaks = json_object(), *rows = json_array();
    double peak = 0;
    for (int i = 0; i < MS_KB_N; i++) {
        if (!ms_kbench_has((ms_kb_isa)i)) continue;
        double g = ms_kbench_fma_peak(pool, (ms_kb_isa)i, seconds);
        json_object_set_new(peaks, ms_kbench_name((ms_kb_isa)i), json_real(g));
        if (i != MS_KB_F64_AVX2 && g > peak) peak = g;
        if (!js)
            printf("FMA peak %-12s %8.1f GFLOP/s (%d threads%s)\n", ms_kbench_name((ms_kb_isa)i), g, nth,
                   pinned ? ", pinned" : "");
    }
    double bw = ms_kbench_read_bw(pool, (size_t)bw_bytes, seconds);
    if (bw < 0) {
        json_decref(out), json_decref(peaks), json_decref(rows);
        ms_pool_free(pool);
        free(Ts);
        return ms_cli_fail_err("bench");
    }
    if (!js) {
        printf("read bandwidth         %8.1f GB/s (%d threads, %llu MiB)\nkernel path            %s\n\n", bw, nth,
               (unsigned long long)(bw_bytes >> 20), ms_cpu_level_name(ms_cpu_level()));
        printf("%-12s %-26s %6s %6s %4s %9s %8s %7s %7s\n", "kernel", "shape", "rows", "cols", "T", "GFLOP/s", "GB/s",
               "%peak", "%bw");
        fflush(stdout);
    }
    int64_t maxT = 1;
    for (size_t i = 0; i < nT; i++)
        if (Ts[i] > maxT) maxT = Ts[i];
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const bench_case *bc = &cases[ci];
        int64_t R = bc->rows, C = bc->cols;
        ms_wtype ty = !strcmp(bc->kernel, "f32")     ? MS_WT_F32
                      : !strcmp(bc->kernel, "mxfp4") ? MS_WT_MXFP4
                      : !strcmp(bc->kernel, "fp8")   ? MS_WT_FP8
                      : !strcmp(bc->kernel, "int4")  ? MS_WT_INT4
                                                     : MS_WT_BF16;
        ms_mat one = {ty, R, C, NULL, NULL, NULL, NULL};
        uint64_t bytes = ms_mat_bytes(&one);
        int copies = (int)((256ull << 20) / bytes) + 1; /* 256 MiB or more: 8x any L3 here */
        if (copies > MAX_COPIES) copies = MAX_COPIES;
        ms_mat W[MAX_COPIES];
        void *mem[MAX_COPIES] = {0};
        packed_copy pc[MAX_COPIES];
        ms_mat_stream st[MAX_COPIES];
        uint64_t read_bytes = bytes;
        int packed = !strncmp(bc->kernel, "bf16-p", 6); /* bf16-packed, bf16-pinned */
        for (int k = 0; k < copies; k++) {
            mem[k] = ms_malloc((size_t)bytes);
            W[k] = one;
            if (ty == MS_WT_F32) {
                float *w = mem[k];
                for (int64_t i = 0; i < R * C; i++) w[i] = small(&seed);
            } else if (ty == MS_WT_BF16) {
                uint16_t *w = mem[k];
                for (int64_t i = 0; i < R * C; i++) w[i] = ms_f32_to_bf16_trunc(small(&seed));
            } else if (ty == MS_WT_FP8) { /* codes of either sign, exponents 1..8 (no NaN); scales near 2^-4 */
                uint8_t *w = mem[k];
                for (int64_t i = 0; i < R * C; i++) {
                    uint64_t r = rng_next(&seed);
                    w[i] = (uint8_t)((r & 0x80) | ((((r >> 3) & 7) + 1) << 3) | (r & 7));
                }
                for (uint64_t i = (uint64_t)(R * C); i + 4 <= bytes; i += 4) {
                    float s = 0.0625f * (1.0f + (float)(rng_next(&seed) % 8) / 8.0f);
                    memcpy(w + i, &s, 4);
                }
                W[k].scales = w + R * C;
            } else if (ty == MS_WT_INT4) { /* any nibbles; BF16 scales near 2^-7, one a 32 columns */
                uint8_t *w = mem[k];
                for (int64_t i = 0; i < R * C / 2; i++) w[i] = (uint8_t)rng_next(&seed);
                for (uint64_t i = (uint64_t)(R * C / 2); i + 2 <= bytes; i += 2) {
                    uint16_t s = ms_f32_to_bf16_trunc(0.0078125f * (1.0f + (float)(rng_next(&seed) % 8) / 8.0f));
                    memcpy(w + i, &s, 2);
                }
                W[k].scales = w + R * C / 2;
            } else {
                uint8_t *w = mem[k];
                for (uint64_t i = 0; i < (uint64_t)(R * C / 2); i++) w[i] = (uint8_t)rng_next(&seed);
                for (uint64_t i = (uint64_t)(R * C / 2); i < bytes; i++) w[i] = (uint8_t)(118 + rng_next(&seed) % 6);
                W[k].scales = w + R * C / 2;
            }
            W[k].data = mem[k];
            if (packed) {
                packed_make(&pc[k], mem[k], R, C, !strcmp(bc->kernel, "bf16-pinned"));
                free(mem[k]);
                mem[k] = NULL;
                st[k] = (ms_mat_stream){pk_acquire, pk_release, &pc[k]};
                W[k].data = NULL;
                W[k].stream = &st[k];
                W[k].key = &pc[k];
                read_bytes = pc[k].coded;
            }
        }
        float *X = ms_malloc(sizeof(float) * (size_t)(maxT * C)), *Y = ms_malloc(sizeof(float) * (size_t)(maxT * R));
        for (int64_t i = 0; i < maxT * C; i++) X[i] = small(&seed) * 30;
        for (size_t ti = 0; ti < nT; ti++) {
            int64_t T = Ts[ti];
            double dt = time_case(W, copies, X, T, Y, pool, seconds);
            double gf = 2.0 * (double)R * (double)C * (double)T / dt / 1e9, gb = (double)read_bytes / dt / 1e9;
            json_array_append_new(rows, json_pack("{s:s,s:s,s:I,s:I,s:I,s:f,s:f,s:f,s:f,s:f}", "kernel", bc->kernel, "shape",
                                                  bc->shape, "rows", (json_int_t)R, "cols", (json_int_t)C, "T",
                                                  (json_int_t)T, "seconds", dt, "gflops", gf, "gbs", gb, "peak_ratio",
                                                  peak > 0 ? gf / peak : 0.0, "bw_ratio", gb / bw)); /* (rescaled below) */
            if (!js) {
                printf("%-12s %-26s %6lld %6lld %4lld %9.1f %8.2f %6.1f%% %6.1f%%\n", bc->kernel, bc->shape, (long long)R,
                       (long long)C, (long long)T, gf, gb, peak > 0 ? 100 * gf / peak : 0.0, 100 * gb / bw);
                fflush(stdout);
            }
        }
        free(X);
        free(Y);
        for (int k = 0; k < copies; k++) {
            free(mem[k]);
            if (packed) free(pc[k].src), free(pc[k].end);
        }
    }
    /* The machine's limit is the best it showed: on a shared host the bandwidth drifts while the
     * kernels run, so the probe runs again after them and the ratios are of the larger. */
    double bw2 = ms_kbench_read_bw(pool, (size_t)bw_bytes, seconds);
    ms_pool_free(pool);
    free(Ts);
    double bw_first = bw;
    if (bw2 > bw) {
        bw = bw2;
        size_t i;
        json_t *r;
        json_array_foreach(rows, i, r) json_object_set_new(r, "bw_ratio", json_real(json_number_value(json_object_get(r, "gbs")) / bw));
    }
    if (!js && bw2 > 0)
        printf("\nread bandwidth again  %8.1f GB/s (after the kernels; %%bw above is of the first, %.1f GB/s)\n", bw2,
               bw_first);
    json_object_set_new(out, "read_bandwidth_probes_gbs", json_pack("[f,f]", bw_first, bw2 > 0 ? bw2 : 0.0));
    json_object_set_new(out, "threads", json_integer(nth));
    json_object_set_new(out, "threads_pinned", json_integer(pinned));
    json_object_set_new(out, "kernel_path", json_string(ms_cpu_level_name(ms_cpu_level())));
    json_object_set_new(out, "fma_peak_gflops", peaks);
    json_object_set_new(out, "fp32_peak_gflops", json_real(peak));
    json_object_set_new(out, "read_bandwidth_gbs", json_real(bw));
    json_object_set_new(out, "read_bandwidth_bytes", json_integer((json_int_t)bw_bytes));
    json_object_set_new(out, "kernels", rows);
    if (js) {
        json_dumpf(out, stdout, JSON_COMPACT);
        fputc('\n', stdout);
    }
    json_decref(out);
    return MS_EXIT_OK;
}
