/* ms_jschema: JSON Schema -> grammar text: one rule per schema node, shared rules for JSON's strings, numbers and values. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_jschema.h"
#include "ms_sbuf.h"

#define COMMON                                                                                                         \
    "ws ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n"                                                                                         \
    "jstring ::= \"\\\"\" jchar* \"\\\"\"\n"                                                                          \
    "jchar ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"                         \
    "jint ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"                                                                  \
    "jnumber ::= jint ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n"                                            \
    "jbool ::= \"true\" | \"false\"\n"                                                                                 \
    "jnull ::= \"null\"\n"                                                                                             \
    "jvalue ::= jobject | jarray | jstring | jnumber | jbool | jnull\n"                                                \
    "jobject ::= \"{\" ws ( jstring ws \":\" ws jvalue ( ws \",\" ws jstring ws \":\" ws jvalue )* )? ws \"}\"\n"      \
    "jarray ::= \"[\" ws ( jvalue ( ws \",\" ws jvalue )* )? ws \"]\"\n"

const char *ms_jschema_any_object(void) { return "root ::= ws jobject ws\n" COMMON; }

typedef struct {
    ms_sbuf g;          /* the rules so far */
    int n;              /* rules made (s0, s1, ...) */
    const json_t *root; /* for $ref */
    json_t *defs;       /* $ref target -> its rule name (made once: recursion) */
    char *why;
    size_t wn;
    int failed;
    const char *prefix; /* rule names: PREFIX-s0, ... ("" : s0, ...) */
} cc;

static void bprintf(ms_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(ms_sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *t = ms_malloc((size_t)k + 1);
    va_start(ap, fmt);
    vsnprintf(t, (size_t)k + 1, fmt, ap);
    va_end(ap);
    ms_sbuf_add(b, t, (size_t)k);
    free(t);
}

static int no(cc *c, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int no(cc *c, const char *path, const char *fmt, ...)
{
    if (c->failed) return -1;
    char m[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    snprintf(c->why, c->wn, "%s: %s", path[0] ? path : "the schema", m);
    c->failed = 1;
    return -1;
}

/* A grammar literal matching the bytes s[n] exactly. */
static void lit(ms_sbuf *b, const char *s, size_t n)
{
    ms_sbuf_adds(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char e[8];
        if (ch == '"' || ch == '\\') e[0] = '\\', e[1] = (char)ch, e[2] = 0;
        else if (ch < 0x20 || ch == 0x7f) snprintf(e, sizeof e, "\\x%02x", ch);
        else e[0] = (char)ch, e[1] = 0;
        ms_sbuf_adds(b, e);
    }
    ms_sbuf_adds(b, "\"");
}

/* The literal of a JSON value as written compactly. */
static void lit_json(ms_sbuf *b, const json_t *v)
{
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
    lit(b, t, strlen(t));
    free(t);
}

static int node(cc *c, const json_t *s, const char *path, char name[32]);

static const char *const annotations[] = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                          "deprecated", "readOnly", "writeOnly", "$defs", "definitions", NULL};

/* Every keyword of s must be one this compiler holds the text to (or an annotation). */
static int keywords_known(cc *c, const json_t *s, const char *path, const char *const *ok)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        int known = 0;
        for (int i = 0; annotations[i] && !known; i++) known = !strcmp(k, annotations[i]);
        for (int i = 0; ok[i] && !known; i++) known = !strcmp(k, ok[i]);
        if (!known)
            return no(c, path, "\"%s\" is not a keyword the structured output can be held to here (supported: type, "
                      "properties, required, items, minItems, maxItems, minLength, maxLength, enum, const, anyOf, allOf "
                      "of one, $ref, additionalProperties)", k);
    }
    return 0;
}

static int new_rule(cc *c, char name[32])
{
    snprintf(name, 32, "%s%ss%d", c->prefix, *c->prefix ? "-" : "", c->n++);
    return 0;
}

static long count_of(cc *c, const json_t *s, const char *key, const char *path, long dflt)
{
    const json_t *v = json_object_get(s, key);
    if (!v) return dflt;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000)
        return no(c, path, "\"%s\" must be an integer from 0 to 1000", key), -2;
    return (long)json_integer_value(v);
}

