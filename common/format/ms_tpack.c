/* ms_tpack: trunk pack writer (encode, verify, index) and strict reader. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ms_xxh.h" /* XXH3, dispatched */

#include "ms_bfc.h"
#include "ms_err.h"
#include "ms_file.h"
#include "ms_tpack.h"

#define MAGIC "MSTPACK1"
#define VERSION 2u /* 2: the fingerprint hashes every byte (1: the first 4 KiB of each tensor) */
#define HDR 64u
#define ALIGN 4096u

static uint64_t align_up(uint64_t x) { return (x + ALIGN - 1) & ~(uint64_t)(ALIGN - 1); }

int64_t ms_tpack_rows_per_block(int64_t rows, int64_t cols)
{
    int64_t r = MS_TPACK_BLOCK_BYTES / (2 * (cols > 0 ? cols : 1));
    if (r > rows / 16) r = rows / 16; /* small matrices: several chunks each, so a small ring */
    return r < 1 ? 1 : r;
}

uint64_t ms_tpack_fp_begin(const void *config, size_t len) { return XXH3_64bits_withSeed(config, len, 0x4d53545041434bull); }

uint64_t ms_tpack_fp_tensor(uint64_t fp, const char *name, int64_t rows, int64_t cols, uint64_t bytes,
                            const uint8_t hash[16])
{
    int64_t dims[3] = {rows, cols, (int64_t)bytes};
    fp = XXH3_64bits_withSeed(name, strlen(name) + 1, fp);
    fp = XXH3_64bits_withSeed(dims, sizeof dims, fp);
    return XXH3_64bits_withSeed(hash, 16, fp);
}

static uint32_t n_blocks(int64_t rows, int64_t cols)
{
    int64_t rpb = ms_tpack_rows_per_block(rows, cols);
    return (uint32_t)((rows + rpb - 1) / rpb);
}

static size_t entry_bytes(const char *name, uint32_t nb) { return 2 + strlen(name) + 8 * 6 + 4 + 8 * (size_t)nb; }

/* ------------------------------------------------------------------------------------ write */

struct ms_tpack_writer {
    char *path, *tmp;
    int fd;
    uint64_t fp;
    ms_tpack_tensor *t; /* [n]; names and block_end owned */
    int n, cur;
    int64_t rows_done;
    uint32_t blk_done;
    uint64_t pos;       /* next data byte of the file */
    uint64_t index_bytes, data_start, data_bytes;
    XXH3_state_t *raw;
    uint8_t *enc;       /* one block's encoding */
    uint16_t *chk;      /* one block decoded again */
    uint64_t k_hist[9];
    int finished;
};

static int wfail(ms_tpack_writer *w, const char *what)
{
    ms_err_set("%s %s: %s", what, w->tmp, strerror(errno));
    return ms_err_set_code(MS_EXIT_IO);
}

static int pwrite_all(ms_tpack_writer *w, const void *buf, size_t len, uint64_t off)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t k = pwrite(w->fd, p, len, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return wfail(w, "cannot write");
        p += k, len -= (size_t)k, off += (uint64_t)k;
    }
    return 0;
}

ms_tpack_writer *ms_tpack_writer_new(const char *path, uint64_t fingerprint, const ms_tpack_spec *specs, int n)
{
    ms_tpack_writer *w = ms_calloc(1, sizeof *w);
    w->path = ms_strdup(path);
    size_t pl = strlen(path) + 5;
    w->tmp = ms_malloc(pl);
    snprintf(w->tmp, pl, "%s.tmp", path);
    w->fp = fingerprint;
    w->n = n;
    w->t = ms_calloc((size_t)(n > 0 ? n : 1), sizeof *w->t);
    uint64_t ib = 0;
    int64_t max_rpb_vals = 1;
    for (int i = 0; i < n; i++) {
        MS_ASSERT(specs[i].rows > 0 && specs[i].cols > 0 && strlen(specs[i].name) < 65535);
        ms_tpack_tensor *t = &w->t[i];
        t->name = ms_strdup(specs[i].name);
        t->rows = specs[i].rows;
        t->cols = specs[i].cols;
        t->rows_per_block = ms_tpack_rows_per_block(t->rows, t->cols);
        t->n_blocks = n_blocks(t->rows, t->cols);
        t->block_end = ms_calloc(t->n_blocks, sizeof(uint64_t));
        ib += entry_bytes(t->name, t->n_blocks);
        if (t->rows_per_block * t->cols > max_rpb_vals) max_rpb_vals = t->rows_per_block * t->cols;
    }
    w->index_bytes = ib;
    w->data_start = align_up(HDR + ib);
    w->pos = w->data_start;
    w->enc = ms_malloc(ms_bfc_bound((size_t)max_rpb_vals));
    w->chk = ms_malloc(sizeof(uint16_t) * (size_t)max_rpb_vals);
    w->raw = XXH3_createState();
    XXH3_64bits_reset(w->raw);
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        wfail(w, "cannot create");
        ms_tpack_writer_free(w);
        return NULL;
    }
    if (n > 0) w->t[0].data_off = w->pos;
    return w;
}

