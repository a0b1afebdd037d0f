/* ms_xfmt: the expert format descriptor: what one routed expert is made of and how it computes. */
#ifndef MS_XFMT_H
#define MS_XFMT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "moestream.pb-c.h"

/* A routed expert is a few weight matrices, each stored as one or more byte parts, and an
 * activation that combines them. The descriptor travels in the pack manifest and in the
 * worker handshake, so a worker serving a pack needs no model config, and both sides can check
 * they agree (ms_xfmt_diff names the field that differs). Encodings and activations are rows of
 * the tables in ms_xfmt.c (and their compute in ms_expert.c); a family builds its descriptor
 * from its config with ms_xfmt_begin / ms_xfmt_add_mat (coordinator/<f>/experts/ms_<f>_experts.c). */

#define MS_XFMT_MAX_MATS 4
#define MS_XFMT_MAX_PARTS 12 /* at most three parts per matrix (values, scales, bias) */
#define MS_XFMT_MAX_PARAMS 4
#define MS_XFMT_NO_BIAS (-1) /* ms_xfmt_mat.bias_dtype of a matrix without a bias (ms_dtype 0 is F32) */

/* How one matrix is stored. MXFP4 ("mxfp4"): packed E2M1 U8 [rows, cols/2] + E8M0 scales U8
 * [rows, cols/32]; cols must be a multiple of 32. BF16 ("bf16"): BF16 [rows, cols]. FP8
 * ("fp8_e4m3_b128"): E4M3 codes F8_E4M3 [rows, cols] + F32 scales [ceil(rows/128),
 * ceil(cols/128)], one per 128 x 128 block, multiplied (ms_fp8.h); "fp8_e4m3_b128_bf16s": the same
 * with the scales stored BF16 (widened to float when the expert computes). INT4 ("int4_g32_bf16s":
 * compressed-tensors' pack-quantized, symmetric, group 32): I32 [rows, cols/8] of eight nibbles
 * each (the first in the lowest bits) + BF16 scales [rows, cols/32]; value (u - 8) * scale
 * (ms_int4.h); cols must be a multiple of 32. */
typedef enum { MS_XENC_MXFP4 = 1, MS_XENC_BF16 = 2, MS_XENC_FP8 = 3, MS_XENC_FP8_BF16S = 4, MS_XENC_INT4_G32 = 5 } ms_xenc;

/* The expert's function. SITU_GLU: out[L] = down · SiTU(gate · z, up · z) with the constants
 * beta and linear beta (params "b1", "b2"), no biases. SWIGLU_CLAMP: h = gate_up · z + b,
 * out[L] = down · (min(g, limit) sigmoid(alpha min(g, limit)) (clamp(u, ±limit) + 1)) + b over
 * the interleaved gate (even) and up (odd) rows of h (params "alpha", "limit"), with biases.
 * SWIGLU: out[L] = down · (silu(gate · z) up · z), silu(g) = g sigmoid(g), no constants, no
 * biases (DeepSeek-V3, Kimi K2, Qwen3-MoE). */
typedef enum { MS_XACT_SITU_GLU = 1, MS_XACT_SWIGLU_CLAMP = 2, MS_XACT_SWIGLU = 3 } ms_xact;

/* What a matrix is to the activation. Shapes: gate, up [I, L]; down [L, I]; gate_up [2I, L]
 * (gate and up rows interleaved: row 2i is gate row i, row 2i + 1 up row i). */
typedef enum { MS_XROLE_GATE = 0, MS_XROLE_UP, MS_XROLE_DOWN, MS_XROLE_GATE_UP, MS_XROLE_N } ms_xrole;

/* What a part holds: an encoding's values or scales, or the matrix's bias [rows]. */
typedef enum { MS_XPART_VALUES = 0, MS_XPART_SCALES, MS_XPART_BIAS } ms_xpart_kind;

typedef struct {
    char name[8];          /* the family's name for it ("w1") */
    int64_t rows, cols;
    ms_xenc enc;
    ms_xrole role;
    int bias_dtype;        /* MS_XFMT_NO_BIAS, or the ms_dtype of its bias part (F32, BF16) */
} ms_xfmt_mat;

typedef struct {
    char name[40];         /* "w1.weight_packed": the family's name (the tensor name suffix in a checkpoint) */
    int mat;               /* index into mat[] */
    ms_xpart_kind kind;
    int dtype;             /* ms_dtype (MS_DT_U8) */
    int64_t shape[2];
    uint64_t bytes;
} ms_xfmt_part;

typedef struct {
    char family[32];       /* "kimi-k3" */
    int latent, inter;     /* L: the width of an expert's input and output; I: its inner width */
    ms_xact act;
    int n_params;
    float param[MS_XFMT_MAX_PARAMS]; /* the activation's constants, in its table's order */
    int n_mats;
    ms_xfmt_mat mat[MS_XFMT_MAX_MATS];
    int n_parts;           /* an expert's bytes are its parts back to back, in this order */
    ms_xfmt_part part[MS_XFMT_MAX_PARTS];
} ms_xfmt;

