/* ms_cli_chat: `moestream chat`: a conversation on the terminal (or one message per stdin line)
 * that goes on from its own state: each turn prefills only its new tokens. */
#include <editline/readline.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ms_cli.h"
#include "ms_cli_pcache.h"
#include "ms_cli_eopt.h"
#include "ms_engine.h"
#include "ms_gentext.h"
#include "ms_err.h"
#include "ms_ident.h"
#include "ms_jtext.h"
#include "ms_opt.h"
#include "ms_progress.h"
#include "ms_sbuf.h"
#include "ms_seqfile.h"
#include "ms_size.h"
#include "ms_stdout.h"
#include "ms_utf8.h"

typedef struct {
    ms_cli_eopts e;
    const char *system, *session, *date;
    long long max_tokens, max_context, seed;
    float temperature, top_p;
    int raw, reasoning;
    ms_cli_pcopts pc;          /* the prefix cache (on by default) */
} chat_opts;

/* The conversation: a model state holding toks (every id fed), and the last answer's last id,
 * which the next turn feeds first (through the format's follow). */
typedef struct {
    const chat_opts *o;
    ms_engine *e;
    ms_tok *tok;
    const ms_chatfmt *fmt;
    int32_t stops[MS_CHAT_MAX_STOPS];
    int n_stops;
    ms_seq *state;              /* NULL: nothing fed yet */
    ms_pcache *pc;              /* kept prompt states: a new conversation that begins as a kept
                                   one (its system message) starts from that state; or NULL */
    int32_t *toks;              /* [n_toks] the ids the state holds */
    size_t n_toks, cap_toks;
    int32_t last;               /* the last answer's last id (not fed); -1 before the first answer */
    char *system;               /* the system message (owned), or NULL */
    json_t *log;                /* the messages so far, [{"role", "content"}] (for /save) */
    char fingerprint[17];       /* the model's, computed at the first /save or /load */
    int tty;                    /* stdin and stdout are terminals */
    /* the current answer */
    ms_gentext *text;           /* its ids' text, routed by the format */
    ms_utf8_stream utf8;
    ms_sbuf content;
    int in_reasoning;
    /* figures of the last turn */
    size_t fed_turn, reused_turn, gen_turn;
    double ttft_turn, secs_turn;
} chat;

static volatile sig_atomic_t got_int;
static void on_int(int sig)
{
    (void)sig;
    got_int = 1;
}

/* Ctrl-C's handler. At the prompt (restart 0) it must interrupt the terminal read, so readline
 * returns. While an answer streams (restart 1) the calls it lands in restart: a write to the
 * terminal returns EINTR when the signal arrives during it (always when the terminal's output is
 * stopped, Ctrl-S), and stdout would carry that error to the exit (code 4, the rest unsaid). */
static void int_handler(int restart)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_int;
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigaction(SIGINT, &sa, NULL);
}

static void chat_usage(FILE *f)
{
    fputs("usage: moestream chat --model DIR [--system TEXT] [--session FILE] [--max-tokens N] [--max-context N]\n"
          "                      [--temperature T] [--top-p P] [--seed S] [--date YYYY-MM-DD] [--reasoning] [--raw]\n"
          "                      [--ram-budget SIZE] [--threads N] [--buffered-io] [--mmap auto|off] [--io-depth N] [--prefill-chunk N]\n"
          "                      [--prefill-span N|off] [--prefill-mixed off|auto|N] [--scratch-dir DIR|off] [--trunk-pack DIR|none]\n"
          "                      [--workers EP[,EP...] | --cluster FILE | --local-workers N]\n"
          "                      [--curve-secret FILE] [--insecure] [--worker-timeout SEC]\n"
          "                      [--speculate auto|off|N] [--draft auto|ngram|mtp] [--draft-file PATH] [--quiet] [--pin-threads]\n"
          "                      [--expert-prefetch auto|on|off]\n"
          "                      " MS_CLI_PC_USAGE "\n"
          "\n"
          "A conversation in the model family's chat format. Each answer is printed as it is generated. The\n"
          "conversation goes on from its own state: a new message prefills only its own tokens, never the\n"
          "history again. On a terminal: line editing and history; a line ending in \\ goes on on the next\n"
          "line; Ctrl-C stops the answer being written (the conversation goes on from what it said), Ctrl-D\n"
          "leaves. With stdin not a terminal, each line is one message and each answer one line of output\n"
          "(its own line breaks and backslashes written as \\n, \\r and \\\\); a command that fails there\n"
          "makes the exit code (the run goes on).\n"
          "  /reset          start the conversation over (the system message stays)\n"
          "  /system TEXT    set the system message and start over\n"
          "  /save FILE      write the conversation's state (a versioned file tied to this model)\n"
          "  /load FILE      go on from a saved state (no prefill); --session FILE does it at the start\n"
          "  /stats          tokens in the context, what the last turn prefilled and reused, its speed\n"
          "  /help, /quit\n"
          "  --max-tokens N  longest answer (default: until the model ends its turn, or the context is full;\n"
          "                  -n N is the same)\n"
          "  --max-context N tokens a conversation may hold (default 8192; the plan reserves them)\n"
          "  --reasoning     also print a format's reasoning (harmony's analysis channel), on a terminal dimmed\n"
          "  --raw           print the tokens' bytes as they are (default: valid UTF-8)\n"
          "Sampling as for run (--temperature 0, the default, is greedy; --seed S: turn i samples with S + i).\n"
          "Other options as for run. Exit 0 at the end of input, 2 usage, 3/4/6/7 when the model cannot be\n"
          "opened, 5 when a state file is refused at --session.\n" MS_CLI_PC_HELP,
          f);
}

