/* jinja_impl.h - the template engine's insides, shared by its three files:
 *   jinja.c           lexer, parser, renderer (statements, expressions, scopes)
 *   jinja_value.c     values, the arena, Python's str()/repr(), comparisons, JSON in and out
 *   jinja_builtins.c  filters, tests, global functions and the methods of str/dict/list
 * Nothing here is part of the public API (jinja.h). */
#ifndef MINFER_JINJA_IMPL_H
#define MINFER_JINJA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "jinja.h"

/* ---------------------------------------------------------------- arena */

/* Bump allocation in blocks; everything is freed at once. `limit` bounds the bytes
 * handed out (a hostile template cannot take the machine's memory); past it, or
 * when malloc fails, allocation returns NULL and `over`/`oom` says which. */
typedef struct jarena_blk jarena_blk;
typedef struct jarena {
    jarena_blk *head;
    size_t used, limit;
    int over, oom;
} jarena;
void *ja_alloc(jarena *a, size_t n);          /* 16-byte aligned; NULL on limit/oom */
void *ja_realloc(jarena *a, void *p, size_t old, size_t n);
void ja_free_all(jarena *a);

/* ---------------------------------------------------------------- values */

typedef enum jv_type {
    JV_UNDEF = 0, /* jinja2's Undefined: prints as "", fails when used otherwise */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,  /* list, tuple (flag tuple), or a generator's items (flag gen) */
    JV_DICT,
    JV_NS,    /* namespace(): a dict whose attributes `set ns.x = ...` may change */
    JV_MACRO,
    JV_FUNC,  /* a global function or a bound method: fn.id, fn.self */
    JV_LOOP,  /* the `loop` variable of a for block */
} jv_type;

typedef struct jkv {
    jinja_value *k, *v;
} jkv;

struct jnode;
struct jframe;
struct jloop;

struct jinja_value {
    uint8_t t;     /* jv_type */
    uint8_t tuple; /* JV_LIST: a tuple (repr in parentheses, != a list of the same items); 2: groupby's
                      (grouper, list) named tuple, whose attributes are its items */
    uint8_t gen;   /* JV_LIST: a generator's items (select, map, ...): always true, no len(),
                      no indexing, printed as <generator object>, as in Python */
    uint8_t range; /* JV_LIST: made by range(a, b, step) (printed as "range(a, b)") */
    uint8_t safe;  /* JV_STR: markupsafe's Markup (from |safe, |escape): + and % escape the
                      plain strings they meet, as jinja2's output does */
    union {
        int b;
        int64_t i;
        double f;
        struct { const char *p; size_t n; } s;   /* valid UTF-8, NUL-terminated at n */
        struct { jinja_value **v; size_t n, cap; int64_t r0, r1, r2; } l;
        struct { jkv *kv; size_t n, cap; } d;     /* JV_DICT and JV_NS */
        struct { const struct jnode *node; struct jframe *scope; } m;
        struct { int id; jinja_value *self; } fn;
        struct jloop *loop;
        const char *hint; /* JV_UNDEF: the message when it is used ("'x' is undefined") */
    } u;
};

/* Shared read-only constants (never modified). */
extern jinja_value jv_undef_c, jv_none_c, jv_true_c, jv_false_c, jv_empty_c;
#define JV_UNDEFINED (&jv_undef_c)
#define JV_NONEV (&jv_none_c)
#define JV_TRUE (&jv_true_c)
#define JV_FALSE (&jv_false_c)
#define JV_EMPTY (&jv_empty_c)

/* ---------------------------------------------------------------- string builder */

/* A growable byte string (malloc'd, not in the arena). `limit` (0: none) bounds its
 * length; a write past it or a failed allocation sets over/oom and is dropped. */
