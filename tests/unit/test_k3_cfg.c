/* test_k3_cfg: the strict config.json reader on the real release, the fixtures and inline configs. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_k3_cfg.h"
#include "ms_err.h"
#include "ms_test.h"

/* The tiny architecture in the flat fixture spelling (values: spec §1.1 "tiny oracle" column). */
static const char *FLAT =
    "{\"hidden_size\":128,\"num_hidden_layers\":13,\"vocab_size\":256,\"rms_norm_eps\":1e-05,"
    "\"tie_word_embeddings\":false,\"kda_num_heads\":4,\"kda_head_dim\":16,\"short_conv_kernel_size\":4,"
    "\"gate_lower_bound\":-5.0,\"num_attention_heads\":4,\"q_lora_rank\":64,\"kv_lora_rank\":32,"
    "\"qk_nope_head_dim\":24,\"qk_rope_head_dim\":8,\"v_head_dim\":16,\"mla_use_output_gate\":true,"
    "\"num_experts\":8,\"num_experts_per_token\":2,\"num_shared_experts\":2,\"routed_expert_hidden_size\":64,"
    "\"moe_intermediate_size\":48,\"routed_scaling_factor\":1.0,\"moe_renormalize\":true,"
    "\"latent_moe_use_norm\":true,\"first_k_dense_replace\":1,\"intermediate_size\":96,"
    "\"attn_res_block_size\":3,\"situ_beta\":4.0,\"situ_linear_beta\":25.0,\"full_attn_layers\":[4,8,12,13]}";

/* The same model in the nested release shape (structure of released/config.json). */
static const char *NESTED =
    "{\"bos_token_id\":252,\"eos_token_id\":253,\"model_type\":\"kimi_k3\",\"tie_word_embeddings\":false,"
    "\"text_config\":{\"activation_situ_beta\":4.0,\"activation_situ_linear_beta\":25.0,"
    "\"attn_res_block_size\":3,\"first_k_dense_replace\":1,\"hidden_size\":128,\"intermediate_size\":96,"
    "\"kv_lora_rank\":32,\"latent_moe_use_norm\":true,"
    "\"linear_attn_config\":{\"full_attn_layers\":[4,8,12,13],\"gate_lower_bound\":-5.0,\"head_dim\":16,"
    "\"kda_layers\":[1,2,3,5,6,7,9,10,11],\"num_heads\":4,\"short_conv_kernel_size\":4,"
    "\"use_full_rank_gate\":true},"
    "\"mla_use_output_gate\":true,\"moe_intermediate_size\":48,\"moe_renormalize\":true,"
    "\"num_attention_heads\":4,\"num_experts\":8,\"num_experts_per_token\":2,\"num_hidden_layers\":13,"
    "\"num_shared_experts\":2,\"q_lora_rank\":64,\"qk_nope_head_dim\":24,\"qk_rope_head_dim\":8,"
    "\"rms_norm_eps\":1e-05,\"routed_expert_hidden_size\":64,\"routed_scaling_factor\":1.0,"
    "\"v_head_dim\":16,\"vocab_size\":256}}";

static json_t *load_text(const char *s)
{
    json_error_t e;
    json_t *j = json_loads(s, 0, &e);
    if (!j) {
        fprintf(stderr, "test JSON broken: %s\n", e.text);
        exit(1);
    }
    return j;
}

/* Parse a jansson value as "inline.json"; returns ms_k3_cfg_parse's result. */
static int parse_j(json_t *j, ms_k3_cfg *c)
{
    char *s = json_dumps(j, JSON_COMPACT);
    int rc = ms_k3_cfg_parse(s, "inline.json", c);
    free(s);
    return rc;
}

static int has(const char *msg, const char *needle) { return strstr(msg, needle) != NULL; }

/* Expect refusal: class MODEL, message starts with "inline.json: " and contains each needle. */
static void expect_fail(json_t *j, const char *why, const char *n1, const char *n2, const char *n3)
{
    ms_k3_cfg c;
    int rc = parse_j(j, &c);
    const char *m = ms_err_msg();
    T_CHECK(rc == -1, "%s: accepted", why);
    if (rc != -1) {
        ms_k3_cfg_free(&c);
        return;
    }
    T_CHECK(ms_err_code() == MS_EXIT_MODEL, "%s: class %d", why, ms_err_code());
    T_CHECK(strncmp(m, "inline.json: ", 13) == 0, "%s: message does not start with the name: %s", why, m);
    T_CHECK(c.full_attn == NULL && c.is_mla == NULL && c.hidden == 0, "%s: cfg not left empty", why);
    const char *ns[3] = {n1, n2, n3};
    for (int i = 0; i < 3; i++)
        if (ns[i]) T_CHECK(has(m, ns[i]), "%s: message lacks '%s': %s", why, ns[i], m);
}

