/* jinja.c - the template engine (jinja.h): lexer, parser and renderer.
 *
 * The lexer follows jinja2's (lexer.py) rule for rule, because whitespace is where
 * renderings differ: the source's newlines become "\n" and one trailing newline is
 * dropped; "{%-"/"-%}" strip all whitespace (Python's str.isspace set) before/after
 * a tag; trim_blocks drops the first newline after "%}" and "#}"; lstrip_blocks drops
 * the spaces and tabs (any whitespace but newlines) between a line's start and "{%"
 * or "{#", but never before "{{", and "{%+" turns it off for one tag.
 *
 * The parser is jinja2's (parser.py) recursive descent with the same precedence:
 * conditional < or < and < not < comparisons (chained, in, not in) < + - < ~ < * / // %
 * < ** (left-associative, as jinja2's) < unary - + < postfix (. [] ()) < filters and
 * tests, which bind to the unary expression before them (-x|abs is abs(-x)). Unknown
 * filters and tests are parse errors, as they are jinja2's compile-time errors.
 *
 * Scopes are jinja2's: a for loop's body gets a fresh scope each iteration (a set
 * inside it is gone at the next iteration and after the loop: that is what namespace()
 * is for), if blocks share their enclosing scope, a macro call gets a scope whose
 * parent is the scope the macro was defined in, read when it runs. */
#include "jinja_impl.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* ---------------------------------------------------------------- AST */

enum {
    /* statements */
    S_TEXT = 1, S_OUT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_MACRO, S_CALLBLOCK, S_FILTERBLOCK, S_BREAK, S_CONTINUE,
    S_WITH, S_BODY, S_BLOCK, S_LOAD,
    /* expressions */
    E_CONST, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_NEG, E_POS, E_NOT, E_BIN, E_AND, E_OR,
    E_CMP, E_COND, E_LIST, E_TUPLE, E_DICT, E_CONCAT, E_HOLE, E_NSREF,
};

/* operators (lexer tokens and E_BIN / E_CMP ops) */
enum {
    OP_NONE = 0, OP_ADD, OP_SUB, OP_DIV, OP_FLOORDIV, OP_MUL, OP_MOD, OP_POW, OP_TILDE, OP_LBRACKET, OP_RBRACKET,
    OP_LPAREN, OP_RPAREN, OP_LBRACE, OP_RBRACE, OP_EQ, OP_NE, OP_GT, OP_GTEQ, OP_LT, OP_LTEQ, OP_ASSIGN, OP_DOT,
    OP_COLON, OP_PIPE, OP_COMMA, OP_SEMI, OP_IN, OP_NOTIN,
};

typedef struct jnode jnode;
struct jnode {
    int kind, op, line, col;
    const char *name;     /* E_NAME, E_ATTR, filter/test name, macro name, E_NSREF var */
    const char *name2;    /* E_NSREF attribute */
    size_t name_len;
    jnode *a, *b, *c;     /* operands, condition, iterable, ... */
    jnode **list;         /* items, arguments, statements of a body, macro parameters */
    int n;
    jnode **list2;        /* else body, dict values, macro defaults, comparison operands */
    int n2;
    const char **kwn;     /* keyword argument names */
    jnode **kwv;
    int nkw;
    int *ops;             /* E_CMP operators */
    jinja_value *v;       /* E_CONST, S_TEXT */
    int flag;             /* E_TEST: negated; S_MACRO: 1 varargs | 2 kwargs | 4 caller; S_BLOCK: 1 scoped | 2 required */
    int fn;               /* E_FILTER / E_TEST: the builtin's id */
};

struct jinja_tmpl {
    jarena a;     /* the AST and its strings */
    jnode *root;  /* S_BODY */
    char *src;    /* the normalized source */
    size_t len;
};

/* ---------------------------------------------------------------- errors */

static void set_err(jinja_error *e, int line, int col, const char *fmt, va_list ap) {
    if (!e || e->msg[0]) return;
    e->line = line;
    e->col = col;
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
}

const char *jinja_error_str(const jinja_error *e, char *buf, size_t cap) {
    if (e->line > 0) snprintf(buf, cap, "line %d, column %d: %s", e->line, e->col, e->msg);
    else snprintf(buf, cap, "%s", e->msg);
    return buf;
}

jinja_value *jfail(jctx *c, const char *fmt, ...) {
    if (!c->failed) {
        va_list ap;
        va_start(ap, fmt);
        set_err(c->err, c->line, c->col, fmt, ap);
        va_end(ap);
        c->failed = 1;
    }
    return NULL;
}

jinja_value *jmemfail(jctx *c) {
    if (c->a->over) return jfail(c, "the render's memory limit (%zu bytes) was reached", c->lim.max_memory);
    return jfail(c, "out of memory");
}

