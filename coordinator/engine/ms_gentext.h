/* ms_gentext: the text of one generated answer: each id decoded once, stop strings found as they complete, its bytes routed by a chat format to content or reasoning, and what can no longer change handed out in order. */
#ifndef MS_GENTEXT_H
#define MS_GENTEXT_H

#include <stddef.h>
#include <stdint.h>

#include "ms_family.h"
#include "ms_tok.h"

typedef struct ms_gentext ms_gentext;

/* An answer's text for tokenizer tok, routed by chat (NULL, or a format without route: every
 * byte is content), special ids' text kept or left out, cut at the first of stop[n_stop]. tok,
 * chat and stop are borrowed and must outlive it. Never NULL (allocation failure aborts). */
ms_gentext *ms_gentext_new(const ms_tok *tok, const ms_chatfmt *chat, int keep_special, const char *const *stop,
                           int n_stop);
void ms_gentext_free(ms_gentext *g); /* accepts NULL */

/* The prompt the answer follows (prompt[n], borrowed for the call): the ids its format says
 * open the answer (ms_chatfmt.opening) are routed first and come before the generated ids in
 * the answer's split; their text is not the answer's. Before the first add; a restart keeps it. */
void ms_gentext_prompt(ms_gentext *g, const int32_t *prompt, size_t n);

/* The next generated id: decoded (once) and routed; searched for a stop string when `search`
 * (not for an id that ends the turn by itself: a stop id's text is never part of the answer).
 * Returns 1 when a stop string now appears (the text ends where it begins; later ids are
 * ignored), 0, or -1 with ms_err set when the id cannot be decoded. */
int ms_gentext_add(ms_gentext *g, int32_t id, int search);
/* The same answer again from its first id (a re-run, which makes the same ids): what was handed
 * out is not handed out twice. */
void ms_gentext_restart(ms_gentext *g);

/* The answer's text: every id's bytes, cut at a stop string; drop_last: without the last id's
 * (a final stop id or eos, which the answer leaves out). Borrowed until the next add. */
const char *ms_gentext_text(const ms_gentext *g, int drop_last, size_t *len);
/* Which stop string the text was cut at (its index in the list given to ms_gentext_new; the
 * first that matches there), or -1: none. */
int ms_gentext_stop_index(const ms_gentext *g);

/* What can no longer change since the last take: text, and the part of it routed to the
 * content and to the reasoning (routed nowhere: the format's markers, a tool call's arguments).
 * Before the end, the last (longest stop string - 1) bytes wait, as a stop string may begin
 * there; at the end (done) everything up to the text's end (drop_last as above). The pieces of
 * all takes concatenate to the whole. Borrowed until the next add or take. */
typedef struct {
    const char *text, *content, *reasoning;
    size_t text_len, content_len, reasoning_len;
} ms_gentext_news;
void ms_gentext_take(ms_gentext *g, int done, int drop_last, ms_gentext_news *n);

/* The answer split by the chat format (its `answer` over the generated ids[n], the ids' text
 * ending at text_len bytes as ms_gentext_text gave it: the id that end falls in has its bytes
 * beyond it taken off the field they went to). Call before the last take. 0 with *a filled
 * (ms_chat_answer_clear it); 1 when there is no format, or it has no answer (*a zeroed: the
 * text is the content); -1 with ms_err set. */
int ms_gentext_answer(const ms_gentext *g, const int32_t *ids, size_t n, size_t text_len, ms_chat_answer *a);

#endif
