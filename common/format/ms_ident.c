/* ms_ident: full-content tensor hashes of a checkpoint (XXH3-128), cached in a sidecar keyed by each file's stat. */
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ms_xxh.h" /* XXH3, dispatched */

#include "ms_err.h"
#include "ms_file.h"
#include "ms_ident.h"
#include "ms_progress.h"
#include "ms_size.h"

#define SIDE_MAGIC "MSIDENT1"
#define SIDE_VERSION 1u
#define SIDE_NAME "moestream.ident"
#define SIDE_MAX ((uint64_t)1 << 30) /* the full K3 (~500k tensors) needs about 17 MB */
#define READ_CHUNK ((size_t)4 << 20)

/* One tensor of a file, in offset order. */
typedef struct {
    uint64_t off, bytes;
    uint8_t known, h[16];
    size_t st_index; /* index in the ms_st (this run only) */
} id_tensor;

/* One shard file: its identity when hashed, and its tensors. */
typedef struct {
    char *name; /* basename */
    uint64_t size, ino, dev;
    int64_t mt_s, mt_ns;
    uint32_t n;
    id_tensor *t;
} id_file;

typedef struct {
    id_file *f;
    uint32_t n;
} id_set;

static void set_clear(id_set *s)
{
    for (uint32_t i = 0; i < s->n; i++) {
        free(s->f[i].name);
        free(s->f[i].t);
    }
    free(s->f);
    memset(s, 0, sizeof *s);
}

static const char *base_of(const char *p)
{
    const char *b = strrchr(p, '/');
    return b ? b + 1 : p;
}

/* ---- sidecar location ---- */

/* A directory without write bits is read-only here even for root (who access() would let in):
 * a checkpoint someone made read-only is not written to. */
static int dir_writable(const char *d)
{
    struct stat sb;
    return stat(d, &sb) == 0 && S_ISDIR(sb.st_mode) && (sb.st_mode & 0222) && access(d, W_OK) == 0;
}

/* The user's cache directory; "" when there is none (no HOME and no home in the password
 * file: nothing shared such as /tmp is ever used instead). */
static void cache_dir(char *buf, size_t cap)
{
    const char *e = getenv("MS_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (!(h && *h)) {
        struct passwd *pw = getpwuid(geteuid());
        h = pw && pw->pw_dir && *pw->pw_dir && strcmp(pw->pw_dir, "/") ? pw->pw_dir : NULL;
    }
    if (e && *e)
        snprintf(buf, cap, "%s", e);
    else if (x && *x)
        snprintf(buf, cap, "%s/moestream", x);
    else if (h)
        snprintf(buf, cap, "%s/.cache/moestream", h);
    else
        buf[0] = 0;
}

const char *ms_ident_sidecar_path(const char *dir, char *buf, size_t cap)
{
    const char *e = getenv("MS_CACHE_DIR");
    if (!(e && *e) && dir_writable(dir)) {
        snprintf(buf, cap, "%s/" SIDE_NAME, dir);
        return buf;
    }
    char real[PATH_MAX], cd[PATH_MAX];
    if (!realpath(dir, real)) snprintf(real, sizeof real, "%s", dir);
    cache_dir(cd, sizeof cd);
    if (!cd[0]) {
        buf[0] = 0;
        return buf;
    }
    snprintf(buf, cap, "%s/ident-%016llx", cd, (unsigned long long)XXH3_64bits(real, strlen(real)));
    return buf;
}

/* A sidecar outside the checkpoint's own directory lives in a cache directory that must be
 * this user's alone: hashes planted there by someone else would vouch for other bytes. 0 when
 * path is the checkpoint's own or its directory is private; else -1 with why[cap] set. */
static int side_dir_ok(const char *path, const char *dir, char *why, size_t cap)
{
    char parent[PATH_MAX];
    if (!path[0]) return snprintf(why, cap, "no cache directory (HOME is unset: set MS_CACHE_DIR)"), -1;
    snprintf(parent, sizeof parent, "%s", path);
    char *slash = strrchr(parent, '/');
    if (!slash) return 0;
    *slash = 0;
    if (!strcmp(parent, dir)) return 0;
    if (ms_file_private_dir(parent, why, cap) == 0) return 0;
    char w[256];
    snprintf(w, sizeof w, "%s", why);
    snprintf(why, cap, "%.200s is refused as a cache: %.200s", parent, w);
    return -1;
}

