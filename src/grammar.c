/* grammar.c - GBNF parser, pushdown matcher and vocabulary-trie token masks (see
 * grammar.h for the model). The semantics follow llama.cpp's llama-grammar.cpp; the
 * code is minfer's own: the matcher keeps its stack set serialized in one int32
 * buffer, so that the mask walk can store each distinct set once and remember the
 * step from a set over a byte (struct setstore). */
#include "grammar.h"

#include <stdlib.h>
#include <string.h>

/* ================================================================ parser */

typedef struct ebuf {
    gram_elem *v;
    uint32_t n, cap;
} ebuf;

typedef struct parser {
    const char *src, *end;
    ebuf *rules;        /* [n_rules] elements of each rule, without the closing END */
    char **names;       /* [n_rules] */
    uint8_t *defined;   /* [n_rules] a definition was seen (or the rule is synthesized) */
    uint32_t n_rules, cap_rules;
    uint32_t *hash;     /* open addressing: rule id + 1, 0 empty; [hash_cap] */
    uint32_t hash_cap;
    uint64_t n_pushed;  /* elements pushed over the whole parse (an upper bound of the size) */
    int depth;          /* ( ) nesting */
    int failed;
    mf_err *err;
} parser;

/* Records the first error with its line and column; later ones are dropped. */
static void perr(parser *p, const char *at, const char *fmt, const char *arg) {
    if (p->failed) return;
    p->failed = 1;
    int line = 1, col = 1;
    for (const char *c = p->src; c < at && c < p->end; c++) {
        if (*c == '\n') line++, col = 1;
        else col++;
    }
    char msg[256];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    mf_fail(p->err, MF_ERR_INPUT, "grammar: line %d column %d: %s", line, col, msg);
}

static int epush(parser *p, ebuf *b, uint32_t type, uint32_t value) {
    if (p->failed) return -1;
    if (++p->n_pushed > GRAM_MAX_ELEMS) {
        perr(p, p->end, "grammar too large (more than %s elements)", "2097152");
        return -1;
    }
    if (b->n == b->cap) {
        uint32_t cap = b->cap ? 2 * b->cap : 16;
        gram_elem *v = realloc(b->v, cap * sizeof *v);
        if (!v) { perr(p, p->end, "out of memory%s", ""); return -1; }
        b->v = v, b->cap = cap;
    }
    b->v[b->n++] = (gram_elem){ type, value };
    return 0;
}

static uint64_t name_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static int hash_insert(parser *p, uint32_t id);

/* Adds a rule named s[0..n); returns its id or -1. */
static int rule_add(parser *p, const char *s, size_t n) {
    if (p->failed) return -1;
    if (p->n_rules >= GRAM_MAX_RULES) {
        perr(p, p->end, "too many rules (more than %s)", "65536");
        return -1;
    }
    if (p->n_rules == p->cap_rules) {
        uint32_t cap = p->cap_rules ? 2 * p->cap_rules : 64;
        ebuf *r = realloc(p->rules, cap * sizeof *r);
        if (r) p->rules = r;
        char **nm = r ? realloc(p->names, cap * sizeof *nm) : NULL;
        if (nm) p->names = nm;
        uint8_t *d = nm ? realloc(p->defined, cap) : NULL;
        if (!d) { perr(p, p->end, "out of memory%s", ""); return -1; }
        p->defined = d;
        p->cap_rules = cap;
    }
    char *name = malloc(n + 1);
    if (!name) { perr(p, p->end, "out of memory%s", ""); return -1; }
    memcpy(name, s, n);
    name[n] = 0;
    uint32_t id = p->n_rules++;
    p->rules[id] = (ebuf){ 0 };
    p->names[id] = name;
    p->defined[id] = 0;
    if (hash_insert(p, id)) return -1;
    return (int)id;
}

static int hash_insert(parser *p, uint32_t id) {
    if ((uint64_t)p->n_rules * 2 > p->hash_cap) { /* grow and rehash */
        uint32_t cap = p->hash_cap ? 2 * p->hash_cap : 256;
        uint32_t *h = calloc(cap, sizeof *h);
        if (!h) { perr(p, p->end, "out of memory%s", ""); return -1; }
        free(p->hash);
        p->hash = h, p->hash_cap = cap;
        for (uint32_t r = 0; r < p->n_rules; r++) {
            if (r == id) continue;
            uint64_t i = name_hash(p->names[r], strlen(p->names[r])) & (cap - 1);
            while (h[i]) i = (i + 1) & (cap - 1);
            h[i] = r + 1;
        }
    }
    uint64_t i = name_hash(p->names[id], strlen(p->names[id])) & (p->hash_cap - 1);
    while (p->hash[i]) i = (i + 1) & (p->hash_cap - 1);
    p->hash[i] = id + 1;
    return 0;
}

/* The id of the rule named s[0..n), created (undefined) when new; -1 on error. */
static int rule_get(parser *p, const char *s, size_t n) {
    if (p->hash_cap) {
        uint64_t i = name_hash(s, n) & (p->hash_cap - 1);
        while (p->hash[i]) {
            const char *nm = p->names[p->hash[i] - 1];
            if (strlen(nm) == n && !memcmp(nm, s, n)) return (int)p->hash[i] - 1;
            i = (i + 1) & (p->hash_cap - 1);
        }
    }
    return rule_add(p, s, n);
}

/* A fresh rule for a group or repetition inside rule `base`: "base_N". */
static int rule_synth(parser *p, uint32_t base) {
    char name[300];
    for (uint32_t k = p->n_rules;; k++) {
        snprintf(name, sizeof name, "%.200s_%u", p->names[base], k);
        size_t n = strlen(name);
        /* a name the grammar itself uses is skipped (rare: k grows past it) */
        int taken = 0;
        if (p->hash_cap) {
            uint64_t i = name_hash(name, n) & (p->hash_cap - 1);
            while (p->hash[i] && !taken) {
                taken = !strcmp(p->names[p->hash[i] - 1], name);
                i = (i + 1) & (p->hash_cap - 1);
            }
        }
        if (taken) continue;
        int id = rule_add(p, name, n);
        if (id >= 0) p->defined[id] = 1;
        return id;
    }
}

