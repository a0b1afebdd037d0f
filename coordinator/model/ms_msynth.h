/* ms_msynth: what every family's synthetic checkpoint writer shares: tensors drawn deterministically from a seed, written as safetensors shards with an index. */
#ifndef MS_MSYNTH_H
#define MS_MSYNTH_H

#include <stdint.h>

#include "ms_st.h"

/* How a tensor's values are drawn (counter-based: any byte range of any tensor is reproducible). */
typedef enum {
    MS_SYN_UNIFORM, /* uniform in [-amp, amp] */
    MS_SYN_GAIN,    /* 1 + 0.1 uniform (norm gains) */
    MS_SYN_ALOG,    /* log(1 + 7.5 (u + 1)) for the first `valid` entries, 0 after */
    MS_SYN_PACKED,  /* random bytes (MXFP4 values) */
    MS_SYN_SCALE,   /* E8M0 scale bytes around amp (amp - 1 .. amp + 1) */
    MS_SYN_FP8,     /* E4M3 codes of either sign with exponent fields 1..8 (|v| in 2^-6 .. 3.75, no NaN) */
    MS_SYN_POSITIVE, /* amp (1 + 0.1 uniform) cut to BF16 precision (in either dtype): FP8 block scales */
    MS_SYN_EYE,     /* amp on a matrix's diagonal (row == column), 0 elsewhere; a vector all amp */
    MS_SYN_DIMS     /* a pair: amp, then `valid` (a matrix's shape, as compressed-tensors' weight_shape) */
} ms_syn_kind;

typedef struct {
    char name[256];
    ms_dtype dt;
    int ndim;
    int64_t shape[MS_ST_MAX_DIMS];
    ms_syn_kind k;
    float amp;
    int valid;     /* MS_SYN_ALOG: meaningful entries; MS_SYN_DIMS: the second value */
    int shard;     /* which shard file holds it */
    uint64_t seed;
} ms_syn_tensor;

/* The tensors of a checkpoint, in file order. Zero-initialise with the seed set; `shard` is the
 * shard the next added tensors go to. */
typedef struct {
    ms_syn_tensor *v;
    int n, cap;
    uint64_t seed;
    int shard;
} ms_syn_list;

/* Mix a seed (the list's seed is ms_syn_mix(user seed)). */
uint64_t ms_syn_mix(uint64_t x);
/* Append a tensor of ndim dims shape[] drawn as k with amp; returns it (valid until the next add). */
ms_syn_tensor *ms_syn_add(ms_syn_list *l, const char *name, ms_dtype dt, int ndim, const int64_t *shape, ms_syn_kind k,
                          float amp);
/* The uniform bound that gives values of std 1/sqrt(fan_in). */
float ms_syn_amp(int64_t fan_in);
/* The scale byte that makes E2M1 values (mean |v| about 2.6) have std about 1/sqrt(fan_in). */
float ms_syn_scale_byte(int64_t fan_in);

/* How shard files are named: one file "model.safetensors" when n_shards is 1; else
 * model-IIIII-of-TTTTT(T).safetensors with I from first_index (1 as K3, 0 as gpt-oss's release),
 * T = name_total (0: n_shards; -1: n_shards - 1, the zero-based release's) in tdigits digits. */
typedef struct {
    int n_shards;
    int first_index;
    int name_total;
    int tdigits;
    int sparse;       /* 1: headers only, every tensor a hole (zeros) */
} ms_syn_files;

/* Write the list's tensors into dir (which exists) as the shards say, with
 * model.safetensors.index.json when there are several; progress on stderr. Frees the list's
 * tensors. Returns 0, or -1 with ms_err set (MS_EXIT_IO) naming the file. */
int ms_syn_write(const char *dir, ms_syn_list *l, const ms_syn_files *f);

struct json_t;
/* Write config (taken: released whatever happens) as dir/config.json, indented, with its keys
 * sorted or in insertion order. 0, or -1 with ms_err set (MS_EXIT_IO) naming the file. */
int ms_syn_write_config(const char *dir, struct json_t *config, int sort_keys);

#endif
