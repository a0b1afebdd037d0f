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

size_t ds_mtp_work_floats(const ds_model *g, int64_t R, int64_t k)
{
    size_t r = (size_t)R, H = (size_t)g->cfg.hidden, kk = (size_t)k;
    ms_mla_cfg a = ds_mla_cfg(g);
    ms_moe_gate gt = ds_gate(g, NULL);
    /* x2, u, t, a over R rows; the k drafts' rows, normed rows, expert sums, shared outputs,
     * head inputs; their logits */
    return MS_ARENA_SPAN(2 * r * H) + 3 * MS_ARENA_SPAN(r * H) + ms_mla_work_floats(&a, R) + 5 * MS_ARENA_SPAN(kk * H) +
           ms_moe_block_work_floats(&gt, k, (int64_t)H) + MS_ARENA_SPAN(kk * (size_t)g->cfg.vocab);
}

/* The head's rows of k sequences: sequence i's at positions [mtp_f, mtp_f + R[i]) through
 * eh_proj and the layer's MLA (appending them to its cache); with logits [k][V], each one's last
 * row on through the MoE block and the LM head, all k together (the head read once). toks[i][p +
 * 1] is row p's next token. Each row is what it would be alone. 0, or -1 with ms_err set and
 * every sequence as it was. */
static int head_rows(ds_model *g, ds_seq *const *ss, const int32_t *const *toks, const int64_t *Rs, int k, float *logits)
{
    ms_model *m = &g->base;
    const ms_dsv3_cfg *c = &g->cfg;
    const ds_mtp *w = &g->mtp;
    int64_t H = c->hidden, R = 0, p0[MS_MODEL_MAX_SEQS];
    ms_rows seg[MS_MODEL_MAX_SEQS];
    ms_mla_cache *kc[MS_MODEL_MAX_SEQS];
    MS_ASSERT(k >= 1 && k <= MS_MODEL_MAX_SEQS);
    for (int i = 0; i < k; i++) {
        p0[i] = ss[i]->mtp_f;
        MS_ASSERT(ss[i]->mtp_kv.n == p0[i] && Rs[i] >= 1);
        seg[i] = (ms_rows){R, Rs[i]};
        kc[i] = &ss[i]->mtp_kv;
        R += Rs[i];
    }
    ms_arena *ar = &m->work;
    MS_ASSERT(ar->used == 0);
    ms_arena_reserve(ar, ds_mtp_work_floats(g, R, k));
    int rc = -1;
    float *x2 = ms_arena_take(ar, (size_t)(2 * R * H)); /* [R][2H] enorm(embedding) ; hnorm(hidden) */
    float *u = ms_arena_take(ar, (size_t)(R * H));      /* [R][H] eh_proj x2: the layer's input */
    float *t = ms_arena_take(ar, (size_t)(R * H));      /* [R][H] its normed input */
    float *a = ms_arena_take(ar, (size_t)(R * H));      /* [R][H] the attention's output */
    for (int i = 0; i < k; i++)
        for (int64_t r = 0; r < Rs[i]; r++) {
            float *e = x2 + (seg[i].r0 + r) * 2 * H;
            if (ms_mrt_embed_row(m, toks[i][p0[i] + r + 1], e) != 0) goto out;
            ms_rmsnorm(e, w->enorm, H, c->eps, e);
            ms_rmsnorm(pend_row(ss[i], p0[i] + r, H), w->hnorm, H, c->eps, e + H);
        }
    ms_matmul(&w->eh_proj, x2, R, u, m->pool);
    for (int64_t r = 0; r < R; r++) ms_rmsnorm(u + r * H, w->layer.in_norm, H, c->eps, t + r * H);
    ms_mla_cfg mc = ds_mla_cfg(g);
    if (ms_mla_forward_batch(&mc, &w->layer.mla, kc, seg, k, t, R, a, ar, m->pool) != 0) {
        ms_err_set("the MTP layer's attention: %s", ms_err_msg());
        goto out;
    }
    if (logits) { /* only each one's last row is a draft; the others only fill the cache */
        float *x = ms_arena_take(ar, (size_t)(k * H));  /* [k][H] the drafts' rows after the attention */
        float *tn = ms_arena_take(ar, (size_t)(k * H)); /* [k][H] normed */
        float *y = ms_arena_take(ar, (size_t)(k * H));  /* [k][H] the routed experts' sums */
        float *sh = ms_arena_take(ar, (size_t)(k * H)); /* [k][H] the shared expert's */
        float *xn = ms_arena_take(ar, (size_t)(k * H)); /* [k][H] the head's inputs */
        for (int i = 0; i < k; i++) {
            int64_t last = seg[i].r0 + Rs[i] - 1;
            for (int64_t j = 0; j < H; j++) x[i * H + j] = u[last * H + j] + a[last * H + j];
            ms_rmsnorm(x + i * H, w->layer.post_norm, H, c->eps, tn + i * H);
        }
        ms_moe_gate gt = ds_gate(g, &w->layer);
        if (ms_moe_block_run(&gt, &m->experts, c->n_layers, tn, NULL, k, H, y, 0, NULL, NULL, ar, m->pool) != 0) goto out;
        if (c->n_shared > 0) ms_swiglu_mlp(&w->layer.sgate, &w->layer.sup, &w->layer.sdown, tn, k, sh, m->pool);
        for (int64_t i = 0; i < k * H; i++) x[i] += c->n_shared > 0 ? y[i] + sh[i] : y[i];
        for (int i = 0; i < k; i++) ms_rmsnorm(x + i * H, w->head_norm, H, c->eps, xn + i * H);
        ms_matmul(ms_mrt_draft_lm_head(m), xn, k, logits, m->pool);
        if (ms_mrt_draft_check(m) != 0) goto out;
        for (int64_t v = 0; v < (int64_t)k * c->vocab; v++)
            if (!(logits[v] - logits[v] == 0)) {
                ms_err_set("the MTP layer produced a non-finite logit (token %lld); its weights are corrupt",
                           (long long)(v % c->vocab));
                goto out;
            }
    }
    rc = 0;
out:
    for (int i = 0; i < k; i++) {
        if (rc == 0) { /* the rows done leave the pending list */
            int64_t left = ss[i]->base.pos - (p0[i] + Rs[i]);
            if (left > 0)
                memmove(ss[i]->pend, ss[i]->pend + (size_t)Rs[i] * (size_t)H, sizeof(float) * (size_t)left * (size_t)H);
        }
        ss[i]->mtp_kv.n = rc == 0 ? p0[i] + Rs[i] : p0[i]; /* a failure leaves nothing of its rows */
        ss[i]->mtp_f = rc == 0 ? p0[i] + Rs[i] : p0[i];
    }
    ms_arena_reset(ar, 0);
    return rc;
}

