/* ms_grammar: a GBNF-like grammar compiled to flat rules, matched as a set of parse stacks (shared, hash-consed nodes) over code points, and the mask of the tokens that may come next (a sorted vocabulary walked once, dead prefixes skipped). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_grammar.h"

/* ---- the compiled grammar ---- */

enum { E_END = 0, E_CHAR, E_REF };
typedef struct {
    uint8_t kind, neg; /* E_CHAR: neg 1 = any code point outside the ranges */
    uint32_t a, n;     /* E_CHAR: ranges [a, a + n) of g->rng (lo, hi pairs); E_REF: a = the rule */
} elem;

struct ms_grammar {
    elem *el;          /* [n_el] every alternative's elements, each run ended by E_END */
    size_t n_el;
    uint32_t *rng;     /* [2 * n_rng] code point ranges lo, hi (inclusive) */
    size_t n_rng;
    uint32_t *alt;     /* [n_alt] first element of each alternative, by rule */
    uint32_t *alt0, *nalt; /* [n_rules] a rule's alternatives: alt[alt0[r] .. alt0[r] + nalt[r]) */
    int n_rules, root;
};

int ms_grammar_rules(const ms_grammar *g) { return g->n_rules; }

void ms_grammar_free(ms_grammar *g)
{
    if (!g) return;
    free(g->el);
    free(g->rng);
    free(g->alt);
    free(g->alt0);
    free(g->nalt);
    free(g);
}

/* ---- parsing ---- */

typedef struct {
    elem *e;
    int n, cap;
} seq;

typedef struct {
    seq *alts;
    int n, cap;
    char *name;     /* NULL: made for a group or a repetition */
    int defined, line, col;
} trule;

typedef struct {
    const char *s, *end, *line_start;
    int line;
    trule *r;
    int nr, cap;
    uint32_t *rng;
    size_t nrng, caprng;
    int failed;
    long total;     /* elements made so far: bounded (a matcher's expansion recurses through them) */
} parser;

#define MAX_ELEMS 30000

