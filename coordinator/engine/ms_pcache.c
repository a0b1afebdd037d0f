/* ms_pcache: prefix states in RAM (serialized) and in a directory, LRU, longest-prefix lookup (ms_ptrie). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ms_xxh.h" /* XXH3, dispatched */

#include "ms_err.h"
#include "ms_file.h"
#include "ms_pcache.h"
#include "ms_ptrie.h"
#include "ms_sbuf.h"
#include "ms_seqfile.h"

typedef struct {
    int32_t *ids;          /* [n] the tokens the state holds */
    size_t n;
    char *bytes;           /* ms_seq_save's bytes while in RAM, else NULL */
    size_t nbytes;         /* their size (in RAM or in the file) */
    char *path;            /* its file when spilled, else NULL */
    uint64_t used;         /* the clock when last put or taken */
    size_t at;             /* its index in the cache's e */
    int pinned;            /* 1: never evicted or spilled (ms_pcache_put_pinned) */
} entry;

struct ms_pcache {
    ms_model *m;
    uint64_t ram_max, disk_max; /* the states that come and go (LRU) */
    uint64_t pin_max;           /* room for pinned states, beside ram_max */
    uint64_t pinned_bytes;      /* RAM held by pinned states (<= pin_max) */
    char *dir, family[32], fingerprint[17];
    entry **e;             /* [n] every entry (owned), in no order */
    size_t n, cap;
    ms_ptrie *tree;        /* ids -> entry: the longest kept prefix of a prompt in one walk */
    uint64_t clock;
    ms_pcache_stats st;
};

static void entry_drop(ms_pcache *c, entry *x, int unlink_file)
{
    void *was = ms_ptrie_del(c->tree, x->ids, x->n);
    MS_ASSERT(was == x);
    if (x->bytes) c->st.bytes_ram -= x->nbytes, c->st.entries_ram--;
    if (x->pinned) c->pinned_bytes -= x->nbytes;
    if (x->path) {
        c->st.bytes_disk -= x->nbytes, c->st.entries_disk--;
        if (unlink_file) unlink(x->path);
    }
    free(x->ids);
    free(x->bytes);
    free(x->path);
    size_t i = x->at;
    free(x);
    if (i != --c->n) { /* the last entry takes its place */
        c->e[i] = c->e[c->n];
        c->e[i]->at = i;
    }
}

/* The least recently used entry in RAM (ram = 1) or on disk, or NULL. A scan: it runs once per
 * eviction, which also writes or frees a whole state. */
static entry *lru(const ms_pcache *c, int ram)
{
    entry *best = NULL;
    for (size_t i = 0; i < c->n; i++) {
        entry *x = c->e[i];
        if (!x->pinned && (ram ? x->bytes != NULL : x->path != NULL) && (!best || x->used < best->used)) best = x;
    }
    return best;
}

static void fit_disk(ms_pcache *c)
{
    entry *x;
    while (c->st.bytes_disk > c->disk_max && (x = lru(c, 0))) {
        entry_drop(c, x, 1);
        c->st.evictions++;
    }
}

/* Move x out of RAM: into a file when there is a directory with room, else drop it. */
static void spill(ms_pcache *c, entry *x)
{
    ms_seq *s = c->dir && x->nbytes <= c->disk_max ? ms_seq_load(c->m, x->bytes, x->nbytes) : NULL;
    if (s) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%016llx-%zu.state", c->dir, (unsigned long long)XXH3_64bits(x->ids, sizeof(int32_t) * x->n),
                 x->n);
        ms_seqfile_info info = {0};
        snprintf(info.family, sizeof info.family, "%s", c->family);
        snprintf(info.fingerprint, sizeof info.fingerprint, "%s", c->fingerprint);
        info.tokens = x->ids;
        info.n_tokens = x->n;
        int ok = ms_seqfile_write(p, &info, s) == 0;
        ms_seq_free(s);
        if (ok) {
            free(x->bytes);
            x->bytes = NULL;
            c->st.bytes_ram -= x->nbytes, c->st.entries_ram--;
            x->path = ms_strdup(p);
            c->st.bytes_disk += x->nbytes, c->st.entries_disk++;
            c->st.spills++;
            fit_disk(c);
            return;
        }
        ms_log(1, "prefix cache: %s", ms_err_msg()); /* the state is dropped; serving goes on */
    }
    entry_drop(c, x, 1);
    c->st.evictions++;
}

