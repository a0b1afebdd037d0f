/* ms_st: strict safetensors reader (single file, directory or indexed shards); the writer is ms_st_write.c. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ms_err.h"
#include "ms_file.h"
#include "ms_st.h"

/* A header larger than this is refused outright: the real K3 shards have ~5k tensors each,
 * i.e. about 1 MiB of header; 256 MiB is far beyond any honest file. */
#define ST_MAX_HEADER ((uint64_t)256 << 20)
/* The index of the real K3 checkpoint is a few tens of MiB. */
#define ST_MAX_INDEX ((uint64_t)256 << 20)

static const char *const dtype_names[MS_DT_COUNT] = {"F32", "BF16", "F16", "U8", "F8_E4M3", "I32"};
static const size_t dtype_sizes[MS_DT_COUNT] = {4, 2, 2, 1, 1, 4};

size_t ms_dtype_size(ms_dtype dt)
{
    MS_ASSERT((unsigned)dt < MS_DT_COUNT);
    return dtype_sizes[dt];
}

const char *ms_dtype_name(ms_dtype dt)
{
    MS_ASSERT((unsigned)dt < MS_DT_COUNT);
    return dtype_names[dt];
}

static int dtype_parse(const char *s, ms_dtype *dt)
{
    for (int i = 0; i < MS_DT_COUNT; i++)
        if (strcmp(s, dtype_names[i]) == 0) {
            *dt = (ms_dtype)i;
            return 0;
        }
    return -1;
}

/* ---------------------------------------------------------------- reader */

/* Names live in a chunked arena so the pointers handed out stay valid while the tensor
 * array grows (the real checkpoint has ~500k names). */
typedef struct name_chunk {
    struct name_chunk *next;
    size_t used, cap;
    char data[];
} name_chunk;

typedef struct {
    char *path;
    uint64_t size; /* bytes when opened */
} st_file;

struct ms_st {
    st_file *files;
    int nfiles, cap_files;
    ms_st_tensor *t; /* [n] file order, then offset order */
    size_t n, cap;
    uint32_t *htab; /* [hcap] index+1 into t, 0 = empty; open addressing, linear probing */
    size_t hcap;
    name_chunk *names;
};

static char *arena_strdup(ms_st *st, const char *s)
{
    size_t len = strlen(s) + 1;
    name_chunk *c = st->names;
    if (!c || c->cap - c->used < len) {
        size_t cap = len > ((size_t)1 << 20) ? len : ((size_t)1 << 20);
        c = ms_malloc(sizeof *c + cap);
        c->cap = cap;
        c->used = 0;
        c->next = st->names;
        st->names = c;
    }
    char *p = c->data + c->used;
    memcpy(p, s, len);
    c->used += len;
    return p;
}

