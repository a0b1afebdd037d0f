/* ms_cli_shared: jobs' shared prompt beginnings: found among the jobs, prefilled once, kept pinned. */
#include <stdlib.h>
#include <string.h>

#include "ms_cli.h"
#include "ms_cli_shared.h"
#include "ms_err.h"
#include "ms_ptrie.h"

static const ms_jobspec *sort_specs;
static int by_prompt(const void *a, const void *b)
{
    const ms_jobspec *x = &sort_specs[*(const int *)a], *y = &sort_specs[*(const int *)b];
    size_t n = x->n_prompt < y->n_prompt ? x->n_prompt : y->n_prompt;
    for (size_t i = 0; i < n; i++)
        if (x->prompt[i] != y->prompt[i]) return x->prompt[i] < y->prompt[i] ? -1 : 1;
    return (x->n_prompt > y->n_prompt) - (x->n_prompt < y->n_prompt);
}

/* Shorter first, then by ids: a total order (what is chosen and its order never depend on qsort). */
static int by_len_ids(const void *a, const void *b)
{
    const ms_cli_prefix *x = a, *y = b;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    for (size_t i = 0; i < x->n; i++)
        if (x->ids[i] != y->ids[i]) return x->ids[i] < y->ids[i] ? -1 : 1;
    return 0;
}
/* Most spared first, then as by_len_ids. */
static int by_spared(const void *a, const void *b)
{
    const ms_cli_prefix *x = a, *y = b;
    if (x->spared != y->spared) return x->spared < y->spared ? 1 : -1;
    return by_len_ids(a, b);
}

/* Where p (n ids) sits among sorted prompts: < 0 when prompt x sorts before every prompt that
 * begins with p, 0 when x begins with p, > 0 after them. */
static int cmp_begin(const ms_jobspec *x, const int32_t *p, size_t n)
{
    size_t m = x->n_prompt < n ? x->n_prompt : n;
    for (size_t i = 0; i < m; i++)
        if (x->prompt[i] != p[i]) return x->prompt[i] < p[i] ? -1 : 1;
    return x->n_prompt < n ? -1 : 0;
}

/* The prompts (ix sorted, n of them) longer than p that begin with it: a block of the sorted
 * order, found by two binary searches. */
static uint64_t users_of(const ms_jobspec *specs, const int *ix, int n, const int32_t *p, size_t len)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (cmp_begin(&specs[ix[mid]], p, len) < 0) lo = mid + 1;
        else hi = mid;
    }
    int first = lo;
    hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (cmp_begin(&specs[ix[mid]], p, len) <= 0) lo = mid + 1;
        else hi = mid;
    }
    int end = lo;
    while (first < end && specs[ix[first]].n_prompt == len) first++; /* exactly p: sorted first */
    return (uint64_t)(end - first);
}

int ms_cli_shared_find(const ms_jobspec *specs, int n_specs, ms_cli_prefix **out)
{
    int *ix = ms_malloc(sizeof(int) * (size_t)(n_specs + 1)), n = 0;
    for (int i = 0; i < n_specs; i++)
        if (specs[i].line >= 0 && !specs[i].err_code) ix[n++] = i;
    sort_specs = specs;
    qsort(ix, (size_t)n, sizeof *ix, by_prompt);
    ms_cli_prefix *pf = ms_malloc(sizeof *pf * (size_t)(n + 1));
    int np = 0;
    for (int k = 0; k + 1 < n; k++) {
        const ms_jobspec *a = &specs[ix[k]], *b = &specs[ix[k + 1]];
        size_t l = 0, m = a->n_prompt < b->n_prompt ? a->n_prompt : b->n_prompt;
        while (l < m && a->prompt[l] == b->prompt[l]) l++;
        if (l == m) l--; /* a prompt that is all of another: its last token still runs */
        if (l >= 16) pf[np++] = (ms_cli_prefix){a->prompt, l, 0};
    }
    /* The same beginning can part different pairs (A B share 16 ids, B C 40, C D the 16 again):
     * sorted by length and ids, copies are neighbours. */
    qsort(pf, (size_t)np, sizeof *pf, by_len_ids);
    int nd = 0;
    for (int q = 0; q < np; q++)
        if (!nd || by_len_ids(&pf[nd - 1], &pf[q])) pf[nd++] = pf[q];
    np = nd;
    /* What each spares beyond the longest shorter kept one it extends (whose state it starts
     * from): one that extends another by fewer than 16 tokens is not worth a state of its own.
     * Shortest first (as sorted above), the kept ones in a radix tree to find that one in a walk. */
    ms_ptrie *kept_tree = ms_ptrie_new();
    int kept = 0;
    for (int q = 0; q < np; q++) {
        size_t base = 0;
        ms_ptrie_longest(kept_tree, pf[q].ids, pf[q].n, pf[q].n - 1, &base);
        uint64_t users = users_of(specs, ix, n, pf[q].ids, pf[q].n);
        pf[q].spared = users > 1 ? (uint64_t)(pf[q].n - base) * (users - 1) : 0;
        if (pf[q].n - base >= 16 && pf[q].spared) {
            pf[kept] = pf[q];
            ms_ptrie_put(kept_tree, pf[kept].ids, pf[kept].n, &pf[kept]);
            kept++;
        }
    }
    ms_ptrie_free(kept_tree);
    np = kept;
    qsort(pf, (size_t)np, sizeof *pf, by_spared);
    if (np > MS_CLI_MAX_SHARED) np = MS_CLI_MAX_SHARED;
    qsort(pf, (size_t)np, sizeof *pf, by_len_ids);
    free(ix);
    *out = pf;
    return np;
}

int ms_cli_shared_warm(ms_engine *e, ms_pcache *pc, const ms_cli_prefix *pf, int np)
{
    int rc = 0;
    for (int k = 0; k < np && rc == 0; k++) {
        size_t have = 0;
        ms_seq *st = ms_pcache_take(pc, pf[k].ids, pf[k].n, &have);
        ms_gen_params p = {0};
        p.max_tokens = 1;
        ms_eseq *q = st ? ms_engine_seq_continue(e, st, pf[k].ids + have, pf[k].n - have, &p)
                        : ms_engine_seq_new(e, pf[k].ids, pf[k].n, &p);
        while (q && !ms_engine_seq_done(q) && rc == 0)
            if (ms_engine_step(e, &q, 1) != 0) rc = ms_cli_fail_err("jobs");
        if (q && rc == 0) {
            ms_seq *full = ms_engine_seq_take_state(q);
            ms_pcache_put_pinned(pc, pf[k].ids, pf[k].n, full);
            ms_seq_free(full);
        }
        if (!q) rc = ms_cli_fail_err("jobs");
        ms_engine_seq_free(q);
    }
    if (np) ms_log(1, "jobs: %d shared prompt beginning%s (%zu tokens%s) prefilled once and kept", np, np > 1 ? "s" : "",
                   pf[np - 1].n, np > 1 ? " the longest" : "");
    return rc;
}

