/* ms_wire: protobuf-c envelope codec with validation, libuuid ids and the model fingerprint. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uuid/uuid.h>
#include "ms_xxh.h" /* XXH3, dispatched */
#include <zmq.h>

#include "ms_err.h"
#include "ms_file.h"
#include "ms_wire.h"

void ms_uuid_new(ms_uuid *u) { uuid_generate(u->b); }

void ms_uuid_str(const ms_uuid *u, char out[37]) { uuid_unparse_lower(u->b, out); }

void ms_wire_pack(Moestream__Envelope *e, uint8_t **buf, size_t *len)
{
    e->protocol_version = MS_WIRE_VERSION;
    *len = moestream__envelope__get_packed_size(e);
    *buf = ms_malloc(*len ? *len : 1);
    moestream__envelope__pack(e, *buf);
}

int ms_wire_uuid(const ProtobufCBinaryData *d, ms_uuid *u)
{
    if (d->len != 16) return -1;
    memcpy(u->b, d->data, 16);
    return 0;
}

static int bad(char *why, size_t n, int *code, int c, const char *msg)
{
    snprintf(why, n, "%s", msg);
    if (code) *code = c;
    return -1;
}

static int check(const Moestream__Envelope *e, char *why, size_t n, int *code)
{
    const int BM = MOESTREAM__ERROR__CODE__BAD_MESSAGE;
    if (e->protocol_version != MS_WIRE_VERSION) {
        snprintf(why, n, "protocol version %u is not supported (this side speaks %u)", e->protocol_version,
                 MS_WIRE_VERSION);
        if (code) *code = MOESTREAM__ERROR__CODE__VERSION;
        return -1;
    }
    switch (e->body_case) {
    case MOESTREAM__ENVELOPE__BODY_HELLO:
        if (e->hello->client_uuid.len != 16) return bad(why, n, code, BM, "hello: client_uuid is not 16 bytes");
        if (!e->hello->expert_format)
            return bad(why, n, code, MOESTREAM__ERROR__CODE__FORMAT, "hello: no expert_format");
        return 0;
    case MOESTREAM__ENVELOPE__BODY_HELLO_REPLY:
        if (e->hello_reply->worker_uuid.len != 16) return bad(why, n, code, BM, "hello reply: worker_uuid is not 16 bytes");
        if (!e->hello_reply->expert_format) return bad(why, n, code, BM, "hello reply: no expert_format");
        return 0;
    case MOESTREAM__ENVELOPE__BODY_COMPUTE: {
        const Moestream__ComputeRequest *c = e->compute;
        if (c->request_uuid.len != 16) return bad(why, n, code, BM, "compute: request_uuid is not 16 bytes");
        if (c->latent_width == 0 || c->rows == 0) return bad(why, n, code, BM, "compute: zero rows or latent_width");
        if ((uint64_t)c->rows * c->latent_width != c->n_activations) {
            snprintf(why, n, "compute: %zu activations for %u rows of width %u", c->n_activations, c->rows,
                     c->latent_width);
            if (code) *code = BM;
            return -1;
        }
        if (c->n_item_row != c->n_item_expert || c->n_item_row == 0)
            return bad(why, n, code, BM, "compute: item_row and item_expert differ in length or are empty");
        for (size_t i = 0; i < c->n_item_row; i++)
            if (c->item_row[i] >= c->rows) {
                snprintf(why, n, "compute: item %zu names row %u of %u", i, c->item_row[i], c->rows);
                if (code) *code = BM;
                return -1;
            }
        return 0;
    }
    case MOESTREAM__ENVELOPE__BODY_COMPUTE_REPLY: {
        const Moestream__ComputeReply *r = e->compute_reply;
        if (r->request_uuid.len != 16) return bad(why, n, code, BM, "compute reply: request_uuid is not 16 bytes");
        if ((uint64_t)r->items * r->latent_width != r->n_outputs)
            return bad(why, n, code, BM, "compute reply: outputs do not match items x latent_width");
        return 0;
    }
    case MOESTREAM__ENVELOPE__BODY_ERROR:
    case MOESTREAM__ENVELOPE__BODY_PING:
    case MOESTREAM__ENVELOPE__BODY_PONG:
    case MOESTREAM__ENVELOPE__BODY_STATS:
    case MOESTREAM__ENVELOPE__BODY_STATS_REPLY:
        return 0;
    default:
        return bad(why, n, code, BM, "message has no body");
    }
}

