/* test_st: safetensors writer/reader round trips, sharded indexes, corrupt files, shared checkpoints. */
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ms_err.h"
#include "ms_st.h"
#include "ms_test.h"

static char tmp_root[4096];

static const char *tpath(const char *name) { return ms_t_path(tmp_root, name); }

static int has(const char *s, const char *n) { return strstr(s, n) != NULL; }
static int exists(const char *p) { return access(p, F_OK) == 0; }

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

/* A safetensors file written by hand: LE length, header text, `data_len` bytes of 0x5a. */
static void write_raw(const char *path, const char *header, size_t data_len)
{
    size_t hl = strlen(header);
    uint8_t *b = malloc(8 + hl + data_len + 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    memset(b + 8 + hl, 0x5a, data_len);
    write_bytes(path, b, 8 + hl + data_len);
    free(b);
}

static void mkdir_p(const char *p) { ms_t_mkdir_fresh(p); }

/* Open (file or directory) must fail with class `code` and a message containing n1 and n2. */
static void expect_fail(const char *path, int is_dir, int code, const char *n1, const char *n2, const char *why)
{
    ms_err_clear();
    ms_st *st = is_dir ? ms_st_open_dir(path) : ms_st_open_file(path);
    const char *m = ms_err_msg();
    T_CHECK(st == NULL, "%s: accepted", why);
    if (st) {
        ms_st_close(st);
        return;
    }
    T_CHECK(ms_err_code() == code, "%s: class %d, want %d (%s)", why, ms_err_code(), code, m);
    if (n1) T_CHECK(has(m, n1), "%s: message lacks '%s': %s", why, n1, m);
    if (n2) T_CHECK(has(m, n2), "%s: message lacks '%s': %s", why, n2, m);
}

/* ---- writer round trip ---- */

typedef struct {
    const char *name;
    uint64_t next_off; /* the next offset the writer must ask for */
    int calls;
    int bad;
} fill_ctx;

static uint8_t pattern(uint64_t off) { return (uint8_t)(off ^ (off >> 8) ^ (off >> 16) ^ 0x3c); }

static int fill_pattern(void *vctx, const char *name, uint64_t off, uint8_t *buf, size_t len)
{
    fill_ctx *c = vctx;
    if (strcmp(name, c->name) != 0 || off != c->next_off || len == 0 || len > ((size_t)4 << 20)) c->bad = 1;
    for (size_t i = 0; i < len; i++) buf[i] = pattern(off + i);
    c->next_off = off + len;
    c->calls++;
    return 0;
}

static int fill_fail(void *vctx, const char *name, uint64_t off, uint8_t *buf, size_t len)
{
    (void)vctx, (void)name, (void)buf, (void)len;
    if (off == 0) return ms_err_set("synthetic source failure");
    return 0;
}

typedef struct {
    const char *name;
    ms_dtype dt;
    int ndim;
    int64_t shape[MS_ST_MAX_DIMS];
    const void *data; /* NULL: filled by pattern() */
    size_t nbytes;
} decl;

static void test_roundtrip(void)
{
    static const float f32[6] = {1.0f, -2.5f, 0.0f, -0.0f, 3.25e-30f, 6.0e30f};
    static const uint16_t bf16[5] = {0x3f80, 0xbf80, 0x7f80, 0x0001, 0x4049};
    static const uint16_t f16[3] = {0x3c00, 0x8001, 0x7c00};
    static const uint8_t u8[7] = {0, 1, 2, 0x7f, 0x80, 0xfe, 0xff};
    static const float scalar = 3.5f;
    static const uint8_t q3[3] = {9, 8, 7};
    static const float uni = 42.0f;
    decl d[] = {
        {"f32.mat", MS_DT_F32, 2, {2, 3}, f32, sizeof f32},
        {"bf16.vec", MS_DT_BF16, 1, {5}, bf16, sizeof bf16},
        {"u8.odd", MS_DT_U8, 1, {7}, u8, sizeof u8},
        {"f16.col", MS_DT_F16, 2, {3, 1}, f16, sizeof f16},
        {"scalar", MS_DT_F32, 0, {0}, &scalar, 4},
        {"empty", MS_DT_F32, 2, {0, 4}, NULL, 0},
        {"rank4", MS_DT_BF16, 4, {2, 1, 3, 2}, NULL, 24},
        {"quote\"back\\slash", MS_DT_U8, 1, {3}, q3, 3},
        {"big", MS_DT_U8, 2, {5, 1 << 20}, NULL, (size_t)5 << 20},
        {"unicode.\xc3\xa9", MS_DT_F32, 1, {1}, &uni, 4},
    };
    const int nd = (int)(sizeof d / sizeof d[0]);
    const char *dir = tpath("rt");
    mkdir_p(dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);

    ms_st_writer *w = ms_st_writer_new();
    fill_ctx fc[16];
    memset(fc, 0, sizeof fc);
    uint64_t total = 0;
    for (int i = 0; i < nd; i++) {
        if (d[i].data || d[i].nbytes == 0) {
            ms_st_writer_add_copy(w, d[i].name, d[i].dt, d[i].ndim, d[i].ndim ? d[i].shape : NULL, d[i].data);
        } else {
            fc[i].name = d[i].name;
            ms_st_writer_add(w, d[i].name, d[i].dt, d[i].ndim, d[i].shape, fill_pattern, &fc[i]);
        }
        total += d[i].nbytes;
    }
    T_CHECK(ms_st_writer_data_bytes(w) == total, "data_bytes %llu want %llu",
            (unsigned long long)ms_st_writer_data_bytes(w), (unsigned long long)total);
    int rc = ms_st_writer_write(w, path);
    T_CHECK(rc == 0, "write: %s", ms_err_msg());
    ms_st_writer_free(w);
    ms_st_writer_free(NULL);
    if (rc) return;
    char tmpf[4300];
    snprintf(tmpf, sizeof tmpf, "%s.tmp", path);
    T_CHECK(!exists(tmpf), "temporary file left behind");
    for (int i = 0; i < nd; i++)
        if (fc[i].name)
            T_CHECK(!fc[i].bad && fc[i].next_off == d[i].nbytes, "fill of %s: bad %d end %llu", d[i].name, fc[i].bad,
                    (unsigned long long)fc[i].next_off);
    T_CHECK(fc[8].calls >= 2, "5 MiB tensor was filled in %d chunk(s)", fc[8].calls);

    /* Check the raw file independently of the reader (format: spec §4.1). */
    size_t flen;
    uint8_t *raw = (uint8_t *)ms_t_read_file(path, &flen);
    T_CHECK(raw != NULL && flen >= 8, "read back raw file");
    if (!raw) return;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | raw[i];
    T_CHECK((8 + hl) % 8 == 0, "header not 8-aligned: %llu", (unsigned long long)hl);
    T_CHECK(8 + hl + total == flen, "file size %zu, want %llu", flen, (unsigned long long)(8 + hl + total));
    json_error_t je;
    json_t *h = json_loadb((const char *)raw + 8, (size_t)hl, 0, &je);
    T_CHECK(h && json_is_object(h), "header is a JSON object: %s", h ? "" : je.text);
    size_t jl = hl;
    while (jl > 0 && raw[8 + jl - 1] == ' ') jl--;
    T_CHECK(jl > 0 && raw[8 + jl - 1] == '}', "header padded with spaces only");
    T_CHECK(memmem(raw + 8, jl, "\": ", 3) == NULL && memmem(raw + 8, jl, ", ", 2) == NULL, "header is compact");
    T_CHECK(memmem(raw + 8, jl, "{\"__metadata__\":{\"format\":\"pt\"}", 31) != NULL, "metadata first");
    uint64_t begin[16];
    if (h) {
        /* Keys in declaration order, offsets consecutive (the loader keeps insertion order). */
        const char *key;
        json_t *v;
        int i = -1, ok = 1;
        uint64_t off = 0;
        json_object_foreach(h, key, v)
        {
            if (i < 0) {
                ok &= strcmp(key, "__metadata__") == 0;
                i = 0;
                continue;
            }
            if (i >= nd || strcmp(key, d[i].name) != 0) {
                ok = 0;
                break;
            }
            json_t *o = json_object_get(v, "data_offsets");
            begin[i] = (uint64_t)json_integer_value(json_array_get(o, 0));
            ok &= begin[i] == off && (uint64_t)json_integer_value(json_array_get(o, 1)) == off + d[i].nbytes;
            ok &= strcmp(json_string_value(json_object_get(v, "dtype")), ms_dtype_name(d[i].dt)) == 0;
            ok &= (int)json_array_size(json_object_get(v, "shape")) == d[i].ndim;
            off += d[i].nbytes;
            i++;
        }
        T_CHECK(ok && i == nd, "header order/offsets (%d of %d)", i, nd);
        json_decref(h);
    }

    /* Read back through the reader, as a file and as a directory. */
    for (int pass = 0; pass < 2; pass++) {
        ms_st *st = pass ? ms_st_open_dir(dir) : ms_st_open_file(path);
        T_CHECK(st != NULL, "open pass %d: %s", pass, ms_err_msg());
        if (!st) continue;
        T_CHECK(ms_st_count(st) == (size_t)nd, "count %zu", ms_st_count(st));
        T_CHECK(ms_st_file_count(st) == 1 && has(ms_st_file_path(st, 0), "model.safetensors"), "file list");
        for (int i = 0; i < nd; i++) {
            const ms_st_tensor *t = ms_st_find(st, d[i].name);
            T_CHECK(t != NULL, "find %s", d[i].name);
            if (!t) continue;
            int ok = strcmp(t->name, d[i].name) == 0 && t->dtype == d[i].dt && t->ndim == d[i].ndim && t->file == 0;
            int64_t numel = 1;
            for (int k = 0; k < d[i].ndim; k++) {
                ok &= t->shape[k] == d[i].shape[k];
                numel *= d[i].shape[k];
            }
            T_CHECK(ok, "%s: name/dtype/shape", d[i].name);
            T_CHECK(t->numel == numel && t->nbytes == d[i].nbytes, "%s: numel %lld nbytes %llu", d[i].name,
                    (long long)t->numel, (unsigned long long)t->nbytes);
            T_CHECK(t->offset == 8 + hl + begin[i], "%s: offset %llu", d[i].name, (unsigned long long)t->offset);
            const uint8_t *tb = ms_t_st_bytes(st, t);
            T_CHECK(t->nbytes == 0 || memcmp(tb, raw + t->offset, (size_t)t->nbytes) == 0, "%s: data vs file",
                    d[i].name);
            if (d[i].data) {
                T_CHECK(memcmp(tb, d[i].data, d[i].nbytes) == 0, "%s: bytes", d[i].name);
            } else if (d[i].nbytes) {
                int same = 1;
                const uint8_t *p = tb;
                for (size_t k = 0; k < d[i].nbytes; k++) same &= p[k] == pattern(k);
                T_CHECK(same, "%s: filled bytes", d[i].name);
            }
        }
        T_CHECK(ms_st_find(st, "nope") == NULL && ms_st_find(st, "quote\"back") == NULL, "absent names");
        int ordered = 1;
        for (size_t i = 1; i < ms_st_count(st); i++)
            ordered &= ms_st_at(st, i - 1)->offset <= ms_st_at(st, i)->offset;
        T_CHECK(ordered, "ms_st_at in offset order");
        ms_st_close(st);
    }
    ms_st_close(NULL);
    free(raw);

    /* A failing source aborts the write and leaves nothing behind. */
    char fpath[4200];
    snprintf(fpath, sizeof fpath, "%s/fail.safetensors", dir);
    w = ms_st_writer_new();
    ms_st_writer_add_copy(w, "ok", MS_DT_U8, 1, (int64_t[]){3}, q3);
    ms_st_writer_add(w, "broken.source", MS_DT_F32, 1, (int64_t[]){4}, fill_fail, NULL);
    T_CHECK(ms_st_writer_write(w, fpath) == -1, "failing fill accepted");
    T_CHECK(has(ms_err_msg(), "broken.source") && has(ms_err_msg(), "synthetic") && has(ms_err_msg(), fpath),
            "fill failure message: %s", ms_err_msg());
    snprintf(tmpf, sizeof tmpf, "%s.tmp", fpath);
    T_CHECK(!exists(fpath) && !exists(tmpf), "failed write left a file");
    ms_st_writer_free(w);

    /* Duplicate declaration and unwritable destination. */
    w = ms_st_writer_new();
    ms_st_writer_add_copy(w, "twice", MS_DT_U8, 1, (int64_t[]){3}, q3);
    ms_st_writer_add_copy(w, "twice", MS_DT_U8, 1, (int64_t[]){3}, q3);
    T_CHECK(ms_st_writer_write(w, fpath) == -1 && has(ms_err_msg(), "twice"), "duplicate declaration: %s",
            ms_err_msg());
    ms_st_writer_free(w);
    w = ms_st_writer_new();
    T_CHECK(ms_st_writer_write(w, "/nonexistent-dir/x.safetensors") == -1 && ms_err_code() == MS_EXIT_IO &&
                has(ms_err_msg(), "/nonexistent-dir/x.safetensors"),
            "unwritable: %s", ms_err_msg());
    /* add_copy keeps its own copy: changing the source afterwards changes nothing. */
    snprintf(fpath, sizeof fpath, "%s/copy.safetensors", dir);
    uint8_t src[3] = {1, 2, 3};
    ms_st_writer_add_copy(w, "c", MS_DT_U8, 1, (int64_t[]){3}, src);
    memset(src, 0, sizeof src);
    T_CHECK(ms_st_writer_write(w, fpath) == 0, "copy write: %s", ms_err_msg());
    ms_st_writer_free(w);
    ms_st *cs = ms_st_open_file(fpath);
    const ms_st_tensor *ct = cs ? ms_st_find(cs, "c") : NULL;
    T_CHECK(ct && memcmp(ms_t_st_bytes(cs, ct), "\1\2\3", 3) == 0, "add_copy copied the bytes");
    ms_st_close(cs);
    w = ms_st_writer_new();
    /* An empty checkpoint is legal. */
    snprintf(fpath, sizeof fpath, "%s/empty.safetensors", dir);
    T_CHECK(ms_st_writer_write(w, fpath) == 0, "empty write: %s", ms_err_msg());
    ms_st_writer_free(w);
    ms_st *st = ms_st_open_file(fpath);
    T_CHECK(st && ms_st_count(st) == 0 && ms_st_find(st, "x") == NULL, "empty file opens");
    ms_st_close(st);
}

/* ---- shards ---- */

static void write_shard(const char *path, const char *const *names, int n, uint8_t seed)
{
    ms_st_writer *w = ms_st_writer_new();
    for (int i = 0; i < n; i++) {
        uint8_t b[6];
        for (int k = 0; k < 6; k++) b[k] = (uint8_t)(seed + 16 * i + k);
        ms_st_writer_add_copy(w, names[i], MS_DT_BF16, 2, (int64_t[]){3, 1}, b);
    }
    if (ms_st_writer_write(w, path) != 0) {
        fprintf(stderr, "write_shard %s: %s\n", path, ms_err_msg());
        exit(1);
    }
    ms_st_writer_free(w);
}

static void write_index(const char *dir, const char *body)
{
    char p[4200], text[4096];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    snprintf(text, sizeof text, "{\"metadata\":{\"total_size\":30},\"weight_map\":{%s}}", body);
    write_bytes(p, text, strlen(text));
}

static void test_shards(void)
{
    const char *s1[] = {"x.b", "x.a"}, *s2[] = {"y.a"}, *s2dup[] = {"y.a", "x.a"};
    const char *dir = tpath("sharded");
    char p1[4200], p2[4200];
    mkdir_p(dir);
    snprintf(p1, sizeof p1, "%s/model-00001-of-00002.safetensors", dir);
    snprintf(p2, sizeof p2, "%s/model-00002-of-00002.safetensors", dir);
    write_shard(p2, s2, 1, 100);
    write_shard(p1, s1, 2, 0);
    const char *good = "\"y.a\":\"model-00002-of-00002.safetensors\",\"x.a\":\"model-00001-of-00002.safetensors\","
                       "\"x.b\":\"model-00001-of-00002.safetensors\"";
    write_index(dir, good);
    ms_st *st = ms_st_open_dir(dir);
    T_CHECK(st != NULL, "sharded open: %s", ms_err_msg());
    if (st) {
        T_CHECK(ms_st_file_count(st) == 2 && has(ms_st_file_path(st, 0), "model-00001-of-00002") &&
                    has(ms_st_file_path(st, 1), "model-00002-of-00002"),
                "shard files in name order");
        const ms_st_tensor *xa = ms_st_find(st, "x.a"), *xb = ms_st_find(st, "x.b"), *ya = ms_st_find(st, "y.a");
        T_CHECK(xa && xb && ya && xa->file == 0 && xb->file == 0 && ya->file == 1, "tensors in their shards");
        if (xa && xb && ya) {
            const uint8_t *a = ms_t_st_bytes(st, xa), *b = ms_t_st_bytes(st, xb), *y = ms_t_st_bytes(st, ya);
            /* x.b was declared first (seed 0), x.a second (seed 16), y.a in shard 2 (seed 100) */
            T_CHECK(b[0] == 0 && b[5] == 5 && a[0] == 16 && y[0] == 100 && y[5] == 105, "shard bytes");
        }
        T_CHECK(ms_st_count(st) == 3 && ms_st_at(st, 0) == xb && ms_st_at(st, 1) == xa && ms_st_at(st, 2) == ya,
                "order: file, then offset");
        ms_st_close(st);
    }

    /* Index problems. */
    write_index(dir, "\"y.a\":\"model-00002-of-00002.safetensors\",\"x.a\":\"model-00001-of-00002.safetensors\","
                     "\"x.b\":\"model-00001-of-00002.safetensors\",\"z\":\"model-00003-of-00002.safetensors\"");
    expect_fail(dir, 1, MS_EXIT_IO, "model-00003-of-00002.safetensors", "model.safetensors.index.json",
                "index names a missing shard");
    write_index(dir, "\"y.a\":\"model-00002-of-00002.safetensors\",\"x.a\":\"model-00001-of-00002.safetensors\","
                     "\"x.b\":\"model-00002-of-00002.safetensors\"");
    expect_fail(dir, 1, MS_EXIT_MODEL, "'x.b'", "model-00001-of-00002.safetensors", "index points to wrong shard");
    write_index(dir, "\"y.a\":\"model-00002-of-00002.safetensors\",\"x.a\":\"model-00001-of-00002.safetensors\"");
    expect_fail(dir, 1, MS_EXIT_MODEL, "'x.b'", "not listed", "tensor missing from index");
    write_index(dir, "\"y.a\":\"model-00002-of-00002.safetensors\",\"x.a\":\"model-00001-of-00002.safetensors\","
                     "\"x.b\":\"model-00001-of-00002.safetensors\",\"ghost\":\"model-00001-of-00002.safetensors\"");
    expect_fail(dir, 1, MS_EXIT_MODEL, "'ghost'", "model-00001-of-00002.safetensors", "index lists absent tensor");
    write_index(dir, "\"y.a\":\"../model-00002-of-00002.safetensors\"");
    expect_fail(dir, 1, MS_EXIT_MODEL, "y.a", "file name", "index escapes the directory");
    write_bytes(tpath("sharded/model.safetensors.index.json"), "{\"weight_map\": [", 16);
    expect_fail(dir, 1, MS_EXIT_MODEL, "model.safetensors.index.json", NULL, "index is not JSON");
    write_bytes(tpath("sharded/model.safetensors.index.json"), "{\"metadata\": {}}", 16);
    expect_fail(dir, 1, MS_EXIT_MODEL, "weight_map", NULL, "index without weight_map");

    /* The same name in two shards. */
    write_shard(p2, s2dup, 2, 100);
    write_index(dir, "\"y.a\":\"model-00002-of-00002.safetensors\",\"x.a\":\"model-00001-of-00002.safetensors\","
                     "\"x.b\":\"model-00001-of-00002.safetensors\"");
    expect_fail(dir, 1, MS_EXIT_MODEL, "'x.a'", "model-00002-of-00002.safetensors", "duplicate across shards");
    unlink(tpath("sharded/model.safetensors.index.json"));
    expect_fail(dir, 1, MS_EXIT_MODEL, "'x.a'", "model-00001-of-00002.safetensors", "duplicate across shards (scan)");

    /* Without an index: every *.safetensors, in name order. */
    write_shard(p2, s2, 1, 100);
    write_bytes(tpath("sharded/notes.txt"), "x", 1);
    st = ms_st_open_dir(dir);
    T_CHECK(st && ms_st_file_count(st) == 2 && ms_st_count(st) == 3, "scan open: %s", st ? "" : ms_err_msg());
    if (st) {
        T_CHECK(ms_st_at(st, 0)->file == 0 && ms_st_at(st, 2)->file == 1 && strcmp(ms_st_at(st, 2)->name, "y.a") == 0,
                "scan order");
        ms_st_close(st);
    }

    /* Directories that hold no checkpoint. */
    mkdir_p(tpath("emptydir"));
    expect_fail(tpath("emptydir"), 1, MS_EXIT_MODEL, "emptydir", NULL, "empty directory");
    expect_fail(tpath("no-such-dir"), 1, MS_EXIT_IO, "no-such-dir", NULL, "missing directory");
}

/* ---- corrupt single files ---- */

static void test_corrupt(void)
{
    const char *p;
    /* Truncated data: the last tensor no longer fits. */
    p = tpath("trunc.safetensors");
    {
        ms_st_writer *w = ms_st_writer_new();
        float v[4] = {1, 2, 3, 4};
        ms_st_writer_add_copy(w, "first", MS_DT_F32, 1, (int64_t[]){4}, v);
        ms_st_writer_add_copy(w, "second", MS_DT_F32, 1, (int64_t[]){4}, v);
        T_CHECK(ms_st_writer_write(w, p) == 0, "write trunc source");
        ms_st_writer_free(w);
        size_t n;
        char *b = ms_t_read_file(p, &n);
        write_bytes(p, b, n - 3);
        expect_fail(p, 0, MS_EXIT_MODEL, "'second'", "trunc.safetensors", "truncated data");
        write_bytes(p, b, 20);
        expect_fail(p, 0, MS_EXIT_MODEL, "header length", "trunc.safetensors", "truncated header");
        write_bytes(p, b, 5);
        expect_fail(p, 0, MS_EXIT_MODEL, "too short", "trunc.safetensors", "5-byte file");
        write_bytes(p, b, 0);
        expect_fail(p, 0, MS_EXIT_MODEL, "too short", "trunc.safetensors", "empty file");
        /* Header length patched beyond the file. */
        b[5] = 1;
        write_bytes(p, b, n);
        expect_fail(p, 0, MS_EXIT_MODEL, "exceeds the file size", "trunc.safetensors", "header length beyond file");
        free(b);
    }
    expect_fail(tpath("absent.safetensors"), 0, MS_EXIT_IO, "absent.safetensors", NULL, "absent file");
    expect_fail(tmp_root, 0, MS_EXIT_IO, tmp_root, NULL, "directory as file");

    static const struct {
        const char *header;
        size_t data;
        const char *n1, *n2, *why;
    } bad[] = {
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "'t'", "beyond", "offsets out of range"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8, "'t'", "needs 8", "size mismatch"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,16]}}", 16, "'t'", "needs 8", "size mismatch 2"},
        {"{\"w.i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, "'w.i'", "I64", "unknown dtype"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2],", 8, "JSON", NULL, "bad JSON"},
        {"[1, 2, 3]", 0, "not a JSON object", NULL, "array header"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "'t'", "data_offsets", "missing data_offsets"},
        {"{\"t\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "'t'", "dtype", "missing dtype"},
        {"{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "'t'", "shape", "missing shape"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "'t'", "negative", "negative dim"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "'t'", "integer", "real dim"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "'t'", "data_offsets", "end < begin"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8, "'t'", "data_offsets", "negative off"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "'t'", "data_offsets", "short offsets"},
        {"{\"t\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, "'t'", "dimensions",
         "nine dims"},
        {"{\"t\":[1,2]}", 8, "'t'", "not a JSON object", "entry not an object"},
        {"{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
         "\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
         2, "duplicate", NULL, "duplicate in one header"},
        {"{\"__metadata__\":\"pt\"}", 0, "__metadata__", NULL, "metadata not an object"},
        {"{\"t\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,1]}}", 1, "'t'",
         "too large", "numel overflow"},
        /* The tensors must tile the data section exactly (issue 12, defect 1). */
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
         "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}",
         2, "overlaps", "'a'", "two tensors sharing bytes"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
         "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}",
         3, "overlaps", "'b'", "overlapping tensors"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
         "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]}}",
         5, "hole", "'b'", "hole between tensors"},
        {"{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}", 3, "hole", "'b'", "hole at the start"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 5, "'t'", "ends at byte 4",
         "trailing byte"},
        {"{}", 3, "no tensors", NULL, "data without tensors"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = tpath("bad.safetensors");
        write_raw(p, bad[i].header, bad[i].data);
        expect_fail(p, 0, MS_EXIT_MODEL, "bad.safetensors", bad[i].n1, bad[i].why);
        if (bad[i].n2) expect_fail(p, 0, MS_EXIT_MODEL, bad[i].n2, NULL, bad[i].why);
    }

    /* A header length one byte short (into its space padding): the JSON still parses, but every
     * tensor would be read one byte off; the data section no longer matches the tensors. */
    p = tpath("short.safetensors");
    {
        ms_st_writer *w = ms_st_writer_new();
        float v[3] = {1, 2, 3};
        ms_st_writer_add_copy(w, "vector", MS_DT_F32, 1, (int64_t[]){3}, v);
        T_CHECK(ms_st_writer_write(w, p) == 0, "write short source");
        ms_st_writer_free(w);
        size_t n;
        uint8_t *b = (uint8_t *)ms_t_read_file(p, &n);
        T_CHECK(b && n > 9 && b[8 + b[0] - 1] == ' ', "the writer pads the header with spaces");
        if (b && n > 9) {
            b[0]--; /* the length is little-endian and small */
            write_bytes(p, b, n);
            expect_fail(p, 0, MS_EXIT_MODEL, "short.safetensors", "'vector'", "header one byte short");
        }
        free(b);
    }

    /* A file truncated after it was opened: reading a tensor is an I/O error naming the file and
     * the tensor (the file is not mapped, so nothing can fault later). */
    p = tpath("cut-later.safetensors");
    {
        ms_st_writer *w = ms_st_writer_new();
        float v[64] = {0};
        ms_st_writer_add_copy(w, "head", MS_DT_F32, 1, (int64_t[]){64}, v);
        ms_st_writer_add_copy(w, "tail", MS_DT_F32, 1, (int64_t[]){64}, v);
        T_CHECK(ms_st_writer_write(w, p) == 0, "write cut-later");
        ms_st_writer_free(w);
        ms_st *st = ms_st_open_file(p);
        const ms_st_tensor *tail = st ? ms_st_find(st, "tail") : NULL;
        T_CHECK(tail && truncate(p, (off_t)tail->offset + 10) == 0, "open, then truncate");
        if (tail) {
            uint8_t buf[256];
            ms_err_clear();
            T_CHECK(ms_st_read(st, tail, 0, buf, (size_t)tail->nbytes) == -1 && ms_err_code() == MS_EXIT_IO &&
                        has(ms_err_msg(), "cut-later.safetensors") && has(ms_err_msg(), "'tail'"),
                    "read of a truncated tensor: %s", ms_err_msg());
            T_CHECK(ms_st_read(st, ms_st_find(st, "head"), 0, buf, 256) == 0, "the rest still reads");
        }
        ms_st_close(st);
    }

    /* Legal corner cases: zero-length tensor at the very end, metadata only, unpadded header,
     * trailing space padding, keys in any order. */
    p = tpath("ok.safetensors");
    write_raw(p,
              "{\"t\":{\"data_offsets\":[0,4],\"shape\":[],\"dtype\":\"F32\"},"
              "\"z\":{\"dtype\":\"U8\",\"shape\":[3,0],\"data_offsets\":[4,4]}}   ",
              4);
    ms_st *st = ms_st_open_file(p);
    T_CHECK(st != NULL, "corner cases: %s", ms_err_msg());
    if (st) {
        const ms_st_tensor *t = ms_st_find(st, "t"), *z = ms_st_find(st, "z");
        T_CHECK(t && t->ndim == 0 && t->numel == 1 && t->nbytes == 4 && *ms_t_st_bytes(st, t) == 0x5a,
                "scalar entry");
        T_CHECK(z && z->numel == 0 && z->nbytes == 0 && z->ndim == 2 && z->shape[0] == 3, "zero-size entry");
        ms_st_close(st);
    }
    write_raw(p, "{\"__metadata__\":{\"format\":\"pt\"}}", 0);
    st = ms_st_open_file(p);
    T_CHECK(st && ms_st_count(st) == 0, "metadata-only header: %s", st ? "" : ms_err_msg());
    ms_st_close(st);
}

