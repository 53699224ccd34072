/* json_schema.h - JSON Schema to GBNF (grammar.h), so that sampling under the
 * grammar gives JSON that validates against the schema.
 *
 * Supported (an output of the grammar always validates; where JSON Schema allows
 * more than a grammar can say simply, the grammar allows a subset, noted here):
 *   type (a name or a list), properties / required / additionalProperties (false, or
 *   absent beside declared properties: no other keys, the usual wish of structured
 *   output; true or a schema: other keys after the declared ones; an object schema
 *   that declares nothing: any object), enum / const, items / prefixItems /
 *   minItems / maxItems, anyOf, oneOf (branches of disjoint types, or objects told
 *   apart by a required property's const or enum values: otherwise one output could
 *   match two branches), allOf (merged into one schema), $ref to "#" or "#/..."
 *   (JSON pointers into the document: $defs, definitions, ...; recursion allowed
 *   wherever a value is consumed in between), strings' minLength / maxLength /
 *   format (date, time, date-time, uuid) / pattern (a regex subset: literals, ., [...]
 *   classes, \d \w \s and negations, groups, |, * + ? {m,n}, ^ and $ at the ends),
 *   integer and number minimum / maximum / exclusiveMinimum / exclusiveMaximum
 *   (numbers: integer bounds only). Annotations (title, description, default,
 *   examples, $schema, $id, $comment, deprecated, readOnly, writeOnly) are ignored.
 * Subsets: strings are written with the escapes \" \\ \/ \b \f \n \r \t and \uXXXX
 * (no surrogate halves); integers have at most 16 digits, numbers' fractions at most
 * 16, exponents 2; a date's February has 28 days; optional whitespace is one space,
 * or a newline and up to 16 spaces.
 * Anything else (a keyword outside these lists, a remote $ref, multipleOf, an
 * unsupported format or regex feature) is an error naming the keyword and the path
 * of the schema that holds it, e.g. "json schema: #/properties/age: unsupported
 * keyword 'multipleOf'". Hostile schemas: the text is limited to 1 MB, nesting to 64
 * levels (a $ref cycle that never reaches a value is an error that names it), the
 * work to JSON_SCHEMA_MAX_WORK steps (shared $refs under allOf could take exponential
 * time), the grammar produced to GRAM_MAX_SOURCE bytes. */
#ifndef MINFER_JSON_SCHEMA_H
#define MINFER_JSON_SCHEMA_H

#include <stddef.h>

#include "util.h"

enum { JSON_SCHEMA_MAX_TEXT = 1 << 20, JSON_SCHEMA_MAX_DEPTH = 64, JSON_SCHEMA_MAX_WORK = 1000000 };

/* Converts the schema text[0..len) into GBNF text (malloc'd, NUL-terminated,
 * *gbnf_len bytes; its rule "root" is the schema). MF_ERR_INPUT with a message on a
 * bad or unsupported schema. */
int json_schema_to_gbnf(const char *text, size_t len, char **gbnf, size_t *gbnf_len, mf_err *err);

/* GBNF for any JSON object (response_format json_object). Static text. */
const char *json_object_gbnf(void);

/* Tool calls (for the chat template's tool calling): a grammar whose text is
 * list_prefix, then between min_calls and max_calls calls separated by separator,
 * then list_suffix; each call is call_prefix, a JSON object
 * {"<name_key>": "<name>", "<args_key>": <arguments>}, call_suffix, where name is one
 * of the tools and arguments validates against that tool's parameters schema.
 * Hermes/Qwen: call_prefix "<tool_call>\n", call_suffix "\n</tool_call>", separator
 * "\n"; Llama 3.x: args_key "parameters"; Mistral: list_prefix "[TOOL_CALLS][",
 * separator ", ", list_suffix "]". NULL strings are empty. */
typedef struct json_tool {
    const char *name;        /* the function's name */
    const char *parameters;  /* its parameters' JSON schema text; NULL: any object */
    size_t parameters_len;
} json_tool;

typedef struct json_tool_format {
    const char *list_prefix, *list_suffix, *separator;
    const char *call_prefix, *call_suffix;
    const char *name_key;    /* NULL: "name" */
    const char *args_key;    /* NULL: "arguments" */
    int min_calls;           /* >= 1 */
    int max_calls;           /* >= min_calls; 0: no limit */
    /* the name outside the object: a call is call_prefix NAME name_suffix ARGS call_suffix
     * (DeepSeek, Kimi K2, gpt-oss, Functionary, Mistral's [ARGS]); name_key and args_key unused */
    int bare_name;
    const char *name_suffix;
} json_tool_format;

/* GBNF for calls of tools[0..n_tools) in format fmt (its rule "root"), malloc'd into
 * *gbnf; MF_ERR_INPUT naming the tool whose schema failed, or MF_ERR_USAGE. */
int json_tool_call_gbnf(const json_tool *tools, int n_tools, const json_tool_format *fmt, char **gbnf,
                        size_t *gbnf_len, mf_err *err);

#endif
