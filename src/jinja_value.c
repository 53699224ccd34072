/* jinja_value.c - the template engine's values (jinja_impl.h): the arena they live in,
 * Python's str() and repr() of them, == and <, json.dumps and json.loads, and the
 * UTF-8 and Unicode helpers that Python's str methods need.
 *
 * Fidelity notes. Floats print as Python's repr (the shortest digits that read back,
 * exponent form below 1e-4 and from 1e16). repr() of a string escapes what Python's
 * str.isprintable() rejects: control characters, the separators and format
 * characters listed in ju_printable, surrogates and private use; unassigned code
 * points (which Python also escapes) print as they are. Case mapping is glibc's
 * C.UTF-8 towupper/towlower (simple mappings: Python's 'ß'.upper() is 'SS', here 'ß'). */
#include "jinja_impl.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wctype.h>

/* ---------------------------------------------------------------- arena */

struct jarena_blk {
    jarena_blk *next;
    size_t cap, used;
    size_t last;   /* offset of the latest allocation (ja_realloc grows it in place) */
    _Alignas(16) unsigned char data[];
};

#define JA_BLOCK ((size_t)64 << 10)

void *ja_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (a->limit && (n > a->limit || a->used > a->limit - n)) {
        a->over = 1;
        return NULL;
    }
    jarena_blk *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > JA_BLOCK / 4 ? n : JA_BLOCK;
        if (cap > SIZE_MAX - sizeof *b) { a->oom = 1; return NULL; }
        b = malloc(sizeof *b + cap);
        if (!b) { a->oom = 1; return NULL; }
        b->cap = cap;
        b->used = 0;
        b->last = 0;
        if (cap == n && a->head) { /* a big one-off: behind the head, which keeps its room */
            b->next = a->head->next;
            a->head->next = b;
        } else {
            b->next = a->head;
            a->head = b;
        }
    }
    void *p = b->data + b->used;
    b->last = b->used;
    b->used += n;
    a->used += n;
    return p;
}

void *ja_realloc(jarena *a, void *p, size_t old, size_t n) {
    if (!p) return ja_alloc(a, n);
    jarena_blk *b = a->head;
    size_t o16 = (old + 15) & ~(size_t)15, n16 = (n + 15) & ~(size_t)15;
    if (b && p == b->data + b->last && b->last + o16 == b->used && n16 >= o16 && b->cap - b->last >= n16) {
        size_t more = n16 - o16;
        if (a->limit && (more > a->limit || a->used > a->limit - more)) { a->over = 1; return NULL; }
        b->used += more;
        a->used += more;
        return p;
    }
    void *q = ja_alloc(a, n);
    if (q) memcpy(q, p, old < n ? old : n);
    return q;
}

void ja_free_all(jarena *a) {
    jarena_blk *b = a->head;
    while (b) {
        jarena_blk *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
    a->used = 0;
}

/* ---------------------------------------------------------------- string builder */

void jsb_put(jsb *b, const char *s, size_t n) {
    if (b->over || b->oom) return;
    if (b->limit && (n > b->limit || b->n > b->limit - n)) { b->over = 1; return; }
    if (n > SIZE_MAX / 2 - b->n) { b->oom = 1; return; }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jsb_puts(jsb *b, const char *s) { jsb_put(b, s, strlen(s)); }
void jsb_putc(jsb *b, char c) { jsb_put(b, &c, 1); }

void jsb_printf(jsb *b, const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    jsb_put(b, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

void jsb_put_cp(jsb *b, uint32_t cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) { u[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { u[0] = (char)(0xc0 | cp >> 6); u[1] = (char)(0x80 | (cp & 63)); n = 2; }
    else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | cp >> 12); u[1] = (char)(0x80 | ((cp >> 6) & 63)); u[2] = (char)(0x80 | (cp & 63)); n = 3;
    } else {
        u[0] = (char)(0xf0 | cp >> 18); u[1] = (char)(0x80 | ((cp >> 12) & 63));
        u[2] = (char)(0x80 | ((cp >> 6) & 63)); u[3] = (char)(0x80 | (cp & 63)); n = 4;
    }
    jsb_put(b, u, n);
}

/* ---------------------------------------------------------------- UTF-8 and Unicode */

uint32_t ju_next(const char *s, size_t n, size_t *i) {
    const unsigned char *u = (const unsigned char *)s;
    size_t k = *i;
    uint32_t c = u[k];
    if (c < 0x80 || k + 1 >= n) { *i = k + 1; return c; }
    if (c < 0xe0) { *i = k + 2; return (c & 31) << 6 | (u[k + 1] & 63); }
    if (c < 0xf0 || k + 3 > n) {
        if (k + 2 >= n) { *i = n; return 0xfffd; }
        *i = k + 3;
        return (c & 15) << 12 | (uint32_t)(u[k + 1] & 63) << 6 | (u[k + 2] & 63);
    }
    if (k + 3 >= n) { *i = n; return 0xfffd; }
    *i = k + 4;
    return (c & 7) << 18 | (uint32_t)(u[k + 1] & 63) << 12 | (uint32_t)(u[k + 2] & 63) << 6 | (u[k + 3] & 63);
}

size_t ju_len(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xc0) != 0x80;
    return k;
}

size_t ju_offset(const char *s, size_t n, size_t k) {
    size_t i = 0;
    while (i < n && k > 0) {
        i++;
        while (i < n && ((unsigned char)s[i] & 0xc0) == 0x80) i++;
        k--;
    }
    return i;
}

int ju_valid(const char *s, size_t n, size_t *bad) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = u[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xc2 && c <= 0xdf) { len = 2; cp = c & 31; min = 0x80; }
        else if (c >= 0xe0 && c <= 0xef) { len = 3; cp = c & 15; min = 0x800; }
        else if (c >= 0xf0 && c <= 0xf4) { len = 4; cp = c & 7; min = 0x10000; }
        else goto fail;
        if (i + len > n) goto fail;
        for (size_t k = 1; k < len; k++) {
            if ((u[i + k] & 0xc0) != 0x80) goto fail;
            cp = cp << 6 | (u[i + k] & 63);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) goto fail;
        i += len;
        continue;
    fail:
        if (bad) *bad = i;
        return 0;
    }
    return 1;
}