int jstep(jctx *c, uint64_t n) {
    c->steps += n;
    if (c->steps > c->lim.max_steps) {
        jfail(c, "the render's step limit (%llu loop iterations, calls and items) was reached",
              (unsigned long long)c->lim.max_steps);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- lexer */

enum { T_EOF = 0, T_DATA, T_VBEGIN, T_VEND, T_BBEGIN, T_BEND, T_NAME, T_STR, T_INT, T_FLOAT, T_OP };

typedef struct jtok {
    int t, line, col;
    const char *p; /* T_NAME: the name (NUL-terminated, in the arena); T_DATA/T_STR: the text */
    size_t n;
    int op;
    int64_t i;
    double f;
} jtok;

typedef struct jlex {
    jarena *a;
    const char *s;
    size_t n, pos;
    int line;
    size_t line_start; /* offset of the current line's first byte */
    size_t lpos;       /* how far line/line_start have been advanced */
    jtok *toks;
    size_t nt, cap;
    jinja_error *err;
    int failed;
} jlex;

static void lx_advance(jlex *L, size_t to) {
    for (size_t i = L->lpos; i < to && i < L->n; i++)
        if (L->s[i] == '\n') { L->line++; L->line_start = i + 1; }
    if (to > L->lpos) L->lpos = to;
}

static int lx_fail(jlex *L, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int lx_fail(jlex *L, size_t at, const char *fmt, ...) {
    lx_advance(L, at);
    va_list ap;
    va_start(ap, fmt);
    set_err(L->err, L->line, (int)(at - L->line_start) + 1, fmt, ap);
    va_end(ap);
    L->failed = 1;
    return -1;
}

static jtok *lx_push(jlex *L, int t, size_t at) {
    if (L->nt == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        jtok *p = ja_realloc(L->a, L->toks, L->cap * sizeof *p, cap * sizeof *p);
        if (!p) { lx_fail(L, at, "out of memory"); return NULL; }
        L->toks = p;
        L->cap = cap;
    }
    lx_advance(L, at);
    jtok *k = &L->toks[L->nt++];
    memset(k, 0, sizeof *k);
    k->t = t;
    k->line = L->line;
    k->col = (int)(at - L->line_start) + 1;
    return k;
}

static int lx_data(jlex *L, size_t at, const char *p, size_t n) {
    if (n == 0) return 0;
    jtok *k = lx_push(L, T_DATA, at);
    if (!k) return -1;
    k->p = p;
    k->n = n;
    return 0;
}

static size_t skip_ws(const char *s, size_t n, size_t i) {
    size_t k;
    while (i < n && (k = ju_space_at(s, n, i))) i += k;
    return i;
}

/* Strips the text before a tag as jinja2's OptionalLStrip does; returns its new length. */
static size_t strip_before(const char *text, size_t n, char sign, int is_var, int line_starting) {
    if (sign == '-') { /* text.rstrip() */
        while (n > 0) {
            size_t st = n - 1;
            while (st > 0 && ((unsigned char)text[st] & 0xc0) == 0x80) st--;
            if (!ju_space_at(text, n, st)) break;
            n = st;
        }
        return n;
    }
    if (sign == '+' || is_var) return n;
    size_t l_pos = 0;
    for (size_t i = n; i > 0; i--)
        if (text[i - 1] == '\n') { l_pos = i; break; }
    if (l_pos == 0 && !line_starting) return n;
    if (l_pos == n) return n; /* nothing between the newline and the tag */
    for (size_t i = l_pos; i < n;) {
        size_t k = ju_space_at(text, n, i);
        if (!k) return n;
        i += k;
    }
    return l_pos;
}

static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }
static int is_name0(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }
static int is_name1(char ch) { return is_name0(ch) || is_digit(ch); }

/* \d+(_\d+)* at i: the end, or i when none */
static size_t scan_digits(const char *s, size_t n, size_t i) {
    if (i >= n || !is_digit(s[i])) return i;
    while (i < n && is_digit(s[i])) i++;
    while (i + 1 < n && s[i] == '_' && is_digit(s[i + 1])) {
        i++;
        while (i < n && is_digit(s[i])) i++;
    }
    return i;
}

/* Python's unicode-escape decoding of a string literal's body. */
static int decode_string(jlex *L, size_t at, const char *p, size_t n, jsb *b) {
    size_t i = 0, run = 0;
    while (i < n) {
        if (p[i] != '\\') { i++; continue; }
        jsb_put(b, p + run, i - run);
        if (i + 1 >= n) { jsb_putc(b, '\\'); i++; run = i; break; }
        char e = p[i + 1];
        i += 2;
        uint32_t cp = 0;
        int digits = 0;
        switch (e) {
        case '\n': break;
        case '\\': jsb_putc(b, '\\'); break;
        case '\'': jsb_putc(b, '\''); break;
        case '"': jsb_putc(b, '"'); break;
        case 'a': jsb_putc(b, 7); break;
        case 'b': jsb_putc(b, 8); break;
        case 'f': jsb_putc(b, 12); break;
        case 'n': jsb_putc(b, '\n'); break;
        case 'r': jsb_putc(b, '\r'); break;
        case 't': jsb_putc(b, '\t'); break;
        case 'v': jsb_putc(b, 11); break;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 'N': return lx_fail(L, at, "\\N{...} escapes are not supported");
        default:
            if (e >= '0' && e <= '7') {
                cp = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i < n && p[i] >= '0' && p[i] <= '7'; k++) cp = cp * 8 + (uint32_t)(p[i++] - '0');
                jsb_put_cp(b, cp);
            } else {
                jsb_putc(b, '\\');
                i--; /* the character after the backslash stays as it is */
            }
        }
        if (digits) {
            for (int k = 0; k < digits; k++, i++) {
                char h = i < n ? p[i] : 0;
                int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                if (d < 0) return lx_fail(L, at, "truncated \\%c escape in a string literal", e);
                cp = cp * 16 + (uint32_t)d;
            }
            if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                return lx_fail(L, at, "string literal escape \\%c%0*X is not a character", e, digits, cp);
            jsb_put_cp(b, cp);
        }
        run = i;
    }
    jsb_put(b, p + run, n - run);
    return b->oom ? lx_fail(L, at, "out of memory") : 0;
}

static const struct { const char *s; int op; } ops2[] = {
    { "//", OP_FLOORDIV }, { "**", OP_POW }, { "==", OP_EQ }, { "!=", OP_NE }, { ">=", OP_GTEQ }, { "<=", OP_LTEQ },
};
static const char ops1[] = "+-/*%~[](){}><=.:|,;";
static const int ops1_id[] = { OP_ADD, OP_SUB, OP_DIV, OP_MUL, OP_MOD, OP_TILDE, OP_LBRACKET, OP_RBRACKET, OP_LPAREN,
                               OP_RPAREN, OP_LBRACE, OP_RBRACE, OP_GT, OP_LT, OP_ASSIGN, OP_DOT, OP_COLON, OP_PIPE,
                               OP_COMMA, OP_SEMI };

/* One token inside {{ }} or {% %} at L->pos (whitespace skipped before). */
static int lx_token(jlex *L, int *depth, char *stack) {
    const char *s = L->s;
    size_t n = L->n, i = L->pos;
    char ch = s[i];
    /* float: (?<!\.)\d+(_\d+)*((\.\d+(_\d+)*)?e[+-]?\d+(_\d+)*|\.\d+(_\d+)*) */
    if (is_digit(ch) && !(i > 0 && s[i - 1] == '.')) {
        size_t e = scan_digits(s, n, i), f = 0;
        size_t frac = e < n && s[e] == '.' ? scan_digits(s, n, e + 1) : e;
        if (frac == e + 1) frac = e; /* "1." is not a fraction */
        size_t ex = frac;
        if (ex < n && (s[ex] == 'e' || s[ex] == 'E')) {
            size_t q = ex + 1;
            if (q < n && (s[q] == '+' || s[q] == '-')) q++;
            size_t r = scan_digits(s, n, q);
            if (r > q) f = r;
        }
        if (!f && frac > e) f = frac;
        if (f) {
            char buf[128];
            size_t k = 0;
            for (size_t j = i; j < f && k + 1 < sizeof buf; j++)
                if (s[j] != '_') buf[k++] = s[j];
            buf[k] = 0;
            jtok *t = lx_push(L, T_FLOAT, i);
            if (!t) return -1;
            t->f = strtod(buf, NULL);
            L->pos = f;
            return 0;
        }
        /* integer: 0b.., 0o.., 0x.., [1-9](_?\d)*, 0(_?0)* */
        int base = 10;
        size_t st = i, j = i;
        if (ch == '0' && i + 2 < n && strchr("bBoOxX", s[i + 1])) {
            char k = (char)(s[i + 1] | 0x20);
            base = k == 'b' ? 2 : k == 'o' ? 8 : 16;
            size_t q = i + 2;
            size_t got = q;
            for (;;) {
                size_t r = q < n && s[q] == '_' ? q + 1 : q;
                if (r >= n) break;
                char d = (char)(s[r] | 0x20);
                int ok = base == 2 ? (d == '0' || d == '1') : base == 8 ? (d >= '0' && d <= '7')
                                                                        : (is_digit(d) || (d >= 'a' && d <= 'f'));
                if (!ok) break;
                q = r + 1;
                got = q;
            }
            if (got > i + 2) { st = i + 2; j = got; }
            else base = 10;
        }
        if (base == 10) {
            j = i + 1;
            if (ch == '0') {
                while (j < n && (s[j] == '0' || (s[j] == '_' && j + 1 < n && s[j + 1] == '0'))) j++;
            } else {
                while (j < n && (is_digit(s[j]) || (s[j] == '_' && j + 1 < n && is_digit(s[j + 1])))) j++;
            }
        }
        uint64_t v = 0;
        for (size_t q = st; q < j; q++) {
            if (s[q] == '_') continue;
            char d = (char)(s[q] | 0x20);
            unsigned dv = is_digit(d) ? (unsigned)(d - '0') : (unsigned)(d - 'a' + 10);
            if (v > (UINT64_MAX - dv) / (unsigned)base) return lx_fail(L, i, "integer literal too large");
            v = v * (unsigned)base + dv;
        }
        if (v > INT64_MAX) return lx_fail(L, i, "integer literal too large");
        jtok *t = lx_push(L, T_INT, i);
        if (!t) return -1;
        t->i = (int64_t)v;
        L->pos = j;
        return 0;
    }
    if (is_name0(ch)) {
        size_t j = i + 1;
        while (j < n && is_name1(s[j])) j++;
        jtok *t = lx_push(L, T_NAME, i);
        if (!t) return -1;
        char *p = ja_alloc(L->a, j - i + 1);
        if (!p) return lx_fail(L, i, "out of memory");
        memcpy(p, s + i, j - i);
        p[j - i] = 0;
        t->p = p;
        t->n = j - i;
        L->pos = j;
        return 0;
    }
    if (ch == '\'' || ch == '"') {
        size_t j = i + 1;
        while (j < n && s[j] != ch) j += s[j] == '\\' ? 2 : 1;
        if (j >= n) return lx_fail(L, i, "unexpected char %s: an unterminated string", ch == '"' ? "'\"'" : "\"'\"");
        jsb b = { 0 };
        if (decode_string(L, i, s + i + 1, j - i - 1, &b)) { free(b.p); return -1; }
        jtok *t = lx_push(L, T_STR, i);
        char *p = t ? ja_alloc(L->a, b.n + 1) : NULL;
        if (!p) { free(b.p); return t ? lx_fail(L, i, "out of memory") : -1; }
        if (b.n) memcpy(p, b.p, b.n);
        p[b.n] = 0;
        free(b.p);
        t->p = p;
        t->n = b.n;
        L->pos = j + 1;
        return 0;
    }
    int op = 0;
    size_t len = 0;
    for (size_t k = 0; k < NELEM(ops2); k++)
        if (i + 1 < n && s[i] == ops2[k].s[0] && s[i + 1] == ops2[k].s[1]) { op = ops2[k].op; len = 2; break; }
    if (!op) {
        const char *q = ch ? strchr(ops1, ch) : NULL;
        if (!q) {
            if ((unsigned char)ch < 0x20 || (unsigned char)ch >= 0x7f) return lx_fail(L, i, "unexpected character (byte 0x%02x)", (unsigned char)ch);
            return lx_fail(L, i, "unexpected char '%c'", ch);
        }
        op = ops1_id[q - ops1];
        len = 1;
    }
    if (op == OP_LBRACE || op == OP_LPAREN || op == OP_LBRACKET) {
        if (*depth >= JINJA_MAX_NESTING) return lx_fail(L, i, "brackets nested more than %d deep", JINJA_MAX_NESTING);
        stack[(*depth)++] = op == OP_LBRACE ? '}' : op == OP_LPAREN ? ')' : ']';
    } else if (op == OP_RBRACE || op == OP_RPAREN || op == OP_RBRACKET) {
        if (*depth == 0) return lx_fail(L, i, "unexpected '%c'", ch);
        if (stack[*depth - 1] != ch) return lx_fail(L, i, "unexpected '%c', expected '%c'", ch, stack[*depth - 1]);
        (*depth)--;
    }
    jtok *t = lx_push(L, T_OP, i);
    if (!t) return -1;
    t->op = op;
    L->pos = i + len;
    return 0;
}

/* The inside of {{ }} or {% %} up to and with its end tag. */
static int lx_tag(jlex *L, int is_block, int *line_starting) {
    const char *s = L->s;
    size_t n = L->n;
    int depth = 0;
    char stack[JINJA_MAX_NESTING + 1];
    for (;;) {
        size_t i = L->pos;
        if (i >= n) return lx_fail(L, i, "unexpected end of template: %s", is_block ? "'%}' expected" : "'}}' expected");
        if (depth == 0) {
            size_t end = 0;
            if (is_block) {
                if (s[i] == '+' && i + 2 < n + 0 && s[i + 1] == '%' && s[i + 2] == '}') end = i + 3;
                else if (s[i] == '-' && i + 2 < n && s[i + 1] == '%' && s[i + 2] == '}') end = skip_ws(s, n, i + 3);
                else if (s[i] == '%' && i + 1 < n && s[i + 1] == '}') {
                    end = i + 2;
                    if (end < n && s[end] == '\n') end++; /* trim_blocks */
                }
            } else {
                if (s[i] == '-' && i + 2 < n && s[i + 1] == '}' && s[i + 2] == '}') end = skip_ws(s, n, i + 3);
                else if (s[i] == '}' && i + 1 < n && s[i + 1] == '}') end = i + 2;
            }
            if (end) {
                if (!lx_push(L, is_block ? T_BEND : T_VEND, i)) return -1;
                *line_starting = s[end - 1] == '\n';
                L->pos = end;
                return 0;
            }
        }
        size_t w = skip_ws(s, n, i);
        if (w > i) { L->pos = w; continue; }
        if (lx_token(L, &depth, stack)) return -1;
    }
}

/* "{%" at k: is it {% raw %}? Returns the end of the raw_begin match, or 0. */
static size_t raw_begin(const char *s, size_t n, size_t k) {
    size_t i = k + 2;
    if (i < n && (s[i] == '-' || s[i] == '+')) i++;
    i = skip_ws(s, n, i);
    if (n - i < 3 || memcmp(s + i, "raw", 3)) return 0;
    i = skip_ws(s, n, i + 3);
    if (i + 2 < n && s[i] == '-' && s[i + 1] == '%' && s[i + 2] == '}') return skip_ws(s, n, i + 3);
    if (i + 1 < n && s[i] == '%' && s[i + 1] == '}') return i + 2;
    return 0;
}

static int lex(jlex *L) {
    const char *s = L->s;
    size_t n = L->n;
    int line_starting = 1;
    while (L->pos < n) {
        size_t pos = L->pos, k;
        for (k = pos; k + 1 < n; k++)
            if (s[k] == '{' && (s[k + 1] == '{' || s[k + 1] == '%' || s[k + 1] == '#')) break;
        if (k + 1 >= n) { /* no more tags */
            if (lx_data(L, pos, s + pos, n - pos)) return -1;
            break;
        }
        char kind = s[k + 1];
        size_t tp = k + 2;
        char sign = 0;
        size_t raw_end = kind == '%' ? raw_begin(s, n, k) : 0;
        if (tp < n && (s[tp] == '-' || s[tp] == '+')) { sign = s[tp]; tp++; }
        size_t tl = strip_before(s + pos, k - pos, sign, kind == '{', line_starting);
        if (lx_data(L, pos, s + pos, tl)) return -1;
        line_starting = 0;
        if (raw_end) {
            /* (.*?)({%(-|+|)\s*endraw\s*(+%}|-%}\s*|%}\n?)) */
            size_t j = raw_end, body_end = 0, end = 0;
            char esign = 0;
            line_starting = s[raw_end - 1] == '\n';
            for (; j + 1 < n && !end; j++) {
                if (s[j] != '{' || s[j + 1] != '%') continue;
                size_t q = j + 2;
                char sg = 0;
                if (q < n && (s[q] == '-' || s[q] == '+')) sg = s[q++];
                q = skip_ws(s, n, q);
                if (n - q < 6 || memcmp(s + q, "endraw", 6)) continue;
                q = skip_ws(s, n, q + 6);
                if (q + 2 < n && s[q] == '+' && s[q + 1] == '%' && s[q + 2] == '}') end = q + 3;
                else if (q + 2 < n && s[q] == '-' && s[q + 1] == '%' && s[q + 2] == '}') end = skip_ws(s, n, q + 3);
                else if (q + 1 < n && s[q] == '%' && s[q + 1] == '}') {
                    end = q + 2;
                    if (end < n && s[end] == '\n') end++;
                }
                if (end) { body_end = j; esign = sg; }
            }
            if (!end) return lx_fail(L, k, "missing end of raw directive");
            size_t bl = strip_before(s + raw_end, body_end - raw_end, esign, 0, line_starting);
            if (lx_data(L, raw_end, s + raw_end, bl)) return -1;
            line_starting = s[end - 1] == '\n';
            L->pos = end;
            continue;
        }
        if (kind == '#') {
            size_t j = tp, end = 0;
            for (; j + 1 < n; j++) {
                if ((s[j] == '+' || s[j] == '-') && j + 2 < n && s[j + 1] == '#' && s[j + 2] == '}') {
                    end = s[j] == '-' ? skip_ws(s, n, j + 3) : j + 3;
                    break;
                }
                if (s[j] == '#' && s[j + 1] == '}') {
                    end = j + 2;
                    if (end < n && s[end] == '\n') end++;
                    break;
                }
            }
            if (!end) return lx_fail(L, k, "missing end of comment tag");
            line_starting = s[end - 1] == '\n';
            L->pos = end;
            continue;
        }
        if (!lx_push(L, kind == '%' ? T_BBEGIN : T_VBEGIN, k)) return -1;
        L->pos = tp;
        if (lx_tag(L, kind == '%', &line_starting)) return -1;
    }
    return lx_push(L, T_EOF, n) ? 0 : -1;
}

/* ---------------------------------------------------------------- parser */

typedef struct jparse {
    jarena *a;
    jtok *t;
    size_t i, nt;
    jinja_error *err;
    int failed;
    int depth;      /* nesting of expressions and blocks */
    int in_loop;    /* for break/continue */
    const char **end_names; /* the end tags subparse stops at */
    const char *blocks[64]; /* the names of the {% block %}s so far (one name once) */
    int n_blocks;
} jparse;

#define CUR(P) (&(P)->t[(P)->i])

static jnode *p_fail(jparse *P, const jtok *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static jnode *p_fail(jparse *P, const jtok *at, const char *fmt, ...) {
    if (!P->failed) {
        va_list ap;
        va_start(ap, fmt);
        set_err(P->err, at->line, at->col, fmt, ap);
        va_end(ap);
        P->failed = 1;
    }
    return NULL;
}

static const char *tok_desc(const jtok *t, char *buf, size_t cap) {
    switch (t->t) {
    case T_EOF: return "end of template";
    case T_DATA: return "template data";
    case T_VBEGIN: return "begin of print statement";
    case T_VEND: return "end of print statement";
    case T_BBEGIN: return "begin of statement block";
    case T_BEND: return "end of statement block";
    case T_NAME: snprintf(buf, cap, "'%s'", t->p); return buf;
    case T_STR: return "string";
    case T_INT: return "integer";
    case T_FLOAT: return "float";
    case T_OP: {
        static const char *names[] = { "", "+", "-", "/", "//", "*", "%", "**", "~", "[", "]", "(", ")", "{", "}",
                                       "==", "!=", ">", ">=", "<", "<=", "=", ".", ":", "|", ",", ";" };
        snprintf(buf, cap, "'%s'", t->op > 0 && t->op < (int)NELEM(names) ? names[t->op] : "?");
        return buf;
    }
    }
    return "token";
}

static jnode *p_unexpected(jparse *P, const char *expected) {
    char buf[80];
    const jtok *t = CUR(P);
    if (expected) return p_fail(P, t, "expected %s, got %s", expected, tok_desc(t, buf, sizeof buf));
    return p_fail(P, t, "unexpected %s", tok_desc(t, buf, sizeof buf));
}

static int is_op(jparse *P, int op) { return CUR(P)->t == T_OP && CUR(P)->op == op; }
static int is_name(jparse *P, const char *name) { return CUR(P)->t == T_NAME && !strcmp(CUR(P)->p, name); }
static int peek_is_op(jparse *P, int op) {
    return P->i + 1 < P->nt && P->t[P->i + 1].t == T_OP && P->t[P->i + 1].op == op;
}
static int peek_is_name(jparse *P, const char *name) {
    return P->i + 1 < P->nt && P->t[P->i + 1].t == T_NAME && !strcmp(P->t[P->i + 1].p, name);
}
static void advance(jparse *P) {
    if (P->i + 1 < P->nt) P->i++;
}
static int expect_op(jparse *P, int op, const char *what) {
    if (!is_op(P, op)) { p_unexpected(P, what); return -1; }
    advance(P);
    return 0;
}
static int expect_type(jparse *P, int t, const char *what) {
    if (CUR(P)->t != t) { p_unexpected(P, what); return -1; }
    advance(P);
    return 0;
}

static jnode *mk(jparse *P, int kind, const jtok *at) {
    jnode *x = ja_alloc(P->a, sizeof *x);
    if (!x) return p_fail(P, at, "out of memory");
    memset(x, 0, sizeof *x);
    x->kind = kind;
    x->line = at->line;
    x->col = at->col;
    return x;
}

/* A growable array of node pointers (in the arena). */
typedef struct nvec { jnode **v; int n, cap; } nvec;
static int nv_push(jparse *P, nvec *v, jnode *x) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        jnode **p = ja_realloc(P->a, v->v, (size_t)v->cap * sizeof *p, (size_t)cap * sizeof *p);
        if (!p) { p_fail(P, CUR(P), "out of memory"); return -1; }
        v->v = p;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return 0;
}

static int enter(jparse *P) {
    if (++P->depth > JINJA_MAX_NESTING) {
        p_fail(P, CUR(P), "expressions or blocks nested more than %d deep", JINJA_MAX_NESTING);
        return -1;
    }
    return 0;
}

static jnode *p_expr(jparse *P, int with_condexpr);
static jnode *p_tuple(jparse *P, int simplified, int with_condexpr, const char *extra_end, int explicit_parens);
static jnode *p_unary(jparse *P, int with_filter);
static jnode *p_primary(jparse *P);
static jnode *p_postfix(jparse *P, jnode *node);
static jnode *p_filter(jparse *P, jnode *node, int start_inline);

/* (args, name=value, ...) */
static int p_call_args(jparse *P, jnode *call) {
    const jtok *open = CUR(P);
    if (expect_op(P, OP_LPAREN, "'('")) return -1;
    nvec args = { 0 }, kwv = { 0 };
    const char **kwn = NULL;
    int require_comma = 0;
    while (!is_op(P, OP_RPAREN)) {
        if (require_comma) {
            if (expect_op(P, OP_COMMA, "','")) return -1;
            if (is_op(P, OP_RPAREN)) break;
        }
        if (is_op(P, OP_MUL) || is_op(P, OP_POW)) {
            p_fail(P, CUR(P), "*args and **kwargs in calls are not supported");
            return -1;
        }
        if (CUR(P)->t == T_NAME && peek_is_op(P, OP_ASSIGN)) {
            const char *key = CUR(P)->p;
            advance(P);
            advance(P);
            jnode *v = p_expr(P, 1);
            if (!v) return -1;
            if (nv_push(P, &kwv, v)) return -1;
            const char **k2 = ja_realloc(P->a, kwn, (size_t)(kwv.n - 1) * sizeof *k2, (size_t)kwv.n * sizeof *k2);
            if (!k2) { p_fail(P, open, "out of memory"); return -1; }
            kwn = k2;
            kwn[kwv.n - 1] = key;
        } else {
            if (kwv.n) { p_fail(P, CUR(P), "invalid syntax for function call expression: a positional argument after a keyword one"); return -1; }
            jnode *v = p_expr(P, 1);
            if (!v) return -1;
            if (nv_push(P, &args, v)) return -1;
        }
        require_comma = 1;
    }
    advance(P); /* ) */
    call->list = args.v;
    call->n = args.n;
    call->kwv = kwv.v;
    call->kwn = kwn;
    call->nkw = kwv.n;
    return 0;
}

static jnode *p_subscribed(jparse *P) {
    const jtok *at = CUR(P);
    jnode *args[3] = { NULL, NULL, NULL };
    if (is_op(P, OP_COLON)) {
        advance(P);
    } else {
        jnode *x = p_expr(P, 1);
        if (!x) return NULL;
        if (!is_op(P, OP_COLON)) return x;
        advance(P);
        args[0] = x;
    }
    if (!is_op(P, OP_COLON) && !is_op(P, OP_RBRACKET) && !is_op(P, OP_COMMA)) {
        if (!(args[1] = p_expr(P, 1))) return NULL;
    }
    if (is_op(P, OP_COLON)) {
        advance(P);
        if (!is_op(P, OP_RBRACKET) && !is_op(P, OP_COMMA))
            if (!(args[2] = p_expr(P, 1))) return NULL;
    }
    jnode *s = mk(P, E_SLICE, at);
    if (!s) return NULL;
    s->a = args[0];
    s->b = args[1];
    s->c = args[2];
    return s;
}

static jnode *p_postfix(jparse *P, jnode *node) {
    for (;;) {
        const jtok *at = CUR(P);
        if (is_op(P, OP_DOT)) {
            advance(P);
            const jtok *t = CUR(P);
            if (t->t == T_NAME) {
                jnode *x = mk(P, E_ATTR, at);
                if (!x) return NULL;
                x->a = node;
                x->name = t->p;
                x->name_len = t->n;
                advance(P);
                node = x;
            } else if (t->t == T_INT) {
                jnode *x = mk(P, E_ITEM, at), *k = mk(P, E_CONST, t);
                if (!x || !k || !(k->v = jv_int(P->a, t->i))) return p_fail(P, t, "out of memory");
                x->a = node;
                x->b = k;
                advance(P);
                node = x;
            } else {
                return p_unexpected(P, "name or number");
            }
        } else if (is_op(P, OP_LBRACKET)) {
            advance(P);
            nvec args = { 0 };
            while (!is_op(P, OP_RBRACKET)) {
                if (args.n && expect_op(P, OP_COMMA, "','")) return NULL;
                jnode *x = p_subscribed(P);
                if (!x || nv_push(P, &args, x)) return NULL;
            }
            advance(P);
            if (args.n == 0) return p_fail(P, at, "expected a subscript");
            jnode *k = args.v[0];
            if (args.n > 1) {
                if (!(k = mk(P, E_TUPLE, at))) return NULL;
                k->list = args.v;
                k->n = args.n;
            }
            jnode *x;
            if (k->kind == E_SLICE) {
                x = k;
                x->list = ja_alloc(P->a, sizeof *x->list);
                if (!x->list) return p_fail(P, at, "out of memory");
                x->list[0] = node; /* the sliced object */
                x->n = 1;
            } else {
                if (!(x = mk(P, E_ITEM, at))) return NULL;
                x->a = node;
                x->b = k;
            }
            node = x;
        } else if (is_op(P, OP_LPAREN)) {
            jnode *x = mk(P, E_CALL, at);
            if (!x) return NULL;
            x->a = node;
            if (p_call_args(P, x)) return NULL;
            node = x;
        } else {
            return node;
        }
    }
}

static jnode *p_test(jparse *P, jnode *node) {
    const jtok *at = CUR(P);
    advance(P); /* is */
    int negated = 0;
    if (is_name(P, "not")) { negated = 1; advance(P); }
    if (CUR(P)->t != T_NAME) return p_unexpected(P, "a test name");
    const jtok *nt = CUR(P);
    advance(P);
    if (is_op(P, OP_DOT)) return p_fail(P, CUR(P), "dotted test names are not supported");
    int id = jb_test_id(nt->p); /* unknown: -1, checked by check_unknown after the parse */
    jnode *x = mk(P, E_TEST, at);
    if (!x) return NULL;
    x->a = node;
    x->name = nt->p;
    x->fn = id;
    x->flag = negated;
    const jtok *c = CUR(P);
    if (is_op(P, OP_LPAREN)) {
        if (p_call_args(P, x)) return NULL;
    } else if ((c->t == T_NAME || c->t == T_STR || c->t == T_INT || c->t == T_FLOAT ||
                (c->t == T_OP && (c->op == OP_LPAREN || c->op == OP_LBRACKET || c->op == OP_LBRACE))) &&
               !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and")) {
        if (is_name(P, "is")) return p_fail(P, c, "you cannot chain multiple tests with is");
        jnode *arg = p_primary(P);
        if (!arg || !(arg = p_postfix(P, arg))) return NULL;
        x->list = ja_alloc(P->a, sizeof *x->list);
        if (!x->list) return p_fail(P, c, "out of memory");
        x->list[0] = arg;
        x->n = 1;
    }
    return x;
}

static jnode *p_filter(jparse *P, jnode *node, int start_inline) {
    while (is_op(P, OP_PIPE) || start_inline) {
        if (!start_inline) advance(P);
        start_inline = 0;
        const jtok *nt = CUR(P);
        if (nt->t != T_NAME) return p_unexpected(P, "a filter name");
        advance(P);
        if (is_op(P, OP_DOT)) return p_fail(P, CUR(P), "dotted filter names are not supported");
        int id = jb_filter_id(nt->p); /* unknown: -1, checked by check_unknown after the parse */
        jnode *x = mk(P, E_FILTER, nt);
        if (!x) return NULL;
        x->a = node;
        x->name = nt->p;
        x->fn = id;
        if (is_op(P, OP_LPAREN) && p_call_args(P, x)) return NULL;
        node = x;
    }
    return node;
}

static jnode *p_filter_expr(jparse *P, jnode *node) {
    for (;;) {
        if (is_op(P, OP_PIPE)) node = p_filter(P, node, 0);
        else if (is_name(P, "is")) node = p_test(P, node);
        else if (is_op(P, OP_LPAREN)) {
            jnode *x = mk(P, E_CALL, CUR(P));
            if (!x) return NULL;
            x->a = node;
            if (p_call_args(P, x)) return NULL;
            node = x;
        } else return node;
        if (!node) return NULL;
    }
}

static jnode *p_primary(jparse *P) {
    const jtok *t = CUR(P);
    if (enter(P)) return NULL;
    jnode *x = NULL;
    if (t->t == T_NAME) {
        if (!strcmp(t->p, "true") || !strcmp(t->p, "True") || !strcmp(t->p, "false") || !strcmp(t->p, "False")) {
            if ((x = mk(P, E_CONST, t))) x->v = jv_bool(t->p[0] == 't' || t->p[0] == 'T');
        } else if (!strcmp(t->p, "none") || !strcmp(t->p, "None")) {
            if ((x = mk(P, E_CONST, t))) x->v = JV_NONEV;
        } else if ((x = mk(P, E_NAME, t))) {
            x->name = t->p;
            x->name_len = t->n;
        }
        advance(P);
    } else if (t->t == T_STR) {
        jsb b = { 0 };
        while (CUR(P)->t == T_STR) { /* adjacent literals concatenate */
            jsb_put(&b, CUR(P)->p, CUR(P)->n);
            advance(P);
        }
        if ((x = mk(P, E_CONST, t)) && !(x->v = jv_str(P->a, b.p ? b.p : "", b.n))) x = p_fail(P, t, "out of memory");
        free(b.p);
    } else if (t->t == T_INT || t->t == T_FLOAT) {
        if ((x = mk(P, E_CONST, t)) && !(x->v = t->t == T_INT ? jv_int(P->a, t->i) : jv_float(P->a, t->f)))
            x = p_fail(P, t, "out of memory");
        advance(P);
    } else if (is_op(P, OP_LPAREN)) {
        advance(P);
        x = p_tuple(P, 0, 1, NULL, 1);
        if (x && expect_op(P, OP_RPAREN, "')'")) x = NULL;
    } else if (is_op(P, OP_LBRACKET)) {
        advance(P);
        nvec items = { 0 };
        while (!is_op(P, OP_RBRACKET)) {
            if (items.n && expect_op(P, OP_COMMA, "','")) { P->depth--; return NULL; }
            if (is_op(P, OP_RBRACKET)) break;
            jnode *it = p_expr(P, 1);
            if (!it || nv_push(P, &items, it)) { P->depth--; return NULL; }
        }
        advance(P);
        if ((x = mk(P, E_LIST, t))) { x->list = items.v; x->n = items.n; }
    } else if (is_op(P, OP_LBRACE)) {
        advance(P);
        nvec keys = { 0 }, vals = { 0 };
        while (!is_op(P, OP_RBRACE)) {
            if (keys.n && expect_op(P, OP_COMMA, "','")) { P->depth--; return NULL; }
            if (is_op(P, OP_RBRACE)) break;
            jnode *k = p_expr(P, 1);
            if (!k || expect_op(P, OP_COLON, "':'")) { P->depth--; return NULL; }
            jnode *v = p_expr(P, 1);
            if (!v || nv_push(P, &keys, k) || nv_push(P, &vals, v)) { P->depth--; return NULL; }
        }
        advance(P);
        if ((x = mk(P, E_DICT, t))) { x->list = keys.v; x->n = keys.n; x->list2 = vals.v; x->n2 = vals.n; }
    } else {
        x = p_unexpected(P, NULL);
    }
    P->depth--;
    return x;
}

static jnode *p_unary(jparse *P, int with_filter) {
    const jtok *t = CUR(P);
    if (enter(P)) return NULL;
    jnode *node;
    if (is_op(P, OP_SUB) || is_op(P, OP_ADD)) {
        int neg = is_op(P, OP_SUB);
        advance(P);
        jnode *inner = p_unary(P, 0);
        if (!inner || !(node = mk(P, neg ? E_NEG : E_POS, t))) { P->depth--; return NULL; }
        node->a = inner;
    } else {
        node = p_primary(P);
    }
    if (node) node = p_postfix(P, node);
    if (node && with_filter) node = p_filter_expr(P, node);
    P->depth--;
    return node;
}

static jnode *bin(jparse *P, int kind, int op, const jtok *at, jnode *a, jnode *b) {
    jnode *x = mk(P, kind, at);
    if (!x) return NULL;
    x->op = op;
    x->a = a;
    x->b = b;
    return x;
}

static jnode *p_pow(jparse *P) {
    jnode *l = p_unary(P, 1);
    while (l && is_op(P, OP_POW)) {
        const jtok *at = CUR(P);
        advance(P);
        jnode *r = p_unary(P, 1);
        l = r ? bin(P, E_BIN, OP_POW, at, l, r) : NULL;
    }
    return l;
}

static jnode *p_math2(jparse *P) {
    jnode *l = p_pow(P);
    while (l && (is_op(P, OP_MUL) || is_op(P, OP_DIV) || is_op(P, OP_FLOORDIV) || is_op(P, OP_MOD))) {
        const jtok *at = CUR(P);
        int op = at->op;
        advance(P);
        jnode *r = p_pow(P);
        l = r ? bin(P, E_BIN, op, at, l, r) : NULL;
    }
    return l;
}

static jnode *p_concat(jparse *P) {
    const jtok *at = CUR(P);
    jnode *first = p_math2(P);
    if (!first || !is_op(P, OP_TILDE)) return first;
    nvec items = { 0 };
    if (nv_push(P, &items, first)) return NULL;
    while (is_op(P, OP_TILDE)) {
        advance(P);
        jnode *x = p_math2(P);
        if (!x || nv_push(P, &items, x)) return NULL;
    }
    jnode *c = mk(P, E_CONCAT, at);
    if (c) { c->list = items.v; c->n = items.n; }
    return c;
}

static jnode *p_math1(jparse *P) {
    jnode *l = p_concat(P);
    while (l && (is_op(P, OP_ADD) || is_op(P, OP_SUB))) {
        const jtok *at = CUR(P);
        int op = at->op;
        advance(P);
        jnode *r = p_concat(P);
        l = r ? bin(P, E_BIN, op, at, l, r) : NULL;
    }
    return l;
}

static jnode *p_compare(jparse *P) {
    const jtok *at = CUR(P);
    jnode *expr = p_math1(P);
    if (!expr) return NULL;
    nvec operands = { 0 };
    int *ops = NULL;
    for (;;) {
        int op;
        if (CUR(P)->t == T_OP && (CUR(P)->op == OP_EQ || CUR(P)->op == OP_NE || CUR(P)->op == OP_LT ||
                                  CUR(P)->op == OP_LTEQ || CUR(P)->op == OP_GT || CUR(P)->op == OP_GTEQ)) {
            op = CUR(P)->op;
            advance(P);
        } else if (is_name(P, "in")) {
            op = OP_IN;
            advance(P);
        } else if (is_name(P, "not") && peek_is_name(P, "in")) {
            op = OP_NOTIN;
            advance(P);
            advance(P);
        } else break;
        jnode *r = p_math1(P);
        if (!r || nv_push(P, &operands, r)) return NULL;
        int *o2 = ja_realloc(P->a, ops, (size_t)(operands.n - 1) * sizeof *o2, (size_t)operands.n * sizeof *o2);
        if (!o2) return p_fail(P, at, "out of memory");
        ops = o2;
        ops[operands.n - 1] = op;
    }
    if (!operands.n) return expr;
    jnode *c = mk(P, E_CMP, at);
    if (!c) return NULL;
    c->a = expr;
    c->list2 = operands.v;
    c->n2 = operands.n;
    c->ops = ops;
    return c;
}

static jnode *p_not(jparse *P) {
    if (is_name(P, "not")) {
        const jtok *at = CUR(P);
        advance(P);
        if (enter(P)) return NULL;
        jnode *x = p_not(P);
        P->depth--;
        if (!x) return NULL;
        jnode *n = mk(P, E_NOT, at);
        if (n) n->a = x;
        return n;
    }
    return p_compare(P);
}

static jnode *p_and(jparse *P) {
    jnode *l = p_not(P);
    while (l && is_name(P, "and")) {
        const jtok *at = CUR(P);
        advance(P);
        jnode *r = p_not(P);
        l = r ? bin(P, E_AND, 0, at, l, r) : NULL;
    }
    return l;
}

static jnode *p_or(jparse *P) {
    jnode *l = p_and(P);
    while (l && is_name(P, "or")) {
        const jtok *at = CUR(P);
        advance(P);
        jnode *r = p_and(P);
        l = r ? bin(P, E_OR, 0, at, l, r) : NULL;
    }
    return l;
}

static jnode *p_condexpr(jparse *P) {
    const jtok *at = CUR(P);
    jnode *e1 = p_or(P);
    while (e1 && is_name(P, "if")) {
        advance(P);
        jnode *e2 = p_or(P), *e3 = NULL;
        if (!e2) return NULL;
        if (is_name(P, "else")) {
            advance(P);
            if (enter(P)) return NULL;
            e3 = p_condexpr(P);
            P->depth--;
            if (!e3) return NULL;
        }
        jnode *c = mk(P, E_COND, at);
        if (!c) return NULL;
        c->a = e1;
        c->b = e2;
        c->c = e3;
        e1 = c;
    }
    return e1;
}

static jnode *p_expr(jparse *P, int with_condexpr) {
    if (enter(P)) return NULL;
    jnode *x = with_condexpr ? p_condexpr(P) : p_or(P);
    P->depth--;
    return x;
}

static int tuple_end(jparse *P, const char *extra_end) {
    int t = CUR(P)->t;
    if (t == T_VEND || t == T_BEND || is_op(P, OP_RPAREN)) return 1;
    return extra_end && is_name(P, extra_end);
}

static jnode *p_tuple(jparse *P, int simplified, int with_condexpr, const char *extra_end, int explicit_parens) {
    const jtok *at = CUR(P);
    nvec args = { 0 };
    int is_tuple = 0;
    for (;;) {
        if (args.n && expect_op(P, OP_COMMA, "','")) return NULL;
        if (tuple_end(P, extra_end)) break;
        jnode *x = simplified ? p_primary(P) : p_expr(P, with_condexpr);
        if (!x || nv_push(P, &args, x)) return NULL;
        if (is_op(P, OP_COMMA)) is_tuple = 1;
        else break;
    }
    if (!is_tuple) {
        if (args.n) return args.v[0];
        if (!explicit_parens) return p_unexpected(P, "an expression");
    }
    jnode *t = mk(P, E_TUPLE, at);
    if (t) { t->list = args.v; t->n = args.n; }
    return t;
}

/* A target of for/set/with: a name, or names in a tuple; ns.attr where with_ns. */
static jnode *p_assign_target(jparse *P, const char *extra_end, int with_ns, int name_only) {
    const jtok *t = CUR(P);
    if (with_ns && t->t == T_NAME && peek_is_op(P, OP_DOT)) {
        advance(P);
        advance(P);
        const jtok *attr = CUR(P);
        if (attr->t != T_NAME) return p_unexpected(P, "a name");
        advance(P);
        jnode *x = mk(P, E_NSREF, t);
        if (x) { x->name = t->p; x->name_len = t->n; x->name2 = attr->p; }
        return x;
    }
    if (name_only) {
        if (t->t != T_NAME) return p_unexpected(P, "a name");
        advance(P);
        jnode *x = mk(P, E_NAME, t);
        if (x) { x->name = t->p; x->name_len = t->n; }
        return x;
    }
    jnode *x = p_tuple(P, 1, 1, extra_end, 0);
    if (!x) return NULL;
    if (x->kind == E_NAME) return x;
    if (x->kind == E_TUPLE) {
        for (int i = 0; i < x->n; i++)
            if (x->list[i]->kind != E_NAME) return p_fail(P, t, "can't assign to %s", "an expression in a tuple");
        return x;
    }
    return p_fail(P, t, "can't assign to this expression");
}

static int is_reserved_name(const char *s) {
    return !strcmp(s, "true") || !strcmp(s, "false") || !strcmp(s, "none") || !strcmp(s, "True") ||
           !strcmp(s, "False") || !strcmp(s, "None");
}

static jnode *p_body(jparse *P, const char **end_names);

/* {% tag ... %} body {% end... %}: expects the header's end, parses the body up to one
 * of ends[] (the end name is left current). */
static jnode *p_statements(jparse *P, const char **ends, int drop_needle) {
    if (is_op(P, OP_COLON)) advance(P);
    if (expect_type(P, T_BEND, "end of statement block")) return NULL;
    jnode *b = p_body(P, ends);
    if (!b) return NULL;
    if (CUR(P)->t == T_EOF) {
        char list[128] = "";
        for (int i = 0; ends[i]; i++) {
            size_t L = strlen(list);
            snprintf(list + L, sizeof list - L, "%s'%s'", i ? " or " : "", ends[i]);
        }
        return p_fail(P, CUR(P), "unexpected end of template: expected %s", list);
    }
    if (drop_needle) advance(P);
    return b;
}

/* Does the body of a macro use the name (varargs, kwargs, caller)? */
static int uses_name(const jnode *x, const char *name, int depth) {
    if (!x || depth > 4 * JINJA_MAX_NESTING) return 0;
    if (x->kind == E_NAME && !strcmp(x->name, name)) return 1;
    if (x->kind == S_MACRO && depth > 0) return 0; /* a nested macro has its own */
    if (uses_name(x->a, name, depth + 1) || uses_name(x->b, name, depth + 1) || uses_name(x->c, name, depth + 1))
        return 1;
    for (int i = 0; i < x->n; i++)
        if (uses_name(x->list[i], name, depth + 1)) return 1;
    for (int i = 0; i < x->n2; i++)
        if (uses_name(x->list2[i], name, depth + 1)) return 1;
    for (int i = 0; i < x->nkw; i++)
        if (uses_name(x->kwv[i], name, depth + 1)) return 1;
    return 0;
}

/* Does a loop body define a macro (or a call block's caller), which keeps its scope? */
static int defines_macro(const jnode *x, int depth) {
    if (!x || depth > 4 * JINJA_MAX_NESTING) return 0;
    if (x->kind == S_MACRO || x->kind == S_CALLBLOCK) return 1;
    if (defines_macro(x->a, depth + 1) || defines_macro(x->b, depth + 1) || defines_macro(x->c, depth + 1)) return 1;
    for (int i = 0; i < x->n; i++)
        if (defines_macro(x->list[i], depth + 1)) return 1;
    for (int i = 0; i < x->n2; i++)
        if (defines_macro(x->list2[i], depth + 1)) return 1;
    return 0;
}

static jnode *p_macro_like(jparse *P, jnode *m, const char *end) {
    /* (a, b=default, ...) */
    nvec params = { 0 }, defaults = { 0 };
    if (expect_op(P, OP_LPAREN, "'('")) return NULL;
    while (!is_op(P, OP_RPAREN)) {
        if (params.n && expect_op(P, OP_COMMA, "','")) return NULL;
        const jtok *t = CUR(P);
        jnode *arg = p_assign_target(P, NULL, 0, 1);
        if (!arg) return NULL;
        if (is_reserved_name(arg->name)) return p_fail(P, t, "can't assign to '%s'", arg->name);
        if (is_op(P, OP_ASSIGN)) {
            advance(P);
            jnode *d = p_expr(P, 1);
            if (!d || nv_push(P, &defaults, d)) return NULL;
        } else if (defaults.n) {
            return p_fail(P, t, "non-default argument follows default argument");
        }
        if (nv_push(P, &params, arg)) return NULL;
    }
    advance(P);
    m->list = params.v;
    m->n = params.n;
    m->list2 = defaults.v;
    m->n2 = defaults.n;
    const char *ends[] = { end, NULL };
    int in_loop = P->in_loop;
    P->in_loop = 0;
    jnode *body = p_statements(P, ends, 1);
    P->in_loop = in_loop;
    if (!body) return NULL;
    m->a = body;
    m->flag = (uses_name(body, "varargs", 0) ? 1 : 0) | (uses_name(body, "kwargs", 0) ? 2 : 0) |
              (uses_name(body, "caller", 0) ? 4 : 0);
    return m;
}

/* {% block NAME [scoped] [required] %}...{% endblock [NAME] %}: rendered where it stands
 * (no template extends this one: a chat template is one self-contained file), in a scope
 * of its own whose parent is the template's top level, or, scoped, the scope around it;
 * a required block may hold only whitespace and fails when it renders (jinja2's "not
 * found": nothing overrides it). */
static jnode *p_block(jparse *P, const jtok *t) {
    advance(P);
    const jtok *nt = CUR(P);
    if (nt->t != T_NAME) return p_unexpected(P, "a block name");
    jnode *x = mk(P, S_BLOCK, t);
    if (!x) return NULL;
    x->name = nt->p;
    x->name_len = strlen(nt->p);
    advance(P);
    if (is_name(P, "scoped")) { x->flag |= 1; advance(P); }
    if (is_name(P, "required")) { x->flag |= 2; advance(P); }
    if (is_op(P, OP_SUB))
        return p_fail(P, CUR(P), "Block names in Jinja have to be valid Python identifiers and may not contain hyphens, "
                                 "use an underscore instead.");
    static const char *ends[] = { "endblock", NULL };
    int in_loop = P->in_loop;
    P->in_loop = 0;
    jnode *body = p_statements(P, ends, 1);
    P->in_loop = in_loop;
    if (!body) return NULL;
    if (x->flag & 2)
        for (int i = 0; i < body->n; i++) {
            const jnode *b = body->list[i];
            int blank = b->kind == S_TEXT;
            for (size_t k = 0; blank && k < b->v->u.s.n; k++) blank = strchr(" \t\n\r\f\v", b->v->u.s.p[k]) != NULL;
            if (!blank) return p_fail(P, t, "Required blocks can only contain comments or whitespace");
        }
    if (is_name(P, x->name)) advance(P);
    for (int i = 0; i < P->n_blocks; i++)
        if (!strcmp(P->blocks[i], x->name)) return p_fail(P, t, "block '%s' defined twice", x->name);
    if (P->n_blocks == (int)NELEM(P->blocks)) return p_fail(P, t, "more than %d blocks", (int)NELEM(P->blocks));
    P->blocks[P->n_blocks++] = x->name;
    x->b = body;
    return x;
}

/* with context / without context at the end of include, import and from */
static int p_context(jparse *P) {
    if ((is_name(P, "with") || is_name(P, "without")) && P->i + 1 < P->nt && P->t[P->i + 1].t == T_NAME &&
        !strcmp(P->t[P->i + 1].p, "context")) {
        advance(P);
        advance(P);
        return 1;
    }
    return 0;
}

/* extends, include, import and from: parsed as jinja2 parses them; each needs a loader,
 * which a chat template's environment has not (transformers renders from a string), so
 * each fails where it runs, as jinja2's does (an unreached one is harmless). */
static jnode *p_load(jparse *P, const jtok *t, const char *tag) {
    advance(P);
    jnode *x = mk(P, S_LOAD, t);
    if (!x) return NULL;
    x->name = tag;
    if (!(x->a = p_expr(P, 1))) return NULL;
    if (!strcmp(tag, "include")) {
        if (is_name(P, "ignore") && P->i + 1 < P->nt && P->t[P->i + 1].t == T_NAME && !strcmp(P->t[P->i + 1].p, "missing")) {
            advance(P);
            advance(P);
        }
        p_context(P);
    } else if (!strcmp(tag, "import")) {
        if (!is_name(P, "as")) return p_unexpected(P, "'as'");
        advance(P);
        if (!p_assign_target(P, NULL, 0, 1)) return NULL;
        p_context(P);
    } else if (!strcmp(tag, "from")) {
        if (!is_name(P, "import")) return p_unexpected(P, "'import'");
        advance(P);
        for (int n = 0;; n++) {
            if (n && expect_op(P, OP_COMMA, "','")) return NULL;
            if (CUR(P)->t != T_NAME) return p_unexpected(P, "a name");
            if (p_context(P)) break;
            const jtok *nt = CUR(P);
            jnode *name = p_assign_target(P, NULL, 0, 1);
            if (!name) return NULL;
            if (name->name[0] == '_') return p_fail(P, nt, "names starting with an underline can not be imported");
            if (is_name(P, "as")) {
                advance(P);
                if (!p_assign_target(P, NULL, 0, 1)) return NULL;
            }
            if (p_context(P) || !is_op(P, OP_COMMA)) break;
        }
    }
    return x;
}

static jnode *p_statement(jparse *P) {
    const jtok *t = CUR(P);
    if (t->t != T_NAME) return p_unexpected(P, "a tag name");
    const char *tag = t->p;
    if (enter(P)) return NULL;
    jnode *x = NULL;
    if (!strcmp(tag, "if")) {
        jnode *first = NULL, *cur = NULL;
        for (;;) {
            const jtok *at = CUR(P);
            advance(P); /* if / elif */
            jnode *node = mk(P, S_IF, at);
            if (!node) goto out;
            if (!(node->a = p_tuple(P, 0, 0, NULL, 0))) goto out;
            static const char *ends[] = { "elif", "else", "endif", NULL };
            if (!(node->b = p_statements(P, ends, 0))) goto out;
            if (!first) first = node;
            else { /* an elif: the else branch of the previous if */
                cur->c = node;
            }
            cur = node;
            if (is_name(P, "elif")) continue;
            if (is_name(P, "else")) {
                advance(P);
                static const char *ends2[] = { "endif", NULL };
                if (!(cur->c = p_statements(P, ends2, 1))) goto out;
            } else {
                advance(P); /* endif */
            }
            break;
        }
        x = first;
    } else if (!strcmp(tag, "for")) {
        if (!(x = mk(P, S_FOR, t))) goto out;
        advance(P);
        if (!(x->a = p_assign_target(P, "in", 0, 0))) { x = NULL; goto out; }
        if (!is_name(P, "in")) { x = p_unexpected(P, "'in'"); goto out; }
        advance(P);
        if (!(x->b = p_tuple(P, 0, 0, "recursive", 0))) { x = NULL; goto out; }
        if (is_name(P, "if")) {
            advance(P);
            if (!(x->c = p_expr(P, 1))) { x = NULL; goto out; }
        }
        if (is_name(P, "recursive")) { x = p_fail(P, CUR(P), "recursive for loops are not supported"); goto out; }
        static const char *ends[] = { "endfor", "else", NULL };
        P->in_loop++;
        jnode *body = p_statements(P, ends, 0);
        P->in_loop--;
        if (!body) { x = NULL; goto out; }
        x->flag = defines_macro(body, 0);
        x->list = ja_alloc(P->a, 2 * sizeof *x->list);
        if (!x->list) { x = p_fail(P, t, "out of memory"); goto out; }
        x->list[0] = body;
        x->list[1] = NULL;
        x->n = 2;
        if (is_name(P, "else")) {
            advance(P);
            static const char *ends2[] = { "endfor", NULL };
            int in_loop = P->in_loop;
            P->in_loop = 0;
            x->list[1] = p_statements(P, ends2, 1);
            P->in_loop = in_loop;
            if (!x->list[1]) { x = NULL; goto out; }
        } else {
            advance(P);
        }
    } else if (!strcmp(tag, "set")) {
        advance(P);
        jnode *target = p_assign_target(P, NULL, 1, 0);
        if (!target) goto out;
        if (target->kind == E_NAME && is_reserved_name(target->name)) { x = p_fail(P, t, "can't assign to '%s'", target->name); goto out; }
        if (is_op(P, OP_ASSIGN)) {
            advance(P);
            if (!(x = mk(P, S_SET, t))) goto out;
            x->a = target;
            if (!(x->b = p_tuple(P, 0, 1, NULL, 0))) x = NULL;
        } else {
            if (target->kind == E_TUPLE) { x = p_fail(P, t, "a block set assigns to one name"); goto out; }
            if (!(x = mk(P, S_SETBLOCK, t))) goto out;
            x->a = target;
            if (is_op(P, OP_PIPE)) {
                jnode *hole = mk(P, E_HOLE, t);
                if (!hole || !(x->c = p_filter(P, hole, 0))) { x = NULL; goto out; }
            }
            static const char *ends[] = { "endset", NULL };
            if (!(x->b = p_statements(P, ends, 1))) x = NULL;
        }
    } else if (!strcmp(tag, "macro")) {
        advance(P);
        const jtok *nt = CUR(P);
        jnode *name = p_assign_target(P, NULL, 0, 1);
        if (!name) goto out;
        if (is_reserved_name(name->name)) { x = p_fail(P, nt, "can't assign to '%s'", name->name); goto out; }
        if (!(x = mk(P, S_MACRO, t))) goto out;
        x->name = name->name;
        x->name_len = name->name_len;
        x = p_macro_like(P, x, "endmacro");
    } else if (!strcmp(tag, "call")) {
        advance(P);
        if (!(x = mk(P, S_CALLBLOCK, t))) goto out;
        x->name = "caller";
        x->name_len = 6;
        jnode *params = NULL;
        if (is_op(P, OP_LPAREN)) { /* the caller's signature: (a, b=1) */
            jnode *sig = mk(P, S_MACRO, t);
            if (!sig) { x = NULL; goto out; }
            nvec ps = { 0 }, ds = { 0 };
            advance(P);
            while (!is_op(P, OP_RPAREN)) {
                if (ps.n && expect_op(P, OP_COMMA, "','")) { x = NULL; goto out; }
                jnode *arg = p_assign_target(P, NULL, 0, 1);
                if (!arg) { x = NULL; goto out; }
                if (is_op(P, OP_ASSIGN)) {
                    advance(P);
                    jnode *d = p_expr(P, 1);
                    if (!d || nv_push(P, &ds, d)) { x = NULL; goto out; }
                } else if (ds.n) { x = p_fail(P, CUR(P), "non-default argument follows default argument"); goto out; }
                if (nv_push(P, &ps, arg)) { x = NULL; goto out; }
            }
            advance(P);
            sig->list = ps.v;
            sig->n = ps.n;
            sig->list2 = ds.v;
            sig->n2 = ds.n;
            params = sig;
        }
        jnode *call = p_expr(P, 1);
        if (!call) { x = NULL; goto out; }
        if (call->kind != E_CALL) { x = p_fail(P, t, "expected call"); goto out; }
        x->a = call;
        jnode *m = params ? params : mk(P, S_MACRO, t);
        if (!m) { x = NULL; goto out; }
        m->name = "caller";
        static const char *ends[] = { "endcall", NULL };
        int in_loop = P->in_loop;
        P->in_loop = 0;
        jnode *body = p_statements(P, ends, 1);
        P->in_loop = in_loop;
        if (!body) { x = NULL; goto out; }
        m->a = body;
        m->flag = (uses_name(body, "varargs", 0) ? 1 : 0) | (uses_name(body, "kwargs", 0) ? 2 : 0);
        x->b = m;
    } else if (!strcmp(tag, "filter")) {
        advance(P);
        if (!(x = mk(P, S_FILTERBLOCK, t))) goto out;
        jnode *hole = mk(P, E_HOLE, t);
        if (!hole || !(x->c = p_filter(P, hole, 1))) { x = NULL; goto out; }
        static const char *ends[] = { "endfilter", NULL };
        if (!(x->b = p_statements(P, ends, 1))) x = NULL;
    } else if (!strcmp(tag, "with")) {
        advance(P);
        if (!(x = mk(P, S_WITH, t))) goto out;
        nvec targets = { 0 }, values = { 0 };
        while (CUR(P)->t != T_BEND) {
            if (targets.n && expect_op(P, OP_COMMA, "','")) { x = NULL; goto out; }
            jnode *tg = p_assign_target(P, NULL, 0, 0);
            if (!tg || expect_op(P, OP_ASSIGN, "'='")) { x = NULL; goto out; }
            jnode *v = p_expr(P, 1);
            if (!v || nv_push(P, &targets, tg) || nv_push(P, &values, v)) { x = NULL; goto out; }
        }
        x->list = targets.v;
        x->n = targets.n;
        x->list2 = values.v;
        x->n2 = values.n;
        static const char *ends[] = { "endwith", NULL };
        if (!(x->b = p_statements(P, ends, 1))) x = NULL;
    } else if (!strcmp(tag, "break") || !strcmp(tag, "continue")) {
        if (!P->in_loop) { x = p_fail(P, t, "'%s' outside loop", tag); goto out; }
        if ((x = mk(P, tag[0] == 'b' ? S_BREAK : S_CONTINUE, t))) advance(P);
    } else if (!strcmp(tag, "generation")) { /* transformers' AssistantTracker: renders its body */
        advance(P);
        static const char *ends[] = { "endgeneration", NULL };
        x = p_statements(P, ends, 1);
    } else if (!strcmp(tag, "print")) {
        advance(P);
        if (!(x = mk(P, S_OUT, t))) goto out;
        if (!(x->a = p_tuple(P, 0, 1, NULL, 0))) x = NULL;
    } else if (!strcmp(tag, "block")) {
        x = p_block(P, t);
    } else if (!strcmp(tag, "extends") || !strcmp(tag, "include") || !strcmp(tag, "import") || !strcmp(tag, "from")) {
        x = p_load(P, t, tag);
    } else if (!strcmp(tag, "autoescape")) {
        x = p_fail(P, t, "the '%s' tag is not supported", tag);
    } else {
        const char **e = P->end_names;
        if (e && e[0]) {
            char list[128] = "";
            for (int i = 0; e[i]; i++) {
                size_t L = strlen(list);
                snprintf(list + L, sizeof list - L, "%s'%s'", i ? " or " : "", e[i]);
            }
            x = p_fail(P, t, "encountered unknown tag '%s'; the innermost block open needs %s", tag, list);
        } else {
            x = p_fail(P, t, "encountered unknown tag '%s'", tag);
        }
    }
out:
    P->depth--;
    return x;
}

static jnode *p_body(jparse *P, const char **end_names) {
    const char **saved = P->end_names;
    P->end_names = end_names;
    jnode *body = mk(P, S_BODY, CUR(P));
    nvec stmts = { 0 };
    if (!body) goto fail;
    for (;;) {
        const jtok *t = CUR(P);
        if (t->t == T_EOF) break;
        if (t->t == T_DATA) {
            jnode *x = mk(P, S_TEXT, t);
            if (!x || !(x->v = jv_str(P->a, t->p, t->n))) { p_fail(P, t, "out of memory"); goto fail; }
            if (nv_push(P, &stmts, x)) goto fail;
            advance(P);
        } else if (t->t == T_VBEGIN) {
            advance(P);
            jnode *x = mk(P, S_OUT, t);
            if (!x || !(x->a = p_tuple(P, 0, 1, NULL, 0))) goto fail;
            if (expect_type(P, T_VEND, "end of print statement")) goto fail;
            if (nv_push(P, &stmts, x)) goto fail;
        } else if (t->t == T_BBEGIN) {
            advance(P);
            if (end_names && CUR(P)->t == T_NAME)
                for (int i = 0; end_names[i]; i++)
                    if (!strcmp(CUR(P)->p, end_names[i])) goto done;
            jnode *x = p_statement(P);
            if (!x) goto fail;
            if (expect_type(P, T_BEND, "end of statement block")) goto fail;
            if (nv_push(P, &stmts, x)) goto fail;
        } else {
            char buf[80];
            p_fail(P, t, "unexpected %s", tok_desc(t, buf, sizeof buf));
            goto fail;
        }
    }
done:
    body->list = stmts.v;
    body->n = stmts.n;
    P->end_names = saved;
    return body;
fail:
    P->end_names = saved;
    return NULL;
}

/* An unknown filter or test is jinja2's compile-time error, except inside an if block
 * or a conditional expression (a "soft" frame, compiler.py), where it fails only when
 * it runs; loop, macro, call, set, filter and with bodies start hard again. */
static int check_unknown(jparse *P, const jnode *x, int soft, int depth) {
    if (!x || depth > 4 * JINJA_MAX_NESTING) return 0;
    if ((x->kind == E_FILTER || x->kind == E_TEST) && x->fn < 0 && !soft) {
        jtok at = { .line = x->line, .col = x->col };
        p_fail(P, &at, "no %s named '%s'", x->kind == E_FILTER ? "filter" : "test", x->name);
        return -1;
    }
    int s_a = soft, s_b = soft, s_c = soft, s_list = soft, s_list2 = soft;
    switch (x->kind) {
    case S_IF: case E_COND: s_a = s_b = s_c = 1; break;
    case S_FOR: s_c = 0; s_list = 0; break;           /* b: the iterable, in the outer frame */
    case S_MACRO: s_a = s_list2 = 0; break;
    case S_CALLBLOCK: s_b = 0; break;
    case S_SETBLOCK: s_b = s_c = 0; break;
    case S_FILTERBLOCK: s_b = s_c = 0; break;
    case S_WITH: s_b = 0; break;
    case S_BLOCK: s_b = 0; break; /* a block is a function of its own: a hard frame */
    default: break;
    }
    if (check_unknown(P, x->a, s_a, depth + 1) || check_unknown(P, x->b, s_b, depth + 1) ||
        check_unknown(P, x->c, s_c, depth + 1))
        return -1;
    for (int i = 0; i < x->n; i++)
        if (check_unknown(P, x->list[i], s_list, depth + 1)) return -1;
    for (int i = 0; i < x->n2; i++)
        if (check_unknown(P, x->list2[i], s_list2, depth + 1)) return -1;
    for (int i = 0; i < x->nkw; i++)
        if (check_unknown(P, x->kwv[i], soft, depth + 1)) return -1;
    return 0;
}

jinja_tmpl *jinja_parse(const char *src, size_t len, jinja_error *err) {
    jinja_error dummy;
    if (!err) err = &dummy;
    memset(err, 0, sizeof *err);
    if (!src) {
        snprintf(err->msg, sizeof err->msg, "no template source");
        return NULL;
    }
    size_t bad;
    if (!ju_valid(src, len, &bad)) {
        snprintf(err->msg, sizeof err->msg, "the template is not valid UTF-8 (byte %zu)", bad);
        return NULL;
    }
    jinja_tmpl *t = calloc(1, sizeof *t);
    if (!t) { snprintf(err->msg, sizeof err->msg, "out of memory"); return NULL; }
    /* newlines to "\n", one trailing newline dropped (keep_trailing_newline=False) */
    t->src = malloc(len + 1);
    if (!t->src) { free(t); snprintf(err->msg, sizeof err->msg, "out of memory"); return NULL; }
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            t->src[o++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            t->src[o++] = src[i];
        }
    }
    if (o > 0 && t->src[o - 1] == '\n') o--;
    t->src[o] = 0;
    t->len = o;
    jlex L = { .a = &t->a, .s = t->src, .n = o, .line = 1, .err = err };
    if (lex(&L)) goto fail;
    jparse P = { .a = &t->a, .t = L.toks, .nt = L.nt, .err = err };
    t->root = p_body(&P, NULL);
    if (!t->root || check_unknown(&P, t->root, 0, 0)) goto fail;
    if (CUR(&P)->t != T_EOF) {
        p_unexpected(&P, NULL);
        goto fail;
    }
    return t;
fail:
    if (!err->msg[0]) snprintf(err->msg, sizeof err->msg, "out of memory");
    jinja_tmpl_free(t);
    return NULL;
}

