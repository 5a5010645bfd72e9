#!/usr/bin/env python3
"""Writes the differential test cases of tests/template/cases/ (the Cases test
of cases_test.cpp renders each with edgelm and with jinja2 and compares):

  expressions.json  every filter, test, method and operator on values of each
                    type (random pairs from a fixed list, fixed seed);
  whitespace.json   random nestings of text and tags with -, + and no
                    modifiers (trim_blocks, lstrip_blocks, comments, macros);
  statements.json   scoping, loops, macros, namespaces and formatting cases
                    written by hand.

Run it again only to change the cases; the JSON files are committed.
"""
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))

STATEMENTS = [
    "a  {% raw %}\n  {{ x }} {% if %}\n  {% endraw %}\nb",
    "a\n  {%- raw -%}  {{ x }}  {%- endraw -%}  \nb",
    "x\n    {% raw %}{{ y }}{%+ endraw +%}\nz",
    "{% raw %}unterminated",
    "{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}",
    "{% for a in [1,2,3] %}{% if a == 2 %}{% break %}{% endif %}{{ a }}{% else %}E{% endfor %}",
    "{% for a in [1,2] %}{% macro m() %}[{{ a }}]{% endmacro %}{{ m() }}{% endfor %}",
    "{% set ns = namespace(a=1) %}{% macro m() %}{% set ns.a = 5 %}{% endmacro %}{{ m() }}{{ ns.a }}",
    "{% for a in [1,2] %}{% set outer = loop %}{% for b in [3] %}{{ outer.index }}{{ loop.index }}{% endfor %}{% endfor %}",
    "{% set x = x|default(0) + 1 %}{{ x }}",
    "{{ m() }}{% macro m() %}x{% endmacro %}",
    "[{{ loop.index }}]",
    "{% filter upper %}{% set y = 'in' %}{{ y }}{% endfilter %}[{{ y }}]",
    "{% for x in [1] recursive %}{% endfor %}",
    "a\n{%- set x = 'a' -%}\nb",
    "{{ messages[0]['content'][0].text }}",
    "{{ '\\n'|length }} {{ \"\\\\n\"|length }}",
    "{% set x = [1,2] %}{{ x|last }}",
    "{% for a in [1] %}{% set v = 7 %}{% macro m() %}{{ v }}{% endmacro %}{{ m() }}{% endfor %}",
    "{% macro m() %}{% set q = 1 %}{% endmacro %}{{ m() }}[{{ q }}]",
    "{% set a, b = 'xy' %}{{ a }}-{{ b }}",
    "{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}",
    "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}",
    "{{ [1, 2, 3]|select('greaterthan', 1)|list }} {{ [1, 2, 3]|reject('in', [2])|list }}",
    "{{ messages|map(attribute='role')|join('/') }}",
    "{% set m = messages|selectattr('role', 'eq', 'user')|list %}{{ m|length }}",
    "{{ messages[-1].content[:5] ~ '...' }}",
    "{{ (messages|last).role|upper }}",
    "{% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.role }};{% endfor %}",
    "{{ messages|length is divisibleby 2 }}",
    "{% set d = {'a': {'b': [1, {'c': 'deep'}]}} %}{{ d.a.b[1].c }} {{ d['a']['b'][0] }}",
    "{{ 'x' if messages else 'y' }} {{ none is none }} {{ (none or 'dflt') }} {{ (0 and 1) }} {{ ('' or []) }}",
    "{% set s = 'Hello' %}{{ s[0] }}{{ s[-1] }}{{ s[1:3] }}{{ s|reverse }}",
    "{{ 10 / 4 }} {{ 10 // 4 }} {{ 10 % 4 }} {{ 2 ** 0.5 }} {{ -3 ** 2 }} {{ (-3) ** 2 }} {{ 1e3 }} {{ 1_000 }}",
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ true == 1 }}",
    "{{ {'a': 1} == {'a': 1} }} {{ [1] == (1,) }} {{ none == none }} {{ 'a' in 'cat' }} {{ 'x' not in ['x'] }}",
    "{% set x = namespace(items=[1]) %}{{ x.items }}",
    "{{ range(5)[::2]|list }} {{ range(2, 8, 3)|list }} {{ range(3)|sum }}",
    "{{ [3, 1]|max }} {{ ['b', 'A']|min }} {{ []|max }}|{{ [{'a': 2}, {'a': 5}]|max(attribute='a') }}",
    "{{ 'a-b c'|title }} {{ 'hello world'|capitalize }} {{ '  x  '|trim|length }} {{ 'abc'|replace('b', '') }}",
    "{{ 12345678901234 }} {{ -0.0 }} {{ 1.5e300 * 1e10 }} {{ 0.000123 }} {{ 123456789012345678.0 }}",
    "{{ '%s and %s' % ('a', 'b') }} {{ '%05d|%-4s|%.2f' % (42, 'x', 3.14159) }} {{ 'x'|format }}",
    "{% set t = (1, 2) %}{{ t }}{{ t|list }}{{ t[0] }}{{ (1,) }}{{ () }}",
    "{{ '{\"a\": 1}' }} {{ {'k': 'v'}|tojson }} {{ 'é'|tojson }} {{ '\\u2028'|tojson }} {{ ['<>&']|tojson }}",
    "{{ {'a': [1, 2], 'b': {}}|tojson(indent=4) }}",
    "{{ {'a': 1}|tojson(indent='\\t') }}",
    "{{ [1.0, 2.5, 1e20, 1e-7, -0.0]|tojson }}",
    "{{ {1: 'a', true: 'b'} }} {{ {1: 'a', none: 'b'}|tojson }}",
    "{% for x in 'ab' %}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{% endfor %}",
    "{% if x is not defined %}nd{% elif x %}t{% else %}f{% endif %}",
    "{{ x.y is defined }}",
    "{{ messages[0] is mapping }} {{ messages is sequence }} {{ messages[0].content is string }} {{ 1 is number }}",
    "{% set ns = namespace(found=false) %}{% for m in messages %}{% if m.role == 'assistant' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}",
    "{{ messages[0].get('missing', 'dflt') }} {{ messages[0].get('role') }} {{ messages[0]|length }}",
    "{% for key, value in messages[0]|dictsort %}{{ key }}={{ value|string|length }};{% endfor %}",
    "{% for key, value in messages[0].items() %}{{ key }};{% endfor %}",
    "{{ 'a\\nb\\r\\nc'.splitlines() }} {{ 'a b'.split(' ', 1) }} {{ ' a '.rstrip() }}| {{ 'xxaxx'.strip('x') }}",
    "{{ 'Hello'.startswith(('He', 'x')) }} {{ 'Hello'.endswith('lo') }} {{ 'Hello'.find('l') }} {{ 'Hello'.count('l') }}",
    "{{ raise_exception('Custom: ' ~ messages[0].role) }}",
    "{{ x|default('a')|default('b') }} {{ none|default('n') }} {{ false|default('f', true) }}",
    "{{ messages|first|attr('get') is callable }}",
    "{% set x %}{% for i in range(3) %}{{ i }}{% endfor %}{% endset %}{{ x|length }}{{ x }}",
    "{{ [[1, 2], [3]]|map('length')|list }} {{ ['a', 'B']|map('upper')|join }} {{ [1, 2]|map('string')|join('+') }}",
    "{{ [{'n': 'b'}, {'n': 'a'}]|sort(attribute='n')|map(attribute='n')|join }} {{ ['b', 'a', 'B']|sort(case_sensitive=true) }}",
    "{{ {'b': 1, 'a': 2}|dictsort(reverse=true) }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }}",
    "{{ [1, 2, 2, 'a', 'A']|unique|list }} {{ ['a', 'A']|unique(case_sensitive=true)|list }}",
    "{{ 'abc' * 2 }} {{ [1] * 3 }} {{ 2 * 'x' }} {{ [1] + [2] }} {{ 'a' ~ none ~ 1 }}",
    "{% set x = 5 %}{{ x is odd }} {{ x is even }} {{ x is divisibleby(5) }} {{ x is eq 5 }} {{ x is ne 5 }} {{ x is ge 5 }}",
    "{{ 1 if true else 2 if false else 3 }} {{ not true or true }} {{ not (true or true) }}",
    "{{ messages[0].content|indent(4, first=true) }}",
    "{{ 'abc'|first }} {{ 'abc'|last }} {{ {'a': 1}|first }} {{ []|first }}|",
    "{%- for m in messages -%}\n  {{- m.role }}\n{% endfor -%}\n",
    "  {% for m in messages %}\n    {{ m.role }}\n  {% endfor %}\n",
    "{% macro greet(name, greeting='Hi', punct='!') -%}\n{{ greeting }}, {{ name }}{{ punct }}\n{%- endmacro %}\n{{ greet('A') }}|{{ greet('B', punct='?') }}|{{ greet(greeting='Yo', name='C') }}",
    "{{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %j') }}",
    "{{ bos_token }}{{ eos_token|length }}{{ add_generation_prompt }}{{ tools }}",
]

