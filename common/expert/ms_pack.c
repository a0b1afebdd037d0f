/* ms_pack: per-worker expert packs: the strict manifest reader (the writer is ms_shard.c). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "ms_xxh.h" /* XXH3, dispatched */

#include "ms_err.h"
#include "ms_file.h"
#include "ms_jcfg.h"
#include "ms_pack.h"
#include "ms_progress.h"
#include "ms_size.h"
#include "ms_st.h"
#include "ms_xfams.h"

#define PACK_FORMAT MS_PACK_FORMAT
#define PACK_VERSION MS_PACK_VERSION
#define PACK_ALIGN MS_PACK_ALIGN



/* Exactly 16 hex digits; lower-cased into out (17 bytes) when given. */
static int parse_hex16(const char *s, uint64_t *v, char *out)
{
    uint64_t x = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        x = x << 4 | (uint64_t)d;
        if (out) out[i] = (char)(d < 10 ? '0' + d : 'a' + d - 10);
    }
    if (s[16] != 0) return -1;
    if (out) out[16] = 0;
    if (v) *v = x;
    return 0;
}

/* ---------------------------------------------------------------- manifest reader ---- */

/* Set "path: message" with class MS_EXIT_MODEL; returns -1. */
#define mf_fail(path, ...) ms_err_fail_in(MS_EXIT_MODEL, path, __VA_ARGS__)

/* Integer field key of obj in [lo, hi]; where = "" or "experts[i] ... " names the entry. */
#define mf_int(path, where, obj, key, lo, hi, out) ms_jcfg_int_field(path, obj, where, key, lo, hi, out)

static int mf_hex(const char *path, const char *where, json_t *obj, const char *key, uint64_t *v, char *out)
{
    json_t *s = json_object_get(obj, key);
    if (!s) return mf_fail(path, "%sfield \"%s\" is missing", where, key);
    if (!json_is_string(s)) return mf_fail(path, "%sfield \"%s\" must be a string", where, key);
    if (parse_hex16(json_string_value(s), v, out) != 0)
        return mf_fail(path, "%sfield \"%s\" is \"%s\", must be 16 hex digits", where, key, json_string_value(s));
    return 0;
}

static int cmp_layer_expert(const void *a, const void *b, void *ctx)
{
    const ms_pack_entry *e = ctx;
    const ms_pack_entry *x = &e[*(const size_t *)a], *y = &e[*(const size_t *)b];
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return x->expert < y->expert ? -1 : x->expert > y->expert;
}

