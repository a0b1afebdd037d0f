/* test_ident: full-content tensor hashes and the model fingerprint: every byte counts, the sidecar is reused, invalidated and relocated as documented. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ms_err.h"
#include "ms_ident.h"
#include "ms_st.h"
#include "ms_synth.h"
#include "ms_test.h"

/* XXH3-128 of a tensor's bytes read here, in canonical form: the reference. */
static void ref_hash(const ms_st *st, const ms_st_tensor *t, uint8_t out[16])
{
    uint8_t *b = malloc(t->nbytes ? t->nbytes : 1);
    T_CHECK(ms_st_read(st, t, 0, b, t->nbytes) == 0, "read %s", t->name);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(b, t->nbytes));
    memcpy(out, c.digest, 16);
    free(b);
}

static double mtime_of(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 ? (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec : -1;
}

int main(void)
{
    ms_log_set_level(0);
    unsetenv("MS_CACHE_DIR");
    const char *d = ms_t_tmpdir("ident");
    char dir[4200], copy[4200], side[4400], cache[4200];
    snprintf(dir, sizeof dir, "%s/m", d);
    snprintf(copy, sizeof copy, "%s/copy", d);
    snprintf(cache, sizeof cache, "%s/cache", d);
    ms_synth_shape sh;
    ms_synth_preset("tiny", &sh);
    T_CHECK(ms_synth_write(dir, &sh, 3) == 0, "synth: %s", ms_err_msg());
    ms_st *st = ms_st_open_dir(dir);
    if (!st) return ms_t_done();
    size_t nt = ms_st_count(st);

    /* every tensor's hash equals XXH3-128 of its bytes; the sidecar is written beside the model */
    uint8_t(*h)[16] = malloc(16 * nt), ref[16];
    T_CHECK(ms_ident_hashes(dir, st, NULL, 0, h) == 0, "hash every tensor: %s", ms_err_msg());
    int same = 1;
    for (size_t i = 0; i < nt; i++) {
        ref_hash(st, ms_st_at(st, i), ref);
        same &= !memcmp(ref, h[i], 16);
    }
    T_CHECK(same, "all %zu tensor hashes equal XXH3-128 of the tensors' bytes", nt);
    ms_ident_sidecar_path(dir, side, sizeof side);
    T_CHECK(!strcmp(side, ms_t_path(dir, "moestream.ident")) && access(side, F_OK) == 0, "sidecar beside the model: %s",
            side);
    double m1 = mtime_of(side);
    ms_t_sleep_ms(20);
    char fp1[17], fp2[17], fp3[17];
    T_CHECK(ms_ident_fingerprint(dir, fp1) == 0 && strlen(fp1) == 16, "fingerprint %s", fp1);
    T_CHECK(mtime_of(side) == m1, "the second call reads the sidecar: nothing hashed, the sidecar not rewritten");

    /* one byte in the middle of the largest tensor: its hash and the fingerprint change */
    const ms_st_tensor *big = ms_st_at(st, 0);
    size_t bi = 0;
    for (size_t i = 0; i < nt; i++)
        if (ms_st_at(st, i)->nbytes > big->nbytes) big = ms_st_at(st, bi = i);
    const char *bpath = ms_st_file_path(st, big->file);
    ms_t_flip_byte(bpath, big->offset + big->nbytes / 2, 1);
    T_CHECK(ms_ident_fingerprint(dir, fp2) == 0 && strcmp(fp1, fp2) != 0,
            "a byte flipped in the middle of %s (%llu bytes): the fingerprint changes (%s -> %s)", big->name,
            (unsigned long long)big->nbytes, fp1, fp2);
    const char *one[1] = {big->name};
    uint8_t h1[1][16];
    ref_hash(st, big, ref);
    T_CHECK(ms_ident_hashes(dir, st, one, 1, h1) == 0 && !memcmp(h1[0], ref, 16) && memcmp(h1[0], h[bi], 16) != 0,
            "its cached hash was invalidated (mtime): the new bytes' hash");
    ms_t_flip_byte(bpath, big->offset + big->nbytes / 2, 1);
    T_CHECK(ms_ident_fingerprint(dir, fp3) == 0 && strcmp(fp1, fp3) == 0, "flipped back: the first fingerprint again");

    /* a copy elsewhere (other inodes): the same fingerprint, hashed anew */
    char cmd[20000];
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s %s && rm %s/moestream.ident", copy, dir, copy, copy);
    T_CHECK(ms_t_run(cmd, NULL) == 0, "copy");
    T_CHECK(ms_ident_fingerprint(copy, fp2) == 0 && !strcmp(fp1, fp2), "a copy has the same fingerprint");

    /* a corrupt sidecar is ignored and rewritten */
    T_CHECK(ms_t_write_file(side, "MSIDENT1 garbage") == 0, "corrupt the sidecar");
    T_CHECK(ms_ident_fingerprint(dir, fp2) == 0 && !strcmp(fp1, fp2), "a corrupt sidecar is ignored (same fingerprint)");
    size_t sl = 0;
    char *sb = ms_t_read_file(side, &sl);
    T_CHECK(sb && sl > 100 && !memcmp(sb, "MSIDENT1", 8), "and rewritten (%zu bytes)", sl);
    free(sb);

    /* a read-only model directory: the sidecar goes to MS_CACHE_DIR, never into the model */
    snprintf(cmd, sizeof cmd, "rm -f %s/moestream.ident && chmod 0555 %s", copy, copy);
    T_CHECK(ms_t_run(cmd, NULL) == 0, "make the copy read-only");
    setenv("MS_CACHE_DIR", cache, 1);
    ms_ident_sidecar_path(copy, side, sizeof side);
    T_CHECK(!strncmp(side, cache, strlen(cache)) && strstr(side, "/ident-"), "read-only model: sidecar in the cache: %s",
            side);
    T_CHECK(ms_ident_fingerprint(copy, fp2) == 0 && !strcmp(fp1, fp2) && access(side, F_OK) == 0 &&
                access(ms_t_path(copy, "moestream.ident"), F_OK) != 0,
            "fingerprint of a read-only copy: cached in %s, nothing written into the model", side);
    unsetenv("MS_CACHE_DIR");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", d, 1);
    ms_ident_sidecar_path(copy, side, sizeof side);
    T_CHECK(strstr(side, "/.cache/moestream/ident-") != NULL, "without MS_CACHE_DIR: $HOME/.cache/moestream (%s)", side);
    /* a cache others can write to is neither read nor written: hashes planted there would vouch
     * for other bytes (the sidecar kept there above is there, and ignored) */
    setenv("MS_CACHE_DIR", cache, 1);
    ms_ident_sidecar_path(copy, side, sizeof side);
    T_CHECK(ms_ident_sidecar_kept(copy) == 1, "the cached sidecar counts while the cache is private: %s", side);
    T_CHECK(chmod(cache, 0777) == 0, "chmod 0777 %s", cache);
    T_CHECK(ms_ident_sidecar_kept(copy) == 0 && ms_ident_fingerprint(copy, fp2) == 0 && !strcmp(fp1, fp2),
            "a cache others can write to is not used; the fingerprint is computed all the same");
    chmod(cache, 0700);
    /* no HOME: the home from the password file, never a shared /tmp/.cache */
    unsetenv("MS_CACHE_DIR");
    unsetenv("HOME");
    ms_ident_sidecar_path(copy, side, sizeof side);
    T_CHECK(strncmp(side, "/tmp/", 5) != 0, "without HOME: not under /tmp (%s)", side[0] ? side : "no cache");
    setenv("HOME", d, 1);
    snprintf(cmd, sizeof cmd, "chmod 0755 %s", copy);
    ms_t_run(cmd, NULL);
    /* the sidecar beside the model is written through a new file, never a symlink planted at
     * the old predictable name (moestream.ident.tmp.<pid>) */
    {
        char victim[4400], lnk[4400];
        snprintf(victim, sizeof victim, "%s/victim", d);
        ms_t_write_file(victim, "precious");
        snprintf(lnk, sizeof lnk, "%s/moestream.ident.tmp.%ld", copy, (long)getpid());
        unlink(lnk);
        unlink(ms_t_path(copy, "moestream.ident"));
        T_CHECK(symlink(victim, lnk) == 0, "plant a symlink at %s", lnk);
        char *v = NULL;
        T_CHECK(ms_ident_fingerprint(copy, fp2) == 0 && ms_ident_sidecar_kept(copy) == 1 &&
                    (v = ms_t_read_file(victim, NULL)) && !strcmp(v, "precious"),
                "the sidecar is written, the symlink's target keeps its bytes");
        free(v);
        unlink(lnk);
    }

    /* a tensor it does not have is refused by name */
    const char *none[1] = {"no.such.tensor"};
    T_CHECK(ms_ident_hashes(dir, st, none, 1, h1) != 0 && ms_err_code() == MS_EXIT_MODEL &&
                strstr(ms_err_msg(), "no.such.tensor"),
            "an unknown tensor is refused naming it: %s", ms_err_msg());
    free(h);
    ms_st_close(st);
    return ms_t_done();
}
