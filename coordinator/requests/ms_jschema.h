/* ms_jschema: JSON Schemas (structured outputs) compiled to grammar text (ms_grammar's syntax) whose sentences are JSON texts valid under the schema. */
#ifndef MS_JSCHEMA_H
#define MS_JSCHEMA_H

#include <jansson.h>
#include <stddef.h>

/* The grammar of the JSON texts that validate against schema (a new string, the caller's), or
 * NULL with why[n] naming the keyword and where it is ("properties.items.pattern") when the
 * schema uses what this compiler cannot hold a text to: never ignored. Taken: type (one or a
 * list), properties (in their order) with required (absent ones may be left out; undeclared
 * properties are never written, which every schema allows unless it asks for them), items,
 * minItems / maxItems, minLength / maxLength, enum, const, anyOf, a one-element allOf, $ref to
 * #/$defs/NAME or #/definitions/NAME (recursion allowed), additionalProperties as a schema for
 * an object without properties, and the annotations (title, description, default, examples,
 * $schema, $id, $comment, deprecated, readOnly, writeOnly). The text: between its tokens
 * nothing, a space, or a newline and up to 20 spaces or tabs (a model may indent; it cannot pad
 * forever); a string's
 * characters any but the control characters, with JSON's escapes; numbers of at most 16 digits
 * before and after the point and an exponent of at most 3. */
char *ms_jschema_grammar(const json_t *schema, char *why, size_t n);

/* The same as rules to embed in a larger grammar: the rule `name` (at most 12 characters) is a
 * JSON text valid under schema (no space around it), its other rules are named name-s0, ...,
 * and they use the shared rules of ms_jschema_common (ws, jstring, jobject, jvalue, ...), which
 * the caller adds once. A new string, or NULL with why[n] as ms_jschema_grammar. */
char *ms_jschema_rules(const json_t *schema, const char *name, char *why, size_t n);
const char *ms_jschema_common(void); /* static */

/* The grammar of any JSON object (response_format json_object). Static. */
const char *ms_jschema_any_object(void);

#endif
