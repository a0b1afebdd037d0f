/* test_jschema: JSON Schemas compiled to grammars: instances that validate are sentences, instances that do not are not (each schema with both kinds), any JSON object for json_object, and what cannot be held to refused naming the keyword and where it is. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_err.h"
#include "ms_grammar.h"
#include "ms_jschema.h"
#include "ms_test.h"

static int takes(const ms_grammar *g, const char *text)
{
    ms_gstate *s = ms_gstate_new(g);
    int ok = ms_gstate_accept(s, text, strlen(text)) && ms_gstate_complete(s);
    ms_gstate_free(s);
    return ok;
}

/* schema: its valid instances (yes, NULL-ended) are sentences, its invalid ones (no) are not. */
static void check(const char *what, const char *schema, const char *const *yes, const char *const *no)
{
    json_t *s = json_loads(schema, 0, NULL);
    MS_ASSERT(s);
    char why[600] = "";
    char *gt = ms_jschema_grammar(s, why, sizeof why);
    ms_grammar *g = gt ? ms_grammar_parse(gt, strlen(gt)) : NULL;
    T_CHECK(g != NULL, "%s: compiles (%s)", what, g ? "" : gt ? ms_err_msg() : why);
    for (int i = 0; g && yes[i]; i++) T_CHECK(takes(g, yes[i]), "%s: takes %s", what, yes[i]);
    for (int i = 0; g && no[i]; i++) T_CHECK(!takes(g, no[i]), "%s: refuses %s", what, no[i]);
    ms_grammar_free(g);
    free(gt);
    json_decref(s);
}

static void refused(const char *schema, const char *says)
{
    json_t *s = json_loads(schema, 0, NULL);
    MS_ASSERT(s);
    char why[600] = "";
    char *gt = ms_jschema_grammar(s, why, sizeof why);
    T_CHECK(!gt && strstr(why, says), "refused: %s, saying %s (%s)", schema, says, gt ? "compiled" : why);
    free(gt);
    json_decref(s);
}

