/* ms_shard: moestream shard: the routed experts of a checkpoint split into per-worker packs
 * (experts.bin + manifest.json) and a trunk-only checkpoint, written all or nothing. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "ms_xxh.h" /* XXH3, dispatched */

#include "ms_err.h"
#include "ms_file.h"
#include "ms_ident.h"
#include "ms_pack.h"
#include "ms_progress.h"
#include "ms_shard.h"
#include "ms_size.h"
#include "ms_st.h"
#include "ms_xfams.h"

#define COPY_CHUNK ((size_t)16 << 20) /* bounded copy buffer: experts stream through it */

static uint64_t align_up(uint64_t x) { return (x + MS_PACK_ALIGN - 1) / MS_PACK_ALIGN * MS_PACK_ALIGN; }

#define io_fail(...) ms_err_fail(MS_EXIT_IO, __VA_ARGS__)

static int pwrite_full(int fd, const uint8_t *buf, size_t len, uint64_t off, const char *path)
{
    size_t put = 0;
    while (put < len) {
        ssize_t n = pwrite(fd, buf + put, len - put, (off_t)(off + put));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            return io_fail("cannot write %s at byte %llu: %s", path, (unsigned long long)(off + put),
                           n < 0 ? strerror(errno) : "no progress");
        put += (size_t)n;
    }
    return 0;
}

/* One routed expert of the source: where its six parts are, and its first owner. */
typedef struct {
    int layer, expert, owner;
    int file[MS_XFMT_MAX_PARTS];
    uint64_t off[MS_XFMT_MAX_PARTS];
} sh_expert;

static int cmp_src(const void *a, const void *b)
{
    const sh_expert *x = a, *y = b;
    if (x->file[0] != y->file[0]) return x->file[0] < y->file[0] ? -1 : 1;
    return x->off[0] < y->off[0] ? -1 : x->off[0] > y->off[0];
}

static int cmp_entry(const void *a, const void *b)
{
    const ms_pack_entry *x = a, *y = b;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return x->expert < y->expert ? -1 : x->expert > y->expert;
}

/* Find and check the parts of expert (l, e) of format f; mark the tensors they live in as routed. */
static int find_expert(const ms_st *st, const ms_xfmt *f, const char *dir, int l, int e, sh_expert *x,
                       uint8_t *routed)
{
    x->layer = l;
    x->expert = e;
    for (int k = 0; k < f->n_parts; k++) {
        char name[256], why[200];
        int rc = ms_xfam_find_part(st, f, l, e, k, name, sizeof name, &x->file[k], &x->off[k], why, sizeof why);
        if (rc < 0) return -1;
        if (rc > 0) {
            const ms_st_tensor *t = ms_st_find(st, name);
            if (t)
                ms_err_set("tensor %s in %s %s", name, ms_st_file_path(st, t->file), why);
            else
                ms_err_set("tensor %s is missing from %s (moestream shard needs the routed experts the config implies)",
                           name, dir);
            return ms_err_set_code(MS_EXIT_MODEL);
        }
        routed[ms_st_find(st, name) - ms_st_at(st, 0)] = 1;
    }
    return 0;
}

static int make_dir(const char *path)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return io_fail("cannot create %s: %s", path, strerror(errno));
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return io_fail("%s exists and is not a directory", path);
    return 0;
}

static int remove_stale(const char *path)
{
    if (unlink(path) != 0 && errno != ENOENT) return io_fail("cannot remove the stale %s: %s", path, strerror(errno));
    return 0;
}

/* fsync and rename tmp into place. */
static int commit_file(const char *tmp, const char *path);

/* tmp was written (write_failed: whether that failed): sync it and rename it to path, or remove
 * it. Returns 0 or -1 with ms_err set. */