static void check_flat_tiny(const ms_k3_cfg *c, const char *what)
{
    T_CHECK(c->hidden == 128 && c->n_layers == 13 && c->vocab == 256, "%s: E/N/V", what);
    T_CHECK(c->kda_heads == 4 && c->kda_head_dim == 16 && c->conv_k == 4, "%s: Hk/D/K %d %d %d", what, c->kda_heads,
            c->kda_head_dim, c->conv_k);
    T_CHECK(c->gate_lb == -5.0f && c->eps == 1e-5f, "%s: lb/eps", what);
    T_CHECK(c->mla_heads == 4 && c->q_lora == 64 && c->kv_lora == 32 && c->qk_nope == 24 && c->qk_rope == 8 &&
                c->v_head == 16,
            "%s: MLA dims", what);
    T_CHECK(c->n_experts == 8 && c->top_k == 2 && c->n_shared == 2 && c->latent == 64 && c->moe_inter == 48,
            "%s: MoE dims", what);
    T_CHECK(c->dense_inter == 96 && c->attn_res_block == 3 && c->first_dense == 1, "%s: Id/B/first", what);
    T_CHECK(c->situ_b1 == 4.0f && c->situ_b2 == 25.0f && c->routed_scale == 1.0f, "%s: betas/scale", what);
    T_CHECK(c->mla_out_gate == 1 && c->renorm == 1 && c->latent_norm == 1, "%s: bools", what);
    /* Tiny pattern (spec §1.2): K K K M K K K M K K K M M */
    static const char pat[] = "KKKMKKKMKKKMM";
    int ok = c->n_full_attn == 4 && c->is_mla;
    for (int i = 0; ok && i < 13; i++) ok = c->is_mla[i] == (pat[i] == 'M');
    T_CHECK(ok, "%s: layer map", what);
}