/* The rule for one type of s. */
static int typed(cc *c, const json_t *s, const char *type, const char *path, ms_sbuf *body)
{
    char sub[32], p2[512];
    if (!strcmp(type, "null")) return ms_sbuf_adds(body, "jnull"), 0;
    if (!strcmp(type, "boolean")) return ms_sbuf_adds(body, "jbool"), 0;
    if (!strcmp(type, "integer")) return ms_sbuf_adds(body, "jint"), 0;
    if (!strcmp(type, "number")) return ms_sbuf_adds(body, "jnumber"), 0;
    if (!strcmp(type, "string")) {
        long lo = count_of(c, s, "minLength", path, 0), hi = count_of(c, s, "maxLength", path, -1);
        if (lo < -1 || hi < -1) return -1;
        if (lo == 0 && hi < 0) return ms_sbuf_adds(body, "jstring"), 0;
        if (hi >= 0 && hi < lo) return no(c, path, "maxLength is below minLength");
        char q[96];
        if (hi < 0) snprintf(q, sizeof q, "\"\\\"\" jchar{%ld,} \"\\\"\"", lo);
        else snprintf(q, sizeof q, "\"\\\"\" jchar{%ld,%ld} \"\\\"\"", lo, hi);
        return ms_sbuf_adds(body, q), 0;
    }
    if (!strcmp(type, "array")) {
        const json_t *items = json_object_get(s, "items");
        long lo = count_of(c, s, "minItems", path, 0), hi = count_of(c, s, "maxItems", path, -1);
        if (lo < -1 || hi < -1) return -1;
        if (hi >= 0 && hi < lo) return no(c, path, "maxItems is below minItems");
        snprintf(p2, sizeof p2, "%s%sitems", path, path[0] ? "." : "");
        if (items) {
            if (node(c, items, p2, sub) != 0) return -1;
        } else {
            snprintf(sub, sizeof sub, "jvalue");
        }
        char q[256];
        if (hi == 0) snprintf(q, sizeof q, "\"[\" ws \"]\"");
        else if (hi < 0)
            snprintf(q, sizeof q, "\"[\" ws %s%s ( ws \",\" ws %s ){%ld,} %s ws \"]\"", lo ? "" : "( ", sub, sub,
                     lo > 0 ? lo - 1 : 0, lo ? "" : ")?");
        else
            snprintf(q, sizeof q, "\"[\" ws %s%s ( ws \",\" ws %s ){%ld,%ld} %s ws \"]\"", lo ? "" : "( ", sub, sub,
                     lo > 0 ? lo - 1 : 0, hi - 1, lo ? "" : ")?");
        return ms_sbuf_adds(body, q), 0;
    }
    if (!strcmp(type, "object")) {
        const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
        const json_t *ap = json_object_get(s, "additionalProperties");
        if (props && !json_is_object(props)) return no(c, path, "\"properties\" must be an object");
        if (req && !json_is_array(req)) return no(c, path, "\"required\" must be an array of names");
        size_t np = props ? json_object_size(props) : 0;
        if (!np) { /* a map: its values ap's schema, or anything */
            if (ap && json_is_object(ap)) {
                snprintf(p2, sizeof p2, "%s%sadditionalProperties", path, path[0] ? "." : "");
                if (node(c, ap, p2, sub) != 0) return -1;
                char q[256];
                snprintf(q, sizeof q, "\"{\" ws ( jstring ws \":\" ws %s ( ws \",\" ws jstring ws \":\" ws %s )* )? ws \"}\"",
                         sub, sub);
                return ms_sbuf_adds(body, q), 0;
            }
            if (ap && json_is_false(ap)) return ms_sbuf_adds(body, "\"{\" ws \"}\""), 0;
            return ms_sbuf_adds(body, "jobject"), 0;
        }
        /* properties in order; first_i: the members from i on when none came before, after_i: when
         * some did (a comma first); a required one cannot be skipped */
        char (*val)[32] = ms_calloc(np, sizeof *val);
        int *required = ms_calloc(np, sizeof *required);
        const char **names = ms_calloc(np, sizeof *names);
        const char *k;
        json_t *v;
        size_t i = 0;
        json_object_foreach((json_t *)props, k, v) {
            names[i] = k;
            for (size_t r = 0; req && r < json_array_size(req); r++)
                if (json_is_string(json_array_get(req, r)) && !strcmp(json_string_value(json_array_get(req, r)), k))
                    required[i] = 1;
            snprintf(p2, sizeof p2, "%s%sproperties.%s", path, path[0] ? "." : "", k);
            if (node(c, v, p2, val[i]) != 0) break;
            i++;
        }
        for (size_t r = 0; req && r < json_array_size(req) && !c->failed; r++) {
            const char *rn = json_string_value(json_array_get(req, r));
            int found = 0;
            for (size_t q = 0; q < np && rn && !found; q++) found = !strcmp(names[q], rn);
            if (!found) no(c, path, "\"required\" names \"%s\", which is not in \"properties\"", rn ? rn : "(not a string)");
        }
        int rc = -1;
        if (!c->failed) {
            char base[32];
            new_rule(c, base);
            for (size_t q = np + 1; q-- > 0;) {
                /* <base>f<q> and <base>a<q> */
                ms_sbuf_adds(&c->g, base);
                bprintf(&c->g, "f%zu ::= ", q);
                if (q == np) ms_sbuf_adds(&c->g, "\"\"\n");
                else {
                    ms_sbuf kv = {0};
                    json_t *js = json_string(names[q]); /* the name as JSON writes it */
                    lit_json(&kv, js);
                    json_decref(js);
                    bprintf(&kv, " ws \":\" ws %s", val[q]);
                    ms_sbuf_add(&c->g, kv.s, kv.n);
                    bprintf(&c->g, " %sa%zu", base, q + 1);
                    if (!required[q]) bprintf(&c->g, " | %sf%zu", base, q + 1);
                    ms_sbuf_adds(&c->g, "\n");
                    bprintf(&c->g, "%sa%zu ::= ws \",\" ws ", base, q);
                    ms_sbuf_add(&c->g, kv.s, kv.n);
                    bprintf(&c->g, " %sa%zu", base, q + 1);
                    if (!required[q]) bprintf(&c->g, " | %sa%zu", base, q + 1);
                    ms_sbuf_adds(&c->g, "\n");
                    ms_sbuf_free(&kv);
                    continue;
                }
                bprintf(&c->g, "%sa%zu ::= \"\"\n", base, q);
            }
            bprintf(body, "\"{\" ws %sf0 ws \"}\"", base);
            rc = 0;
        }
        free(val);
        free(required);
        free(names);
        return rc;
    }
    return no(c, path, "type \"%s\" (JSON Schema's are object, array, string, number, integer, boolean, null)", type);
}

