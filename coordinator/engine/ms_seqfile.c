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
#define MAX_FILE ((size_t)1 << 40)

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
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid());
    FILE *o = fopen(tmp, "wb");
    int bad = !o || fwrite(f.s, 1, f.n, o) != f.n;
    if (o && (fflush(o) != 0 || fsync(fileno(o)) != 0)) bad = 1;
    if (o && fclose(o) != 0) bad = 1;
    int err = errno;
    ms_sbuf_free(&f);
    if (bad || rename(tmp, path) != 0) {
        if (!bad) err = errno;
        unlink(tmp);
        ms_err_set("cannot write the state file %s: %s", path, strerror(err));
        return ms_err_set_code(MS_EXIT_IO);
    }
    return 0;
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

int ms_seqfile_read(const char *path, ms_model *m, const char *family, const char *fingerprint, ms_seqfile_info *info,
                    ms_seq **s)
{
    memset(info, 0, sizeof *info);
    *s = NULL;
    size_t len = 0;
    char *b = ms_file_read_all(path, "state file", 0, MAX_FILE, MS_EXIT_IO, &len);
    if (!b) return -1;
    int rc = -1;
    json_t *h = NULL;
    uint32_t ver, hl;
    uint64_t sum;
    if (len < 24 || memcmp(b, MAGIC, 8)) {
        refuse(path, "not a moestream state file%s%s", "", "");
        goto out;
    }
    memcpy(&ver, b + 8, 4);
    memcpy(&hl, b + 12, 4);
    if (ver != MS_SEQFILE_VERSION) {
        char v[32], w[32];
        snprintf(v, sizeof v, "%u", ver);
        snprintf(w, sizeof w, "%d", MS_SEQFILE_VERSION);
        refuse(path, "written as version %s; this build reads version %s", v, w);
        goto out;
    }
    memcpy(&sum, b + len - 8, 8);
    if (XXH3_64bits(b, len - 8) != sum) {
        refuse(path, "its checksum does not match (corrupt, or cut short)%s%s", "", "");
        goto out;
    }
    json_error_t je;
    if ((size_t)hl > len - 24 || !(h = json_loadb(b + 16, hl, 0, &je)) || !json_is_object(h)) {
        refuse(path, "its header is not readable%s%s", "", "");
        goto out;
    }
    const char *fam = json_string_value(json_object_get(h, "family"));
    const char *fp = json_string_value(json_object_get(h, "fingerprint"));
    json_int_t sb = json_integer_value(json_object_get(h, "state_bytes"));
    if (!fam || !fp || strlen(fam) >= sizeof info->family || strlen(fp) != 16 || sb < 0 || (size_t)sb != len - 24 - hl ||
        ids_of(json_object_get(h, "tokens"), &info->tokens, &info->n_tokens) != 0 ||
        ids_of(json_object_get(h, "pending"), &info->pending, &info->n_pending) != 0) {
        refuse(path, "its header is malformed%s%s", "", "");
        goto out;
    }
    if (strcmp(fam, family)) {
        refuse(path, "it is a state of a %s model, and this one is %s", fam, family);
        goto out;
    }
    if (strcmp(fp, fingerprint)) {
        refuse(path, "it is a state of another model (fingerprint %s; this model's is %s)", fp, fingerprint);
        goto out;
    }
    snprintf(info->family, sizeof info->family, "%s", fam);
    snprintf(info->fingerprint, sizeof info->fingerprint, "%s", fp);
    json_t *meta = json_object_get(h, "meta");
    if (meta) info->meta = json_dumps(meta, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!(*s = ms_seq_load(m, b + 16 + hl, (size_t)sb))) {
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
    json_decref(h);
    free(b);
    return rc;
}

int ms_seqfile_peek(const char *path, ms_seqfile_info *info)
{
    memset(info, 0, sizeof *info);
    FILE *f = fopen(path, "rb");
    if (!f) {
        ms_err_set("cannot open the state file %s: %s", path, strerror(errno));
        return ms_err_set_code(MS_EXIT_IO);
    }
    char head[16];
    uint32_t ver, hl;
    char *h = NULL;
    json_t *j = NULL;
    int rc = -1;
    if (fread(head, 1, 16, f) != 16 || memcmp(head, MAGIC, 8)) goto bad;
    memcpy(&ver, head + 8, 4);
    memcpy(&hl, head + 12, 4);
    if (ver != MS_SEQFILE_VERSION || hl > (1u << 30)) goto bad;
    h = ms_malloc(hl + 1);
    if (fread(h, 1, hl, f) != hl || !(j = json_loadb(h, hl, 0, NULL))) goto bad;
    const char *fam = json_string_value(json_object_get(j, "family"));
    const char *fp = json_string_value(json_object_get(j, "fingerprint"));
    if (!fam || !fp || strlen(fam) >= sizeof info->family || strlen(fp) != 16 ||
        ids_of(json_object_get(j, "tokens"), &info->tokens, &info->n_tokens) != 0 ||
        ids_of(json_object_get(j, "pending"), &info->pending, &info->n_pending) != 0)
        goto bad;
    snprintf(info->family, sizeof info->family, "%s", fam);
    snprintf(info->fingerprint, sizeof info->fingerprint, "%s", fp);
    rc = 0;
    goto out;
bad:
    ms_seqfile_info_clear(info);
    refuse(path, "its header is not readable%s%s", "", "");
out:
    json_decref(j);
    free(h);
    fclose(f);
    return rc;
}