void jinja_tmpl_free(jinja_tmpl *t) {
    if (!t) return;
    ja_free_all(&t->a);
    free(t->src);
    free(t);
}

static int node_uses(const jnode *x, const char *name, int depth) {
    if (!x || depth > 4 * JINJA_MAX_NESTING) return 0;
    if ((x->kind == E_NAME || x->kind == E_NSREF) && !strcmp(x->name, name)) return 1;
    if (node_uses(x->a, name, depth + 1) || node_uses(x->b, name, depth + 1) || node_uses(x->c, name, depth + 1))
        return 1;
    for (int i = 0; i < x->n; i++)
        if (node_uses(x->list[i], name, depth + 1)) return 1;
    for (int i = 0; i < x->n2; i++)
        if (node_uses(x->list2[i], name, depth + 1)) return 1;
    for (int i = 0; i < x->nkw; i++)
        if (node_uses(x->kwv[i], name, depth + 1)) return 1;
    return 0;
}

int jinja_tmpl_uses(const jinja_tmpl *t, const char *name) { return t && name && node_uses(t->root, name, 0); }

/* ---------------------------------------------------------------- environment */

typedef struct jvar {
    const char *name; /* in the arena */
    jinja_value *v;
} jvar;

struct jinja_env {
    jarena a;
    jvar *vars;
    size_t n, cap;
    int64_t now;
    int has_now;
};

