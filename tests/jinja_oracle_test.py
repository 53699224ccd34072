#!/usr/bin/env python3
"""jinja_oracle_test.py - minfer's Jinja engine (src/jinja.c) against Python's jinja2 set
up as Hugging Face transformers sets it up for chat templates (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, the generation tag, tojson as json.dumps with
ensure_ascii=False, raise_exception, strftime_now). Every render must be byte-identical, or
both must fail.

Templates, each rendered over the conversations below (system message, several turns, tool
definitions, assistant tool calls, tool results, reasoning), with and without
add_generation_prompt:
  - tests/jinja/*.jinja: minfer's own, a feature area each, plus the small cases in CASES;
  - llama.cpp's models/templates at the commit of tests/jinja/llama_templates.lock, fetched
    at test time into $BUILD/llama-templates/COMMIT (raw.githubusercontent.com, else the
    llama-cpp-python sdist that vendors the same commit) and checked by sha256; a skip with
    the reason when neither can be reached;
  - the templates embedded in the real models of scripts/get-model found in models/.
MINFER_JINJA_EXTRA=DIR adds DIR/*.jinja (templates of your own to try).

minfer's side is build/tools/jinja_render --batch (tests/tools/jinja_render.c)."""
import datetime
import glob
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from tally import Tally  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
BUILD_DIR = BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD)
TOP_BUILD = os.environ.get("MINFER_VENV_TOP", BUILD_DIR)  # make test SAN=1 builds in build/san
RENDER = os.path.join(BUILD_DIR, "tools", "jinja_render")
TIME = 1765000000  # strftime_now's clock on both sides (2025-12-06)

# ---------------------------------------------------------------- the oracle

def oracle_env():
    import jinja2
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class AssistantTracker(Extension):  # transformers' {% generation %}: renders its body
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

        def _generation_support(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(TIME).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def oracle_render(env, src, ctx):
    try:
        return True, env.from_string(src).render(**ctx)
    except Exception as e:  # any failure: minfer must fail too
        return False, f"{type(e).__name__}: {e}"

# ---------------------------------------------------------------- conversations

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web; returns titles and URLs.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 10.5, "default": 5},
            "tags": {"type": "array", "items": {"type": "string"}},
            "strict": {"type": "boolean"}},
            "required": ["query"]}}},
]

CALL1 = {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
CALL2 = {"id": "call00002", "type": "function", "function": {"name": "search", "arguments": {"query": "Eiffel tower height", "max_results": 3, "tags": ["paris", "é"], "strict": True}}}

CONVERSATIONS = {
    "chat": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hello! Who are you?"},
        {"role": "assistant", "content": "I am an assistant. How can I help?"},
        {"role": "user", "content": "What is 2 + 2?"},
    ],
    "user-only": [
        {"role": "user", "content": "  Say hi in French.\n"},
    ],
    "multi-turn": [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another?"},
        {"role": "assistant", "content": "Green."},
        {"role": "user", "content": "And one more, with quotes: \"red\" or 'crimson'?"},
    ],
    "tools": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL1]},
        {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "{\"temperature\": 18, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "It is 18 °C and clear in Paris."},
        {"role": "user", "content": "Thanks. How tall is the Eiffel tower?"},
    ],
    "parallel-tools": [
        {"role": "user", "content": "Weather in Paris, and the Eiffel tower's height?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL1, CALL2]},
        {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "18 C"},
        {"role": "tool", "tool_call_id": "call00002", "name": "search", "content": "330 m"},
    ],
    "reasoning": [
        {"role": "system", "content": "Think step by step."},
        {"role": "user", "content": "Is 91 prime?"},
        {"role": "assistant", "reasoning_content": "91 = 7 * 13, so no.", "content": "No: 91 = 7 × 13."},
        {"role": "user", "content": "Is 97 prime?"},
    ],
    "reasoning-tools": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "reasoning_content": "I should call get_weather.", "content": "", "tool_calls": [CALL1]},
        {"role": "tool", "tool_call_id": "call00001", "content": "18 C"},
    ],
    "unicode": [
        {"role": "system", "content": "Réponds en français. 日本語も OK 👍"},
        {"role": "user", "content": "Braces {{ x }} and {% tags %} stay text;\ttabs, \\ backslashes, \r\nCRLF."},
    ],
}