STATEMENT_CONTEXTS = [{"name": "c", "context": {"messages": [{"role": "system", "content": [{"type": "text", "text": "sys text"}]}, {"role": "user", "content": "Hello world, this is long"}, {"role": "assistant", "content": "Reply\nmultiline"}], "tools": None, "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>"}}]


def expressions():
    random.seed(7)
    vals = ["hello World", "  Mixed Case text-here (x) [y] <z>  ", "", "a,b,,c", "café ÉTÉ", "line1\nline2\n\nline4", "3", "3.7", " 12 ", "-5", "0x1f", "1e3", "abc'\"\\",
            0, 1, -7, 42, 2**40, 3.0, -2.5, 0.1, 1e20, 1e-7, 2.5, True, False, None,
            [], [3, 1, 2], ["b", "A", "a", "c"], [1, "a"], [[1, 2], [3]], [{"a": 2, "b": "x"}, {"a": 1, "b": "y"}, {"b": "z"}],
            {}, {"b": 1, "A": 2, "a": 3}, {"x": [1, {"y": None}], "é": "ü"}, {"role": "user", "content": "hi"}]
    filters = ["length", "count", "string", "trim", "upper", "lower", "title", "capitalize", "list", "first", "last", "sort", "sort(reverse=true)",
               "sort(attribute='a')", "unique|list", "reverse|list", "dictsort", "dictsort(by='value')", "items|list", "tojson", "tojson(indent=2)",
               "tojson(sort_keys=true)", "tojson(separators=(',', ':'))", "join", "join(', ')", "join(attribute='b')", "map('string')|list", "map(attribute='a')|list",
               "map(attribute='a', default=0)|list", "select|list", "reject|list", "select('odd')|list", "selectattr('a')|list", "rejectattr('a', 'defined')|list",
               "selectattr('b', 'equalto', 'x')|list", "min", "max", "sum", "int", "float", "round", "round(1)", "round(0, 'floor')", "abs", "default('d')",
               "default('d', true)", "d", "replace('a', 'X')", "replace('l', '', 1)", "indent(2)", "indent(2, true)", "indent('> ', first=true, blank=true)",
               "safe", "escape", "e", "format", "first|string", "string|length", "list|length", "attr('items')", "batch(2)|list" ,
               "batch(2, 'f')|list", "slice(2)|list", "slice(3, 0)|list", "center(20)", "center(7)", "wordcount", "truncate(9)",
               "truncate(9, true)", "truncate(8, end='~')", "truncate(3, leeway=0)"]
    tests = ["defined", "undefined", "none", "string", "number", "integer", "float", "boolean", "mapping", "iterable", "sequence", "callable",
             "true", "false", "odd", "even", "divisibleby 3", "equalto 3", "eq 'a'", "in [1, 'a', none]", "sameas none", "sameas true", "lower", "upper", "escaped", "gt 2", "le 1.5"]
    methods = ["strip()", "strip('a')", "lstrip()", "rstrip()", "split()", "split(',')", "split(',', 1)", "rsplit(',', 1)", "splitlines()", "startswith('h')",
               "endswith(('t', 'e'))", "replace('a', 'b')", "upper()", "lower()", "title()", "capitalize()", "find('l')", "count('l')", "format(1, 2)",
               "items()", "keys()", "values()", "get('a')", "get('zz', 5)", "index(1)", "count(1)", "isdigit()", "join(['x', 'y'])"]
    ops = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", ">=", "in", "not in", "and", "or"]
    exprs = []
    for f in filters: exprs.append("v|" + f)
    for t in tests: exprs.append("v is " + t); exprs.append("v is not " + t)
    for m in methods: exprs.append("v." + m)
    for o in ops: exprs.append("v %s w" % o)
    exprs += ["v[0]", "v[-1]", "v[1:]", "v[::-1]", "v[::2]", "v[1:-1]", "v['a']", "v.a", "v.role", "v|length > 2", "-v", "not v",
              "v if w else 'no'", "(v, w)", "[v, w]", "{'k': v}", "v ~ w ~ 1", "v|string ~ w|string", "'%s-%s' % (v, w)", "'%d' % v",
              "v|tojson|safe + '<'", "'<'|safe + v|string", "namespace(a=v).a", "dict(a=v)", "range(3)|list", "v|items", "v|map('upper')",
              "'{}'.format(v)", "'{0!r}'.format(v)", "v|trim|length", "v is divisibleby(2)", "v|selectattr('a', 'gt', 1)|list",
              "v|unique(attribute='a')|list", "v|min(attribute='a')", "v|sort(attribute='a', reverse=true)"]
    ctxs = []
    for i in range(8):
        ctxs.append({"name": "c%d" % i, "context": {"v": random.choice(vals), "w": random.choice(vals)}})
    ctxs.append({"name": "undef", "context": {"w": 1}})
    return {"contexts": ctxs, "templates": ["{{ " + e + " }}" for e in exprs]}


