/* jinja_builtins.c - the template engine's filters, tests, global functions and the
 * methods of str, dict and list (jinja_impl.h), each with jinja2's (filters.py,
 * tests.py, sandbox.py) and Python's semantics: what a generator-returning filter
 * (select, map, items, ...) gives is marked as a generator (always true, no len());
 * the immutable sandbox's mutators (list.append, dict.pop, ...) are refused when
 * called; range() stops at jinja2's sandbox limit of 100,000 items.
 *
 * Not here (an unknown filter is a parse error, as in jinja2): pprint, striptags,
 * urlencode, urlize, wordwrap, xmlattr, filesizeformat, random; the globals lipsum,
 * cycler and joiner. */
#include "jinja_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* ---------------------------------------------------------------- argument binding */

/* Binds a call's arguments to named parameters: out[i] is NULL when not given. */
static int bind(jctx *c, const char *fname, const jargs *a, int np, const char *const *names, jinja_value **out) {
    for (int i = 0; i < np; i++) out[i] = NULL;
    if (a->npos > np) {
        jfail(c, "%s() takes at most %d argument%s (%d given)", fname, np, np == 1 ? "" : "s", a->npos);
        return -1;
    }
    for (int i = 0; i < a->npos; i++) out[i] = a->pos[i];
    for (int k = 0; k < a->nkw; k++) {
        int found = -1;
        for (int i = 0; i < np; i++)
            if (!strcmp(names[i], a->kwn[k])) found = i;
        if (found < 0) { jfail(c, "%s() got an unexpected keyword argument '%s'", fname, a->kwn[k]); return -1; }
        if (out[found]) { jfail(c, "%s() got multiple values for argument '%s'", fname, a->kwn[k]); return -1; }
        out[found] = a->kwv[k];
    }
    return 0;
}

#define BIND(fname, ...)                                                           \
    static const char *const names_[] = { __VA_ARGS__ };                           \
    jinja_value *p[NELEM(names_)];                                                 \
    if (bind(c, fname, args, (int)NELEM(names_), names_, p)) return NULL

#define NO_ARGS(fname)                                                              \
    do {                                                                            \
        if (args->npos || args->nkw) return jfail(c, "%s() takes no arguments", fname); \
    } while (0)

static jinja_value *mem(jctx *c, jinja_value *v) { return v ? v : jmemfail(c); }

static jinja_value *sbv(jctx *c, jsb *b) {
    if (b->over || b->oom) {
        free(b->p);
        return b->oom ? jfail(c, "out of memory") : jmemfail(c);
    }
    jinja_value *r = jv_str(c->a, b->p ? b->p : "", b->n);
    free(b->p);
    return mem(c, r);
}

static int want_int(jctx *c, const char *what, jinja_value *v, int64_t *out) {
    if (v->t == JV_INT) { *out = v->u.i; return 0; }
    if (v->t == JV_BOOL) { *out = v->u.b; return 0; }
    jfail(c, "%s: an integer is required, not %s", what, jv_type_name(v));
    return -1;
}

static int want_str(jctx *c, const char *what, jinja_value *v) {
    if (v->t == JV_STR) return 0;
    jfail(c, "%s: a string is required, not %s", what, jv_type_name(v));
    return -1;
}

/* A generator's items: a list marked gen. */
static jinja_value *gen_list(jctx *c) {
    jinja_value *l = jv_list(c->a, 0);
    if (!l) return jmemfail(c);
    l->gen = 1;
    return l;
}

static int push(jctx *c, jinja_value *l, jinja_value *v) {
    if (!v) return -1;
    if (jv_push(c->a, l, v)) { jmemfail(c); return -1; }
    return 0;
}

static jinja_value *tuple2(jctx *c, jinja_value *a, jinja_value *b) {
    jinja_value *t = jv_list(c->a, 2);
    if (!t) return jmemfail(c);
    t->tuple = 1;
    jv_push(c->a, t, a);
    jv_push(c->a, t, b);
    return t;
}

/* ---------------------------------------------------------------- string helpers */

/* code points of chars: is cp one of them */
static int in_chars(const jinja_value *chars, uint32_t cp) {
    size_t i = 0;
    while (i < chars->u.s.n)
        if (ju_next(chars->u.s.p, chars->u.s.n, &i) == cp) return 1;
    return 0;
}

/* str.strip / lstrip / rstrip (which: 1 left, 2 right, 3 both) */
static jinja_value *str_strip(jctx *c, jinja_value *s, jinja_value *chars, int which) {
    if (chars && chars->t != JV_NONE && want_str(c, "strip", chars)) return NULL;
    if (chars && chars->t == JV_NONE) chars = NULL;
    const char *p = s->u.s.p;
    size_t a = 0, b = s->u.s.n;
    if (which & 1)
        while (a < b) {
            size_t j = a;
            uint32_t cp = ju_next(p, b, &j);
            if (chars ? !in_chars(chars, cp) : !ju_isspace(cp)) break;
            a = j;
        }
    if (which & 2)
        while (b > a) {
            size_t st = b - 1;
            while (st > a && ((unsigned char)p[st] & 0xc0) == 0x80) st--;
            size_t j = st;
            uint32_t cp = ju_next(p, b, &j);
            if (chars ? !in_chars(chars, cp) : !ju_isspace(cp)) break;
            b = st;
        }
    if (a == 0 && b == s->u.s.n) return s;
    return mem(c, jv_str(c->a, p + a, b - a));
}

/* map each code point (upper, lower) */
static jinja_value *str_map(jctx *c, jinja_value *s, uint32_t (*f)(uint32_t)) {
    jsb b = { .limit = c->lim.max_memory };
    size_t i = 0;
    while (i < s->u.s.n) jsb_put_cp(&b, f(ju_next(s->u.s.p, s->u.s.n, &i)));
    return sbv(c, &b);
}

static int is_cased(uint32_t cp) { return ju_upper(cp) != cp || ju_lower(cp) != cp; }

/* Python's str.title() */
static jinja_value *str_title(jctx *c, jinja_value *s) {
    jsb b = { .limit = c->lim.max_memory };
    size_t i = 0;
    int prev_cased = 0;
    while (i < s->u.s.n) {
        uint32_t cp = ju_next(s->u.s.p, s->u.s.n, &i);
        if (is_cased(cp)) {
            jsb_put_cp(&b, prev_cased ? ju_lower(cp) : ju_upper(cp));
            prev_cased = 1;
        } else {
            jsb_put_cp(&b, cp);
            prev_cased = 0;
        }
    }
    return sbv(c, &b);
}

static jinja_value *str_capitalize(jctx *c, jinja_value *s) {
    jsb b = { .limit = c->lim.max_memory };
    size_t i = 0;
    int first = 1;
    while (i < s->u.s.n) {
        uint32_t cp = ju_next(s->u.s.p, s->u.s.n, &i);
        jsb_put_cp(&b, first ? ju_upper(cp) : ju_lower(cp));
        first = 0;
    }
    return sbv(c, &b);
}

/* str.replace(old, new, count) */
static jinja_value *str_replace(jctx *c, jinja_value *s, jinja_value *old, jinja_value *nw, int64_t count) {
    jsb b = { .limit = c->lim.max_memory };
    const char *p = s->u.s.p;
    size_t n = s->u.s.n, i = 0;
    int64_t done = 0;
    if (old->u.s.n == 0) { /* between every character, and at both ends */
        while (count < 0 || done < count) {
            jsb_put(&b, nw->u.s.p, nw->u.s.n);
            done++;
            if (i >= n) break;
            size_t st = i;
            ju_next(p, n, &i);
            jsb_put(&b, p + st, i - st);
        }
        jsb_put(&b, p + i, n - i);
        return sbv(c, &b);
    }
    while (count < 0 || done < count) {
        const char *f = memmem(p + i, n - i, old->u.s.p, old->u.s.n);
        if (!f) break;
        size_t at = (size_t)(f - p);
        jsb_put(&b, p + i, at - i);
        jsb_put(&b, nw->u.s.p, nw->u.s.n);
        i = at + old->u.s.n;
        done++;
        if (jstep(c, 1)) { free(b.p); return NULL; }
    }
    jsb_put(&b, p + i, n - i);
    return sbv(c, &b);
}

/* str.split(sep, maxsplit) / rsplit */
static jinja_value *str_split(jctx *c, jinja_value *s, jinja_value *sep, int64_t maxsplit, int right) {
    jinja_value *l = jv_list(c->a, 0);
    if (!l) return jmemfail(c);
    const char *p = s->u.s.p;
    size_t n = s->u.s.n;
    if (sep && sep->t == JV_NONE) sep = NULL;
    if (sep) {
        if (want_str(c, "split", sep)) return NULL;
        if (sep->u.s.n == 0) return jfail(c, "empty separator");
        size_t m = sep->u.s.n;
        if (!right) {
            size_t i = 0;
            int64_t k = 0;
            for (;;) {
                const char *f = (maxsplit < 0 || k < maxsplit) ? memmem(p + i, n - i, sep->u.s.p, m) : NULL;
                if (!f) break;
                if (jstep(c, 1) || push(c, l, jv_str(c->a, p + i, (size_t)(f - p) - i))) return NULL;
                i = (size_t)(f - p) + m;
                k++;
            }
            if (push(c, l, jv_str(c->a, p + i, n - i))) return NULL;
            return l;
        }
        /* rsplit: from the right, then reversed */
        jinja_value *r = jv_list(c->a, 0);
        if (!r) return jmemfail(c);
        size_t e = n;
        int64_t k = 0;
        for (;;) {
            if (maxsplit >= 0 && k >= maxsplit) break;
            size_t found = (size_t)-1;
            for (size_t j = e; j >= m; j--)
                if (!memcmp(p + j - m, sep->u.s.p, m)) { found = j - m; break; }
            if (found == (size_t)-1) break;
            if (jstep(c, 1) || push(c, r, jv_str(c->a, p + found + m, e - found - m))) return NULL;
            e = found;
            k++;
        }
        if (push(c, r, jv_str(c->a, p, e))) return NULL;
        for (size_t j = r->u.l.n; j > 0; j--) jv_push(c->a, l, r->u.l.v[j - 1]);
        return l;
    }
    /* whitespace runs */
    if (!right) {
        size_t i = 0;
        int64_t k = 0;
        for (;;) {
            size_t w;
            while (i < n && (w = ju_space_at(p, n, i))) i += w;
            if (i >= n) break;
            if (maxsplit >= 0 && k >= maxsplit) {
                if (push(c, l, jv_str(c->a, p + i, n - i))) return NULL;
                break;
            }
            size_t st = i;
            while (i < n && !ju_space_at(p, n, i)) ju_next(p, n, &i);
            if (jstep(c, 1) || push(c, l, jv_str(c->a, p + st, i - st))) return NULL;
            k++;
        }
        return l;
    }
    jinja_value *r = jv_list(c->a, 0);
    if (!r) return jmemfail(c);
    size_t e = n;
    int64_t k = 0;
    for (;;) {
        /* skip trailing whitespace */
        while (e > 0) {
            size_t st = e - 1;
            while (st > 0 && ((unsigned char)p[st] & 0xc0) == 0x80) st--;
            if (!ju_space_at(p, n, st)) break;
            e = st;
        }
        if (e == 0) break;
        if (maxsplit >= 0 && k >= maxsplit) {
            if (push(c, r, jv_str(c->a, p, e))) return NULL;
            break;
        }
        size_t st = e;
        while (st > 0) {
            size_t q = st - 1;
            while (q > 0 && ((unsigned char)p[q] & 0xc0) == 0x80) q--;
            if (ju_space_at(p, n, q)) break;
            st = q;
        }
        if (jstep(c, 1) || push(c, r, jv_str(c->a, p + st, e - st))) return NULL;
        e = st;
        k++;
    }
    for (size_t j = r->u.l.n; j > 0; j--) jv_push(c->a, l, r->u.l.v[j - 1]);
    return l;
}

/* Python's line boundaries for str.splitlines */
static size_t line_break_at(const char *p, size_t n, size_t i) {
    unsigned char ch = (unsigned char)p[i];
    if (ch == '\r') return i + 1 < n && p[i + 1] == '\n' ? 2 : 1;
    if (ch == '\n' || ch == 0x0b || ch == 0x0c || ch == 0x1c || ch == 0x1d || ch == 0x1e) return 1;
    if (ch >= 0x80) {
        size_t j = i;
        uint32_t cp = ju_next(p, n, &j);
        if (cp == 0x85 || cp == 0x2028 || cp == 0x2029) return j - i;
    }
    return 0;
}

