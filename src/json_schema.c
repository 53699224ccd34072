/* json_schema.c - JSON Schema to GBNF (see json_schema.h for what is supported).
 *
 * Each schema becomes one rule; identical bodies are written once (a schema used by
 * fifty properties costs one rule). The JSON building blocks (strings, numbers, any
 * value, whitespace, the formats) are fixed rules named json-* and ws, written once
 * at the end when used; rules made from the schema are named after their path
 * ("root-address-street", "ref-Node"), so the two never meet. A $ref's rule is named
 * before its body is made, which is what lets a recursive schema become a recursive
 * grammar. Objects: properties come in the order the schema declares them, the
 * required ones always, each optional one or not; two rules per property say "what
 * may follow, nothing written yet" and "what may follow, after a comma". */
#include "json_schema.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"

/* ================================================================ text buffer */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int bad; /* out of memory or over GRAM_MAX_SOURCE */
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->bad) return;
    if (b->n + n + 1 > GRAM_MAX_SOURCE + (size_t)1024) { b->bad = 1; return; }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->bad = 1; return; }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) { b->bad = 1; return; }
    sb_put(b, tmp, (size_t)n);
}

/* Bytes s[0..n) as a GBNF literal: "..." with \" \\ \n \r \t \xHH escaped. */
static void sb_literal(sbuf *b, const char *s, size_t n) {
    sb_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"') sb_put(b, "\\\"", 2);
        else if (ch == '\\') sb_put(b, "\\\\", 2);
        else if (ch == '\n') sb_put(b, "\\n", 2);
        else if (ch == '\r') sb_put(b, "\\r", 2);
        else if (ch == '\t') sb_put(b, "\\t", 2);
        else if (ch < 0x20) sb_printf(b, "\\x%02X", ch);
        else sb_put(b, (const char *)&ch, 1);
    }
    sb_put(b, "\"", 1);
}

/* s as a JSON string ("..." with JSON's escapes), into b as raw text. */
static void json_quote(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"') sb_put(b, "\\\"", 2);
        else if (ch == '\\') sb_put(b, "\\\\", 2);
        else if (ch == '\n') sb_put(b, "\\n", 2);
        else if (ch == '\r') sb_put(b, "\\r", 2);
        else if (ch == '\t') sb_put(b, "\\t", 2);
        else if (ch == '\b') sb_put(b, "\\b", 2);
        else if (ch == '\f') sb_put(b, "\\f", 2);
        else if (ch < 0x20) sb_printf(b, "\\u%04x", ch);
        else sb_put(b, (const char *)&ch, 1);
    }
    sb_put(b, "\"", 1);
}

/* ================================================================ string -> index map */

typedef struct strmap {
    const char **keys; /* not owned */
    int *vals;
    size_t cap, n;
} strmap;

static uint64_t str_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static int map_get(const strmap *m, const char *k) {
    if (!m->cap) return -1;
    for (size_t i = str_hash(k) & (m->cap - 1); m->keys[i]; i = (i + 1) & (m->cap - 1))
        if (!strcmp(m->keys[i], k)) return m->vals[i];
    return -1;
}

static int map_put(strmap *m, const char *k, int v) {
    if ((m->n + 1) * 2 > m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        const char **keys = calloc(cap, sizeof *keys);
        int *vals = malloc(cap * sizeof *vals);
        if (!keys || !vals) { free(keys); free(vals); return -1; }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->keys[i]) continue;
            size_t j = str_hash(m->keys[i]) & (cap - 1);
            while (keys[j]) j = (j + 1) & (cap - 1);
            keys[j] = m->keys[i], vals[j] = m->vals[i];
        }
        free(m->keys); free(m->vals);
        m->keys = keys, m->vals = vals, m->cap = cap;
    }
    size_t i = str_hash(k) & (m->cap - 1);
    while (m->keys[i]) i = (i + 1) & (m->cap - 1);
    m->keys[i] = k, m->vals[i] = v;
    m->n++;
    return 0;
}

static void map_free(strmap *m) { free(m->keys); free(m->vals); }

/* ================================================================ converter state */

enum { NAME_CAP = 96 };

typedef enum prim {
    P_WS, P_VALUE, P_OBJECT, P_MEMBER, P_ARRAY, P_STRING, P_CHAR, P_HEX4, P_INTEGER, P_NUMBER, P_BOOL, P_NULL,
    P_DATE, P_YEAR, P_TIME, P_DATETIME, P_UUID, P_FREEKEY, P_COUNT
} prim;

static const char *const prim_name[P_COUNT] = {
    "ws", "json-value", "json-object", "json-member", "json-array", "json-string", "json-char", "json-hex4",
    "json-integer", "json-number", "json-bool", "json-null", "json-date", "json-year", "json-time",
    "json-date-time", "json-uuid", "json-free-key",
};

/* The fixed rules. Whitespace is one space, or a newline and up to 16 spaces of
 * indentation: a model cannot pad forever (small models love long runs of spaces). Strings: any character but " \ and controls, or an escape;
 * \u escapes of surrogate halves are left out (a lone half is no character, and a
 * pair would count as two in minLength while the validator counts one). */
static const char *const prim_body[P_COUNT] = {
    "( \" \" | \"\\n\" \" \"{0,16} )?",
    "json-object | json-array | json-string | json-number | json-bool | json-null",
    "\"{\" ws ( json-member ( \",\" ws json-member )* )? \"}\"",
    "json-string ws \":\" ws json-value ws",
    "\"[\" ws ( json-value ws ( \",\" ws json-value ws )* )? \"]\"",
    "\"\\\"\" json-char* \"\\\"\"",
    "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" json-hex4 )",
    "[0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}",
    "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} )",
    "json-integer ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?",
    "\"true\" | \"false\"",
    "\"null\"",
    ("json-year \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) | "
     "( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | "
     "\"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) )"),
    "[1-9] [0-9]{3} | \"0\" ( [1-9] [0-9]{2} | \"0\" ( [1-9] [0-9] | \"0\" [1-9] ) )",
    ("( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? "
     "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )"),
    "json-date \"T\" json-time",
    "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}",
    "[^\"\\\\\\x00-\\x1F]*",
};

/* what each fixed rule uses */
static const uint32_t prim_deps[P_COUNT] = {
    [P_VALUE] = 1u << P_OBJECT | 1u << P_ARRAY | 1u << P_STRING | 1u << P_NUMBER | 1u << P_BOOL | 1u << P_NULL,
    [P_OBJECT] = 1u << P_WS | 1u << P_MEMBER,
    [P_MEMBER] = 1u << P_STRING | 1u << P_WS | 1u << P_VALUE,
    [P_ARRAY] = 1u << P_WS | 1u << P_VALUE,
    [P_STRING] = 1u << P_CHAR,
    [P_CHAR] = 1u << P_HEX4,
    [P_NUMBER] = 1u << P_INTEGER,
    [P_DATE] = 1u << P_YEAR,
    [P_DATETIME] = 1u << P_DATE | 1u << P_TIME,
};

typedef struct rule {
    char *name;
    char *body; /* NULL while a $ref's rule is being made */
} rule;

typedef struct refent {
    const cJSON *node; /* the schema a $ref points at */
    int rule;
    int in_progress;
    int boundary;      /* conv.boundary when its making began */
} refent;

typedef struct conv {
    const cJSON *doc;       /* the document $refs resolve in */
    rule *rules;
    int n_rules, cap_rules;
    strmap names, bodies;
    refent *refs;
    int n_refs, cap_refs;
    cJSON **temps;          /* schemas made here (allOf merges): freed at the end */
    int n_temps, cap_temps;
    uint32_t used;          /* fixed rules used (1 << prim) */
    int depth;
    long work;              /* steps so far (gen, merges, type queries): bounded by JSON_SCHEMA_MAX_WORK */
    int boundary;           /* values consumed on the way here: object members, array items */
    char path[256];         /* JSON pointer of the schema being converted, for messages */
    mf_err *err;
    int failed;
} conv;

static int cfail(conv *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int cfail(conv *c, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = 1;
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    mf_fail(c->err, MF_ERR_INPUT, "json schema: %s: %s", c->path[0] ? c->path : "#", msg);
    return -1;
}

/* path push/pop: returns the old length */
static size_t path_push(conv *c, const char *seg) {
    size_t n = strlen(c->path);
    if (!n) snprintf(c->path, sizeof c->path, "#");
    size_t m = strlen(c->path);
    if (m + 1 < sizeof c->path) snprintf(c->path + m, sizeof c->path - m, "/%s", seg);
    return n;
}
static void path_pop(conv *c, size_t n) { c->path[n] = 0; }

/* One more step of work; fails when a schema (a DAG of $refs under allOf, say) would
 * take exponential time. */
static int work(conv *c) {
    if (++c->work <= JSON_SCHEMA_MAX_WORK) return 0;
    return cfail(c, "the schema takes more than %d steps to convert (shared $refs under allOf/anyOf?)", JSON_SCHEMA_MAX_WORK);
}

static const char *use(conv *c, prim p) {
    c->used |= 1u << p;
    return prim_name[p];
}

static cJSON *temp(conv *c, cJSON *j) {
    if (!j) { cfail(c, "out of memory"); return NULL; }
    if (c->n_temps == c->cap_temps) {
        int cap = c->cap_temps ? 2 * c->cap_temps : 16;
        cJSON **t = realloc(c->temps, (size_t)cap * sizeof *t);
        if (!t) { cJSON_Delete(j); cfail(c, "out of memory"); return NULL; }
        c->temps = t, c->cap_temps = cap;
    }
    c->temps[c->n_temps++] = j;
    return j;
}

/* A fresh rule named after hint (letters, digits and '-' kept, the rest '-'),
 * made unique with a number; body NULL for now. Returns its index or -1. */
static int rule_new(conv *c, const char *hint) {
    char base[64], name[NAME_CAP];
    size_t n = 0;
    for (const char *h = hint; *h && n < 48; h++) {
        char ch = *h;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        base[n++] = ok ? ch : '-';
    }
    base[n] = 0;
    if (!n) snprintf(base, sizeof base, "r");
    snprintf(name, sizeof name, "%s", base);
    for (int k = 2; map_get(&c->names, name) >= 0; k++) snprintf(name, sizeof name, "%s-%d", base, k);
    if (c->n_rules >= GRAM_MAX_RULES / 2) return cfail(c, "the grammar needs more than %d rules", GRAM_MAX_RULES / 2);
    if (c->n_rules == c->cap_rules) {
        int cap = c->cap_rules ? 2 * c->cap_rules : 64;
        rule *r = realloc(c->rules, (size_t)cap * sizeof *r);
        if (!r) return cfail(c, "out of memory");
        c->rules = r, c->cap_rules = cap;
    }
    char *nm = strdup(name);
    if (!nm) return cfail(c, "out of memory");
    c->rules[c->n_rules] = (rule){ nm, NULL };
    if (map_put(&c->names, nm, c->n_rules)) return cfail(c, "out of memory");
    return c->n_rules++;
}

static int rule_set_body(conv *c, int r, sbuf *body) {
    if (body->bad) return cfail(c, "the grammar grew past %d bytes", GRAM_MAX_SOURCE);
    c->rules[r].body = body->p ? body->p : strdup("");
    body->p = NULL, body->n = body->cap = 0;
    if (!c->rules[r].body) return cfail(c, "out of memory");
    return 0;
}

/* The rule with this body: an existing one with the same body, else a new one
 * named after hint. Takes body's text. Writes the name to name[NAME_CAP]. */
static int define(conv *c, const char *hint, sbuf *body, char *name) {
    if (c->failed) { free(body->p); body->p = NULL; return -1; }
    if (body->bad) { free(body->p); body->p = NULL; return cfail(c, "the grammar grew past %d bytes", GRAM_MAX_SOURCE); }
    const char *text = body->p ? body->p : "";
    int r = map_get(&c->bodies, text);
    if (r >= 0) {
        free(body->p);
        body->p = NULL, body->n = body->cap = 0;
        snprintf(name, NAME_CAP, "%s", c->rules[r].name);
        return 0;
    }
    r = rule_new(c, hint);
    if (r < 0) { free(body->p); body->p = NULL; return -1; }
    if (rule_set_body(c, r, body)) return -1;
    if (map_put(&c->bodies, c->rules[r].body, r)) return cfail(c, "out of memory");
    snprintf(name, NAME_CAP, "%s", c->rules[r].name);
    return 0;
}

/* ================================================================ keywords */

static const char *const kw_supported[] = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "items", "prefixItems",
    "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", "minLength",
    "maxLength", "format", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL
};
static const char *const kw_annotation[] = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly",
    "writeOnly", NULL
};