/* mkdir -p for the cache directory (0700: it names the user's model paths). */
static int make_dirs(const char *path)
{
    char p[PATH_MAX];
    if (strlen(path) >= sizeof p) return -1;
    memcpy(p, path, strlen(path) + 1);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0700) != 0 && errno != EEXIST) return -1;
        *s = '/';
    }
    return mkdir(p, 0700) == 0 || errno == EEXIST ? 0 : -1;
}

/* ---- sidecar read/write (a cache: anything wrong with it means "not cached") ---- */

typedef struct {
    const uint8_t *p, *end;
    int bad;
} rd;

static void take(rd *r, void *dst, size_t n)
{
    if (r->bad || (size_t)(r->end - r->p) < n) {
        r->bad = 1;
        memset(dst, 0, n);
        return;
    }
    memcpy(dst, r->p, n);
    r->p += n;
}

static uint64_t take_u(rd *r, int bytes)
{
    uint8_t b[8] = {0};
    take(r, b, (size_t)bytes);
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = (v << 8) | b[i];
    return v;
}

static void side_load(const char *path, const char *dir, id_set *s)
{
    memset(s, 0, sizeof *s);
    size_t len = 0;
    struct stat sb;
    char why[512];
    if (side_dir_ok(path, dir, why, sizeof why) != 0) return;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return;
    char *buf = ms_file_read_all(path, "identity sidecar", 0, SIDE_MAX, MS_EXIT_IO, &len);
    if (!buf) {
        ms_err_clear();
        return;
    }
    rd r = {(const uint8_t *)buf, (const uint8_t *)buf + len, 0};
    if (len < 24 || memcmp(buf, SIDE_MAGIC, 8) != 0 ||
        XXH3_64bits(buf, len - 8) != (r.p = (const uint8_t *)buf + len - 8, take_u(&r, 8))) {
        free(buf);
        return;
    }
    r = (rd){(const uint8_t *)buf + 8, (const uint8_t *)buf + len - 8, 0};
    uint32_t ver = (uint32_t)take_u(&r, 4), nf = (uint32_t)take_u(&r, 4);
    if (ver != SIDE_VERSION || nf > (uint32_t)(len / 50)) {
        free(buf);
        return;
    }
    s->f = ms_calloc(nf ? nf : 1, sizeof *s->f);
    for (uint32_t i = 0; i < nf && !r.bad; i++) {
        id_file *f = &s->f[s->n++];
        size_t nl = (size_t)take_u(&r, 2);
        f->name = ms_calloc(nl + 1, 1);
        take(&r, f->name, nl);
        f->size = take_u(&r, 8);
        f->mt_s = (int64_t)take_u(&r, 8);
        f->mt_ns = (int64_t)take_u(&r, 8);
        f->ino = take_u(&r, 8);
        f->dev = take_u(&r, 8);
        f->n = (uint32_t)take_u(&r, 4);
        if (r.bad || f->n > (uint64_t)(r.end - r.p) / 33) {
            r.bad = 1;
            break;
        }
        f->t = ms_calloc(f->n ? f->n : 1, sizeof *f->t);
        for (uint32_t k = 0; k < f->n; k++) {
            f->t[k].off = take_u(&r, 8);
            f->t[k].bytes = take_u(&r, 8);
            take(&r, &f->t[k].known, 1);
            take(&r, f->t[k].h, 16);
        }
    }
    if (r.bad || r.p != r.end) set_clear(s);
    free(buf);
}

typedef struct {
    uint8_t *b;
    size_t n, cap;
} wb;

static void put(wb *w, const void *src, size_t n)
{
    if (w->n + n > w->cap) w->b = ms_realloc(w->b, w->cap = (w->n + n) * 2 + 4096);
    memcpy(w->b + w->n, src, n);
    w->n += n;
}

static void put_u(wb *w, uint64_t v, int bytes)
{
    uint8_t b[8];
    for (int i = 0; i < bytes; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, (size_t)bytes);
}