static void fail(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(parser *p, const char *fmt, ...)
{
    if (p->failed) return;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ms_err_set("grammar line %d, column %d: %s", p->line, (int)(p->s - p->line_start) + 1, msg);
    ms_err_set_code(MS_EXIT_INPUT);
    p->failed = 1;
}

static void seq_add(seq *q, elem e)
{
    if (q->n == q->cap) q->e = ms_realloc(q->e, sizeof *q->e * (size_t)(q->cap = q->cap * 2 + 8));
    q->e[q->n++] = e;
}

static int rule_new(parser *p, const char *name, size_t nl)
{
    if (p->nr == p->cap) p->r = ms_realloc(p->r, sizeof *p->r * (size_t)(p->cap = p->cap * 2 + 16));
    trule *r = &p->r[p->nr];
    memset(r, 0, sizeof *r);
    if (name) {
        r->name = ms_malloc(nl + 1);
        memcpy(r->name, name, nl);
        r->name[nl] = 0;
    }
    r->line = p->line;
    r->col = (int)(p->s - p->line_start) + 1;
    return p->nr++;
}

static int rule_named(parser *p, const char *name, size_t nl)
{
    for (int i = 0; i < p->nr; i++)
        if (p->r[i].name && strlen(p->r[i].name) == nl && !memcmp(p->r[i].name, name, nl)) return i;
    return rule_new(p, name, nl);
}

static void alt_add(parser *p, int r, seq q)
{
    trule *t = &p->r[r];
    if (t->n == t->cap) t->alts = ms_realloc(t->alts, sizeof *t->alts * (size_t)(t->cap = t->cap * 2 + 4));
    t->alts[t->n++] = q;
}

static elem char_elem(parser *p, const uint32_t *lohi, int n, int neg)
{
    elem e = {E_CHAR, (uint8_t)neg, (uint32_t)p->nrng, (uint32_t)n};
    for (int i = 0; i < n; i++) {
        if (p->nrng == p->caprng) p->rng = ms_realloc(p->rng, sizeof *p->rng * 2 * (p->caprng = p->caprng * 2 + 16));
        p->rng[2 * p->nrng] = lohi[2 * i];
        p->rng[2 * p->nrng + 1] = lohi[2 * i + 1];
        p->nrng++;
    }
    return e;
}

static void skip(parser *p)
{
    while (p->s < p->end) {
        if (*p->s == '#') {
            while (p->s < p->end && *p->s != '\n') p->s++;
        } else if (*p->s == '\n') {
            p->s++;
            p->line++;
            p->line_start = p->s;
        } else if (*p->s == ' ' || *p->s == '\t' || *p->s == '\r') {
            p->s++;
        } else {
            break;
        }
    }
}

static int is_name(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'; }

/* A name followed by ::= starts the next rule. */
static int rule_start(const parser *p)
{
    const char *q = p->s;
    while (q < p->end && is_name(*q)) q++;
    if (q == p->s) return 0;
    while (q < p->end && (*q == ' ' || *q == '\t')) q++;
    return p->end - q >= 3 && !memcmp(q, "::=", 3);
}

/* One UTF-8 character or escape of a literal or class; -1 after fail(). */
static int64_t char_at(parser *p)
{
    const unsigned char *u = (const unsigned char *)p->s;
    if (p->s >= p->end) return fail(p, "unexpected end of the grammar"), -1;
    if (*u == '\\') {
        if (p->end - p->s < 2) return fail(p, "an escape at the end"), -1;
        char c = p->s[1];
        p->s += 2;
        switch (c) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': return '\\';
        case '"': return '"';
        case '\'': return '\'';
        case ']': return ']';
        case '[': return '[';
        case '-': return '-';
        case '^': return '^';
        case '/': return '/';
        case 'x':
        case 'u':
        case 'U': {
            int k = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            uint32_t v = 0;
            for (int i = 0; i < k; i++) {
                char h = p->s < p->end ? *p->s : 0;
                int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                if (d < 0) return fail(p, "\\%c needs %d hex digits", c, k), -1;
                v = v * 16 + (uint32_t)d;
                p->s++;
            }
            if (v > 0x10FFFF) return fail(p, "code point U+%X is beyond Unicode", v), -1;
            return v;
        }
        default: return p->s--, fail(p, "unknown escape \\%c", c), -1;
        }
    }
    int k = *u < 0x80 ? 1 : (*u >> 5) == 6 ? 2 : (*u >> 4) == 14 ? 3 : (*u >> 3) == 30 ? 4 : 0;
    if (!k || p->end - p->s < k) return fail(p, "invalid UTF-8"), -1;
    uint32_t v = k == 1 ? *u : k == 2 ? (*u & 0x1fu) : k == 3 ? (*u & 0x0fu) : (*u & 0x07u);
    for (int i = 1; i < k; i++) {
        if ((u[i] & 0xC0) != 0x80) return fail(p, "invalid UTF-8"), -1;
        v = (v << 6) | (u[i] & 0x3fu);
    }
    p->s += k;
    return v;
}

static int alternatives(parser *p, int r, int in_group);

/* Move q's elements [from, n) into a rule of their own (one alternative): its index. */
static int wrap(parser *p, seq *q, int from)
{
    int r = rule_new(p, NULL, 0);
    seq w = {0};
    for (int i = from; i < q->n; i++) seq_add(&w, q->e[i]);
    q->n = from;
    alt_add(p, r, w);
    return r;
}

/* X? as a rule: X | empty. */
static int optional_of(parser *p, elem x)
{
    int r = rule_new(p, NULL, 0);
    seq a = {0}, b = {0};
    seq_add(&a, x);
    alt_add(p, r, a);
    alt_add(p, r, b);
    return r;
}

/* X* as a rule: X R | empty. */
static int star_of(parser *p, elem x)
{
    int r = rule_new(p, NULL, 0);
    seq a = {0}, b = {0};
    seq_add(&a, x);
    seq_add(&a, (elem){E_REF, 0, (uint32_t)r, 0});
    alt_add(p, r, a);
    alt_add(p, r, b);
    return r;
}

/* A decimal count (at most 7 digits), or -1 when there is none. */
static long digits(parser *p)
{
    long v = -1;
    for (int k = 0; p->s < p->end && *p->s >= '0' && *p->s <= '9' && k < 7; k++, p->s++) v = (v < 0 ? 0 : v * 10) + (*p->s - '0');
    return v;
}

/* The quantifier after the item q[from, n), if any. */
static void quantify(parser *p, seq *q, int from)
{
    if (p->s >= p->end || !*p->s || !strchr("*+?{", *p->s) || q->n == from) return;
    if (q->n - from > 1) { /* a literal of several characters: one item */
        int r = wrap(p, q, from);
        seq_add(q, (elem){E_REF, 0, (uint32_t)r, 0});
    }
    elem x = q->e[--q->n];
    char c = *p->s++;
    long lo = 0, hi = -1; /* hi -1: no bound */
    if (c == '?') hi = 1;
    else if (c == '+') lo = 1;
    else if (c == '{') { /* the text need not end with a NUL: digits read by hand */
        if ((lo = digits(p)) < 0 || lo > 1000) return fail(p, "{m,n}: m is a count up to 1000");
        if (p->s < p->end && *p->s == '}') hi = lo, p->s++;
        else if (p->s < p->end && *p->s == ',') {
            p->s++;
            if (p->s < p->end && *p->s == '}') p->s++;
            else {
                hi = digits(p);
                if (hi < lo || hi > 1000 || p->s >= p->end || *p->s != '}') return fail(p, "{m,n}: n is a count from m up to 1000");
                p->s++;
            }
        } else {
            return fail(p, "expected } or , in {m,n}");
        }
    }
    if ((p->total += lo + 3 * (hi > lo ? hi - lo : 1)) > MAX_ELEMS)
        return fail(p, "the grammar grows past %d elements with its repetitions (a smaller bound, or a rule repeated "
                       "with *, keeps it small)", MAX_ELEMS);
    for (long i = 0; i < lo; i++) seq_add(q, x);
    if (hi < 0) {
        seq_add(q, (elem){E_REF, 0, (uint32_t)star_of(p, x), 0});
    } else if (hi > lo) { /* nested optionals: R1 ::= X | e; Rk ::= X R(k-1) | e */
        int r = optional_of(p, x);
        for (long k = 1; k < hi - lo; k++) {
            int o = rule_new(p, NULL, 0);
            seq a = {0}, b = {0};
            seq_add(&a, x);
            seq_add(&a, (elem){E_REF, 0, (uint32_t)r, 0});
            alt_add(p, o, a);
            alt_add(p, o, b);
            r = o;
        }
        seq_add(q, (elem){E_REF, 0, (uint32_t)r, 0});
    }
}

static void sequence(parser *p, seq *q, int in_group)
{
    for (;;) {
        skip(p);
        if (p->failed || p->s >= p->end || *p->s == '|' || *p->s == ')' || (!in_group && rule_start(p))) return;
        int from = q->n;
        char c = *p->s;
        if (++p->total > MAX_ELEMS) return fail(p, "the grammar has more than %d elements", MAX_ELEMS);
        if (c == '"') {
            p->s++;
            while (p->s < p->end && *p->s != '"' && !p->failed) {
                int64_t v = char_at(p);
                if (v < 0) return;
                uint32_t lh[2] = {(uint32_t)v, (uint32_t)v};
                if (++p->total > MAX_ELEMS) return fail(p, "the grammar has more than %d elements", MAX_ELEMS);
                seq_add(q, char_elem(p, lh, 1, 0));
            }
            if (p->s >= p->end) return fail(p, "a literal without its closing quote");
            p->s++;
        } else if (c == '[') {
            p->s++;
            int neg = p->s < p->end && *p->s == '^';
            if (neg) p->s++;
            uint32_t lh[2 * 64];
            int n = 0;
            while (p->s < p->end && *p->s != ']' && !p->failed) {
                int64_t a = char_at(p), b = a;
                if (a < 0) return;
                if (p->end - p->s >= 2 && *p->s == '-' && p->s[1] != ']') {
                    p->s++;
                    if ((b = char_at(p)) < 0) return;
                    if (b < a) return fail(p, "a range from U+%X down to U+%X", (unsigned)a, (unsigned)b);
                }
                if (n == 64) return fail(p, "more than 64 ranges in one class");
                lh[2 * n] = (uint32_t)a, lh[2 * n + 1] = (uint32_t)b, n++;
            }
            if (p->s >= p->end) return fail(p, "a class without its closing ]");
            p->s++;
            if (!n && !neg) return fail(p, "an empty class matches nothing");
            seq_add(q, char_elem(p, lh, n, neg));
        } else if (c == '.') {
            p->s++;
            seq_add(q, char_elem(p, NULL, 0, 1));
        } else if (c == '(') {
            p->s++;
            int r = rule_new(p, NULL, 0);
            if (alternatives(p, r, 1) != 0) return;
            if (p->s >= p->end || *p->s != ')') return fail(p, "a group without its closing )");
            p->s++;
            seq_add(q, (elem){E_REF, 0, (uint32_t)r, 0});
        } else if (is_name(c)) {
            const char *n0 = p->s;
            while (p->s < p->end && is_name(*p->s)) p->s++;
            seq_add(q, (elem){E_REF, 0, (uint32_t)rule_named(p, n0, (size_t)(p->s - n0)), 0});
        } else {
            return fail(p, "unexpected '%c'", c);
        }
        quantify(p, q, from);
    }
}

static int alternatives(parser *p, int r, int in_group)
{
    for (;;) {
        seq q = {0};
        sequence(p, &q, in_group);
        if (p->failed) {
            free(q.e);
            return -1;
        }
        alt_add(p, r, q);
        if (p->s < p->end && *p->s == '|') {
            p->s++;
            continue;
        }
        return 0;
    }
}

/* Rules that can reach themselves before any character: their expansion would not end. */
static int check_left(parser *p)
{
    int n = p->nr;
    uint8_t *nul = ms_calloc((size_t)n, 1);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < n; r++) {
            if (nul[r]) continue;
            for (int a = 0; a < p->r[r].n && !nul[r]; a++) {
                int all = 1;
                for (int i = 0; i < p->r[r].alts[a].n && all; i++) {
                    elem *e = &p->r[r].alts[a].e[i];
                    all = e->kind == E_REF && nul[e->a];
                }
                if (all) nul[r] = 1, changed = 1;
            }
        }
    }
    /* edges r -> q: q is expanded at r's start (after nullable rules only); a cycle among them
     * is a rule reaching itself. Depth-first, colouring (0 new, 1 on the path, 2 done). */
    int *e0 = ms_calloc((size_t)n + 1, sizeof *e0), ne = 0; /* [n + 1] rule r's edges: to[e0[r] .. e0[r + 1]) */
    for (int r = 0; r < n; r++) {
        e0[r] = ne;
        for (int a = 0; a < p->r[r].n; a++)
            for (int i = 0; i < p->r[r].alts[a].n; i++) {
                elem *e = &p->r[r].alts[a].e[i];
                if (e->kind != E_REF) break;
                ne++;
                if (!nul[e->a]) break;
            }
    }
    e0[n] = ne;
    int *to = ms_malloc(sizeof *to * (size_t)(ne ? ne : 1)), k = 0;
    for (int r = 0; r < n; r++)
        for (int a = 0; a < p->r[r].n; a++)
            for (int i = 0; i < p->r[r].alts[a].n; i++) {
                elem *e = &p->r[r].alts[a].e[i];
                if (e->kind != E_REF) break;
                to[k++] = (int)e->a;
                if (!nul[e->a]) break;
            }
    uint8_t *colour = ms_calloc((size_t)n, 1);
    int *stack = ms_malloc(sizeof *stack * (size_t)n), *edge = ms_malloc(sizeof *edge * (size_t)n);
    int bad = -1;
    for (int r0 = 0; r0 < n && bad < 0; r0++) {
        if (colour[r0]) continue;
        int sp = 0;
        stack[sp] = r0, edge[sp] = e0[r0], colour[r0] = 1, sp++;
        while (sp > 0 && bad < 0) {
            int r = stack[sp - 1];
            if (edge[sp - 1] == e0[r + 1]) {
                colour[r] = 2;
                sp--;
                continue;
            }
            int q = to[edge[sp - 1]++];
            if (colour[q] == 1) bad = q;
            else if (!colour[q]) stack[sp] = q, edge[sp] = e0[q], colour[q] = 1, sp++;
        }
    }
    free(e0);
    free(to);
    free(colour);
    free(stack);
    free(edge);
    if (bad >= 0) {
        trule *t = &p->r[bad];
        if (t->name)
            ms_err_set("grammar: rule '%s' can reach itself before any character (left recursion, or a repetition of "
                       "something that may be empty)", t->name);
        else
            ms_err_set("grammar line %d, column %d: a group or repetition here can repeat without consuming a character "
                       "(something that may be empty, repeated)", t->line, t->col);
        ms_err_set_code(MS_EXIT_INPUT);
    }
    free(nul);
    return bad >= 0 ? -1 : 0;
}