def whitespace():
    random.seed(1)
    texts = ["", " ", "  ", "\n", "\n\n", " \n ", "\t", "x", " x ", "\n  ", "  \n", "a\n  ", "\r\n", " \t\n", "\u00a0", "\u3000\n"]
    def mod(): return random.choice(["", "", "-", "+"])
    def endmod(): return random.choice(["", "", "-", "+"])
    def ws(): return random.choice(["", " ", "  ", "\n"])
    def block(depth=0):
        parts = []
        for _ in range(random.randint(1, 5)):
            r = random.random()
            parts.append(random.choice(texts))
            if r < 0.2:
                parts.append("{{%s%s'v'%s%s}}" % (random.choice(["", "-", "+"]), ws(), ws(), random.choice(["", "-"])))
            elif r < 0.35:
                parts.append("{#%s c %s#}" % (mod(), endmod()))
            elif r < 0.55 and depth < 3:
                parts.append("{%%%s if %s %s%%}" % (mod(), random.choice(["true", "false", "x", "not x"]), endmod()))
                parts.append(block(depth + 1))
                if random.random() < 0.5:
                    parts.append("{%%%s else %s%%}" % (mod(), endmod()))
                    parts.append(block(depth + 1))
                parts.append("{%%%s endif %s%%}" % (mod(), endmod()))
            elif r < 0.7 and depth < 3:
                parts.append("{%%%s for i in [1, 2] %s%%}" % (mod(), endmod()))
                parts.append(block(depth + 1))
                parts.append("{%%%s endfor %s%%}" % (mod(), endmod()))
            elif r < 0.8:
                parts.append("{%%%s set y = 1 %s%%}" % (mod(), endmod()))
            elif r < 0.9 and depth < 3:
                parts.append("{%%%s macro m%d() %s%%}" % (mod(), depth, endmod()))
                parts.append(block(depth + 1))
                parts.append("{%%%s endmacro %s%%}{{ m%d() }}" % (mod(), endmod(), depth))
            else:
                parts.append("{%%%s set z %s%%}" % (mod(), endmod()) + block(3) + "{%%%s endset %s%%}[{{ z }}]" % (mod(), endmod()))
        return "".join(parts)
    templates = []
    while len(templates) < 150:
        t = block() + random.choice(["", "\n", "\n\n", " \n"])
        if len(t) <= 400:  # small cases: a failure is readable
            templates.append(t)
    return {"contexts": [{"name": "x", "context": {"x": True}}, {"name": "nox", "context": {}}], "templates": templates}


def main():
    for name, data in [("expressions", expressions()), ("whitespace", whitespace()),
                       ("statements", {"contexts": STATEMENT_CONTEXTS, "templates": STATEMENTS})]:
        with open(os.path.join(HERE, name + ".json"), "w", encoding="utf-8", newline="\n") as f:
            json.dump(data, f, ensure_ascii=False, indent=0)
            f.write("\n")


if __name__ == "__main__":
    main()
