/* test_pcache: the prefix cache: the longest kept prefix shorter than the prompt is found, and
 * continuing its state gives the logits of prefilling the whole prompt, bit for bit, from RAM or
 * after a spill to disk; the RAM and disk budgets hold (spills, evictions); a later cache on the
 * same directory finds the states; a corrupt file is dropped, never used. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_families.h"
#include "ms_pcache.h"
#include "ms_synth.h"
#include "ms_test.h"

#define N 40

static ms_model *m;
static int64_t V;
static int32_t ids[N];
static float *ref; /* [N][V] the whole prompt at once */

static ms_seq *state_of(size_t n)
{
    ms_seq *s = ms_seq_new(m);
    float *l = malloc(sizeof(float) * (size_t)V);
    T_CHECK(ms_model_forward(m, s, ids, (int64_t)n, 0, l) == 0, "prefill %zu", n);
    free(l);
    return s;
}

/* Continue s (holding ids[0..k)) with the rest: its logits equal the whole prompt's rows. */
static int continues(ms_seq *s, size_t k)
{
    float *got = malloc(sizeof(float) * (size_t)((N - k) * V));
    int ok = ms_model_forward(m, s, ids + k, (int64_t)(N - k), 1, got) == 0 &&
             !memcmp(got, ref + k * V, sizeof(float) * (size_t)((N - k) * V));
    free(got);
    return ok;
}

static int files_in(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) n += strstr(de->d_name, ".state") != NULL;
    if (d) closedir(d);
    return n;
}

