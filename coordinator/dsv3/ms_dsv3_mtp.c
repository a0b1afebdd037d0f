/* ms_dsv3_mtp: DeepSeek-V3's MTP layer as the model's draft head (spec §3.8): eh_proj over the next token's embedding and the final-normed hidden state, a decoder layer with its own MLA cache and experts, the LM head; its state kept, cut back, cloned and saved with the sequence. */
#include <stdlib.h>
#include <string.h>

#include "ms_dsv3_int.h"
#include "ms_err.h"
#include "ms_moe_block.h"
#include "ms_ops.h"

/* A sequence's rows pend from position f on: their final-normed hidden states wait for the
 * token that follows each, which the head's row needs beside them. */
static float *pend_row(ds_seq *s, int64_t p, int64_t H) { return s->pend + (size_t)(p - s->mtp_f) * (size_t)H; }

static void pend_reserve(ds_seq *s, int64_t rows, int64_t H)
{
    if (rows <= s->cap_pend) return;
    int64_t cap = s->cap_pend ? 2 * s->cap_pend : 8;
    while (cap < rows) cap *= 2;
    s->pend = ms_realloc(s->pend, sizeof(float) * (size_t)cap * (size_t)H);
    s->cap_pend = cap;
}

void ds_mtp_pass_end(ms_model *m, ms_pass *p)
{
    ds_model *g = (ds_model *)m;
    if (!g->mtp_on) return;
    int64_t H = g->cfg.hidden;
    for (int i = 0; i < p->n; i++) {
        ds_seq *s = (ds_seq *)p->items[i].seq;
        if (s->mtp_lost) continue;
        int64_t p0 = s->base.pos, T = p->items[i].T;
        MS_ASSERT(p0 >= s->mtp_f);
        pend_reserve(s, p0 + T - s->mtp_f, H);
        for (int64_t t = 0; t < T; t++)
            ms_rmsnorm(p->h + (p->seg[i].r0 + t) * H, g->final_norm, H, g->cfg.eps, pend_row(s, p0 + t, H));
    }
}

size_t ds_mtp_work_floats(const ds_model *g, int64_t R)
{
    size_t r = (size_t)R, H = (size_t)g->cfg.hidden;
    ms_mla_cfg a = ds_mla_cfg(g);
    ms_moe_gate gt = ds_gate(g, NULL);
    /* x2, u, t, a over R rows; the last row's t, y, shared output, normed row; the logits */
    return MS_ARENA_SPAN(2 * r * H) + 3 * MS_ARENA_SPAN(r * H) + ms_mla_work_floats(&a, R) + 4 * MS_ARENA_SPAN(H) +
           ms_moe_block_work_floats(&gt, 1, (int64_t)H) + MS_ARENA_SPAN(g->cfg.vocab);
}

/* The head's rows at positions [s->mtp_f, s->mtp_f + R) through eh_proj and the layer's MLA
 * (appending them to its cache); with logits, the last row on through the MoE block and the LM
 * head. toks[p + 1] is row p's next token. 0, or -1 with ms_err set. */
