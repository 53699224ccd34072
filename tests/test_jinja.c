/* test_jinja.c - the Jinja engine (src/jinja.c) without Python: renders with known
 * outputs (the same as jinja2's; tests/jinja_oracle_test.py checks thousands more against
 * jinja2 itself), error messages with positions, the bounds on hostile templates
 * (endless loops, endless recursion, gigabytes of output, memory, nesting), the JSON
 * reader and writer, and the value API. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"
#include "test.h"

/* Renders src with the JSON context ctx (may be NULL); returns the output (malloc'd) or
 * NULL with the error in err. */
static char *render(const char *src, const char *ctx, const jinja_limits *lim, jinja_error *err) {
    jinja_tmpl *t = jinja_parse(src, strlen(src), err);
    if (!t) return NULL;
    jinja_env *e = jinja_env_new();
    jinja_env_set_time(e, 1765000000);
    char *out = NULL;
    size_t len = 0;
    if (ctx) {
        jinja_value *v = jinja_json_parse(e, ctx, strlen(ctx), err);
        if (!v || jinja_env_set_all(e, v)) {
            jinja_env_free(e);
            jinja_tmpl_free(t);
            return NULL;
        }
    }
    int rc = jinja_render(t, e, lim, &out, &len, err);
    jinja_env_free(e);
    jinja_tmpl_free(t);
    if (rc) return NULL;
    if (strlen(out) != len) { /* the text of these tests holds no NUL */
        free(out);
        snprintf(err->msg, sizeof err->msg, "length %zu but strlen %zu", len, strlen(out));
        return NULL;
    }
    return out;
}

static void expect(const char *src, const char *ctx, const char *want) {
    jinja_error err;
    char *got = render(src, ctx, NULL, &err);
    char msg[400];
    CHECK(got && !strcmp(got, want), "%s\n  want: [%s]\n  got:  [%s]", src, want, got ? got : jinja_error_str(&err, msg, sizeof msg));
    free(got);
}

/* The render fails with a message containing `part` (and, where line > 0, at that line). */
static void expect_fail(const char *src, const char *ctx, const jinja_limits *lim, const char *part, int line) {
    jinja_error err;
    char *got = render(src, ctx, lim, &err);
    char msg[400];
    jinja_error_str(&err, msg, sizeof msg);
    CHECK(!got && strstr(err.msg, part) && (line == 0 || err.line == line), "%.120s\n  want an error with [%s] on line %d\n  got:  [%s]",
          src, part, line, got ? got : msg);
    free(got);
}

static void test_basics(void) {
    expect("Hello {{ name }}!", "{\"name\": \"wörld\"}", "Hello wörld!");
    expect("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 3 ** 2 }}", NULL, "7 3 -4 2 3.5 64");
    expect("{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1.0e-5 }} {{ 3.0 }} {{ -0.0 }}", NULL,
           "0.30000000000000004 1e+16 1000000000000000.0 1e-05 3.0 -0.0");
    expect("{{ [1, 'a', none, true, 2.5] }} {{ {'k': (1,)} }} {{ 'it\\'s' }} {{ ['it\\'s'] }}", NULL,
           "[1, 'a', None, True, 2.5] {'k': (1,)} it's [\"it's\"]");
    expect("{{ s[1:3] }}{{ s[-1] }}{{ s | length }}{{ s[::-1] }}", "{\"s\": \"héllo\"}", "élo5olléh");
    expect("{{ x.a }}|{{ x.missing }}|{{ x['b'][0] }}|{{ none.attr }}", "{\"x\": {\"a\": 1, \"b\": [2]}}", "1||2|");
    expect("{{ 'a' if false }}|{{ 'a' if 0 else 'b' }}|{{ x or 'd' }}|{{ 1 and 0 }}", NULL, "|b|d|0");
    expect("{{ '%s=%d' % ('n', 3) }} {{ '{}:{x}'.format(1, x=2) }} {{ 'a' ~ 1 ~ none }}", NULL, "n=3 1:2 a1None");
    expect("{{ 1 < 2 < 3 }} {{ 'b' in 'abc' }} {{ 2 not in [1] }} {{ 1 == 1.0 }} {{ [1] == (1,) }}", NULL,
           "True True True True False");
}

