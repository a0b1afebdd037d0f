/* ms_xfmt: the expert format descriptor: constructors, checks, comparison, JSON and protobuf forms. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ms_err.h"
#include "ms_jcfg.h"
#include "ms_st.h"
#include "ms_xfmt.h"

/* ---- tables ---- */

/* Encodings: the parts one matrix of [rows, cols] is stored as. */
static const struct {
    ms_xenc id;
    const char *name;
    int col_multiple;
    int n_parts;
    struct {
        ms_xpart_kind kind;
        int dtype;
        int row_div, col_div; /* part shape [ceil(rows / row_div), ceil(cols / col_div)] */
    } part[2];
} encs[] = {
    {MS_XENC_MXFP4, "mxfp4", 32, 2, {{MS_XPART_VALUES, MS_DT_U8, 1, 2}, {MS_XPART_SCALES, MS_DT_U8, 1, 32}}},
    {MS_XENC_BF16, "bf16", 1, 1, {{MS_XPART_VALUES, MS_DT_BF16, 1, 1}}},
    {MS_XENC_FP8, "fp8_e4m3_b128", 1, 2, {{MS_XPART_VALUES, MS_DT_F8_E4M3, 1, 1}, {MS_XPART_SCALES, MS_DT_F32, 128, 128}}},
    {MS_XENC_FP8_BF16S, "fp8_e4m3_b128_bf16s", 1, 2,
     {{MS_XPART_VALUES, MS_DT_F8_E4M3, 1, 1}, {MS_XPART_SCALES, MS_DT_BF16, 128, 128}}},
    {MS_XENC_INT4_G32, "int4_g32_bf16s", 32, 2, {{MS_XPART_VALUES, MS_DT_I32, 1, 8}, {MS_XPART_SCALES, MS_DT_BF16, 1, 32}}},
};
#define N_ENCS (sizeof encs / sizeof encs[0])

/* Activations: their constants, the roles they combine and whether they take biases. */
static const struct {
    ms_xact id;
    const char *name;
    int n_params;
    const char *param[MS_XFMT_MAX_PARAMS];
    int n_roles;
    ms_xrole role[3]; /* in the storage order of manifests written before roles were named */
    int biases;
} acts[] = {
    {MS_XACT_SITU_GLU, "situ_glu", 2, {"b1", "b2"}, 3, {MS_XROLE_GATE, MS_XROLE_DOWN, MS_XROLE_UP}, 0},
    {MS_XACT_SWIGLU_CLAMP, "swiglu_clamp", 2, {"alpha", "limit"}, 2, {MS_XROLE_GATE_UP, MS_XROLE_DOWN}, 1},
    {MS_XACT_SWIGLU, "swiglu", 0, {0}, 3, {MS_XROLE_GATE, MS_XROLE_UP, MS_XROLE_DOWN}, 0},
};
#define N_ACTS (sizeof acts / sizeof acts[0])

static const char *const role_names[MS_XROLE_N] = {"gate", "up", "down", "gate_up"};

static int enc_index(ms_xenc e)
{
    for (size_t i = 0; i < N_ENCS; i++)
        if (encs[i].id == e) return (int)i;
    return -1;
}

static int act_index(ms_xact a)
{
    for (size_t i = 0; i < N_ACTS; i++)
        if (acts[i].id == a) return (int)i;
    return -1;
}

const char *ms_xfmt_act_name(ms_xact a) { return act_index(a) >= 0 ? acts[act_index(a)].name : "?"; }
const char *ms_xfmt_enc_name(ms_xenc e) { return enc_index(e) >= 0 ? encs[enc_index(e)].name : "?"; }
const char *ms_xfmt_role_name(ms_xrole r) { return r >= 0 && r < MS_XROLE_N ? role_names[r] : "?"; }
int ms_xfmt_act_n_params(ms_xact a) { return act_index(a) >= 0 ? acts[act_index(a)].n_params : 0; }
const char *ms_xfmt_act_param(ms_xact a, int i)
{
    int k = act_index(a);
    return k >= 0 && i >= 0 && i < acts[k].n_params ? acts[k].param[i] : "?";
}

/* The known names, "a, b", for messages. */
static const char *known_acts(void) { return "situ_glu, swiglu_clamp, swiglu"; }
static const char *known_encs(void) { return "mxfp4, bf16, fp8_e4m3_b128, fp8_e4m3_b128_bf16s, int4_g32_bf16s"; }

