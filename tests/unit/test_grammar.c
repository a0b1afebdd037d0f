/* test_grammar: the grammar engine: its syntax and refusals (naming line and column), which texts a
 * grammar takes (whole, in any byte split), a JSON grammar against jansson, and the mask over a
 * vocabulary = each token tried alone, at many positions. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_engine.h"
#include "ms_err.h"
#include "ms_sbuf.h"
#include "ms_synth.h"
#include "ms_grammar.h"
#include "ms_test.h"
#include "ms_tok.h"

/* JSON (RFC 8259) with at most 8 blanks between tokens, as the schema compiler writes it. */
static const char *json_gbnf =
    "root   ::= ws value ws\n"
    "value  ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws ( string ws \":\" ws value ( ws \",\" ws string ws \":\" ws value )* )? ws \"}\"\n"
    "array  ::= \"[\" ws ( value ( ws \",\" ws value )* )? ws \"]\"\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) )* \"\\\"\"\n"
    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
    "ws     ::= [ \\t\\n\\r]{0,8}   # bounded: a model cannot pad forever\n";

static int takes(const ms_grammar *g, const char *text, int split)
{
    ms_gstate *s = ms_gstate_new(g);
    size_t n = strlen(text);
    int ok = 1;
    for (size_t i = 0; i < n && ok; i += (size_t)split)
        ok = ms_gstate_accept(s, text + i, n - i < (size_t)split ? n - i : (size_t)split);
    ok = ok && ms_gstate_complete(s);
    ms_gstate_free(s);
    return ok;
}

static ms_grammar *parse(const char *t) { return ms_grammar_parse(t, strlen(t)); }

static void check_syntax(void)
{
    static const struct {
        const char *text, *says;
    } bad[] = {
        {"rot ::= \"a\"\n", "no rule 'root'"},
        {"root ::= item\n", "'item' is used but not defined"},
        {"root ::= \"abc\n", "line 1"},
        {"root ::= \"a\"\nroot ::= \"b\"\n", "defined twice"},
        {"root ::= root \"x\" | \"y\"\n", "'root' can reach itself"},
        {"root ::= (\"a\"?)*\n", "line 1, column"},
        {"root ::= [z-a]\n", "line 1, column"},
        {"root ::= \"a\" )\n", "a ) without its ("},
        {"root ::= \"\\q\"\n", "unknown escape"},
        {"root ::= [a]{3,2}\n", "{m,n}"},
        {"root = \"a\"\n", "::="},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ms_grammar *g = parse(bad[i].text);
        T_CHECK(!g && ms_err_code() == MS_EXIT_INPUT && strstr(ms_err_msg(), bad[i].says), "refused: %s -> %s (%s)",
                bad[i].text, bad[i].says, g ? "taken" : ms_err_msg());
        ms_grammar_free(g);
    }
}

