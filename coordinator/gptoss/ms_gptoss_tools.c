/* ms_gptoss_tools: harmony's tool definitions: functions as the template's TypeScript-like namespace, and the built-in browser and python. */
#include <string.h>

#include "ms_err.h"
#include "ms_gptoss_tools.h"
#include "ms_pyjson.h"
#include "ms_sbuf.h"

/* The built-in tools' text, as the released template writes it. */
static const char browser_text[] =
    "## browser\n\n"
    "// Tool for browsing.\n"
    "// The `cursor` appears in brackets before each browsing display: `[{cursor}]`.\n"
    "// Cite information from the tool using the following format:\n"
    "// `【{cursor}†L{line_start}(-L{line_end})?】`, for example: `【6†L9-L11】` or `【8†L3】`.\n"
    "// Do not quote more than 10 words directly from the tool output.\n"
    "// sources=web (default: web)\n"
    "namespace browser {\n\n"
    "// Searches for information related to `query` and displays `topn` results.\n"
    "type search = (_: {\n"
    "query: string,\n"
    "topn?: number, // default: 10\n"
    "source?: string,\n"
    "}) => any;\n\n"
    "// Opens the link `id` from the page indicated by `cursor` starting at line number `loc`, showing `num_lines` lines.\n"
    "// Valid link ids are displayed with the formatting: `【{id}†.*】`.\n"
    "// If `cursor` is not provided, the most recent page is implied.\n"
    "// If `id` is a string, it is treated as a fully qualified URL associated with `source`.\n"
    "// If `loc` is not provided, the viewport will be positioned at the beginning of the document or centered on the most relevant passage, if available.\n"
    "// Use this function without `id` to scroll to a new location of an opened page.\n"
    "type open = (_: {\n"
    "id?: number | string, // default: -1\n"
    "cursor?: number, // default: -1\n"
    "loc?: number, // default: -1\n"
    "num_lines?: number, // default: -1\n"
    "view_source?: boolean, // default: false\n"
    "source?: string,\n"
    "}) => any;\n\n"
    "// Finds exact matches of `pattern` in the current page, or the page given by `cursor`.\n"
    "type find = (_: {\n"
    "pattern: string,\n"
    "cursor?: number, // default: -1\n"
    "}) => any;\n\n"
    "} // namespace browser\n\n";
static const char python_text[] =
    "## python\n\n"
    "Use this tool to execute Python code in your chain of thought. The code will not be shown to the user. This tool should be used for internal reasoning, but not for code that is intended to be visible to the user (e.g. when creating plots, tables, or files).\n\n"
    "When you send a message containing Python code to python, it will be executed in a stateful Jupyter notebook environment. python will respond with the output of the execution or time out after 120.0 seconds. The drive at '/mnt/data' can be used to save and persist user files. Internet access for this session is UNKNOWN. Depends on the cluster.\n\n";

const char *ms_gptoss_builtin_text(int which) { return which == MS_GPTOSS_TOOL_BROWSER ? browser_text : python_text; }

/* The template's values follow Jinja's rules: a missing key is undefined, and a value is true
 * unless it is undefined, null, false, 0, "" or an empty array or object. */
static int truthy(const json_t *v)
{
    if (!v) return 0;
    switch (json_typeof(v)) {
    case JSON_NULL:
    case JSON_FALSE: return 0;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0;
    case JSON_STRING: return json_string_length(v) > 0;
    case JSON_ARRAY: return json_array_size(v) > 0;
    case JSON_OBJECT: return json_object_size(v) > 0;
    default: return 1;
    }
}

static const json_t *key(const json_t *o, const char *k) { return json_is_object(o) ? json_object_get(o, k) : NULL; }

static int is(const json_t *v, const char *s) { return json_is_string(v) && !strcmp(json_string_value(v), s); }

typedef struct {
    const char *where; /* "tools[2].function.parameters" and deeper, for messages */
} ctx;

static int refuse(const char *where, const char *what)
{
    ms_err_set("%s: %s (the harmony template cannot render it)", where, what);
    return ms_err_set_code(MS_EXIT_INPUT);
}

/* Python's str() of a scalar, as Jinja's join and {{ }} print it. */
static int scalar(ms_sbuf *b, const json_t *v, const char *where)
{
    char num[40];
    switch (json_typeof(v)) {
    case JSON_STRING: ms_sbuf_add(b, json_string_value(v), json_string_length(v)); return 0;
    case JSON_INTEGER: ms_sbuf_addf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); return 0;
    case JSON_REAL: ms_pyjson_float(json_real_value(v), num, sizeof num); ms_sbuf_adds(b, num); return 0;
    case JSON_TRUE: ms_sbuf_adds(b, "True"); return 0;
    case JSON_FALSE: ms_sbuf_adds(b, "False"); return 0;
    case JSON_NULL: ms_sbuf_adds(b, "None"); return 0;
    default: return refuse(where, "a list of types or an enum holds an object or an array");
    }
}