int main(void)
{
    ms_log_set_level(0);
    char dir[1200], sd[1200];
    snprintf(dir, sizeof dir, "%s/m", ms_t_tmpdir("pcache"));
    snprintf(sd, sizeof sd, "%s/states", ms_t_tmpdir("pcache"));
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    T_CHECK(ms_synth_write(dir, &sh, 5) == 0, "synth: %s", ms_err_msg());
    ms_run_opts o = {.n_threads = 2, .ram_budget = 4ull << 30, .baseline = 1, .max_positions = 64};
    m = ms_families_open(dir, &o);
    T_CHECK(m != NULL, "open: %s", ms_err_msg());
    if (!m) return ms_t_done();
    V = ms_model_get_info(m)->vocab;
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 29 + 7) % (V - 20));
    ref = malloc(sizeof(float) * (size_t)(N * V));
    ms_seq *w = ms_seq_new(m);
    T_CHECK(ms_model_forward(m, w, ids, N, 1, ref) == 0, "the whole prompt");
    ms_seq_free(w);

    /* RAM only, room for everything */
    ms_pcache *c = ms_pcache_new(m, 64ull << 20, NULL, 0, "kimi-k3", "0123456789abcdef");
    size_t len = 0;
    T_CHECK(!ms_pcache_take(c, ids, N, &len), "an empty cache finds nothing");
    const size_t at[3] = {10, 20, 30};
    for (int i = 0; i < 3; i++) {
        ms_seq *s = state_of(at[i]);
        ms_pcache_put(c, ids, at[i], s);
        ms_seq_free(s);
    }
    ms_seq *s = ms_pcache_take(c, ids, N, &len);
    T_CHECK(s && len == 30 && continues(s, 30), "the longest prefix (30 of 40 tokens), continued: the whole prompt's logits");
    ms_seq_free(s);
    s = ms_pcache_take(c, ids, 30, &len);
    T_CHECK(s && len == 20, "a prompt of exactly a kept prefix gets the next shorter one (a token must run): %zu", len);
    ms_seq_free(s);
    int32_t other[N];
    memcpy(other, ids, sizeof other);
    other[15] ^= 1;
    s = ms_pcache_take(c, other, N, &len);
    T_CHECK(s && len == 10 && ms_seq_pos(s) == 10, "a prompt that differs at token 15 gets the 10-token state");
    ms_seq_free(s);
    ms_pcache_stats st;
    ms_pcache_get_stats(c, &st);
    T_CHECK(st.lookups == 4 && st.hits == 3 && st.tokens_reused == 60 && st.entries_ram == 3, "stats: %llu lookups, %llu hits",
            (unsigned long long)st.lookups, (unsigned long long)st.hits);
    ms_pcache_free(c);

    /* RAM for about one state: the others spill to the directory, and come back from there */
    s = state_of(10);
    ms_sbuf b = {0};
    ms_seq_save(s, &b);
    size_t one = b.n;
    ms_sbuf_free(&b);
    ms_seq_free(s);
    c = ms_pcache_new(m, one * 3 / 2 + 4096, sd, 64ull << 20, "kimi-k3", "0123456789abcdef");
    T_CHECK(c != NULL, "a cache with a directory: %s", c ? "" : ms_err_msg());
    for (int i = 0; c && i < 3; i++) {
        s = state_of(at[i]);
        ms_pcache_put(c, ids, at[i], s);
        ms_seq_free(s);
    }
    ms_pcache_get_stats(c, &st);
    T_CHECK(st.bytes_ram <= one * 3 / 2 + 4096 && st.spills >= 1 && files_in(sd) == (int)st.entries_disk,
            "the RAM budget holds: %llu spilled to %d files", (unsigned long long)st.spills, files_in(sd));
    s = ms_pcache_take(c, ids, 25, &len); /* 20: spilled by now (the 30 came last) */
    T_CHECK(s && len == 20 && continues(s, 20), "a spilled state read back from its file continues bit for bit");
    ms_seq_free(s);
    ms_pcache_free(c);

    /* Pinned states (jobs' shared beginnings): kept in their own room whatever comes and goes;
     * one more than the room holds is not kept; unpinned ones never push a pinned one out. */
    c = ms_pcache_new(m, one * 3 / 2 + 4096, NULL, 0, "kimi-k3", "0123456789abcdef"); /* one unpinned state */
    ms_pcache_set_pin_room(c, 2 * one + 8192);                                         /* two pinned */
    const size_t pins[3] = {12, 22, 27}, others[3] = {10, 20, 30};
    for (int i = 0; i < 3; i++) {
        s = state_of(pins[i]);
        ms_pcache_put_pinned(c, ids, pins[i], s); /* the third does not fit the room */
        ms_seq_free(s);
    }
    for (int i = 0; i < 3; i++) {
        s = state_of(others[i]);
        ms_pcache_put(c, ids, others[i], s);
        ms_seq_free(s);
    }
    ms_pcache_get_stats(c, &st);
    size_t l12 = 0, l22 = 0, l27 = 0;
    ms_seq *a12 = ms_pcache_take(c, ids, 13, &l12), *a22 = ms_pcache_take(c, ids, 23, &l22), *a27 = ms_pcache_take(c, ids, 28, &l27);
    T_CHECK(a12 && l12 == 12 && continues(a12, 12) && a22 && l22 == 22 && continues(a22, 22),
            "pinned states stay while unpinned ones come and go (%zu, %zu)", l12, l22);
    T_CHECK(a27 && l27 == 22, "a pinned state beyond its room is not kept (the longest kept: %zu)", l27);
    T_CHECK(st.entries_ram == 3 && st.evictions == 2, "pins + one unpinned in RAM (%llu), the other two evicted (%llu)",
            (unsigned long long)st.entries_ram, (unsigned long long)st.evictions);
    ms_seq_free(a12), ms_seq_free(a22), ms_seq_free(a27);
    ms_pcache_free(c);
    c = ms_pcache_new(m, 0, NULL, 0, "kimi-k3", "0123456789abcdef"); /* no room but pins': nothing else kept */
    ms_pcache_set_pin_room(c, one + 4096);
    s = state_of(10);
    ms_pcache_put(c, ids, 10, s);
    ms_pcache_get_stats(c, &st);
    T_CHECK(st.entries_ram == 0 && st.evictions == 0, "without room an unpinned state is not even kept for a moment");
    ms_seq_free(s);
    ms_pcache_free(c);

    /* a new cache on the directory finds what the last one left; a corrupt file is dropped */
    c = ms_pcache_new(m, 0, sd, 64ull << 20, "kimi-k3", "0123456789abcdef");
    ms_pcache_get_stats(c, &st);
    T_CHECK(st.entries_disk >= 1, "the next run indexes the directory (%llu states)", (unsigned long long)st.entries_disk);
    ms_pcache *other_model = ms_pcache_new(m, 0, sd, 64ull << 20, "kimi-k3", "fedcba9876543210");
    ms_pcache_stats so;
    ms_pcache_get_stats(other_model, &so);
    T_CHECK(so.entries_disk == 0, "another model's cache ignores those files");
    ms_pcache_free(other_model);
    char p[1600];
    DIR *d = opendir(sd);
    struct dirent *de;
    int spoilt = 0;
    while (d && (de = readdir(d)))
        if (strstr(de->d_name, "-20.state")) {
            snprintf(p, sizeof p, "%s/%s", sd, de->d_name);
            ms_t_flip_byte(p, 200, 0x40);
            spoilt = 1;
        }
    if (d) closedir(d);
    s = ms_pcache_take(c, ids, 25, &len);
    T_CHECK(spoilt && (!s || len < 20) && (!s || continues(s, len)), "a corrupt file is dropped, not used (%s)",
            s ? "a shorter state instead" : "nothing found");
    ms_seq_free(s);
    ms_pcache_free(c);

    /* a disk budget of one state: the older ones are deleted */
    c = ms_pcache_new(m, 0, sd, one + 8192, "kimi-k3", "0123456789abcdef");
    ms_pcache_get_stats(c, &st);
    T_CHECK(st.bytes_disk <= one + 8192 && files_in(sd) == (int)st.entries_disk,
            "the disk budget holds: %llu states, %d files", (unsigned long long)st.entries_disk, files_in(sd));
    ms_pcache_free(c);
    free(ref);
    ms_model_free(m);
    return ms_t_done();
}