/* Start a descriptor: family name, widths, activation and its constants (n_params of them, as
 * its table row says). Then add the matrices in storage order with ms_xfmt_add_mat, and check
 * the whole with ms_xfmt_check. */
void ms_xfmt_begin(ms_xfmt *f, const char *family, int latent, int inter, ms_xact act, const float *params,
                   int n_params);
/* Append a matrix of role `role` (its shape follows from the role and the widths) stored with
 * encoding enc, with a bias of bias_dtype (MS_XFMT_NO_BIAS: none); part_names[k] names its k-th part (the
 * encoding's parts, then the bias). */
void ms_xfmt_add_mat(ms_xfmt *f, const char *name, ms_xrole role, ms_xenc enc, int bias_dtype,
                     const char *const *part_names);
/* Can experts of widths L and I (every matrix's columns are one of them) be stored with
 * encoding enc? 0, or -1 with ms_err set (MS_EXIT_MODEL) naming both widths and the block size. */
int ms_xfmt_widths_ok(int latent, int inter, ms_xenc enc);
/* The shape a role has for widths L, I. */
void ms_xfmt_role_shape(ms_xrole role, int latent, int inter, int64_t *rows, int64_t *cols);
/* The activation's parameter count and the name of parameter i ("b1"). */
int ms_xfmt_act_n_params(ms_xact a);
const char *ms_xfmt_act_param(ms_xact a, int i);
/* The matrix of role r in f, or -1. */
int ms_xfmt_mat_of(const ms_xfmt *f, ms_xrole r);

/* Bytes of one expert (the sum of its parts). */
uint64_t ms_xfmt_expert_bytes(const ms_xfmt *f);
/* 0 if a and b are the same format; otherwise 1 with "FIELD: A vs B" in buf (the first field
 * that differs, e.g. "activation.b1: 4 vs 5" or "parts[3].shape: [48, 1] vs [48, 2]"). */
int ms_xfmt_diff(const ms_xfmt *a, const ms_xfmt *b, char *buf, size_t n);

/* JSON object {"family", "latent", "inter", "activation": {"name", PARAM: value...}, "matrices":
 * [{"name", "rows", "cols", "encoding", "role", "bias" (a dtype, only when present)}], "parts":
 * [{"name", "dtype", "shape", "bytes"}]}. Read back, a matrix without "role" takes the
 * activation's storage order (manifests written before roles were named).
 * New reference, owned by the caller. */
json_t *ms_xfmt_to_json(const ms_xfmt *f);
/* Strict reader of that object: every field present and typed, and the whole consistent
 * (ms_xfmt_check). Returns 0, or -1 with ms_err set (MS_EXIT_MODEL) as "where: field ...". */
int ms_xfmt_from_json(json_t *o, const char *where, ms_xfmt *f);

/* The wire form. ms_xfmt_to_proto fills *pb with pointers into *keep (which must outlive pb;
 * free with ms_xfmt_proto_free). */
typedef struct {
    Moestream__ExpertFormat fmt;
    Moestream__ExpertFormat__Activation act;
    Moestream__ExpertFormat__Matrix mats[MS_XFMT_MAX_MATS], *mat_ptr[MS_XFMT_MAX_MATS];
    Moestream__ExpertFormat__Part parts[MS_XFMT_MAX_PARTS], *part_ptr[MS_XFMT_MAX_PARTS];
    uint64_t shapes[MS_XFMT_MAX_PARTS][2];
    float params[MS_XFMT_MAX_PARAMS];
    char enc[MS_XFMT_MAX_MATS][24], role[MS_XFMT_MAX_MATS][16], bias[MS_XFMT_MAX_MATS][8];
    char dtype[MS_XFMT_MAX_PARTS][8], act_name[16];
} ms_xfmt_pb;
Moestream__ExpertFormat *ms_xfmt_to_proto(const ms_xfmt *f, ms_xfmt_pb *keep);
/* Strict reader; returns 0, or -1 with a reason in why. */
int ms_xfmt_from_proto(const Moestream__ExpertFormat *pb, ms_xfmt *f, char *why, size_t n);

/* Consistency: a plain family name (letters, digits, - _ .), known activation and encodings,
 * the activation's parameters, finite, every role it needs exactly once with the shape the role
 * has, biases only where it takes them, parts exactly those the encodings and biases make (in
 * that order, named, no name twice). 0, or -1 with a reason in why. */
int ms_xfmt_check(const ms_xfmt *f, char *why, size_t n);

const char *ms_xfmt_act_name(ms_xact a);
const char *ms_xfmt_enc_name(ms_xenc e);
const char *ms_xfmt_role_name(ms_xrole r);

#endif
