/* toolcall.c - see toolcall.h. The JSON of a call is scanned here for the spans of its
 * members (the arguments' exact text) and checked with the Jinja engine's JSON reader.
 *
 * Layout: detection and the per-format facts (names, special-token markers, the shape a
 * grammar forces), then the shared pieces (JSON spans, result buffers, one call from a
 * JSON object or from XML-like tags), then one parser per family of syntax:
 *   markers among text   a driver (scan_markers) finds a format's start markers and asks
 *                        the format's call_at function what stands there: hermes's
 *                        <tool_call> and seed-oss's <seed:tool_call> blocks, JSON lists
 *                        after a marker (list_fmt: mistral, granite, command-r, command-r7b,
 *                        nemotron-v2, apriel),
 *                        DeepSeek's and Kimi's sections of calls (section_fmt),
 *                        functionary v3.1's <function=N>
 *   whole answers        llama3's bare object, functionary v3.2's >>> messages, gpt-oss's
 *                        harmony messages (which carry the reasoning too)
 * and last tc_parse: the reasoning block, the answer's wrapper, the format's parser.
 *
 * Every call_at function answers, for the text from a marker: the end of the calls it
 * read (they are added to the result), AT_NONE (no call can ever stand here: the marker
 * stays text), or AT_MORE (streaming: what follows decides; the text from the marker
 * waits). That is the streaming promise's whole mechanism: AT_NONE only where no
 * continuation could make it a call. */
#include "toolcall.h"

#include <stdint.h>
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

/* Kimi K2's */
#define KIMI_CALLS_BEGIN "<|tool_calls_section_begin|>"
#define KIMI_CALLS_END "<|tool_calls_section_end|>"
#define KIMI_CALL_BEGIN "<|tool_call_begin|>"
#define KIMI_CALL_END "<|tool_call_end|>"
#define KIMI_ARGS "<|tool_call_argument_begin|>"

/* DeepSeek V3.2's markup prefix (fullwidth bars) */
#define DSML "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c"

static int has(const char *s, size_t n, const char *needle) { return memmem(s, n, needle, strlen(needle)) != NULL; }

/* ---------------------------------------------------------------- detection and facts */

/* The order matters where templates share markers: Command R7B's prompt says "Action:",
 * Seed-OSS's and Functionary v3.1's write <function=, Llama 3.1's says ipython. */
tc_format tc_detect(const char *src, size_t len) {
    if (!src) return TC_FORMAT_GENERIC;
    if (has(src, len, "[TOOL_CALLS]")) return has(src, len, "[ARGS]") ? TC_FORMAT_MISTRAL_ARGS : TC_FORMAT_MISTRAL;
    if (has(src, len, "<|channel|>") && has(src, len, "to=")) return TC_FORMAT_GPT_OSS;
    if (has(src, len, "<minimax:tool_call>")) return TC_FORMAT_MINIMAX_M2;
    if (has(src, len, "DSML")) return TC_FORMAT_DEEPSEEK_DSML;
    if (has(src, len, DS_CALL_BEGIN)) return has(src, len, "```json") ? TC_FORMAT_DEEPSEEK : TC_FORMAT_DEEPSEEK_V31;
    if (has(src, len, KIMI_CALLS_BEGIN)) return TC_FORMAT_KIMI_K2;
    if (has(src, len, "<seed:tool_call>")) return TC_FORMAT_SEED_OSS;
    if (has(src, len, "<|START_ACTION|>")) return TC_FORMAT_COMMAND_R7B;
    if (has(src, len, "Action:") && has(src, len, "\"tool_name\"")) return TC_FORMAT_COMMAND_R;
    if (has(src, len, "<|tool_call|>")) return TC_FORMAT_GRANITE;
    if (has(src, len, "<TOOLCALL>")) return TC_FORMAT_NEMOTRON_V2;
    if (has(src, len, "<tool_calls>")) return TC_FORMAT_APRIEL; /* its prompt speaks of <tool_call> too */
    if (has(src, len, "<tool_call>")) return TC_FORMAT_HERMES;
    if (has(src, len, "<|start_header_id|>")) {
        if (has(src, len, ">>>all")) return TC_FORMAT_FUNCTIONARY_V32;
        if (has(src, len, "<function=")) return TC_FORMAT_FUNCTIONARY_V31;
        if (has(src, len, "ipython") || has(src, len, "\"parameters\"")) return TC_FORMAT_LLAMA3;
    }
    return TC_FORMAT_GENERIC;
}

static const char *const format_names[TC_FORMAT_COUNT] = {
    [TC_FORMAT_NONE] = "none", [TC_FORMAT_HERMES] = "hermes", [TC_FORMAT_LLAMA3] = "llama3",
    [TC_FORMAT_MISTRAL] = "mistral", [TC_FORMAT_MISTRAL_ARGS] = "mistral-args", [TC_FORMAT_GENERIC] = "generic",
    [TC_FORMAT_DEEPSEEK] = "deepseek", [TC_FORMAT_DEEPSEEK_V31] = "deepseek-v3.1",
    [TC_FORMAT_FUNCTIONARY_V31] = "functionary-v3.1", [TC_FORMAT_FUNCTIONARY_V32] = "functionary-v3.2",
    [TC_FORMAT_COMMAND_R] = "command-r", [TC_FORMAT_COMMAND_R7B] = "command-r7b", [TC_FORMAT_GRANITE] = "granite",
    [TC_FORMAT_GPT_OSS] = "gpt-oss", [TC_FORMAT_KIMI_K2] = "kimi-k2", [TC_FORMAT_SEED_OSS] = "seed-oss",
    [TC_FORMAT_NEMOTRON_V2] = "nemotron-v2", [TC_FORMAT_APRIEL] = "apriel",
    [TC_FORMAT_MINIMAX_M2] = "minimax-m2", [TC_FORMAT_DEEPSEEK_DSML] = "deepseek-dsml",
};

const char *tc_format_name(tc_format f) { return f >= 0 && f < TC_FORMAT_COUNT ? format_names[f] : "?"; }

/* A reasoning markup: the block at the start of the output, and (resp_open/resp_close)
 * the wrapper some families put around the answer after it. */
typedef struct think_tags { const char *name, *open, *close, *resp_open, *resp_close; } think_tags;
static const think_tags THINK[TC_THINK_COUNT] = {
    [TC_THINK_NONE] = { "none", NULL, NULL, NULL, NULL },
    [TC_THINK_TAGS] = { "think", "<think>", "</think>", NULL, NULL },
    [TC_THINK_SEED] = { "seed", "<seed:think>", "</seed:think>", NULL, NULL },
    [TC_THINK_COHERE] = { "cohere", "<|START_THINKING|>", "<|END_THINKING|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>" },
    [TC_THINK_GRANITE] = { "granite", "<think>", "</think>", "<response>", "</response>" },
    [TC_THINK_HARMONY] = { "harmony", NULL, NULL, NULL, NULL }, /* parse_harmony */
    [TC_THINK_MISTRAL] = { "mistral", "[THINK]", "[/THINK]", NULL, NULL },
    [TC_THINK_APRIEL] = { "apriel", "Here are my reasoning steps:", "[BEGIN FINAL RESPONSE]", NULL, "[END FINAL RESPONSE]" },
};

