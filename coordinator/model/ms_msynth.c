/* ms_msynth: deterministic random tensors and their safetensors shards, for every family's synthetic checkpoints. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_kern.h"
#include "ms_msynth.h"
#include "ms_progress.h"
#include "ms_size.h"

uint64_t ms_syn_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* Uniform in [-1, 1) from element index i: counter-based, so any byte range can be produced. */
static float unit(uint64_t seed, int64_t i)
{
    return (float)((double)(ms_syn_mix(seed ^ ms_syn_mix((uint64_t)i)) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static void element(const ms_syn_tensor *t, int64_t i, uint8_t *out)
{
    float v = 0.0f;
    switch (t->k) {
    case MS_SYN_UNIFORM: v = t->amp * unit(t->seed, i); break;
    case MS_SYN_GAIN: v = 1.0f + 0.1f * unit(t->seed, i); break;
    case MS_SYN_EYE: v = t->ndim < 2 || i / t->shape[1] == i % t->shape[1] ? t->amp : 0.0f; break;
    case MS_SYN_DIMS: v = i == 0 ? t->amp : (float)t->valid; break;
    case MS_SYN_ALOG: v = i < t->valid ? logf(1.0f + 7.5f * (unit(t->seed, i) + 1.0f)) : 0.0f; break;
    case MS_SYN_PACKED: out[0] = (uint8_t)(ms_syn_mix(t->seed ^ ms_syn_mix((uint64_t)i >> 3)) >> (8 * (i & 7))); return;
    case MS_SYN_SCALE: out[0] = (uint8_t)((int)t->amp + (int)(ms_syn_mix(t->seed ^ ms_syn_mix((uint64_t)i)) % 3) - 1); return;
    case MS_SYN_FP8: {
        uint64_t r = ms_syn_mix(t->seed ^ ms_syn_mix((uint64_t)i));
        out[0] = (uint8_t)((r & 0x80) | ((((r >> 3) & 7) + 1) << 3) | (r & 7));
        return;
    }
    case MS_SYN_POSITIVE: { /* BF16-exact, so that F32 and BF16 grids of a seed hold the same values */
        float f = t->amp * (1.0f + 0.1f * unit(t->seed, i));
        uint32_t u;
        memcpy(&u, &f, 4);
        u &= 0xFFFF0000u;
        memcpy(&v, &u, 4);
        break;
    }
    }
    if (t->dt == MS_DT_F32) {
        memcpy(out, &v, 4);
    } else if (t->dt == MS_DT_I32) {
        int32_t x = (int32_t)v;
        memcpy(out, &x, 4);
    } else {
        uint16_t b = ms_f32_to_bf16_trunc(v);
        memcpy(out, &b, 2);
    }
}

static int fill(void *ctx, const char *name, uint64_t off, uint8_t *buf, size_t len)
{
    (void)name;
    const ms_syn_tensor *t = ctx;
    ms_progress_add(len);
    size_t es = ms_dtype_size(t->dt);
    if (t->k == MS_SYN_PACKED) { /* the bulk of a checkpoint: eight random bytes per hash */
        for (size_t b = 0; b < len;) {
            uint64_t pos = off + b, w = ms_syn_mix(t->seed ^ ms_syn_mix(pos >> 3));
            for (unsigned k = (unsigned)(pos & 7); k < 8 && b < len; k++, b++) buf[b] = (uint8_t)(w >> (8 * k));
        }
        return 0;
    }
    uint8_t tmp[8];
    for (size_t b = 0; b < len;) {
        uint64_t pos = off + b;
        int64_t i = (int64_t)(pos / es);
        size_t within = (size_t)(pos % es), n = es - within;
        if (n > len - b) n = len - b;
        element(t, i, tmp);
        memcpy(buf + b, tmp + within, n);
        b += n;
    }
    return 0;
}

ms_syn_tensor *ms_syn_add(ms_syn_list *l, const char *name, ms_dtype dt, int ndim, const int64_t *shape, ms_syn_kind k,
                          float amp)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->v = ms_realloc(l->v, sizeof(ms_syn_tensor) * (size_t)l->cap);
    }
    ms_syn_tensor *t = &l->v[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dt = dt;
    t->ndim = ndim;
    MS_ASSERT(ndim >= 1 && ndim <= MS_ST_MAX_DIMS);
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->k = k;
    t->amp = amp;
    t->shard = l->shard;
    t->seed = ms_syn_mix(l->seed ^ name_hash(name));
    return t;
}

float ms_syn_amp(int64_t fan_in) { return (float)(sqrt(3.0) / sqrt((double)fan_in)); }

/* Scale byte that makes E2M1 values (mean |v| about 2.6) have std about 1/sqrt(fan_in). */
float ms_syn_scale_byte(int64_t fan_in) { return (float)(127 - (int)lround(log2(2.6 * sqrt((double)fan_in)))); }


int ms_syn_write(const char *dir, ms_syn_list *lp, const ms_syn_files *sh)
{
    ms_syn_list l = *lp;
    uint64_t all = 0;
    for (int i = 0; i < l.n; i++) {
        uint64_t n = ms_dtype_size(l.v[i].dt);
        for (int d = 0; d < l.v[i].ndim; d++) n *= (uint64_t)l.v[i].shape[d];
        all += n;
    }
    /* Sparse shards have nothing to fill: progress counts the shards. */
    if (sh->sparse)
        ms_progress_begin("synth", (uint64_t)sh->n_shards, MS_PROGRESS_ITEMS);
    else
        ms_progress_begin("synth", all, MS_PROGRESS_BYTES);
    int rc = 0;
    json_t *wmap = json_object();
    uint64_t total = 0;
    char path[4096], fname[256];
    for (int s = 0; s < sh->n_shards && rc == 0; s++) {
        ms_st_writer *w = ms_st_writer_new();
        if (sh->n_shards == 1)
            snprintf(fname, sizeof fname, "model.safetensors");
        else
            snprintf(fname, sizeof fname, "model-%05d-of-%0*d.safetensors", s + sh->first_index, sh->tdigits,
                     sh->name_total > 0 ? sh->name_total : sh->name_total < 0 ? sh->n_shards - 1 : sh->n_shards);
        for (int i = 0; i < l.n; i++) {
            if (l.v[i].shard != s) continue;
            if (sh->sparse)
                ms_st_writer_add_hole(w, l.v[i].name, l.v[i].dt, l.v[i].ndim, l.v[i].shape);
            else
                ms_st_writer_add(w, l.v[i].name, l.v[i].dt, l.v[i].ndim, l.v[i].shape, fill, &l.v[i]);
            json_object_set_new(wmap, l.v[i].name, json_string(fname));
        }
        total += ms_st_writer_data_bytes(w);
        snprintf(path, sizeof path, "%s/%s", dir, fname);
        if (!ms_progress_shown() && !sh->sparse && ms_st_writer_data_bytes(w) > (64u << 20)) {
            char sz[32];
            ms_log(1, "synth: writing %s (%d of %d, %s)", fname, s + 1, sh->n_shards,
                   ms_size_fmt(ms_st_writer_data_bytes(w), sz, sizeof sz));
        }
        rc = ms_st_writer_write(w, path);
        ms_st_writer_free(w);
        if (sh->sparse) ms_progress_add(1);
    }
    ms_progress_end();
    if (rc == 0 && sh->n_shards > 1) {
        json_t *idx = json_pack("{s:{s:I},s:o}", "metadata", "total_size", (json_int_t)total, "weight_map", wmap);
        wmap = NULL;
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        if (json_dump_file(idx, path, JSON_INDENT(2)) != 0) {
            ms_err_set("cannot write %s: %s", path, strerror(errno));
            rc = ms_err_set_code(MS_EXIT_IO);
        }
        json_decref(idx);
    }
    json_decref(wmap);
    free(l.v);
    lp->v = NULL;
    lp->n = lp->cap = 0;
    return rc;
}

int ms_syn_write_config(const char *dir, json_t *config, int sort_keys)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = json_dump_file(config, path, JSON_INDENT(2) | (sort_keys ? JSON_SORT_KEYS : JSON_PRESERVE_ORDER));
    json_decref(config);
    if (rc != 0) return ms_err_fail(MS_EXIT_IO, "cannot write %s: %s", path, strerror(errno));
    return 0;
}
