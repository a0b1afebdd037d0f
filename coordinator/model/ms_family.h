/* ms_family: what a model family provides to the registry: detection, opening, its chat format, its trunk matrices. */
#ifndef MS_FAMILY_H
#define MS_FAMILY_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ms_model.h"
#include "ms_st.h"
#include "ms_tok.h"
#include "ms_xfam.h"

/* One chat message. role is "system", "developer", "user", "assistant" or "tool" (which ones a
 * format renders is its own: it refuses the others, naming the message); content is UTF-8 text
 * of len bytes, NULL for none (an assistant turn that only calls a tool). All borrowed. */
typedef struct {
    const char *role;
    const char *content;
    size_t len;
    const char *thinking;      /* an assistant turn's reasoning (thinking_len bytes), NULL: none */
    size_t thinking_len;
    int n_calls;               /* an assistant turn's tool calls; the first one is: */
    const char *call_name;     /*   its function's name */
    const char *call_args;     /*   its arguments as JSON text (call_args_len bytes), as tojson writes them */
    size_t call_args_len;
    const char *call_id;       /*   its id as the client sent it, NULL: none */
    const char *call_args_sent; /*  its arguments when sent as a string (OpenAI's form), verbatim
                                    (call_args_sent_len bytes); NULL: sent as an object */
    size_t call_args_sent_len;
    const char *tool_call_id;  /* a tool turn's "tool_call_id": the call it answers, NULL: none */
    const char *name;          /* the message's "name" (a tool turn's: the function), NULL: none */
} ms_chat_msg;

struct json_t;

/* What a request may say about its chat's rendering; NULL / 0 members (or a NULL struct): the
 * format's defaults. A format refuses what it cannot render (tools it has no syntax for). */
typedef struct {
    const char *date;              /* "YYYY-MM-DD" a system message carries (harmony: today, UTC) */
    const char *reasoning_effort;  /* the request's "reasoning_effort" (harmony: "low" | "medium" |
                                      "high", default medium), NULL: none */
    const struct json_t *tools;    /* OpenAI "tools" (a JSON array, borrowed), NULL: none */
    const struct json_t *vars;     /* the template variables the request set (its
                                      chat_template_kwargs object, borrowed; each one accepted by
                                      the format's var), NULL: none. The format reads its own. */
    int no_generation_prompt;      /* 1: the chat as it stands, without the assistant's
                                      generation prompt (a last assistant turn then ends the
                                      text: the training form; tokenize --chat only) */
} ms_chat_opts;

/* Where a streamed answer's next token goes (ms_chatfmt.route): its state, zeroed at the start. */
typedef struct {
    int mode;
    char name[24];             /* a channel name being read */
    size_t name_n;
} ms_chat_stream;
enum { MS_CHAT_TO_NONE = -1, MS_CHAT_TO_CONTENT = 0, MS_CHAT_TO_REASONING = 1 };

/* An assistant's answer, split by its format. Owns its strings (malloc'ed). */
typedef struct {
    char *content;             /* never NULL after a successful answer ("" when none) */
    size_t content_len;
    char *reasoning;           /* harmony's analysis channel; NULL: none */
    size_t reasoning_len;
    char *call_name;           /* the function a tool call addresses (harmony: to=functions.NAME); NULL: none */
    char *call_args;           /* its arguments as the model wrote them (call_args_len bytes) */
    size_t call_args_len;
} ms_chat_answer;

static inline void ms_chat_answer_clear(ms_chat_answer *a)
{
    if (!a) return;
    free(a->content);
    free(a->reasoning);
    free(a->call_name);
    free(a->call_args);
    memset(a, 0, sizeof *a);
}

/* What a request holds a chat's answer to (response_format, tool_choice, strict tools), for
 * ms_chatfmt.rules. The grammar (ms_grammar's syntax) already has the rule `content` (the
 * answer's text: free, or a JSON text under a schema) and, for each tool I a call may name, the
 * rule `args-I` (its arguments: a JSON object, under its schema when strict); the format adds
 * `root`, in its own syntax, with rules of its own named FORMAT-... */
enum { MS_CHAT_CALLS_NO = 0, MS_CHAT_CALLS_MAY, MS_CHAT_CALLS_MUST };
typedef struct {
    int calls;                 /* MS_CHAT_CALLS_NO: the content only (no call can begin); _MAY:
                                  the content, or one call (text may come before it where the
                                  format has such text); _MUST: one call */
    int n_tools;               /* the functions a call may name (0 with calls NO) */
    const char *const *names;  /* [n_tools] their names: [A-Za-z0-9_.-] only (literal as they are) */
    int opened;                /* the prompt's last ids open the answer (ms_chatfmt.opening > 0:
                                  DeepSeek-V3.1's <think>): the answer goes on inside that block */
    const struct json_t *vars; /* the request's template variables (ms_chat_opts.vars), NULL: none */
} ms_chat_rules;

