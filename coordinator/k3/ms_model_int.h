/* ms_model_int: the model's private state, shared by ms_model.c (binding, forward) and
 * ms_mload.c (planning, pinning, streaming set-up). Not a public header. */
#ifndef MS_MODEL_INT_H
#define MS_MODEL_INT_H

#include "ms_arena.h"
#include "ms_io.h"
#include "ms_model.h"
#include "ms_plan.h"
#include "ms_wstream.h"
#include "ms_tpack.h"
#include "ms_xstore.h"

/* A trunk matrix with a file location: resident when pinned, else streamed. */
typedef struct {
    ms_mat *dst;        /* the view inside the model's layer structs */
    char *name;         /* tensor name, owned */
    int file;
    uint64_t off;       /* absolute offset of its bytes */
    uint64_t bytes;
    int layer;          /* -1: model level */
} ms_wref;

struct ms_model {
    ms_cfg cfg;
    ms_pool *pool;
    int own_pool;
    ms_st *st;                 /* when loaded from a directory */
    ms_tsrc src;
    ms_run_opts opts;
    int files;                 /* 1: tensors have file locations: plan, pin, stream */
    ms_io_files *iof;          /* the shards, opened for direct reads */
    ms_io *io;                 /* trunk reader pool (pinned loads, ring, embedding rows) */
    ms_wref *refs;             /* [n_refs] trunk matrices with file locations */
    int n_refs, cap_refs;
    int embed_ref;             /* index of the embedding in refs, or -1 */
    ms_wstream *ws;            /* streamer of the unpinned trunk, or NULL */
    ms_tpack *tpack;           /* the trunk pack in use, or NULL */
    char **io_paths;           /* [n_paths + 1] the shards and the pack, as opened in iof */
    ms_xstore *xs;             /* routed experts on disk, or NULL */
    ms_xloc *xlocs;            /* [N][Ne] expert locations while binding */
    ms_plan plan;
    int planned;
    ms_arena work;             /* the forward pass's scratch (ms_model_work_floats), one per model */
    uint64_t load_bytes;       /* trunk bytes read while opening (the pinned prefix) */
    ms_layer_w *layers;        /* [N] */
    ms_mat embed;              /* [V, E] */
    ms_mat lm_head;            /* [V, E] */
    const float *final_norm;   /* [E] */
    float *out_fold;           /* [E] output_attn_res norm * proj */
    const float *out_norm, *out_proj; /* [E] output_attn_res_norm / _proj as bound */
    ms_expert_table *table;
    ms_experts experts;
    ms_route_fn route_fn;
    void *route_ctx;
    void **owned;              /* widened vectors and converted matrices */
    size_t n_owned, cap_owned;
    int n_errors;              /* binding problems found so far */
    int bind_io;               /* 1 if one of them was a failed read (exit code MS_EXIT_IO) */
    char errors[1500];
};


/* ms_mload.c: plan the budget, read pinned matrices, start the streamer and expert store.
 * Returns 0 or -1 with ms_err set. */
int ms_mload_setup(ms_model *m);
/* Release what ms_mload_setup created. */
void ms_mload_teardown(ms_model *m);
/* Read row r of the embedding (a streamed table) into out[E] as floats. */
int ms_mload_embed_row(ms_model *m, int32_t id, float *out);
/* The trunk matrices in the order a forward pass uses them, found by running a pass of zero
 * rows under a matrix trace (so the schedule is the forward code itself, never a copy of it).
 * *out is malloc'ed (the caller frees); returns the count. */
int ms_model_schedule(ms_model *m, ms_mat ***out);
/* Scratch floats of one pass of R rows asking for out_rows logits rows: the model's buffers
 * and the widest layer's (ms_layer_work_floats). The one size the arena and the planner use. */
size_t ms_model_work_floats(const ms_cfg *c, int64_t R, int64_t out_rows);
/* Release everything the binder owns. */
void *ms_model_own(ms_model *m, void *p);

#endif