def contexts(src, name):
    """(label, context) pairs for a template: every conversation, each with and without the
    generation prompt; tools passed where the conversation has tool calls or tools are
    wanted; enable_thinking both ways for reasoning."""
    out = []
    for cname, msgs in CONVERSATIONS.items():
        uses_tools = "tool" in cname
        for agp in (True, False):
            ctx = {"messages": msgs, "add_generation_prompt": agp, "bos_token": "<s>", "eos_token": "</s>"}
            if uses_tools:
                ctx["tools"] = TOOLS
            out.append((f"{name}/{cname}/agp={int(agp)}", ctx))
        if cname.startswith("reasoning"):
            for think in (True, False):
                ctx = {"messages": msgs, "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>",
                       "enable_thinking": think}
                out.append((f"{name}/{cname}/enable_thinking={think}", ctx))
        if cname == "chat":  # tools offered in a plain conversation
            ctx = {"messages": msgs, "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>",
                   "tools": TOOLS}
            out.append((f"{name}/chat+tools", ctx))
    return out

# ---------------------------------------------------------------- small cases

# (template, context): one feature each, rendered with the same oracle
CASES = [
    ("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }}", {}),
    ("{{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1.0e-5 }} {{ 0.0001 }} {{ 123456789.125 }} {{ -0.0 }} {{ 3.0 * 2 }}", {}),
    ("{{ 'a' ~ 1 ~ none ~ true ~ 2.5 ~ [1, 'x'] ~ {'k': 'v'} }}", {}),
    ("{{ 'ab' * 3 }} {{ [1] * 2 }} {{ 'a' + 'b' }} {{ [1] + [2] }} {{ (1,) + (2,) }}", {}),
    ("{{ [1, 'two', 3.0, none, true, [], {}] }} {{ (1,) }} {{ (1, 2) }} {{ () }} {{ {'a': [1, {'b': none}]} }}", {}),
    ("{{ 'it\\'s' }} {{ ['it\\'s', \"q\\\"\", 'both \\' \"', 'tab\\t', 'nl\\n', 'nul\\x00', 'é', '\\u200b'] }}", {}),
    ("{{ 'x' if true }}|{{ 'x' if false }}|{{ 'a' if 0 else 'b' if 1 else 'c' }}", {}),
    ("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ none == none }}", {}),
    ("{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 1 in undefined_thing }}", {}),
    ("{{ x and y }}|{{ x or y }}|{{ not x }}|{{ none or 'd' }}|{{ 0 and 1 }}|{{ '' or [] or 'last' }}", {"x": 1, "y": "yes"}),
    ("{{ s[0] }}{{ s[-1] }}{{ s[1:3] }}{{ s[::-1] }}{{ s[::2] }}{{ s[-2:] }}{{ s[:-2] }}{{ s[10:] }}|{{ l[1:] }}{{ l[::-1] }}{{ l[5] }}", {"s": "héllo wörld", "l": [1, 2, 3]}),
    ("{{ d.a }} {{ d['a'] }} {{ d.missing }} {{ d.get('a') }} {{ d.get('z', 'dflt') }} {{ d.get('z') }} {{ d.items() | list }} {{ d.keys() | list }} {{ d.values() | list }}", {"d": {"a": 1, "b": [2]}}),
    ("{{ none.x }}|{{ 'str'.nope }}|{{ [1].nope }}|{{ d['items'] is callable }}", {"d": {}}),
    ("{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' xy') }}|{{ s.upper() }}|{{ s.lower() }}|{{ s.title() }}|{{ s.capitalize() }}", {"s": "  xy Hello wORLD éa yx  "}),
    ("{{ s.split() }} {{ s.split(',') }} {{ s.split(',', 1) }} {{ s.rsplit(',', 1) }} {{ s.split(None, 1) }} {{ 'a\\nb\\r\\nc'.splitlines() }} {{ '  a  b  '.split() }} {{ ''.split(',') }}", {"s": "a,b, c d,e"}),
    ("{{ s.startswith('ab') }} {{ s.endswith(('x', 'cd')) }} {{ s.find('c') }} {{ s.rfind('é') }} {{ s.count('b') }} {{ s.replace('b', 'B') }} {{ s.replace('', '-') }} {{ s.replace('b', '', 1) }}", {"s": "abécdbé cd"}),
    ("{{ '{} and {}'.format(1, 'two') }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{x}!'.format(x=3) }} {{ '{:>5}|{:<4}|{:^7}|{:05d}|{:.2f}'.format('r', 'l', 'c', 42, 3.14159) }} {{ '{{literal}}'.format() }}", {}),
    ("{{ '%s is %d' % ('x', 3) }} {{ '%05.1f' % 2.25 }} {{ '%r' % 'q' }} {{ '%%' % () }} {{ 'a%sb' % 'X' }}", {}),
    ("{{ 'héllo' | length }} {{ [1, 2] | length }} {{ {'a': 1} | count }} {{ undef | length }} {{ 'abc' | first }} {{ [3, 4] | last }} {{ [] | first }}", {}),
    ("{{ x | default('d') }} {{ none | default('d') }} {{ '' | default('d', true) }} {{ 0 | d('zero', boolean=true) }} {{ undefined_var | d }}", {}),
    ("{{ '  pad\\n' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'hello world-foo(bar' | title }}|{{ 'hELLO' | capitalize }}|{{ 'a' | upper }}{{ 'B' | lower }}", {}),
    ("{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }} {{ [1, 3, 2] | sort(reverse=true) }} {{ users | sort(attribute='age') | map(attribute='name') | list }}", {"users": [{"name": "a", "age": 30}, {"name": "b", "age": 20}, {"name": "c", "age": 30}]}),
    ("{{ d | dictsort }} {{ d | dictsort(by='value') }} {{ d | dictsort(reverse=true) }} {{ d | items | list }}", {"d": {"b": 2, "A": 3, "c": 1}}),
    ("{{ users | selectattr('active') | map(attribute='name') | join(', ') }}|{{ users | rejectattr('active') | map(attribute='name') | list }}|{{ users | selectattr('name', 'equalto', 'b') | list | length }}|{{ users | selectattr('age', 'gt', 25) | map(attribute='name') | list }}", {"users": [{"name": "a", "age": 30, "active": True}, {"name": "b", "age": 20, "active": False}, {"name": "c", "age": 40}]}),
    ("{{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('even') | list }} {{ [0, 1, '', 'a'] | select | list }} {{ ['a', 'b'] | map('upper') | list }} {{ [1, 1, 2, 'A', 'a'] | unique | list }}", {}),
    ("{{ [1, 2, 3] | sum }} {{ [1.5, 2] | sum }} {{ [3, 1, 2] | max }} {{ ['b', 'A'] | min }} {{ -3 | abs }} {{ 2.5 | round }} {{ 3.14159 | round(2) }} {{ 2.7 | round(0, 'floor') }} {{ '12' | int }} {{ '1.9' | int }} {{ 'x' | int(7) }} {{ '2.5' | float }} {{ 3 | float }}", {}),
    ("{{ x | tojson }} {{ x | tojson(indent=2) }} {{ x | tojson(sort_keys=true) }} {{ 'é\"\\n' | tojson }} {{ 1.0 | tojson }} {{ none | tojson }} {{ x | tojson(separators=(',', ':')) }}", {"x": {"b": [1, 2.5, "é"], "a": None, "c": {"t": True}}}),
    ("{{ x | string }} {{ 42 | string }} {{ [1] | join('-') }} {{ ['a', 'b'] | join }} {{ 'abc' | list }} {{ {'k': 1} | list }} {{ 'a<b>&\"\\'' | e }} {{ 'abc' | reverse }} {{ [1, 2] | reverse | list }}", {"x": [1, "a"]}),
    ("{{ 'line1\\nline2\\n\\nline4' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(first=true, blank=true) }}|{{ 'x\\ny' | indent('> ') }}", {}),
    ("{{ 'one two  three' | wordcount }} {{ 'abc' | center(9) }}|{{ 'a long sentence here' | truncate(9) }}|{{ [1, 2, 3, 4, 5] | batch(2) | list }} {{ '%s-%s' | format(1, 2) }} {{ [1, 2, 3] | slice(2) | list }}", {}),
    ("{{ x is defined }} {{ y is undefined }} {{ none is none }} {{ 'a' is string }} {{ 1 is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ {} is mapping }} {{ [] is iterable }} {{ 'a' is sequence }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ x is sameas x }} {{ x is callable }} {{ 3 is in [1, 3] }} {{ 2 is gt 1 }} {{ 2 is eq 2 }} {{ 1 is ne 2 }} {{ true is true }} {{ false is false }} {{ y is sequence }} {{ y is iterable }} {{ 'upper' is filter }} {{ 'odd' is test }}", {"x": "v"}),
    ("{% for x in items %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }}/{{ loop.cycle('o', 'e') }}/{{ loop.depth }} {% endfor %}", {"items": ["a", "b", "c"]}),
    ("{% for x in [1, 2, 3, 4, 5] if x is odd %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}|{% for x in [] %}{{ x }}{% else %}empty{% endfor %}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for c in 'ab' %}{{ c }}{% endfor %}|{% for k in d %}{{ k }}{% endfor %}", {"d": {"a": 1, "b": 2}}),
    ("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 4 %}{% break %}{% endif %}{{ i }}{% endfor %}|{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.depth }}{% endfor %}{% endfor %}|{{ range(3) | list }} {{ range(1, 10, 3) | list }} {{ range(5, 0, -2) | list }}", {}),
    ("{% set x = 1 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}|{% if true %}{% set y = 5 %}{% endif %}{{ y }}|{% set ns = namespace(n=0, l=[]) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}|{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t %}block {{ a }}{% endset %}{{ t }}|{% set u | upper %}up{% endset %}{{ u }}", {}),
    ("{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', 'Hi') }} {{ greet('C', punct='?') }} {{ greet(name='D', greeting='Yo') }}", {}),
    ("{% macro m(a) %}[{{ a }}|{{ varargs }}|{{ kwargs }}]{% endmacro %}{{ m(1, 2, 3, k='v') }}{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(5) }}{% set outer = 'late' %}{% macro late() %}{{ outer }}{% endmacro %}{{ late() }}", {}),
    ("{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(x) each([1, 2]) %}({{ x }}){% endcall %}", {}),
    ("{% filter upper %}shout {{ 'this' }}{% endfilter %}|{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}|{% generation %}gen {{ 1 }}{% endgeneration %}|{% raw %}{{ not parsed }}{% endraw %}|{# a comment #}end", {}),
    ("a\n  {% if true %}\n  b\n  {% endif %}\nc\n{%- if true %} d {% endif -%}\n e {{- ' f ' -}} g\n{%+ if true %}h{% endif %}\n{#- c -#}\n   {# c2 #}\ni{{ '\\n' }}\n", {}),
    ("  {% for x in [1, 2] %}\n    <{{ x }}>\n  {% endfor %}\n  {%- for x in [3] -%}\n    [{{ x }}]\n  {%- endfor %}\n\t{% if true %}tab{% endif %}\n", {}),
    ("line\r\nwindows\r\n{% if true %}\r\nx\r\n{% endif %}\r\n", {}),
    ("{{ strftime_now('%Y-%m-%d %H:%M %d %b %Y %A') }}", {}),
    ("{{ messages[0].content }}{{ messages | length }}{{ messages | selectattr('role', 'equalto', 'user') | list | length }}{{ messages[-1]['role'] }}", {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}),
    ("{% if messages | selectattr('role', 'equalto', 'nobody') %}gen-true{% endif %}|{{ messages | map(attribute='role') | join(',') }}|{{ (messages | map(attribute='role') | list)[1] }}", {"messages": [{"role": "system"}, {"role": "user"}]}),
    # blocks (in place: nothing extends a chat template) and the tags that need a loader
    ("{% set x = 1 %}{% block b %}[{{ x }}]{% set y = 2 %}{% endblock %}{{ y }}|{% for i in range(2) %}{% block c %}<{{ i }}>{% endblock %}{% endfor %}|{% for i in range(2) %}{% block d scoped %}<{{ i }}>{% set i = 9 %}{% endblock %}{{ i }}{% endfor %}|{% block e %}{% block f %}in{% endblock %}{% endblock e %}", {}),
    ("{% set ns = namespace(v=1) %}{% block a %}{% set ns.v = 5 %}{% endblock %}{{ ns.v }}|{{ x }}{% block b %}{% set x = 3 %}{{ x }}{% endblock %}{{ x }}|{% with q = 4 %}{% block c %}[{{ q }}]{% endblock %}{% endwith %}|{% macro m(q) %}{% block z %}Z{{ q }}{% endblock %}{% endmacro %}{{ m(1) }}|  {% block w %}\n  x\n  {% endblock %}\ny", {"x": 0}),
    ("{% if false %}{% block a required %}  {# c #}\n{% endblock %}{% include 'x' ignore missing with context %}{% import 'x' as y with context %}{% from 'x' import a, b as c without context %}{% extends 'base' %}{% endif %}ok", {}),
    ("{% for g in users | groupby('age') %}{{ g.grouper }}:{{ g.list | map(attribute='name') | join(',') }};{% endfor %}|{% for city, items in users | groupby('city', default='?') %}{{ city }}={{ items | length }};{% endfor %}|{% for c, i in users | groupby('city', default='?', case_sensitive=true) %}{{ c }}={{ i | length }};{% endfor %}|{{ users | groupby('age') }}|{{ (users | groupby('age'))[0][:1] }}|{{ (users | groupby('age'))[0] == (1, [users[1]]) }}|{{ [[1, 'a'], [0, 'b'], [1, 'c']] | groupby(0) }}", {"users": [{"name": "a", "city": "Paris", "age": 3}, {"name": "b", "city": "rome", "age": 1}, {"name": "c", "city": "paris", "age": 3}, {"name": "d", "age": 2}]}),
    # failures: both sides must refuse
    ("{{ raise_exception('custom failure') }}", {}),
    ("{{ undefined_var.attr }}", {}),
    ("{{ 1 + 'a' }}", {}),
    ("{{ [1].append(2) }}", {}),
    ("{{ {}.pop('a') }}", {}),
    ("{{ x | tojson }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{% for %}", {}),
    ("{{ 'unterminated }}", {}),
    ("{% if true %}no end", {}),
    ("{{ x | no_such_filter }}", {}),
    ("{% break %}", {}),
    ("{{ range(100001) | length }}", {}),
    ("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", {}),
    ("{{ (1 if false) + 1 }}", {}),
    ("{% block a required %}{% endblock %}", {}),
    ("{% block a required %}A{% endblock %}", {}),
    ("{% block a %}A{% endblock b %}", {}),
    ("{% block a %}A{% endblock %}{% block a %}B{% endblock %}", {}),
    ("{% for i in [1] %}{% block a %}{{ loop.index }}{% endblock %}{% endfor %}", {}),
    ("{% block a-b %}{% endblock %}", {}),
    ("{% include 'x' %}", {}),
    ("{% extends 'base' %}", {}),
    ("{% import 'x' as y %}", {}),
    ("{% from 'x' import _y %}", {}),
    ("{{ [{'a': 1}, {'b': 2}] | groupby('a') }}", {}),
    ("{{ 3 | groupby('a') }}", {}),
]