tc_think tc_template_thinks(const char *src, size_t len) {
    if (!src) return TC_THINK_NONE;
    if (has(src, len, "<|channel|>") && has(src, len, "analysis")) return TC_THINK_HARMONY;
    if (has(src, len, "<seed:think>")) return TC_THINK_SEED;
    if (has(src, len, "[THINK]")) return TC_THINK_MISTRAL;
    if (has(src, len, "[BEGIN FINAL RESPONSE]")) return TC_THINK_APRIEL;
    if (has(src, len, "<|START_THINKING|>")) return TC_THINK_COHERE;
    if (has(src, len, "<think>") && has(src, len, "<response>") && has(src, len, "<|start_of_role|>")) return TC_THINK_GRANITE;
    if (has(src, len, "<think>")) return TC_THINK_TAGS;
    return TC_THINK_NONE;
}

const char *tc_think_name(tc_think t) { return t >= 0 && t < TC_THINK_COUNT ? THINK[t].name : "?"; }

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && is_ws(s[i])) i++;
    return i;
}

tc_think tc_prompt_opens_think(const char *p, size_t n) {
    while (n && is_ws(p[n - 1])) n--;
    static const tc_think order[] = { TC_THINK_TAGS, TC_THINK_SEED, TC_THINK_COHERE, TC_THINK_MISTRAL, TC_THINK_APRIEL };
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        const char *open = THINK[order[i]].open;
        size_t m = strlen(open);
        if (n >= m && !memcmp(p + n - m, open, m)) return order[i];
    }
    return TC_THINK_NONE;
}

/* The markers of each format that vocabularies hold as special tokens (what the server
 * renders as text for the parser); plain-text markers (">>>", "Action:") need nothing. */
static const char *const format_markers[TC_FORMAT_COUNT][8] = {
    [TC_FORMAT_HERMES] = { "<tool_call>", "</tool_call>" },
    [TC_FORMAT_GENERIC] = { "<tool_call>", "</tool_call>" },
    [TC_FORMAT_LLAMA3] = { "<|python_tag|>" },
    [TC_FORMAT_MISTRAL] = { "[TOOL_CALLS]" },
    [TC_FORMAT_MISTRAL_ARGS] = { "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]" },
    [TC_FORMAT_DEEPSEEK] = { DS_CALLS_BEGIN, DS_CALLS_END, DS_CALL_BEGIN, DS_CALL_END, DS_SEP },
    [TC_FORMAT_DEEPSEEK_V31] = { DS_CALLS_BEGIN, DS_CALLS_END, DS_CALL_BEGIN, DS_CALL_END, DS_SEP },
    [TC_FORMAT_FUNCTIONARY_V31] = { "<|python_tag|>" },
    [TC_FORMAT_COMMAND_R7B] = { "<|START_ACTION|>", "<|END_ACTION|>" },
    [TC_FORMAT_GRANITE] = { "<|tool_call|>" },
    [TC_FORMAT_GPT_OSS] = { "<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|constrain|>" },
    [TC_FORMAT_KIMI_K2] = { KIMI_CALLS_BEGIN, KIMI_CALLS_END, KIMI_CALL_BEGIN, KIMI_CALL_END, KIMI_ARGS },
    [TC_FORMAT_SEED_OSS] = { "<seed:tool_call>", "</seed:tool_call>" },
    [TC_FORMAT_NEMOTRON_V2] = { "<TOOLCALL>", "</TOOLCALL>" },
    [TC_FORMAT_APRIEL] = { "<tool_calls>", "</tool_calls>" },
    [TC_FORMAT_MINIMAX_M2] = { "<minimax:tool_call>", "</minimax:tool_call>" },
    [TC_FORMAT_DEEPSEEK_DSML] = { "<" DSML "function_calls>", "</" DSML "function_calls>" },
};

int tc_markers(tc_format f, tc_think t, const char **out, int cap) {
    int n = 0;
    if (f > TC_FORMAT_NONE && f < TC_FORMAT_COUNT)
        for (int i = 0; i < 8 && format_markers[f][i]; i++)
            if (n < cap) out[n++] = format_markers[f][i];
    if (t <= TC_THINK_NONE || t >= TC_THINK_COUNT) return n;
    const char *think[5] = { THINK[t].open, THINK[t].close, THINK[t].resp_open, THINK[t].resp_close, NULL };
    if (t == TC_THINK_HARMONY) {
        if (f == TC_FORMAT_GPT_OSS) return n; /* the format's own */
        for (int i = 0; i < 5; i++) think[i] = format_markers[TC_FORMAT_GPT_OSS][i];
    }
    for (int i = 0; i < 5; i++)
        if (think[i] && n < cap) out[n++] = think[i];
    return n;
}

/* What a forced call writes, a format a row: list_prefix, list_suffix, separator,
 * call_prefix, call_suffix, name_key, args_key, bare_name, name_suffix, max_calls. */
static const tc_shape SHAPES[TC_FORMAT_COUNT] = {
    [TC_FORMAT_HERMES] = { NULL, NULL, "\n", "<tool_call>\n", "\n</tool_call>", "name", "arguments", 0, NULL, 0 },
    [TC_FORMAT_GENERIC] = { NULL, NULL, "\n", "<tool_call>\n", "\n</tool_call>", "name", "arguments", 0, NULL, 0 },
    [TC_FORMAT_LLAMA3] = { NULL, NULL, "; ", NULL, NULL, "name", "parameters", 0, NULL, 0 },
    [TC_FORMAT_MISTRAL] = { "[TOOL_CALLS][", "]", ", ", NULL, NULL, "name", "arguments", 0, NULL, 0 },
    [TC_FORMAT_MISTRAL_ARGS] = { NULL, NULL, NULL, "[TOOL_CALLS]", NULL, NULL, NULL, 1, "[ARGS]", 0 },
    [TC_FORMAT_DEEPSEEK] = { DS_CALLS_BEGIN, DS_CALLS_END, "\n", DS_CALL_BEGIN "function" DS_SEP, "\n```" DS_CALL_END, NULL,
                             NULL, 1, "\n```json\n", 0 },
    [TC_FORMAT_DEEPSEEK_V31] = { DS_CALLS_BEGIN, DS_CALLS_END, NULL, DS_CALL_BEGIN, DS_CALL_END, NULL, NULL, 1, DS_SEP, 0 },
    [TC_FORMAT_FUNCTIONARY_V31] = { NULL, NULL, NULL, "<function=", "</function>", NULL, NULL, 1, ">", 0 },
    /* the prompt wrote the first ">>>" */
    [TC_FORMAT_FUNCTIONARY_V32] = { NULL, NULL, ">>>", NULL, NULL, NULL, NULL, 1, "\n", 0 },
    [TC_FORMAT_COMMAND_R] = { "Action:\n```json\n[\n", "\n]\n```", ",\n", NULL, NULL, "tool_name", "parameters", 0, NULL, 0 },
    [TC_FORMAT_COMMAND_R7B] = { "<|START_ACTION|>[", "]<|END_ACTION|>", ", ", NULL, NULL, "tool_name", "parameters", 0, NULL, 0 },
    [TC_FORMAT_GRANITE] = { "<|tool_call|>[", "]", ", ", NULL, NULL, "name", "arguments", 0, NULL, 0 },
    /* one call a message: the model ends it with <|call|> */
    [TC_FORMAT_GPT_OSS] = { NULL, NULL, NULL, "<|channel|>commentary to=functions.", NULL, NULL, NULL, 1,
                            " <|constrain|>json<|message|>", 1 },
    /* every call's index 0: a grammar cannot count (the parser drops ids that repeat) */
    [TC_FORMAT_KIMI_K2] = { KIMI_CALLS_BEGIN, KIMI_CALLS_END, NULL, KIMI_CALL_BEGIN "functions.", KIMI_CALL_END, NULL, NULL, 1,
                            ":0" KIMI_ARGS, 0 },
    /* the generic JSON object inside its markers (its <parameter=K> values are free text) */
    [TC_FORMAT_SEED_OSS] = { NULL, NULL, "\n", "<seed:tool_call>\n", "\n</seed:tool_call>", "name", "arguments", 0, NULL, 0 },
    [TC_FORMAT_NEMOTRON_V2] = { "<TOOLCALL>[", "]</TOOLCALL>", ", ", NULL, NULL, "name", "arguments", 0, NULL, 0 },
    [TC_FORMAT_APRIEL] = { "<tool_calls>[", "]</tool_calls>", ", ", NULL, NULL, "name", "arguments", 0, NULL, 0 },
    /* the generic JSON object inside their markers (the grammar cannot tie a parameter's
     * value to its key's schema type) */
    [TC_FORMAT_MINIMAX_M2] = { NULL, NULL, "\n", "<minimax:tool_call>\n", "\n</minimax:tool_call>", "name", "arguments", 0,
                               NULL, 0 },
    [TC_FORMAT_DEEPSEEK_DSML] = { NULL, NULL, "\n", "<" DSML "function_calls>\n", "\n</" DSML "function_calls>", "name",
                                  "arguments", 0, NULL, 0 },
};