int ms_tpack_writer_rows(ms_tpack_writer *w, const uint16_t *data, int64_t nrows)
{
    while (nrows > 0) {
        MS_ASSERT(w->cur < w->n);
        ms_tpack_tensor *t = &w->t[w->cur];
        int64_t r = t->rows - w->rows_done < t->rows_per_block ? t->rows - w->rows_done : t->rows_per_block;
        MS_ASSERT(nrows >= r); /* whole blocks only */
        size_t nv = (size_t)(r * t->cols);
        size_t sz = ms_bfc_encode(data, nv, -1, w->enc);
        /* Lossless by construction, and checked: the bytes written decode to the input. */
        if (ms_bfc_decode(w->enc, sz, w->chk, nv) != 0 || memcmp(w->chk, data, 2 * nv) != 0) {
            ms_err_set("internal error: block %u of %s does not decode to its input", w->blk_done, t->name);
            return ms_err_set_code(MS_EXIT_RUNTIME);
        }
        w->k_hist[ms_bfc_block_k(w->enc, sz)]++;
        if (pwrite_all(w, w->enc, sz, w->pos) != 0) return -1;
        XXH3_64bits_update(w->raw, data, 2 * nv);
        w->pos += sz;
        w->data_bytes += sz;
        ((uint64_t *)t->block_end)[w->blk_done++] = w->pos - t->data_off;
        w->rows_done += r;
        data += nv;
        nrows -= r;
        if (w->rows_done == t->rows) { /* next tensor */
            t->data_bytes = w->pos - t->data_off;
            t->raw_xxh3 = XXH3_64bits_digest(w->raw);
            XXH3_64bits_reset(w->raw);
            w->cur++;
            w->rows_done = 0;
            w->blk_done = 0;
            w->pos = align_up(w->pos);
            if (w->cur < w->n) w->t[w->cur].data_off = w->pos;
        }
    }
    return 0;
}

static void put(uint8_t **p, const void *v, size_t n)
{
    memcpy(*p, v, n);
    *p += n;
}

int ms_tpack_writer_finish(ms_tpack_writer *w)
{
    MS_ASSERT(w->cur == w->n);
    uint8_t *idx = ms_malloc(w->index_bytes ? w->index_bytes : 1), *p = idx;
    for (int i = 0; i < w->n; i++) {
        const ms_tpack_tensor *t = &w->t[i];
        uint16_t nl = (uint16_t)strlen(t->name);
        put(&p, &nl, 2);
        put(&p, t->name, nl);
        put(&p, &t->rows, 8);
        put(&p, &t->cols, 8);
        put(&p, &t->rows_per_block, 8);
        put(&p, &t->data_off, 8);
        put(&p, &t->data_bytes, 8);
        put(&p, &t->raw_xxh3, 8);
        put(&p, &t->n_blocks, 4);
        put(&p, t->block_end, 8 * (size_t)t->n_blocks);
    }
    MS_ASSERT((uint64_t)(p - idx) == w->index_bytes);
    uint8_t h[HDR] = {0}, *q = h;
    uint32_t ver = VERSION, nt = (uint32_t)w->n;
    uint64_t ih = XXH3_64bits(idx, w->index_bytes);
    put(&q, MAGIC, 8);
    put(&q, &ver, 4);
    put(&q, &nt, 4);
    put(&q, &w->fp, 8);
    put(&q, &w->index_bytes, 8);
    put(&q, &ih, 8);
    put(&q, &w->data_start, 8);
    int rc = pwrite_all(w, idx, w->index_bytes, HDR);
    free(idx);
    if (rc == 0) rc = pwrite_all(w, h, HDR, 0);
    if (rc == 0 && ftruncate(w->fd, (off_t)w->pos) != 0) rc = wfail(w, "cannot size");
    if (rc == 0 && fsync(w->fd) != 0) rc = wfail(w, "cannot sync");
    if (rc != 0) return -1;
    if (rename(w->tmp, w->path) != 0) return wfail(w, "cannot rename");
    w->finished = 1;
    return 0;
}

