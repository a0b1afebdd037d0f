/* test_tok_hf: gpt-oss's tokenizer.json (o200k_harmony) loaded as released: every case of the official tiktoken core exact, decode round trips, refusals of what it does not read. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_clock.h"
#include "ms_err.h"
#include "ms_gptoss_model.h"
#include "ms_proc.h"
#include "ms_test.h"
#include "ms_tok.h"

static int has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

/* dir/cases.jsonl: every case's ids exact and its text back from them (its "decodes_to" when
 * the tokenizer normalises); allow: added tokens matched in every case (Hugging Face's encode),
 * else where the case says "allow_special" (tiktoken's). want: the number of cases. */
static void check_cases(const ms_tok *t, const char *dir, int want, int allow_all)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/cases.jsonl", dir);
    FILE *f = fopen(path, "r");
    T_CHECK(f != NULL, "cases.jsonl opens");
    if (!f) return;
    char *line = NULL;
    size_t cap = 0;
    int n = 0, bad_enc = 0, bad_dec = 0, specials = 0;
    double worst = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t je;
        json_t *c = json_loads(line, JSON_ALLOW_NUL, &je); /* texts hold U+0000 */
        T_CHECK(c != NULL, "case line %d parses: %s", n + 1, je.text);
        if (!c) continue;
        json_t *txt = json_object_get(c, "text"), *ids = json_object_get(c, "ids");
        int allow = allow_all || json_is_true(json_object_get(c, "allow_special"));
        specials += allow;
        int32_t *got = NULL;
        size_t ng = 0;
        double t0 = ms_now();
        int rc = ms_tok_encode(t, json_string_value(txt), json_string_length(txt), allow, &got, &ng);
        double dt = ms_now() - t0;
        if (dt > worst) worst = dt;
        int ok = rc == 0 && ng == json_array_size(ids);
        for (size_t i = 0; ok && i < ng; i++) ok = got[i] == (int32_t)json_integer_value(json_array_get(ids, i));
        if (!ok && bad_enc++ < 3)
            fprintf(stderr, "case %d: encode differs (%zu ids, want %zu): %.80s\n", n, ng, json_array_size(ids),
                    ms_t_show(json_string_value(txt), json_string_length(txt)));
        char *back = NULL;
        size_t nb = 0;
        json_t *back_want = json_object_get(c, "decodes_to") ? json_object_get(c, "decodes_to") : txt;
        if (rc == 0 && ms_tok_decode(t, got, ng, &back, &nb) == 0) {
            if (nb != json_string_length(back_want) || memcmp(back, json_string_value(back_want), nb)) bad_dec++;
        } else {
            bad_dec++;
        }
        free(back);
        free(got);
        json_decref(c);
        n++;
    }
    free(line);
    fclose(f);
    T_CHECK(n == want && bad_enc == 0, "%s: %d cases of the official encoder, %d with added tokens: every id sequence "
            "exact (%d differ)", dir, n, specials, bad_enc);
    T_CHECK(bad_dec == 0, "decode gives every case's text back byte for byte (%d differ)", bad_dec);
    printf("tokenizer.json: %d cases, slowest %.1f ms\n", n, worst * 1e3);
}

/* Qwen3's tokenizer.json as released: an NFC normaliser, added tokens that are not special
 * (<think>, <tool_call>: matched in any text, kept when specials are skipped), merges that are
 * not ignored (only listed pairs join), digits one by one; from the file and from its cache. */