jinja_env *jinja_env_new(void) {
    jinja_env *e = calloc(1, sizeof *e);
    return e;
}

void jinja_env_free(jinja_env *e) {
    if (!e) return;
    ja_free_all(&e->a);
    free(e->vars);
    free(e);
}

void jinja_env_set_time(jinja_env *e, int64_t t) {
    e->now = t;
    e->has_now = 1;
}

int jinja_env_set(jinja_env *e, const char *name, jinja_value *v) {
    if (!e || !name || !v) return -1;
    for (size_t i = 0; i < e->n; i++)
        if (!strcmp(e->vars[i].name, name)) {
            e->vars[i].v = v;
            return 0;
        }
    if (e->n == e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 16;
        jvar *p = realloc(e->vars, cap * sizeof *p);
        if (!p) return -1;
        e->vars = p;
        e->cap = cap;
    }
    size_t L = strlen(name);
    char *nm = ja_alloc(&e->a, L + 1);
    if (!nm) return -1;
    memcpy(nm, name, L + 1);
    e->vars[e->n].name = nm;
    e->vars[e->n].v = v;
    e->n++;
    return 0;
}

int jinja_env_set_all(jinja_env *e, const jinja_value *d) {
    if (!e || !d || d->t != JV_DICT) return -1;
    for (size_t i = 0; i < d->u.d.n; i++) {
        const jinja_value *k = d->u.d.kv[i].k;
        if (k->t != JV_STR) continue;
        if (jinja_env_set(e, k->u.s.p, d->u.d.kv[i].v)) return -1;
    }
    return 0;
}