int ju_isspace(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

size_t ju_space_at(const char *s, size_t n, size_t i) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80) return ju_isspace(c) ? 1 : 0;
    size_t j = i;
    uint32_t cp = ju_next(s, n, &j);
    return ju_isspace(cp) ? j - i : 0;
}

static locale_t ju_loc;
static pthread_once_t ju_loc_once = PTHREAD_ONCE_INIT;
static void ju_loc_init(void) {
    ju_loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    if (!ju_loc) ju_loc = newlocale(LC_CTYPE_MASK, "C.utf8", (locale_t)0);
}

uint32_t ju_upper(uint32_t cp) {
    if (cp < 0x80) return cp >= 'a' && cp <= 'z' ? cp - 32 : cp;
    pthread_once(&ju_loc_once, ju_loc_init);
    return ju_loc ? (uint32_t)towupper_l((wint_t)cp, ju_loc) : cp;
}

uint32_t ju_lower(uint32_t cp) {
    if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    pthread_once(&ju_loc_once, ju_loc_init);
    return ju_loc ? (uint32_t)towlower_l((wint_t)cp, ju_loc) : cp;
}

int ju_isalpha(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    pthread_once(&ju_loc_once, ju_loc_init);
    return ju_loc ? iswalpha_l((wint_t)cp, ju_loc) != 0 : 0;
}

int ju_isdigit(uint32_t cp) { return cp >= '0' && cp <= '9'; }

/* Python's str.isprintable() for one code point, without the unassigned ones. */
static int ju_printable(uint32_t c) {
    if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad) return 0;
    if ((c >= 0x600 && c <= 0x605) || c == 0x61c || c == 0x6dd || c == 0x70f || c == 0x890 || c == 0x891 ||
        c == 0x8e2 || c == 0x180e || c == 0x1680)
        return 0;
    if ((c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) || (c >= 0x205f && c <= 0x2064) ||
        (c >= 0x2066 && c <= 0x206f) || c == 0x3000)
        return 0;
    if ((c >= 0xd800 && c <= 0xf8ff) || c == 0xfeff || (c >= 0xfff9 && c <= 0xfffb)) return 0;
    if (c == 0x110bd || c == 0x110cd || (c >= 0x13430 && c <= 0x1343f) || (c >= 0x1bca0 && c <= 0x1bca3) ||
        (c >= 0x1d173 && c <= 0x1d17a) || c == 0xe0001 || (c >= 0xe0020 && c <= 0xe007f) || c >= 0xf0000)
        return 0;
    return 1;
}

/* ---------------------------------------------------------------- value basics */

jinja_value jv_undef_c = { .t = JV_UNDEF };
jinja_value jv_none_c = { .t = JV_NONE };
jinja_value jv_true_c = { .t = JV_BOOL, .u.b = 1 };
jinja_value jv_false_c = { .t = JV_BOOL, .u.b = 0 };
jinja_value jv_empty_c = { .t = JV_STR, .u.s = { "", 0 } };

jinja_value *jv_new(jarena *a, int t) {
    jinja_value *v = ja_alloc(a, sizeof *v);
    if (!v) return NULL;
    memset(v, 0, sizeof *v);
    v->t = (uint8_t)t;
    return v;
}

/* Small integers are shared constants (loop indexes, range() items, lengths): a loop
 * over range(1000) then allocates no values. */
#define JV_SMALL_MIN (-256)
#define JV_SMALL_MAX 4096
static jinja_value jv_small[JV_SMALL_MAX - JV_SMALL_MIN];
static pthread_once_t jv_small_once = PTHREAD_ONCE_INIT;
static void jv_small_init(void) {
    for (int i = 0; i < JV_SMALL_MAX - JV_SMALL_MIN; i++) {
        jv_small[i].t = JV_INT;
        jv_small[i].u.i = JV_SMALL_MIN + i;
    }
}

