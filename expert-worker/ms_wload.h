/* ms_wload: what an expert worker serves: its experts (from a checkpoint or a pack), budget and store. */
#ifndef MS_WLOAD_H
#define MS_WLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "ms_io.h"
#include "ms_plan.h"
#include "ms_pool.h"
#include "ms_xstore.h"

typedef struct {
    const char *model_dir;     /* --model DIR (released layout), or NULL */
    const char *pack_dir;      /* --pack DIR, or NULL (exactly one of the two) */
    const char *experts;       /* --experts SPEC, NULL = every expert available */
    uint64_t ram_budget;       /* peak RSS of this process; 0 = ms_plan_default_budget(90) */
    int threads;               /* compute threads, 0 = one per CPU */
    int io_depth;              /* reads in flight, 0 = 8 */
    int buffered;              /* 1: no O_DIRECT */
    int no_mmap;               /* 1: experts always read into the cache; 0: where the cache would
                                  hold every expert served, used in place from the files' mappings
                                  (ms_xstore_opts.mapped) */
} ms_wload_opts;

/* The memory plan of a worker (bytes), made by ms_plan_make like the coordinator's: budget,
 * baseline (measured RSS before the store and the request buffers), the store's read buffers
 * (expert_fixed), work buffers (the store's gather buffers + request_work), the slack
 * (ms_plan_slack), then the expert cache in whole slots, at most the owned experts. */
typedef struct {
    ms_plan mem;               /* mem.fixed: every fixed cost; mem.cache, mem.cache_slots: the cache */
    uint64_t chunk_work;       /* the store's gather buffers (chunk_items rows in and out) */
    uint64_t request_limit;    /* largest request accepted: (rows + items) x latent floats */
    uint64_t request_work;     /* 2 x request_limit: the request and its reply live together */
} ms_wload_plan;

typedef struct {
    int n_layers, n_experts;   /* the model's layers and routed experts per layer */
    int first_moe;             /* layers below it are dense */
    int x_layers;              /* layers of the expert tables: n_layers, and a draft head's layer
                                  (DeepSeek-V3's MTP, layer n_layers) when the source has its experts */
    ms_xfmt fmt;               /* the experts' format: a pack's manifest, or --model's config read once */
    char fingerprint[17];
    char *source;              /* the directory, owned */
    int is_pack;
    uint8_t *owned;            /* [x_layers][n_experts] 1 if served here, owned */
    size_t n_owned;
    int chunk_items;           /* rows the store gathers per expert computation */
    ms_io_files *files;
    ms_pool *pool;
    ms_xstore *store;
    ms_wload_plan plan;
} ms_wload;

/* Open the source, resolve --experts, check every owned expert's tensors, plan the budget and
 * build the store. Returns 0, or -1 with ms_err set and its class: MS_EXIT_USAGE (bad SPEC,
 * naming the item), MS_EXIT_MODEL (config, a missing or mis-shaped tensor, a bad manifest),
 * MS_EXIT_IO, MS_EXIT_BUDGET (naming the minimum budget). */
int ms_wload_open(const ms_wload_opts *o, ms_wload *w);
void ms_wload_close(ms_wload *w); /* accepts a zeroed or closed ms_wload */

static inline int ms_wload_owns(const ms_wload *w, int layer, int expert)
{
    return w->owned[(size_t)layer * (size_t)w->n_experts + (size_t)expert];
}

/* The owned experts of one layer as text "0-3,7" into buf ("none" when empty). */
const char *ms_wload_layer_ranges(const ms_wload *w, int layer, char *buf, size_t n);
/* The whole set as text "layers 1-5: 0-7; layer 6: 0-3" into buf (cut with "..." if long). */
const char *ms_wload_describe(const ms_wload *w, char *buf, size_t n);

#endif