static int in_list(const char *const *l, const char *s) {
    for (; *l; l++)
        if (!strcmp(*l, s)) return 1;
    return 0;
}

static int check_keywords(conv *c, const cJSON *s) {
    for (const cJSON *k = s->child; k; k = k->next) {
        if (!in_list(kw_supported, k->string) && !in_list(kw_annotation, k->string))
            return cfail(c, "unsupported keyword '%.64s'", k->string);
        for (const cJSON *d = s->child; d != k; d = d->next)
            if (!strcmp(d->string, k->string)) return cfail(c, "keyword '%.64s' given twice", k->string);
    }
    return 0;
}

static const cJSON *kw(const cJSON *s, const char *name) { return cJSON_GetObjectItemCaseSensitive(s, name); }

/* A constraint keyword: anything but the annotations, $defs/definitions and the
 * ones in `except`. */
static int has_constraints(const cJSON *s, const char *const *except) {
    for (const cJSON *k = s->child; k; k = k->next) {
        if (in_list(kw_annotation, k->string) || !strcmp(k->string, "$defs") || !strcmp(k->string, "definitions"))
            continue;
        if (except && in_list(except, k->string)) continue;
        return 1;
    }
    return 0;
}

/* A non-negative integer keyword (minLength, minItems, ...): 0 absent, 1 set, -1 bad. */
static int get_count(conv *c, const cJSON *s, const char *name, long *v) {
    const cJSON *k = kw(s, name);
    if (!k) return 0;
    if (!cJSON_IsNumber(k) || !isfinite(k->valuedouble) || k->valuedouble < 0 || k->valuedouble != floor(k->valuedouble))
        return cfail(c, "'%s' must be a non-negative integer", name);
    if (k->valuedouble > 1e9) return cfail(c, "'%s' is %.0f, more than this converter takes (1e9)", name, k->valuedouble);
    *v = (long)k->valuedouble;
    return 1;
}

/* ================================================================ $ref */

/* Resolves a local reference "#" or "#/a/b~1c/0" in c->doc. NULL + error otherwise. */
static const cJSON *resolve(conv *c, const char *ref) {
    if (ref[0] != '#') return cfail(c, "$ref '%.80s': only references inside the document ('#/...') are supported", ref), NULL;
    const cJSON *at = c->doc;
    const char *p = ref + 1;
    if (*p && *p != '/') return cfail(c, "$ref '%.80s': anchors are not supported, only JSON pointers ('#/...')", ref), NULL;
    while (*p == '/') {
        p++;
        char seg[256];
        size_t n = 0;
        while (*p && *p != '/') {
            char ch = *p++;
            if (ch == '~' && (*p == '0' || *p == '1')) ch = *p++ == '0' ? '~' : '/';
            else if (ch == '%' && p[0] && p[1]) { /* percent-encoded byte */
                int hv = 0, ok = 1;
                for (int i = 0; i < 2; i++) {
                    char h = p[i];
                    int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                    if (d < 0) ok = 0;
                    hv = hv * 16 + d;
                }
                if (ok) ch = (char)hv, p += 2;
            }
            if (n + 1 >= sizeof seg) return cfail(c, "$ref '%.80s': a segment is too long", ref), NULL;
            seg[n++] = ch;
        }
        seg[n] = 0;
        const cJSON *next = NULL;
        if (cJSON_IsObject(at)) next = cJSON_GetObjectItemCaseSensitive(at, seg);
        else if (cJSON_IsArray(at)) {
            char *e;
            long i = strtol(seg, &e, 10);
            if (*seg && !*e && i >= 0 && i < cJSON_GetArraySize(at)) next = cJSON_GetArrayItem(at, (int)i);
        }
        if (!next) return cfail(c, "$ref '%.80s' points at nothing", ref), NULL;
        at = next;
    }
    return at;
}

/* ================================================================ integer ranges */

/* Integers are written with at most 16 digits: bounds are clamped to +-INT_LIM. */
#define INT_LIM 9999999999999999LL

static void digits_of(long long v, char *s) { snprintf(s, 24, "%lld", v); }

/* Alternatives for the decimal strings from lo to hi, both n digits, lo <= hi
 * (leading zeros allowed inside: the caller chose the length). */
static void range_same_len(sbuf *b, const char *lo, const char *hi, int n, int *first) {
    if (n == 0) return;
    int i = 0;
    while (i < n && lo[i] == hi[i]) i++;
    /* a common prefix lo[0..i) */
    if (i == n) {
        if (!*first) sb_puts(b, " | ");
        *first = 0;
        sb_literal(b, lo, (size_t)n);
        return;
    }
    int rest = n - i - 1;
    int lo_zero = 1, hi_nine = 1;
    for (int k = i + 1; k < n; k++) lo_zero &= lo[k] == '0', hi_nine &= hi[k] == '9';
    char pre[24];
    memcpy(pre, lo, (size_t)i);
    pre[i] = 0;
#define ALT_BEGIN() do { if (!*first) sb_puts(b, " | "); *first = 0; if (i) { sb_literal(b, pre, (size_t)i); sb_puts(b, " "); } } while (0)
#define TAIL(k) do { if ((k) > 0) sb_printf(b, " [0-9]{%d}", (k)); } while (0)
    if (lo_zero && hi_nine) { /* lo[i]..hi[i] then anything */
        ALT_BEGIN();
        sb_printf(b, "[%c-%c]", lo[i], hi[i]);
        TAIL(rest);
        return;
    }
    /* lo[i] followed by >= lo's rest */
    {
        char nines[24];
        memset(nines, '9', (size_t)rest);
        nines[rest] = 0;
        char sub_lo[24];
        memcpy(sub_lo, lo + i + 1, (size_t)rest);
        sub_lo[rest] = 0;
        int f = 1;
        sbuf sub = { 0 };
        range_same_len(&sub, sub_lo, nines, rest, &f);
        ALT_BEGIN();
        sb_printf(b, "\"%c\"", lo[i]);
        if (rest) { sb_puts(b, " ( "); sb_puts(b, sub.p ? sub.p : ""); sb_puts(b, " )"); }
        if (sub.bad) b->bad = 1;
        free(sub.p);
    }
    if (hi[i] - lo[i] >= 2) { /* the digits strictly between, then anything */
        ALT_BEGIN();
        if (hi[i] - lo[i] == 2) sb_printf(b, "\"%c\"", lo[i] + 1);
        else sb_printf(b, "[%c-%c]", lo[i] + 1, hi[i] - 1);
        TAIL(rest);
    }
    {
        char zeros[24];
        memset(zeros, '0', (size_t)rest);
        zeros[rest] = 0;
        char sub_hi[24];
        memcpy(sub_hi, hi + i + 1, (size_t)rest);
        sub_hi[rest] = 0;
        int f = 1;
        sbuf sub = { 0 };
        range_same_len(&sub, zeros, sub_hi, rest, &f);
        ALT_BEGIN();
        sb_printf(b, "\"%c\"", hi[i]);
        if (rest) { sb_puts(b, " ( "); sb_puts(b, sub.p ? sub.p : ""); sb_puts(b, " )"); }
        if (sub.bad) b->bad = 1;
        free(sub.p);
    }
#undef ALT_BEGIN
#undef TAIL
}

/* Alternatives for the integers lo..hi, 0 <= lo <= hi <= INT_LIM, no leading zeros. */
static void uint_range(sbuf *b, long long lo, long long hi, int *first) {
    long long p = 1;
    for (int len = 1; len <= 16 && lo <= hi; len++, p *= 10) {
        long long a = len == 1 ? 0 : p, z = p * 10 - 1;
        if (hi < a || lo > z) continue;
        if (a < lo) a = lo;
        if (z > hi) z = hi;
        char sa[24], sz[24];
        digits_of(a, sa);
        digits_of(z, sz);
        range_same_len(b, sa, sz, len, first);
    }
}

/* Alternatives for the integers lo..hi (-INT_LIM <= lo <= hi <= INT_LIM). */
static void int_range(sbuf *b, long long lo, long long hi) {
    int first = 1;
    if (hi >= 0) uint_range(b, lo > 0 ? lo : 0, hi, &first);
    if (lo < 0) {
        long long a = hi < -1 ? -hi : 1, z = -lo; /* magnitudes of lo..min(hi, -1) */
        if (!first) sb_puts(b, " | ");
        first = 1;
        sb_puts(b, "\"-\" ( ");
        uint_range(b, a, z, &first);
        sb_puts(b, " )");
    }
}

/* ================================================================ regex patterns */

/* A set of code points as sorted, disjoint ranges. */
enum { CSET_MAX = 256 };
typedef struct cset {
    uint32_t lo[CSET_MAX], hi[CSET_MAX];
    int n;
    int overflow;
} cset;

static void cs_add(cset *s, uint32_t lo, uint32_t hi) {
    if (s->n == CSET_MAX) { s->overflow = 1; return; }
    s->lo[s->n] = lo, s->hi[s->n] = hi, s->n++;
}

static void cs_norm(cset *s) {
    for (int i = 1; i < s->n; i++) /* insertion sort by lo */
        for (int j = i; j > 0 && s->lo[j - 1] > s->lo[j]; j--) {
            uint32_t t = s->lo[j]; s->lo[j] = s->lo[j - 1]; s->lo[j - 1] = t;
            t = s->hi[j]; s->hi[j] = s->hi[j - 1]; s->hi[j - 1] = t;
        }
    int k = 0;
    for (int i = 0; i < s->n; i++) {
        if (k && s->lo[i] <= s->hi[k - 1] + 1) {
            if (s->hi[i] > s->hi[k - 1]) s->hi[k - 1] = s->hi[i];
        } else {
            s->lo[k] = s->lo[i], s->hi[k] = s->hi[i], k++;
        }
    }
    s->n = k;
}

/* The complement within [0, limit] (surrogates never included). */
static void cs_complement(cset *s, uint32_t limit) {
    cs_norm(s);
    cset o = { .n = 0 };
    uint32_t next = 0;
    for (int i = 0; i < s->n && next <= limit; i++) {
        if (s->lo[i] > next) cs_add(&o, next, MF_MIN(s->lo[i] - 1, limit));
        next = s->hi[i] + 1;
    }
    if (next <= limit) cs_add(&o, next, limit);
    /* take out the surrogates */
    cset r = { .n = 0 };
    for (int i = 0; i < o.n; i++) {
        if (o.hi[i] < 0xD800 || o.lo[i] > 0xDFFF) { cs_add(&r, o.lo[i], o.hi[i]); continue; }
        if (o.lo[i] < 0xD800) cs_add(&r, o.lo[i], 0xD7FF);
        if (o.hi[i] > 0xDFFF) cs_add(&r, 0xE000, o.hi[i]);
    }
    r.overflow = o.overflow || s->overflow;
    *s = r;
}