static int finish_file(int write_failed, const char *tmp, const char *path)
{
    if (write_failed) {
        int err = errno;
        unlink(tmp);
        return io_fail("cannot write %s: %s", tmp, strerror(err));
    }
    if (commit_file(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int commit_file(const char *tmp, const char *path)
{
    int fd = open(tmp, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        int err = errno;
        if (fd >= 0) close(fd);
        return io_fail("cannot sync %s: %s", tmp, strerror(err));
    }
    close(fd);
    if (rename(tmp, path) != 0) return io_fail("cannot rename %s to %s: %s", tmp, path, strerror(errno));
    return 0;
}

/* Copy a whole (small) file via tmp + rename. */
static int copy_file(const char *src, const char *dst)
{
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", dst);
    int in = ms_file_open(src, "model file", 0, 0, NULL); /* regular files only: a FIFO would block */
    if (in < 0) return -1;
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
        close(in);
        return io_fail("cannot create %s: %s", tmp, strerror(errno));
    }
    uint8_t buf[1 << 16];
    uint64_t off = 0;
    int rc = 0;
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            rc = io_fail("cannot read %s: %s", src, strerror(errno));
            break;
        }
        if (n == 0) break;
        if ((rc = pwrite_full(out, buf, (size_t)n, off, tmp)) != 0) break;
        off += (uint64_t)n;
    }
    close(in);
    if (close(out) != 0 && rc == 0) rc = io_fail("cannot write %s: %s", tmp, strerror(errno));
    if (rc == 0) rc = commit_file(tmp, dst);
    if (rc != 0) unlink(tmp);
    return rc;
}

static int dump_json(json_t *j, const char *path)
{
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    return finish_file(json_dump_file(j, tmp, JSON_INDENT(1)) != 0, tmp, path);
}

/* A trunk tensor's bytes come straight from its source file. */
typedef struct {
    int fd;
    uint64_t off;
    const char *path;
} sh_fill;