static jinja_value *str_splitlines(jctx *c, jinja_value *s, int keepends) {
    jinja_value *l = jv_list(c->a, 0);
    if (!l) return jmemfail(c);
    const char *p = s->u.s.p;
    size_t n = s->u.s.n, i = 0, st = 0;
    while (i < n) {
        size_t w = line_break_at(p, n, i);
        if (!w) { ju_next(p, n, &i); continue; }
        if (jstep(c, 1) || push(c, l, jv_str(c->a, p + st, (keepends ? i + w : i) - st))) return NULL;
        i += w;
        st = i;
    }
    if (st < n && push(c, l, jv_str(c->a, p + st, n - st))) return NULL;
    return l;
}

/* code point index of a byte offset */
static int64_t cp_index(const jinja_value *s, size_t off) { return (int64_t)ju_len(s->u.s.p, off); }

/* ---------------------------------------------------------------- str.format */

static int format_spec(jctx *c, jinja_value *v, const char *spec, size_t sn, jsb *out) {
    /* [[fill]align][sign][0][width][,][.precision][type] */
    size_t i = 0;
    char fill[5] = " ", align = 0, sign = 0, type = 0;
    int width = -1, prec = -1, zero = 0;
    size_t fl = 1;
    if (sn >= 2) {
        size_t j = 0;
        ju_next(spec, sn, &j);
        if (j < sn && strchr("<>^=", spec[j])) {
            memcpy(fill, spec, j);
            fl = j;
            fill[j] = 0;
            align = spec[j];
            i = j + 1;
        }
    }
    if (!align && i < sn && strchr("<>^=", spec[i])) align = spec[i++];
    if (i < sn && strchr("+- ", spec[i])) sign = spec[i++];
    if (i < sn && spec[i] == '0') { zero = 1; i++; }
    while (i < sn && spec[i] >= '0' && spec[i] <= '9') {
        width = (width < 0 ? 0 : width * 10) + (spec[i++] - '0');
        if (width > 100000) break;
    }
    if (width > 100000) { jfail(c, "format width too large"); return -1; }
    if (i < sn && spec[i] == '.') {
        i++;
        prec = 0;
        while (i < sn && spec[i] >= '0' && spec[i] <= '9') {
            prec = prec * 10 + (spec[i++] - '0');
            if (prec > 100) break;
        }
        if (prec > 100) { jfail(c, "format precision too large"); return -1; }
    }
    if (i < sn) type = spec[i++];
    if (i != sn) { jfail(c, "unsupported format specifier '%.*s'", (int)sn, spec); return -1; }
    jsb body = { .limit = c->lim.max_memory };
    int numeric = 0;
    if (type == 0 || type == 's') {
        if (type == 's' && v->t != JV_STR) { jfail(c, "unknown format code 's' for object of type '%s'", jv_type_name(v)); return -1; }
        if (sign) { jfail(c, "sign not allowed in this format specifier"); return -1; }
        if (jv_str_to(c, v, &body)) { free(body.p); return -1; }
        if (prec >= 0 && v->t == JV_STR) body.n = ju_offset(body.p, body.n, (size_t)prec);
        numeric = jv_is_num(v);
    } else if (strchr("dxXob", type)) {
        if (v->t != JV_INT && v->t != JV_BOOL) { jfail(c, "unknown format code '%c' for object of type '%s'", type, jv_type_name(v)); return -1; }
        long long x = v->t == JV_BOOL ? v->u.b : v->u.i;
        unsigned long long ax = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
        if (x < 0) jsb_putc(&body, '-');
        else if (sign == '+' || sign == ' ') jsb_putc(&body, sign);
        if (type == 'd') jsb_printf(&body, "%llu", ax);
        else if (type == 'x') jsb_printf(&body, "%llx", ax);
        else if (type == 'X') jsb_printf(&body, "%llX", ax);
        else if (type == 'o') jsb_printf(&body, "%llo", ax);
        else {
            char bits[65];
            int k = 64;
            bits[k] = 0;
            do { bits[--k] = (char)('0' + (ax & 1)); ax >>= 1; } while (ax);
            jsb_puts(&body, bits + k);
        }
        numeric = 1;
    } else if (strchr("fFeEgG%", type)) {
        if (!jv_is_num(v)) { jfail(c, "unknown format code '%c' for object of type '%s'", type, jv_type_name(v)); return -1; }
        double x = jv_num(v);
        char f[16];
        snprintf(f, sizeof f, "%%%s.%d%c", sign == '+' ? "+" : sign == ' ' ? " " : "", prec < 0 ? 6 : prec,
                 type == '%' ? 'f' : type);
        jsb_printf(&body, f, type == '%' ? x * 100 : x);
        if (type == '%') jsb_putc(&body, '%');
        numeric = 1;
    } else {
        jfail(c, "unsupported format code '%c'", type);
        return -1;
    }
    if (body.oom || body.over) { free(body.p); jfail(c, "out of memory"); return -1; }
    size_t len = ju_len(body.p ? body.p : "", body.n);
    if (!align) align = numeric ? '>' : '<';
    if (zero && !align) align = '=';
    int pad = width > (int)len ? width - (int)len : 0;
    if (zero && pad && numeric) { /* zero padding after the sign */
        size_t sgn = body.n && (body.p[0] == '-' || body.p[0] == '+' || body.p[0] == ' ') ? 1 : 0;
        jsb_put(out, body.p, sgn);
        for (int k = 0; k < pad; k++) jsb_putc(out, '0');
        jsb_put(out, body.p + sgn, body.n - sgn);
        free(body.p);
        return 0;
    }
    int left = align == '<' ? 0 : align == '^' ? pad / 2 : pad, right = pad - left;
    for (int k = 0; k < left; k++) jsb_put(out, fill, fl);
    jsb_put(out, body.p, body.n);
    for (int k = 0; k < right; k++) jsb_put(out, fill, fl);
    free(body.p);
    return 0;
}

static jinja_value *str_format(jctx *c, jinja_value *s, const jargs *args) {
    jsb b = { .limit = c->lim.max_memory };
    const char *p = s->u.s.p;
    size_t n = s->u.s.n, i = 0;
    int auto_idx = 0, manual = 0;
    while (i < n) {
        char ch = p[i];
        if (ch == '}') {
            if (i + 1 < n && p[i + 1] == '}') { jsb_putc(&b, '}'); i += 2; continue; }
            free(b.p);
            return jfail(c, "single '}' encountered in format string");
        }
        if (ch != '{') { jsb_putc(&b, ch); i++; continue; }
        if (i + 1 < n && p[i + 1] == '{') { jsb_putc(&b, '{'); i += 2; continue; }
        size_t e = i + 1;
        int depth = 1;
        while (e < n && depth) {
            if (p[e] == '{') depth++;
            else if (p[e] == '}') depth--;
            if (depth) e++;
        }
        if (e >= n) { free(b.p); return jfail(c, "unmatched '{' in format string"); }
        const char *f = p + i + 1;
        size_t fn = e - i - 1;
        /* field [!conv] [:spec] */
        size_t nameend = 0;
        while (nameend < fn && f[nameend] != '!' && f[nameend] != ':') nameend++;
        char conv = 0;
        size_t specst = nameend;
        if (nameend < fn && f[nameend] == '!') {
            if (nameend + 1 >= fn) { free(b.p); return jfail(c, "end of string while looking for conversion specifier"); }
            conv = f[nameend + 1];
            specst = nameend + 2;
        }
        const char *spec = "";
        size_t sn = 0;
        if (specst < fn) {
            if (f[specst] != ':') { free(b.p); return jfail(c, "expected ':' after conversion specifier"); }
            spec = f + specst + 1;
            sn = fn - specst - 1;
        }
        /* the first part of the name: index, keyword or empty */
        size_t k = 0;
        while (k < nameend && f[k] != '.' && f[k] != '[') k++;
        jinja_value *v = NULL;
        if (k == 0) {
            if (manual) { free(b.p); return jfail(c, "cannot switch from manual field specification to automatic field numbering"); }
            if (auto_idx >= args->npos) { free(b.p); return jfail(c, "Replacement index %d out of range for positional args tuple", auto_idx); }
            v = args->pos[auto_idx++];
        } else if (f[0] >= '0' && f[0] <= '9') {
            long idx = 0;
            for (size_t q = 0; q < k; q++) {
                if (f[q] < '0' || f[q] > '9') { free(b.p); return jfail(c, "bad field name '%.*s' in a format string", (int)k, f); }
                idx = idx * 10 + (f[q] - '0');
                if (idx > 1000000) break;
            }
            manual = 1;
            if (idx >= args->npos) { free(b.p); return jfail(c, "Replacement index %ld out of range for positional args tuple", idx); }
            v = args->pos[idx];
        } else {
            for (int q = 0; q < args->nkw; q++)
                if (strlen(args->kwn[q]) == k && !memcmp(args->kwn[q], f, k)) v = args->kwv[q];
            if (!v) { free(b.p); return jfail(c, "KeyError: '%.*s'", (int)k, f); }
        }
        /* .attr and [key] */
        while (k < nameend) {
            if (f[k] == '.') {
                size_t st = ++k;
                while (k < nameend && f[k] != '.' && f[k] != '[') k++;
                char name[128];
                snprintf(name, sizeof name, "%.*s", (int)(k - st), f + st);
                if (!(v = jr_getattr(c, v, name, strlen(name)))) { free(b.p); return NULL; }
            } else if (f[k] == '[') {
                size_t st = ++k;
                while (k < nameend && f[k] != ']') k++;
                if (k >= nameend) { free(b.p); return jfail(c, "missing ']' in format string"); }
                jinja_value *key;
                char *end;
                long long iv = strtoll(f + st, &end, 10);
                if (end == f + k && k > st) key = jv_int(c->a, iv);
                else key = jv_str(c->a, f + st, k - st);
                k++;
                if (!key || !(v = jr_getitem(c, v, key))) { free(b.p); return key ? NULL : jmemfail(c); }
            } else break;
        }
        if (v->t == JV_UNDEF) {
            /* format() of an Undefined: str() is "" */
        }
        if (conv == 'r' || conv == 'a') {
            jsb t = { 0 };
            if (jv_repr_to(c, v, &t)) { free(t.p); free(b.p); return NULL; }
            v = jv_str(c->a, t.p ? t.p : "", t.n);
            free(t.p);
            if (!v) { free(b.p); return jmemfail(c); }
        } else if (conv == 's') {
            if (!(v = jv_to_str(c, v))) { free(b.p); return NULL; }
        } else if (conv) {
            free(b.p);
            return jfail(c, "unknown conversion specifier %c", conv);
        }
        if (format_spec(c, v, spec, sn, &b)) { free(b.p); return NULL; }
        i = e + 1;
    }
    return sbv(c, &b);
}

/* ---------------------------------------------------------------- attribute paths */

/* environment.getitem along "a.b.0" (jinja2's make_attrgetter: integer parts index) */
static jinja_value *attr_path(jctx *c, jinja_value *obj, jinja_value *attr) {
    if (attr->t == JV_INT) return jr_getitem(c, obj, attr);
    if (attr->t != JV_STR) return jfail(c, "attribute must be a string or an integer, not %s", jv_type_name(attr));
    const char *s = attr->u.s.p;
    size_t n = attr->u.s.n, i = 0;
    for (;;) {
        size_t st = i;
        while (i < n && s[i] != '.') i++;
        jinja_value *key;
        int digits = i > st;
        for (size_t k = st; k < i; k++) digits &= s[k] >= '0' && s[k] <= '9';
        if (digits && i - st < 18) key = jv_int(c->a, strtoll(s + st, NULL, 10));
        else key = jv_str(c->a, s + st, i - st);
        if (!key) return jmemfail(c);
        if (obj->t == JV_UNDEF) return obj; /* further steps of an undefined stay undefined */
        obj = jr_getitem(c, obj, key);
        if (!obj) return NULL;
        if (i >= n) return obj;
        i++;
    }
}

/* ---------------------------------------------------------------- sorting */

typedef struct sort_ctx {
    jctx *c;
    int case_insensitive;
    int failed;
} sort_ctx;

/* the comparison key of an item: lower-cased where case-insensitive */
static jinja_value *sort_key(jctx *c, jinja_value *v, int ci) {
    if (ci && v->t == JV_STR) return str_map(c, v, ju_lower);
    return v;
}