static uint64_t hash_str(const char *s)
{
    /* FNV-1a, 64 bit */
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

void ms_st_close(ms_st *st)
{
    if (!st) return;
    for (int i = 0; i < st->nfiles; i++) free(st->files[i].path);
    free(st->files);
    free(st->t);
    free(st->htab);
    while (st->names) {
        name_chunk *n = st->names->next;
        free(st->names);
        st->names = n;
    }
    free(st);
}

static uint64_t rd_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int err_model(void) { return ms_err_set_code(MS_EXIT_MODEL); }
static int err_io(void) { return ms_err_set_code(MS_EXIT_IO); }

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t k = 0;
    k += (size_t)snprintf(buf + k, cap - k, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

/* Read one non-negative JSON integer. */
static int json_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    if (x < 0) return -1;
    *out = (uint64_t)x;
    return 0;
}

/* Validate one header entry and append it as a tensor of file `fi`. */
static int parse_entry(ms_st *st, int fi, const char *name, json_t *e, uint64_t data_base, uint64_t data_size)
{
    const char *path = st->files[fi].path;
    if (!json_is_object(e)) {
        ms_err_set("%s: tensor '%s': header entry is not a JSON object", path, name);
        return err_model();
    }
    json_t *jd = json_object_get(e, "dtype"), *js = json_object_get(e, "shape"),
           *jo = json_object_get(e, "data_offsets");
    if (!jd || !js || !jo) {
        ms_err_set("%s: tensor '%s': header entry lacks%s%s%s", path, name, jd ? "" : " \"dtype\"",
                   js ? "" : " \"shape\"", jo ? "" : " \"data_offsets\"");
        return err_model();
    }
    ms_dtype dt;
    if (!json_is_string(jd)) {
        ms_err_set("%s: tensor '%s': \"dtype\" is not a string", path, name);
        return err_model();
    }
    if (dtype_parse(json_string_value(jd), &dt) != 0) {
        ms_err_set("%s: tensor '%s': unsupported dtype '%s' (accepted: F32, BF16, F16, U8, F8_E4M3)", path, name,
                   json_string_value(jd));
        return err_model();
    }
    if (!json_is_array(js)) {
        ms_err_set("%s: tensor '%s': \"shape\" is not an array", path, name);
        return err_model();
    }
    size_t nd = json_array_size(js);
    if (nd > MS_ST_MAX_DIMS) {
        ms_err_set("%s: tensor '%s': %zu dimensions (at most %d supported)", path, name, nd, MS_ST_MAX_DIMS);
        return err_model();
    }
    ms_st_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = (int)nd;
    uint64_t numel = 1;
    int overflow = 0;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        uint64_t v;
        if (json_u64(d, &v) != 0) {
            if (json_is_integer(d))
                ms_err_set("%s: tensor '%s': negative dimension %lld in \"shape\"", path, name,
                           (long long)json_integer_value(d));
            else
                ms_err_set("%s: tensor '%s': \"shape\" entry %zu is not an integer", path, name, i);
            return err_model();
        }
        t.shape[i] = (int64_t)v;
        if (__builtin_mul_overflow(numel, v, &numel)) overflow = 1;
    }
    uint64_t nbytes = 0;
    if (overflow || numel > (uint64_t)INT64_MAX || __builtin_mul_overflow(numel, (uint64_t)dtype_sizes[dt], &nbytes)) {
        ms_err_set("%s: tensor '%s': shape is too large", path, name);
        return err_model();
    }
    t.numel = (int64_t)numel;
    t.nbytes = nbytes;
    uint64_t b, en;
    if (!json_is_array(jo) || json_array_size(jo) != 2 || json_u64(json_array_get(jo, 0), &b) != 0 ||
        json_u64(json_array_get(jo, 1), &en) != 0) {
        ms_err_set("%s: tensor '%s': \"data_offsets\" must be [begin, end] with non-negative integers", path, name);
        return err_model();
    }
    if (b > en) {
        ms_err_set("%s: tensor '%s': data_offsets [%llu, %llu]: end lies before begin", path, name,
                   (unsigned long long)b, (unsigned long long)en);
        return err_model();
    }
    if (en > data_size) {
        ms_err_set("%s: tensor '%s': data_offsets [%llu, %llu] reach beyond the data section of %llu bytes "
                   "(file truncated?)",
                   path, name, (unsigned long long)b, (unsigned long long)en, (unsigned long long)data_size);
        return err_model();
    }
    if (en - b != nbytes) {
        char sh[256];
        shape_str(sh, sizeof sh, t.ndim, t.shape);
        ms_err_set("%s: tensor '%s': data_offsets [%llu, %llu] span %llu bytes but %s %s needs %llu", path, name,
                   (unsigned long long)b, (unsigned long long)en, (unsigned long long)(en - b), dtype_names[dt], sh,
                   (unsigned long long)nbytes);
        return err_model();
    }
    t.file = fi;
    t.offset = data_base + b;
    t.name = arena_strdup(st, name);
    if (st->n == st->cap) {
        st->cap = st->cap ? st->cap * 2 : 256;
        st->t = ms_realloc(st->t, st->cap * sizeof *st->t);
    }
    st->t[st->n++] = t;
    return 0;
}

