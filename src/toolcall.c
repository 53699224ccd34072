/* toolcall.c - see toolcall.h. The JSON of a call is scanned here for the spans of its
 * members (the arguments' exact text) and checked with the Jinja engine's JSON reader. */
#include "toolcall.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

/* DeepSeek's markers (full-width bars, "▁" for spaces) */
#define DS_BAR "\xef\xbd\x9c" /* U+FF5C */
#define DS_SP "\xe2\x96\x81"  /* U+2581 */
#define DS_CALLS_BEGIN "<" DS_BAR "tool" DS_SP "calls" DS_SP "begin" DS_BAR ">"
#define DS_CALLS_END "<" DS_BAR "tool" DS_SP "calls" DS_SP "end" DS_BAR ">"
#define DS_CALL_BEGIN "<" DS_BAR "tool" DS_SP "call" DS_SP "begin" DS_BAR ">"
#define DS_CALL_END "<" DS_BAR "tool" DS_SP "call" DS_SP "end" DS_BAR ">"
#define DS_SEP "<" DS_BAR "tool" DS_SP "sep" DS_BAR ">"

static int has(const char *s, size_t n, const char *needle) { return memmem(s, n, needle, strlen(needle)) != NULL; }

tc_format tc_detect(const char *src, size_t len) {
    if (!src) return TC_FORMAT_GENERIC;
    if (has(src, len, "[TOOL_CALLS]")) return has(src, len, "[ARGS]") ? TC_FORMAT_MISTRAL_ARGS : TC_FORMAT_MISTRAL;
    if (has(src, len, DS_CALL_BEGIN)) return TC_FORMAT_DEEPSEEK;
    if (has(src, len, "<tool_call>")) return TC_FORMAT_HERMES;
    if (has(src, len, "<|start_header_id|>") && (has(src, len, "ipython") || has(src, len, "\"parameters\"")))
        return TC_FORMAT_LLAMA3;
    return TC_FORMAT_GENERIC;
}

const char *tc_format_name(tc_format f) {
    switch (f) {
    case TC_FORMAT_NONE: return "none";
    case TC_FORMAT_HERMES: return "hermes";
    case TC_FORMAT_LLAMA3: return "llama3";
    case TC_FORMAT_MISTRAL: return "mistral";
    case TC_FORMAT_MISTRAL_ARGS: return "mistral-args";
    case TC_FORMAT_GENERIC: return "generic";
    case TC_FORMAT_DEEPSEEK: return "deepseek";
    }
    return "?";
}

int tc_template_thinks(const char *src, size_t len) { return src && has(src, len, "<think>"); }

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && is_ws(s[i])) i++;
    return i;
}

int tc_prompt_opens_think(const char *p, size_t n) {
    while (n && is_ws(p[n - 1])) n--;
    return n >= 7 && !memcmp(p + n - 7, "<think>", 7);
}

void tc_format_shape(tc_format f, tc_shape *s) {
    memset(s, 0, sizeof *s);
    s->name_key = "name";
    s->args_key = "arguments";
    switch (f) {
    case TC_FORMAT_HERMES: case TC_FORMAT_GENERIC:
        s->call_prefix = "<tool_call>\n";
        s->call_suffix = "\n</tool_call>";
        s->separator = "\n";
        break;
    case TC_FORMAT_LLAMA3: s->args_key = "parameters"; s->separator = "; "; break;
    case TC_FORMAT_MISTRAL: case TC_FORMAT_MISTRAL_ARGS:
        s->list_prefix = "[TOOL_CALLS][";
        s->list_suffix = "]";
        s->separator = ", ";
        break;
    case TC_FORMAT_DEEPSEEK: /* the name is outside the JSON: no object shape (a grammar needs its own) */
        s->name_key = s->args_key = NULL;
        break;
    case TC_FORMAT_NONE: break;
    }
}

/* ---------------------------------------------------------------- JSON spans */

/* The end (exclusive) of the JSON value starting at s[i] (after whitespace), or 0
 * when the text ends first (or it is not a value). Scalars end at a delimiter. */
