/* ms_wload: opens a worker's experts (checkpoint or pack), resolves --experts, plans its budget. */
#include <ctype.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_ident.h"
#include "ms_pack.h"
#include "ms_proc.h"
#include "ms_st.h"
#include "ms_wire.h"
#include "ms_wload.h"
#include "ms_xfams.h"

#define MIB (1ull << 20)
#define CHUNK_BYTES (4 * MIB)      /* activations of one store call (worker side) */
#define REQ_MIN (16 * MIB)         /* the request limit never goes below this: a 64-token K3 prefill chunk */
#define REQ_MAX ((uint64_t)MS_WIRE_MAX_REQUEST) /* the protocol's largest request (ms_wire.h) */

/* ---- --experts SPEC ---- */

/* A decimal number of at most 9 digits spanning exactly [s, e). */
static int parse_num(const char *s, const char *e, int *out)
{
    if (e <= s || e - s > 9) return -1;
    int v = 0;
    for (const char *p = s; p < e; p++) {
        if (!isdigit((unsigned char)*p)) return -1;
        v = v * 10 + (*p - '0');
    }
    *out = v;
    return 0;
}

/* "*" (lo = 0, hi = max - 1, star = 1), "N" or "A-B" within [s, e). */
static int parse_range(const char *s, const char *e, int max, int *lo, int *hi, int *star)
{
    *star = 0;
    if (e - s == 1 && *s == '*') {
        *star = 1;
        *lo = 0;
        *hi = max - 1;
        return 0;
    }
    const char *dash = memchr(s, '-', (size_t)(e - s));
    if (!dash) {
        if (parse_num(s, e, lo) != 0) return -1;
        *hi = *lo;
        return 0;
    }
    if (parse_num(s, dash, lo) != 0 || parse_num(dash + 1, e, hi) != 0 || *lo > *hi) return -1;
    return 0;
}

static int spec_error(const char *item, int len, const char *why)
{
    ms_err_set("--experts: item '%.*s': %s (items are LAYER:FIRST-LAST, either side may be '*' or a single "
               "number, e.g. '*:0-447' or '1:0-895,2:*')",
               len, item, why);
    return ms_err_set_code(MS_EXIT_USAGE);
}

/* Resolve spec against avail ([x_layers][n_experts], the experts the source has) into owned. */
static int parse_spec(const char *spec, const ms_wload *w, const uint8_t *avail, uint8_t *owned)
{
    int NL = w->x_layers, NE = w->n_experts, is_pack = w->is_pack;
    size_t nk = (size_t)NL * (size_t)NE;
    if (!spec || !strcmp(spec, "all") || !strcmp(spec, "*")) {
        memcpy(owned, avail, nk);
        return 0;
    }
    if (!*spec) return spec_error(spec, 0, "empty");
    const char *p = spec;
    char why[256];
    for (;;) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        int len = (int)(end - p);
        if (!len) return spec_error(p, len, "an empty item (a stray comma?)");
        const char *colon = memchr(p, ':', (size_t)len);
        if (!colon) return spec_error(p, len, "no ':' between the layer and the experts");
        int l0, l1, e0, e1, lstar, estar;
        if (parse_range(p, colon, NL, &l0, &l1, &lstar) != 0)
            return spec_error(p, len, "the layer part is not '*', N or A-B with A <= B");
        if (parse_range(colon + 1, end, NE, &e0, &e1, &estar) != 0)
            return spec_error(p, len, "the expert part is not '*', N or A-B with A <= B");
        if (l1 >= NL) {
            snprintf(why, sizeof why, "layer %d does not exist (the model has layers 0..%d)", l1, NL - 1);
            return spec_error(p, len, why);
        }
        if (e1 >= NE) {
            snprintf(why, sizeof why, "expert %d does not exist (layers have experts 0..%d)", e1, NE - 1);
            return spec_error(p, len, why);
        }
        int any_layer = 0;
        for (int l = l0; l <= l1; l++) {
            const uint8_t *al = avail + (size_t)l * (size_t)NE;
            int has = 0;
            for (int e = 0; e < NE; e++) has |= al[e];
            if (!has) {
                if (lstar) continue; /* '*' means the layers that have experts */
                if (l < w->first_moe)
                    snprintf(why, sizeof why, "layer %d is dense: it has no routed experts (MoE layers are %d..%d)",
                             l, w->first_moe, NL - 1);
                else
                    snprintf(why, sizeof why, "the %s has no expert of layer %d", is_pack ? "pack" : "checkpoint", l);
                return spec_error(p, len, why);
            }
            any_layer = 1;
            for (int e = e0; e <= e1; e++) {
                if (al[e]) {
                    owned[(size_t)l * (size_t)NE + (size_t)e] = 1;
                } else if (!estar) {
                    snprintf(why, sizeof why, "%s layer %d expert %d", is_pack ? "the pack has no" : "no such expert:",
                             l, e);
                    return spec_error(p, len, why);
                }
            }
        }
        if (!any_layer) return spec_error(p, len, "names no layer with routed experts");
        if (!*end) break;
        p = end + 1;
    }
    return 0;
}

