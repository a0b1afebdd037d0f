/* ms_cli_ident: `moestream ident`: hash every byte of a checkpoint once (its identity sidecar) and print its fingerprint. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "ms_cli.h"
#include "ms_clock.h"
#include "ms_err.h"
#include "ms_ident.h"
#include "ms_progress.h"

static void usage(FILE *f)
{
    fputs("usage: moestream ident --model DIR [--quiet]\n"
          "\n"
          "Prints the model fingerprint of checkpoint DIR: config.json and the XXH3-128 of every byte of\n"
          "every tensor. Workers and trunk packs are tied to a checkpoint by it (docs/RELIABILITY.md).\n"
          "The first call on a checkpoint reads all of it (the full Kimi K3: 1.56 TB, as fast as the disk\n"
          "reads) and keeps the hashes in DIR/moestream.ident (or, for a read-only DIR, in $MS_CACHE_DIR or\n"
          "~/.cache/moestream); later calls, runs, workers and pack-trunk read them from there while the\n"
          "shard files keep their size, mtime and inode. Run it once after downloading a checkpoint to\n"
          "pay that read up front, with progress shown.\n"
          "\n"
          "  --model DIR   the checkpoint (a trunk-only one from `shard` prints its recorded fingerprint)\n"
          "  --quiet       no progress or log lines\n",
          f);
}

int ms_cli_ident(int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'}, {"quiet", no_argument, 0, 'q'},
                                         {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    const char *model = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'q': ms_log_set_level(0); break;
        case 'h': usage(stdout); return MS_EXIT_OK;
        default: usage(stderr); return MS_EXIT_USAGE;
        }
    }
    if (optind != argc) return ms_cli_fail("ident", MS_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    if (!model) return ms_cli_fail("ident", MS_EXIT_USAGE, "--model DIR is required");
    ms_progress_use_stderr();
    double t0 = ms_now();
    char fp[17], side[4096];
    if (ms_ident_model(model, fp) != 0) return ms_cli_fail_err("ident");
    printf("%s\n", fp);
    if (ms_ident_sidecar_kept(model))
        ms_log(1, "ident: %s has fingerprint %s (%.1f s; hashes kept in %s)", model, fp, ms_now() - t0,
               ms_ident_sidecar_path(model, side, sizeof side));
    else
        ms_log(1, "ident: %s has fingerprint %s (%.1f s; the hashes could not be kept: they will be computed again "
                  "next time)",
               model, fp, ms_now() - t0);
    return MS_EXIT_OK;
}