/* ---- printing the answer ---- */

/* On a terminal the text as it is; otherwise one answer is one line: its own line breaks and
 * backslashes are written escaped (\n, \r, \\), so a script reads an answer per line. */
static void out_text(chat *c, const char *s, size_t n)
{
    if (c->tty) {
        ms_cli_put_text(c->o->raw, &c->utf8, s, n);
        return;
    }
    size_t from = 0;
    for (size_t i = 0; i < n; i++) {
        const char *esc = s[i] == '\n' ? "\\n" : s[i] == '\r' ? "\\r" : s[i] == '\\' ? "\\\\" : NULL;
        if (!esc) continue;
        ms_cli_put_text(c->o->raw, &c->utf8, s + from, i - from);
        ms_cli_put_text(c->o->raw, &c->utf8, esc, 2);
        from = i + 1;
    }
    ms_cli_put_text(c->o->raw, &c->utf8, s + from, n - from);
}

static void on_token(void *ctx, ms_eseq *s, int32_t id)
{
    chat *c = ctx;
    for (int i = 0; i < c->n_stops; i++)
        if (id == c->stops[i]) ms_engine_seq_stop(s); /* the end of the assistant's turn */
    ms_gentext_news nw;
    if (ms_gentext_add(c->text, id, 0) < 0) return;
    ms_gentext_take(c->text, 0, 0, &nw); /* no stop strings: each id's text is final at once */
    for (int r = 1; r >= 0; r--) { /* an id's text goes to one of them */
        const char *t = r ? nw.reasoning : nw.content;
        size_t n = r ? nw.reasoning_len : nw.content_len;
        if (!n || (r && !c->o->reasoning)) continue;
        if (r != c->in_reasoning && c->tty) fputs(r ? "\033[2m" : "\033[0m", stdout);
        c->in_reasoning = r;
        if (!r) ms_sbuf_add(&c->content, t, n);
        out_text(c, t, n);
    }
    fflush(stdout);
}

/* ---- the conversation ---- */

static void toks_add(chat *c, const int32_t *v, size_t n)
{
    if (c->n_toks + n > c->cap_toks) {
        c->cap_toks = (c->n_toks + n) * 2 + 64;
        c->toks = ms_realloc(c->toks, sizeof *c->toks * c->cap_toks);
    }
    memcpy(c->toks + c->n_toks, v, sizeof *v * n);
    c->n_toks += n;
}

static void reset(chat *c)
{
    ms_seq_free(c->state);
    c->state = NULL;
    c->n_toks = 0;
    c->last = -1;
    json_decref(c->log);
    c->log = json_array();
}

static void log_msg(chat *c, const char *role, const char *text, size_t n)
{
    json_array_append_new(c->log, json_pack("{s:s,s:o}", "role", role, "content", ms_jtext(text, n))); /* valid UTF-8 */
}

/* One user message: its ids (the whole chat's at the start, else what follows the history),
 * then the answer, printed as it comes. 0, or the exit code after reporting (the conversation
 * is then as before this message when the prompt could not be made; a failed step ends it). */