void tc_format_shape(tc_format f, tc_shape *s) {
    memset(s, 0, sizeof *s);
    if (f > TC_FORMAT_NONE && f < TC_FORMAT_COUNT) *s = SHAPES[f];
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

/* Whether s[a..b) is a JSON object. */
static int is_json_object(const char *s, size_t a, size_t b) {
    jinja_env *e = jinja_env_new();
    jinja_error err;
    jinja_value *v = e ? jinja_json_parse(e, s + a, b - a, &err) : NULL;
    int ok = v && jinja_is_dict(v);
    jinja_env_free(e);
    return ok;
}

static int name_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' ||
           ch == '.';
}

/* A call from the JSON object s[a..b): its name (the string member name_key: "name",
 * or Cohere's "tool_name"), its arguments ("arguments" or "parameters": an object as
 * written, or a string as it decodes; "{}" when absent) and "id". Returns 1 with *c
 * filled, 0 when it is not a call, -1 on memory. */
static int call_from_object(const char *s, size_t a, size_t b, const tc_opts *o, int need_known, const char *name_key,
                            tc_call *c) {
    memset(c, 0, sizeof *c);
    jinja_env *e = jinja_env_new();
    if (!e) return -1;
    jinja_error err;
    jinja_value *v = jinja_json_parse(e, s + a, b - a, &err);
    size_t nlen = 0;
    const char *name = v && jinja_is_dict(v) ? jinja_str(jinja_dict_get(v, name_key ? name_key : "name"), &nlen) : NULL;
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

/* A call of a name span and an arguments span (copied); -1 on memory. */
static int add_call_spans(tc_result *r, const char *s, span name, span args, const char *id, size_t id_len) {
    tc_call c = { dup_n(s + name.a, name.b - name.a), dup_n(s + args.a, args.b - args.a), id ? dup_n(id, id_len) : NULL };
    if (!c.name || !c.arguments || (id && !c.id) || add_call(r, &c)) {
        free(c.name); free(c.arguments); free(c.id);
        return -1;
    }
    return 0;
}

/* Takes back the calls added after the first `keep` (a list that turned out no list of calls). */
static void drop_calls(tc_result *r, int keep) {
    while (r->n_calls > keep) {
        tc_call *c = &r->calls[--r->n_calls];
        free(c->name); free(c->arguments); free(c->id);
    }
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

static const char *find_s(const char *s, size_t n, size_t from, const char *needle) {
    return find(s, n, from, needle, strlen(needle));
}

/* Does s[i..n) start with word? 1 yes, 0 no; *maybe set where s[i..n) is a proper
 * prefix of it (possibly empty: more text may make it). */
static int starts(const char *s, size_t n, size_t i, const char *word, int *maybe) {
    size_t m = strlen(word);
    if (i > n) return 0;
    if (n - i >= m) return !memcmp(s + i, word, m);
    if (maybe && !memcmp(s + i, word, n - i)) *maybe = 1;
    return 0;
}

/* Is s[i..n) non-empty and a proper prefix of word (a marker the text is cut inside)? */
static int cut_inside(const char *s, size_t n, size_t i, const char *word) {
    size_t m = strlen(word);
    return i < n && n - i < m && !memcmp(s + i, word, n - i);
}

/* ---------------------------------------------------------------- XML-like arguments */

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
 *     Qwen3.5, Nemotron 3, StepFun, Seed-OSS)
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
    for (size_t q = name_a; q < name_e; q++)
        if (!name_char(s[q])) return 0;
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

/* ---------------------------------------------------------------- calls among text */

enum { AT_NONE = 0, AT_MORE = -2, AT_NOMEM = -1 };

/* What stands at a start marker, s[i..): see the top of the file. */
typedef long (*call_at_fn)(const char *s, size_t n, size_t i, int final, const tc_opts *o, tc_result *r, const void *arg);

/* The text of s[0..n) with the calls that start at any of marks[] (at most 8) taken out
 * into r; the rest to content. While streaming, a suffix that may be a marker's start
 * waits. Each marker's next place is looked for again only once the scan passed it (a
 * parse stays linear in the text however many candidates it holds). */
static int scan_markers(const char *s, size_t n, int final, const tc_opts *o, const char *const *marks, call_at_fn at,
                        const void *arg, buf *content, tc_result *r) {
    size_t i = 0, text = 0, next[8];
    int nm = 0;
    while (nm < 8 && marks[nm]) next[nm++] = SIZE_MAX;
    for (;;) {
        size_t k = n;
        for (int m = 0; m < nm; m++) {
            if (next[m] == SIZE_MAX || (next[m] < i && next[m] != n)) {
                const char *f = find_s(s, n, i, marks[m]);
                next[m] = f ? (size_t)(f - s) : n;
            }
            if (next[m] < k) k = next[m];
        }
        if (k >= n) break;
        long e = at(s, n, k, final, o, r, arg);
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
    size_t end = n;
    if (!final)
        for (int m = 0; m < nm; m++) {
            size_t h = partial_marker(s + text, n - text, marks[m]);
            if (n - h < end) end = n - h;
        }
    put(content, s + text, end - text);
    return 0;
}

/* ---------------------------------------------------------------- hermes and seed-oss blocks */

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
    int rc = call_from_object(s, i, e, o, need_known, NULL, &c);
    if (rc < 0) return AT_NOMEM;
    if (rc == 0) return AT_NONE;
    if (add_call(r, &c)) return AT_NOMEM;
    return (long)e;
}

/* OPEN body CLOSE at s[i] (i at OPEN): the body one JSON call object, or the tag forms
 * of call_from_tags. An unclosed block at the end of the output still holds its call. */
typedef struct tag_fmt { const char *open, *close; } tag_fmt;

static long tagged_call_at(const char *s, size_t n, size_t i, int final, const tc_opts *o, tc_result *r, const void *arg) {
    const tag_fmt *t = arg;
    size_t lo = strlen(t->open), lc = strlen(t->close);
    size_t body = i + lo;
    const char *g = find(s, n, body, t->close, lc);
    if (!g && !final) return AT_MORE;
    size_t body_end = g ? (size_t)(g - s) : n;
    size_t a = skip_ws(s, body_end, body);
    tc_call c;
    int rc;
    if (a >= body_end) return AT_NONE;
    if (s[a] != '{') { /* <function=...> or GLM's name + <arg_key>/<arg_value> */
        rc = call_from_tags(s, a, body_end, &c);
    } else {
        size_t e = value_end(s, body_end, a);
        if (!e || skip_ws(s, body_end, e) != body_end) return AT_NONE;
        rc = call_from_object(s, a, e, o, 0, NULL, &c);
    }
    if (rc < 0) return AT_NOMEM;
    if (rc == 0) return AT_NONE;
    if (add_call(r, &c)) return AT_NOMEM;
    return (long)(g ? body_end + lc : n);
}

static const tag_fmt HERMES_TAGS = { "<tool_call>", "</tool_call>" };
static const tag_fmt SEED_TAGS = { "<seed:tool_call>", "</seed:tool_call>" };

/* A call in one of the hermes forms at s[i]: <tool_call>{...}</tool_call>; a fenced
 * ```json {...} ``` (with or without the tags inside: what Qwen2.5-Coder writes); a bare
 * {"name": ...} naming a tool (as llama.cpp's hermes parser takes them). Returns the end
 * of the call's text, AT_NONE, AT_MORE or AT_NOMEM. */
static long hermes_call_at(const char *s, size_t n, size_t i, int final, const tc_opts *o, tc_result *r, const void *arg) {
    (void)arg;
    const char *open = HERMES_TAGS.open, *close = HERMES_TAGS.close;
    int maybe = 0;
    if (starts(s, n, i, open, &maybe)) return tagged_call_at(s, n, i, final, o, r, &HERMES_TAGS);
    if (starts(s, n, i, "```", &maybe)) {
        size_t k = i + 3;
        if (starts(s, n, k, "json", &maybe)) k += 4;
        else if (starts(s, n, k, "xml", &maybe)) k += 3;
        if (k >= n) return final ? AT_NONE : AT_MORE;
        if (s[k] != '\n' && s[k] != ' ') return maybe && !final ? AT_MORE : AT_NONE;
        k = skip_ws(s, n, k);
        int tagged = 0;
        if (starts(s, n, k, open, &maybe)) { tagged = 1; k = skip_ws(s, n, k + strlen(open)); }
        else if (maybe && !final) return AT_MORE;
        if (k >= n) return final ? AT_NONE : AT_MORE;
        if (s[k] != '{') return AT_NONE;
        int calls_before = r->n_calls;
        long e = object_call_at(s, n, k, final, o, 1, 1, r);
        if (e <= 0) return e;
        size_t q = skip_ws(s, n, (size_t)e);
        if (tagged) {
            if (starts(s, n, q, close, &maybe)) q = skip_ws(s, n, q + strlen(close));
            else if (!final && (maybe || q >= n)) goto more;
        }
        if (starts(s, n, q, "```", &maybe)) return (long)(q + 3);
        if (!final && (maybe || q >= n)) goto more;
        return final && q >= n ? (long)q : AT_NONE; /* an unclosed fence at the end still holds the call */
    more:
        drop_calls(r, calls_before); /* reported again when the fence closes */
        return AT_MORE;
    }
    if (s[i] == '{') return object_call_at(s, n, i, final, o, 1, 1, r);
    return !final && maybe ? AT_MORE : AT_NONE;
}

/* Calls in the hermes forms among text (hermes, generic): any '<', '`' or '{' may start one. */
static int parse_hermes(const char *s, size_t n, int final, const tc_opts *o, buf *content, tc_result *r) {
    static const char *const marks[] = { "<", "`", "{", NULL };
    return scan_markers(s, n, final, o, marks, hermes_call_at, NULL, content, r);
}

static int parse_seed(const char *s, size_t n, int final, const tc_opts *o, buf *content, tc_result *r) {
    static const char *const marks[] = { "<seed:tool_call>", NULL };
    return scan_markers(s, n, final, o, marks, tagged_call_at, &SEED_TAGS, content, r);
}

/* ---------------------------------------------------------------- JSON lists after a marker */

/* OPEN [```json] [{NAME_KEY: N, "arguments"|"parameters": {...}}, ...] [```] [CLOSE] */
typedef struct list_fmt {
    const char *open;       /* the marker */
    int fence;              /* a ```json fence may wrap the list (command-r) */
    const char *close;      /* may follow the list, or NULL */
    const char *name_key;   /* "name" or "tool_name" */
    const char *skip_name;  /* a pseudo-tool whose calls are none (command-r's directly-answer), or NULL */
} list_fmt;

static const list_fmt MISTRAL_LIST = { "[TOOL_CALLS]", 0, NULL, "name", NULL };
static const list_fmt GRANITE_LIST = { "<|tool_call|>", 0, NULL, "name", NULL };
static const list_fmt COMMAND_R7B_LIST = { "<|START_ACTION|>", 0, "<|END_ACTION|>", "tool_name", NULL };
static const list_fmt COMMAND_R_LIST = { "Action:", 1, NULL, "tool_name", "directly-answer" };
static const list_fmt NEMOTRON_V2_LIST = { "<TOOLCALL>", 0, "</TOOLCALL>", "name", NULL };
static const list_fmt APRIEL_LIST = { "<tool_calls>", 0, "</tool_calls>", "name", NULL };

/* The list from s[j] (just past the open marker). */
static long list_at(const char *s, size_t n, size_t j, int final, const tc_opts *o, tc_result *r, const list_fmt *L) {
    int maybe = 0;
    j = skip_ws(s, n, j);
    int fenced = 0;
    if (L->fence) {
        if (starts(s, n, j, "```", &maybe)) {
            fenced = 1;
            j += 3;
            if (starts(s, n, j, "json", &maybe)) j += 4;
            else if (maybe && !final) return AT_MORE;
            j = skip_ws(s, n, j);
        } else if (maybe && !final) {
            return AT_MORE;
        }
    }
    if (j >= n) return final ? AT_NONE : AT_MORE;
    if (s[j] != '[') return AT_NONE;
    size_t end = value_end(s, n, j);
    if (!end && !final) return AT_MORE;
    /* a list the output ends inside (max_tokens cut it): its complete calls */
    size_t lim = end ? end - 1 : n; /* the items lie in s[j+1..lim) */
    int before = r->n_calls;
    for (size_t q = j + 1;;) {
        while (q < lim && (is_ws(s[q]) || s[q] == ',')) q++;
        if (q >= lim) break;
        size_t e = s[q] == '{' ? value_end(s, lim, q) : 0;
        if (!e && !end && s[q] == '{') break; /* the cut item */
        tc_call c;
        int rc = e ? call_from_object(s, q, e, o, 0, L->name_key, &c) : 0;
        if (rc < 0) return AT_NOMEM;
        if (rc == 0) { drop_calls(r, before); return AT_NONE; } /* not a list of calls: text */
        if (L->skip_name && !strcmp(c.name, L->skip_name)) {
            free(c.name); free(c.arguments); free(c.id);
        } else if (add_call(r, &c)) {
            free(c.name); free(c.arguments); free(c.id);
            return AT_NOMEM;
        }
        q = e;
    }
    if (!end) return r->n_calls > before ? (long)n : AT_NONE;
    /* what may close it: the fence, the close marker (a cut one at the end is taken too:
     * if more text shows it was not one, that text follows the calls) */
    size_t q = skip_ws(s, n, end);
    if (fenced) {
        if (starts(s, n, q, "```", NULL)) end = q = skip_ws(s, n, q + 3);
        else if (!final && cut_inside(s, n, q, "```")) return (long)n;
    }
    if (L->close) {
        if (starts(s, n, q, L->close, NULL)) end = q + strlen(L->close);
        else if (!final && cut_inside(s, n, q, L->close)) return (long)n;
    }
    return (long)end;
}

static long list_call_at(const char *s, size_t n, size_t i, int final, const tc_opts *o, tc_result *r, const void *arg) {
    const list_fmt *L = arg;
    return list_at(s, n, i + strlen(L->open), final, o, r, L);
}

static int parse_list(const char *s, size_t n, int final, const tc_opts *o, buf *content, tc_result *r, const list_fmt *L) {
    const char *marks[] = { L->open, NULL };
    return scan_markers(s, n, final, o, marks, list_call_at, L, content, r);
}

/* The arguments object of a bare-named call from s[i] (after whitespace): 1 with its
 * span, AT_NONE when none stands there, AT_MORE when more text may make one. */
static long args_object_at(const char *s, size_t n, size_t i, int final, span *args) {
    size_t a = skip_ws(s, n, i);
    if (a >= n) return final ? AT_NONE : AT_MORE;
    if (s[a] != '{') return AT_NONE;
    size_t e = value_end(s, n, a);
    if (!e) return final ? AT_NONE : AT_MORE;
    if (!is_json_object(s, a, e)) return AT_NONE;
    *args = (span){ a, e };
    return 1;
}

/* A call of the tool "python" with the code s[a..e) (trimmed) as {"code": ...} (Functionary). */
static int add_python_call(tc_result *r, const char *s, size_t a, size_t e) {
    a = skip_ws(s, e, a);
    while (e > a && is_ws(s[e - 1])) e--;
    buf args = { 0 };
    put(&args, "{\"code\": ", 9);
    put_json_string(&args, s + a, e - a);
    put(&args, "}", 1);
    tc_call c = { dup_n("python", 6), args.p, NULL };
    if (args.oom || !c.name || !c.arguments || add_call(r, &c)) { free(c.name); free(args.p); return -1; }
    return 0;
}

/* [TOOL_CALLS][{...}, ...] (mistral, and mistral-args too) and [TOOL_CALLS]name[CALL_ID]id[ARGS]{...}
 * (mistral-args) */
static long mistral_call_at(const char *s, size_t n, size_t k, int final, const tc_opts *o, tc_result *r, const void *arg) {
    (void)arg;
    size_t j = skip_ws(s, n, k + strlen(MISTRAL_LIST.open));
    if (j >= n) return final ? AT_NONE : AT_MORE; /* the marker alone, so far */
    if (s[j] == '[') return list_at(s, n, j, final, o, r, &MISTRAL_LIST);
    if (o->format != TC_FORMAT_MISTRAL_ARGS) return AT_NONE;
    size_t q = j; /* a name of [A-Za-z0-9_.-] */
    while (q < n && name_char(s[q])) q++;
    if (q >= n) return final ? AT_NONE : AT_MORE; /* the name, so far */
    size_t name_end = q;
    const char *id = NULL;
    size_t id_len = 0;
    int maybe = 0;
    if (starts(s, n, q, "[CALL_ID]", &maybe)) {
        size_t a = q + 9;
        q = a;
        while (q < n && s[q] != '[') q++;
        if (q >= n) return final ? AT_NONE : AT_MORE;
        id = s + a;
        id_len = q - a;
    } else if (maybe) {
        return final ? AT_NONE : AT_MORE;
    }
    maybe = 0;
    if (!starts(s, n, q, "[ARGS]", &maybe) || name_end == j) return maybe && !final && name_end > j ? AT_MORE : AT_NONE;
    span args;
    long got = args_object_at(s, n, q + 6, final, &args);
    if (got != 1) return got;
    if (add_call_spans(r, s, (span){ j, name_end }, args, id, id_len)) return AT_NOMEM;
    return (long)args.b;
}

static int parse_mistral(const char *s, size_t n, int final, const tc_opts *o, buf *content, tc_result *r) {
    static const char *const marks[] = { "[TOOL_CALLS]", NULL };
    return scan_markers(s, n, final, o, marks, mistral_call_at, NULL, content, r);
}

/* ---------------------------------------------------------------- sections of calls (deepseek, kimi-k2) */

/* [CALLS_BEGIN] (CALL_BEGIN body CALL_END)* [CALLS_END], the body read by the format's
 * function into the call's name, arguments and id (id.b == id.a: none); 0 when the body
 * holds no call. */
typedef struct section_fmt {
    const char *calls_begin, *calls_end, *call_begin, *call_end;
    int (*body)(const char *s, size_t a, size_t e, span *name, span *args, span *id);
} section_fmt;

/* DeepSeek-R1: TYPE<sep>NAME\n```json\n{...}\n```; V3.1: NAME<sep>{...} */
static int deepseek_body(const char *s, size_t a, size_t e, span *name, span *args, span *id) {
    const char *sep = find(s, e, a, DS_SEP, strlen(DS_SEP));
    if (!sep) return 0;
    size_t sa = (size_t)(sep - s) + strlen(DS_SEP);
    const char *fence = find(s, e, sa, "```json", 7);
    if (fence) {
        *name = (span){ sa, (size_t)(fence - s) };
        args->a = skip_ws(s, e, name->b + 7);
    } else {
        *name = (span){ a, (size_t)(sep - s) };
        args->a = skip_ws(s, e, sa);
    }
    args->b = args->a < e && s[args->a] == '{' ? value_end(s, e, args->a) : 0;
    *id = (span){ 0, 0 };
    return args->b != 0;
}

/* Kimi K2: functions.NAME:INDEX<|tool_call_argument_begin|>{...}, the id functions.NAME:INDEX */
static int kimi_body(const char *s, size_t a, size_t e, span *name, span *args, span *id) {
    const char *ab = find(s, e, a, KIMI_ARGS, strlen(KIMI_ARGS));
    if (!ab) return 0;
    size_t ie = (size_t)(ab - s);
    while (a < ie && is_ws(s[a])) a++;
    while (ie > a && is_ws(s[ie - 1])) ie--;
    *id = (span){ a, ie };
    size_t na = a, ne = ie;
    if (ne - na > 10 && !memcmp(s + na, "functions.", 10)) na += 10;
    size_t colon = ne;
    while (colon > na && s[colon - 1] >= '0' && s[colon - 1] <= '9') colon--;
    if (colon < ne && colon > na && s[colon - 1] == ':') ne = colon - 1;
    else *id = (span){ 0, 0 };
    *name = (span){ na, ne };
    args->a = skip_ws(s, e, (size_t)(ab - s) + strlen(KIMI_ARGS));
    args->b = args->a < e && s[args->a] == '{' ? value_end(s, e, args->a) : 0;
    return args->b != 0;
}

static const section_fmt DEEPSEEK_SECTION = { DS_CALLS_BEGIN, DS_CALLS_END, DS_CALL_BEGIN, DS_CALL_END, deepseek_body };
static const section_fmt KIMI_SECTION = { KIMI_CALLS_BEGIN, KIMI_CALLS_END, KIMI_CALL_BEGIN, KIMI_CALL_END, kimi_body };

static long section_call_at(const char *s, size_t n, size_t k, int final, const tc_opts *o, tc_result *r, const void *arg) {
    (void)o;
    const section_fmt *F = arg;
    size_t q = k, lb = strlen(F->call_begin), le = strlen(F->call_end);
    if (starts(s, n, k, F->calls_begin, NULL)) q += strlen(F->calls_begin);
    int before = r->n_calls;
    for (;;) { /* the calls of the section */
        q = skip_ws(s, n, q);
        int maybe = 0;
        if (q >= n) { /* the end, so far: more calls may come */
            if (r->n_calls == before && !final) return AT_MORE;
            break;
        }
        if (starts(s, n, q, F->calls_end, &maybe)) { q += strlen(F->calls_end); break; }
        if (!starts(s, n, q, F->call_begin, &maybe)) {
            if (maybe && !final) { /* a marker cut at the end: waits, or is taken after calls (see list_at) */
                if (r->n_calls == before) return AT_MORE;
                q = n;
            }
            break; /* else the section ends here */
        }
        size_t a = q + lb;
        const char *ce = find(s, n, a, F->call_end, le);
        if (!ce && !final) { drop_calls(r, before); return AT_MORE; }
        size_t e = ce ? (size_t)(ce - s) : n;
        span name, args, id;
        if (!F->body(s, a, e, &name, &args, &id)) break;
        while (name.a < name.b && is_ws(s[name.a])) name.a++;
        while (name.b > name.a && is_ws(s[name.b - 1])) name.b--;
        if (name.b == name.a || memchr(s + name.a, 0, name.b - name.a) || !is_json_object(s, args.a, args.b)) break;
        /* an id the model wrote twice in one answer is no id (the server makes them) */
        for (int i = 0; i < r->n_calls && id.b > id.a; i++)
            if (r->calls[i].id && strlen(r->calls[i].id) == id.b - id.a && !memcmp(r->calls[i].id, s + id.a, id.b - id.a))
                id.b = id.a;
        if (add_call_spans(r, s, name, args, id.b > id.a ? s + id.a : NULL, id.b - id.a)) return AT_NOMEM;
        q = ce ? e + le : n;
    }
    if (r->n_calls == before) return AT_NONE; /* not calls: text */
    return (long)q;
}

static int parse_section(const char *s, size_t n, int final, const tc_opts *o, buf *content, tc_result *r,
                         const section_fmt *F) {
    const char *marks[] = { F->calls_begin, F->call_begin, NULL };
    return scan_markers(s, n, final, o, marks, section_call_at, F, content, r);
}

/* ---------------------------------------------------------------- functionary v3.1 */

/* <function=NAME>{...}</function>, or <|python_tag|>CODE (to the end) for a tool named python */
static long functionary_call_at(const char *s, size_t n, size_t k, int final, const tc_opts *o, tc_result *r,
                                const void *arg) {
    (void)arg;
    static const char python[] = "<|python_tag|>";
    if (starts(s, n, k, python, NULL)) {
        if (!known_tool(o, "python")) return AT_NONE;
        if (!final) return AT_MORE;
        return add_python_call(r, s, k + sizeof python - 1, n) ? AT_NOMEM : (long)n;
    }
    size_t a = k + 10, q = a;
    while (q < n && name_char(s[q])) q++;
    if (q >= n) return final ? AT_NONE : AT_MORE;
    if (s[q] != '>' || q == a) return AT_NONE;
    span args;
    long got = args_object_at(s, n, q + 1, final, &args);
    if (got != 1) return got;
    if (add_call_spans(r, s, (span){ a, q }, args, NULL, 0)) return AT_NOMEM;
    size_t je = args.b, e = skip_ws(s, n, je);
    if (starts(s, n, e, "</function>", NULL)) return (long)(e + 11);
    if (!final && cut_inside(s, n, e, "</function>")) return (long)n;
    return (long)je;
}

static int parse_functionary_v31(const char *s, size_t n, int final, const tc_opts *o, buf *content, tc_result *r) {
    static const char *const marks[] = { "<function=", "<|python_tag|>", NULL };
    return scan_markers(s, n, final, o, marks, functionary_call_at, NULL, content, r);
}

/* ---------------------------------------------------------------- functionary v3.2 */

/* The answer as messages RECIPIENT\nBODY separated by ">>>" (the prompt wrote the first):
 * "all" is text, another recipient a call of that name with BODY its JSON arguments
 * (python's body its code). A message of no such form is text. */
static int parse_functionary_v32(const char *s, size_t n, int final, const tc_opts *o, buf *content, tc_result *r) {
    static const char sep[] = ">>>";
    size_t i = 0;
    int maybe = 0;
    if (starts(s, n, 0, sep, &maybe)) i = 3;
    else if (maybe && n && !final) return 0;
    for (;;) {
        size_t q = i;
        while (q < n && name_char(s[q])) q++;
        if (q >= n && !final) return 0; /* the recipient, so far */
        const char *nx = find(s, n, q, sep, 3);
        size_t body_e = nx ? (size_t)(nx - s) : n;
        if (q >= n || s[q] != '\n' || q == i) { /* no recipient line: text to the next ">>>" */
            if (nx) put(content, s + i, body_e - i);
            else put_text(content, s + i, n - i, final, sep);
        } else if (q - i == 3 && !memcmp(s + i, "all", 3)) {
            if (nx) put(content, s + q + 1, body_e - q - 1);
            else put_text(content, s + q + 1, n - q - 1, final, sep);
        } else {
            size_t ja = skip_ws(s, body_e, q + 1);
            size_t je = ja < body_e && s[ja] == '{' ? value_end(s, body_e, ja) : 0;
            if (je && is_json_object(s, ja, je)) {
                if (add_call_spans(r, s, (span){ i, q }, (span){ ja, je }, NULL, 0)) return -1;
                if (nx) put(content, s + je, body_e - je);
                else put_text(content, s + je, n - je, final, sep);
            } else if (!nx && !final && (ja >= body_e || (s[ja] == '{' && !je) || (q - i == 6 && !memcmp(s + i, "python", 6)))) {
                return 0; /* the arguments, so far */
            } else if (q - i == 6 && !memcmp(s + i, "python", 6) && known_tool(o, "python") && ja < body_e) {
                if (add_python_call(r, s, ja, body_e)) return -1;
            } else { /* not a call: the message is text */
                if (nx) put(content, s + i, body_e - i);
                else put_text(content, s + i, n - i, final, sep);
            }
        }
        if (!nx) return 0;
        i = body_e + 3;
    }
}

/* ---------------------------------------------------------------- gpt-oss (harmony) */

/* Messages [<|start|>ROLE] HEADER <|message|> BODY END, where the HEADER holds
 * <|channel|>CHANNEL and maybe to=RECIPIENT (before or after the channel) and a content
 * type, and END is <|end|> or the next <|start|> (<|call|> and <|return|> end the
 * generation: they are not in the text). analysis is reasoning; a message to
 * functions.NAME a call of its JSON body; the rest (final, commentary to nobody) content.
 * Output that does not start as a message is all content. */
static int parse_harmony(const char *s, size_t n, int final, const tc_opts *o, buf *reasoning, buf *content,
                         tc_result *r) {
    static const char *const ends[] = { "<|end|>", "<|start|>", "<|call|>", "<|return|>", NULL };
    size_t i = 0;
    for (;;) {
        i = skip_ws(s, n, i);
        if (i >= n) return 0;
        size_t h = i;
        int maybe = 0;
        if (starts(s, n, h, "<|start|>", &maybe)) {
            h += 9;
            while (h < n && s[h] != '<' && s[h] != ' ') h++; /* the role */
        } else if (maybe && !final) {
            return 0;
        }
        maybe = 0;
        if (!starts(s, n, h, "<|channel|>", &maybe) && !starts(s, n, h, " to=", &maybe) && !starts(s, n, h, "to=", &maybe)) {
            if (maybe && !final) return 0;
            put(content, s + i, n - i); /* no message: text */
            return 0;
        }
        /* a header is short: <|message|> within 512 bytes, else it is no message (the
         * same answer for every prefix long enough to tell) */
        size_t lim = n - h > 512 + 11 ? h + 512 + 11 : n;
        const char *msg = find_s(s, lim, h, "<|message|>");
        if (!msg) {
            if (!final && lim == n) return 0; /* the header, so far */
            put(content, s + i, n - i);
            return 0;
        }
        /* the header's channel and recipient */
        size_t he = (size_t)(msg - s);
        char channel[16] = "";
        const char *ch = find_s(s, he, h, "<|channel|>");
        if (ch) {
            size_t a = (size_t)(ch - s) + 11, k = 0;
            while (a + k < he && k + 1 < sizeof channel && s[a + k] >= 'a' && s[a + k] <= 'z') { channel[k] = s[a + k]; k++; }
            channel[k] = 0;
        }
        span to = { 0, 0 };
        const char *t = find_s(s, he, h, "to=");
        if (t) {
            to.a = to.b = (size_t)(t - s) + 3;
            while (to.b < he && s[to.b] != ' ' && s[to.b] != '<') to.b++;
        }
        /* the body, to the first end */
        size_t ba = he + 11, be = n, next = n;
        int ended = 0;
        for (int k = 0; ends[k]; k++) {
            const char *f = find_s(s, n, ba, ends[k]);
            if (f && (size_t)(f - s) < be) {
                be = (size_t)(f - s);
                next = k == 1 ? be : be + strlen(ends[k]); /* <|start|> begins the next message */
                ended = 1;
            }
        }
        size_t hold = 0; /* streaming: the cut start of an end marker waits */
        if (!ended && !final)
            for (int k = 0; ends[k]; k++) {
                size_t p = partial_marker(s + ba, n - ba, ends[k]);
                if (p > hold) hold = p;
            }
        int is_call = o->format != TC_FORMAT_NONE && to.b - to.a > 10 && !memcmp(s + to.a, "functions.", 10);
        for (size_t q = to.a + 10; is_call && q < to.b; q++) is_call = name_char(s[q]);
        if (!strcmp(channel, "analysis") && !is_call) {
            if (reasoning->n) put(reasoning, "\n", 1);
            put(reasoning, s + ba, be - ba - hold);
        } else if (is_call) {
            size_t ja = skip_ws(s, be, ba);
            size_t je = ja < be && s[ja] == '{' ? value_end(s, be, ja) : 0;
            if (je && is_json_object(s, ja, je)) {
                if (add_call_spans(r, s, (span){ to.a + 10, to.b }, (span){ ja, je }, NULL, 0)) return -1;
            } else if (!ended && !final) {
                return 0; /* the arguments, so far */
            } else {
                put(content, s + ba, be - ba); /* no JSON object: the body is text */
            }
        } else {
            put(content, s + ba, be - ba - hold);
        }
        if (!ended) return 0;
        i = next;
    }
}

/* ---------------------------------------------------------------- llama3 */

/* The whole answer one JSON object naming a tool (llama3); *held when it may become one
 * (streaming), 2 when it was. */
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
    int got = 0;
    for (;;) {
        size_t e = value_end(s, n, i);
        if (!e) {
            if (!final) { *held = 1; return 0; }
            break;
        }
        tc_call c;
        int rc = call_from_object(s, i, e, o, 1, NULL, &c);
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
    }
    return 0;
}

