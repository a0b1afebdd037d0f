/* ms_grammar: a compiled grammar (ms_gparse.c) matched as a set of parse stacks (shared, hash-consed nodes) over code points, and the mask of the tokens that may come next (a sorted vocabulary walked once, dead prefixes skipped). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_grammar_int.h"

/* ---- matching ---- */

/* A parse stack: the element to match next (a character class) and what follows when this
 * rule's alternative ends. Nodes are made once per (pos, next) in a pool and never change. */
typedef struct gnode {
    uint32_t pos;
    struct gnode *next;
} gnode;

typedef struct pchunk {
    struct pchunk *prev;
    size_t used;
    gnode n[4096];
} pchunk;

/* A mask remembered for a position: a text often comes back to the same stacks (each character
 * of a JSON string, each digit of a number) and their mask is the same; keyed by the sorted tops,
 * which are the pool's nodes (made once: equal stacks are equal pointers). */
#define MASK_CACHE 16
typedef struct {
    const void *v;     /* the vocabulary (NULL: empty slot) */
    gnode **top;       /* [n] sorted */
    int n, accept;
    uint64_t hash, used;
    uint8_t *bits;     /* [n_vocab / 8 + 1] allowed, one bit an id */
    int64_t count;
} mcache;

typedef struct {
    pchunk *top;
    gnode **tab;       /* open addressing by (pos, next) */
    size_t cap, count;
    int refs;
    mcache mc[MASK_CACHE];
    uint64_t tick;
} pool;

static pool *pool_new(void)
{
    pool *p = ms_calloc(1, sizeof *p);
    p->cap = 1024;
    p->tab = ms_calloc(p->cap, sizeof *p->tab);
    p->refs = 1;
    return p;
}

static void pool_unref(pool *p)
{
    if (!p || --p->refs > 0) return;
    while (p->top) {
        pchunk *c = p->top;
        p->top = c->prev;
        free(c);
    }
    free(p->tab);
    for (int i = 0; i < MASK_CACHE; i++) {
        free(p->mc[i].top);
        free(p->mc[i].bits);
    }
    free(p);
}

static size_t hash_of(uint32_t pos, const gnode *next)
{
    uint64_t h = (uint64_t)pos * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)next * 0xC2B2AE3D27D4EB4Full;
    return (size_t)(h ^ (h >> 29));
}

static gnode *node(pool *p, uint32_t pos, gnode *next)
{
    size_t m = p->cap - 1, i = hash_of(pos, next) & m;
    for (; p->tab[i]; i = (i + 1) & m)
        if (p->tab[i]->pos == pos && p->tab[i]->next == next) return p->tab[i];
    if (!p->top || p->top->used == 4096) {
        pchunk *c = ms_malloc(sizeof *c);
        c->prev = p->top;
        c->used = 0;
        p->top = c;
    }
    gnode *n = &p->top->n[p->top->used++];
    n->pos = pos;
    n->next = next;
    p->tab[i] = n;
    if (++p->count * 2 > p->cap) { /* grow */
        gnode **old = p->tab;
        size_t oc = p->cap;
        p->cap *= 2;
        p->tab = ms_calloc(p->cap, sizeof *p->tab);
        for (size_t k = 0; k < oc; k++)
            if (old[k]) {
                size_t j = hash_of(old[k]->pos, old[k]->next) & (p->cap - 1);
                while (p->tab[j]) j = (j + 1) & (p->cap - 1);
                p->tab[j] = old[k];
            }
        free(old);
    }
    return n;
}

/* A set of stacks whose tops are character classes; accept: the empty stack (a whole sentence). */
typedef struct {
    gnode **top;
    int n, cap, accept;
    uint32_t cp;       /* a character begun: its bits so far */
    int need;          /* its continuation bytes still to come (0: none begun) */
    int total;         /* its continuation bytes in all */
} gpos;

static void set_add(gpos *s, gnode *n)
{
    for (int i = 0; i < s->n; i++)
        if (s->top[i] == n) return;
    if (s->n == s->cap) s->top = ms_realloc(s->top, sizeof *s->top * (size_t)(s->cap = s->cap * 2 + 8));
    s->top[s->n++] = n;
}