jinja_value *jinja_json_parse(jinja_env *e, const char *s, size_t len, jinja_error *err) {
    jinja_error dummy;
    if (!err) err = &dummy;
    memset(err, 0, sizeof *err);
    if (!e || !s) { snprintf(err->msg, sizeof err->msg, "JSON: no input"); return NULL; }
    jinja_value *v = jv_json_parse(&e->a, s, len, err);
    if (!v && !err->msg[0]) snprintf(err->msg, sizeof err->msg, "JSON: out of memory");
    return v;
}

char *jinja_json_dump(const jinja_value *v, size_t *len) {
    if (!v) return NULL;
    jarena a = { 0 };
    jinja_error err = { 0 };
    jctx c = { .a = &a, .err = &err, .lim = { .max_memory = JINJA_DEFAULT_MAX_MEMORY } };
    jsb b = { 0 };
    int rc = jv_json_to(&c, v, &b, NULL, ", ", ": ", 0);
    ja_free_all(&a);
    if (rc || b.oom || !b.p) { free(b.p); return NULL; }
    if (len) *len = b.n;
    return b.p;
}

jinja_value *jinja_none(jinja_env *e) { return e ? JV_NONEV : NULL; }
jinja_value *jinja_bool(jinja_env *e, int b) { return e ? jv_bool(b) : NULL; }
jinja_value *jinja_int(jinja_env *e, int64_t i) { return e ? jv_int(&e->a, i) : NULL; }
jinja_value *jinja_string(jinja_env *e, const char *s) { return e && s ? jv_str(&e->a, s, strlen(s)) : NULL; }
jinja_value *jinja_string_n(jinja_env *e, const char *s, size_t n) { return e && s ? jv_str(&e->a, s, n) : NULL; }
jinja_value *jinja_list_new(jinja_env *e) { return e ? jv_list(&e->a, 0) : NULL; }
jinja_value *jinja_dict_new(jinja_env *e) { return e ? jv_dict(&e->a) : NULL; }

int jinja_list_push(jinja_env *e, jinja_value *l, jinja_value *v) {
    if (!e || !l || !v || l->t != JV_LIST || l->gen || l->range) return -1;
    return jv_push(&e->a, l, v);
}

int jinja_dict_set(jinja_env *e, jinja_value *d, const char *key, jinja_value *v) {
    if (!e || !d || !key || !v || d->t != JV_DICT) return -1;
    jinja_value *k = jv_str(&e->a, key, strlen(key));
    return k ? jv_dict_set(&e->a, d, k, v) : -1;
}

void jinja_dict_del(jinja_value *d, const char *key) {
    if (!d || d->t != JV_DICT || !key) return;
    size_t n = strlen(key);
    for (size_t i = 0; i < d->u.d.n; i++) {
        const jinja_value *k = d->u.d.kv[i].k;
        if (k->t == JV_STR && k->u.s.n == n && !memcmp(k->u.s.p, key, n)) {
            memmove(&d->u.d.kv[i], &d->u.d.kv[i + 1], (d->u.d.n - i - 1) * sizeof(jkv));
            d->u.d.n--;
            return;
        }
    }
}

int jinja_is_dict(const jinja_value *v) { return v && v->t == JV_DICT; }
int jinja_is_list(const jinja_value *v) { return v && v->t == JV_LIST; }
int jinja_is_null(const jinja_value *v) { return v && v->t == JV_NONE; }
jinja_value *jinja_dict_get(const jinja_value *v, const char *key) {
    return v && v->t == JV_DICT && key ? jv_dict_get_s(v, key, strlen(key)) : NULL;
}
size_t jinja_dict_len(const jinja_value *v) { return v && v->t == JV_DICT ? v->u.d.n : 0; }
const char *jinja_dict_key(const jinja_value *v, size_t i) {
    if (!v || v->t != JV_DICT || i >= v->u.d.n || v->u.d.kv[i].k->t != JV_STR) return NULL;
    return v->u.d.kv[i].k->u.s.p;
}
jinja_value *jinja_dict_val(const jinja_value *v, size_t i) {
    return v && v->t == JV_DICT && i < v->u.d.n ? v->u.d.kv[i].v : NULL;
}
size_t jinja_list_len(const jinja_value *v) { return v && v->t == JV_LIST ? v->u.l.n : 0; }
jinja_value *jinja_list_at(const jinja_value *v, size_t i) {
    return v && v->t == JV_LIST && i < v->u.l.n ? v->u.l.v[i] : NULL;
}
const char *jinja_str(const jinja_value *v, size_t *len) {
    if (!v || v->t != JV_STR) return NULL;
    if (len) *len = v->u.s.n;
    return v->u.s.p;
}

/* ---------------------------------------------------------------- scopes */

typedef struct jframe {
    struct jframe *parent;
    jvar *vars;
    size_t n, cap;
} jframe;

typedef struct jrender {
    jctx c;
    jsb *out;          /* where text goes (the render's, or a capture's) */
    jframe *root;
    jinja_env *env;
} jrender;

static jframe *frame_new(jctx *c, jframe *parent) {
    jframe *f = ja_alloc(c->a, sizeof *f);
    if (!f) return (jframe *)jmemfail(c);
    memset(f, 0, sizeof *f);
    f->parent = parent;
    return f;
}

static int frame_set(jctx *c, jframe *f, const char *name, jinja_value *v) {
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->vars[i].name, name)) {
            f->vars[i].v = v;
            return 0;
        }
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 4;
        jvar *p = ja_realloc(c->a, f->vars, f->cap * sizeof *p, cap * sizeof *p);
        if (!p) { jmemfail(c); return -1; }
        f->vars = p;
        f->cap = cap;
    }
    f->vars[f->n].name = name;
    f->vars[f->n].v = v;
    f->n++;
    return 0;
}

