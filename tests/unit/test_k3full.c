/* test_k3full: the full-depth Kimi K3 as a sparse checkpoint (synth --preset k3-full --sparse):
 * sparse safetensors writing, the released layout (names, shapes, dtypes of every text-path
 * tensor, shard names, index, config) and that the whole model binds and plans within 8 GiB.
 * The expected layout is spelled here from ../shared/fixtures/kimi-k3/released/TENSORS.md and
 * the spec (§1.1, §4.2-4.5), not from the code's tensor table. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ms_err.h"
#include "ms_model.h"
#include "ms_plan.h"
#include "ms_st.h"
#include "ms_synth.h"
#include "ms_test.h"

#define GiB (1ull << 30)

/* ---- the released text path (TENSORS.md) ---- */

enum { N_LAYERS = 93, N_EXPERTS = 896 };

typedef enum { ALL, KDA, MLA, DENSE, MOE } where;

typedef struct {
    where w;
    const char *suffix; /* after language_model.model.layers.L. */
    ms_dtype dt;
    int ndim;
    int64_t shape[3];
} want_t;

static const want_t layer_want[] = {
    {ALL, "input_layernorm.weight", MS_DT_BF16, 1, {7168}},
    {ALL, "post_attention_layernorm.weight", MS_DT_BF16, 1, {7168}},
    {ALL, "self_attention_res_norm.weight", MS_DT_BF16, 1, {7168}},
    {ALL, "mlp_res_norm.weight", MS_DT_BF16, 1, {7168}},
    {ALL, "self_attention_res_proj.weight", MS_DT_BF16, 2, {1, 7168}},
    {ALL, "mlp_res_proj.weight", MS_DT_BF16, 2, {1, 7168}},
    {ALL, "self_attn.g_proj.weight", MS_DT_BF16, 2, {12288, 7168}},
    {ALL, "self_attn.o_proj.weight", MS_DT_BF16, 2, {7168, 12288}},
    {KDA, "self_attn.q_proj.weight", MS_DT_BF16, 2, {12288, 7168}},
    {KDA, "self_attn.k_proj.weight", MS_DT_BF16, 2, {12288, 7168}},
    {KDA, "self_attn.v_proj.weight", MS_DT_BF16, 2, {12288, 7168}},
    {KDA, "self_attn.q_conv1d.weight", MS_DT_F32, 3, {12288, 1, 4}},
    {KDA, "self_attn.k_conv1d.weight", MS_DT_F32, 3, {12288, 1, 4}},
    {KDA, "self_attn.v_conv1d.weight", MS_DT_F32, 3, {12288, 1, 4}},
    {KDA, "self_attn.f_a_proj.weight", MS_DT_BF16, 2, {128, 7168}},
    {KDA, "self_attn.f_b_proj.weight", MS_DT_BF16, 2, {12288, 128}},
    {KDA, "self_attn.b_proj.weight", MS_DT_BF16, 2, {96, 7168}},
    {KDA, "self_attn.A_log", MS_DT_F32, 1, {128}},
    {KDA, "self_attn.dt_bias", MS_DT_F32, 1, {12288}},
    {KDA, "self_attn.o_norm.weight", MS_DT_F32, 1, {128}},
    {MLA, "self_attn.q_a_proj.weight", MS_DT_BF16, 2, {1536, 7168}},
    {MLA, "self_attn.q_a_layernorm.weight", MS_DT_BF16, 1, {1536}},
    {MLA, "self_attn.q_b_proj.weight", MS_DT_BF16, 2, {18432, 1536}},
    {MLA, "self_attn.kv_a_proj_with_mqa.weight", MS_DT_BF16, 2, {576, 7168}},
    {MLA, "self_attn.kv_a_layernorm.weight", MS_DT_BF16, 1, {512}},
    {MLA, "self_attn.kv_b_proj.weight", MS_DT_BF16, 2, {24576, 512}},
    {DENSE, "mlp.gate_proj.weight", MS_DT_BF16, 2, {33792, 7168}},
    {DENSE, "mlp.up_proj.weight", MS_DT_BF16, 2, {33792, 7168}},
    {DENSE, "mlp.down_proj.weight", MS_DT_BF16, 2, {7168, 33792}},
    {MOE, "block_sparse_moe.gate.weight", MS_DT_BF16, 2, {896, 7168}},
    {MOE, "block_sparse_moe.gate.e_score_correction_bias", MS_DT_F32, 1, {896}},
    {MOE, "block_sparse_moe.routed_expert_down_proj.weight", MS_DT_BF16, 2, {3584, 7168}},
    {MOE, "block_sparse_moe.routed_expert_norm.weight", MS_DT_BF16, 1, {3584}},
    {MOE, "block_sparse_moe.routed_expert_up_proj.weight", MS_DT_BF16, 2, {7168, 3584}},
    {MOE, "block_sparse_moe.shared_experts.gate_proj.weight", MS_DT_BF16, 2, {6144, 7168}},
    {MOE, "block_sparse_moe.shared_experts.up_proj.weight", MS_DT_BF16, 2, {6144, 7168}},
    {MOE, "block_sparse_moe.shared_experts.down_proj.weight", MS_DT_BF16, 2, {7168, 6144}},
};