/* ---------------------------------------------------------------- the answer */

/* s[0..n) without the answer's wrapper OPEN ... CLOSE (Command R7B's <|START_RESPONSE|>,
 * Granite's <response>, Apriel's [END FINAL RESPONSE] with no OPEN): OPEN at the start
 * taken off, every CLOSE taken out; while streaming what may still be either waits. */
static void unwrap(const char *s, size_t n, int final, const char *open, const char *close, buf *out) {
    size_t i = skip_ws(s, n, 0);
    int maybe = 0;
    if (open && starts(s, n, i, open, &maybe)) i += strlen(open);
    else if (maybe && !final) return;
    else i = 0;
    size_t lc = strlen(close);
    for (;;) {
        const char *f = find(s, n, i, close, lc);
        if (!f) break;
        put(out, s + i, (size_t)(f - s) - i);
        i = (size_t)(f - s) + lc;
    }
    if (i < n) put_text(out, s + i, n - i, final, close);
}

/* ---------------------------------------------------------------- invoke blocks (minimax-m2, deepseek-dsml) */

/* OPEN (<P invoke name="N">(<P parameter name="K"[ string="true|false"]>V</P parameter>)*</P invoke>)* CLOSE,
 * P the markup prefix ("" or DSML). A value is a JSON string where string="true", JSON
 * where string="false", else as put_json_value makes it. */