static jinja_value *lookup(jrender *R, jframe *f, const char *name, size_t len) {
    for (; f; f = f->parent)
        for (size_t i = 0; i < f->n; i++)
            if (!strcmp(f->vars[i].name, name)) return f->vars[i].v;
    for (size_t i = 0; i < R->env->n; i++)
        if (!strcmp(R->env->vars[i].name, name)) return R->env->vars[i].v;
    jinja_value *g = jb_global(&R->c, name, len);
    if (g) return g;
    if (R->c.failed) return NULL;
    jinja_value *u = jv_undef(R->c.a, "'%s' is undefined", name);
    return u ? u : jmemfail(&R->c);
}

/* ---------------------------------------------------------------- expressions */

static jinja_value *eval(jrender *R, const jnode *x, jframe *f);
static int render_body(jrender *R, const jnode *body, jframe *f);

#define AT(R, x) ((R)->c.line = (x)->line, (R)->c.col = (x)->col)

static jinja_value *undef_use(jctx *c, const jinja_value *u) {
    return jfail(c, "%s", u->u.hint ? u->u.hint : "an undefined value was used");
}

jinja_value *jr_getattr(jctx *c, jinja_value *obj, const char *name, size_t n) {
    if (obj->t == JV_UNDEF) return undef_use(c, obj);
    if (obj->t == JV_LOOP) {
        jloop *L = obj->u.loop;
        size_t len = L->items->u.l.n, i = L->i;
        if (!strcmp(name, "index")) return jv_int(c->a, (int64_t)i + 1);
        if (!strcmp(name, "index0")) return jv_int(c->a, (int64_t)i);
        if (!strcmp(name, "revindex")) return jv_int(c->a, (int64_t)(len - i));
        if (!strcmp(name, "revindex0")) return jv_int(c->a, (int64_t)(len - i - 1));
        if (!strcmp(name, "first")) return jv_bool(i == 0);
        if (!strcmp(name, "last")) return jv_bool(i + 1 == len);
        if (!strcmp(name, "length")) return jv_int(c->a, (int64_t)len);
        if (!strcmp(name, "depth")) return jv_int(c->a, L->depth0 + 1);
        if (!strcmp(name, "depth0")) return jv_int(c->a, L->depth0);
        if (!strcmp(name, "previtem"))
            return i > 0 ? L->items->u.l.v[i - 1] : jv_undef(c->a, "there is no previous item");
        if (!strcmp(name, "nextitem"))
            return i + 1 < len ? L->items->u.l.v[i + 1] : jv_undef(c->a, "there is no next item");
        int unsafe = 0;
        jinja_value *m = jb_method(c, obj, name, n, &unsafe);
        if (m || c->failed) return m;
        return jv_undef(c->a, "'LoopContext object' has no attribute '%s'", name);
    }
    if (obj->t == JV_NS) {
        jinja_value *v = jv_dict_get_s(obj, name, n);
        return v ? v : jv_undef(c->a, "'Namespace object' has no attribute '%s'", name);
    }
    if (obj->t == JV_LIST && obj->tuple == 2 && obj->u.l.n == 2) { /* groupby's (grouper, list) named tuple */
        if (!strcmp(name, "grouper")) return obj->u.l.v[0];
        if (!strcmp(name, "list")) return obj->u.l.v[1];
    }
    int unsafe = 0;
    jinja_value *m = jb_method(c, obj, name, n, &unsafe);
    if (m || c->failed) return m;
    if (unsafe) return jv_undef(c->a, "access to attribute '%s' of '%s' object is unsafe.", name, jv_type_name(obj));
    if (obj->t == JV_DICT) {
        jinja_value *v = jv_dict_get_s(obj, name, n);
        if (v) return v;
    }
    if (obj->t == JV_NONE) return jv_undef(c->a, "'None' has no attribute '%s'", name);
    return jv_undef(c->a, "'%s object' has no attribute '%s'", jv_type_name(obj), name);
}

jinja_value *jr_getitem(jctx *c, jinja_value *obj, jinja_value *key) {
    if (obj->t == JV_UNDEF) return undef_use(c, obj);
    if (obj->t == JV_LIST && !obj->gen && (key->t == JV_INT || key->t == JV_BOOL)) {
        int64_t i = key->t == JV_BOOL ? key->u.b : key->u.i, n = (int64_t)obj->u.l.n;
        if (i < 0) i += n;
        if (i >= 0 && i < n) return obj->u.l.v[i];
        return jv_undef(c->a, "%s object has no element %lld", jv_type_name(obj), (long long)(key->t == JV_BOOL ? key->u.b : key->u.i));
    }
    if (obj->t == JV_STR && (key->t == JV_INT || key->t == JV_BOOL)) {
        int64_t i = key->t == JV_BOOL ? key->u.b : key->u.i, n = (int64_t)ju_len(obj->u.s.p, obj->u.s.n);
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
            size_t a = ju_offset(obj->u.s.p, obj->u.s.n, (size_t)i);
            size_t b = ju_offset(obj->u.s.p, obj->u.s.n, (size_t)i + 1);
            jinja_value *r = jv_str(c->a, obj->u.s.p + a, b - a);
            return r ? r : jmemfail(c);
        }
        return jv_undef(c->a, "str object has no element %lld", (long long)i);
    }
    if (obj->t == JV_DICT) {
        jinja_value *v = jv_dict_get(obj, key);
        if (v) return v;
    }
    if (key->t == JV_STR) {
        jinja_value *v = jr_getattr(c, obj, key->u.s.p, key->u.s.n);
        return v;
    }
    if (obj->t == JV_NONE) return jv_undef(c->a, "'None' has no element");
    return jv_undef(c->a, "%s object has no such element", jv_type_name(obj));
}

jinja_value *jr_iter(jctx *c, jinja_value *v) {
    switch (v->t) {
    case JV_LIST: return v;
    case JV_UNDEF: return jv_list(c->a, 0);
    case JV_STR: {
        jinja_value *l = jv_list(c->a, ju_len(v->u.s.p, v->u.s.n));
        if (!l) return jmemfail(c);
        size_t i = 0;
        while (i < v->u.s.n) {
            size_t st = i;
            ju_next(v->u.s.p, v->u.s.n, &i);
            jinja_value *ch = jv_str(c->a, v->u.s.p + st, i - st);
            if (!ch || jv_push(c->a, l, ch)) return jmemfail(c);
        }
        return l;
    }
    case JV_DICT: {
        jinja_value *l = jv_list(c->a, v->u.d.n);
        if (!l) return jmemfail(c);
        for (size_t i = 0; i < v->u.d.n; i++)
            if (jv_push(c->a, l, v->u.d.kv[i].k)) return jmemfail(c);
        return l;
    }
    default: return jfail(c, "'%s' object is not iterable", jv_type_name(v));
    }
}

static jinja_value *call_macro(jrender *R, jinja_value *m, const jargs *args, jinja_value *caller);

jinja_value *jr_call(jctx *c, jinja_value *fn, const jargs *args) {
    switch (fn->t) {
    case JV_MACRO: return call_macro((jrender *)c, fn, args, NULL);
    case JV_FUNC: return jb_call(c, fn, args);
    case JV_UNDEF: return undef_use(c, fn);
    default: return jfail(c, "'%s' object is not callable", jv_type_name(fn));
    }
}

/* Evaluates call arguments into a (from the arena). */
static int eval_args(jrender *R, const jnode *x, jframe *f, jargs *out) {
    memset(out, 0, sizeof *out);
    jctx *c = &R->c;
    if (x->n) {
        out->pos = ja_alloc(c->a, (size_t)x->n * sizeof *out->pos);
        if (!out->pos) { jmemfail(c); return -1; }
        for (int i = 0; i < x->n; i++)
            if (!(out->pos[i] = eval(R, x->list[i], f))) return -1;
        out->npos = x->n;
    }
    if (x->nkw) {
        out->kwv = ja_alloc(c->a, (size_t)x->nkw * sizeof *out->kwv);
        if (!out->kwv) { jmemfail(c); return -1; }
        for (int i = 0; i < x->nkw; i++)
            if (!(out->kwv[i] = eval(R, x->kwv[i], f))) return -1;
        out->kwn = x->kwn;
        out->nkw = x->nkw;
    }
    return 0;
}

static int64_t pyfloordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

static int64_t pymod(int64_t a, int64_t b) {
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}

/* Python's % formatting ("%s, %d" % args) into b. */
int jr_percent_format(jctx *c, const jinja_value *fmt, jinja_value *args, jsb *b) {
    jinja_value *single[1] = { args };
    jinja_value **av = single;
    size_t na = 1, k = 0;
    if (args->t == JV_LIST && args->tuple) { av = args->u.l.v; na = args->u.l.n; }
    const char *s = fmt->u.s.p;
    size_t n = fmt->u.s.n, run = 0;
    int used_dict = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') continue;
        jsb_put(b, s + run, i - run);
        i++;
        if (i >= n) { jfail(c, "incomplete format"); return -1; }
        jinja_value *arg = NULL;
        if (s[i] == '(') { /* %(name)s */
            size_t e = i + 1;
            while (e < n && s[e] != ')') e++;
            if (e >= n || args->t != JV_DICT) { jfail(c, "format requires a mapping"); return -1; }
            arg = jv_dict_get_s(args, s + i + 1, e - i - 1);
            if (!arg) { jfail(c, "format: key '%.*s' missing", (int)(e - i - 1), s + i + 1); return -1; }
            used_dict = 1;
            i = e + 1;
        }
        /* flags, width, precision */
        char spec[32];
        size_t sp = 0;
        spec[sp++] = '%';
        while (i < n && strchr("-+ #0", s[i]) && sp < 20) spec[sp++] = s[i++];
        size_t w0 = sp;
        while (i < n && is_digit(s[i]) && sp < 24) spec[sp++] = s[i++];
        size_t p0 = sp;
        if (i < n && s[i] == '.') {
            spec[sp++] = s[i++];
            p0 = sp;
            while (i < n && is_digit(s[i]) && sp < 28) spec[sp++] = s[i++];
        }
        if (p0 - w0 > 6 || sp - p0 > 3) { jfail(c, "a %% format's width or precision is too large"); return -1; }
        if (i >= n) { jfail(c, "incomplete format"); return -1; }
        char conv = s[i];
        run = i + 1;
        if (conv == '%') { jsb_putc(b, '%'); continue; }
        if (!arg) {
            if (k >= na) { jfail(c, "not enough arguments for format string"); return -1; }
            arg = av[k++];
        }
        if (conv == 's' || conv == 'r' || conv == 'a') {
            jsb tmp = { .limit = c->lim.max_memory };
            int rc = conv == 's' ? jv_str_to(c, arg, &tmp) : jv_repr_to(c, arg, &tmp);
            if (rc) { free(tmp.p); return -1; }
            if (sp > 1) { /* width/precision on a string: by bytes, good enough for ASCII */
                spec[sp++] = 's';
                spec[sp] = 0;
                jsb_printf(b, spec, tmp.p ? tmp.p : "");
            } else {
                jsb_put(b, tmp.p, tmp.n);
            }
            free(tmp.p);
        } else if (strchr("dixXo", conv)) {
            if (!jv_is_num(arg)) { jfail(c, "%%%c format: a real number is required, not %s", conv, jv_type_name(arg)); return -1; }
            if (arg->t == JV_FLOAT && !(fabs(arg->u.f) < 9.2e18)) { jfail(c, "%%%c format: %g is not a 64-bit integer", conv, arg->u.f); return -1; }
            long long v = arg->t == JV_FLOAT ? (long long)arg->u.f : arg->t == JV_BOOL ? arg->u.b : arg->u.i;
            spec[sp++] = 'l';
            spec[sp++] = 'l';
            spec[sp++] = conv == 'i' ? 'd' : conv;
            spec[sp] = 0;
            jsb_printf(b, spec, v);
        } else if (strchr("feEgG", conv)) {
            if (!jv_is_num(arg)) { jfail(c, "%%%c format: a real number is required, not %s", conv, jv_type_name(arg)); return -1; }
            spec[sp++] = conv;
            spec[sp] = 0;
            jsb_printf(b, spec, jv_num(arg));
        } else {
            jfail(c, "unsupported format character '%c'", conv);
            return -1;
        }
    }
    jsb_put(b, s + run, n - run);
    if (!used_dict && k < na && !(args->t == JV_DICT)) {
        jfail(c, "not all arguments converted during string formatting");
        return -1;
    }
    return 0;
}

static jinja_value *sb_value(jctx *c, jsb *b) {
    if (b->over) { free(b->p); return jmemfail(c); }
    if (b->oom) { free(b->p); return jfail(c, "out of memory"); }
    jinja_value *r = jv_str(c->a, b->p ? b->p : "", b->n);
    free(b->p);
    return r ? r : jmemfail(c);
}

static jinja_value *repeat(jctx *c, jinja_value *seq, int64_t times) {
    if (times < 0) times = 0;
    if (seq->t == JV_STR) {
        if (seq->u.s.n && (uint64_t)times > c->lim.max_memory / seq->u.s.n) {
            c->a->over = 1;
            return jmemfail(c);
        }
        jsb b = { .limit = c->lim.max_memory };
        for (int64_t i = 0; i < times; i++) jsb_put(&b, seq->u.s.p, seq->u.s.n);
        return sb_value(c, &b);
    }
    if (seq->u.l.n && (uint64_t)times > c->lim.max_steps / seq->u.l.n) return jfail(c, "list repetition over the step limit");
    jinja_value *l = jv_list(c->a, 0);
    if (!l) return jmemfail(c);
    l->tuple = !!seq->tuple; /* a group tuple times n: a tuple */
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq->u.l.n; k++)
            if (jv_push(c->a, l, seq->u.l.v[k])) return jmemfail(c);
    return l;
}

/* r (a fresh string) as a Markup */
static jinja_value *mark(jctx *c, jinja_value *r) {
    if (!r) return NULL;
    if (r == JV_EMPTY) {
        if (!(r = jv_new(c->a, JV_STR))) return jmemfail(c);
        r->u.s.p = "";
    }
    r->safe = 1;
    return r;
}