uint64_t ms_tpack_writer_bytes(const ms_tpack_writer *w) { return w->data_bytes; }
const uint64_t *ms_tpack_writer_k_hist(const ms_tpack_writer *w) { return w->k_hist; }

void ms_tpack_writer_free(ms_tpack_writer *w)
{
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    if (!w->finished) unlink(w->tmp);
    for (int i = 0; i < w->n; i++) {
        free((void *)w->t[i].name);
        free((void *)w->t[i].block_end);
    }
    free(w->t);
    XXH3_freeState(w->raw);
    free(w->enc);
    free(w->chk);
    free(w->path);
    free(w->tmp);
    free(w);
}

/* ------------------------------------------------------------------------------------- read */

struct ms_tpack {
    char *path;
    uint64_t mem;       /* bytes held: the index and the tensors' block tables */
    uint64_t fp;
    int n;
    ms_tpack_tensor *t; /* [n]; names and block_end point into idx */
    uint8_t *idx;
};

static ms_tpack *bad(ms_tpack *p, const char *why)
{
    ms_err_set("trunk pack %s: %s", p->path, why);
    ms_err_set_code(MS_EXIT_MODEL);
    ms_tpack_close(p);
    return NULL;
}

static int take(const uint8_t **p, const uint8_t *end, void *v, size_t n)
{
    if ((size_t)(end - *p) < n) return -1;
    memcpy(v, *p, n);
    *p += n;
    return 0;
}

ms_tpack *ms_tpack_open(const char *path)
{
    uint64_t fsize;
    int fd = ms_file_open(path, "trunk pack", 0, 0, &fsize);
    if (fd < 0) return NULL;
    ms_tpack *p = ms_calloc(1, sizeof *p);
    p->path = ms_strdup(path);
    uint8_t h[HDR];
    if (fsize < HDR) {
        close(fd);
        return bad(p, "too short for a header (not a trunk pack?)");
    }
    if (ms_file_pread(fd, path, 0, h, HDR) != 0) {
        close(fd);
        ms_tpack_close(p);
        return NULL;
    }
    uint32_t ver, nt;
    uint64_t ib, ih, ds;
    memcpy(&ver, h + 8, 4);
    memcpy(&nt, h + 12, 4);
    memcpy(&p->fp, h + 16, 8);
    memcpy(&ib, h + 24, 8);
    memcpy(&ih, h + 32, 8);
    memcpy(&ds, h + 40, 8);
    if (memcmp(h, MAGIC, 8) != 0) {
        close(fd);
        return bad(p, "bad magic (not a trunk pack)");
    }
    if (ver == 1) {
        close(fd);
        return bad(p, "version 1, whose fingerprint sampled the weights: run moestream pack-trunk again "
                      "(or pass --trunk-pack none)");
    }
    if (ver != VERSION) {
        close(fd);
        return bad(p, "unsupported version (written by another moestream?)");
    }
    if (ib > fsize - HDR || ds > fsize || ds < HDR + ib) {
        close(fd);
        return bad(p, "index outside the file (truncated?)");
    }
    p->idx = ms_malloc(ib ? ib : 1);
    int rc = ms_file_pread(fd, path, HDR, p->idx, ib);
    close(fd);
    if (rc != 0) {
        ms_tpack_close(p);
        return NULL;
    }
    if (XXH3_64bits(p->idx, ib) != ih) return bad(p, "index checksum mismatch (corrupt)");
    p->t = ms_calloc(nt ? nt : 1, sizeof *p->t);
    const uint8_t *q = p->idx, *end = p->idx + ib;
    for (uint32_t i = 0; i < nt; i++) {
        ms_tpack_tensor *t = &p->t[i];
        uint16_t nl;
        if (take(&q, end, &nl, 2) != 0 || (size_t)(end - q) < (size_t)nl + 1) return bad(p, "index truncated");
        /* names are stored without NUL: shift each left by 2 over its length field to make room */
        memmove((uint8_t *)q - 2, q, nl);
        ((uint8_t *)q)[nl - 2] = 0;
        t->name = (const char *)q - 2;
        q += nl;
        uint64_t v[6];
        if (take(&q, end, v, sizeof v) != 0 || take(&q, end, &t->n_blocks, 4) != 0) return bad(p, "index truncated");
        t->rows = (int64_t)v[0], t->cols = (int64_t)v[1], t->rows_per_block = (int64_t)v[2];
        t->data_off = v[3], t->data_bytes = v[4], t->raw_xxh3 = v[5];
        if ((size_t)(end - q) / 8 < t->n_blocks) return bad(p, "index truncated");
        t->block_end = (const uint64_t *)(const void *)q; /* 8-aligned? not guaranteed: copied below */
        uint64_t *be = ms_malloc(8 * (size_t)(t->n_blocks ? t->n_blocks : 1));
        memcpy(be, q, 8 * (size_t)t->n_blocks);
        t->block_end = be;
        q += 8 * (size_t)t->n_blocks;
        p->n = (int)i + 1;
        if (t->rows <= 0 || t->cols <= 0 || t->rows_per_block != ms_tpack_rows_per_block(t->rows, t->cols) ||
            t->n_blocks != n_blocks(t->rows, t->cols) || t->data_off < ds || t->data_off > fsize ||
            t->data_bytes > fsize - t->data_off || (t->n_blocks && be[t->n_blocks - 1] != t->data_bytes))
            return bad(p, "inconsistent tensor entry");
        for (uint32_t b = 0; b < t->n_blocks; b++)
            if (ms_tpack_block_start(t, b) + MS_BFC_HDR > be[b]) return bad(p, "inconsistent block offsets");
    }
    if (q != end) return bad(p, "trailing bytes in the index");
    p->mem = ib + (uint64_t)nt * sizeof *p->t;
    for (int i = 0; i < p->n; i++) p->mem += 8 * (uint64_t)p->t[i].n_blocks;
    return p;
}

