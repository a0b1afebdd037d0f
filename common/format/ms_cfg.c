/* ms_cfg: strict config.json reader for Kimi K3 (nested release shape and flat fixture shape). */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_cfg.h"
#include "ms_err.h"
#include "ms_file.h"

typedef enum { F_INT, F_FLOAT, F_BOOL } ftype;

typedef struct {
    const char *name;  /* primary (release) spelling */
    const char *alias; /* flat fixture spelling, or NULL */
    ftype type;
    int kda;      /* lives in text_config.linear_attn_config in the nested shape */
    int optional; /* bools only: absent means true */
    size_t off;   /* field offset in ms_cfg */
    int max;      /* ints: largest accepted value (sane bounds, far above Kimi K3's) */
} field;

#define F(n, a, t, k, o, m, x) {n, a, t, k, o, offsetof(ms_cfg, m), x}
static const field fields[] = {
    F("hidden_size", NULL, F_INT, 0, 0, hidden, 1 << 16),
    F("num_hidden_layers", NULL, F_INT, 0, 0, n_layers, MS_CFG_MAX_LAYERS),
    F("vocab_size", NULL, F_INT, 0, 0, vocab, 1 << 22),
    F("rms_norm_eps", NULL, F_FLOAT, 0, 0, eps, 0),
    F("num_heads", "kda_num_heads", F_INT, 1, 0, kda_heads, 1024),
    F("head_dim", "kda_head_dim", F_INT, 1, 0, kda_head_dim, 4096),
    F("short_conv_kernel_size", NULL, F_INT, 1, 0, conv_k, 64),
    F("gate_lower_bound", NULL, F_FLOAT, 1, 0, gate_lb, 0),
    F("num_attention_heads", NULL, F_INT, 0, 0, mla_heads, 1024),
    F("q_lora_rank", NULL, F_INT, 0, 0, q_lora, 1 << 16),
    F("kv_lora_rank", NULL, F_INT, 0, 0, kv_lora, 1 << 16),
    F("qk_nope_head_dim", NULL, F_INT, 0, 0, qk_nope, 4096),
    F("qk_rope_head_dim", NULL, F_INT, 0, 0, qk_rope, 4096),
    F("v_head_dim", NULL, F_INT, 0, 0, v_head, 4096),
    F("mla_use_output_gate", NULL, F_BOOL, 0, 1, mla_out_gate, 0),
    F("num_experts", NULL, F_INT, 0, 0, n_experts, MS_CFG_MAX_EXPERTS),
    F("num_experts_per_token", NULL, F_INT, 0, 0, top_k, MS_CFG_MAX_TOPK),
    F("num_shared_experts", NULL, F_INT, 0, 0, n_shared, 64),
    F("routed_expert_hidden_size", NULL, F_INT, 0, 0, latent, 1 << 18),
    F("moe_intermediate_size", NULL, F_INT, 0, 0, moe_inter, 1 << 18),
    F("routed_scaling_factor", NULL, F_FLOAT, 0, 0, routed_scale, 0),
    F("moe_renormalize", NULL, F_BOOL, 0, 1, renorm, 0),
    F("latent_moe_use_norm", NULL, F_BOOL, 0, 1, latent_norm, 0),
    F("first_k_dense_replace", NULL, F_INT, 0, 0, first_dense, MS_CFG_MAX_LAYERS),
    F("intermediate_size", NULL, F_INT, 0, 0, dense_inter, 1 << 18),
    F("attn_res_block_size", NULL, F_INT, 0, 0, attn_res_block, MS_CFG_MAX_LAYERS),
    F("activation_situ_beta", "situ_beta", F_FLOAT, 0, 0, situ_b1, 0),
    F("activation_situ_linear_beta", "situ_linear_beta", F_FLOAT, 0, 0, situ_b2, 0),
};
#undef F
#define NFIELDS (sizeof fields / sizeof fields[0])

/* Where keys are looked up. */
typedef struct {
    json_t *root; /* the config object (after unwrapping a fixture's "config") */
    json_t *tc;   /* text_config (nested shape) or NULL */
    json_t *lac;  /* linear_attn_config or NULL */
    const char *lac_label;
} src;

/* A growing "; "-separated list of messages. */
typedef struct {
    char *s;
    size_t len, cap;
    int n;
} plist;