/* Write s to path atomically; a failure is logged once per process, not an error. 1 when written. */
static int side_save(const char *path, const char *dir, const id_set *s) /* path: < PATH_MAX bytes */
{
    static int warned;
    wb w = {0};
    put(&w, SIDE_MAGIC, 8);
    put_u(&w, SIDE_VERSION, 4);
    put_u(&w, s->n, 4);
    for (uint32_t i = 0; i < s->n; i++) {
        const id_file *f = &s->f[i];
        size_t nl = strlen(f->name);
        put_u(&w, nl, 2);
        put(&w, f->name, nl);
        put_u(&w, f->size, 8);
        put_u(&w, (uint64_t)f->mt_s, 8);
        put_u(&w, (uint64_t)f->mt_ns, 8);
        put_u(&w, f->ino, 8);
        put_u(&w, f->dev, 8);
        put_u(&w, f->n, 4);
        for (uint32_t k = 0; k < f->n; k++) {
            put_u(&w, f->t[k].off, 8);
            put_u(&w, f->t[k].bytes, 8);
            put(&w, &f->t[k].known, 1);
            put(&w, f->t[k].h, 16);
        }
    }
    put_u(&w, XXH3_64bits(w.b, w.n), 8);
    char tmp[PATH_MAX + 32], parent[PATH_MAX + 1], why[512] = "";
    int ok = 0, fd = -1, own = 0; /* own: beside the checkpoint (readable by whoever reads it) */
    if (path[0] && strlen(path) < PATH_MAX) {
        snprintf(parent, sizeof parent, "%s", path);
        char *slash = strrchr(parent, '/');
        if (slash) *slash = 0;
        own = !slash || !strcmp(parent, dir);
        if (!own && make_dirs(parent) != 0)
            snprintf(why, sizeof why, "cannot make %.300s: %s", parent, strerror(errno));
        else if (side_dir_ok(path, dir, why, sizeof why) == 0 &&
                 (fd = ms_file_tmp_create(path, "identity sidecar", own ? 0644 : 0600, tmp, sizeof tmp)) >= 0)
            ok = ms_file_tmp_commit(fd, tmp, path, "identity sidecar", ms_file_write_all(fd, w.b, w.n) != 0) == 0;
        if (!ok && !why[0]) snprintf(why, sizeof why, "%s", ms_err_msg());
    } else {
        side_dir_ok(path, dir, why, sizeof why);
    }
    if (!ok && !warned) {
        warned = 1;
        ms_log(1, "note: cannot keep the identity hashes of %s (%s): they will be computed again next time (set "
                  "MS_CACHE_DIR to a directory of your own)",
               dir, why);
    }
    ms_err_clear();
    free(w.b);
    return ok;
}

/* ---- hashing ---- */