static int answer(chat *c, const char *text, size_t len, int turn)
{
    ms_chat_msg msgs[2];
    int n = 0;
    ms_chat_opts opts = {0};
    opts.date = c->o->date;
    int32_t *ids = NULL;
    size_t nid = 0;
    int rc;
    if (!c->state) {
        if (c->system) msgs[n++] = (ms_chat_msg){"system", c->system, strlen(c->system)};
        msgs[n++] = (ms_chat_msg){"user", text, len};
        rc = c->fmt->encode(c->tok, msgs, n, &opts, &ids, &nid);
    } else {
        msgs[n++] = (ms_chat_msg){"user", text, len};
        rc = c->fmt->follow(c->tok, c->last, msgs, n, &opts, &ids, &nid);
    }
    if (rc != 0) {
        ms_cli_fail("chat", MS_EXIT_INPUT, "%s", ms_err_msg());
        return 0; /* the message is refused; the conversation goes on */
    }
    int64_t room = c->o->max_context - (int64_t)c->n_toks - (int64_t)nid;
    if (room < 1) {
        free(ids);
        ms_cli_fail("chat", MS_EXIT_INPUT,
                    "the conversation would hold %zu tokens, over --max-context %lld: /reset, or /save and /load it "
                    "with a larger --max-context",
                    c->n_toks + nid, c->o->max_context);
        return 0;
    }
    ms_gen_params p = {0};
    p.temperature = c->o->temperature;
    p.top_p = c->o->top_p;
    p.seed = (uint64_t)c->o->seed + (uint64_t)turn;
    p.max_tokens = c->o->max_tokens > 0 && c->o->max_tokens < room ? c->o->max_tokens : room;
    p.stop_at_eos = 1;
    p.on_token = on_token;
    p.ctx = c;
    ms_gentext_free(c->text);
    c->text = ms_gentext_new(c->tok, c->fmt, 0, NULL, 0);
    ms_gentext_prompt(c->text, ids, nid); /* the answer follows these ids */
    memset(&c->utf8, 0, sizeof c->utf8);
    ms_sbuf_free(&c->content);
    c->in_reasoning = 0;
    c->reused_turn = c->n_toks;
    c->fed_turn = nid;
    ms_seq *st = c->state;
    c->state = NULL;
    size_t skip = 0, kept = 0; /* a new conversation: prompt ids a kept state holds, and kept since */
    if (!st && c->pc && (st = ms_pcache_take(c->pc, ids, nid, &skip))) {
        c->reused_turn = kept = skip;
        c->fed_turn = nid - skip;
    }
    ms_eseq *s = st ? ms_engine_seq_continue(c->e, st, ids + skip, nid - skip, &p) : NULL;
    if (!st) s = ms_engine_seq_new(c->e, ids, nid, &p);
    if (!s) {
        free(ids);
        return ms_cli_fail_err("chat");
    }
    double t0 = ms_cli_now(), t_first = 0;
    rc = 0;
    got_int = 0;
    int_handler(1);
    while (!ms_engine_seq_done(s)) {
        size_t ng;
        ms_engine_seq_tokens(s, &ng);
        if (got_int && ng >= 1) break; /* Ctrl-C: the answer ends here (after the prompt is in) */
        if (ms_engine_step(c->e, &s, 1) != 0) {
            rc = ms_cli_fail_err("chat");
            break;
        }
        if (c->pc && !c->n_toks) /* a new conversation's prompt, kept as it is prefilled */
            ms_pcache_keep_prompt(c->pc, ids, nid, skip + ms_engine_seq_prefilled(s), 256, &kept, ms_engine_seq_state(s));
        ms_engine_seq_tokens(s, &ng);
        if (ng && !t_first) t_first = ms_cli_now();
    }
    size_t ng;
    const int32_t *gen = ms_engine_seq_tokens(s, &ng);
    if (c->tty && c->in_reasoning) fputs("\033[0m", stdout);
    char tail[12];
    fwrite(tail, 1, ms_utf8_stream_end(&c->utf8, tail), stdout);
    if (got_int && !rc) fputs(c->tty ? " [stopped]" : "", stdout);
    fputc('\n', stdout);
    fflush(stdout);
    int_handler(0);
    got_int = 0;
    if (rc) { /* a failed step: the state is gone with it */
        ms_engine_seq_free(s);
        free(ids);
        reset(c);
        return rc;
    }
    toks_add(c, ids, nid);
    if (ng > 1) toks_add(c, gen, ng - 1);
    c->last = ng ? gen[ng - 1] : -1;
    c->gen_turn = ng;
    c->ttft_turn = t_first ? t_first - t0 : 0;
    c->secs_turn = ms_cli_now() - t0;
    c->state = ms_engine_seq_take_state(s);
    ms_engine_seq_free(s);
    free(ids);
    log_msg(c, "user", text, len);
    log_msg(c, "assistant", c->content.s ? c->content.s : "", c->content.n);
    if (c->last < 0) reset(c); /* nothing generated: there is no answer to follow */
    return 0;
}

