/* ms_cli: shared CLI helpers and the tokenize, detokenize and synth commands. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "ms_cli.h"
#include "ms_utf8.h"
#include "ms_clock.h"
#include "ms_err.h"
#include "ms_families.h"
#include "ms_file.h"
#include "ms_ids.h"
#include "ms_jobfile.h"
#include "ms_jtext.h"
#include "ms_opt.h"
#include "ms_progress.h"
#include "ms_tok.h"

int ms_cli_fail(const char *cmd, int code, const char *fmt, ...)
{
    char who[64];
    snprintf(who, sizeof who, "moestream %s", cmd);
    va_list ap;
    va_start(ap, fmt);
    ms_opt_vfail(who, code, fmt, ap);
    va_end(ap);
    return code;
}

int ms_cli_fail_err(const char *cmd) { return ms_cli_fail(cmd, ms_err_code(), "%s", ms_err_msg()); }

void ms_cli_put_text(int raw, ms_utf8_stream *st, const char *bytes, size_t len)
{
    if (raw) {
        fwrite(bytes, 1, len, stdout);
        return;
    }
    char *out = ms_malloc(3 * (len + 4));
    fwrite(out, 1, ms_utf8_stream_put(st, bytes, len, out), stdout);
    free(out);
}

void ms_cli_set_output(int quiet)
{
    ms_log_set_level(quiet ? 0 : 1);
    ms_progress_use_stderr();
}

int ms_cli_parse_ids(const char *s, int32_t **ids, size_t *n) { return ms_ids_parse(s, ids, n); }

char *ms_cli_read_file(const char *path, size_t *len)
{
    /* Regular files and pipes (--file <(cmd)); a device such as /dev/zero is refused, and
     * nothing beyond the limit is read. */
    return ms_file_read_all(path, "input file", MS_FILE_STREAM, MS_CLI_MAX_INPUT, MS_EXIT_INPUT, len);
}

double ms_cli_now(void) { return ms_now(); }

const char *ms_cli_families(char *buf, size_t n, int names, const char *sep, const char *last_sep)
{
    size_t at = 0;
    int k = ms_families_count();
    buf[0] = 0;
    for (int i = 0; i < k && at < n; i++) {
        const ms_family *f = ms_families_at(i);
        at += (size_t)snprintf(buf + at, n - at, "%s%s", i == 0 ? "" : i == k - 1 ? last_sep : sep,
                               names || !f->title ? f->name : f->title);
    }
    return buf;
}

void ms_cli_put_wrapped(FILE *f, const char *text)
{
    int col = 0;
    for (const char *p = text; *p;) {
        while (*p == ' ') p++;
        size_t w = strcspn(p, " ");
        if (!w) break;
        if (col > 0 && col + 1 + (int)w > 96) {
            fputc('\n', f);
            col = 0;
        } else if (col > 0) {
            fputc(' ', f);
            col++;
        }
        fwrite(p, 1, w, f);
        col += (int)w;
        p += w;
    }
    fputc('\n', f);
}

/* ---- tokenize ---- */

static void tokenize_usage(FILE *f)
{
    fputs("usage: moestream tokenize --tokenizer DIR (--text TEXT | --file PATH) [--allow-special] [--json]\n"
          "       moestream tokenize --model DIR --chat FILE [--date YYYY-MM-DD] [--json]\n"
          "\n"
          "Prints the token ids of the text, space separated (or {\"ids\": [...]} with --json).\n"
          "Special-token strings are plain text unless --allow-special is given.\n"
          "With --chat, FILE is a chat request body as /v1/chat/completions takes it (\"messages\",\n"
          "optional \"tools\", \"reasoning_effort\", \"chat_template_kwargs\"): the ids of the prompt the model's\n"
          "family renders from it, with --json {\"ids\": [...], \"text\": \"...\"}. --date fixes the date a\n"
          "harmony system message carries. chat_template_kwargs.add_generation_prompt false (here only)\n"
          "renders the chat as it stands, a last assistant turn included (the training form).\n",
          f);
}