static size_t value_end(const char *s, size_t n, size_t i) {
    while (i < n && is_ws(s[i])) i++;
    if (i >= n) return 0;
    if (s[i] == '"') {
        for (size_t k = i + 1; k < n; k++) {
            if (s[k] == '\\') { k++; continue; }
            if (s[k] == '"') return k + 1;
        }
        return 0;
    }
    if (s[i] == '{' || s[i] == '[') {
        int depth = 0, str = 0;
        for (size_t k = i; k < n; k++) {
            char c = s[k];
            if (str) {
                if (c == '\\') k++;
                else if (c == '"') str = 0;
                continue;
            }
            if (c == '"') str = 1;
            else if (c == '{' || c == '[') {
                if (++depth > 512) return 0;
            } else if (c == '}' || c == ']') {
                if (--depth == 0) return k + 1;
            }
        }
        return 0;
    }
    size_t k = i;
    while (k < n && !is_ws(s[k]) && s[k] != ',' && s[k] != '}' && s[k] != ']') k++;
    return k < n ? k : 0; /* a scalar is complete only when something follows it */
}

typedef struct span { size_t a, b; } span;

/* The raw span of member `key` of the JSON object s[a..b) (top level only); {0,0} when absent. */
static span member(const char *s, size_t a, size_t b, const char *key) {
    size_t klen = strlen(key), i = a + 1;
    for (;;) {
        while (i < b && (is_ws(s[i]) || s[i] == ',')) i++;
        if (i >= b || s[i] != '"') break;
        size_t ke = value_end(s, b, i);
        if (!ke) break;
        int match = ke - i - 2 == klen && !memcmp(s + i + 1, key, klen);
        i = ke;
        while (i < b && is_ws(s[i])) i++;
        if (i >= b || s[i] != ':') break;
        i++;
        while (i < b && is_ws(s[i])) i++;
        size_t ve = value_end(s, b, i);
        if (!ve) break;
        if (match) return (span){ i, ve };
        i = ve;
    }
    return (span){ 0, 0 };
}