/* The rule for schema s (its name into name). */
static int node(cc *c, const json_t *s, const char *path, char name[32])
{
    if (c->failed) return -1;
    if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) return snprintf(name, 32, "jvalue"), 0;
    if (!json_is_object(s)) return no(c, path, "a schema must be an object (or true)");
    const json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        static const char *const only[] = {"$ref", NULL};
        if (keywords_known(c, s, path, only) != 0) return -1;
        const char *r = json_string_value(ref);
        const char *pre = r && !strncmp(r, "#/$defs/", 8) ? "$defs" : r && !strncmp(r, "#/definitions/", 14) ? "definitions" : NULL;
        if (!pre) return no(c, path, "$ref \"%s\": only #/$defs/NAME and #/definitions/NAME are followed", r ? r : "?");
        const char *dn = r + strlen(pre) + 3;
        const json_t *target = json_object_get(json_object_get(c->root, pre), dn);
        if (!target) return no(c, path, "$ref \"%s\" names no definition", r);
        const json_t *made = json_object_get(c->defs, r);
        if (made) return snprintf(name, 32, "%s", json_string_value(made)), 0;
        new_rule(c, name);
        json_object_set_new(c->defs, r, json_string(name)); /* before its body: a recursive $ref finds it */
        char sub[32], p2[512];
        snprintf(p2, sizeof p2, "%s", r + 2);
        if (node(c, target, p2, sub) != 0) return -1;
        bprintf(&c->g, "%s ::= %s\n", name, sub);
        return 0;
    }
    static const char *const ok[] = {"type", "properties", "required", "items", "minItems", "maxItems", "minLength",
                                     "maxLength", "enum", "const", "anyOf", "allOf", "additionalProperties", NULL};
    if (keywords_known(c, s, path, ok) != 0) return -1;
    ms_sbuf body = {0};
    const json_t *e = json_object_get(s, "enum"), *k = json_object_get(s, "const"), *any = json_object_get(s, "anyOf");
    const json_t *all = json_object_get(s, "allOf"), *type = json_object_get(s, "type");
    char p2[512], sub[32];
    int rc = 0;
    if (k) {
        lit_json(&body, k);
    } else if (e) {
        if (!json_is_array(e) || !json_array_size(e)) rc = no(c, path, "\"enum\" must be a non-empty array");
        for (size_t i = 0; !rc && i < json_array_size(e); i++) {
            if (i) ms_sbuf_adds(&body, " | ");
            lit_json(&body, json_array_get(e, i));
        }
    } else if (any) {
        if (!json_is_array(any) || !json_array_size(any)) rc = no(c, path, "\"anyOf\" must be a non-empty array");
        for (size_t i = 0; !rc && i < json_array_size(any); i++) {
            snprintf(p2, sizeof p2, "%s%sanyOf[%zu]", path, path[0] ? "." : "", i);
            if ((rc = node(c, json_array_get(any, i), p2, sub)) != 0) break;
            bprintf(&body, "%s%s", i ? " | " : "", sub);
        }
    } else if (all) {
        if (!json_is_array(all) || json_array_size(all) != 1)
            rc = no(c, path, "\"allOf\" is held to only with one schema (an intersection is not compiled)");
        snprintf(p2, sizeof p2, "%s%sallOf[0]", path, path[0] ? "." : "");
        if (!rc && (rc = node(c, json_array_get(all, 0), p2, sub)) == 0) ms_sbuf_adds(&body, sub);
    } else if (json_is_string(type)) {
        rc = typed(c, s, json_string_value(type), path, &body);
    } else if (json_is_array(type) && json_array_size(type)) {
        for (size_t i = 0; !rc && i < json_array_size(type); i++) {
            const char *t = json_string_value(json_array_get(type, i));
            if (!t) rc = no(c, path, "\"type\" lists names");
            if (!rc && i) ms_sbuf_adds(&body, " | ");
            if (!rc) rc = typed(c, s, t, path, &body);
        }
    } else if (type) {
        rc = no(c, path, "\"type\" must be a name or a list of names");
    } else if (json_object_get(s, "properties")) {
        rc = typed(c, s, "object", path, &body);
    } else if (json_object_get(s, "items")) {
        rc = typed(c, s, "array", path, &body);
    } else {
        ms_sbuf_adds(&body, "jvalue");
    }
    if (!rc && !c->failed) {
        new_rule(c, name);
        bprintf(&c->g, "%s ::= ", name);
        ms_sbuf_add(&c->g, body.s, body.n);
        ms_sbuf_adds(&c->g, "\n");
    }
    ms_sbuf_free(&body);
    return c->failed ? -1 : rc;
}