/* ---- shared fixtures ---- */

#define LP "language_model.model.layers."

static void check_tiny_checkpoint(const ms_st *st, const char *what)
{
    /* Shapes from spec §4.3 with the tiny dims of §1.1/§4.6: V 256, E 128, L 64, I 64, 8 experts,
     * 13 layers of which 1..12 are MoE. */
    const ms_st_tensor *t = ms_st_find(st, "language_model.model.embed_tokens.weight");
    T_CHECK(t && t->dtype == MS_DT_BF16 && t->ndim == 2 && t->shape[0] == 256 && t->shape[1] == 128 &&
                t->nbytes == 256 * 128 * 2,
            "%s: embed_tokens BF16 [256,128]", what);
    T_CHECK(ms_st_find(st, "language_model.lm_head.weight") != NULL &&
                ms_st_find(st, "language_model.model.lm_head.weight") == NULL,
            "%s: lm_head name (trap 45)", what);
    static const char *part[6] = {"w1.weight_packed", "w1.weight_scale", "w2.weight_packed",
                                  "w2.weight_scale", "w3.weight_packed", "w3.weight_scale"};
    static const int64_t shp[6][2] = {{64, 32}, {64, 2}, {64, 32}, {64, 2}, {64, 32}, {64, 2}};
    int shapes_ok = 1, runs_ok = 1, nexp = 0;
    for (int layer = 1; layer < 13; layer++)
        for (int e = 0; e < 8; e++) {
            const ms_st_tensor *six[6];
            for (int k = 0; k < 6; k++) {
                char name[256];
                snprintf(name, sizeof name, LP "%d.block_sparse_moe.experts.%d.%s", layer, e, part[k]);
                six[k] = ms_st_find(st, name);
                if (!six[k]) {
                    T_CHECK(0, "%s: missing %s", what, name);
                    return;
                }
                if (six[k]->dtype != MS_DT_U8 || six[k]->ndim != 2 || six[k]->shape[0] != shp[k][0] ||
                    six[k]->shape[1] != shp[k][1])
                    shapes_ok = 0;
            }
            /* spec §4.5: one contiguous run, in this order, in one shard. */
            for (int k = 1; k < 6; k++)
                if (six[k]->file != six[0]->file || six[k]->offset != six[k - 1]->offset + six[k - 1]->nbytes)
                    runs_ok = 0;
            nexp++;
        }
    T_CHECK(shapes_ok, "%s: expert tensors U8 [64,32]/[64,2]", what);
    T_CHECK(runs_ok && nexp == 96, "%s: each expert one contiguous run (%d experts)", what, nexp);

    /* ms_st_read agrees with plain reads of the file. */
    if (t) {
        int fd = open(ms_st_file_path(st, t->file), O_RDONLY);
        uint8_t *buf = malloc((size_t)t->nbytes);
        ssize_t got = fd >= 0 ? pread(fd, buf, (size_t)t->nbytes, (off_t)t->offset) : -1;
        T_CHECK(got == (ssize_t)t->nbytes && memcmp(buf, ms_t_st_bytes(st, t), (size_t)t->nbytes) == 0,
                "%s: ms_st_read bytes", what);
        free(buf);
        if (fd >= 0) close(fd);
    }
}

