/* ms_seqfile: state files: header JSON + ms_seq_save bytes + XXH3-64, written atomically. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ms_xxh.h" /* XXH3, dispatched */

#include "ms_err.h"
#include "ms_file.h"
#include "ms_sbuf.h"
#include "ms_seqfile.h"

#define MAGIC "MOESEQST"
#define MAX_HEADER (64u << 20) /* the ids and a chat's messages as JSON */

void ms_seqfile_info_clear(ms_seqfile_info *i)
{
    if (!i) return;
    free(i->tokens);
    free(i->pending);
    free(i->meta);
    memset(i, 0, sizeof *i);
}

static json_t *ids_json(const int32_t *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

int ms_seqfile_write(const char *path, const ms_seqfile_info *info, const ms_seq *s)
{
    ms_sbuf state = {0}, f = {0};
    ms_seq_save(s, &state);
    json_t *h = json_pack("{s:s,s:s,s:o,s:o,s:I}", "family", info->family, "fingerprint", info->fingerprint, "tokens",
                          ids_json(info->tokens, info->n_tokens), "pending", ids_json(info->pending, info->n_pending),
                          "state_bytes", (json_int_t)state.n);
    if (info->meta) {
        json_t *m = json_loads(info->meta, JSON_DECODE_ANY, NULL);
        MS_ASSERT(m); /* the writer's own JSON */
        json_object_set_new(h, "meta", m);
    }
    char *ht = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    uint32_t ver = MS_SEQFILE_VERSION, hl = (uint32_t)strlen(ht);
    ms_sbuf_add(&f, MAGIC, 8);
    ms_sbuf_add(&f, (const char *)&ver, 4);
    ms_sbuf_add(&f, (const char *)&hl, 4);
    ms_sbuf_add(&f, ht, hl);
    ms_sbuf_add(&f, state.s ? state.s : "", state.n);
    uint64_t sum = XXH3_64bits(f.s, f.n);
    ms_sbuf_add(&f, (const char *)&sum, 8);
    free(ht);
    ms_sbuf_free(&state);
    char tmp[4200];
    int fd = ms_file_tmp_create(path, "state file", 0600, tmp, sizeof tmp);
    if (fd < 0) {
        ms_sbuf_free(&f);
        return -1;
    }
    int bad = ms_file_write_all(fd, f.s, f.n) != 0;
    ms_sbuf_free(&f);
    return ms_file_tmp_commit(fd, tmp, path, "state file", bad);
}

static int refuse(const char *path, const char *fmt, const char *a, const char *b)
{
    char what[512];
    snprintf(what, sizeof what, fmt, a, b);
    ms_err_set("%s is not a state this model can continue from: %s", path, what);
    return ms_err_set_code(MS_EXIT_INPUT);
}

static int ids_of(json_t *a, int32_t **out, size_t *n)
{
    if (!json_is_array(a)) return -1;
    *n = json_array_size(a);
    *out = ms_malloc(sizeof(int32_t) * (*n + 1));
    for (size_t i = 0; i < *n; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) return -1;
        (*out)[i] = (int32_t)json_integer_value(v);
    }
    return 0;
}

/* The header of an open state file: magic, version, header JSON (at most MAX_HEADER bytes)
 * checked, family and fingerprint and ids read into info, *h_len and *state_bytes set, hashing
 * what it reads into x (when not NULL). 0, or -1 with ms_err set naming path. */
static int read_header(int fd, const char *path, uint64_t size, XXH3_state_t *x, ms_seqfile_info *info, uint32_t *h_len,
                       uint64_t *state_bytes, json_t **hdr)
{
    char head[16];
    uint32_t ver, hl;
    *hdr = NULL;
    if (size < 24 || ms_file_pread(fd, path, 0, head, 16) != 0 || memcmp(head, MAGIC, 8)) {
        ms_err_clear();
        return refuse(path, "not a moestream state file%s%s", "", "");
    }
    memcpy(&ver, head + 8, 4);
    memcpy(&hl, head + 12, 4);
    if (ver != MS_SEQFILE_VERSION) {
        char v[32], w[32];
        snprintf(v, sizeof v, "%u", ver);
        snprintf(w, sizeof w, "%d", MS_SEQFILE_VERSION);
        return refuse(path, "written as version %s; this build reads version %s", v, w);
    }
    if (hl > MAX_HEADER || (uint64_t)hl > size - 24) return refuse(path, "its header is not readable%s%s", "", "");
    char *h = ms_malloc((size_t)hl + 1);
    if (ms_file_pread(fd, path, 16, h, hl) != 0) {
        free(h);
        return -1;
    }
    if (x) XXH3_64bits_update(x, head, 16), XXH3_64bits_update(x, h, hl);
    json_t *j = json_loadb(h, hl, 0, NULL);
    free(h);
    const char *fam = json_string_value(json_object_get(j, "family"));
    const char *fp = json_string_value(json_object_get(j, "fingerprint"));
    json_t *sbj = json_object_get(j, "state_bytes");
    json_int_t sb = json_integer_value(sbj);
    if (json_is_integer(sbj) && sb >= 0 && (uint64_t)sb != size - 24 - hl) {
        json_decref(j);
        char a[96];
        snprintf(a, sizeof a, "%llu bytes of state, the file holds %llu", (unsigned long long)sb,
                 (unsigned long long)(size - 24 - hl));
        return refuse(path, "cut short or grown: its header says %s%s", a, "");
    }
    if (!json_is_object(j) || !fam || !fp || strlen(fam) >= sizeof info->family || strlen(fp) != 16 ||
        !json_is_integer(sbj) || sb < 0 ||
        ids_of(json_object_get(j, "tokens"), &info->tokens, &info->n_tokens) != 0 ||
        ids_of(json_object_get(j, "pending"), &info->pending, &info->n_pending) != 0) {
        json_decref(j);
        ms_seqfile_info_clear(info);
        return refuse(path, "its header is malformed%s%s", "", "");
    }
    snprintf(info->family, sizeof info->family, "%s", fam);
    snprintf(info->fingerprint, sizeof info->fingerprint, "%s", fp);
    *h_len = hl;
    *state_bytes = (uint64_t)sb;
    *hdr = j;
    return 0;
}