ms_grammar *ms_grammar_parse(const char *text, size_t len)
{
    parser p = {text, text + len, text, 1, NULL, 0, 0, NULL, 0, 0, 0, 0};
    ms_grammar *g = NULL;
    for (;;) {
        skip(&p);
        if (p.s >= p.end) break;
        const char *n0 = p.s;
        while (p.s < p.end && is_name(*p.s)) p.s++;
        size_t nl = (size_t)(p.s - n0);
        if (!nl) {
            fail(&p, "expected a rule name");
            goto out;
        }
        while (p.s < p.end && (*p.s == ' ' || *p.s == '\t')) p.s++;
        if (p.end - p.s < 3 || memcmp(p.s, "::=", 3)) {
            fail(&p, "expected ::= after the rule name");
            goto out;
        }
        p.s += 3;
        int r = rule_named(&p, n0, nl);
        if (p.r[r].defined) {
            fail(&p, "rule '%.*s' is defined twice", (int)nl, n0);
            goto out;
        }
        p.r[r].defined = 1;
        if (alternatives(&p, r, 0) != 0) goto out;
        if (p.s < p.end && *p.s == ')') {
            fail(&p, "a ) without its (");
            goto out;
        }
    }
    int root = -1;
    for (int i = 0; i < p.nr; i++) {
        if (p.r[i].name && !p.r[i].defined) {
            ms_err_set("grammar: rule '%s' is used but not defined", p.r[i].name);
            ms_err_set_code(MS_EXIT_INPUT);
            goto out;
        }
        if (p.r[i].name && !strcmp(p.r[i].name, "root")) root = i;
    }
    if (root < 0) {
        ms_err_set("grammar: no rule 'root' (the grammar's sentences are root's)");
        ms_err_set_code(MS_EXIT_INPUT);
        goto out;
    }
    if (check_left(&p) != 0) goto out;
    g = ms_calloc(1, sizeof *g);
    g->n_rules = p.nr;
    g->root = root;
    g->alt0 = ms_malloc(sizeof *g->alt0 * (size_t)p.nr);
    g->nalt = ms_malloc(sizeof *g->nalt * (size_t)p.nr);
    size_t n_alt = 0, n_el = 0;
    for (int r = 0; r < p.nr; r++) {
        n_alt += (size_t)p.r[r].n;
        for (int a = 0; a < p.r[r].n; a++) n_el += (size_t)p.r[r].alts[a].n + 1;
    }
    g->alt = ms_malloc(sizeof *g->alt * (n_alt ? n_alt : 1));
    g->el = ms_malloc(sizeof *g->el * (n_el ? n_el : 1));
    for (int r = 0; r < p.nr; r++) {
        g->alt0[r] = (uint32_t)(r ? g->alt0[r - 1] + g->nalt[r - 1] : 0);
        g->nalt[r] = (uint32_t)p.r[r].n;
        for (int a = 0; a < p.r[r].n; a++) {
            g->alt[g->alt0[r] + (uint32_t)a] = (uint32_t)g->n_el;
            if (p.r[r].alts[a].n) memcpy(g->el + g->n_el, p.r[r].alts[a].e, sizeof *g->el * (size_t)p.r[r].alts[a].n);
            g->n_el += (size_t)p.r[r].alts[a].n;
            g->el[g->n_el++] = (elem){E_END, 0, 0, 0};
        }
    }
    g->rng = p.rng;
    g->n_rng = p.nrng;
    p.rng = NULL;
out:
    for (int i = 0; i < p.nr; i++) {
        for (int a = 0; a < p.r[i].n; a++) free(p.r[i].alts[a].e);
        free(p.r[i].alts);
        free(p.r[i].name);
    }
    free(p.r);
    free(p.rng);
    return g;
}

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

