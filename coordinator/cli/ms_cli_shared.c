/* ms_cli_shared: jobs' shared prompt beginnings: found among the jobs, prefilled once, kept pinned. */
#include <stdlib.h>
#include <string.h>

#include "ms_cli.h"
#include "ms_cli_shared.h"
#include "ms_err.h"

static const ms_jobspec *sort_specs;
static int by_prompt(const void *a, const void *b)
{
    const ms_jobspec *x = &sort_specs[*(const int *)a], *y = &sort_specs[*(const int *)b];
    size_t n = x->n_prompt < y->n_prompt ? x->n_prompt : y->n_prompt;
    for (size_t i = 0; i < n; i++)
        if (x->prompt[i] != y->prompt[i]) return x->prompt[i] < y->prompt[i] ? -1 : 1;
    return (x->n_prompt > y->n_prompt) - (x->n_prompt < y->n_prompt);
}

static int by_len(const void *a, const void *b)
{
    const ms_cli_prefix *x = a, *y = b;
    return (x->n > y->n) - (x->n < y->n);
}
static int by_spared(const void *a, const void *b)
{
    const ms_cli_prefix *x = a, *y = b;
    if (x->spared != y->spared) return x->spared < y->spared ? 1 : -1;
    return by_len(a, b);
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
        if (l >= 16 && !(np && pf[np - 1].n == l && !memcmp(pf[np - 1].ids, a->prompt, sizeof(int32_t) * l)))
            pf[np++] = (ms_cli_prefix){a->prompt, l, 0};
    }
    /* What each spares beyond the longest shorter one it extends (whose state it starts from);
     * one that extends another by fewer than 16 tokens is not worth a state of its own. */
    qsort(pf, (size_t)np, sizeof *pf, by_len);
    int kept = 0;
    for (int q = 0; q < np; q++) {
        size_t base = 0;
        for (int r = 0; r < kept; r++) /* the kept ones: shorter, or as long (then not a prefix) */
            if (pf[r].n < pf[q].n && pf[r].n > base && !memcmp(pf[r].ids, pf[q].ids, sizeof(int32_t) * pf[r].n))
                base = pf[r].n;
        uint64_t users = 0;
        for (int k = 0; k < n; k++) {
            const ms_jobspec *a = &specs[ix[k]];
            users += a->n_prompt > pf[q].n && !memcmp(a->prompt, pf[q].ids, sizeof(int32_t) * pf[q].n);
        }
        pf[q].spared = users > 1 ? (uint64_t)(pf[q].n - base) * (users - 1) : 0;
        if (pf[q].n - base >= 16 && pf[q].spared) pf[kept++] = pf[q];
    }
    np = kept;
    qsort(pf, (size_t)np, sizeof *pf, by_spared);
    if (np > MS_CLI_MAX_SHARED) np = MS_CLI_MAX_SHARED;
    qsort(pf, (size_t)np, sizeof *pf, by_len);
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