static void check_qwen3(void)
{
    const char *p = ms_t_shared("fixtures/tokenizer/qwen3");
    if (!p) return;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", p);
    for (int pass = 0; pass < 2; pass++) { /* parsed, then from the cache the first load wrote */
        ms_tok *t = ms_tok_load(dir);
        T_CHECK(t != NULL, "Qwen3's tokenizer.json loads%s: %s", pass ? " again" : "", t ? "" : ms_err_msg());
        if (!t) return;
        T_CHECK(ms_tok_n_vocab(t) == 151669 && ms_tok_special_id(t, "<|im_end|>") == 151645 &&
                    ms_tok_special_id(t, "<think>") == 151667,
                "151,669 ids, <|im_end|> 151645, <think> 151667");
        check_cases(t, dir, 153, 1);
        /* <think> is plain text's token too; <|im_end|> only where specials are allowed */
        int32_t *ids = NULL;
        size_t n = 0;
        char *back = NULL;
        size_t nb = 0;
        int rc = ms_tok_encode(t, "<think>x<|im_end|>", 18, 0, &ids, &n);
        T_CHECK(rc == 0 && n >= 2 && ids[0] == 151667 && ids[n - 1] != 151645, "<think> matched without specials, "
                "<|im_end|> not");
        free(ids);
        int32_t two[2] = {151667, 151645};
        T_CHECK(ms_tok_decode_text(t, two, 2, 1, &back, &nb) == 0 && nb == 7 && !memcmp(back, "<think>", 7),
                "decoding without specials keeps <think>, drops <|im_end|>");
        free(back);
        ms_tok_free(t);
    }
}