/* stable merge sort of keys (with their items) */
static int merge_sort(jctx *c, jinja_value **keys, jinja_value **items, size_t n, int reverse) {
    if (n < 2) return 0;
    jinja_value **tk = malloc(n * sizeof *tk), **ti = malloc(n * sizeof *ti);
    if (!tk || !ti) { free(tk); free(ti); jfail(c, "out of memory"); return -1; }
    int rc = 0;
    for (size_t w = 1; w < n && !rc; w *= 2) {
        for (size_t lo = 0; lo < n && !rc; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi) {
                int cmp;
                if (jv_cmp(c, keys[j], keys[i], &cmp)) { rc = -1; break; }
                /* take from the right only when strictly before (stable); reversed: strictly after */
                int take_right = reverse ? cmp > 0 : cmp < 0;
                if (take_right) { tk[o] = keys[j]; ti[o++] = items[j++]; }
                else { tk[o] = keys[i]; ti[o++] = items[i++]; }
            }
            if (rc) break;
            while (i < mid) { tk[o] = keys[i]; ti[o++] = items[i++]; }
            while (j < hi) { tk[o] = keys[j]; ti[o++] = items[j++]; }
        }
        if (!rc) {
            memcpy(keys, tk, n * sizeof *tk);
            memcpy(items, ti, n * sizeof *ti);
        }
        if (jstep(c, n)) rc = -1;
    }
    free(tk);
    free(ti);
    return rc;
}

/* ---------------------------------------------------------------- filters */

enum {
    F_ABS, F_ATTR, F_BATCH, F_CAPITALIZE, F_CENTER, F_COUNT, F_D, F_DEFAULT, F_DICTSORT, F_E, F_ESCAPE, F_FIRST,
    F_FLOAT, F_FORCEESCAPE, F_FORMAT, F_GROUPBY, F_INDENT, F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP,
    F_MAX, F_MIN, F_REJECT, F_REJECTATTR, F_REPLACE, F_REVERSE, F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR, F_SLICE,
    F_SORT, F_STRING, F_SUM, F_TITLE, F_TOJSON, F_TRIM, F_TRUNCATE, F_UNIQUE, F_UPPER, F_WORDCOUNT, F_COUNT_
};

static const char *const filter_names[] = {
    [F_ABS] = "abs", [F_ATTR] = "attr", [F_BATCH] = "batch", [F_CAPITALIZE] = "capitalize", [F_CENTER] = "center",
    [F_COUNT] = "count", [F_D] = "d", [F_DEFAULT] = "default", [F_DICTSORT] = "dictsort", [F_E] = "e",
    [F_ESCAPE] = "escape", [F_FIRST] = "first", [F_FLOAT] = "float", [F_FORCEESCAPE] = "forceescape",
    [F_FORMAT] = "format", [F_GROUPBY] = "groupby", [F_INDENT] = "indent", [F_INT] = "int", [F_ITEMS] = "items", [F_JOIN] = "join",
    [F_LAST] = "last", [F_LENGTH] = "length", [F_LIST] = "list", [F_LOWER] = "lower", [F_MAP] = "map",
    [F_MAX] = "max", [F_MIN] = "min", [F_REJECT] = "reject", [F_REJECTATTR] = "rejectattr", [F_REPLACE] = "replace",
    [F_REVERSE] = "reverse", [F_ROUND] = "round", [F_SAFE] = "safe", [F_SELECT] = "select",
    [F_SELECTATTR] = "selectattr", [F_SLICE] = "slice", [F_SORT] = "sort", [F_STRING] = "string", [F_SUM] = "sum",
    [F_TITLE] = "title", [F_TOJSON] = "tojson", [F_TRIM] = "trim", [F_TRUNCATE] = "truncate", [F_UNIQUE] = "unique",
    [F_UPPER] = "upper", [F_WORDCOUNT] = "wordcount",
};

int jb_filter_id(const char *name) {
    for (int i = 0; i < F_COUNT_; i++)
        if (filter_names[i] && !strcmp(filter_names[i], name)) return i;
    return -1;
}

/* len() */
static jinja_value *do_length(jctx *c, jinja_value *v) {
    switch (v->t) {
    case JV_UNDEF: return mem(c, jv_int(c->a, 0));
    case JV_STR: return mem(c, jv_int(c->a, (int64_t)ju_len(v->u.s.p, v->u.s.n)));
    case JV_LIST:
        if (v->gen) break;
        return mem(c, jv_int(c->a, (int64_t)v->u.l.n));
    case JV_DICT: case JV_NS: return mem(c, jv_int(c->a, (int64_t)v->u.d.n));
    default: break;
    }
    return jfail(c, "object of type '%s' has no len()", jv_type_name(v));
}

static jinja_value *html_escape(jctx *c, jinja_value *v, int force) {
    jinja_value *s = jv_to_str(c, v);
    if (!s) return NULL;
    if (s->safe && !force) return s;
    jsb b = { .limit = c->lim.max_memory };
    for (size_t i = 0; i < s->u.s.n; i++) {
        char ch = s->u.s.p[i];
        switch (ch) {
        case '&': jsb_puts(&b, "&amp;"); break;
        case '<': jsb_puts(&b, "&lt;"); break;
        case '>': jsb_puts(&b, "&gt;"); break;
        case '"': jsb_puts(&b, "&#34;"); break;
        case '\'': jsb_puts(&b, "&#39;"); break;
        default: jsb_putc(&b, ch);
        }
    }
    jinja_value *r = sbv(c, &b);
    if (!r) return NULL;
    if (r == JV_EMPTY && !(r = jv_new(c->a, JV_STR))) return jmemfail(c);
    if (r->t == JV_STR && !r->u.s.p) { r->u.s.p = ""; r->u.s.n = 0; }
    r->safe = 1;
    return r;
}

jinja_value *jv_escape(jctx *c, jinja_value *v) { return html_escape(c, v, 0); }

/* a Markup copy of a string */
static jinja_value *mark_safe(jctx *c, jinja_value *v) {
    jinja_value *s = jv_to_str(c, v);
    if (!s || s->safe) return s;
    jinja_value *r = jv_new(c->a, JV_STR);
    if (!r) return jmemfail(c);
    r->u.s = s->u.s;
    r->safe = 1;
    return r;
}

/* select/reject/selectattr/rejectattr: items of seq whose (attribute's) test result is `want` */
static jinja_value *select_reject(jctx *c, jinja_value *seq, const jargs *args, int with_attr, int want) {
    if (!jv_truthy(seq)) return gen_list(c); /* jinja2: "if value: ..." */
    jinja_value *items = jr_iter(c, seq);
    if (!items) return NULL;
    int k = 0;
    jinja_value *attr = NULL;
    if (with_attr) {
        if (args->npos < 1) return jfail(c, "%sattr: an attribute name is required", want ? "select" : "reject");
        attr = args->pos[k++];
    }
    int test = -1;
    if (k < args->npos) {
        jinja_value *tn = args->pos[k++];
        if (tn->t != JV_STR) return jfail(c, "the test name must be a string");
        test = jb_test_id(tn->u.s.p);
        if (test < 0) return jfail(c, "no test named '%s'", tn->u.s.p);
    }
    jargs rest = { args->pos ? args->pos + k : NULL, args->npos - k, args->kwn, args->kwv, args->nkw };
    jinja_value *out = gen_list(c);
    if (!out) return NULL;
    for (size_t i = 0; i < items->u.l.n; i++) {
        if (jstep(c, 1)) return NULL;
        jinja_value *item = items->u.l.v[i], *x = item;
        if (attr && !(x = attr_path(c, item, attr))) return NULL;
        int r;
        if (test < 0) r = jv_truthy(x);
        else if ((r = jb_test(c, test, x, &rest)) < 0) return NULL;
        if (r == want && push(c, out, item)) return NULL;
    }
    return out;
}

static jinja_value *do_map(jctx *c, jinja_value *seq, const jargs *args) {
    if (!jv_truthy(seq)) return gen_list(c); /* jinja2: "if value: ..." */
    jinja_value *items = jr_iter(c, seq);
    if (!items) return NULL;
    jinja_value *out = gen_list(c);
    if (!out) return NULL;
    if (args->npos == 0) { /* map(attribute=..., default=...) */
        jinja_value *attr = NULL, *dflt = NULL;
        for (int k = 0; k < args->nkw; k++) {
            if (!strcmp(args->kwn[k], "attribute")) attr = args->kwv[k];
            else if (!strcmp(args->kwn[k], "default")) dflt = args->kwv[k];
            else return jfail(c, "map() got an unexpected keyword argument '%s'", args->kwn[k]);
        }
        if (!attr) return jfail(c, "map requires a filter argument");
        for (size_t i = 0; i < items->u.l.n; i++) {
            if (jstep(c, 1)) return NULL;
            jinja_value *x = attr_path(c, items->u.l.v[i], attr);
            if (!x) return NULL;
            if (x->t == JV_UNDEF && dflt) x = dflt;
            if (push(c, out, x)) return NULL;
        }
        return out;
    }
    jinja_value *fname = args->pos[0];
    if (fname->t != JV_STR) return jfail(c, "map: the filter name must be a string");
    int id = jb_filter_id(fname->u.s.p);
    if (id < 0) return jfail(c, "no filter named '%s'", fname->u.s.p);
    jargs rest = { args->pos + 1, args->npos - 1, args->kwn, args->kwv, args->nkw };
    for (size_t i = 0; i < items->u.l.n; i++) {
        if (jstep(c, 1)) return NULL;
        if (push(c, out, jb_filter(c, id, items->u.l.v[i], &rest))) return NULL;
    }
    return out;
}

/* min/max/sort/unique key helpers: the item's attribute (comma-separated list for sort) */
static jinja_value *item_key(jctx *c, jinja_value *item, jinja_value *attr, int ci) {
    jinja_value *x = item;
    if (attr && attr->t != JV_NONE) {
        if (attr->t == JV_STR && memchr(attr->u.s.p, ',', attr->u.s.n)) { /* "a,b": a tuple of keys */
            jinja_value *t = jv_list(c->a, 0);
            if (!t) return jmemfail(c);
            t->tuple = 1;
            const char *s = attr->u.s.p;
            size_t n = attr->u.s.n, i = 0;
            while (i <= n) {
                size_t st = i;
                while (i < n && s[i] != ',') i++;
                jinja_value *part = jv_str(c->a, s + st, i - st), *k;
                if (!part) return jmemfail(c);
                part = str_strip(c, part, NULL, 3);
                if (!part || !(k = attr_path(c, item, part)) || !(k = sort_key(c, k, ci)) || push(c, t, k)) return NULL;
                i++;
            }
            return t;
        }
        if (!(x = attr_path(c, item, attr))) return NULL;
    }
    return sort_key(c, x, ci);
}

static jinja_value *do_minmax(jctx *c, jinja_value *seq, const jargs *args, int want_max) {
    BIND(want_max ? "max" : "min", "case_sensitive", "attribute");
    int ci = !(p[0] && jv_truthy(p[0]));
    jinja_value *items = jr_iter(c, seq);
    if (!items) return NULL;
    if (!items->u.l.n) return mem(c, jv_undef(c->a, "No aggregated item, sequence was empty."));
    jinja_value *best = items->u.l.v[0], *bk = item_key(c, best, p[1], ci);
    if (!bk) return NULL;
    for (size_t i = 1; i < items->u.l.n; i++) {
        jinja_value *k = item_key(c, items->u.l.v[i], p[1], ci);
        int cmp;
        if (!k || jv_cmp(c, k, bk, &cmp)) return NULL;
        if (want_max ? cmp > 0 : cmp < 0) { best = items->u.l.v[i]; bk = k; }
    }
    return best;
}

static jinja_value *do_round(jctx *c, jinja_value *v, const jargs *args) {
    BIND("round", "precision", "method");
    int64_t prec = 0;
    if (p[0] && want_int(c, "round", p[0], &prec)) return NULL;
    const char *method = p[1] && p[1]->t == JV_STR ? p[1]->u.s.p : "common";
    if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
        return jfail(c, "method must be common, ceil or floor");
    if (!jv_is_num(v)) return jfail(c, "round: a number is required, not %s", jv_type_name(v));
    if (!strcmp(method, "common")) {
        if (v->t != JV_FLOAT) return prec >= 0 ? mem(c, jv_int(c->a, v->t == JV_BOOL ? v->u.b : v->u.i)) : jfail(c, "round of an int to negative digits is not supported");
        if (prec < 0 || prec > 300) return jfail(c, "round: precision %lld is not supported", (long long)prec);
        /* Python rounds the exact binary value half to even, as printf does */
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", (int)prec, v->u.f);
        return mem(c, jv_float(c->a, strtod(buf, NULL)));
    }
    double x = jv_num(v), m = pow(10, (double)prec);
    double r = (!strcmp(method, "ceil") ? ceil(x * m) : floor(x * m)) / m;
    return mem(c, jv_float(c->a, r));
}

