/* ms_ptrie: radix tree over token ids (edges hold runs of ids; children sorted by first id). */
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_ptrie.h"

typedef struct node {
    int32_t *lab;        /* [nlab] the ids on the edge into this node (none for the root) */
    size_t nlab;
    struct node **kid;   /* [nkid] children, sorted by kid[i]->lab[0] (distinct) */
    size_t nkid, capkid;
    struct node *parent; /* NULL for the root */
    void *v;             /* the value of the key ending here, or NULL */
} node;

struct ms_ptrie {
    node root;
    size_t count, nodes;
};

ms_ptrie *ms_ptrie_new(void)
{
    ms_ptrie *t = ms_calloc(1, sizeof *t);
    t->nodes = 1;
    return t;
}

static void node_free(node *x)
{
    for (size_t i = 0; i < x->nkid; i++) node_free(x->kid[i]);
    free(x->kid);
    free(x->lab);
    free(x);
}

void ms_ptrie_free(ms_ptrie *t)
{
    if (!t) return;
    for (size_t i = 0; i < t->root.nkid; i++) node_free(t->root.kid[i]);
    free(t->root.kid);
    free(t);
}

/* Index of the child whose edge starts with id, or of where it would go (*found says). */
static size_t kid_find(const node *x, int32_t id, int *found)
{
    size_t lo = 0, hi = x->nkid;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (x->kid[mid]->lab[0] < id) lo = mid + 1;
        else hi = mid;
    }
    *found = lo < x->nkid && x->kid[lo]->lab[0] == id;
    return lo;
}

static void kid_insert(node *x, size_t at, node *k)
{
    if (x->nkid == x->capkid) x->kid = ms_realloc(x->kid, sizeof *x->kid * (x->capkid = x->capkid * 2 + 2));
    memmove(x->kid + at + 1, x->kid + at, sizeof *x->kid * (x->nkid - at));
    x->kid[at] = k;
    x->nkid++;
    k->parent = x;
}

static node *node_new(ms_ptrie *t, const int32_t *lab, size_t nlab)
{
    node *x = ms_calloc(1, sizeof *x);
    x->lab = ms_malloc(sizeof(int32_t) * nlab);
    memcpy(x->lab, lab, sizeof(int32_t) * nlab);
    x->nlab = nlab;
    t->nodes++;
    return x;
}

/* The node of key ids[n] if the tree has one (with or without a value), else NULL. */
static node *find(const ms_ptrie *t, const int32_t *ids, size_t n)
{
    const node *x = &t->root;
    size_t dep = 0;
    while (dep < n) {
        int found;
        size_t i = kid_find(x, ids[dep], &found);
        if (!found) return NULL;
        const node *k = x->kid[i];
        if (dep + k->nlab > n || memcmp(k->lab, ids + dep, sizeof(int32_t) * k->nlab)) return NULL;
        dep += k->nlab;
        x = k;
    }
    return (node *)x;
}

void *ms_ptrie_put(ms_ptrie *t, const int32_t *ids, size_t n, void *v)
{
    MS_ASSERT(t && ids && n >= 1 && v);
    node *x = &t->root;
    size_t dep = 0;
    while (dep < n) {
        int found;
        size_t i = kid_find(x, ids[dep], &found);
        if (!found) { /* a new leaf holds the rest */
            node *leaf = node_new(t, ids + dep, n - dep);
            kid_insert(x, i, leaf);
            x = leaf;
            break;
        }
        node *k = x->kid[i];
        size_t c = 1; /* ids shared with k's edge (the first matched) */
        while (c < k->nlab && dep + c < n && k->lab[c] == ids[dep + c]) c++;
        if (c < k->nlab) { /* split k's edge after c ids */
            node *mid = node_new(t, k->lab, c);
            memmove(k->lab, k->lab + c, sizeof(int32_t) * (k->nlab - c));
            k->nlab -= c;
            x->kid[i] = mid;
            mid->parent = x;
            kid_insert(mid, 0, k);
        }
        x = x->kid[i];
        dep += c;
    }
    void *old = x->v;
    x->v = v;
    if (!old) t->count++;
    return old;
}

void *ms_ptrie_get(const ms_ptrie *t, const int32_t *ids, size_t n)
{
    MS_ASSERT(t && (ids || n == 0));
    if (n == 0) return NULL;
    node *x = find(t, ids, n);
    return x ? x->v : NULL;
}

/* Remove x from its parent's children (x has no value and no child) and free it. */
static void unlink_leaf(ms_ptrie *t, node *x)
{
    node *p = x->parent;
    int found;
    size_t i = kid_find(p, x->lab[0], &found);
    MS_ASSERT(found && p->kid[i] == x);
    memmove(p->kid + i, p->kid + i + 1, sizeof *p->kid * (p->nkid - i - 1));
    p->nkid--;
    free(x->kid);
    free(x->lab);
    free(x);
    t->nodes--;
}

/* x lost its value or a child: drop it if it is an empty leaf, fold it into its only child if
 * it has one and no value; then the same for its parent, which may have lost a child. */
static void compact(ms_ptrie *t, node *x)
{
    while (x->parent && !x->v && x->nkid == 0) {
        node *p = x->parent;
        unlink_leaf(t, x);
        x = p;
    }
    if (x->parent && !x->v && x->nkid == 1) { /* the child's edge absorbs x's */
        node *k = x->kid[0], *p = x->parent;
        int32_t *lab = ms_malloc(sizeof(int32_t) * (x->nlab + k->nlab));
        memcpy(lab, x->lab, sizeof(int32_t) * x->nlab);
        memcpy(lab + x->nlab, k->lab, sizeof(int32_t) * k->nlab);
        int found;
        size_t i = kid_find(p, x->lab[0], &found);
        MS_ASSERT(found && p->kid[i] == x);
        free(k->lab);
        k->lab = lab;
        k->nlab += x->nlab;
        k->parent = p;
        p->kid[i] = k; /* same first id: the order of p's children holds */
        free(x->kid);
        free(x->lab);
        free(x);
        t->nodes--;
    }
}

void *ms_ptrie_del(ms_ptrie *t, const int32_t *ids, size_t n)
{
    MS_ASSERT(t && (ids || n == 0));
    if (n == 0) return NULL;
    node *x = find(t, ids, n);
    if (!x || !x->v) return NULL;
    void *v = x->v;
    x->v = NULL;
    t->count--;
    compact(t, x);
    return v;
}

void *ms_ptrie_longest(const ms_ptrie *t, const int32_t *ids, size_t n, size_t max_len, size_t *len)
{
    MS_ASSERT(t && (ids || n == 0) && len);
    if (max_len > n) max_len = n;
    const node *x = &t->root;
    size_t dep = 0;
    void *best = NULL;
    *len = 0;
    while (dep < max_len) {
        int found;
        size_t i = kid_find(x, ids[dep], &found);
        if (!found) break;
        const node *k = x->kid[i];
        if (dep + k->nlab > max_len || memcmp(k->lab, ids + dep, sizeof(int32_t) * k->nlab)) break;
        dep += k->nlab;
        x = k;
        if (x->v) best = x->v, *len = dep;
    }
    return best;
}

size_t ms_ptrie_count(const ms_ptrie *t) { return t->count; }
size_t ms_ptrie_nodes(const ms_ptrie *t) { return t->nodes; }