jinja_value *jv_int(jarena *a, int64_t i) {
    if (i >= JV_SMALL_MIN && i < JV_SMALL_MAX) {
        pthread_once(&jv_small_once, jv_small_init);
        return &jv_small[i - JV_SMALL_MIN];
    }
    jinja_value *v = jv_new(a, JV_INT);
    if (v) v->u.i = i;
    return v;
}

jinja_value *jv_float(jarena *a, double f) {
    jinja_value *v = jv_new(a, JV_FLOAT);
    if (v) v->u.f = f;
    return v;
}

jinja_value *jv_bool(int b) { return b ? JV_TRUE : JV_FALSE; }

jinja_value *jv_str(jarena *a, const char *s, size_t n) {
    if (n == 0) return JV_EMPTY;
    if (n >= SIZE_MAX - sizeof(jinja_value) - 16) { a->over = 1; return NULL; }
    jinja_value *v = ja_alloc(a, sizeof *v + n + 1);
    if (!v) return NULL;
    memset(v, 0, sizeof *v);
    v->t = JV_STR;
    char *p = (char *)(v + 1);
    memcpy(p, s, n);
    p[n] = 0;
    v->u.s.p = p;
    v->u.s.n = n;
    return v;
}

jinja_value *jv_undef(jarena *a, const char *fmt, ...) {
    char buf[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    jinja_value *v = jv_new(a, JV_UNDEF);
    if (!v) return NULL;
    size_t n = strlen(buf);
    char *h = ja_alloc(a, n + 1);
    if (!h) return NULL;
    memcpy(h, buf, n + 1);
    v->u.hint = h;
    return v;
}

jinja_value *jv_list(jarena *a, size_t cap) {
    jinja_value *v = jv_new(a, JV_LIST);
    if (!v) return NULL;
    if (cap) {
        if (cap > SIZE_MAX / sizeof(jinja_value *) / 2) { a->over = 1; return NULL; }
        v->u.l.v = ja_alloc(a, cap * sizeof(jinja_value *));
        if (!v->u.l.v) return NULL;
        v->u.l.cap = cap;
    }
    return v;
}

int jv_push(jarena *a, jinja_value *l, jinja_value *x) {
    if (l->u.l.n == l->u.l.cap) {
        size_t cap = l->u.l.cap ? l->u.l.cap * 2 : 8;
        if (cap > SIZE_MAX / sizeof(jinja_value *) / 2) { a->over = 1; return -1; }
        jinja_value **p = ja_realloc(a, l->u.l.v, l->u.l.cap * sizeof *p, cap * sizeof *p);
        if (!p) return -1;
        l->u.l.v = p;
        l->u.l.cap = cap;
    }
    l->u.l.v[l->u.l.n++] = x;
    return 0;
}

jinja_value *jv_dict(jarena *a) { return jv_new(a, JV_DICT); }

static int key_eq(const jinja_value *a, const jinja_value *b) {
    if (a->t == JV_STR && b->t == JV_STR) return a->u.s.n == b->u.s.n && !memcmp(a->u.s.p, b->u.s.p, a->u.s.n);
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a->t != JV_FLOAT && b->t != JV_FLOAT)
            return (a->t == JV_BOOL ? a->u.b : a->u.i) == (b->t == JV_BOOL ? b->u.b : b->u.i);
        return jv_num(a) == jv_num(b);
    }
    if (a->t == JV_NONE && b->t == JV_NONE) return 1;
    if (a->t == JV_LIST && b->t == JV_LIST && a->u.l.n == b->u.l.n && !a->tuple == !b->tuple) {
        for (size_t i = 0; i < a->u.l.n; i++)
            if (!key_eq(a->u.l.v[i], b->u.l.v[i])) return 0;
        return 1;
    }
    return a == b;
}

int jv_dict_set(jarena *a, jinja_value *d, jinja_value *k, jinja_value *v) {
    for (size_t i = 0; i < d->u.d.n; i++)
        if (key_eq(d->u.d.kv[i].k, k)) {
            d->u.d.kv[i].v = v;
            return 0;
        }
    if (d->u.d.n == d->u.d.cap) {
        size_t cap = d->u.d.cap ? d->u.d.cap * 2 : 8;
        if (cap > SIZE_MAX / sizeof(jkv) / 2) { a->over = 1; return -1; }
        jkv *p = ja_realloc(a, d->u.d.kv, d->u.d.cap * sizeof *p, cap * sizeof *p);
        if (!p) return -1;
        d->u.d.kv = p;
        d->u.d.cap = cap;
    }
    d->u.d.kv[d->u.d.n].k = k;
    d->u.d.kv[d->u.d.n].v = v;
    d->u.d.n++;
    return 0;
}

jinja_value *jv_dict_get_s(const jinja_value *d, const char *k, size_t n) {
    if (!d || (d->t != JV_DICT && d->t != JV_NS)) return NULL;
    for (size_t i = 0; i < d->u.d.n; i++) {
        const jinja_value *key = d->u.d.kv[i].k;
        if (key->t == JV_STR && key->u.s.n == n && !memcmp(key->u.s.p, k, n)) return d->u.d.kv[i].v;
    }
    return NULL;
}