static void plist_add(plist *p, const char *sep, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void plist_add(plist *p, const char *sep, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    size_t need = p->len + strlen(sep) + strlen(tmp) + 1;
    if (need > p->cap) {
        p->cap = need * 2;
        p->s = ms_realloc(p->s, p->cap);
    }
    p->len += (size_t)sprintf(p->s + p->len, "%s%s", p->n ? sep : "", tmp);
    p->n++;
}

/* Short description of a JSON value for messages. */
static void describe(const json_t *v, char *buf, size_t cap)
{
    switch (json_typeof(v)) {
    case JSON_STRING: snprintf(buf, cap, "the string \"%.40s\"", json_string_value(v)); break;
    case JSON_INTEGER: snprintf(buf, cap, "%lld", (long long)json_integer_value(v)); break;
    case JSON_REAL: snprintf(buf, cap, "%.17g", json_real_value(v)); break;
    case JSON_TRUE: snprintf(buf, cap, "true"); break;
    case JSON_FALSE: snprintf(buf, cap, "false"); break;
    case JSON_NULL: snprintf(buf, cap, "null"); break;
    case JSON_ARRAY: snprintf(buf, cap, "an array"); break;
    default: snprintf(buf, cap, "an object"); break;
    }
}

/* JSON integer, or a real with an integral value, that fits an int. */
static int as_int(const json_t *v, int *out)
{
    double d;
    if (json_is_integer(v)) {
        json_int_t x = json_integer_value(v);
        if (x < INT_MIN || x > INT_MAX) return -1;
        *out = (int)x;
        return 0;
    }
    if (!json_is_real(v)) return -1;
    d = json_real_value(v);
    if (d != floor(d) || d < INT_MIN || d > INT_MAX) return -1;
    *out = (int)d;
    return 0;
}

static int as_float(const json_t *v, float *out)
{
    if (!json_is_number(v)) return -1;
    float f = (float)json_number_value(v);
    if (!isfinite(f)) return -1;
    *out = f;
    return 0;
}

/* JSON true/false or the numbers 0/1. */
static int as_bool(const json_t *v, int *out)
{
    if (json_is_boolean(v)) {
        *out = json_is_true(v);
        return 0;
    }
    if (json_is_integer(v) && (json_integer_value(v) == 0 || json_integer_value(v) == 1)) {
        *out = (int)json_integer_value(v);
        return 0;
    }
    return -1;
}

/* Find a key. KDA keys come from linear_attn_config alone in the nested shape (a
 * same-named text_config key such as head_dim must not shadow it, trap 5) or when a flat
 * config has that block; otherwise the KDA-specific spelling (kda_head_dim) is preferred. Other keys: text_config, then linear_attn_config,
 * then the root; in each, primary then alias; first hit wins. *label receives where it was. */
static json_t *lookup(const src *s, const char *name, const char *alias, int kda, char *label, size_t cap)
{
    json_t *tabs[3];
    const char *pre[3];
    int nt = 0;
    if (kda && (s->lac || s->tc)) {
        if (!s->lac) return NULL; /* nested shape: the KDA block is the only source */
        tabs[nt] = s->lac;
        pre[nt++] = s->lac_label;
    } else {
        if (s->tc) {
            tabs[nt] = s->tc;
            pre[nt++] = "text_config.";
        }
        if (s->lac) {
            tabs[nt] = s->lac;
            pre[nt++] = s->lac_label;
        }
        tabs[nt] = s->root;
        pre[nt++] = "";
    }
    const char *first = name, *second = alias;
    if (kda && !s->lac && !s->tc && alias) {
        first = alias;
        second = name;
    }
    for (int i = 0; i < nt; i++) {
        json_t *v = json_object_get(tabs[i], first);
        const char *k = first;
        if (!v && second) {
            v = json_object_get(tabs[i], second);
            k = second;
        }
        if (v) {
            snprintf(label, cap, "%s%s", pre[i], k);
            return v;
        }
    }
    return NULL;
}

/* Name of a missing key as the user should add it. */
static void missing_name(const src *s, const char *name, const char *alias, int kda, char *buf, size_t cap)
{
    if (s->tc) {
        if (kda)
            snprintf(buf, cap, "text_config.linear_attn_config.%s", name);
        else if (alias)
            snprintf(buf, cap, "text_config.%s (or %s)", name, alias);
        else
            snprintf(buf, cap, "text_config.%s", name);
    } else if (alias) {
        snprintf(buf, cap, "%s (or %s)", alias, name);
    } else {
        snprintf(buf, cap, "%s", name);
    }
}

/* Read a one-based layer list. Returns the count, or -1 after adding problems. */
static int read_layers(const json_t *v, const char *label, int n_layers, int **out, plist *probs)
{
    char d[64];
    if (!json_is_array(v)) {
        describe(v, d, sizeof d);
        plist_add(probs, "; ", "%s must be an array of one-based layer numbers, got %s", label, d);
        return -1;
    }
    size_t n = json_array_size(v);
    int *a = ms_malloc((n ? n : 1) * sizeof *a);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(v, i);
        if (as_int(e, &a[i]) != 0) {
            describe(e, d, sizeof d);
            plist_add(probs, "; ", "%s[%zu] must be an integer layer number, got %s", label, i, d);
            bad = 1;
            continue;
        }
        if (n_layers > 0 && (a[i] < 1 || a[i] > n_layers)) {
            plist_add(probs, "; ",
                      "%s[%zu] = %d is outside 1..%d (layer numbers are one-based, num_hidden_layers = %d)",
                      label, i, a[i], n_layers, n_layers);
            bad = 1;
            continue;
        }
        for (size_t j = 0; j < i; j++)
            if (a[j] == a[i]) {
                plist_add(probs, "; ", "%s lists layer %d twice", label, a[i]);
                bad = 1;
                break;
            }
    }
    if (bad) {
        free(a);
        return -1;
    }
    *out = a;
    return (int)n;
}

