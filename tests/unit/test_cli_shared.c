/* test_cli_shared: jobs' shared prompt beginnings are those a plain all-pairs reading of the rule finds. */
#include <stdlib.h>
#include <string.h>

#include "ms_cli_shared.h"
#include "ms_err.h"
#include "ms_test.h"

#define MAXP 64 /* ids per prompt */

/* The rule, read plainly (O(n^2) pairs, O(n) users): a candidate is the longest common beginning
 * of two prompts (one id short when a prompt is all of the other), 16 ids or more; shortest first,
 * one is kept when it extends the longest shorter kept one that it begins with by 16 ids or more
 * and two or more longer prompts begin with it; spared = (its ids beyond that one) x (users - 1);
 * the MS_CLI_MAX_SHARED that spare most (then shorter, then smaller ids) are chosen. */
typedef struct {
    const int32_t *ids;
    size_t n;
    uint64_t spared;
} cand;

static int same_begin(const int32_t *a, const int32_t *b, size_t n) { return !memcmp(a, b, sizeof(int32_t) * n); }

static int cand_cmp_len(const cand *x, const cand *y)
{
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    for (size_t i = 0; i < x->n; i++)
        if (x->ids[i] != y->ids[i]) return x->ids[i] < y->ids[i] ? -1 : 1;
    return 0;
}

static int ref_find(const ms_jobspec *sp, int n, cand *out)
{
    static cand c[4096];
    int nc = 0;
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            if (sp[a].line < 0 || sp[a].err_code || sp[b].line < 0 || sp[b].err_code) continue;
            size_t l = 0, m = sp[a].n_prompt < sp[b].n_prompt ? sp[a].n_prompt : sp[b].n_prompt;
            while (l < m && sp[a].prompt[l] == sp[b].prompt[l]) l++;
            if (l == m) l--;
            if (l < 16) continue;
            cand x = {sp[a].prompt, l, 0};
            int dup = 0;
            for (int i = 0; i < nc && !dup; i++) dup = !cand_cmp_len(&c[i], &x);
            if (!dup) c[nc++] = x;
        }
    /* shortest first (a plain selection sort: n is small) */
    for (int i = 0; i < nc; i++)
        for (int j = i + 1; j < nc; j++)
            if (cand_cmp_len(&c[j], &c[i]) < 0) {
                cand t = c[i];
                c[i] = c[j];
                c[j] = t;
            }
    int kept = 0;
    static cand k[4096];
    for (int i = 0; i < nc; i++) {
        size_t base = 0;
        for (int j = 0; j < kept; j++)
            if (k[j].n < c[i].n && k[j].n > base && same_begin(k[j].ids, c[i].ids, k[j].n)) base = k[j].n;
        uint64_t users = 0;
        for (int s = 0; s < n; s++)
            users += sp[s].line >= 0 && !sp[s].err_code && sp[s].n_prompt > c[i].n && same_begin(sp[s].prompt, c[i].ids, c[i].n);
        c[i].spared = users > 1 ? (uint64_t)(c[i].n - base) * (users - 1) : 0;
        if (c[i].n - base >= 16 && c[i].spared) k[kept++] = c[i];
    }
    /* the most spared (then shorter, then smaller ids), at most MS_CLI_MAX_SHARED */
    int chosen = 0;
    uint8_t *taken = calloc((size_t)kept + 1, 1);
    while (chosen < MS_CLI_MAX_SHARED && chosen < kept) {
        int best = -1;
        for (int j = 0; j < kept; j++)
            if (!taken[j] && (best < 0 || k[j].spared > k[best].spared ||
                              (k[j].spared == k[best].spared && cand_cmp_len(&k[j], &k[best]) < 0)))
                best = j;
        taken[best] = 1;
        out[chosen++] = k[best];
    }
    free(taken);
    for (int i = 0; i < chosen; i++) /* shortest first (then smaller ids), as the code returns them */
        for (int j = i + 1; j < chosen; j++)
            if (cand_cmp_len(&out[j], &out[i]) < 0) {
                cand t = out[i];
                out[i] = out[j];
                out[j] = t;
            }
    return chosen;
}