# ---------------------------------------------------------------- template sources

def read_lock(path):
    commit, sdist, files = None, None, []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            if parts[0] == "commit":
                commit = parts[1]
            elif parts[0] == "sdist":
                sdist = (parts[1], parts[2])
            else:
                files.append((parts[1], parts[0]))
    return commit, sdist, files


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def fetch_llama_templates(t):
    """{name: text} of llama.cpp's templates at the lock's commit, from the cache, GitHub or the
    sdist; None (with a skip) when they cannot be had."""
    commit, sdist, files = read_lock(os.path.join(HERE, "jinja", "llama_templates.lock"))
    cache = os.path.join(TOP_BUILD, "llama-templates", commit)
    os.makedirs(cache, exist_ok=True)

    def cached_ok():
        for name, want in files:
            p = os.path.join(cache, name)
            if not os.path.exists(p) or sha256(open(p, "rb").read()) != want:
                return False
        return True

    if not cached_ok():
        why = []
        # 1. raw.githubusercontent.com at the commit
        try:
            for name, want in files:
                p = os.path.join(cache, name)
                if os.path.exists(p) and sha256(open(p, "rb").read()) == want:
                    continue
                url = f"https://raw.githubusercontent.com/ggml-org/llama.cpp/{commit}/models/templates/{name}"
                data = urllib.request.urlopen(url, timeout=20).read()
                if sha256(data) != want:
                    raise RuntimeError(f"{url}: sha256 {sha256(data)}, the lock says {want}")
                with open(p, "wb") as f:
                    f.write(data)
        except Exception as e:
            why.append(f"GitHub: {e}")
        # 2. the sdist that vendors the same commit (pip, PyPI)
        if not cached_ok() and sdist:
            tmp = tempfile.mkdtemp(prefix="minfer-lcp-")
            try:
                r = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                                    "--disable-pip-version-check", "-d", tmp, sdist[0]],
                                   capture_output=True, text=True, timeout=900)
                tars = glob.glob(os.path.join(tmp, "*.tar.gz"))
                if r.returncode or not tars:
                    raise RuntimeError(f"pip download {sdist[0]} failed: {(r.stderr or r.stdout).strip()[-300:]}")
                data = open(tars[0], "rb").read()
                if sha256(data) != sdist[1]:
                    raise RuntimeError(f"{tars[0]}: sha256 {sha256(data)}, the lock says {sdist[1]}")
                wanted = dict(files)
                with tarfile.open(tars[0]) as tf:
                    for m in tf.getmembers():
                        base = os.path.basename(m.name)
                        if "/vendor/llama.cpp/models/templates/" in m.name and base in wanted:
                            blob = tf.extractfile(m).read()
                            if sha256(blob) != wanted[base]:
                                raise RuntimeError(f"{m.name}: sha256 differs from the lock")
                            with open(os.path.join(cache, base), "wb") as f:
                                f.write(blob)
            except Exception as e:
                why.append(f"PyPI: {e}")
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        if not cached_ok():
            t.skip("llama.cpp's templates could not be fetched (network unavailable?): " + "; ".join(why))
            return None
    return {name: open(os.path.join(cache, name), encoding="utf-8").read() for name, _ in files}