static int act_parse(const char *s, ms_xact *a)
{
    for (size_t i = 0; s && i < N_ACTS; i++)
        if (!strcmp(s, acts[i].name)) return *a = acts[i].id, 0;
    return -1;
}

static int enc_parse(const char *s, ms_xenc *e)
{
    for (size_t i = 0; s && i < N_ENCS; i++)
        if (!strcmp(s, encs[i].name)) return *e = encs[i].id, 0;
    return -1;
}

static int role_parse(const char *s, ms_xrole *r)
{
    for (int i = 0; s && i < MS_XROLE_N; i++)
        if (!strcmp(s, role_names[i])) return *r = (ms_xrole)i, 0;
    return -1;
}

static int dtype_parse(const char *s, int *dt)
{
    static const ms_dtype all[6] = {MS_DT_F32, MS_DT_BF16, MS_DT_F16, MS_DT_U8, MS_DT_F8_E4M3, MS_DT_I32};
    for (int i = 0; i < 6; i++)
        if (s && !strcmp(s, ms_dtype_name(all[i]))) return *dt = (int)all[i], 0;
    return -1;
}

int ms_xfmt_widths_ok(int latent, int inter, ms_xenc enc)
{
    int k = enc_index(enc), b = k >= 0 ? encs[k].col_multiple : 1;
    if (k >= 0 && latent >= b && latent % b == 0 && inter >= b && inter % b == 0) return 0;
    ms_err_set("routed experts of widths %d and %d: both must be positive multiples of %d (%s blocks)", latent, inter, b,
               ms_xfmt_enc_name(enc));
    return ms_err_set_code(MS_EXIT_MODEL);
}

void ms_xfmt_role_shape(ms_xrole role, int latent, int inter, int64_t *rows, int64_t *cols)
{
    *rows = role == MS_XROLE_DOWN ? latent : role == MS_XROLE_GATE_UP ? 2 * (int64_t)inter : inter;
    *cols = role == MS_XROLE_DOWN ? inter : latent;
}

int ms_xfmt_mat_of(const ms_xfmt *f, ms_xrole r)
{
    for (int m = 0; m < f->n_mats; m++)
        if (f->mat[m].role == r) return m;
    return -1;
}

/* The parts matrix m makes (its encoding's, then its bias), appended to f->part with the names
 * given (NULL: empty names, filled by the caller). Returns 0, or -1 for an unknown encoding. */
static int add_parts(ms_xfmt *f, int m, const char *const *names)
{
    const ms_xfmt_mat *x = &f->mat[m];
    int k = enc_index(x->enc);
    if (k < 0) return -1;
    int n = encs[k].n_parts + (x->bias_dtype != MS_XFMT_NO_BIAS ? 1 : 0);
    if (f->n_parts + n > MS_XFMT_MAX_PARTS) return -1;
    for (int i = 0; i < n; i++) {
        ms_xfmt_part *p = &f->part[f->n_parts++];
        memset(p, 0, sizeof *p);
        if (names) snprintf(p->name, sizeof p->name, "%s", names[i]);
        p->mat = m;
        if (i < encs[k].n_parts) {
            p->kind = encs[k].part[i].kind;
            p->dtype = encs[k].part[i].dtype;
            int rd = encs[k].part[i].row_div, cd = encs[k].part[i].col_div;
            p->shape[0] = (x->rows + rd - 1) / rd;
            p->shape[1] = (x->cols + cd - 1) / cd;
        } else {
            p->kind = MS_XPART_BIAS;
            p->dtype = x->bias_dtype;
            p->shape[0] = 1;
            p->shape[1] = x->rows;
        }
        p->bytes = (uint64_t)p->shape[0] * (uint64_t)p->shape[1] * (uint64_t)ms_dtype_size((ms_dtype)p->dtype);
    }
    return 0;
}

void ms_xfmt_begin(ms_xfmt *f, const char *family, int latent, int inter, ms_xact act, const float *params,
                   int n_params)
{
    MS_ASSERT(n_params >= 0 && n_params <= MS_XFMT_MAX_PARAMS);
    memset(f, 0, sizeof *f);
    snprintf(f->family, sizeof f->family, "%s", family);
    f->latent = latent;
    f->inter = inter;
    f->act = act;
    f->n_params = n_params;
    for (int i = 0; i < n_params; i++) f->param[i] = params[i];
}