static void test_whitespace(void) {
    expect("a\n  {% if true %}\n  b\n  {% endif %}\nc", NULL, "a\n  b\nc");
    expect("x {%- if true -%} y {%- endif -%} z", NULL, "xyz");
    expect("  {%+ if true %}k{% endif %}", NULL, "  k");
    expect("  {{ 'v' }}\n", NULL, "  v");       /* variables are not lstripped; one trailing newline dropped */
    expect("a\r\nb\rc\n\n", NULL, "a\nb\nc\n"); /* newlines normalized */
    expect("{# c #}\n  {# d #}\nx{% raw %}{{ y }}{% endraw %}", NULL, "x{{ y }}");
    expect("{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}", NULL, "  1\n  2\n");
}

static void test_control(void) {
    expect("{% for x in xs %}{{ loop.index }}{{ x }}{{ ',' if not loop.last }}{% else %}none{% endfor %}",
           "{\"xs\": [\"a\", \"b\"]}", "1a,2b");
    expect("{% for x in [] %}{{ x }}{% else %}none{% endfor %}", NULL, "none");
    expect("{% for x in range(9) if x is odd %}{{ x }}/{{ loop.length }} {% endfor %}", NULL, "1/4 3/4 5/4 7/4 ");
    expect("{% for i in range(9) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}",
           NULL, "023");
    /* a set inside a loop is gone at the next iteration and after the loop */
    expect("{% set x = 0 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}", NULL, "0120");
    expect("{% set ns = namespace(x=0) %}{% for i in range(4) %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}", NULL, "6");
    expect("{% if true %}{% set y = 5 %}{% endif %}{{ y }}", NULL, "5");
    expect("{% macro m(a, b='B') %}{{ a }}{{ b }}{{ varargs }}{% endmacro %}{{ m(1) }} {{ m(1, b=2) }} {{ m(1, 2, 3) }}", NULL,
           "1B() 12() 12(3,)");
    expect("{% macro r(n) %}{% if n %}{{ n }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(4) }}", NULL, "4321");
    expect("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}", NULL, "<in>");
    expect("{% set b %}x{{ 1 }}{% endset %}{{ b }}|{% filter upper %}up{% endfilter %}|{% with a = 2 %}{{ a }}{% endwith %}",
           NULL, "x1|UP|2");
    expect("{% generation %}g{% endgeneration %}", NULL, "g");
    expect("{% for k, v in d | dictsort %}{{ k }}{{ v }}{% endfor %}", "{\"d\": {\"b\": 2, \"a\": 1}}", "a1b2");
}

