/* ms_draft: draft sources for speculative decoding: n-gram lookup in the sequence's own tokens,
 * and a fixed id list (--draft-file, for benchmarks), behind one small interface. */
#ifndef MS_DRAFT_H
#define MS_DRAFT_H

#include <stddef.h>
#include <stdint.h>

/* A draft source. A new kind fills in the two functions (and embeds this struct first). */
typedef struct ms_drafter ms_drafter;
struct ms_drafter {
    /* Propose up to max tokens to follow toks[0, n): the sequence's prompt (its first
     * n_prompt tokens) and then every token generated so far. Writes out[0, count) and returns
     * count (0: nothing to propose), or -1 with ms_err set when a source that reads weights
     * failed. Drafts are only guesses: the engine verifies each one. */
    int (*propose)(ms_drafter *d, const int32_t *toks, size_t n, size_t n_prompt, int32_t *out, int max);
    void (*destroy)(ms_drafter *d);
};

static inline int ms_drafter_propose(ms_drafter *d, const int32_t *toks, size_t n, size_t n_prompt, int32_t *out,
                                     int max)
{
    return max > 0 ? d->propose(d, toks, n, n_prompt, out, max) : 0;
}
void ms_drafter_free(ms_drafter *d); /* accepts NULL */

/* N-gram lookup: the longest suffix of the tokens (max_n down to min_n tokens, min_n >= 1) that
 * occurred before, at its most recent earlier occurrence; the tokens that followed it there
 * are the draft. */
ms_drafter *ms_draft_ngram_new(int min_n, int max_n);

/* The model's draft head (ms_seq_draft) on the sequence *seq points to (read at each proposal:
 * the engine may replace the sequence), V its vocabulary: one draft, the head's most likely token
 * (the lowest id among equal logits). */
struct ms_seq;
ms_drafter *ms_draft_head_new(struct ms_seq *const *seq, int64_t V);
/* Drafts of k head drafters (each made by ms_draft_head_new, on k different sequences of one
 * model) for tokens toks[i][0, n[i]) made together (ms_seqs_draft: the head's weights read once
 * for all), each the bits it would be alone; each drafter's next proposal for exactly n[i]
 * tokens returns its draft without computing it again (any other proposal drops it). 0, or -1
 * with ms_err set (every sequence as it was). */
int ms_draft_heads_run(ms_drafter *const *d, int k, const int32_t *const *toks, const size_t *n);

/* A fixed list (copied): the draft for generated token i is ids[i] (nothing past the list). */
ms_drafter *ms_draft_list_new(const int32_t *ids, size_t n);

/* Read a --draft-file: token ids in the syntax of --ids and --ids-file (ms_ids_parse:
 * non-negative integers separated by commas and/or whitespace, at least one), at most
 * MS_DRAFT_MAX_FILE bytes as --ids-file. *ids is malloc'ed. Returns 0, or -1 with ms_err set
 * naming the file (MS_EXIT_IO: unreadable; MS_EXIT_INPUT: bad syntax, naming the item, or too
 * large). */
#define MS_DRAFT_MAX_FILE ((uint64_t)256 << 20)
int ms_draft_read_file(const char *path, int32_t **ids, size_t *n);

#endif
