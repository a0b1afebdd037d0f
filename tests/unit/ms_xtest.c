/* ms_xtest: the expert-store tests' fixture: tiny K3 experts with random bytes, written into
 * two safetensors files (one contiguous, one with scattered parts), and their locations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_io.h"
#include "ms_k3_experts.h"
#include "ms_xtest.h"

static const char *xt_part_name[6] = {"w1.weight_packed", "w1.weight_scale", "w2.weight_packed",
                                      "w2.weight_scale",  "w3.weight_packed", "w3.weight_scale"};
char xt_root[4096];

/* The K3 expert format (MXFP4 w1 [I, L], w2 [L, I], w3 [I, L], SiTU-GLU 4, 25) at L, I. */
ms_xfmt xt_fmt(int L, int I)
{
    ms_xfmt f;
    MS_ASSERT(ms_k3_experts_fmt(L, I, 4.0f, 25.0f, &f) == 0);
    return f;
}
uint64_t xt_bytes(int L, int I)
{
    ms_xfmt f = xt_fmt(L, I);
    return ms_xfmt_expert_bytes(&f);
}
uint64_t xt_slot(int L, int I)
{
    ms_xfmt f = xt_fmt(L, I);
    return ms_xstore_slot_bytes(&f);
}
uint8_t *xt_part_bytes[NK][6];
uint64_t xt_part_len[6];
int64_t xt_part_shape[6][2];

ms_t_rng xt_rng = {0x9e3779b97f4a7c15ull};
uint32_t xt_rnd(void) { return (uint32_t)(ms_t_rng_u64(&xt_rng) >> 11); }

const char *xt_path(const char *name) { return ms_t_path(xt_root, name); }

static void xt_name(char *buf, size_t n, int l, int e, int part)
{
    snprintf(buf, n, "model.layers.%d.mlp.experts.%d.%s", l, e, xt_part_name[part]);
}

/* A filler tensor of an odd size, so experts start at every kind of alignment. */
static void add_filler(ms_st_writer *w, int *nf, int64_t bytes)
{
    char name[64];
    snprintf(name, sizeof name, "filler.%d", (*nf)++);
    uint8_t *b = malloc((size_t)bytes);
    ms_t_fill_u8(&xt_rng, b, bytes, 0, 255);
    ms_st_writer_add_copy(w, name, MS_DT_U8, 1, &bytes, b);
    free(b);
}

static void add_part(ms_st_writer *w, int key, int part)
{
    char name[128];
    xt_name(name, sizeof name, key / NE, key % NE, part);
    ms_st_writer_add_copy(w, name, MS_DT_U8, 2, xt_part_shape[part], xt_part_bytes[key][part]);
}

/* scattered = 0: every expert one canonical run (fillers only between experts).
 * scattered = 1: even keys have their parts in a shuffled order with fillers between. */
void xt_write_file(const char *path, int scattered)
{
    ms_st_writer *w = ms_st_writer_new();
    int nf = 0;
    add_filler(w, &nf, 37);
    for (int key = 0; key < NK; key++) {
        if (scattered && key % 2 == 0) {
            static const int order[6] = {4, 1, 5, 0, 3, 2};
            for (int i = 0; i < 6; i++) {
                add_part(w, key, order[i]);
                add_filler(w, &nf, 1 + (int64_t)(xt_rnd() % 5000));
            }
        } else {
            for (int p = 0; p < 6; p++) add_part(w, key, p);
            if (key % 3 == 1) add_filler(w, &nf, 1 + (int64_t)(xt_rnd() % 3000));
        }
    }
    int rc = ms_st_writer_write(w, path);
    if (rc != 0) {
        fprintf(stderr, "cannot write %s: %s\n", path, ms_err_msg());
        exit(1);
    }
    ms_st_writer_free(w);
}

const ms_st_tensor *xt_find_part(const ms_st *st, int key, int part)
{
    char name[128];
    xt_name(name, sizeof name, key / NE, key % NE, part);
    const ms_st_tensor *t = ms_st_find(st, name);
    if (!t) {
        fprintf(stderr, "tensor %s missing\n", name);
        exit(1);
    }
    return t;
}

/* Location of expert key: parts from file A (mode 0), file B (mode 1), or alternately
 * (mode 2: even parts from A, odd from B; both files hold the same bytes). */
void xt_make_loc(ms_st *const sts[2], int key, int mode, ms_xloc *loc)
{
    memset(loc, 0, sizeof *loc); /* no checksum unless a test sets one */
    for (int p = 0; p < 6; p++) {
        int f = mode == 2 ? p % 2 : mode;
        const ms_st_tensor *t = xt_find_part(sts[f], key, p);
        loc->file[p] = f;
        loc->off[p] = t->offset;
        loc->len[p] = t->nbytes;
    }
}

int xt_contiguous(const ms_xloc *l)
{
    for (int p = 1; p < 6; p++)
        if (l->file[p] != l->file[0] || l->off[p] != l->off[p - 1] + l->len[p - 1]) return 0;
    return 1;
}

/* One routing: layer, rows, k, ids[rows][k], distinct within a row as a router picks them,
 * drawn from a subset of the layer's experts so they repeat across rows. */