static int cmp_offset(const void *a, const void *b, void *ctx)
{
    const ms_pack_entry *e = ctx;
    const ms_pack_entry *x = &e[*(const size_t *)a], *y = &e[*(const size_t *)b];
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Everything after the JSON parse; p->bin_path is already set. */
static int mf_validate(const char *path, json_t *root, ms_pack *p)
{
    if (!json_is_object(root)) return mf_fail(path, "the manifest must be a JSON object");
    json_t *fmt = json_object_get(root, "format");
    if (!fmt) return mf_fail(path, "field \"format\" is missing");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), PACK_FORMAT) != 0)
        return mf_fail(path, "field \"format\" must be \"%s\"", PACK_FORMAT);
    long long v;
    if (mf_int(path, "", root, "version", 0, 1LL << 30, &v) != 0) return -1;
    if (v != PACK_VERSION)
        return mf_fail(path, "field \"version\" is %lld; this build reads pack version %d only (%s): write the packs "
                       "again with this build's moestream shard",
                       v, PACK_VERSION, v < PACK_VERSION ? "an older pack" : "a newer pack");
    if (mf_hex(path, "", root, "model_fingerprint", NULL, p->fingerprint) != 0) return -1;
    long long workers, worker, replicas, nl, ne, first, eb;
    if (mf_int(path, "", root, "workers", 1, 1 << 20, &workers) != 0 ||
        mf_int(path, "", root, "worker", 0, workers - 1, &worker) != 0 ||
        mf_int(path, "", root, "replicas", 1, workers, &replicas) != 0 ||
        mf_int(path, "", root, "num_layers", 1, 1 << 20, &nl) != 0 ||
        mf_int(path, "", root, "num_experts", 1, 1 << 24, &ne) != 0 ||
        mf_int(path, "", root, "first_moe_layer", 0, nl - 1, &first) != 0 ||
        mf_int(path, "", root, "expert_bytes", 1, INT64_MAX, &eb) != 0)
        return -1;
    p->workers = (int)workers;
    p->worker = (int)worker;
    p->replicas = (int)replicas;
    p->n_layers = (int)nl;
    p->n_experts = (int)ne;
    p->first_moe = (int)first;
    long long dl = 0;
    if (json_object_get(root, "draft_layers") && mf_int(path, "", root, "draft_layers", 0, 8, &dl) != 0) return -1;
    p->draft_layers = (int)dl;
    json_t *xf = json_object_get(root, "expert_format");
    if (!xf) return mf_fail(path, "field \"expert_format\" is missing");
    if (ms_xfmt_from_json(xf, path, &p->fmt) != 0 || ms_xfam_check(&p->fmt, path) != 0) return -1;
    uint64_t want_e = ms_xfmt_expert_bytes(&p->fmt);
    int np = p->fmt.n_parts;
    if ((uint64_t)eb != want_e)
        return mf_fail(path, "field \"expert_bytes\" is %lld, but the expert format makes %llu", eb,
                       (unsigned long long)want_e);
    p->expert_bytes = want_e;

    json_t *arr = json_object_get(root, "experts");
    if (!arr) return mf_fail(path, "field \"experts\" is missing");
    if (!json_is_array(arr)) return mf_fail(path, "field \"experts\" must be an array");
    p->n = json_array_size(arr);
    p->entries = ms_calloc(p->n ? p->n : 1, sizeof *p->entries);
    for (size_t i = 0; i < p->n; i++) {
        json_t *o = json_array_get(arr, i);
        char where[96];
        snprintf(where, sizeof where, "experts[%zu]: ", i);
        if (!json_is_object(o)) return mf_fail(path, "%smust be an object", where);
        ms_pack_entry *e = &p->entries[i];
        long long l, x, off;
        if (mf_int(path, where, o, "layer", 0, nl + dl - 1, &l) != 0 || mf_int(path, where, o, "expert", 0, ne - 1, &x) != 0)
            return -1;
        if (l < first)
            return mf_fail(path, "%slayer %lld is a dense layer (first_moe_layer is %lld)", where, l, first);
        e->layer = (int)l;
        e->expert = (int)x;
        snprintf(where, sizeof where, "experts[%zu] (layer %d expert %d): ", i, e->layer, e->expert);
        if (mf_int(path, where, o, "offset", 0, INT64_MAX - (long long)want_e, &off) != 0) return -1;
        if (off % PACK_ALIGN)
            return mf_fail(path, "%sfield \"offset\" %lld is not a multiple of %u", where, off, PACK_ALIGN);
        e->offset = (uint64_t)off;
        json_t *parts = json_object_get(o, "parts");
        if (!parts) return mf_fail(path, "%sfield \"parts\" is missing", where);
        if (!json_is_array(parts) || json_array_size(parts) != (size_t)np)
            return mf_fail(path, "%sfield \"parts\" must be an array of %d integers", where, np);
        uint64_t sum = 0;
        for (int k = 0; k < np; k++) {
            json_t *pk = json_array_get(parts, (size_t)k);
            if (!json_is_integer(pk) || json_integer_value(pk) < 0)
                return mf_fail(path, "%sfield \"parts\"[%d] must be a non-negative integer", where, k);
            e->len[k] = (uint64_t)json_integer_value(pk);
            if (e->len[k] > want_e) return mf_fail(path, "%sfield \"parts\"[%d] is larger than the expert", where, k);
            sum += e->len[k];
        }
        if (sum != want_e)
            return mf_fail(path, "%sfield \"parts\" sums to %llu, not expert_bytes %llu", where,
                           (unsigned long long)sum, (unsigned long long)want_e);
        for (int k = 0; k < np; k++)
            if (e->len[k] != p->fmt.part[k].bytes)
                return mf_fail(path, "%sfield \"parts\"[%d] (%s) is %llu bytes, expected %llu", where, k,
                               p->fmt.part[k].name, (unsigned long long)e->len[k],
                               (unsigned long long)p->fmt.part[k].bytes);
        if (mf_hex(path, where, o, "xxh3", &e->xxh3, NULL) != 0) return -1;
    }

    /* Distinct (layer, expert), then no two experts sharing bytes. */
    size_t *ix = ms_malloc(sizeof(size_t) * (p->n ? p->n : 1));
    for (size_t i = 0; i < p->n; i++) ix[i] = i;
    qsort_r(ix, p->n, sizeof *ix, cmp_layer_expert, p->entries);
    int rc = 0;
    for (size_t i = 1; i < p->n && rc == 0; i++) {
        const ms_pack_entry *a = &p->entries[ix[i - 1]], *b = &p->entries[ix[i]];
        size_t lo = ix[i - 1] < ix[i] ? ix[i - 1] : ix[i], hi = ix[i - 1] < ix[i] ? ix[i] : ix[i - 1];
        if (a->layer == b->layer && a->expert == b->expert)
            rc =
                mf_fail(path, "experts[%zu] and experts[%zu] are both layer %d expert %d", lo, hi, a->layer, a->expert);
    }
    if (rc == 0) {
        qsort_r(ix, p->n, sizeof *ix, cmp_offset, p->entries);
        for (size_t i = 1; i < p->n && rc == 0; i++) {
            const ms_pack_entry *a = &p->entries[ix[i - 1]], *b = &p->entries[ix[i]];
            if (a->offset + want_e > b->offset)
                rc = mf_fail(
                    path, "experts[%zu] (layer %d expert %d) at offset %llu overlaps experts[%zu] (layer %d expert %d)",
                    ix[i], b->layer, b->expert, (unsigned long long)b->offset, ix[i - 1], a->layer, a->expert);
        }
    }
    if (rc != 0) {
        free(ix);
        return -1;
    }

    /* Every entry inside experts.bin. */
    struct stat sb;
    if (stat(p->bin_path, &sb) != 0) {
        free(ix);
        ms_err_set("%s: cannot open %s: %s", path, p->bin_path, strerror(errno));
        return ms_err_set_code(MS_EXIT_IO);
    }
    uint64_t size = (uint64_t)sb.st_size;
    for (size_t i = 0; i < p->n; i++) {
        const ms_pack_entry *e = &p->entries[ix[i]];
        if (e->offset + want_e > size) {
            rc = mf_fail(
                path, "experts[%zu] (layer %d expert %d) ends at byte %llu, beyond the %llu bytes of %s (truncated?)",
                ix[i], e->layer, e->expert, (unsigned long long)(e->offset + want_e), (unsigned long long)size,
                p->bin_path);
            break;
        }
    }
    free(ix);
    return rc;
}