static jinja_value *do_int(jctx *c, jinja_value *v, const jargs *args) {
    BIND("int", "default", "base");
    jinja_value *dflt = p[0] ? p[0] : jv_int(c->a, 0);
    int64_t base = 10;
    if (p[1] && want_int(c, "int", p[1], &base)) return NULL;
    if (!dflt) return jmemfail(c);
    switch (v->t) {
    case JV_INT: return v;
    case JV_BOOL: return mem(c, jv_int(c->a, v->u.b));
    case JV_FLOAT:
        if (!isfinite(v->u.f)) return jfail(c, "cannot convert float %s to integer", isnan(v->u.f) ? "NaN" : "infinity");
        if (fabs(v->u.f) >= 9.2e18) return jfail(c, "integer overflow");
        return mem(c, jv_int(c->a, (int64_t)v->u.f));
    case JV_STR: {
        /* int(s, base), else int(float(s)) */
        char buf[128];
        jinja_value *t = str_strip(c, v, NULL, 3);
        if (!t) return NULL;
        if (t->u.s.n == 0 || t->u.s.n >= sizeof buf) return dflt;
        size_t o = 0;
        for (size_t i = 0; i < t->u.s.n; i++) {
            if (t->u.s.p[i] == '_') { /* between digits only */
                if (i == 0 || i + 1 == t->u.s.n || !((unsigned char)t->u.s.p[i - 1] < 0x80 && ((t->u.s.p[i - 1] | 0x20) >= 'a' || (t->u.s.p[i - 1] >= '0' && t->u.s.p[i - 1] <= '9'))))
                    return dflt;
                continue;
            }
            buf[o++] = t->u.s.p[i];
        }
        buf[o] = 0;
        char *end;
        errno = 0;
        long long x = strtoll(buf, &end, (int)base);
        if (*end == 0 && end != buf && errno == 0) {
            if (base == 10 && (buf[0] == '0' || ((buf[0] == '-' || buf[0] == '+') && buf[1] == '0'))) {
                /* Python refuses leading zeros in base 10 except "0", "00" */
                for (const char *q = buf + (buf[0] == '-' || buf[0] == '+'); *q; q++)
                    if (*q != '0') goto as_float;
            }
            return mem(c, jv_int(c->a, x));
        }
    as_float:;
        double f = strtod(buf, &end);
        if (*end == 0 && end != buf && isfinite(f) && fabs(f) < 9.2e18) {
            for (const char *q = buf; *q; q++)
                if (*q == 'x' || *q == 'X' || *q == 'p' || *q == 'P') return dflt; /* C's hex floats */
            return mem(c, jv_int(c->a, (int64_t)f));
        }
        return dflt;
    }
    default: return dflt;
    }
}

static jinja_value *do_float(jctx *c, jinja_value *v, const jargs *args) {
    BIND("float", "default");
    jinja_value *dflt = p[0] ? p[0] : jv_float(c->a, 0.0);
    if (!dflt) return jmemfail(c);
    if (jv_is_num(v)) return mem(c, jv_float(c->a, jv_num(v)));
    if (v->t == JV_STR) {
        jinja_value *t = str_strip(c, v, NULL, 3);
        if (!t) return NULL;
        char buf[128];
        if (t->u.s.n == 0 || t->u.s.n >= sizeof buf) return dflt;
        memcpy(buf, t->u.s.p, t->u.s.n);
        buf[t->u.s.n] = 0;
        for (char *q = buf; *q; q++)
            if (*q == 'x' || *q == 'X' || *q == 'p' || *q == 'P' || *q == '_') return dflt;
        char *end;
        double f = strtod(buf, &end);
        if (*end == 0 && end != buf) return mem(c, jv_float(c->a, f));
    }
    return dflt;
}

static jinja_value *do_indent(jctx *c, jinja_value *v, const jargs *args) {
    BIND("indent", "width", "first", "blank");
    jinja_value *s = jv_to_str(c, v);
    if (!s) return NULL;
    jsb ind = { 0 };
    if (p[0] && p[0]->t == JV_STR) jsb_put(&ind, p[0]->u.s.p, p[0]->u.s.n);
    else {
        int64_t w = 4;
        if (p[0] && want_int(c, "indent", p[0], &w)) return NULL;
        if (w > 10000) return jfail(c, "indent width too large");
        for (int64_t i = 0; i < w; i++) jsb_putc(&ind, ' ');
    }
    if (!ind.p) jsb_put(&ind, "", 0);
    int first = p[1] && jv_truthy(p[1]), blank = p[2] && jv_truthy(p[2]);
    /* s += "\n"; lines = s.splitlines() */
    jsb tmp = { .limit = c->lim.max_memory };
    jsb_put(&tmp, s->u.s.p, s->u.s.n);
    jsb_putc(&tmp, '\n');
    jinja_value *sn = sbv(c, &tmp);
    jinja_value *lines = sn ? str_splitlines(c, sn, 0) : NULL;
    if (!lines) { free(ind.p); return NULL; }
    jsb b = { .limit = c->lim.max_memory };
    if (first) jsb_put(&b, ind.p, ind.n);
    for (size_t i = 0; i < lines->u.l.n; i++) {
        jinja_value *ln = lines->u.l.v[i];
        if (i) {
            jsb_putc(&b, '\n');
            if (blank || ln->u.s.n) jsb_put(&b, ind.p, ind.n);
        }
        jsb_put(&b, ln->u.s.p, ln->u.s.n);
    }
    free(ind.p);
    return sbv(c, &b);
}

static jinja_value *do_join(jctx *c, jinja_value *v, const jargs *args) {
    BIND("join", "d", "attribute");
    if (p[0] && want_str(c, "join", p[0])) return NULL;
    jinja_value *items = jr_iter(c, v);
    if (!items) return NULL;
    jsb b = { .limit = c->lim.max_memory };
    for (size_t i = 0; i < items->u.l.n; i++) {
        if (jstep(c, 1)) { free(b.p); return NULL; }
        jinja_value *x = items->u.l.v[i];
        if (p[1] && p[1]->t != JV_NONE && !(x = attr_path(c, x, p[1]))) { free(b.p); return NULL; }
        if (i && p[0]) jsb_put(&b, p[0]->u.s.p, p[0]->u.s.n);
        if (jv_str_to(c, x, &b)) { free(b.p); return NULL; }
    }
    return sbv(c, &b);
}