static void test_filters(void) {
    expect("{{ x | tojson }}", "{\"x\": {\"b\": [1, 2.0, \"é\\n\"], \"a\": null}}", "{\"b\": [1, 2.0, \"é\\n\"], \"a\": null}");
    expect("{{ [1, {'a': 2}] | tojson(indent=2) }}", NULL, "[\n  1,\n  {\n    \"a\": 2\n  }\n]");
    expect("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}", NULL, "{\"a\": 2, \"b\": 1}");
    expect("{{ '  t  ' | trim }}|{{ 'hello world' | title }}|{{ 'ab' | upper }}|{{ 'AB' | lower }}|{{ 'x' | length }}", NULL,
           "t|Hello World|AB|ab|1");
    expect("{{ xs | selectattr('r', 'equalto', 'u') | map(attribute='c') | join(',') }}",
           "{\"xs\": [{\"r\": \"u\", \"c\": 1}, {\"r\": \"a\", \"c\": 2}, {\"r\": \"u\", \"c\": 3}]}", "1,3");
    expect("{{ xs | rejectattr('r', 'equalto', 'u') | list | length }}", "{\"xs\": [{\"r\": \"u\"}, {\"r\": \"a\"}]}", "1");
    expect("{{ u | default('d') }} {{ '' | default('d', true) }} {{ none | default('d') }}", NULL, "d d None");
    expect("{{ [3, 1, 2] | sort }} {{ ['b', 'A'] | sort }} {{ [1, 2, 2] | unique | list }} {{ 'ab' | list }} {{ [1, 2] | first }}{{ [1, 2] | last }}",
           NULL, "[1, 2, 3] ['A', 'b'] [1, 2] ['a', 'b'] 12");
    expect("{{ {'a': 1} | items | list }} {{ '5' | int + 1 }} {{ 'x' | int }} {{ 2.5 | round }} {{ 2.567 | round(2) }} {{ 'a b' | replace(' ', '_') }}",
           NULL, "[('a', 1)] 6 0 2.0 2.57 a_b");
    expect("{{ 'a\\nb' | indent(2) }}|{{ [1, 2] | string }}|{{ '<a>' | e }}|{{ 'x' | safe }}", NULL, "a\n  b|[1, 2]|&lt;a&gt;|x");
    expect("{{ 'x' | safe + '<' }}", NULL, "x&lt;"); /* Markup + str escapes the str */
}

static void test_tests(void) {
    expect("{{ x is defined }}{{ y is defined }}{{ none is none }}{{ 'a' is string }}{{ {} is mapping }}{{ 1 is number }}{{ 3 is odd }}{{ 4 is divisibleby 2 }}",
           "{\"x\": 1}", "TrueFalseTrueTrueTrueTrueTrueTrue");
    expect("{{ [] is iterable }}{{ 1 is iterable }}{{ u is sequence }}{{ true is boolean }}{{ 1 is integer }}{{ 1.0 is float }}", NULL,
           "TrueFalseTrueTrueTrueTrue");
}

static void test_globals(void) {
    expect("{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ dict(a=1) }} {{ namespace(a=1).a }}", NULL, "[0, 1, 2] [1, 3, 5] {'a': 1} 1");
    expect("{{ strftime_now('%Y') }}", NULL, "2025");
    expect_fail("{{ raise_exception('no system role') }}", NULL, NULL, "no system role", 1);
}

static void test_errors(void) {
    expect_fail("line one\n{{ x.y.z }}", NULL, NULL, "'x' is undefined", 2);
    expect_fail("{{ 1 + 'a' }}", NULL, NULL, "unsupported operand", 1);
    expect_fail("{{ [1].append(2) }}", NULL, NULL, "unsafe", 1);
    expect_fail("{{ x | nofilter }}", NULL, NULL, "no filter named 'nofilter'", 1);
    expect_fail("{% if x %}{{ x | nofilter }}{% endif %}ok", "{\"x\": 1}", NULL, "no filter named 'nofilter' found", 1);
    expect("{% if x %}{{ x | nofilter }}{% endif %}ok", NULL, "ok"); /* jinja2: only a runtime error inside if */
    expect_fail("{% for x in y %}", NULL, NULL, "unexpected end of template", 1);
    expect_fail("{% endfor %}", NULL, NULL, "unknown tag 'endfor'", 1);
    expect_fail("{% break %}", NULL, NULL, "outside loop", 1);
    expect_fail("\n\n   {{ 'unterminated }}", NULL, NULL, "unterminated string", 3);
    expect_fail("{% extends 'base' %}", NULL, NULL, "no loader", 1);
    expect_fail("{% include 'x' %}", NULL, NULL, "no loader", 1);
    expect_fail("{% block a required %}{% endblock %}", NULL, NULL, "Required block 'a' not found", 1);
    expect_fail("{{ 1 / 0 }}", NULL, NULL, "division by zero", 1);
    expect_fail("{{ 9223372036854775807 + 1 }}", NULL, NULL, "integer overflow", 1);
    expect_fail("{{ 99999999999999999999 }}", NULL, NULL, "too large", 1);
    expect_fail("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", NULL, NULL, "takes not more than 1", 1);
    jinja_error err;
    CHECK(!jinja_parse("\xff\xfe", 2, &err) && strstr(err.msg, "UTF-8"), "invalid UTF-8 template: %s", err.msg);
    CHECK(!jinja_parse(NULL, 0, &err) && err.msg[0], "NULL source");
}

