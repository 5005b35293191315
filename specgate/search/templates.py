"""Small construct templates: one or two Jinja constructs of the kind the construct
corpus covers (string methods, filters, tests, loops, slices, namespaces) applied
to a random context.

Each template is an output expression or a loop over context variables ``s`` (a
string), ``xs`` (a list of strings), ``n`` (an integer), ``d`` (a mapping) and ``b``
(a boolean): a random pick of constructs on random values, so a construct an
engine gets wrong on some value (``title`` on ``It's``, ``tojson`` on ``<``,
``length`` on astral text, ``strip`` with a character set) is found and then
shrunk to the construct and the few characters that show it.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from specgate.search.conversations import CONTENT_FRAGMENTS

#: Expressions over the context; each is a construct the construct corpus covers.
EXPRESSIONS: tuple[str, ...] = (
    "s", "s | trim", "s | upper", "s | lower", "s | title", "s | capitalize", "s | length", "s | tojson",
    "s | string", "s | reverse", "s | first", "s | last", "s | replace('a', 'b')", "s | default('x')",
    "s.strip()", "s.strip('x ')", "s.lstrip()", "s.rstrip('\\n')", "s.split()", "s.split(' ')",
    "s.split(' ', 1)", "s.rsplit(None, 1)", "s.startswith('<')", "s.endswith(('a', ' '))", "s.upper()",
    "s.lower()", "s.title()", "s.replace(' ', '_', 1)", "s.find('a')", "s.count(' ')", "s[1:]", "s[:-1]",
    "s[::-1]", "s[0] if s else ''", "s is string", "s is defined", "'a' in s", "s ~ n", "s * 2",
    "xs", "xs | length", "xs | join(', ')", "xs | join", "xs | tojson", "xs | first", "xs | last",
    "xs | sort | list", "xs | unique | list", "xs | reverse | list", "xs | map('upper') | list",
    "xs | select | list", "xs[1:]", "xs | selectattr('0') | list", "n", "n + 1", "n // 2", "n % 3", "n | string",
    "n is number", "n is even", "-n", "n | abs", "b", "not b", "b | string", "b | tojson", "d", "d | tojson",
    "d | length", "d.get('k')", "d.get('z', 'none')", "d['k']", "d.keys() | list", "d.items() | list",
    "d | dictsort", "d is mapping", "none is none", "x is undefined", "[1, 2] | sum", "range(n % 4) | list",
)  # fmt: skip

STATEMENTS: tuple[str, ...] = (
    "{%- for x in xs %}{{ loop.index }}:{{ x }}{% if not loop.last %},{% endif %}{% endfor %}",
    "{% for x in xs %}{{ loop.index0 }}{{ loop.first }}{{ loop.length }}{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{% for x in xs if x %}[{{ x }}]{% else %}empty{% endfor %}",
    "{% set ns = namespace(c=0) %}{% for x in xs %}{% set ns.c = ns.c + 1 %}{% endfor %}{{ ns.c }}",
    "{% if s %}yes{% elif n %}n{% else %}no{% endif %}",
    "{% for x in xs %}{{ x }}{% if loop.last %}!{% endif %}{% endfor %}",
    "{{- s -}}\n  {{ n }}",
    "{% for x in xs %}{{ loop.previtem | default('-') }}{% endfor %}",
)

_string = st.lists(
    st.sampled_from((*CONTENT_FRAGMENTS, "x", "a", " ", "xa", "It's", "hello world", "ǅ", "İ", "ß", "ﬁ"))
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=2),
    max_size=4,
).map("".join)

_context = st.fixed_dictionaries(
    {
        "s": _string,
        "xs": st.lists(_string, max_size=3),
        "n": st.integers(-5, 10**6),
        "d": st.fixed_dictionaries({"k": _string}, optional={"b": st.integers(0, 3), "a": _string}),
        "b": st.booleans(),
    }
)

_part = st.sampled_from(EXPRESSIONS).map(lambda e: "{{ " + e + " }}") | st.sampled_from(STATEMENTS)


def construct_inputs() -> st.SearchStrategy[dict[str, Any]]:
    """``{"template", "context"}``: one to three constructs separated by ``|``."""
    template = st.lists(_part, min_size=1, max_size=3).map("|".join)
    return st.fixed_dictionaries({"template": template, "context": _context})