typedef struct jsb {
    char *p;
    size_t n, cap, limit;
    int over, oom;
} jsb;
void jsb_put(jsb *b, const char *s, size_t n);
void jsb_puts(jsb *b, const char *s);
void jsb_putc(jsb *b, char c);
void jsb_printf(jsb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void jsb_put_cp(jsb *b, uint32_t cp); /* one code point as UTF-8 */

/* ---------------------------------------------------------------- render context */

typedef struct jctx {
    jinja_env *env;
    jarena *a;
    jinja_limits lim;
    uint64_t steps;
    int calls;                 /* nested macro calls */
    int rec;                   /* C recursion of eval/render/value walks: bounds the stack */
    jinja_error *err;
    int failed;
    int line, col;             /* position of the node being evaluated (for errors) */
    int64_t now;               /* strftime_now's time; -1: the clock */
} jctx;

/* Records an error at the current position (the first one wins); returns NULL so that
 * `return jfail(c, ...)` ends an evaluation. */
jinja_value *jfail(jctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Counts n steps of work against the limit; 0, or -1 with the error set. */
int jstep(jctx *c, uint64_t n);
/* The arena's failure as an error ("out of memory" or "memory limit"); returns NULL. */
jinja_value *jmemfail(jctx *c);

/* ---------------------------------------------------------------- value API */

jinja_value *jv_new(jarena *a, int t);
jinja_value *jv_int(jarena *a, int64_t i);
jinja_value *jv_float(jarena *a, double f);
jinja_value *jv_bool(int b);
jinja_value *jv_str(jarena *a, const char *s, size_t n);  /* copies */
jinja_value *jv_undef(jarena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
jinja_value *jv_list(jarena *a, size_t cap);
int jv_push(jarena *a, jinja_value *l, jinja_value *v);    /* 0 / -1 */
jinja_value *jv_dict(jarena *a);
int jv_dict_set(jarena *a, jinja_value *d, jinja_value *k, jinja_value *v); /* by Python equality */
jinja_value *jv_dict_get_s(const jinja_value *d, const char *k, size_t n);   /* string key */
jinja_value *jv_dict_get(const jinja_value *d, const jinja_value *k);        /* NULL: absent */
jinja_value *jv_func(jarena *a, int id, jinja_value *self);

const char *jv_type_name(const jinja_value *v); /* Python's: 'str', 'dict', 'NoneType', ... */
int jv_truthy(const jinja_value *v);
int jv_is_num(const jinja_value *v);             /* bool, int, float */
double jv_num(const jinja_value *v);             /* bool/int/float as a double */

/* Python's str(v) and repr(v) appended to b; 0, or -1 with the error set (nesting). */
int jv_str_to(jctx *c, const jinja_value *v, jsb *b);
int jv_repr_to(jctx *c, const jinja_value *v, jsb *b);
/* str(v) as a string value (v itself when it is one); NULL with the error set. */
jinja_value *jv_to_str(jctx *c, jinja_value *v);
/* Python's float repr (shortest round-trip digits) into buf (>= 32 bytes). */
void jv_float_repr(double f, char *buf);

/* Python's ==; 1/0, or -1 with the error set (nesting). */
int jv_eq(jctx *c, const jinja_value *a, const jinja_value *b);
/* Python's <, for sorting and comparisons: -1/0/1 in *out; 0, or -1 with the error
 * set (TypeError for unorderable types). */
int jv_cmp(jctx *c, const jinja_value *a, const jinja_value *b, int *out);

/* json.dumps(v, ensure_ascii=False, indent=indent (NULL: none), separators=(item_sep,
 * key_sep), sort_keys=sort_keys) appended to b; 0 or -1 with the error set. */
int jv_json_to(jctx *c, const jinja_value *v, jsb *b, const char *indent, const char *item_sep, const char *key_sep,
               int sort_keys);
/* json.loads of s into a (errors in err with the byte offset). */
jinja_value *jv_json_parse(jarena *a, const char *s, size_t n, jinja_error *err);

/* ---------------------------------------------------------------- UTF-8 and Python's str helpers */

/* Decodes the code point at s[*i] (valid UTF-8 assumed) and advances *i. */
uint32_t ju_next(const char *s, size_t n, size_t *i);
size_t ju_len(const char *s, size_t n);               /* code points */
size_t ju_offset(const char *s, size_t n, size_t k);  /* byte offset of code point k (n past the end) */
int ju_valid(const char *s, size_t n, size_t *bad);   /* 1 when valid UTF-8 (no surrogates) */
int ju_isspace(uint32_t cp);                          /* str.isspace() / regex \s */
/* The whitespace code point at s[i] (one of ju_isspace): its byte length, else 0. */
size_t ju_space_at(const char *s, size_t n, size_t i);
uint32_t ju_upper(uint32_t cp);
uint32_t ju_lower(uint32_t cp);
int ju_isalpha(uint32_t cp);
int ju_isdigit(uint32_t cp);

/* ---------------------------------------------------------------- builtins (jinja_builtins.c) */

/* Arguments of a call: positional, then keywords (name, value). */
typedef struct jargs {
    jinja_value **pos;
    int npos;
    const char **kwn;
    jinja_value **kwv;
    int nkw;
} jargs;

/* Filter and test ids by name (-1: none such); the parser checks names with them. */
int jb_filter_id(const char *name);
int jb_test_id(const char *name);
jinja_value *jb_filter(jctx *c, int id, jinja_value *in, const jargs *args);
/* A test's result: 1/0, or -1 with the error set. */
int jb_test(jctx *c, int id, jinja_value *in, const jargs *args);
/* The global functions (range, dict, namespace, raise_exception, strftime_now, ...):
 * a JV_FUNC value for a name, or NULL. */
jinja_value *jb_global(jctx *c, const char *name, size_t n);
/* obj.name for the methods of str, dict and list (a bound JV_FUNC), or NULL when obj
 * has no such method. *unsafe is set for the mutators the immutable sandbox refuses. */
jinja_value *jb_method(jctx *c, jinja_value *obj, const char *name, size_t n, int *unsafe);
/* Calls a JV_FUNC. */
jinja_value *jb_call(jctx *c, jinja_value *fn, const jargs *args);
const char *jb_func_name(int id);

/* The attribute lookup jinja2's sandbox does for obj.name: a method first, then the
 * item; an Undefined value when neither exists. */
jinja_value *jr_getattr(jctx *c, jinja_value *obj, const char *name, size_t n);
/* obj[key] as jinja2's getitem: the item first, then (a string key) the attribute. */
jinja_value *jr_getitem(jctx *c, jinja_value *obj, jinja_value *key);
/* The items of an iterable (list/tuple/generator: itself; str: its characters; dict:
 * its keys; undefined: none) as a list; NULL with the error set otherwise. */
jinja_value *jr_iter(jctx *c, jinja_value *v);
/* markupsafe's escape(): & < > ' " as entities, a Markup (safe) string; a Markup as it is. */
jinja_value *jv_escape(jctx *c, jinja_value *v);
/* Python's "fmt % args" (printf-style) appended to b; 0 or -1 with the error set. */
int jr_percent_format(jctx *c, const jinja_value *fmt, jinja_value *args, jsb *b);
/* Calls any callable value (macro, function, method) with args. */
jinja_value *jr_call(jctx *c, jinja_value *fn, const jargs *args);

/* The loop variable's state (jinja.c); builtins read it for loop.cycle(). */
typedef struct jloop {
    jinja_value *items; /* the list iterated */
    size_t i;           /* current index */
    int depth0;
    jinja_value *last_changed; /* loop.changed()'s memory */
    int has_changed;
} jloop;

#endif
