/* ms_draft: the n-gram and fixed-list draft sources and the --draft-file reader. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ms_draft.h"
#include "ms_model.h"
#include "ms_err.h"
#include "ms_ids.h"
#include "ms_file.h"

void ms_drafter_free(ms_drafter *d)
{
    if (d) d->destroy(d);
}

typedef struct {
    ms_drafter base;
    int min_n, max_n;
} ngram;

static int ngram_propose(ms_drafter *d, const int32_t *toks, size_t n, size_t n_prompt, int32_t *out, int max)
{
    const ngram *g = (const ngram *)d;
    (void)n_prompt;
    for (int len = g->max_n; len >= g->min_n; len--) {
        if ((size_t)len >= n) continue;
        const int32_t *suf = toks + n - (size_t)len;
        /* most recent earlier occurrence: start j < n - len */
        for (size_t j = n - (size_t)len; j-- > 0;) {
            if (memcmp(toks + j, suf, sizeof(int32_t) * (size_t)len) != 0) continue;
            size_t from = j + (size_t)len, avail = n - from;
            int cnt = avail < (size_t)max ? (int)avail : max;
            memcpy(out, toks + from, sizeof(int32_t) * (size_t)cnt);
            return cnt;
        }
    }
    return 0;
}

static void plain_destroy(ms_drafter *d) { free(d); }

ms_drafter *ms_draft_ngram_new(int min_n, int max_n)
{
    MS_ASSERT(min_n >= 1 && max_n >= min_n);
    ngram *g = ms_calloc(1, sizeof *g);
    g->base.propose = ngram_propose;
    g->base.destroy = plain_destroy;
    g->min_n = min_n;
    g->max_n = max_n;
    return &g->base;
}

typedef struct {
    ms_drafter base;
    size_t n;
    int32_t ids[];
} list;

static int list_propose(ms_drafter *d, const int32_t *toks, size_t n, size_t n_prompt, int32_t *out, int max)
{
    const list *l = (const list *)d;
    (void)toks;
    MS_ASSERT(n >= n_prompt);
    size_t at = n - n_prompt; /* index of the generated token the first draft stands for */
    int cnt = 0;
    while (cnt < max && at + (size_t)cnt < l->n) {
        out[cnt] = l->ids[at + (size_t)cnt];
        cnt++;
    }
    return cnt;
}

ms_drafter *ms_draft_list_new(const int32_t *ids, size_t n)
{
    list *l = ms_malloc(sizeof *l + sizeof(int32_t) * (n ? n : 1));
    l->base.propose = list_propose;
    l->base.destroy = plain_destroy;
    l->n = n;
    if (n) memcpy(l->ids, ids, sizeof(int32_t) * n);
    return &l->base;
}

int ms_draft_read_file(const char *path, int32_t **ids, size_t *n)
{
    size_t len = 0;
    /* the syntax and the size limit of --ids-file (the same parser) */
    char *buf = ms_file_read_all(path, "draft file", MS_FILE_STREAM, MS_DRAFT_MAX_FILE, MS_EXIT_INPUT, &len);
    if (!buf) return -1;
    const char *z = memchr(buf, 0, len);
    if (z) {
        size_t at = (size_t)(z - buf);
        free(buf);
        ms_err_set("draft file %s: a NUL byte at offset %zu: ids are non-negative integers separated by commas "
                   "and/or whitespace",
                   path, at);
        return ms_err_set_code(MS_EXIT_INPUT);
    }
    int rc = ms_ids_parse(buf, ids, n);
    free(buf);
    if (rc != 0) {
        ms_err_wrap("draft file %s", path);
        return ms_err_set_code(MS_EXIT_INPUT);
    }
    if (*n == 0) {
        free(*ids);
        *ids = NULL;
        ms_err_set("draft file %s: no token ids: ids are non-negative integers separated by commas and/or whitespace",
                   path);
        return ms_err_set_code(MS_EXIT_INPUT);
    }
    return 0;
}

/* ---- the model's draft head ---- */

typedef struct {
    ms_drafter base;
    struct ms_seq *const *seq;
    int64_t V;
    float *logits; /* [V] the head's */
    int32_t ready; /* a draft made with others' (ms_draft_heads_run), for ready_n tokens; -1: none */
    size_t ready_n;
} head_drafter;

static int32_t argmax(const float *x, int64_t V)
{
    int64_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (x[v] > x[best]) best = v;
    return (int32_t)best;
}

static int head_propose(ms_drafter *d, const int32_t *toks, size_t n, size_t n_prompt, int32_t *out, int max)
{
    (void)n_prompt;
    (void)max;
    head_drafter *h = (head_drafter *)d;
    if (h->ready >= 0 && h->ready_n == n) { /* made beside the other sequences' */
        out[0] = h->ready;
        h->ready = -1;
        return 1;
    }
    h->ready = -1;
    int rc = ms_seq_draft(*h->seq, toks, n, h->logits);
    if (rc <= 0) return rc;
    out[0] = argmax(h->logits, h->V);
    return 1;
}

int ms_draft_heads_run(ms_drafter *const *d, int k, const int32_t *const *toks, const size_t *n)
{
    MS_ASSERT(k >= 1 && k <= MS_MODEL_MAX_SEQS);
    head_drafter *h0 = (head_drafter *)d[0];
    ms_seq *seqs[MS_MODEL_MAX_SEQS];
    int ok[MS_MODEL_MAX_SEQS];
    for (int i = 0; i < k; i++) {
        MS_ASSERT(d[i]->propose == head_propose);
        seqs[i] = *((head_drafter *)d[i])->seq;
        ((head_drafter *)d[i])->ready = -1;
    }
    float *lg = ms_malloc(sizeof(float) * (size_t)k * (size_t)h0->V); /* [k][V] */
    int rc = ms_seqs_draft(seqs, k, toks, n, lg, ok);
    for (int i = 0; rc >= 0 && i < k; i++)
        if (ok[i]) {
            head_drafter *h = (head_drafter *)d[i];
            h->ready = argmax(lg + (size_t)i * (size_t)h0->V, h0->V);
            h->ready_n = n[i];
        }
    free(lg);
    return rc < 0 ? -1 : 0;
}

static void head_destroy(ms_drafter *d)
{
    free(((head_drafter *)d)->logits);
    free(d);
}

ms_drafter *ms_draft_head_new(struct ms_seq *const *seq, int64_t V)
{
    head_drafter *h = ms_calloc(1, sizeof *h);
    h->base.propose = head_propose;
    h->base.destroy = head_destroy;
    h->seq = seq;
    h->V = V;
    h->logits = ms_malloc(sizeof(float) * (size_t)V);
    h->ready = -1;
    return &h->base;
}
