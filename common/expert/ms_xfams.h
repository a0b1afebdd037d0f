/* ms_xfams: the table of model families whose routed experts this build knows, and what is done with it: detect, describe, locate, check. */
#ifndef MS_XFAMS_H
#define MS_XFAMS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "ms_jcfg.h"
#include "ms_xfam.h"

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

/* The file in a trunk directory written by shard with the experts' format of its packs. */
#define MS_XFAM_FORMAT_FILE "moestream.expert-format.json"

/* Fit the descriptor f to the checkpoint st in dir, whose first routed layer is first_moe (its
 * family's refine; nothing for families without one): what shard, the worker's --model mode
 * and the binder do before locating parts. A checkpoint without routed experts (shard's trunk)
 * takes the format from dir/MS_XFAM_FORMAT_FILE when there is one (checked: the family's own,
 * with f's widths). 0, or -1 with ms_err set (MS_EXIT_MODEL) naming the tensor or file. */
int ms_xfam_refine(ms_xfmt *f, int first_moe, const struct ms_st *st, const char *dir);

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
/* 1 if the checkpoint st holds the first part of expert 0 of `layer` (a draft head's layer
 * that a release may leave out), else 0. */
int ms_xfam_has_expert(const struct ms_st *st, const ms_xfmt *f, int layer);
/* The check of ms_xfam_find_part on a tensor of dtype dt, ndim dims shape[] holding the part
 * as slice `slice` of n_slices (as locate said): 0, or 1 with what is wrong in why. */
int ms_xfam_check_part(const ms_xfmt *f, int part, int slice, int n_slices, int dt, int ndim, const int64_t *shape,
                       char *why, size_t wn);
int ms_xfam_find_part(const struct ms_st *st, const ms_xfmt *f, int layer, int expert, int part, char *name,
                      size_t n, int *file, uint64_t *off, char *why, size_t wn);

#endif
