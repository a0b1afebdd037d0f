/* ms_mpin: pinned trunk matrices as resident trunk-pack blocks (see ms_mpin.h). */
#include "ms_mpin.h"

#include <stdio.h>
#include <stdlib.h>

#include "ms_err.h"

typedef struct {
    ms_mat_packed pm;          /* the blocks, for the kernels */
    const ms_tpack_tensor *t;
    const char *name;
} entry;

struct ms_mpin {
    ms_mat_stream iface;
    entry *e;                  /* [cap] */
    int n, cap;
    const char *path;
    int failed;
    char err[1024];
};

static int acquire(void *ctx, const void *key, int64_t *r0, int64_t *r1, const void **data, const uint8_t **scales,
                   ms_mat_packed **packed)
{
    (void)ctx;
    entry *e = (entry *)key;
    MS_ASSERT(packed); /* the kernels always take coded rows from this stream */
    *r0 = 0;
    *r1 = e->t->rows;
    *data = NULL;
    *scales = NULL;
    *packed = &e->pm;
    return 0;
}

static void release(void *ctx, const void *key)
{
    ms_mpin *p = ctx;
    entry *e = (entry *)key;
    int b = __atomic_load_n(&e->pm.bad_block, __ATOMIC_RELAXED);
    if (b < 0 || p->failed) return;
    /* Decode the block again for the reason (checksum or layout). */
    uint16_t *tmp = ms_malloc(sizeof(uint16_t) * (size_t)(e->t->rows_per_block * e->t->cols));
    char msg[512] = "";
    const uint8_t *src = e->pm.src + ms_tpack_block_start(e->t, (uint32_t)b);
    if (ms_tpack_decode(p->path, e->t, (uint32_t)b, (uint32_t)b + 1, src, tmp, msg, sizeof msg) == 0)
        snprintf(msg, sizeof msg, "trunk pack %s: tensor %s block %d did not decode", p->path, e->name, b);
    free(tmp);
    snprintf(p->err, sizeof p->err, "pinned tensor %s (kept packed in memory): %s", e->name, msg);
    p->failed = 1;
}

ms_mpin *ms_mpin_new(int n, const char *pack_path)
{
    MS_ASSERT(n >= 0);
    ms_mpin *p = ms_calloc(1, sizeof *p);
    p->cap = n;
    p->e = ms_calloc((size_t)(n > 0 ? n : 1), sizeof *p->e);
    p->path = pack_path;
    p->iface = (ms_mat_stream){acquire, release, p, 1};
    return p;
}

void ms_mpin_free(ms_mpin *p)
{
    if (!p) return;
    free(p->e);
    free(p);
}

int ms_mpin_add(ms_mpin *p, ms_mat *W, const ms_tpack_tensor *t, const uint8_t *src, const char *name)
{
    MS_ASSERT(p->n < p->cap && W->type == MS_WT_BF16 && W->rows == t->rows && W->cols == t->cols);
    char msg[512];
    if (ms_tpack_verify(p->path, t, src, msg, sizeof msg) != 0) {
        ms_err_set("pinned tensor %s (kept packed in memory): %s", name, msg);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    entry *e = &p->e[p->n++];
    /* verified: the kernels skip the checksums from now on (the blocks stay in memory) */
    e->pm = (ms_mat_packed){src, t->block_end, t->rows_per_block, (int)t->n_blocks, -1, 1};
    e->t = t;
    e->name = name;
    W->data = NULL;
    W->scales = NULL;
    W->stream = &p->iface;
    W->key = e;
    return 0;
}

int ms_mpin_check(const ms_mpin *p)
{
    if (!p || !p->failed) return 0;
    ms_err_set("%s", p->err);
    return ms_err_set_code(MS_EXIT_MODEL);
}

uint64_t ms_mpin_bytes(const ms_tpack_tensor *t) { return t->data_bytes + sizeof(entry); }