static int cs_has(const cset *s, uint32_t c) {
    for (int i = 0; i < s->n; i++)
        if (s->lo[i] <= c && c <= s->hi[i]) return 1;
    return 0;
}

static void class_cp(sbuf *b, uint32_t c) {
    if (c >= 0x20 && c < 0x7f && c != ']' && c != '[' && c != '\\' && c != '-' && c != '^' && c != '"') {
        char ch = (char)c;
        sb_put(b, &ch, 1);
    } else if (c < 0x100) sb_printf(b, "\\x%02X", c);
    else if (c < 0x10000) sb_printf(b, "\\u%04X", c);
    else sb_printf(b, "\\U%08X", c);
}

/* The set as one item matching a JSON-encoded character of it: raw characters
 * (not " \ or controls) in a class, the others as their escapes. */
static int cs_emit(conv *c, cset *s, sbuf *b) {
    cs_norm(s);
    if (s->overflow) return cfail(c, "pattern: a character class with more than %d ranges", CSET_MAX);
    cset raw = { .n = 0 };
    for (int i = 0; i < s->n; i++) {
        uint32_t lo = s->lo[i] < 0x20 ? 0x20 : s->lo[i], hi = s->hi[i];
        if (lo > hi) continue;
        /* cut out '"' (0x22) and '\' (0x5C) */
        uint32_t cuts[2] = { 0x22, 0x5C };
        for (int k = 0; k < 2 && lo <= hi; k++) {
            if (cuts[k] < lo || cuts[k] > hi) continue;
            if (cuts[k] > lo) cs_add(&raw, lo, cuts[k] - 1);
            lo = cuts[k] + 1;
        }
        if (lo <= hi) cs_add(&raw, lo, hi);
    }
    int n_items = raw.n > 0;
    sbuf alts = { 0 };
    static const struct { uint32_t cp; const char *esc; } short_esc[] = {
        { '"', "\"\\\\\\\"\"" }, { '\\', "\"\\\\\\\\\"" }, { '\n', "\"\\\\n\"" }, { '\r', "\"\\\\r\"" },
        { '\t', "\"\\\\t\"" }, { '\b', "\"\\\\b\"" }, { '\f', "\"\\\\f\"" },
    };
    for (size_t k = 0; k < MF_ARRAY_LEN(short_esc); k++)
        if (cs_has(s, short_esc[k].cp)) {
            sb_puts(&alts, " | ");
            sb_puts(&alts, short_esc[k].esc);
            n_items++;
        }
    for (uint32_t cp = 0; cp < 0x20; cp++) {
        if (cp == '\n' || cp == '\r' || cp == '\t' || cp == '\b' || cp == '\f' || !cs_has(s, cp)) continue;
        sb_printf(&alts, " | \"\\\\u%04x\"", cp);
        n_items++;
    }
    if (n_items == 0) { free(alts.p); return cfail(c, "pattern: a character class that matches nothing"); }
    if (n_items > 1) sb_puts(b, "( ");
    if (raw.n) {
        sb_puts(b, "[");
        for (int i = 0; i < raw.n; i++) {
            class_cp(b, raw.lo[i]);
            if (raw.hi[i] > raw.lo[i]) { sb_puts(b, "-"); class_cp(b, raw.hi[i]); }
        }
        sb_puts(b, "]");
    }
    if (alts.p) sb_puts(b, raw.n ? alts.p : alts.p + 3);
    if (alts.bad) b->bad = 1;
    free(alts.p);
    if (n_items > 1) sb_puts(b, " )");
    return 0;
}

typedef struct rx {
    conv *c;
    const char *s, *p, *end;
    int depth;
} rx;

static int rx_fail(rx *r, const char *what) {
    return cfail(r->c, "pattern '%.60s': %s at offset %d", r->s, what, (int)(r->p - r->s));
}

/* one UTF-8 code point of the pattern */
static int rx_utf8(rx *r, uint32_t *cp) {
    const uint8_t b = (uint8_t)*r->p;
    int n = b < 0x80 ? 0 : (b & 0xE0) == 0xC0 ? 1 : (b & 0xF0) == 0xE0 ? 2 : (b & 0xF8) == 0xF0 ? 3 : -1;
    if (n < 0 || r->p + n >= r->end + (n ? 0 : 1)) return rx_fail(r, "invalid UTF-8");
    uint32_t v = n == 0 ? b : n == 1 ? (b & 0x1Fu) : n == 2 ? (b & 0x0Fu) : (b & 0x07u);
    for (int i = 1; i <= n; i++) {
        if (((uint8_t)r->p[i] & 0xC0) != 0x80) return rx_fail(r, "invalid UTF-8");
        v = v << 6 | ((uint8_t)r->p[i] & 0x3Fu);
    }
    r->p += n + 1;
    *cp = v;
    return 0;
}

static int rx_hex(rx *r, int n, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < n; i++, r->p++) {
        char h = r->p < r->end ? *r->p : 0;
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0) return rx_fail(r, "expected hex digits");
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* Adds the shorthand class \d \w \s (ASCII: Python's are Unicode-wide, so the ASCII
 * part is a subset for them and their negations stay within ASCII). */
static void rx_shorthand(cset *s, char k) {
    switch (k) {
    case 'd': cs_add(s, '0', '9'); break;
    case 'w': cs_add(s, '0', '9'); cs_add(s, 'A', 'Z'); cs_add(s, 'a', 'z'); cs_add(s, '_', '_'); break;
    case 's': cs_add(s, '\t', '\r'); cs_add(s, ' ', ' '); break;
    }
}

/* After '\': one escape into set s (a class shorthand) or *cp (a character).
 * Returns 1 for a set, 0 for a character, -1 on error. *unicode: a negated
 * shorthand (\D \W \S), whose complement must stay within ASCII. */
static int rx_escape(rx *r, cset *s, uint32_t *cp, int *ascii_only) {
    if (r->p >= r->end) return rx_fail(r, "a '\\' at the end");
    char k = *r->p++;
    switch (k) {
    case 'd': case 'w': case 's':
        rx_shorthand(s, k);
        return 1;
    case 'D': case 'W': case 'S': {
        cset t = { .n = 0 };
        rx_shorthand(&t, (char)(k + 32));
        cs_complement(&t, 0x7F);
        for (int i = 0; i < t.n; i++) cs_add(s, t.lo[i], t.hi[i]);
        *ascii_only = 1;
        return 1;
    }
    case 'n': *cp = '\n'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0': *cp = 0; return 0;
    case 'x': return rx_hex(r, 2, cp) ? -1 : 0;
    case 'u': {
        if (rx_hex(r, 4, cp)) return -1;
        if (*cp >= 0xD800 && *cp <= 0xDFFF) return rx_fail(r, "a surrogate \\u escape");
        return 0;
    }
    default:
        if ((k >= 'a' && k <= 'z') || (k >= 'A' && k <= 'Z') || (k >= '0' && k <= '9')) {
            char what[48];
            snprintf(what, sizeof what, "unsupported escape '\\%c'", k);
            return rx_fail(r, what);
        }
        *cp = (uint8_t)k; /* an escaped punctuation character stands for itself */
        return 0;
    }
}

static int rx_class(rx *r, cset *s) {
    /* at the char after '[' */
    int neg = 0, ascii_only = 0;
    if (r->p < r->end && *r->p == '^') neg = 1, r->p++;
    int first = 1;
    while (r->p < r->end && (*r->p != ']' || first)) {
        first = 0;
        uint32_t lo;
        if (*r->p == '\\') {
            r->p++;
            int k = rx_escape(r, s, &lo, &ascii_only);
            if (k < 0) return -1;
            if (k == 1) continue;
        } else if (*r->p == '[' && r->p + 1 < r->end && r->p[1] == ':') {
            return rx_fail(r, "POSIX classes ([:alpha:]) are not supported");
        } else if (rx_utf8(r, &lo)) return -1;
        uint32_t hi = lo;
        if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
            r->p++;
            if (*r->p == '\\') {
                r->p++;
                cset dummy = { .n = 0 };
                int k = rx_escape(r, &dummy, &hi, &ascii_only);
                if (k < 0) return -1;
                if (k == 1) return rx_fail(r, "a class shorthand as a range's end");
            } else if (rx_utf8(r, &hi)) return -1;
            if (hi < lo) return rx_fail(r, "a range whose end is below its start");
        }
        cs_add(s, lo, hi);
    }
    if (r->p >= r->end) return rx_fail(r, "an unterminated '['");
    r->p++;
    if (neg) cs_complement(s, ascii_only ? 0x7F : 0x10FFFF);
    return 0;
}

static int rx_alt(rx *r, sbuf *out, int *nullable);

/* One atom and its quantifier into out; *nullable: it can match nothing. */
static int rx_piece(rx *r, sbuf *out, int *nullable) {
    sbuf atom = { 0 };
    int null_atom = 0;
    const char ch = *r->p;
    if (ch == '(') {
        r->p++;
        if (r->p < r->end && *r->p == '?') {
            if (r->p + 1 < r->end && r->p[1] == ':') r->p += 2;
            else { free(atom.p); return rx_fail(r, "lookarounds and named groups are not supported"); }
        }
        if (++r->depth > 32) { free(atom.p); return rx_fail(r, "groups nested deeper than 32"); }
        sb_puts(&atom, "( ");
        if (rx_alt(r, &atom, &null_atom)) { free(atom.p); return -1; }
        r->depth--;
        if (r->p >= r->end || *r->p != ')') { free(atom.p); return rx_fail(r, "an unclosed '('"); }
        r->p++;
        sb_puts(&atom, " )");
    } else if (ch == '[') {
        r->p++;
        cset s = { .n = 0 };
        if (rx_class(r, &s) || cs_emit(r->c, &s, &atom)) { free(atom.p); return -1; }
    } else if (ch == '.') {
        r->p++;
        cset s = { .n = 0 };
        cs_add(&s, '\n', '\n');
        cs_complement(&s, 0x10FFFF);
        if (cs_emit(r->c, &s, &atom)) { free(atom.p); return -1; }
    } else if (ch == '\\') {
        r->p++;
        cset s = { .n = 0 };
        uint32_t cp;
        int ascii = 0;
        int k = rx_escape(r, &s, &cp, &ascii);
        if (k < 0) { free(atom.p); return -1; }
        if (k == 0) cs_add(&s, cp, cp);
        if (cs_emit(r->c, &s, &atom)) { free(atom.p); return -1; }
    } else if (ch == '*' || ch == '+' || ch == '?' || ch == '{') {
        return rx_fail(r, "a quantifier with nothing before it");
    } else if (ch == '^' || ch == '$') {
        return rx_fail(r, "an anchor ('^' or '$') inside the pattern (only at its ends)");
    } else {
        uint32_t cp;
        if (rx_utf8(r, &cp)) return -1;
        cset s = { .n = 0 };
        cs_add(&s, cp, cp);
        if (cs_emit(r->c, &s, &atom)) { free(atom.p); return -1; }
    }
    /* quantifier */
    long min = 1, max = 1;
    if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '?')) {
        char q = *r->p++;
        min = q == '+' ? 1 : 0;
        max = q == '?' ? 1 : -1;
    } else if (r->p < r->end && *r->p == '{') {
        const char *q = r->p + 1;
        char *e;
        long m = strtol(q, &e, 10);
        if (e == q || m < 0) { free(atom.p); return rx_fail(r, "a '{' that is no {m,n} repetition"); }
        long n = m;
        if (*e == ',') {
            q = e + 1;
            if (*q == '}') n = -1, e = (char *)q;
            else {
                n = strtol(q, &e, 10);
                if (e == q || n < m) { free(atom.p); return rx_fail(r, "a bad {m,n} repetition"); }
            }
        }
        if (*e != '}') { free(atom.p); return rx_fail(r, "a '{' that is no {m,n} repetition"); }
        if (m > GRAM_MAX_REPEAT || n > GRAM_MAX_REPEAT) { free(atom.p); return rx_fail(r, "a repetition count above 4096"); }
        r->p = e + 1;
        min = m, max = n;
    }
    if (r->p < r->end && *r->p == '?' && !(min == 1 && max == 1)) r->p++; /* lazy: the same language */
    if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '{'))
        { free(atom.p); return rx_fail(r, "a quantifier after a quantifier"); }
    if (null_atom && (max < 0 || max > 1)) { free(atom.p); return rx_fail(r, "a repeated group that can match nothing"); }
    sb_puts(out, atom.p ? atom.p : "");
    if (atom.bad) out->bad = 1;
    free(atom.p);
    if (min == 0 && max == -1) sb_puts(out, "*");
    else if (min == 1 && max == -1) sb_puts(out, "+");
    else if (min == 0 && max == 1) sb_puts(out, "?");
    else if (!(min == 1 && max == 1)) {
        if (max < 0) sb_printf(out, "{%ld,}", min);
        else if (max == min) sb_printf(out, "{%ld}", min);
        else sb_printf(out, "{%ld,%ld}", min, max);
    }
    *nullable = null_atom || min == 0;
    return 0;
}