static void test_inline(void)
{
    ms_k3_cfg c;
    /* Baselines. */
    T_CHECK(ms_k3_cfg_parse(FLAT, "flat", &c) == 0, "flat baseline: %s", ms_err_msg());
    check_flat_tiny(&c, "flat");
    T_CHECK(c.nested == 0 && c.bos_id == -1 && c.eos_id == -1, "flat: nested/bos/eos");
    ms_k3_cfg_free(&c);
    T_CHECK(ms_k3_cfg_parse(NESTED, "nested", &c) == 0, "nested baseline: %s", ms_err_msg());
    check_flat_tiny(&c, "nested");
    T_CHECK(c.nested == 1 && c.bos_id == 252 && c.eos_id == 253, "nested: nested/bos/eos");
    ms_k3_cfg_free(&c);
    ms_k3_cfg_free(NULL);

    /* "config" wrapper of the fixture files. */
    json_t *w = json_object();
    json_object_set_new(w, "note", json_string("fixture"));
    json_object_set_new(w, "config", load_text(FLAT));
    T_CHECK(parse_j(w, &c) == 0, "wrapped: %s", ms_err_msg());
    check_flat_tiny(&c, "wrapped");
    ms_k3_cfg_free(&c);
    json_decref(w);

    /* Several missing keys: one message listing every one. */
    json_t *j = load_text(FLAT);
    json_object_del(j, "hidden_size");
    json_object_del(j, "vocab_size");
    json_object_del(j, "situ_beta");
    json_object_del(j, "full_attn_layers");
    json_object_del(j, "kda_head_dim");
    expect_fail(j, "missing", "hidden_size", "vocab_size", "situ_beta");
    expect_fail(j, "missing2", "full_attn_layers", "kda_head_dim", "missing");
    json_decref(j);

    /* Optional bools default to true; 0/1 are booleans; integral floats are integers. */
    j = load_text(FLAT);
    json_object_del(j, "moe_renormalize");
    json_object_del(j, "latent_moe_use_norm");
    json_object_set_new(j, "mla_use_output_gate", json_integer(0));
    json_object_set_new(j, "hidden_size", json_real(128.0));
    T_CHECK(parse_j(j, &c) == 0, "defaults: %s", ms_err_msg());
    T_CHECK(c.renorm == 1 && c.latent_norm == 1 && c.mla_out_gate == 0 && c.hidden == 128, "defaults values");
    ms_k3_cfg_free(&c);
    json_decref(j);

    /* Wrong types, all named in one message. */
    j = load_text(FLAT);
    json_object_set_new(j, "hidden_size", json_string("128"));
    json_object_set_new(j, "num_experts", json_real(8.5));
    json_object_set_new(j, "moe_renormalize", json_string("yes"));
    expect_fail(j, "types", "hidden_size", "num_experts", "moe_renormalize");
    json_decref(j);
    /* 130 layers in blocks of 2: 65 AttnRes snapshots, more than the forward pass holds (it
     * used to abort mid-pass on an assertion); blocks of 3 (44 snapshots) are fine */
    j = load_text(FLAT);
    json_object_set_new(j, "num_hidden_layers", json_integer(130));
    json_object_set_new(j, "attn_res_block_size", json_integer(2));
    json_object_set_new(j, "full_attn_layers", json_pack("[i]", 130));
    expect_fail(j, "AttnRes snapshots", "attn_res_block_size = 2", "65 AttnRes snapshots", "at least 3");
    json_object_set_new(j, "attn_res_block_size", json_integer(3));
    ms_k3_cfg c3;
    T_CHECK(parse_j(j, &c3) == 0, "130 layers in blocks of 3 are fine: %s", ms_err_msg());
    ms_k3_cfg_free(&c3);
    json_decref(j);
    j = load_text(FLAT);
    json_object_set_new(j, "mla_use_output_gate", json_integer(2));
    expect_fail(j, "bool 2", "mla_use_output_gate", "boolean", NULL);
    json_decref(j);
    j = load_text(FLAT);
    json_object_set_new(j, "rms_norm_eps", json_string("1e-5"));
    json_object_set_new(j, "situ_linear_beta", json_true());
    expect_fail(j, "float types", "rms_norm_eps", "situ_linear_beta", NULL);
    json_decref(j);
    j = load_text(FLAT);
    json_object_set_new(j, "full_attn_layers", json_string("4,8,12,13"));
    expect_fail(j, "layer map type", "full_attn_layers", "array", NULL);
    json_decref(j);

    /* Layer map errors. */
    j = load_text(FLAT);
    json_object_set_new(j, "full_attn_layers", json_pack("[i,i,i,i]", 4, 8, 8, 13));
    expect_fail(j, "duplicate layer", "full_attn_layers", "twice", NULL);
    json_object_set_new(j, "full_attn_layers", json_pack("[i,i,i]", 0, 4, 8));
    expect_fail(j, "zero-based entry", "full_attn_layers", "one-based", NULL);
    json_object_set_new(j, "full_attn_layers", json_pack("[i,i,i]", 4, 8, 14));
    expect_fail(j, "beyond N", "14", "1..13", NULL);
    /* An empty map is a model of KDA layers only (`synth --preset k3-slice --layers 1`). */
    json_object_set_new(j, "full_attn_layers", json_array());
    {
        ms_k3_cfg c;
        int rc = parse_j(j, &c);
        T_CHECK(rc == 0, "an empty full_attn_layers (all KDA) loads: %s", ms_err_msg());
        int mla = 0;
        for (int l = 0; rc == 0 && l < c.n_layers; l++) mla += c.is_mla[l] != 0;
        T_CHECK(rc == 0 && mla == 0, "all KDA: %d MLA layers", mla);
        if (rc == 0) ms_k3_cfg_free(&c);
    }
    json_object_set_new(j, "kda_layers", json_pack("[i,i,i]", 1, 2, 3));
    expect_fail(j, "all KDA but kda_layers short", "layer 4", "neither", NULL);
    json_object_del(j, "kda_layers");
    json_t *all = json_array();
    for (int i = 1; i <= 13; i++) json_array_append_new(all, json_integer(i));
    json_object_set_new(j, "full_attn_layers", all);
    expect_fail(j, "all MLA", "full_attn_layers", NULL, NULL);
    json_decref(j);

    /* kda_layers: must be exactly the complement when present. */
    j = load_text(FLAT);
    json_object_set_new(j, "kda_layers", json_pack("[i,i,i,i,i,i,i,i,i]", 1, 2, 3, 5, 6, 7, 9, 10, 11));
    T_CHECK(parse_j(j, &c) == 0, "kda complement accepted: %s", ms_err_msg());
    ms_k3_cfg_free(&c);
    json_object_set_new(j, "kda_layers", json_pack("[i,i,i,i,i,i,i,i]", 1, 2, 3, 5, 6, 7, 9, 10));
    expect_fail(j, "kda missing 11", "kda_layers", "11", NULL);
    json_object_set_new(j, "kda_layers", json_pack("[i,i,i,i,i,i,i,i,i,i]", 1, 2, 3, 4, 5, 6, 7, 9, 10, 11));
    expect_fail(j, "kda overlaps", "kda_layers", "both", NULL);
    json_decref(j);

    /* Top-k and sizes. */
    j = load_text(FLAT);
    json_object_set_new(j, "num_experts_per_token", json_integer(8));
    T_CHECK(parse_j(j, &c) == 0, "top_k == n_experts accepted: %s", ms_err_msg());
    ms_k3_cfg_free(&c);
    json_object_set_new(j, "num_experts_per_token", json_integer(9));
    expect_fail(j, "top_k > Ne", "num_experts_per_token", "num_experts", NULL);
    json_object_set_new(j, "num_experts_per_token", json_integer(0));
    expect_fail(j, "top_k 0", "num_experts_per_token", NULL, NULL);
    json_object_set_new(j, "num_experts", json_integer(1000));
    json_object_set_new(j, "num_experts_per_token", json_integer(MS_K3_CFG_MAX_TOPK + 1));
    expect_fail(j, "top_k > max", "num_experts_per_token", "64", NULL);
    json_decref(j);
    j = load_text(FLAT);
    json_object_set_new(j, "hidden_size", json_integer(-128));
    json_object_set_new(j, "attn_res_block_size", json_integer(0));
    expect_fail(j, "sizes", "hidden_size", "attn_res_block_size", NULL);
    json_decref(j);
    j = load_text(FLAT);
    json_object_set_new(j, "first_k_dense_replace", json_integer(13));
    T_CHECK(parse_j(j, &c) == 0, "first_k_dense_replace = N accepted: %s", ms_err_msg());
    ms_k3_cfg_free(&c);
    json_object_set_new(j, "first_k_dense_replace", json_integer(0));
    T_CHECK(parse_j(j, &c) == 0 && c.first_dense == 0, "first_k_dense_replace = 0 accepted");
    ms_k3_cfg_free(&c);
    json_object_set_new(j, "first_k_dense_replace", json_integer(14));
    expect_fail(j, "first dense > N", "first_k_dense_replace", NULL, NULL);
    json_object_set_new(j, "first_k_dense_replace", json_integer(1));
    json_object_set_new(j, "q_lora_rank", json_null());
    expect_fail(j, "q_lora null", "q_lora_rank", "null", NULL);
    json_decref(j);

    /* Token ids: integers only. */
    j = load_text(FLAT);
    json_object_set_new(j, "bos_token_id", json_integer(5));
    json_object_set_new(j, "eos_token_id", json_pack("[i,i]", 1, 2));
    T_CHECK(parse_j(j, &c) == 0 && c.bos_id == 5 && c.eos_id == -1, "token ids");
    ms_k3_cfg_free(&c);
    json_decref(j);

    /* Nested: a text_config head_dim/num_heads must not shadow linear_attn_config's (trap 5). */
    j = load_text(NESTED);
    json_t *tc = json_object_get(j, "text_config");
    json_object_set_new(tc, "head_dim", json_integer(99));
    json_object_set_new(tc, "num_heads", json_integer(77));
    T_CHECK(parse_j(j, &c) == 0, "nested shadow: %s", ms_err_msg());
    T_CHECK(c.kda_head_dim == 16 && c.kda_heads == 4, "nested shadow: D %d Hk %d (want 16, 4)", c.kda_head_dim,
            c.kda_heads);
    ms_k3_cfg_free(&c);
    /* ...and the KDA keys are not taken from text_config when linear_attn_config lacks them. */
    json_object_del(json_object_get(tc, "linear_attn_config"), "head_dim");
    expect_fail(j, "nested lac head_dim", "linear_attn_config.head_dim", NULL, NULL);
    json_object_del(tc, "linear_attn_config");
    expect_fail(j, "nested no lac", "linear_attn_config.num_heads", "linear_attn_config.full_attn_layers", NULL);
    json_decref(j);
    /* Nested with flat SiTU spelling missing and kda_layers wrong. */
    j = load_text(NESTED);
    tc = json_object_get(j, "text_config");
    json_object_del(tc, "activation_situ_beta");
    json_array_append_new(json_object_get(json_object_get(tc, "linear_attn_config"), "kda_layers"),
                          json_integer(12));
    expect_fail(j, "nested situ + kda", "activation_situ_beta", "kda_layers", NULL);
    json_decref(j);

    /* Syntax. */
    T_CHECK(ms_k3_cfg_parse("{\"hidden_size\": 128,", "inline.json", &c) == -1 && has(ms_err_msg(), "inline.json") &&
                ms_err_code() == MS_EXIT_MODEL,
            "bad JSON refused: %s", ms_err_msg());
    T_CHECK(ms_k3_cfg_parse("[1, 2]", "inline.json", &c) == -1 && has(ms_err_msg(), "inline.json"),
            "array root refused");
    T_CHECK(ms_k3_cfg_parse("{\"hidden_size\": 1, \"hidden_size\": 2}", "inline.json", &c) == -1,
            "duplicate key refused");
}

