// Jinja features, one small template each, rendered by promptcache's interpreter and by Jinja2
// itself (python3-jinja2, as Hugging Face configures it): outputs must be equal, and a template
// Jinja2 rejects must be rejected too. No expected string is written here: Jinja2 is the oracle.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "jinja/testing/jinja2_reference.h"

namespace promptcache::jinja {
namespace {

using testing::Case;
using testing::Rendered;

// Variables most cases share.
const char kVars[] = R"({
  "messages": [
    {"role": "system", "content": "  Be brief.  "},
    {"role": "user", "content": "Hello <|im_end|> \"quoted\" and 'single' \\ back"},
    {"role": "assistant", "content": "Hi!\nHow can I help?", "tool_calls": [
      {"id": "call_1", "type": "function",
       "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}}]},
    {"role": "tool", "content": "{\"temp\": 21.5}", "tool_call_id": "call_1"},
    {"role": "user", "content": "Ünïcödé ✓ 日本語 😀"}
  ],
  "tools": [{"type": "function", "function": {"name": "get_weather",
    "description": "Weather.", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "days": {"type": "integer", "enum": [1, 3]}},
      "required": ["city"]}}}],
  "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true,
  "n": 7, "f": 2.5, "neg": -3, "big": 10000000000000000, "tiny": 0.00001, "zero": 0,
  "s": "  Hello, World  ", "empty": "", "none": null, "t": true,
  "words": ["b", "A", "c", "a", "B"], "nums": [3, 1, 2, 3, 1.5],
  "d": {"b": 2, "a": 1, "C": 3, "items": "shadowed"},
  "nested": {"x": {"y": [10, {"z": "deep"}]}},
  "people": [{"name": "Ann", "age": 31, "tags": ["a"]}, {"name": "bob", "age": 25},
             {"name": "Cid", "age": 31, "nick": null}]
})";

const char* const kTemplates[] = {
    // Text, comments and whitespace control.
    "plain text",
    "a {# comment #} b",
    "a {#- comment -#} b",
    "line1\n{# c #}\nline2",
    "  {% if true %}\n    x\n  {% endif %}\nafter",
    "  {%- if true -%}  x  {%- endif -%}  y",
    "{% if true %}  \n  x\n{% endif %}",
    "  {%+ if true %}x{% endif %}",
    "{% if true +%}\nx{% endif %}",
    "\n  {{ 'v' }}  \n  {{- 'w' -}}  \n",
    "a\r\nb\rc\n",
    "trailing newline\n\n",
    "{% raw %}{{ not rendered }} {% if %}{% endraw %}",
    "  {% raw %}\n  x {{ y }}\n  {% endraw %}\nz",
    "{{ '{{' }} and {{ \"}}\" }}",
    "{% for m in messages %}\n  {{ m.role }}\n{% endfor %}\n",
    "{%- for m in messages -%}\n  [{{ m.role }}]\n{%- endfor %}",
    // Literals and operators.
    "{{ 1 }} {{ 1.0 }} {{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.1 + 0.2 }} {{ 1/3 }}",
    "{{ 2 ** 10 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 4 / 2 }}",
    "{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** -1 }} {{ 1_000 + 0x10 + 0o7 + 0b11 }}",
    "{{ n + f }} {{ n * 'ab' }} {{ 'ab' * 3 }} {{ [1, 2] * 2 }} {{ [1] + [2, 3] }}",
    "{{ 'a' ~ 1 ~ none ~ true ~ undefined_var ~ [1] }}",
    "{{ -n }} {{ +f }} {{ - - n }} {{ not t }} {{ not not t }}",
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }}",
    "{{ [1, 2] < [1, 3] }} {{ (1, 2) == (1, 2) }} {{ [1] == (1,) }} {{ none == none }}",
    "{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'a' in d }} {{ 'z' not in d }} {{ 1 in nums }}",
    "{{ t and 'yes' }} {{ none or 'fallback' }} {{ 0 or '' }} {{ empty and x }}",
    "{{ 'a' if t }}|{{ 'a' if not t }}|{{ 'a' if not t else 'b' }}",
    "{{ 'x' if n > 5 else 'y' if n > 2 else 'z' }}",
    "{{ (1, 2) }} {{ (1,) }} {{ () }} {{ [] }} {{ {} }} {{ {'a': 1, 'b': [none, true]} }}",
    "{{ 'it\\'s' }} {{ \"say \\\"hi\\\"\" }} {{ 'tab\\there' }} {{ 'nl\\nx' }} {{ '\\u00e9\\x41' "
    "}}",
    "{{ 'adjacent' 'strings' }} {{ 'a\\\\b' }} {{ '\\d' }}",
    "{{ [ 'x', \"it's\", 'q\"', 'both\\'\"', '\\n\\t\\x01' ] }}",
    "{{ true }} {{ True }} {{ none }} {{ None }} {{ false }}",
    "{{ 1, 2 }}",
    "{{ {'a': {'b': 1}} }}",
    // Variables, attributes, items, slices.
    "{{ messages[0].role }} {{ messages[0]['content'] }} {{ messages[-1].content }}",
    "{{ nested.x.y[1].z }} {{ nested['x']['y'][0] }} {{ nested.x.y.0 }}",
    "{{ d.items is callable }}|{{ d['items'] }}|{{ d.get('a') }}|{{ d.get('q', 'dflt') }}|"
    "{{ d.get('q') }}",
    "[{{ missing }}] [{{ d.missing }}] [{{ none.attr }}] [{{ n.attr }}] [{{ s[100] }}]",
    "{{ s[2:7] }}|{{ s[:3] }}|{{ s[-4:] }}|{{ s[::2] }}|{{ s[::-1] }}|{{ s[5:1] }}|{{ s[1:-1:3] }}",
    "{{ nums[1:] }} {{ nums[:-1] }} {{ nums[::-1] }} {{ nums[10:] }} {{ (1, 2, 3)[1:] }}",
    "{{ messages[4].content[3:6] }} {{ messages[4].content[-1] }} {{ messages[4].content|length }}",
    "{{ missing.attr }}",
    "{{ missing['k'] }}",
    "{{ missing + 1 }}",
    "{{ 1 + missing }}",
    "{{ missing() }}",
    "{{ 'a' + 1 }}",
    "{{ 1 + 'a' }}",
    "{{ 1 / 0 }}",
    "{{ none + 1 }}",
    "{{ [1] + (2,) }}",
    "{{ 'a' < 1 }}",
    "{% for x in none %}{% endfor %}",
    "{% for x in 5 %}{% endfor %}",
    "{{ 1 in 'abc' }}",
    // Statements.
    "{% if n > 10 %}a{% elif n > 5 %}b{% elif n > 1 %}c{% else %}d{% endif %}",
    "{% for x in [] %}x{% else %}empty{% endfor %}",
    "{% for x in nums if x > 1 %}{{ loop.index }}/{{ loop.length }}:{{ x }} {% endfor %}",
    "{% for m in messages %}{{ loop.index0 }},{{ loop.revindex }},{{ loop.revindex0 }},"
    "{{ loop.first }},{{ loop.last }};{% endfor %}",
    "{% for w in words %}{{ loop.previtem }}>{{ w }}>{{ loop.nextitem }} {% endfor %}",
    "{% for w in words %}{{ loop.cycle('odd', 'even') }} {% endfor %}",
    "{% for w in [1, 1, 2, 2, 1] %}{% if loop.changed(w) %}{{ w }}{% endif %}{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{% for k in d %}{{ k }}{% endfor %} {% for c in 'héllo' %}[{{ c }}]{% endfor %}",
    "{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}",
    "{% for a, b in [(1, 2, 3)] %}{% endfor %}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}"
    "{% endif %}{{ i }}{% endfor %}",
    "{% for i in range(3) %}{% for j in range(3) %}{% if j > i %}{% break %}{% endif %}{{ i }}{{ j "
    "}}"
    " {% endfor %}{% endfor %}",
    "{% for row in [[1, 2], [3]] %}{% for x in row %}{{ loop.index }}{{ x }}{% endfor %}|"
    "{{ loop.index }}{% endfor %}",
    "{{ range(5)|list }} {{ range(2, 10, 3)|list }} {{ range(5, 0, -2)|list }}",
    "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}",
    "{% for i in [1, 2] %}{% if loop.first %}{% set c = 'a' %}{% endif %}[{{ c }}]{% endfor %}",
    "{% if true %}{% set q = 1 %}{% endif %}{{ q }}",
    "{% set ns = namespace(count=0, items=[]) %}{% for m in messages %}"
    "{% set ns.count = ns.count + 1 %}{% set ns.items = ns.items + [m.role] %}{% endfor %}"
    "{{ ns.count }} {{ ns.items }} {{ ns.missing }}",
    "{% set ns = namespace() %}{% set ns.a = 5 %}{{ ns.a }} {{ ns }}",
    "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set t = 1, %}{{ t }}",
    "{% set x = 5 %}{% set x.y = 1 %}",
    "{% set block %}  inner {{ n }}  {% endset %}[{{ block }}]",
    "{% set block | trim | upper %}  inner {{ n }}  {% endset %}[{{ block }}]",
    "{% filter upper %}shout {{ s }}{% endfilter %}",
    "{% filter trim %}   padded   {% endfilter %}|",
    "{% with a = 1, b = n %}{{ a + b }}{% endwith %}[{{ a }}]",
    "{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}"
    "{{ greet('Ann') }} {{ greet('Bob', '?') }} {{ greet(punct='.', name='Cid') }} {{ greet() }}",
    "{% macro m(a, b=a ~ '2') %}{{ a }}{{ b }}{% endmacro %}{{ m('x') }}",
    "{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=2) }}",
    "{% macro m() %}{{ y }}{% endmacro %}{% set y = 1 %}{{ m() }}{% set y = 2 %}{{ m() }}",
    "{% macro m() %}{{ y }}{% endmacro %}{% for i in [1] %}{% set y = 3 %}{{ m() }}{% endfor %}",
    "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro "
    "%}"
    "{{ fact(10) }}",
    "{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}B{% endmacro %}{{ a() }}",
    "{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}inside {{ n }}{% endcall %}",
    "{% macro list(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}"
    "{% call(x) list([1, 2]) %}[{{ x }}]{% endcall %}",
    "{% macro m() %}x{% endmacro %}{{ m }}",
    "{% print 'a', n %}",
    "{% generation %}gen {{ n }}{% endgeneration %}",
    "{{ m() }}{% macro m() %}x{% endmacro %}",
    // Filters.
    "{{ s|trim }}|{{ s|trim('  Hd') }}|{{ s|upper }}|{{ s|lower }}|{{ s|capitalize }}|{{ s|title "
    "}}",
    "{{ 'hello world-wide (foo) [bar]'|title }} {{ \"they're bill's\"|title }}",
    "{{ s|replace('l', 'L') }} {{ s|replace('l', 'L', 2) }} {{ 'ab'|replace('', '-') }}",
    "{{ s|length }} {{ nums|length }} {{ d|length }} {{ missing|length }} {{ nums|count }}",
    "{{ words|join(', ') }} {{ nums|join }} {{ people|join('/', attribute='name') }}",
    "{{ missing|default('dflt') }} {{ empty|default('dflt') }} {{ empty|default('dflt', true) }} "
    "{{ none|d('x') }} {{ none|default('x', boolean=true) }}",
    "{{ nums|first }} {{ nums|last }} {{ 'abc'|first }} {{ 'abc'|last }} {{ []|first }}",
    "{{ 'abc'|list }} {{ d|list }} {{ missing|list }} {{ (1, 2)|list }}",
    "{{ '42'|int }} {{ ' 42 '|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ 3.9|int }}",
    "{{ '0x1A'|int(base=16) }} {{ '1_000'|int }} {{ true|int }} {{ none|int }}",
    "{{ '3.5'|float }} {{ 'x'|float }} {{ 2|float }} {{ '1e3'|float }}",
    "{{ d|items|list }} {{ missing|items|list }}",
    "{{ d|dictsort }} {{ d|dictsort(true) }} {{ d|dictsort(by='value', reverse=true) }}",
    "{{ words|sort }} {{ words|sort(case_sensitive=true) }} {{ words|sort(reverse=true) }}",
    "{{ people|sort(attribute='age')|map(attribute='name')|list }}",
    "{{ people|sort(attribute='age', reverse=true)|map(attribute='name')|join(',') }}",
    "{{ words|unique|list }} {{ words|unique(case_sensitive=true)|list }} {{ nums|unique|list }}",
    "{{ people|map(attribute='age')|unique|list }} {{ people|unique(attribute='age')|list }}",
    "{{ people|selectattr('age', 'equalto', 31)|map(attribute='name')|list }}",
    "{{ people|rejectattr('age', '==', 31)|map(attribute='name')|list }}",
    "{{ people|selectattr('nick', 'defined')|list|length }} {{ people|selectattr('tags')|list }}",
    "{{ people|selectattr('nick', 'none')|map(attribute='name')|list }}",
    "{{ messages|selectattr('role', 'equalto', 'user')|list|length }}",
    "{{ nums|select('odd')|list }} {{ nums|reject('odd')|list }} {{ [0, 1, '', 'a']|select|list }}",
    "{{ nums|select('greaterthan', 1)|list }} {{ nums|select('in', [1, 3])|list }}",
    "{{ people|map(attribute='nick', default='?')|list }} {{ words|map('upper')|list }}",
    "{{ nums|map('string')|join('-') }} {{ [' a ', 'b ']|map('trim')|list }}",
    "{{ nums|min }} {{ nums|max }} {{ words|min }} {{ words|max(case_sensitive=true) }} "
    "{{ people|max(attribute='age') }} {{ []|max }}",
    "{{ nums|sum }} {{ people|sum(attribute='age') }} {{ [[1], [2]]|sum(start=[]) }}",
    "{{ nums|reverse|list }} {{ 'abc'|reverse }} {{ -5|abs }} {{ f|abs }}",
    "{{ 2.675|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 7|round }} {{ 2.1|round(0, 'ceil') }} "
    "{{ 2.9|round(method='floor') }}",
    "{{ 'x'|center(7) }}|{{ 'xy'|center(7) }}|{{ 'abc'|truncate(9) }}|"
    "{{ 'hello world foo bar baz'|truncate(15) }}|{{ 'hello world foo bar baz'|truncate(15, true) "
    "}}",
    "{{ 'one two  three'|wordcount }} {{ '%s-%d-%.2f'|format('a', 3, 2.5) }} "
    "{{ '%(a)s!'|format(a='x') }}",
    "{{ 'abc'|batch(2)|list }} {{ [1, 2, 3]|batch(2, 0)|list }}",
    "{{ '<a href=\"x\">&</a>'|escape }} {{ '<b>'|e }} {{ '<i>'|safe }} {{ ('<i>'|safe) + '<b>' }}",
    "{{ 'x'|safe + '<' + 'y' }} {{ '<' + 'x'|safe }} {{ ('a'|safe ~ '<') }} {{ '<'|safe|escape }}",
    "{{ n|string + 'x' }} {{ none|string }} {{ d|string }} {{ [1, 'a']|string }}",
    "{{ s|indent }}|{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb\\n\\nc\\n'|indent(2, true, true) }}|"
    "{{ 'a\\nb'|indent('> ', first=true) }}",
    "{{ 'x'|attr('upper') is callable }} {{ d|attr('a') }} {{ d|attr('keys') is defined }}",
    // tojson as transformers registers it.
    "{{ tools|tojson }}",
    "{{ tools|tojson(indent=4) }}",
    "{{ tools[0].function|tojson(indent=2, sort_keys=true) }}",
    "{{ messages|tojson }}",
    "{{ {'f': f, 'big': big, 'tiny': tiny, 'neg': neg, 'n': none, 't': t, 'e': [], 'o': {}}"
    "|tojson(indent=2) }}",
    "{{ 'ünï \"q\" \\\\ \\n \\t \\x01 😀'|tojson }} {{ 'ünï 😀'|tojson(ensure_ascii=true) }}",
    "{{ {1: 'a', 2.5: 'b', true: 'c', none: 'd'}|tojson }}",
    "{{ nums|tojson(separators=(',', ':')) }} {{ d|tojson(indent='\\t') }}",
    "{{ (1, 'a')|tojson }} {{ 1e100|tojson }} {{ -0.0|tojson }}",
    "{{ missing|tojson }}",
    "{{ namespace()|tojson }}",
    // Tests.
    "{{ n is defined }} {{ missing is defined }} {{ missing is undefined }} {{ none is none }} "
    "{{ n is not none }} {{ not missing is defined }}",
    "{{ s is string }} {{ n is string }} {{ d is mapping }} {{ nums is mapping }} "
    "{{ nums is sequence }} {{ s is sequence }} {{ d is sequence }} {{ n is sequence }}",
    "{{ nums is iterable }} {{ s is iterable }} {{ missing is iterable }} {{ n is iterable }} "
    "{{ none is iterable }}",
    "{{ n is number }} {{ f is number }} {{ t is number }} {{ s is number }} {{ n is integer }} "
    "{{ t is integer }} {{ f is float }} {{ t is boolean }} {{ n is boolean }}",
    "{{ t is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }}",
    "{{ n is odd }} {{ n is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }}",
    "{{ n is equalto 7 }} {{ n is eq(7) }} {{ n is ne 7 }} {{ n is gt 3 }} {{ n is ge 7 }} "
    "{{ n is lt 3 }} {{ n is le 7 }} {{ n is greaterthan 1 }} {{ n is lessthan 1 }}",
    "{{ 'a' is in 'abc' }} {{ 3 is in nums }} {{ 'ABC' is upper }} {{ 'abc' is lower }} "
    "{{ 'aBc' is lower }} {{ '123' is lower }}",
    "{{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }} {{ none is sameas none }} "
    "{{ d is sameas d }}",
    "{{ missing is callable }} {{ range is callable }} {{ n is callable }} {{ 'x'|safe is escaped "
    "}} "
    "{{ 'x' is escaped }}",
    // String methods.
    "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ s.strip(' H') "
    "}}",
    "{{ 'a,b,,c'.split(',') }} {{ ' a  b c '.split() }} {{ 'a b c'.split(' ', 1) }} "
    "{{ 'a b c'.rsplit(' ', 1) }} {{ ' a  b c '.split(None, 1) }} {{ ' a  b c '.rsplit(None, 1) }}",
    "{{ 'a\\nb\\r\\nc'.splitlines() }} {{ 'x'.split('x') }} {{ ''.split() }} {{ ''.split(',') }}",
    "{{ s.startswith('  He') }} {{ s.endswith('d  ') }} {{ s.startswith(('x', '  H')) }}",
    "{{ s.replace('l', '') }} {{ s.upper() }} {{ s.lower() }} {{ s.title() }} {{ s.capitalize() }}",
    "{{ 'hello world'.title() }} {{ \"it's 2nd-place\".title() }} {{ 'ABC def'.swapcase() }}",
    "{{ s.find('l') }} {{ s.rfind('l') }} {{ s.find('zz') }} {{ s.count('l') }} {{ s.index('W') }}",
    "{{ messages[4].content.find('✓') }} {{ 'ab'.count('') }}",
    "{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'a1'.isalnum() }} {{ ' '.isspace() }} "
    "{{ 'ab'.islower() }} {{ 'AB'.isupper() }} {{ ''.isdigit() }}",
    "{{ '-'.join(['a', 'b']) }} {{ ', '.join(words) }} {{ 'x'.center(5, '*') }} {{ 'x'.ljust(3) "
    "}}| "
    "{{ 'x'.rjust(3) }} {{ '42'.zfill(5) }} {{ '-42'.zfill(5) }}",
    "{{ 'prefix_x'.removeprefix('prefix_') }} {{ 'x.txt'.removesuffix('.txt') }} "
    "{{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }}",
    "{{ '{} and {}'.format('a', 'b') }} {{ '{1}{0}'.format('a', 'b') }} {{ '{x}!'.format(x=1) }} "
    "{{ '{:>5}|{:<5}|{:^5}'.format('a', 'b', 'c') }} {{ '{:.2f} {:5d} {:05d}'.format(3.14159, 42, "
    "7) }}",
    "{{ '{0[0]} {0[1]}'.format(nums) }} {{ '{!r}'.format('q') }} {{ '{{literal}}'.format() }}",
    "{{ '%s and %s' % ('a', 'b') }} {{ '%d%%' % 50 }} {{ '%5.1f|%-5s|%05d' % (3.14159, 'ab', 42) "
    "}} "
    "{{ '%r' % 'x' }} {{ '%x %o %e' % (255, 8, 12345.678) }}",
    "{{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ nums.index(2) }} "
    "{{ nums.count(3) }}",
    "{{ messages.append }}",
    "{{ messages.append(1) }}",
    "{{ d.update({}) }}",
    "{{ 'abc'.nomethod() }}",
    // Globals.
    "{{ dict(a=1, b='x') }} {{ dict() }}",
    "{% set j = joiner(', ') %}{% for w in words %}{{ j() }}{{ w }}{% endfor %}",
    "{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}",
    "{{ strftime_now('%Y-%m-%d %H:%M %A %B %j') }} {{ strftime_now('%d %b %Y') }}",
    "{{ raise_exception('Custom failure: ' ~ n) }}",
    "{% if n > 5 %}{{ raise_exception('too many') }}{% endif %}after",
    "{{ range(200000)|length }}",
    // Undefined behaviour.
    "{{ missing }}|{{ missing|upper }}|{{ missing|trim }}|{% for x in missing %}x{% endfor %}|"
    "{{ missing|join }}|{{ missing ~ 'a' }}|{{ missing|string }}|{{ missing is none }}",
    "{{ missing == missing }} {{ missing != none }} {{ missing in [1] }} {{ 1 in missing }}",
    "{% if missing %}t{% else %}f{% endif %} {% if not missing %}yes{% endif %}",
    "{{ missing|first }}|{{ [missing] }}|{{ missing|tojson }}",
    "{{ (nums|first).x }}|{{ loop }}",
    "{{ nested.x.missing.deeper }}",
    // More corners.
    "{%- macro m(x) -%}\n  [{{ x }}]\n{%- endmacro -%}\n{{ m(1) }}{{ m(2) }}",
    "a\n  {# comment #}\nb\n  {%- if true %}c{% endif %}",
    "{% macro m() %}{% set inner = 1 %}{{ inner }}{% endmacro %}{{ m() }}[{{ inner }}]",
    "{% set ns = namespace(v=1) %}{% macro bump() %}{% set ns.v = ns.v + 1 %}{% endmacro %}"
    "{{ bump() }}{{ bump() }}{{ ns.v }}",
    "{% for k, v in d|dictsort if v > 1 %}{{ loop.index }}/{{ loop.length }}{{ k }}{% endfor %}",
    "{{ 'é' < 'z' }} {{ 'Z' < 'a' }} {{ 'ab' < 'abc' }} {{ [1, 'a'] == [1, 'a'] }}",
    "{{ '%s'|format(none) }} {{ '%s %s'|format(1, [2]) }}",
    "{{ namespace() is mapping }} {{ loop is defined }} {{ messages|length > 1 }}",
    "{{ (s|trim|length > 3) and (s|lower).startswith('hello') }}",
    "{{ [1, 2, 3][1:]|join(',') }} {{ (nums|sort)[0] }} {{ nums|sort|first }}",
    "{{ '\\u2028 \\u00a0 x'|tojson }} {{ '\\u2028'|length }}",
    "{{ 1e300 * 1e10 }} {{ -1e300 * 1e10 }} {{ 10 / 3 * 3 }} {{ 2 ** 0.5 }} {{ -1 ** 2 }}",
    "{{ not 1 == 2 }} {{ 1 if 0 else 2 if 0 else 3 }} {{ (1).__class__ }}",
    "{{ none is none is none }}",
    "{% set x = [1, 2] %}{{ x.append(3) }}",
    "{% for c in 'a1b2' if c is string and c.isalpha() %}{{ c }}{% else %}none{% endfor %}",
    "{% for a in [1, 2] if a > 5 %}{{ a }}{% else %}all filtered{% endfor %}",
    "{{ namespace(a=1).a }} {{ d|dictsort|first }} {{ 'a\\tb\\nc'|indent(2) }} {{ 'abc'|center(2) "
    "}}",
    "{{ '%.3e|%g|%G' % (12345.6789, 0.0001, 1e20) }} {{ '%c%c' % (72, 105) }}",
    "{{ '\\u3000 x \\u3000'|trim }}|{{ ' x\\u00a0y'.split() }}|{{ '\\u2003a'.strip() }}",
    "{{ 'ÉCOLE'|lower }} {{ 'straße'|upper }} {{ 'straße'|title }} {{ 'ΣΑΣ ΟΔΟΣ.'|lower }} "
    "{{ 'ΣΑΣ'|capitalize }} {{ 'привет'|upper }} {{ 'ÀÉÎ őű'.swapcase() }}",
    "{{ 'hello'[10:20] }}|{{ 'hello'[-100:2] }}|{{ [1, 2][5] }}|{{ 'abc'[1:2:0] }}",
    "{{ messages[0] }}",
    "{{ tools[0].function.parameters|tojson(sort_keys=true, indent=1) }}",
    "{{ {'a': 1}|tojson(indent=0) }} {{ [[]]|tojson(indent=2) }} {{ [{}]|tojson(indent=2) }}",
    "{% set a = {'x': [1, {'y': none}]} %}{{ a }} {{ a|string|length }}",
    "{{ range(3) }} {{ range(1, 10, 2) }} {{ range(3)|length }} {{ range(3)[1] }} {{ range(0) }}",
    "{{ range(3)|tojson }}",
    "{{ words|map('upper')|tojson }}",
    "{{ words|map('upper')|length }}",
    "{{ (words|select)[0] }}|{{ words|select|first }}|{{ words|select|list|last }}",
    "{% set g = words|map('upper') %}{{ g|list }}{{ g|list }}",
    "{{ words|map('upper') is iterable }} {{ words|map('upper') is sequence }} "
    "{{ (words|map('upper')) is none }} {{ [] | map('upper') | list }} {{ none|map('x')|list }}",
    "{{ nums|reverse|list }} {{ nums|reverse|join }} {{ d|reverse|list }}",
    "{{ nums|batch(2)|list }} {{ d|items|map('first')|list }}",
    "{{ 'Hello'.format() }} {{ '{:>8.3f}|{:<4}|{:^6}|{:+d}'.format(3.14159, 'ab', 'mid', 5) }}",
    "{{ '{0} {0}'.format('x') }} {{ '{a.b}'.format(a={'b': 1}) }}",
    "{% set t = (1, 2) %}{{ t[0] }}{{ t|length }}{{ t + (3,) }}{{ t * 2 }}",
    "{{ 3 * 'ab' }} {{ 'ab' * 0 }} {{ 'ab' * -1 }} {{ [1] * 0 }} {{ true + true }}",
    "{{ 5 // 0 }}",
    "{{ 5 % 0 }}",
    "{{ 2 ** 62 }} {{ -2 ** 63 }}",
    "{{ 'abc' ~ 1.5 ~ none ~ [none] ~ {'k': 'v'} }}",
    "{% if messages %}{{ messages|length }}{% endif %}{% if not [] %}E{% endif %}"
    "{% if {} %}x{% else %}D{% endif %}{% if '0' %}S{% endif %}{% if 0.0 %}z{% endif %}",
    "{{ messages|selectattr('tool_calls', 'defined')|map(attribute='tool_calls')|first|tojson }}",
    "{{ messages[2].tool_calls[0].function.arguments|items|list }}",
    "{% for m in messages %}{% if m.role == 'tool' %}{{ loop.previtem.role }}{% endif %}{% endfor "
    "%}",
    "{{ loop.index }}|{{ caller }}|{{ varargs }}",
    "{% macro m(a, b) %}{{ a }}-{{ b }}{% endmacro %}{{ m(*[1, 2]) }} {{ m(**{'a': 3, 'b': 4}) }}",
    "{% macro m() %}{{ caller('x') }}{% endmacro %}{% call(v) m() %}<{{ v }}>{% endcall %}",
    "{{ 300 is sameas 300 }} {{ 3 is sameas 3 }} {{ none is sameas none }}",
    // Syntax errors Jinja2 also rejects.
    "{% if %}",
    "{% for x in %}{% endfor %}",
    "{% if true %}unclosed",
    "{% endif %}",
    "{{ 1 + }}",
    "{{ x|nosuchfilter }}",
    "{{ x is nosuchtest }}",
    "{% unknowntag %}",
    "{{ 'unterminated }}",
    "{# unterminated comment",
    "{{ (1 }}",
    "{{ [1) }}",
    "{% macro m(a=1, b) %}{% endmacro %}",
    "{% break %}",
    // A macro's or call block's body is outside the loop it is written in.
    "{% for x in [1] %}{% macro m() %}{% break %}{% endmacro %}{% endfor %}",
    "{% macro f() %}{{ caller() }}{% endmacro %}"
    "{% for x in [1] %}{% call f() %}{% continue %}{% endcall %}{% endfor %}",
    "{% set 1 = 2 %}",
    "{% include 'other.html' %}",
    "{{ a is defined is defined }}",
};

TEST(JinjaFeatures, MatchJinja2) {
  const nlohmann::ordered_json vars = nlohmann::ordered_json::parse(kVars);
  std::vector<Case> cases;
  for (const char* t : kTemplates) cases.push_back({t, vars});
  Result<std::vector<Rendered>> reference = testing::RenderWithJinja2(cases);
  ASSERT_TRUE(reference.ok()) << reference.status().message();
  int same = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Rendered ours = testing::RenderWithPromptcache(cases[i]);
    const Rendered& ref = (*reference)[i];
    SCOPED_TRACE("template: " + cases[i].source);
    EXPECT_EQ(ours.ok, ref.ok) << "ours: " << (ours.ok ? ours.text : ours.error)
                               << "\njinja2: " << (ref.ok ? ref.text : ref.error);
    if (ours.ok && ref.ok) {
      EXPECT_EQ(ours.text, ref.text);
    }
    same += ours.ok == ref.ok && (!ours.ok || ours.text == ref.text);
  }
  std::printf("%d of %zu templates render as Jinja2 does\n", same, cases.size());
}

}  // namespace
}  // namespace promptcache::jinja
