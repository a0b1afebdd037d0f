/* ms_xfam: what a model family tells about its routed experts (one row of the table in ms_xfams.c): config.json -> expert shapes and descriptor, where a checkpoint keeps each expert's bytes. */
#ifndef MS_XFAM_H
#define MS_XFAM_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#include "ms_err.h"
#include "ms_jcfg.h"
#include "ms_xfmt.h"

struct ms_st;

/* What everything that handles experts without running the model (shard, packs, the worker's
 * --model mode, the coordinator's planner and binder) needs to know of a checkpoint. A second
 * family adds its expert row in its own folder (coordinator/<f>/experts/ms_<f>_experts.[ch], a
 * library of its own that the worker links) and its word in MS_FAMILIES (CMakeLists.txt). */
typedef struct {
    char family[32];        /* = fmt.family */
    int n_layers;           /* layers of the model */
    int first_moe;          /* layers [first_moe, n_layers) route, each to n_experts experts */
    int n_experts;
    int top_k;              /* experts per token */
    int draft_layers;       /* layers after n_layers whose routed experts (n_experts each) the
                               checkpoint may keep: a draft head's (DeepSeek-V3's MTP layer, layer
                               n_layers); whether it keeps them its files tell. 0: none */
    int have_fmt;           /* 0: the widths make no streamable descriptor (why says so; dense
                               F32 test models are used in memory only) */
    ms_xfmt fmt;
    char why[256];
} ms_xmodel;

/* What a row's describe fills in once its config is read: the layer and expert counts, and the
 * outcome of making its descriptor (fmt_rc: the constructor's 0, or -1 with ms_err set, whose
 * message becomes why). Returns 0. */
static inline int ms_xmodel_set(ms_xmodel *out, int n_layers, int first_moe, int n_experts, int top_k, int fmt_rc)
{
    out->n_layers = n_layers;
    out->first_moe = first_moe;
    out->n_experts = n_experts;
    out->top_k = top_k;
    out->have_fmt = fmt_rc == 0;
    if (!out->have_fmt) snprintf(out->why, sizeof out->why, "%s", ms_err_msg());
    return 0;
}

typedef struct {
    const char *name;       /* the family, as in ms_xfmt.family ("kimi-k3") */
    /* 1 if the config (its root object) is this family's. */
    int (*detect)(json_t *root);
    /* Read the expert fields into *out, recording missing or bad ones in j. Returns 0 or -1. */
    int (*describe)(ms_jcfg *j, ms_xmodel *out);
    /* Where part `part` of expert (layer, expert) lives: the tensor's name, and which of the
     * n_slices equal slices of that tensor (along its first dimension) holds it (n_slices 1:
     * the whole tensor; -1: as many slices as the tensor's first dimension). Returns 0, or -1
     * for a name longer than n. */
    int (*locate)(const ms_xfmt *f, int layer, int expert, int part, char *name, size_t n, int *slice,
                  int *n_slices);
    /* The family's descriptor for the widths and constants of `like` (what its config would
     * make). 0, or -1 with ms_err set. */
    int (*make)(const ms_xfmt *like, ms_xfmt *out);
    /* Adjust the descriptor to what a checkpoint's headers say where the config does not (e.g.
     * the dtype its biases are stored in), or NULL. 0; 1 when st holds no routed expert to
     * tell (a trunk written by shard); -1 with ms_err set. */
    int (*refine)(ms_xfmt *f, int first_moe, const struct ms_st *st);
} ms_xfam;

#endif