static jinja_value *binop(jrender *R, int op, jinja_value *a, jinja_value *b) {
    jctx *c = &R->c;
    static const char *names[] = { [OP_ADD] = "+", [OP_SUB] = "-", [OP_DIV] = "/", [OP_FLOORDIV] = "//",
                                   [OP_MUL] = "*", [OP_MOD] = "%", [OP_POW] = "**" };
    if (a->t == JV_UNDEF) return undef_use(c, a);
    if (b->t == JV_UNDEF) return undef_use(c, b);
    int an = jv_is_num(a), bn = jv_is_num(b);
    if (an && bn) {
        int ints = a->t != JV_FLOAT && b->t != JV_FLOAT;
        int64_t x = a->t == JV_BOOL ? a->u.b : a->u.i, y = b->t == JV_BOOL ? b->u.b : b->u.i;
        double fx = jv_num(a), fy = jv_num(b);
        int64_t r;
        switch (op) {
        case OP_ADD:
            if (ints) return __builtin_add_overflow(x, y, &r) ? jfail(c, "integer overflow") : jv_int(c->a, r);
            return jv_float(c->a, fx + fy);
        case OP_SUB:
            if (ints) return __builtin_sub_overflow(x, y, &r) ? jfail(c, "integer overflow") : jv_int(c->a, r);
            return jv_float(c->a, fx - fy);
        case OP_MUL:
            if (ints) return __builtin_mul_overflow(x, y, &r) ? jfail(c, "integer overflow") : jv_int(c->a, r);
            return jv_float(c->a, fx * fy);
        case OP_DIV:
            if (fy == 0) return jfail(c, "division by zero");
            return jv_float(c->a, fx / fy);
        case OP_FLOORDIV:
            if (ints) {
                if (y == 0) return jfail(c, "integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) return jfail(c, "integer overflow");
                return jv_int(c->a, pyfloordiv(x, y));
            }
            if (fy == 0) return jfail(c, "float floor division by zero");
            return jv_float(c->a, floor(fx / fy));
        case OP_MOD:
            if (ints) {
                if (y == 0) return jfail(c, "integer division or modulo by zero");
                if (y == -1) return jv_int(c->a, 0);
                return jv_int(c->a, pymod(x, y));
            }
            if (fy == 0) return jfail(c, "float modulo");
            {
                double m = fmod(fx, fy);
                if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
                return jv_float(c->a, m);
            }
        case OP_POW:
            if (ints && y >= 0) {
                int64_t acc = 1, base = x;
                int64_t e = y;
                while (e > 0) {
                    if (e & 1) {
                        if (__builtin_mul_overflow(acc, base, &acc)) return jfail(c, "integer overflow");
                    }
                    e >>= 1;
                    if (e && __builtin_mul_overflow(base, base, &base)) return jfail(c, "integer overflow");
                }
                return jv_int(c->a, acc);
            }
            if (fx == 0 && fy < 0) return jfail(c, "0.0 cannot be raised to a negative power");
            return jv_float(c->a, pow(fx, fy));
        }
    }
    if (op == OP_ADD && a->t == JV_STR && b->t == JV_STR && (a->safe || b->safe)) {
        /* Markup + str escapes the str (and str + Markup, Markup's __radd__) */
        jinja_value *x = a->safe ? a : jv_escape(c, a), *y = x && b->safe ? b : x ? jv_escape(c, b) : NULL;
        if (!y) return NULL;
        jsb s = { .limit = c->lim.max_memory };
        jsb_put(&s, x->u.s.p, x->u.s.n);
        jsb_put(&s, y->u.s.p, y->u.s.n);
        jinja_value *r = sb_value(c, &s);
        return mark(c, r);
    }
    if (op == OP_ADD && a->t == JV_STR && b->t == JV_STR) {
        jsb s = { .limit = c->lim.max_memory };
        jsb_put(&s, a->u.s.p, a->u.s.n);
        jsb_put(&s, b->u.s.p, b->u.s.n);
        return sb_value(c, &s);
    }
    if (op == OP_ADD && a->t == JV_LIST && b->t == JV_LIST && !a->gen && !b->gen && !a->tuple == !b->tuple && !a->range && !b->range) {
        jinja_value *l = jv_list(c->a, a->u.l.n + b->u.l.n);
        if (!l) return jmemfail(c);
        l->tuple = !!a->tuple;
        for (size_t i = 0; i < a->u.l.n; i++) jv_push(c->a, l, a->u.l.v[i]);
        for (size_t i = 0; i < b->u.l.n; i++) jv_push(c->a, l, b->u.l.v[i]);
        return l;
    }
    if (op == OP_MUL) {
        jinja_value *seq = NULL, *cnt = NULL;
        if ((a->t == JV_STR || (a->t == JV_LIST && !a->gen && !a->range)) && (b->t == JV_INT || b->t == JV_BOOL)) { seq = a; cnt = b; }
        if ((b->t == JV_STR || (b->t == JV_LIST && !b->gen && !b->range)) && (a->t == JV_INT || a->t == JV_BOOL)) { seq = b; cnt = a; }
        if (seq) return repeat(c, seq, cnt->t == JV_BOOL ? cnt->u.b : cnt->u.i);
    }
    if (op == OP_MOD && a->t == JV_STR) {
        if (a->safe) { /* Markup % args escapes the string arguments */
            if (b->t == JV_LIST && b->tuple) {
                jinja_value *t = jv_list(c->a, b->u.l.n);
                if (!t) return jmemfail(c);
                t->tuple = 1;
                for (size_t i = 0; i < b->u.l.n; i++) {
                    jinja_value *x = b->u.l.v[i]->t == JV_STR ? jv_escape(c, b->u.l.v[i]) : b->u.l.v[i];
                    if (!x) return NULL;
                    jv_push(c->a, t, x);
                }
                b = t;
            } else if (b->t == JV_STR && !(b = jv_escape(c, b))) {
                return NULL;
            }
        }
        jsb s = { .limit = c->lim.max_memory };
        if (jr_percent_format(c, a, b, &s)) { free(s.p); return NULL; }
        jinja_value *r = sb_value(c, &s);
        return a->safe ? mark(c, r) : r;
    }
    return jfail(c, "unsupported operand type(s) for %s: '%s' and '%s'", names[op], jv_type_name(a), jv_type_name(b));
}

/* a in b */
static int contains(jctx *c, jinja_value *b, jinja_value *a) {
    switch (b->t) {
    case JV_STR:
        if (a->t != JV_STR) { jfail(c, "'in <string>' requires string as left operand, not %s", jv_type_name(a)); return -1; }
        return a->u.s.n == 0 || memmem(b->u.s.p, b->u.s.n, a->u.s.p, a->u.s.n) != NULL;
    case JV_LIST:
        for (size_t i = 0; i < b->u.l.n; i++) {
            int r = jv_eq(c, a, b->u.l.v[i]);
            if (r) return r;
        }
        return 0;
    case JV_DICT: return jv_dict_get(b, a) != NULL;
    case JV_UNDEF: return 0;
    default: jfail(c, "argument of type '%s' is not iterable", jv_type_name(b)); return -1;
    }
}

static jinja_value *compare(jrender *R, int op, jinja_value *a, jinja_value *b, int *res) {
    jctx *c = &R->c;
    int r;
    switch (op) {
    case OP_EQ: case OP_NE:
        r = jv_eq(c, a, b);
        if (r < 0) return NULL;
        *res = op == OP_EQ ? r : !r;
        return JV_TRUE;
    case OP_IN: case OP_NOTIN:
        r = contains(c, b, a);
        if (r < 0) return NULL;
        *res = op == OP_IN ? r : !r;
        return JV_TRUE;
    default: {
        if (a->t == JV_UNDEF) return undef_use(c, a);
        if (b->t == JV_UNDEF) return undef_use(c, b);
        int cmp;
        static const char *names[] = { [OP_LT] = "<", [OP_LTEQ] = "<=", [OP_GT] = ">", [OP_GTEQ] = ">=" };
        if (jv_cmp(c, a, b, &cmp)) {
            c->failed = 0; /* reword the message with the operator */
            c->err->msg[0] = 0;
            return jfail(c, "'%s' not supported between instances of '%s' and '%s'", names[op], jv_type_name(a), jv_type_name(b));
        }
        int nan = (a->t == JV_FLOAT && isnan(a->u.f)) || (b->t == JV_FLOAT && isnan(b->u.f));
        *res = nan ? 0 : op == OP_LT ? cmp < 0 : op == OP_LTEQ ? cmp <= 0 : op == OP_GT ? cmp > 0 : cmp >= 0;
        return JV_TRUE;
    }
    }
}

static jinja_value *slice(jrender *R, jinja_value *obj, jinja_value *ja, jinja_value *jb, jinja_value *jc) {
    jctx *c = &R->c;
    if (obj->t == JV_UNDEF) return undef_use(c, obj);
    int64_t v[3];
    int given[3];
    jinja_value *in[3] = { ja, jb, jc };
    for (int k = 0; k < 3; k++) {
        given[k] = in[k] && in[k]->t != JV_NONE;
        if (!given[k]) continue;
        if (in[k]->t != JV_INT && in[k]->t != JV_BOOL)
            return jfail(c, "slice indices must be integers or None, not %s", jv_type_name(in[k]));
        v[k] = in[k]->t == JV_BOOL ? in[k]->u.b : in[k]->u.i;
    }
    int64_t step = given[2] ? v[2] : 1;
    if (step == 0) return jfail(c, "slice step cannot be zero");
    int is_str = obj->t == JV_STR;
    if (!is_str && (obj->t != JV_LIST || obj->gen)) return jv_undef(c->a, "'%s' object is not subscriptable", jv_type_name(obj));
    int64_t len = is_str ? (int64_t)ju_len(obj->u.s.p, obj->u.s.n) : (int64_t)obj->u.l.n;
    int64_t start, stop;
    if (step > 0) {
        start = given[0] ? v[0] : 0;
        stop = given[1] ? v[1] : len;
        if (start < 0) { start += len; if (start < 0) start = 0; }
        if (start > len) start = len;
        if (stop < 0) { stop += len; if (stop < 0) stop = 0; }
        if (stop > len) stop = len;
    } else {
        start = given[0] ? v[0] : len - 1;
        stop = given[1] ? v[1] : -1 - len; /* "to the beginning" */
        if (start < 0) { start += len; if (start < 0) start = -1; }
        if (start >= len) start = len - 1;
        if (stop < 0) { stop += len; if (stop < 0) stop = -1; }
        if (stop >= len) stop = len - 1;
    }
    if (is_str) {
        /* code point offsets */
        size_t *off = malloc(((size_t)len + 1) * sizeof *off);
        if (!off) return jfail(c, "out of memory");
        size_t i = 0, k = 0;
        while (i < obj->u.s.n) { off[k++] = i; ju_next(obj->u.s.p, obj->u.s.n, &i); }
        off[k] = obj->u.s.n;
        jsb b = { .limit = c->lim.max_memory };
        if (step == 1) {
            if (stop > start) jsb_put(&b, obj->u.s.p + off[start], off[stop] - off[start]);
        } else {
            for (int64_t j = start; step > 0 ? j < stop : j > stop; j += step)
                jsb_put(&b, obj->u.s.p + off[j], off[j + 1] - off[j]);
        }
        free(off);
        return sb_value(c, &b);
    }
    jinja_value *l = jv_list(c->a, 0);
    if (!l) return jmemfail(c);
    l->tuple = !!obj->tuple; /* a slice of a group tuple: a tuple */
    for (int64_t j = start; step > 0 ? j < stop : j > stop; j += step)
        if (jv_push(c->a, l, obj->u.l.v[j])) return jmemfail(c);
    return l;
}

static jinja_value *eval_filter(jrender *R, const jnode *x, jframe *f, jinja_value *in) {
    if (x->fn < 0) {
        AT(R, x);
        return jfail(&R->c, "no filter named '%s' found", x->name);
    }
    jargs args;
    if (eval_args(R, x, f, &args)) return NULL;
    AT(R, x);
    return jb_filter(&R->c, x->fn, in, &args);
}

static jinja_value *eval_with_hole(jrender *R, const jnode *x, jframe *f, jinja_value *text) {
    /* a filter chain over E_HOLE: innermost first */
    if (x->kind == E_HOLE) return text;
    jinja_value *in = eval_with_hole(R, x->a, f, text);
    if (!in) return NULL;
    return eval_filter(R, x, f, in);
}

static jinja_value *eval(jrender *R, const jnode *x, jframe *f) {
    jctx *c = &R->c;
    if (c->failed) return NULL;
    if (++c->rec > 8 * JINJA_MAX_NESTING) {
        AT(R, x);
        c->rec--;
        return jfail(c, "the render nests too deeply (macros calling macros?)");
    }
    jinja_value *r = NULL, *a, *b;
    switch (x->kind) {
    case E_CONST: r = x->v; break;
    case E_NAME: AT(R, x); r = lookup(R, f, x->name, x->name_len); break;
    case E_ATTR:
        if (!(a = eval(R, x->a, f))) break;
        AT(R, x);
        r = jr_getattr(c, a, x->name, x->name_len);
        if (!r && !c->failed) jmemfail(c);
        break;
    case E_ITEM:
        if (!(a = eval(R, x->a, f)) || !(b = eval(R, x->b, f))) break;
        AT(R, x);
        r = jr_getitem(c, a, b);
        if (!r && !c->failed) jmemfail(c);
        break;
    case E_SLICE: {
        if (x->n == 0) { /* a slice inside a tuple subscript (s[1:2, 3]): Python's TypeError, jinja2's undefined */
            r = jv_undef(c->a, "a slice in a tuple subscript");
            break;
        }
        jinja_value *obj = eval(R, x->list[0], f), *s0 = NULL, *s1 = NULL, *s2 = NULL;
        if (!obj) break;
        if ((x->a && !(s0 = eval(R, x->a, f))) || (x->b && !(s1 = eval(R, x->b, f))) || (x->c && !(s2 = eval(R, x->c, f))))
            break;
        AT(R, x);
        r = slice(R, obj, s0, s1, s2);
        break;
    }
    case E_CALL: {
        jinja_value *fn = eval(R, x->a, f);
        jargs args;
        if (!fn || eval_args(R, x, f, &args)) break;
        AT(R, x);
        r = fn->t == JV_MACRO ? call_macro(R, fn, &args, NULL) : jr_call(c, fn, &args);
        break;
    }
    case E_FILTER:
        if (!(a = eval(R, x->a, f))) break;
        r = eval_filter(R, x, f, a);
        break;
    case E_TEST: {
        if (!(a = eval(R, x->a, f))) break;
        jargs args;
        if (eval_args(R, x, f, &args)) break;
        AT(R, x);
        if (x->fn < 0) { jfail(c, "no test named '%s' found", x->name); break; }
        int t = jb_test(c, x->fn, a, &args);
        if (t >= 0) r = jv_bool(x->flag ? !t : t);
        break;
    }
    case E_NEG: case E_POS:
        if (!(a = eval(R, x->a, f))) break;
        AT(R, x);
        if (a->t == JV_UNDEF) { undef_use(c, a); break; }
        if (a->t == JV_FLOAT) r = jv_float(c->a, x->kind == E_NEG ? -a->u.f : a->u.f);
        else if (a->t == JV_INT || a->t == JV_BOOL) {
            int64_t v = a->t == JV_BOOL ? a->u.b : a->u.i;
            if (x->kind == E_NEG && v == INT64_MIN) { jfail(c, "integer overflow"); break; }
            r = jv_int(c->a, x->kind == E_NEG ? -v : v);
        } else jfail(c, "bad operand type for unary %c: '%s'", x->kind == E_NEG ? '-' : '+', jv_type_name(a));
        break;
    case E_NOT:
        if ((a = eval(R, x->a, f))) r = jv_bool(!jv_truthy(a));
        break;
    case E_AND:
        if (!(a = eval(R, x->a, f))) break;
        r = jv_truthy(a) ? eval(R, x->b, f) : a;
        break;
    case E_OR:
        if (!(a = eval(R, x->a, f))) break;
        r = jv_truthy(a) ? a : eval(R, x->b, f);
        break;
    case E_BIN:
        if (!(a = eval(R, x->a, f)) || !(b = eval(R, x->b, f))) break;
        AT(R, x);
        r = binop(R, x->op, a, b);
        break;
    case E_CMP: {
        if (!(a = eval(R, x->a, f))) break;
        r = JV_TRUE;
        for (int i = 0; i < x->n2; i++) {
            if (!(b = eval(R, x->list2[i], f))) { r = NULL; break; }
            AT(R, x);
            int res = 0;
            if (!compare(R, x->ops[i], a, b, &res)) { r = NULL; break; }
            if (!res) { r = JV_FALSE; break; }
            a = b;
        }
        break;
    }
    case E_COND:
        if (!(a = eval(R, x->b, f))) break;
        if (jv_truthy(a)) r = eval(R, x->a, f);
        else if (x->c) r = eval(R, x->c, f);
        else r = jv_undef(c->a, "the inline if-expression on line %d evaluated to false and no else section was defined.", x->line);
        break;
    case E_LIST: case E_TUPLE: {
        jinja_value *l = jv_list(c->a, (size_t)x->n);
        if (!l) { jmemfail(c); break; }
        l->tuple = x->kind == E_TUPLE;
        r = l;
        for (int i = 0; i < x->n; i++) {
            jinja_value *v = eval(R, x->list[i], f);
            if (!v) { r = NULL; break; }
            jv_push(c->a, l, v);
        }
        break;
    }
    case E_DICT: {
        jinja_value *d = jv_dict(c->a);
        if (!d) { jmemfail(c); break; }
        r = d;
        for (int i = 0; i < x->n; i++) {
            jinja_value *k = eval(R, x->list[i], f), *v = k ? eval(R, x->list2[i], f) : NULL;
            if (!v) { r = NULL; break; }
            if (k->t == JV_LIST && !k->tuple) { AT(R, x); jfail(c, "unhashable type: 'list'"); r = NULL; break; }
            if (k->t == JV_DICT || k->t == JV_NS) { AT(R, x); jfail(c, "unhashable type: '%s'", jv_type_name(k)); r = NULL; break; }
            if (jv_dict_set(c->a, d, k, v)) { jmemfail(c); r = NULL; break; }
        }
        break;
    }
    case E_CONCAT: {
        jsb s = { .limit = c->lim.max_memory };
        int ok = 1;
        for (int i = 0; i < x->n && ok; i++) {
            jinja_value *v = eval(R, x->list[i], f);
            if (!v || jv_str_to(c, v, &s)) ok = 0;
        }
        AT(R, x);
        if (!ok) { free(s.p); break; }
        r = sb_value(c, &s);
        break;
    }
    default:
        AT(R, x);
        jfail(c, "internal error: expression kind %d", x->kind);
    }
    c->rec--;
    if (!r && !c->failed) jmemfail(c);
    return r;
}

/* ---------------------------------------------------------------- statements */

enum { R_OK = 0, R_ERR = -1, R_BREAK = 1, R_CONTINUE = 2 };

static int assign(jrender *R, const jnode *target, jinja_value *v, jframe *f) {
    jctx *c = &R->c;
    if (target->kind == E_NAME) return frame_set(c, f, target->name, v) ? R_ERR : R_OK;
    if (target->kind == E_NSREF) {
        jinja_value *ns = lookup(R, f, target->name, target->name_len);
        if (!ns) return R_ERR;
        AT(R, target);
        if (ns->t != JV_NS) { jfail(c, "cannot assign attribute on non-namespace object"); return R_ERR; }
        jinja_value *k = jv_str(c->a, target->name2, strlen(target->name2));
        if (!k || jv_dict_set(c->a, ns, k, v)) { jmemfail(c); return R_ERR; }
        return R_OK;
    }
    /* a tuple of names: unpack */
    AT(R, target);
    jinja_value *items = jr_iter(c, v);
    if (!items) return R_ERR;
    if (items->u.l.n != (size_t)target->n) {
        if (items->u.l.n > (size_t)target->n) jfail(c, "too many values to unpack (expected %d)", target->n);
        else jfail(c, "not enough values to unpack (expected %d, got %zu)", target->n, items->u.l.n);
        return R_ERR;
    }
    for (int i = 0; i < target->n; i++)
        if (frame_set(c, f, target->list[i]->name, items->u.l.v[i])) return R_ERR;
    return R_OK;
}

static int out_put(jrender *R, const char *s, size_t n) {
    jsb_put(R->out, s, n);
    if (R->out->over) {
        jfail(&R->c, "the rendered text is over the limit of %zu bytes", R->c.lim.max_output);
        return R_ERR;
    }
    if (R->out->oom) { jfail(&R->c, "out of memory"); return R_ERR; }
    return R_OK;
}

/* Renders body into a new string (macro bodies, set blocks, filter blocks). */
static jinja_value *capture(jrender *R, const jnode *body, jframe *f, int *rc_out) {
    jsb buf = { .limit = R->c.lim.max_output };
    jsb *saved = R->out;
    R->out = &buf;
    int rc = render_body(R, body, f);
    R->out = saved;
    if (rc_out) *rc_out = rc;
    if (rc == R_ERR) { free(buf.p); return NULL; }
    return sb_value(&R->c, &buf);
}

static jinja_value *call_macro(jrender *R, jinja_value *m, const jargs *args, jinja_value *caller) {
    jctx *c = &R->c;
    const jnode *x = m->u.m.node;
    const char *name = x->name ? x->name : "caller";
    if (c->calls >= c->lim.max_depth)
        return jfail(c, "macro '%s': calls nested more than %d deep", name, c->lim.max_depth);
    if (jstep(c, 1)) return NULL;
    jframe *f = frame_new(c, m->u.m.scope);
    if (!f) return NULL;
    int np = x->n, nd = x->n2;
    jinja_value **vals = ja_alloc(c->a, (size_t)(np + 1) * sizeof *vals);
    if (!vals) return jmemfail(c);
    memset(vals, 0, (size_t)(np + 1) * sizeof *vals);
    jinja_value *varargs = jv_list(c->a, 0), *kwargs = jv_dict(c->a);
    if (!varargs || !kwargs) return jmemfail(c);
    varargs->tuple = 1;
    for (int i = 0; i < args->npos; i++) {
        if (i < np) vals[i] = args->pos[i];
        else if (x->flag & 1) { if (jv_push(c->a, varargs, args->pos[i])) return jmemfail(c); }
        else return jfail(c, "macro '%s' takes not more than %d argument(s)", name, np);
    }
    for (int k = 0; k < args->nkw; k++) {
        int found = -1;
        for (int i = 0; i < np; i++)
            if (!strcmp(x->list[i]->name, args->kwn[k])) found = i;
        if (found >= 0) {
            if (vals[found]) return jfail(c, "macro '%s' got multiple values for argument '%s'", name, args->kwn[k]);
            vals[found] = args->kwv[k];
        } else if (!strcmp(args->kwn[k], "caller") && !caller) {
            caller = args->kwv[k];
        } else if (x->flag & 2) {
            jinja_value *key = jv_str(c->a, args->kwn[k], strlen(args->kwn[k]));
            if (!key || jv_dict_set(c->a, kwargs, key, args->kwv[k])) return jmemfail(c);
        } else {
            return jfail(c, "macro '%s' takes no keyword argument '%s'", name, args->kwn[k]);
        }
    }
    c->calls++;
    for (int i = 0; i < np; i++) {
        jinja_value *v = vals[i];
        if (!v) {
            int di = i - (np - nd);
            if (di >= 0) {
                v = eval(R, x->list2[di], f);
                if (!v) { c->calls--; return NULL; }
            } else {
                v = jv_undef(c->a, "parameter '%s' was not provided", x->list[i]->name);
                if (!v) { c->calls--; return jmemfail(c); }
            }
        }
        if (frame_set(c, f, x->list[i]->name, v)) { c->calls--; return NULL; }
    }
    if ((x->flag & 1) && frame_set(c, f, "varargs", varargs)) { c->calls--; return NULL; }
    if ((x->flag & 2) && frame_set(c, f, "kwargs", kwargs)) { c->calls--; return NULL; }
    if (caller && frame_set(c, f, "caller", caller)) { c->calls--; return NULL; }
    jinja_value *r = capture(R, x->a, f, NULL);
    c->calls--;
    return r;
}

static int render_stmt(jrender *R, const jnode *x, jframe *f);

static int render_body(jrender *R, const jnode *body, jframe *f) {
    for (int i = 0; i < body->n; i++) {
        int rc = render_stmt(R, body->list[i], f);
        if (rc) return rc;
    }
    return R_OK;
}

static int render_for(jrender *R, const jnode *x, jframe *f) {
    jctx *c = &R->c;
    jinja_value *it = eval(R, x->b, f);
    if (!it) return R_ERR;
    AT(R, x);
    jinja_value *items = jr_iter(c, it);
    if (!items) return R_ERR;
    if (x->c) { /* {% for a in b if cond %}: filtered first, so loop.length counts what runs */
        jinja_value *kept = jv_list(c->a, 0);
        if (!kept) { jmemfail(c); return R_ERR; }
        jframe *g = frame_new(c, f);
        if (!g) return R_ERR;
        for (size_t i = 0; i < items->u.l.n; i++) {
            if (jstep(c, 1)) return R_ERR;
            g->n = 0;
            if (assign(R, x->a, items->u.l.v[i], g)) return R_ERR;
            jinja_value *cond = eval(R, x->c, g);
            if (!cond) return R_ERR;
            if (jv_truthy(cond) && jv_push(c->a, kept, items->u.l.v[i])) { jmemfail(c); return R_ERR; }
        }
        items = kept;
    }
    if (items->u.l.n == 0) return x->list[1] ? render_body(R, x->list[1], f) : R_OK;
    jloop *L = ja_alloc(c->a, sizeof *L);
    jinja_value *lv = jv_new(c->a, JV_LOOP);
    if (!L || !lv) { jmemfail(c); return R_ERR; }
    memset(L, 0, sizeof *L);
    L->items = items;
    /* loop.depth stays 1: only recursive loops (not supported) deepen it */
    lv->u.loop = L;
    /* A body that defines no macro (a macro keeps its scope) reuses one scope, emptied
     * each iteration: a long loop then takes no memory an iteration. */
    jframe *g = x->flag ? NULL : frame_new(c, f);
    if (!x->flag && !g) return R_ERR;
    for (size_t i = 0; i < items->u.l.n; i++) {
        if (jstep(c, 1)) return R_ERR;
        L->i = i;
        if (x->flag) g = frame_new(c, f);
        else g->n = 0;
        if (!g || frame_set(c, g, "loop", lv) || assign(R, x->a, items->u.l.v[i], g)) return R_ERR;
        int rc = render_body(R, x->list[0], g);
        if (rc == R_ERR) return R_ERR;
        if (rc == R_BREAK) break;
    }
    return R_OK;
}

static int render_stmt(jrender *R, const jnode *x, jframe *f) {
    jctx *c = &R->c;
    if (c->failed) return R_ERR;
    if (++c->rec > 8 * JINJA_MAX_NESTING) {
        AT(R, x);
        jfail(c, "the render nests too deeply (macros calling macros?)");
        c->rec--;
        return R_ERR;
    }
    int rc = R_OK;
    jinja_value *v;
    switch (x->kind) {
    case S_TEXT: rc = out_put(R, x->v->u.s.p, x->v->u.s.n); break;
    case S_OUT:
        if (!(v = eval(R, x->a, f))) { rc = R_ERR; break; }
        AT(R, x);
        if (v->t == JV_STR) rc = out_put(R, v->u.s.p, v->u.s.n);
        else {
            jsb s = { .limit = c->lim.max_output };
            if (jv_str_to(c, v, &s)) rc = R_ERR;
            else rc = out_put(R, s.p ? s.p : "", s.n);
            free(s.p);
        }
        break;
    case S_IF:
        if (!(v = eval(R, x->a, f))) { rc = R_ERR; break; }
        if (jv_truthy(v)) rc = render_body(R, x->b, f);
        else if (x->c) rc = x->c->kind == S_IF ? render_stmt(R, x->c, f) : render_body(R, x->c, f);
        break;
    case S_FOR: rc = render_for(R, x, f); break;
    case S_SET:
        if (!(v = eval(R, x->b, f))) { rc = R_ERR; break; }
        rc = assign(R, x->a, v, f);
        break;
    case S_SETBLOCK: {
        int brc;
        v = capture(R, x->b, f, &brc);
        if (!v) { rc = R_ERR; break; }
        if (x->c && !(v = eval_with_hole(R, x->c, f, v))) { rc = R_ERR; break; }
        rc = assign(R, x->a, v, f);
        break;
    }
    case S_FILTERBLOCK: {
        v = capture(R, x->b, f, NULL);
        if (!v || !(v = eval_with_hole(R, x->c, f, v))) { rc = R_ERR; break; }
        AT(R, x);
        jsb s = { .limit = c->lim.max_output };
        if (jv_str_to(c, v, &s)) rc = R_ERR;
        else rc = out_put(R, s.p ? s.p : "", s.n);
        free(s.p);
        break;
    }
    case S_MACRO: {
        jinja_value *m = jv_new(c->a, JV_MACRO);
        if (!m) { jmemfail(c); rc = R_ERR; break; }
        m->u.m.node = x;
        m->u.m.scope = f;
        rc = frame_set(c, f, x->name, m) ? R_ERR : R_OK;
        break;
    }
    case S_CALLBLOCK: {
        jinja_value *caller = jv_new(c->a, JV_MACRO);
        if (!caller) { jmemfail(c); rc = R_ERR; break; }
        caller->u.m.node = x->b;
        caller->u.m.scope = f;
        const jnode *call = x->a;
        jinja_value *fn = eval(R, call->a, f);
        jargs args;
        if (!fn || eval_args(R, call, f, &args)) { rc = R_ERR; break; }
        AT(R, x);
        if (fn->t != JV_MACRO) { jfail(c, "a call block needs a macro, not %s", jv_type_name(fn)); rc = R_ERR; break; }
        if (!(v = call_macro(R, fn, &args, caller))) { rc = R_ERR; break; }
        rc = out_put(R, v->u.s.p, v->u.s.n);
        break;
    }
    case S_WITH: {
        jframe *g = frame_new(c, f);
        if (!g) { rc = R_ERR; break; }
        for (int i = 0; i < x->n && rc == R_OK; i++) {
            /* values see the enclosing scope, as jinja2's */
            if (!(v = eval(R, x->list2[i], f))) rc = R_ERR;
            else rc = assign(R, x->list[i], v, g);
        }
        if (rc == R_OK) rc = render_body(R, x->b, g);
        break;
    }
    case S_BLOCK: {
        AT(R, x);
        if (x->flag & 2) { jfail(c, "Required block '%s' not found", x->name); rc = R_ERR; break; }
        jframe *g = frame_new(c, x->flag & 1 ? f : R->root);
        if (!g) { rc = R_ERR; break; }
        rc = render_body(R, x->b, g);
        if (rc == R_BREAK || rc == R_CONTINUE) rc = R_OK;
        break;
    }
    case S_LOAD:
        if (!(v = eval(R, x->a, f))) { rc = R_ERR; break; }
        AT(R, x);
        jfail(c, "'%s': no loader for this environment specified (a chat template is rendered from one string, "
                 "with nothing to load)", x->name);
        rc = R_ERR;
        break;
    case S_BREAK: rc = R_BREAK; break;
    case S_CONTINUE: rc = R_CONTINUE; break;
    case S_BODY: rc = render_body(R, x, f); break;
    default:
        AT(R, x);
        jfail(c, "internal error: statement kind %d", x->kind);
        rc = R_ERR;
    }
    c->rec--;
    if (c->failed) return R_ERR;
    return rc;
}

int jinja_render(const jinja_tmpl *t, jinja_env *e, const jinja_limits *lim, char **out, size_t *out_len,
                 jinja_error *err) {
    jinja_error dummy;
    if (!err) err = &dummy;
    memset(err, 0, sizeof *err);
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (!t || !e || !out) {
        snprintf(err->msg, sizeof err->msg, "jinja_render: no template, environment or output");
        return -1;
    }
    jrender R;
    memset(&R, 0, sizeof R);
    R.env = e;
    R.c.env = e;
    R.c.a = &e->a;
    R.c.err = err;
    R.c.lim.max_output = lim && lim->max_output ? lim->max_output : JINJA_DEFAULT_MAX_OUTPUT;
    R.c.lim.max_memory = lim && lim->max_memory ? lim->max_memory : JINJA_DEFAULT_MAX_MEMORY;
    R.c.lim.max_steps = lim && lim->max_steps ? lim->max_steps : JINJA_DEFAULT_MAX_STEPS;
    R.c.lim.max_depth = lim && lim->max_depth ? lim->max_depth : JINJA_DEFAULT_MAX_DEPTH;
    R.c.now = e->has_now ? e->now : -1;
    /* the arena's limit counts from what the caller's values use already */
    size_t before = e->a.used;
    e->a.limit = before + R.c.lim.max_memory;
    e->a.over = e->a.oom = 0;
    jsb buf = { .limit = R.c.lim.max_output };
    R.out = &buf;
    R.root = frame_new(&R.c, NULL);
    int rc = R.root ? render_body(&R, t->root, R.root) : R_ERR;
    e->a.limit = 0;
    if (rc == R_ERR || R.c.failed) {
        if (!err->msg[0]) snprintf(err->msg, sizeof err->msg, "render failed");
        free(buf.p);
        return -1;
    }
    if (!buf.p) jsb_put(&buf, "", 0);
    if (buf.oom) {
        free(buf.p);
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return -1;
    }
    *out = buf.p;
    if (out_len) *out_len = buf.n;
    return 0;
}
