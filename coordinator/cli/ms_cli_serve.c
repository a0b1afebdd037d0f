/* ms_cli_serve: the `serve` command: an OpenAI-compatible HTTP API over the batched engine
 * (coordinator/serve), with its options, the API key, and the SIGTERM drain. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ms_cli.h"
#include "ms_clock.h"
#include "ms_cli_eopt.h"
#include "ms_cli_pcache.h"
#include "ms_engine.h"
#include "ms_err.h"
#include "ms_opt.h"
#include "ms_sengine.h"
#include "ms_shttp.h"
#include "ms_smetrics.h"

#define DEFAULT_BATCH_CAP 32
#define DRAIN_HTTP_S 30.0

typedef struct {
    ms_cli_eopts e;
    const char *listen, *key_file, *model_name, *date, *cors;
    long long max_batch, max_queue, max_context, max_connections, max_per_ip;
    uint64_t max_body;
    float request_timeout, read_timeout;
    ms_cli_pcopts pc;           /* the prefix cache */
} serve_opts;

static void serve_usage(FILE *f)
{
    fputs("usage: moestream serve --model DIR [--listen HOST:PORT] [--api-key-file FILE] [--max-batch N]\n"
          "                       [--max-queue N] [--max-context N] [--max-body SIZE] [--request-timeout SEC]\n"
          "                       [--read-timeout SEC] [--max-connections N] [--max-connections-per-ip N]\n"
          "                       [--model-name NAME] [--date YYYY-MM-DD] [--cors ORIGINS] [--ram-budget SIZE] [--quiet]\n"
          "                       [--threads N] [--buffered-io] [--mmap auto|off] [--io-depth N] [--prefill-chunk N] [--prefill-span N|off]\n"
          "                       [--prefill-mixed off|auto|N] [--scratch-dir DIR|off]\n"
          "                       [--lru-cache] [--trunk-pack DIR|none] [--pin-threads] [--expert-prefetch auto|on|off]\n"
          "                       [--workers EP[,EP...] | --cluster FILE | --local-workers N]\n"
          "                       [--curve-secret FILE] [--insecure] [--worker-timeout SEC]\n"
          "                       [--speculate auto|off|N] [--draft auto|ngram|mtp] [--draft-file PATH]\n"
          "                       " MS_CLI_PC_USAGE "\n"
          "\n"
          "Serves an OpenAI-compatible HTTP API (see docs/API.md): POST /v1/completions and\n"
          "/v1/chat/completions (\"stream\": true for Server-Sent Events), GET /v1/models, /health and\n"
          "/metrics (Prometheus text). Requests join the running batch at the next step; each answer is\n"
          "the same as `moestream run` on the request alone.\n"
          "  --listen HOST:PORT     address to listen on (default 127.0.0.1:8080; port 0: any free port).\n"
          "                         Anything but loopback needs --api-key-file, or --insecure.\n"
          "  --api-key-file FILE    requests must carry \"Authorization: Bearer KEY\" with the key in FILE\n"
          "                         (its first line); /health is open.\n"
          "  --max-batch N          sequences decoding together (default: what the budget holds, up to 32)\n"
          "  --max-queue N          requests waiting beyond the batch before 429 (default 64)\n"
          "  --max-context N        bound on prompt + max_tokens of one request, planned for (default 4096)\n"
          "  --date YYYY-MM-DD      the date chat prompts carry (gpt-oss's harmony; default today, UTC)\n"
          "  --max-body SIZE        largest request body (default 1M; larger: 413)\n"
          "  --request-timeout SEC  a request not finished by then is cancelled (504; default: none)\n"
          "  --read-timeout SEC     a connection must send a whole request (headers and body) within SEC of\n"
          "                         opening, or of its previous answer, else it is closed (default 10)\n"
          "  --max-connections N    connections open at once (default: batch + queue + 64); beyond, 503\n"
          "                         with Retry-After\n"
          "  --max-connections-per-ip N  from one client address (default: half of --max-connections;\n"
          "                         raise it behind a reverse proxy, whose address every client shares)\n"
          "  --model-name NAME      the model's name in /v1/models and answers (default: DIR's last part)\n"
          "  --cors ORIGINS         let browser pages from these origins call the API: '*' or a comma-separated\n"
          "                         list (https://app.example,http://localhost:5173); answers OPTIONS preflights\n"
          "  --insecure             also allows plain tcp to workers listed without a key\n"
          "Each request speculates on its own.\n" MS_CLI_EOPT_SPEC_HELP MS_CLI_PC_HELP
          "--prefill-mixed off|auto|N: a prompt arriving while other requests decode goes in chunks beside them\n"
          "(off, the default), or in passes of up to N rows (auto: those touching 9/10 of a layer's experts): its\n"
          "first token sooner and fewer bytes read, the decoders waiting longer for each token.\n"
          "A chat that goes on from an earlier request then prefills only what is new.\n"
          "Other options as for run. SIGTERM or Ctrl-C drains: /health says 503 draining, new requests get\n"
          "503, the requests already taken finish, and serve exits 0; a second one cancels them at the next\n"
          "step and exits 130. Access log lines go to stderr (no prompt text).\n",
          f);
}

