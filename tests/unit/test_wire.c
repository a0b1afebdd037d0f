/* test_wire: the expert format descriptor (JSON, protobuf, comparison), item grouping, the one
 * CURVE key-file reader and endpoint checks. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "ms_err.h"
#include "ms_expert.h"
#include "ms_test.h"
#include "ms_k3_experts.h"
#include "ms_wire.h"
#include "ms_xfmt.h"

static int has(const char *s, const char *n) { return s && n && strstr(s, n) != NULL; }

static char tmp[1024]; /* this test's directory */

static void test_format(void)
{
    ms_xfmt f, g;
    /* spec §4.5: one K3 expert (L = 3584, I = 3072) is 17,547,264 bytes in six U8 parts */
    T_CHECK(ms_k3_experts_fmt(3584, 3072, 4.0f, 25.0f, &f) == 0, "K3 format: %s", ms_err_msg());
    T_CHECK(ms_xfmt_expert_bytes(&f) == 17547264ull && f.n_parts == 6 && f.n_mats == 3, "K3 expert: %llu bytes",
            (unsigned long long)ms_xfmt_expert_bytes(&f));
    T_CHECK(!strcmp(f.part[2].name, "w2.weight_packed") && f.part[2].shape[0] == 3584 &&
                f.part[2].shape[1] == 3072 / 2 && !strcmp(f.part[5].name, "w3.weight_scale") &&
                f.part[5].shape[0] == 3072 && f.part[5].shape[1] == 3584 / 32,
            "parts: w2 packed [L, I/2], w3 scale [I, L/32]");
    T_CHECK(ms_k3_experts_fmt(48, 64, 4.0f, 25.0f, &g) == -1 && ms_err_code() == MS_EXIT_MODEL && has(ms_err_msg(), "48"),
            "a latent width that is not a multiple of 32 is refused: %s", ms_err_msg());

    /* names are plain (they go into JSON manifests and tensor names): a peer's byte 0xb2 in a part
     * name is refused, not turned into a manifest that cannot be written (found by fuzz_xfmt) */
    ms_k3_experts_fmt(64, 96, 4.0f, 25.0f, &g);
    g.part[3].name[1] = (char)0xb2;
    char nwhy[300];
    T_CHECK(ms_xfmt_check(&g, nwhy, sizeof nwhy) == -1 && has(nwhy, "parts[3].name"), "a non-plain part name: %s", nwhy);
    ms_k3_experts_fmt(64, 96, 4.0f, 25.0f, &g);
    snprintf(g.mat[1].name, sizeof g.mat[1].name, "w 2");
    T_CHECK(ms_xfmt_check(&g, nwhy, sizeof nwhy) == -1 && has(nwhy, "matrices[1].name"), "a non-plain matrix name: %s",
            nwhy);

    /* JSON: round trip bit for bit (a constant with no short decimal form too). */
    ms_k3_experts_fmt(64, 96, 0.1f, 25.0f, &f);
    json_t *j = ms_xfmt_to_json(&f);
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    json_error_t je;
    j = json_loads(text, 0, &je);
    char diff[256] = "";
    T_CHECK(j && ms_xfmt_from_json(j, "x.json", &g) == 0 && !ms_xfmt_diff(&f, &g, diff, sizeof diff) &&
                !memcmp(&f.param[0], &g.param[0], sizeof f.param[0]),
            "JSON round trip (%s): %s", diff, ms_err_msg());
    json_decref(j);
    free(text);

    /* protobuf: round trip through the encoded bytes. */
    ms_xfmt_pb keep;
    Moestream__ExpertFormat *pb = ms_xfmt_to_proto(&f, &keep);
    size_t len = moestream__expert_format__get_packed_size(pb);
    uint8_t *buf = malloc(len);
    moestream__expert_format__pack(pb, buf);
    Moestream__ExpertFormat *back = moestream__expert_format__unpack(NULL, len, buf);
    char why[256] = "";
    T_CHECK(back && ms_xfmt_from_proto(back, &g, why, sizeof why) == 0 && !ms_xfmt_diff(&f, &g, diff, sizeof diff),
            "protobuf round trip (%s%s)", why, diff);
    /* A tampered part shape is caught by the consistency check, naming the part. */
    if (back) {
        back->parts[3]->shape[1]++;
        T_CHECK(ms_xfmt_from_proto(back, &g, why, sizeof why) == -1 && has(why, "parts[3]"),
                "a part shape that the encoding does not make is refused: %s", why);
        moestream__expert_format__free_unpacked(back, NULL);
    }
    free(buf);
    T_CHECK(ms_xfmt_from_proto(NULL, &g, why, sizeof why) == -1 && has(why, "expert_format"), "no format: %s", why);

    /* The family is a plain name: a peer's hello with bytes that are not (here invalid UTF-8,
     * found by fuzz_xfmt) is refused, so every accepted format prints and goes back to JSON. */
    pb = ms_xfmt_to_proto(&f, &keep);
    pb->family = "kim\x97\xd2k3";
    why[0] = 0;
    T_CHECK(ms_xfmt_from_proto(pb, &g, why, sizeof why) == -1 && has(why, "family"),
            "a family that is not a plain name is refused: %s", why);
    j = ms_xfmt_to_json(&f);
    json_object_set_new(j, "family", json_string("kimi\x1b[2Jk3"));
    T_CHECK(ms_xfmt_from_json(j, "x.json", &g) == -1 && has(ms_err_msg(), "family"),
            "a family with a control character is refused: %s", ms_err_msg());
    json_decref(j);

    /* Plain SwiGLU (no constants, gate / up / down, no biases): a descriptor of its own that goes
     * through JSON and protobuf unchanged; SwiGLU with gpt-oss's gate_up layout is refused. */
    {
        static const char *const gp[2] = {"gate_proj.weight", "gate_proj.scale"}, *const upn[2] = {"up_proj.weight", "up_proj.scale"},
                                 *const dp[2] = {"down_proj.weight", "down_proj.scale"};
        ms_xfmt s, t;
        ms_xfmt_begin(&s, "swiglu-test", 64, 96, MS_XACT_SWIGLU, NULL, 0);
        ms_xfmt_add_mat(&s, "gate", MS_XROLE_GATE, MS_XENC_MXFP4, MS_XFMT_NO_BIAS, gp);
        ms_xfmt_add_mat(&s, "up", MS_XROLE_UP, MS_XENC_MXFP4, MS_XFMT_NO_BIAS, upn);
        ms_xfmt_add_mat(&s, "down", MS_XROLE_DOWN, MS_XENC_MXFP4, MS_XFMT_NO_BIAS, dp);
        char sw[256] = "";
        T_CHECK(ms_xfmt_check(&s, sw, sizeof sw) == 0 && s.n_parts == 6, "a swiglu descriptor is whole: %s", sw);
        json_t *sj = ms_xfmt_to_json(&s);
        T_CHECK(!strcmp(json_string_value(json_object_get(json_object_get(sj, "activation"), "name")), "swiglu") &&
                    ms_xfmt_from_json(sj, "s.json", &t) == 0 && !ms_xfmt_diff(&s, &t, sw, sizeof sw),
                "swiglu through JSON (%s)", sw);
        json_decref(sj);
        Moestream__ExpertFormat *sp = ms_xfmt_to_proto(&s, &keep);
        T_CHECK(ms_xfmt_from_proto(sp, &t, sw, sizeof sw) == 0 && !ms_xfmt_diff(&s, &t, sw, sizeof sw) &&
                    t.act == MS_XACT_SWIGLU,
                "swiglu through protobuf (%s)", sw);
        ms_xfmt_begin(&s, "swiglu-test", 64, 96, MS_XACT_SWIGLU, NULL, 0);
        ms_xfmt_add_mat(&s, "gate_up", MS_XROLE_GATE_UP, MS_XENC_MXFP4, MS_XFMT_NO_BIAS, gp);
        ms_xfmt_add_mat(&s, "down", MS_XROLE_DOWN, MS_XENC_MXFP4, MS_XFMT_NO_BIAS, dp);
        T_CHECK(ms_xfmt_check(&s, sw, sizeof sw) == -1, "swiglu over a gate_up matrix is refused: %s", sw);
        /* BF16 and FP8 experts: their parts' shapes (FP8: a scale per 128 x 128 block, partial
         * edge blocks), through JSON and protobuf */
        static const char *const g8[2] = {"gate_proj.weight", "gate_proj.weight_scale_inv"},
                                 *const u8[2] = {"up_proj.weight", "up_proj.weight_scale_inv"},
                                 *const d8[2] = {"down_proj.weight", "down_proj.weight_scale_inv"};
        for (int e = 0; e < 3; e++) {
            ms_xenc enc = e == 2 ? MS_XENC_FP8_BF16S : e ? MS_XENC_FP8 : MS_XENC_BF16;
            ms_xfmt_begin(&s, "swiglu-test", 200, 300, MS_XACT_SWIGLU, NULL, 0);
            ms_xfmt_add_mat(&s, "gate", MS_XROLE_GATE, enc, MS_XFMT_NO_BIAS, g8);
            ms_xfmt_add_mat(&s, "up", MS_XROLE_UP, enc, MS_XFMT_NO_BIAS, u8);
            ms_xfmt_add_mat(&s, "down", MS_XROLE_DOWN, enc, MS_XFMT_NO_BIAS, d8);
            int parts_ok = e ? s.n_parts == 6 && s.part[0].dtype == MS_DT_F8_E4M3 && s.part[0].bytes == 300 * 200 &&
                                   s.part[1].dtype == (e == 2 ? MS_DT_BF16 : MS_DT_F32) && s.part[1].shape[0] == 3 &&
                                   s.part[1].shape[1] == 2 && s.part[5].shape[0] == 2 && s.part[5].shape[1] == 3 &&
                                   ms_xfmt_expert_bytes(&s) == 3ull * 300 * 200 + 3ull * 6 * (e == 2 ? 2 : 4)
                             : s.n_parts == 3 && s.part[2].dtype == MS_DT_BF16 && s.part[2].shape[0] == 200 &&
                                   s.part[2].shape[1] == 300 && ms_xfmt_expert_bytes(&s) == 3ull * 300 * 200 * 2;
            T_CHECK(ms_xfmt_check(&s, sw, sizeof sw) == 0 && parts_ok, "%s experts of widths 200, 300: parts as released (%s)",
                    ms_xfmt_enc_name(enc), sw);
            json_t *ej = ms_xfmt_to_json(&s);
            T_CHECK(ms_xfmt_from_json(ej, "e.json", &t) == 0 && !ms_xfmt_diff(&s, &t, sw, sizeof sw), "%s through JSON (%s)",
                    ms_xfmt_enc_name(enc), sw);
            json_decref(ej);
            sp = ms_xfmt_to_proto(&s, &keep);
            T_CHECK(ms_xfmt_from_proto(sp, &t, sw, sizeof sw) == 0 && !ms_xfmt_diff(&s, &t, sw, sizeof sw),
                    "%s through protobuf (%s)", ms_xfmt_enc_name(enc), sw);
        }
    }

    /* Comparison names the first field that differs. */
    ms_k3_experts_fmt(64, 96, 4.0f, 25.0f, &f);
    ms_k3_experts_fmt(64, 128, 4.0f, 25.0f, &g);
    T_CHECK(ms_xfmt_diff(&f, &g, diff, sizeof diff) && has(diff, "inter: 96 vs 128"), "inter differs: %s", diff);
    ms_k3_experts_fmt(64, 96, 4.0f, 25.5f, &g);
    T_CHECK(ms_xfmt_diff(&f, &g, diff, sizeof diff) && has(diff, "activation.b2"), "b2 differs: %s", diff);
    g = f;
    snprintf(g.family, sizeof g.family, "other");
    T_CHECK(ms_xfmt_diff(&f, &g, diff, sizeof diff) && has(diff, "family: kimi-k3 vs other"), "family: %s", diff);
    T_CHECK(!ms_xfmt_diff(&f, &f, diff, sizeof diff), "a format equals itself");
}