static void test_released(void)
{
    const char *p = ms_t_shared("fixtures/kimi-k3/released/config.json");
    if (!p) return;
    ms_k3_cfg c;
    int rc = ms_k3_cfg_load(p, &c);
    T_CHECK(rc == 0, "released config refused: %s", ms_err_msg());
    if (rc) return;
    T_CHECK(c.nested == 1, "released: nested");
    T_CHECK(c.hidden == 7168 && c.n_layers == 93 && c.vocab == 163840, "released: E N V");
    T_CHECK(c.kda_heads == 96 && c.kda_head_dim == 128 && c.conv_k == 4, "released: Hk D K");
    T_CHECK(c.gate_lb == -5.0f && c.eps == 1e-5f, "released: lb eps");
    T_CHECK(c.mla_heads == 96 && c.q_lora == 1536 && c.kv_lora == 512, "released: H Rq Rkv");
    T_CHECK(c.qk_nope == 128 && c.qk_rope == 64 && c.v_head == 128, "released: dn dr dv");
    T_CHECK(c.n_experts == 896 && c.top_k == 16 && c.n_shared == 2, "released: Ne k Ns");
    T_CHECK(c.latent == 3584 && c.moe_inter == 3072 && c.dense_inter == 33792, "released: L I Id");
    T_CHECK(c.attn_res_block == 12 && c.first_dense == 1, "released: B first_dense");
    T_CHECK(c.situ_b1 == 4.0f && c.situ_b2 == 25.0f && c.routed_scale == 1.0f, "released: betas scale");
    T_CHECK(c.mla_out_gate == 1 && c.renorm == 1 && c.latent_norm == 1, "released: bools");
    T_CHECK(c.bos_id == 163584 && c.eos_id == 163586, "released: bos %d eos %d", c.bos_id, c.eos_id);
    T_CHECK(c.n_full_attn == 24, "released: %d MLA layers", c.n_full_attn);
    /* Zero-based MLA layers 3, 7, ..., 91 and 92 (spec §1.2, traps 1-2). */
    int ok = 1, nmla = 0;
    for (int i = 0; i < 93; i++) {
        int want = (i % 4 == 3) || i == 92;
        if (c.is_mla[i] != want) ok = 0;
        nmla += c.is_mla[i];
    }
    T_CHECK(ok && nmla == 24, "released: layer map (%d MLA)", nmla);
    T_CHECK(!c.is_mla[0] && ms_k3_cfg_is_dense(&c, 0) && !ms_k3_cfg_is_dense(&c, 1), "released: layer 0 KDA + dense");
    T_CHECK(ms_k3_cfg_is_boundary(&c, 84) && !ms_k3_cfg_is_boundary(&c, 85), "released: boundaries");
    ms_k3_cfg_free(&c);
}