static int rx_seq(rx *r, sbuf *out, int *nullable) {
    *nullable = 1;
    int any = 0;
    while (r->p < r->end && *r->p != '|' && *r->p != ')') {
        if (*r->p == '$' && r->p + 1 == r->end) break;
        if (any) sb_puts(out, " ");
        int n;
        if (rx_piece(r, out, &n)) return -1;
        *nullable &= n;
        any = 1;
    }
    if (!any) sb_puts(out, "\"\"");
    return 0;
}

static int rx_alt(rx *r, sbuf *out, int *nullable) {
    if (rx_seq(r, out, nullable)) return -1;
    while (r->p < r->end && *r->p == '|') {
        r->p++;
        sb_puts(out, " | ");
        int n;
        if (rx_seq(r, out, &n)) return -1;
        *nullable |= n;
    }
    return 0;
}

/* The content of a JSON string matching the pattern (JSON Schema patterns match
 * anywhere: without ^ or $ any characters may come before or after). */
static int pattern_to_gbnf(conv *c, const char *pat, sbuf *out) {
    size_t n = strlen(pat);
    if (n > 4096) return cfail(c, "pattern longer than 4096 bytes");
    rx r = { c, pat, pat, pat + n, 0 };
    int anchored_start = n && pat[0] == '^';
    if (anchored_start) r.p++;
    int anchored_end = n >= 2 && pat[n - 1] == '$' && pat[n - 2] != '\\';
    if (!anchored_start) { sb_puts(out, use(c, P_CHAR)); sb_puts(out, "* "); }
    sb_puts(out, "( ");
    int nullable;
    if (rx_alt(&r, out, &nullable)) return -1;
    if (r.p < r.end && *r.p == ')') return rx_fail(&r, "an unmatched ')'");
    if (r.p < r.end && !(*r.p == '$' && r.p + 1 == r.end)) return rx_fail(&r, "unexpected text");
    sb_puts(out, " )");
    if (!anchored_end) { sb_puts(out, " "); sb_puts(out, use(c, P_CHAR)); sb_puts(out, "*"); }
    return 0;
}

/* ================================================================ types */

enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_FRAC = 8, T_STR = 16, T_ARR = 32, T_OBJ = 64, T_ALL = 127 };

static unsigned type_bit(const char *t) {
    if (!strcmp(t, "null")) return T_NULL;
    if (!strcmp(t, "boolean")) return T_BOOL;
    if (!strcmp(t, "integer")) return T_INT;
    if (!strcmp(t, "number")) return T_INT | T_FRAC;
    if (!strcmp(t, "string")) return T_STR;
    if (!strcmp(t, "array")) return T_ARR;
    if (!strcmp(t, "object")) return T_OBJ;
    return 0;
}

static unsigned value_type(const cJSON *v) {
    if (cJSON_IsNull(v)) return T_NULL;
    if (cJSON_IsBool(v)) return T_BOOL;
    if (cJSON_IsNumber(v)) return v->valuedouble == floor(v->valuedouble) ? T_INT : T_FRAC;
    if (cJSON_IsString(v)) return T_STR;
    if (cJSON_IsArray(v)) return T_ARR;
    return T_OBJ;
}

/* The types a "type" keyword allows (T_ALL when absent); 0 with an error when bad. */
static unsigned declared_types(conv *c, const cJSON *s) {
    const cJSON *t = kw(s, "type");
    if (!t) return T_ALL;
    unsigned m = 0;
    if (cJSON_IsString(t)) {
        m = type_bit(t->valuestring);
        if (!m) cfail(c, "unknown type '%.40s'", t->valuestring);
        return m;
    }
    if (!cJSON_IsArray(t) || !t->child) { cfail(c, "'type' must be a type name or a non-empty list of them"); return 0; }
    for (const cJSON *e = t->child; e; e = e->next) {
        unsigned b = cJSON_IsString(e) ? type_bit(e->valuestring) : 0;
        if (!b) { cfail(c, "'type' lists something that is no type name"); return 0; }
        m |= b;
    }
    return m;
}

/* The types of the values schema s accepts (for oneOf's disjointness), following
 * $refs; T_ALL where unsure. */
static unsigned accept_types(conv *c, const cJSON *s, int depth) {
    if (depth > JSON_SCHEMA_MAX_DEPTH || c->failed || work(c)) return T_ALL;
    if (cJSON_IsBool(s)) return cJSON_IsTrue(s) ? T_ALL : 0;
    if (!cJSON_IsObject(s)) return T_ALL;
    unsigned m = T_ALL;
    const cJSON *k;
    if ((k = kw(s, "$ref")) && cJSON_IsString(k)) {
        const cJSON *t = resolve(c, k->valuestring);
        if (t) m &= accept_types(c, t, depth + 1);
    }
    if ((k = kw(s, "type"))) m &= declared_types(c, s);
    if ((k = kw(s, "const"))) m &= value_type(k);
    if ((k = kw(s, "enum")) && cJSON_IsArray(k)) {
        unsigned e = 0;
        for (const cJSON *v = k->child; v; v = v->next) e |= value_type(v);
        m &= e;
    }
    if ((k = kw(s, "allOf")) && cJSON_IsArray(k))
        for (const cJSON *b = k->child; b; b = b->next) m &= accept_types(c, b, depth + 1);
    const char *ors[] = { "anyOf", "oneOf" };
    for (int i = 0; i < 2; i++)
        if ((k = kw(s, ors[i])) && cJSON_IsArray(k)) {
            unsigned u = 0;
            for (const cJSON *b = k->child; b; b = b->next) u |= accept_types(c, b, depth + 1);
            m &= u;
        }
    return m;
}

/* The types the grammar of s can produce: what it accepts, narrowed where the
 * converter infers a type from the keywords of a schema without "type". */
static unsigned gen_types(conv *c, const cJSON *s) {
    unsigned m = accept_types(c, s, 0);
    if (!cJSON_IsObject(s) || kw(s, "type") || kw(s, "const") || kw(s, "enum")) return m;
    if (kw(s, "properties") || kw(s, "required") || kw(s, "additionalProperties")) return m & T_OBJ;
    if (kw(s, "items") || kw(s, "prefixItems") || kw(s, "minItems") || kw(s, "maxItems")) return m & T_ARR;
    if (kw(s, "minLength") || kw(s, "maxLength") || kw(s, "pattern") || kw(s, "format")) return m & T_STR;
    if (kw(s, "minimum") || kw(s, "maximum") || kw(s, "exclusiveMinimum") || kw(s, "exclusiveMaximum"))
        return m & (T_INT | T_FRAC);
    return m;
}

static const cJSON *deref(conv *c, const cJSON *s) {
    for (int i = 0; i < JSON_SCHEMA_MAX_DEPTH && cJSON_IsObject(s); i++) {
        const cJSON *r = kw(s, "$ref");
        if (!r || !cJSON_IsString(r)) return s;
        s = resolve(c, r->valuestring);
        if (!s) return NULL;
    }
    return s;
}

/* The values a branch's discriminator property p may take (const or enum), or NULL. */
static const cJSON *disc_values(conv *c, const cJSON *branch, const char *p, cJSON **tmp) {
    branch = deref(c, branch);
    if (!cJSON_IsObject(branch)) return NULL;
    const cJSON *req = kw(branch, "required"), *props = kw(branch, "properties");
    int required = 0;
    for (const cJSON *e = req && cJSON_IsArray(req) ? req->child : NULL; e; e = e->next)
        required |= cJSON_IsString(e) && !strcmp(e->valuestring, p);
    if (!required || !cJSON_IsObject(props)) return NULL;
    const cJSON *ps = deref(c, kw(props, p));
    if (!cJSON_IsObject(ps)) return NULL;
    const cJSON *v;
    if ((v = kw(ps, "enum")) && cJSON_IsArray(v)) return v;
    if ((v = kw(ps, "const"))) {
        *tmp = cJSON_CreateArray();
        if (*tmp) cJSON_AddItemToArray(*tmp, cJSON_Duplicate(v, 1));
        return *tmp;
    }
    return NULL;
}

/* oneOf: no output of one branch may validate against another. Branches of
 * disjoint types pass, and so do objects told apart by a required property whose
 * const/enum values no two branches share. */
static int oneof_disjoint(conv *c, const cJSON *branches) {
    int ok = 1;
    for (const cJSON *a = branches->child; a && ok; a = a->next)
        for (const cJSON *b = branches->child; b && ok; b = b->next)
            if (a != b && (gen_types(c, a) & accept_types(c, b, 0))) ok = 0;
    if (ok || c->failed) return 0;
    /* a discriminator: a property of the first branch every branch requires */
    const cJSON *first = deref(c, branches->child);
    const cJSON *props = cJSON_IsObject(first) ? kw(first, "properties") : NULL;
    for (const cJSON *p = cJSON_IsObject(props) ? props->child : NULL; p; p = p->next) {
        int good = 1;
        for (const cJSON *a = branches->child; a && good; a = a->next) {
            if (!(gen_types(c, a) == T_OBJ || (gen_types(c, a) & ~T_OBJ) == 0)) good = 0;
            for (const cJSON *b = a->next; b && good; b = b->next) {
                cJSON *ta = NULL, *tb = NULL;
                const cJSON *va = disc_values(c, a, p->string, &ta), *vb = disc_values(c, b, p->string, &tb);
                if (!va || !vb) good = 0;
                for (const cJSON *x = va ? va->child : NULL; x && good; x = x->next)
                    for (const cJSON *y = vb->child; y && good; y = y->next)
                        if (cJSON_Compare(x, y, 1)) good = 0;
                cJSON_Delete(ta);
                cJSON_Delete(tb);
            }
        }
        if (good) return 0;
    }
    return cfail(c, "oneOf: the branches may overlap (one output could match two of them); only branches of "
                    "disjoint types, or objects told apart by a required property's const or enum, are supported "
                    "(anyOf has no such limit)");
}

/* ================================================================ allOf */

static int merge_into(conv *c, cJSON *m, const cJSON *s, int depth);