typedef struct invoke_fmt { const char *open, *close, *invoke, *invoke_end, *param, *param_end; } invoke_fmt;

static const invoke_fmt MINIMAX_INVOKE = { "<minimax:tool_call>", "</minimax:tool_call>", "<invoke name=\"",
                                           "</invoke>", "<parameter name=\"", "</parameter>" };
static const invoke_fmt DSML_INVOKE = { "<" DSML "function_calls>", "</" DSML "function_calls>",
                                        "<" DSML "invoke name=\"", "</" DSML "invoke>", "<" DSML "parameter name=\"",
                                        "</" DSML "parameter>" };

static int lit_at(const char *s, size_t e, size_t i, const char *w) {
    size_t l = strlen(w);
    return e - i >= l && !memcmp(s + i, w, l);
}

/* One invoke at s[i..e); *end past it. 1 with *c, 0 when malformed, -1 on memory. */
static int invoke_call(const char *s, size_t i, size_t e, const invoke_fmt *F, tc_call *c, size_t *end) {
    memset(c, 0, sizeof *c);
    if (!lit_at(s, e, i, F->invoke)) return 0;
    size_t na = i + strlen(F->invoke), ne = na;
    while (ne < e && s[ne] != '"') ne++;
    if (ne >= e || ne == na || ne + 1 >= e || s[ne + 1] != '>') return 0;
    for (size_t q = na; q < ne; q++)
        if (!name_char(s[q])) return 0;
    buf args = { 0 };
    int n_args = 0;
    put(&args, "{", 1);
    i = ne + 2;
    for (;;) {
        i = skip_ws(s, e, i);
        if (lit_at(s, e, i, F->invoke_end)) { i += strlen(F->invoke_end); break; }
        if (!lit_at(s, e, i, F->param)) goto bad;
        size_t ka = i + strlen(F->param), ke = ka;
        while (ke < e && s[ke] != '"') ke++;
        if (ke >= e || ke == ka) goto bad;
        size_t q = ke + 1;
        int as = -1; /* string="..." absent */
        if (lit_at(s, e, q, " string=\"true\"")) { as = 1; q += 14; }
        else if (lit_at(s, e, q, " string=\"false\"")) { as = 0; q += 15; }
        if (q >= e || s[q] != '>') goto bad;
        size_t va = q + 1;
        const char *ve = memmem(s + va, e - va, F->param_end, strlen(F->param_end));
        if (!ve) goto bad;
        size_t vend = (size_t)(ve - s);
        if (n_args++) put(&args, ", ", 2);
        put_json_string(&args, s + ka, ke - ka);
        put(&args, ": ", 2);
        if (as == 1) put_json_string(&args, s + va, vend - va);
        else put_json_value(&args, s + va, vend - va);
        i = vend + strlen(F->param_end);
    }
    put(&args, "}", 1);
    if (args.oom) { free(args.p); return -1; }
    c->name = dup_n(s + na, ne - na);
    c->arguments = args.p;
    if (!c->name) { free(c->arguments); c->arguments = NULL; return -1; }
    *end = i;
    return 1;
bad:
    free(args.p);
    return 0;
}