static int cmp_offset(const void *a, const void *b)
{
    const ms_st_tensor *x = a, *y = b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The format requires the tensors (sorted by offset) to cover the data section exactly: no
 * hole, no overlap, no trailing byte. Otherwise a header length off by a few bytes, or two
 * names for the same bytes, would load silently wrong weights. */
static int check_tiling(const ms_st *st, int fi, size_t first, uint64_t data_base, uint64_t data_size)
{
    const char *path = st->files[fi].path;
    uint64_t at = 0; /* end of the bytes covered so far, relative to the data section */
    const char *prev = NULL;
    for (size_t i = first; i < st->n; i++) {
        const ms_st_tensor *t = &st->t[i];
        uint64_t b = t->offset - data_base;
        if (b < at) {
            ms_err_set("%s: tensor '%s' (data_offsets [%llu, %llu]) overlaps tensor '%s', which ends at byte %llu", path,
                       t->name, (unsigned long long)b, (unsigned long long)(b + t->nbytes), prev,
                       (unsigned long long)at);
            return err_model();
        }
        if (b > at) {
            ms_err_set("%s: tensor '%s' begins at byte %llu of the data section, but the tensors before it end at "
                       "byte %llu: a hole of %llu bytes (the format allows none; header length wrong?)",
                       path, t->name, (unsigned long long)b, (unsigned long long)at, (unsigned long long)(b - at));
            return err_model();
        }
        at = b + t->nbytes;
        prev = t->name;
    }
    if (at != data_size) {
        if (prev)
            ms_err_set("%s: the last tensor '%s' ends at byte %llu, but the data section has %llu bytes (header "
                       "length wrong, or trailing bytes; the format allows none)",
                       path, prev, (unsigned long long)at, (unsigned long long)data_size);
        else
            ms_err_set("%s: no tensors, but the data section has %llu bytes (header length wrong?)", path,
                       (unsigned long long)data_size);
        return err_model();
    }
    return 0;
}

/* Read `path`'s header (the file is not mapped: tensor bytes are read with ms_st_read, so a
 * file truncated later is an I/O error, never SIGBUS), validate it and append its tensors
 * (sorted by offset). */
static int st_add_file(ms_st *st, const char *path)
{
    uint64_t size = 0;
    int fd = ms_file_open(path, "shard", 0, 0, &size); /* a FIFO is refused, never waited on */
    if (fd < 0) return -1;
    if (size < 8) {
        close(fd);
        ms_err_set("%s: file is %llu bytes, too short for a safetensors header (truncated?)", path,
                   (unsigned long long)size);
        return err_model();
    }
    if (st->nfiles == st->cap_files) {
        st->cap_files = st->cap_files ? st->cap_files * 2 : 8;
        st->files = ms_realloc(st->files, (size_t)st->cap_files * sizeof *st->files);
    }
    int fi = st->nfiles++;
    st->files[fi].path = ms_strdup(path);
    st->files[fi].size = size;

    uint8_t len8[8];
    if (ms_file_pread(fd, path, 0, len8, 8) != 0) {
        close(fd);
        return -1;
    }
    uint64_t hlen = rd_le64(len8);
    if (hlen > size - 8) {
        close(fd);
        ms_err_set("%s: header length %llu exceeds the file size %llu (truncated or not a safetensors file)", path,
                   (unsigned long long)hlen, (unsigned long long)size);
        return err_model();
    }
    if (hlen > ST_MAX_HEADER || hlen < 2) {
        close(fd);
        ms_err_set("%s: implausible header length %llu (not a safetensors file?)", path, (unsigned long long)hlen);
        return err_model();
    }
    char *text = ms_malloc((size_t)hlen); /* [hlen] the JSON header */
    int rr = ms_file_pread(fd, path, 8, text, (size_t)hlen);
    /* Read once: leave no page cache behind (it counts against a memory cgroup, and a
     * full-depth checkpoint has about 100 MB of headers). */
    posix_fadvise(fd, 0, (off_t)(8 + hlen), POSIX_FADV_DONTNEED);
    close(fd);
    if (rr != 0) {
        free(text);
        return -1;
    }
    json_error_t je;
    json_t *h = json_loadb(text, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!h) {
        ms_err_set("%s: invalid JSON header (line %d, column %d): %s", path, je.line, je.column, je.text);
        return err_model();
    }
    if (!json_is_object(h)) {
        json_decref(h);
        ms_err_set("%s: header is not a JSON object", path);
        return err_model();
    }
    size_t first = st->n;
    if (st->cap < st->n + json_object_size(h)) { /* grow once per file, geometrically */
        size_t need = st->n + json_object_size(h);
        st->cap = st->cap * 2 > need ? st->cap * 2 : need;
        st->t = ms_realloc(st->t, st->cap * sizeof *st->t);
    }
    uint64_t data_base = 8 + hlen, data_size = size - data_base;
    const char *key;
    json_t *val;
    json_object_foreach(h, key, val)
    {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(val)) {
                json_decref(h);
                ms_err_set("%s: \"__metadata__\" is not a JSON object", path);
                return err_model();
            }
            continue;
        }
        if (parse_entry(st, fi, key, val, data_base, data_size) != 0) {
            json_decref(h);
            return -1;
        }
    }
    json_decref(h);
    if (st->n > first) qsort(st->t + first, st->n - first, sizeof *st->t, cmp_offset);
    return check_tiling(st, fi, first, data_base, data_size);
}