static void test_group(void)
{
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int trial = 0; trial < 50; trial++) {
        int64_t n = 1 + (int64_t)(rng % 97);
        uint32_t ids[97];
        for (int64_t i = 0; i < n; i++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            ids[i] = (uint32_t)(rng % 9);
        }
        ms_xgroup g;
        int ok = ms_xgroup_build(&g, n, ids, 9) == 0;
        /* every item once; a group is one expert; increasing within a group; first-appearance order */
        uint8_t seen[97] = {0};
        int64_t first[9];
        for (int e = 0; e < 9; e++) first[e] = -1;
        for (int64_t i = 0; i < n; i++)
            if (first[ids[i]] < 0) first[ids[i]] = i;
        for (int d = 0; ok && d < g.nd; d++) {
            if (d > 0 && first[g.dexp[d]] < first[g.dexp[d - 1]]) ok = 0;
            for (int64_t t = g.start[d]; t < g.start[d + 1]; t++) {
                int64_t q = ms_xgroup_item(&g, t);
                if (q < 0 || q >= n || seen[q]++ || ids[q] != (uint32_t)g.dexp[d]) ok = 0;
                if (t > g.start[d] && ms_xgroup_item(&g, t - 1) >= q) ok = 0;
            }
        }
        ok = ok && g.start[g.nd] == n;
        for (int64_t i = 0; i < n; i++) ok = ok && seen[i] == 1;
        T_CHECK(ok, "trial %d: a stable grouping of %lld items", trial, (long long)n);
        /* The grouped order is accepted as runs, as it is. */
        uint32_t sorted[97];
        for (int64_t t = 0; t < n; t++) sorted[t] = ids[ms_xgroup_item(&g, t)];
        ms_xgroup r;
        T_CHECK(ms_xgroup_runs(&r, n, sorted, 9) == 0 && r.nd == g.nd && r.item == NULL, "trial %d: runs", trial);
        ms_xgroup_free(&r);
        ms_xgroup_free(&g);
    }
    uint32_t bad[3] = {1, 2, 1}, big[2] = {0, 9};
    ms_xgroup g;
    T_CHECK(ms_xgroup_runs(&g, 3, bad, 9) == -1 && has(ms_err_msg(), "item 2") && has(ms_err_msg(), "grouped"),
            "1, 2, 1 is not grouped: %s", ms_err_msg());
    T_CHECK(ms_xgroup_build(&g, 2, big, 9) == -1 && has(ms_err_msg(), "expert id 9"), "out of range: %s",
            ms_err_msg());
    T_CHECK(g.dexp == NULL && g.item == NULL, "a failed grouping leaves nothing to free");
}