static void test_checkpoint_configs(void)
{
    char flat_p[4096], nest_p[4096];
    const char *p = ms_t_shared("fixtures/kimi-k3/checkpoints/tiny-s1234/config.json");
    if (!p) return;
    snprintf(flat_p, sizeof flat_p, "%s", p);
    p = ms_t_shared("fixtures/kimi-k3/checkpoints/tiny-released-like/config.json");
    if (!p) return;
    snprintf(nest_p, sizeof nest_p, "%s", p);
    ms_k3_cfg a, b;
    int ra = ms_k3_cfg_load(flat_p, &a);
    T_CHECK(ra == 0, "tiny-s1234 config refused: %s", ms_err_msg());
    int rb = ms_k3_cfg_load(nest_p, &b);
    T_CHECK(rb == 0, "tiny-released-like config refused: %s", ms_err_msg());
    if (ra == 0 && rb == 0) {
        T_CHECK(a.nested == 0 && b.nested == 1, "shapes detected");
        /* Field by field. */
#define SAME(f) T_CHECK(a.f == b.f, "field " #f ": %g vs %g", (double)a.f, (double)b.f)
        SAME(hidden); SAME(n_layers); SAME(vocab); SAME(eps); SAME(kda_heads); SAME(kda_head_dim);
        SAME(conv_k); SAME(gate_lb); SAME(mla_heads); SAME(q_lora); SAME(kv_lora); SAME(qk_nope);
        SAME(qk_rope); SAME(v_head); SAME(mla_out_gate); SAME(n_experts); SAME(top_k); SAME(n_shared);
        SAME(latent); SAME(moe_inter); SAME(routed_scale); SAME(renorm); SAME(latent_norm);
        SAME(first_dense); SAME(dense_inter); SAME(attn_res_block); SAME(situ_b1); SAME(situ_b2);
        SAME(n_full_attn);
#undef SAME
        T_CHECK(memcmp(a.full_attn, b.full_attn, (size_t)a.n_full_attn * sizeof(int)) == 0, "full_attn lists");
        T_CHECK(memcmp(a.is_mla, b.is_mla, (size_t)a.n_layers) == 0, "is_mla");
        /* Values from spec §4.6 (MXFP4 tiny checkpoint: I = 64) and the files' own token ids. */
        T_CHECK(a.moe_inter == 64 && a.hidden == 128 && a.n_layers == 13 && a.kda_head_dim == 16, "tiny dims");
        T_CHECK(a.bos_id == -1 && b.bos_id == 252 && b.eos_id == 253, "token ids");
    }
    if (ra == 0) ms_k3_cfg_free(&a);
    if (rb == 0) ms_k3_cfg_free(&b);

    /* Fixture files with the flat config under "config" (spec §2.1). */
    const char *wrapped[] = {"fixtures/kimi-k3/ops/MANIFEST.json", "fixtures/kimi-k3/tiny-oracle/ref_k3.json"};
    for (int i = 0; i < 2; i++) {
        p = ms_t_shared(wrapped[i]);
        if (!p) continue;
        int rc = ms_k3_cfg_load(p, &a);
        T_CHECK(rc == 0, "%s refused: %s", wrapped[i], ms_err_msg());
        if (rc == 0) {
            check_flat_tiny(&a, wrapped[i]);
            ms_k3_cfg_free(&a);
        }
    }
}

