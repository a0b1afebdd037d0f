/* ms_mseq: the sequence calls of ms_model.h (new, free, keep, clone, save, load), passed to the family's ops. */
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_mrt.h"

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

int ms_seqs_draft(ms_seq *const *s, int k, const int32_t *const *toks, const size_t *n, float *logits, int *ok)
{
    MS_ASSERT(k >= 1 && k <= MS_MODEL_MAX_SEQS);
    if (ok) memset(ok, 0, sizeof(int) * (size_t)k);
    if (!s[0]->m->info.draft_layers || !s[0]->m->ops->seq_draft) return 0;
    for (int i = 0; i < k; i++)
        MS_ASSERT(s[i]->m == s[0]->m && s[i]->spec_rows == 0 && (int64_t)n[i] >= s[i]->pos &&
                  (!logits || (int64_t)n[i] == s[i]->pos + 1));
    return s[0]->m->ops->seq_draft(s, k, toks, n, logits, ok);
}

int ms_seq_draft(ms_seq *s, const int32_t *toks, size_t n, float *logits)
{
    int ok = 0, rc = ms_seqs_draft(&s, 1, &toks, &n, logits, &ok);
    return rc < 0 ? -1 : logits ? ok : 0;
}

ms_seq *ms_seq_clone(const ms_seq *s)
{
    MS_ASSERT(s->spec_rows == 0); /* a settled sequence: no speculative rows pending */
    return s->m->ops->seq_clone(s);
}

void ms_seq_save(const ms_seq *s, ms_sbuf *out)
{
    MS_ASSERT(s->spec_rows == 0); /* a settled sequence */
    ms_sbuf_add(out, (const char *)&s->pos, sizeof s->pos);
    s->m->ops->seq_save(s, out);
}

ms_seq *ms_seq_load(ms_model *m, const void *bytes, size_t n)
{
    ms_reader r = {bytes, n, 0};
    int64_t pos;
    ms_seq *s = NULL;
    if (ms_reader_take(&r, &pos, sizeof pos) != 0 || pos < 0) goto bad;
    s = ms_seq_new(m);
    s->pos = pos;
    if (m->ops->seq_load(s, &r) != 0) goto fail;
    if (r.at != r.n) goto bad;
    return s;
bad:
    ms_err_set("the sequence state does not fit this model (%zu bytes, read %zu): another model's, or cut short", n, r.at);
fail:
    ms_err_set_code(MS_EXIT_INPUT);
    ms_seq_free(s);
    return NULL;
}