/* Run ms_wire_read_keys with stderr captured into *err (malloc'ed). */
static int read_keys(const char *path, int secret, char (**keys)[41], char **err)
{
    char cap[1100];
    snprintf(cap, sizeof cap, "%s/stderr.txt", tmp);
    fflush(stderr);
    int saved = dup(2), fd = open(cap, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
    int n = ms_wire_read_keys(path, secret ? "--curve-secret" : "--allow", secret, keys);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    *err = ms_t_read_file(cap, NULL);
    return n;
}

static void write_file(const char *path, const char *text, int mode)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    chmod(path, (mode_t)mode);
}

static void test_keys(void)
{
    char pub[41], sec[41], pub2[41], sec2[41];
    if (zmq_curve_keypair(pub, sec) != 0 || zmq_curve_keypair(pub2, sec2) != 0) {
        ms_t_skip("libzmq without CURVE");
        return;
    }
    const char *d = tmp;
    char path[1100], text[512], *err = NULL;
    char(*keys)[41] = NULL;
    snprintf(path, sizeof path, "%s/key", d);

    snprintf(text, sizeof text, "# the coordinator's secret\n\n  %s  \n", sec);
    write_file(path, text, 0600);
    int n = read_keys(path, 1, &keys, &err);
    T_CHECK(n == 1 && !strcmp(keys[0], sec), "a secret key with a comment and spaces: %s", ms_err_msg());
    T_CHECK(err && !has(err, "readable"), "no warning for a 0600 secret: %s", err ? err : "");
    ms_wire_keys_free(keys, n);
    free(err);

    /* A secret readable by others is read, with a warning naming the file (both sides use this). */
    chmod(path, 0644);
    n = read_keys(path, 1, &keys, &err);
    T_CHECK(n == 1 && has(err, "readable by other users") && has(err, path) && has(err, "chmod 600"),
            "a 0644 secret is warned about: %s", err ? err : "");
    ms_wire_keys_free(keys, n);
    free(err);
    chmod(path, 0640);
    n = read_keys(path, 1, &keys, &err);
    T_CHECK(n == 1 && has(err, "readable by other users"), "a group-readable secret too: %s", err ? err : "");
    ms_wire_keys_free(keys, n);
    free(err);
    /* An allow list is public: no warning, many keys. */
    snprintf(text, sizeof text, "%s\n# second\n%s\n", pub, pub2);
    write_file(path, text, 0644);
    n = read_keys(path, 0, &keys, &err);
    T_CHECK(n == 2 && !strcmp(keys[0], pub) && !strcmp(keys[1], pub2) && !has(err, "readable"),
            "an allow list of two keys: %d %s", n, ms_err_msg());
    ms_wire_keys_free(keys, n);
    free(err);
    /* Errors name the file and the line. */
    n = read_keys(path, 1, &keys, &err);
    T_CHECK(n == -1 && ms_err_code() == MS_EXIT_USAGE && has(ms_err_msg(), path) && has(ms_err_msg(), "line 3") &&
                has(ms_err_msg(), "more than one key"),
            "two keys in a secret file: %s", ms_err_msg());
    free(err);
    write_file(path, "# nothing\n\n", 0600);
    n = read_keys(path, 1, &keys, &err);
    T_CHECK(n == -1 && ms_err_code() == MS_EXIT_USAGE && has(ms_err_msg(), "no key"), "empty: %s", ms_err_msg());
    free(err);
    snprintf(text, sizeof text, "%s\n%.39s\n", pub, pub2);
    write_file(path, text, 0600);
    n = read_keys(path, 0, &keys, &err);
    T_CHECK(n == -1 && ms_err_code() == MS_EXIT_USAGE && has(ms_err_msg(), "line 2") && has(ms_err_msg(), "Z85"),
            "a short key: %s", ms_err_msg());
    free(err);
    /* A public key given as the secret: refused by its name (keygen's PREFIX.pub). */
    snprintf(path, sizeof path, "%s/coord.pub", d);
    snprintf(text, sizeof text, "%s\n", pub);
    write_file(path, text, 0644);
    n = read_keys(path, 1, &keys, &err);
    T_CHECK(n == -1 && ms_err_code() == MS_EXIT_USAGE && has(ms_err_msg(), "public key") && has(ms_err_msg(), path),
            "a .pub file as the secret: %s", ms_err_msg());
    free(err);
    snprintf(path, sizeof path, "%s/missing", d);
    n = read_keys(path, 1, &keys, &err);
    T_CHECK(n == -1 && ms_err_code() == MS_EXIT_IO && has(ms_err_msg(), path), "a missing file: %s", ms_err_msg());
    free(err);
}