static char *dup_n(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

static int known_tool(const tc_opts *o, const char *name) {
    for (int i = 0; i < o->n_tools; i++)
        if (!strcmp(o->tools[i], name)) return 1;
    return 0;
}

/* A call from the JSON object s[a..b): its name (a string member "name"), its arguments
 * ("arguments" or "parameters": an object as written, or a string as it decodes; "{}"
 * when absent) and "id". Returns 1 with *c filled, 0 when it is not a call, -1 on memory. */
static int call_from_object(const char *s, size_t a, size_t b, const tc_opts *o, int need_known, tc_call *c) {
    memset(c, 0, sizeof *c);
    jinja_env *e = jinja_env_new();
    if (!e) return -1;
    jinja_error err;
    jinja_value *v = jinja_json_parse(e, s + a, b - a, &err);
    size_t nlen = 0;
    const char *name = v && jinja_is_dict(v) ? jinja_str(jinja_dict_get(v, "name"), &nlen) : NULL;
    int rc = 0;
    if (!name || !name[0] || strlen(name) != nlen || (need_known && !known_tool(o, name))) goto out;
    jinja_value *args = jinja_dict_get(v, "arguments");
    span as = member(s, a, b, "arguments");
    if (!args) {
        args = jinja_dict_get(v, "parameters");
        as = member(s, a, b, "parameters");
    }
    size_t alen;
    const char *astr = jinja_str(args, &alen);
    if (args && !jinja_is_dict(args) && !astr) goto out; /* arguments that are neither an object nor a string */
    rc = -1;
    if (!(c->name = dup_n(name, strlen(name)))) goto out;
    if (!args) c->arguments = dup_n("{}", 2);
    else if (astr) c->arguments = dup_n(astr, alen);
    else c->arguments = dup_n(s + as.a, as.b - as.a);
    if (!c->arguments) goto out;
    size_t ilen;
    const char *id = jinja_str(jinja_dict_get(v, "id"), &ilen);
    if (id && !(c->id = dup_n(id, ilen))) goto out;
    rc = 1;
out:
    if (rc != 1) {
        free(c->name);
        free(c->arguments);
        free(c->id);
        memset(c, 0, sizeof *c);
    }
    jinja_env_free(e);
    return rc;
}

/* ---------------------------------------------------------------- result building */

typedef struct buf { char *p; size_t n, cap; int oom; } buf;

static void put(buf *b, const char *s, size_t n) {
    if (b->oom || !n) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static int add_call(tc_result *r, tc_call *c) {
    tc_call *p = realloc(r->calls, (size_t)(r->n_calls + 1) * sizeof *p);
    if (!p) return -1;
    r->calls = p;
    r->calls[r->n_calls++] = *c;
    return 0;
}

/* The length of the longest suffix of s[0..n) that is a proper prefix of marker. */
static size_t partial_marker(const char *s, size_t n, const char *marker) {
    size_t m = strlen(marker);
    for (size_t k = m - 1; k > 0; k--)
        if (k <= n && !memcmp(s + n - k, marker, k)) return k;
    return 0;
}

/* Text that goes to content from s[0..n): while streaming, without a suffix that may
 * be the start of marker. */
static void put_text(buf *b, const char *s, size_t n, int final, const char *marker) {
    if (!final && marker) n -= partial_marker(s, n, marker);
    put(b, s, n);
}

/* Trims whitespace at both ends into a fresh string (the result's fields). */
static char *trimmed(const buf *b, size_t *len) {
    const char *p = b->p ? b->p : "";
    size_t a = 0, e = b->n;
    while (a < e && is_ws(p[a])) a++;
    while (e > a && is_ws(p[e - 1])) e--;
    *len = e - a;
    return dup_n(p + a, e - a);
}

/* ---------------------------------------------------------------- formats */

static void put_json_string(buf *b, const char *v, size_t n);

/* A value written as text (an XML parameter, a GLM arg_value) as JSON: itself where it
 * is a JSON number, true/false/null, object or array; else a JSON string of it. */
static void put_json_value(buf *b, const char *v, size_t n) {
    size_t a = 0, e = n;
    while (a < e && is_ws(v[a])) a++;
    while (e > a && is_ws(v[e - 1])) e--;
    int json = 0;
    if (a < e) {
        jinja_env *env = jinja_env_new();
        jinja_error err;
        jinja_value *x = env ? jinja_json_parse(env, v + a, e - a, &err) : NULL;
        json = x && !jinja_str(x, NULL);
        jinja_env_free(env);
    }
    if (json) put(b, v + a, e - a);
    else put_json_string(b, v, n);
}

static void put_json_string(buf *b, const char *v, size_t n) {
    put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        char esc[8];
        if (c == '"' || c == '\\') { esc[0] = '\\'; esc[1] = (char)c; put(b, esc, 2); }
        else if (c == '\n') put(b, "\\n", 2);
        else if (c == '\r') put(b, "\\r", 2);
        else if (c == '\t') put(b, "\\t", 2);
        else if (c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", c); put(b, esc, 6); }
        else put(b, v + i, 1);
    }
    put(b, "\"", 1);
}

/* The tag forms of a call inside <tool_call>...</tool_call>, s[a..e):
 *   <function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>...\n</function>  (Qwen3-Coder,
 *     Qwen3.5, Nemotron 3, StepFun)
 *   NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>...  (GLM-4.5/4.6)
 * The arguments are a JSON object of the keys with their values (as put_json_value makes
 * them). Returns 1 with *c, 0 when it is neither, -1 on memory. */
static int call_from_tags(const char *s, size_t a, size_t e, tc_call *c) {
    memset(c, 0, sizeof *c);
    buf args = { 0 };
    size_t name_a, name_e, i;
    int xml = e - a > 10 && !memcmp(s + a, "<function=", 10);
    if (xml) {
        name_a = a + 10;
        name_e = name_a;
        while (name_e < e && s[name_e] != '>') name_e++;
        if (name_e >= e) return 0;
        i = name_e + 1;
    } else {
        name_a = a;
        name_e = a;
        while (name_e < e && s[name_e] != '\n' && s[name_e] != '<') name_e++;
        while (name_e > name_a && is_ws(s[name_e - 1])) name_e--;
        i = name_e;
    }
    if (name_e == name_a) return 0;
    for (size_t q = name_a; q < name_e; q++) {
        char ch = s[q];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' || ch == '.'))
            return 0;
    }
    const char *kopen = xml ? "<parameter=" : "<arg_key>", *kclose = xml ? ">" : "</arg_key>";
    const char *vopen = xml ? "" : "<arg_value>", *vclose = xml ? "</parameter>" : "</arg_value>";
    int n_args = 0;
    put(&args, "{", 1);
    for (;;) {
        i = skip_ws(s, e, i);
        if (i >= e) break;
        if (xml && e - i >= 11 && !memcmp(s + i, "</function>", 11)) { i = skip_ws(s, e, i + 11); break; }
        size_t kl = strlen(kopen);
        if (e - i < kl || memcmp(s + i, kopen, kl)) { free(args.p); return 0; }
        size_t ka = i + kl;
        const char *ke = memmem(s + ka, e - ka, kclose, strlen(kclose));
        if (!ke) { free(args.p); return 0; }
        size_t kend = (size_t)(ke - s), va = kend + strlen(kclose);
        if (!xml) {
            va = skip_ws(s, e, va);
            size_t vl = strlen(vopen);
            if (e - va < vl || memcmp(s + va, vopen, vl)) { free(args.p); return 0; }
            va += vl;
        }
        const char *ve = memmem(s + va, e - va, vclose, strlen(vclose));
        if (!ve) { free(args.p); return 0; }
        size_t vend = (size_t)(ve - s);
        size_t v0 = va, v1 = vend;
        if (xml) { /* the newline after <parameter=K> and the one before </parameter> are the format's */
            if (v0 < v1 && s[v0] == '\n') v0++;
            if (v1 > v0 && s[v1 - 1] == '\n') v1--;
        }
        if (n_args++) put(&args, ", ", 2);
        size_t k0 = ka, k1 = kend;
        while (k0 < k1 && is_ws(s[k0])) k0++;
        while (k1 > k0 && is_ws(s[k1 - 1])) k1--;
        if (k0 == k1) { free(args.p); return 0; }
        put_json_string(&args, s + k0, k1 - k0);
        put(&args, ": ", 2);
        put_json_value(&args, s + v0, v1 - v0);
        i = vend + strlen(vclose);
    }
    if (i < e) { free(args.p); return 0; }
    put(&args, "}", 1);
    if (args.oom) { free(args.p); return -1; }
    c->name = dup_n(s + name_a, name_e - name_a);
    c->arguments = args.p;
    if (!c->name) { free(c->arguments); c->arguments = NULL; return -1; }
    return 1;
}

/* Does s[i..n) start with word (a proper prefix of it counts as "may", 2)? 1 yes, 0 no. */
static int starts(const char *s, size_t n, size_t i, const char *word, int *maybe) {
    size_t m = strlen(word);
    if (n - i >= m) return !memcmp(s + i, word, m);
    if (maybe && !memcmp(s + i, word, n - i)) *maybe = 1;
    return 0;
}

enum { AT_NONE = 0, AT_MORE = -2, AT_NOMEM = -1 };

/* A JSON call object at s[i] (i at '{'); *end past it. need_key: its first key must be
 * "name" (an untagged object). AT_MORE when it may still become one (streaming). */
static long object_call_at(const char *s, size_t n, size_t i, int final, const tc_opts *o, int need_known,
                           int need_key, tc_result *r) {
    if (need_key) { /* {ws "name" */
        size_t k = skip_ws(s, n, i + 1);
        int maybe = 0;
        if (!starts(s, n, k, "\"name\"", &maybe)) return !final && (maybe || k >= n) ? AT_MORE : AT_NONE;
    }
    size_t e = value_end(s, n, i);
    if (!e) return final ? AT_NONE : AT_MORE;
    tc_call c;
    int rc = call_from_object(s, i, e, o, need_known, &c);
    if (rc < 0) return AT_NOMEM;
    if (rc == 0) return AT_NONE;
    if (add_call(r, &c)) return AT_NOMEM;
    return (long)e;
}

/* A call in one of the hermes forms at s[i]: <tool_call>{...}</tool_call>; a fenced
 * ```json {...} ``` (with or without the tags inside: what Qwen2.5-Coder writes); a bare
 * {"name": ...} naming a tool (as llama.cpp's hermes parser takes them). Returns the end
 * of the call's text, AT_NONE, AT_MORE or AT_NOMEM. */
static long hermes_call_at(const char *s, size_t n, size_t i, int final, const tc_opts *o, tc_result *r) {
    static const char open[] = "<tool_call>", close[] = "</tool_call>";
    int maybe = 0;
    if (starts(s, n, i, open, &maybe)) {
        size_t body = i + sizeof open - 1;
        const char *g = memmem(s + body, n - body, close, sizeof close - 1);
        if (!g && !final) return AT_MORE;
        size_t body_end = g ? (size_t)(g - s) : n;
        size_t a = skip_ws(s, body_end, body);
        tc_call c;
        int rc;
        if (a < body_end && s[a] != '{') { /* <function=...> or GLM's name + <arg_key>/<arg_value> */
            rc = call_from_tags(s, a, body_end, &c);
            if (rc < 0) return AT_NOMEM;
            if (rc == 0) return AT_NONE;
            if (add_call(r, &c)) return AT_NOMEM;
            return (long)(g ? body_end + sizeof close - 1 : n);
        }
        if (a >= body_end) return AT_NONE;
        size_t e = value_end(s, body_end, a);
        if (!e || skip_ws(s, body_end, e) != body_end) return AT_NONE;
        rc = call_from_object(s, a, e, o, 0, &c);
        if (rc < 0) return AT_NOMEM;
        if (rc == 0) return AT_NONE;
        if (add_call(r, &c)) return AT_NOMEM;
        return (long)(g ? body_end + sizeof close - 1 : n);
    }
    if (starts(s, n, i, "```", &maybe)) {
        size_t k = i + 3;
        if (starts(s, n, k, "json", &maybe)) k += 4;
        else if (starts(s, n, k, "xml", &maybe)) k += 3;
        if (k >= n) return final ? AT_NONE : AT_MORE;
        if (s[k] != '\n' && s[k] != ' ') return maybe && !final ? AT_MORE : AT_NONE;
        k = skip_ws(s, n, k);
        int tagged = 0;
        if (starts(s, n, k, open, &maybe)) { tagged = 1; k = skip_ws(s, n, k + sizeof open - 1); }
        else if (maybe && !final) return AT_MORE;
        if (k >= n) return final ? AT_NONE : AT_MORE;
        if (s[k] != '{') return AT_NONE;
        size_t calls_before = (size_t)r->n_calls;
        long e = object_call_at(s, n, k, final, o, 1, 1, r);
        if (e <= 0) return e;
        size_t q = skip_ws(s, n, (size_t)e);
        if (tagged) {
            if (starts(s, n, q, close, &maybe)) q = skip_ws(s, n, q + sizeof close - 1);
            else if (!final && (maybe || q >= n)) goto more;
        }
        if (starts(s, n, q, "```", &maybe)) return (long)(q + 3);
        if (!final && (maybe || q >= n)) goto more;
        return final && q >= n ? (long)q : AT_NONE; /* an unclosed fence at the end still holds the call */
    more:
        while ((size_t)r->n_calls > calls_before) { /* reported again when the fence closes */
            tc_call *c = &r->calls[--r->n_calls];
            free(c->name); free(c->arguments); free(c->id);
        }
        return AT_MORE;
    }
    if (s[i] == '{') return object_call_at(s, n, i, final, o, 1, 1, r);
    return !final && maybe ? AT_MORE : AT_NONE;
}

/* Calls in the hermes forms among text (hermes, generic). */
static int parse_hermes(const char *s, size_t n, int final, const tc_opts *o, buf *content, tc_result *r) {
    size_t i = 0, text = 0;
    while (i < n) {
        /* the next place a call may start */
        size_t k = i;
        while (k < n && s[k] != '<' && s[k] != '`' && s[k] != '{') k++;
        if (k >= n) break;
        long e = hermes_call_at(s, n, k, final, o, r);
        if (e == AT_NOMEM) return -1;
        if (e == AT_MORE) { /* streaming: the text from k waits */
            put(content, s + text, k - text);
            return 0;
        }
        if (e > 0) {
            put(content, s + text, k - text);
            i = text = (size_t)e;
        } else {
            i = k + 1;
        }
    }
    put(content, s + text, n - text);
    return 0;
}

/* The whole answer one JSON object naming a tool (llama3, generic); *done when it was. */
static int parse_bare(const char *s, size_t n, int final, const tc_opts *o, const char *args_prefix, buf *content,
                      tc_result *r, int *held) {
    size_t i = 0;
    *held = 0;
    while (i < n && is_ws(s[i])) i++;
    if (args_prefix) {
        size_t m = strlen(args_prefix);
        if (n - i >= m && !memcmp(s + i, args_prefix, m)) i += m;
        else if (!final && n - i < m && !memcmp(s + i, args_prefix, n - i)) { *held = 1; return 0; }
        while (i < n && is_ws(s[i])) i++;
    }
    if (i >= n) { if (!final) *held = 1; return 0; }
    if (s[i] != '{') return 0;
    size_t first = i;
    int got = 0;
    for (;;) {
        size_t e = value_end(s, n, i);
        if (!e) {
            if (!final) { *held = 1; return 0; }
            break;
        }
        tc_call c;
        int rc = call_from_object(s, i, e, o, 1, &c);
        if (rc < 0) return -1;
        if (rc == 0) break;
        if (add_call(r, &c)) return -1;
        got = 1;
        i = e;
        while (i < n && (is_ws(s[i]) || s[i] == ';')) i++; /* several calls: "{...}; {...}" */
        if (i >= n || s[i] != '{') break;
    }
    if (got) {
        put_text(content, s + i, n - i, final, NULL);
        *held = 2;
    } else if (!final) {
        (void)first;
    }
    return 0;
}

/* [TOOL_CALLS][{...}, ...] and [TOOL_CALLS]name[ARGS]{...} (mistral, mistral-args) */
static int parse_mistral(const char *s, size_t n, int final, const tc_opts *o, buf *content, tc_result *r) {
    static const char mark[] = "[TOOL_CALLS]";
    size_t i = 0;
    while (i < n) {
        const char *f = memmem(s + i, n - i, mark, sizeof mark - 1);
        if (!f) {
            put_text(content, s + i, n - i, final, mark);
            return 0;
        }
        size_t k = (size_t)(f - s), j = k + sizeof mark - 1;
        put(content, s + i, k - i);
        while (j < n && is_ws(s[j])) j++;
        if (j >= n && !final) return 0; /* the marker alone, so far */
        size_t end = 0;
        int ok = 0;
        if (j < n && s[j] == '[') { /* a list of call objects */
            end = value_end(s, n, j);
            if (!end && !final) return 0;
            if (end) {
                size_t start_calls = (size_t)r->n_calls;
                ok = 1;
                for (size_t q = j + 1; ok;) {
                    while (q < end && (is_ws(s[q]) || s[q] == ',')) q++;
                    if (q >= end - 1) break;
                    size_t e = s[q] == '{' ? value_end(s, end, q) : 0;
                    tc_call c;
                    int rc = e ? call_from_object(s, q, e, o, 0, &c) : 0;
                    if (rc < 0) return -1;
                    if (rc == 0 || add_call(r, &c)) { ok = rc == 0 ? 0 : -1; break; }
                    q = e;
                }
                if (ok < 0) return -1;
                if (!ok) { /* not a list of calls: text, and the calls taken from it dropped */
                    while ((size_t)r->n_calls > start_calls) {
                        tc_call *c = &r->calls[--r->n_calls];
                        free(c->name); free(c->arguments); free(c->id);
                    }
                }
            }
        } else if (o->format == TC_FORMAT_MISTRAL_ARGS) { /* name[CALL_ID]id[ARGS]{...} */
            size_t q = j; /* a name of [A-Za-z0-9_.-] */
            while (q < n && ((s[q] >= 'a' && s[q] <= 'z') || (s[q] >= 'A' && s[q] <= 'Z') || (s[q] >= '0' && s[q] <= '9') ||
                             s[q] == '_' || s[q] == '-' || s[q] == '.'))
                q++;
            if (q >= n && !final) return 0; /* the name, so far */
            size_t name_end = q;
            const char *id = NULL;
            size_t id_len = 0;
            int maybe = 0;
            if (starts(s, n, q, "[CALL_ID]", &maybe)) {
                size_t a = q + 9;
                q = a;
                while (q < n && s[q] != '[') q++;
                if (q >= n && !final) return 0;
                id = s + a;
                id_len = q - a;
            } else if (maybe && !final) {
                return 0;
            }
            maybe = 0;
            if (starts(s, n, q, "[ARGS]", &maybe) && name_end > j) {
                size_t a = skip_ws(s, n, q + 6);
                end = a < n && s[a] == '{' ? value_end(s, n, a) : 0;
                if (!end && !final && (a >= n || s[a] == '{')) return 0;
                if (end) {
                    jinja_env *e = jinja_env_new();
                    jinja_error err;
                    jinja_value *v = e ? jinja_json_parse(e, s + a, end - a, &err) : NULL;
                    ok = v && jinja_is_dict(v);
                    jinja_env_free(e);
                    if (ok) {
                        tc_call c = { dup_n(s + j, name_end - j), dup_n(s + a, end - a), id ? dup_n(id, id_len) : NULL };
                        if (!c.name || !c.arguments || (id && !c.id) || add_call(r, &c)) {
                            free(c.name); free(c.arguments); free(c.id);
                            return -1;
                        }
                    }
                }
            } else if ((maybe || q >= n) && !final) {
                return 0;
            }
        }
        if (!ok) { /* not a call: the marker and what follows stay text */
            size_t stop = end ? end : n;
            put(content, s + k, stop - k);
            i = stop;
            continue;
        }
        i = end;
    }
    return 0;
}

/* DeepSeek's calls (R1: <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>;
 * V3.1: <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>), in a
 * <｜tool▁calls▁begin｜> ... <｜tool▁calls▁end｜> list. */
/* memmem of s[from..n) (NULL where from >= n). gcc 12's -Wnonnull, under ASan's
 * instrumentation, sees a NULL first argument here on a path that cannot be taken (s is
 * checked): quieted for this call alone. */
static const char *find(const char *s, size_t n, size_t from, const char *needle, size_t len) {
    if (!s || from >= n) return NULL;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnonnull"
    return memmem(s + from, n - from, needle, len);
#pragma GCC diagnostic pop
}

static int parse_deepseek(const char *s, size_t n, int final, const tc_opts *o, buf *content, tc_result *r) {
    (void)o;
    if (!s || !n) return 0;
    const size_t lb = strlen(DS_CALL_BEGIN), le = strlen(DS_CALL_END), lsep = strlen(DS_SEP);
    const size_t lcb = strlen(DS_CALLS_BEGIN), lce = strlen(DS_CALLS_END);
    size_t i = 0;
    while (i < n) {
        const char *f = find(s, n, i, DS_CALLS_BEGIN, lcb), *g = find(s, n, i, DS_CALL_BEGIN, lb);
        if (!f && !g) {
            size_t m = n - i;
            if (!final) {
                size_t h1 = partial_marker(s + i, m, DS_CALLS_BEGIN), h2 = partial_marker(s + i, m, DS_CALL_BEGIN);
                m -= h1 > h2 ? h1 : h2;
            }
            put(content, s + i, m);
            return 0;
        }
        size_t k = f && (!g || f < g) ? (size_t)(f - s) : (size_t)(g - s);
        put(content, s + i, k - i);
        size_t q = k;
        if (f && (size_t)(f - s) == k) q += lcb;
        size_t calls_before = (size_t)r->n_calls;
        int bad = 0;
        for (;;) { /* the calls of the list */
            q = skip_ws(s, n, q);
            int maybe = 0;
            if (starts(s, n, q, DS_CALLS_END, &maybe)) { q += lce; break; }
            if (q >= n || maybe) { if (!final) return 0; break; }
            if (!starts(s, n, q, DS_CALL_BEGIN, &maybe)) { if (maybe && !final) return 0; break; }
            size_t a = q + lb;
            const char *ce = find(s, n, a, DS_CALL_END, le);
            if (!ce && !final) return 0;
            size_t e = ce ? (size_t)(ce - s) : n;
            const char *sep = find(s, e, a, DS_SEP, lsep);
            if (!sep) { bad = 1; break; }
            size_t sa = (size_t)(sep - s) + lsep, name_a, name_e, ja, je;
            const char *fence = find(s, e, sa, "```json", 7);
            if (fence) { /* R1: TYPE<sep>NAME\n```json\n{...}\n``` */
                name_a = sa;
                name_e = (size_t)(fence - s);
                ja = skip_ws(s, e, name_e + 7);
                je = ja < e && s[ja] == '{' ? value_end(s, e, ja) : 0;
            } else { /* V3.1: NAME<sep>{...} */
                name_a = a;
                name_e = (size_t)(sep - s);
                ja = skip_ws(s, e, sa);
                je = ja < e && s[ja] == '{' ? value_end(s, e, ja) : 0;
            }
            while (name_a < name_e && is_ws(s[name_a])) name_a++;
            while (name_e > name_a && is_ws(s[name_e - 1])) name_e--;
            if (!je || name_e == name_a) { bad = 1; break; }
            jinja_env *env = jinja_env_new();
            jinja_error err;
            jinja_value *v = env ? jinja_json_parse(env, s + ja, je - ja, &err) : NULL;
            int ok = v && jinja_is_dict(v) && !memchr(s + name_a, 0, name_e - name_a);
            jinja_env_free(env);
            if (!ok) { bad = 1; break; }
            tc_call c = { dup_n(s + name_a, name_e - name_a), dup_n(s + ja, je - ja), NULL };
            if (!c.name || !c.arguments || add_call(r, &c)) { free(c.name); free(c.arguments); return -1; }
            q = ce ? e + le : n;
        }
        if (bad || (size_t)r->n_calls == calls_before) { /* not calls: text, the calls taken back */
            while ((size_t)r->n_calls > calls_before) {
                tc_call *c = &r->calls[--r->n_calls];
                free(c->name); free(c->arguments); free(c->id);
            }
            if (!final) return 0;
            put(content, s + k, n - k);
            return 0;
        }
        i = q;
    }
    return 0;
}

int tc_parse(const char *text, size_t n, int final, const tc_opts *o, tc_result *out) {
    memset(out, 0, sizeof *out);
    if (!text) {
        text = "";
        n = 0;
    }
    buf reasoning = { 0 }, content = { 0 };
    size_t pos = 0;
    int rc = 0;
    if (o->reasoning) {
        static const char open[] = "<think>", close[] = "</think>";
        size_t p = 0;
        while (p < n && is_ws(text[p])) p++;
        int in_think = o->think_open;
        size_t start = 0;
        if (!in_think && n - p >= 7 && !memcmp(text + p, open, 7)) { in_think = 1; start = p + 7; }
        else if (!in_think && !final && n - p < 7 && !memcmp(text + p, open, n - p)) pos = n; /* "<thi": wait */
        if (in_think) {
            const char *e = memmem(text + start, n - start, close, sizeof close - 1);
            if (e) {
                put(&reasoning, text + start, (size_t)(e - text) - start);
                pos = (size_t)(e - text) + sizeof close - 1;
            } else {
                put_text(&reasoning, text + start, n - start, final, close);
                pos = n;
            }
        }
    }
    const char *s = text + pos;
    size_t m = n - pos;
    int held = 0;
    switch (o->format) {
    case TC_FORMAT_NONE: put(&content, s, m); break;
    case TC_FORMAT_HERMES: rc = parse_hermes(s, m, final, o, &content, out); break;
    case TC_FORMAT_MISTRAL: case TC_FORMAT_MISTRAL_ARGS: rc = parse_mistral(s, m, final, o, &content, out); break;
    case TC_FORMAT_DEEPSEEK: rc = parse_deepseek(s, m, final, o, &content, out); break;
    case TC_FORMAT_LLAMA3:
        rc = parse_bare(s, m, final, o, "<|python_tag|>", &content, out, &held);
        if (!rc && !held) put(&content, s, m);
        break;
    case TC_FORMAT_GENERIC:
        rc = parse_hermes(s, m, final, o, &content, out);
        break;
    }
    if (rc || reasoning.oom || content.oom) goto fail;
    /* streaming: trailing whitespace waits (the final text is trimmed) */
    out->reasoning = trimmed(&reasoning, &out->reasoning_len);
    out->content = trimmed(&content, &out->content_len);
    if (!out->reasoning || !out->content) goto fail;
    free(reasoning.p);
    free(content.p);
    return 0;
fail:
    free(reasoning.p);
    free(content.p);
    tc_result_free(out);
    return -1;
}

void tc_result_free(tc_result *r) {
    if (!r) return;
    free(r->reasoning);
    free(r->content);
    for (int i = 0; i < r->n_calls; i++) {
        free(r->calls[i].name);
        free(r->calls[i].arguments);
        free(r->calls[i].id);
    }
    free(r->calls);
    memset(r, 0, sizeof *r);
}
