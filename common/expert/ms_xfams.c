/* ms_xfams: the table of model families whose experts this build knows, and lookups over it. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ms_err.h"
#include "ms_st.h"
#include "ms_xfams.h"

/* One row per family, generated from CMakeLists.txt's MS_FAMILIES: family f's expert row is
 * ms_f_experts, in its folder's library (coordinator/f/experts/ms_f_experts.c). */
#define MS_FAMILY(f) extern const ms_xfam ms_##f##_experts;
#include "ms_family_list.h"
#undef MS_FAMILY
static const ms_xfam *const families[] = {
#define MS_FAMILY(f) &ms_##f##_experts,
#include "ms_family_list.h"
#undef MS_FAMILY
};
#define N_FAMILIES (sizeof families / sizeof families[0])

const ms_xfam *ms_xfam_find(const char *name)
{
    for (size_t i = 0; name && i < N_FAMILIES; i++)
        if (!strcmp(families[i]->name, name)) return families[i];
    return NULL;
}

const ms_xfam *ms_xfam_detect(json_t *root, const char *what)
{
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (families[i]->detect(root)) return families[i];
    char known[256] = "";
    for (size_t i = 0; i < N_FAMILIES; i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", families[i]->name);
    json_t *mt = json_object_get(root, "model_type");
    ms_err_set("%s: model_type %s%.60s%s is not a model family this build knows (%s)", what ? what : "config",
               json_is_string(mt) ? "\"" : "", json_is_string(mt) ? json_string_value(mt) : "(absent)",
               json_is_string(mt) ? "\"" : "", known);
    ms_err_set_code(MS_EXIT_MODEL);
    return NULL;
}

int ms_xfam_describe(ms_jcfg *j, ms_xmodel *out)
{
    memset(out, 0, sizeof *out);
    const ms_xfam *f = ms_xfam_detect(ms_jcfg_root(j), ms_jcfg_what(j));
    if (!f) return -1;
    snprintf(out->family, sizeof out->family, "%s", f->name);
    return f->describe(j, out);
}

int ms_xfam_load(const char *config_path, int need_fmt, ms_xmodel *out)
{
    memset(out, 0, sizeof *out);
    ms_jcfg *j = ms_jcfg_load(config_path, 16u << 20);
    if (!j) return -1;
    int rc = ms_xfam_describe(j, out);
    if (rc == 0 || ms_jcfg_n_problems(j)) rc = ms_jcfg_finish(j);
    ms_jcfg_free(j);
    if (rc == 0 && need_fmt && !out->have_fmt) {
        ms_err_set("%s: %s", config_path, out->why);
        rc = ms_err_set_code(MS_EXIT_MODEL);
    }
    return rc;
}

int ms_xfam_refine(ms_xfmt *f, int first_moe, const ms_st *st, const char *dir)
{
    const ms_xfam *fam = ms_xfam_find(f->family);
    int rc = fam && fam->refine ? fam->refine(f, first_moe, st) : 0;
    if (rc != 1) return rc;
    char path[4200];
    snprintf(path, sizeof path, "%s/" MS_XFAM_FORMAT_FILE, dir ? dir : ".");
    if (access(path, F_OK) != 0) return 0; /* the config's format stands (a mismatch shows at the hello) */
    json_error_t je;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    ms_xfmt got;
    if (!j) {
        ms_err_set("%s: invalid JSON (line %d): %s", path, je.line, je.text);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    rc = ms_xfmt_from_json(j, path, &got);
    json_decref(j);
    if (rc != 0 || ms_xfam_check(&got, path) != 0) return -1;
    if (strcmp(got.family, f->family) || got.latent != f->latent || got.inter != f->inter) {
        ms_err_set("%s: experts of %s [%d, %d], the config's are %s [%d, %d]", path, got.family, got.latent, got.inter,
                   f->family, f->latent, f->inter);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    *f = got;
    return 0;
}

int ms_xfam_check(const ms_xfmt *f, const char *where)
{
    const ms_xfam *fam = ms_xfam_find(f->family);
    ms_xfmt want;
    char diff[300];
    if (!fam) {
        ms_err_set("%s: expert_format: family %s is not one this build knows", where, f->family);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    if (fam->make(f, &want) != 0) {
        ms_err_wrap("%s: expert_format", where);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    if (ms_xfmt_diff(&want, f, diff, sizeof diff)) {
        ms_err_set("%s: expert_format is not what family %s makes for these widths: %s", where, f->family, diff);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    return 0;
}

int ms_xfam_locate(const ms_xfmt *f, int layer, int expert, int part, char *name, size_t n, int *slice,
                   int *n_slices)
{
    MS_ASSERT(part >= 0 && part < f->n_parts);
    const ms_xfam *fam = ms_xfam_find(f->family);
    if (!fam) {
        ms_err_set("experts of family %s: this build does not know where its checkpoints keep them", f->family);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    if (fam->locate(f, layer, expert, part, name, n, slice, n_slices) != 0) {
        ms_err_set("layer %d expert %d part %s: tensor name too long", layer, expert, f->part[part].name);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    return 0;
}

int ms_xfam_check_part(const ms_xfmt *f, int part, int slice, int n_slices, int dt, int ndim, const int64_t *shape,
                       char *why, size_t wn)
{
    const ms_xfmt_part *pt = &f->part[part];
    uint64_t bytes = (uint64_t)ms_dtype_size((ms_dtype)dt);
    for (int i = 0; i < ndim; i++) bytes *= (uint64_t)shape[i];
    int ns = n_slices < 0 && ndim > 0 ? (int)shape[0] : n_slices;
    int ok = dt == pt->dtype;
    if (n_slices == 1)
        ok = ok && ndim == 2 && shape[0] == pt->shape[0] && shape[1] == pt->shape[1];
    else
        ok = ok && ndim >= 2 && shape[0] == ns && slice < ns && bytes == (uint64_t)ns * pt->bytes;
    if (ok) return 0;
    snprintf(why, wn, "is %s of %d dims [%lld, %lld%s], expected %s %s[%lld, %lld]%s", ms_dtype_name((ms_dtype)dt),
             ndim, (long long)(ndim > 0 ? shape[0] : 0), (long long)(ndim > 1 ? shape[1] : 0), ndim > 2 ? ", ..." : "",
             ms_dtype_name((ms_dtype)pt->dtype), n_slices != 1 ? "slices of " : "", (long long)pt->shape[0],
             (long long)pt->shape[1], n_slices != 1 && slice >= ns ? " (too few slices)" : "");
    return 1;
}

int ms_xfam_find_part(const ms_st *st, const ms_xfmt *f, int layer, int expert, int part, char *name, size_t n,
                      int *file, uint64_t *off, char *why, size_t wn)
{
    int slice, ns;
    if (ms_xfam_locate(f, layer, expert, part, name, n, &slice, &ns) != 0) return -1;
    const ms_st_tensor *t = ms_st_find(st, name);
    if (!t) return snprintf(why, wn, "is missing"), 1;
    if (ms_xfam_check_part(f, part, slice, ns, (int)t->dtype, t->ndim, t->shape, why, wn)) return 1;
    *file = t->file;
    *off = t->offset + (uint64_t)slice * f->part[part].bytes;
    return 0;
}

int ms_xfam_has_expert(const ms_st *st, const ms_xfmt *f, int layer)
{
    char name[256];
    int slice, ns;
    if (ms_xfam_locate(f, layer, 0, 0, name, sizeof name, &slice, &ns) != 0) {
        ms_err_clear();
        return 0;
    }
    return ms_st_find(st, name) != NULL;
}