static int trunk_fill(void *ctx, const char *name, uint64_t off, uint8_t *buf, size_t len)
{
    (void)name;
    sh_fill *f = ctx;
    if (ms_file_pread(f->fd, f->path, f->off + off, buf, len) != 0) return -1;
    ms_progress_add(len);
    return 0;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* State of one ms_pack_shard call. */
typedef struct {
    const char *model_dir, *out_dir;
    int N, R;
    ms_xmodel xm;  /* the routed experts' shapes and format, from the model's config */
    ms_st *st;
    uint8_t *routed; /* [tensors of st] 1 if it holds routed-expert parts (left out of the trunk) */
    char fp[17];
    int n_src;
    int *src_fd;   /* [n_src] */
    sh_expert *ex; /* [n_ex], in source file order */
    size_t n_ex;
    uint64_t E;
    ms_pack_entry **ent; /* [N][cnt[w]] */
    size_t *cnt, *fill;  /* [N] */
    uint64_t *cursor;    /* [N] end of the last expert written in worker w's experts.bin */
    int *bin_fd;         /* [N] */
    char **wdir;         /* [N] work/worker-<i>, work the temporary directory inside out_dir */
    uint64_t total; /* bytes to write: every pack (with its alignment padding) and the trunk */
} sh_state;

/* a/b into out[n]; ms_pack_shard refuses directory names long enough to overflow it. */
static void path2(char *out, size_t n, const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    MS_ASSERT(la + lb + 2 <= n);
    memcpy(out, a, la);
    out[la] = '/';
    memcpy(out + la + 1, b, lb + 1);
}

/* Copy every routed expert once from the source (in file order) into each pack holding it. */
static int copy_experts(sh_state *s)
{
    size_t ch = s->E < COPY_CHUNK ? (size_t)s->E : COPY_CHUNK;
    uint8_t *buf = ms_malloc(ch); /* [ch] bytes of the expert being copied */
    XXH3_state_t *h = XXH3_createState();
    int rc = 0;
    char bin[4200];
    for (size_t i = 0; i < s->n_ex && rc == 0; i++) {
        const sh_expert *x = &s->ex[i];
        ms_pack_entry *dst[64];
        int holders[64], nh = s->R < 64 ? s->R : 64;
        MS_ASSERT(s->R <= 64);
        for (int j = 0; j < nh; j++) {
            int w = (x->owner + j) % s->N;
            holders[j] = w;
            ms_pack_entry *e = &s->ent[w][s->fill[w]++];
            e->layer = x->layer;
            e->expert = x->expert;
            e->offset = align_up(s->cursor[w]);
            for (int k = 0; k < s->xm.fmt.n_parts; k++) e->len[k] = s->xm.fmt.part[k].bytes;
            s->cursor[w] = e->offset + s->E;
            dst[j] = e;
        }
        XXH3_64bits_reset(h);
        /* One run when the parts are adjacent in canonical order (released layout), else one each. */
        int contiguous = 1, np = s->xm.fmt.n_parts;
        for (int k = 1; k < np; k++)
            if (x->file[k] != x->file[0] || x->off[k] != x->off[k - 1] + s->xm.fmt.part[k - 1].bytes) contiguous = 0;
        uint64_t pos = 0; /* bytes of the expert copied so far */
        for (int k = 0; k < (contiguous ? 1 : np) && rc == 0; k++) {
            uint64_t run = contiguous ? s->E : s->xm.fmt.part[k].bytes;
            int f = x->file[k];
            const char *sp = ms_st_file_path(s->st, f);
            for (uint64_t o = 0; o < run && rc == 0;) {
                size_t n = run - o < ch ? (size_t)(run - o) : ch;
                if ((rc = ms_file_pread(s->src_fd[f], sp, x->off[k] + o, buf, n)) != 0) break;
                XXH3_64bits_update(h, buf, n);
                for (int j = 0; j < nh && rc == 0; j++) {
                    path2(bin, sizeof bin, s->wdir[holders[j]], "experts.bin.tmp");
                    rc = pwrite_full(s->bin_fd[holders[j]], buf, n, dst[j]->offset + pos, bin);
                }
                /* The source is read once: keep it from crowding the page cache. */
                posix_fadvise(s->src_fd[f], (off_t)(x->off[k] + o), (off_t)n, POSIX_FADV_DONTNEED);
                ms_progress_add((uint64_t)n * (uint64_t)nh);
                o += n;
                pos += n;
            }
        }
        if (rc == 0) {
            uint64_t d = XXH3_64bits_digest(h);
            for (int j = 0; j < nh; j++) dst[j]->xxh3 = d;
        }
    }
    XXH3_freeState(h);
    free(buf);
    return rc;
}

/* manifest.json: the header fields indented, then one line per expert (a K3 pack lists
 * tens of thousands), via tmp + rename. */
static int write_manifest(sh_state *s, int w)
{
    ms_pack_entry *e = s->ent[w];
    qsort(e, s->cnt[w], sizeof *e, cmp_entry);
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string(MS_PACK_FORMAT));
    json_object_set_new(root, "version", json_integer(MS_PACK_VERSION));
    json_object_set_new(root, "model_fingerprint", json_string(s->fp));
    json_object_set_new(root, "worker", json_integer(w));
    json_object_set_new(root, "workers", json_integer(s->N));
    json_object_set_new(root, "replicas", json_integer(s->R));
    json_object_set_new(root, "num_layers", json_integer(s->xm.n_layers));
    json_object_set_new(root, "num_experts", json_integer(s->xm.n_experts));
    json_object_set_new(root, "first_moe_layer", json_integer(s->xm.first_moe));
    if (s->xm.draft_layers) json_object_set_new(root, "draft_layers", json_integer(s->xm.draft_layers));
    json_object_set_new(root, "expert_format", ms_xfmt_to_json(&s->xm.fmt));
    json_object_set_new(root, "expert_bytes", json_integer((json_int_t)s->E));
    char *head = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(root);
    char *end = strrchr(head, '}'); /* drop the closing brace: the experts array follows */
    MS_ASSERT(end != NULL);
    while (end > head && (end[-1] == '\n' || end[-1] == ' ')) end--;
    *end = 0;
    char path[4200], tmp[4300];
    path2(path, sizeof path, s->wdir[w], "manifest.json");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        free(head);
        return io_fail("cannot create %s: %s", tmp, strerror(errno));
    }
    fprintf(f, "%s,\n \"experts\": [", head);
    free(head);
    for (size_t i = 0; i < s->cnt[w]; i++) {
        fprintf(f, "%s\n  {\"layer\": %d, \"expert\": %d, \"offset\": %llu, \"parts\": [", i ? "," : "",
                e[i].layer, e[i].expert, (unsigned long long)e[i].offset);
        for (int k = 0; k < s->xm.fmt.n_parts; k++) fprintf(f, "%s%llu", k ? ", " : "", (unsigned long long)e[i].len[k]);
        fprintf(f, "], \"xxh3\": \"%016llx\"}", (unsigned long long)e[i].xxh3);
    }
    fprintf(f, "\n ]\n}\n");
    int bad = ferror(f);
    return finish_file(fclose(f) != 0 || bad, tmp, path);
}