jinja_value *jv_dict_get(const jinja_value *d, const jinja_value *k) {
    if (!d || (d->t != JV_DICT && d->t != JV_NS)) return NULL;
    for (size_t i = 0; i < d->u.d.n; i++)
        if (key_eq(d->u.d.kv[i].k, k)) return d->u.d.kv[i].v;
    return NULL;
}

jinja_value *jv_func(jarena *a, int id, jinja_value *self) {
    jinja_value *v = jv_new(a, JV_FUNC);
    if (v) {
        v->u.fn.id = id;
        v->u.fn.self = self;
    }
    return v;
}

const char *jv_type_name(const jinja_value *v) {
    switch (v->t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v->gen ? "generator" : v->range ? "range" : v->tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_MACRO: return "Macro";
    case JV_FUNC: return "builtin_function_or_method";
    case JV_LOOP: return "LoopContext";
    }
    return "object";
}

int jv_truthy(const jinja_value *v) {
    switch (v->t) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: return v->u.b;
    case JV_INT: return v->u.i != 0;
    case JV_FLOAT: return v->u.f != 0;
    case JV_STR: return v->u.s.n != 0;
    case JV_LIST: return v->gen || v->u.l.n != 0;
    case JV_DICT: return v->u.d.n != 0;
    default: return 1;
    }
}

int jv_is_num(const jinja_value *v) { return v->t == JV_BOOL || v->t == JV_INT || v->t == JV_FLOAT; }

double jv_num(const jinja_value *v) {
    return v->t == JV_BOOL ? v->u.b : v->t == JV_INT ? (double)v->u.i : v->t == JV_FLOAT ? v->u.f : 0;
}

/* ---------------------------------------------------------------- str() and repr() */