/* One routed expert: the six parts in their on-disk order (spec §4.5). */
static const struct {
    const char *part;
    int64_t shape[2];
} expert_want[6] = {
    {"w1.weight_packed", {3072, 1792}}, {"w1.weight_scale", {3072, 112}}, {"w2.weight_packed", {3584, 1536}},
    {"w2.weight_scale", {3584, 96}},    {"w3.weight_packed", {3072, 1792}}, {"w3.weight_scale", {3072, 112}},
};

static const want_t model_want[] = {
    {ALL, "language_model.model.embed_tokens.weight", MS_DT_BF16, 2, {163840, 7168}},
    {ALL, "language_model.lm_head.weight", MS_DT_BF16, 2, {163840, 7168}},
    {ALL, "language_model.model.norm.weight", MS_DT_BF16, 1, {7168}},
    {ALL, "language_model.model.output_attn_res_norm.weight", MS_DT_BF16, 1, {7168}},
    {ALL, "language_model.model.output_attn_res_proj.weight", MS_DT_BF16, 2, {1, 7168}},
};

/* Zero-based MLA layers of the release: 3, 7, ..., 91 and 92 (spec §1.2). */
static int is_mla(int l) { return l % 4 == 3 || l == 92; }

static int applies(where w, int l)
{
    switch (w) {
    case ALL: return 1;
    case KDA: return !is_mla(l);
    case MLA: return is_mla(l);
    case DENSE: return l == 0;
    case MOE: return l > 0;
    }
    return 0;
}

static char shard_name[64];
static const char *shard_of(int file1) /* the release's names: model-000NN-of-000096 */
{
    snprintf(shard_name, sizeof shard_name, "model-%05d-of-000096.safetensors", file1);
    return shard_name;
}

static const char *base(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Check one tensor's dtype and shape; returns it (NULL when absent). */
static const ms_st_tensor *check_tensor(const ms_st *st, const char *name, ms_dtype dt, int ndim, const int64_t *shape,
                                        int *bad)
{
    const ms_st_tensor *t = ms_st_find(st, name);
    int ok = t && t->dtype == dt && t->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++) ok = t->shape[d] == shape[d];
    if (!ok && (*bad)++ < 5) T_CHECK(0, "%s: %s", name, t ? "dtype or shape differs from TENSORS.md" : "missing");
    return t;
}

/* ---- the sparse writer ---- */