static int fingerprint(chat *c)
{
    if (c->fingerprint[0]) return 0;
    if (c->tty) fprintf(stderr, "moestream chat: identifying the model (hashes every byte once; kept for next time)\n");
    return ms_ident_model(c->o->e.model, c->fingerprint);
}

/* 0, or the exit code after reporting. */
static int save(chat *c, const char *path)
{
    if (!c->state) return ms_cli_fail("chat", MS_EXIT_USAGE, "/save: nothing to save yet (no answer so far)");
    if (fingerprint(c) != 0) return ms_cli_fail_err("chat");
    ms_seqfile_info info = {0};
    snprintf(info.family, sizeof info.family, "%s", ms_engine_family(c->e)->name);
    snprintf(info.fingerprint, sizeof info.fingerprint, "%s", c->fingerprint);
    info.tokens = c->toks;
    info.n_tokens = c->n_toks;
    info.pending = &c->last;
    info.n_pending = 1;
    json_t *meta = json_pack("{s:s?,s:O}", "system", c->system, "messages", c->log);
    info.meta = json_dumps(meta, JSON_COMPACT);
    json_decref(meta);
    int rc = ms_seqfile_write(path, &info, c->state) != 0 ? ms_cli_fail_err("chat") : 0;
    if (!rc) fprintf(stderr, "moestream chat: saved %zu tokens to %s\n", c->n_toks, path);
    free(info.meta);
    return rc;
}

/* 0, or the exit code after reporting (the conversation is then unchanged). */
static int load(chat *c, const char *path)
{
    if (fingerprint(c) != 0) return ms_cli_fail_err("chat");
    ms_seqfile_info info;
    ms_seq *st = NULL;
    if (ms_seqfile_read(path, ms_engine_model(c->e), ms_engine_family(c->e)->name, c->fingerprint, &info, &st) != 0)
        return ms_cli_fail_err("chat");
    if (info.n_pending != 1 || info.n_tokens + 1 > (size_t)c->o->max_context) {
        size_t pend = info.n_pending, n = info.n_tokens;
        ms_seq_free(st);
        ms_seqfile_info_clear(&info);
        if (pend != 1)
            return ms_cli_fail("chat", MS_EXIT_INPUT, "%s: not a chat's state (%zu pending ids; a chat's has 1)", path, pend);
        return ms_cli_fail("chat", MS_EXIT_INPUT, "%s: it holds %zu tokens, more than --max-context %lld allows", path, n,
                           c->o->max_context);
    }
    reset(c);
    c->state = st;
    c->n_toks = 0;
    toks_add(c, info.tokens, info.n_tokens);
    c->last = info.pending[0];
    json_t *meta = info.meta ? json_loads(info.meta, 0, NULL) : NULL;
    json_t *msgs = json_object_get(meta, "messages");
    if (json_is_array(msgs)) {
        json_decref(c->log);
        c->log = json_incref(msgs);
    }
    const char *sys = json_string_value(json_object_get(meta, "system"));
    free(c->system);
    c->system = sys ? ms_strdup(sys) : NULL;
    json_decref(meta);
    fprintf(stderr, "moestream chat: going on from %s (%zu tokens, %zu messages)\n", path, c->n_toks,
            json_array_size(c->log));
    ms_seqfile_info_clear(&info);
    return 0;
}