/* out_dir/trunk: every tensor but the routed experts, one trunk shard per source shard that
 * has any, an index, the tokenizer files and config.json (written last). */
static int write_trunk(sh_state *s, const char *tdir)
{
    size_t nt = ms_st_count(s->st);
    sh_fill *fills = ms_calloc(nt ? nt : 1, sizeof *fills);
    json_t *wmap = json_object();
    uint64_t total = 0;
    int rc = 0;
    char path[4200], src[4200];
    for (int f = 0; f < s->n_src && rc == 0; f++) {
        ms_st_writer *w = ms_st_writer_new();
        const char *fname = base_name(ms_st_file_path(s->st, f));
        int n = 0;
        for (size_t i = 0; i < nt; i++) {
            const ms_st_tensor *t = ms_st_at(s->st, i);
            if (t->file != f || s->routed[ms_st_find(s->st, t->name) - ms_st_at(s->st, 0)])
                continue;
            fills[i] = (sh_fill){s->src_fd[f], t->offset, ms_st_file_path(s->st, f)};
            ms_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, trunk_fill, &fills[i]);
            json_object_set_new(wmap, t->name, json_string(fname));
            n++;
        }
        if (n > 0) {
            total += ms_st_writer_data_bytes(w);
            path2(path, sizeof path, tdir, fname);
            rc = ms_st_writer_write(w, path);
        }
        ms_st_writer_free(w);
    }
    if (rc == 0) {
        json_t *idx = json_pack("{s:{s:I},s:O}", "metadata", "total_size", (json_int_t)total, "weight_map", wmap);
        path2(path, sizeof path, tdir, "model.safetensors.index.json");
        rc = dump_json(idx, path);
        json_decref(idx);
    }
    json_decref(wmap);
    free(fills);
    static const char *tok_files[2] = {"tiktoken.model", "tokenizer_config.json"};
    for (int i = 0; i < 2 && rc == 0; i++) {
        path2(src, sizeof src, s->model_dir, tok_files[i]);
        path2(path, sizeof path, tdir, tok_files[i]);
        if (access(src, F_OK) == 0)
            rc = copy_file(src, path);
        else
            rc = remove_stale(path);
    }
    if (rc == 0) {
        /* The trunk's files differ from the model's: it carries the model's fingerprint, so the
         * coordinator presents the same one the packs do (ms_ident_model reads it). */
        path2(path, sizeof path, tdir, "moestream.fingerprint");
        FILE *f = fopen(path, "w");
        rc = f && fprintf(f, "%s\n", s->fp) == 17 ? 0 : -1;
        if (f && fclose(f) != 0) rc = -1;
        if (rc != 0) {
            ms_err_set("cannot write %s", path);
            ms_err_set_code(MS_EXIT_IO);
        }
    }
    if (rc == 0) {
        path2(src, sizeof src, s->model_dir, "config.json");
        path2(path, sizeof path, tdir, "config.json");
        rc = copy_file(src, path);
    }
    if (rc == 0) {
        /* and the experts' format the packs hold, for what the config alone does not say (e.g.
         * the dtype gpt-oss's expert biases are stored in): ms_xfam_refine reads it back */
        path2(path, sizeof path, tdir, MS_XFAM_FORMAT_FILE);
        json_t *j = ms_xfmt_to_json(&s->xm.fmt);
        rc = json_dump_file(j, path, JSON_INDENT(1) | JSON_SORT_KEYS) == 0 ? 0 : -1;
        json_decref(j);
        if (rc != 0) {
            ms_err_set("cannot write %s", path);
            ms_err_set_code(MS_EXIT_IO);
        }
    }
    return rc;
}

