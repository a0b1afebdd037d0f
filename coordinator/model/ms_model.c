/* ms_model: the family interface's calls, dispatched to the family's ops or answered by the runtime. */
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_mrt.h"

void ms_model_free(ms_model *m)
{
    if (!m) return;
    if (m->ops && m->ops->free) m->ops->free(m);
    ms_mrt_release(m);
    for (size_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    for (int i = 0; i < m->n_refs; i++) free(m->refs[i].name);
    free(m->refs);
    free(m->xlocs);
    ms_expert_table_free(m->table);
    ms_arena_free(&m->work);
    ms_pool_free(m->pool);
    if (m->st) free((void *)m->src.paths);
    ms_st_close(m->st);
    free(m);
}

const ms_model_info *ms_model_get_info(const ms_model *m) { return &m->info; }
const ms_plan *ms_model_plan(const ms_model *m) { return m->planned ? &m->plan : NULL; }
int64_t ms_model_chunk(const ms_model *m) { return m->planned ? m->plan.chunk : 64; }
int ms_model_max_seqs(const ms_model *m)
{
    if (!m->planned && m->opts.fit_seqs > 0) return m->opts.fit_seqs;
    return m->opts.max_seqs > 1 ? m->opts.max_seqs : 1;
}
int ms_model_spec_window(const ms_model *m) { return m->opts.spec_window > 0 ? m->opts.spec_window : 0; }
ms_pool *ms_model_pool(ms_model *m) { return m->pool; }
void ms_model_set_experts(ms_model *m, ms_experts ex) { m->experts = ex; }
ms_experts ms_model_experts(ms_model *m) { return m->experts; }
ms_experts ms_model_local_experts(ms_model *m) { return ms_expert_table_iface(m->table); }

void ms_model_set_route_observer(ms_model *m, ms_route_fn fn, void *ctx)
{
    m->route_fn = fn;
    m->route_ctx = ctx;
}

ms_seq *ms_seq_new(ms_model *m) { return m->ops->seq_new(m); }

void ms_seq_free(ms_seq *s)
{
    if (s) s->m->ops->seq_free(s);
}

int64_t ms_seq_pos(const ms_seq *s) { return s->pos; }

void ms_seq_keep(ms_seq *s, int64_t keep)
{
    MS_ASSERT(s->spec_rows > 0 && keep >= 1 && keep <= s->spec_rows);
    s->m->ops->seq_keep(s, keep);
    MS_ASSERT(s->spec_rows == 0);
}

ms_seq *ms_seq_clone(const ms_seq *s)
{
    MS_ASSERT(s->spec_rows == 0); /* a settled sequence: no speculative rows pending */
    return s->m->ops->seq_clone(s);
}

int ms_model_forward_batch(ms_model *m, const ms_batch_item *items, int n)
{
    MS_ASSERT(n >= 0 && n <= MS_MODEL_MAX_SEQS);
    for (int i = 0; i < n; i++) {
        MS_ASSERT(items[i].T >= 1 && items[i].seq && items[i].seq->m == m && items[i].seq->spec_rows == 0);
        for (int j = 0; j < i; j++) MS_ASSERT(items[j].seq != items[i].seq);
        for (int64_t t = 0; t < items[i].T; t++)
            if (items[i].ids[t] < 0 || items[i].ids[t] >= m->info.vocab) {
                ms_err_set("token id %d at position %lld is outside the vocabulary (0..%lld)", items[i].ids[t],
                           (long long)(items[i].seq->pos + t), (long long)(m->info.vocab - 1));
                ms_err_set_code(MS_EXIT_INPUT);
                return -1;
            }
    }
    return m->ops->forward_batch(m, items, n);
}

int ms_model_forward(ms_model *m, ms_seq *s, const int32_t *ids, int64_t T, int all_rows, float *logits)
{
    ms_batch_item it = {s, ids, T, all_rows, logits};
    return ms_model_forward_batch(m, &it, 1);
}
