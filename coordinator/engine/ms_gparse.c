/* ms_gparse: the GBNF-like grammar syntax parsed and desugared into flat rules (groups and repetitions as rules of their own), checked for rules that reach themselves before a character. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_grammar_int.h"

int ms_grammar_rules(const ms_grammar *g) { return g->n_rules; }

void ms_grammar_free(ms_grammar *g)
{
    if (!g) return;
    free(g->el);
    free(g->rng);
    free(g->alt);
    free(g->alt0);
    free(g->nalt);
    for (int i = 0; i < g->n_sp; i++) free(g->sp[i]);
    free(g->sp);
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
    char **sp;      /* [nsp] special tokens named, by their text */
    int nsp, capsp;
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
        } else if (c == '<') { /* a special token by its text: <|call|>, <tool_call> */
            const char *t0 = p->s++;
            while (p->s < p->end && *p->s != '>' && *p->s != ' ' && *p->s != '\t' && *p->s != '\n' && *p->s != '"') p->s++;
            if (p->s >= p->end || *p->s != '>' || p->s == t0 + 1)
                return fail(p, "a special token is written <TEXT> (its text, brackets included, without spaces)");
            size_t tl = (size_t)(++p->s - t0);
            int k = 0;
            while (k < p->nsp && !(strlen(p->sp[k]) == tl && !memcmp(p->sp[k], t0, tl))) k++;
            if (k == p->nsp) {
                if (k == MS_GSPECIAL_MAX) return fail(p, "more than %d special tokens", MS_GSPECIAL_MAX);
                if (p->nsp == p->capsp) p->sp = ms_realloc(p->sp, sizeof *p->sp * (size_t)(p->capsp = p->capsp * 2 + 8));
                p->sp[p->nsp] = ms_malloc(tl + 1);
                memcpy(p->sp[p->nsp], t0, tl);
                p->sp[p->nsp++][tl] = 0;
            }
            uint32_t lh[2] = {MS_GSPECIAL0 + (uint32_t)k, MS_GSPECIAL0 + (uint32_t)k};
            seq_add(q, char_elem(p, lh, 1, 0));
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
    parser p = {text, text + len, text, 1, NULL, 0, 0, NULL, 0, 0, NULL, 0, 0, 0, 0};
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
    g->sp = p.sp;
    g->n_sp = p.nsp;
    p.sp = NULL;
    p.nsp = 0;
out:
    for (int i = 0; i < p.nr; i++) {
        for (int a = 0; a < p.r[i].n; a++) free(p.r[i].alts[a].e);
        free(p.r[i].alts);
        free(p.r[i].name);
    }
    free(p.r);
    free(p.rng);
    for (int i = 0; i < p.nsp; i++) free(p.sp[i]);
    free(p.sp);
    return g;
}

