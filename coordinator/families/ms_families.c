/* ms_families: the table of model families: one row per family folder. */
#include <stdio.h>
#include <string.h>

#include "ms_err.h"
#include "ms_families.h"
#include "ms_jcfg.h"
#include "ms_xfams.h"

/* The rows, generated from CMakeLists.txt's MS_FAMILIES: family f's folder coordinator/f/
 * defines ms_f_family. */
#define MS_FAMILY(f) extern const ms_family ms_##f##_family;
#include "ms_family_list.h"
#undef MS_FAMILY
static const ms_family *const families[] = {
#define MS_FAMILY(f) &ms_##f##_family,
#include "ms_family_list.h"
#undef MS_FAMILY
};
#define N_FAMILIES (sizeof families / sizeof families[0])

const ms_family *ms_families_default(void) { return families[0]; }

int ms_families_count(void) { return (int)N_FAMILIES; }

const ms_family *ms_families_at(int i)
{
    MS_ASSERT(i >= 0 && i < (int)N_FAMILIES);
    return families[i];
}

const ms_family *ms_families_find(const char *name)
{
    for (size_t i = 0; name && i < N_FAMILIES; i++)
        if (!strcmp(families[i]->name, name)) return families[i];
    return NULL;
}

const ms_family *ms_families_detect(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    ms_jcfg *j = ms_jcfg_load(path, 16u << 20);
    if (!j) return NULL;
    const ms_xfam *x = ms_xfam_detect(ms_jcfg_root(j), path);
    ms_jcfg_free(j);
    if (!x) return NULL;
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (families[i]->xfam == x) return families[i];
    ms_err_set("%s: the experts of family %s are known to this build, its model is not", path, x->name);
    ms_err_set_code(MS_EXIT_MODEL);
    return NULL;
}

int ms_families_synth(const char *dir, const char *preset, int layers, int sparse, uint64_t seed)
{
    char known[1024] = "";
    for (size_t i = 0; i < N_FAMILIES; i++) {
        if (!families[i]->synth) continue;
        if (families[i]->synth(dir, preset, layers, sparse, seed) == 0) return 0;
        if (ms_err_code() != MS_EXIT_USAGE || !strstr(ms_err_msg(), "unknown")) return -1; /* it was its preset */
        const char *k = strstr(ms_err_msg(), "(known: ");
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s: %.*s", known[0] ? "; " : "",
                 families[i]->name, k ? (int)strcspn(k + 8, ")") : 0, k ? k + 8 : "");
    }
    ms_err_set("unknown synth preset '%s' (%s)", preset, known);
    return ms_err_set_code(MS_EXIT_USAGE);
}

ms_model *ms_families_open(const char *dir, const ms_run_opts *o)
{
    const ms_family *f = ms_families_detect(dir);
    return f ? f->open(dir, o) : NULL;
}