/* The key: the file's first line without surrounding blanks. NULL with a printed error. */
static char *read_key(const char *path, int *code)
{
    size_t len;
    char *b = ms_cli_read_file(path, &len);
    if (!b) {
        *code = ms_cli_fail_err("serve");
        return NULL;
    }
    for (size_t i = 0; i < len && b[i] != '\n' && b[i] != '\r'; i++)
        if ((unsigned char)b[i] < 0x20 && b[i] != '\t') { /* a NUL would cut the key short */
            free(b);
            *code = ms_cli_fail("serve", MS_EXIT_USAGE, "the API key in %s holds a control character (byte %zu)", path, i);
            return NULL;
        }
    char *p = b;
    while (*p == ' ' || *p == '\t') p++;
    size_t n = strcspn(p, "\r\n");
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
    if (n < 8) {
        free(b);
        *code = ms_cli_fail("serve", MS_EXIT_USAGE, "the API key in %s is shorter than 8 characters", path);
        return NULL;
    }
    char *k = ms_malloc(n + 1);
    memcpy(k, p, n);
    k[n] = 0;
    free(b);
    return k;
}

static int serve_main(const serve_opts *o)
{
    const char *cmd = "serve";
    int rc = MS_EXIT_OK;
    char *key = NULL;
    ms_tok *tok = NULL;
    ms_engine *e = NULL;
    ms_smetrics *m = NULL;
    ms_sengine *s = NULL;
    ms_pcache *pc = NULL;
    ms_shttp *h = NULL;
    if (!ms_shttp_is_loopback(o->listen)) {
        if (ms_err_code() == MS_EXIT_USAGE) return ms_cli_fail_err(cmd);
        if (!o->key_file && !o->e.insecure)
            return ms_cli_fail(cmd, MS_EXIT_USAGE,
                               "--listen %s is not a loopback address: give --api-key-file FILE (or --insecure to serve "
                               "without a key)",
                               o->listen);
    }
    if (o->key_file && !(key = read_key(o->key_file, &rc))) return rc;

    /* Signals go to the main thread alone (sigtimedwait below); every thread inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    ms_engine_opts eo = {0};
    ms_cli_eopt_engine(&o->e, &eo);
    eo.run.prompt_tokens = o->max_context;
    eo.run.max_positions = o->max_context + 1;
    /* The prefix cache: as asked, else a share of the budget, given up when the budget cannot
     * spare it (a small budget serves without one rather than not at all). */
    ms_cli_pcopts pco = o->pc;
    if (o->max_batch > 0)
        eo.max_seqs = (int)o->max_batch;
    else
        eo.fit_seqs = DEFAULT_BATCH_CAP;
    if (!(e = ms_cli_pc_engine_open(&pco, 1, o->e.budget, cmd, &eo))) {
        rc = ms_cli_fail_err(cmd);
        goto out;
    }
    if (ms_tok_present(o->e.model) && !(tok = ms_tok_load(o->e.model))) { /* the HTTP threads' own */
        rc = ms_cli_fail_err(cmd);
        goto out;
    }
    int batch = ms_engine_max_seqs(e);
    m = ms_smetrics_new();
    {
        int pcode = 0;
        pc = pco.off ? NULL : ms_cli_pc_open(&pco, 0, e, o->e.model, cmd, &pcode);
        if (pcode) {
            rc = pcode;
            goto out;
        }
    }
    if (!(s = ms_sengine_start(e, batch, (int)o->max_queue, m, pc))) {
        rc = ms_cli_fail_err(cmd);
        goto out;
    }
    const char *slash = strrchr(o->e.model, '/');
    while (slash && !slash[1] && slash > o->e.model) { /* "dir/" */
        const char *q = slash - 1;
        while (q > o->e.model && *q != '/') q--;
        slash = *q == '/' ? q : NULL;
    }
    char name[256];
    if (o->model_name)
        snprintf(name, sizeof name, "%s", o->model_name);
    else
        snprintf(name, sizeof name, "%.*s", (int)strcspn(slash ? slash + 1 : o->e.model, "/"), slash ? slash + 1 : o->e.model);
    ms_shttp_opts ho = {0};
    ho.listen = o->listen;
    ho.api_key = key;
    ho.model_name = name;
    ho.max_body = (size_t)o->max_body;
    const ms_chatfmt *chat = ms_engine_family(e)->chat;
    ho.lim = (ms_jobfile_limits){tok, ms_engine_info(e)->vocab, o->max_context, chat, o->date, 0, batch};
    ho.n_chat_stop = tok && chat ? chat->stop_ids(tok, ho.chat_stop, MS_CHAT_MAX_STOPS) : 0;
    ho.request_timeout = o->request_timeout;
    ho.read_timeout = o->read_timeout;
    ho.max_connections = o->max_connections > 0 ? (int)o->max_connections : (int)(batch + o->max_queue + 64);
    ho.max_per_ip = o->max_per_ip > 0 ? (int)o->max_per_ip : (ho.max_connections + 1) / 2;
    ho.cors = o->cors;
    if (!(h = ms_shttp_start(&ho, s, m))) {
        rc = ms_cli_fail_err(cmd);
        goto out;
    }
    ms_log(1, "serve: model %s, up to %d sequences together, %lld more queued, context %lld tokens%s", name, batch,
           o->max_queue, o->max_context, key ? ", API key required" : "");
    /* Said even with --quiet (level 0), once: scripts wait for this line to know the port. */
    ms_log(0, "serve: listening on %s", ms_shttp_url(h));

    int sig = 0;
    for (;;) {
        struct timespec ts = {1, 0};
        sig = sigtimedwait(&sigs, NULL, &ts);
        if (sig > 0) break;
        int ok = ms_sengine_ok(s);
        if (ok != 1) {
            rc = ms_cli_fail(cmd, -ok, "the engine failed; stopping (see the log above)");
            goto out;
        }
    }
    ms_log(1, "serve: signal %d: draining: new requests get 503, finishing the requests taken (a second "
              "signal stops at once)",
           sig);
    ms_shttp_quiesce(h);
    ms_sengine_drain_begin(s);
    int forced = 0;
    while (!ms_sengine_drained(s)) { /* a second SIGINT/SIGTERM while draining: a forced stop */
        struct timespec ts = {0, 100 * 1000 * 1000};
        int again = sigtimedwait(&sigs, NULL, &ts);
        if (again > 0 && !forced) {
            forced = 1;
            ms_log(0, "serve: signal %d again: stopping now, cancelling the requests still running", again);
            ms_sengine_abort(s);
        }
    }
    ms_sengine_drain(s);
    double t0 = ms_now();
    while (!ms_shttp_wait_idle(h, 0.1)) {
        struct timespec ts = {0, 0};
        int again = sigtimedwait(&sigs, NULL, &ts);
        if (again > 0) forced = 1;
        if (forced || ms_now() - t0 > DRAIN_HTTP_S) {
            if (!forced) ms_log(1, "serve: answers still being sent after %.0f s: closing them", DRAIN_HTTP_S);
            break;
        }
    }
    ms_log(1, "serve: stopped%s", forced ? " (forced by a second signal)" : "");
    if (forced) rc = MS_EXIT_INTERRUPTED;
out:
    ms_shttp_stop(h);
    ms_sengine_free(s);
    ms_pcache_free(pc);
    ms_smetrics_free(m);
    ms_engine_free(e);
    ms_tok_free(tok);
    free(key);
    return rc;
}