void jv_float_repr(double f, char *buf) {
    if (isnan(f)) { strcpy(buf, "nan"); return; }
    if (isinf(f)) { strcpy(buf, f < 0 ? "-inf" : "inf"); return; }
    if (f == 0) { strcpy(buf, signbit(f) ? "-0.0" : "0.0"); return; }
    char tmp[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp: [-]d[.ddd]e(+|-)XX */
    const char *p = tmp;
    int neg = *p == '-';
    if (neg) p++;
    char digits[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.' && nd < 20) digits[nd++] = *p;
    int e = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char *o = buf;
    if (neg) *o++ = '-';
    if (e >= -4 && e < 16) {
        if (e >= 0) {
            for (int i = 0; i <= e; i++) *o++ = i < nd ? digits[i] : '0';
            *o++ = '.';
            if (nd > e + 1) for (int i = e + 1; i < nd; i++) *o++ = digits[i];
            else *o++ = '0';
        } else {
            *o++ = '0';
            *o++ = '.';
            for (int i = 0; i < -e - 1; i++) *o++ = '0';
            for (int i = 0; i < nd; i++) *o++ = digits[i];
        }
        *o = 0;
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            for (int i = 1; i < nd; i++) *o++ = digits[i];
        }
        sprintf(o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
}

static void repr_str(const char *s, size_t n, jsb *b) {
    int has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jsb_putc(b, q);
    size_t i = 0;
    while (i < n) {
        size_t st = i;
        uint32_t c = ju_next(s, n, &i);
        if (c == (uint32_t)q || c == '\\') { jsb_putc(b, '\\'); jsb_putc(b, (char)c); }
        else if (c == '\t') jsb_puts(b, "\\t");
        else if (c == '\n') jsb_puts(b, "\\n");
        else if (c == '\r') jsb_puts(b, "\\r");
        else if (c < 0x20 || c == 0x7f) jsb_printf(b, "\\x%02x", c);
        else if (c < 0x7f || ju_printable(c)) jsb_put(b, s + st, i - st);
        else if (c <= 0xff) jsb_printf(b, "\\x%02x", c);
        else if (c <= 0xffff) jsb_printf(b, "\\u%04x", c);
        else jsb_printf(b, "\\U%08x", c);
    }
    jsb_putc(b, q);
}

static int repr_rec(jctx *c, const jinja_value *v, jsb *b, int depth);

static int repr_items(jctx *c, const jinja_value *v, jsb *b, int depth) {
    if (v->t == JV_LIST) {
        jsb_putc(b, v->tuple ? '(' : '[');
        for (size_t i = 0; i < v->u.l.n; i++) {
            if (i) jsb_puts(b, ", ");
            if (repr_rec(c, v->u.l.v[i], b, depth + 1)) return -1;
        }
        if (v->tuple && v->u.l.n == 1) jsb_putc(b, ',');
        jsb_putc(b, v->tuple ? ')' : ']');
        return 0;
    }
    jsb_putc(b, '{');
    for (size_t i = 0; i < v->u.d.n; i++) {
        if (i) jsb_puts(b, ", ");
        if (repr_rec(c, v->u.d.kv[i].k, b, depth + 1)) return -1;
        jsb_puts(b, ": ");
        if (repr_rec(c, v->u.d.kv[i].v, b, depth + 1)) return -1;
    }
    jsb_putc(b, '}');
    return 0;
}

static int repr_rec(jctx *c, const jinja_value *v, jsb *b, int depth) {
    if (depth > JINJA_MAX_NESTING) {
        jfail(c, "a value nested more than %d deep cannot be printed", JINJA_MAX_NESTING);
        return -1;
    }
    char buf[48];
    switch (v->t) {
    case JV_UNDEF: jsb_puts(b, "Undefined"); return 0;
    case JV_NONE: jsb_puts(b, "None"); return 0;
    case JV_BOOL: jsb_puts(b, v->u.b ? "True" : "False"); return 0;
    case JV_INT: jsb_printf(b, "%lld", (long long)v->u.i); return 0;
    case JV_FLOAT: jv_float_repr(v->u.f, buf); jsb_puts(b, buf); return 0;
    case JV_STR: repr_str(v->u.s.p, v->u.s.n, b); return 0;
    case JV_LIST:
        if (v->gen) { jsb_puts(b, "<generator object>"); return 0; }
        if (v->range) {
            if (v->u.l.r2 == 1) jsb_printf(b, "range(%lld, %lld)", (long long)v->u.l.r0, (long long)v->u.l.r1);
            else jsb_printf(b, "range(%lld, %lld, %lld)", (long long)v->u.l.r0, (long long)v->u.l.r1, (long long)v->u.l.r2);
            return 0;
        }
        return repr_items(c, v, b, depth);
    case JV_DICT: return repr_items(c, v, b, depth);
    case JV_NS:
        jsb_puts(b, "<Namespace ");
        if (repr_items(c, v, b, depth)) return -1;
        jsb_putc(b, '>');
        return 0;
    case JV_MACRO: jsb_puts(b, "<Macro>"); return 0;
    case JV_FUNC: jsb_printf(b, "<built-in function %s>", jb_func_name(v->u.fn.id)); return 0;
    case JV_LOOP: jsb_printf(b, "<LoopContext %zu/%zu>", v->u.loop->i + 1, v->u.loop->items->u.l.n); return 0;
    }
    return 0;
}

int jv_repr_to(jctx *c, const jinja_value *v, jsb *b) { return repr_rec(c, v, b, 0); }

int jv_str_to(jctx *c, const jinja_value *v, jsb *b) {
    if (v->t == JV_STR) { jsb_put(b, v->u.s.p, v->u.s.n); return 0; }
    if (v->t == JV_UNDEF) return 0;
    return repr_rec(c, v, b, 0);
}

jinja_value *jv_to_str(jctx *c, jinja_value *v) {
    if (v->t == JV_STR) return v;
    if (v->t == JV_UNDEF) return JV_EMPTY;
    jsb b = { .limit = c->lim.max_memory };
    if (jv_str_to(c, v, &b)) { free(b.p); return NULL; }
    if (b.over || b.oom) { free(b.p); return jfail(c, "out of memory converting a %s to a string", jv_type_name(v)); }
    jinja_value *r = jv_str(c->a, b.p ? b.p : "", b.n);
    free(b.p);
    return r ? r : jmemfail(c);
}

/* ---------------------------------------------------------------- == and < */

static int eq_rec(jctx *c, const jinja_value *a, const jinja_value *b, int depth) {
    if (depth > JINJA_MAX_NESTING) {
        jfail(c, "values nested more than %d deep cannot be compared", JINJA_MAX_NESTING);
        return -1;
    }
    if (a == b) return 1;
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a->t != JV_FLOAT && b->t != JV_FLOAT)
            return (a->t == JV_BOOL ? a->u.b : a->u.i) == (b->t == JV_BOOL ? b->u.b : b->u.i);
        if (a->t == JV_FLOAT && b->t == JV_FLOAT) return a->u.f == b->u.f;
        const jinja_value *fv = a->t == JV_FLOAT ? a : b, *iv = a->t == JV_FLOAT ? b : a;
        int64_t i = iv->t == JV_BOOL ? iv->u.b : iv->u.i;
        double f = fv->u.f;
        /* exact, as Python compares an int with a float */
        if (f != floor(f) || f < -9223372036854775808.0 || f >= 9223372036854775808.0) return 0;
        return (int64_t)f == i;
    }
    if (a->t != b->t) return 0;
    switch (a->t) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR: return a->u.s.n == b->u.s.n && !memcmp(a->u.s.p, b->u.s.p, a->u.s.n);
    case JV_LIST:
        if (a->gen || b->gen) return 0;
        if (a->range != b->range || !a->tuple != !b->tuple || a->u.l.n != b->u.l.n) return 0;
        for (size_t i = 0; i < a->u.l.n; i++) {
            int r = eq_rec(c, a->u.l.v[i], b->u.l.v[i], depth + 1);
            if (r != 1) return r;
        }
        return 1;
    case JV_DICT:
        if (a->u.d.n != b->u.d.n) return 0;
        for (size_t i = 0; i < a->u.d.n; i++) {
            const jinja_value *bv = jv_dict_get(b, a->u.d.kv[i].k);
            if (!bv) return 0;
            int r = eq_rec(c, a->u.d.kv[i].v, bv, depth + 1);
            if (r != 1) return r;
        }
        return 1;
    default: return 0;
    }
}