int ds_mtp_draft(ms_seq *const *bs, int k, const int32_t *const *toks, const size_t *n, float *logits, int *ok)
{
    ds_model *g = (ds_model *)bs[0]->m;
    if (!g->mtp_on) return 0;
    ds_seq *ss[MS_MODEL_MAX_SEQS];
    const int32_t *tk[MS_MODEL_MAX_SEQS];
    int64_t Rs[MS_MODEL_MAX_SEQS];
    int at[MS_MODEL_MAX_SEQS], nk = 0;
    MS_ASSERT(k >= 1 && k <= MS_MODEL_MAX_SEQS);
    for (int i = 0; i < k; i++) {
        ds_seq *s = (ds_seq *)bs[i];
        int64_t pos = s->base.pos;
        if (ok) ok[i] = 0;
        if (s->mtp_lost) continue;
        /* with logits, every row up to the draft's (the last); without, the rows whose next
         * token is known but the draft's row when its token is the next to feed */
        int64_t upto = logits || (int64_t)n[i] - 1 > pos ? pos : pos - 1;
        if (upto - s->mtp_f <= 0) {
            MS_ASSERT(!logits);
            continue;
        }
        ss[nk] = s, tk[nk] = toks[i], Rs[nk] = upto - s->mtp_f, at[nk++] = i;
    }
    if (nk == 0) return 0;
    int64_t V = g->cfg.vocab;
    float *lg = logits && nk < k ? ms_malloc(sizeof(float) * (size_t)(nk * V)) : logits; /* [nk][V] */
    int rc = head_rows(g, ss, tk, Rs, nk, lg);
    if (rc == 0 && logits) {
        for (int j = nk - 1; j >= 0; j--) { /* each drafted row to its sequence's place */
            if (lg != logits || at[j] != j) memmove(logits + (size_t)at[j] * (size_t)V, lg + (size_t)j * (size_t)V, sizeof(float) * (size_t)V);
            if (ok) ok[at[j]] = 1;
        }
    }
    if (lg != logits) free(lg);
    return rc == 0 ? nk : -1;
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