static jinja_value *do_tojson(jctx *c, jinja_value *v, const jargs *args) {
    BIND("tojson", "ensure_ascii", "indent", "separators", "sort_keys");
    jsb ind = { 0 };
    const char *indent = NULL;
    if (p[1] && p[1]->t != JV_NONE) {
        if (p[1]->t == JV_STR) jsb_put(&ind, p[1]->u.s.p, p[1]->u.s.n);
        else {
            int64_t w;
            if (want_int(c, "tojson indent", p[1], &w)) return NULL;
            if (w > 1000) return jfail(c, "tojson: indent too large");
            for (int64_t i = 0; i < w; i++) jsb_putc(&ind, ' ');
        }
        if (!ind.p) jsb_put(&ind, "", 0);
        indent = ind.p;
    }
    const char *item_sep = indent ? "," : ", ", *key_sep = ": ";
    if (p[2] && p[2]->t != JV_NONE) {
        if (p[2]->t != JV_LIST || p[2]->gen || p[2]->u.l.n != 2 || p[2]->u.l.v[0]->t != JV_STR || p[2]->u.l.v[1]->t != JV_STR) {
            free(ind.p);
            return jfail(c, "tojson: separators must be a pair of strings");
        }
        item_sep = p[2]->u.l.v[0]->u.s.p;
        key_sep = p[2]->u.l.v[1]->u.s.p;
    }
    jsb b = { .limit = c->lim.max_memory };
    int rc = jv_json_to(c, v, &b, indent, item_sep, key_sep, p[3] && jv_truthy(p[3]));
    free(ind.p);
    if (rc) { free(b.p); return NULL; }
    if (p[0] && jv_truthy(p[0])) { /* ensure_ascii: \uXXXX for everything past ASCII */
        jsb a = { .limit = c->lim.max_memory };
        size_t i = 0;
        while (i < b.n) {
            size_t st = i;
            uint32_t cp = ju_next(b.p, b.n, &i);
            if (cp < 0x80) jsb_put(&a, b.p + st, i - st);
            else if (cp < 0x10000) jsb_printf(&a, "\\u%04x", cp);
            else {
                cp -= 0x10000;
                jsb_printf(&a, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            }
        }
        free(b.p);
        return sbv(c, &a);
    }
    return sbv(c, &b);
}

static jinja_value *do_truncate(jctx *c, jinja_value *v, const jargs *args) {
    BIND("truncate", "length", "killwords", "end", "leeway");
    jinja_value *s = jv_to_str(c, v);
    if (!s) return NULL;
    int64_t length = 255, leeway = 5;
    if (p[0] && want_int(c, "truncate", p[0], &length)) return NULL;
    if (p[3] && p[3]->t != JV_NONE && want_int(c, "truncate", p[3], &leeway)) return NULL;
    jinja_value *end = p[2] ? p[2] : NULL;
    if (end && want_str(c, "truncate", end)) return NULL;
    size_t el = end ? ju_len(end->u.s.p, end->u.s.n) : 3;
    if (length < (int64_t)el) return jfail(c, "expected length >= %zu, got %lld", el, (long long)length);
    if (leeway < 0) return jfail(c, "expected leeway >= 0, got %lld", (long long)leeway);
    size_t len = ju_len(s->u.s.p, s->u.s.n);
    if ((int64_t)len <= length + leeway) return s;
    size_t cut = ju_offset(s->u.s.p, s->u.s.n, (size_t)(length - (int64_t)el));
    jsb b = { .limit = c->lim.max_memory };
    if (p[1] && jv_truthy(p[1])) {
        jsb_put(&b, s->u.s.p, cut);
    } else { /* result = s[: length - len(end)].rsplit(" ", 1)[0] */
        size_t k = cut;
        while (k > 0 && s->u.s.p[k - 1] != ' ') k--;
        jsb_put(&b, s->u.s.p, k ? k - 1 : cut);
    }
    if (end) jsb_put(&b, end->u.s.p, end->u.s.n);
    else jsb_puts(&b, "...");
    return sbv(c, &b);
}

static jinja_value *do_sum(jctx *c, jinja_value *v, const jargs *args) {
    BIND("sum", "attribute", "start");
    jinja_value *items = jr_iter(c, v);
    if (!items) return NULL;
    jinja_value *acc = p[1] ? p[1] : jv_int(c->a, 0);
    if (!acc) return jmemfail(c);
    for (size_t i = 0; i < items->u.l.n; i++) {
        jinja_value *x = items->u.l.v[i];
        if (p[0] && p[0]->t != JV_NONE && !(x = attr_path(c, x, p[0]))) return NULL;
        if (!jv_is_num(acc) || !jv_is_num(x)) return jfail(c, "sum: unsupported operand type(s) for +: '%s' and '%s'", jv_type_name(acc), jv_type_name(x));
        if (acc->t == JV_FLOAT || x->t == JV_FLOAT) acc = jv_float(c->a, jv_num(acc) + jv_num(x));
        else {
            int64_t r, a = acc->t == JV_BOOL ? acc->u.b : acc->u.i, b = x->t == JV_BOOL ? x->u.b : x->u.i;
            if (__builtin_add_overflow(a, b, &r)) return jfail(c, "integer overflow");
            acc = jv_int(c->a, r);
        }
        if (!acc) return jmemfail(c);
    }
    return acc;
}

static jinja_value *do_sort(jctx *c, jinja_value *v, const jargs *args) {
    BIND("sort", "reverse", "case_sensitive", "attribute");
    int ci = !(p[1] && jv_truthy(p[1]));
    jinja_value *items = jr_iter(c, v);
    if (!items) return NULL;
    size_t n = items->u.l.n;
    jinja_value *out = jv_list(c->a, n);
    if (!out) return jmemfail(c);
    jinja_value **keys = malloc((n ? n : 1) * sizeof *keys);
    if (!keys) return jfail(c, "out of memory");
    for (size_t i = 0; i < n; i++) {
        out->u.l.v[i] = items->u.l.v[i];
        if (!(keys[i] = item_key(c, items->u.l.v[i], p[2], ci))) { free(keys); return NULL; }
    }
    out->u.l.n = n;
    int rc = merge_sort(c, keys, out->u.l.v, n, p[0] && jv_truthy(p[0]));
    free(keys);
    return rc ? NULL : out;
}

static jinja_value *do_dictsort(jctx *c, jinja_value *v, const jargs *args) {
    BIND("dictsort", "case_sensitive", "by", "reverse");
    int ci = !(p[0] && jv_truthy(p[0]));
    int by_value = 0;
    if (p[1]) {
        if (p[1]->t == JV_STR && !strcmp(p[1]->u.s.p, "value")) by_value = 1;
        else if (!(p[1]->t == JV_STR && !strcmp(p[1]->u.s.p, "key"))) return jfail(c, "You can only sort by either \"key\" or \"value\"");
    }
    if (v->t != JV_DICT) return jfail(c, "dictsort: a mapping is required, not %s", jv_type_name(v));
    size_t n = v->u.d.n;
    jinja_value *out = jv_list(c->a, n);
    jinja_value **keys = malloc((n ? n : 1) * sizeof *keys);
    if (!out || !keys) { free(keys); return jfail(c, "out of memory"); }
    for (size_t i = 0; i < n; i++) {
        jinja_value *t = tuple2(c, v->u.d.kv[i].k, v->u.d.kv[i].v);
        if (!t || !(keys[i] = sort_key(c, by_value ? v->u.d.kv[i].v : v->u.d.kv[i].k, ci))) { free(keys); return NULL; }
        out->u.l.v[i] = t;
    }
    out->u.l.n = n;
    int rc = merge_sort(c, keys, out->u.l.v, n, p[2] && jv_truthy(p[2]));
    free(keys);
    return rc ? NULL : out;
}

static jinja_value *do_unique(jctx *c, jinja_value *v, const jargs *args) {
    BIND("unique", "case_sensitive", "attribute");
    int ci = !(p[0] && jv_truthy(p[0]));
    jinja_value *items = jr_iter(c, v);
    if (!items) return NULL;
    jinja_value *out = gen_list(c), *seen = jv_list(c->a, 0);
    if (!out || !seen) return jmemfail(c);
    for (size_t i = 0; i < items->u.l.n; i++) {
        jinja_value *k = item_key(c, items->u.l.v[i], p[1], ci);
        if (!k || jstep(c, seen->u.l.n + 1)) return NULL;
        int dup = 0;
        for (size_t j = 0; j < seen->u.l.n && !dup; j++) {
            int e = jv_eq(c, seen->u.l.v[j], k);
            if (e < 0) return NULL;
            dup = e;
        }
        if (!dup && (push(c, seen, k) || push(c, out, items->u.l.v[i]))) return NULL;
    }
    return out;
}

/* groupby(attribute, default=None, case_sensitive=False): the items sorted by the
 * attribute (lower-cased strings unless case_sensitive), runs of equal keys as
 * (grouper, list) tuples whose grouper is the first item's own attribute. */
static jinja_value *do_groupby(jctx *c, jinja_value *v, const jargs *args) {
    BIND("groupby", "attribute", "default", "case_sensitive");
    if (!p[0]) return jfail(c, "groupby() missing required argument 'attribute'");
    int ci = !(p[2] && jv_truthy(p[2]));
    jinja_value *items = jr_iter(c, v);
    if (!items) return NULL;
    size_t n = items->u.l.n;
    jinja_value **keys = malloc((n ? n : 1) * sizeof *keys), **sorted = malloc((n ? n : 1) * sizeof *sorted);
    jinja_value *out = jv_list(c->a, 0);
    if (!keys || !sorted || !out) { free(keys); free(sorted); return out ? jfail(c, "out of memory") : jmemfail(c); }
    for (size_t i = 0; i < n; i++) {
        jinja_value *k = attr_path(c, items->u.l.v[i], p[0]);
        if (k && k->t == JV_UNDEF && p[1] && p[1]->t != JV_NONE) k = p[1];
        if (!k || !(keys[i] = sort_key(c, k, ci))) { free(keys); free(sorted); return NULL; }
        sorted[i] = items->u.l.v[i];
    }
    int rc = merge_sort(c, keys, sorted, n, 0);
    jinja_value *group = NULL;
    for (size_t i = 0; i < n && !rc; i++) {
        int same = 0;
        if (i && (same = jv_eq(c, keys[i - 1], keys[i])) < 0) { rc = -1; break; }
        if (!same) {
            jinja_value *grouper = keys[i];
            if (ci) { /* the first item's attribute as it is */
                grouper = attr_path(c, sorted[i], p[0]);
                if (grouper && grouper->t == JV_UNDEF && p[1] && p[1]->t != JV_NONE) grouper = p[1];
            }
            group = grouper ? jv_list(c->a, 0) : NULL;
            jinja_value *t = group ? tuple2(c, grouper, group) : NULL;
            if (!t || push(c, out, t)) { rc = -1; break; }
            t->tuple = 2;
        }
        if (push(c, group, sorted[i])) rc = -1;
    }
    free(keys);
    free(sorted);
    return rc ? (c->failed ? NULL : jmemfail(c)) : out;
}

static jinja_value *do_batch(jctx *c, jinja_value *v, const jargs *args) {
    BIND("batch", "linecount", "fill_with");
    int64_t n;
    if (!p[0]) return jfail(c, "batch() missing required argument 'linecount'");
    if (want_int(c, "batch", p[0], &n)) return NULL;
    if (n <= 0) return jfail(c, "batch: linecount must be positive");
    jinja_value *items = jr_iter(c, v);
    if (!items) return NULL;
    jinja_value *out = gen_list(c), *cur = NULL;
    if (!out) return NULL;
    for (size_t i = 0; i < items->u.l.n; i++) {
        if (!cur && !(cur = jv_list(c->a, 0))) return jmemfail(c);
        if (push(c, cur, items->u.l.v[i])) return NULL;
        if ((int64_t)cur->u.l.n == n) {
            if (push(c, out, cur)) return NULL;
            cur = NULL;
        }
    }
    if (cur) {
        if (p[1]) while ((int64_t)cur->u.l.n < n) if (push(c, cur, p[1])) return NULL;
        if (push(c, out, cur)) return NULL;
    }
    return out;
}

static jinja_value *do_slice(jctx *c, jinja_value *v, const jargs *args) {
    BIND("slice", "slices", "fill_with");
    int64_t slices;
    if (!p[0]) return jfail(c, "slice() missing required argument 'slices'");
    if (want_int(c, "slice", p[0], &slices)) return NULL;
    if (slices <= 0 || slices > 100000) return jfail(c, "slice: slices must be in [1, 100000]");
    jinja_value *items = jr_iter(c, v);
    if (!items) return NULL;
    int64_t length = (int64_t)items->u.l.n, per = length / slices, extra = length % slices, offset = 0;
    jinja_value *out = gen_list(c);
    if (!out) return NULL;
    for (int64_t s = 0; s < slices; s++) {
        int64_t start = offset + s * per;
        if (s < extra) offset++;
        int64_t end = offset + (s + 1) * per;
        jinja_value *t = jv_list(c->a, 0);
        if (!t) return jmemfail(c);
        for (int64_t k = start; k < end; k++) if (push(c, t, items->u.l.v[k])) return NULL;
        if (p[1] && s >= extra) if (push(c, t, p[1])) return NULL;
        if (push(c, out, t)) return NULL;
    }
    return out;
}

jinja_value *jb_filter(jctx *c, int id, jinja_value *v, const jargs *args) {
    const char *fname = id >= 0 && id < F_COUNT_ ? filter_names[id] : "?";
    jinja_value *s;
    switch (id) {
    case F_ABS:
        NO_ARGS(fname);
        if (v->t == JV_INT) return v->u.i == INT64_MIN ? jfail(c, "integer overflow") : mem(c, jv_int(c->a, v->u.i < 0 ? -v->u.i : v->u.i));
        if (v->t == JV_BOOL) return mem(c, jv_int(c->a, v->u.b));
        if (v->t == JV_FLOAT) return mem(c, jv_float(c->a, fabs(v->u.f)));
        return jfail(c, "bad operand type for abs(): '%s'", jv_type_name(v));
    case F_ATTR: {
        BIND(fname, "name");
        if (!p[0] || want_str(c, "attr", p[0])) return p[0] ? NULL : jfail(c, "attr() missing argument 'name'");
        int unsafe = 0;
        if (v->t == JV_UNDEF) return jfail(c, "%s", v->u.hint ? v->u.hint : "undefined");
        jinja_value *m = jb_method(c, v, p[0]->u.s.p, p[0]->u.s.n, &unsafe);
        if (m || c->failed) return m;
        if (v->t == JV_NS) {
            jinja_value *x = jv_dict_get_s(v, p[0]->u.s.p, p[0]->u.s.n);
            if (x) return x;
        }
        return mem(c, jv_undef(c->a, "'%s object' has no attribute '%s'", jv_type_name(v), p[0]->u.s.p));
    }
    case F_BATCH: return do_batch(c, v, args);
    case F_CAPITALIZE:
        NO_ARGS(fname);
        return (s = jv_to_str(c, v)) ? str_capitalize(c, s) : NULL;
    case F_CENTER: {
        BIND(fname, "width");
        int64_t w = 80;
        if (p[0] && want_int(c, "center", p[0], &w)) return NULL;
        if (!(s = jv_to_str(c, v))) return NULL;
        int64_t len = (int64_t)ju_len(s->u.s.p, s->u.s.n);
        if (w > 100000) return jfail(c, "center width too large");
        if (w <= len) return s;
        /* Python's str.center: left = pad/2 + (pad & w & 1) */
        int64_t pad = w - len, left = pad / 2 + (pad & w & 1);
        jsb b = { .limit = c->lim.max_memory };
        for (int64_t i = 0; i < left; i++) jsb_putc(&b, ' ');
        jsb_put(&b, s->u.s.p, s->u.s.n);
        for (int64_t i = 0; i < pad - left; i++) jsb_putc(&b, ' ');
        return sbv(c, &b);
    }
    case F_COUNT: case F_LENGTH: NO_ARGS(fname); return do_length(c, v);
    case F_D: case F_DEFAULT: {
        BIND(fname, "default_value", "boolean");
        jinja_value *d = p[0] ? p[0] : JV_EMPTY;
        if (v->t == JV_UNDEF || (p[1] && jv_truthy(p[1]) && !jv_truthy(v))) return d;
        return v;
    }
    case F_DICTSORT: return do_dictsort(c, v, args);
    case F_GROUPBY: return do_groupby(c, v, args);
    case F_E: case F_ESCAPE: case F_FORCEESCAPE: NO_ARGS(fname); return html_escape(c, v, id == F_FORCEESCAPE);
    case F_FIRST: {
        NO_ARGS(fname);
        jinja_value *items = jr_iter(c, v);
        if (!items) return NULL;
        return items->u.l.n ? items->u.l.v[0] : mem(c, jv_undef(c->a, "No first item, sequence was empty."));
    }
    case F_FLOAT: return do_float(c, v, args);
    case F_FORMAT: {
        if (!(s = jv_to_str(c, v))) return NULL;
        jinja_value *fa;
        if (args->nkw) {
            if (args->npos) return jfail(c, "can't handle positional and keyword arguments at the same time");
            if (!(fa = jv_dict(c->a))) return jmemfail(c);
            for (int k = 0; k < args->nkw; k++) {
                jinja_value *key = jv_str(c->a, args->kwn[k], strlen(args->kwn[k]));
                if (!key || jv_dict_set(c->a, fa, key, args->kwv[k])) return jmemfail(c);
            }
        } else {
            if (!(fa = jv_list(c->a, (size_t)args->npos))) return jmemfail(c);
            fa->tuple = 1;
            for (int k = 0; k < args->npos; k++) jv_push(c->a, fa, args->pos[k]);
        }
        jsb b = { .limit = c->lim.max_memory }; /* value % args */
        if (jr_percent_format(c, s, fa, &b)) { free(b.p); return NULL; }
        return sbv(c, &b);
    }
    case F_INDENT: return do_indent(c, v, args);
    case F_INT: return do_int(c, v, args);
    case F_ITEMS: {
        NO_ARGS(fname);
        jinja_value *out = gen_list(c);
        if (!out) return NULL;
        if (v->t == JV_UNDEF) return out;
        if (v->t != JV_DICT) return jfail(c, "Can only get item pairs from a mapping.");
        for (size_t i = 0; i < v->u.d.n; i++)
            if (push(c, out, tuple2(c, v->u.d.kv[i].k, v->u.d.kv[i].v))) return NULL;
        return out;
    }
    case F_JOIN: return do_join(c, v, args);
    case F_LAST: {
        NO_ARGS(fname);
        if (v->t == JV_LIST && v->gen) return jfail(c, "'generator' object is not reversible");
        jinja_value *items = jr_iter(c, v);
        if (!items) return NULL;
        return items->u.l.n ? items->u.l.v[items->u.l.n - 1] : mem(c, jv_undef(c->a, "No last item, sequence was empty."));
    }
    case F_LIST: {
        NO_ARGS(fname);
        jinja_value *items = jr_iter(c, v);
        if (!items) return NULL;
        if (items != v && !items->tuple) return items; /* a fresh list already */
        jinja_value *l = jv_list(c->a, items->u.l.n);
        if (!l) return jmemfail(c);
        for (size_t i = 0; i < items->u.l.n; i++) jv_push(c->a, l, items->u.l.v[i]);
        return l;
    }
    case F_LOWER: NO_ARGS(fname); return (s = jv_to_str(c, v)) ? str_map(c, s, ju_lower) : NULL;
    case F_UPPER: NO_ARGS(fname); return (s = jv_to_str(c, v)) ? str_map(c, s, ju_upper) : NULL;
    case F_MAP: return do_map(c, v, args);
    case F_MAX: return do_minmax(c, v, args, 1);
    case F_MIN: return do_minmax(c, v, args, 0);
    case F_REJECT: return select_reject(c, v, args, 0, 0);
    case F_REJECTATTR: return select_reject(c, v, args, 1, 0);
    case F_SELECT: return select_reject(c, v, args, 0, 1);
    case F_SELECTATTR: return select_reject(c, v, args, 1, 1);
    case F_REPLACE: {
        BIND(fname, "old", "new", "count");
        if (!p[0] || !p[1]) return jfail(c, "replace() needs old and new");
        jinja_value *o = jv_to_str(c, p[0]), *nw = o ? jv_to_str(c, p[1]) : NULL;
        int64_t cnt = -1;
        if (!nw || (p[2] && p[2]->t != JV_NONE && want_int(c, "replace", p[2], &cnt))) return NULL;
        if (!(s = jv_to_str(c, v))) return NULL;
        return str_replace(c, s, o, nw, cnt);
    }
    case F_REVERSE: {
        NO_ARGS(fname);
        if (v->t == JV_STR) {
            jsb b = { .limit = c->lim.max_memory };
            size_t e = v->u.s.n;
            while (e > 0) {
                size_t st = e - 1;
                while (st > 0 && ((unsigned char)v->u.s.p[st] & 0xc0) == 0x80) st--;
                jsb_put(&b, v->u.s.p + st, e - st);
                e = st;
            }
            return sbv(c, &b);
        }
        if (v->t == JV_LIST && v->gen) return jfail(c, "argument to reversed() must be a sequence");
        jinja_value *items = jr_iter(c, v);
        if (!items) return NULL;
        jinja_value *out = gen_list(c);
        if (!out) return NULL;
        for (size_t i = items->u.l.n; i > 0; i--) if (push(c, out, items->u.l.v[i - 1])) return NULL;
        return out;
    }
    case F_ROUND: return do_round(c, v, args);
    case F_SAFE: NO_ARGS(fname); return mark_safe(c, v);
    case F_SLICE: return do_slice(c, v, args);
    case F_SORT: return do_sort(c, v, args);
    case F_STRING: NO_ARGS(fname); return jv_to_str(c, v);
    case F_SUM: return do_sum(c, v, args);
    case F_TITLE: {
        /* jinja2's: words split at [-\s({\[<]+, each item[0].upper() + item[1:].lower() */
        NO_ARGS(fname);
        if (!(s = jv_to_str(c, v))) return NULL;
        jsb b = { .limit = c->lim.max_memory };
        size_t i = 0;
        int at_start = 1;
        while (i < s->u.s.n) {
            size_t st = i;
            uint32_t cp = ju_next(s->u.s.p, s->u.s.n, &i);
            int sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || ju_isspace(cp);
            if (sep) { jsb_put(&b, s->u.s.p + st, i - st); at_start = 1; continue; }
            jsb_put_cp(&b, at_start ? ju_upper(cp) : ju_lower(cp));
            at_start = 0;
        }
        return sbv(c, &b);
    }
    case F_TOJSON: return do_tojson(c, v, args);
    case F_TRIM: {
        BIND(fname, "chars");
        return (s = jv_to_str(c, v)) ? str_strip(c, s, p[0], 3) : NULL;
    }
    case F_TRUNCATE: return do_truncate(c, v, args);
    case F_UNIQUE: return do_unique(c, v, args);
    case F_WORDCOUNT: {
        NO_ARGS(fname);
        if (!(s = jv_to_str(c, v))) return NULL;
        int64_t words = 0;
        int in = 0;
        size_t i = 0;
        while (i < s->u.s.n) {
            uint32_t cp = ju_next(s->u.s.p, s->u.s.n, &i);
            int w = cp == '_' || ju_isdigit(cp) || ju_isalpha(cp);
            if (w && !in) words++;
            in = w;
        }
        return mem(c, jv_int(c->a, words));
    }
    }
    return jfail(c, "internal error: filter %d", id);
}

/* ---------------------------------------------------------------- tests */

enum {
    T_BOOLEAN, T_CALLABLE, T_DEFINED, T_DIVISIBLEBY, T_EQ, T_EQUALTO, T_EQEQ, T_ESCAPED, T_EVEN, T_FALSE, T_FILTER,
    T_FLOAT, T_GE, T_GEQ, T_GT, T_GREATERTHAN, T_GTS, T_IN, T_INTEGER, T_ITERABLE, T_LE, T_LEQ, T_LOWER, T_LT,
    T_LESSTHAN, T_LTS, T_MAPPING, T_NE, T_NEQ, T_NONE, T_NUMBER, T_ODD, T_SAMEAS, T_SEQUENCE, T_STRING, T_TEST,
    T_TRUE, T_UNDEFINED, T_UPPER, T_COUNT_
};

static const char *const test_names[] = {
    [T_BOOLEAN] = "boolean", [T_CALLABLE] = "callable", [T_DEFINED] = "defined", [T_DIVISIBLEBY] = "divisibleby",
    [T_EQ] = "eq", [T_EQUALTO] = "equalto", [T_EQEQ] = "==", [T_ESCAPED] = "escaped", [T_EVEN] = "even",
    [T_FALSE] = "false", [T_FILTER] = "filter", [T_FLOAT] = "float", [T_GE] = "ge", [T_GEQ] = ">=", [T_GT] = "gt",
    [T_GREATERTHAN] = "greaterthan", [T_GTS] = ">", [T_IN] = "in", [T_INTEGER] = "integer",
    [T_ITERABLE] = "iterable", [T_LE] = "le", [T_LEQ] = "<=", [T_LOWER] = "lower", [T_LT] = "lt",
    [T_LESSTHAN] = "lessthan", [T_LTS] = "<", [T_MAPPING] = "mapping", [T_NE] = "ne", [T_NEQ] = "!=",
    [T_NONE] = "none", [T_NUMBER] = "number", [T_ODD] = "odd", [T_SAMEAS] = "sameas", [T_SEQUENCE] = "sequence",
    [T_STRING] = "string", [T_TEST] = "test", [T_TRUE] = "true", [T_UNDEFINED] = "undefined", [T_UPPER] = "upper",
};

int jb_test_id(const char *name) {
    for (int i = 0; i < T_COUNT_; i++)
        if (test_names[i] && !strcmp(test_names[i], name)) return i;
    return -1;
}

static int one_arg(jctx *c, const char *name, const jargs *args, jinja_value **out) {
    if (args->npos + args->nkw != 1) {
        jfail(c, "the test '%s' takes one argument (%d given)", name, args->npos + args->nkw);
        return -1;
    }
    *out = args->npos ? args->pos[0] : args->kwv[0];
    return 0;
}

/* str.islower()/isupper(): a cased character and no cased one of the other case */
static int str_case_is(const jinja_value *s, int upper) {
    int cased = 0;
    size_t i = 0;
    while (i < s->u.s.n) {
        uint32_t cp = ju_next(s->u.s.p, s->u.s.n, &i);
        if (!is_cased(cp)) continue;
        if (upper ? ju_upper(cp) != cp : ju_lower(cp) != cp) return 0;
        cased = 1;
    }
    return cased;
}

static int int_mod(jctx *c, jinja_value *v, jinja_value *d, int *out) {
    if (v->t == JV_UNDEF) { jfail(c, "%s", v->u.hint ? v->u.hint : "undefined"); return -1; }
    if (!jv_is_num(v) || !jv_is_num(d)) { jfail(c, "unsupported operand type(s) for %%: '%s' and '%s'", jv_type_name(v), jv_type_name(d)); return -1; }
    if (jv_num(d) == 0) { jfail(c, "integer division or modulo by zero"); return -1; }
    if (v->t != JV_FLOAT && d->t != JV_FLOAT) {
        int64_t a = v->t == JV_BOOL ? v->u.b : v->u.i, b = d->t == JV_BOOL ? d->u.b : d->u.i;
        int64_t r = b == -1 ? 0 : a % b;
        if (r != 0 && ((r < 0) != (b < 0))) r += b;
        *out = (int)(r != 0 ? (r == 1 ? 1 : 2) : 0);
        return 0;
    }
    double m = fmod(jv_num(v), jv_num(d));
    if (m != 0 && ((m < 0) != (jv_num(d) < 0))) m += jv_num(d);
    *out = m == 0 ? 0 : m == 1 ? 1 : 2;
    return 0;
}

int jb_test(jctx *c, int id, jinja_value *v, const jargs *args) {
    const char *name = id >= 0 && id < T_COUNT_ ? test_names[id] : "?";
    jinja_value *o;
    int r;
    switch (id) {
    case T_BOOLEAN: return v->t == JV_BOOL;
    case T_CALLABLE: return v->t == JV_MACRO || v->t == JV_FUNC || v->t == JV_UNDEF || v->t == JV_LOOP;
    case T_DEFINED: return v->t != JV_UNDEF;
    case T_UNDEFINED: return v->t == JV_UNDEF;
    case T_DIVISIBLEBY:
        if (one_arg(c, name, args, &o) || int_mod(c, v, o, &r)) return -1;
        return r == 0;
    case T_ODD: case T_EVEN: {
        jinja_value two = { .t = JV_INT, .u.i = 2 };
        if (int_mod(c, v, &two, &r)) return -1;
        return id == T_ODD ? r == 1 : r == 0;
    }
    case T_EQ: case T_EQUALTO: case T_EQEQ: case T_NE: case T_NEQ:
        if (one_arg(c, name, args, &o) || (r = jv_eq(c, v, o)) < 0) return -1;
        return id == T_NE || id == T_NEQ ? !r : r;
    case T_GE: case T_GEQ: case T_GT: case T_GREATERTHAN: case T_GTS: case T_LE: case T_LEQ: case T_LT:
    case T_LESSTHAN: case T_LTS: {
        int cmp;
        if (one_arg(c, name, args, &o)) return -1;
        if (v->t == JV_UNDEF || o->t == JV_UNDEF) {
            jinja_value *u = v->t == JV_UNDEF ? v : o;
            jfail(c, "%s", u->u.hint ? u->u.hint : "undefined");
            return -1;
        }
        if (jv_cmp(c, v, o, &cmp)) return -1;
        if ((v->t == JV_FLOAT && isnan(v->u.f)) || (o->t == JV_FLOAT && isnan(o->u.f))) return 0;
        if (id == T_GE || id == T_GEQ) return cmp >= 0;
        if (id == T_GT || id == T_GREATERTHAN || id == T_GTS) return cmp > 0;
        if (id == T_LE || id == T_LEQ) return cmp <= 0;
        return cmp < 0;
    }
    case T_ESCAPED: return 0;
    case T_FALSE: return v->t == JV_BOOL && !v->u.b;
    case T_TRUE: return v->t == JV_BOOL && v->u.b;
    case T_FILTER: return v->t == JV_STR && jb_filter_id(v->u.s.p) >= 0;
    case T_TEST: return v->t == JV_STR && jb_test_id(v->u.s.p) >= 0;
    case T_FLOAT: return v->t == JV_FLOAT;
    case T_INTEGER: return v->t == JV_INT;
    case T_NUMBER: return jv_is_num(v);
    case T_IN: {
        if (one_arg(c, name, args, &o)) return -1;
        switch (o->t) {
        case JV_STR:
            if (v->t != JV_STR) { jfail(c, "'in <string>' requires string as left operand, not %s", jv_type_name(v)); return -1; }
            return v->u.s.n == 0 || memmem(o->u.s.p, o->u.s.n, v->u.s.p, v->u.s.n) != NULL;
        case JV_LIST:
            for (size_t i = 0; i < o->u.l.n; i++) {
                int e = jv_eq(c, v, o->u.l.v[i]);
                if (e) return e;
            }
            return 0;
        case JV_DICT: return jv_dict_get(o, v) != NULL;
        case JV_UNDEF: return 0;
        default: jfail(c, "argument of type '%s' is not iterable", jv_type_name(o)); return -1;
        }
    }
    case T_ITERABLE: return v->t == JV_STR || v->t == JV_LIST || v->t == JV_DICT || v->t == JV_UNDEF;
    case T_SEQUENCE: return v->t == JV_STR || (v->t == JV_LIST && !v->gen) || v->t == JV_DICT || v->t == JV_UNDEF;
    case T_MAPPING: return v->t == JV_DICT;
    case T_NONE: return v->t == JV_NONE;
    case T_STRING: return v->t == JV_STR;
    case T_LOWER: case T_UPPER: {
        jinja_value *s = jv_to_str(c, v);
        if (!s) return -1;
        return str_case_is(s, id == T_UPPER);
    }
    case T_SAMEAS:
        if (one_arg(c, name, args, &o)) return -1;
        if (v->t != o->t) return 0;
        if (v->t == JV_NONE || v->t == JV_UNDEF) return v == o || v->t == JV_NONE;
        if (v->t == JV_BOOL) return v->u.b == o->u.b;
        if (v->t == JV_INT) return v->u.i == o->u.i && v->u.i >= -5 && v->u.i <= 256; /* CPython's small ints */
        return v == o;
    }
    jfail(c, "internal error: test %d", id);
    return -1;
}

/* ---------------------------------------------------------------- functions and methods */

enum {
    G_RANGE, G_DICT, G_NAMESPACE, G_RAISE, G_STRFTIME,
    /* str */
    M_S_CAPITALIZE, M_S_COUNT, M_S_ENDSWITH, M_S_FIND, M_S_FORMAT, M_S_INDEX, M_S_ISALNUM, M_S_ISALPHA,
    M_S_ISDIGIT, M_S_ISLOWER, M_S_ISSPACE, M_S_ISUPPER, M_S_JOIN, M_S_LOWER, M_S_LSTRIP, M_S_REPLACE, M_S_RFIND,
    M_S_RSPLIT, M_S_RSTRIP, M_S_SPLIT, M_S_SPLITLINES, M_S_STARTSWITH, M_S_STRIP, M_S_TITLE, M_S_UPPER,
    M_S_REMOVEPREFIX, M_S_REMOVESUFFIX, M_S_CENTER, M_S_LJUST, M_S_RJUST, M_S_ZFILL, M_S_PARTITION, M_S_RPARTITION,
    M_S_SWAPCASE, M_S_CASEFOLD,
    /* dict */
    M_D_GET, M_D_ITEMS, M_D_KEYS, M_D_VALUES, M_D_COPY,
    /* list / tuple */
    M_L_INDEX, M_L_COUNT, M_L_COPY,
    /* loop */
    M_LOOP_CYCLE, M_LOOP_CHANGED,
    FN_COUNT_
};

static const char *const fn_names[FN_COUNT_] = {
    [G_RANGE] = "range", [G_DICT] = "dict", [G_NAMESPACE] = "namespace", [G_RAISE] = "raise_exception",
    [G_STRFTIME] = "strftime_now", [M_S_CAPITALIZE] = "capitalize", [M_S_COUNT] = "count",
    [M_S_ENDSWITH] = "endswith", [M_S_FIND] = "find", [M_S_FORMAT] = "format", [M_S_INDEX] = "index",
    [M_S_ISALNUM] = "isalnum", [M_S_ISALPHA] = "isalpha", [M_S_ISDIGIT] = "isdigit", [M_S_ISLOWER] = "islower",
    [M_S_ISSPACE] = "isspace", [M_S_ISUPPER] = "isupper", [M_S_JOIN] = "join", [M_S_LOWER] = "lower",
    [M_S_LSTRIP] = "lstrip", [M_S_REPLACE] = "replace", [M_S_RFIND] = "rfind", [M_S_RSPLIT] = "rsplit",
    [M_S_RSTRIP] = "rstrip", [M_S_SPLIT] = "split", [M_S_SPLITLINES] = "splitlines", [M_S_STARTSWITH] = "startswith",
    [M_S_STRIP] = "strip", [M_S_TITLE] = "title", [M_S_UPPER] = "upper", [M_S_REMOVEPREFIX] = "removeprefix",
    [M_S_REMOVESUFFIX] = "removesuffix", [M_S_CENTER] = "center", [M_S_LJUST] = "ljust", [M_S_RJUST] = "rjust",
    [M_S_ZFILL] = "zfill", [M_S_PARTITION] = "partition", [M_S_RPARTITION] = "rpartition",
    [M_S_SWAPCASE] = "swapcase", [M_S_CASEFOLD] = "casefold", [M_D_GET] = "get", [M_D_ITEMS] = "items",
    [M_D_KEYS] = "keys", [M_D_VALUES] = "values", [M_D_COPY] = "copy", [M_L_INDEX] = "index", [M_L_COUNT] = "count",
    [M_L_COPY] = "copy", [M_LOOP_CYCLE] = "cycle", [M_LOOP_CHANGED] = "changed",
};

const char *jb_func_name(int id) { return id >= 0 && id < FN_COUNT_ ? fn_names[id] : "?"; }

jinja_value *jb_global(jctx *c, const char *name, size_t n) {
    (void)n;
    for (int id = G_RANGE; id <= G_STRFTIME; id++)
        if (!strcmp(fn_names[id], name)) return mem(c, jv_func(c->a, id, NULL));
    return NULL;
}

static int find_method(const char *name, int lo, int hi) {
    for (int id = lo; id <= hi; id++)
        if (!strcmp(fn_names[id], name)) return id;
    return -1;
}

jinja_value *jb_method(jctx *c, jinja_value *obj, const char *name, size_t n, int *unsafe) {
    (void)n;
    int id = -1;
    *unsafe = 0;
    switch (obj->t) {
    case JV_STR: id = find_method(name, M_S_CAPITALIZE, M_S_CASEFOLD); break;
    case JV_DICT:
        id = find_method(name, M_D_GET, M_D_COPY);
        if (id < 0 && (!strcmp(name, "clear") || !strcmp(name, "pop") || !strcmp(name, "popitem") ||
                       !strcmp(name, "setdefault") || !strcmp(name, "update")))
            *unsafe = 1;
        break;
    case JV_LIST:
        if (obj->gen) break;
        if (obj->tuple || obj->range) {
            id = find_method(name, M_L_INDEX, M_L_COUNT);
            break;
        }
        id = find_method(name, M_L_INDEX, M_L_COPY);
        if (id < 0 && (!strcmp(name, "append") || !strcmp(name, "clear") || !strcmp(name, "pop") ||
                       !strcmp(name, "reverse") || !strcmp(name, "insert") || !strcmp(name, "sort") ||
                       !strcmp(name, "extend") || !strcmp(name, "remove")))
            *unsafe = 1;
        break;
    case JV_LOOP: id = find_method(name, M_LOOP_CYCLE, M_LOOP_CHANGED); break;
    default: break;
    }
    if (id < 0) return NULL;
    return mem(c, jv_func(c->a, id, obj));
}

static jinja_value *fn_range(jctx *c, const jargs *args) {
    if (args->nkw) return jfail(c, "range() takes no keyword arguments");
    if (args->npos < 1 || args->npos > 3) return jfail(c, "range expected 1 to 3 arguments, got %d", args->npos);
    int64_t v[3] = { 0, 0, 1 };
    for (int i = 0; i < args->npos; i++)
        if (want_int(c, "range", args->pos[i], &v[args->npos == 1 ? 1 : i])) return NULL;
    if (v[2] == 0) return jfail(c, "range() arg 3 must not be zero");
    int64_t count = 0;
    if (v[2] > 0 && v[1] > v[0]) count = (int64_t)(((uint64_t)v[1] - (uint64_t)v[0] - 1) / (uint64_t)v[2] + 1);
    if (v[2] < 0 && v[1] < v[0]) count = (int64_t)(((uint64_t)v[0] - (uint64_t)v[1] - 1) / (uint64_t)(-(v[2] + 1) + 1) + 1);
    if (count > 100000) return jfail(c, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    jinja_value *l = jv_list(c->a, (size_t)count);
    if (!l) return jmemfail(c);
    l->range = 1;
    l->u.l.r0 = v[0];
    l->u.l.r1 = v[1];
    l->u.l.r2 = v[2];
    for (int64_t k = 0; k < count; k++)
        if (push(c, l, jv_int(c->a, v[0] + k * v[2]))) return NULL;
    return l;
}

/* dict(**kw), dict(mapping, **kw), dict(pairs, **kw); namespace() takes the same */
static jinja_value *fn_dict(jctx *c, const jargs *args, int ns) {
    jinja_value *d = jv_new(c->a, ns ? JV_NS : JV_DICT);
    if (!d) return jmemfail(c);
    if (args->npos > 1) return jfail(c, "%s expected at most 1 argument, got %d", ns ? "namespace" : "dict", args->npos);
    if (args->npos == 1) {
        jinja_value *src = args->pos[0];
        if (src->t == JV_DICT || src->t == JV_NS) {
            for (size_t i = 0; i < src->u.d.n; i++)
                if (jv_dict_set(c->a, d, src->u.d.kv[i].k, src->u.d.kv[i].v)) return jmemfail(c);
        } else {
            jinja_value *items = jr_iter(c, src);
            if (!items) return NULL;
            for (size_t i = 0; i < items->u.l.n; i++) {
                jinja_value *pair = jr_iter(c, items->u.l.v[i]);
                if (!pair) return NULL;
                if (pair->u.l.n != 2) return jfail(c, "dictionary update sequence element #%zu has length %zu; 2 is required", i, pair->u.l.n);
                if (jv_dict_set(c->a, d, pair->u.l.v[0], pair->u.l.v[1])) return jmemfail(c);
            }
        }
    }
    for (int k = 0; k < args->nkw; k++) {
        jinja_value *key = jv_str(c->a, args->kwn[k], strlen(args->kwn[k]));
        if (!key || jv_dict_set(c->a, d, key, args->kwv[k])) return jmemfail(c);
    }
    return d;
}

static jinja_value *fn_strftime(jctx *c, const jargs *args) {
    if (args->npos != 1 || args->nkw || args->pos[0]->t != JV_STR) return jfail(c, "strftime_now(format) takes one string");
    time_t t = c->now >= 0 ? (time_t)c->now : time(NULL);
    struct tm tm;
    if (!localtime_r(&t, &tm)) return jfail(c, "strftime_now: the time cannot be converted");
    const char *fmt = args->pos[0]->u.s.p;
    if (args->pos[0]->u.s.n == 0) return JV_EMPTY;
    size_t cap = 256 + 8 * args->pos[0]->u.s.n;
    if (cap > 1 << 20) return jfail(c, "strftime_now: the format is too long");
    char *buf = malloc(cap);
    if (!buf) return jfail(c, "out of memory");
    size_t n = strftime(buf, cap, fmt, &tm);
    jinja_value *r = jv_str(c->a, buf, n);
    free(buf);
    return mem(c, r);
}

static int starts_ends(jctx *c, jinja_value *s, jinja_value *x, int ends, int *out) {
    if (x->t == JV_LIST && x->tuple) {
        *out = 0;
        for (size_t i = 0; i < x->u.l.n && !*out; i++)
            if (starts_ends(c, s, x->u.l.v[i], ends, out)) return -1;
        return 0;
    }
    if (x->t != JV_STR) {
        jfail(c, "%s first arg must be str or a tuple of str, not %s", ends ? "endswith" : "startswith", jv_type_name(x));
        return -1;
    }
    size_t m = x->u.s.n;
    *out = m <= s->u.s.n && !memcmp(ends ? s->u.s.p + s->u.s.n - m : s->u.s.p, x->u.s.p, m);
    return 0;
}

static jinja_value *call_str_method(jctx *c, int id, jinja_value *s, const jargs *args) {
    const char *fname = fn_names[id];
    switch (id) {
    case M_S_CAPITALIZE: NO_ARGS(fname); return str_capitalize(c, s);
    case M_S_TITLE: NO_ARGS(fname); return str_title(c, s);
    case M_S_LOWER: case M_S_CASEFOLD: NO_ARGS(fname); return str_map(c, s, ju_lower);
    case M_S_UPPER: NO_ARGS(fname); return str_map(c, s, ju_upper);
    case M_S_SWAPCASE: {
        NO_ARGS(fname);
        jsb b = { .limit = c->lim.max_memory };
        size_t i = 0;
        while (i < s->u.s.n) {
            uint32_t cp = ju_next(s->u.s.p, s->u.s.n, &i), u = ju_upper(cp);
            jsb_put_cp(&b, u != cp ? u : ju_lower(cp));
        }
        return sbv(c, &b);
    }
    case M_S_STRIP: case M_S_LSTRIP: case M_S_RSTRIP: {
        BIND(fname, "chars");
        return str_strip(c, s, p[0], id == M_S_STRIP ? 3 : id == M_S_LSTRIP ? 1 : 2);
    }
    case M_S_SPLIT: case M_S_RSPLIT: {
        BIND(fname, "sep", "maxsplit");
        int64_t m = -1;
        if (p[1] && want_int(c, fname, p[1], &m)) return NULL;
        return str_split(c, s, p[0], m, id == M_S_RSPLIT);
    }
    case M_S_SPLITLINES: {
        BIND(fname, "keepends");
        return str_splitlines(c, s, p[0] && jv_truthy(p[0]));
    }
    case M_S_STARTSWITH: case M_S_ENDSWITH: {
        BIND(fname, "prefix", "start", "end");
        if (!p[0]) return jfail(c, "%s() takes at least 1 argument (0 given)", fname);
        jinja_value *sub = s;
        if (p[1] || p[2]) { /* s[start:end] by code points */
            int64_t len = (int64_t)ju_len(s->u.s.p, s->u.s.n), a = 0, e = len;
            if (p[1] && p[1]->t != JV_NONE && want_int(c, fname, p[1], &a)) return NULL;
            if (p[2] && p[2]->t != JV_NONE && want_int(c, fname, p[2], &e)) return NULL;
            if (a < 0) a = a + len < 0 ? 0 : a + len;
            if (e < 0) e = e + len < 0 ? 0 : e + len;
            if (a > len) return JV_FALSE;
            if (e > len) e = len;
            if (e < a) e = a;
            size_t oa = ju_offset(s->u.s.p, s->u.s.n, (size_t)a), oe = ju_offset(s->u.s.p, s->u.s.n, (size_t)e);
            if (!(sub = jv_str(c->a, s->u.s.p + oa, oe - oa))) return jmemfail(c);
        }
        int r;
        if (starts_ends(c, sub, p[0], id == M_S_ENDSWITH, &r)) return NULL;
        return jv_bool(r);
    }
    case M_S_FIND: case M_S_RFIND: case M_S_INDEX: case M_S_COUNT: {
        BIND(fname, "sub", "start", "end");
        if (!p[0] || want_str(c, fname, p[0])) return p[0] ? NULL : jfail(c, "%s() takes at least 1 argument", fname);
        if (p[1] || p[2]) return jfail(c, "%s(): start and end are not supported", fname);
        const char *h = s->u.s.p, *nd = p[0]->u.s.p;
        size_t hn = s->u.s.n, m = p[0]->u.s.n;
        if (id == M_S_COUNT) {
            if (m == 0) return mem(c, jv_int(c->a, (int64_t)ju_len(h, hn) + 1));
            int64_t k = 0;
            for (size_t i = 0; i + m <= hn;) {
                const char *f = memmem(h + i, hn - i, nd, m);
                if (!f) break;
                k++;
                i = (size_t)(f - h) + m;
            }
            return mem(c, jv_int(c->a, k));
        }
        size_t at = (size_t)-1;
        if (id == M_S_RFIND) {
            for (size_t j = hn + 1; j-- > 0;)
                if (j + m <= hn && !memcmp(h + j, nd, m)) { at = j; break; }
        } else {
            const char *f = m ? memmem(h, hn, nd, m) : h;
            if (f) at = (size_t)(f - h);
        }
        if (at == (size_t)-1) return id == M_S_INDEX ? jfail(c, "substring not found") : mem(c, jv_int(c->a, -1));
        return mem(c, jv_int(c->a, cp_index(s, at)));
    }
    case M_S_FORMAT: return str_format(c, s, args);
    case M_S_JOIN: {
        BIND(fname, "iterable");
        if (!p[0]) return jfail(c, "join() takes exactly one argument (0 given)");
        jinja_value *items = jr_iter(c, p[0]);
        if (!items) return NULL;
        jsb b = { .limit = c->lim.max_memory };
        for (size_t i = 0; i < items->u.l.n; i++) {
            jinja_value *x = items->u.l.v[i];
            if (x->t != JV_STR) { free(b.p); return jfail(c, "sequence item %zu: expected str instance, %s found", i, jv_type_name(x)); }
            if (i) jsb_put(&b, s->u.s.p, s->u.s.n);
            jsb_put(&b, x->u.s.p, x->u.s.n);
        }
        return sbv(c, &b);
    }
    case M_S_REPLACE: {
        BIND(fname, "old", "new", "count");
        int64_t cnt = -1;
        if (!p[0] || !p[1]) return jfail(c, "replace() expected at least 2 arguments");
        if (want_str(c, fname, p[0]) || want_str(c, fname, p[1])) return NULL;
        if (p[2] && want_int(c, fname, p[2], &cnt)) return NULL;
        return str_replace(c, s, p[0], p[1], cnt);
    }
    case M_S_ISALNUM: case M_S_ISALPHA: case M_S_ISDIGIT: case M_S_ISSPACE: {
        NO_ARGS(fname);
        if (!s->u.s.n) return JV_FALSE;
        size_t i = 0;
        while (i < s->u.s.n) {
            uint32_t cp = ju_next(s->u.s.p, s->u.s.n, &i);
            int ok = id == M_S_ISSPACE ? ju_isspace(cp) : id == M_S_ISDIGIT ? ju_isdigit(cp)
                   : id == M_S_ISALPHA ? ju_isalpha(cp) : (ju_isalpha(cp) || ju_isdigit(cp));
            if (!ok) return JV_FALSE;
        }
        return JV_TRUE;
    }
    case M_S_ISLOWER: case M_S_ISUPPER: NO_ARGS(fname); return jv_bool(str_case_is(s, id == M_S_ISUPPER));
    case M_S_REMOVEPREFIX: case M_S_REMOVESUFFIX: {
        BIND(fname, "affix");
        if (!p[0] || want_str(c, fname, p[0])) return p[0] ? NULL : jfail(c, "%s() takes exactly one argument", fname);
        size_t m = p[0]->u.s.n;
        if (m > s->u.s.n) return s;
        if (id == M_S_REMOVEPREFIX)
            return memcmp(s->u.s.p, p[0]->u.s.p, m) ? s : mem(c, jv_str(c->a, s->u.s.p + m, s->u.s.n - m));
        return memcmp(s->u.s.p + s->u.s.n - m, p[0]->u.s.p, m) ? s : mem(c, jv_str(c->a, s->u.s.p, s->u.s.n - m));
    }
    case M_S_CENTER: case M_S_LJUST: case M_S_RJUST: case M_S_ZFILL: {
        BIND(fname, "width", "fillchar");
        int64_t w;
        if (!p[0] || want_int(c, fname, p[0], &w)) return p[0] ? NULL : jfail(c, "%s() takes at least 1 argument", fname);
        if (w > 100000) return jfail(c, "%s width too large", fname);
        const char *fill = " ";
        size_t fl = 1;
        if (p[1]) {
            if (p[1]->t != JV_STR || ju_len(p[1]->u.s.p, p[1]->u.s.n) != 1) return jfail(c, "The fill character must be exactly one character long");
            fill = p[1]->u.s.p;
            fl = p[1]->u.s.n;
        }
        int64_t len = (int64_t)ju_len(s->u.s.p, s->u.s.n);
        if (w <= len) return s;
        int64_t pad = w - len, left = id == M_S_RJUST ? pad : id == M_S_LJUST ? 0 : pad / 2 + (pad & w & 1);
        jsb b = { .limit = c->lim.max_memory };
        if (id == M_S_ZFILL) {
            size_t sg = s->u.s.n && (s->u.s.p[0] == '-' || s->u.s.p[0] == '+');
            jsb_put(&b, s->u.s.p, sg);
            for (int64_t i = 0; i < pad; i++) jsb_putc(&b, '0');
            jsb_put(&b, s->u.s.p + sg, s->u.s.n - sg);
            return sbv(c, &b);
        }
        for (int64_t i = 0; i < left; i++) jsb_put(&b, fill, fl);
        jsb_put(&b, s->u.s.p, s->u.s.n);
        for (int64_t i = 0; i < pad - left; i++) jsb_put(&b, fill, fl);
        return sbv(c, &b);
    }
    case M_S_PARTITION: case M_S_RPARTITION: {
        BIND(fname, "sep");
        if (!p[0] || want_str(c, fname, p[0])) return p[0] ? NULL : jfail(c, "%s() takes exactly one argument", fname);
        if (!p[0]->u.s.n) return jfail(c, "empty separator");
        const char *h = s->u.s.p;
        size_t hn = s->u.s.n, m = p[0]->u.s.n, at = (size_t)-1;
        if (id == M_S_PARTITION) {
            const char *f = memmem(h, hn, p[0]->u.s.p, m);
            if (f) at = (size_t)(f - h);
        } else {
            for (size_t j = hn + 1; j-- > 0;)
                if (j + m <= hn && !memcmp(h + j, p[0]->u.s.p, m)) { at = j; break; }
        }
        jinja_value *t = jv_list(c->a, 3);
        if (!t) return jmemfail(c);
        t->tuple = 1;
        if (at == (size_t)-1) {
            if (id == M_S_PARTITION) { jv_push(c->a, t, s); jv_push(c->a, t, JV_EMPTY); jv_push(c->a, t, JV_EMPTY); }
            else { jv_push(c->a, t, JV_EMPTY); jv_push(c->a, t, JV_EMPTY); jv_push(c->a, t, s); }
            return t;
        }
        if (push(c, t, jv_str(c->a, h, at)) || push(c, t, p[0]) || push(c, t, jv_str(c->a, h + at + m, hn - at - m))) return NULL;
        return t;
    }
    }
    return jfail(c, "internal error: str method %d", id);
}

jinja_value *jb_call(jctx *c, jinja_value *fn, const jargs *args) {
    int id = fn->u.fn.id;
    jinja_value *self = fn->u.fn.self;
    const char *fname = jb_func_name(id);
    switch (id) {
    case G_RANGE: return fn_range(c, args);
    case G_DICT: return fn_dict(c, args, 0);
    case G_NAMESPACE: return fn_dict(c, args, 1);
    case G_RAISE: {
        if (args->npos < 1) return jfail(c, "raise_exception() missing argument 'message'");
        jsb b = { .limit = 4096 };
        if (jv_str_to(c, args->pos[0], &b)) { free(b.p); return NULL; }
        jfail(c, "%s", b.p ? b.p : "");
        free(b.p);
        return NULL;
    }
    case G_STRFTIME: return fn_strftime(c, args);
    case M_D_GET: {
        BIND(fname, "key", "default");
        if (!p[0]) return jfail(c, "get expected at least 1 argument, got 0");
        jinja_value *v = jv_dict_get(self, p[0]);
        return v ? v : p[1] ? p[1] : JV_NONEV;
    }
    case M_D_ITEMS: case M_D_KEYS: case M_D_VALUES: {
        NO_ARGS(fname);
        jinja_value *l = jv_list(c->a, self->u.d.n);
        if (!l) return jmemfail(c);
        for (size_t i = 0; i < self->u.d.n; i++) {
            jinja_value *x = id == M_D_KEYS ? self->u.d.kv[i].k : id == M_D_VALUES ? self->u.d.kv[i].v
                           : tuple2(c, self->u.d.kv[i].k, self->u.d.kv[i].v);
            if (push(c, l, x)) return NULL;
        }
        return l;
    }
    case M_D_COPY: {
        NO_ARGS(fname);
        jinja_value *d = jv_dict(c->a);
        if (!d) return jmemfail(c);
        for (size_t i = 0; i < self->u.d.n; i++)
            if (jv_dict_set(c->a, d, self->u.d.kv[i].k, self->u.d.kv[i].v)) return jmemfail(c);
        return d;
    }
    case M_L_COPY: {
        NO_ARGS(fname);
        jinja_value *l = jv_list(c->a, self->u.l.n);
        if (!l) return jmemfail(c);
        for (size_t i = 0; i < self->u.l.n; i++) jv_push(c->a, l, self->u.l.v[i]);
        return l;
    }
    case M_L_INDEX: case M_L_COUNT: {
        if (args->npos != 1 || args->nkw) return jfail(c, "%s() takes exactly one argument", fname);
        int64_t k = 0;
        for (size_t i = 0; i < self->u.l.n; i++) {
            int e = jv_eq(c, self->u.l.v[i], args->pos[0]);
            if (e < 0) return NULL;
            if (e && id == M_L_INDEX) return mem(c, jv_int(c->a, (int64_t)i));
            k += e;
        }
        if (id == M_L_INDEX) return jfail(c, "list.index(x): x not in list");
        return mem(c, jv_int(c->a, k));
    }
    case M_LOOP_CYCLE: {
        if (args->npos == 0) return jfail(c, "no items for cycling given");
        return args->pos[self->u.loop->i % (size_t)args->npos];
    }
    case M_LOOP_CHANGED: {
        jloop *L = self->u.loop;
        jinja_value *cur = jv_list(c->a, (size_t)args->npos);
        if (!cur) return jmemfail(c);
        for (int i = 0; i < args->npos; i++) jv_push(c->a, cur, args->pos[i]);
        if (L->has_changed) {
            int e = jv_eq(c, L->last_changed, cur);
            if (e < 0) return NULL;
            if (e) return JV_FALSE;
        }
        L->last_changed = cur;
        L->has_changed = 1;
        return JV_TRUE;
    }
    default:
        if (id >= M_S_CAPITALIZE && id <= M_S_CASEFOLD) return call_str_method(c, id, self, args);
    }
    return jfail(c, "internal error: function %d", id);
}