/* A family's chat format. */
typedef struct {
    const char *name;          /* "kimi" */
    /* The prompt of a chat ending in the generation prompt: *ids malloc'ed (*n_ids ids), 0; or
     * -1 with ms_err set (MS_EXIT_INPUT) on no messages, an unknown role (naming the message's
     * index), invalid UTF-8, or a tokenizer without the format's markers. Markers are the
     * tokenizer's special ids; contents are encoded as text (a marker written in a content is
     * text, never a control token). */
    int (*encode)(const ms_tok *t, const ms_chat_msg *msgs, int n, const ms_chat_opts *o, int32_t **ids,
                  size_t *n_ids);
    /* The ids that end an assistant turn (generation stops there; harmony: <|return|>, <|call|>)
     * into ids[max]; their count (0: none the tokenizer has). */
    int (*stop_ids)(const ms_tok *t, int32_t *ids, int max);
    /* The answer in the generated ids[n] (the stop id excluded or not), filled into *a (zeroed
     * first; free with ms_chat_answer_clear): its content, its reasoning when the format has
     * one, the tool call it ends with, as text without the format's markers. NULL: the decoded
     * text is the content. 0, or -1 with ms_err set. */
    int (*answer)(const ms_tok *t, const int32_t *ids, size_t n, ms_chat_answer *a);
    /* The same, one generated id at a time (streaming): where its text goes, MS_CHAT_TO_*, as
     * answer would place it. What answer finds only at the end (a tool call; output with no
     * message, which answer takes whole as content) the caller sends when the generation ends:
     * when nothing was routed to the content, answer's content is. NULL: everything is content. */
    int (*route)(const ms_tok *t, ms_chat_stream *s, int32_t id);
    /* A conversation going on from its own tokens (moestream chat): the ids to feed after an
     * answer whose last generated id `last` was not fed (a stop id, or any id when the answer
     * was cut): what closes that answer in this format, then msgs[n] (user turns), then the
     * generation prompt. *ids malloc'ed; 0, or -1 with ms_err set (MS_EXIT_INPUT). */
    int (*follow)(const ms_tok *t, int32_t last, const ms_chat_msg *msgs, int n, const ms_chat_opts *o, int32_t **ids,
                  size_t *n_ids);
    /* Check a template variable a request sets (chat_template_kwargs, but add_generation_prompt,
     * which every format reads; o: the request's other options, for a variable that must agree
     * with one): 0 when the format reads it and value is good; 1 when the format has no such
     * variable; -1 with why[n] naming it for a bad value. The encoding then reads it from
     * o->vars. NULL: none. `vars` lists the variables it reads, for the messages ("" for none). */
    int (*var)(const char *name, const struct json_t *value, const ms_chat_opts *o, char *why, size_t n);
    const char *vars;
    /* How many of a prompt's last ids open the answer: a generation prompt that ends inside a
     * block of the answer (DeepSeek-V3.1's thinking form ends with <think>). The answer's
     * routing starts after them, and answer sees them before the generated ids, so the answer
     * splits as if the model had written them. NULL: none. */
    int (*opening)(const ms_tok *t, const int32_t *prompt, size_t n);
    /* The rule root (and the format's own rules) of a constrained answer, as the model writes
     * it: its reasoning block where it has one (free text), then r's content or call; markers
     * as the grammar's special-token terminals. A new string, or NULL with ms_err set
     * (MS_EXIT_INPUT) when the tokenizer lacks a marker a call needs. NULL member: root ::=
     * content, and no calls. */
    char *(*rules)(const ms_tok *t, const ms_chat_rules *r);
} ms_chatfmt;

#define MS_CHAT_MAX_STOPS 4

/* A model family: one row of the registry (coordinator/families/ms_families.c). */
typedef struct {
    const char *name;          /* "kimi-k3" (= its experts' family, xfam->name) */
    const char *title;         /* for people: "Kimi K3" */
    const ms_xfam *xfam;       /* its experts; xfam->detect recognises its config.json */
    /* Open DIR (ms_model.h's contract for opening). */
    ms_model *(*open)(const char *dir, const ms_run_opts *o);
    /* From config.json alone, before opening: what ms_model_get_info would say of vocab,
     * layers, experts and special ids (the rest zero). 0, or -1 with ms_err set. */
    int (*peek)(const char *dir, ms_model_info *info);
    const ms_chatfmt *chat;    /* NULL: the family has no chat format (chats are refused) */
    /* The dense trunk matrices of the checkpoint st in DIR (what a trunk pack holds, in the
     * order the pack stores them): *out malloc'ed, pointing into st; the count, or -1 with
     * ms_err set. */
    int (*trunk_matrices)(const char *dir, const ms_st *st, const ms_st_tensor ***out);
    /* Write a synthetic checkpoint of the named preset (layers > 0: that many layers) into dir,
     * deterministic per seed; sparse: headers only, every weight zero (a hole). 0, or -1 with
     * ms_err set (MS_EXIT_USAGE for an unknown preset, naming the known ones; MS_EXIT_IO). */
    int (*synth)(const char *dir, const char *preset, int layers, int sparse, uint64_t seed); /* or NULL */
    const char *demo_preset;   /* the small synth preset `demo --family` writes ("tiny") */
    /* Small presets in the family's other weight formats (FP8 next to BF16), NULL-terminated, or
     * NULL: the conformance suite holds each of them to everything it holds the demo to. */
    const char *const *format_presets;
    /* `synth --help`'s paragraph: the layout it writes and its presets ("name (what), ..."). */
    const char *synth_help;
} ms_family;

#endif
