/* grammar-mask: what constrained decoding costs a step on a real vocabulary: the mask of a chat
 * answer's grammar (structured output, a forced tool call) at every token of an answer, timed.
 * Built by tests/bench/grammar-mask.sh (target bench_grammar_mask); prints one JSON object.
 * usage: bench_grammar_mask TOKENIZER_DIR FAMILY MODE ROUNDS
 *   FAMILY: a family name (its chat format writes the grammar's root); MODE: json (a JSON Schema
 *   answer) or call (tool_choice required, a strict tool). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_clock.h"
#include "ms_err.h"
#include "ms_families.h"
#include "ms_grammar.h"
#include "ms_jgram.h"

#define SCHEMA                                                                                                         \
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":40},\"age\":{\"type\":\"integer\"}," \
    "\"email\":{\"type\":\"string\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":8},"       \
    "\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},\"city\":{\"type\":\"string\"},"   \
    "\"zip\":{\"type\":\"string\"}},\"required\":[\"street\",\"city\",\"zip\"]}},\"required\":[\"name\",\"age\","         \
    "\"email\",\"tags\",\"address\"]}"
#define ANSWER                                                                                                         \
    "{\"name\": \"Ada Lovelace\", \"age\": 36, \"email\": \"ada@example.org\", \"tags\": [\"mathematics\", "             \
    "\"analytical engine\", \"poetry\", \"notes\"], \"address\": {\"street\": \"12 St James's Square\", \"city\": "      \
    "\"London\", \"zip\": \"SW1Y 4JH\"}}"

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s TOKENIZER_DIR FAMILY json|call ROUNDS\n", argv[0]);
        return 2;
    }
    const ms_family *fam = ms_families_find(argv[2]);
    int call = !strcmp(argv[3], "call"), rounds = atoi(argv[4]);
    double t0 = ms_now();
    ms_tok *t = ms_tok_load(argv[1]);
    double t_load = ms_now() - t0;
    if (!t || !fam || !fam->chat) {
        fprintf(stderr, "grammar-mask: %s\n", t ? "no such family with a chat format" : ms_err_msg());
        return 1;
    }
    t0 = ms_now();
    ms_gvocab *v = ms_gvocab_new(t);
    double t_vocab = ms_now() - t0;
    char body[4096], answer[2048];
    if (call)
        snprintf(body, sizeof body, "{\"messages\":[],\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\","
                                    "\"function\":{\"name\":\"save_person\",\"strict\":true,\"parameters\":%s}}]}", SCHEMA);
    else
        snprintf(body, sizeof body, "{\"messages\":[],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                                    "{\"name\":\"person\",\"schema\":%s}}}", SCHEMA);
    /* the answer as the family writes it */
    const char *f = fam->chat->name;
    if (!strcmp(f, "harmony"))
        snprintf(answer, sizeof answer, call ? "<|channel|>commentary to=functions.save_person <|constrain|>json<|message|>%s<|call|>"
                                             : "<|channel|>final<|message|>%s", ANSWER);
    else if (!strcmp(f, "qwen3"))
        snprintf(answer, sizeof answer, call ? "<tool_call>\n{\"name\": \"save_person\", \"arguments\": %s}\n</tool_call>" : "%s",
                 ANSWER);
    else
        snprintf(answer, sizeof answer, call ? "<|tool_calls_section_begin|><|tool_call_begin|>functions.save_person:0"
                                               "<|tool_call_argument_begin|>%s<|tool_call_end|><|tool_calls_section_end|>"
                                             : "%s", ANSWER);
    json_t *b = json_loads(body, 0, NULL);
    char why[800] = "", *gt = NULL;
    const char *param = NULL;
    t0 = ms_now();
    int rc = ms_jgram_chat(b, fam->chat, t, NULL, 0, &gt, why, sizeof why, &param);
    ms_grammar *g = rc == 0 && gt ? ms_grammar_parse(gt, strlen(gt)) : NULL;
    double t_compile = ms_now() - t0;
    int32_t *ids = NULL;
    size_t n = 0;
    if (!g || ms_tok_encode(t, answer, strlen(answer), 1, &ids, &n) != 0) {
        fprintf(stderr, "grammar-mask: %s\n", g ? ms_err_msg() : why);
        return 1;
    }
    int64_t V = ms_tok_n_vocab(t);
    uint8_t *m = malloc((size_t)V);
    double *dt = malloc(sizeof *dt * (n + 1) * (size_t)rounds);
    size_t k = 0;
    int64_t allowed_sum = 0, allowed_max = 0;
    int ok = 1;
    for (int r = 0; r < rounds && ok; r++) {
        ms_gstate *s = ms_gstate_new(g);
        for (size_t i = 0; i <= n && ok; i++) {
            double a = ms_now();
            int64_t c = ms_gstate_mask(s, v, m);
            dt[k++] = ms_now() - a;
            if (r == 0) allowed_sum += c, allowed_max = c > allowed_max ? c : allowed_max;
            if (i < n) ok = m[ids[i]] && ms_gstate_accept_id(s, v, ids[i]);
        }
        ok = ok && ms_gstate_complete(s);
        ms_gstate_free(s);
    }
    if (!ok) {
        fprintf(stderr, "grammar-mask: the answer is not a sentence of its grammar\n");
        return 1;
    }
    qsort(dt, k, sizeof *dt, by_double);
    double sum = 0;
    for (size_t i = 0; i < k; i++) sum += dt[i];
    printf("{\"tokenizer\":\"%s\",\"n_vocab\":%lld,\"family\":\"%s\",\"mode\":\"%s\",\"answer_tokens\":%zu,\"rounds\":%d,"
           "\"tok_load_s\":%.4f,\"vocab_build_s\":%.4f,\"grammar_compile_s\":%.5f,\"mask_mean_ms\":%.3f,"
           "\"mask_median_ms\":%.3f,\"mask_p99_ms\":%.3f,\"mask_max_ms\":%.3f,\"allowed_mean\":%.1f,\"allowed_max\":%lld}\n",
           argv[1], (long long)V, argv[2], argv[3], n, rounds, t_load, t_vocab, t_compile, 1e3 * sum / (double)k,
           1e3 * dt[k / 2], 1e3 * dt[(size_t)((double)k * 0.99)], 1e3 * dt[k - 1], (double)allowed_sum / (double)(n + 1),
           (long long)allowed_max);
    free(dt);
    free(m);
    free(ids);
    free(gt);
    json_decref(b);
    ms_grammar_free(g);
    ms_gvocab_free(v);
    ms_tok_free(t);
    return 0;
}
