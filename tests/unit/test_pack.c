/* test_pack: strict pack manifests, and the checksummed expert store over a pack. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ms_k3_cfg.h"
#include "ms_cli.h"
#include "ms_err.h"
#include "ms_expert.h"
#include "ms_io.h"
#include "ms_ops.h"
#include "ms_pack.h"
#include "ms_shard.h"
#include "ms_st.h"
#include "ms_synth.h"
#include "ms_test.h"
#include "ms_wire.h"
#include "ms_xstore.h"

static char root[4096];

static int has(const char *s, const char *n) { return s && strstr(s, n) != NULL; }

/* root/rel in one of 8 rotating buffers: copy a result that must outlive 8 more calls. */
static const char *rpath(const char *rel) { return ms_t_path(root, rel); }

static ms_t_rng rng = {0x2545f4914f6cdd1dull};
static uint32_t rnd(void) { return (uint32_t)(ms_t_rng_u64(&rng) >> 11); }


/* ---- manifest corruption ---- */

static void copy_file(const char *src, const char *dst, long truncate_by)
{
    size_t n = 0;
    char *b = ms_t_read_file(src, &n);
    if (b && truncate_by > 0) n = n > (size_t)truncate_by ? n - (size_t)truncate_by : 0;
    FILE *f = fopen(dst, "wb");
    if (b && f) fwrite(b, 1, n, f);
    if (f) fclose(f);
    free(b);
}

/* A copy of pack src in root/bad with the manifest given as JSON (or raw text when j is NULL). */
static const char *bad_pack(const char *src, json_t *j, const char *raw, long truncate_bin)
{
    const char *d = rpath("bad");
    mkdir(d, 0755);
    char a[4400], b[4400];
    snprintf(a, sizeof a, "%s/experts.bin", src);
    snprintf(b, sizeof b, "%s/experts.bin", d);
    copy_file(a, b, truncate_bin);
    snprintf(b, sizeof b, "%s/manifest.json", d);
    if (j) {
        json_dump_file(j, b, JSON_INDENT(1));
    } else {
        FILE *f = fopen(b, "wb");
        if (f) {
            fputs(raw, f);
            fclose(f);
        }
    }
    return d;
}

/* Open the corrupted pack: it must fail, class code, the message naming the manifest and each of needles. */
static void expect_bad(const char *label, const char *dir, int code, const char *n1, const char *n2)
{
    ms_pack p;
    memset(&p, 0x5a, sizeof p);
    ms_err_clear();
    int rc = ms_pack_open(dir, &p);
    const char *m = ms_err_msg();
    T_CHECK(rc == -1, "%s: accepted", label);
    T_CHECK(has(m, "manifest.json") && has(m, n1) && (!n2 || has(m, n2)),
            "%s: message must name manifest.json, %s%s%s: %s", label, n1, n2 ? " and " : "", n2 ? n2 : "", m);
    T_CHECK(ms_err_code() == code, "%s: class %d, expected %d", label, ms_err_code(), code);
    T_CHECK(p.entries == NULL && p.bin_path == NULL && p.n == 0, "%s: pack not cleared",
            label);
    ms_pack_close(&p);
}

static json_t *entry(json_t *j, size_t i) { return json_array_get(json_object_get(j, "experts"), i); }