int ms_cli_serve(int argc, char **argv)
{
    static const struct option own[] = {
        {"listen", required_argument, 0, 'l'},
        {"api-key-file", required_argument, 0, 'k'},
        {"max-batch", required_argument, 0, 'b'},
        {"max-queue", required_argument, 0, 'Q'},
        {"max-context", required_argument, 0, 'X'},
        {"date", required_argument, 0, 0x6461},
        {"max-body", required_argument, 0, 'Y'},
        {"request-timeout", required_argument, 0, 'R'},
        {"model-name", required_argument, 0, 'M'},
        {"read-timeout", required_argument, 0, 0x7274},
        {"max-connections", required_argument, 0, 0x6d63},
        {"max-connections-per-ip", required_argument, 0, 0x6d70},
        {"cors", required_argument, 0, 0x636f},
        {"help", no_argument, 0, 'h'},
        MS_CLI_PC_OPTIONS,
    };
    enum { N_OWN = sizeof own / sizeof own[0] };
    struct option opts[N_OWN + MS_CLI_EOPT_COUNT + 1];
    ms_cli_eopt_table(own, N_OWN, opts);
    const char *cmd = "serve";
    serve_opts o = {.listen = "127.0.0.1:8080", .max_queue = 64, .max_context = 4096, .max_body = 1 << 20,
                    .read_timeout = 10};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'l': o.listen = optarg; break;
        case 'k': o.key_file = optarg; break;
        case 'M': o.model_name = optarg; break;
        case 'b': bad = ms_opt_int("--max-batch", optarg, 1, MS_MODEL_MAX_SEQS, &o.max_batch); break;
        case 'Q': bad = ms_opt_int("--max-queue", optarg, 0, 1 << 20, &o.max_queue); break;
        case 'X': bad = ms_opt_int("--max-context", optarg, 2, 1 << 24, &o.max_context); break;
        case 0x6461: /* --date */
            bad = ms_opt_date("--date", optarg);
            o.date = optarg;
            break;
        case 'Y':
            bad = ms_opt_size("--max-body", optarg, &o.max_body);
            if (!bad && (o.max_body < 64 || o.max_body > ((uint64_t)1 << 30)))
                return ms_cli_fail(cmd, MS_EXIT_USAGE, "--max-body must be between 64 bytes and 1G, got '%s'", optarg);
            break;
        case 'R':
            bad = ms_opt_f32("--request-timeout", optarg, &o.request_timeout);
            if (!bad && !(o.request_timeout > 0))
                return ms_cli_fail(cmd, MS_EXIT_USAGE, "--request-timeout must be a positive number, got '%s'", optarg);
            break;
        case 0x7274:
            bad = ms_opt_f32("--read-timeout", optarg, &o.read_timeout);
            if (!bad && !(o.read_timeout > 0))
                return ms_cli_fail(cmd, MS_EXIT_USAGE, "--read-timeout must be a positive number, got '%s'", optarg);
            break;
        case 0x6d63: bad = ms_opt_int("--max-connections", optarg, 1, 1 << 20, &o.max_connections); break;
        case 0x6d70: bad = ms_opt_int("--max-connections-per-ip", optarg, 1, 1 << 20, &o.max_per_ip); break;
        case 0x636f: /* --cors */
            if (!*optarg || strchr(optarg, ' ') || (strchr(optarg, '*') && strcmp(optarg, "*")))
                return ms_cli_fail(cmd, MS_EXIT_USAGE,
                                   "--cors takes '*' or origins separated by commas without spaces "
                                   "(https://app.example,http://localhost:5173), got '%s'", optarg);
            o.cors = optarg;
            break;
        case 'h': serve_usage(stdout); return MS_EXIT_OK;
        default: {
            int code, t = ms_cli_eopt_take_all(&o.e, &o.pc, cmd, c, optarg, &code);
            if (t > 0) break;
            if (t == 0) serve_usage(stderr);
            return code;
        }
        }
        if (bad) return ms_cli_fail_err(cmd);
    }
    int rc = ms_cli_eopt_end(argc, argv, &o.e, cmd);
    return rc != MS_EXIT_OK ? rc : serve_main(&o);
}