/* Load, check and plan: everything that can fail before a byte is written. */
static int shard_plan(sh_state *s)
{
    char path[4200];
    path2(path, sizeof path, s->model_dir, "config.json");
    if (ms_xfam_load(path, 1, &s->xm) != 0) return -1;
    const ms_xmodel *c = &s->xm;
    int n_moe = c->n_layers - c->first_moe;
    if (n_moe < 1) {
        ms_err_set("%s: no MoE layer (the first of %d layers that routes would be %d): nothing to shard", path,
                   c->n_layers, c->first_moe);
        return ms_err_set_code(MS_EXIT_MODEL);
    }
    if (s->N > c->n_experts) {
        ms_err_set("%d workers for %d experts a layer: some worker would own no expert", s->N, c->n_experts);
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    s->st = ms_st_open_dir(s->model_dir);
    if (!s->st || ms_xfam_refine(&s->xm.fmt, s->xm.first_moe, s->st, s->model_dir) != 0) return -1;
    if (ms_ident_model(s->model_dir, s->fp) != 0) return -1;
    s->E = ms_xfmt_expert_bytes(&s->xm.fmt);
    s->routed = ms_calloc(ms_st_count(s->st) + 1, 1);

    /* Owner of each expert id: worker i owns [i*Ne/N, (i+1)*Ne/N). */
    int *owner = ms_malloc(sizeof(int) * (size_t)c->n_experts);
    for (int i = 0; i < s->N; i++) {
        int64_t a = (int64_t)i * c->n_experts / s->N, b = (int64_t)(i + 1) * c->n_experts / s->N;
        for (int64_t e = a; e < b; e++) owner[e] = i;
    }
    /* a draft head's layer (DeepSeek-V3's MTP) goes into the packs when the checkpoint has it */
    s->xm.draft_layers = c->draft_layers > 0 && ms_xfam_has_expert(s->st, &s->xm.fmt, c->n_layers) ? c->draft_layers : 0;
    int n_xl = c->n_layers + c->draft_layers;
    s->n_ex = (size_t)(n_xl - c->first_moe) * (size_t)c->n_experts;
    s->ex = ms_calloc(s->n_ex, sizeof *s->ex);
    size_t k = 0;
    int rc = 0;
    for (int l = c->first_moe; l < n_xl && rc == 0; l++)
        for (int e = 0; e < c->n_experts && rc == 0; e++, k++) {
            rc = find_expert(s->st, &s->xm.fmt, s->model_dir, l, e, &s->ex[k], s->routed);
            s->ex[k].owner = owner[e];
        }
    free(owner);
    if (rc != 0) return -1;
    qsort(s->ex, s->n_ex, sizeof *s->ex, cmp_src);

    s->cnt = ms_calloc((size_t)s->N, sizeof *s->cnt);
    s->fill = ms_calloc((size_t)s->N, sizeof *s->fill);
    s->cursor = ms_calloc((size_t)s->N, sizeof *s->cursor);
    for (size_t i = 0; i < s->n_ex; i++)
        for (int j = 0; j < s->R; j++) s->cnt[(s->ex[i].owner + j) % s->N]++;
    s->ent = ms_calloc((size_t)s->N, sizeof *s->ent);
    for (int w = 0; w < s->N; w++) s->ent[w] = ms_calloc(s->cnt[w] ? s->cnt[w] : 1, sizeof **s->ent);

    /* Bytes to write: every pack (with its alignment padding) and the trunk. */
    s->total = (uint64_t)s->n_ex * (uint64_t)s->R * s->E;
    for (size_t i = 0; i < ms_st_count(s->st); i++) {
        const ms_st_tensor *t = ms_st_at(s->st, i);
        if (!s->routed[i]) s->total += t->nbytes;
    }
    s->src_fd = ms_malloc(sizeof(int) * (size_t)(s->n_src = ms_st_file_count(s->st)));
    for (int f = 0; f < s->n_src; f++) s->src_fd[f] = -1;
    for (int f = 0; f < s->n_src; f++) {
        s->src_fd[f] = ms_file_open(ms_st_file_path(s->st, f), "shard", 0, 0, NULL);
        if (s->src_fd[f] < 0) return -1;
        posix_fadvise(s->src_fd[f], 0, 0, POSIX_FADV_SEQUENTIAL);
    }
    return 0;
}

/* Refuse early when out_dir's filesystem (its parent's, if out_dir does not exist yet) has less
 * than need bytes free. */
static int check_space(const char *out_dir, uint64_t need)
{
    struct statvfs vf;
    if (statvfs(out_dir, &vf) != 0) {
        char parent[4200];
        snprintf(parent, sizeof parent, "%.3000s", out_dir);
        size_t n = strlen(parent);
        while (n > 1 && parent[n - 1] == '/') parent[--n] = 0;
        char *slash = strrchr(parent, '/');
        if (!slash) snprintf(parent, sizeof parent, ".");
        else slash[slash == parent] = 0; /* "/x" -> "/" */
        if (statvfs(parent, &vf) != 0) return 0; /* creating out_dir will say what is wrong */
    }
    uint64_t avail = (uint64_t)vf.f_bavail * (uint64_t)vf.f_frsize;
    if (avail >= need) return 0;
    char a[32], b[32];
    return io_fail("not enough space for %s: %s free on its filesystem, the packs and trunk need about %s", out_dir,
                   ms_size_fmt(avail, a, sizeof a), ms_size_fmt(need, b, sizeof b));
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* Remove a directory tree this process created (best effort; symlinks are not followed). */
static void remove_tree(const char *path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* A pack entry of out_dir: "trunk" or "worker-<digits>". */
static int is_pack_entry(const char *name)
{
    if (!strcmp(name, "trunk")) return 1;
    if (strncmp(name, "worker-", 7) || !name[7]) return 0;
    for (const char *p = name + 7; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    return 1;
}

typedef struct {
    char *from, *to;
} sh_move;

/* Move the finished packs and trunk from work into out_dir. The earlier pack entries of out_dir
 * (trunk and every worker-<k>, also those of a run with more workers) move into work/old first,
 * to be deleted with work. On a failed rename, every rename done is undone. */
static int commit_output(const char *out_dir, const char *work, int N)
{
    char old[4300], a[4400], b[4400];
    path2(old, sizeof old, work, "old");
    if (make_dir(old) != 0) return -1;
    size_t n = 0, cap = (size_t)N + 16;
    sh_move *mv = ms_malloc(cap * sizeof *mv);
    DIR *d = opendir(out_dir);
    if (!d) {
        free(mv);
        return io_fail("cannot list %s: %s", out_dir, strerror(errno));
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!is_pack_entry(de->d_name)) continue;
        if (n + (size_t)N + 1 >= cap) mv = ms_realloc(mv, (cap *= 2) * sizeof *mv);
        path2(a, sizeof a, out_dir, de->d_name);
        path2(b, sizeof b, old, de->d_name);
        mv[n++] = (sh_move){ms_strdup(a), ms_strdup(b)};
    }
    closedir(d);
    for (int w = 0; w <= N; w++) {
        char name[32];
        if (w < N) snprintf(name, sizeof name, "worker-%d", w);
        else snprintf(name, sizeof name, "trunk");
        path2(a, sizeof a, work, name);
        path2(b, sizeof b, out_dir, name);
        mv[n++] = (sh_move){ms_strdup(a), ms_strdup(b)};
    }
    int rc = 0;
    size_t done = 0;
    for (; done < n; done++)
        if (rename(mv[done].from, mv[done].to) != 0) {
            rc = io_fail("cannot move %s to %s: %s", mv[done].from, mv[done].to, strerror(errno));
            break;
        }
    if (rc != 0)
        while (done-- > 0) rename(mv[done].to, mv[done].from);
    for (size_t i = 0; i < n; i++) {
        free(mv[i].from);
        free(mv[i].to);
    }
    free(mv);
    if (rc == 0) {
        int fd = open(out_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* make the renames durable */
        if (fd >= 0) {
            fsync(fd);
            close(fd);
        }
    }
    return rc;
}

int ms_pack_shard(const char *model_dir, int workers, int replicas, const char *out_dir)
{
    MS_ASSERT(model_dir && out_dir);
    if (workers < 1 || replicas < 1 || replicas > workers) {
        ms_err_set("shard: %d workers with %d replicas: need workers >= 1 and 1 <= replicas <= workers", workers,
                   replicas);
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    if (strlen(model_dir) > 3000 || strlen(out_dir) > 3000) {
        ms_err_set("shard: directory name too long: %.64s...", strlen(model_dir) > 3000 ? model_dir : out_dir);
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    if (replicas > 64) {
        ms_err_set("shard: %d replicas is more than the 64 supported", replicas);
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    sh_state s;
    memset(&s, 0, sizeof s);
    s.model_dir = model_dir;
    s.out_dir = out_dir;
    s.N = workers;
    s.R = replicas;
    int rc = shard_plan(&s);
    char path[4200], tmp[4200], tdir[4200], work[4200] = "";
    int created_out = 0;

    /* Refusals come before anything is created. */
    if (rc == 0) rc = check_space(out_dir, s.total); /* the alignment gaps are holes: they take no space */
    if (rc == 0) ms_progress_begin("shard", s.total, MS_PROGRESS_BYTES);

    /* Everything is written into a fresh temporary directory inside out_dir (same filesystem, so
     * the final renames are atomic), and only moved into place once complete: a refusal, a full
     * disk or a crash leaves an earlier pack in out_dir as it was, and no partial new one. */
    if (rc == 0) {
        if (mkdir(out_dir, 0755) == 0)
            created_out = 1;
        else
            rc = make_dir(out_dir);
    }
    if (rc == 0) {
        snprintf(work, sizeof work, "%.3000s/.shard-XXXXXX", out_dir);
        if (!mkdtemp(work)) {
            rc = io_fail("cannot create a temporary directory in %s: %s", out_dir, strerror(errno));
            work[0] = 0;
        }
    }
    path2(tdir, sizeof tdir, work, "trunk");
    if (rc == 0) {
        s.wdir = ms_calloc((size_t)s.N, sizeof *s.wdir);
        s.bin_fd = ms_malloc(sizeof(int) * (size_t)s.N);
        for (int w = 0; w < s.N; w++) s.bin_fd[w] = -1;
        for (int w = 0; w < s.N && rc == 0; w++) {
            size_t n = strlen(work) + 32;
            s.wdir[w] = ms_malloc(n);
            snprintf(s.wdir[w], n, "%s/worker-%d", work, w);
            rc = make_dir(s.wdir[w]);
        }
    }
    if (rc == 0) rc = make_dir(tdir);

    /* The packs: experts.bin.tmp of every worker written in one pass over the source. */
    for (int w = 0; w < s.N && rc == 0; w++) {
        path2(tmp, sizeof tmp, s.wdir[w], "experts.bin.tmp");
        s.bin_fd[w] = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (s.bin_fd[w] < 0) rc = io_fail("cannot create %s: %s", tmp, strerror(errno));
    }
    if (rc == 0) rc = copy_experts(&s);
    for (int w = 0; w < s.N && rc == 0; w++) {
        path2(tmp, sizeof tmp, s.wdir[w], "experts.bin.tmp");
        path2(path, sizeof path, s.wdir[w], "experts.bin");
        /* A sparse tail is fine, but the file must cover the last expert's bytes. */
        if (ftruncate(s.bin_fd[w], (off_t)s.cursor[w]) != 0 || fsync(s.bin_fd[w]) != 0)
            rc = io_fail("cannot write %s: %s", tmp, strerror(errno));
        if (close(s.bin_fd[w]) != 0 && rc == 0) rc = io_fail("cannot write %s: %s", tmp, strerror(errno));
        s.bin_fd[w] = -1;
        if (rc == 0 && rename(tmp, path) != 0) rc = io_fail("cannot rename %s to %s: %s", tmp, path, strerror(errno));
        if (rc == 0) rc = write_manifest(&s, w);
    }
    if (rc == 0) rc = write_trunk(&s, tdir);
    ms_progress_end();
    if (rc == 0) rc = commit_output(out_dir, work, s.N);

    /* Cleanup; on failure no tmp file survives. */
    if (s.bin_fd)
        for (int w = 0; w < s.N; w++) {
            if (s.bin_fd[w] >= 0) close(s.bin_fd[w]);
            if (rc != 0 && s.wdir && s.wdir[w]) {
                path2(tmp, sizeof tmp, s.wdir[w], "experts.bin.tmp");
                unlink(tmp);
            }
        }
    /* The work directory now holds the earlier pack (success) or the partial new one (failure). */
    if (work[0]) remove_tree(work);
    if (rc != 0 && created_out) rmdir(out_dir);
    if (s.src_fd)
        for (int f = 0; f < s.n_src; f++)
            if (s.src_fd[f] >= 0) close(s.src_fd[f]);
    if (s.ent)
        for (int w = 0; w < s.N; w++) free(s.ent[w]);
    if (s.wdir)
        for (int w = 0; w < s.N; w++) free(s.wdir[w]);
    free(s.wdir);
    free(s.bin_fd);
    free(s.ent);
    free(s.cnt);
    free(s.fill);
    free(s.cursor);
    free(s.src_fd);
    free(s.ex);
    ms_st_close(s.st);
    free(s.routed);
    return rc;
}