/* Number of tensor entries in a safetensors header, read with jansson alone. */
static size_t header_count(const char *path)
{
    size_t n;
    uint8_t *b = (uint8_t *)ms_t_read_file(path, &n);
    if (!b || n < 8) {
        free(b);
        return 0;
    }
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | b[i];
    json_t *h = json_loadb((const char *)b + 8, (size_t)hl, 0, NULL);
    size_t c = h ? json_object_size(h) - (json_object_get(h, "__metadata__") ? 1 : 0) : 0;
    json_decref(h);
    free(b);
    return c;
}

static void test_shared(void)
{
    char d1[4096], d2[4096], f1[4200];
    ms_st *a = NULL;
    const char *p = ms_t_shared("fixtures/kimi-k3/checkpoints/tiny-s1234/model.safetensors");
    if (p) {
        snprintf(f1, sizeof f1, "%s", p);
        snprintf(d1, sizeof d1, "%s", p);
        *strrchr(d1, '/') = 0;
        a = ms_st_open_dir(d1);
        T_CHECK(a != NULL, "tiny-s1234: %s", ms_err_msg());
        ms_st *af = ms_st_open_file(f1);
        T_CHECK(af && a && ms_st_count(af) == ms_st_count(a), "tiny-s1234 as a file");
        ms_st_close(af);
    }
    if (a) {
        T_CHECK(ms_st_file_count(a) == 1 && ms_st_count(a) == header_count(f1), "tiny-s1234: %zu tensors",
                ms_st_count(a));
        check_tiny_checkpoint(a, "tiny-s1234");
        const ms_st_tensor *n = ms_st_find(a, "language_model.model.norm.weight");
        T_CHECK(n && n->dtype == MS_DT_F32, "tiny-s1234: norm is F32 (fixture README)");
    }

    p = ms_t_shared("fixtures/kimi-k3/checkpoints/tiny-released-like/model.safetensors.index.json");
    if (p) {
        char ip[4200];
        snprintf(ip, sizeof ip, "%s", p);
        snprintf(d2, sizeof d2, "%s", p);
        *strrchr(d2, '/') = 0;
        ms_st *b = ms_st_open_dir(d2);
        T_CHECK(b != NULL, "tiny-released-like: %s", ms_err_msg());
        json_t *idx = json_load_file(ip, 0, NULL);
        json_t *wm = json_object_get(idx, "weight_map");
        if (b && wm) {
            T_CHECK(ms_st_file_count(b) == 3 && ms_st_count(b) == json_object_size(wm),
                    "tiny-released-like: %d files, %zu tensors", ms_st_file_count(b), ms_st_count(b));
            check_tiny_checkpoint(b, "tiny-released-like");
            const ms_st_tensor *n = ms_st_find(b, "language_model.model.norm.weight");
            T_CHECK(n && n->dtype == MS_DT_BF16, "tiny-released-like: norm is BF16 (fixture README)");
            /* Every tensor sits in the shard the index names. */
            const char *key;
            json_t *v;
            int ok = 1;
            json_object_foreach(wm, key, v)
            {
                const ms_st_tensor *t = ms_st_find(b, key);
                const char *fp = t ? ms_st_file_path(b, t->file) : "";
                const char *base = strrchr(fp, '/');
                if (!t || strcmp(base ? base + 1 : fp, json_string_value(v)) != 0) ok = 0;
            }
            T_CHECK(ok, "tiny-released-like: tensors in the shards the index names");
            int ordered = 1;
            for (size_t i = 1; i < ms_st_count(b); i++) {
                const ms_st_tensor *x = ms_st_at(b, i - 1), *y = ms_st_at(b, i);
                ordered &= x->file < y->file || (x->file == y->file && x->offset <= y->offset);
            }
            T_CHECK(ordered, "tiny-released-like: ms_st_at order");
            /* Both checkpoints hold the same tensor names. */
            if (a) {
                int same = ms_st_count(a) == ms_st_count(b);
                for (size_t i = 0; same && i < ms_st_count(a); i++)
                    same = ms_st_find(b, ms_st_at(a, i)->name) != NULL;
                T_CHECK(same, "tiny-s1234 and tiny-released-like name sets");
            }
        }
        json_decref(idx);
        ms_st_close(b);
    }
    ms_st_close(a);
}