static int cmp_off(const void *a, const void *b)
{
    const id_tensor *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

static void same_stat(const struct stat *sb, id_file *f)
{
    f->size = (uint64_t)sb->st_size;
    f->ino = (uint64_t)sb->st_ino;
    f->dev = (uint64_t)sb->st_dev;
    f->mt_s = (int64_t)sb->st_mtim.tv_sec;
    f->mt_ns = (int64_t)sb->st_mtim.tv_nsec;
}

static int stat_matches(const struct stat *sb, const id_file *f)
{
    return f->size == (uint64_t)sb->st_size && f->ino == (uint64_t)sb->st_ino && f->dev == (uint64_t)sb->st_dev &&
           f->mt_s == (int64_t)sb->st_mtim.tv_sec && f->mt_ns == (int64_t)sb->st_mtim.tv_nsec;
}

static int hash_tensor(const ms_st *st, const ms_st_tensor *t, uint8_t *buf, uint8_t out[16])
{
    XXH3_state_t *x = XXH3_createState();
    XXH3_128bits_reset(x);
    for (uint64_t o = 0; o < t->nbytes;) {
        size_t n = t->nbytes - o < READ_CHUNK ? (size_t)(t->nbytes - o) : READ_CHUNK;
        if (ms_st_read(st, t, o, buf, n) != 0) {
            XXH3_freeState(x);
            return -1;
        }
        XXH3_128bits_update(x, buf, n);
        o += n;
        ms_progress_add(n);
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(x));
    memcpy(out, c.digest, 16);
    XXH3_freeState(x);
    return 0;
}

/* The current id_file of st's file fi: the cached one if its stat and tensor layout match,
 * else a fresh one with nothing known. */
static void file_entry(const ms_st *st, int fi, const struct stat *sb, id_set *cache, id_file *out)
{
    memset(out, 0, sizeof *out);
    out->name = ms_strdup(base_of(ms_st_file_path(st, fi)));
    same_stat(sb, out);
    size_t nt = ms_st_count(st);
    for (size_t i = 0; i < nt; i++)
        if (ms_st_at(st, i)->file == fi) out->n++;
    out->t = ms_calloc(out->n ? out->n : 1, sizeof *out->t);
    uint32_t k = 0;
    for (size_t i = 0; i < nt; i++) {
        const ms_st_tensor *t = ms_st_at(st, i);
        if (t->file == fi) out->t[k++] = (id_tensor){t->offset, t->nbytes, 0, {0}, i};
    }
    qsort(out->t, out->n, sizeof *out->t, cmp_off);
    for (uint32_t c = 0; c < cache->n; c++) {
        id_file *f = &cache->f[c];
        if (strcmp(f->name, out->name) != 0) continue;
        int same = stat_matches(sb, f) && f->n == out->n;
        for (uint32_t j = 0; same && j < f->n; j++) same = f->t[j].off == out->t[j].off && f->t[j].bytes == out->t[j].bytes;
        if (same)
            for (uint32_t j = 0; j < f->n; j++) {
                out->t[j].known = f->t[j].known == 1;
                memcpy(out->t[j].h, f->t[j].h, 16);
            }
        break;
    }
}

int ms_ident_hashes(const char *dir, const ms_st *st_in, const char *const *names, size_t n, uint8_t (*out)[16])
{
    ms_st *own = NULL;
    const ms_st *st = st_in;
    if (!st && !(st = own = ms_st_open_dir(dir))) return -1;
    int nf = ms_st_file_count(st), rc = -1;
    size_t nt = ms_st_count(st);
    char side[PATH_MAX];
    ms_ident_sidecar_path(dir, side, sizeof side);
    id_set cache, cur = {ms_calloc((size_t)(nf ? nf : 1), sizeof(id_file)), 0};
    side_load(side, dir, &cache);
    /* where each tensor of st lives in cur, and whether this call needs it */
    uint32_t *where_f = ms_malloc(sizeof(uint32_t) * (nt ? nt : 1)), *where_t = ms_malloc(sizeof(uint32_t) * (nt ? nt : 1));
    uint8_t *want = ms_calloc(nt ? nt : 1, 1), *buf = NULL;
    struct stat *sbs = ms_calloc((size_t)(nf ? nf : 1), sizeof *sbs);
    for (int fi = 0; fi < nf; fi++) {
        const char *p = ms_st_file_path(st, fi);
        if (stat(p, &sbs[fi]) != 0) {
            ms_err_set("cannot stat %s to hash it: %s", p, strerror(errno));
            ms_err_set_code(MS_EXIT_IO);
            goto out;
        }
        file_entry(st, fi, &sbs[fi], &cache, &cur.f[cur.n++]);
        for (uint32_t k = 0; k < cur.f[fi].n; k++) {
            where_f[cur.f[fi].t[k].st_index] = (uint32_t)fi;
            where_t[cur.f[fi].t[k].st_index] = k;
        }
    }
    if (!names) {
        memset(want, 1, nt);
    } else {
        for (size_t i = 0; i < n; i++) {
            const ms_st_tensor *t = ms_st_find(st, names[i]);
            if (!t) {
                ms_err_set("%s has no tensor %s to hash", dir, names[i]);
                ms_err_set_code(MS_EXIT_MODEL);
                goto out;
            }
            want[t - ms_st_at(st, 0)] = 1;
        }
    }
    uint64_t todo = 0, files_todo = 0;
    for (int fi = 0; fi < nf; fi++) {
        int any = 0;
        for (uint32_t k = 0; k < cur.f[fi].n; k++) {
            id_tensor *t = &cur.f[fi].t[k];
            if (want[t->st_index] && !t->known) {
                todo += t->bytes;
                any = 1;
            }
        }
        files_todo += (uint64_t)any;
    }
    if (todo > 0) {
        char sz[32];
        ms_size_fmt(todo, sz, sizeof sz);
        ms_log(1, "hashing %s of %s (%llu file%s) once for its identity: every byte a trunk pack or a worker stands "
                  "in for is checked; kept in %s",
               sz, dir, (unsigned long long)files_todo, files_todo == 1 ? "" : "s", side);
        buf = ms_malloc(READ_CHUNK);
        ms_progress_begin("hashing checkpoint", todo, MS_PROGRESS_BYTES);
        for (int fi = 0; fi < nf; fi++) {
            id_file *f = &cur.f[fi];
            int did = 0;
            for (uint32_t k = 0; k < f->n; k++) {
                id_tensor *t = &f->t[k];
                if (!want[t->st_index] || t->known) continue;
                if (hash_tensor(st, ms_st_at(st, t->st_index), buf, t->h) != 0) {
                    ms_progress_end();
                    goto out;
                }
                t->known = 1;
                did = 1;
            }
            struct stat now;
            const char *p = ms_st_file_path(st, fi);
            if (did && (stat(p, &now) != 0 || !stat_matches(&now, f))) {
                ms_progress_end();
                ms_err_set("%s changed while it was being hashed: run again once nothing writes to it", p);
                ms_err_set_code(MS_EXIT_IO);
                goto out;
            }
        }
        ms_progress_end();
        side_save(side, dir, &cur);
    }
    if (names && out)
        for (size_t i = 0; i < n; i++) {
            size_t si = (size_t)(ms_st_find(st, names[i]) - ms_st_at(st, 0));
            memcpy(out[i], cur.f[where_f[si]].t[where_t[si]].h, 16);
        }
    if (!names && out)
        for (size_t si = 0; si < nt; si++) memcpy(out[si], cur.f[where_f[si]].t[where_t[si]].h, 16);
    rc = 0;
out:
    free(buf);
    free(sbs);
    free(want);
    free(where_f);
    free(where_t);
    set_clear(&cache);
    set_clear(&cur);
    ms_st_close(own);
    return rc;
}

typedef struct {
    const ms_st_tensor *t;
    const uint8_t *h;
} by_name;

static int cmp_name(const void *a, const void *b) { return strcmp(((const by_name *)a)->t->name, ((const by_name *)b)->t->name); }

int ms_ident_fingerprint(const char *dir, char out[17])
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t clen = 0;
    char *cfg = ms_file_read_all(path, "config", 0, 64u << 20, MS_EXIT_MODEL, &clen);
    if (!cfg) return -1;
    ms_st *st = ms_st_open_dir(dir);
    if (!st) {
        free(cfg);
        return -1;
    }
    size_t nt = ms_st_count(st);
    uint8_t(*h)[16] = ms_malloc(16 * (nt ? nt : 1));
    int rc = ms_ident_hashes(dir, st, NULL, 0, h);
    if (rc == 0) {
        by_name *v = ms_malloc(sizeof *v * (nt ? nt : 1));
        for (size_t i = 0; i < nt; i++) v[i] = (by_name){ms_st_at(st, i), h[i]};
        qsort(v, nt, sizeof *v, cmp_name);
        uint64_t fp = XXH3_64bits_withSeed(cfg, clen, 0x4d5349444e54ull);
        for (size_t i = 0; i < nt; i++) {
            const ms_st_tensor *t = v[i].t;
            int64_t meta[2 + MS_ST_MAX_DIMS] = {(int64_t)t->dtype, (int64_t)t->ndim};
            for (int d = 0; d < t->ndim; d++) meta[2 + d] = t->shape[d];
            fp = XXH3_64bits_withSeed(t->name, strlen(t->name) + 1, fp);
            fp = XXH3_64bits_withSeed(meta, sizeof meta, fp);
            fp = XXH3_64bits_withSeed(v[i].h, 16, fp);
        }
        snprintf(out, 17, "%016llx", (unsigned long long)fp);
        free(v);
    }
    free(h);
    ms_st_close(st);
    free(cfg);
    return rc;
}