static void check_takes(void)
{
    static const struct {
        const char *g, *text;
        int want;
    } cases[] = {
        {"root ::= \"yes\" | \"no\"", "yes", 1},
        {"root ::= \"yes\" | \"no\"", "no", 1},
        {"root ::= \"yes\" | \"no\"", "ye", 0},
        {"root ::= \"yes\" | \"no\"", "yess", 0},
        {"root ::= [a-c]+ \"!\"", "abcab!", 1},
        {"root ::= [a-c]+ \"!\"", "!", 0},
        {"root ::= [^x]*", "any words but one", 1},
        {"root ::= [^x]*", "max", 0},
        {"root ::= \"a\"{2,3}", "a", 0},
        {"root ::= \"a\"{2,3}", "aa", 1},
        {"root ::= \"a\"{2,3}", "aaa", 1},
        {"root ::= \"a\"{2,3}", "aaaa", 0},
        {"root ::= \"ab\"{2}", "abab", 1},
        {"root ::= \"ab\"{2,}", "ababababab", 1},
        {"root ::= x y\nx ::= \"1\" | \"\"\ny ::= \"2\"", "2", 1},
        {"root ::= x y\nx ::= \"1\" | \"\"\ny ::= \"2\"", "12", 1},
        {"root ::= [é-ê] \"\\u00e9\" [\\x41]", "êéA", 1},
        {"root ::= . .", "日本", 1},
        {"root ::= (\"a\" | \"b\" \"c\")* # a comment\n", "abcabca", 1},
        {"root ::=\n  \"a\"\n  | \"b\"\n", "b", 1},
        {"root ::= \"{\\\"n\\\": \" [0-9]{1,3} \"}\"", "{\"n\": 12}", 1},
        {"root ::= .*", "\xed\x9f\xbf", 1},     /* U+D7FF */
        {"root ::= .*", "\xed\xa6\x80", 0},     /* a surrogate: its second byte already refused */
        {"root ::= [^x]*", "\xee\x80\x80", 1},  /* U+E000 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ms_grammar *g = parse(cases[i].g);
        T_CHECK(g != NULL, "parses: %s (%s)", cases[i].g, g ? "" : ms_err_msg());
        if (!g) continue;
        int w = takes(g, cases[i].text, 100), b1 = takes(g, cases[i].text, 1), b2 = takes(g, cases[i].text, 2);
        T_CHECK(w == cases[i].want && b1 == w && b2 == w, "%s %s '%s' (whole, byte by byte and in pairs alike)", cases[i].g,
                cases[i].want ? "takes" : "refuses", cases[i].text);
        ms_grammar_free(g);
    }
    ms_grammar *g = parse("root ::= \"a\"{2,3}");
    ms_gstate *s = ms_gstate_new(g);
    int a = ms_gstate_accept(s, "aa", 2), c2 = ms_gstate_complete(s), o2 = ms_gstate_open(s);
    int b = ms_gstate_accept(s, "a", 1), c3 = ms_gstate_complete(s), o3 = ms_gstate_open(s);
    int x = ms_gstate_accept(s, "a", 1), c4 = ms_gstate_complete(s);
    T_CHECK(a && c2 && o2 && b && c3 && !o3 && !x && c4, "a{2,3}: whole and open after 2, whole and closed after 3, a 4th "
                                                         "refused and the state unchanged");
    ms_gstate_free(s);
    ms_grammar_free(g);
}

/* A character begun only where it can end: after ED (U+D000..U+DFFF), A0..BF would make a
 * surrogate, which no UTF-8 text holds: refused at that byte, so a mask never offers it. */
static void check_surrogates(void)
{
    ms_grammar *g = parse("root ::= .*");
    ms_gstate *s = g ? ms_gstate_new(g) : NULL;
    int ok = s && ms_gstate_accept(s, "\xed", 1) && !ms_gstate_accept(s, "\xa6", 1) && ms_gstate_accept(s, "\x9f", 1) &&
             ms_gstate_accept(s, "\xbf", 1) && ms_gstate_complete(s);
    T_CHECK(ok, ".* after ED: A6 refused (a surrogate), 9F BF taken (U+D7FF)");
    ms_gstate_free(s);
    ms_grammar_free(g);
}

static void check_json(void)
{
    ms_grammar *g = parse(json_gbnf);
    T_CHECK(g != NULL, "the JSON grammar parses: %s", g ? "" : ms_err_msg());
    if (!g) return;
    static const char *const texts[] = {
        "{}", "[]", "{\"a\": 1}", "{\"a\":[1,2.5,-3e+2,true,false,null],\"b\":{\"c\":\"d\\n\\u00e9\"}}", " [ \"x\" , { } ] ",
        "0", "-0.5", "\"\"", "\"日本\"", "{\"a\": 01}", "{\"a\" 1}", "[1,]", "{,}", "\"\\x\"", "1.", "-", "tru", "[1 2]",
        "{\"a\":1}}", "\"a\nb\"", "[\"\\ud83d\\ude00\"]", "{\"k\":\"v\"}          ",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        json_error_t e;
        json_t *v = json_loads(texts[i], JSON_DECODE_ANY, &e);
        int want = v != NULL && !strstr(texts[i], "          "); /* 10 trailing blanks: more than the bound */
        json_decref(v);
        T_CHECK(takes(g, texts[i], 1) == want && takes(g, texts[i], 3) == want, "JSON grammar %s '%s' as jansson %s",
                want ? "takes" : "refuses", texts[i], want ? "reads it" : "does not (or too many blanks)");
    }
    ms_grammar_free(g);
}

/* A synthetic tokenizer of `ranks` ranks in a test folder and grammar text compiled: 0, or -1
 * (a failed check) with nothing left to free. */
static int tok_and_grammar(const char *name, int ranks, const char *grammar, ms_tok **t, ms_grammar **g)
{
    const char *dir = ms_t_tmpdir(name);
    T_CHECK(ms_tok_write_synth(dir, ranks) == 0, "synth tokenizer: %s", ms_err_msg());
    *t = ms_tok_load(dir);
    *g = parse(grammar);
    T_CHECK(*t && *g, "tokenizer and grammar: %s", *g ? "" : ms_err_msg());
    if (*t && *g) return 0;
    ms_tok_free(*t);
    ms_grammar_free(*g);
    return -1;
}

/* The mask = every token tried alone on a clone, along a JSON text fed a token at a time. */
static void check_mask(void)
{
    ms_tok *t;
    ms_grammar *g;
    if (tok_and_grammar("grammar-tok", 2000, json_gbnf, &t, &g) != 0) return;
    ms_gvocab *v = ms_gvocab_new(t);
    int64_t V = ms_tok_n_vocab(t);
    uint8_t *m = ms_malloc((size_t)V);
    const char *text = "{\"name\": \"The weather\", \"tags\": [\"rain\", \"sun\"], \"t\": -12.5e3, \"ok\": true}";
    int32_t *ids = NULL;
    size_t n = 0;
    T_CHECK(ms_tok_encode(t, text, strlen(text), 0, &ids, &n) == 0 && n > 10, "the text encodes (%zu ids)", n);
    ms_gstate *s = ms_gstate_new(g);
    int same = 1, steps = 0, in_text = 1;
    int64_t most = 0;
    for (size_t k = 0; k <= n && same; k++) {
        int64_t c = ms_gstate_mask(s, v, m);
        int64_t brute = 0;
        for (int32_t id = 0; id < V; id++) {
            char *b = NULL;
            size_t bl = 0;
            int ok = 0;
            if (!ms_tok_is_special(t, id) && ms_tok_decode(t, &id, 1, &b, &bl) == 0 && bl > 0) {
                ms_gstate *x = ms_gstate_clone(s);
                ok = ms_gstate_accept(x, b, bl);
                ms_gstate_free(x);
            }
            ms_gstate *y = ms_gstate_clone(s); /* a special token's terminal: the JSON grammar names none */
            if (ms_gstate_accept_id(y, v, id) != ok) same = 0;
            ms_gstate_free(y);
            free(b);
            brute += ok;
            if (ok != m[id]) same = 0;
        }
        same &= brute == c;
        if (c > most) most = c;
        steps++;
        if (k == n) break;
        in_text &= m[ids[k]] == 1;
        char *b = NULL;
        size_t bl = 0;
        ms_tok_decode(t, &ids[k], 1, &b, &bl);
        ms_gstate_accept(s, b, bl);
        free(b);
    }
    T_CHECK(same && steps == (int)n + 1, "the mask = each token tried alone, at all %d positions of a JSON text (up to %lld "
                                         "tokens allowed)", steps, (long long)most);
    T_CHECK(in_text && ms_gstate_complete(s), "every token of the text was allowed where it came, and the text is whole");
    ms_gstate_free(s);
    free(ids);
    free(m);
    ms_gvocab_free(v);
    ms_grammar_free(g);
    ms_tok_free(t);
}

/* Special tokens as terminals: <|im_middle|> is the tokenizer's special id, never the text that
 * spells it; text classes never take a special token; the mask lists the ones named where the
 * text is (mask = each id tried alone, specials included, at every step). */
static void check_special(void)
{
    const char *bad[] = {"root ::= <>", "root ::= <a b>", "root ::= \"x\" <|im_end|"};
    for (int i = 0; i < 3; i++) {
        ms_grammar *g = parse(bad[i]);
        T_CHECK(!g && strstr(ms_err_msg(), "special token is written"), "refused: %s (%s)", bad[i], g ? "parsed" : ms_err_msg());
        ms_grammar_free(g);
    }
    ms_tok *t;
    ms_grammar *g;
    if (tok_and_grammar("grammar-special", 600,
                        "root ::= \"a\" <|im_middle|> [^x]* <|im_end|> | \"b\" .* <|im_end|> | \"c\" <|nowhere|>", &t, &g) != 0)
        return;
    ms_gvocab *v = ms_gvocab_new(t);
    int64_t V = ms_tok_n_vocab(t);
    int32_t mid = ms_tok_special_id(t, "<|im_middle|>"), end = ms_tok_special_id(t, "<|im_end|>");
    int32_t usr = ms_tok_special_id(t, "<|im_user|>");
    int32_t *hello = NULL;
    size_t nh = 0;
    ms_tok_encode(t, "hello <|im_end|> there", 22, 0, &hello, &nh); /* the marker's text as text */
    int32_t a_id = -1;
    for (int32_t id = 0; id < V && a_id < 0; id++) {
        size_t bl;
        const char *b = ms_gvocab_bytes(v, id, &bl);
        if (bl == 1 && b[0] == 'a') a_id = id;
    }
    /* the sentence: a <|im_middle|> hello... <|im_end|> */
    int32_t seq[64];
    size_t ns = 0;
    seq[ns++] = a_id;
    seq[ns++] = mid;
    for (size_t i = 0; i < nh && ns < 62; i++) seq[ns++] = hello[i];
    seq[ns++] = end;
    uint8_t *m = ms_malloc((size_t)V);
    ms_gstate *s = ms_gstate_new(g);
    int same = 1, took = 1, specials_seen = 0;
    for (size_t k = 0; k <= ns && same; k++) {
        int64_t c = ms_gstate_mask(s, v, m), brute = 0;
        for (int32_t id = 0; id < V; id++) {
            ms_gstate *x = ms_gstate_clone(s);
            int ok = ms_gstate_accept_id(x, v, id);
            ms_gstate_free(x);
            brute += ok;
            if (ok != m[id]) same = 0;
            if (ok && ms_tok_is_special(t, id)) specials_seen++;
        }
        same &= brute == c;
        if (k == ns) break;
        took &= m[seq[k]] == 1 && ms_gstate_accept_id(s, v, seq[k]);
        if (k == 0) same &= c > 1 && !m[mid];                  /* a, b or c first; no special */
        if (k == 1) same &= m[mid] == 1 && m[end] == 0 && m[usr] == 0; /* after a: <|im_middle|> alone */
    }
    T_CHECK(same && took && specials_seen > 0 && a_id >= 0 && mid >= 0 && end >= 0 && usr >= 0,
            "mask = each id tried alone (specials included) at every step of a <|im_middle|> text <|im_end|>; every id "
            "of the sentence allowed where it came (%d specials allowed in all)", specials_seen);
    T_CHECK(ms_gstate_complete(s) && !ms_gstate_open(s), "after <|im_end|> the sentence is whole and closed");
    ms_gstate *x = ms_gstate_new(g);
    int text_is_text = ms_gstate_accept(x, "a", 1) && !ms_gstate_accept(x, "<|im_middle|>", 13) &&
                       ms_gstate_accept_id(x, v, mid) && ms_gstate_accept(x, "<|im_end|>", 10) && !ms_gstate_complete(x) &&
                       !ms_gstate_accept_id(x, v, usr) && ms_gstate_accept_id(x, v, end) && ms_gstate_complete(x);
    ms_gstate_free(x);
    T_CHECK(text_is_text, "a marker's text is text, not the marker (and [^x]* takes no special token)");
    x = ms_gstate_new(g);
    ms_gstate_accept(x, "c", 1);
    int64_t nc = ms_gstate_mask(x, v, m);
    ms_gstate_free(x);
    T_CHECK(nc == 0, "a special token the tokenizer lacks (<|nowhere|>) is never allowed (%lld allowed)", (long long)nc);
    x = ms_gstate_new(g);
    ms_gstate_accept(x, "b", 1);
    int dot_special = ms_gstate_accept_id(x, v, usr);
    ms_gstate_free(x);
    T_CHECK(!dot_special, ". takes no special token");
    ms_gstate_free(s);
    free(m);
    free(hello);
    ms_gvocab_free(v);
    ms_grammar_free(g);
    ms_tok_free(t);
}

/* The engine under a grammar: each token is the argmax (greedy) over the tokens the grammar
 * allows after the ones before, checked against the logits row it came from; the answer is a
 * sentence (a bounded JSON object: it must end), and sampling with a seed twice gives the same. */
typedef struct {
    float *rows;   /* [n][V] the rows the tokens were picked from */
    int n, cap;
    int64_t V;
} rec;

static int on_rows(void *ctx, ms_eseq *s, const float *rows, int64_t n)
{
    (void)s;
    rec *r = ctx;
    for (int64_t i = 0; i < n; i++) {
        if (r->n == r->cap) r->rows = ms_realloc(r->rows, sizeof(float) * (size_t)r->V * (size_t)(r->cap = r->cap * 2 + 8));
        memcpy(r->rows + (size_t)r->n++ * (size_t)r->V, rows + i * r->V, sizeof(float) * (size_t)r->V);
    }
    return 0;
}

static void check_engine(void)
{
    const char *dir = ms_t_tmpdir("grammar-model");
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    T_CHECK(ms_synth_write(dir, &sh, 5) == 0, "synth tiny: %s", ms_err_msg());
    ms_engine_opts o = {0};
    o.model_dir = dir;
    o.run.n_threads = 2;
    o.run.ram_budget = 1ull << 30;
    o.run.baseline = 1;
    o.run.max_positions = 256;
    o.run.prompt_tokens = 16;
    /* drafts from a list (a sentence's own tokens, so some are right), verified under the grammar
     * (run 1; run 2 goes without) */
    char dfile[1200];
    snprintf(dfile, sizeof dfile, "%s/drafts.txt", dir);
    ms_tok *dt = ms_tok_load(dir);
    const char *dtext = "{\"n\": 12, \"ok\": true, \"w\": \"ab\"}";
    int32_t *dids = NULL;
    size_t nd = 0;
    FILE *df = dt && ms_tok_encode(dt, dtext, strlen(dtext), 0, &dids, &nd) == 0 ? fopen(dfile, "w") : NULL;
    for (size_t i = 0; df && i < nd; i++) fprintf(df, "%d ", dids[i]);
    if (df) fclose(df);
    free(dids);
    ms_tok_free(dt);
    o.speculate = 4;
    o.draft_file = dfile;
    ms_engine *e = ms_engine_open(&o);
    T_CHECK(e && ms_engine_tok(e), "engine opens with its tokenizer: %s", e ? "" : ms_err_msg());
    if (!e || !ms_engine_tok(e)) {
        ms_engine_free(e);
        return;
    }
    const ms_tok *t = ms_engine_tok(e);
    int64_t V = ms_engine_info(e)->vocab;
    const char *gt = "root ::= \"{\\\"n\\\": \" [0-9]{1,3} \", \\\"ok\\\": \" (\"true\" | \"false\") \", \\\"w\\\": \\\"\" [a-z ]{0,12} \"\\\"}\"";
    ms_grammar *g = parse(gt);
    T_CHECK(g != NULL, "the bounded grammar parses: %s", g ? "" : ms_err_msg());
    int32_t eos = ms_engine_info(e)->eos_id, prompt[4] = {5, 9, 13, 17};
    char *texts[3] = {0};
    uint64_t drafted = 0;
    for (int run = 0; g && run < 3; run++) {
        rec r = {NULL, 0, 0, V};
        ms_gen_params p = {.temperature = run ? 0.8f : 0, .top_p = 1, .seed = 7, .max_tokens = 120, .on_logits = on_rows,
                           .ctx = &r, .grammar = g, .end_ids = &eos, .n_end_ids = 1, .no_speculate = run == 2};
        ms_eseq *s = ms_engine_seq_new(e, prompt, 4, &p);
        while (s && !ms_engine_seq_done(s))
            if (ms_engine_step(e, &s, 1) != 0) break;
        size_t ng = 0;
        const int32_t *gen = s ? ms_engine_seq_tokens(s, &ng) : NULL;
        /* replay: each token is allowed where it came; greedy: the most likely allowed one */
        ms_gstate *x = ms_gstate_new(g);
        int ok = s && ms_engine_seq_done(s) && !strcmp(ms_engine_seq_finish_reason(s), "stop") && (int)ng == r.n;
        ms_sbuf text = {0};
        for (size_t k = 0; ok && k < ng; k++) {
            const float *row = r.rows + k * (size_t)V;
            int32_t best = -1;
            for (int32_t id = 0; id < V; id++) {
                char *b = NULL;
                size_t bl = 0;
                int allowed = 0;
                if (id == eos) allowed = ms_gstate_complete(x);
                else if (id < ms_tok_n_vocab(t) && !ms_tok_is_special(t, id) && ms_tok_decode(t, &id, 1, &b, &bl) == 0 && bl) {
                    ms_gstate *y = ms_gstate_clone(x);
                    allowed = ms_gstate_accept(y, b, bl);
                    ms_gstate_free(y);
                }
                free(b);
                if (allowed && (best < 0 || row[id] > row[best])) best = id;
                if (id == gen[k] && !allowed) ok = 0;
            }
            if (!run && gen[k] != best) ok = 0;
            if (gen[k] == eos) break;
            char *b = NULL;
            size_t bl = 0;
            ms_tok_decode(t, &gen[k], 1, &b, &bl);
            ms_gstate_accept(x, b, bl);
            ms_sbuf_add(&text, b, bl);
            free(b);
        }
        json_t *v = text.s ? json_loads(text.s, 0, NULL) : NULL;
        T_CHECK(ok && ms_gstate_complete(x) && v && json_is_integer(json_object_get(v, "n")) &&
                    json_is_boolean(json_object_get(v, "ok")),
                "%s: every token allowed where it came%s, the answer a whole sentence that parses: %s",
                run == 0 ? "greedy" : run == 1 ? "sampled" : "sampled, no drafts",
                run ? "" : " and the most likely allowed one", text.s ? text.s : "(none)");
        texts[run] = text.s ? ms_strdup(text.s) : NULL;
        json_decref(v);
        ms_sbuf_free(&text);
        ms_gstate_free(x);
        ms_engine_seq_free(s);
        free(r.rows);
        if (run == 1) {
            ms_engine_stats es;
            ms_engine_get_stats(e, &es);
            drafted = es.drafted;
        }
    }
    T_CHECK(drafted > 0 && texts[1] && texts[2] && !strcmp(texts[1], texts[2]),
            "sampled with drafts (%llu proposed) = without (the same draws)", (unsigned long long)drafted);
    for (int i = 0; i < 3; i++) free(texts[i]);
    ms_grammar_free(g);
    ms_engine_free(e);
}

/* run --grammar: a bounded grammar's answer is whole and parses; a bad grammar is exit 5 naming
 * its file, line and column, before the model opens. */
static void check_cli(void)
{
    const char *tmp = ms_t_tmpdir("grammar-cli"), *bin = ms_t_bin("moestream");
    char model[1200], good[1200], bad[1200];
    snprintf(model, sizeof model, "%s/m", tmp);
    snprintf(good, sizeof good, "%s/good.gbnf", tmp);
    snprintf(bad, sizeof bad, "%s/bad.gbnf", tmp);
    ms_t_write_file(good, "# an answer\nroot ::= \"{\\\"n\\\": \" [0-9]{1,3} \", \\\"ok\\\": \" (\"true\" | \"false\") \"}\"\n");
    ms_t_write_file(bad, "root ::= \"a\" (\n");
    int sy = ms_t_runf(NULL, NULL, "%s synth --out %s --force", bin, model);
    char *out = NULL, *err = NULL;
    int st = ms_t_runf(&out, NULL, "%s run --model %s --ids 5,9,13 -n 60 --grammar %s --json --quiet --temperature 0.7 --seed 4",
                       bin, model, good);
    json_t *o = out ? json_loads(out, 0, NULL) : NULL;
    const char *text = json_string_value(json_object_get(o, "text"));
    json_t *v = text ? json_loads(text, 0, NULL) : NULL;
    T_CHECK(sy == 0 && st == 0 && v && json_is_integer(json_object_get(v, "n")),
            "run --grammar: the answer is a whole sentence that parses (%s)", text ? text : "-");
    json_decref(v);
    json_decref(o);
    free(out);
    st = ms_t_runf(NULL, &err, "%s run --model %s --ids 5 --grammar %s", bin, model, bad);
    T_CHECK(st == MS_EXIT_INPUT && err && strstr(err, bad) && strstr(err, "line 2, column 1") && !strstr(err, "plan:"),
            "a bad grammar: exit 5 naming the file, line and column, before the model opens (%d: %s)", st, err ? err : "");
    free(err);
}

int main(void)
{
    ms_log_set_level(0);
    check_syntax();
    check_takes();
    check_surrogates();
    check_json();
    check_mask();
    check_special();
    check_engine();
    check_cli();
    return ms_t_done();
}