/* An index that cannot be opened (here: no file descriptor left) is an I/O error, and its
 * message gives the reason, not a JSON position ("line -1, column -1"). */
static void test_index_unopenable(void)
{
    const char *names[] = {"x.a"};
    const char *dir = tpath("index-io");
    char p1[4200];
    mkdir_p(dir);
    snprintf(p1, sizeof p1, "%s/model-00001-of-00001.safetensors", dir);
    write_shard(p1, names, 1, 7);
    write_index(dir, "\"x.a\":\"model-00001-of-00001.safetensors\"");
    struct rlimit old, lim;
    getrlimit(RLIMIT_NOFILE, &old);
    lim = old;
    lim.rlim_cur = 64;
    int fds[64], n = 0;
    if (setrlimit(RLIMIT_NOFILE, &lim) == 0)
        while (n < 64 && (fds[n] = open("/dev/null", O_RDONLY)) >= 0) n++;
    ms_err_clear();
    ms_st *st = ms_st_open_dir(dir);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", ms_err_msg());
    int code = ms_err_code();
    while (n > 0) close(fds[--n]);
    setrlimit(RLIMIT_NOFILE, &old);
    T_CHECK(st == NULL && code == MS_EXIT_IO && has(msg, "model.safetensors.index.json") &&
                has(msg, "Too many open files") && !has(msg, "line") && !has(msg, "column"),
            "unopenable index: class %d, message: %s", code, msg);
    ms_st_close(st);
}

int main(void)
{
    snprintf(tmp_root, sizeof tmp_root, "%s", ms_t_tmpdir("test_st"));
    test_roundtrip();
    test_shards();
    test_index_unopenable();
    test_corrupt();
    test_shared();
    return ms_t_done();
}