/* Build the name hash table; a name seen twice is an error naming both files. */
static int st_index(ms_st *st)
{
    if (st->n >= UINT32_MAX / 2) {
        ms_err_set("%s: too many tensors (%zu)", st->nfiles ? st->files[0].path : "checkpoint", st->n);
        return err_model();
    }
    size_t cap = 16;
    while (cap < st->n * 2) cap *= 2;
    free(st->htab);
    st->htab = ms_calloc(cap, sizeof *st->htab);
    st->hcap = cap;
    for (size_t i = 0; i < st->n; i++) {
        size_t j = (size_t)hash_str(st->t[i].name) & (cap - 1);
        while (st->htab[j]) {
            const ms_st_tensor *o = &st->t[st->htab[j] - 1];
            if (strcmp(o->name, st->t[i].name) == 0) {
                ms_err_set("tensor '%s' appears twice: in %s and in %s", o->name, st->files[o->file].path,
                           st->files[st->t[i].file].path);
                return err_model();
            }
            j = (j + 1) & (cap - 1);
        }
        st->htab[j] = (uint32_t)(i + 1);
    }
    return 0;
}

const ms_st_tensor *ms_st_find(const ms_st *st, const char *name)
{
    MS_ASSERT(st && name);
    if (!st->hcap) return NULL;
    size_t j = (size_t)hash_str(name) & (st->hcap - 1);
    while (st->htab[j]) {
        const ms_st_tensor *t = &st->t[st->htab[j] - 1];
        if (strcmp(t->name, name) == 0) return t;
        j = (j + 1) & (st->hcap - 1);
    }
    return NULL;
}

size_t ms_st_count(const ms_st *st) { return st->n; }

const ms_st_tensor *ms_st_at(const ms_st *st, size_t i)
{
    MS_ASSERT(i < st->n);
    return &st->t[i];
}

const char *ms_st_file_path(const ms_st *st, int file)
{
    MS_ASSERT(file >= 0 && file < st->nfiles);
    return st->files[file].path;
}

int ms_st_file_count(const ms_st *st) { return st->nfiles; }

int ms_st_read(const ms_st *st, const ms_st_tensor *t, uint64_t off, void *buf, size_t len)
{
    MS_ASSERT(st && t && t->file >= 0 && t->file < st->nfiles);
    MS_ASSERT(off <= t->nbytes && len <= t->nbytes - off);
    const char *path = st->files[t->file].path;
    int fd = ms_file_open(path, "shard", 0, 0, NULL);
    if (fd < 0) return ms_err_wrap("tensor '%s'", t->name);
    int rc = ms_file_pread(fd, path, t->offset + off, buf, len);
    close(fd);
    if (rc != 0) return ms_err_wrap("tensor '%s'", t->name);
    return 0;
}

ms_st *ms_st_open_file(const char *path)
{
    ms_st *st = ms_calloc(1, sizeof *st);
    if (st_add_file(st, path) != 0 || st_index(st) != 0) {
        ms_st_close(st);
        return NULL;
    }
    return st;
}

static char *path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = ms_malloc(a + b + 2);
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

