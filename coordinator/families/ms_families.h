/* ms_families: the registry of model families this build runs: config.json -> family -> an opened model. */
#ifndef MS_FAMILIES_H
#define MS_FAMILIES_H

#include "ms_family.h"

/* The family of the checkpoint in dir, from its config.json (model_type; see each family's
 * detect), or NULL with ms_err set: MS_EXIT_IO if config.json cannot be read, MS_EXIT_MODEL if
 * it is not JSON or names a family this build does not know (listing those it knows). */
const ms_family *ms_families_detect(const char *dir);
/* The registered families, in the list's order (CMakeLists.txt's MS_FAMILIES): i in [0, count). */
int ms_families_count(void);
const ms_family *ms_families_at(int i);
/* The family called name ("kimi-k3"), or NULL. */
const ms_family *ms_families_find(const char *name);
/* The family `moestream synth` and `demo` write when none is named. */
const ms_family *ms_families_default(void);
/* Write the synthetic checkpoint of preset (each family knows its own presets) into dir; the
 * family's synth contract. An unknown preset is refused listing every family's (MS_EXIT_USAGE). */
int ms_families_synth(const char *dir, const char *preset, int layers, int sparse, uint64_t seed);
/* Open dir with its family (ms_family.open); NULL with ms_err set. */
ms_model *ms_families_open(const char *dir, const ms_run_opts *o);

#endif
