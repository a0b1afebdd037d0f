/* ms_xfmt: the expert format descriptor: constructors, checks, comparison, JSON and protobuf forms. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ms_err.h"
#include "ms_st.h"
#include "ms_xfmt.h"

const char *ms_xfmt_act_name(ms_xact a) { return a == MS_XACT_SITU_GLU ? "situ_glu" : "?"; }
const char *ms_xfmt_enc_name(ms_xenc e) { return e == MS_XENC_MXFP4 ? "mxfp4" : "?"; }

static int act_parse(const char *s, ms_xact *a)
{
    if (s && !strcmp(s, "situ_glu")) return *a = MS_XACT_SITU_GLU, 0;
    return -1;
}

static int enc_parse(const char *s, ms_xenc *e)
{
    if (s && !strcmp(s, "mxfp4")) return *e = MS_XENC_MXFP4, 0;
    return -1;
}

/* The parts an encoding makes of matrix m (appended to f->part). */
static void add_parts(ms_xfmt *f, int m)
{
    ms_xfmt_mat x = f->mat[m];
    MS_ASSERT(x.enc == MS_XENC_MXFP4 && f->n_parts + 2 <= MS_XFMT_MAX_PARTS);
    for (int s = 0; s < 2; s++) {
        ms_xfmt_part *p = &f->part[f->n_parts++];
        snprintf(p->name, sizeof p->name, "%s.%s", x.name, s ? "weight_scale" : "weight_packed");
        p->mat = m;
        p->is_scale = s;
        p->dtype = MS_DT_U8;
        p->shape[0] = x.rows;
        p->shape[1] = s ? x.cols / 32 : x.cols / 2;
        p->bytes = (uint64_t)p->shape[0] * (uint64_t)p->shape[1];
    }
}