int main(void)
{
    ms_t_rng r = {0x51ed2701u};
    static int32_t store[200][MAXP];
    static ms_jobspec sp[200];
    int wrong = 0, total_found = 0, capped = 0, rounds = 300;
    for (int round = 0; round < rounds; round++) {
        int n = 2 + (int)ms_t_rng_below(&r, 60);
        /* a few system prompts (stems), prompts that extend them, some duplicates, bad lines */
        int32_t stems[6][MAXP];
        for (int s = 0; s < 6; s++)
            for (int i = 0; i < MAXP; i++) stems[s][i] = s < 3 ? (int32_t)(100 + i) : (int32_t)ms_t_rng_below(&r, 3);
        for (int j = 0; j < n; j++) {
            memset(&sp[j], 0, sizeof sp[j]);
            sp[j].line = ms_t_rng_below(&r, 20) ? j + 1 : -(j + 1); /* some answered already */
            sp[j].err_code = ms_t_rng_below(&r, 25) ? NULL : "invalid_json";
            int s = (int)ms_t_rng_below(&r, 6);
            size_t keep = ms_t_rng_below(&r, MAXP), len = keep + 1 + ms_t_rng_below(&r, (uint32_t)(MAXP - keep));
            if (len > MAXP) len = MAXP;
            for (size_t i = 0; i < len; i++) store[j][i] = i < keep ? stems[s][i] : (int32_t)ms_t_rng_below(&r, 4);
            if (j && !ms_t_rng_below(&r, 8)) { /* a duplicate of the previous prompt */
                memcpy(store[j], store[j - 1], sizeof store[j]);
                len = sp[j - 1].n_prompt;
            } else if (j && sp[j - 1].n_prompt > 17 && !ms_t_rng_below(&r, 6)) { /* all of it begins the previous */
                memcpy(store[j], store[j - 1], sizeof store[j]);
                len = 17 + ms_t_rng_below(&r, (uint32_t)(sp[j - 1].n_prompt - 17));
            }
            sp[j].prompt = store[j];
            sp[j].n_prompt = len;
        }
        cand want[MS_CLI_MAX_SHARED];
        int nw = ref_find(sp, n, want);
        ms_cli_prefix *got = NULL;
        int ng = ms_cli_shared_find(sp, n, &got);
        int ok = ng == nw;
        for (int i = 0; ok && i < ng; i++)
            ok = got[i].n == want[i].n && got[i].spared == want[i].spared && same_begin(got[i].ids, want[i].ids, want[i].n);
        if (!ok && !wrong) {
            fprintf(stderr, "round %d (%d prompts): %d beginnings found, %d expected\n", round, n, ng, nw);
            for (int i = 0; i < ng || i < nw; i++)
                fprintf(stderr, "  got %zu/%llu %s | want %zu/%llu %s\n", i < ng ? got[i].n : 0,
                        (unsigned long long)(i < ng ? got[i].spared : 0), i < ng ? ms_t_show_ids(got[i].ids, got[i].n) : "-",
                        i < nw ? want[i].n : 0, (unsigned long long)(i < nw ? want[i].spared : 0),
                        i < nw ? ms_t_show_ids(want[i].ids, want[i].n) : "-");
        }
        wrong += !ok;
        total_found += ng;
        capped += ng == MS_CLI_MAX_SHARED;
        free(got);
    }
    T_CHECK(wrong == 0, "%d of %d rounds differ from the all-pairs reading of the rule", wrong, rounds);
    /* the rounds must have exercised the rule: many beginnings found, the cap reached */
    T_CHECK(total_found > rounds && capped > 5, "weak rounds: %d beginnings found in all, %d rounds at the cap",
            total_found, capped);

    /* No prompt shared: none; one job: none. */
    ms_cli_prefix *got = NULL;
    T_CHECK(ms_cli_shared_find(sp, 1, &got) == 0, "one job shares nothing");
    free(got);
    return ms_t_done();
}