static void stats(chat *c)
{
    ms_engine_stats es;
    ms_engine_get_stats(c->e, &es);
    char a[32], b[32], r[32];
    fprintf(stderr,
            "moestream chat: %zu tokens in the context (of %lld), %zu messages; last turn: %zu new tokens prefilled, %zu "
            "reused from the state, %zu generated, first token after %.2f s, %.2f s in all; read %s of experts, %s of "
            "trunk since start; peak RSS %s\n",
            c->n_toks, c->o->max_context, json_array_size(c->log), c->fed_turn, c->reused_turn, c->gen_turn,
            c->ttft_turn, c->secs_turn, ms_size_fmt(es.model.bytes_read_experts, a, sizeof a),
            ms_size_fmt(es.model.bytes_read_trunk, b, sizeof b), ms_size_fmt(es.peak_rss_all, r, sizeof r));
}

/* A line that is a command: 1 when handled, 2 to leave, 0 when it is a message; *failed gets
 * the exit code of a command that failed (reported already). */
static int command(chat *c, const char *l, int *failed)
{
    if (l[0] != '/') return 0;
    if (!strcmp(l, "/quit") || !strcmp(l, "/exit")) return 2;
    if (!strcmp(l, "/help")) {
        fputs("/reset, /system TEXT, /save FILE, /load FILE, /stats, /quit (Ctrl-D); Ctrl-C stops an answer\n", stderr);
    } else if (!strcmp(l, "/reset")) {
        reset(c);
        fputs("moestream chat: the conversation starts over\n", stderr);
    } else if (!strncmp(l, "/system ", 8) && l[8]) {
        free(c->system);
        c->system = ms_strdup(l + 8);
        reset(c);
        fputs("moestream chat: system message set; the conversation starts over\n", stderr);
    } else if (!strncmp(l, "/save ", 6) && l[6]) {
        *failed = save(c, l + 6);
    } else if (!strncmp(l, "/load ", 6) && l[6]) {
        *failed = load(c, l + 6);
    } else if (!strcmp(l, "/stats")) {
        stats(c);
    } else {
        *failed = ms_cli_fail("chat", MS_EXIT_USAGE, "unknown command '%s' (/help lists them; a message may not start with /)", l);
    }
    return 1;
}

/* The next message: on a terminal through libedit (a line ending in \ goes on), else one line
 * of stdin. NULL at the end of input. */
static char *next_message(chat *c)
{
    if (!c->tty) {
        char *line = NULL;
        size_t cap = 0;
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) {
            free(line);
            return NULL;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        return line;
    }
    ms_sbuf b = {0};
    for (;;) {
        got_int = 0;
        char *l = readline(b.n ? "... " : "> ");
        if (!l) {
            if (got_int) { /* Ctrl-C at the prompt: a new prompt, not an exit */
                fputc('\n', stdout);
                ms_sbuf_free(&b);
                continue;
            }
            if (b.n) break;
            ms_sbuf_free(&b);
            return NULL;
        }
        size_t n = strlen(l);
        int more = n > 0 && l[n - 1] == '\\';
        if (more) l[--n] = 0;
        if (b.n) ms_sbuf_adds(&b, "\n");
        ms_sbuf_add(&b, l, n);
        free(l);
        if (!more) break;
    }
    size_t n;
    char *m = ms_sbuf_take(&b, &n);
    if (*m) add_history(m);
    return m;
}