/* The block at s[i] (i at OPEN); all its invokes or none. An unclosed block at the end
 * of the output still holds its calls. */
static long invoke_block_at(const char *s, size_t n, size_t i, int final, const tc_opts *o, tc_result *r,
                            const void *arg) {
    const invoke_fmt *F = arg;
    size_t lc = strlen(F->close);
    const char *g = find(s, n, i + strlen(F->open), F->close, lc);
    if (!g && !final) return AT_MORE;
    size_t e = g ? (size_t)(g - s) : n, k = i + strlen(F->open);
    int before = r->n_calls;
    k = skip_ws(s, e, k);
    if (k < e && s[k] == '{') { /* the forced call's form: one JSON call object */
        size_t je = value_end(s, e, k);
        if (!je || skip_ws(s, e, je) != e) return AT_NONE;
        tc_call c;
        int rc = call_from_object(s, k, je, o, 0, NULL, &c);
        if (rc < 0) return AT_NOMEM;
        if (rc == 0) return AT_NONE;
        if (add_call(r, &c)) return AT_NOMEM;
        return (long)(g ? e + lc : n);
    }
    for (;;) {
        k = skip_ws(s, e, k);
        if (k >= e) break;
        tc_call c;
        int rc = invoke_call(s, k, e, F, &c, &k);
        if (rc < 0) return AT_NOMEM;
        if (rc == 0) { drop_calls(r, before); return AT_NONE; }
        if (add_call(r, &c)) return AT_NOMEM;
    }
    if (r->n_calls == before) return AT_NONE;
    return (long)(g ? e + lc : n);
}