int jv_eq(jctx *c, const jinja_value *a, const jinja_value *b) { return eq_rec(c, a, b, 0); }

static int cmp_rec(jctx *c, const jinja_value *a, const jinja_value *b, int *out, int depth) {
    if (depth > JINJA_MAX_NESTING) {
        jfail(c, "values nested more than %d deep cannot be compared", JINJA_MAX_NESTING);
        return -1;
    }
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a->t != JV_FLOAT && b->t != JV_FLOAT) {
            int64_t x = a->t == JV_BOOL ? a->u.b : a->u.i, y = b->t == JV_BOOL ? b->u.b : b->u.i;
            *out = x < y ? -1 : x > y;
        } else {
            double x = jv_num(a), y = jv_num(b);
            *out = x < y ? -1 : x > y ? 1 : 0; /* NaN: neither */
        }
        return 0;
    }
    if (a->t == JV_STR && b->t == JV_STR) {
        size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
        int r = memcmp(a->u.s.p, b->u.s.p, n); /* UTF-8 byte order is code point order */
        *out = r < 0 ? -1 : r > 0 ? 1 : a->u.s.n < b->u.s.n ? -1 : a->u.s.n > b->u.s.n;
        return 0;
    }
    if (a->t == JV_LIST && b->t == JV_LIST && !a->gen && !b->gen && !a->tuple == !b->tuple && !a->range && !b->range) {
        for (size_t i = 0; i < a->u.l.n && i < b->u.l.n; i++) {
            int e = eq_rec(c, a->u.l.v[i], b->u.l.v[i], depth + 1);
            if (e < 0) return -1;
            if (e) continue;
            return cmp_rec(c, a->u.l.v[i], b->u.l.v[i], out, depth + 1);
        }
        *out = a->u.l.n < b->u.l.n ? -1 : a->u.l.n > b->u.l.n;
        return 0;
    }
    jfail(c, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a), jv_type_name(b));
    return -1;
}

int jv_cmp(jctx *c, const jinja_value *a, const jinja_value *b, int *out) { return cmp_rec(c, a, b, out, 0); }

/* ---------------------------------------------------------------- json.dumps */

static void json_str(const char *s, size_t n, jsb *b) {
    jsb_putc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        if (ch == '"') esc = "\\\"";
        else if (ch == '\\') esc = "\\\\";
        else if (ch == '\n') esc = "\\n";
        else if (ch == '\r') esc = "\\r";
        else if (ch == '\t') esc = "\\t";
        else if (ch == '\b') esc = "\\b";
        else if (ch == '\f') esc = "\\f";
        else if (ch < 0x20) { snprintf(u, sizeof u, "\\u%04x", ch); esc = u; }
        if (!esc) continue;
        jsb_put(b, s + run, i - run);
        jsb_puts(b, esc);
        run = i + 1;
    }
    jsb_put(b, s + run, n - run);
    jsb_putc(b, '"');
}

typedef struct json_opts {
    const char *indent, *item_sep, *key_sep;
    int sort_keys;
} json_opts;

static void json_newline(jsb *b, const json_opts *o, int level) {
    jsb_putc(b, '\n');
    for (int i = 0; i < level; i++) jsb_puts(b, o->indent);
}

/* A dict key as json.dumps writes it, into kb; 0, or -1 for a key type it refuses. */
static int json_key(jctx *c, const jinja_value *k, jsb *kb) {
    char buf[48];
    switch (k->t) {
    case JV_STR: jsb_put(kb, k->u.s.p, k->u.s.n); return 0;
    case JV_INT: jsb_printf(kb, "%lld", (long long)k->u.i); return 0;
    case JV_BOOL: jsb_puts(kb, k->u.b ? "true" : "false"); return 0;
    case JV_NONE: jsb_puts(kb, "null"); return 0;
    case JV_FLOAT:
        if (isnan(k->u.f)) jsb_puts(kb, "NaN");
        else if (isinf(k->u.f)) jsb_puts(kb, k->u.f < 0 ? "-Infinity" : "Infinity");
        else { jv_float_repr(k->u.f, buf); jsb_puts(kb, buf); }
        return 0;
    default:
        jfail(c, "tojson: keys must be str, int, float, bool or None, not %s", jv_type_name(k));
        return -1;
    }
}