static void test_endpoints(void)
{
    static const char *good[] = {"tcp://127.0.0.1:5555", "tcp://worker-3.example:1", "tcp://[::1]:65535",
                                 "ipc:///tmp/ms/w0.sock", "inproc://w"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        T_CHECK(ms_wire_check_endpoint(good[i], 0) == 0, "%s accepted: %s", good[i], ms_err_msg());
    T_CHECK(ms_wire_check_endpoint("tcp://*:*", 1) == 0 && ms_wire_check_endpoint("tcp://127.0.0.1:0", 1) == 0,
            "a worker may bind port '*' or 0");
    struct {
        const char *ep, *needle;
    } bad[] = {{"bogus://x", "unknown transport"}, {"tcp://host", "HOST:PORT"},  {"tcp://:5555", "HOST:PORT"},
               {"tcp://h:99999", "port"},          {"tcp://h:0", "port"},        {"tcp://h:*", "port"},
               {"tcp://h:12ab", "port"},           {"ipc://", "socket path"},    {"tcp://::1:5", "brackets"},
               {"", "unknown transport"},          {"inproc://", "no name"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ms_err_clear();
        int rc = ms_wire_check_endpoint(bad[i].ep, 0);
        T_CHECK(rc == -1 && ms_err_code() == MS_EXIT_USAGE && has(ms_err_msg(), bad[i].needle) &&
                    has(ms_err_msg(), "tcp://HOST:PORT"),
                "'%s' refused (%s): %s", bad[i].ep, bad[i].needle, ms_err_msg());
    }
}

/* A hello without an expert format is refused by the decoder with FORMAT. */
static void test_hello(void)
{
    Moestream__Envelope e = MOESTREAM__ENVELOPE__INIT;
    Moestream__Hello h = MOESTREAM__HELLO__INIT;
    uint8_t u[16] = {1};
    h.client_uuid.data = u;
    h.client_uuid.len = 16;
    h.model_fingerprint = "0123456789abcdef";
    e.body_case = MOESTREAM__ENVELOPE__BODY_HELLO;
    e.hello = &h;
    uint8_t *buf;
    size_t len;
    ms_wire_pack(&e, &buf, &len);
    char why[256];
    int code = 0;
    Moestream__Envelope *x = ms_wire_unpack(buf, len, why, sizeof why, &code);
    T_CHECK(!x && code == MOESTREAM__ERROR__CODE__FORMAT && has(why, "expert_format"), "hello without a format: %s",
            why);
    ms_wire_free(x);
    free(buf);
    ms_xfmt f;
    ms_xfmt_pb keep;
    ms_k3_experts_fmt(32, 64, 4.0f, 25.0f, &f);
    h.expert_format = ms_xfmt_to_proto(&f, &keep);
    ms_wire_pack(&e, &buf, &len);
    x = ms_wire_unpack(buf, len, why, sizeof why, &code);
    T_CHECK(x && x->protocol_version == MS_WIRE_VERSION && MS_WIRE_VERSION == 3, "a hello with a format: %s",
            x ? "ok" : why);
    ms_wire_free(x);
    free(buf);
}

int main(void)
{
    snprintf(tmp, sizeof tmp, "%s", ms_t_tmpdir("wire"));
    test_format();
    test_group();
    test_keys();
    test_endpoints();
    test_hello();
    return ms_t_done();
}
