/* ms_cli_shard: the moestream shard command (per-worker expert packs and the trunk checkpoint). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_cli.h"
#include "ms_err.h"
#include "ms_opt.h"
#include "ms_pack.h"
#include "ms_shard.h"
#include "ms_size.h"
#include "ms_st.h"

static void shard_usage(FILE *f)
{
    fputs("usage: moestream shard --model DIR --workers N [--replicas R] --out DIR [--quiet]\n"
          "\n"
          "Split the routed experts of the checkpoint in --model over N expert packs OUT/worker-<i>/\n"
          "(manifest.json with the expert format, experts.bin: each expert 4 KiB aligned with an\n"
          "XXH3-64 checksum); a worker serves a pack from its manifest alone. Worker i owns experts [i*Ne/N, (i+1)*Ne/N) of every MoE layer; with --replicas R\n"
          "(1..N, default 1) it also holds those of workers i-1 .. i-R+1, so every expert lives on R\n"
          "workers. OUT/trunk/ receives config.json, the tokenizer files and every tensor but the\n"
          "routed experts: the checkpoint the coordinator host keeps.\n"
          "\n"
          "  --model DIR     the checkpoint as released (config.json + safetensors shards)\n"
          "  --workers N     number of expert workers (1 .. experts per layer)\n"
          "  --replicas R    workers holding each expert (default 1)\n"
          "  --out DIR       output directory (created if missing; a previous pack there is replaced once\n"
          "                  the new one is complete, and left as it was if sharding fails)\n"
          "  --quiet         no progress bar and no summary line\n",
          f);
}

int ms_cli_shard(int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"workers", required_argument, 0, 'w'},
                                         {"replicas", required_argument, 0, 'r'},
                                         {"out", required_argument, 0, 'o'},
                                         {"quiet", no_argument, 0, 'q'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *model = NULL, *out = NULL;
    long long workers = 0, replicas = 1;
    int quiet = 0, have_workers = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'o': out = optarg; break;
        case 'q': quiet = 1; break;
        case 'w':
            if (ms_opt_int("--workers", optarg, 1, 1000000, &workers) != 0) return ms_cli_fail_err("shard");
            have_workers = 1;
            break;
        case 'r':
            if (ms_opt_int("--replicas", optarg, 1, 1000000, &replicas) != 0) return ms_cli_fail_err("shard");
            break;
        case 'h': shard_usage(stdout); return MS_EXIT_OK;
        default: shard_usage(stderr); return MS_EXIT_USAGE;
        }
    }
    if (optind != argc) return ms_cli_fail("shard", MS_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    if (!model) return ms_cli_fail("shard", MS_EXIT_USAGE, "--model DIR is required");
    if (!out) return ms_cli_fail("shard", MS_EXIT_USAGE, "--out DIR is required");
    if (!have_workers) return ms_cli_fail("shard", MS_EXIT_USAGE, "--workers N is required");
    if (replicas > workers)
        return ms_cli_fail("shard", MS_EXIT_USAGE, "--replicas %lld is more than --workers %lld", replicas, workers);
    if (replicas > 64)
        return ms_cli_fail("shard", MS_EXIT_USAGE, "--replicas %lld: at most 64 are supported", replicas);

    double t0 = ms_cli_now();
    ms_cli_set_output(quiet); /* --quiet: no progress bar either */
    int rc = ms_pack_shard(model, (int)workers, (int)replicas, out);
    if (rc != 0) return ms_cli_fail_err("shard");

    /* Read back what was written: every pack must open, and the numbers make the summary. */
    uint64_t bytes = 0, per_min = UINT64_MAX, per_max = 0;
    char fp[17] = "";
    char *dir = ms_malloc(strlen(out) + 32);
    for (int w = 0; w < (int)workers; w++) {
        ms_pack p;
        sprintf(dir, "%s/worker-%d", out, w);
        if (ms_pack_open(dir, &p) != 0) {
            free(dir);
            ms_err_wrap("reading back the pack just written");
            return ms_cli_fail_err("shard");
        }
        bytes += (uint64_t)p.n * p.expert_bytes;
        if (p.n < per_min) per_min = p.n;
        if (p.n > per_max) per_max = p.n;
        memcpy(fp, p.fingerprint, sizeof fp);
        ms_pack_close(&p);
    }
    sprintf(dir, "%s/trunk", out);
    ms_st *st = ms_st_open_dir(dir);
    if (!st) {
        free(dir);
        ms_err_wrap("reading back the trunk just written");
        return ms_cli_fail_err("shard");
    }
    uint64_t tbytes = 0;
    for (size_t i = 0; i < ms_st_count(st); i++) tbytes += ms_st_at(st, i)->nbytes;
    size_t tn = ms_st_count(st);
    ms_st_close(st);
    free(dir);
    if (!quiet) {
        char per[64];
        if (per_min == per_max)
            snprintf(per, sizeof per, "%llu", (unsigned long long)per_min);
        else
            snprintf(per, sizeof per, "%llu..%llu", (unsigned long long)per_min, (unsigned long long)per_max);
        char b1[32], b2[32];
        fprintf(stderr,
                "moestream shard: %lld pack%s x %s experts (%lld replica%s) = %s in %s/worker-*, trunk %zu tensors "
                "%s in %s/trunk, model %s, %.1f s\n",
                workers, workers > 1 ? "s" : "", per, replicas, replicas > 1 ? "s" : "",
                ms_size_fmt(bytes, b1, sizeof b1), out, tn, ms_size_fmt(tbytes, b2, sizeof b2), out, fp,
                ms_cli_now() - t0);
    }
    return MS_EXIT_OK;
}
