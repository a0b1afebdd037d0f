/* ms_st_write: the streaming safetensors writer (tensors filled by callback, copied, or left as holes
 * of a sparse file). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ms_err.h"
#include "ms_st.h"

/* Writer streaming buffer. */
#define ST_CHUNK ((size_t)4 << 20)

typedef struct {
    char *name;
    ms_dtype dt;
    int ndim;
    int64_t shape[MS_ST_MAX_DIMS];
    uint64_t nbytes;
    ms_st_fill_fn fill; /* NULL when copy is used or for a hole */
    void *ctx;
    uint8_t *copy; /* [nbytes] own copy for add_copy */
    int hole;      /* zeros, left as a hole of a sparse file (add_hole) */
} wt_tensor;

struct ms_st_writer {
    wt_tensor *t;
    size_t n, cap;
    uint64_t data_bytes;
};

ms_st_writer *ms_st_writer_new(void) { return ms_calloc(1, sizeof(ms_st_writer)); }

void ms_st_writer_free(ms_st_writer *w)
{
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) {
        free(w->t[i].name);
        free(w->t[i].copy);
    }
    free(w->t);
    free(w);
}

static wt_tensor *writer_decl(ms_st_writer *w, const char *name, ms_dtype dt, int ndim, const int64_t *shape)
{
    MS_ASSERT(w && name);
    MS_ASSERT((unsigned)dt < MS_DT_COUNT);
    MS_ASSERT(ndim >= 0 && ndim <= MS_ST_MAX_DIMS);
    MS_ASSERT(ndim == 0 || shape);
    if (w->n == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 64;
        w->t = ms_realloc(w->t, w->cap * sizeof *w->t);
    }
    wt_tensor *t = &w->t[w->n++];
    memset(t, 0, sizeof *t);
    t->name = ms_strdup(name);
    t->dt = dt;
    t->ndim = ndim;
    uint64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        MS_ASSERT(shape[i] >= 0);
        t->shape[i] = shape[i];
        MS_ASSERT(!__builtin_mul_overflow(numel, (uint64_t)shape[i], &numel));
    }
    MS_ASSERT(!__builtin_mul_overflow(numel, (uint64_t)ms_dtype_size(dt), &t->nbytes));
    w->data_bytes += t->nbytes;
    return t;
}

void ms_st_writer_add(ms_st_writer *w, const char *name, ms_dtype dt, int ndim, const int64_t *shape,
                      ms_st_fill_fn fill, void *ctx)
{
    MS_ASSERT(fill);
    wt_tensor *t = writer_decl(w, name, dt, ndim, shape);
    t->fill = fill;
    t->ctx = ctx;
}

void ms_st_writer_add_copy(ms_st_writer *w, const char *name, ms_dtype dt, int ndim, const int64_t *shape,
                           const void *data)
{
    wt_tensor *t = writer_decl(w, name, dt, ndim, shape);
    MS_ASSERT(data || t->nbytes == 0);
    t->copy = ms_malloc((size_t)t->nbytes);
    if (t->nbytes) memcpy(t->copy, data, (size_t)t->nbytes);
}

void ms_st_writer_add_hole(ms_st_writer *w, const char *name, ms_dtype dt, int ndim, const int64_t *shape)
{
    writer_decl(w, name, dt, ndim, shape)->hole = 1;
}

uint64_t ms_st_writer_data_bytes(const ms_st_writer *w) { return w->data_bytes; }

/* The compact JSON header, tensors in declaration order, or NULL with ms_err set. */
static char *writer_header(const ms_st_writer *w, const char *path)
{
    json_t *h = json_object(), *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(h, "__metadata__", meta);
    uint64_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        const wt_tensor *t = &w->t[i];
        if (json_object_get(h, t->name)) {
            ms_err_set("%s: tensor '%s' declared twice", path, t->name);
            goto fail;
        }
        json_t *e = json_object(), *shp = json_array(), *offs = json_array();
        json_object_set_new(e, "dtype", json_string(ms_dtype_name(t->dt)));
        for (int d = 0; d < t->ndim; d++) json_array_append_new(shp, json_integer((json_int_t)t->shape[d]));
        json_object_set_new(e, "shape", shp);
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)(off + t->nbytes)));
        json_object_set_new(e, "data_offsets", offs);
        if (json_object_set_new(h, t->name, e) != 0) {
            ms_err_set("%s: tensor name '%s' is not valid UTF-8", path, t->name);
            goto fail;
        }
        off += t->nbytes;
    }
    char *s = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(h);
    if (!s) ms_err_set("%s: cannot encode the header", path);
    return s;
