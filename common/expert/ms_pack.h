/* ms_pack: per-worker expert packs (moestream shard) and reading them back. */
#ifndef MS_PACK_H
#define MS_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "ms_xfmt.h"

/* A pack is a directory:
 *   manifest.json  {"format": "moestream-pack", "version": 2, "model_fingerprint": "<16 hex>",
 *                   "worker": i, "workers": N, "replicas": R, "num_layers": .., "num_experts": ..,
 *                   "first_moe_layer": .., "expert_format": {...ms_xfmt_to_json...},
 *                   "expert_bytes": B,
 *                   "experts": [{"layer": l, "expert": e, "offset": o,
 *                                "parts": [p0, p1, ...], "xxh3": "<16 hex>"}, ...]}
 *   experts.bin    each expert's parts (for K3: w1 packed, w1 scale, w2 packed, w2 scale,
 *                  w3 packed, w3 scale) back to back from its offset, which is 4 KiB aligned
 * The manifest alone says everything a worker needs (no config.json). xxh3 is XXH3-64 of the
 * expert's B bytes. moestream shard also writes DIR/trunk/: a checkpoint with config.json, the
 * tokenizer files and every tensor but the routed experts, for the coordinator host. */

#define MS_PACK_FORMAT "moestream-pack"
#define MS_PACK_VERSION 2
#define MS_PACK_ALIGN 4096u /* every expert starts at a multiple of this in experts.bin */

typedef struct {
    int layer, expert;
    uint64_t offset;     /* of the expert in experts.bin */
    uint64_t len[MS_XFMT_MAX_PARTS]; /* its parts (fmt.n_parts), contiguous from offset */
    uint64_t xxh3;
} ms_pack_entry;

typedef struct {
    char fingerprint[17];
    int worker, workers, replicas;
    int n_layers, n_experts, first_moe;
    int draft_layers;        /* "draft_layers" (0 when absent): layers from n_layers on whose
                                experts the pack may hold too (a draft head's: DeepSeek-V3's MTP) */
    ms_xfmt fmt;             /* the experts' format */
    uint64_t expert_bytes;
    ms_pack_entry *entries;  /* [n], owned */
    size_t n;
    char *bin_path;          /* DIR/experts.bin, owned */
} ms_pack;

/* Read and validate DIR/manifest.json (every field, the expert format, entries inside
 * experts.bin, aligned, distinct, in MoE layers). A manifest of another version is refused
 * naming both versions. Returns 0, or -1 with ms_err set (MS_EXIT_MODEL / MS_EXIT_IO) naming
 * the file and field. */
int ms_pack_open(const char *dir, ms_pack *p);
void ms_pack_close(ms_pack *p); /* accepts a zeroed or closed pack */

#endif