/* Append to buf[n] (holding *at bytes) SEP (none first), then NAME b TAIL, or NAMES b-last TAIL.
 * 0; -1 when it no longer fits, buf then ending in "..." (n > 4). */
static int put_range(char *buf, size_t n, size_t *at, const char *sep, const char *name, const char *names, int b,
                     int last, const char *tail)
{
    const char *s = *at ? sep : "";
    int k = b == last ? snprintf(buf + *at, n - *at, "%s%s%d%s", s, name, b, tail)
                      : snprintf(buf + *at, n - *at, "%s%s%d-%d%s", s, names, b, last, tail);
    if (k < 0 || (size_t)k >= n - *at) {
        if (n > 4) strcpy(buf + n - 4, "...");
        return -1;
    }
    *at += (size_t)k;
    return 0;
}

const char *ms_wload_layer_ranges(const ms_wload *w, int layer, char *buf, size_t n)
{
    int NE = w->n_experts;
    size_t at = 0;
    buf[0] = 0;
    for (int e = 0; e < NE;) {
        if (!ms_wload_owns(w, layer, e)) {
            e++;
            continue;
        }
        int b = e;
        while (e < NE && ms_wload_owns(w, layer, e)) e++;
        if (put_range(buf, n, &at, ",", "", "", b, e - 1, "") != 0) return buf;
    }
    if (!at) snprintf(buf, n, "none");
    return buf;
}

const char *ms_wload_describe(const ms_wload *w, char *buf, size_t n)
{
    int NL = w->x_layers;
    size_t at = 0;
    buf[0] = 0;
    char cur[512], nxt[512];
    for (int l = 0; l < NL;) {
        ms_wload_layer_ranges(w, l, cur, sizeof cur);
        int b = l;
        for (l++; l < NL; l++)
            if (strcmp(ms_wload_layer_ranges(w, l, nxt, sizeof nxt), cur)) break;
        if (!strcmp(cur, "none")) continue;
        char tail[sizeof cur + 2];
        snprintf(tail, sizeof tail, ": %s", cur);
        if (put_range(buf, n, &at, "; ", "layer ", "layers ", b, l - 1, tail) != 0) return buf;
    }
    if (!at) snprintf(buf, n, "none");
    return buf;
}

/* ---- sources ---- */

/* Every routed expert of every MoE layer of a released checkpoint; the owned ones get their
 * parts (w->fmt: dtypes and shapes) checked and located. */