/* Adds s's keywords to the merged schema m (every branch of an allOf, recursively). */
static int merge_into(conv *c, cJSON *m, const cJSON *s, int depth) {
    if (depth > JSON_SCHEMA_MAX_DEPTH) return cfail(c, "allOf/$ref nested deeper than %d levels (a cycle?)", JSON_SCHEMA_MAX_DEPTH);
    if (work(c)) return -1;
    if (cJSON_IsBool(s)) return cJSON_IsTrue(s) ? 0 : cfail(c, "allOf: a branch is false (nothing validates)");
    if (!cJSON_IsObject(s)) return cfail(c, "allOf: a branch is not a schema");
    if (check_keywords(c, s)) return -1;
    for (const cJSON *k = s->child; k; k = k->next) {
        const char *key = k->string;
        if (in_list(kw_annotation, key) || !strcmp(key, "$defs") || !strcmp(key, "definitions")) continue;
        if (!strcmp(key, "$ref")) {
            if (!cJSON_IsString(k)) return cfail(c, "'$ref' must be a string");
            const cJSON *t = resolve(c, k->valuestring);
            if (!t || merge_into(c, m, t, depth + 1)) return -1;
            continue;
        }
        if (!strcmp(key, "allOf")) {
            if (!cJSON_IsArray(k)) return cfail(c, "'allOf' must be a list of schemas");
            for (const cJSON *b = k->child; b; b = b->next)
                if (merge_into(c, m, b, depth + 1)) return -1;
            continue;
        }
        cJSON *have = cJSON_GetObjectItemCaseSensitive(m, key);
        if (!have) {
            cJSON *d = cJSON_Duplicate(k, 1);
            if (!d) return cfail(c, "out of memory");
            cJSON_AddItemToObject(m, key, d);
            continue;
        }
        if (cJSON_Compare(have, k, 1)) continue;
        if (!strcmp(key, "type")) {
            unsigned a = declared_types(c, m), b = declared_types(c, s), t = a & b;
            if (c->failed) return -1;
            if (!t) return cfail(c, "allOf: the branches' types have nothing in common");
            cJSON *arr = cJSON_CreateArray();
            const char *names[] = { "null", "boolean", "integer", "number", "string", "array", "object" };
            const unsigned bits[] = { T_NULL, T_BOOL, T_INT, T_INT | T_FRAC, T_STR, T_ARR, T_OBJ };
            for (int i = 0; i < 7 && arr; i++)
                if ((t & bits[i]) == bits[i] && !(i == 2 && (t & T_FRAC))) cJSON_AddItemToArray(arr, cJSON_CreateString(names[i]));
            if (!arr) return cfail(c, "out of memory");
            cJSON_ReplaceItemInObjectCaseSensitive(m, "type", arr);
        } else if (!strcmp(key, "required")) {
            if (!cJSON_IsArray(k) || !cJSON_IsArray(have)) return cfail(c, "'required' must be a list of names");
            for (const cJSON *e = k->child; e; e = e->next) {
                int dup = 0;
                for (const cJSON *f = have->child; f; f = f->next) dup |= cJSON_Compare(e, f, 1);
                if (!dup) cJSON_AddItemToArray(have, cJSON_Duplicate(e, 1));
            }
        } else if (!strcmp(key, "properties")) {
            if (!cJSON_IsObject(k) || !cJSON_IsObject(have)) return cfail(c, "'properties' must be an object");
            for (const cJSON *p = k->child; p; p = p->next) {
                cJSON *hp = cJSON_GetObjectItemCaseSensitive(have, p->string);
                if (!hp) { cJSON_AddItemToObject(have, p->string, cJSON_Duplicate(p, 1)); continue; }
                cJSON *both = cJSON_CreateObject(), *list = cJSON_CreateArray();
                if (!both || !list) { cJSON_Delete(both); cJSON_Delete(list); return cfail(c, "out of memory"); }
                cJSON_AddItemToArray(list, cJSON_Duplicate(hp, 1));
                cJSON_AddItemToArray(list, cJSON_Duplicate(p, 1));
                cJSON_AddItemToObject(both, "allOf", list);
                cJSON_ReplaceItemInObjectCaseSensitive(have, p->string, both);
            }
        } else if (!strcmp(key, "minLength") || !strcmp(key, "minItems") || !strcmp(key, "minimum") ||
                   !strcmp(key, "exclusiveMinimum")) {
            if (!cJSON_IsNumber(k) || !cJSON_IsNumber(have)) return cfail(c, "allOf: '%s' must be a number", key);
            if (k->valuedouble > have->valuedouble) cJSON_SetNumberValue(have, k->valuedouble);
        } else if (!strcmp(key, "maxLength") || !strcmp(key, "maxItems") || !strcmp(key, "maximum") ||
                   !strcmp(key, "exclusiveMaximum")) {
            if (!cJSON_IsNumber(k) || !cJSON_IsNumber(have)) return cfail(c, "allOf: '%s' must be a number", key);
            if (k->valuedouble < have->valuedouble) cJSON_SetNumberValue(have, k->valuedouble);
        } else {
            return cfail(c, "allOf: '%s' with different values in several branches is not supported", key);
        }
    }
    return 0;
}

/* ================================================================ the schema */

static int gen(conv *c, const cJSON *s, const char *hint, char *name);

/* A $ref: the rule of its target, made once (and named before its body is made, so
 * recursion through objects and arrays works). */
static int gen_ref(conv *c, const char *ref, char *name) {
    const cJSON *t = resolve(c, ref);
    if (!t) return -1;
    for (int i = 0; i < c->n_refs; i++) {
        refent *e = &c->refs[i];
        if (e->node != t) continue;
        if (e->in_progress && e->boundary == c->boundary)
            return cfail(c, "$ref '%.80s' leads back to itself without a value in between (a cycle)", ref);
        snprintf(name, NAME_CAP, "%s", c->rules[e->rule].name);
        return 0;
    }
    const char *last = strrchr(ref, '/');
    char hint[80];
    snprintf(hint, sizeof hint, "ref-%.60s", last && last[1] ? last + 1 : "root");
    int r = rule_new(c, hint);
    if (r < 0) return -1;
    if (c->n_refs == c->cap_refs) {
        int cap = c->cap_refs ? 2 * c->cap_refs : 16;
        refent *n = realloc(c->refs, (size_t)cap * sizeof *n);
        if (!n) return cfail(c, "out of memory");
        c->refs = n, c->cap_refs = cap;
    }
    int idx = c->n_refs++;
    c->refs[idx] = (refent){ t, r, 1, c->boundary };
    char saved[sizeof c->path];
    memcpy(saved, c->path, sizeof saved);
    snprintf(c->path, sizeof c->path, "%.200s", ref);
    char inner[NAME_CAP];
    int rc = gen(c, t, c->rules[r].name, inner);
    memcpy(c->path, saved, sizeof saved);
    if (rc) return -1;
    c->refs[idx].in_progress = 0;
    sbuf body = { 0 };
    sb_puts(&body, inner);
    if (rule_set_body(c, r, &body)) return -1;
    snprintf(name, NAME_CAP, "%s", c->rules[r].name);
    return 0;
}

/* A JSON literal of value v (as the validator will read it back). */
static int literal(conv *c, const cJSON *v, sbuf *b) {
    char *txt = cJSON_PrintUnformatted(v);
    if (!txt) return cfail(c, "out of memory");
    sb_literal(b, txt, strlen(txt));
    cJSON_free(txt);
    return 0;
}

static int gen_enum(conv *c, const cJSON *s, sbuf *b) {
    unsigned types = declared_types(c, s);
    if (c->failed) return -1;
    if (has_constraints(s, (const char *const[]){ "enum", "const", "type", NULL }))
        return cfail(c, "enum/const beside other constraints is not supported");
    const cJSON *k = kw(s, "const");
    int n = 0;
    if (k) {
        if (value_type(k) & types) { if (literal(c, k, b)) return -1; n++; }
    } else {
        k = kw(s, "enum");
        if (!cJSON_IsArray(k)) return cfail(c, "'enum' must be a list");
        for (const cJSON *v = k->child; v; v = v->next) {
            if (!(value_type(v) & types)) continue;
            if (n++) sb_puts(b, " | ");
            if (literal(c, v, b)) return -1;
        }
    }
    if (!n) return cfail(c, "no value of this enum/const has the schema's type");
    return 0;
}

/* integer or number bounds: *lo and *hi, inclusive integer bounds of the values; 1 when
 * any bound is given. For numbers the bounds must be integers. */
static int int_bounds(conv *c, const cJSON *s, int is_number, long long *lo, long long *hi) {
    *lo = -INT_LIM, *hi = INT_LIM;
    int any = 0;
    const char *names[4] = { "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum" };
    for (int i = 0; i < 4; i++) {
        const cJSON *k = kw(s, names[i]);
        if (!k) continue;
        if (cJSON_IsBool(k) && (i == 1 || i == 3)) { /* draft 4: exclusive flags */
            if (!cJSON_IsTrue(k)) continue;
            const cJSON *base = kw(s, names[i - 1]);
            if (!base) continue;
            k = base;
        } else if (!cJSON_IsNumber(k) || !isfinite(k->valuedouble)) {
            return cfail(c, "'%s' must be a number", names[i]);
        }
        int excl = i == 1 || i == 3 || (cJSON_IsTrue(kw(s, i < 2 ? "exclusiveMinimum" : "exclusiveMaximum")));
        double v = k->valuedouble;
        if (is_number && v != floor(v))
            return cfail(c, "'%s' %g of a number: only integer bounds are supported", names[i], v);
        if (v > (double)INT_LIM || v < -(double)INT_LIM)
            return cfail(c, "'%s' %g: bounds beyond 1e16 are not supported", names[i], v);
        long long b;
        if (i < 2) { /* lower */
            b = (long long)ceil(v);
            if (excl && (double)b == v) b++;
            if (b > *lo) *lo = b;
        } else {
            b = (long long)floor(v);
            if (excl && (double)b == v) b--;
            if (b < *hi) *hi = b;
        }
        any = 1;
    }
    return any;
}

static int gen_integer(conv *c, const cJSON *s, sbuf *b) {
    long long lo, hi;
    int any = int_bounds(c, s, 0, &lo, &hi);
    if (any < 0) return -1;
    if (!any) { sb_puts(b, use(c, P_INTEGER)); return 0; }
    if (lo > hi) return cfail(c, "no integer lies within the bounds");
    int_range(b, lo, hi);
    return 0;
}

/* Numbers within integer bounds: the integers of the range, and decimals i.f (f
 * ending in a nonzero digit, so strictly between i and i + 1) whose integer part
 * keeps them inside: i in [max(lo, 0), hi - 1] and, negated, i in [max(0, -hi), -lo - 1].
 * No exponents. */
static int gen_number(conv *c, const cJSON *s, sbuf *b) {
    long long lo, hi;
    /* exclusive bounds: the integers of the range drop the bound itself, but the
     * decimals next to it stay; so the decimals take the bounds unadjusted */
    int any = int_bounds(c, s, 1, &lo, &hi);
    if (any < 0) return -1;
    if (!any) { sb_puts(b, use(c, P_NUMBER)); return 0; }
    long long dlo = -INT_LIM, dhi = INT_LIM;
    const char *names[4] = { "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum" };
    for (int i = 0; i < 4; i++) {
        const cJSON *k = kw(s, names[i]);
        if (cJSON_IsBool(k)) k = cJSON_IsTrue(k) ? kw(s, names[i - 1]) : NULL;
        if (!cJSON_IsNumber(k)) continue;
        long long v = (long long)k->valuedouble;
        if (i < 2 && v > dlo) dlo = v;
        if (i >= 2 && v < dhi) dhi = v;
    }
    int n = 0;
    sb_puts(b, "( ");
    if (lo <= hi) { int_range(b, lo, hi); n++; }
    const char *frac = " \".\" [0-9]{0,15} [1-9]";
    long long pa = dlo > 0 ? dlo : 0, pz = dhi - 1;
    if (pa <= pz) {
        if (n++) sb_puts(b, " | ");
        sb_puts(b, "( ");
        int first = 1;
        uint_range(b, pa, pz, &first);
        sb_puts(b, " )");
        sb_puts(b, frac);
    }
    long long na = dhi < 0 ? -dhi : 0, nz = -dlo - 1;
    if (na <= nz) {
        if (n++) sb_puts(b, " | ");
        sb_puts(b, "\"-\" ( ");
        int first = 1;
        uint_range(b, na, nz, &first);
        sb_puts(b, " )");
        sb_puts(b, frac);
    }
    sb_puts(b, " )");
    if (!n) return cfail(c, "no number lies within the bounds");
    return 0;
}

