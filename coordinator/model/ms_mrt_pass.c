/* ms_mrt_pass: the one forward pass every family runs: embedding rows, the family's layers with the runtime's checks and route observer after each, the family's tail, the LM head (ms_mrt.h: ms_pass_ops). */
#include "ms_err.h"
#include "ms_mrt.h"

static int item_of_row(const ms_pass *p, int64_t r)
{
    for (int i = 0; i < p->n; i++)
        if (r >= p->seg[i].r0 && r < p->seg[i].r0 + p->items[i].T) return i;
    return -1;
}

int ms_mrt_pass_run(ms_model *m, const ms_pass_ops *ops, const ms_batch_item *items, int n)
{
    const ms_model_info *c = &m->info;
    int64_t E = c->hidden, V = c->vocab;
    ms_pass p = {.items = items, .n = n, .ar = &m->work};
    for (int i = 0; i < n; i++) {
        p.seg[i] = (ms_rows){p.R, items[i].T};
        p.R += items[i].T;
        p.out_rows += items[i].all_rows ? items[i].T : 1;
    }
    /* All scratch of the pass comes from the model's arena, sized once for the plan's passes
     * (it grows only for a caller that exceeds them, e.g. an unplanned in-memory model). */
    ms_arena *ar = p.ar;
    MS_ASSERT(ar->used == 0);
    ms_arena_reserve(ar, m->ops->work_floats(m, p.R, p.out_rows));
    int rc = -1;
    p.h = ms_arena_take(ar, (size_t)(p.R * E));                           /* [R][E] */
    p.route = (int32_t *)ms_arena_take(ar, (size_t)(p.R * c->top_k));     /* [R][k] */
    float *x = ms_arena_take(ar, (size_t)(p.out_rows * E));               /* [out_rows][E] */
    float *lg = ms_arena_take(ar, (size_t)(p.out_rows * V));              /* [out_rows][V] */
    for (int i = 0; i < n; i++)
        for (int64_t t = 0; t < items[i].T; t++)
            if (ms_mrt_embed_row(m, items[i].ids[t], p.h + (p.seg[i].r0 + t) * E) != 0) goto out;
    for (int i = 0; i < n; i++) /* a speculative item's rows are settled later (ms_seq_keep) */
        if (items[i].spec) items[i].seq->spec_rows = items[i].T;
    if (ops->pass_begin) ops->pass_begin(m, &p);
    for (int l = 0; l < c->n_layers; l++) {
        size_t mark = ms_arena_mark(ar);
        int lrc = ops->layer(m, &p, l);
        ms_arena_reset(ar, mark);
        if (lrc != 0 || ms_mrt_stream_check(m) != 0) goto out; /* no answer from partial weights */
        if (ms_arena_discard(ar, mark) != 0) goto out; /* a scratch file: the layer's temporaries unwritten */
        int64_t bad = ms_mrt_nonfinite_row(p.h, p.R, E);
        if (bad >= 0) {
            int it = item_of_row(&p, bad);
            ms_err_set("layer %d produced a non-finite hidden state (position %lld of sequence %d of the pass); "
                       "the weights or an expert output are corrupt",
                       l, (long long)(items[it].seq->pos + bad - p.seg[it].r0), it);
            goto out;
        }
        if (m->route_fn && p.R > 0 && ops->layer_routes(m, l)) m->route_fn(m->route_ctx, l, p.R, c->top_k, p.route);
        ms_mrt_layer_done(m, l, p.R);
    }
    if (ops->pass_end) ops->pass_end(m, &p);
    int64_t o = 0;
    for (int i = 0; i < n; i++)
        for (int64_t t = items[i].all_rows ? 0 : items[i].T - 1; t < items[i].T; t++, o++)
            ops->tail_row(m, &p, p.seg[i].r0 + t, x + o * E);
    if (ms_mrt_finish_pass(m, ops->lm_head(m), x, p.out_rows, lg, items, n) != 0) goto out;
    rc = 0;
out:
    ms_arena_reset(ar, 0);
    return rc;
}