void ms_tpack_close(ms_tpack *p)
{
    if (!p) return;
    for (int i = 0; i < p->n; i++) free((void *)p->t[i].block_end);
    free(p->t);
    free(p->idx);
    free(p->path);
    free(p);
}

const char *ms_tpack_path(const ms_tpack *p) { return p->path; }
uint64_t ms_tpack_mem_bytes(const ms_tpack *p) { return p->mem; }
uint64_t ms_tpack_fingerprint(const ms_tpack *p) { return p->fp; }
int ms_tpack_count(const ms_tpack *p) { return p->n; }
const ms_tpack_tensor *ms_tpack_at(const ms_tpack *p, int i) { return &p->t[i]; }

const ms_tpack_tensor *ms_tpack_find(const ms_tpack *p, const char *name)
{
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->t[i].name, name) == 0) return &p->t[i];
    return NULL;
}

/* Blocks [b0, b1) of t from src: decoded into dst, or (dst NULL) only verified. */
static int blocks(const char *path, const ms_tpack_tensor *t, uint32_t b0, uint32_t b1, const uint8_t *src,
                  uint16_t *dst, char *err, size_t errn)
{
    uint64_t base = ms_tpack_block_start(t, b0);
    for (uint32_t b = b0; b < b1; b++) {
        uint64_t s = ms_tpack_block_start(t, b), e = t->block_end[b];
        int64_t r0 = (int64_t)b * t->rows_per_block;
        int64_t r = t->rows - r0 < t->rows_per_block ? t->rows - r0 : t->rows_per_block;
        int rc = dst ? ms_bfc_decode(src + (s - base), (size_t)(e - s), dst, (size_t)(r * t->cols))
                     : ms_bfc_verify(src + (s - base), (size_t)(e - s), (size_t)(r * t->cols));
        if (rc != 0) {
            snprintf(err, errn, "trunk pack %s: tensor %s block %u (rows %lld-%lld): %s", path, t->name, b,
                     (long long)r0, (long long)(r0 + r - 1),
                     rc == MS_BFC_BAD_SUM ? "checksum mismatch (corrupt)" : "malformed block");
            return -1;
        }
        if (dst) dst += r * t->cols;
    }
    return 0;
}

int ms_tpack_decode(const char *path, const ms_tpack_tensor *t, uint32_t b0, uint32_t b1, const uint8_t *src,
                    uint16_t *dst, char *err, size_t errn)
{
    MS_ASSERT(dst);
    return blocks(path, t, b0, b1, src, dst, err, errn);
}

int ms_tpack_verify(const char *path, const ms_tpack_tensor *t, const uint8_t *src, char *err, size_t errn)
{
    return blocks(path, t, 0, (uint32_t)t->n_blocks, src, NULL, err, errn);
}
