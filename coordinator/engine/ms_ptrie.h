/* ms_ptrie: a radix tree over token ids that finds the longest stored key a sequence begins with. */
#ifndef MS_PTRIE_H
#define MS_PTRIE_H

#include <stddef.h>
#include <stdint.h>

/* Keys are token-id sequences of length >= 1; each holds one non-NULL value (borrowed: the
 * tree never frees or reads it). Edges carry runs of ids and a node without a value has two
 * children or more (or is the root), so a lookup walks at most one node per stored branch
 * point on its way, whatever the number of keys: O(length of the query). */
typedef struct ms_ptrie ms_ptrie;

ms_ptrie *ms_ptrie_new(void);
void ms_ptrie_free(ms_ptrie *t); /* accepts NULL; the values are the caller's */

/* Store v (not NULL) at key ids[n] (n >= 1), replacing the value there. Returns the value it
 * replaced, or NULL. */
void *ms_ptrie_put(ms_ptrie *t, const int32_t *ids, size_t n, void *v);
/* The value at exactly ids[n], or NULL. */
void *ms_ptrie_get(const ms_ptrie *t, const int32_t *ids, size_t n);
/* Remove the key ids[n] and return its value (NULL when absent); the tree stays compact. */
void *ms_ptrie_del(ms_ptrie *t, const int32_t *ids, size_t n);
/* The value of the longest key of at most max_len ids that ids[n] begins with, its length in
 * *len; NULL (and *len = 0) when no key is a prefix of ids[n]. */
void *ms_ptrie_longest(const ms_ptrie *t, const int32_t *ids, size_t n, size_t max_len, size_t *len);

size_t ms_ptrie_count(const ms_ptrie *t); /* keys stored */
size_t ms_ptrie_nodes(const ms_ptrie *t); /* nodes, root included (tests check compactness) */

#endif