static int head_rows(ds_model *g, ds_seq *s, const int32_t *toks, int64_t R, float *logits)
{
    ms_model *m = &g->base;
    const ms_dsv3_cfg *c = &g->cfg;
    const ds_mtp *w = &g->mtp;
    int64_t H = c->hidden, p0 = s->mtp_f;
    ms_arena *ar = &m->work;
    MS_ASSERT(ar->used == 0 && s->mtp_kv.n == p0);
    ms_arena_reserve(ar, ds_mtp_work_floats(g, R));
    int rc = -1;
    float *x2 = ms_arena_take(ar, (size_t)(2 * R * H)); /* [R][2H] enorm(embedding) ; hnorm(hidden) */
    float *u = ms_arena_take(ar, (size_t)(R * H));      /* [R][H] eh_proj x2: the layer's input */
    float *t = ms_arena_take(ar, (size_t)(R * H));      /* [R][H] its normed input */
    float *a = ms_arena_take(ar, (size_t)(R * H));      /* [R][H] the attention's output */
    for (int64_t r = 0; r < R; r++) {
        float *e = x2 + r * 2 * H;
        if (ms_mrt_embed_row(m, toks[p0 + r + 1], e) != 0) goto out;
        ms_rmsnorm(e, w->enorm, H, c->eps, e);
        ms_rmsnorm(pend_row(s, p0 + r, H), w->hnorm, H, c->eps, e + H);
    }
    ms_matmul(&w->eh_proj, x2, R, u, m->pool);
    for (int64_t r = 0; r < R; r++) ms_rmsnorm(u + r * H, w->layer.in_norm, H, c->eps, t + r * H);
    ms_mla_cfg mc = ds_mla_cfg(g);
    ms_mla_cache *kc = &s->mtp_kv;
    ms_rows seg = {0, R};
    if (ms_mla_forward_batch(&mc, &w->layer.mla, &kc, &seg, 1, t, R, a, ar, m->pool) != 0) {
        ms_err_set("the MTP layer's attention: %s", ms_err_msg());
        goto out;
    }
    s->mtp_f = p0 + R;
    if (logits) { /* only the last row's output is a draft; the others only fill the cache */
        float *x = u + (R - 1) * H, *xa = a + (R - 1) * H;
        float *tn = ms_arena_take(ar, (size_t)H); /* [H] */
        float *y = ms_arena_take(ar, (size_t)H);  /* [H] the routed experts' sum */
        float *sh = ms_arena_take(ar, (size_t)H); /* [H] the shared expert's */
        float *xn = ms_arena_take(ar, (size_t)H); /* [H] the head's input */
        for (int64_t i = 0; i < H; i++) x[i] += xa[i];
        ms_rmsnorm(x, w->layer.post_norm, H, c->eps, tn);
        ms_moe_gate gt = ds_gate(g, &w->layer);
        if (ms_moe_block_run(&gt, &m->experts, c->n_layers, tn, NULL, 1, H, y, 0, NULL, NULL, ar, m->pool) != 0) goto out;
        if (c->n_shared > 0) ms_swiglu_mlp(&w->layer.sgate, &w->layer.sup, &w->layer.sdown, tn, 1, sh, m->pool);
        for (int64_t i = 0; i < H; i++) x[i] += c->n_shared > 0 ? y[i] + sh[i] : y[i];
        ms_rmsnorm(x, w->head_norm, H, c->eps, xn);
        ms_matmul(ms_mrt_draft_lm_head(m), xn, 1, logits, m->pool);
        if (ms_mrt_draft_check(m) != 0) goto out;
        for (int64_t v = 0; v < c->vocab; v++)
            if (!(logits[v] - logits[v] == 0)) {
                ms_err_set("the MTP layer produced a non-finite logit (token %lld); its weights are corrupt", (long long)v);
                goto out;
            }
    }
    rc = 0;
out:
    ms_arena_reset(ar, 0);
    return rc;
}

int ds_mtp_draft(ms_seq *base, const int32_t *toks, size_t n, float *logits)
{
    ds_seq *s = (ds_seq *)base;
    ds_model *g = (ds_model *)base->m;
    if (!g->mtp_on) return 0;
    if (s->mtp_lost) return 0;
    int64_t pos = base->pos;
    /* with logits, every row up to the draft's (the last); without, the rows whose next token
     * is known but the draft's row when its token is the next to feed */
    int64_t upto = logits || (int64_t)n - 1 > pos ? pos : pos - 1;
    int64_t R = upto - s->mtp_f;
    if (R <= 0) {
        MS_ASSERT(!logits);
        return 0;
    }
    if (head_rows(g, s, toks, R, logits) != 0) return -1;
    /* the rows done leave the pending list */
    int64_t H = g->cfg.hidden, left = pos - s->mtp_f;
    if (left > 0) memmove(s->pend, s->pend + (size_t)R * (size_t)H, sizeof(float) * (size_t)left * (size_t)H);
    return logits ? 1 : 0;
}

/* ---- the head's state in a sequence ---- */