int ms_seqfile_read(const char *path, ms_model *m, const char *family, const char *fingerprint, ms_seqfile_info *info,
                    ms_seq **s)
{
    memset(info, 0, sizeof *info);
    *s = NULL;
    uint64_t size = 0;
    int fd = ms_file_open(path, "state file", 0, 0, &size); /* a FIFO or device is refused, never waited on */
    if (fd < 0) return -1;
    int rc = -1;
    json_t *h = NULL;
    char *body = NULL;
    uint32_t hl = 0;
    uint64_t sb = 0;
    XXH3_state_t *x = XXH3_createState();
    XXH3_64bits_reset(x);
    /* The header first, then its claims against this model, before the body is read: a file
     * of any size that is not this model's state costs a few reads. */
    if (read_header(fd, path, size, x, info, &hl, &sb, &h) != 0) goto out;
    if (strcmp(info->family, family)) {
        refuse(path, "it is a state of a %s model, and this one is %s", info->family, family);
        goto out;
    }
    if (strcmp(info->fingerprint, fingerprint)) {
        refuse(path, "it is a state of another model (fingerprint %s; this model's is %s)", info->fingerprint, fingerprint);
        goto out;
    }
    const ms_model_info *mi = ms_model_get_info(m);
    uint64_t most = ms_model_saved_state_max(m, (int64_t)info->n_tokens);
    if ((mi->max_context > 0 && (int64_t)info->n_tokens > mi->max_context) || sb > most) {
        char a[64], b[64];
        snprintf(a, sizeof a, "%zu positions in %llu bytes", info->n_tokens, (unsigned long long)sb);
        snprintf(b, sizeof b, "%llu bytes", (unsigned long long)most);
        refuse(path, "its header claims %s; this model's state of that many positions takes at most %s", a, b);
        goto out;
    }
    /* The body, hashed as it is read into the one buffer the state is loaded from. */
    body = ms_malloc((size_t)sb + 1);
    if (ms_file_pread(fd, path, 16 + (uint64_t)hl, body, (size_t)sb) != 0) goto out;
    XXH3_64bits_update(x, body, (size_t)sb);
    uint64_t sum, want;
    if (ms_file_pread(fd, path, 16 + (uint64_t)hl + sb, &want, 8) != 0) goto out;
    sum = XXH3_64bits_digest(x);
    if (sum != want) {
        refuse(path, "its checksum does not match (corrupt, or cut short)%s%s", "", "");
        goto out;
    }
    json_t *meta = json_object_get(h, "meta");
    if (meta) info->meta = json_dumps(meta, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!(*s = ms_seq_load(m, body, (size_t)sb))) {
        ms_err_wrap("%s", path);
        ms_err_set_code(MS_EXIT_INPUT);
        goto out;
    }
    if ((size_t)ms_seq_pos(*s) != info->n_tokens) {
        ms_seq_free(*s);
        *s = NULL;
        refuse(path, "its header's tokens and its state's position disagree%s%s", "", "");
        goto out;
    }
    rc = 0;
out:
    if (rc != 0) ms_seqfile_info_clear(info);
    XXH3_freeState(x);
    json_decref(h);
    free(body);
    close(fd);
    return rc;
}

int ms_seqfile_peek(const char *path, ms_seqfile_info *info)
{
    memset(info, 0, sizeof *info);
    uint64_t size = 0, sb;
    uint32_t hl;
    json_t *h = NULL;
    int fd = ms_file_open(path, "state file", 0, 0, &size); /* a FIFO named *.state is refused at once */
    if (fd < 0) return -1;
    int rc = read_header(fd, path, size, NULL, info, &hl, &sb, &h);
    json_decref(h);
    close(fd);
    return rc;
}