static void test_sparse_writer(void)
{
    const char *dir = ms_t_tmpdir("k3full-writer");
    const char *path = ms_t_path(dir, "s.safetensors");
    uint8_t a[16], c[24];
    for (int i = 0; i < 16; i++) a[i] = (uint8_t)(i * 7 + 1);
    for (int i = 0; i < 24; i++) c[i] = (uint8_t)(200 - i);
    ms_st_writer *w = ms_st_writer_new();
    int64_t sa[1] = {16}, sb[2] = {4096, 8192}, sc[1] = {24}, sd[2] = {2048, 8192};
    ms_st_writer_add_copy(w, "a", MS_DT_U8, 1, sa, a);
    ms_st_writer_add_hole(w, "b", MS_DT_BF16, 2, sb); /* 64 MiB in the middle */
    ms_st_writer_add_copy(w, "c", MS_DT_U8, 1, sc, c);
    ms_st_writer_add_hole(w, "d", MS_DT_F32, 2, sd); /* 64 MiB at the end */
    uint64_t data = ms_st_writer_data_bytes(w);
    T_CHECK(data == 16 + (64u << 20) + 24 + (64u << 20), "data bytes %llu", (unsigned long long)data);
    T_CHECK(ms_st_writer_write(w, path) == 0, "write: %s", ms_err_msg());
    ms_st_writer_free(w);
    struct stat sb_;
    T_CHECK(stat(path, &sb_) == 0, "stat");
    ms_st *st = ms_st_open_file(path); /* strict: the tensors tile the data section up to the end */
    T_CHECK(st != NULL, "open: %s", ms_err_msg());
    if (!st) return;
    const ms_st_tensor *ta = ms_st_find(st, "a"), *tb = ms_st_find(st, "b"), *tc = ms_st_find(st, "c"),
                       *td = ms_st_find(st, "d");
    T_CHECK(ta && tb && tc && td, "all four tensors");
    T_CHECK((uint64_t)sb_.st_size == td->offset + td->nbytes, "the file ends where the trailing hole ends");
    T_CHECK((uint64_t)sb_.st_blocks * 512 < (1u << 20), "128 MiB of holes take %llu bytes of disk",
            (unsigned long long)sb_.st_blocks * 512);
    uint8_t got[24], z[4096];
    T_CHECK(ms_st_read(st, ta, 0, got, 16) == 0 && !memcmp(got, a, 16), "a's bytes");
    T_CHECK(ms_st_read(st, tc, 0, got, 24) == 0 && !memcmp(got, c, 24), "c's bytes after the hole");
    int zero = 1;
    memset(z, 0x55, sizeof z);
    T_CHECK(ms_st_read(st, tb, tb->nbytes / 2, z, sizeof z) == 0, "read inside b");
    for (size_t i = 0; i < sizeof z; i++) zero &= z[i] == 0;
    memset(z, 0x55, sizeof z);
    T_CHECK(ms_st_read(st, td, td->nbytes - sizeof z, z, sizeof z) == 0, "read the end of d");
    for (size_t i = 0; i < sizeof z; i++) zero &= z[i] == 0;
    T_CHECK(zero, "holes read as zeros");
    ms_st_close(st);
}

/* ---- the full-depth checkpoint ---- */