/* Is name in required (the template's `name in (required or [])`)? */
static int in_required(const json_t *req, const char *name, const char *where, int *yes)
{
    *yes = 0;
    if (!truthy(req)) return 0;
    if (json_is_array(req)) {
        for (size_t i = 0; i < json_array_size(req); i++) *yes |= is(json_array_get(req, i), name);
        return 0;
    }
    if (json_is_string(req)) return *yes = strstr(json_string_value(req), name) != NULL, 0; /* Python's substring test */
    if (json_is_object(req)) return *yes = json_object_get(req, name) != NULL, 0;
    return refuse(where, "\"required\" is not a list of names");
}

static size_t code_points(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* render_typescript_type(spec) */
static int ts_type(ms_sbuf *b, const json_t *spec, const char *where, int depth)
{
    if (depth > 32) return refuse(where, "parameter schemas nest more than 32 deep");
    const json_t *type = key(spec, "type"), *nullable = key(spec, "nullable");
    if (is(type, "array")) {
        const json_t *items = key(spec, "items");
        if (truthy(items)) {
            const json_t *it = key(items, "type");
            if (is(it, "string")) ms_sbuf_adds(b, "string[]");
            else if (is(it, "number") || is(it, "integer")) ms_sbuf_adds(b, "number[]");
            else if (is(it, "boolean")) ms_sbuf_adds(b, "boolean[]");
            else {
                ms_sbuf inner = {0};
                if (ts_type(&inner, items, where, depth + 1) != 0) return ms_sbuf_free(&inner), -1;
                if ((inner.n == 15 && !memcmp(inner.s, "object | object", 15)) || code_points(inner.s, inner.n) > 50)
                    ms_sbuf_adds(b, "any[]");
                else
                    ms_sbuf_add(b, inner.s, inner.n), ms_sbuf_adds(b, "[]");
                ms_sbuf_free(&inner);
            }
        } else {
            ms_sbuf_adds(b, "any[]");
        }
        if (truthy(nullable)) ms_sbuf_adds(b, " | null");
        return 0;
    }
    if (json_is_array(type) && json_array_size(type) > 0) { /* ["string", "null"] */
        for (size_t i = 0; i < json_array_size(type); i++) {
            if (i) ms_sbuf_adds(b, " | ");
            if (scalar(b, json_array_get(type, i), where) != 0) return -1;
        }
        return 0;
    }
    const json_t *one = key(spec, "oneOf");
    if (truthy(one)) {
        /* The template's test for object variants sets a variable inside its loop, which Jinja
         * scopes to the loop: it never takes effect, so every variant is rendered. */
        if (!json_is_array(one)) return refuse(where, "\"oneOf\" is not a list of schemas");
        for (size_t i = 0; i < json_array_size(one); i++) {
            const json_t *v = json_array_get(one, i), *d = key(v, "description"), *df = key(v, "default");
            if (ts_type(b, v, where, depth + 1) != 0) return -1;
            if (truthy(d)) {
                if (!json_is_string(d)) return refuse(where, "a oneOf variant's \"description\" is not a string");
                ms_sbuf_adds(b, "// ");
                ms_sbuf_add(b, json_string_value(d), json_string_length(d));
            }
            if (df) {
                size_t n;
                char *j = ms_pyjson_dumps(df, &n);
                ms_sbuf_adds(b, "                    // default: "); /* the template's indentation, kept */
                ms_sbuf_add(b, j, n);
                free(j);
            }
            if (i + 1 < json_array_size(one)) ms_sbuf_adds(b, " | \n");
        }
        return 0;
    }
    if (is(type, "string")) {
        const json_t *en = key(spec, "enum");
        if (truthy(en)) {
            if (!json_is_array(en)) return refuse(where, "\"enum\" is not a list");
            ms_sbuf_adds(b, "\"");
            for (size_t i = 0; i < json_array_size(en); i++) {
                if (i) ms_sbuf_adds(b, "\" | \"");
                if (scalar(b, json_array_get(en, i), where) != 0) return -1;
            }
            ms_sbuf_adds(b, "\"");
        } else {
            ms_sbuf_adds(b, "string");
            if (truthy(nullable)) ms_sbuf_adds(b, " | null");
        }
        return 0;
    }
    if (is(type, "number") || is(type, "integer")) return ms_sbuf_adds(b, "number"), 0;
    if (is(type, "boolean")) return ms_sbuf_adds(b, "boolean"), 0;
    if (is(type, "object")) {
        const json_t *props = key(spec, "properties"), *x;
        if (!truthy(props)) return ms_sbuf_adds(b, "object"), 0;
        if (!json_is_object(props)) return refuse(where, "\"properties\" is not an object");
        const char *name;
        size_t left = json_object_size(props);
        ms_sbuf_adds(b, "{\n");
        json_object_foreach((json_t *)props, name, x) {
            int req;
            if (in_required(key(spec, "required"), name, where, &req) != 0) return -1;
            ms_sbuf_adds(b, name);
            if (!req) ms_sbuf_adds(b, "?");
            ms_sbuf_adds(b, ": \n                "); /* the template's line break and indentation, kept */
            if (ts_type(b, x, where, depth + 1) != 0) return -1;
            if (--left) ms_sbuf_adds(b, ", ");
        }
        ms_sbuf_adds(b, "}");
        return 0;
    }
    ms_sbuf_adds(b, "any");
    return 0;
}

static int function(ms_sbuf *b, const json_t *tool, size_t i)
{
    char where[96];
    snprintf(where, sizeof where, "tools[%zu].function", i);
    const json_t *f = key(tool, "function");
    if (!json_is_object(f)) return refuse(where, "missing, or not an object");
    const json_t *name = key(f, "name"), *desc = key(f, "description"), *par = key(f, "parameters");
    if (!json_is_string(name) || !json_string_length(name)) return refuse(where, "\"name\" is missing or not a string");
    if (desc && !json_is_null(desc) && !json_is_string(desc)) return refuse(where, "\"description\" is not a string");
    if (json_is_string(desc)) { /* optional in OpenAI's API: without one, no comment line */
        ms_sbuf_adds(b, "// ");
        ms_sbuf_add(b, json_string_value(desc), json_string_length(desc));
        ms_sbuf_adds(b, "\n");
    }
    ms_sbuf_adds(b, "type ");
    ms_sbuf_add(b, json_string_value(name), json_string_length(name));
    ms_sbuf_adds(b, " = ");
    const json_t *props = key(par, "properties"), *ps;
    if (!truthy(par) || !truthy(props)) return ms_sbuf_adds(b, "() => any;\n\n"), 0;
    snprintf(where, sizeof where, "tools[%zu].function.parameters", i);
    if (!json_is_object(props)) return refuse(where, "\"properties\" is not an object");
    ms_sbuf_adds(b, "(_: {\n");
    const char *pn;
    json_object_foreach((json_t *)props, pn, ps) {
        const json_t *d = key(ps, "description"), *df = key(ps, "default");
        int req;
        if (truthy(d)) {
            if (!json_is_string(d)) return refuse(where, "a parameter's \"description\" is not a string");
            ms_sbuf_adds(b, "// ");
            ms_sbuf_add(b, json_string_value(d), json_string_length(d));
            ms_sbuf_adds(b, "\n");
        }
        if (in_required(key(par, "required"), pn, where, &req) != 0) return -1;
        ms_sbuf_adds(b, pn);
        if (!req) ms_sbuf_adds(b, "?");
        ms_sbuf_adds(b, ": ");
        if (ts_type(b, ps, where, 0) != 0) return -1;
        if (df) {
            int en = truthy(key(ps, "enum")), one = !en && truthy(key(ps, "oneOf"));
            if (en || one) { /* written as text, not as JSON */
                if (!json_is_string(df)) return refuse(where, "the \"default\" of an enum or oneOf parameter is not a string");
                ms_sbuf_adds(b, en ? ", // default: " : "// default: ");
                ms_sbuf_add(b, json_string_value(df), json_string_length(df));
            } else {
                size_t n;
                char *j = ms_pyjson_dumps(df, &n);
                ms_sbuf_adds(b, ", // default: ");
                ms_sbuf_add(b, j, n);
                free(j);
            }
        }
        ms_sbuf_adds(b, ",\n");
    }
    ms_sbuf_adds(b, "}) => any;\n\n");
    return 0;
}

char *ms_gptoss_tools_namespace(const json_t *tools, size_t *len)
{
    if (!json_is_array(tools)) {
        refuse("tools", "not a list of {\"type\": \"function\", \"function\": {...}}");
        return NULL;
    }
    ms_sbuf b = {0};
    ms_sbuf_adds(&b, "## functions\n\nnamespace functions {\n\n");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i), *ty = key(t, "type");
        char where[32];
        snprintf(where, sizeof where, "tools[%zu]", i);
        if (ty && !is(ty, "function")) {
            refuse(where, "\"type\" is not \"function\" (the built-in browser and python are chat_template_kwargs.builtin_tools)");
            ms_sbuf_free(&b);
            return NULL;
        }
        if (function(&b, t, i) != 0) {
            ms_sbuf_free(&b);
            return NULL;
        }
    }
    ms_sbuf_adds(&b, "} // namespace functions");
    return ms_sbuf_take(&b, len);
}