def gguf_meta(path):
    """The chat template, BOS and EOS text of a GGUF file (a minimal reader of its key/value
    header): {"template": str or None, "bos": str or None, "eos": str or None}."""
    want = {"tokenizer.chat_template", "tokenizer.ggml.tokens", "tokenizer.ggml.bos_token_id",
            "tokenizer.ggml.eos_token_id"}
    got = {}
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            return None
        version, = struct.unpack("<I", f.read(4))
        if version < 2:
            return None
        _n_tensors, n_kv = struct.unpack("<QQ", f.read(16))

        def rstr():
            n, = struct.unpack("<Q", f.read(8))
            return f.read(n)
        sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

        def read(t, keep):
            if t in sizes:
                fmt = "<" + sizes[t]
                return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]
            if t == 8:
                return rstr().decode("utf-8", "replace") if keep else rstr()
            if t == 9:
                et, n = struct.unpack("<IQ", f.read(12))
                if not keep and et in sizes:
                    f.seek(struct.calcsize("<" + sizes[et]) * n, 1)
                    return None
                return [read(et, keep) for _ in range(n)]
            raise ValueError(f"GGUF type {t}")
        for _ in range(n_kv):
            key = rstr().decode("utf-8", "replace")
            t, = struct.unpack("<I", f.read(4))
            v = read(t, key in want)
            if key in want:
                got[key] = v
    toks = got.get("tokenizer.ggml.tokens") or []

    def tok(k):
        i = got.get(k)
        return toks[i] if isinstance(i, int) and 0 <= i < len(toks) else None
    return {"template": got.get("tokenizer.chat_template"), "bos": tok("tokenizer.ggml.bos_token_id"),
            "eos": tok("tokenizer.ggml.eos_token_id")}