static int open_model(ms_wload *w, const ms_wload_opts *o, ms_xloc *locs)
{
    const ms_xfmt *f = &w->fmt;
    int NL = w->x_layers, NE = w->n_experts;
    ms_st *st = ms_st_open_dir(w->source);
    if (!st) return -1;
    if (ms_xfam_refine(&w->fmt, w->first_moe, st, w->source) != 0) { /* e.g. the dtype of the biases */
        ms_st_close(st);
        return -1;
    }
    /* every expert of every MoE layer; a draft head's layer when the checkpoint keeps it */
    uint8_t *avail = ms_calloc((size_t)NL * (size_t)NE, 1);
    for (int l = w->first_moe; l < NL; l++)
        if (l < w->n_layers || ms_xfam_has_expert(st, f, l)) memset(avail + (size_t)l * (size_t)NE, 1, (size_t)NE);
    int rc = parse_spec(o->experts, w, avail, w->owned);
    free(avail);
    if (rc != 0) {
        ms_st_close(st);
        return -1;
    }
    char errs[2048];
    size_t at = 0;
    int n_err = 0;
    errs[0] = 0;
    for (int l = 0; l < NL; l++)
        for (int e = 0; e < NE; e++) {
            if (!ms_wload_owns(w, l, e)) continue;
            ms_xloc *x = &locs[(size_t)l * (size_t)NE + (size_t)e];
            for (int j = 0; j < f->n_parts; j++) {
                char name[256], what[200];
                int r = ms_xfam_find_part(st, f, l, e, j, name, sizeof name, &x->file[j], &x->off[j], what,
                                          sizeof what);
                if (r < 0) {
                    ms_st_close(st);
                    return -1;
                }
                const char *bad = r ? what : NULL;
                if (bad) {
                    if (n_err++ < 6 && at < sizeof errs) {
                        int k = snprintf(errs + at, sizeof errs - at, "%stensor %s %s", at ? "; " : "", name, bad);
                        if (k > 0) at += (size_t)k;
                    }
                    continue;
                }
                x->len[j] = f->part[j].bytes;
            }
        }
    if (n_err) {
        ms_err_set("%s: %d problem%s with routed-expert tensors: %s%s", w->source, n_err, n_err > 1 ? "s" : "", errs,
                   n_err > 6 ? "; ..." : "");
        ms_st_close(st);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    int nf = ms_st_file_count(st);
    const char **paths = ms_malloc(sizeof(char *) * (size_t)(nf > 0 ? nf : 1));
    for (int i = 0; i < nf; i++) paths[i] = ms_st_file_path(st, i);
    w->files = ms_io_files_open(paths, nf, !o->buffered);
    free(paths);
    ms_st_close(st); /* locations are known; the parsed headers are not needed any more */
    if (!w->files) return -1;
    if (ms_ident_model(w->source, w->fingerprint) != 0) return -1;
    return 0;
}

/* The experts of a pack (already opened and validated by ms_pack_open into p). */
static int open_pack(ms_wload *w, const ms_wload_opts *o, const ms_pack *p, ms_xloc *locs)
{
    int NE = w->n_experts;
    uint8_t *avail = ms_calloc((size_t)w->x_layers * (size_t)NE, 1);
    for (size_t i = 0; i < p->n; i++)
        avail[(size_t)p->entries[i].layer * (size_t)NE + (size_t)p->entries[i].expert] = 1;
    int rc = parse_spec(o->experts, w, avail, w->owned);
    free(avail);
    if (rc != 0) return -1;
    for (size_t i = 0; i < p->n; i++) {
        const ms_pack_entry *en = &p->entries[i];
        if (!ms_wload_owns(w, en->layer, en->expert)) continue;
        ms_xloc *x = &locs[(size_t)en->layer * (size_t)NE + (size_t)en->expert];
        uint64_t off = en->offset;
        for (int j = 0; j < p->fmt.n_parts; j++) {
            x->file[j] = 0;
            x->off[j] = off;
            x->len[j] = en->len[j];
            off += en->len[j];
        }
        x->has_xxh3 = 1; /* the store verifies every read of a pack */
        x->xxh3 = en->xxh3;
    }
    const char *paths[1] = {p->bin_path};
    w->files = ms_io_files_open(paths, 1, !o->buffered);
    if (!w->files) return -1;
    memcpy(w->fingerprint, p->fingerprint, sizeof w->fingerprint);
    w->fingerprint[16] = 0;
    return 0;
}

/* What --model DIR serves, from its config.json read once: the shape and the expert format. */
static int model_shape(ms_wload *w)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", w->source);
    ms_xmodel c;
    if (ms_xfam_load(path, 1, &c) != 0) return -1;
    w->fmt = c.fmt;
    w->n_layers = c.n_layers;
    w->x_layers = c.n_layers + c.draft_layers;
    w->n_experts = c.n_experts;
    w->first_moe = c.first_moe;
    int rc = 0;
    if (c.first_moe >= c.n_layers) {
        ms_err_set("%s: no layer of %d routes to experts (the first that would is %d): nothing for a worker to serve",
                   path, c.n_layers, c.first_moe);
        rc = ms_err_set_code(MS_EXIT_MODEL);
    }
    return rc;
}

/* ---- budget ---- */

static int plan(ms_wload *w, const ms_wload_opts *o, int depth)
{
    ms_wload_plan *p = &w->plan;
    memset(p, 0, sizeof *p);
    uint64_t L4 = 4 * (uint64_t)w->fmt.latent;
    /* Rows the store gathers per expert computation: its two gather buffers [chunk_items][L]
     * (rows in, outputs out), plus 16 bytes per row for the call's bookkeeping (a request's
     * groups take a few bytes per distinct expert). The request's items are computed in place:
     * no copies of them on this side. */
    uint64_t ci = CHUNK_BYTES / L4;
    w->chunk_items = (int)(ci < 1 ? 1 : ci > 65536 ? 65536 : ci);
    p->chunk_work = 2 * (uint64_t)w->chunk_items * L4 + (uint64_t)w->chunk_items * 16;
    /* The checkpoint's header parse is over: give its freed heap back before measuring, so the
     * baseline is what stays (glibc keeps freed blocks otherwise, a few MiB that vary by run). */
    malloc_trim(0);
    ms_plan_in in = {0};
    in.budget = o->ram_budget ? o->ram_budget : ms_plan_default_budget(90); /* O_DIRECT: no page cache */
    in.baseline = ms_proc_rss();
    in.work_fixed = p->chunk_work + 2 * REQ_MIN; /* a request and its reply at the smallest limit */
    in.prompt_tokens = in.max_chunk = 1;
    in.expert_fixed = ms_xstore_fixed_bytes(&w->fmt, depth);
    in.expert_bytes = ms_xstore_slot_bytes(&w->fmt);
    in.max_slots = w->n_owned;
    if (ms_plan_make(&in, &p->mem) != 0) return -1; /* names the fixed costs and the minimum budget */
    /* The request limit would grow with the budget (a sixteenth of what is left) up to REQ_MAX;
     * with REQ_MIN == REQ_MAX (the protocol's largest request, which also bounds what the
     * transport buffers) it is fixed, and the cache takes the rest in whole slots. */
    uint64_t extra = (in.budget - p->mem.fixed) / 16;
    if (extra > REQ_MAX - REQ_MIN) extra = REQ_MAX - REQ_MIN;
    if (extra) {
        in.work_fixed += 2 * extra;
        int rc = ms_plan_make(&in, &p->mem);
        MS_ASSERT(rc == 0); /* 2 x extra is an eighth of what the first plan left */
    }
    p->request_limit = REQ_MIN + extra;
    extra = ms_plan_spare(&p->mem) / 2;
    if (extra > REQ_MAX - p->request_limit) extra = REQ_MAX - p->request_limit;
    p->request_limit += extra;
    p->request_work = 2 * p->request_limit;
    /* The spare moved to the requests is part of the fixed costs from here on. */
    p->mem.fixed += 2 * extra;
    p->mem.in.work_fixed += 2 * extra;
    return 0;
}