static int json_rec(jctx *c, const jinja_value *v, jsb *b, const json_opts *o, int level) {
    if (level > JINJA_MAX_NESTING) {
        jfail(c, "tojson: a value nested more than %d deep", JINJA_MAX_NESTING);
        return -1;
    }
    char buf[48];
    switch (v->t) {
    case JV_NONE: jsb_puts(b, "null"); return 0;
    case JV_BOOL: jsb_puts(b, v->u.b ? "true" : "false"); return 0;
    case JV_INT: jsb_printf(b, "%lld", (long long)v->u.i); return 0;
    case JV_FLOAT:
        if (isnan(v->u.f)) jsb_puts(b, "NaN");
        else if (isinf(v->u.f)) jsb_puts(b, v->u.f < 0 ? "-Infinity" : "Infinity");
        else { jv_float_repr(v->u.f, buf); jsb_puts(b, buf); }
        return 0;
    case JV_STR: json_str(v->u.s.p, v->u.s.n, b); return 0;
    case JV_LIST:
        if (v->gen || v->range) break;
        if (v->u.l.n == 0) { jsb_puts(b, "[]"); return 0; }
        jsb_putc(b, '[');
        for (size_t i = 0; i < v->u.l.n; i++) {
            if (i) jsb_puts(b, o->item_sep);
            if (o->indent) json_newline(b, o, level + 1);
            if (json_rec(c, v->u.l.v[i], b, o, level + 1)) return -1;
        }
        if (o->indent) json_newline(b, o, level);
        jsb_putc(b, ']');
        return 0;
    case JV_DICT: {
        if (v->u.d.n == 0) { jsb_puts(b, "{}"); return 0; }
        size_t n = v->u.d.n;
        size_t *order = malloc(n * sizeof *order);
        jsb *keys = calloc(n, sizeof *keys);
        int rc = 0;
        if (!order || !keys) { free(order); free(keys); jfail(c, "out of memory"); return -1; }
        for (size_t i = 0; i < n && !rc; i++) {
            order[i] = i;
            keys[i].limit = c->lim.max_memory;
            rc = json_key(c, v->u.d.kv[i].k, &keys[i]);
            if (!keys[i].p) jsb_put(&keys[i], "", 0);
        }
        if (!rc && o->sort_keys) /* insertion sort by key text: stable, n is small */
            for (size_t i = 1; i < n; i++)
                for (size_t j = i; j > 0; j--) {
                    jsb *x = &keys[order[j - 1]], *y = &keys[order[j]];
                    size_t m = x->n < y->n ? x->n : y->n;
                    int r = memcmp(x->p, y->p, m);
                    if (r < 0 || (r == 0 && x->n <= y->n)) break;
                    size_t t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
                }
        if (!rc) {
            jsb_putc(b, '{');
            for (size_t i = 0; i < n && !rc; i++) {
                if (i) jsb_puts(b, o->item_sep);
                if (o->indent) json_newline(b, o, level + 1);
                json_str(keys[order[i]].p, keys[order[i]].n, b);
                jsb_puts(b, o->key_sep);
                rc = json_rec(c, v->u.d.kv[order[i]].v, b, o, level + 1);
            }
            if (!rc) {
                if (o->indent) json_newline(b, o, level);
                jsb_putc(b, '}');
            }
        }
        for (size_t i = 0; i < n; i++) free(keys[i].p);
        free(keys);
        free(order);
        return rc;
    }
    default: break;
    }
    jfail(c, "tojson: Object of type %s is not JSON serializable", jv_type_name(v));
    return -1;
}

int jv_json_to(jctx *c, const jinja_value *v, jsb *b, const char *indent, const char *item_sep, const char *key_sep,
               int sort_keys) {
    json_opts o = { indent, item_sep, key_sep, sort_keys };
    return json_rec(c, v, b, &o, 0);
}

/* ---------------------------------------------------------------- json.loads */

typedef struct jp {
    jarena *a;
    const char *s;
    size_t n, i;
    jinja_error *err;
    int depth;
} jp;

static jinja_value *jp_fail(jp *p, const char *what) {
    if (p->err && !p->err->msg[0]) {
        p->err->line = p->err->col = 0;
        snprintf(p->err->msg, sizeof p->err->msg, "JSON: %s at byte %zu", what, p->i);
    }
    return NULL;
}

static void jp_ws(jp *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r')) p->i++;
}

static int hex4(const char *s, uint32_t *out) {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        char ch = s[k];
        v <<= 4;
        if (ch >= '0' && ch <= '9') v |= (uint32_t)(ch - '0');
        else if (ch >= 'a' && ch <= 'f') v |= (uint32_t)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F') v |= (uint32_t)(ch - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static jinja_value *jp_string(jp *p) {
    p->i++; /* the quote */
    jsb b = { 0 };
    size_t run = p->i;
    for (;;) {
        if (p->i >= p->n) { free(b.p); return jp_fail(p, "unterminated string"); }
        unsigned char ch = (unsigned char)p->s[p->i];
        if (ch == '"') break;
        if (ch < 0x20) { free(b.p); return jp_fail(p, "control character in a string"); }
        if (ch != '\\') { p->i++; continue; }
        jsb_put(&b, p->s + run, p->i - run);
        if (p->i + 1 >= p->n) { free(b.p); return jp_fail(p, "unterminated string"); }
        char e = p->s[p->i + 1];
        p->i += 2;
        switch (e) {
        case '"': jsb_putc(&b, '"'); break;
        case '\\': jsb_putc(&b, '\\'); break;
        case '/': jsb_putc(&b, '/'); break;
        case 'b': jsb_putc(&b, '\b'); break;
        case 'f': jsb_putc(&b, '\f'); break;
        case 'n': jsb_putc(&b, '\n'); break;
        case 'r': jsb_putc(&b, '\r'); break;
        case 't': jsb_putc(&b, '\t'); break;
        case 'u': {
            uint32_t cp, lo;
            if (p->i + 4 > p->n || hex4(p->s + p->i, &cp)) { free(b.p); return jp_fail(p, "bad \\u escape"); }
            p->i += 4;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (p->i + 6 > p->n || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u' || hex4(p->s + p->i + 2, &lo) ||
                    lo < 0xdc00 || lo > 0xdfff) {
                    free(b.p);
                    return jp_fail(p, "lone surrogate in a \\u escape");
                }
                p->i += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                free(b.p);
                return jp_fail(p, "lone surrogate in a \\u escape");
            }
            jsb_put_cp(&b, cp);
            break;
        }
        default: free(b.p); return jp_fail(p, "bad escape in a string");
        }
        run = p->i;
    }
    jsb_put(&b, p->s + run, p->i - run);
    p->i++;
    if (b.oom) { free(b.p); return jp_fail(p, "out of memory"); }
    jinja_value *v = jv_str(p->a, b.p ? b.p : "", b.n);
    free(b.p);
    return v ? v : jp_fail(p, p->a->over ? "over the memory limit" : "out of memory");
}