static void expand(const ms_grammar *g, pool *p, gpos *out, uint32_t pos, gnode *next)
{
    const elem *e = &g->el[pos];
    if (e->kind == E_END) {
        if (!next) out->accept = 1;
        else expand(g, p, out, next->pos, next->next);
    } else if (e->kind == E_CHAR) {
        set_add(out, node(p, pos, next));
    } else { /* a rule: its alternatives, then what follows it (a rule last in its alternative
              * returns straight to the caller's continuation: X* stays one stack however long) */
        gnode *cont = g->el[pos + 1].kind == E_END ? next : node(p, pos + 1, next);
        for (uint32_t a = 0; a < g->nalt[e->a]; a++) expand(g, p, out, g->alt[g->alt0[e->a] + a], cont);
    }
}

static int matches(const ms_grammar *g, const elem *e, uint32_t cp)
{
    if (cp >= MS_GSPECIAL0 && e->neg) return 0; /* no text class (., [^...]) takes a special token */
    int in = 0;
    for (uint32_t i = 0; i < e->n && !in; i++) in = cp >= g->rng[2 * (e->a + i)] && cp <= g->rng[2 * (e->a + i) + 1];
    return in != e->neg;
}

static int may_match_range(const ms_grammar *g, const gpos *in, uint32_t lo, uint32_t hi);

/* Can a top of in match some code point in [lo, hi]? (A character begun: only those its bytes so
 * far allow; never a surrogate, which UTF-8 cannot hold: a character begun ED A0 can never end.) */
static int may_match(const ms_grammar *g, const gpos *in, uint32_t lo, uint32_t hi)
{
    return (lo <= 0xD7FF && may_match_range(g, in, lo, hi < 0xD7FF ? hi : 0xD7FF)) ||
           (hi >= 0xE000 && may_match_range(g, in, lo > 0xE000 ? lo : 0xE000, hi));
}

static int may_match_range(const ms_grammar *g, const gpos *in, uint32_t lo, uint32_t hi)
{
    for (int i = 0; i < in->n; i++) {
        const elem *e = &g->el[in->top[i]->pos];
        if (!e->neg) {
            for (uint32_t r = 0; r < e->n; r++)
                if (g->rng[2 * (e->a + r)] <= hi && g->rng[2 * (e->a + r) + 1] >= lo) return 1;
            continue;
        }
        /* negated: a point of [lo, hi] outside every range? walk up from lo past the ranges covering it */
        uint64_t at = lo;
        for (int moved = 1; moved && at <= hi;) {
            moved = 0;
            for (uint32_t r = 0; r < e->n && at <= hi; r++)
                if (g->rng[2 * (e->a + r)] <= at && g->rng[2 * (e->a + r) + 1] >= at) {
                    at = (uint64_t)g->rng[2 * (e->a + r) + 1] + 1;
                    moved = 1;
                }
        }
        if (at <= hi) return 1;
    }
    return 0;
}

/* The code points a character can still be: its bits so far, need continuation bytes to come. */
static void cp_range(uint32_t cp, int need, int total, uint32_t *lo, uint32_t *hi)
{
    static const uint32_t min_of[4] = {0, 0x80, 0x800, 0x10000};
    *lo = cp << (6 * need);
    *hi = *lo | ((1u << (6 * need)) - 1);
    if (*lo < min_of[total]) *lo = min_of[total];
    if (*hi > 0x10FFFF) *hi = 0x10FFFF;
}

static void pos_copy(gpos *d, const gpos *s)
{
    if (d->cap < s->n) d->top = ms_realloc(d->top, sizeof *d->top * (size_t)(d->cap = s->n + 8));
    if (s->n) memcpy(d->top, s->top, sizeof *d->top * (size_t)s->n);
    d->n = s->n;
    d->accept = s->accept;
    d->cp = s->cp;
    d->need = s->need;
    d->total = s->total;
}

static int step_symbol(const ms_grammar *g, pool *p, const gpos *in, uint32_t cp, gpos *out);