static void fit_ram(ms_pcache *c)
{
    entry *x;
    while (c->st.bytes_ram - c->pinned_bytes > c->ram_max && (x = lru(c, 1))) spill(c, x);
}

/* A new entry for ids[n] (not kept yet). */
static entry *add(ms_pcache *c, const int32_t *ids, size_t n)
{
    if (c->n == c->cap) c->e = ms_realloc(c->e, sizeof *c->e * (c->cap = c->cap * 2 + 16));
    entry *x = ms_calloc(1, sizeof *x);
    x->at = c->n;
    c->e[c->n++] = x;
    x->ids = ms_malloc(sizeof(int32_t) * (n + 1));
    memcpy(x->ids, ids, sizeof(int32_t) * n);
    x->n = n;
    x->used = ++c->clock;
    void *was = ms_ptrie_put(c->tree, ids, n, x);
    MS_ASSERT(was == NULL);
    return x;
}

/* State files of this model already in dir (a previous run's): indexed by their headers. */
static void index_dir(ms_pcache *c)
{
    DIR *d = opendir(c->dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 7 || strcmp(de->d_name + l - 6, ".state")) continue;
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", c->dir, de->d_name);
        ms_seqfile_info info;
        struct stat sb;
        if (stat(p, &sb) != 0 || ms_seqfile_peek(p, &info) != 0) continue;
        if (!strcmp(info.family, c->family) && !strcmp(info.fingerprint, c->fingerprint) && info.n_tokens > 0 &&
            !ms_ptrie_get(c->tree, info.tokens, info.n_tokens)) {
            entry *x = add(c, info.tokens, info.n_tokens);
            x->path = ms_strdup(p);
            x->nbytes = (size_t)sb.st_size;
            x->used = 0; /* older than anything of this run */
            c->st.bytes_disk += x->nbytes, c->st.entries_disk++;
        }
        ms_seqfile_info_clear(&info);
    }
    if (d) closedir(d);
    fit_disk(c);
}

ms_pcache *ms_pcache_new(ms_model *m, uint64_t ram_bytes, const char *dir, uint64_t disk_bytes, const char *family,
                         const char *fingerprint)
{
    if (dir && mkdir(dir, 0700) != 0 && errno != EEXIST) {
        ms_err_set("cannot make the state cache directory %s: %s", dir, strerror(errno));
        ms_err_set_code(MS_EXIT_IO);
        return NULL;
    }
    struct stat sb;
    if (dir && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(dir, W_OK) != 0)) {
        ms_err_set("the state cache %s is not a writable directory", dir);
        ms_err_set_code(MS_EXIT_IO);
        return NULL;
    }
    /* States read back from it become answers: a directory others can write to could be
     * given states that answer wrongly, so it must be this user's alone. */
    char why[256];
    if (dir && ms_file_private_dir(dir, why, sizeof why) != 0) {
        ms_err_set("the state cache %s is refused: %s (use a directory of your own, mode 0700)", dir, why);
        ms_err_set_code(MS_EXIT_IO);
        return NULL;
    }
    ms_pcache *c = ms_calloc(1, sizeof *c);
    c->m = m;
    c->tree = ms_ptrie_new();
    c->ram_max = ram_bytes;
    c->disk_max = dir ? disk_bytes : 0;
    c->dir = dir ? ms_strdup(dir) : NULL;
    snprintf(c->family, sizeof c->family, "%s", family);
    snprintf(c->fingerprint, sizeof c->fingerprint, "%s", fingerprint ? fingerprint : "");
    if (c->dir) index_dir(c);
    return c;
}