void ms_xfmt_add_mat(ms_xfmt *f, const char *name, ms_xrole role, ms_xenc enc, int bias_dtype,
                     const char *const *part_names)
{
    MS_ASSERT(f->n_mats < MS_XFMT_MAX_MATS && role >= 0 && role < MS_XROLE_N);
    ms_xfmt_mat *x = &f->mat[f->n_mats++];
    snprintf(x->name, sizeof x->name, "%s", name);
    ms_xfmt_role_shape(role, f->latent, f->inter, &x->rows, &x->cols);
    x->enc = enc;
    x->role = role;
    x->bias_dtype = bias_dtype;
    MS_ASSERT(add_parts(f, f->n_mats - 1, part_names) == 0); /* programmer error: a known encoding */
}

uint64_t ms_xfmt_expert_bytes(const ms_xfmt *f)
{
    uint64_t t = 0;
    for (int i = 0; i < f->n_parts; i++) t += f->part[i].bytes;
    return t;
}

/* The first byte of s that is not a letter, digit, '-', '_' or '.', or -1. Names come from
 * peers and go into messages, manifests (JSON: valid UTF-8) and tensor names. */
static int plain_name(const char *s)
{
    for (const char *c = s; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || strchr("-_.", *c)))
            return (int)(c - s);
    return -1;
}

int ms_xfmt_check(const ms_xfmt *f, char *why, size_t n)
{
    if (!f->family[0]) return snprintf(why, n, "family is empty"), -1;
    int bad = plain_name(f->family);
    if (bad >= 0)
        return snprintf(why, n, "family must be letters, digits, '-', '_' or '.' (byte 0x%02x at %d)",
                        (unsigned char)f->family[bad], bad),
               -1;
    for (int m = 0; m < f->n_mats; m++)
        if ((bad = plain_name(f->mat[m].name)) >= 0)
            return snprintf(why, n, "matrices[%d].name must be letters, digits, '-', '_' or '.' (byte 0x%02x at %d)", m,
                            (unsigned char)f->mat[m].name[bad], bad),
                   -1;
    for (int i = 0; i < f->n_parts; i++)
        if ((bad = plain_name(f->part[i].name)) >= 0)
            return snprintf(why, n, "parts[%d].name must be letters, digits, '-', '_' or '.' (byte 0x%02x at %d)", i,
                            (unsigned char)f->part[i].name[bad], bad),
                   -1;
    int a = act_index(f->act);
    if (a < 0) return snprintf(why, n, "activation is not one this build knows (%s)", known_acts()), -1;
    if (f->n_params != acts[a].n_params)
        return snprintf(why, n, "%s takes %d constants, not %d", acts[a].name, acts[a].n_params, f->n_params), -1;
    for (int i = 0; i < f->n_params; i++)
        if (!isfinite(f->param[i])) return snprintf(why, n, "activation constants must be finite"), -1;
    if (f->latent < 1 || f->inter < 1) return snprintf(why, n, "latent %d and inter %d must be positive", f->latent, f->inter), -1;
    if (f->n_mats != acts[a].n_roles)
        return snprintf(why, n, "%s takes %d matrices, not %d", acts[a].name, acts[a].n_roles, f->n_mats), -1;
    ms_xfmt want = *f;
    want.n_parts = 0;
    for (int m = 0; m < f->n_mats; m++) {
        const ms_xfmt_mat *x = &f->mat[m];
        int needed = 0;
        for (int r = 0; r < acts[a].n_roles; r++) needed |= acts[a].role[r] == x->role;
        if (!needed || ms_xfmt_mat_of(f, x->role) != m)
            return snprintf(why, n, "matrices[%d] (%s) has role %s, which %s %s", m, x->name, ms_xfmt_role_name(x->role),
                            acts[a].name, needed ? "takes once" : "does not take"),
                   -1;
        int64_t rows, cols;
        ms_xfmt_role_shape(x->role, f->latent, f->inter, &rows, &cols);
        if (!x->name[0] || x->rows != rows || x->cols != cols)
            return snprintf(why, n, "matrices[%d] is %s [%lld, %lld]; %s %s needs [%lld, %lld]", m, x->name,
                            (long long)x->rows, (long long)x->cols, acts[a].name, ms_xfmt_role_name(x->role),
                            (long long)rows, (long long)cols),
                   -1;
        int e = enc_index(x->enc);
        if (e < 0) return snprintf(why, n, "matrices[%d] has an unknown encoding", m), -1;
        if (x->cols % encs[e].col_multiple)
            return snprintf(why, n, "matrices[%d] (%s): %s needs cols a multiple of %d, not %lld", m, x->name,
                            encs[e].name, encs[e].col_multiple, (long long)x->cols),
                   -1;
        if (x->bias_dtype != MS_XFMT_NO_BIAS && !acts[a].biases)
            return snprintf(why, n, "matrices[%d] (%s) has a bias, which %s does not take", m, x->name, acts[a].name), -1;
        if (x->bias_dtype != MS_XFMT_NO_BIAS && x->bias_dtype != MS_DT_F32 && x->bias_dtype != MS_DT_BF16)
            return snprintf(why, n, "matrices[%d] (%s): a bias is F32 or BF16", m, x->name), -1;
        if (add_parts(&want, m, NULL) != 0) return snprintf(why, n, "more than %d parts", MS_XFMT_MAX_PARTS), -1;
    }
    if (f->n_parts != want.n_parts)
        return snprintf(why, n, "%d parts; the matrices' encodings make %d", f->n_parts, want.n_parts), -1;
    for (int i = 0; i < f->n_parts; i++) {
        const ms_xfmt_part *p = &f->part[i], *q = &want.part[i];
        if (!p->name[0]) return snprintf(why, n, "parts[%d] has no name", i), -1;
        for (int j = 0; j < i; j++)
            if (!strcmp(f->part[j].name, p->name)) return snprintf(why, n, "parts[%d] and [%d] are both %s", j, i, p->name), -1;
        if (p->mat != q->mat || p->kind != q->kind || p->dtype != q->dtype || p->shape[0] != q->shape[0] ||
            p->shape[1] != q->shape[1] || p->bytes != q->bytes)
            return snprintf(why, n, "parts[%d] is %s %s [%lld, %lld] (%llu bytes); the encodings make %s [%lld, %lld]",
                            i, p->name, ms_dtype_name((ms_dtype)p->dtype), (long long)p->shape[0],
                            (long long)p->shape[1], (unsigned long long)p->bytes,
                            ms_dtype_name((ms_dtype)q->dtype), (long long)q->shape[0], (long long)q->shape[1]),
                   -1;
    }
    return 0;
}