static int gen_string(conv *c, const cJSON *s, sbuf *b) {
    const cJSON *fmt = kw(s, "format"), *pat = kw(s, "pattern");
    long mn = 0, mx = -1;
    int has_min = get_count(c, s, "minLength", &mn), has_max = get_count(c, s, "maxLength", &mx);
    if (has_min < 0 || has_max < 0) return -1;
    if ((fmt || pat) && (has_min || has_max)) return cfail(c, "minLength/maxLength beside format or pattern is not supported");
    if (fmt && pat) return cfail(c, "format beside pattern is not supported");
    if (fmt) {
        if (!cJSON_IsString(fmt)) return cfail(c, "'format' must be a string");
        const char *f = fmt->valuestring;
        prim p = !strcmp(f, "date") ? P_DATE : !strcmp(f, "time") ? P_TIME : !strcmp(f, "date-time") ? P_DATETIME
               : !strcmp(f, "uuid") ? P_UUID : P_COUNT;
        if (p == P_COUNT) return cfail(c, "unsupported format '%.40s' (date, time, date-time, uuid)", f);
        sb_printf(b, "\"\\\"\" %s \"\\\"\"", use(c, p));
        return 0;
    }
    if (pat) {
        if (!cJSON_IsString(pat)) return cfail(c, "'pattern' must be a string");
        sb_puts(b, "\"\\\"\" ");
        if (pattern_to_gbnf(c, pat->valuestring, b)) return -1;
        sb_puts(b, " \"\\\"\"");
        return 0;
    }
    if (!has_min && !has_max) { sb_puts(b, use(c, P_STRING)); return 0; }
    if (has_max && mx < mn) return cfail(c, "maxLength %ld is below minLength %ld", mx, mn);
    if (mn > GRAM_MAX_REPEAT) return cfail(c, "minLength %ld: more than %d is not supported", mn, GRAM_MAX_REPEAT);
    if (mx > GRAM_MAX_REPEAT) mx = GRAM_MAX_REPEAT; /* a subset: at most 4096 characters */
    const char *ch = use(c, P_CHAR);
    if (has_max) sb_printf(b, "\"\\\"\" %s{%ld,%ld} \"\\\"\"", ch, mn, mx);
    else sb_printf(b, "\"\\\"\" %s{%ld,} \"\\\"\"", ch, mn);
    return 0;
}

static int child(conv *c, const cJSON *s, const char *seg, const char *hint_suffix, const char *hint, char *name) {
    size_t saved = path_push(c, seg);
    char h[NAME_CAP + 64];
    snprintf(h, sizeof h, "%s-%s", hint, hint_suffix);
    int rc = gen(c, s, h, name);
    path_pop(c, saved);
    return rc;
}

/* Extra keys: any string of plain characters that is none of the declared names
 * (a trie of the names; leaving it anywhere, or stopping where no name ends, gives a
 * key that is not declared). Names with characters that need escapes cannot be
 * written by these rules at all. */
typedef struct ktrie {
    uint32_t cp;
    int first_child, next, is_end;
} ktrie;

static int free_key(conv *c, const cJSON *props, const char *hint, char *name) {
    /* collect the names as code point strings into a trie */
    ktrie *t = malloc(sizeof *t);
    int n = 1, cap = 1;
    if (!t) return cfail(c, "out of memory");
    t[0] = (ktrie){ 0, -1, -1, 0 };
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next) {
        int at = 0;
        for (const unsigned char *q = (const unsigned char *)p->string; *q;) {
            uint32_t cp = *q;
            int len = cp < 0x80 ? 1 : cp < 0xE0 ? 2 : cp < 0xF0 ? 3 : 4;
            if (len > 1) cp &= 0x3F >> (len - 1);
            for (int i = 1; i < len && q[i]; i++) cp = cp << 6 | (q[i] & 0x3F);
            for (int i = 0; i < len && *q; i++) q++;
            int k = t[at].first_child;
            while (k >= 0 && t[k].cp != cp) k = t[k].next;
            if (k < 0) {
                if (n == cap) {
                    ktrie *g = realloc(t, (size_t)(cap *= 2) * sizeof *t);
                    if (!g) { free(t); return cfail(c, "out of memory"); }
                    t = g;
                }
                t[n] = (ktrie){ cp, -1, t[at].first_child, 0 };
                t[at].first_child = n;
                k = n++;
            }
            at = k;
        }
        t[at].is_end = 1;
    }
    /* one rule per trie node, made leaves first (children have higher indices) */
    char (*names)[NAME_CAP] = malloc((size_t)n * sizeof *names);
    if (!names) { free(t); return cfail(c, "out of memory"); }
    for (int v = n - 1; v >= 0 && !c->failed; v--) {
        sbuf b = { 0 };
        cset kids = { .n = 0 };
        int alts = 0;
        if (!t[v].is_end) { sb_puts(&b, "\"\""); alts++; }
        for (int k = t[v].first_child; k >= 0; k = t[k].next) {
            cs_add(&kids, t[k].cp, t[k].cp);
            if (t[k].cp < 0x20 || t[k].cp == '"' || t[k].cp == '\\') continue; /* never written plainly */
            if (alts++) sb_puts(&b, " | ");
            char u[8];
            uint32_t cp = t[k].cp;
            int len = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
            if (len == 1) u[0] = (char)cp;
            else {
                for (int i = len - 1; i > 0; i--) u[i] = (char)(0x80 | (cp & 0x3F)), cp >>= 6;
                u[0] = (char)((0xF00 >> len) | cp);
            }
            sb_literal(&b, u, (size_t)len);
            sb_printf(&b, " %s", names[k]);
        }
        /* any other plain character, then anything */
        cs_add(&kids, 0, 0x1F);
        cs_add(&kids, '"', '"');
        cs_add(&kids, '\\', '\\');
        cs_complement(&kids, 0x10FFFF);
        if (kids.overflow) { free(b.p); break; }
        if (kids.n) {
            if (alts++) sb_puts(&b, " | ");
            sb_puts(&b, "[");
            for (int i = 0; i < kids.n; i++) {
                class_cp(&b, kids.lo[i]);
                if (kids.hi[i] > kids.lo[i]) { sb_puts(&b, "-"); class_cp(&b, kids.hi[i]); }
            }
            sb_printf(&b, "] %s", use(c, P_FREEKEY));
        }
        char h[NAME_CAP + 16];
        snprintf(h, sizeof h, "%s-key", hint);
        define(c, h, &b, names[v]);
    }
    if (!c->failed) snprintf(name, NAME_CAP, "%s", names[0]);
    free(names);
    free(t);
    return c->failed ? -1 : 0;
}

static int gen_object(conv *c, const cJSON *s, const char *hint, sbuf *b) {
    const cJSON *props = kw(s, "properties"), *req = kw(s, "required"), *addl = kw(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return cfail(c, "'properties' must be an object");
    if (req && !cJSON_IsArray(req)) return cfail(c, "'required' must be a list of names");
    for (const cJSON *e = req ? req->child : NULL; e; e = e->next)
        if (!cJSON_IsString(e)) return cfail(c, "'required' must be a list of names");
    if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl))
        return cfail(c, "'additionalProperties' must be a boolean or a schema");
    /* nothing declared: any object ({"type": "object"} alone asks for one, not for {}) */
    if (!props && !req && (!addl || cJSON_IsTrue(addl))) {
        sb_puts(b, use(c, P_OBJECT));
        return 0;
    }
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next)
        for (const cJSON *d = props->child; d != p; d = d->next)
            if (!strcmp(d->string, p->string)) return cfail(c, "property '%.60s' given twice", p->string);
    /* the members: declared properties in order, then required names not declared */
    int n = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next) n++;
    for (const cJSON *e = req ? req->child : NULL; e; e = e->next)
        if (!props || !cJSON_GetObjectItemCaseSensitive(props, e->valuestring)) n++;
    typedef struct member { const char *key; const cJSON *schema; int required; char kv[NAME_CAP]; } member;
    member *m = calloc((size_t)(n ? n : 1), sizeof *m);
    if (!m) return cfail(c, "out of memory");
    int k = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next) {
        int r = 0;
        for (const cJSON *e = req ? req->child : NULL; e; e = e->next) r |= !strcmp(e->valuestring, p->string);
        m[k++] = (member){ p->string, p, r, "" };
    }
    for (const cJSON *e = req ? req->child : NULL; e; e = e->next) {
        int dup = 0;
        for (int i = 0; i < k; i++) dup |= !strcmp(m[i].key, e->valuestring);
        if (!dup) m[k++] = (member){ e->valuestring, NULL, 1, "" };
    }
    n = k;
    c->boundary++;
    int rc = 0;
    /* kv_i ::= KEY ws ":" ws VALUE ws */
    for (int i = 0; i < n && !rc; i++) {
        if (m[i].schema && cJSON_IsFalse(m[i].schema)) {
            if (m[i].required) rc = cfail(c, "property '%.60s' is required but its schema is false", m[i].key);
            m[i].kv[0] = 0;
            continue;
        }
        char vname[NAME_CAP], seg[160];
        snprintf(seg, sizeof seg, "properties/%.140s", m[i].key);
        if (m[i].schema) rc = child(c, m[i].schema, seg, m[i].key, hint, vname);
        else snprintf(vname, sizeof vname, "%s", use(c, P_VALUE));
        if (rc) break;
        sbuf kv = { 0 }, key = { 0 };
        json_quote(&key, m[i].key);
        sb_literal(&kv, key.p ? key.p : "", key.n);
        free(key.p);
        sb_printf(&kv, " %s \":\" %s %s %s", use(c, P_WS), use(c, P_WS), vname, use(c, P_WS));
        char h[NAME_CAP + 160];
        snprintf(h, sizeof h, "%s-%s-kv", hint, m[i].key);
        rc = define(c, h, &kv, m[i].kv);
    }
    /* extra members */
    char extra[NAME_CAP] = "";
    if (!rc && addl && !cJSON_IsFalse(addl)) {
        char vname[NAME_CAP], kname[NAME_CAP];
        if (cJSON_IsTrue(addl)) snprintf(vname, sizeof vname, "%s", use(c, P_VALUE));
        else rc = child(c, addl, "additionalProperties", "additional", hint, vname);
        if (!rc) rc = free_key(c, props, hint, kname);
        if (!rc) {
            sbuf x = { 0 };
            sb_printf(&x, "\"\\\"\" %s \"\\\"\" %s \":\" %s %s %s", kname, use(c, P_WS), use(c, P_WS), vname, use(c, P_WS));
            char h[NAME_CAP + 16];
            snprintf(h, sizeof h, "%s-extra", hint);
            rc = define(c, h, &x, extra);
        }
    }
    c->boundary--;
    /* F_i: members from i on, nothing written yet; N_i: the same after a comma.
     *   F_i ::= kv_i N_{i+1} | F_{i+1} (optional i)     N_i ::= "," ws kv_i N_{i+1} | N_{i+1}
     *   F_n ::= ( X ( "," ws X )* )?                     N_n ::= ( "," ws X )*   (X: extra member) */
    char fname[NAME_CAP] = "", nname[NAME_CAP] = "";
    if (!rc) {
        sbuf f = { 0 }, g = { 0 };
        if (extra[0]) {
            sb_printf(&f, "( %s ( \",\" %s %s )* )?", extra, use(c, P_WS), extra);
            sb_printf(&g, "( \",\" %s %s )*", use(c, P_WS), extra);
        } else {
            sb_puts(&f, "\"\"");
            sb_puts(&g, "\"\"");
        }
        char h[NAME_CAP + 16];
        snprintf(h, sizeof h, "%s-end", hint);
        rc = define(c, h, &f, fname);
        snprintf(h, sizeof h, "%s-endc", hint);
        if (!rc) rc = define(c, h, &g, nname);
    }
    for (int i = n - 1; i >= 0 && !rc; i--) {
        if (!m[i].kv[0]) continue;
        sbuf f = { 0 }, g = { 0 };
        sb_printf(&f, "%s %s", m[i].kv, nname);
        sb_printf(&g, "\",\" %s %s %s", use(c, P_WS), m[i].kv, nname);
        if (!m[i].required) {
            sb_printf(&f, " | %s", fname);
            sb_printf(&g, " | %s", nname);
        }
        char h[NAME_CAP + 16];
        snprintf(h, sizeof h, "%s-f%d", hint, i);
        rc = define(c, h, &f, fname);
        snprintf(h, sizeof h, "%s-n%d", hint, i);
        if (!rc) rc = define(c, h, &g, nname);
    }
    if (!rc) sb_printf(b, "\"{\" %s %s \"}\"", use(c, P_WS), fname);
    free(m);
    return rc;
}

