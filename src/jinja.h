/* jinja.h - a Jinja template engine for chat templates (the GGUF's
 * tokenizer.chat_template), written to render byte for byte what Python's jinja2
 * renders as Hugging Face transformers configures it:
 *
 *   ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
 *                                 extensions=[AssistantTracker, loopcontrols])
 *   filters["tojson"] = json.dumps(x, ensure_ascii=False, indent=, separators=, sort_keys=)
 *   globals raise_exception(msg), strftime_now(fmt)
 *
 * What a chat template uses is here: expressions with Python's semantics (int, float,
 * str by code point, list, tuple, dict in insertion order, None, undefined), filters,
 * tests, string/dict/list methods, for/if/set/macro/call/filter/with blocks, namespace,
 * loop variables, break/continue, whitespace control, {% generation %}, {% block %}
 * (rendered in place with jinja2's scoping: nothing extends a chat template), groupby.
 * extends, include, import and from parse and fail where they run, as jinja2's do with
 * no loader (transformers renders from a string). What is not: recursive loops, the
 * `self` of blocks, the list/dict mutators the immutable sandbox forbids (append, pop,
 * update: an error, as in transformers) and filters jinja2 does not have (an unknown
 * filter or test is a parse error, as jinja2's compile-time error).
 *
 * A template is hostile input: parsing and rendering are bounded (expression and
 * block nesting, call depth, loop iterations, output bytes, memory) and every
 * failure is a message naming the line and column, never a crash.
 *
 * Values live in an environment's arena (jinja_env): the variables given to a render
 * and everything a render creates are freed together by jinja_env_free. A parsed
 * template (jinja_tmpl) is independent of any environment, read-only once parsed,
 * and may be rendered many times, by several threads at once with one environment
 * each. An environment is not thread-safe. */
#ifndef MINFER_JINJA_H
#define MINFER_JINJA_H

#include <stddef.h>
#include <stdint.h>

typedef struct jinja_tmpl jinja_tmpl;
typedef struct jinja_env jinja_env;
typedef struct jinja_value jinja_value;

/* The error of a parse, a JSON conversion or a render: what went wrong, and where in
 * the template ("line L, column C"; both 0 when it does not apply). jinja_error_str
 * formats both in one line. */
typedef struct jinja_error {
    int line, col;
    char msg[256];
} jinja_error;
/* "line L, column C: MSG" (or MSG alone) into buf; returns buf. */
const char *jinja_error_str(const jinja_error *e, char *buf, size_t cap);

/* Bounds of one render. Zero fields take the defaults (JINJA_DEFAULT_*). */
typedef struct jinja_limits {
    size_t max_output;  /* bytes of rendered text */
    size_t max_memory;  /* bytes the render may allocate in its environment's arena */
    uint64_t max_steps; /* loop iterations + macro calls + items filters walk, all together */
    int max_depth;      /* nested macro calls */
} jinja_limits;
#define JINJA_DEFAULT_MAX_OUTPUT ((size_t)16 << 20)
#define JINJA_DEFAULT_MAX_MEMORY ((size_t)256 << 20)
#define JINJA_DEFAULT_MAX_STEPS ((uint64_t)10 * 1000 * 1000)
#define JINJA_DEFAULT_MAX_DEPTH 48
/* Nesting of expressions and blocks the parser accepts (each level a few C stack
 * frames), and of values (lists in lists) that printing, comparing and JSON accept. */
#define JINJA_MAX_NESTING 128

/* Parses a template source (valid UTF-8, need not be NUL-terminated). Returns the
 * template, or NULL with err filled (a syntax error, an unknown filter or test,
 * nesting too deep, invalid UTF-8, out of memory). */
jinja_tmpl *jinja_parse(const char *src, size_t len, jinja_error *err);
void jinja_tmpl_free(jinja_tmpl *t);
/* 1 when the template's text names `name` as a variable anywhere (a cheap check of
 * what a template reads: "tools", "enable_thinking"); 0 otherwise. */
int jinja_tmpl_uses(const jinja_tmpl *t, const char *name);

/* An environment: the variables of a render and the arena its values live in.
 * NULL only when memory runs out. */