/* Part i's matrix and kind from the matrices' encodings and biases (they are positions, not
 * fields, in the JSON and wire forms). Returns 0, or -1 if there are not that many parts. */
static int derive_parts(ms_xfmt *f)
{
    ms_xfmt d = *f;
    d.n_parts = 0;
    for (int m = 0; m < f->n_mats; m++)
        if (add_parts(&d, m, NULL) != 0) return -1;
    for (int i = 0; i < f->n_parts && i < d.n_parts; i++) {
        f->part[i].mat = d.part[i].mat;
        f->part[i].kind = d.part[i].kind;
    }
    return d.n_parts == f->n_parts ? 0 : -1;
}

/* ---- comparison ---- */

static int differ(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int differ(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    return 1;
}

int ms_xfmt_diff(const ms_xfmt *a, const ms_xfmt *b, char *buf, size_t n)
{
    if (strcmp(a->family, b->family)) return differ(buf, n, "family: %s vs %s", a->family, b->family);
    if (a->latent != b->latent) return differ(buf, n, "latent: %d vs %d", a->latent, b->latent);
    if (a->inter != b->inter) return differ(buf, n, "inter: %d vs %d", a->inter, b->inter);
    if (a->act != b->act)
        return differ(buf, n, "activation.name: %s vs %s", ms_xfmt_act_name(a->act), ms_xfmt_act_name(b->act));
    if (a->n_params != b->n_params) return differ(buf, n, "activation.params: %d vs %d", a->n_params, b->n_params);
    /* Bits, not values: the constants must be the same floats for bit-identical outputs. */
    for (int i = 0; i < a->n_params; i++)
        if (memcmp(&a->param[i], &b->param[i], sizeof a->param[i]))
            return differ(buf, n, "activation.%s: %.9g vs %.9g", ms_xfmt_act_param(a->act, i), a->param[i], b->param[i]);
    if (a->n_mats != b->n_mats) return differ(buf, n, "matrices: %d vs %d", a->n_mats, b->n_mats);
    for (int m = 0; m < a->n_mats; m++) {
        const ms_xfmt_mat *x = &a->mat[m], *y = &b->mat[m];
        if (strcmp(x->name, y->name)) return differ(buf, n, "matrices[%d].name: %s vs %s", m, x->name, y->name);
        if (x->rows != y->rows || x->cols != y->cols)
            return differ(buf, n, "matrices[%d] (%s) shape: [%lld, %lld] vs [%lld, %lld]", m, x->name,
                          (long long)x->rows, (long long)x->cols, (long long)y->rows, (long long)y->cols);
        if (x->enc != y->enc)
            return differ(buf, n, "matrices[%d] (%s) encoding: %s vs %s", m, x->name, ms_xfmt_enc_name(x->enc),
                          ms_xfmt_enc_name(y->enc));
        if (x->role != y->role)
            return differ(buf, n, "matrices[%d] (%s) role: %s vs %s", m, x->name, ms_xfmt_role_name(x->role),
                          ms_xfmt_role_name(y->role));
        if (x->bias_dtype != y->bias_dtype)
            return differ(buf, n, "matrices[%d] (%s) bias: %s vs %s", m, x->name,
                          x->bias_dtype != MS_XFMT_NO_BIAS ? ms_dtype_name((ms_dtype)x->bias_dtype) : "none",
                          y->bias_dtype != MS_XFMT_NO_BIAS ? ms_dtype_name((ms_dtype)y->bias_dtype) : "none");
    }
    if (a->n_parts != b->n_parts) return differ(buf, n, "parts: %d vs %d", a->n_parts, b->n_parts);
    for (int i = 0; i < a->n_parts; i++) {
        const ms_xfmt_part *x = &a->part[i], *y = &b->part[i];
        if (strcmp(x->name, y->name)) return differ(buf, n, "parts[%d].name: %s vs %s", i, x->name, y->name);
        if (x->dtype != y->dtype)
            return differ(buf, n, "parts[%d] (%s) dtype: %s vs %s", i, x->name, ms_dtype_name((ms_dtype)x->dtype),
                          ms_dtype_name((ms_dtype)y->dtype));
        if (x->shape[0] != y->shape[0] || x->shape[1] != y->shape[1] || x->bytes != y->bytes)
            return differ(buf, n, "parts[%d] (%s) shape: [%lld, %lld] vs [%lld, %lld]", i, x->name,
                          (long long)x->shape[0], (long long)x->shape[1], (long long)y->shape[0],
                          (long long)y->shape[1]);
    }
    return 0;
}

/* ---- JSON ---- */

json_t *ms_xfmt_to_json(const ms_xfmt *f)
{
    json_t *mats = json_array(), *parts = json_array(), *act = json_object();
    for (int m = 0; m < f->n_mats; m++) {
        const ms_xfmt_mat *x = &f->mat[m];
        json_t *o = json_pack("{s:s,s:I,s:I,s:s,s:s}", "name", x->name, "rows", (json_int_t)x->rows, "cols",
                              (json_int_t)x->cols, "encoding", ms_xfmt_enc_name(x->enc), "role",
                              ms_xfmt_role_name(x->role));
        if (x->bias_dtype != MS_XFMT_NO_BIAS) json_object_set_new(o, "bias", json_string(ms_dtype_name((ms_dtype)x->bias_dtype)));
        json_array_append_new(mats, o);
    }
    for (int i = 0; i < f->n_parts; i++) {
        const ms_xfmt_part *p = &f->part[i];
        json_array_append_new(parts, json_pack("{s:s,s:s,s:[I,I],s:I}", "name", p->name, "dtype",
                                               ms_dtype_name((ms_dtype)p->dtype), "shape", (json_int_t)p->shape[0],
                                               (json_int_t)p->shape[1], "bytes", (json_int_t)p->bytes));
    }
    json_object_set_new(act, "name", json_string(ms_xfmt_act_name(f->act)));
    /* A float widened to double prints with enough digits (%.17g) to read back bit for bit. */
    for (int i = 0; i < f->n_params; i++)
        json_object_set_new(act, ms_xfmt_act_param(f->act, i), json_real((double)f->param[i]));
    return json_pack("{s:s,s:i,s:i,s:o,s:o,s:o}", "family", f->family, "latent", f->latent, "inter", f->inter,
                     "activation", act, "matrices", mats, "parts", parts);
}

/* Set "where: field "expert_format": message" with class MS_EXIT_MODEL; returns -1. */
#define jfail(where, ...) ms_err_fail_in(MS_EXIT_MODEL, where, "field \"expert_format\": " __VA_ARGS__)

static int jint(const char *where, json_t *o, const char *ctx, const char *key, long long lo, long long hi,
                long long *out)
{
    char at[512];
    snprintf(at, sizeof at, "%s: field \"expert_format\"", where);
    return ms_jcfg_int_field(at, o, ctx, key, lo, hi, out);
}

static const char *jstr(const char *where, json_t *o, const char *ctx, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (!v) return jfail(where, "%sfield \"%s\" is missing", ctx, key), NULL;
    if (!json_is_string(v)) return jfail(where, "%sfield \"%s\" must be a string", ctx, key), NULL;
    return json_string_value(v);
}

static int jfloat(const char *where, json_t *o, const char *ctx, const char *key, float *out)
{
    json_t *v = json_object_get(o, key);
    if (!v) return jfail(where, "%sfield \"%s\" is missing", ctx, key);
    if (!json_is_number(v)) return jfail(where, "%sfield \"%s\" must be a number", ctx, key);
    double d = json_number_value(v);
    float x = (float)d;
    if (!isfinite(x) || (double)x != d)
        return jfail(where, "%sfield \"%s\" is %.17g, not a finite single-precision number", ctx, key, d);
    *out = x;
    return 0;
}

int ms_xfmt_from_json(json_t *o, const char *where, ms_xfmt *f)
{
    memset(f, 0, sizeof *f);
    if (!json_is_object(o)) return jfail(where, "must be an object");
    const char *s = jstr(where, o, "", "family");
    if (!s) return -1;
    if (!*s || strlen(s) >= sizeof f->family) return jfail(where, "field \"family\" must be 1..31 characters");
    snprintf(f->family, sizeof f->family, "%s", s);
    long long v;
    if (jint(where, o, "", "latent", 1, 1 << 20, &v) != 0) return -1;
    f->latent = (int)v;
    if (jint(where, o, "", "inter", 1, 1 << 20, &v) != 0) return -1;
    f->inter = (int)v;
    json_t *a = json_object_get(o, "activation");
    if (!json_is_object(a)) return jfail(where, "field \"activation\" must be an object");
    if (!(s = jstr(where, a, "activation: ", "name"))) return -1;
    if (act_parse(s, &f->act) != 0)
        return jfail(where, "activation \"%s\" is not one this build knows (%s)", s, known_acts());
    f->n_params = ms_xfmt_act_n_params(f->act);
    for (int i = 0; i < f->n_params; i++)
        if (jfloat(where, a, "activation: ", ms_xfmt_act_param(f->act, i), &f->param[i]) != 0) return -1;
    json_t *mats = json_object_get(o, "matrices"), *parts = json_object_get(o, "parts");
    if (!json_is_array(mats) || json_array_size(mats) < 1 || json_array_size(mats) > MS_XFMT_MAX_MATS)
        return jfail(where, "field \"matrices\" must be an array of 1..%d objects", MS_XFMT_MAX_MATS);
    if (!json_is_array(parts) || json_array_size(parts) < 1 || json_array_size(parts) > MS_XFMT_MAX_PARTS)
        return jfail(where, "field \"parts\" must be an array of 1..%d objects", MS_XFMT_MAX_PARTS);
    char ctx[64];
    f->n_mats = (int)json_array_size(mats);
    for (int m = 0; m < f->n_mats; m++) {
        json_t *x = json_array_get(mats, (size_t)m);
        ms_xfmt_mat *y = &f->mat[m];
        snprintf(ctx, sizeof ctx, "matrices[%d]: ", m);
        if (!json_is_object(x)) return jfail(where, "%smust be an object", ctx);
        if (!(s = jstr(where, x, ctx, "name"))) return -1;
        if (!*s || strlen(s) >= sizeof y->name) return jfail(where, "%sfield \"name\" must be 1..7 characters", ctx);
        snprintf(y->name, sizeof y->name, "%s", s);
        if (jint(where, x, ctx, "rows", 1, 1 << 24, &v) != 0) return -1;
        y->rows = v;
        if (jint(where, x, ctx, "cols", 1, 1 << 24, &v) != 0) return -1;
        y->cols = v;
        if (!(s = jstr(where, x, ctx, "encoding"))) return -1;
        if (enc_parse(s, &y->enc) != 0)
            return jfail(where, "%sencoding \"%s\" is not one this build knows (%s)", ctx, s, known_encs());
        /* manifests written before roles were named: the activation's storage order */
        json_t *r = json_object_get(x, "role");
        int ai = act_index(f->act); /* known: parsed above */
        if (!r && ai >= 0 && m < acts[ai].n_roles)
            y->role = acts[ai].role[m];
        else if (!json_is_string(r) || role_parse(json_string_value(r), &y->role) != 0)
            return jfail(where, "%sfield \"role\" must be one of gate, up, down, gate_up", ctx);
        json_t *bias = json_object_get(x, "bias");
        y->bias_dtype = MS_XFMT_NO_BIAS;
        if (bias && (!json_is_string(bias) || dtype_parse(json_string_value(bias), &y->bias_dtype) != 0))
            return jfail(where, "%sfield \"bias\" must be a dtype (F32, BF16)", ctx);
    }
    f->n_parts = (int)json_array_size(parts);
    for (int i = 0; i < f->n_parts; i++) {
        json_t *x = json_array_get(parts, (size_t)i);
        ms_xfmt_part *p = &f->part[i];
        snprintf(ctx, sizeof ctx, "parts[%d]: ", i);
        if (!json_is_object(x)) return jfail(where, "%smust be an object", ctx);
        if (!(s = jstr(where, x, ctx, "name"))) return -1;
        if (!*s || strlen(s) >= sizeof p->name) return jfail(where, "%sfield \"name\" must be 1..39 characters", ctx);
        snprintf(p->name, sizeof p->name, "%s", s);
        if (!(s = jstr(where, x, ctx, "dtype"))) return -1;
        if (dtype_parse(s, &p->dtype) != 0) return jfail(where, "%sdtype \"%s\" is unknown", ctx, s);
        json_t *sh = json_object_get(x, "shape");
        if (!json_is_array(sh) || json_array_size(sh) != 2 || !json_is_integer(json_array_get(sh, 0)) ||
            !json_is_integer(json_array_get(sh, 1)) || json_integer_value(json_array_get(sh, 0)) < 1 ||
            json_integer_value(json_array_get(sh, 1)) < 1 || json_integer_value(json_array_get(sh, 0)) > (1 << 24) ||
            json_integer_value(json_array_get(sh, 1)) > (1 << 24))
            return jfail(where, "%sfield \"shape\" must be two integers in 1..%d", ctx, 1 << 24);
        p->shape[0] = json_integer_value(json_array_get(sh, 0));
        p->shape[1] = json_integer_value(json_array_get(sh, 1));
        if (jint(where, x, ctx, "bytes", 1, 1LL << 48, &v) != 0) return -1;
        p->bytes = (uint64_t)v;
    }
    derive_parts(f); /* a count that does not match is ms_xfmt_check's to name */
    char why[400];
    if (ms_xfmt_check(f, why, sizeof why) != 0) return jfail(where, "%s", why);
    return 0;
}

/* ---- protobuf ---- */

Moestream__ExpertFormat *ms_xfmt_to_proto(const ms_xfmt *f, ms_xfmt_pb *k)
{
    memset(k, 0, sizeof *k);
    moestream__expert_format__init(&k->fmt);
    moestream__expert_format__activation__init(&k->act);
    k->fmt.family = (char *)f->family;
    k->fmt.latent = (uint32_t)f->latent;
    k->fmt.inter = (uint32_t)f->inter;
    snprintf(k->act_name, sizeof k->act_name, "%s", ms_xfmt_act_name(f->act));
    k->act.name = k->act_name;
    for (int i = 0; i < f->n_params; i++) k->params[i] = f->param[i];
    k->act.n_params = (size_t)f->n_params;
    k->act.params = k->params;
    k->fmt.activation = &k->act;
    for (int m = 0; m < f->n_mats; m++) {
        Moestream__ExpertFormat__Matrix *x = &k->mats[m];
        moestream__expert_format__matrix__init(x);
        x->name = (char *)f->mat[m].name;
        x->rows = (uint64_t)f->mat[m].rows;
        x->cols = (uint64_t)f->mat[m].cols;
        snprintf(k->enc[m], sizeof k->enc[m], "%s", ms_xfmt_enc_name(f->mat[m].enc));
        x->encoding = k->enc[m];
        snprintf(k->role[m], sizeof k->role[m], "%s", ms_xfmt_role_name(f->mat[m].role));
        x->role = k->role[m];
        snprintf(k->bias[m], sizeof k->bias[m], "%s", f->mat[m].bias_dtype != MS_XFMT_NO_BIAS ? ms_dtype_name((ms_dtype)f->mat[m].bias_dtype) : "");
        x->bias = k->bias[m];
        k->mat_ptr[m] = x;
    }
    k->fmt.n_matrices = (size_t)f->n_mats;
    k->fmt.matrices = k->mat_ptr;
    for (int i = 0; i < f->n_parts; i++) {
        Moestream__ExpertFormat__Part *p = &k->parts[i];
        moestream__expert_format__part__init(p);
        p->name = (char *)f->part[i].name;
        snprintf(k->dtype[i], sizeof k->dtype[i], "%s", ms_dtype_name((ms_dtype)f->part[i].dtype));
        p->dtype = k->dtype[i];
        k->shapes[i][0] = (uint64_t)f->part[i].shape[0];
        k->shapes[i][1] = (uint64_t)f->part[i].shape[1];
        p->n_shape = 2;
        p->shape = k->shapes[i];
        p->bytes = f->part[i].bytes;
        k->part_ptr[i] = p;
    }
    k->fmt.n_parts = (size_t)f->n_parts;
    k->fmt.parts = k->part_ptr;
    return &k->fmt;
}

int ms_xfmt_from_proto(const Moestream__ExpertFormat *pb, ms_xfmt *f, char *why, size_t n)
{
    memset(f, 0, sizeof *f);
    if (!pb) return snprintf(why, n, "no expert_format"), -1;
    if (!pb->family || !*pb->family || strlen(pb->family) >= sizeof f->family)
        return snprintf(why, n, "expert_format: family must be 1..31 characters"), -1;
    snprintf(f->family, sizeof f->family, "%s", pb->family);
    if (pb->latent < 1 || pb->latent > (1u << 20) || pb->inter < 1 || pb->inter > (1u << 20))
        return snprintf(why, n, "expert_format: latent %u / inter %u out of range", pb->latent, pb->inter), -1;
    f->latent = (int)pb->latent;
    f->inter = (int)pb->inter;
    if (!pb->activation || act_parse(pb->activation->name, &f->act) != 0)
        return snprintf(why, n, "expert_format: activation %.40s is not one this build knows (%s)",
                        pb->activation && pb->activation->name ? pb->activation->name : "(none)", known_acts()),
               -1;
    if (pb->activation->n_params > MS_XFMT_MAX_PARAMS)
        return snprintf(why, n, "expert_format: %zu activation constants", pb->activation->n_params), -1;
    f->n_params = (int)pb->activation->n_params;
    for (int i = 0; i < f->n_params; i++) f->param[i] = pb->activation->params[i];
    if (pb->n_matrices < 1 || pb->n_matrices > MS_XFMT_MAX_MATS || pb->n_parts < 1 ||
        pb->n_parts > MS_XFMT_MAX_PARTS)
        return snprintf(why, n, "expert_format: %zu matrices and %zu parts (at most %d and %d)", pb->n_matrices,
                        pb->n_parts, MS_XFMT_MAX_MATS, MS_XFMT_MAX_PARTS),
               -1;
    f->n_mats = (int)pb->n_matrices;
    for (int m = 0; m < f->n_mats; m++) {
        const Moestream__ExpertFormat__Matrix *x = pb->matrices[m];
        f->mat[m].bias_dtype = MS_XFMT_NO_BIAS; /* an empty bias field: none */
        if (!x->name || !*x->name || strlen(x->name) >= sizeof f->mat[m].name || x->rows < 1 ||
            x->rows > (1u << 24) || x->cols < 1 || x->cols > (1u << 24) || enc_parse(x->encoding, &f->mat[m].enc) != 0 ||
            role_parse(x->role, &f->mat[m].role) != 0 ||
            (x->bias && *x->bias && dtype_parse(x->bias, &f->mat[m].bias_dtype) != 0))
            return snprintf(why, n, "expert_format: matrices[%d] is malformed or of an unknown encoding or role", m), -1;
        snprintf(f->mat[m].name, sizeof f->mat[m].name, "%s", x->name);
        f->mat[m].rows = (int64_t)x->rows;
        f->mat[m].cols = (int64_t)x->cols;
    }
    f->n_parts = (int)pb->n_parts;
    for (int i = 0; i < f->n_parts; i++) {
        const Moestream__ExpertFormat__Part *x = pb->parts[i];
        ms_xfmt_part *p = &f->part[i];
        if (!x->name || !*x->name || strlen(x->name) >= sizeof p->name || dtype_parse(x->dtype, &p->dtype) != 0 ||
            x->n_shape != 2 || x->shape[0] < 1 || x->shape[0] > (1u << 24) || x->shape[1] < 1 ||
            x->shape[1] > (1u << 24))
            return snprintf(why, n, "expert_format: parts[%d] is malformed", i), -1;
        snprintf(p->name, sizeof p->name, "%s", x->name);
        p->shape[0] = (int64_t)x->shape[0];
        p->shape[1] = (int64_t)x->shape[1];
        p->bytes = x->bytes;
    }
    derive_parts(f);
    char w2[400];
    if (ms_xfmt_check(f, w2, sizeof w2) != 0) return snprintf(why, n, "expert_format: %s", w2), -1;
    return 0;
}