static int chat_main(const chat_opts *o)
{
    ms_engine_opts eo = {0};
    ms_cli_eopt_engine(&o->e, &eo);
    eo.run.prompt_tokens = 256;
    eo.run.max_positions = o->max_context;
    ms_cli_pcopts pco = o->pc;
    ms_engine *e = ms_cli_pc_engine_open(&pco, 1, o->e.budget, "chat", &eo);
    if (!e) return ms_cli_fail_err("chat");
    chat c = {0};
    int pcode = 0;
    c.pc = pco.off ? NULL : ms_cli_pc_open(&pco, 0, e, o->e.model, "chat", &pcode);
    if (pcode) {
        ms_engine_free(e);
        return pcode;
    }
    c.o = o;
    c.e = e;
    c.tok = ms_engine_tok(e);
    c.fmt = ms_engine_family(e)->chat;
    c.last = -1;
    c.log = json_array();
    c.system = o->system ? ms_strdup(o->system) : NULL;
    c.tty = isatty(0) && isatty(1);
    int rc = MS_EXIT_OK;
    if (!c.tok || !c.fmt || !c.fmt->follow) {
        rc = ms_cli_fail("chat", MS_EXIT_MODEL, "%s: %s", o->e.model,
                         !c.tok ? "the model has no tokenizer, which a chat needs" : "its family has no chat format");
        goto out;
    }
    c.n_stops = c.fmt->stop_ids(c.tok, c.stops, MS_CHAT_MAX_STOPS);
    if (o->session && (rc = load(&c, o->session)) != 0) goto out;
    int_handler(0);
    if (c.tty)
        fprintf(stderr, "moestream chat: %s (%s format); /help for commands, Ctrl-D to leave\n",
                ms_engine_family(e)->name, c.fmt->name);
    int failed_cmd = 0; /* without a terminal, a command that failed is the run's exit code */
    for (int turn = 0;; turn++) {
        char *m = next_message(&c);
        if (!m) break;
        int failed = 0, k = command(&c, m, &failed);
        if (failed && !c.tty && !failed_cmd) failed_cmd = failed;
        if (k == 2) {
            free(m);
            break;
        }
        if (k == 0 && *m) rc = answer(&c, m, strlen(m), turn);
        free(m);
        if (rc) break;
        if (ferror(stdout)) {
            rc = MS_EXIT_IO;
            break;
        }
    }
    if (rc == MS_EXIT_OK) rc = failed_cmd;
out:
    reset(&c);
    json_decref(c.log);
    ms_sbuf_free(&c.content);
    ms_gentext_free(c.text);
    free(c.toks);
    free(c.system);
    ms_pcache_free(c.pc);
    ms_engine_free(e);
    return rc;
}

int ms_cli_chat(int argc, char **argv)
{
    static const struct option own[] = {
        {"system", required_argument, 0, 'S'},      {"session", required_argument, 0, 'F'},
        {"max-tokens", required_argument, 0, 'n'},  {"max-context", required_argument, 0, 'X'},
        {"temperature", required_argument, 0, 't'}, {"top-p", required_argument, 0, 'k'},
        {"seed", required_argument, 0, 's'},        {"date", required_argument, 0, 0x6461},
        {"raw", no_argument, 0, 0x7277},            {"reasoning", no_argument, 0, 0x7265},
        {"help", no_argument, 0, 'h'},              MS_CLI_PC_OPTIONS,
    };
    enum { N_OWN = sizeof own / sizeof own[0] };
    struct option opts[N_OWN + MS_CLI_EOPT_COUNT + 1];
    ms_cli_eopt_table(own, N_OWN, opts);
    const char *cmd = "chat";
    chat_opts o = {.max_context = 8192, .top_p = 1.0f};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'S': o.system = optarg; break;
        case 'F': o.session = optarg; break;
        case 'n': bad = ms_opt_int("--max-tokens", optarg, 1, 1 << 24, &o.max_tokens); break;
        case 'X': bad = ms_opt_int("--max-context", optarg, 2, 1 << 24, &o.max_context); break;
        case 's': bad = ms_opt_int("--seed", optarg, LLONG_MIN, LLONG_MAX, &o.seed); break;
        case 0x6461:
            bad = ms_opt_date("--date", optarg);
            o.date = optarg;
            break;
        case 0x7277: o.raw = 1; break;
        case 0x7265: o.reasoning = 1; break;
        case 't':
            bad = ms_opt_f32("--temperature", optarg, &o.temperature);
            if (!bad && o.temperature < 0) return ms_cli_fail(cmd, MS_EXIT_USAGE, "--temperature must be >= 0, got '%s'", optarg);
            break;
        case 'k':
            bad = ms_opt_f32("--top-p", optarg, &o.top_p);
            if (!bad && !(o.top_p > 0 && o.top_p <= 1))
                return ms_cli_fail(cmd, MS_EXIT_USAGE, "--top-p must be in (0, 1], got '%s'", optarg);
            break;
        case 'h': chat_usage(stdout); return MS_EXIT_OK;
        default: {
            int code, t = ms_cli_eopt_take_all(&o.e, &o.pc, cmd, c, optarg, &code);
            if (t > 0) break;
            if (t == 0) chat_usage(stderr);
            return code;
        }
        }
        if (bad) return ms_cli_fail_err(cmd);
    }
    int rc = ms_cli_eopt_end(argc, argv, &o.e, cmd);
    return rc != MS_EXIT_OK ? rc : chat_main(&o);
}