void ms_pcache_free(ms_pcache *c)
{
    if (!c) return;
    while (c->n) entry_drop(c, c->e[c->n - 1], 0);
    free(c->e);
    ms_ptrie_free(c->tree);
    free(c->dir);
    free(c);
}

ms_seq *ms_pcache_take(ms_pcache *c, const int32_t *ids, size_t n, size_t *len)
{
    c->st.lookups++;
    for (;;) {
        size_t got;
        entry *x = n ? ms_ptrie_longest(c->tree, ids, n, n - 1, &got) : NULL;
        if (!x) return NULL;
        ms_seq *s = NULL;
        if (x->bytes) {
            s = ms_seq_load(c->m, x->bytes, x->nbytes);
        } else {
            ms_seqfile_info info;
            if (ms_seqfile_read(x->path, c->m, c->family, c->fingerprint, &info, &s) == 0 &&
                (info.n_tokens != x->n || memcmp(info.tokens, x->ids, sizeof(int32_t) * x->n))) {
                ms_seq_free(s);
                s = NULL;
            }
            ms_seqfile_info_clear(&info);
        }
        if (!s) { /* refused (a corrupt file): never used, dropped */
            ms_log(1, "prefix cache: dropped a state: %s", ms_err_msg());
            entry_drop(c, x, 1);
            c->st.evictions++;
            continue;
        }
        x->used = ++c->clock;
        *len = x->n;
        c->st.hits++;
        c->st.tokens_reused += x->n;
        c->st.bytes_restored += x->nbytes;
        return s;
    }
}

static void put(ms_pcache *c, const int32_t *ids, size_t n, const ms_seq *s, int pinned)
{
    MS_ASSERT((size_t)ms_seq_pos(s) == n && n > 0);
    entry *old = ms_ptrie_get(c->tree, ids, n);
    if (old) {
        old->used = ++c->clock; /* the same state: kept where it is */
        if (pinned && !old->pinned) entry_drop(c, old, 1); /* kept again below, in RAM and pinned */
        else return;
    }
    /* Nowhere to keep an unpinned state: not even serialized. */
    if (!pinned && !c->ram_max && !c->dir) return;
    ms_sbuf b = {0};
    ms_seq_save(s, &b);
    if (pinned && c->pinned_bytes + b.n > c->pin_max) {
        ms_log(1, "prefix cache: a %zu-token state of %zu bytes does not fit the %llu bytes planned for kept states",
               n, b.n, (unsigned long long)(c->pin_max - c->pinned_bytes));
        ms_sbuf_free(&b);
        return;
    }
    entry *x = add(c, ids, n);
    x->nbytes = b.n;
    x->bytes = ms_sbuf_take(&b, NULL);
    x->pinned = pinned;
    if (pinned) c->pinned_bytes += x->nbytes;
    c->st.bytes_ram += x->nbytes, c->st.entries_ram++;
    fit_ram(c);
}

void ms_pcache_put(ms_pcache *c, const int32_t *ids, size_t n, const ms_seq *s) { put(c, ids, n, s, 0); }
void ms_pcache_put_pinned(ms_pcache *c, const int32_t *ids, size_t n, const ms_seq *s) { put(c, ids, n, s, 1); }

void ms_pcache_set_pin_room(ms_pcache *c, uint64_t bytes) { c->pin_max = bytes; }

void ms_pcache_get_stats(const ms_pcache *c, ms_pcache_stats *st) { *st = c->st; }

void ms_pcache_keep_prompt(ms_pcache *c, const int32_t *prompt, size_t n_prompt, size_t fed, size_t every, size_t *kept,
                           const ms_seq *s)
{
    int end = fed == n_prompt, mark = every && fed >= *kept + every;
    if (fed > *kept && (end || mark)) {
        ms_pcache_put(c, prompt, fed, s);
        *kept = fed;
    }
}