int ms_wload_open(const ms_wload_opts *o, ms_wload *w)
{
    memset(w, 0, sizeof *w);
    MS_ASSERT(!!o->model_dir != !!o->pack_dir);
    w->is_pack = o->pack_dir != NULL;
    w->source = ms_strdup(w->is_pack ? o->pack_dir : o->model_dir);
    /* A pack's manifest says everything (shape, expert format); a checkpoint's config is read once. */
    ms_pack pk;
    memset(&pk, 0, sizeof pk);
    if (w->is_pack) {
        if (ms_pack_open(w->source, &pk) != 0) return -1;
        w->n_layers = pk.n_layers;
        w->x_layers = pk.n_layers + pk.draft_layers;
        w->n_experts = pk.n_experts;
        w->first_moe = pk.first_moe;
        w->fmt = pk.fmt;
    } else if (model_shape(w) != 0) {
        return -1;
    }
    size_t nk = (size_t)w->x_layers * (size_t)w->n_experts;
    w->owned = ms_calloc(nk, 1);
    ms_xloc *locs = ms_calloc(nk, sizeof *locs);
    int rc = -1;
    if ((w->is_pack ? open_pack(w, o, &pk, locs) : open_model(w, o, locs)) != 0) goto out;
    ms_pack_close(&pk);
    for (size_t k = 0; k < nk; k++) w->n_owned += w->owned[k];
    if (w->n_owned == 0) {
        ms_err_set("%s: --experts %s leaves this worker no expert to serve", w->source,
                   o->experts ? o->experts : "all");
        ms_err_set_code(w->is_pack ? MS_EXIT_MODEL : MS_EXIT_USAGE);
        goto out;
    }
    w->pool = ms_pool_new(o->threads);
    if (!w->pool) goto out;
    int depth = o->io_depth > 0 ? o->io_depth : 8;
    if (plan(w, o, depth) != 0) goto out;
    /* grow_bg 0: a worker's slots still come on first use (its cache fills with the first
     * requests; the coordinator's store grows in the background, docs/PERFORMANCE.md) */
    ms_xstore_opts xo = {.n_layers = w->x_layers,
                         .n_experts = w->n_experts,
                         .fmt = w->fmt,
                         .cache_bytes = w->plan.mem.cache,
                         .depth = depth,
                         .lru = 0,
                         .gather_rows = w->chunk_items,
                         .grow_bg = 0,
                         /* a cache that would hold the whole shard only copies the page cache */
                         .mapped = !o->no_mmap && w->plan.mem.cache_slots >= (uint64_t)w->n_owned};
    if (xo.mapped && ms_io_files_map_all(w->files) != 0) {
        ms_log(1, "%s; reading experts into the cache instead", ms_err_msg());
        ms_err_clear();
        xo.mapped = 0;
    }
    w->store = ms_xstore_new(&xo, w->files, w->pool);
    if (!w->store) goto out;
    for (size_t k = 0; k < nk; k++)
        if (w->owned[k])
            ms_xstore_set(w->store, (int)(k / (size_t)w->n_experts), (int)(k % (size_t)w->n_experts), &locs[k]);
    rc = 0;
out:
    ms_pack_close(&pk);
    free(locs);
    return rc;
}

void ms_wload_close(ms_wload *w)
{
    if (!w) return;
    ms_xstore_free(w->store);
    ms_io_files_close(w->files);
    ms_pool_free(w->pool);
    free(w->owned);
    free(w->source);
    memset(w, 0, sizeof *w);
}