Moestream__Envelope *ms_wire_unpack(const uint8_t *buf, size_t len, char *why, size_t why_len, int *code)
{
    if ((int64_t)len > MS_WIRE_MAX_MSG) {
        bad(why, why_len, code, MOESTREAM__ERROR__CODE__TOO_LARGE, "message larger than the protocol allows");
        return NULL;
    }
    Moestream__Envelope *e = moestream__envelope__unpack(NULL, len, buf);
    if (!e) {
        bad(why, why_len, code, MOESTREAM__ERROR__CODE__BAD_MESSAGE, "not a valid protobuf Envelope");
        return NULL;
    }
    if (check(e, why, why_len, code) != 0) {
        moestream__envelope__free_unpacked(e, NULL);
        return NULL;
    }
    return e;
}

void ms_wire_free(Moestream__Envelope *e)
{
    if (e) moestream__envelope__free_unpacked(e, NULL);
}

void ms_wire_error(const ms_uuid *request, int code, const char *message, uint8_t **buf, size_t *len)
{
    Moestream__Envelope env = MOESTREAM__ENVELOPE__INIT;
    Moestream__Error err = MOESTREAM__ERROR__INIT;
    ms_uuid zero = {{0}};
    err.request_uuid.data = (uint8_t *)(request ? request->b : zero.b);
    err.request_uuid.len = 16;
    err.code = (Moestream__Error__Code)code;
    err.message = (char *)message;
    env.body_case = MOESTREAM__ENVELOPE__BODY_ERROR;
    env.error = &err;
    ms_wire_pack(&env, buf, len);
}

/* ---- CURVE key files (coordinator --curve-secret, worker --curve-secret and --allow) ---- */

static char *read_small(const char *path, const char *what)
{
    int fd = ms_file_open(path, what, 0, 0, NULL); /* a regular file: a FIFO is refused, not waited on */
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        ms_err_set("%s %s: cannot open: %s", what, path, strerror(errno));
        ms_err_set_code(MS_EXIT_IO);
        return NULL;
    }
    size_t cap = 1 << 20, len = 0, got;
    char *buf = ms_malloc(cap + 1);
    while (len < cap && (got = fread(buf + len, 1, cap - len, f)) > 0) len += got;
    int err = ferror(f);
    fclose(f);
    if (err || len == cap) {
        memset(buf, 0, len);
        free(buf);
        ms_err_set("%s %s: %s", what, path, err ? "read error" : "larger than 1 MiB: not a key file");
        ms_err_set_code(err ? MS_EXIT_IO : MS_EXIT_USAGE);
        return NULL;
    }
    buf[len] = 0;
    return buf;
}

/* Next key line of text (blank and '#' lines skipped), trimmed in place; NULL at the end. */
static char *next_line(char **cur, int *lineno)
{
    while (**cur) {
        char *s = *cur, *nl = strchr(s, '\n');
        *cur = nl ? nl + 1 : s + strlen(s);
        if (nl) *nl = 0;
        ++*lineno;
        while (isspace((unsigned char)*s)) s++;
        char *e = s + strlen(s);
        while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
        if (*s && *s != '#') return s;
    }
    return NULL;
}

void ms_wire_keys_free(char (*keys)[41], int n)
{
    if (!keys) return;
    memset(keys, 0, sizeof *keys * (size_t)(n > 0 ? n : 0));
    free(keys);
}