def openai_messages(msgs):
    """A conversation as an OpenAI client sends it: tool-call arguments as JSON text."""
    out = []
    for m in msgs:
        m = dict(m)
        if "tool_calls" in m:
            m["tool_calls"] = [dict(c, function=dict(c["function"], arguments=json.dumps(c["function"]["arguments"])))
                               for c in m["tool_calls"]]
        out.append(m)
    return out


def template_command(t, env, models):
    """`minfer template -m MODEL` (the server's rendering path: OpenAI messages normalized,
    the model's BOS/EOS text, tools None when absent) against jinja2 over the same request."""
    binary = os.path.join(BUILD_DIR, "minfer")
    if not os.path.exists(binary):
        t.check(False, f"{binary} is missing (make)")
        return
    for path, meta in models:
        for cname, msgs in CONVERSATIONS.items():
            for tools in (None, TOOLS):
                req = {"model": "x", "messages": openai_messages(msgs), "max_tokens": 5}
                if tools:
                    req["tools"] = tools
                if cname.startswith("reasoning"):
                    req["chat_template_kwargs"] = {"enable_thinking": False}
                r = subprocess.run([binary, "template", "-m", path, "-q"], input=json.dumps(req).encode(),
                                   capture_output=True, timeout=60)
                ctx = {"messages": [dict(m, content=m.get("content") or "") for m in msgs], "tools": tools,
                       "documents": None, "add_generation_prompt": True}
                if meta["bos"]:
                    ctx["bos_token"] = meta["bos"]
                if meta["eos"]:
                    ctx["eos_token"] = meta["eos"]
                ctx.update(req.get("chat_template_kwargs", {}))
                ok, want = oracle_render(env, meta["template"], ctx)
                label = f"minfer template -m {os.path.basename(path)} / {cname}{' + tools' if tools else ''}"
                if ok:
                    t.check(r.returncode == 0 and r.stdout.decode("utf-8") == want,
                            f"{label}: exit {r.returncode}, {r.stderr.decode()[-300:]}\n  want {want[-200:]!r}\n  got  {r.stdout.decode('utf-8', 'replace')[-200:]!r}")
                else:
                    t.check(r.returncode == 2 and b"chat template" in r.stderr,
                            f"{label}: jinja2 fails ({want}); minfer: exit {r.returncode} {r.stderr.decode()[-300:]}")