jinja_env *jinja_env_new(void);
void jinja_env_free(jinja_env *e);
/* The time strftime_now formats (seconds since the epoch, local time zone); by
 * default the clock at each call. For tests and reproducible prompts. */
void jinja_env_set_time(jinja_env *e, int64_t t);

/* Converts a JSON document into a value of e as Python's json.loads does: objects
 * keep their key order (a repeated key keeps its first place and its last value),
 * integers stay integers, numbers with a fraction or exponent become floats. NULL
 * with err filled on malformed JSON, an integer beyond 64 bits, a lone surrogate
 * escape, invalid UTF-8, or nesting deeper than JINJA_MAX_NESTING. */
jinja_value *jinja_json_parse(jinja_env *e, const char *s, size_t len, jinja_error *err);
/* The value as JSON (json.dumps(v, ensure_ascii=False) with separators (", ", ": ")),
 * malloc'd and NUL-terminated (*len its length when len is non-NULL), or NULL when v
 * holds something JSON cannot (undefined, a macro) or memory runs out. */
char *jinja_json_dump(const jinja_value *v, size_t *len);

/* Values made in e; each returns NULL only when memory runs out (or s is NULL). */
jinja_value *jinja_none(jinja_env *e);
jinja_value *jinja_bool(jinja_env *e, int b);
jinja_value *jinja_int(jinja_env *e, int64_t i);
jinja_value *jinja_string(jinja_env *e, const char *s);              /* NUL-terminated, UTF-8 */
jinja_value *jinja_string_n(jinja_env *e, const char *s, size_t n);  /* any length, UTF-8 */
jinja_value *jinja_list_new(jinja_env *e);
jinja_value *jinja_dict_new(jinja_env *e);
/* Appends to a list made by jinja_list_new or jinja_json_parse; 0, or -1 when l is not
 * a list or memory runs out. */
int jinja_list_push(jinja_env *e, jinja_value *l, jinja_value *v);
/* Sets key in a dict (replacing the value of an existing key in place, else
 * appending); 0, or -1 when d is not a dict or memory runs out. */
int jinja_dict_set(jinja_env *e, jinja_value *d, const char *key, jinja_value *v);
/* Removes key from a dict (no-op when absent). */
void jinja_dict_del(jinja_value *d, const char *key);

/* Reading values. */
int jinja_is_dict(const jinja_value *v);
int jinja_is_list(const jinja_value *v);
int jinja_is_null(const jinja_value *v); /* JSON null (Python None) */
/* The member key of a dict value, or NULL when v is not a dict or has no such key. */
jinja_value *jinja_dict_get(const jinja_value *v, const char *key);
/* Members of a dict in order: key i (NULL past the end or for a non-string key). */
size_t jinja_dict_len(const jinja_value *v);
const char *jinja_dict_key(const jinja_value *v, size_t i);
jinja_value *jinja_dict_val(const jinja_value *v, size_t i);
/* Items of a list (0 / NULL when v is not a list or i is past the end). */
size_t jinja_list_len(const jinja_value *v);
jinja_value *jinja_list_at(const jinja_value *v, size_t i);
/* The text of a string value (NUL-terminated; *len its length when len is non-NULL),
 * or NULL when v is not a string. */
const char *jinja_str(const jinja_value *v, size_t *len);

/* Sets a top-level variable of the render (replacing one of the same name).
 * 0, or -1 when memory runs out. */
int jinja_env_set(jinja_env *e, const char *name, jinja_value *v);
/* Sets each member of a dict value as a top-level variable (chat_template_kwargs).
 * 0, or -1 when v is not a dict or memory runs out. */
int jinja_env_set_all(jinja_env *e, const jinja_value *dict);

/* Renders t with e's variables. Returns 0 and a malloc'd NUL-terminated text in *out
 * (its length in *out_len; caller frees), or -1 with err filled (a template error,
 * raise_exception's message, a limit reached). lim may be NULL (defaults). */
int jinja_render(const jinja_tmpl *t, jinja_env *e, const jinja_limits *lim, char **out, size_t *out_len,
                 jinja_error *err);

#endif
