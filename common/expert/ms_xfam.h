/* ms_xfam: the model families whose routed experts this build knows: config.json -> expert shapes and descriptor, and where a checkpoint keeps each expert's bytes. */
#ifndef MS_XFAM_H
#define MS_XFAM_H

#include <jansson.h>
#include <stddef.h>

#include "ms_jcfg.h"
#include "ms_xfmt.h"

/* What everything that handles experts without running the model (shard, packs, the worker's
 * --model mode, the coordinator's planner and binder) needs to know of a checkpoint. A second
 * family adds one file (ms_xfam_<family>.c) and one row in ms_xfam.c's table. */
typedef struct {
    char family[32];        /* = fmt.family */
    int n_layers;           /* layers of the model */
    int first_moe;          /* layers [first_moe, n_layers) route, each to n_experts experts */
    int n_experts;
    int top_k;              /* experts per token */
    int have_fmt;           /* 0: the widths make no streamable descriptor (why says so; dense
                               F32 test models are used in memory only) */
    ms_xfmt fmt;
    char why[256];
} ms_xmodel;

typedef struct {
    const char *name;       /* the family, as in ms_xfmt.family ("kimi-k3") */
    /* 1 if the config (its root object) is this family's. */
    int (*detect)(json_t *root);
    /* Read the expert fields into *out, recording missing or bad ones in j. Returns 0 or -1. */
    int (*describe)(ms_jcfg *j, ms_xmodel *out);
    /* Where part `part` of expert (layer, expert) lives: the tensor's name, and which of the
     * n_slices equal slices of that tensor (along its first dimension) holds it (n_slices 1:
     * the whole tensor). Returns 0, or -1 for a name longer than n. */
    int (*locate)(const ms_xfmt *f, int layer, int expert, int part, char *name, size_t n, int *slice,
                  int *n_slices);
    /* The family's descriptor for the widths and constants of `like` (what its config would
     * make). 0, or -1 with ms_err set. */
    int (*make)(const ms_xfmt *like, ms_xfmt *out);
} ms_xfam;

/* The family whose detect accepts root, or NULL with ms_err set (MS_EXIT_MODEL) naming the
 * config's model_type and the families this build knows; `what` names the config. */
const ms_xfam *ms_xfam_detect(json_t *root, const char *what);
/* The family called name, or NULL. */
const ms_xfam *ms_xfam_find(const char *name);

/* Read config_path (strictly, ms_jcfg) and describe its experts. need_fmt: a config without a
 * streamable descriptor is refused (the reason from why). 0, or -1 with ms_err set
 * (MS_EXIT_MODEL, MS_EXIT_IO when the file cannot be read). */
int ms_xfam_load(const char *config_path, int need_fmt, ms_xmodel *out);
/* The same from a parsed config (problems recorded in j; the caller finishes it). */
int ms_xfam_describe(ms_jcfg *j, ms_xmodel *out);

/* Where the family of f keeps part `part` of expert (layer, expert) (see ms_xfam.locate).
 * Returns 0, or -1 with ms_err set (MS_EXIT_MODEL) for a family this build does not know. */
int ms_xfam_locate(const ms_xfmt *f, int layer, int expert, int part, char *name, size_t n, int *slice,
                   int *n_slices);

/* A descriptor read from a peer or a manifest is its family's own: the family is known and its
 * constructor makes exactly f for f's widths and constants (part names included). 0, or -1
 * with ms_err set (MS_EXIT_MODEL) as "where: expert_format: FIELD: A vs B". */
int ms_xfam_check(const ms_xfmt *f, const char *where);

/* Find part `part` of expert (layer, expert) in a checkpoint (ms_xfam_locate) and check it:
 * the part's dtype, and its shape (the whole tensor) or n_slices slices of its bytes. Returns 0
 * with the tensor's name in name, *file the checkpoint file index, *off the absolute offset of
 * the part's bytes; 1 with name set and what is wrong in why ("is missing", "is BF16 of 2 dims
 * [4, 8], expected U8 [4, 4]"); -1 with ms_err set (an unknown family). */
struct ms_st;
int ms_xfam_find_part(const struct ms_st *st, const ms_xfmt *f, int layer, int expert, int part, char *name,
                      size_t n, int *file, uint64_t *off, char *why, size_t wn);

/* Kimi K3 (ms_xfam_k3.c). Its routed experts: three MXFP4 matrices w1 (gate) [I, L], w2 (down)
 * [L, I], w3 (up) [I, L] (six U8 parts "w1.weight_packed", "w1.weight_scale", ...) and
 * SiTU-GLU with beta b1 and linear beta b2. Returns 0, or -1 with ms_err set (MS_EXIT_MODEL) if
 * L or I is not a positive multiple of 32. */
extern const ms_xfam ms_xfam_k3;
int ms_xfam_k3_fmt(int latent, int inter, float b1, float b2, ms_xfmt *f);
/* The one spelling of a K3 expert tensor: "...layers.L.block_sparse_moe.experts.E.SUFFIX". */
int ms_xfam_k3_tensor(int layer, int expert, const char *suffix, char *buf, size_t n);

#endif