int ms_xfmt_k3(int latent, int inter, float b1, float b2, ms_xfmt *f)
{
    memset(f, 0, sizeof *f);
    if (latent < 32 || latent % 32 || inter < 32 || inter % 32) {
        ms_err_set("routed experts of latent width %d and inner width %d: both must be positive multiples of 32 "
                   "(MXFP4 blocks)",
                   latent, inter);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    snprintf(f->family, sizeof f->family, "kimi-k3");
    f->latent = latent;
    f->inter = inter;
    f->act = MS_XACT_SITU_GLU;
    f->b1 = b1;
    f->b2 = b2;
    static const char *names[3] = {"w1", "w2", "w3"};
    for (int m = 0; m < 3; m++) {
        ms_xfmt_mat *x = &f->mat[f->n_mats++];
        snprintf(x->name, sizeof x->name, "%s", names[m]);
        x->rows = m == 1 ? latent : inter; /* w1, w3: [I, L]; w2: [L, I] */
        x->cols = m == 1 ? inter : latent;
        x->enc = MS_XENC_MXFP4;
        add_parts(f, m);
    }
    return 0;
}

/* Where each family's checkpoints keep an expert's part: the one spelling of the name. */
static const struct {
    const char *family, *pattern; /* printf: layer, expert, part name */
} tensor_names[] = {
    {"kimi-k3", "language_model.model.layers.%d.block_sparse_moe.experts.%d.%s"},
};

int ms_xfmt_tensor_name(const ms_xfmt *f, int layer, int expert, int part, char *buf, size_t n)
{
    MS_ASSERT(part >= 0 && part < f->n_parts);
    for (size_t i = 0; i < sizeof tensor_names / sizeof tensor_names[0]; i++)
        if (!strcmp(f->family, tensor_names[i].family)) {
            int w = snprintf(buf, n, tensor_names[i].pattern, layer, expert, f->part[part].name);
            return w >= 0 && (size_t)w < n ? 0 : -1;
        }
    ms_err_set("experts of family %s: this build does not know where its checkpoints keep them", f->family);
    return ms_err_set_code(MS_EXIT_MODEL);
}

int ms_xfmt_from_cfg(const ms_cfg *c, const char *what, ms_xfmt *f)
{
    if (ms_xfmt_k3(c->latent, c->moe_inter, c->situ_b1, c->situ_b2, f) != 0) {
        ms_err_wrap("%s", what);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    return 0;
}

uint64_t ms_xfmt_expert_bytes(const ms_xfmt *f)
{
    uint64_t t = 0;
    for (int i = 0; i < f->n_parts; i++) t += f->part[i].bytes;
    return t;
}

int ms_xfmt_check(const ms_xfmt *f, char *why, size_t n)
{
    if (!f->family[0]) return snprintf(why, n, "family is empty"), -1;
    /* A plain name: it comes from peers and goes into messages and manifests. */
    for (const char *c = f->family; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || strchr("-_.", *c)))
            return snprintf(why, n, "family must be letters, digits, '-', '_' or '.' (byte 0x%02x at %d)",
                            (unsigned char)*c, (int)(c - f->family)),
                   -1;
    if (f->act != MS_XACT_SITU_GLU) return snprintf(why, n, "activation is not one this build knows (situ_glu)"), -1;
    if (!isfinite(f->b1) || !isfinite(f->b2)) return snprintf(why, n, "activation constants must be finite"), -1;
    if (f->latent < 1 || f->inter < 1) return snprintf(why, n, "latent %d and inter %d must be positive", f->latent, f->inter), -1;
    /* SiTU-GLU: gate w1 [I, L], down w2 [L, I], up w3 [I, L]. */
    static const char *names[3] = {"w1", "w2", "w3"};
    if (f->n_mats != 3) return snprintf(why, n, "situ_glu takes 3 matrices (w1, w2, w3), not %d", f->n_mats), -1;
    ms_xfmt want = *f;
    want.n_parts = 0;
    for (int m = 0; m < 3; m++) {
        const ms_xfmt_mat *x = &f->mat[m];
        int64_t rows = m == 1 ? f->latent : f->inter, cols = m == 1 ? f->inter : f->latent;
        if (strcmp(x->name, names[m]) || x->rows != rows || x->cols != cols)
            return snprintf(why, n, "matrices[%d] is %s [%lld, %lld]; situ_glu needs %s [%lld, %lld]", m, x->name,
                            (long long)x->rows, (long long)x->cols, names[m], (long long)rows, (long long)cols),
                   -1;
        if (x->enc != MS_XENC_MXFP4) return snprintf(why, n, "matrices[%d] has an unknown encoding", m), -1;
        if (x->cols % 32) return snprintf(why, n, "matrices[%d] (%s): mxfp4 needs cols a multiple of 32, not %lld", m, x->name, (long long)x->cols), -1;
        add_parts(&want, m);
    }
    if (f->n_parts != want.n_parts)
        return snprintf(why, n, "%d parts; the matrices' encodings make %d", f->n_parts, want.n_parts), -1;
    for (int i = 0; i < f->n_parts; i++) {
        const ms_xfmt_part *p = &f->part[i], *q = &want.part[i];
        if (strcmp(p->name, q->name) || p->dtype != q->dtype || p->shape[0] != q->shape[0] ||
            p->shape[1] != q->shape[1] || p->bytes != q->bytes)
            return snprintf(why, n, "parts[%d] is %s %s [%lld, %lld] (%llu bytes); the encodings make %s %s [%lld, %lld]",
                            i, p->name, ms_dtype_name((ms_dtype)p->dtype), (long long)p->shape[0],
                            (long long)p->shape[1], (unsigned long long)p->bytes, q->name,
                            ms_dtype_name((ms_dtype)q->dtype), (long long)q->shape[0], (long long)q->shape[1]),
                   -1;
    }
    return 0;
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
    /* Bits, not values: the constants must be the same floats for bit-identical outputs. */
    if (memcmp(&a->b1, &b->b1, sizeof a->b1)) return differ(buf, n, "activation.b1: %.9g vs %.9g", a->b1, b->b1);
    if (memcmp(&a->b2, &b->b2, sizeof a->b2)) return differ(buf, n, "activation.b2: %.9g vs %.9g", a->b2, b->b2);
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
    json_t *mats = json_array(), *parts = json_array();
    for (int m = 0; m < f->n_mats; m++)
        json_array_append_new(mats, json_pack("{s:s,s:I,s:I,s:s}", "name", f->mat[m].name, "rows",
                                              (json_int_t)f->mat[m].rows, "cols", (json_int_t)f->mat[m].cols,
                                              "encoding", ms_xfmt_enc_name(f->mat[m].enc)));
    for (int i = 0; i < f->n_parts; i++) {
        const ms_xfmt_part *p = &f->part[i];
        json_array_append_new(parts, json_pack("{s:s,s:s,s:[I,I],s:I}", "name", p->name, "dtype",
                                               ms_dtype_name((ms_dtype)p->dtype), "shape", (json_int_t)p->shape[0],
                                               (json_int_t)p->shape[1], "bytes", (json_int_t)p->bytes));
    }
    /* A float widened to double prints with enough digits (%.17g) to read back bit for bit. */
    return json_pack("{s:s,s:i,s:i,s:{s:s,s:f,s:f},s:o,s:o}", "family", f->family, "latent", f->latent, "inter",
                     f->inter, "activation", "name", ms_xfmt_act_name(f->act), "b1", (double)f->b1, "b2",
                     (double)f->b2, "matrices", mats, "parts", parts);
}

static int jfail(const char *where, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int jfail(const char *where, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ms_err_set("%s: field \"expert_format\": %s", where, msg);
    return ms_err_set_code(MS_EXIT_MODEL);
}

static int jint(const char *where, json_t *o, const char *ctx, const char *key, long long lo, long long hi,
                long long *out)
{
    json_t *v = json_object_get(o, key);
    if (!v) return jfail(where, "%sfield \"%s\" is missing", ctx, key);
    if (!json_is_integer(v)) return jfail(where, "%sfield \"%s\" must be an integer", ctx, key);
    long long x = (long long)json_integer_value(v);
    if (x < lo || x > hi) return jfail(where, "%sfield \"%s\" is %lld, must be in %lld..%lld", ctx, key, x, lo, hi);
    *out = x;
    return 0;
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

static int dtype_parse(const char *s, int *dt)
{
    static const ms_dtype all[4] = {MS_DT_F32, MS_DT_BF16, MS_DT_F16, MS_DT_U8};
    for (int i = 0; i < 4; i++)
        if (s && !strcmp(s, ms_dtype_name(all[i]))) return *dt = (int)all[i], 0;
    return -1;
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
    if (act_parse(s, &f->act) != 0) return jfail(where, "activation \"%s\" is not one this build knows (situ_glu)", s);
    if (jfloat(where, a, "activation: ", "b1", &f->b1) != 0 || jfloat(where, a, "activation: ", "b2", &f->b2) != 0)
        return -1;
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
        if (enc_parse(s, &y->enc) != 0) return jfail(where, "%sencoding \"%s\" is not one this build knows (mxfp4)", ctx, s);
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
    /* mat / is_scale are positions, not fields: set them from the order the encodings make. */
    for (int i = 0; i < f->n_parts; i++) {
        f->part[i].mat = i / 2;
        f->part[i].is_scale = i % 2;
    }
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
    k->act.b1 = f->b1;
    k->act.b2 = f->b2;
    k->fmt.activation = &k->act;
    for (int m = 0; m < f->n_mats; m++) {
        Moestream__ExpertFormat__Matrix *x = &k->mats[m];
        moestream__expert_format__matrix__init(x);
        x->name = (char *)f->mat[m].name;
        x->rows = (uint64_t)f->mat[m].rows;
        x->cols = (uint64_t)f->mat[m].cols;
        snprintf(k->enc[m], sizeof k->enc[m], "%s", ms_xfmt_enc_name(f->mat[m].enc));
        x->encoding = k->enc[m];
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
        return snprintf(why, n, "expert_format: activation %.40s is not one this build knows (situ_glu)",
                        pb->activation && pb->activation->name ? pb->activation->name : "(none)"),
               -1;
    f->b1 = pb->activation->b1;
    f->b2 = pb->activation->b2;
    if (pb->n_matrices < 1 || pb->n_matrices > MS_XFMT_MAX_MATS || pb->n_parts < 1 ||
        pb->n_parts > MS_XFMT_MAX_PARTS)
        return snprintf(why, n, "expert_format: %zu matrices and %zu parts (at most %d and %d)", pb->n_matrices,
                        pb->n_parts, MS_XFMT_MAX_MATS, MS_XFMT_MAX_PARTS),
               -1;
    f->n_mats = (int)pb->n_matrices;
    for (int m = 0; m < f->n_mats; m++) {
        const Moestream__ExpertFormat__Matrix *x = pb->matrices[m];
        if (!x->name || !*x->name || strlen(x->name) >= sizeof f->mat[m].name || x->rows < 1 ||
            x->rows > (1u << 24) || x->cols < 1 || x->cols > (1u << 24) || enc_parse(x->encoding, &f->mat[m].enc) != 0)
            return snprintf(why, n, "expert_format: matrices[%d] is malformed or of an unknown encoding", m), -1;
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
        p->mat = i / 2;
        p->is_scale = i % 2;
    }
    char w2[400];
    if (ms_xfmt_check(f, w2, sizeof w2) != 0) return snprintf(why, n, "expert_format: %s", w2), -1;
    return 0;
}