/* in + one byte -> out (out's memory reused); 1 when something may still follow or it is whole. */
static int step(const ms_grammar *g, pool *p, const gpos *in, uint8_t b, gpos *out)
{
    uint32_t cp;
    if (!in->need) {
        int k = b < 0x80 ? 0 : (b >> 5) == 6 && b >= 0xC2 ? 1 : (b >> 4) == 14 ? 2 : (b >> 3) == 30 && b <= 0xF4 ? 3 : -1;
        if (k < 0) return 0;
        if (k > 0) { /* a character begins: it is matched once whole, and only begun where it can */
            uint32_t c0 = b & (k == 1 ? 0x1fu : k == 2 ? 0x0fu : 0x07u), lo, hi;
            cp_range(c0, k, k, &lo, &hi);
            if (!in->n || lo > hi || !may_match(g, in, lo, hi)) return 0;
            pos_copy(out, in);
            out->accept = 0;
            out->cp = c0;
            out->need = k;
            out->total = k;
            return 1;
        }
        cp = b;
    } else {
        if ((b & 0xC0) != 0x80) return 0;
        cp = (in->cp << 6) | (b & 0x3fu);
        if (in->need > 1) {
            uint32_t lo, hi;
            cp_range(cp, in->need - 1, in->total, &lo, &hi);
            if (lo > hi || !may_match(g, in, lo, hi)) return 0;
            pos_copy(out, in);
            out->cp = cp;
            out->need = in->need - 1;
            return 1;
        }
        if (cp < 0x80 || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
    }
    return step_symbol(g, p, in, cp, out);
}

/* in + one whole symbol (a code point, or a special token's MS_GSPECIAL0 + k) -> out. */
static int step_symbol(const ms_grammar *g, pool *p, const gpos *in, uint32_t cp, gpos *out)
{
    out->n = 0;
    out->accept = 0;
    out->need = 0;
    out->cp = 0;
    out->total = 0;
    for (int i = 0; i < in->n; i++) {
        gnode *t = in->top[i];
        if (matches(g, &g->el[t->pos], cp)) expand(g, p, out, t->pos + 1, t->next);
    }
    return out->n > 0 || out->accept;
}

struct ms_gstate {
    const ms_grammar *g;
    pool *p;
    gpos at;
};

ms_gstate *ms_gstate_new(const ms_grammar *g)
{
    ms_gstate *s = ms_calloc(1, sizeof *s);
    s->g = g;
    s->p = pool_new();
    for (uint32_t a = 0; a < g->nalt[g->root]; a++) expand(g, s->p, &s->at, g->alt[g->alt0[g->root] + a], NULL);
    return s;
}

ms_gstate *ms_gstate_clone(const ms_gstate *s)
{
    ms_gstate *c = ms_calloc(1, sizeof *c);
    c->g = s->g;
    c->p = s->p; /* nodes never change: shared */
    c->p->refs++;
    pos_copy(&c->at, &s->at);
    return c;
}

void ms_gstate_free(ms_gstate *s)
{
    if (!s) return;
    pool_unref(s->p);
    free(s->at.top);
    free(s);
}

int ms_gstate_accept(ms_gstate *s, const char *b, size_t n)
{
    gpos x[2] = {{0}, {0}};
    pos_copy(&x[0], &s->at);
    int ok = 1, k = 0;
    for (size_t i = 0; i < n && ok; i++, k ^= 1) ok = step(s->g, s->p, &x[k], (uint8_t)b[i], &x[k ^ 1]);
    if (ok) pos_copy(&s->at, &x[k]);
    free(x[0].top);
    free(x[1].top);
    return ok;
}

/* The grammar's index of the special token named t[n], or -1. */
static int special_index(const ms_grammar *g, const char *t, size_t n)
{
    for (int k = 0; k < g->n_sp; k++)
        if (strlen(g->sp[k]) == n && !memcmp(g->sp[k], t, n)) return k;
    return -1;
}

static int accept_special(ms_gstate *s, int k)
{
    if (k < 0 || s->at.need) return 0;
    gpos out = {0};
    int ok = step_symbol(s->g, s->p, &s->at, MS_GSPECIAL0 + (uint32_t)k, &out);
    if (ok) pos_copy(&s->at, &out);
    free(out.top);
    return ok;
}

int ms_gstate_complete(const ms_gstate *s) { return s->at.accept && !s->at.need; }
int ms_gstate_open(const ms_gstate *s) { return s->at.n > 0; }

/* ---- the vocabulary and the mask ---- */

struct ms_gvocab {
    int64_t n_vocab;
    uint32_t *id_off, *id_len; /* [n_vocab] each id's bytes in text (length 0: none) */
    uint32_t *sp_len;  /* [n_vocab] a special token's text length (its text at id_off), 0: not special */
    int n_sp;
    int32_t *sp_id;    /* [n_sp] the special tokens, sorted by their text */
    int n;             /* tokens with text */
    int32_t *id;       /* [n] sorted by their bytes */
    uint32_t *off, *len, *lcp; /* [n] their bytes in text; the prefix shared with the one before */
    char *text;
    uint32_t max_len;
};

static const char *sort_text;
static const uint32_t *sort_off, *sort_len;

static int by_bytes(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = sort_len[x], ly = sort_len[y];
    int c = memcmp(sort_text + sort_off[x], sort_text + sort_off[y], lx < ly ? lx : ly);
    return c ? c : lx < ly ? -1 : lx > ly ? 1 : x < y ? -1 : 1;
}

ms_gvocab *ms_gvocab_new(const ms_tok *t)
{
    ms_gvocab *v = ms_calloc(1, sizeof *v);
    v->n_vocab = ms_tok_n_vocab(t);
    uint32_t *off = ms_malloc(sizeof *off * (size_t)v->n_vocab), *len = ms_malloc(sizeof *len * (size_t)v->n_vocab);
    size_t cap = 1 << 16, used = 0;
    v->text = ms_malloc(cap);
    int32_t *ids = ms_malloc(sizeof *ids * (size_t)v->n_vocab);
    v->sp_len = ms_calloc((size_t)v->n_vocab, sizeof *v->sp_len);
    v->sp_id = ms_malloc(sizeof *v->sp_id * (size_t)v->n_vocab);
    for (int32_t i = 0; i < (int32_t)v->n_vocab; i++) {
        char *s = NULL;
        size_t l = 0;
        off[i] = len[i] = 0;
        if (ms_tok_decode(t, &i, 1, &s, &l) != 0 || l == 0) {
            free(s);
            continue;
        }
        if (used + l > cap) v->text = ms_realloc(v->text, cap = (used + l) * 2);
        memcpy(v->text + used, s, l);
        off[i] = (uint32_t)used;
        used += l;
        free(s);
        if (ms_tok_is_special(t, i)) { /* its text names it in a grammar: <|call|> */
            v->sp_len[i] = (uint32_t)l;
            v->sp_id[v->n_sp++] = i;
            continue;
        }
        len[i] = (uint32_t)l;
        ids[v->n++] = i;
        if (l > v->max_len) v->max_len = (uint32_t)l;
    }
    sort_text = v->text, sort_off = off, sort_len = v->sp_len;
    qsort(v->sp_id, (size_t)v->n_sp, sizeof *v->sp_id, by_bytes);
    sort_len = len;
    qsort(ids, (size_t)v->n, sizeof *ids, by_bytes);
    v->id = ids;
    v->off = ms_malloc(sizeof *v->off * (size_t)(v->n ? v->n : 1));
    v->len = ms_malloc(sizeof *v->len * (size_t)(v->n ? v->n : 1));
    v->lcp = ms_malloc(sizeof *v->lcp * (size_t)(v->n ? v->n : 1));
    for (int i = 0; i < v->n; i++) {
        v->off[i] = off[ids[i]], v->len[i] = len[ids[i]];
        uint32_t k = 0;
        if (i)
            while (k < v->len[i] && k < v->len[i - 1] && v->text[v->off[i] + k] == v->text[v->off[i - 1] + k]) k++;
        v->lcp[i] = k;
    }
    v->id_off = off;
    v->id_len = len;
    return v;
}

const char *ms_gvocab_bytes(const ms_gvocab *v, int32_t id, size_t *len)
{
    *len = id >= 0 && id < v->n_vocab ? v->id_len[id] : 0;
    return *len ? v->text + v->id_off[id] : "";
}

/* The special token whose text is t[n], or -1 (binary search over the sorted ones). */
static int32_t special_of(const ms_gvocab *v, const char *t, size_t n)
{
    int lo = 0, hi = v->n_sp - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int32_t id = v->sp_id[mid];
        uint32_t l = v->sp_len[id];
        int c = memcmp(v->text + v->id_off[id], t, l < n ? l : n);
        if (!c) c = l < n ? -1 : l > n ? 1 : 0;
        if (!c) return id;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

int ms_gstate_accept_id(ms_gstate *s, const ms_gvocab *v, int32_t id)
{
    if (id < 0 || id >= v->n_vocab) return 0;
    if (v->id_len[id]) return ms_gstate_accept(s, v->text + v->id_off[id], v->id_len[id]);
    if (!v->sp_len[id]) return 0;
    return accept_special(s, special_index(s->g, v->text + v->id_off[id], v->sp_len[id]));
}

void ms_gvocab_free(ms_gvocab *v)
{
    if (!v) return;
    free(v->id);
    free(v->id_off);
    free(v->id_len);
    free(v->sp_len);
    free(v->sp_id);
    free(v->off);
    free(v->len);
    free(v->lcp);
    free(v->text);
    free(v);
}

static int by_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)*(gnode *const *)a, y = (uintptr_t)*(gnode *const *)b;
    return x < y ? -1 : x > y;
}

