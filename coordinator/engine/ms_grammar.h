/* ms_grammar: context-free grammars over Unicode text (a GBNF-like syntax) and the tokens that may
 * come next: a compiled grammar, a generation's position in it, and the mask over a vocabulary. */
#ifndef MS_GRAMMAR_H
#define MS_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "ms_tok.h"

/* The syntax (docs/API.md, "Grammars"): rules `name ::= alternatives`, one or more per line or
 * continued on indented lines; alternatives separated by `|`; a sequence of items: "literal"
 * (escapes \n \r \t \\ \" \xHH \uHHHH), [character class] ([a-z0-9_], [^"\\], the same escapes, a
 * code point range a-b), a rule name, ( group ); each item may be followed by *, +, ?, {m},
 * {m,}, {m,n}; <TEXT> (no spaces: <|call|>, <tool_call>) is the tokenizer's special token of
 * that text, one symbol no text matches (no class or . takes it); # starts a comment to the
 * end of the line. Characters are Unicode code points; the text is UTF-8. The grammar's
 * sentences are those of the rule `root`.
 *
 * A compiled grammar: immutable, shared by every generation that uses it. NULL with ms_err set
 * (MS_EXIT_INPUT) naming the line and column of a syntax error, an undefined rule, a missing
 * root, or a rule that can reach itself without consuming a character (left recursion, or a
 * repetition of something that may be empty: their sentences could not be followed). */
typedef struct ms_grammar ms_grammar;
ms_grammar *ms_grammar_parse(const char *text, size_t len);
void ms_grammar_free(ms_grammar *g); /* accepts NULL */
/* The rules of the compiled grammar (after desugaring) and their alternatives, for tests and
 * for sizing: */
int ms_grammar_rules(const ms_grammar *g);

/* A generation's position: the text accepted so far is a prefix of some sentence. Owns its
 * nodes; g must outlive it. */
typedef struct ms_gstate ms_gstate;
ms_gstate *ms_gstate_new(const ms_grammar *g);
ms_gstate *ms_gstate_clone(const ms_gstate *s);
void ms_gstate_free(ms_gstate *s); /* accepts NULL */
/* Take the bytes b[n] (any split of UTF-8: a character may come in pieces) if the text stays a
 * prefix of a sentence: 1 and the state moved; 0 and the state unchanged otherwise. */
int ms_gstate_accept(ms_gstate *s, const char *b, size_t n);
/* 1 when the text so far is a whole sentence (no character pending). */
int ms_gstate_complete(const ms_gstate *s);
/* 1 when some character may still follow. */
int ms_gstate_open(const ms_gstate *s);

/* The tokens of a tokenizer as the bytes they write, sorted (a trie in order): built once per
 * tokenizer, read by every mask. Special tokens are kept apart, by their text: a grammar's
 * <TEXT> terminals, never text. */
typedef struct ms_gvocab ms_gvocab;
ms_gvocab *ms_gvocab_new(const ms_tok *t);
void ms_gvocab_free(ms_gvocab *v); /* accepts NULL */
/* The bytes token id writes (borrowed; *len 0 for a special token or an id outside). */
const char *ms_gvocab_bytes(const ms_gvocab *v, int32_t id, size_t *len);

/* Take token id (v's tokenizer): its bytes (ms_gstate_accept), or for a special token the
 * grammar's <TEXT> terminal of its text. 1 and the state moved; 0 and unchanged otherwise. */
int ms_gstate_accept_id(ms_gstate *s, const ms_gvocab *v, int32_t id);

/* allowed[id] = 1 for every token whose bytes the state accepts next and every special token
 * the grammar names where the text is (0 for the others; allowed has the tokenizer's n_vocab
 * entries). Tokens sharing a prefix are walked once, a dead
 * prefix skips all of them. Returns how many are allowed. */
int64_t ms_gstate_mask(const ms_gstate *s, const ms_gvocab *v, uint8_t *allowed);

#endif