static void test_manifest_errors(const char *good_dir)
{
    char good[4200], mp[4400];
    snprintf(good, sizeof good, "%s", good_dir);
    snprintf(mp, sizeof mp, "%s/manifest.json", good);
    json_error_t je;
    json_t *orig = json_load_file(mp, 0, &je);
    T_CHECK(orig != NULL && json_array_size(json_object_get(orig, "experts")) >= 3, "manifest to corrupt: %s", je.text);
    if (!orig) return;
    json_t *j;
    ms_pack p;

    /* The unmodified copy opens (the corruptions below are the only difference). */
    j = json_deep_copy(orig);
    T_CHECK(ms_pack_open(bad_pack(good, j, NULL, 0), &p) == 0, "control copy: %s", ms_err_msg());
    ms_pack_close(&p);
    json_decref(j);

    expect_bad("bad JSON", bad_pack(good, NULL, "{\"format\": \"moestream-pack\", \"version\": ", 0), MS_EXIT_MODEL,
               "invalid JSON", NULL);
    expect_bad("not an object", bad_pack(good, NULL, "[1, 2]", 0), MS_EXIT_MODEL, "object", NULL);

    static const char *fields[] = {"format",      "version",         "model_fingerprint", "worker",
                                   "workers",     "replicas",        "num_layers",        "num_experts",
                                   "expert_bytes", "first_moe_layer", "expert_format",     "experts"};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        char label[96], quoted[64];
        j = json_deep_copy(orig);
        json_object_del(j, fields[i]);
        snprintf(label, sizeof label, "missing %s", fields[i]);
        snprintf(quoted, sizeof quoted, "\"%s\"", fields[i]);
        expect_bad(label, bad_pack(good, j, NULL, 0), MS_EXIT_MODEL, quoted, "missing");
        json_decref(j);
        /* and the same field with a wrong type */
        j = json_deep_copy(orig);
        json_object_set_new(j, fields[i], json_real(1.5));
        snprintf(label, sizeof label, "%s of the wrong type", fields[i]);
        expect_bad(label, bad_pack(good, j, NULL, 0), MS_EXIT_MODEL, quoted, NULL);
        json_decref(j);
    }

    struct {
        const char *label, *key;
        json_t *val;
        const char *n1, *n2;
    } top[] = {
        {"format", "format", json_string("safetensors"), "\"format\"", NULL},
        {"version 1 (older)", "version", json_integer(1), "\"version\" is 1", "older pack"},
        {"version 3 (newer)", "version", json_integer(3), "\"version\" is 3", "newer pack"},
        {"short fingerprint", "model_fingerprint", json_string("0123abcd"), "\"model_fingerprint\"", "16 hex"},
        {"non-hex fingerprint", "model_fingerprint", json_string("0123456789abcdeg"), "\"model_fingerprint\"", NULL},
        {"worker >= workers", "worker", json_integer(99), "\"worker\"", "99"},
        {"zero workers", "workers", json_integer(0), "\"workers\"", NULL},
        {"replicas > workers", "replicas", json_integer(99), "\"replicas\"", NULL},
        {"expert_bytes", "expert_bytes", json_integer(1000), "\"expert_bytes\"", NULL},
        {"first_moe_layer beyond the layers", "first_moe_layer", json_integer(99), "\"first_moe_layer\"", NULL},
    };
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++) {
        j = json_deep_copy(orig);
        json_object_set_new(j, top[i].key, top[i].val);
        expect_bad(top[i].label, bad_pack(good, j, NULL, 0), MS_EXIT_MODEL, top[i].n1, top[i].n2);
        json_decref(j);
    }

    /* The expert format: every field is checked, and the parts must be those the matrices make. */
    struct {
        const char *label, *path; /* path: "KEY" or "ARRAY.INDEX.KEY" inside expert_format */
        json_t *val;
        const char *n1, *n2;
    } xf[] = {
        {"latent not /32", "latent", json_integer(48), "expert_format", "32"},
        {"unknown activation", "activation.name", json_string("gelu"), "activation \"gelu\"", NULL},
        {"b1 a string", "activation.b1", json_string("4"), "\"b1\"", NULL},
        {"b2 missing", "activation.b2", NULL, "\"b2\"", "missing"},
        {"w2 transposed", "matrices.1.rows", json_integer(48), "matrices[1]", NULL},
        {"unknown encoding", "matrices.0.encoding", json_string("int8"), "encoding \"int8\"", NULL},
        {"part shape", "parts.1.shape", json_pack("[i,i]", 1, 1), "parts[1]", NULL},
        {"part dtype", "parts.0.dtype", json_string("F32"), "parts[0]", NULL},
        {"part name", "parts.4.name", json_string("w3.bias"), "parts[4]", NULL},
    };
    for (size_t i = 0; i < sizeof xf / sizeof xf[0]; i++) {
        j = json_deep_copy(orig);
        json_t *o = json_object_get(j, "expert_format");
        char key[64];
        snprintf(key, sizeof key, "%s", xf[i].path);
        char *dot = strchr(key, '.');
        if (dot) {
            *dot = 0;
            o = json_object_get(o, key);
            char *rest = dot + 1, *dot2 = strchr(rest, '.');
            if (dot2) {
                *dot2 = 0;
                o = json_array_get(o, (size_t)atoi(rest));
                rest = dot2 + 1;
            }
            memmove(key, rest, strlen(rest) + 1);
        }
        if (xf[i].val)
            json_object_set_new(o, key, xf[i].val);
        else
            json_object_del(o, key);
        expect_bad(xf[i].label, bad_pack(good, j, NULL, 0), MS_EXIT_MODEL, xf[i].n1, xf[i].n2);
        json_decref(j);
    }

    /* Entries. */
    json_int_t off0 = json_integer_value(json_object_get(entry(orig, 0), "offset"));
    json_int_t off1 = json_integer_value(json_object_get(entry(orig, 1), "offset"));
    json_int_t nl = json_integer_value(json_object_get(orig, "num_layers"));
    json_int_t ne = json_integer_value(json_object_get(orig, "num_experts"));
    json_t *l0 = json_object_get(entry(orig, 0), "layer"), *e0 = json_object_get(entry(orig, 0), "expert");
    struct {
        const char *label, *key;
        json_t *val;
        const char *n1, *n2;
    } ent[] = {
        {"misaligned offset", "offset", json_integer(off1 + 8), "experts[1]", "\"offset\""},
        {"negative offset", "offset", json_integer(-4096), "experts[1]", "\"offset\""},
        {"overlapping offset", "offset", json_integer(off0), "experts[1]", "overlaps"},
        {"layer out of range", "layer", json_integer(nl), "experts[1]", "\"layer\""},
        {"negative expert", "expert", json_integer(-1), "experts[1]", "\"expert\""},
        {"expert out of range", "expert", json_integer(ne), "experts[1]", "\"expert\""},
        {"dense layer", "layer", json_integer(0), "experts[1]", "dense"},
        {"bad checksum hex", "xxh3", json_string("not-a-checksum!!"), "experts[1]", "\"xxh3\""},
        {"checksum as number", "xxh3", json_integer(12345), "experts[1]", "\"xxh3\""},
        {"parts of 5", "parts", json_pack("[i,i,i,i,i]", 1, 2, 3, 4, 5), "experts[1]", "\"parts\""},
        {"parts sum", "parts", NULL, "experts[1]", "\"parts\""},
        {"parts permuted", "parts", NULL, "experts[1]", "\"parts\"[0]"},
        {"missing offset", "offset", NULL, "experts[1]", "\"offset\""},
        {"entry not an object", NULL, NULL, "experts[1]", "object"},
    };
    for (size_t i = 0; i < sizeof ent / sizeof ent[0]; i++) {
        j = json_deep_copy(orig);
        json_t *e1 = entry(j, 1);
        if (!strcmp(ent[i].label, "parts sum")) {
            json_t *pa = json_object_get(e1, "parts");
            json_array_set_new(pa, 0, json_integer(json_integer_value(json_array_get(pa, 0)) + 1));
        } else if (!strcmp(ent[i].label, "parts permuted")) {
            json_t *pa = json_object_get(e1, "parts"), *a0 = json_deep_copy(json_array_get(pa, 0));
            json_array_set(pa, 0, json_array_get(pa, 1));
            json_array_set_new(pa, 1, a0);
        } else if (!strcmp(ent[i].label, "missing offset")) {
            json_object_del(e1, "offset");
        } else if (!ent[i].key) {
            json_array_set_new(json_object_get(j, "experts"), 1, json_string("layer 1"));
        } else {
            json_object_set_new(e1, ent[i].key, ent[i].val);
        }
        expect_bad(ent[i].label, bad_pack(good, j, NULL, 0), MS_EXIT_MODEL, ent[i].n1, ent[i].n2);
        json_decref(j);
    }
    /* The same (layer, expert) twice, with distinct offsets. */
    j = json_deep_copy(orig);
    json_object_set(entry(j, 2), "layer", l0);
    json_object_set(entry(j, 2), "expert", e0);
    expect_bad("duplicate expert", bad_pack(good, j, NULL, 0), MS_EXIT_MODEL, "experts[0] and experts[2]", "both");
    json_decref(j);
    /* Duplicate keys in one object are refused too. */
    expect_bad("duplicate key",
               bad_pack(good, NULL, "{\"format\": \"moestream-pack\", \"format\": \"moestream-pack\"}", 0),
               MS_EXIT_MODEL, "invalid JSON", "format");

    /* experts.bin shorter than the last expert, and missing. */
    j = json_deep_copy(orig);
    expect_bad("truncated experts.bin", bad_pack(good, j, NULL, 1), MS_EXIT_MODEL, "experts.bin", "truncated");
    const char *d = bad_pack(good, j, NULL, 0);
    char path[4400];
    snprintf(path, sizeof path, "%s/experts.bin", d);
    unlink(path);
    expect_bad("missing experts.bin", d, MS_EXIT_IO, "experts.bin", NULL);
    /* No config.json anywhere near: the manifest alone describes the pack. */
    d = bad_pack(good, j, NULL, 0);
    snprintf(path, sizeof path, "%s/config.json", d);
    T_CHECK(access(path, F_OK) != 0 && ms_pack_open(d, &p) == 0, "a pack opens from its manifest alone: %s",
            ms_err_msg());
    ms_pack_close(&p);
    d = bad_pack(good, j, NULL, 0);
    snprintf(path, sizeof path, "%s/manifest.json", d);
    unlink(path);
    expect_bad("missing manifest", d, MS_EXIT_IO, "manifest.json", NULL);
    json_decref(j);
    json_decref(orig);
}