static void test_bad_configs(void)
{
    static const struct {
        const char *file, *n1, *n2;
    } bad[] = {
        {"no_layermap.json", "missing", "full_attn_layers"},
        {"bad_layer_index.json", "full_attn_layers", "999"},
        {"bad_topk.json", "num_experts_per_token = 128", "num_experts = 8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "fixtures/kimi-k3/bad-configs/%s", bad[i].file);
        const char *p = ms_t_shared(rel);
        if (!p) continue;
        ms_k3_cfg c;
        int rc = ms_k3_cfg_load(p, &c);
        const char *m = ms_err_msg();
        T_CHECK(rc == -1, "%s accepted", bad[i].file);
        if (rc == 0) {
            ms_k3_cfg_free(&c);
            continue;
        }
        T_CHECK(ms_err_code() == MS_EXIT_MODEL, "%s: class %d", bad[i].file, ms_err_code());
        T_CHECK(has(m, bad[i].file), "%s: message lacks the file name: %s", bad[i].file, m);
        T_CHECK(has(m, bad[i].n1) && has(m, bad[i].n2), "%s: message lacks the reason: %s", bad[i].file, m);
        printf("refused as expected: %s\n", m);
    }
    ms_k3_cfg c;
    T_CHECK(ms_k3_cfg_load("/nonexistent/config.json", &c) == -1 && has(ms_err_msg(), "/nonexistent/config.json") &&
                ms_err_code() == MS_EXIT_IO,
            "missing file: %s", ms_err_msg());
}

int main(void)
{
    test_inline();
    test_released();
    test_checkpoint_configs();
    test_bad_configs();
    return ms_t_done();
}