/* What the loader does not read is refused, naming the field. */
static void check_refusals(const char *src)
{
    json_error_t je;
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", src);
    json_t *full = json_load_file(path, 0, &je);
    T_CHECK(full != NULL, "tokenizer.json parses");
    if (!full) return;
    static const char *edits[][3] = {
        {"model.ignore_merges", "\"yes\"", "ignore_merges must be a boolean"},
        {"normalizer", "{\"type\": \"NFKC\"}", "only NFC is supported"},
        {"model.type", "\"WordPiece\"", "model.type must be \"BPE\""},
        {"decoder", "null", "decoder must be ByteLevel"},
        {"pre_tokenizer", "{\"type\": \"Whitespace\"}", "pre_tokenizer must split by a regex"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        json_t *j = json_deep_copy(full);
        json_t *v = json_loads(edits[i][1], JSON_DECODE_ANY, &je);
        if (!strncmp(edits[i][0], "model.", 6))
            json_object_set_new(json_object_get(j, "model"), edits[i][0] + 6, v);
        else
            json_object_set_new(j, edits[i][0], v);
        char dir[1200];
        snprintf(dir, sizeof dir, "%s/edit%zu", ms_t_tmpdir("tok-hf"), i);
        char mk[1300];
        snprintf(mk, sizeof mk, "mkdir -p %s", dir);
        T_CHECK(system(mk) == 0, "mkdir");
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        json_dump_file(j, path, JSON_COMPACT);
        json_decref(j);
        ms_tok *t = ms_tok_load(dir);
        T_CHECK(!t && ms_err_code() == MS_EXIT_INPUT && has(ms_err_msg(), edits[i][2]) && has(ms_err_msg(), path),
                "%s = %s refused naming the file and field: %s", edits[i][0], edits[i][1], ms_err_msg());
        ms_tok_free(t);
    }
    json_decref(full);
}

/* A tokenizer.json from tiny gpt-oss (synth) with one edit: what it does to load and encode. */
static char *edited(const char *src, const char *name, void (*edit)(json_t *j))
{
    json_error_t je;
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", src);
    json_t *j = json_load_file(path, 0, &je);
    static char dir[1200];
    snprintf(dir, sizeof dir, "%s/%s", ms_t_tmpdir("tok-hf-hostile"), name);
    char mk[1300];
    snprintf(mk, sizeof mk, "mkdir -p %s", dir);
    T_CHECK(j && system(mk) == 0, "tokenizer.json parses; mkdir");
    edit(j);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    json_dump_file(j, path, JSON_COMPACT);
    json_decref(j);
    return dir;
}
static json_t *split_of(json_t *j)
{
    return json_object_get(json_array_get(json_object_get(json_object_get(j, "pre_tokenizer"), "pretokenizers"), 0), "pattern");
}
static void ed_backtrack(json_t *j) { json_object_set_new(split_of(j), "Regex", json_string("(a+)+$|\\s+|.")); }
static void ed_bad_regex(json_t *j) { json_object_set_new(split_of(j), "Regex", json_string("([a-z")); }
static void ed_dup_merge(json_t *j)
{
    json_t *m = json_object_get(json_object_get(j, "model"), "merges");
    json_array_append(m, json_array_get(m, json_array_size(m) - 1)); /* the last merge again */
}
static void ed_many_merges(json_t *j)
{
    json_t *m = json_object_get(json_object_get(j, "model"), "merges");
    json_t *last = json_array_get(m, json_array_size(m) - 1);
    for (int i = 0; i < 200000; i++) json_array_append(m, last); /* 22 MB of the same merge */
}
static void ed_no_byte(json_t *j)
{
    json_t *v = json_object_get(json_object_get(j, "model"), "vocab");
    json_t *id = json_incref(json_object_get(v, "\xc4\x81")); /* byte 0x01 (U+0101 in the byte-level alphabet) */
    json_object_del(v, "\xc4\x81");
    json_object_set_new(v, "\xc4\x81\xc4\x81\xc4\x81", id); /* its id now three of it */
}

/* Hostile tokenizer.json files (tiny gpt-oss's, edited): each refused naming the file, in
 * bounded time and memory. */
static void check_hostile(const char *src)
{
    /* a pattern that backtracks exponentially: the text is refused, not split for hours */
    ms_tok *t = ms_tok_load(edited(src, "backtrack", ed_backtrack));
    T_CHECK(t != NULL, "a backtracking pattern loads: %s", t ? "" : ms_err_msg());
    if (t) {
        int32_t *ids = NULL;
        size_t n = 0;
        double t0 = ms_now();
        int rc = ms_tok_encode(t, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!", 35, 0, &ids, &n);
        double dt = ms_now() - t0;
        T_CHECK(rc != 0 && ms_err_code() == MS_EXIT_INPUT && has(ms_err_msg(), "backtracks") && dt < 20,
                "(a+)+$ on 34 a's and a '!': refused after %.2f s: %s", dt, rc ? ms_err_msg() : "(encoded)");
        free(ids);
        rc = ms_tok_encode(t, "a few plain words", 17, 0, &ids, &n);
        T_CHECK(rc == 0 && n > 0, "the same tokenizer still encodes a text that does not backtrack");
        free(ids);
        ms_tok_free(t);
    }
    static const struct {
        const char *name;
        void (*edit)(json_t *);
        const char *why;
    } bad[] = {
        {"bad-regex", ed_bad_regex, "does not compile"},
        {"dup-merge", ed_dup_merge, "repeats a merge"},
        {"many-merges", ed_many_merges, "model.merges has"},
        {"no-byte", ed_no_byte, "byte 0x01"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *dir = edited(src, bad[i].name, bad[i].edit);
        uint64_t rss0 = ms_proc_peak_rss();
        ms_tok *b = ms_tok_load(dir);
        uint64_t grew = ms_proc_peak_rss() - rss0;
        T_CHECK(!b && ms_err_code() == MS_EXIT_INPUT && has(ms_err_msg(), bad[i].why) && has(ms_err_msg(), "tokenizer.json") &&
                    grew < (64u << 20),
                "%s: refused at load naming the file (exit 5), peak RSS +%llu KiB: %s", bad[i].name,
                (unsigned long long)(grew >> 10), ms_err_msg());
        ms_tok_free(b);
    }
}

/* The cache of a tokenizer.json's compiled form (MS_CACHE_DIR): the file is there after the first
 * load, a second load (from it) encodes as the first, and a cache file with a flipped byte is
 * not used (the tokenizer is parsed again, the same) and is written again. */
static void check_cache(const char *src, const char *cache)
{
    static const char *texts[] = {"Hello, world! 123 4567", "  spaces\n\nand lines\t", "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 <|return|>"};
    int32_t *want[3] = {0}, *got = NULL;
    size_t nw[3] = {0}, ng = 0;
    ms_tok *t = ms_tok_load(src);
    T_CHECK(t != NULL, "%s loads: %s", src, t ? "" : ms_err_msg());
    if (!t) return;
    for (int i = 0; i < 3; i++) ms_tok_encode(t, texts[i], strlen(texts[i]), 1, &want[i], &nw[i]);
    ms_tok_free(t);
    char *files = NULL;
    ms_t_runf(&files, NULL, "ls %s | grep '^tok-.*\\.bin$'", cache);
    char cf[1400];
    snprintf(cf, sizeof cf, "%s/%.*s", cache, files ? (int)strcspn(files, "\n") : 0, files ? files : "");
    size_t cl = 0;
    char *good = files && *files ? ms_t_read_file(cf, &cl) : NULL;
    T_CHECK(good && cl > 1000 && !memcmp(good, "MSTOKHF1", 8), "the compiled form is kept in %s (%zu bytes)", cache, cl);
    for (int pass = 0; pass < 2 && good; pass++) {
        if (pass == 1) { /* a flipped byte in the middle */
            char *bad = malloc(cl);
            memcpy(bad, good, cl);
            bad[cl / 2] ^= 0x20;
            ms_t_write_file_n(cf, bad, cl);
            free(bad);
        }
        t = ms_tok_load(src);
        int same = t != NULL;
        for (int i = 0; same && i < 3; i++) {
            same = ms_tok_encode(t, texts[i], strlen(texts[i]), 1, &got, &ng) == 0 && ng == nw[i] &&
                   !memcmp(got, want[i], sizeof *got * ng);
            free(got);
            got = NULL;
        }
        T_CHECK(same, "%s: the same ids as the parsed tokenizer", pass ? "a corrupt cache (not used)" : "from the cache");
        ms_tok_free(t);
    }
    size_t al = 0;
    char *again = good ? ms_t_read_file(cf, &al) : NULL;
    T_CHECK(again && al == cl && !memcmp(again, good, cl), "the corrupt cache file is written again");
    free(again);
    free(good);
    free(files);
    for (int i = 0; i < 3; i++) free(want[i]);
}

/* A Sequence of Splits (DeepSeek-V3's pre-tokenizer: digits in runs of up to three, then CJK
 * runs, then words), each splitting the pieces of the one before, Isolated (the text between
 * matches is a piece too): a text's ids are those of its pieces, each encoded alone by the
 * last split; loaded again from the cache, the same. */
static json_t *split_re(const char *re)
{
    return json_pack("{s:s,s:{s:s},s:s,s:b}", "type", "Split", "pattern", "Regex", re, "behavior", "Isolated", "invert", 0);
}
static const char *const words_re = "[A-Za-z]+| ?[^\\sA-Za-z0-9]+|\\s+|.";
static void ed_seq3(json_t *j)
{
    json_t *l = json_pack("[o,o,o,{s:s,s:b,s:b,s:b}]", split_re("\\p{N}{1,3}"),
                          split_re("[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+"), split_re(words_re),
                          "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 0);
    json_object_set_new(j, "pre_tokenizer", json_pack("{s:s,s:o}", "type", "Sequence", "pretokenizers", l));
}
static void ed_seq1(json_t *j)
{
    json_t *l = json_pack("[o,{s:s,s:b,s:b,s:b}]", split_re(words_re), "type", "ByteLevel", "add_prefix_space", 0,
                          "trim_offsets", 1, "use_regex", 0);
    json_object_set_new(j, "pre_tokenizer", json_pack("{s:s,s:o}", "type", "Sequence", "pretokenizers", l));
}
static void ed_seq5(json_t *j)
{
    json_t *l = json_pack("[o,o,o,o,o]", split_re("a"), split_re("b"), split_re("c"), split_re("d"), split_re("e"));
    json_object_set_new(j, "pre_tokenizer", json_pack("{s:s,s:o}", "type", "Sequence", "pretokenizers", l));
}

static void check_split_sequence(const char *src)
{
    char seq[1200], one[1200];
    /* edited() starts its directory afresh: each result moves to a directory of its own */
    snprintf(seq, sizeof seq, "%s/seq3", ms_t_tmpdir("tok-hf-seq3"));
    snprintf(one, sizeof one, "%s/seq1", ms_t_tmpdir("tok-hf-seq1"));
    T_CHECK(ms_t_runf(NULL, NULL, "mv %s %s", edited(src, "seq3", ed_seq3), seq) == 0 &&
                ms_t_runf(NULL, NULL, "mv %s %s", edited(src, "seq1", ed_seq1), one) == 0,
            "the two tokenizer.json written");
    static const char text[] = "abc12345 漢字xyz, 7 ひらがなカタカナ!\n  99999Ab";
    /* the pieces the three splits make, by hand */
    static const char *const pieces[] = {"abc", "123", "45", " ", "漢字", "xyz, ", "7", " ", "ひらがなカタカナ", "!\n  ",
                                         "999", "99", "Ab"};
    for (int pass = 0; pass < 2; pass++) { /* parsed, then from the cache */
        ms_tok *t3 = ms_tok_load(seq), *t1 = ms_tok_load(one);
        T_CHECK(t3 && t1, "a Sequence of three Splits loads (%s): %s", pass ? "cached" : "parsed", t3 ? "" : ms_err_msg());
        if (!t3 || !t1) {
            ms_tok_free(t3);
            ms_tok_free(t1);
            return;
        }
        int32_t *got = NULL, want[256];
        size_t ng = 0, nw = 0;
        for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
            int32_t *v = NULL;
            size_t nv = 0;
            ms_tok_encode(t1, pieces[i], strlen(pieces[i]), 0, &v, &nv);
            for (size_t k = 0; k < nv && nw < 256; k++) want[nw++] = v[k];
            free(v);
        }
        int rc = ms_tok_encode(t3, text, sizeof text - 1, 0, &got, &ng);
        T_CHECK(rc == 0 && ng == nw && !memcmp(got, want, sizeof *got * nw),
                "digits in runs of three, CJK runs, then words: the ids of the pieces each encoded alone (%zu ids, want %zu; %s)",
                ng, nw, pass ? "cached" : "parsed");
        char *back = NULL;
        size_t nb = 0;
        T_CHECK(rc == 0 && ms_tok_decode(t3, got, ng, &back, &nb) == 0 && nb == sizeof text - 1 && !memcmp(back, text, nb),
                "and they decode back to the text");
        free(back);
        free(got);
        ms_tok_free(t3);
        ms_tok_free(t1);
    }
    ms_tok *t5 = ms_tok_load(edited(src, "seq5", ed_seq5));
    T_CHECK(!t5 && ms_err_code() == MS_EXIT_INPUT && has(ms_err_msg(), "pretokenizers[4]") && has(ms_err_msg(), "up to 4 Splits"),
            "five Splits are refused, naming the one too many: %s", ms_err_msg());
    ms_tok_free(t5);
}

int main(void)
{
    ms_log_set_level(0);
    char syn[1200], cache[1200];
    snprintf(cache, sizeof cache, "%s/cache", ms_t_tmpdir("tok-hf-cache"));
    setenv("MS_CACHE_DIR", cache, 1); /* this test's own: the first load of each file parses it */
    snprintf(syn, sizeof syn, "%s/go", ms_t_tmpdir("tok-hf-synth"));
    T_CHECK(ms_gptoss_synth(syn, "gpt-oss-tiny", 0, 0, 7) == 0, "synth gpt-oss-tiny: %s", ms_err_msg());
    check_cache(syn, cache);
    check_hostile(syn);
    check_split_sequence(syn);
    const char *p = ms_t_shared("fixtures/tokenizer/o200k-harmony");
    if (!p) return ms_t_done();
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", p);
    T_CHECK(ms_tok_present(dir), "a directory with only tokenizer.json has a tokenizer");
    double t0 = ms_now();
    ms_tok *t = ms_tok_load(dir);
    T_CHECK(t != NULL, "tokenizer.json loads as released: %s", ms_err_msg());
    if (!t) return ms_t_done();
    printf("tokenizer.json loaded in %.2f s\n", ms_now() - t0);
    T_CHECK(ms_tok_n_vocab(t) == 200019, "ids 0..200018 (199,998 ranks + 21 specials): %d", ms_tok_n_vocab(t));
    T_CHECK(ms_tok_special_id(t, "<|return|>") == 200002 && ms_tok_special_id(t, "<|start|>") == 200006 &&
                ms_tok_special_id(t, "<|startoftext|>") == 199998,
            "the harmony specials at their ids");
    check_cases(t, dir, 300, 0);
    ms_tok_free(t);
    t0 = ms_now();
    t = ms_tok_load(dir); /* from the cache the first load wrote */
    T_CHECK(t != NULL, "tokenizer.json loads again (its cached compiled form): %s", t ? "" : ms_err_msg());
    if (!t) return ms_t_done();
    printf("tokenizer.json loaded again in %.3f s (its compiled form, cached)\n", ms_now() - t0);
    check_cases(t, dir, 300, 0);
    ms_tok_free(t);
    check_refusals(dir);
    check_qwen3();
    return ms_t_done();
}