int ms_ident_model(const char *dir, char out[17])
{
    char path[4096];
    int rc = -1, fd = -1;
    /* A trunk-only checkpoint written by moestream shard carries its model's fingerprint. */
    snprintf(path, sizeof path, "%s/moestream.fingerprint", dir);
    FILE *ff = NULL;
    if (access(path, F_OK) == 0) { /* present: a regular file (a FIFO would block) */
        if ((fd = ms_file_open(path, "fingerprint file", 0, 0, NULL)) < 0) goto out;
        if (!(ff = fdopen(fd, "r"))) close(fd);
        fd = -1;
    }
    if (ff) {
        char line[64] = "";
        int ok = fgets(line, sizeof line, ff) != NULL && strspn(line, "0123456789abcdef") == 16;
        fclose(ff);
        if (!ok) {
            ms_err_set("%s must hold 16 lower-case hex digits", path);
            ms_err_set_code(MS_EXIT_MODEL);
            goto out;
        }
        memcpy(out, line, 16);
        out[16] = 0;
        rc = 0;
        goto out;
    }
    rc = ms_ident_fingerprint(dir, out); /* every byte of every tensor (a sidecar keeps the hashes) */
out:
    if (fd >= 0) close(fd);
    return rc;
}

int ms_ident_sidecar_kept(const char *dir)
{
    char side[PATH_MAX];
    ms_ident_sidecar_path(dir, side, sizeof side);
    id_set s;
    side_load(side, dir, &s);
    int kept = s.n > 0;
    set_clear(&s);
    return kept;
}

int ms_ident_cache_dir(char *buf, size_t cap)
{
    char why[512];
    cache_dir(buf, cap);
    if (!buf[0] || make_dirs(buf) != 0 || ms_file_private_dir(buf, why, sizeof why) != 0) return -1;
    return 0;
}
