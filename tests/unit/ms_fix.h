/* ms_fix: loader and comparison helpers for the Kimi K3 op/layer JSON fixtures (spec §6.1-6.3). */
#ifndef MS_FIX_H
#define MS_FIX_H

#include <stdint.h>

#include "ms_k3_cfg.h"
#include "ms_kern.h"

#define MS_FIX_MAXDIM 8

/* One decoded fixture tensor {"shape": [...], "data": [...]}. Owned by its ms_fix. */
typedef struct {
    int ndim;
    int64_t shape[MS_FIX_MAXDIM];
    int64_t n;   /* product of shape */
    float *data; /* [n] row-major */
} ms_fix_tensor;

/* A loaded fixture file: the parsed JSON plus every tensor decoded so far. */
typedef struct ms_fix ms_fix;

/* Per-element pass rule |got - want| <= abs + rel * |want| (MANIFEST "tolerance"). */
typedef struct {
    double abs, rel;
} ms_fix_tol;

/* Running error statistics of one fixture (several compared outputs). */
typedef struct {
    double max_abs;     /* largest |got - want| */
    double worst_ratio; /* largest |got - want| / (abs + rel*|want|); <= 1 passes */
    int64_t n, n_bad;   /* elements compared, elements over tolerance */
} ms_fix_stat;

/* Load fixtures/kimi-k3/ops/<name>.json from the shared folder. Returns NULL after a visible
 * SKIP when the shared fixtures are absent, or NULL after a recorded FAIL when the file exists
 * but cannot be parsed. */
ms_fix *ms_fix_open(const char *name);
/* Load a fixture from an explicit path (NULL and a recorded FAIL when unreadable). */
ms_fix *ms_fix_load(const char *path, const char *name);
/* Free the JSON and every decoded tensor. Accepts NULL. */
void ms_fix_free(ms_fix *f);
const char *ms_fix_name(const ms_fix *f);

/* 1 if the key exists at the top level. */
int ms_fix_has(const ms_fix *f, const char *key);
/* Optional scalar: 1 and *out set if key is a number or a bool, else 0. */
int ms_fix_opt_num(const ms_fix *f, const char *key, double *out);
/* Required scalar: the value, or NAN after a recorded FAIL naming fixture and key. */
double ms_fix_num(const ms_fix *f, const char *key);
/* Optional scalar into an int / float field (unchanged when absent). Returns 1 if present. */
int ms_fix_override_int(const ms_fix *f, const char *key, int *field);
int ms_fix_override_float(const ms_fix *f, const char *key, float *field);

/* The tensor under key, decoded on first use (owned by f), or NULL if missing or malformed
 * (no failure recorded: use for optional tensors). */
const ms_fix_tensor *ms_fix_tensor_get(ms_fix *f, const char *key);
/* Required tensor with exactly n elements: its data, or (after a recorded FAIL naming the
 * fixture, key and shapes) a zero-filled buffer of n floats owned by f, so a caller can
 * carry on without crashing. */
const float *ms_fix_f32(ms_fix *f, const char *key, int64_t n);
/* Required 2-D tensor of shape [rows, cols] as an MS_WT_F32 view (data owned by f). On a
 * missing key or a wrong shape: a recorded FAIL and a view of zeros of that shape. */
ms_mat ms_fix_mat(ms_fix *f, const char *key, int64_t rows, int64_t cols);
/* A zero-filled scratch buffer of n floats owned by f. */
float *ms_fix_scratch(ms_fix *f, int64_t n);

/* Read fixtures/kimi-k3/ops/MANIFEST.json: the tiny config (via ms_k3_cfg_parse on its "config"
 * object) and the tolerance block. Returns 0; -1 after a SKIP (absent) or a FAIL (invalid).
 * On success the caller frees cfg with ms_k3_cfg_free. */
int ms_fix_manifest(ms_k3_cfg *cfg, ms_fix_tol *tol);

/* Compare got[n] against want[n] under tol: updates st (may be NULL), records one check (which
 * fails when n == 0: nothing compared is no match), and
 * prints one line "  <what>: n=.. max_abs=.. worst_ratio=.." (plus the first few failing
 * elements). Returns the number of elements over tolerance. */
int64_t ms_fix_cmp(ms_fix_stat *st, const char *what, const float *got, const float *want, int64_t n,
                   ms_fix_tol tol);
/* Print the per-fixture summary line "fixture <name>: max_abs=.. worst_ratio=.. (PASS|FAIL)". */
void ms_fix_report(const char *name, const ms_fix_stat *st);
/* Number of elements whose bit patterns differ (0 = bit-identical). */
int64_t ms_fix_bitdiff(const float *a, const float *b, int64_t n);
/* Largest |a - b| over n elements. */
double ms_fix_maxdiff(const float *a, const float *b, int64_t n);

#endif