fail:
    json_decref(h);
    return NULL;
}

static int write_all(FILE *f, const void *p, size_t n) { return n == 0 || fwrite(p, 1, n, f) == n ? 0 : -1; }

int ms_st_writer_write(ms_st_writer *w, const char *path)
{
    MS_ASSERT(w && path);
    char *hdr = writer_header(w, path);
    if (!hdr) return -1;
    size_t hl = strlen(hdr);
    /* Pad with spaces so that the data section starts at a multiple of 8. */
    size_t padded = ((8 + hl + 7) & ~(size_t)7) - 8;
    size_t tl = strlen(path);
    char *tmp = ms_malloc(tl + 5);
    memcpy(tmp, path, tl);
    memcpy(tmp + tl, ".tmp", 5);
    uint8_t *buf = NULL;
    int rc = -1;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        ms_err_set("%s: cannot create: %s", tmp, strerror(errno));
        ms_err_set_code(MS_EXIT_IO);
        goto out;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    if (write_all(f, len8, 8) || write_all(f, hdr, hl)) goto werr;
    for (size_t i = hl; i < padded; i++)
        if (fputc(' ', f) == EOF) goto werr;
    uint64_t maxfill = 0;
    for (size_t i = 0; i < w->n; i++)
        if (w->t[i].fill && w->t[i].nbytes > maxfill) maxfill = w->t[i].nbytes;
    size_t bcap = maxfill < ST_CHUNK ? (size_t)maxfill : ST_CHUNK;
    buf = ms_malloc(bcap ? bcap : 1);
    uint64_t skip = 0; /* hole bytes not yet passed over */
    for (size_t i = 0; i < w->n; i++) {
        const wt_tensor *t = &w->t[i];
        if (t->hole) {
            skip += t->nbytes;
            continue;
        }
        if (skip) { /* seek past the hole: the file system stores nothing for it */
            if (fseeko(f, (off_t)skip, SEEK_CUR) != 0) goto werr;
            skip = 0;
        }
        if (t->copy) {
            if (write_all(f, t->copy, (size_t)t->nbytes)) goto werr;
            continue;
        }
        for (uint64_t off = 0; off < t->nbytes;) {
            size_t len = t->nbytes - off < bcap ? (size_t)(t->nbytes - off) : bcap;
            if (t->fill(t->ctx, t->name, off, buf, len) != 0) {
                ms_err_wrap("%s: tensor '%s'", path, t->name);
                goto out;
            }
            if (write_all(f, buf, len)) goto werr;
            off += len;
        }
    }
    if (fflush(f) != 0) goto werr;
    /* A trailing hole: set the size without writing (the last bytes read as zeros). */
    if (skip && ftruncate(fileno(f), (off_t)(8 + padded + w->data_bytes)) != 0) goto werr;
    if (fsync(fileno(f)) != 0) goto werr;
    int cr = fclose(f);
    f = NULL;
    if (cr != 0) goto werr;
    if (rename(tmp, path) != 0) {
        ms_err_set("%s: cannot rename %s into place: %s", path, tmp, strerror(errno));
        ms_err_set_code(MS_EXIT_IO);
        goto out;
    }
    rc = 0;
    goto out;
werr:
    ms_err_set("%s: write failed: %s", tmp, strerror(errno));
    ms_err_set_code(MS_EXIT_IO);
out:
    if (f) fclose(f);
    if (rc != 0) unlink(tmp);
    free(buf);
    free(tmp);
    free(hdr);
    return rc;
}