static int64_t mask_walk(const ms_gstate *s, const ms_gvocab *v, uint8_t *allowed);

int64_t ms_gstate_mask(const ms_gstate *s, const ms_gvocab *v, uint8_t *allowed)
{
    if (s->at.need) return mask_walk(s, v, allowed); /* inside a character: rare, not kept */
    pool *pl = s->p;
    gnode **key = ms_malloc(sizeof *key * (size_t)(s->at.n ? s->at.n : 1));
    if (s->at.n) memcpy(key, s->at.top, sizeof *key * (size_t)s->at.n);
    qsort(key, (size_t)s->at.n, sizeof *key, by_ptr);
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)s->at.accept;
    for (int i = 0; i < s->at.n; i++) h = (h ^ (uint64_t)(uintptr_t)key[i]) * 0x100000001b3ull;
    size_t nb = (size_t)v->n_vocab / 8 + 1;
    mcache *hit = NULL, *old = &pl->mc[0];
    for (int i = 0; i < MASK_CACHE && !hit; i++) {
        mcache *c = &pl->mc[i];
        if (c->v == v && c->hash == h && c->n == s->at.n && c->accept == s->at.accept &&
            (!c->n || !memcmp(c->top, key, sizeof *key * (size_t)c->n)))
            hit = c;
        if (!c->v || (old->v && c->used < old->used)) old = c;
    }
    if (hit) {
        free(key);
        hit->used = ++pl->tick;
        for (int64_t id = 0; id < v->n_vocab; id++) allowed[id] = (uint8_t)((hit->bits[id >> 3] >> (id & 7)) & 1);
        return hit->count;
    }
    int64_t count = mask_walk(s, v, allowed);
    free(old->top);
    old->v = v;
    old->top = key;
    old->n = s->at.n;
    old->accept = s->at.accept;
    old->hash = h;
    old->used = ++pl->tick;
    old->count = count;
    old->bits = ms_realloc(old->bits, nb); /* a vocabulary of its own size */
    memset(old->bits, 0, nb);
    for (int64_t id = 0; id < v->n_vocab; id++)
        if (allowed[id]) old->bits[id >> 3] |= (uint8_t)(1u << (id & 7));
    return count;
}