int ms_wire_read_keys(const char *path, const char *what, int secret, char (**keys)[41])
{
    *keys = NULL;
    size_t pl = strlen(path);
    if (secret && pl >= 4 && !strcmp(path + pl - 4, ".pub")) {
        ms_err_set("%s %s: a public key (keygen's PREFIX.pub); give the secret key, PREFIX.key", what, path);
        return ms_err_set_code(MS_EXIT_USAGE);
    }
    char *text = read_small(path, what);
    if (!text) return -1;
    size_t text_len = strlen(text); /* next_line cuts it with NULs: wipe all of it at the end */
    if (secret) {
        struct stat sb;
        if (stat(path, &sb) == 0 && (sb.st_mode & 077))
            ms_log(0, "warning: %s %s is a secret key readable by other users (mode %03o); chmod 600 it", what, path,
                   (unsigned)(sb.st_mode & 0777));
    }
    char *cur = text, *line;
    int lineno = 0, n = 0, cap = 0, rc = -1;
    uint8_t bin[32];
    while ((line = next_line(&cur, &lineno))) {
        if (secret && n == 1) {
            ms_err_set("%s %s line %d: more than one key in the file", what, path, lineno);
            ms_err_set_code(MS_EXIT_USAGE);
            goto out;
        }
        if (strlen(line) != 40 || !zmq_z85_decode(bin, line)) {
            ms_err_set("%s %s line %d: not a CURVE key (40 Z85 characters, as moestream keygen writes)", what, path,
                       lineno);
            ms_err_set_code(MS_EXIT_USAGE);
            goto out;
        }
        if (n == cap) {
            int nc = cap ? 2 * cap : 4;
            char (*grown)[41] = ms_calloc((size_t)nc, sizeof *grown);
            if (n) memcpy(grown, *keys, sizeof *grown * (size_t)n);
            ms_wire_keys_free(*keys, n);
            *keys = grown;
            cap = nc;
        }
        memcpy((*keys)[n++], line, 41);
    }
    if (n == 0) {
        ms_err_set("%s %s: no key in the file", what, path);
        ms_err_set_code(MS_EXIT_USAGE);
        goto out;
    }
    rc = n;
out:
    memset(text, 0, text_len);
    free(text);
    memset(bin, 0, sizeof bin);
    if (rc < 0) {
        ms_wire_keys_free(*keys, n);
        *keys = NULL;
    }
    return rc;
}

/* ---- endpoints ---- */

static int ep_fail(const char *ep, const char *why)
{
    ms_err_set("endpoint '%s': %s (expected tcp://HOST:PORT, ipc://PATH or inproc://NAME)", ep, why);
    return ms_err_set_code(MS_EXIT_USAGE);
}

int ms_wire_check_endpoint(const char *ep, int bind)
{
    if (!strncmp(ep, "ipc://", 6)) {
        size_t l = strlen(ep + 6);
        if (!l) return ep_fail(ep, "no socket path");
        if (l >= 108) return ep_fail(ep, "the socket path is longer than 107 bytes");
        return 0;
    }
    if (!strncmp(ep, "inproc://", 9)) return ep[9] ? 0 : ep_fail(ep, "no name");
    if (strncmp(ep, "tcp://", 6)) return ep_fail(ep, "unknown transport");
    const char *h = ep + 6, *colon = strrchr(h, ':');
    if (!colon || colon == h) return ep_fail(ep, "no HOST:PORT");
    if ((h[0] == '[') != (colon[-1] == ']') || (h[0] != '[' && memchr(h, ':', (size_t)(colon - h))))
        return ep_fail(ep, "an IPv6 address must be in brackets: [ADDR]:PORT");
    for (const char *c = h; c < colon; c++)
        if (isspace((unsigned char)*c) || *c == '/') return ep_fail(ep, "the host has a space or '/'");
    const char *port = colon + 1;
    if (bind && !strcmp(port, "*")) return 0;
    char *end;
    errno = 0;
    long v = strtol(port, &end, 10);
    if (!*port || *end || errno || v < (bind ? 0 : 1) || v > 65535 || !isdigit((unsigned char)*port))
        return ep_fail(ep, bind ? "the port must be 1..65535 or '*'" : "the port must be 1..65535");
    return 0;
}