void ds_mtp_seq_init(ds_model *g, ds_seq *s)
{
    ms_mla_cache_init(&s->mtp_kv);
    if (g->mtp_on && g->base.opts.max_positions > 0) {
        ms_mla_cfg mc = ds_mla_cfg(g);
        ms_mla_cache_reserve(&s->mtp_kv, &mc, g->base.opts.max_positions);
    }
}

void ds_mtp_seq_free(ds_seq *s)
{
    ms_mla_cache_free(&s->mtp_kv);
    free(s->pend);
}

void ds_mtp_seq_copy(const ds_model *g, ds_seq *d, const ds_seq *s)
{
    ms_mla_cfg mc = ds_mla_cfg(g);
    ms_mla_cache_copy(&d->mtp_kv, &s->mtp_kv, &mc);
    d->pend = NULL;
    d->cap_pend = 0;
    int64_t rows = g->mtp_on && !s->mtp_lost ? s->base.pos - s->mtp_f : 0;
    if (rows > 0) {
        pend_reserve(d, rows, g->cfg.hidden);
        memcpy(d->pend, s->pend, sizeof(float) * (size_t)rows * (size_t)g->cfg.hidden);
    }
}

/* Saved after the main caches, only by a model with the head: a tag, the first pending
 * position, the head's cache, the pending rows. */
#define MTP_TAG 0x3150544d /* "MTP1" */

void ds_mtp_seq_save(const ds_model *g, const ds_seq *s, ms_sbuf *out)
{
    if (!g->mtp_on || s->mtp_lost) return;
    ms_mla_cfg mc = ds_mla_cfg(g);
    uint32_t tag = MTP_TAG;
    ms_sbuf_add(out, (const char *)&tag, sizeof tag);
    ms_sbuf_add(out, (const char *)&s->mtp_f, sizeof s->mtp_f);
    ms_mla_cache_save(&s->mtp_kv, &mc, out);
    int64_t rows = s->base.pos - s->mtp_f;
    ms_sbuf_add(out, (const char *)s->pend, sizeof(float) * (size_t)rows * (size_t)g->cfg.hidden);
}

int ds_mtp_seq_load(const ds_model *g, ds_seq *s, ms_reader *in)
{
    if (in->at == in->n) { /* saved by a run without the head: this sequence cannot draft */
        s->mtp_lost = g->mtp_on && s->base.pos > 0;
        return 0;
    }
    uint32_t tag;
    int64_t f;
    if (ms_reader_take(in, &tag, sizeof tag) != 0 || tag != MTP_TAG || ms_reader_take(in, &f, sizeof f) != 0 || f < 0 ||
        f > s->base.pos) {
        ms_err_set("the sequence state's draft-head part is damaged");
        return -1;
    }
    if (!g->mtp_on) { /* the head's state is of no use to a model without it */
        in->at = in->n;
        return 0;
    }
    ms_mla_cfg mc = ds_mla_cfg(g);
    int64_t rows = s->base.pos - f, H = g->cfg.hidden;
    int rc = ms_mla_cache_load(&s->mtp_kv, &mc, f, in);
    if (rc == 0) {
        s->mtp_f = f;
        if (rows > 0) pend_reserve(s, rows, H);
        rc = rows > 0 ? ms_reader_take_floats(in, s->pend, (size_t)rows * (size_t)H) : 0;
    }
    if (rc == -2) ms_err_set("the sequence state holds a non-finite value in its draft-head part, at byte %zu", in->at);
    if (rc == -1) ms_err_set("the sequence state's draft-head part does not fit this model (cut short, or other sizes)");
    return rc == 0 ? 0 : -1;
}

uint64_t ds_mtp_state_bytes(const ds_model *g, int64_t positions)
{
    if (!g->mtp_on) return 0;
    ms_mla_cfg mc = ds_mla_cfg(g);
    /* its cache, and the row that waits for a draft's token (a settled sequence's only one) */
    return ms_mla_cache_bytes(&mc, positions) + 4 * (uint64_t)g->cfg.hidden + 64;
}