/* The schema's rules (c.g) and the name of its top rule, or -1. */
static int compile(const json_t *schema, const char *prefix, char *why, size_t n, ms_sbuf *rules, char top[32])
{
    cc c = {{0}, 0, schema, json_object(), why, n, 0, prefix};
    int rc = node(&c, schema, "", top);
    json_decref(c.defs);
    if (rc != 0) {
        ms_sbuf_free(&c.g);
        return -1;
    }
    *rules = c.g;
    return 0;
}

char *ms_jschema_grammar(const json_t *schema, char *why, size_t n)
{
    ms_sbuf rules = {0}, out = {0};
    char top[32];
    if (compile(schema, "", why, n, &rules, top) != 0) return NULL;
    bprintf(&out, "root ::= ws %s ws\n", top);
    ms_sbuf_add(&out, rules.s, rules.n);
    ms_sbuf_adds(&out, COMMON);
    ms_sbuf_free(&rules);
    size_t l;
    return ms_sbuf_take(&out, &l);
}

char *ms_jschema_rules(const json_t *schema, const char *name, char *why, size_t n)
{
    ms_sbuf rules = {0}, out = {0};
    char top[32];
    if (strlen(name) > 12) return snprintf(why, n, "a rule name longer than 12 characters"), NULL;
    if (compile(schema, name, why, n, &rules, top) != 0) return NULL;
    bprintf(&out, "%s ::= %s\n", name, top);
    ms_sbuf_add(&out, rules.s, rules.n);
    ms_sbuf_free(&rules);
    size_t l;
    return ms_sbuf_take(&out, &l);
}

const char *ms_jschema_common(void) { return COMMON; }