static jinja_value *jp_number(jp *p) {
    size_t st = p->i;
    int is_float = 0;
    if (p->s[p->i] == '-') p->i++;
    if (p->i < p->n && p->s[p->i] == '0') p->i++;
    else if (p->i < p->n && p->s[p->i] >= '1' && p->s[p->i] <= '9')
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    else return jp_fail(p, "bad number");
    if (p->i < p->n && p->s[p->i] == '.') {
        is_float = 1;
        p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return jp_fail(p, "bad number");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        is_float = 1;
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return jp_fail(p, "bad number");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    size_t len = p->i - st;
    char small[64], *buf = len < sizeof small ? small : malloc(len + 1);
    if (!buf) return jp_fail(p, "out of memory");
    memcpy(buf, p->s + st, len);
    buf[len] = 0;
    jinja_value *v;
    if (is_float) {
        v = jv_float(p->a, strtod(buf, NULL));
    } else {
        errno = 0;
        long long x = strtoll(buf, NULL, 10);
        if (errno == ERANGE) {
            if (buf != small) free(buf);
            p->i = st;
            return jp_fail(p, "integer beyond 64 bits");
        }
        v = jv_int(p->a, x);
    }
    if (buf != small) free(buf);
    return v ? v : jp_fail(p, "out of memory");
}

static jinja_value *jp_value(jp *p) {
    jp_ws(p);
    if (p->i >= p->n) return jp_fail(p, "unexpected end");
    char ch = p->s[p->i];
    if (ch == '"') return jp_string(p);
    if (ch == '-' || (ch >= '0' && ch <= '9')) return jp_number(p);
    if (ch == '[' || ch == '{') {
        if (++p->depth > JINJA_MAX_NESTING) return jp_fail(p, "nested too deeply");
        p->i++;
        jinja_value *v = ch == '[' ? jv_list(p->a, 0) : jv_dict(p->a);
        if (!v) return jp_fail(p, "out of memory");
        jp_ws(p);
        char close = ch == '[' ? ']' : '}';
        if (p->i < p->n && p->s[p->i] == close) {
            p->i++;
            p->depth--;
            return v;
        }
        for (;;) {
            if (ch == '[') {
                jinja_value *x = jp_value(p);
                if (!x) return NULL;
                if (jv_push(p->a, v, x)) return jp_fail(p, "out of memory");
            } else {
                jp_ws(p);
                if (p->i >= p->n || p->s[p->i] != '"') return jp_fail(p, "expected a string key");
                jinja_value *k = jp_string(p);
                if (!k) return NULL;
                jp_ws(p);
                if (p->i >= p->n || p->s[p->i] != ':') return jp_fail(p, "expected ':'");
                p->i++;
                jinja_value *x = jp_value(p);
                if (!x) return NULL;
                if (jv_dict_set(p->a, v, k, x)) return jp_fail(p, "out of memory");
            }
            jp_ws(p);
            if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
            if (p->i < p->n && p->s[p->i] == close) { p->i++; break; }
            return jp_fail(p, ch == '[' ? "expected ',' or ']'" : "expected ',' or '}'");
        }
        p->depth--;
        return v;
    }
    if (p->n - p->i >= 4 && !memcmp(p->s + p->i, "null", 4)) { p->i += 4; return JV_NONEV; }
    if (p->n - p->i >= 4 && !memcmp(p->s + p->i, "true", 4)) { p->i += 4; return JV_TRUE; }
    if (p->n - p->i >= 5 && !memcmp(p->s + p->i, "false", 5)) { p->i += 5; return JV_FALSE; }
    return jp_fail(p, "unexpected character");
}

jinja_value *jv_json_parse(jarena *a, const char *s, size_t n, jinja_error *err) {
    if (err) err->msg[0] = 0;
    size_t bad;
    jp p = { a, s, n, 0, err, 0 };
    if (!ju_valid(s, n, &bad)) {
        p.i = bad;
        return jp_fail(&p, "invalid UTF-8");
    }
    jinja_value *v = jp_value(&p);
    if (!v) return NULL;
    jp_ws(&p);
    if (p.i != n) return jp_fail(&p, "text after the value");
    return v;
}