int main(void)
{
    ms_log_set_level(0);
    check("strict object",
          "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, \"age\": {\"type\": \"integer\"}, "
          "\"ok\": {\"type\": \"boolean\"}}, \"required\": [\"name\", \"age\", \"ok\"], \"additionalProperties\": false}",
          (const char *[]){"{\"name\": \"Ann\", \"age\": 31, \"ok\": true}", "{\"name\":\"\",\"age\":-4,\"ok\":false}",
                           "{\n  \"name\": \"A\\\"b\\u00e9\",\n  \"age\": 0,\n  \"ok\": true\n}", NULL},
          (const char *[]){"{\"age\": 31, \"name\": \"Ann\", \"ok\": true}", "{\"name\": \"Ann\", \"age\": 31}",
                           "{\"name\": \"Ann\", \"age\": 3.5, \"ok\": true}", "{\"name\": \"Ann\", \"age\": 01, \"ok\": true}",
                           "{\"name\": \"Ann\", \"age\": 31, \"ok\": true, \"x\": 1}", "[]", NULL});
    check("optional properties",
          "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": \"string\"}, \"c\": "
          "{\"type\": \"null\"}}, \"required\": [\"b\"]}",
          (const char *[]){"{\"b\": \"x\"}", "{\"a\": 1, \"b\": \"x\"}", "{\"b\": \"x\", \"c\": null}",
                           "{\"a\": 1, \"b\": \"x\", \"c\": null}", NULL},
          (const char *[]){"{}", "{\"a\": 1}", "{\"a\": 1, \"c\": null}", "{\"b\": \"x\",}", "{, \"b\": \"x\"}", NULL});
    check("all optional", "{\"properties\": {\"a\": {\"type\": \"integer\"}}}", (const char *[]){"{}", "{\"a\": 2}", NULL},
          (const char *[]){"{\"a\": \"2\"}", NULL});
    check("arrays with bounds", "{\"type\": \"array\", \"items\": {\"type\": \"number\"}, \"minItems\": 1, \"maxItems\": 3}",
          (const char *[]){"[1]", "[1.5, -2e3, 0]", "[ 1 , 2 ]", NULL}, (const char *[]){"[]", "[1, 2, 3, 4]", "[\"1\"]", NULL});
    check("enum, const, anyOf, type lists",
          "{\"type\": \"object\", \"properties\": {\"c\": {\"enum\": [\"red\", \"green\", 3, null]}, \"k\": {\"const\": "
          "{\"x\": [1, true]}}, \"u\": {\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"integer\"}]}, \"t\": {\"type\": "
          "[\"boolean\", \"null\"]}}, \"required\": [\"c\", \"k\", \"u\", \"t\"]}",
          (const char *[]){"{\"c\": \"red\", \"k\": {\"x\":[1,true]}, \"u\": \"s\", \"t\": null}",
                           "{\"c\": 3, \"k\": {\"x\":[1,true]}, \"u\": 7, \"t\": false}", NULL},
          (const char *[]){"{\"c\": \"blue\", \"k\": {\"x\":[1,true]}, \"u\": \"s\", \"t\": null}",
                           "{\"c\": \"red\", \"k\": {\"x\":[1,false]}, \"u\": \"s\", \"t\": null}",
                           "{\"c\": \"red\", \"k\": {\"x\":[1,true]}, \"u\": 1.5, \"t\": null}", NULL});
    check("string lengths", "{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 4}",
          (const char *[]){"\"ab\"", "\"abcd\"", "\"\\n\\t\"", "\"日本\"", NULL}, (const char *[]){"\"a\"", "\"abcde\"", "\"a\nb\"", NULL});
    check("recursive $ref",
          "{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": \"integer\"}, \"kids\": {\"type\": "
          "\"array\", \"items\": {\"$ref\": \"#/$defs/node\"}}}, \"required\": [\"v\", \"kids\"]}}, \"$ref\": \"#/$defs/node\"}",
          (const char *[]){"{\"v\": 1, \"kids\": []}", "{\"v\": 1, \"kids\": [{\"v\": 2, \"kids\": [{\"v\": 3, \"kids\": []}]}]}", NULL},
          (const char *[]){"{\"v\": 1}", "{\"v\": 1, \"kids\": [{\"v\": 2}]}", NULL});
    check("a map", "{\"type\": \"object\", \"additionalProperties\": {\"type\": \"integer\"}}",
          (const char *[]){"{}", "{\"a\": 1, \"b\": 2}", NULL}, (const char *[]){"{\"a\": \"1\"}", NULL});
    check("annotations and a one-schema allOf",
          "{\"title\": \"T\", \"description\": \"d\", \"$schema\": \"https://json-schema.org/draft/2020-12/schema\", "
          "\"allOf\": [{\"type\": \"integer\", \"description\": \"n\", \"default\": 3, \"examples\": [1]}]}",
          (const char *[]){"42", NULL}, (const char *[]){"\"42\"", NULL});
    check("true: any JSON value", "{}", (const char *[]){"1", "[{\"a\": null}]", "\"x\"", NULL}, (const char *[]){"{a}", NULL});
    /* json_object: any object */
    const char *ao = ms_jschema_any_object();
    ms_grammar *g = ms_grammar_parse(ao, strlen(ao));
    T_CHECK(g && takes(g, "{\"a\": [1, {\"b\": null}]}") && takes(g, "{}") && !takes(g, "[1]") && !takes(g, "\"s\""),
            "json_object: any JSON object, nothing else");
    ms_grammar_free(g);
    /* refusals name the keyword and where it is */
    refused("{\"type\": \"string\", \"pattern\": \"^a$\"}", "the schema: \"pattern\"");
    refused("{\"type\": \"string\", \"format\": \"date-time\"}", "\"format\"");
    refused("{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\", \"minimum\": 0}}}", "properties.n: \"minimum\"");
    refused("{\"oneOf\": [{\"type\": \"string\"}]}", "\"oneOf\"");
    refused("{\"allOf\": [{\"type\": \"string\"}, {\"maxLength\": 3}]}", "\"allOf\"");
    refused("{\"$ref\": \"https://example.com/s.json\"}", "$ref");
    refused("{\"$ref\": \"#/$defs/missing\"}", "names no definition");
    refused("{\"type\": \"object\", \"properties\": {\"a\": {}}, \"required\": [\"b\"]}", "\"b\"");
    refused("{\"type\": \"tuple\"}", "type \"tuple\"");
    refused("{\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"uniqueItems\": true}", "\"uniqueItems\"");
    refused("{\"type\": \"array\", \"maxItems\": 2, \"minItems\": 3}", "maxItems is below minItems");
    return ms_t_done();
}