void xt_random_routing(int *layer, int64_t *n_rows, int *k, int32_t *ids, float *z)
{
    *layer = (int)(xt_rnd() % NL);
    *n_rows = 1 + (int64_t)(xt_rnd() % 9);
    *k = 1 + (int)(xt_rnd() % 4);
    int pool_n = *k + (int)(xt_rnd() % (unsigned)(NE - *k + 1));
    int base = (int)(xt_rnd() % NE);
    for (int64_t r = 0; r < *n_rows; r++)
        for (int j = 0; j < *k; j++) {
            int32_t e;
            int dup;
            do {
                e = (int32_t)((base + (int)(xt_rnd() % (unsigned)pool_n)) % NE);
                dup = 0;
                for (int i = 0; i < j; i++) dup |= ids[r * *k + i] == e;
            } while (dup);
            ids[r * *k + j] = e;
        }
    for (int64_t i = 0; i < *n_rows * LAT; i++) z[i] = (float)((int)(xt_rnd() % 2001) - 1000) / 997.0f;
}

void xt_set_all(ms_xstore *s, ms_st *st)
{
    ms_st *one[2] = {st, st};
    for (int key = 0; key < NK; key++) {
        ms_xloc loc;
        xt_make_loc(one, key, 0, &loc);
        ms_xstore_set(s, key / NE, key % NE, &loc);
    }
}

int xt_fixture(ms_st *sts[2], ms_expert_table **ref)
{
    int64_t I = INTER, L = LAT;
    int64_t shp[6][2] = {{I, L / 2}, {I, L / 32}, {L, I / 2}, {L, I / 32}, {I, L / 2}, {I, L / 32}};
    memcpy(xt_part_shape, shp, sizeof shp);
    for (int p = 0; p < 6; p++) xt_part_len[p] = (uint64_t)(xt_part_shape[p][0] * xt_part_shape[p][1]);
    for (int key = 0; key < NK; key++)
        for (int p = 0; p < 6; p++) {
            xt_part_bytes[key][p] = malloc(xt_part_len[p]);
            /* scales near 2^0 keep every value finite; packed nibbles are anything */
            ms_t_fill_u8(&xt_rng, xt_part_bytes[key][p], (int64_t)xt_part_len[p], p % 2 ? 120 : 0, p % 2 ? 129 : 255);
        }
    xt_write_file(xt_path("a.safetensors"), 0);
    xt_write_file(xt_path("b.safetensors"), 1);
    sts[0] = ms_st_open_file(xt_path("a.safetensors"));
    sts[1] = ms_st_open_file(xt_path("b.safetensors"));
    T_CHECK(sts[0] && sts[1], "reopen: %s", ms_err_msg());
    if (!sts[0] || !sts[1]) return -1;

    /* Both files hold the same expert bytes; A is contiguous, B scatters the even experts. */
    int same = 1, contig_a = 0, contig_b = 0, unaligned = 0;
    for (int key = 0; key < NK; key++) {
        ms_xloc la, lb;
        ms_st *one0[2] = {sts[0], sts[0]}, *one1[2] = {sts[1], sts[1]};
        xt_make_loc(one0, key, 0, &la);
        xt_make_loc(one1, key, 0, &lb);
        contig_a += xt_contiguous(&la);
        contig_b += xt_contiguous(&lb);
        unaligned += la.off[0] % MS_IO_ALIGN != 0;
        for (int p = 0; p < 6; p++)
            if (memcmp(ms_t_st_bytes(sts[0], xt_find_part(sts[0], key, p)), ms_t_st_bytes(sts[1], xt_find_part(sts[1], key, p)),
                       xt_part_len[p]) != 0 ||
                memcmp(ms_t_st_bytes(sts[0], xt_find_part(sts[0], key, p)), xt_part_bytes[key][p], xt_part_len[p]) != 0)
                same = 0;
    }
    T_CHECK(same, "files hold different expert bytes");
    T_CHECK(contig_a == NK && contig_b == NK / 2, "contiguous experts: A %d, B %d", contig_a, contig_b);
    T_CHECK(unaligned > 0, "no unaligned expert in A");

    /* The reference: the in-memory table over A's mapped bytes. */
    *ref = ms_t_situ_table(NL, NE, LAT, 4.0f, 25.0f, NULL);
    for (int key = 0; key < NK; key++) {
        ms_expert_w w = {0};
        ms_mat *m[3] = {&w.w[MS_XROLE_GATE], &w.w[MS_XROLE_DOWN], &w.w[MS_XROLE_UP]}; /* w1, w2, w3 */
        for (int i = 0; i < 3; i++)
            *m[i] = (ms_mat){.type = MS_WT_MXFP4, .rows = i == 1 ? L : I, .cols = i == 1 ? I : L,
                             .data = ms_t_st_bytes(sts[0], xt_find_part(sts[0], key, 2 * i)),
                             .scales = ms_t_st_bytes(sts[0], xt_find_part(sts[0], key, 2 * i + 1))};
        ms_expert_table_set(*ref, key / NE, key % NE, &w);
    }
    return 0;
}

void xt_fixture_free(ms_st *sts[2], ms_expert_table *ref)
{
    ms_expert_table_free(ref);
    ms_st_close(sts[0]);
    ms_st_close(sts[1]);
    for (int key = 0; key < NK; key++)
        for (int p = 0; p < 6; p++) free(xt_part_bytes[key][p]);
}