/* Drop the page cache of a file read once (best effort: a failure changes nothing but memory). */
static void drop_cache(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Open the shards named by the index and check that index and shards agree tensor by tensor. */
static int st_open_indexed(ms_st *st, const char *dir, const char *ipath)
{
    json_error_t je;
    size_t tlen = 0;
    char *text = ms_file_read_all(ipath, "index", 0, ST_MAX_INDEX, MS_EXIT_MODEL, &tlen);
    if (!text) return -1;
    drop_cache(ipath); /* the index is read once too (57 MB for the full K3) */
    json_t *root = json_loadb(text, tlen, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!root) {
        ms_err_set("%s: cannot parse index (line %d, column %d): %s", ipath, je.line, je.column, je.text);
        return err_model();
    }
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(root) || !json_is_object(wm)) {
        json_decref(root);
        ms_err_set("%s: index has no \"weight_map\" object", ipath);
        return err_model();
    }
    /* Distinct shard names, sorted: each shard is opened once, in name order. */
    size_t nw = json_object_size(wm), ns = 0;
    const char **shards = ms_malloc((nw ? nw : 1) * sizeof *shards);
    const char *key;
    json_t *val;
    int rc = 0;
    json_object_foreach(wm, key, val)
    {
        if (!json_is_string(val)) {
            ms_err_set("%s: weight_map entry for tensor '%s' is not a string", ipath, key);
            rc = err_model();
            goto out;
        }
        const char *s = json_string_value(val);
        if (!*s || strchr(s, '/')) {
            ms_err_set("%s: tensor '%s' maps to '%s', which is not a plain file name", ipath, key, s);
            rc = err_model();
            goto out;
        }
        shards[ns++] = s;
    }
    if (ns == 0) {
        ms_err_set("%s: weight_map is empty", ipath);
        rc = err_model();
        goto out;
    }
    qsort(shards, ns, sizeof *shards, cmp_str);
    size_t nd = 0;
    for (size_t i = 0; i < ns; i++)
        if (nd == 0 || strcmp(shards[nd - 1], shards[i]) != 0) shards[nd++] = shards[i];
    for (size_t i = 0; i < nd; i++) {
        char *p = path_join(dir, shards[i]);
        rc = st_add_file(st, p);
        free(p);
        if (rc != 0) {
            ms_err_wrap("%s names shard '%s'", ipath, shards[i]);
            goto out;
        }
    }
    if ((rc = st_index(st)) != 0) goto out;
    /* Every listed tensor must be in the shard the index names... */
    json_object_foreach(wm, key, val)
    {
        const char *s = json_string_value(val);
        const ms_st_tensor *t = ms_st_find(st, key);
        if (!t) {
            ms_err_set("%s: tensor '%s' is listed in shard '%s', but that shard does not contain it", ipath, key, s);
            rc = err_model();
            goto out;
        }
        const char *actual = st->files[t->file].path;
        const char *base = strrchr(actual, '/');
        base = base ? base + 1 : actual;
        if (strcmp(base, s) != 0) {
            ms_err_set("%s: tensor '%s' is listed in shard '%s', but it is in %s", ipath, key, s, actual);
            rc = err_model();
            goto out;
        }
    }
    /* ...and every tensor of a shard must be listed (an unlisted one means the index and
     * the shards come from different checkpoints). */
    for (size_t i = 0; i < st->n; i++)
        if (!json_object_get(wm, st->t[i].name)) {
            ms_err_set("%s: tensor '%s' of %s is not listed in the index", ipath, st->t[i].name,
                       st->files[st->t[i].file].path);
            rc = err_model();
            goto out;
        }
out:
    free(shards);
    json_decref(root);
    return rc;
}

/* No index and no model.safetensors: every *.safetensors of the directory, in name order. */
static int st_open_glob(ms_st *st, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        ms_err_set("%s: cannot open checkpoint directory: %s", dir, strerror(errno));
        return err_io();
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    const char *suf = ".safetensors";
    size_t sl = strlen(suf);
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        if (l <= sl || strcmp(de->d_name + l - sl, suf) != 0) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            names = ms_realloc(names, cap * sizeof *names);
        }
        names[n++] = ms_strdup(de->d_name);
    }
    closedir(d);
    int rc = 0;
    if (n == 0) {
        ms_err_set("%s: no model.safetensors.index.json, model.safetensors or *.safetensors file", dir);
        rc = err_model();
    } else {
        qsort(names, n, sizeof *names, cmp_str);
        for (size_t i = 0; i < n && rc == 0; i++) {
            char *p = path_join(dir, names[i]);
            rc = st_add_file(st, p);
            free(p);
        }
        if (rc == 0) rc = st_index(st);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

ms_st *ms_st_open_dir(const char *dir)
{
    MS_ASSERT(dir);
    ms_st *st = ms_calloc(1, sizeof *st);
    char *ipath = path_join(dir, "model.safetensors.index.json");
    char *single = path_join(dir, "model.safetensors");
    struct stat sb;
    int rc;
    if (stat(ipath, &sb) == 0)
        rc = st_open_indexed(st, dir, ipath);
    else if (stat(single, &sb) == 0)
        rc = (st_add_file(st, single) != 0 || st_index(st) != 0) ? -1 : 0;
    else
        rc = st_open_glob(st, dir);
    free(ipath);
    free(single);
    if (rc != 0) {
        ms_st_close(st);
        return NULL;
    }
    return st;
}