/* Templates that would run forever, recurse without end or render gigabytes stop with
 * a clear error (and quickly: small limits). */
static void test_limits(void) {
    jinja_limits lim = { .max_output = 1 << 20, .max_memory = 32 << 20, .max_steps = 200000, .max_depth = 20 };
    expect_fail("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", NULL, &lim, "limit", 1);
    expect_fail("{% for i in range(100) %}{% for j in range(100) %}{% for k in range(100) %}{% endfor %}{% endfor %}{% endfor %}",
                NULL, &lim, "step limit", 1);
    expect_fail("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", NULL, &lim, "nested more than 20 deep", 1);
    expect_fail("{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}{{ f(1) }}", NULL, &lim, "nested more than", 1);
    expect_fail("{% for i in range(100000) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}", NULL, &lim,
                "over the limit of 1048576 bytes", 1);
    expect_fail("{{ 'x' * 100000000000 }}", NULL, &lim, "memory limit", 1);
    expect_fail("{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", NULL, &lim,
                "memory limit", 1);
    expect_fail("{{ [0] * 10000000000 }}", NULL, &lim, "step limit", 1);
    expect_fail("{{ range(10000000) }}", NULL, &lim, "Range too big", 1);
    /* the defaults stop them too */
    expect_fail("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", NULL, NULL, "deep", 1);
    /* nesting: the parser refuses what would take the stack */
    size_t n = 100000;
    char *deep = malloc(3 * n + 16);
    memcpy(deep, "{{ ", 3);
    for (size_t i = 0; i < n; i++) deep[3 + i] = '(';
    memcpy(deep + 3 + n, "1", 2);
    jinja_error err;
    CHECK(!jinja_parse(deep, strlen(deep), &err) && strstr(err.msg, "deep"), "100000 parentheses: %s", err.msg);
    size_t o = 0;
    for (size_t i = 0; i < 5000; i++) { memcpy(deep + o, "{% if 1 %}", 10); o += 10; }
    CHECK(!jinja_parse(deep, o, &err) && strstr(err.msg, "deep"), "5000 nested ifs: %s", err.msg);
    memcpy(deep, "{{ ", 3);
    for (size_t i = 0; i < 20000; i++) deep[3 + i] = '-';
    memcpy(deep + 3 + 20000, "1 }}", 5);
    CHECK(!jinja_parse(deep, strlen(deep), &err) && strstr(err.msg, "deep"), "20000 unary minus: %s", err.msg);
    /* values nested deeper than JINJA_MAX_NESTING cannot be printed or serialized */
    expect_fail("{% set ns = namespace(v=[]) %}{% for i in range(300) %}{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v }}", NULL, NULL,
                "nested", 1);
    expect_fail("{% set ns = namespace(v=[]) %}{% for i in range(300) %}{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v | tojson }}", NULL, NULL,
                "nested", 1);
    expect_fail("{% set ns = namespace(v=[], w=[]) %}{% for i in range(300) %}{% set ns.v = [ns.v] %}{% set ns.w = [ns.w] %}{% endfor %}{{ ns.v == ns.w }}", NULL, NULL,
                "nested", 1);
    /* JSON nesting */
    for (size_t i = 0; i < 1000; i++) deep[i] = '[';
    jinja_env *e = jinja_env_new();
    CHECK(!jinja_json_parse(e, deep, 1000, &err) && strstr(err.msg, "nested"), "JSON nesting: %s", err.msg);
    jinja_env_free(e);
    free(deep);
}