# ---------------------------------------------------------------- main

def first_diff(a, b):
    i = 0
    while i < len(a) and i < len(b) and a[i] == b[i]:
        i += 1
    return i


def main():
    t = Tally("jinja_oracle")
    try:
        import jinja2  # noqa: F401
    except ImportError:
        t.need("jinja2 (Debian python3-jinja2 or PyPI) is not importable: tools/deps.sh --test installs it")
        return t.result()
    if not os.path.exists(RENDER):
        t.check(False, f"{RENDER} is missing (make tests-build)")
        return t.result()
    env = oracle_env()

    jobs = []  # (label, template source, context)
    for i, (src, ctx) in enumerate(CASES):
        jobs.append((f"case {i}: {src[:60]!r}", src, ctx))
    templates = {}
    for p in sorted(glob.glob(os.path.join(HERE, "jinja", "*.jinja"))):
        templates["tests/jinja/" + os.path.basename(p)] = open(p, encoding="utf-8").read()
    llama = fetch_llama_templates(t)
    if llama:
        for name, src in sorted(llama.items()):
            templates["llama.cpp/" + name] = src
    models = []
    for p in sorted(glob.glob(os.path.join(ROOT, os.environ.get("MODELS_DIR", "models"), "*.gguf"))):
        meta = gguf_meta(p)
        if meta and meta["template"]:
            templates["gguf/" + os.path.basename(p)] = meta["template"]
            models.append((p, meta))
    if not any(k.startswith("gguf/") for k in templates):
        t.skip("no models/*.gguf with a chat template here (scripts/get-model NAME fetches them)")
    extra = os.environ.get("MINFER_JINJA_EXTRA")
    if extra:
        for p in sorted(glob.glob(os.path.join(extra, "*.jinja"))):
            templates["extra/" + os.path.basename(p)] = open(p, encoding="utf-8").read()
    for name, src in templates.items():
        for label, ctx in contexts(src, name):
            jobs.append((label, src, ctx))

    lines = "".join(json.dumps({"template": src, "context": ctx, "time": TIME}, ensure_ascii=False) + "\n"
                    for _, src, ctx in jobs)
    r = subprocess.run([RENDER, "--batch"], input=lines.encode("utf-8"), capture_output=True, timeout=600)
    got = r.stdout.decode("utf-8").splitlines()
    if r.returncode or len(got) != len(jobs):
        t.check(False, f"jinja_render --batch: exit {r.returncode}, {len(got)} results for {len(jobs)} jobs: "
                       f"{r.stderr.decode('utf-8', 'replace')[-2000:]}")
        return t.result()

    both_fail = {}
    per_template_fail = {}
    for (label, src, ctx), line in zip(jobs, got):
        res = json.loads(line)
        ok, want = oracle_render(env, src, ctx)
        tname = label.split("/agp")[0].split("/enable")[0]
        if ok and res["ok"]:
            good = res["out"] == want
            if not good:
                i = first_diff(res["out"], want)
                t.check(False, f"{label}: differs at char {i}:\n  jinja2: {want[max(0, i - 60):i + 60]!r}\n  minfer: {res['out'][max(0, i - 60):i + 60]!r}")
                per_template_fail[tname] = per_template_fail.get(tname, 0) + 1
            else:
                t.check(True, label)
        elif not ok and not res["ok"]:
            t.check(True, label)
            both_fail[label] = (want, res["err"])
        elif ok:
            t.check(False, f"{label}: jinja2 renders it, minfer fails: {res['err']}")
            per_template_fail[tname] = per_template_fail.get(tname, 0) + 1
        else:
            t.check(False, f"{label}: jinja2 fails ({want}), minfer renders {res['out'][:200]!r}")
            per_template_fail[tname] = per_template_fail.get(tname, 0) + 1
    n_templates = len(templates)
    print(f"{len(jobs)} renders ({len(CASES)} cases, {n_templates} templates: "
          f"{sum(1 for k in templates if k.startswith('llama.cpp/'))} of llama.cpp, "
          f"{sum(1 for k in templates if k.startswith('gguf/'))} from GGUF models, "
          f"{sum(1 for k in templates if k.startswith('tests/'))} of minfer's); "
          f"{len(both_fail)} refused by both")
    if os.environ.get("MINFER_JINJA_VERBOSE"):
        for label, (a, b) in both_fail.items():
            print(f"  both fail: {label}\n    jinja2: {a[:200]}\n    minfer: {b[:200]}")
    for k, v in sorted(per_template_fail.items()):
        print(f"  {v} failing renders: {k}", file=sys.stderr)
    template_command(t, env, models)
    return t.result()


if __name__ == "__main__":
    sys.exit(main())
