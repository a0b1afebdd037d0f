/* ms_xfmt: the expert format descriptor: what one routed expert is made of and how it computes. */
#ifndef MS_XFMT_H
#define MS_XFMT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "moestream.pb-c.h"
#include "ms_cfg.h"

/* A routed expert is a few weight matrices, each stored as one or more byte parts, and an
 * activation that combines them. The descriptor travels in the pack manifest and in the
 * worker handshake, so a worker serving a pack needs no model config, and both sides can check
 * they agree (ms_xfmt_diff names the field that differs). A second model family adds a
 * constructor (like ms_xfmt_from_cfg) and, if new, an activation or encoding below. */

#define MS_XFMT_MAX_MATS 4
#define MS_XFMT_MAX_PARTS 8 /* at most two parts per matrix */

/* How one matrix is stored. MXFP4: packed E2M1 U8 [rows, cols/2] + E8M0 scales U8
 * [rows, cols/32]; cols must be a multiple of 32. */
typedef enum { MS_XENC_MXFP4 = 1 } ms_xenc;

/* The expert's function. SITU_GLU: out[L] = w2 · SiTU(w1 · z, w3 · z) with constants b1
 * (beta) and b2 (linear beta); matrices w1 (gate) [I, L], w2 (down) [L, I], w3 (up) [I, L]
 * in that order. */
typedef enum { MS_XACT_SITU_GLU = 1 } ms_xact;

typedef struct {
    char name[8];          /* "w1" */
    int64_t rows, cols;
    ms_xenc enc;
} ms_xfmt_mat;

typedef struct {
    char name[40];         /* "w1.weight_packed": the tensor name suffix in a checkpoint */
    int mat;               /* index into mat[] */
    int is_scale;          /* 0: packed values, 1: scales */
    int dtype;             /* ms_dtype (MS_DT_U8) */
    int64_t shape[2];
    uint64_t bytes;
} ms_xfmt_part;

typedef struct {
    char family[32];       /* "kimi-k3" */
    int latent, inter;     /* L: the width of an expert's input and output; I: its inner width */
    ms_xact act;
    float b1, b2;          /* the activation's constants */
    int n_mats;
    ms_xfmt_mat mat[MS_XFMT_MAX_MATS];
    int n_parts;           /* an expert's bytes are its parts back to back, in this order */
    ms_xfmt_part part[MS_XFMT_MAX_PARTS];
} ms_xfmt;

/* Kimi K3 routed experts (spec §3.8, §4.5): three MXFP4 matrices w1 [I, L], w2 [L, I],
 * w3 [I, L] (six U8 parts) and SiTU-GLU with b1, b2. Returns 0, or -1 with ms_err set
 * (MS_EXIT_MODEL) if L or I is not a positive multiple of 32. */
int ms_xfmt_k3(int latent, int inter, float b1, float b2, ms_xfmt *f);
/* The descriptor of a model's config (routed_expert_hidden_size, moe_intermediate_size,
 * SiTU constants); `what` names the config in messages. */
int ms_xfmt_from_cfg(const ms_cfg *c, const char *what, ms_xfmt *f);

/* Bytes of one expert (the sum of its parts). */
uint64_t ms_xfmt_expert_bytes(const ms_xfmt *f);
/* The checkpoint tensor that holds part `part` of expert (layer, expert) in format f's family
 * (K3: "language_model.model.layers.L.block_sparse_moe.experts.E.w1.weight_packed"): the one
 * spelling shard, the worker's --model mode and the checks use. Returns 0, or -1 (ms_err set,
 * MS_EXIT_MODEL) for a family this build does not know or a name longer than n. */
int ms_xfmt_tensor_name(const ms_xfmt *f, int layer, int expert, int part, char *buf, size_t n);

/* 0 if a and b are the same format; otherwise 1 with "FIELD: A vs B" in buf (the first field
 * that differs, e.g. "activation.b1: 4 vs 5" or "parts[3].shape: [48, 1] vs [48, 2]"). */
int ms_xfmt_diff(const ms_xfmt *a, const ms_xfmt *b, char *buf, size_t n);

/* JSON object {"family", "latent", "inter", "activation": {"name", "b1", "b2"}, "matrices":
 * [{"name", "rows", "cols", "encoding"}], "parts": [{"name", "dtype", "shape", "bytes"}]}.
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
    char enc[MS_XFMT_MAX_MATS][16], dtype[MS_XFMT_MAX_PARTS][8], act_name[16];
} ms_xfmt_pb;
Moestream__ExpertFormat *ms_xfmt_to_proto(const ms_xfmt *f, ms_xfmt_pb *keep);
/* Strict reader; returns 0, or -1 with a reason in why. */
int ms_xfmt_from_proto(const Moestream__ExpertFormat *pb, ms_xfmt *f, char *why, size_t n);

/* Consistency: a plain family name (letters, digits, - _ .), known activation and encodings,
 * the matrices the activation needs with the shapes it needs, parts exactly those the
 * encodings make. 0, or -1 with a reason in why. */
int ms_xfmt_check(const ms_xfmt *f, char *why, size_t n);

const char *ms_xfmt_act_name(ms_xact a);
const char *ms_xfmt_enc_name(ms_xenc e);

#endif