static void test_json_api(void) {
    jinja_env *e = jinja_env_new();
    jinja_error err;
    const char *doc = "{\"b\": [1, 2.5, -0.0, 1e400, \"\\u00e9\\ud83d\\ude00\\n\", true, null], \"a\": {}, \"b\": 3}";
    jinja_value *v = jinja_json_parse(e, doc, strlen(doc), &err);
    CHECK(v && jinja_is_dict(v) && jinja_dict_len(v) == 2, "parse: %s", err.msg);
    char *s = jinja_json_dump(v, NULL);
    CHECK(s && !strcmp(s, "{\"b\": 3, \"a\": {}}"), "a repeated key keeps its place and its last value: %s", s ? s : "(null)");
    free(s);
    const char *doc2 = "[1, 2.5, -0.0, 1e400, \"\\u00e9\\ud83d\\ude00\\n\\u0001\", true, null, 10.0]";
    v = jinja_json_parse(e, doc2, strlen(doc2), &err);
    s = v ? jinja_json_dump(v, NULL) : NULL;
    CHECK(s && !strcmp(s, "[1, 2.5, -0.0, Infinity, \"é😀\\n\\u0001\", true, null, 10.0]"), "round trip: %s", s ? s : err.msg);
    free(s);
    static const char *bad[] = { "", "[1,]", "{\"a\" 1}", "\"\\ud800\"", "01", "[1] x", "\"a\x01\"", "nul", "1e", "\"\xc3\"",
                                 "99999999999999999999" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(!jinja_json_parse(e, bad[i], strlen(bad[i]), &err) && err.msg[0], "bad JSON %zu accepted", i);
    jinja_value *d = jinja_dict_new(e), *l = jinja_list_new(e);
    CHECK(!jinja_list_push(e, l, jinja_string(e, "x")) && !jinja_list_push(e, l, jinja_int(e, 7)), "push");
    CHECK(!jinja_dict_set(e, d, "k", l) && !jinja_dict_set(e, d, "z", jinja_none(e)) && !jinja_dict_set(e, d, "k", jinja_bool(e, 1)),
          "dict_set");
    s = jinja_json_dump(d, NULL);
    CHECK(s && !strcmp(s, "{\"k\": true, \"z\": null}"), "dict in order, replaced in place: %s", s ? s : "");
    free(s);
    jinja_dict_del(d, "k");
    CHECK(jinja_dict_len(d) == 1 && !strcmp(jinja_dict_key(d, 0), "z") && jinja_is_null(jinja_dict_val(d, 0)), "dict_del");
    size_t n;
    CHECK(jinja_list_len(l) == 2 && !strcmp(jinja_str(jinja_list_at(l, 0), &n), "x") && n == 1 && !jinja_str(jinja_list_at(l, 1), NULL),
          "list read");
    CHECK(jinja_list_push(e, d, l) == -1 && jinja_dict_set(e, l, "a", d) == -1, "type checks");
    jinja_env_free(e);
    /* the same template rendered twice, and by two environments */
    const char *two = "{{ x }}{{ x * 2 }}";
    jinja_tmpl *t = jinja_parse(two, strlen(two), &err);
    for (int k = 0; k < 2; k++) {
        jinja_env *e2 = jinja_env_new();
        jinja_env_set(e2, "x", jinja_int(e2, 21));
        char *out = NULL;
        size_t len = 0;
        CHECK(t && !jinja_render(t, e2, NULL, &out, &len, &err) && !strcmp(out, "2142") && len == 4, "render %d", k);
        free(out);
        jinja_env_free(e2);
    }
    jinja_tmpl_free(t);
    const char *uses = "{% if tools %}{{ enable_thinking }}{% endif %}";
    CHECK(jinja_tmpl_uses(t = jinja_parse(uses, strlen(uses), &err), "tools") &&
          jinja_tmpl_uses(t, "enable_thinking") && !jinja_tmpl_uses(t, "messages"), "tmpl_uses");
    jinja_tmpl_free(t);
}

int main(void) {
    test_basics();
    test_whitespace();
    test_control();
    test_filters();
    test_tests();
    test_globals();
    test_errors();
    test_limits();
    test_json_api();
    return test_summary("test_jinja");
}