static void test_layout(const char *dir)
{
    ms_st *st = ms_st_open_dir(dir);
    T_CHECK(st != NULL, "open %s: %s", dir, ms_err_msg());
    if (!st) return;
    /* every text-path tensor of the release, nothing else */
    size_t want_n = sizeof model_want / sizeof model_want[0];
    int bad = 0;
    uint64_t trunk = 0, data = 0;
    char nm[256];
    for (int l = 0; l < N_LAYERS; l++) {
        for (size_t j = 0; j < sizeof layer_want / sizeof layer_want[0]; j++) {
            const want_t *w = &layer_want[j];
            if (!applies(w->w, l)) continue;
            want_n++;
            snprintf(nm, sizeof nm, "language_model.model.layers.%d.%s", l, w->suffix);
            const ms_st_tensor *t = check_tensor(st, nm, w->dt, w->ndim, w->shape, &bad);
            if (t && w->ndim == 2 && w->shape[0] > 1 && w->dt == MS_DT_BF16) trunk += t->nbytes;
        }
        if (l == 0) continue;
        for (int e = 0; e < N_EXPERTS; e++) {
            uint64_t lo = UINT64_MAX, hi = 0, sum = 0;
            int file = -1, same = 1;
            for (int k = 0; k < 6; k++) {
                want_n++;
                snprintf(nm, sizeof nm, "language_model.model.layers.%d.block_sparse_moe.experts.%d.%s", l, e,
                         expert_want[k].part);
                const ms_st_tensor *t = check_tensor(st, nm, MS_DT_U8, 2, expert_want[k].shape, &bad);
                if (!t) continue;
                if (t->offset < lo) lo = t->offset;
                if (t->offset + t->nbytes > hi) hi = t->offset + t->nbytes;
                sum += t->nbytes;
                same &= file < 0 || t->file == file;
                file = t->file;
            }
            /* one expert = one contiguous run of 17,547,264 bytes in one shard (spec §4.5) */
            if ((!same || hi - lo != sum || sum != 17547264) && bad++ < 5)
                T_CHECK(0, "layer %d expert %d is not one run of 17547264 bytes", l, e);
        }
    }
    for (size_t j = 0; j < sizeof model_want / sizeof model_want[0]; j++) {
        const want_t *w = &model_want[j];
        const ms_st_tensor *t = check_tensor(st, w->suffix, w->dt, w->ndim, w->shape, &bad);
        if (t && j == 1) trunk += t->nbytes; /* the LM head streams like the layers' matrices */
    }
    T_CHECK(bad == 0, "%d tensors differ from the release", bad);
    T_CHECK(ms_st_count(st) == want_n, "%zu tensors, the release's text path has %zu", ms_st_count(st), want_n);
    T_CHECK(want_n == 497052, "the expected list itself: %zu", want_n);
    for (size_t i = 0; i < ms_st_count(st); i++) data += ms_st_at(st, i)->nbytes;

    /* the release's shard names; layer 0's dense MLP in shard 1, embedding and LM head in 94 */
    const ms_st_tensor *dn = ms_st_find(st, "language_model.model.layers.0.mlp.down_proj.weight");
    const ms_st_tensor *em = ms_st_find(st, "language_model.model.embed_tokens.weight");
    const ms_st_tensor *lm = ms_st_find(st, "language_model.lm_head.weight");
    T_CHECK(dn && !strcmp(base(ms_st_file_path(st, dn->file)), shard_of(1)), "layer 0's MLP in %s", shard_of(1));
    T_CHECK(em && !strcmp(base(ms_st_file_path(st, em->file)), shard_of(94)), "embed_tokens in %s", shard_of(94));
    T_CHECK(lm && !strcmp(base(ms_st_file_path(st, lm->file)), shard_of(94)), "lm_head in %s", shard_of(94));
    int names_ok = 1;
    for (int f = 0; f < ms_st_file_count(st); f++) {
        const char *b = base(ms_st_file_path(st, f));
        int n1 = 0;
        names_ok &= sscanf(b, "model-%5d-of-000096.safetensors", &n1) == 1 && !strcmp(b, shard_of(n1));
    }
    T_CHECK(names_ok && ms_st_file_count(st) == 94, "94 shards named model-000NN-of-000096 (%d)",
            ms_st_file_count(st));

    /* the data are holes: zeros, and almost no disk for 1.56 TB */
    uint64_t apparent = 0, disk = 0;
    for (int f = 0; f < ms_st_file_count(st); f++) {
        struct stat sb;
        if (stat(ms_st_file_path(st, f), &sb) != 0) continue;
        apparent += (uint64_t)sb.st_size;
        disk += (uint64_t)sb.st_blocks * 512;
    }
    T_CHECK(apparent > 1559000000000ull && apparent < 1561000000000ull, "apparent size %llu (spec: 1.56 TB)",
            (unsigned long long)apparent);
    T_CHECK(disk < 256ull << 20, "the shards take %llu bytes of disk", (unsigned long long)disk);
    snprintf(nm, sizeof nm, "language_model.model.layers.92.block_sparse_moe.experts.895.w3.weight_scale");
    const ms_st_tensor *last = ms_st_find(st, nm);
    uint8_t buf[4096];
    memset(buf, 0xff, sizeof buf);
    int zero = last && ms_st_read(st, last, last->nbytes - sizeof buf, buf, sizeof buf) == 0;
    for (size_t i = 0; zero && i < sizeof buf; i++) zero = buf[i] == 0;
    T_CHECK(zero, "the last expert's scales read as zeros");

    /* the index: the standard HF shape (as the released-like fixture's), with every tensor */
    json_error_t je;
    json_t *idx = json_load_file(ms_t_path(dir, "model.safetensors.index.json"), 0, &je);
    T_CHECK(idx && json_object_size(json_object_get(idx, "weight_map")) == want_n, "index weight_map");
    T_CHECK(idx && json_integer_value(json_object_get(json_object_get(idx, "metadata"), "total_size")) ==
                       (json_int_t)data,
            "index total_size = the data bytes");
    const char *fx = ms_t_shared("fixtures/kimi-k3/checkpoints/tiny-released-like/model.safetensors.index.json");
    if (fx && idx) {
        json_t *ref = json_load_file(fx, 0, &je);
        const char *k;
        json_t *v;
        int same_keys = ref != NULL && json_object_size(ref) == json_object_size(idx);
        json_object_foreach(ref, k, v) same_keys &= json_object_get(idx, k) != NULL;
        json_object_foreach(json_object_get(ref, "metadata"), k, v) same_keys &=
            json_object_get(json_object_get(idx, "metadata"), k) != NULL;
        T_CHECK(same_keys, "the index has the released-like fixture's keys");
        json_decref(ref);
    }
    json_decref(idx);
    ms_st_close(st);
    (void)trunk;
}

/* Every key the synthetic config writes has the released config's value (the synthetic
 * tokenizer's bos/eos ids excepted: its specials are its own). */
