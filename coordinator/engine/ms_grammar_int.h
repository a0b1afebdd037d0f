/* ms_grammar_int.h: the compiled grammar's layout, shared by its parser (ms_gparse.c) and its matcher (ms_grammar.c); nothing outside them reads it. */
#ifndef MS_GRAMMAR_INT_H
#define MS_GRAMMAR_INT_H

#include <stddef.h>
#include <stdint.h>

#include "ms_grammar.h"

enum { E_END = 0, E_CHAR, E_REF };
#define MS_GSPECIAL0 0x110000u /* the first special token's symbol */
#define MS_GSPECIAL_MAX 4096  /* special tokens one grammar may name */
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
    char **sp;         /* [n_sp] the special tokens the grammar names (<|call|>): terminal k is the
                          one-point class MS_GSPECIAL0 + k, beyond every code point text has */
    int n_sp;
};

#endif