static int parse_invoke(const char *s, size_t n, int final, const tc_opts *o, buf *content, tc_result *r,
                        const invoke_fmt *F) {
    const char *marks[] = { F->open, NULL };
    return scan_markers(s, n, final, o, marks, invoke_block_at, F, content, r);
}

int tc_parse(const char *text, size_t n, int final, const tc_opts *o, tc_result *out) {
    memset(out, 0, sizeof *out);
    if (!text) {
        text = "";
        n = 0;
    }
    buf reasoning = { 0 }, content = { 0 }, answer = { 0 };
    size_t pos = 0;
    int rc = 0;
    tc_think think = o->reasoning > TC_THINK_NONE && o->reasoning < TC_THINK_COUNT ? o->reasoning : TC_THINK_NONE;
    const think_tags *tt = &THINK[think];
    if (o->format == TC_FORMAT_GPT_OSS || think == TC_THINK_HARMONY) {
        rc = parse_harmony(text, n, final, o, &reasoning, &content, out);
        goto done;
    }
    if (tt->open) { /* the reasoning block at the start */
        const char *open = tt->open, *close = tt->close;
        size_t lo = strlen(open), lc = strlen(close);
        size_t p = skip_ws(text, n, 0);
        int in_think = o->think_open;
        size_t start = 0;
        if (!in_think && n - p >= lo && !memcmp(text + p, open, lo)) { in_think = 1; start = p + lo; }
        else if (!in_think && !final && n - p < lo && !memcmp(text + p, open, n - p)) pos = n; /* "<thi": wait */
        if (in_think) {
            const char *e = find(text, n, start, close, lc);
            if (e) {
                put(&reasoning, text + start, (size_t)(e - text) - start);
                pos = (size_t)(e - text) + lc;
            } else {
                put_text(&reasoning, text + start, n - start, final, close);
                pos = n;
            }
        }
    }
    const char *s = text + pos;
    size_t m = n - pos;
    if (tt->resp_close) {
        unwrap(s, m, final, tt->resp_open, tt->resp_close, &answer);
        s = answer.p ? answer.p : "";
        m = answer.n;
    }
    int held = 0;
    switch (o->format) {
    case TC_FORMAT_NONE: case TC_FORMAT_COUNT: put(&content, s, m); break;
    case TC_FORMAT_HERMES: case TC_FORMAT_GENERIC: rc = parse_hermes(s, m, final, o, &content, out); break;
    case TC_FORMAT_MISTRAL: case TC_FORMAT_MISTRAL_ARGS: rc = parse_mistral(s, m, final, o, &content, out); break;
    case TC_FORMAT_DEEPSEEK: case TC_FORMAT_DEEPSEEK_V31:
        rc = parse_section(s, m, final, o, &content, out, &DEEPSEEK_SECTION);
        break;
    case TC_FORMAT_KIMI_K2: rc = parse_section(s, m, final, o, &content, out, &KIMI_SECTION); break;
    case TC_FORMAT_LLAMA3:
        rc = parse_bare(s, m, final, o, "<|python_tag|>", &content, out, &held);
        if (!rc && !held) put(&content, s, m);
        break;
    case TC_FORMAT_FUNCTIONARY_V31: rc = parse_functionary_v31(s, m, final, o, &content, out); break;
    case TC_FORMAT_FUNCTIONARY_V32: rc = parse_functionary_v32(s, m, final, o, &content, out); break;
    case TC_FORMAT_COMMAND_R: rc = parse_list(s, m, final, o, &content, out, &COMMAND_R_LIST); break;
    case TC_FORMAT_COMMAND_R7B: rc = parse_list(s, m, final, o, &content, out, &COMMAND_R7B_LIST); break;
    case TC_FORMAT_GRANITE: rc = parse_list(s, m, final, o, &content, out, &GRANITE_LIST); break;
    case TC_FORMAT_SEED_OSS: rc = parse_seed(s, m, final, o, &content, out); break;
    case TC_FORMAT_NEMOTRON_V2: rc = parse_list(s, m, final, o, &content, out, &NEMOTRON_V2_LIST); break;
    case TC_FORMAT_APRIEL: rc = parse_list(s, m, final, o, &content, out, &APRIEL_LIST); break;
    case TC_FORMAT_MINIMAX_M2: rc = parse_invoke(s, m, final, o, &content, out, &MINIMAX_INVOKE); break;
    case TC_FORMAT_DEEPSEEK_DSML: rc = parse_invoke(s, m, final, o, &content, out, &DSML_INVOKE); break;
    case TC_FORMAT_GPT_OSS: break; /* above */
    }
done:
    free(answer.p);
    if (rc || reasoning.oom || content.oom || answer.oom) goto fail;
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