static void test_config(const char *dir)
{
    const char *rel = ms_t_shared("fixtures/kimi-k3/released/config.json");
    if (!rel) return;
    json_error_t je;
    json_t *ours = json_load_file(ms_t_path(dir, "config.json"), 0, &je), *ref = json_load_file(rel, 0, &je);
    T_CHECK(ours && ref, "both configs load");
    if (!ours || !ref) goto out;
    const char *k;
    json_t *v;
    int n = 0;
    json_object_foreach(ours, k, v)
    {
        if (!strcmp(k, "text_config")) continue;
        T_CHECK(json_equal(v, json_object_get(ref, k)), "root key %s differs from the release", k);
    }
    json_t *tc = json_object_get(ours, "text_config"), *rtc = json_object_get(ref, "text_config");
    json_object_foreach(tc, k, v)
    {
        if (!strcmp(k, "bos_token_id") || !strcmp(k, "eos_token_id")) continue;
        if (!strcmp(k, "linear_attn_config")) {
            const char *k2;
            json_t *v2;
            json_object_foreach(v, k2, v2)
            {
                n++;
                T_CHECK(json_equal(v2, json_object_get(json_object_get(rtc, k), k2)),
                        "linear_attn_config.%s differs from the release", k2);
            }
            continue;
        }
        n++;
        T_CHECK(json_equal(v, json_object_get(rtc, k)), "text_config.%s differs from the release", k);
    }
    T_CHECK(n >= 30, "compared %d keys (every model key the synth writes)", n);
out:
    json_decref(ours);
    json_decref(ref);
}

/* The whole model binds (every tensor checked by name, dtype and shape) and plans at 8 GiB:
 * everything fits, the trunk is split into pinned and streamed, nothing is read. */
static void test_plan(const char *dir)
{
    ms_run_opts o;
    memset(&o, 0, sizeof o);
    o.ram_budget = 8 * GiB;
    o.baseline = 256ull << 20; /* a run's resident size at planning (measured: 237 MiB) */
    o.prompt_tokens = 1;
    o.max_positions = 4096;
    o.plan_only = 1;
    o.n_threads = 2;
    ms_err_clear();
    ms_model *m = ms_k3_model_open(dir, &o);
    T_CHECK(m != NULL, "open and plan at 8 GiB: %s", ms_err_msg());
    if (!m) return;
    const ms_plan *p = ms_model_plan(m);
    T_CHECK(p != NULL, "a plan");
    if (p) {
        uint64_t used = p->fixed + p->pinned_bytes + p->cache;
        T_CHECK(used <= 8 * GiB, "the plan uses %llu bytes of 8 GiB", (unsigned long long)used);
        /* the trunk: every BF16 matrix but the embedding (read by rows), TENSORS.md sizes */
        uint64_t kda = 2ull * (5 * 12288ull * 7168 + 128 * 7168 + 12288 * 128 + 96 * 7168);
        uint64_t mla = 2ull * (2 * 12288ull * 7168 + 1536 * 7168 + 18432 * 1536 + 576 * 7168 + 24576 * 512);
        uint64_t moe = 2ull * (896 * 7168 + 2 * 3584ull * 7168 + 3 * 6144ull * 7168);
        uint64_t trunk = 69 * kda + 24 * mla + 92 * moe + 2ull * 3 * 33792 * 7168 + 2ull * 163840 * 7168;
        T_CHECK(p->pinned_bytes + p->streamed_bytes == trunk, "pinned %llu + streamed %llu = the trunk %llu",
                (unsigned long long)p->pinned_bytes, (unsigned long long)p->streamed_bytes,
                (unsigned long long)trunk);
        T_CHECK(p->streaming && p->n_pinned > 0 && p->n_pinned < p->in.n_trunk, "part pinned, the rest streams");
        T_CHECK(p->in.n_trunk == 69 * 8 + 24 * 6 + 92 * 6 + 3 + 1, "%d trunk matrices", p->in.n_trunk);
        T_CHECK(p->cache_slots >= 2, "an expert cache of %llu slots", (unsigned long long)p->cache_slots);
        T_CHECK(p->in.max_slots == 92ull * 896, "the cache never needs more than the 82432 experts");
    }
    ms_model_free(m);
}

int main(void)
{
    test_sparse_writer();
    const char *dir = ms_t_tmpdir("k3full");
    ms_synth_shape sh;
    T_CHECK(ms_synth_preset("k3-full", &sh) == 0, "the k3-full preset");
    sh.sparse = 1;
    sh.tok_ranks = 0; /* the tokenizer is not under test here */
    T_CHECK(ms_synth_write(dir, &sh, 1) == 0, "synth k3-full --sparse: %s", ms_err_msg());
    test_layout(dir);
    test_config(dir);
    test_plan(dir);
    return ms_t_done();
}