/* ---- a store over a pack computes what the in-memory table computes; checksums bite ---- */

static void set_mat(ms_mat *m, const ms_st *st, int l, int e, int which, int64_t rows, int64_t cols)
{
    memset(m, 0, sizeof *m);
    m->type = MS_WT_MXFP4;
    m->rows = rows;
    m->cols = cols;
    m->data = ms_t_st_bytes(st, (const ms_st_tensor *)ms_t_expert_part(st, l, e, 2 * which));
    m->scales = ms_t_st_bytes(st, (const ms_st_tensor *)ms_t_expert_part(st, l, e, 2 * which + 1));
}

static ms_xstore *pack_store(const ms_pack *p, const ms_k3_cfg *c, ms_io_files **files, int direct, int slots)
{
    const char *paths[1] = {p->bin_path};
    *files = ms_io_files_open(paths, 1, direct);
    T_CHECK(*files != NULL, "open %s: %s", p->bin_path, ms_err_msg());
    if (!*files) return NULL;
    ms_xstore_opts o = {.n_layers = c->n_layers,
                        .n_experts = c->n_experts,
                        .fmt = p->fmt,
                        .cache_bytes = (uint64_t)slots * ms_xstore_slot_bytes(&p->fmt),
                        .depth = 3};
    ms_xstore *s = ms_xstore_new(&o, *files, NULL);
    T_CHECK(s != NULL, "store: %s", ms_err_msg());
    for (size_t i = 0; s && i < p->n; i++) {
        const ms_pack_entry *en = &p->entries[i];
        ms_xloc x;
        memset(&x, 0, sizeof x);
        uint64_t off = en->offset;
        for (int k = 0; k < 6; k++) {
            x.file[k] = 0;
            x.off[k] = off;
            x.len[k] = en->len[k];
            off += en->len[k];
        }
        x.has_xxh3 = 1;
        x.xxh3 = en->xxh3;
        ms_xstore_set(s, en->layer, en->expert, &x);
    }
    return s;
}

