/* ms_jcfg: a strict, family-neutral reader of a model's config.json: typed fields from a table, every problem listed. */
#ifndef MS_JCFG_H
#define MS_JCFG_H

#include <jansson.h>
#include <stddef.h>

/* A family's config reader (in its folder, and its row of common/expert's family table) describes
 * its fields in a table; this module finds them where the family says they may be, converts
 * them, checks bounds, and collects every missing key and bad value so that one message names
 * them all (ARCHITECTURE invariant 2: a missing field is an error, never a default). */

typedef enum { MS_JF_INT, MS_JF_FLOAT, MS_JF_BOOL } ms_jf_type;

/* Where keys are looked up: objects tried in order, first hit wins. */
typedef struct {
    json_t *obj[4];          /* borrowed; NULL entries are skipped */
    const char *prefix[4];   /* how a key found there is named in messages ("text_config.") */
    int n;
    int alias_first;         /* 1: try a field's alias before its name */
    const char *missing_prefix; /* how a missing key is named: prefix + name */
    int missing_alias;       /* 0: name only; 1: "NAME (or ALIAS)"; 2: "ALIAS (or NAME)" (and range
                                messages then name a field by its alias) */
} ms_jscope;

typedef struct {
    const char *name;        /* primary (release) spelling */
    const char *alias;       /* other spelling, or NULL */
    ms_jf_type type;
    int scope;               /* index into the scopes given to ms_jcfg_fields */
    int optional;            /* bools only: absent means true */
    size_t off;              /* offset of the int / float in the destination struct */
    int min, max;            /* ints: accepted range (INT_MIN / INT_MAX: checked by the family) */
    const char *if_null;     /* the problem to report for a null (after the key's name), or NULL */
} ms_jfield;

typedef struct ms_jcfg ms_jcfg;

/* Read path (a regular file of at most max_bytes, no NUL byte) as a JSON object with unique
 * keys; a root holding a "config" object (fixture files) is unwrapped. NULL with ms_err set:
 * MS_EXIT_IO if the file cannot be read, MS_EXIT_MODEL if it is not such an object. */
ms_jcfg *ms_jcfg_load(const char *path, size_t max_bytes);
/* The same from text in memory; `what` names it in messages. */
ms_jcfg *ms_jcfg_parse(const char *text, const char *what);
void ms_jcfg_free(ms_jcfg *j); /* accepts NULL */

/* The config object (borrowed, valid while j lives) and its name for messages. */
json_t *ms_jcfg_root(const ms_jcfg *j);
const char *ms_jcfg_what(const ms_jcfg *j);

/* Record a missing key / a problem (printf format). */
void ms_jcfg_missing(ms_jcfg *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ms_jcfg_problem(ms_jcfg *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* obj[key] if it is an object; NULL if absent; NULL and a problem named `label` if it is not an object. */
json_t *ms_jcfg_object(ms_jcfg *j, json_t *obj, const char *key, const char *label);

/* Read every field of the table into dst (a struct the offsets index). valid[off] is set to 1
 * for each field read, converted and within its range (valid has room for the struct's size). */
void ms_jcfg_fields(ms_jcfg *j, const ms_jfield *f, size_t n, const ms_jscope *scopes, void *dst,
                    unsigned char *valid);
/* ms_jcfg_fields into dst (of dst_size bytes) for a caller that needs no per-field validity:
 * 0, or -1 if any of these fields was missing or invalid (recorded in j). */
int ms_jcfg_read(ms_jcfg *j, const ms_jfield *f, size_t n, const ms_jscope *scopes, void *dst, size_t dst_size);
/* Find one key in a scope: the value (borrowed) with its name for messages in label, or NULL. */
json_t *ms_jcfg_find(const ms_jscope *s, const char *name, const char *alias, char *label, size_t cap);
/* How a missing key of scope s is named. */
void ms_jcfg_missing_name(const ms_jscope *s, const char *name, const char *alias, char *buf, size_t cap);

/* A key of obj whose one value the math has: missing recorded (as label); another value a
 * problem "LABEL must be \"WANT\"" / "LABEL is B; it must be WANT (WHY)". */
void ms_jcfg_want_string(ms_jcfg *j, json_t *obj, const char *key, const char *label, const char *want);
void ms_jcfg_want_bool(ms_jcfg *j, json_t *obj, const char *key, const char *label, int want, const char *why);
/* A required boolean key of obj into *out (missing or not a boolean: recorded). */
void ms_jcfg_read_bool(ms_jcfg *j, json_t *obj, const char *key, int *out);
/* Read a list of one-based indexes 1..n (n <= 0: unchecked), none twice. Returns the count with
 * *out malloc'ed, or -1 after recording the problems. */
int ms_jcfg_index_list(ms_jcfg *j, const json_t *v, const char *label, int n, int **out);

/* Value conversions: 0, or -1 if v is not that (an integral number that fits an int; a finite
 * float; true/false or 0/1). */
int ms_jcfg_as_int(const json_t *v, int *out);
int ms_jcfg_as_float(const json_t *v, float *out);
int ms_jcfg_as_bool(const json_t *v, int *out);
/* Integer field key of obj in [lo, hi] into *out, for files read whole rather than recorded
 * (manifests, descriptors): 0, or -1 with ms_err set (MS_EXIT_MODEL) to "WHERE: CTXfield "key"
 * is missing" / "must be an integer" / "is X, must be in LO..HI" (ctx: "" or the entry, e.g.
 * "experts[3] "). */
int ms_jcfg_int_field(const char *where, const json_t *obj, const char *ctx, const char *key, long long lo,
                      long long hi, long long *out);
/* A short description of a value for messages ("the string \"x\"", "null", "an array"). */
void ms_jcfg_describe(const json_t *v, char *buf, size_t cap);

/* Problems recorded so far. */
int ms_jcfg_n_problems(const ms_jcfg *j);
/* 0 if nothing was recorded; else -1 with ms_err set (MS_EXIT_MODEL) to "WHAT: missing required
 * keys: A, B; PROBLEM; PROBLEM". */
int ms_jcfg_finish(ms_jcfg *j);

#endif