static int gen_array(conv *c, const cJSON *s, const char *hint, sbuf *b) {
    const cJSON *items = kw(s, "items"), *prefix = kw(s, "prefixItems");
    long mn = 0, mx = -1;
    if (get_count(c, s, "minItems", &mn) < 0 || get_count(c, s, "maxItems", &mx) < 0) return -1;
    if (prefix && !cJSON_IsArray(prefix)) return cfail(c, "'prefixItems' must be a list of schemas");
    if (items && cJSON_IsArray(items)) return cfail(c, "'items' as a list (draft 4's tuples): use prefixItems");
    if (items && !cJSON_IsBool(items) && !cJSON_IsObject(items)) return cfail(c, "'items' must be a schema");
    int k = prefix ? cJSON_GetArraySize(prefix) : 0;
    if (k > 100) return cfail(c, "more than 100 prefixItems");
    if (mx >= 0 && mx < mn) return cfail(c, "maxItems %ld is below minItems %ld", mx, mn);
    if (mn > GRAM_MAX_REPEAT || mx > GRAM_MAX_REPEAT)
        return cfail(c, "minItems/maxItems above %d are not supported", GRAM_MAX_REPEAT);
    int tail_ok = !(items && cJSON_IsFalse(items));
    if (!tail_ok && mn > k) return cfail(c, "minItems %ld but items false after %d prefixItems", mn, k);
    long total_max = mx >= 0 ? mx : -1;
    if (!tail_ok && (total_max < 0 || total_max > k)) total_max = k;
    c->boundary++;
    char (*pn)[NAME_CAP] = calloc((size_t)(k ? k : 1), sizeof *pn);
    char tname[NAME_CAP] = "";
    int rc = pn ? 0 : cfail(c, "out of memory");
    int i = 0;
    for (const cJSON *p = prefix ? prefix->child : NULL; p && !rc; p = p->next, i++) {
        char seg[32], suf[32];
        snprintf(seg, sizeof seg, "prefixItems/%d", i);
        snprintf(suf, sizeof suf, "%d", i);
        rc = child(c, p, seg, suf, hint, pn[i]);
    }
    if (!rc && tail_ok && (total_max < 0 || total_max > k)) {
        if (items) rc = child(c, items, "items", "item", hint, tname);
        else snprintf(tname, sizeof tname, "%s", use(c, P_VALUE));
    }
    c->boundary--;
    if (rc) { free(pn); return rc; }
    const char *ws = use(c, P_WS);
    /* positions 0..: prefix items, then the tail schema; the items from position mn
     * on are optional, nested: item_0 ( "," item_1 ( ... )? )? */
    sb_printf(b, "\"[\" %s ", ws);
    long n_prefix = total_max >= 0 && total_max < k ? total_max : k;
    int open = 0;
    for (long pos = 0; pos < n_prefix; pos++) {
        if (pos >= mn) { sb_puts(b, "( "); open++; }
        if (pos > 0) sb_printf(b, "\",\" %s ", ws);
        sb_printf(b, "%s %s ", pn[pos], ws);
    }
    if (tname[0] && total_max != n_prefix) {
        long tmin = mn > n_prefix ? mn - n_prefix : 0, tmax = total_max >= 0 ? total_max - n_prefix : -1;
        if (n_prefix == 0) {
            /* T ( "," ws T ){max(tmin - 1, 0), tmax - 1}, optional when tmin == 0 */
            if (tmin == 0) sb_puts(b, "( ");
            sb_printf(b, "%s %s ", tname, ws);
            long a = tmin > 0 ? tmin - 1 : 0, z = tmax >= 0 ? tmax - 1 : -1;
            if (z < 0) sb_printf(b, "( \",\" %s %s %s ){%ld,} ", ws, tname, ws, a);
            else if (z > 0) sb_printf(b, "( \",\" %s %s %s ){%ld,%ld} ", ws, tname, ws, a, z);
            if (tmin == 0) sb_puts(b, ")? ");
        } else if (tmax < 0) {
            sb_printf(b, "( \",\" %s %s %s ){%ld,} ", ws, tname, ws, tmin);
        } else if (tmax > 0) {
            sb_printf(b, "( \",\" %s %s %s ){%ld,%ld} ", ws, tname, ws, tmin, tmax);
        }
    }
    for (; open > 0; open--) sb_puts(b, ")? ");
    sb_puts(b, "\"]\"");
    free(pn);
    return 0;
}

/* The body for one JSON type (a bit of T_*) of schema s. */
static int gen_type(conv *c, const cJSON *s, unsigned t, const char *hint, sbuf *b) {
    switch (t) {
    case T_NULL: sb_puts(b, use(c, P_NULL)); return 0;
    case T_BOOL: sb_puts(b, use(c, P_BOOL)); return 0;
    case T_INT: return gen_integer(c, s, b);
    case T_INT | T_FRAC: return gen_number(c, s, b);
    case T_STR: return gen_string(c, s, b);
    case T_ARR: return gen_array(c, s, hint, b);
    case T_OBJ: return gen_object(c, s, hint, b);
    }
    return cfail(c, "internal: type %u", t);
}

static int gen(conv *c, const cJSON *s, const char *hint, char *name) {
    if (c->failed || work(c)) return -1;
    if (c->depth >= JSON_SCHEMA_MAX_DEPTH)
        return cfail(c, "schemas nested deeper than %d levels (or a cycle through $ref/allOf)", JSON_SCHEMA_MAX_DEPTH);
    c->depth++;
    int rc = 0;
    sbuf b = { 0 };
    const cJSON *k;
    if (cJSON_IsBool(s)) {
        if (cJSON_IsFalse(s)) rc = cfail(c, "the schema false allows no value");
        else snprintf(name, NAME_CAP, "%s", use(c, P_VALUE));
        goto out_named;
    }
    if (!cJSON_IsObject(s)) { rc = cfail(c, "a schema must be an object or true/false"); goto out_named; }
    if (check_keywords(c, s)) { rc = -1; goto out_named; }
    if ((k = kw(s, "$ref"))) {
        if (!cJSON_IsString(k)) { rc = cfail(c, "'$ref' must be a string"); goto out_named; }
        if (!has_constraints(s, (const char *const[]){ "$ref", NULL })) {
            rc = gen_ref(c, k->valuestring, name);
            goto out_named;
        }
    }
    if (kw(s, "allOf") || kw(s, "$ref")) { /* merged into one schema */
        cJSON *m = temp(c, cJSON_CreateObject());
        if (!m || merge_into(c, m, s, 0)) { rc = -1; goto out_named; }
        rc = gen(c, m, hint, name);
        goto out_named;
    }
    const cJSON *any = kw(s, "anyOf"), *one = kw(s, "oneOf");
    if (any && one) { rc = cfail(c, "anyOf beside oneOf is not supported"); goto out_named; }
    if (any || one) {
        const cJSON *list = any ? any : one;
        const char *kwn = any ? "anyOf" : "oneOf";
        if (!cJSON_IsArray(list) || !list->child) { rc = cfail(c, "'%s' must be a non-empty list of schemas", kwn); goto out_named; }
        /* other constraints beside it apply to every branch: allOf [rest, branch] */
        cJSON *rest = NULL;
        if (has_constraints(s, (const char *const[]){ kwn, NULL })) {
            rest = temp(c, cJSON_Duplicate(s, 1));
            if (!rest) { rc = -1; goto out_named; }
            cJSON_DeleteItemFromObjectCaseSensitive(rest, kwn);
        }
        const cJSON *branches = list;
        if (rest) {
            cJSON *bl = temp(c, cJSON_CreateArray());
            if (!bl) { rc = -1; goto out_named; }
            for (const cJSON *br = list->child; br; br = br->next) {
                cJSON *a = cJSON_CreateObject(), *l = cJSON_CreateArray();
                if (!a || !l) { cJSON_Delete(a); cJSON_Delete(l); rc = cfail(c, "out of memory"); goto out_named; }
                cJSON_AddItemToArray(l, cJSON_Duplicate(rest, 1));
                cJSON_AddItemToArray(l, cJSON_Duplicate(br, 1));
                cJSON_AddItemToObject(a, "allOf", l);
                cJSON_AddItemToArray(bl, a);
            }
            branches = bl;
        }
        if (one && oneof_disjoint(c, branches)) { rc = -1; goto out_named; }
        int i = 0;
        for (const cJSON *br = branches->child; br && !rc; br = br->next, i++) {
            char seg[32], suf[32], bn[NAME_CAP];
            snprintf(seg, sizeof seg, "%s/%d", kwn, i);
            snprintf(suf, sizeof suf, "%d", i);
            rc = child(c, br, seg, suf, hint, bn);
            if (!rc) sb_printf(&b, "%s%s", i ? " | " : "", bn);
        }
        goto out_define;
    }
    if (kw(s, "const") || kw(s, "enum")) {
        rc = gen_enum(c, s, &b);
        goto out_define;
    }
    unsigned types = declared_types(c, s);
    if (c->failed) { rc = -1; goto out_named; }
    if (!kw(s, "type")) types = gen_types(c, s);
    if (types == T_ALL) {
        snprintf(name, NAME_CAP, "%s", use(c, P_VALUE));
        goto out_named;
    }
    static const unsigned order[] = { T_OBJ, T_ARR, T_STR, T_INT | T_FRAC, T_INT, T_BOOL, T_NULL };
    int n = 0;
    for (size_t i = 0; i < MF_ARRAY_LEN(order) && !rc; i++) {
        unsigned t = order[i];
        if ((types & t) != t) continue;
        if (t == T_INT && (types & T_FRAC)) continue; /* number covers it */
        if (n++) sb_puts(&b, " | ");
        rc = gen_type(c, s, t, hint, &b);
    }
    if (!rc && !n) rc = cfail(c, "no type left to generate");
out_define:
    if (!rc) rc = define(c, hint, &b, name);
    else free(b.p);
    c->depth--;
    return rc;
out_named:
    free(b.p);
    c->depth--;
    return rc;
}