/* One random call on layer `layer` over the experts held[0..nh): rows x k distinct per row. */
static void routing(const int *held, int nh, int64_t *rows, int *k, int32_t *ids, float *z, int L)
{
    *rows = 1 + (int64_t)(rnd() % 6);
    *k = 1 + (int)(rnd() % (unsigned)(nh < 3 ? nh : 3));
    for (int64_t r = 0; r < *rows; r++)
        for (int j = 0; j < *k; j++) {
            int32_t e, dup;
            do {
                e = held[rnd() % (unsigned)nh];
                dup = 0;
                for (int i = 0; i < j; i++) dup |= ids[r * *k + i] == e;
            } while (dup);
            ids[r * *k + j] = e;
        }
    for (int64_t i = 0; i < *rows * L; i++) z[i] = (float)((int)(rnd() % 2001) - 1000) / 613.0f;
}

static void test_store(const char *model, const char *packdir)
{
    ms_k3_cfg c;
    char cpath[4300];
    snprintf(cpath, sizeof cpath, "%s/config.json", model);
    if (ms_k3_cfg_load(cpath, &c) != 0) {
        T_CHECK(0, "config: %s", ms_err_msg());
        return;
    }
    ms_st *st = ms_st_open_dir(model);
    ms_pack p;
    int rc = ms_pack_open(packdir, &p);
    T_CHECK(st && rc == 0, "open: %s", ms_err_msg());
    if (!st || rc != 0) {
        ms_st_close(st);
        ms_k3_cfg_free(&c);
        return;
    }
    int64_t L = c.latent, I = c.moe_inter;
    ms_expert_table *ref = ms_t_situ_table(c.n_layers, c.n_experts, c.latent, c.situ_b1, c.situ_b2, NULL);
    for (int l = c.first_dense; l < c.n_layers; l++)
        for (int e = 0; e < c.n_experts; e++) {
            ms_expert_w w;
            set_mat(&w.w[MS_XROLE_GATE], st, l, e, 0, I, L);
            set_mat(&w.w[MS_XROLE_DOWN], st, l, e, 1, L, I);
            set_mat(&w.w[MS_XROLE_UP], st, l, e, 2, I, L);
            ms_expert_table_set(ref, l, e, &w);
        }
    ms_experts rif = ms_expert_table_iface(ref);
    /* held[l][..]: the experts of layer l in this pack */
    int *held = calloc((size_t)c.n_layers * (size_t)c.n_experts, sizeof(int)),
        *nh = calloc((size_t)c.n_layers, sizeof(int));
    for (size_t i = 0; i < p.n; i++)
        held[(size_t)p.entries[i].layer * (size_t)c.n_experts + (size_t)nh[p.entries[i].layer]++] = p.entries[i].expert;
    enum { MAXR = 6, MAXK = 3 };
    int32_t ids[MAXR * MAXK];
    float *z = malloc(sizeof(float) * MAXR * (size_t)L), *got = malloc(sizeof(float) * MAXR * MAXK * (size_t)L),
          *want = malloc(sizeof(float) * MAXR * MAXK * (size_t)L);

    for (int direct = 0; direct <= 1; direct++) {
        ms_io_files *files;
        ms_xstore *s = pack_store(&p, &c, &files, direct, 4);
        if (!s) continue;
        ms_experts sif = ms_xstore_iface(s);
        int bad = 0, fails = 0;
        for (int call = 0; call < 40; call++) {
            int layer = c.first_dense + (int)(rnd() % (unsigned)(c.n_layers - c.first_dense)), k;
            int64_t rows;
            routing(held + (size_t)layer * (size_t)c.n_experts, nh[layer], &rows, &k, ids, z, (int)L);
            int r1 = sif.compute(sif.ctx, layer, rows, z, k, ids, got),
                r2 = rif.compute(rif.ctx, layer, rows, z, k, ids, want);
            if (r1 != 0 || r2 != 0) {
                fails++;
                continue;
            }
            if (memcmp(got, want, sizeof(float) * (size_t)(rows * k * L)) != 0) bad++;
        }
        ms_xstore_stats sst;
        ms_xstore_get_stats(s, &sst);
        T_CHECK(fails == 0, "%s: %d store calls failed: %s", direct ? "direct" : "buffered", fails, ms_err_msg());
        T_CHECK(bad == 0, "%s: %d calls differ from the in-memory table", direct ? "direct" : "buffered", bad);
        T_CHECK(sst.misses > 0 && sst.hits > 0, "store over a pack: %llu misses, %llu hits",
                (unsigned long long)sst.misses, (unsigned long long)sst.hits);
        ms_xstore_free(s);
        ms_io_files_close(files);
    }

    /* Flip one byte inside one expert of experts.bin (in its w2 scales). */
    const ms_pack_entry *vic = &p.entries[p.n / 2];
    uint64_t at = vic->offset + vic->len[0] + vic->len[1] + vic->len[2] + 3;
    int fd = open(p.bin_path, O_RDWR);
    uint8_t byte = 0;
    T_CHECK(fd >= 0 && pread(fd, &byte, 1, (off_t)at) == 1, "read victim byte");
    byte ^= 0x10;
    T_CHECK(fd >= 0 && pwrite(fd, &byte, 1, (off_t)at) == 1, "flip victim byte");
    if (fd >= 0) close(fd);
    int VL = vic->layer, VE = vic->expert;
    int others[64], no = 0;
    for (int i = 0; i < nh[VL] && no < 64; i++)
        if (held[(size_t)VL * (size_t)c.n_experts + (size_t)i] != VE)
            others[no++] = held[(size_t)VL * (size_t)c.n_experts + (size_t)i];
    T_CHECK(no >= 2, "the victim's layer has %d other experts", no);
    char wl[32], we[32];
    snprintf(wl, sizeof wl, "layer %d", VL);
    snprintf(we, sizeof we, "expert %d", VE);
    for (int direct = 0; direct <= 1 && no >= 2; direct++) {
        ms_io_files *files;
        ms_xstore *s = pack_store(&p, &c, &files, direct, 8);
        if (!s) continue;
        ms_experts sif = ms_xstore_iface(s);
        for (int64_t i = 0; i < 2 * L; i++) z[i] = (float)(i % 13) * 0.25f - 1.5f;
        /* warm one other expert, then a call with a hit, a miss and the corrupt expert */
        int32_t warm[1] = {others[0]};
        T_CHECK(sif.compute(sif.ctx, VL, 1, z, 1, warm, got) == 0, "warm: %s", ms_err_msg());
        int32_t mix[6] = {others[0], VE, others[1], VE, others[1], others[0]};
        for (int rep = 0; rep < 2; rep++) {
            ms_err_clear();
            int r = sif.compute(sif.ctx, VL, 2, z, 3, mix, got);
            const char *m = ms_err_msg();
            T_CHECK(r == -1, "corrupt expert served (try %d)", rep);
            T_CHECK(has(m, wl) && has(m, we) && has(m, "experts.bin") && has(m, "checksum"),
                    "message must name layer, expert, file and checksum: %s", m);
            T_CHECK(ms_err_code() == MS_EXIT_MODEL, "class %d", ms_err_code());
        }
        /* The others are still served, with the table's bits. */
        int32_t ok[4] = {others[1], others[0], others[0], others[1]};
        int r = sif.compute(sif.ctx, VL, 2, z, 2, ok, got);
        T_CHECK(r == 0, "other experts after a checksum failure: %s", ms_err_msg());
        T_CHECK(rif.compute(rif.ctx, VL, 2, z, 2, ok, want) == 0, "reference");
        T_CHECK(r == 0 && memcmp(got, want, sizeof(float) * 4 * (size_t)L) == 0, "bits after a checksum failure");
        ms_xstore_stats sst;
        ms_xstore_get_stats(s, &sst);
        T_CHECK(sst.cache_bytes_used <= 8 * ms_xstore_slot_bytes(&p.fmt), "cache over budget");
        ms_xstore_free(s);
        ms_io_files_close(files);
    }
    free(z);
    free(got);
    free(want);
    free(held);
    free(nh);
    ms_expert_table_free(ref);
    ms_pack_close(&p);
    ms_st_close(st);
    ms_k3_cfg_free(&c);
}

int main(void)
{
    snprintf(root, sizeof root, "%s", ms_t_tmpdir("pack"));
    static char model[4200];
    snprintf(model, sizeof model, "%s", rpath("model"));
    ms_synth_shape sh;
    T_CHECK(ms_synth_preset("tiny", &sh) == 0, "preset");
    T_CHECK(ms_synth_write(model, &sh, 7) == 0, "synth: %s", ms_err_msg());
    /* Packs to read back (their bytes against the source: test_shard). */
    T_CHECK(ms_pack_shard(model, 2, 1, rpath("s21")) == 0, "shard 2x1: %s", ms_err_msg());
    T_CHECK(ms_pack_shard(model, 3, 2, rpath("s32")) == 0, "shard 3x2: %s", ms_err_msg());

    test_manifest_errors(rpath("s21/worker-0"));
    test_store(model, rpath("s32/worker-1"));

    ms_pack p;
    memset(&p, 0, sizeof p);
    ms_pack_close(&p);
    ms_pack_close(NULL);
    return ms_t_done();
}