int ms_cfg_parse(const char *json_text, const char *what, ms_cfg *cfg)
{
    MS_ASSERT(json_text && cfg);
    if (!what) what = "config";
    memset(cfg, 0, sizeof *cfg);
    json_error_t je;
    json_t *doc = json_loadb(json_text, strlen(json_text), JSON_REJECT_DUPLICATES, &je);
    if (!doc) {
        ms_err_set("%s: invalid JSON (line %d, column %d): %s", what, je.line, je.column, je.text);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    if (!json_is_object(doc)) {
        json_decref(doc);
        ms_err_set("%s: config is not a JSON object", what);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    src s = {doc, NULL, NULL, "linear_attn_config."};
    json_t *wrap = json_object_get(doc, "config");
    if (json_is_object(wrap)) s.root = wrap; /* fixture files carry the flat config under "config" */

    plist missing = {0}, probs = {0};
    char label[256], d[64];
    json_t *tc = json_object_get(s.root, "text_config");
    if (tc && !json_is_object(tc)) {
        describe(tc, d, sizeof d);
        plist_add(&probs, "; ", "text_config must be an object, got %s", d);
    } else if (tc) {
        s.tc = tc;
        cfg->nested = 1;
        s.lac_label = "text_config.linear_attn_config.";
    }
    json_t *lac = json_object_get(s.tc ? s.tc : s.root, "linear_attn_config");
    if (lac && !json_is_object(lac)) {
        describe(lac, d, sizeof d);
        plist_add(&probs, "; ", "%slinear_attn_config must be an object, got %s", s.tc ? "text_config." : "", d);
    } else {
        s.lac = lac;
    }

    /* valid[offsetof(ms_cfg, f)] marks fields that were read successfully. */
    unsigned char valid[sizeof(ms_cfg)];
    memset(valid, 0, sizeof valid);
#define VALID(m) valid[offsetof(ms_cfg, m)]

    for (size_t i = 0; i < NFIELDS; i++) {
        const field *f = &fields[i];
        char *dst = (char *)cfg + f->off;
        json_t *v = lookup(&s, f->name, f->alias, f->kda, label, sizeof label);
        if (!v) {
            if (f->optional) {
                *(int *)dst = 1;
                valid[f->off] = 1;
                continue;
            }
            missing_name(&s, f->name, f->alias, f->kda, label, sizeof label);
            plist_add(&missing, ", ", "%s", label);
            continue;
        }
        int rc;
        const char *want;
        switch (f->type) {
        case F_INT:
            rc = as_int(v, (int *)dst);
            want = "an integer";
            break;
        case F_FLOAT:
            rc = as_float(v, (float *)dst);
            want = "a finite number";
            break;
        default:
            rc = as_bool(v, (int *)dst);
            want = "a boolean (true/false or 0/1)";
            break;
        }
        if (rc != 0) {
            if (json_is_null(v) && strcmp(f->name, "q_lora_rank") == 0) {
                plist_add(&probs, "; ",
                          "%s is null (a direct q_proj without a low-rank query is not supported; Kimi K3 uses "
                          "q_lora_rank = 1536)",
                          label);
                continue;
            }
            describe(v, d, sizeof d);
            plist_add(&probs, "; ", "%s must be %s, got %s", label, want, d);
            continue;
        }
        valid[f->off] = 1;
    }

    /* Sizes: every integer is a count or a width and must be positive, except
     * first_k_dense_replace (checked against N below). */
    for (size_t i = 0; i < NFIELDS; i++) {
        const field *f = &fields[i];
        if (f->type != F_INT || !valid[f->off] || f->off == offsetof(ms_cfg, first_dense)) continue;
        int v = *(int *)((char *)cfg + f->off);
        if (v <= 0) {
            plist_add(&probs, "; ", "%s must be > 0, got %d", f->alias && !s.tc ? f->alias : f->name, v);
            valid[f->off] = 0;
        }
    }
    /* Sane upper bounds, before anything is sized from them (a num_hidden_layers of 1e9 must
     * not allocate for half a minute before failing). */
    for (size_t i = 0; i < NFIELDS; i++) {
        const field *f = &fields[i];
        if (f->type != F_INT || !valid[f->off] || f->off == offsetof(ms_cfg, top_k)) continue; /* below */
        MS_ASSERT(f->max > 0);
        int v = *(int *)((char *)cfg + f->off);
        if (v > f->max) {
            plist_add(&probs, "; ", "%s = %d is beyond the supported maximum of %d", f->alias && !s.tc ? f->alias : f->name,
                      v, f->max);
            valid[f->off] = 0;
        }
    }
    if (VALID(n_layers) && VALID(n_experts) && (int64_t)cfg->n_layers * cfg->n_experts > MS_CFG_MAX_LAYER_EXPERTS)
        plist_add(&probs, "; ", "num_hidden_layers x num_experts = %d x %d is beyond the supported maximum of %d",
                  cfg->n_layers, cfg->n_experts, MS_CFG_MAX_LAYER_EXPERTS);
    if (VALID(eps) && !(cfg->eps > 0)) plist_add(&probs, "; ", "rms_norm_eps must be > 0, got %g", cfg->eps);
    if (VALID(routed_scale) && !(cfg->routed_scale > 0))
        plist_add(&probs, "; ", "routed_scaling_factor must be > 0, got %g", cfg->routed_scale);
    if (VALID(situ_b1) && !(cfg->situ_b1 > 0))
        plist_add(&probs, "; ", "%s must be > 0, got %g", s.tc ? "activation_situ_beta" : "situ_beta", cfg->situ_b1);
    if (VALID(situ_b2) && !(cfg->situ_b2 > 0))
        plist_add(&probs, "; ", "%s must be > 0, got %g", s.tc ? "activation_situ_linear_beta" : "situ_linear_beta",
                  cfg->situ_b2);
    if (VALID(top_k)) {
        if (VALID(n_experts) && cfg->top_k > cfg->n_experts)
            plist_add(&probs, "; ", "num_experts_per_token = %d exceeds num_experts = %d", cfg->top_k,
                      cfg->n_experts);
        if (cfg->top_k > MS_CFG_MAX_TOPK)
            plist_add(&probs, "; ", "num_experts_per_token = %d exceeds the supported maximum of %d", cfg->top_k,
                      MS_CFG_MAX_TOPK);
    }
    int N = VALID(n_layers) ? cfg->n_layers : 0;
    if (VALID(first_dense) && N > 0 && (cfg->first_dense < 0 || cfg->first_dense > N))
        plist_add(&probs, "; ", "first_k_dense_replace = %d is outside 0..%d", cfg->first_dense, N);
    else if (VALID(first_dense) && cfg->first_dense < 0)
        plist_add(&probs, "; ", "first_k_dense_replace = %d is negative", cfg->first_dense);
    /* AttnRes mixes one snapshot per block of layers (plus the running state): bounded, so that
     * a valid config never overruns the forward pass's source table mid-pass */
    if (VALID(attn_res_block) && cfg->attn_res_block > 0 && N > 0 &&
        (N - 1) / cfg->attn_res_block + 1 > MS_CFG_MAX_SNAPSHOTS)
        plist_add(&probs, "; ",
                  "attn_res_block_size = %d makes %d AttnRes snapshots over %d layers, more than the supported %d "
                  "(use blocks of at least %d layers)",
                  cfg->attn_res_block, (N - 1) / cfg->attn_res_block + 1, N, MS_CFG_MAX_SNAPSHOTS,
                  (N - 1) / MS_CFG_MAX_SNAPSHOTS + 1);

    /* The layer map. */
    int *fa = NULL, nfa = -1;
    json_t *v = lookup(&s, "full_attn_layers", NULL, 1, label, sizeof label);
    if (!v) {
        missing_name(&s, "full_attn_layers", NULL, 1, label, sizeof label);
        plist_add(&missing, ", ", "%s", label);
    } else {
        nfa = read_layers(v, label, N, &fa, &probs);
        if (nfa == 0)
            plist_add(&probs, "; ", "%s is empty (it must list the one-based MLA layers)", label);
        else if (nfa > 0 && N > 0 && nfa >= N)
            plist_add(&probs, "; ", "%s lists %d layers: every one of the %d layers would be MLA", label, nfa, N);
    }
    v = lookup(&s, "kda_layers", NULL, 1, label, sizeof label);
    if (v) {
        int *kl = NULL;
        int nk = read_layers(v, label, N, &kl, &probs);
        if (nk >= 0 && nfa > 0 && N > 0) {
            /* kda_layers must be exactly the complement of full_attn_layers. */
            unsigned char *mark = ms_calloc((size_t)N + 1, 1);
            for (int i = 0; i < nfa; i++) mark[fa[i]] = 1;
            for (int i = 0; i < nk; i++) {
                if (mark[kl[i]] == 1)
                    plist_add(&probs, "; ", "layer %d is in both full_attn_layers and %s", kl[i], label);
                mark[kl[i]] |= 2;
            }
            for (int l = 1; l <= N; l++)
                if (!mark[l]) plist_add(&probs, "; ", "layer %d is in neither full_attn_layers nor %s", l, label);
            free(mark);
        }
        free(kl);
    }

    if (missing.n || probs.n) {
        char *msg = NULL;
        size_t ml = 64 + strlen(what) + missing.len + probs.len;
        msg = ms_malloc(ml);
        snprintf(msg, ml, "%s: %s%s%s%s%s", what, missing.n ? "missing required key" : "",
                 missing.n > 1 ? "s: " : (missing.n ? ": " : ""), missing.n ? missing.s : "",
                 missing.n && probs.n ? "; " : "", probs.n ? probs.s : "");
        ms_err_set("%s", msg);
        free(msg);
        free(missing.s);
        free(probs.s);
        free(fa);
        json_decref(doc);
        memset(cfg, 0, sizeof *cfg);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
#undef VALID

    cfg->n_full_attn = nfa;
    cfg->full_attn = fa;
    cfg->is_mla = ms_calloc((size_t)N, 1);
    for (int i = 0; i < nfa; i++) cfg->is_mla[fa[i] - 1] = 1; /* one-based list, zero-based layers */

    /* Optional token ids: integers only, else -1. */
    cfg->bos_id = cfg->eos_id = -1;
    const char *ids[2] = {"bos_token_id", "eos_token_id"};
    int *dst[2] = {&cfg->bos_id, &cfg->eos_id};
    for (int k = 0; k < 2; k++) {
        json_t *t = s.tc ? json_object_get(s.tc, ids[k]) : NULL;
        if (!t) t = json_object_get(s.root, ids[k]);
        int x;
        if (t && json_is_integer(t) && as_int(t, &x) == 0 && x >= 0) *dst[k] = x;
    }
    json_decref(doc);
    return 0;
}

int ms_cfg_load(const char *path, ms_cfg *cfg)
{
    MS_ASSERT(path && cfg);
    memset(cfg, 0, sizeof *cfg);
    size_t len = 0;
    char *buf = ms_file_read_all(path, "config", 0, MS_CFG_MAX_BYTES, MS_EXIT_MODEL, &len);
    if (!buf) return -1;
    if (memchr(buf, 0, len)) {
        free(buf);
        ms_err_set("%s: config contains a NUL byte (not a JSON text)", path);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    int rc = ms_cfg_parse(buf, path, cfg);
    free(buf);
    return rc;
}

void ms_cfg_free(ms_cfg *cfg)
{
    if (!cfg) return;
    free(cfg->full_attn);
    free(cfg->is_mla);
    cfg->full_attn = NULL;
    cfg->is_mla = NULL;
    cfg->n_full_attn = 0;
}