/* ================================================================ output */

static void conv_free(conv *c) {
    for (int i = 0; i < c->n_rules; i++) { free(c->rules[i].name); free(c->rules[i].body); }
    free(c->rules);
    map_free(&c->names);
    map_free(&c->bodies);
    free(c->refs);
    for (int i = 0; i < c->n_temps; i++) cJSON_Delete(c->temps[i]);
    free(c->temps);
}

/* Writes every rule and the fixed rules used (with what they use). */
static int conv_write(conv *c, sbuf *out) {
    for (int i = 0; i < c->n_rules; i++)
        if (c->rules[i].body) sb_printf(out, "%s ::= ", c->rules[i].name), sb_puts(out, c->rules[i].body), sb_puts(out, "\n");
    uint32_t u = c->used;
    for (int round = 0; round < P_COUNT; round++) /* close under prim_deps */
        for (int p = 0; p < P_COUNT; p++)
            if (u & 1u << p) u |= prim_deps[p];
    for (int p = 0; p < P_COUNT; p++)
        if (u & 1u << p) sb_printf(out, "%s ::= ", prim_name[p]), sb_puts(out, prim_body[p]), sb_puts(out, "\n");
    if (out->bad) return cfail(c, "the grammar grew past %d bytes (or memory ran out)", GRAM_MAX_SOURCE);
    return 0;
}

/* Well-formed UTF-8 (RFC 3629): the names and strings of a schema end up in
 * grammar literals, which must be. Returns the offset of the first bad byte or len. */
static size_t utf8_check(const unsigned char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        unsigned char b = s[i];
        int n = b < 0x80 ? 0 : b >= 0xC2 && b <= 0xDF ? 1 : (b & 0xF0) == 0xE0 ? 2 : b >= 0xF0 && b <= 0xF4 ? 3 : -1;
        if (n < 0 || i + (size_t)n >= len + (n ? 0 : 1)) return i;
        for (int k = 1; k <= n; k++) {
            unsigned char c = s[i + (size_t)k];
            unsigned char lo = 0x80, hi = 0xBF;
            if (k == 1 && b == 0xE0) lo = 0xA0;
            if (k == 1 && b == 0xED) hi = 0x9F;
            if (k == 1 && b == 0xF0) lo = 0x90;
            if (k == 1 && b == 0xF4) hi = 0x8F;
            if (c < lo || c > hi) return i;
        }
        i += (size_t)n + 1;
    }
    return len;
}

static cJSON *parse_json(const char *text, size_t len, const char *what, mf_err *err) {
    if (len > JSON_SCHEMA_MAX_TEXT) {
        mf_fail(err, MF_ERR_INPUT, "json schema: %s is %zu bytes, more than %d", what, len, JSON_SCHEMA_MAX_TEXT);
        return NULL;
    }
    size_t bad = utf8_check((const unsigned char *)text, len);
    if (bad < len) {
        mf_fail(err, MF_ERR_INPUT, "json schema: %s is not valid UTF-8 (byte %zu)", what, bad);
        return NULL;
    }
    if (memchr(text, 0, len)) {
        mf_fail(err, MF_ERR_INPUT, "json schema: %s holds a NUL byte", what);
        return NULL;
    }
    /* a \u0000 escape would cut cJSON's C strings short without a word */
    for (size_t i = 0; i + 5 < len; i++) {
        if (text[i] != '\\') continue;
        if (text[i + 1] == 'u' && !memcmp(text + i + 2, "0000", 4)) {
            mf_fail(err, MF_ERR_INPUT, "json schema: %s holds \\u0000 (byte %zu), which is not supported", what, i);
            return NULL;
        }
        i++;
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) {
        size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        mf_fail(err, MF_ERR_INPUT, "json schema: %s is not valid JSON (error near byte %zu)", what, at);
        return NULL;
    }
    for (const char *p = end; p && p < text + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(j);
            mf_fail(err, MF_ERR_INPUT, "json schema: %s has text after the JSON value (byte %zu)", what, (size_t)(p - text));
            return NULL;
        }
    return j;
}

int json_schema_to_gbnf(const char *text, size_t len, char **gbnf, size_t *gbnf_len, mf_err *err) {
    *gbnf = NULL;
    *gbnf_len = 0;
    cJSON *doc = parse_json(text, len, "the schema", err);
    if (!doc) return MF_ERR_INPUT;
    conv c = { .doc = doc, .err = err };
    char name[NAME_CAP];
    sbuf out = { 0 };
    int rc = gen(&c, doc, "root", name);
    if (!rc && strcmp(name, "root")) sb_printf(&out, "root ::= %s\n", name);
    if (!rc) rc = conv_write(&c, &out);
    conv_free(&c);
    cJSON_Delete(doc);
    if (rc) { free(out.p); return MF_ERR_INPUT; }
    *gbnf = out.p;
    *gbnf_len = out.n;
    return MF_OK;
}

const char *json_object_gbnf(void) {
    return "root ::= json-object\n"
           "json-value ::= json-object | json-array | json-string | json-number | json-bool | json-null\n"
           "json-object ::= \"{\" ws ( json-member ( \",\" ws json-member )* )? \"}\"\n"
           "json-member ::= json-string ws \":\" ws json-value ws\n"
           "json-array ::= \"[\" ws ( json-value ws ( \",\" ws json-value ws )* )? \"]\"\n"
           "json-string ::= \"\\\"\" json-char* \"\\\"\"\n"
           "json-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" json-hex4 )\n"
           "json-hex4 ::= [0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}\n"
           "json-integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
           "json-number ::= json-integer ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?\n"
           "json-bool ::= \"true\" | \"false\"\n"
           "json-null ::= \"null\"\n"
           "ws ::= ( \" \" | \"\\n\" \" \"{0,16} )?\n";
}

int json_tool_call_gbnf(const json_tool *tools, int n_tools, const json_tool_format *fmt, char **gbnf,
                        size_t *gbnf_len, mf_err *err) {
    *gbnf = NULL;
    *gbnf_len = 0;
    if (n_tools < 1) return mf_fail(err, MF_ERR_USAGE, "tool calls: no tools");
    if (fmt->min_calls < 1 || (fmt->max_calls && fmt->max_calls < fmt->min_calls) || fmt->max_calls > GRAM_MAX_REPEAT)
        return mf_fail(err, MF_ERR_USAGE, "tool calls: min_calls %d, max_calls %d (want 1 <= min <= max <= %d, or max 0)",
                       fmt->min_calls, fmt->max_calls, GRAM_MAX_REPEAT);
    const char *name_key = fmt->name_key ? fmt->name_key : "name";
    const char *args_key = fmt->args_key ? fmt->args_key : "arguments";
    conv c = { .err = err };
    sbuf calls = { 0 }, out = { 0 };
    int rc = 0;
    for (int i = 0; i < n_tools && !rc; i++) {
        if (!tools[i].name) { rc = mf_fail(err, MF_ERR_USAGE, "tool calls: tool %d has no name", i); break; }
        cJSON *doc = NULL;
        if (tools[i].parameters) {
            char what[96];
            snprintf(what, sizeof what, "tool '%.60s''s parameters", tools[i].name);
            doc = parse_json(tools[i].parameters, tools[i].parameters_len, what, err);
            if (!doc) { rc = MF_ERR_INPUT; break; }
        }
        char args[NAME_CAP], hint[32];
        snprintf(hint, sizeof hint, "tool%d-args", i);
        c.doc = doc;
        c.path[0] = 0;
        if (doc) {
            snprintf(c.path, sizeof c.path, "tool '%.60s' parameters #", tools[i].name);
            rc = gen(&c, doc, hint, args);
            /* the $ref table points into this document: a later tool has its own */
            c.n_refs = 0;
        } else {
            snprintf(args, sizeof args, "%s", use(&c, P_OBJECT));
        }
        if (doc) {
            if (c.n_temps) { /* merged schemas made from this document stay valid by themselves */ }
            cJSON_Delete(doc);
        }
        if (rc) { rc = MF_ERR_INPUT; break; }
        sbuf call = { 0 }, q = { 0 };
        const char *ws = use(&c, P_WS);
        if (fmt->bare_name) { /* NAME name_suffix ARGS */
            sb_literal(&call, tools[i].name, strlen(tools[i].name));
            if (fmt->name_suffix && *fmt->name_suffix) {
                sb_puts(&call, " ");
                sb_literal(&call, fmt->name_suffix, strlen(fmt->name_suffix));
            }
            sb_printf(&call, " %s", args);
            char cname[NAME_CAP];
            snprintf(hint, sizeof hint, "tool%d-call", i);
            if (define(&c, hint, &call, cname)) { rc = MF_ERR_INPUT; break; }
            sb_printf(&calls, "%s%s", i ? " | " : "", cname);
            continue;
        }
        sb_puts(&call, "\"{\" ");
        sb_puts(&call, ws);
        sb_puts(&call, " ");
        json_quote(&q, name_key);
        sb_literal(&call, q.p ? q.p : "", q.n);
        q.n = 0;
        sb_printf(&call, " %s \":\" %s ", ws, ws);
        json_quote(&q, tools[i].name);
        sb_literal(&call, q.p ? q.p : "", q.n);
        q.n = 0;
        sb_printf(&call, " %s \",\" %s ", ws, ws);
        json_quote(&q, args_key);
        sb_literal(&call, q.p ? q.p : "", q.n);
        free(q.p);
        sb_printf(&call, " %s \":\" %s %s %s \"}\"", ws, ws, args, ws);
        char cname[NAME_CAP];
        snprintf(hint, sizeof hint, "tool%d-call", i);
        if (define(&c, hint, &call, cname)) { rc = MF_ERR_INPUT; break; }
        sb_printf(&calls, "%s%s", i ? " | " : "", cname);
    }
    if (!rc) {
        sbuf one = { 0 }, lit = { 0 };
        if (fmt->call_prefix && *fmt->call_prefix) { sb_literal(&one, fmt->call_prefix, strlen(fmt->call_prefix)); sb_puts(&one, " "); }
        sb_printf(&one, "( %s )", calls.p ? calls.p : "");
        if (fmt->call_suffix && *fmt->call_suffix) { sb_puts(&one, " "); sb_literal(&one, fmt->call_suffix, strlen(fmt->call_suffix)); }
        char call[NAME_CAP];
        if (define(&c, "tool-call", &one, call)) rc = MF_ERR_INPUT;
        if (!rc) {
            sb_puts(&out, "root ::= ");
            if (fmt->list_prefix && *fmt->list_prefix) { sb_literal(&out, fmt->list_prefix, strlen(fmt->list_prefix)); sb_puts(&out, " "); }
            sb_puts(&out, call);
            if (fmt->separator && *fmt->separator) sb_literal(&lit, fmt->separator, strlen(fmt->separator));
            else sb_puts(&lit, "\"\"");
            int lo = fmt->min_calls - 1, hi = fmt->max_calls ? fmt->max_calls - 1 : -1;
            if (hi < 0) sb_printf(&out, " ( %s %s ){%d,}", lit.p, call, lo);
            else if (hi > 0) sb_printf(&out, " ( %s %s ){%d,%d}", lit.p, call, lo, hi);
            if (fmt->list_suffix && *fmt->list_suffix) { sb_puts(&out, " "); sb_literal(&out, fmt->list_suffix, strlen(fmt->list_suffix)); }
            sb_puts(&out, "\n");
            if (conv_write(&c, &out)) rc = MF_ERR_INPUT;
        }
        free(lit.p);
    }
    free(calls.p);
    conv_free(&c);
    if (rc) { free(out.p); return rc; }
    *gbnf = out.p;
    *gbnf_len = out.n;
    return MF_OK;
}