static int is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skips blanks and # comments; newlines too when newline_ok. */
static const char *skip_space(parser *p, const char *s, int newline_ok) {
    while (s < p->end) {
        char c = *s;
        if (c == ' ' || c == '\t') s++;
        else if (c == '#') {
            while (s < p->end && *s != '\n' && *s != '\r') s++;
        } else if (newline_ok && (c == '\n' || c == '\r')) s++;
        else break;
    }
    return s;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class: an escape or one UTF-8 code point. Returns
 * the position after it, NULL on error. */
static const char *parse_char(parser *p, const char *s, uint32_t *cp) {
    if (s >= p->end) { perr(p, s, "unexpected end of input%s", ""); return NULL; }
    if (*s == '\\') {
        if (s + 1 >= p->end) { perr(p, s, "unexpected end of input after '\\'%s", ""); return NULL; }
        int nhex = 0;
        switch (s[1]) {
        case 'x': nhex = 2; break;
        case 'u': nhex = 4; break;
        case 'U': nhex = 8; break;
        case 't': *cp = '\t'; return s + 2;
        case 'r': *cp = '\r'; return s + 2;
        case 'n': *cp = '\n'; return s + 2;
        case '\\': case '"': case '[': case ']': *cp = (uint8_t)s[1]; return s + 2;
        default: {
            char e[8];
            snprintf(e, sizeof e, "\\%c", s[1] >= 0x20 && s[1] < 0x7f ? s[1] : '?');
            perr(p, s, "unknown escape '%s'", e);
            return NULL;
        }
        }
        uint32_t v = 0;
        const char *h = s + 2;
        for (int i = 0; i < nhex; i++, h++) {
            int d = h < p->end ? hexval(*h) : -1;
            if (d < 0) { perr(p, h, "expected %s hex digits", nhex == 2 ? "2" : nhex == 4 ? "4" : "8"); return NULL; }
            v = v << 4 | (uint32_t)d;
        }
        if (v > 0x10FFFF) { perr(p, s, "code point beyond U+10FFFF%s", ""); return NULL; }
        *cp = v;
        return h;
    }
    /* UTF-8 */
    const uint8_t b = (uint8_t)*s;
    int n = b < 0x80 ? 0 : (b & 0xE0) == 0xC0 ? 1 : (b & 0xF0) == 0xE0 ? 2 : (b & 0xF8) == 0xF0 ? 3 : -1;
    if (n < 0 || s + n >= p->end + (n ? 0 : 1)) { perr(p, s, "invalid UTF-8%s", ""); return NULL; }
    uint32_t v = n == 0 ? b : n == 1 ? (b & 0x1Fu) : n == 2 ? (b & 0x0Fu) : (b & 0x07u);
    for (int i = 1; i <= n; i++) {
        if (s + i >= p->end || ((uint8_t)s[i] & 0xC0) != 0x80) { perr(p, s, "invalid UTF-8%s", ""); return NULL; }
        v = v << 6 | ((uint8_t)s[i] & 0x3Fu);
    }
    *cp = v;
    return s + n + 1;
}

static const char *parse_alternates(parser *p, const char *s, uint32_t rule, ebuf *out, int nested);

/* Applies {min,max} (max UINT32_MAX: unbounded) to out->v[start..n): the item is
 * written min times, then max - min optional copies as a chain of synthesized rules
 * (rep_k ::= item rep_{k-1} | empty), or rep ::= item rep | empty when unbounded. */
static int repeat_item(parser *p, const char *at, uint32_t rule, ebuf *out, uint32_t start, uint32_t min, uint32_t max) {
    if (start == out->n) { perr(p, at, "repetition without an item before it%s", ""); return -1; }
    uint32_t len = out->n - start;
    gram_elem *item = malloc(len * sizeof *item);
    if (!item) { perr(p, at, "out of memory%s", ""); return -1; }
    memcpy(item, out->v + start, len * sizeof *item);
    out->n = start;
    int rc = 0;
    for (uint32_t k = 0; k < min && !rc; k++)
        for (uint32_t i = 0; i < len && !rc; i++) rc = epush(p, out, item[i].type, item[i].value);
    if (!rc && max == UINT32_MAX) {
        int r = rule_synth(p, rule);
        if (r < 0) rc = -1;
        for (uint32_t i = 0; i < len && !rc; i++) rc = epush(p, &p->rules[r], item[i].type, item[i].value);
        if (!rc) rc = epush(p, &p->rules[r], GRAM_RULE_REF, (uint32_t)r);
        if (!rc) rc = epush(p, &p->rules[r], GRAM_ALT, 0);
        if (!rc) rc = epush(p, out, GRAM_RULE_REF, (uint32_t)r);
    } else if (!rc && max > min) {
        int prev = -1;
        for (uint32_t k = 0; k < max - min && !rc; k++) {
            int r = rule_synth(p, rule);
            if (r < 0) { rc = -1; break; }
            for (uint32_t i = 0; i < len && !rc; i++) rc = epush(p, &p->rules[r], item[i].type, item[i].value);
            if (!rc && prev >= 0) rc = epush(p, &p->rules[r], GRAM_RULE_REF, (uint32_t)prev);
            if (!rc) rc = epush(p, &p->rules[r], GRAM_ALT, 0);
            prev = r;
        }
        if (!rc) rc = epush(p, out, GRAM_RULE_REF, (uint32_t)prev);
    }
    free(item);
    return rc;
}

static const char *parse_uint(parser *p, const char *s, uint32_t *v) {
    const char *b = s;
    uint64_t x = 0;
    while (s < p->end && *s >= '0' && *s <= '9') {
        x = x * 10 + (uint64_t)(*s - '0');
        if (x > GRAM_MAX_REPEAT) { perr(p, b, "repetition count above %s", "4096"); return NULL; }
        s++;
    }
    if (s == b) { perr(p, s, "expected a number%s", ""); return NULL; }
    *v = (uint32_t)x;
    return s;
}

/* A sequence of items up to '|', ')' or the end of the rule. */
static const char *parse_sequence(parser *p, const char *s, uint32_t rule, ebuf *out, int nested) {
    uint32_t last_start = out->n;
    while (s < p->end && !p->failed) {
        const char *at = s;
        char c = *s;
        if (c == '"') {
            last_start = out->n;
            s++;
            while (s < p->end && *s != '"') {
                uint32_t cp;
                if (!(s = parse_char(p, s, &cp))) return NULL;
                if (epush(p, out, GRAM_CHAR, cp)) return NULL;
            }
            if (s >= p->end) { perr(p, at, "unterminated literal%s", ""); return NULL; }
            s = skip_space(p, s + 1, nested);
        } else if (c == '[') {
            last_start = out->n;
            s++;
            uint32_t start_type = GRAM_CHAR;
            if (s < p->end && *s == '^') start_type = GRAM_CHAR_NOT, s++;
            uint32_t first = out->n;
            while (s < p->end && *s != ']') {
                uint32_t cp;
                if (!(s = parse_char(p, s, &cp))) return NULL;
                if (epush(p, out, out->n == first ? start_type : GRAM_CHAR_ALT, cp)) return NULL;
                if (s + 1 < p->end && *s == '-' && s[1] != ']') {
                    uint32_t hi;
                    const char *r = s;
                    if (!(s = parse_char(p, s + 1, &hi))) return NULL;
                    if (hi < cp) { perr(p, r, "range's end below its start%s", ""); return NULL; }
                    if (epush(p, out, GRAM_CHAR_RNG_UPPER, hi)) return NULL;
                }
            }
            if (s >= p->end) { perr(p, at, "unterminated character class%s", ""); return NULL; }
            if (out->n == first) { perr(p, at, "empty character class%s", ""); return NULL; }
            s = skip_space(p, s + 1, nested);
        } else if (is_word(c)) {
            last_start = out->n;
            const char *e = s;
            while (e < p->end && is_word(*e)) e++;
            int r = rule_get(p, s, (size_t)(e - s));
            if (r < 0 || epush(p, out, GRAM_RULE_REF, (uint32_t)r)) return NULL;
            s = skip_space(p, e, nested);
        } else if (c == '(') {
            last_start = out->n;
            if (++p->depth > GRAM_MAX_NEST) { perr(p, at, "groups nested deeper than %s", "128"); return NULL; }
            int r = rule_synth(p, rule);
            if (r < 0) return NULL;
            s = skip_space(p, s + 1, 1);
            ebuf sub = { 0 };
            s = parse_alternates(p, s, rule, &sub, 1);
            p->rules[r] = sub; /* after parsing: the rules array may have moved meanwhile */
            if (!s) return NULL;
            if (s >= p->end || *s != ')') { perr(p, at, "expected ')' to close this group%s", ""); return NULL; }
            p->depth--;
            if (epush(p, out, GRAM_RULE_REF, (uint32_t)r)) return NULL;
            s = skip_space(p, s + 1, nested);
        } else if (c == '.') {
            last_start = out->n;
            if (epush(p, out, GRAM_CHAR_ANY, 0)) return NULL;
            s = skip_space(p, s + 1, nested);
        } else if (c == '*' || c == '+' || c == '?') {
            uint32_t min = c == '+' ? 1 : 0, max = c == '?' ? 1 : UINT32_MAX;
            if (repeat_item(p, at, rule, out, last_start, min, max)) return NULL;
            s = skip_space(p, s + 1, nested);
        } else if (c == '{') {
            uint32_t min, max;
            s = skip_space(p, s + 1, nested);
            if (!(s = parse_uint(p, s, &min))) return NULL;
            s = skip_space(p, s, nested);
            max = min;
            if (s < p->end && *s == ',') {
                s = skip_space(p, s + 1, nested);
                if (s < p->end && *s >= '0' && *s <= '9') {
                    if (!(s = parse_uint(p, s, &max))) return NULL;
                    s = skip_space(p, s, nested);
                } else max = UINT32_MAX;
            }
            if (s >= p->end || *s != '}') { perr(p, at, "expected '}' to close the repetition%s", ""); return NULL; }
            if (max < min) { perr(p, at, "repetition {m,n} with n < m%s", ""); return NULL; }
            if (repeat_item(p, at, rule, out, last_start, min, max)) return NULL;
            s = skip_space(p, s + 1, nested);
        } else if (c == '<' || c == '!') {
            perr(p, at, "token references (<...>) are not supported%s", "");
            return NULL;
        } else break;
    }
    return p->failed ? NULL : s;
}

static const char *parse_alternates(parser *p, const char *s, uint32_t rule, ebuf *out, int nested) {
    if (!(s = parse_sequence(p, s, rule, out, nested))) return NULL;
    while (s < p->end && *s == '|') {
        if (epush(p, out, GRAM_ALT, 0)) return NULL;
        s = skip_space(p, s + 1, 1);
        if (!(s = parse_sequence(p, s, rule, out, nested))) return NULL;
    }
    return s;
}

/* name ::= alternates, ended by a newline or the end of input. */
static const char *parse_rule(parser *p, const char *s) {
    const char *at = s, *e = s;
    while (e < p->end && is_word(*e)) e++;
    if (e == s) { perr(p, s, "expected a rule name%s", ""); return NULL; }
    int r = rule_get(p, s, (size_t)(e - s));
    if (r < 0) return NULL;
    if (p->defined[r]) { perr(p, at, "rule '%s' defined twice", p->names[r]); return NULL; }
    p->defined[r] = 1;
    s = skip_space(p, e, 0);
    if (p->end - s < 3 || memcmp(s, "::=", 3)) { perr(p, s, "expected '::='%s", ""); return NULL; }
    s = skip_space(p, s + 3, 1);
    ebuf body = { 0 };
    s = parse_alternates(p, s, (uint32_t)r, &body, 0);
    p->rules[r] = body;
    if (!s) return NULL;
    if (s < p->end && *s != '\n' && *s != '\r') {
        char c[8];
        snprintf(c, sizeof c, "%c", *s >= 0x20 && *s < 0x7f ? *s : '?');
        perr(p, s, "unexpected '%s' (expected the end of the rule)", c);
        return NULL;
    }
    return skip_space(p, s, 1);
}

/* ---------------------------------------------------------------- checks */

/* nullable[r]: rule r can match the empty string. A counter per alternative of
 * rule references still not known nullable; a rule becomes nullable when one of its
 * alternatives reaches zero (linear time, no recursion: hostile chains are fine). */
static int compute_nullable(const gram *g, uint8_t *nullable) {
    /* alternatives: index of first element, owner rule, pending count */
    uint32_t n_alts = 0;
    for (uint32_t i = 0; i < g->n_elems; i++) n_alts += g->elems[i].type == GRAM_END || g->elems[i].type == GRAM_ALT;
    uint32_t *owner = malloc((n_alts + 1) * sizeof *owner), *cnt = malloc((n_alts + 1) * sizeof *cnt);
    uint32_t *occ_n = calloc(g->n_rules + 1, sizeof *occ_n), *queue = malloc((g->n_rules + 1) * sizeof *queue);
    uint32_t *occ = NULL;
    int rc = -1;
    if (!owner || !cnt || !occ_n || !queue) goto out;
    memset(nullable, 0, g->n_rules);
    /* pass 1: counts and occurrence totals (alternatives with a terminal never count) */
    uint32_t a = 0, n_occ = 0, qn = 0;
    for (uint32_t r = 0; r < g->n_rules; r++) {
        uint32_t i = g->rule_start[r];
        for (;;) {
            uint32_t refs = 0, term = 0, j = i;
            for (; g->elems[j].type != GRAM_END && g->elems[j].type != GRAM_ALT; j++) {
                if (g->elems[j].type == GRAM_RULE_REF) refs++;
                else term = 1;
            }
            owner[a] = r;
            cnt[a] = term ? UINT32_MAX : refs;
            if (!term) {
                for (uint32_t k = i; k < j; k++) occ_n[g->elems[k].value]++;
                n_occ += refs;
                if (!refs && !nullable[r]) nullable[r] = 1, queue[qn++] = r;
            }
            a++;
            if (g->elems[j].type == GRAM_END) break;
            i = j + 1;
        }
    }
    /* CSR of occurrences: for each rule, the alternatives (by index) that reference it */
    occ = malloc((n_occ + 1) * sizeof *occ);
    if (!occ) goto out;
    uint32_t sum = 0;
    for (uint32_t r = 0; r <= g->n_rules; r++) { uint32_t c = occ_n[r]; occ_n[r] = sum; sum += c; }
    a = 0;
    for (uint32_t r = 0; r < g->n_rules; r++) {
        uint32_t i = g->rule_start[r];
        for (;;) {
            uint32_t j = i;
            while (g->elems[j].type != GRAM_END && g->elems[j].type != GRAM_ALT) j++;
            if (cnt[a] != UINT32_MAX)
                for (uint32_t k = i; k < j; k++) occ[occ_n[g->elems[k].value]++] = a;
            a++;
            if (g->elems[j].type == GRAM_END) break;
            i = j + 1;
        }
    }
    /* occ_n[r] now ends rule r's list; it starts where rule r-1's ends */
    for (uint32_t qi = 0; qi < qn; qi++) {
        uint32_t r = queue[qi];
        for (uint32_t k = r ? occ_n[r - 1] : 0; k < occ_n[r]; k++) {
            uint32_t al = occ[k];
            if (--cnt[al] == 0 && !nullable[owner[al]]) nullable[owner[al]] = 1, queue[qn++] = owner[al];
        }
    }
    rc = 0;
out:
    free(owner); free(cnt); free(occ_n); free(queue); free(occ);
    return rc;
}

/* Left recursion: a rule that reaches itself through the leftmost reference of an
 * alternative, after only nullable references. Iterative depth-first search with
 * colours (0 new, 1 on the path, 2 done). Returns the rule of a cycle or -1. */
static int64_t find_left_recursion(const gram *g, const uint8_t *nullable, int *oom) {
    uint8_t *colour = calloc(g->n_rules, 1);
    uint32_t *path_rule = malloc(g->n_rules * sizeof *path_rule), *path_pos = malloc(g->n_rules * sizeof *path_pos);
    int64_t found = -1;
    *oom = !colour || !path_rule || !path_pos;
    for (uint32_t start = 0; start < g->n_rules && !*oom && found < 0; start++) {
        if (colour[start]) continue;
        uint32_t top = 0;
        path_rule[0] = start, path_pos[0] = g->rule_start[start], colour[start] = 1;
        while (found < 0) {
            uint32_t r = path_rule[top], i = path_pos[top];
            /* next leftmost reference of r from element i. A resumed scan is always at
             * a left position: the rest of an alternative is skipped as soon as an
             * element that consumes input is passed. */
            int64_t next = -1;
            while (g->elems[i].type != GRAM_END) {
                gram_elem e = g->elems[i++];
                if (e.type == GRAM_ALT) continue;
                if (e.type != GRAM_RULE_REF || !nullable[e.value])
                    while (g->elems[i].type != GRAM_END && g->elems[i].type != GRAM_ALT) i++;
                if (e.type == GRAM_RULE_REF) { next = e.value; break; }
            }
            path_pos[top] = i;
            if (next < 0) {
                colour[r] = 2;
                if (top == 0) break;
                top--;
                continue;
            }
            if (colour[next] == 1) { found = next; break; }
            if (colour[next] == 2) continue;
            colour[next] = 1;
            top++;
            path_rule[top] = (uint32_t)next, path_pos[top] = g->rule_start[next];
        }
    }
    free(colour); free(path_rule); free(path_pos);
    return found;
}

void gram_free(gram *g) {
    if (!g) return;
    if (g->rule_name)
        for (uint32_t r = 0; r < g->n_rules; r++) free(g->rule_name[r]);
    free(g->rule_name);
    free(g->rule_start);
    free(g->elems);
    free(g);
}

int gram_parse(gram **out, const char *src, size_t len, mf_err *err) {
    *out = NULL;
    if (len > GRAM_MAX_SOURCE) return mf_fail(err, MF_ERR_INPUT, "grammar: %zu bytes, more than the limit of %d", len, GRAM_MAX_SOURCE);
    parser p = { .src = src, .end = src + len, .err = err };
    const char *s = skip_space(&p, src, 1);
    while (s && s < p.end) s = parse_rule(&p, s);
    gram *g = NULL;
    int rc = MF_OK;
    if (p.failed) { rc = MF_ERR_INPUT; goto out; }
    int root = -1;
    for (uint32_t r = 0; r < p.n_rules; r++) {
        if (!p.defined[r]) { rc = mf_fail(err, MF_ERR_INPUT, "grammar: rule '%s' is used but never defined", p.names[r]); goto out; }
        if (!strcmp(p.names[r], "root")) root = (int)r;
    }
    if (root < 0) { rc = mf_fail(err, MF_ERR_INPUT, "grammar: no rule named 'root'"); goto out; }
    /* flatten */
    g = calloc(1, sizeof *g);
    uint64_t total = 0;
    for (uint32_t r = 0; r < p.n_rules; r++) total += p.rules[r].n + 1;
    if (g) {
        g->elems = malloc(total * sizeof *g->elems);
        g->rule_start = malloc(p.n_rules * sizeof *g->rule_start);
        g->rule_name = calloc(p.n_rules, sizeof *g->rule_name);
    }
    if (!g || !g->elems || !g->rule_start || !g->rule_name) { rc = mf_fail(err, MF_ERR_NOMEM, "grammar: out of memory"); goto out; }
    g->n_rules = p.n_rules;
    g->root = (uint32_t)root;
    uint32_t k = 0;
    for (uint32_t r = 0; r < p.n_rules; r++) {
        g->rule_start[r] = k;
        if (p.rules[r].n) memcpy(g->elems + k, p.rules[r].v, p.rules[r].n * sizeof *g->elems);
        k += p.rules[r].n;
        g->elems[k++] = (gram_elem){ GRAM_END, 0 };
        g->rule_name[r] = p.names[r];
        p.names[r] = NULL;
    }
    g->n_elems = k;
    uint8_t *nullable = malloc(g->n_rules);
    int oom = !nullable || compute_nullable(g, nullable);
    int64_t lr = oom ? -1 : find_left_recursion(g, nullable, &oom);
    free(nullable);
    if (oom) { rc = mf_fail(err, MF_ERR_NOMEM, "grammar: out of memory"); goto out; }
    if (lr >= 0) {
        rc = mf_fail(err, MF_ERR_INPUT, "grammar: left recursion: rule '%s' can reach itself without consuming input",
                     g->rule_name[lr]);
        goto out;
    }
out:
    for (uint32_t r = 0; r < p.n_rules; r++) { free(p.rules[r].v); free(p.names[r]); }
    free(p.rules); free(p.names); free(p.defined); free(p.hash);
    if (rc) gram_free(g);
    else *out = g;
    return rc;
}

static void print_cp(FILE *f, uint32_t c) {
    if (c == '"' || c == '\\' || c == ']' || c == '[' || c == '-' || c == '^') fprintf(f, "\\x%02X", c);
    else if (c >= 0x20 && c < 0x7f) fputc((int)c, f);
    else if (c < 0x100) fprintf(f, "\\x%02X", c);
    else if (c < 0x10000) fprintf(f, "\\u%04X", c);
    else fprintf(f, "\\U%08X", c);
}

void gram_print(const gram *g, FILE *f) {
    for (uint32_t r = 0; r < g->n_rules; r++) {
        fprintf(f, "%s ::=", g->rule_name[r]);
        /* an empty alternative is written "" (a line ending in '|' would continue) */
        int empty = 1;
        for (uint32_t i = g->rule_start[r];; i++) {
            gram_elem e = g->elems[i];
            if (e.type == GRAM_END || e.type == GRAM_ALT) {
                if (empty) fprintf(f, " \"\"");
                if (e.type == GRAM_END) break;
                fprintf(f, " |");
                empty = 1;
                continue;
            }
            empty = 0;
            switch (e.type) {
            case GRAM_RULE_REF: fprintf(f, " %s", g->rule_name[e.value]); break;
            case GRAM_CHAR_ANY: fprintf(f, " ."); break;
            case GRAM_CHAR: case GRAM_CHAR_NOT:
                fprintf(f, " [%s", e.type == GRAM_CHAR_NOT ? "^" : "");
                for (;;) {
                    print_cp(f, g->elems[i].value);
                    if (g->elems[i + 1].type == GRAM_CHAR_RNG_UPPER) { fputc('-', f); print_cp(f, g->elems[++i].value); }
                    if (g->elems[i + 1].type != GRAM_CHAR_ALT) break;
                    i++;
                }
                fputc(']', f);
                break;
            default: fprintf(f, " ?"); break;
            }
        }
        fputc('\n', f);
    }
}

/* ================================================================ matcher */

/* A stack set, serialized: [n_stacks, partial value, bytes still expected, then for
 * each stack: len, elem positions bottom..top]. */
enum { SET_N = 0, SET_PVAL = 1, SET_PREM = 2, SET_HDR = 3 };
enum { DEDUP_CAP = 2 * GRAM_MAX_STACKS * 2, TODO_MAX = 1 << 22 };

typedef struct ibuf {
    int32_t *v;
    size_t n, cap;
} ibuf;

static int ibuf_reserve(ibuf *b, size_t extra) {
    if (b->n + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra) cap *= 2;
    int32_t *v = realloc(b->v, cap * sizeof *v);
    if (!v) return -1;
    b->v = v, b->cap = cap;
    return 0;
}

/* Scratch space of one step. */
typedef struct gram_work {
    ibuf todo;           /* stacks still to expand: records [elems..., len] */
    ibuf out;            /* the set being built */
    int32_t *cur;        /* [GRAM_MAX_DEPTH + 2] the stack being expanded */
    uint32_t *dd_off;    /* [DEDUP_CAP] dedup table: offset in out of a stack record */
    uint32_t *dd_stamp;  /* [DEDUP_CAP] the step that wrote the entry */
    uint32_t stamp;
    uint32_t n_expand;
    int overflow;        /* this step hit a limit */
} gram_work;

static int work_init(gram_work *w) {
    memset(w, 0, sizeof *w);
    w->cur = malloc((GRAM_MAX_DEPTH + 2) * sizeof *w->cur);
    w->dd_off = malloc(DEDUP_CAP * sizeof *w->dd_off);
    w->dd_stamp = calloc(DEDUP_CAP, sizeof *w->dd_stamp);
    return w->cur && w->dd_off && w->dd_stamp ? 0 : -1;
}

static void work_free(gram_work *w) {
    free(w->todo.v); free(w->out.v); free(w->cur); free(w->dd_off); free(w->dd_stamp);
}

static int set_begin(gram_work *w, int32_t pval, int32_t prem) {
    w->out.n = 0;
    w->todo.n = 0;
    w->n_expand = 0;
    w->overflow = 0;
    if (++w->stamp == 0) { /* wrapped: forget every entry */
        memset(w->dd_stamp, 0, DEDUP_CAP * sizeof *w->dd_stamp);
        w->stamp = 1;
    }
    if (ibuf_reserve(&w->out, SET_HDR)) return w->overflow = 1, -1;
    w->out.v[SET_N] = 0, w->out.v[SET_PVAL] = pval, w->out.v[SET_PREM] = prem;
    w->out.n = SET_HDR;
    return 0;
}

/* Adds stack st[0..len) to the set being built unless it is there already. */
static int set_emit(gram_work *w, const int32_t *st, int32_t len) {
    uint64_t h = 1469598103934665603ull ^ (uint64_t)len;
    for (int32_t i = 0; i < len; i++) h = (h ^ (uint32_t)st[i]) * 1099511628211ull;
    uint32_t k = (uint32_t)(h ^ h >> 29) & (DEDUP_CAP - 1);
    while (w->dd_stamp[k] == w->stamp) {
        const int32_t *o = w->out.v + w->dd_off[k];
        if (o[0] == len && !memcmp(o + 1, st, (size_t)len * sizeof *st)) return 0;
        k = (k + 1) & (DEDUP_CAP - 1);
    }
    if (w->out.v[SET_N] >= GRAM_MAX_STACKS || w->out.n + (size_t)len + 1 > GRAM_MAX_SET_INTS) return w->overflow = 1, -1;
    if (ibuf_reserve(&w->out, (size_t)len + 1)) return w->overflow = 1, -1;
    w->dd_stamp[k] = w->stamp;
    w->dd_off[k] = (uint32_t)w->out.n;
    w->out.v[w->out.n++] = len;
    memcpy(w->out.v + w->out.n, st, (size_t)len * sizeof *st);
    w->out.n += (size_t)len;
    w->out.v[SET_N]++;
    return 0;
}

static int todo_push(gram_work *w, const int32_t *st, int32_t len, int32_t extra) {
    if (len + (extra >= 0) > GRAM_MAX_DEPTH || w->todo.n + (size_t)len + 2 > TODO_MAX) return w->overflow = 1, -1;
    if (ibuf_reserve(&w->todo, (size_t)len + 2)) return w->overflow = 1, -1;
    memcpy(w->todo.v + w->todo.n, st, (size_t)len * sizeof *st);
    w->todo.n += (size_t)len;
    if (extra >= 0) w->todo.v[w->todo.n++] = extra, len++;
    w->todo.v[w->todo.n++] = len;
    return 0;
}

static inline int is_alt_end(const gram_elem *e) { return e->type == GRAM_END || e->type == GRAM_ALT; }

/* Expands every stack on the todo list until its top is a terminal (or it is empty)
 * and emits it: a rule reference on top is replaced by each of the rule's
 * alternatives over the reference's continuation. Terminates because the grammar has
 * no left recursion; GRAM_MAX_EXPAND bounds the work when the number of paths
 * explodes. */
static int expand_todo(const gram *g, gram_work *w) {
    while (w->todo.n) {
        int32_t len = w->todo.v[w->todo.n - 1];
        w->todo.n -= (size_t)len + 1;
        memcpy(w->cur, w->todo.v + w->todo.n, (size_t)len * sizeof *w->cur);
        if (++w->n_expand > GRAM_MAX_EXPAND) return w->overflow = 1, -1;
        if (len == 0 || g->elems[w->cur[len - 1]].type != GRAM_RULE_REF) {
            if (set_emit(w, w->cur, len)) return -1;
            continue;
        }
        int32_t pos = w->cur[--len];
        if (!is_alt_end(&g->elems[pos + 1])) w->cur[len++] = pos + 1;
        uint32_t a = g->rule_start[g->elems[pos].value];
        for (;;) {
            if (todo_push(w, w->cur, len, is_alt_end(&g->elems[a]) ? -1 : (int32_t)a)) return -1;
            while (!is_alt_end(&g->elems[a])) a++;
            if (g->elems[a].type == GRAM_END) break;
            a++;
        }
    }
    return 0;
}

/* Does the class at e match code point cp? *next: the element after the class. */
static int match_char(const gram_elem *e, uint32_t cp, const gram_elem **next) {
    const int positive = e->type == GRAM_CHAR || e->type == GRAM_CHAR_ANY;
    int found = 0;
    do {
        if (e[1].type == GRAM_CHAR_RNG_UPPER) {
            found |= e->value <= cp && cp <= e[1].value;
            e += 2;
        } else if (e->type == GRAM_CHAR_ANY) {
            found = 1;
            e += 1;
        } else {
            found |= e->value == cp;
            e += 1;
        }
    } while (e->type == GRAM_CHAR_ALT);
    *next = e;
    return found == positive;
}

/* Could the class at e match some code point in [lo, hi] (the code points a partial
 * UTF-8 sequence can still complete to)? A negated class can unless its ranges
 * cover [lo, hi] entirely. */
static int match_partial(const gram_elem *e, uint32_t lo, uint32_t hi) {
    if (e->type == GRAM_CHAR_ANY) return 1;
    const gram_elem *first = e;
    if (e->type == GRAM_CHAR) {
        do {
            uint32_t a = e->value, b = e[1].type == GRAM_CHAR_RNG_UPPER ? e[1].value : a;
            if (a <= hi && lo <= b) return 1;
            e += e[1].type == GRAM_CHAR_RNG_UPPER ? 2 : 1;
        } while (e->type == GRAM_CHAR_ALT);
        return 0;
    }
    /* negated: walk cur upwards through the ranges that contain it */
    uint64_t cur = lo;
    for (;;) {
        int moved = 0;
        e = first;
        do {
            uint32_t a = e->value, b = e[1].type == GRAM_CHAR_RNG_UPPER ? e[1].value : a;
            if (a <= cur && cur <= b) cur = (uint64_t)b + 1, moved = 1;
            e += e[1].type == GRAM_CHAR_RNG_UPPER ? 2 : 1;
        } while (e->type == GRAM_CHAR_ALT);
        if (cur > hi) return 0;
        if (!moved) return 1;
    }
}

/* The code points [*lo, *hi] that a partial sequence (value pval so far, prem
 * continuation bytes to come, total bytes) can complete to. */
static void partial_range(uint32_t pval, int prem, int total, uint32_t *lo, uint32_t *hi) {
    static const uint32_t min_of[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    uint32_t l = pval << (6 * prem), h = l | ((1u << (6 * prem)) - 1);
    if (l < min_of[total]) l = min_of[total];
    if (h > 0x10FFFF) h = 0x10FFFF;
    if (l < 0xD800 && h >= 0xD800 && h <= 0xDFFF) h = 0xD7FF; /* ED: no surrogates */
    *lo = l, *hi = h;
}

/* The set after byte b from set `in`, built in w->out. Returns 1 when some stack
 * survives. Only well-formed UTF-8 passes (RFC 3629: no overlong forms, no
 * surrogates, nothing past U+10FFFF): a set's SET_PREM holds the continuation bytes
 * still expected (bits 0..7), the lead byte until the first of them is read (bits
 * 8..15: it narrows that byte's range, E0: A0..BF, ED: 80..9F, F0: 90..BF, F4:
 * 80..8F) and the sequence's length (bits 16..23). */
static int step_byte(const gram *g, const int32_t *in, uint8_t b, gram_work *w) {
    int32_t pval = in[SET_PVAL], prem = in[SET_PREM] & 0xFF, lead = (in[SET_PREM] >> 8) & 0xFF;
    int32_t total = in[SET_PREM] >> 16;
    int complete = 0;
    w->overflow = 0;
    uint32_t cp = 0;
    if (prem == 0) {
        if (b < 0x80) cp = b, complete = 1;
        else if (b >= 0xC2 && b <= 0xDF) pval = b & 0x1F, prem = 1, total = 2;
        else if ((b & 0xF0) == 0xE0) pval = b & 0x0F, prem = 2, lead = b, total = 3;
        else if (b >= 0xF0 && b <= 0xF4) pval = b & 0x07, prem = 3, lead = b, total = 4;
        else return 0;
    } else {
        if ((b & 0xC0) != 0x80) return 0;
        if (lead) {
            uint8_t lo = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
            uint8_t hi = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
            if (b < lo || b > hi) return 0;
            lead = 0;
        }
        pval = pval << 6 | (b & 0x3F);
        if (--prem == 0) cp = (uint32_t)pval, complete = 1;
    }
    if (set_begin(w, complete ? 0 : pval, complete ? 0 : prem | lead << 8 | total << 16)) return 0;
    uint32_t lo = 0, hi = 0;
    if (!complete) partial_range((uint32_t)pval, prem, total, &lo, &hi);
    const int32_t *st = in + SET_HDR;
    for (int32_t k = 0; k < in[SET_N]; k++) {
        int32_t len = st[0];
        const int32_t *e = st + 1;
        st += len + 1;
        if (len == 0) continue;
        const gram_elem *top = &g->elems[e[len - 1]];
        if (!complete) {
            if (match_partial(top, lo, hi) && set_emit(w, e, len)) return 0;
            continue;
        }
        const gram_elem *next;
        if (!match_char(top, cp, &next)) continue;
        int32_t nlen = len - 1;
        if (todo_push(w, e, nlen, is_alt_end(next) ? -1 : (int32_t)(next - g->elems))) return 0;
        if (expand_todo(g, w)) return 0;
    }
    return w->out.v[SET_N] > 0;
}

typedef struct mask_frame mask_frame;

/* The stack sets met during one mask walk, each stored once (interned by content),
 * and the steps between them: step[(set, byte)] = the set after that byte, or dead.
 * Most trie nodes then cost one lookup: inside a JSON string, every plain character
 * leads back to the same set, so its step is made once per walk and byte value, not
 * once per token. Entries of an earlier walk are told apart by a generation stamp,
 * so a walk starts without clearing the tables. */
typedef struct setstore {
    ibuf data;          /* the sets, one after another */
    uint32_t *off;      /* [n] set i is data[off[i] .. off[i] + len[i]) */
    uint32_t *len;
    int32_t n, cap;
    uint32_t gen;       /* this walk's stamp */
    int32_t *tab;       /* [tab_cap] set ids by content hash (open addressing) */
    uint32_t *tab_gen;
    uint32_t tab_cap;
    uint64_t *memo_key; /* [memo_cap] set id << 8 | byte */
    int32_t *memo_val;  /* the next set's id, or -1: no stack survives */
    uint32_t *memo_gen;
    uint32_t memo_cap, memo_n;
} setstore;

struct gram_state {
    const gram *g;
    ibuf set;       /* the current stack set */
    ibuf tmp;       /* a candidate set while a multi-byte accept is under way */
    setstore ss;    /* gram_mask: the distinct sets of one walk and the steps between them */
    mask_frame *frames; /* gram_mask: [frames_cap] the walk's path */
    int32_t frames_cap;
    uint64_t mask_work;  /* gram_mask: steps and expansions so far */
    gram_work w;
    int n_overflow;
};

void gram_state_free(gram_state *s) {
    if (!s) return;
    free(s->set.v); free(s->tmp.v); free(s->frames);
    free(s->ss.data.v); free(s->ss.off); free(s->ss.len); free(s->ss.tab); free(s->ss.tab_gen);
    free(s->ss.memo_key); free(s->ss.memo_val); free(s->ss.memo_gen);
    work_free(&s->w);
    free(s);
}

static gram_state *state_alloc(const gram *g) {
    gram_state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->g = g;
    if (work_init(&s->w)) { gram_state_free(s); return NULL; }
    return s;
}

static int ibuf_copy(ibuf *dst, const int32_t *v, size_t n) {
    dst->n = 0;
    if (ibuf_reserve(dst, n)) return -1;
    memcpy(dst->v, v, n * sizeof *v);
    dst->n = n;
    return 0;
}

gram_state *gram_state_new(const gram *g, mf_err *err) {
    gram_state *s = state_alloc(g);
    if (!s) { mf_fail(err, MF_ERR_NOMEM, "grammar: out of memory"); return NULL; }
    gram_work *w = &s->w;
    int32_t none = 0;
    /* the root rule, as if referenced from an empty stack: one stack per alternative */
    set_begin(w, 0, 0);
    uint32_t a = g->rule_start[g->root];
    for (;;) {
        int32_t pos = is_alt_end(&g->elems[a]) ? -1 : (int32_t)a;
        if (todo_push(w, &none, 0, pos)) break;
        while (!is_alt_end(&g->elems[a])) a++;
        if (g->elems[a].type == GRAM_END) break;
        a++;
    }
    if (!w->overflow) expand_todo(g, w);
    if (w->overflow || ibuf_copy(&s->set, w->out.v, w->out.n)) {
        mf_fail(err, MF_ERR_INPUT, "grammar: the root rule expands to more than %d stacks (or %d steps)", GRAM_MAX_STACKS,
                GRAM_MAX_EXPAND);
        gram_state_free(s);
        return NULL;
    }
    return s;
}

gram_state *gram_state_clone(const gram_state *s) {
    gram_state *c = state_alloc(s->g);
    if (!c || ibuf_copy(&c->set, s->set.v, s->set.n)) { gram_state_free(c); return NULL; }
    c->n_overflow = s->n_overflow;
    return c;
}

/* Runs bytes from the current set; the result is left in s->tmp. 1 when all pass. */
static int run_bytes(gram_state *s, const char *bytes, size_t n) {
    if (ibuf_copy(&s->tmp, s->set.v, s->set.n)) return 0;
    for (size_t i = 0; i < n; i++) {
        if (!step_byte(s->g, s->tmp.v, (uint8_t)bytes[i], &s->w)) {
            s->n_overflow += s->w.overflow;
            return 0;
        }
        ibuf t = s->tmp; s->tmp = s->w.out; s->w.out = t;
    }
    return 1;
}

int gram_state_accept(gram_state *s, const char *bytes, size_t n) {
    if (!run_bytes(s, bytes, n)) return 0;
    ibuf t = s->set; s->set = s->tmp; s->tmp = t;
    return 1;
}

int gram_state_can_accept(gram_state *s, const char *bytes, size_t n) { return run_bytes(s, bytes, n); }

int gram_state_is_accepting(const gram_state *s) {
    const int32_t *v = s->set.v;
    if (v[SET_PREM]) return 0;
    const int32_t *st = v + SET_HDR;
    for (int32_t k = 0; k < v[SET_N]; k++, st += st[0] + 1)
        if (st[0] == 0) return 1;
    return 0;
}

int gram_state_is_done(const gram_state *s) {
    const int32_t *v = s->set.v;
    if (v[SET_PREM]) return v[SET_N] == 0;
    const int32_t *st = v + SET_HDR;
    for (int32_t k = 0; k < v[SET_N]; k++, st += st[0] + 1)
        if (st[0] != 0) return 0;
    return 1;
}

int gram_state_overflowed(const gram_state *s) { return s->n_overflow; }

/* ================================================================ token masks */

typedef struct trie_node {
    int32_t child_lo, child_hi;  /* children: nodes[child_lo..child_hi), by byte */
    int32_t tok_lo, tok_hi;      /* tokens whose bytes end here: toks[tok_lo..tok_hi) */
    uint8_t byte;                /* the edge from the parent */
} trie_node;

struct gram_vocab {
    int n_vocab;
    trie_node *nodes;    /* [n_nodes], node 0 the root; children contiguous (breadth first) */
    int32_t n_nodes;
    int32_t *toks;       /* token ids sorted by their bytes */
    int32_t *eog;        /* [n_eog] end-of-generation ids */
    int n_eog;
    uint8_t *is_eog;     /* [n_vocab] */
    char *bytes;         /* every token's bytes, one after another */
    uint32_t *off;       /* [n_vocab + 1] token i is bytes[off[i]..off[i+1]) */
    int32_t max_len;     /* longest token, bytes: the mask walk's depth */
};

typedef struct tv_entry {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
} tv_entry;

static int tv_cmp(const void *pa, const void *pb) {
    const tv_entry *a = pa, *b = pb;
    uint32_t m = a->len < b->len ? a->len : b->len;
    int c = m ? memcmp(a->p, b->p, m) : 0;
    if (c) return c;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

void gram_vocab_free(gram_vocab *tv) {
    if (!tv) return;
    free(tv->nodes); free(tv->toks); free(tv->eog); free(tv->is_eog); free(tv->bytes); free(tv->off);
    free(tv);
}

int gram_vocab_n(const gram_vocab *tv) { return tv->n_vocab; }

const char *gram_vocab_token(const gram_vocab *tv, int32_t id, size_t *len) {
    if (id < 0 || id >= tv->n_vocab) { *len = 0; return ""; }
    *len = tv->off[id + 1] - tv->off[id];
    return tv->bytes + tv->off[id];
}

int gram_vocab_is_eog(const gram_vocab *tv, int32_t id) { return id >= 0 && id < tv->n_vocab && tv->is_eog[id]; }

gram_vocab *gram_vocab_new(int n_vocab, const char *const *tokens, const size_t *lens, const uint8_t *eog, mf_err *err) {
    if (n_vocab <= 0 || n_vocab > GRAM_MAX_VOCAB) {
        mf_fail(err, MF_ERR_USAGE, "grammar: vocabulary of %d tokens (1 to %d)", n_vocab, GRAM_MAX_VOCAB);
        return NULL;
    }
    gram_vocab *tv = calloc(1, sizeof *tv);
    tv_entry *ent = NULL;
    int32_t *lo = NULL, *hi = NULL, *depth = NULL;
    if (!tv) goto fail;
    tv->n_vocab = n_vocab;
    uint64_t total = 0;
    for (int i = 0; i < n_vocab; i++) {
        if (lens[i] > GRAM_MAX_TOKEN_BYTES) {
            mf_fail(err, MF_ERR_INPUT, "grammar: token %d is %zu bytes, more than %d", i, lens[i], GRAM_MAX_TOKEN_BYTES);
            gram_vocab_free(tv);
            return NULL;
        }
        total += lens[i];
    }
    if (total > UINT32_MAX / 2) {
        mf_fail(err, MF_ERR_INPUT, "grammar: the vocabulary's tokens hold %llu bytes", (unsigned long long)total);
        gram_vocab_free(tv);
        return NULL;
    }
    ent = malloc((size_t)n_vocab * sizeof *ent);
    tv->eog = malloc((size_t)n_vocab * sizeof *tv->eog);
    tv->is_eog = calloc((size_t)n_vocab, 1);
    tv->toks = malloc((size_t)n_vocab * sizeof *tv->toks);
    tv->off = malloc(((size_t)n_vocab + 1) * sizeof *tv->off);
    tv->bytes = malloc(total + 1);
    if (!ent || !tv->eog || !tv->is_eog || !tv->toks || !tv->off || !tv->bytes) goto fail;
    uint32_t o = 0;
    for (int i = 0; i < n_vocab; i++) {
        tv->off[i] = o;
        if (lens[i]) memcpy(tv->bytes + o, tokens[i], lens[i]);
        o += (uint32_t)lens[i];
    }
    tv->off[n_vocab] = o;
    size_t n = 0;
    uint64_t n_nodes_max = 1;
    for (int i = 0; i < n_vocab; i++) {
        if (eog && eog[i]) { tv->eog[tv->n_eog++] = i; tv->is_eog[i] = 1; continue; }
        if (!lens[i]) continue; /* empty (control tokens): never generated under a grammar */
        ent[n++] = (tv_entry){ (const uint8_t *)tv->bytes + tv->off[i], (uint32_t)lens[i], i };
        n_nodes_max += lens[i];
        if ((int32_t)lens[i] > tv->max_len) tv->max_len = (int32_t)lens[i];
    }
    qsort(ent, n, sizeof *ent, tv_cmp);
    for (size_t i = 0; i < n; i++) tv->toks[i] = ent[i].id;
    /* Breadth first: node k covers ent[lo[k]..hi[k]) at depth(k); its children are
     * appended together, so they are contiguous. The node array itself is the queue. */
    tv->nodes = malloc(n_nodes_max * sizeof *tv->nodes);
    lo = malloc(n_nodes_max * sizeof *lo);
    hi = malloc(n_nodes_max * sizeof *hi);
    depth = malloc(n_nodes_max * sizeof *depth);
    if (!tv->nodes || !lo || !hi || !depth) goto fail;
    tv->nodes[0] = (trie_node){ 0 };
    lo[0] = 0, hi[0] = (int32_t)n, depth[0] = 0;
    int32_t nn = 1;
    for (int32_t k = 0; k < nn; k++) {
        int32_t a = lo[k], b = hi[k], d = depth[k];
        trie_node *nd = &tv->nodes[k];
        nd->tok_lo = a;
        while (a < b && ent[a].len == (uint32_t)d) a++;
        nd->tok_hi = a;
        nd->child_lo = nn;
        while (a < b) {
            uint8_t c = ent[a].p[d];
            int32_t e = a;
            while (e < b && ent[e].p[d] == c) e++;
            tv->nodes[nn] = (trie_node){ .byte = c };
            lo[nn] = a, hi[nn] = e, depth[nn] = d + 1;
            nn++;
            a = e;
        }
        nd->child_hi = nn;
    }
    tv->n_nodes = nn;
    free(ent); free(lo); free(hi); free(depth);
    return tv;
fail:
    free(ent); free(lo); free(hi); free(depth);
    gram_vocab_free(tv);
    mf_fail(err, MF_ERR_NOMEM, "grammar: out of memory for the vocabulary trie (%d tokens)", n_vocab);
    return NULL;
}

typedef struct mask_frame {
    int32_t node, child;
    int32_t set;        /* the set at this node (setstore id) */
} mask_frame;

static uint64_t set_hash(const int32_t *v, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint32_t)v[i]) * 1099511628211ull;
    return h ^ h >> 31;
}

/* A new walk: every table entry of the last one becomes stale at once. */
static void ss_begin(setstore *ss) {
    ss->n = 0;
    ss->data.n = 0;
    ss->memo_n = 0;
    if (++ss->gen == 0) { /* wrapped: clear the stamps for real */
        if (ss->tab_gen) memset(ss->tab_gen, 0, ss->tab_cap * sizeof *ss->tab_gen);
        if (ss->memo_gen) memset(ss->memo_gen, 0, ss->memo_cap * sizeof *ss->memo_gen);
        ss->gen = 1;
    }
}

/* Grows the id table to hold n + 1 sets at half load (rehashing this walk's ids). */
static int ss_grow_tab(setstore *ss) {
    if ((uint64_t)(ss->n + 1) * 2 <= ss->tab_cap) return 0;
    uint32_t cap = ss->tab_cap ? 2 * ss->tab_cap : 1024;
    int32_t *tab = malloc(cap * sizeof *tab);
    uint32_t *tg = calloc(cap, sizeof *tg);
    if (!tab || !tg) { free(tab); free(tg); return -1; }
    for (int32_t id = 0; id < ss->n; id++) {
        uint32_t k = (uint32_t)set_hash(ss->data.v + ss->off[id], ss->len[id]) & (cap - 1);
        while (tg[k] == ss->gen) k = (k + 1) & (cap - 1);
        tab[k] = id, tg[k] = ss->gen;
    }
    free(ss->tab); free(ss->tab_gen);
    ss->tab = tab, ss->tab_gen = tg, ss->tab_cap = cap;
    return 0;
}

/* The id of set v[0..n) in the store, added when new; -1 when a limit or memory
 * says no. */
static int32_t ss_intern(setstore *ss, const int32_t *v, size_t n) {
    if (ss_grow_tab(ss)) return -1;
    uint64_t h = set_hash(v, n);
    uint32_t k = (uint32_t)h & (ss->tab_cap - 1);
    while (ss->tab_gen[k] == ss->gen) {
        int32_t id = ss->tab[k];
        if (ss->len[id] == n && !memcmp(ss->data.v + ss->off[id], v, n * sizeof *v)) return id;
        k = (k + 1) & (ss->tab_cap - 1);
    }
    if (ss->data.n + n > GRAM_MAX_ARENA_INTS || ibuf_reserve(&ss->data, n)) return -1;
    if (ss->n == ss->cap) {
        int32_t cap = ss->cap ? 2 * ss->cap : 256;
        uint32_t *off = realloc(ss->off, (size_t)cap * sizeof *off);
        if (off) ss->off = off;
        uint32_t *len = off ? realloc(ss->len, (size_t)cap * sizeof *len) : NULL;
        if (!len) return -1;
        ss->len = len, ss->cap = cap;
    }
    int32_t id = ss->n++;
    ss->off[id] = (uint32_t)ss->data.n;
    ss->len[id] = (uint32_t)n;
    memcpy(ss->data.v + ss->data.n, v, n * sizeof *v);
    ss->data.n += n;
    ss->tab[k] = id, ss->tab_gen[k] = ss->gen;
    return id;
}

/* The remembered step from set `id` over byte b: 1 with *next (-1: dead), else 0. */
static int ss_memo_get(const setstore *ss, int32_t id, uint8_t b, int32_t *next) {
    if (!ss->memo_cap) return 0;
    uint64_t key = (uint64_t)id << 8 | b;
    uint32_t k = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (ss->memo_cap - 1);
    while (ss->memo_gen[k] == ss->gen) {
        if (ss->memo_key[k] == key) { *next = ss->memo_val[k]; return 1; }
        k = (k + 1) & (ss->memo_cap - 1);
    }
    return 0;
}

/* Remembers a step (nothing happens when the table cannot grow: the step is then
 * simply made again next time). */
static void ss_memo_put(setstore *ss, int32_t id, uint8_t b, int32_t next) {
    if ((uint64_t)(ss->memo_n + 1) * 2 > ss->memo_cap) {
        uint32_t cap = ss->memo_cap ? 2 * ss->memo_cap : 4096;
        if (cap > (1u << 21)) return; /* 2M steps (32 MB): past that, steps are made again */
        uint64_t *mk = malloc(cap * sizeof *mk);
        int32_t *mv = malloc(cap * sizeof *mv);
        uint32_t *mg = calloc(cap, sizeof *mg);
        if (!mk || !mv || !mg) { free(mk); free(mv); free(mg); return; }
        for (uint32_t i = 0; i < ss->memo_cap; i++) {
            if (ss->memo_gen[i] != ss->gen) continue;
            uint32_t k = (uint32_t)((ss->memo_key[i] * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
            while (mg[k] == ss->gen) k = (k + 1) & (cap - 1);
            mk[k] = ss->memo_key[i], mv[k] = ss->memo_val[i], mg[k] = ss->gen;
        }
        free(ss->memo_key); free(ss->memo_val); free(ss->memo_gen);
        ss->memo_key = mk, ss->memo_val = mv, ss->memo_gen = mg, ss->memo_cap = cap;
    }
    uint64_t key = (uint64_t)id << 8 | b;
    uint32_t k = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (ss->memo_cap - 1);
    while (ss->memo_gen[k] == ss->gen) k = (k + 1) & (ss->memo_cap - 1);
    ss->memo_key[k] = key, ss->memo_val[k] = next, ss->memo_gen[k] = ss->gen;
    ss->memo_n++;
}

/* Depth-first walk of the subtree below `start` from set `set0` (the child `skip` of
 * start left out); a child is entered only when some stack survives its byte, so a
 * dead prefix prunes its whole subtree. */
static int mask_walk(gram_state *s, const gram_vocab *tv, int32_t start, int32_t skip, int32_t set0, mask_frame *fr,
                     uint32_t *bits) {
    setstore *ss = &s->ss;
    int count = 0, top = 0;
    fr[0] = (mask_frame){ start, tv->nodes[start].child_lo, set0 };
    while (top >= 0) {
        mask_frame *f = &fr[top];
        if (f->child == tv->nodes[f->node].child_hi) {
            top--;
            continue;
        }
        int32_t ci = f->child++;
        if (top == 0 && ci == skip) continue;
        const trie_node *c = &tv->nodes[ci];
        int32_t next;
        if (!ss_memo_get(ss, f->set, c->byte, &next)) {
            int ok = step_byte(s->g, ss->data.v + ss->off[f->set], c->byte, &s->w);
            s->mask_work += s->w.n_expand + 1;
            if (s->mask_work > GRAM_MAX_MASK_WORK) { /* a hostile grammar: the rest stays disallowed */
                s->n_overflow++;
                break;
            }
            if (!ok) {
                s->n_overflow += s->w.overflow;
                if (s->w.overflow) continue; /* a limit, not the grammar: not remembered */
                next = -1;
            } else if ((next = ss_intern(ss, s->w.out.v, s->w.out.n)) < 0) {
                s->n_overflow++;
                continue;
            }
            ss_memo_put(ss, f->set, c->byte, next);
        }
        if (next < 0) continue;
        for (int32_t t = c->tok_lo; t < c->tok_hi; t++) {
            int32_t id = tv->toks[t];
            bits[id >> 5] |= 1u << (id & 31);
            count++;
        }
        if (c->child_lo == c->child_hi) continue;
        fr[++top] = (mask_frame){ ci, c->child_lo, next };
    }
    return count;
}

int gram_mask(gram_state *s, const gram_vocab *tv, int strip_space, uint32_t *bits) {
    memset(bits, 0, (size_t)gram_mask_words(tv) * sizeof *bits);
    if (!s->frames || s->frames_cap < tv->max_len + 2) {
        free(s->frames);
        s->frames_cap = tv->max_len + 2;
        s->frames = malloc((size_t)s->frames_cap * sizeof *s->frames);
    }
    ss_begin(&s->ss);
    int32_t set0 = s->frames ? ss_intern(&s->ss, s->set.v, s->set.n) : -1;
    if (set0 < 0) { s->n_overflow++; return -1; }
    /* the ' ' child of the root: with strip_space, a token's leading space is not
     * output, so that subtree is walked from the current set instead (the token " "
     * alone, which would print nothing, stays out) */
    int32_t space = -1;
    const trie_node *root = &tv->nodes[0];
    for (int32_t c = root->child_lo; c < root->child_hi && strip_space; c++)
        if (tv->nodes[c].byte == ' ') space = c;
    s->mask_work = 0;
    int count = mask_walk(s, tv, 0, space, set0, s->frames, bits);
    if (space >= 0) count += mask_walk(s, tv, space, -1, set0, s->frames, bits);
    if (gram_state_is_accepting(s))
        for (int i = 0; i < tv->n_eog; i++) {
            int32_t id = tv->eog[i];
            bits[id >> 5] |= 1u << (id & 31);
            count++;
        }
    return count;
}

int gram_mask_words(const gram_vocab *tv) { return (tv->n_vocab + 31) / 32; }

const int32_t *gram_state_key(const gram_state *s, size_t *n) {
    *n = s->set.n;
    return s->set.v;
}