/* The mask walked: every token's bytes from the state, a dead prefix skipping the tokens
 * behind it; then the special tokens the grammar names where the text is. */
static int64_t mask_walk(const ms_gstate *s, const ms_gvocab *v, uint8_t *allowed)
{
    memset(allowed, 0, (size_t)v->n_vocab);
    pool *p = pool_new(); /* this walk's nodes: gone after it */
    gpos *st = ms_calloc((size_t)v->max_len + 1, sizeof *st); /* [max_len + 1] the state after d bytes */
    pos_copy(&st[0], &s->at);
    int64_t count = 0;
    uint32_t valid = 0; /* st[0 .. valid] belong to the current token's prefix */
    for (int i = 0; i < v->n; i++) {
        uint32_t d = v->lcp[i] < valid ? v->lcp[i] : valid, n = v->len[i];
        const uint8_t *b = (const uint8_t *)v->text + v->off[i];
        int ok = 1;
        for (; d < n; d++)
            if (!step(s->g, p, &st[d], b[d], &st[d + 1])) {
                ok = 0;
                break;
            }
        if (ok) {
            allowed[v->id[i]] = 1;
            count++;
            valid = n;
        } else { /* the first d + 1 bytes lead nowhere: so do the tokens that begin with them */
            valid = d;
            while (i + 1 < v->n && v->lcp[i + 1] >= d + 1) i++;
        }
    }
    for (uint32_t d = 0; d <= v->max_len; d++) free(st[d].top);
    free(st);
    pool_unref(p);
    /* the special tokens the grammar names where the text is now (none inside a character) */
    for (int i = 0; i < s->at.n && !s->at.need; i++) {
        const elem *e = &s->g->el[s->at.top[i]->pos];
        if (e->neg || e->n != 1 || s->g->rng[2 * e->a] < MS_GSPECIAL0) continue;
        const char *name = s->g->sp[s->g->rng[2 * e->a] - MS_GSPECIAL0];
        int32_t id = special_of(v, name, strlen(name));
        if (id >= 0 && !allowed[id]) allowed[id] = 1, count++;
    }
    return count;
}