static void print_ids(const int32_t *ids, size_t n, const char *text, size_t tlen, int js)
{
    if (js) {
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
        json_t *o = json_pack("{s:o}", "ids", a);
        if (text) json_object_set_new(o, "text", json_stringn(text, tlen));
        json_dumpf(o, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(o);
    } else {
        for (size_t i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
        fputc('\n', stdout);
    }
}

/* tokenize --chat: the prompt a chat request body renders to in the model's family format. */
static int tokenize_chat(const char *model, const char *tokdir, const char *chat, const char *date, int js, int other)
{
    const char *cmd = "tokenize";
    if (!model || !chat) return ms_cli_fail(cmd, MS_EXIT_USAGE, "--chat FILE goes with --model DIR (the family's chat format)");
    if (other) return ms_cli_fail(cmd, MS_EXIT_USAGE, "--chat does not go with --text, --file or --allow-special");
    const ms_family *fam = ms_families_detect(model);
    if (!fam) return ms_cli_fail_err(cmd);
    if (!fam->chat) return ms_cli_fail(cmd, MS_EXIT_MODEL, "%s: the %s family has no chat format", model, fam->name);
    ms_tok *tok = ms_tok_load(tokdir ? tokdir : model);
    if (!tok) return ms_cli_fail_err(cmd);
    size_t len = 0;
    char *body = ms_cli_read_file(chat, &len);
    int rc = MS_EXIT_OK;
    if (!body) {
        rc = ms_cli_fail_err(cmd);
    } else {
        /* the same reader as jobs and serve: a chat body is a job line's short form */
        ms_jobfile_limits lim = {tok, ms_tok_n_vocab(tok), (int64_t)1 << 40, fam->chat, date, 1};
        ms_jobspec j;
        ms_jobspec_parse(body, len, 1, &lim, &j);
        if (j.err_code) {
            rc = ms_cli_fail(cmd, MS_EXIT_INPUT, "%s: %s", chat, j.err_msg);
        } else {
            char *txt = NULL;
            size_t tl = 0;
            if (js && ms_tok_decode(tok, j.prompt, j.n_prompt, &txt, &tl) != 0) rc = ms_cli_fail_err(cmd);
            if (rc == MS_EXIT_OK) print_ids(j.prompt, j.n_prompt, txt, tl, js);
            free(txt);
        }
        ms_jobspec_clear(&j);
    }
    free(body);
    ms_tok_free(tok);
    return rc;
}

int ms_cli_tokenize(int argc, char **argv)
{
    static const struct option opts[] = {{"tokenizer", required_argument, 0, 't'}, {"text", required_argument, 0, 'x'},
                                         {"file", required_argument, 0, 'f'},      {"allow-special", no_argument, 0, 's'},
                                         {"json", no_argument, 0, 'j'},            {"help", no_argument, 0, 'h'},
                                         {"model", required_argument, 0, 'm'},     {"chat", required_argument, 0, 'c'},
                                         {"date", required_argument, 0, 'd'},      {0, 0, 0, 0}};
    const char *dir = NULL, *text = NULL, *file = NULL, *model = NULL, *chat = NULL, *date = NULL;
    int allow = 0, js = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 't': dir = optarg; break;
        case 'x': text = optarg; break;
        case 'f': file = optarg; break;
        case 's': allow = 1; break;
        case 'j': js = 1; break;
        case 'm': model = optarg; break;
        case 'c': chat = optarg; break;
        case 'd':
            if (ms_opt_date("--date", optarg) != 0) return ms_cli_fail_err("tokenize");
            date = optarg;
            break;
        case 'h': tokenize_usage(stdout); return MS_EXIT_OK;
        default: tokenize_usage(stderr); return MS_EXIT_USAGE;
        }
    }
    if (optind != argc) return ms_cli_fail("tokenize", MS_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    if (chat || model) return tokenize_chat(model, dir, chat, date, js, text || file || allow);
    if (!dir) return ms_cli_fail("tokenize", MS_EXIT_USAGE, "--tokenizer DIR is required");
    if (!!text + !!file != 1) return ms_cli_fail("tokenize", MS_EXIT_USAGE, "give exactly one of --text or --file");
    size_t len = 0;
    char *buf = NULL;
    if (file) {
        buf = ms_cli_read_file(file, &len);
        if (!buf) return ms_cli_fail_err("tokenize");
    } else {
        len = strlen(text);
    }
    ms_tok *tok = ms_tok_load(dir);
    if (!tok) {
        free(buf);
        return ms_cli_fail_err("tokenize");
    }
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = MS_EXIT_OK;
    if (ms_tok_encode(tok, buf ? buf : text, len, allow, &ids, &n) != 0) {
        ms_err_set_code(MS_EXIT_INPUT);
        rc = ms_cli_fail_err("tokenize");
    } else {
        print_ids(ids, n, NULL, 0, js);
    }
    free(ids);
    free(buf);
    ms_tok_free(tok);
    return rc;
}

/* ---- detokenize ---- */

static void detokenize_usage(FILE *f)
{
    fputs("usage: moestream detokenize --tokenizer DIR (--ids 1,2,3 | --file PATH) [--skip-special] [--json]\n"
          "\n"
          "Prints the text of the ids (raw bytes) and a newline, or {\"text\": ...} with --json (bytes that are not\n"
          "valid UTF-8 become U+FFFD there). --file holds ids separated by commas or whitespace.\n"
          "--skip-special leaves special tokens out (the text run, jobs and serve show for generated ids).\n",
          f);
}

int ms_cli_detokenize(int argc, char **argv)
{
    static const struct option opts[] = {{"tokenizer", required_argument, 0, 't'}, {"ids", required_argument, 0, 'i'},
                                         {"file", required_argument, 0, 'f'},      {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},            {"skip-special", no_argument, 0, 's'},
                                         {0, 0, 0, 0}};
    const char *dir = NULL, *idstr = NULL, *file = NULL;
    int js = 0, skip = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 't': dir = optarg; break;
        case 'i': idstr = optarg; break;
        case 'f': file = optarg; break;
        case 'j': js = 1; break;
        case 's': skip = 1; break;
        case 'h': detokenize_usage(stdout); return MS_EXIT_OK;
        default: detokenize_usage(stderr); return MS_EXIT_USAGE;
        }
    }
    if (optind != argc) return ms_cli_fail("detokenize", MS_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    if (!dir) return ms_cli_fail("detokenize", MS_EXIT_USAGE, "--tokenizer DIR is required");
    if (!!idstr + !!file != 1) return ms_cli_fail("detokenize", MS_EXIT_USAGE, "give exactly one of --ids or --file");
    char *buf = NULL;
    if (file && !(buf = ms_cli_read_file(file, NULL))) return ms_cli_fail_err("detokenize");
    int32_t *ids = NULL;
    size_t n = 0;
    if (ms_cli_parse_ids(buf ? buf : idstr, &ids, &n) != 0) {
        free(buf);
        return ms_cli_fail_err("detokenize");
    }
    free(buf);
    ms_tok *tok = ms_tok_load(dir);
    if (!tok) {
        free(ids);
        return ms_cli_fail_err("detokenize");
    }
    char *text = NULL;
    size_t len = 0;
    int rc = MS_EXIT_OK;
    if (ms_tok_decode_text(tok, ids, n, skip, &text, &len) != 0) {
        ms_err_set_code(MS_EXIT_INPUT);
        rc = ms_cli_fail_err("detokenize");
    } else if (js) {
        json_t *o = json_pack("{s:o}", "text", ms_jtext(text, len));
        json_dumpf(o, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(o);
    } else {
        fwrite(text, 1, len, stdout);
        fputc('\n', stdout); /* a line, like every other command's output (--json's too) */
    }
    free(text);
    free(ids);
    ms_tok_free(tok);
    return rc;
}

/* ---- synth ---- */

static void synth_usage(FILE *f)
{
    fputs("usage: moestream synth --out DIR [--preset NAME] [--layers N] [--seed S] [--sparse] [--force]\n"
          "\n"
          "Writes a random checkpoint in a family's released layout; the same preset and seed always give\n"
          "the same bytes. A family's presets (its demo's is what `moestream demo --family NAME` runs):\n",
          f);
    for (int i = 0; i < ms_families_count(); i++) {
        const ms_family *fam = ms_families_at(i);
        if (!fam->synth || !fam->synth_help) continue;
        char para[2048];
        snprintf(para, sizeof para, "- %s (%s; demo: %s): %s.", fam->title ? fam->title : fam->name, fam->name,
                 fam->demo_preset, fam->synth_help);
        ms_cli_put_wrapped(f, para);
    }
    fputs("--sparse writes the headers only: every weight is zero and stored as a hole of a sparse\n"
          "file, so the files take almost no disk (reading them costs no device I/O).\n"
          "DIR must be new or empty: synth refuses to write over an existing directory's files (with the\n"
          "k3-full preset they have the release's names), unless --force.\n",
          f);
}

/* The first entry of directory d other than . and .. (into buf), or "" if it is empty or absent. */
static const char *first_entry(const char *d, char *buf, size_t cap)
{
    buf[0] = 0;
    DIR *dd = opendir(d);
    if (!dd) return buf;
    struct dirent *de;
    while ((de = readdir(dd)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(buf, cap, "%s", de->d_name);
            break;
        }
    closedir(dd);
    return buf;
}

int ms_cli_synth(int argc, char **argv)
{
    static const struct option opts[] = {{"out", required_argument, 0, 'o'}, {"preset", required_argument, 0, 'p'},
                                         {"seed", required_argument, 0, 's'}, {"help", no_argument, 0, 'h'},
                                         {"layers", required_argument, 0, 'l'},
                                         {"sparse", no_argument, 0, 'S'},  {"force", no_argument, 0, 'F'},
                                         {0, 0, 0, 0}};
    const char *out = NULL, *preset = "tiny";
    long long seed = 1, layers = 0;
    int c, sparse = 0, force = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'p': preset = optarg; break;
        case 's':
            if (ms_opt_int("--seed", optarg, LLONG_MIN, LLONG_MAX, &seed) != 0) return ms_cli_fail_err("synth");
            break;
        case 'l':
            if (ms_opt_int("--layers", optarg, 1, 1 << 20, &layers) != 0) return ms_cli_fail_err("synth"); /* the family bounds it */
            break;
        case 'S': sparse = 1; break;
        case 'F': force = 1; break;
        case 'h': synth_usage(stdout); return MS_EXIT_OK;
        default: synth_usage(stderr); return MS_EXIT_USAGE;
        }
    }
    if (optind != argc) return ms_cli_fail("synth", MS_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    if (!out) return ms_cli_fail("synth", MS_EXIT_USAGE, "--out DIR is required");
    struct stat sb;
    char entry[256];
    if (stat(out, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return ms_cli_fail("synth", MS_EXIT_USAGE, "--out %s exists and is not a directory", out);
    if (!force && first_entry(out, entry, sizeof entry)[0])
        return ms_cli_fail("synth", MS_EXIT_USAGE,
                           "--out %s is not empty (it holds %s): synth would overwrite a checkpoint's files there; give "
                           "a new or empty directory, or --force",
                           out, entry);
    ms_cli_set_output(0);
    if (ms_families_synth(out, preset, (int)layers, sparse, (uint64_t)seed) != 0) return ms_cli_fail_err("synth");
    if (sparse)
        fprintf(stderr, "moestream synth: wrote preset %s (sparse: zero weights, headers only) to %s\n", preset, out);
    else
        fprintf(stderr, "moestream synth: wrote preset %s (seed %lld) to %s\n", preset, seed, out);
    return MS_EXIT_OK;
}

/* ---- keygen ---- */

static void keygen_usage(FILE *f)
{
    fputs("usage: moestream keygen --out PREFIX\n"
          "\n"
          "Writes a CURVE key pair for ZeroMQ: PREFIX.pub (the public key) and PREFIX.key (the secret key,\n"
          "mode 0600), each one line of Z85 text. Existing files are not overwritten.\n",
          f);
}

static int write_key(const char *path, const char *key, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) {
        ms_err_set("cannot create %s: %s", path, strerror(errno));
        return ms_err_set_code(MS_EXIT_IO);
    }
    char line[64];
    int n = snprintf(line, sizeof line, "%s\n", key);
    int ok = write(fd, line, (size_t)n) == n && fchmod(fd, mode) == 0;
    ok &= close(fd) == 0;
    if (!ok) {
        unlink(path);
        ms_err_set("cannot write %s", path);
        return ms_err_set_code(MS_EXIT_IO);
    }
    return 0;
}

int ms_cli_keygen(int argc, char **argv)
{
    static const struct option opts[] = {{"out", required_argument, 0, 'o'}, {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *out = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'h': keygen_usage(stdout); return MS_EXIT_OK;
        default: keygen_usage(stderr); return MS_EXIT_USAGE;
        }
    }
    if (optind != argc) return ms_cli_fail("keygen", MS_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
    if (!out) return ms_cli_fail("keygen", MS_EXIT_USAGE, "--out PREFIX is required");
    char pub[41], sec[41], path[4096];
    if (zmq_curve_keypair(pub, sec) != 0)
        return ms_cli_fail("keygen", MS_EXIT_RUNTIME, "this libzmq has no CURVE support");
    snprintf(path, sizeof path, "%s.key", out);
    if (write_key(path, sec, 0600) != 0) return ms_cli_fail_err("keygen");
    snprintf(path, sizeof path, "%s.pub", out);
    if (write_key(path, pub, 0644) != 0) {
        snprintf(path, sizeof path, "%s.key", out);
        unlink(path);
        return ms_cli_fail_err("keygen");
    }
    fprintf(stderr, "moestream keygen: wrote %s.pub and %s.key (mode 0600)\n", out, out);
    return MS_EXIT_OK;
}