/* A manifest lists one line per expert: K3 (83k experts) needs a few tens of MiB. */
#define PACK_MAX_MANIFEST ((uint64_t)512 << 20)

int ms_pack_open(const char *dir, ms_pack *p)
{
    MS_ASSERT(dir && p);
    memset(p, 0, sizeof *p);
    size_t dl = strlen(dir) + 32;
    char *path = ms_malloc(dl);
    snprintf(path, dl, "%s/manifest.json", dir);
    p->bin_path = ms_malloc(dl);
    snprintf(p->bin_path, dl, "%s/experts.bin", dir);
    size_t tlen = 0;
    char *text = ms_file_read_all(path, "pack manifest", 0, PACK_MAX_MANIFEST, MS_EXIT_MODEL, &tlen);
    if (!text) {
        free(path);
        ms_pack_close(p);
        return -1;
    }
    json_error_t je;
    json_t *root = json_loadb(text, tlen, JSON_REJECT_DUPLICATES, &je);
    free(text);
    int rc;
    if (!root)
        rc = mf_fail(path, "invalid JSON at line %d column %d: %s", je.line, je.column, je.text);
    else
        rc = mf_validate(path, root, p);
    json_decref(root);
    free(path);
    if (rc != 0) ms_pack_close(p);
    return rc;
}

void ms_pack_close(ms_pack *p)
{
    if (!p) return;
    free(p->entries);
    free(p->bin_path);
    memset(p, 0, sizeof *p);
}