typedef struct {
    pchunk *top;
    gnode **tab;       /* open addressing by (pos, next) */
    size_t cap, count;
    int refs;
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
    } else {
        gnode *cont = node(p, pos + 1, next);
        for (uint32_t a = 0; a < g->nalt[e->a]; a++) expand(g, p, out, g->alt[g->alt0[e->a] + a], cont);
    }
}

static int matches(const ms_grammar *g, const elem *e, uint32_t cp)
{
    int in = 0;
    for (uint32_t i = 0; i < e->n && !in; i++) in = cp >= g->rng[2 * (e->a + i)] && cp <= g->rng[2 * (e->a + i) + 1];
    return in != e->neg;
}

/* Can a top of in match some code point in [lo, hi]? (A character begun: only those its bytes so
 * far allow.) */
static int may_match(const ms_grammar *g, const gpos *in, uint32_t lo, uint32_t hi)
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

int ms_gstate_complete(const ms_gstate *s) { return s->at.accept && !s->at.need; }
int ms_gstate_open(const ms_gstate *s) { return s->at.n > 0; }

/* ---- the vocabulary and the mask ---- */

struct ms_gvocab {
    int64_t n_vocab;
    uint32_t *id_off, *id_len; /* [n_vocab] each id's bytes in text (length 0: none) */
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
    for (int32_t i = 0; i < (int32_t)v->n_vocab; i++) {
        char *s = NULL;
        size_t l = 0;
        off[i] = len[i] = 0;
        if (ms_tok_is_special(t, i) || ms_tok_decode(t, &i, 1, &s, &l) != 0 || l == 0) {
            free(s);
            continue;
        }
        if (used + l > cap) v->text = ms_realloc(v->text, cap = (used + l) * 2);
        memcpy(v->text + used, s, l);
        off[i] = (uint32_t)used, len[i] = (uint32_t)l;
        used += l;
        free(s);
        ids[v->n++] = i;
        if (l > v->max_len) v->max_len = (uint32_t)l;
    }
    sort_text = v->text, sort_off = off, sort_len = len;
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

void ms_gvocab_free(ms_gvocab *v)
{
    if (!v) return;
    free(v->id);
    free(v->id_off);
    free(v->id_len);
    free(v->off);
    free(v->len);
    free(v->lcp);
    free(v->text);
    free(v);
}

int64_t ms_gstate_mask(const ms_gstate *s, const ms_gvocab *v, uint8_t *allowed)
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
    return count;
}
