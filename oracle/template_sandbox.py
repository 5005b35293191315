"""The jinja2 environment chat templates run in: transformers' configuration, plus bounds.

Chat templates arrive inside downloaded model files, so a template is untrusted
code. transformers renders them in an ``ImmutableSandboxedEnvironment`` with
``trim_blocks``, ``lstrip_blocks``, the ``loopcontrols`` extension, a
``{% generation %}`` tag, its own ``tojson`` (no HTML escaping, non-ASCII kept),
``raise_exception``, ``strftime_now``, a restricted ``dict`` and a ``namespace``
that rejects underscore names. That configuration is reproduced here exactly, so
every template a real model ships renders to the same bytes.

jinja2's sandbox stops attribute escapes, but it does not bound work: a template
may loop ``range(100000)`` inside ``range(100000)``, double a string forty times,
compute ``9**9**9`` or print a namespace of namespaces doubled forty times. Because
a C-level operation (a big-integer power, a gigabyte string, ``str`` of a nested
object, comparing two deep lists, Python's own compiler) cannot be interrupted once
started, the bounds are enforced *before* each expensive primitive and at every step
the template takes (the checks themselves are in ``template_bounds``):

* before parsing, the source is bounded in characters, tokens and nesting of blocks
  and brackets; after parsing, in expression depth — so jinja2's recursive parser and
  Python's compiler never see a template they would fail on;
* a static pass over the parsed template refuses dunder names, ``include`` /
  ``import`` / ``extends``, and routes every ``for`` iterable, every ``~``
  concatenation, every comparison operand and every computed dict key through
  guards (an AST rewrite, so the generated code cannot skip them);
* every attribute access, call, filter, intercepted operator (``+ * ** %``) and loop
  iteration is a *step*: the step count, the wall clock and the growth of resident
  memory are checked against the render's budget (see ``Limits``);
* operator, call and filter arguments are checked before the operation runs: what
  would be printed is walked (bounded) and must be template data — not a function,
  class or generator, whose text is module paths and addresses — of at most
  ``Limits.max_chars``; widths given as strings (``indent=' ' * N``), format widths
  and the arguments format fields print, items a lazy filter yields, elements a
  comparison or hash visits are all bounded; no integer argument larger than
  ``max_chars`` and no integer result wider than ``Limits.max_int_bits``.

Where transformers' sandbox merely *hides* an unsafe attribute (it returns an
undefined value that prints as an empty string), this environment refuses: a
template that reaches for ``__class__`` is hostile, and saying so is the point.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sized
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes as nodes
import jinja2.runtime
import jinja2.utils
from jinja2.lexer import TokenStream
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from oracle.template_bounds import (
    DEFAULT_LIMITS,
    Budget,
    Limits,
    SandboxRefusal,
    StaticRefusal,
    _budget,
    bounded_iterator,
    check_comparable,
    check_printable,
    check_result,
    check_template_source,
    check_tree_depth,
    format_size,
    printf_size,
    walk,
)
from oracle.template_bounds import limits as _limits
from oracle.template_bounds import step as _step

__all__ = ["DEFAULT_LIMITS", "Limits", "SandboxRefusal", "StaticRefusal", "TemplateSandbox"]


# ---------------------------------------------------------------------------
# argument checks, run before a value is built or printed


def check_int_arguments(args: Iterable[Any], construct: str) -> None:
    """Integer arguments bound the work of width/count/indent parameters."""
    limit = _limits().max_chars
    for arg in args:
        if isinstance(arg, int) and not isinstance(arg, bool) and abs(arg) > limit:
            raise SandboxRefusal(construct, f"integer argument {arg} exceeds the size bound ({limit:,})")


def _binop_precheck(op: str, left: Any, right: Any) -> None:
    limits = _limits()
    construct = f"operator '{op}'"
    if op == "**" and isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
        if right * math.log2(abs(left)) > limits.max_int_bits:
            raise SandboxRefusal(construct, f"{left} ** {right} exceeds {limits.max_int_bits:,} bits")
    elif op == "*":
        if isinstance(left, int) and isinstance(right, int):
            if left.bit_length() + right.bit_length() > limits.max_int_bits:
                raise SandboxRefusal(construct, f"integer product exceeds {limits.max_int_bits:,} bits")
        elif isinstance(left, (str, list, tuple)) or isinstance(right, (str, list, tuple)):
            seq, n = (left, right) if isinstance(left, (str, list, tuple)) else (right, left)
            bound = limits.max_chars if isinstance(seq, str) else limits.max_items
            if isinstance(n, int) and len(seq) * max(n, 0) > bound:
                raise SandboxRefusal(
                    construct, f"repetition to {len(seq) * n:,} items exceeds the size bound"
                )
    elif op == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
        if len(left) + len(right) > limits.max_chars:
            raise SandboxRefusal(construct, "concatenation exceeds the size bound")
    elif op == "%" and isinstance(left, str):
        printf_size(left, right, construct)


def _callable_name(obj: Any) -> str:
    """The name a template calls ``obj`` by (what a refusal names)."""
    if isinstance(obj, jinja2.runtime.Macro):
        return obj.name
    if obj is TemplateNamespace:
        return "namespace"
    if isinstance(obj, TemplateDict):
        return "dict"
    return getattr(obj, "__name__", type(obj).__name__)


# Every character ``str.split()`` splits at (the largest is U+3000).
_WHITESPACE = "".join(c for c in map(chr, range(0x3001)) if c.isspace())
_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def _split_count(text: str, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> int:
    """How many pieces ``text.split/rsplit/splitlines(...)`` can make, at most, counted
    without splitting (an 8 MB string split at every space is 2.6 M strings, 190 MB)."""
    if name == "splitlines":
        return sum(text.count(c) for c in _LINE_BREAKS) + 1
    sep = args[0] if args else kwargs.get("sep")
    if isinstance(sep, str) and sep:
        return text.count(sep) + 1
    return sum(text.count(c) for c in _WHITESPACE) + 1


def _str_method_precheck(owner: str, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    """The size of what a ``str`` method builds, from its arguments, before it runs."""
    construct = f"call '{name}'"
    bounds = _limits()
    limit = bounds.max_chars
    if name == "join" and args and isinstance(args[0], (list, tuple)):
        size = sum(walk(a, construct, limit, printing=True) for a in args[0])
        if size + len(owner) * max(len(args[0]) - 1, 0) > limit:
            raise SandboxRefusal(construct, "joined string exceeds the size bound")
    elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        count = owner.count(args[0]) if args[0] else len(owner) + 1
        if len(args) > 2 and isinstance(args[2], int) and args[2] >= 0:
            count = min(count, args[2])
        if len(owner) + count * max(len(args[1]) - len(args[0]), 0) > limit:
            raise SandboxRefusal(construct, "replacement result exceeds the size bound")
    elif name == "expandtabs" and args and isinstance(args[0], int) and len(owner) * args[0] > limit:
        raise SandboxRefusal(construct, "expanded string exceeds the size bound")
    elif name == "translate" and args:
        table = args[0]
        values = (
            table.values()
            if isinstance(table, Mapping)
            else table
            if isinstance(table, (list, tuple))
            else ()
        )
        widest = max((len(v) for v in values if isinstance(v, str)), default=1)
        if len(owner) * widest > limit:
            raise SandboxRefusal(construct, "translated string exceeds the size bound")
    elif (
        name in ("split", "rsplit", "splitlines")
        and len(owner) > bounds.max_items
        and _split_count(owner, name, args, kwargs) > bounds.max_items
    ):
        raise SandboxRefusal(construct, f"more than {bounds.max_items:,} pieces")


def _call_precheck(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    name = _callable_name(obj)
    construct = f"call '{name}'"
    check_int_arguments((*args, *kwargs.values()), construct)
    owner = getattr(obj, "__self__", None)
    format_of = getattr(getattr(obj, "__wrapped__", None), "__self__", None)  # jinja2's wrapped str.format
    if name in ("format", "format_map") and isinstance(format_of, str):
        if name == "format_map":
            args, kwargs = (), args[0] if args and isinstance(args[0], Mapping) else {}
        format_size(format_of, args, kwargs, construct)
    elif isinstance(owner, str):
        _str_method_precheck(owner, name, args, kwargs)
    else:  # the arguments may be compared or hashed (a namespace only stores its keyword values)
        for arg in (*args, *(kwargs.values() if obj is not TemplateNamespace else ())):
            check_comparable(arg, construct)


# ---------------------------------------------------------------------------
# the static pass: refuse, then rewrite loops, concatenations, comparisons and
# computed dict keys to go through guards

LOOP_GUARD = "sandbox_loop_guard"
CONCAT_GUARD = "sandbox_concat_guard"
OPERAND_GUARD = "sandbox_operand_guard"
COMPARISON_SYMBOLS = {"eq": "==", "ne": "!=", "gt": ">", "gteq": ">=", "lt": "<", "lteq": "<=", "in": "in"}
COMPARISON_SYMBOLS["notin"] = "not in"


def _is_dunder(name: Any) -> bool:
    return isinstance(name, str) and name.startswith("__")


def _guarded(node: nodes.Expr, guard: str, *args: Any) -> nodes.Expr:
    """``node`` passed through the filter ``guard`` (with constant ``args``)."""
    consts: list[nodes.Expr] = [nodes.Const(a) for a in args]
    return nodes.Filter(node, guard, consts, [], None, None).set_lineno(node.lineno)


class _Guard(NodeTransformer):
    """Refuses what can only be hostile and routes loops, ``~``, comparisons and
    computed dict keys (which Python compares or hashes in C) through guards."""

    def visit_Getattr(self, node: nodes.Getattr) -> nodes.Node:
        node = self.generic_visit(node)  # inner accesses first: the first escape step is named
        if _is_dunder(node.attr):
            raise _static_refusal(node, f"attribute '{node.attr}'", "dunder attribute access is refused")
        return node

    def visit_Getitem(self, node: nodes.Getitem) -> nodes.Node:
        node = self.generic_visit(node)
        if isinstance(node.arg, nodes.Const) and _is_dunder(node.arg.value):
            raise _static_refusal(node, f"item '{node.arg.value}'", "dunder attribute access is refused")
        return node

    def visit_For(self, node: nodes.For) -> nodes.Node:
        node = self.generic_visit(node)
        node.iter = _guarded(node.iter, LOOP_GUARD)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        node = self.generic_visit(node)
        return _guarded(nodes.List(node.nodes).set_lineno(node.lineno), CONCAT_GUARD)

    def visit_Compare(self, node: nodes.Compare) -> nodes.Node:
        node = self.generic_visit(node)
        if not isinstance(node.expr, nodes.Const):
            node.expr = _guarded(node.expr, OPERAND_GUARD, f"operator '{COMPARISON_SYMBOLS[node.ops[0].op]}'")
        for operand in node.ops:
            if not isinstance(operand.expr, nodes.Const):
                operand.expr = _guarded(
                    operand.expr, OPERAND_GUARD, f"operator '{COMPARISON_SYMBOLS[operand.op]}'"
                )
        return node

    def visit_Pair(self, node: nodes.Pair) -> nodes.Node:
        node = self.generic_visit(node)
        if not isinstance(node.key, nodes.Const):
            node.key = _guarded(node.key, OPERAND_GUARD, "dict key")
        return node

    def _no_loading(self, node: nodes.Node) -> nodes.Node:
        tag = type(node).__name__.lower().replace("fromimport", "from-import")
        raise _static_refusal(node, f"tag '{tag}'", "loading other templates is not available")

    visit_Include = visit_Import = visit_FromImport = visit_Extends = _no_loading


def _static_refusal(node: nodes.Node, construct: str, detail: str) -> StaticRefusal:
    return StaticRefusal(construct, detail, node.lineno)


def _loop_guard(iterable: Any) -> Iterator[Any]:
    for item in iterable:
        _step("for loop")
        yield item


def _concat_guard(operands: list[Any]) -> str:
    limit = _limits().max_chars
    size = 0
    for operand in operands:
        size += len(operand) if type(operand) is str else walk(operand, "operator '~'", limit, printing=True)
        if size > limit:
            raise SandboxRefusal("operator '~'", "concatenation exceeds the size bound")
    return "".join(map(str, operands))


def _operand_guard(value: Any, construct: str) -> Any:
    """A comparison operand or dict key: comparing or hashing it is bounded work."""
    check_comparable(value, construct)
    return value


# ---------------------------------------------------------------------------
# transformers' helpers (same behaviour, written out here)


def raise_exception(message: str) -> None:
    """What a template calls to reject a conversation; the message must surface."""
    raise jinja2.exceptions.TemplateError(message)


def tojson(
    x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
) -> str:
    """transformers' ``tojson``: plain ``json.dumps`` (jinja2's escapes ``<>&'``)."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


_STRFTIME_WIDTH = re.compile(r"%[-_0^#EO]*\d")
STRFTIME_EXPANSION = 32  # characters one conversion can print, at most (%c, a long weekday name)


def strftime_now(format: str) -> str:
    """transformers' ``strftime_now``; a conversion with a width (``%9999Y``, a glibc
    extension) or a format too long for the output bound is refused before it runs."""
    if isinstance(format, str):
        if _STRFTIME_WIDTH.search(format):
            raise SandboxRefusal("call 'strftime_now'", "a width in a strftime conversion is refused")
        if len(format) * STRFTIME_EXPANSION > _limits().max_chars:
            raise SandboxRefusal("call 'strftime_now'", f"format of {len(format):,} characters is too long")
    return datetime.now().strftime(format)


class TemplateDict:
    """``dict`` for templates: callable and ``fromkeys``, nothing else to reach through."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class TemplateNamespace(jinja2.utils.Namespace):
    """``namespace()`` that refuses underscore-prefixed names, as transformers' does."""

    def __init__(*args: Any, **kwargs: Any) -> None:
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}. "
                "Please rename the attribute."
            )


class GenerationTag(jinja2.ext.Extension):
    """``{% generation %}…{% endgeneration %}`` marks assistant text for training masks;
    when rendering it is transparent (transformers' ``AssistantTracker``, inactive)."""

    tags = {"generation"}  # noqa: RUF012 - jinja2's extension API

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    @staticmethod
    def _render_body(caller: Any) -> str:
        return caller()


def safe_range(*args: int) -> range:
    """``range`` with jinja2's sandbox bound on its length."""
    check_int_arguments(args, "call 'range'")
    rng = range(*args)
    if len(rng) > _limits().max_range:
        raise SandboxRefusal(
            "call 'range'", f"range of {len(rng):,} items exceeds the sandbox bound ({_limits().max_range:,})"
        )
    return rng


safe_range.__name__ = "range"  # the name templates call it by, and refusals name


def bounded_lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    if n * max > _limits().max_lipsum_words:
        raise SandboxRefusal("call 'lipsum'", f"{n} paragraphs of up to {max} words exceed the bound")
    return jinja2.utils.generate_lorem_ipsum(n=n, html=html, min=min, max=max)


bounded_lipsum.__name__ = "lipsum"


# ---------------------------------------------------------------------------
# the environment


# Filters that turn their input and arguments into text: all of it must be printable
# template data, and the text they build is estimated before they run.
TEXT_FILTERS = frozenset(
    {
        "string", "pprint", "e", "escape", "forceescape", "safe", "upper", "lower", "title",
        "capitalize", "trim", "striptags", "wordcount", "truncate", "center", "indent", "wordwrap",
        "urlize", "urlencode", "replace", "format", "join", "xmlattr",
    }
)  # fmt: skip
# Text filters whose work per character is Python code or a regex building a list
# (~1 µs and ~60 bytes a character), which no step interrupts: a smaller input bound.
SLOW_TEXT_FILTERS = frozenset(
    {"striptags", "title", "wordcount", "urlize", "wordwrap", "urlencode", "pprint"}
)
# Filters that compare or hash the elements of their input.
COMPARING_FILTERS = frozenset({"sort", "unique", "min", "max", "groupby", "dictsort"})
# Tests that compare their operands.
COMPARING_TESTS = frozenset(
    {
        "eq",
        "equalto",
        "==",
        "ne",
        "!=",
        "lt",
        "<",
        "le",
        "<=",
        "gt",
        ">",
        "ge",
        ">=",
        "greaterthan",
        "lessthan",
        "in",
    }
)


def _argument(
    args: tuple[Any, ...], kwargs: Mapping[str, Any], position: int, name: str, default: Any
) -> Any:
    return kwargs.get(name, args[position] if len(args) > position else default)


def _width(value: Any) -> int:
    """A width given as a number or, as jinja2 and ``json`` also accept, as a string."""
    if isinstance(value, str):
        return len(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _text_size(
    name: str, value: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], construct: str
) -> int:
    """Characters the text filter ``name`` can produce from ``value`` and its arguments."""
    limit = _limits().max_chars
    size = sum(walk(v, construct, limit, printing=True) for v in (value, *args, *kwargs.values()))
    text = value if isinstance(value, str) else ""
    if name == "join" and isinstance(value, Sized):
        size += len(str(_argument(args, kwargs, 0, "d", ""))) * len(value)
    elif name == "indent":  # the indentation is repeated on every line
        size += (text.count("\n") + 1) * _width(_argument(args, kwargs, 0, "width", 4))
    elif name == "wordwrap":  # wrapstring between lines, at most one line per character
        size += (len(text) + 1) * _width(_argument(args, kwargs, 2, "wrapstring", "\n"))
    elif name == "urlize":  # each word may become a link carrying every argument
        size += (text.count(" ") + text.count("\n") + 1) * (64 + sum(map(_width, (*args, *kwargs.values()))))
    elif name in ("e", "escape", "forceescape", "xmlattr"):
        size *= 6  # '"' -> '&#34;'
    elif name == "urlencode":
        size *= 12  # a 4-byte UTF-8 character -> '%XX' x 4
    elif name == "pprint":
        size += walk(value, construct, limit, indent=8, per_item=2)
    elif name == "format" and isinstance(value, str):
        size += printf_size(value, kwargs or tuple(args), construct)
    elif name == "replace" and isinstance(value, str) and len(args) >= 2:
        old, new = str(args[0]), str(args[1])
        count = value.count(old) if old else len(value) + 1
        size += count * max(len(new) - len(old), 0)
    return size


def _tojson_size(value: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], construct: str) -> int:
    """``json.dumps`` repeats ``indent`` (a number or a string) per nesting level on
    every line and puts a separator after every element."""
    indent = _width(_argument(args, kwargs, 1, "indent", None))
    separators = _argument(args, kwargs, 2, "separators", None)
    per_item = sum(map(_width, separators)) if isinstance(separators, (list, tuple)) else 2
    return walk(
        value, construct, _limits().max_chars, indent=indent, per_item=per_item + (1 if indent else 0)
    )


def _sum_copies(items: Any, start: Any) -> int:
    """Elements ``sum`` copies when it adds lists: each addition copies the running
    total, so 100,000 one-item lists cost 5 billion copies in one C call."""
    running = len(start) if isinstance(start, (list, tuple)) else 0
    copies = 0
    for item in items if isinstance(items, (list, tuple)) else ():
        if isinstance(item, (list, tuple)):
            running += len(item)
            copies += running
    return copies


def _filter_precheck(name: str, value: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    construct = f"filter '{name}'"
    for arg in (*args, *kwargs.values()):  # ``attr`` prints its name, ``round`` hashes its method…
        check_comparable(arg, construct)
    if name == "sum":
        bound = _limits().max_items * 10
        if _sum_copies(value, _argument(args, kwargs, 1, "start", 0)) > bound:
            raise SandboxRefusal(construct, f"summing these lists copies more than {bound:,} elements")
        return
    limit = _limits().max_chars
    if name in COMPARING_FILTERS:  # their keys are copies (lower-cased strings): count the text too
        size = sum(walk(v, construct, limit) for v in (value, *args, *kwargs.values()))
    elif name == "tojson":
        size = _tojson_size(value, args, kwargs, construct)
    elif name in TEXT_FILTERS:
        size = _text_size(name, value, args, kwargs, construct)
    else:
        return
    if size > limit:
        raise SandboxRefusal(construct, f"result larger than the output bound ({limit:,} characters)")
    slow_limit = _limits().max_slow_filter_chars
    if name in SLOW_TEXT_FILTERS and walk(value, construct, slow_limit) > slow_limit:
        raise SandboxRefusal(
            construct,
            f"input longer than {slow_limit:,} characters (this filter works per character in Python)",
        )


def _guarded_filter(name: str, func: Any) -> Any:
    """``func`` behind a step, an argument check before, and a size check after (an
    iterator result is bounded item by item, whoever consumes it)."""
    construct = f"filter '{name}'"
    leading = 2 if getattr(func, "jinja_pass_arg", None) else 1  # (context,) value

    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _step(construct)
        check_int_arguments((*args[leading:], *kwargs.values()), construct)
        if len(args) >= leading:
            if name in ("join", "sum") and not isinstance(args[leading - 1], (str, Sized)):
                args = (
                    *args[: leading - 1],
                    list(args[leading - 1]),
                    *args[leading:],
                )  # count what is joined
            _filter_precheck(name, args[leading - 1], args[leading:], kwargs)
        result = func(*args, **kwargs)
        if isinstance(result, Iterator):
            return bounded_iterator(result, construct)
        check_result(result, construct)
        return result

    return guarded


def _guarded_test(name: str, func: Any) -> Any:
    """A test behind a step; its arguments — and for a comparing test (``is eq``,
    ``is in``…) the tested value too — are bounded first."""
    construct = f"test '{name}'"
    first = 0 if name in COMPARING_TESTS else 1  # ``messages is defined`` need not walk messages

    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _step(construct)
        for operand in (*args[first:], *kwargs.values()):
            check_comparable(operand, construct)
        return func(*args, **kwargs)

    return guarded


def _item_construct(argument: Any) -> str:
    """``item 'role'`` for a short string or number key; a large or nested key is not
    printed into the refusal (its text may be what is being bounded)."""
    if isinstance(argument, (str, int)) and not isinstance(argument, bool) and len(str(argument)) <= 40:
        return f"item {argument!r}"
    return "item"


class TemplateSandbox(ImmutableSandboxedEnvironment):
    """transformers' chat-template environment with step, time, memory and size bounds."""

    intercepted_binops = frozenset({"+", "*", "**", "%"})

    def __init__(self) -> None:
        super().__init__(
            trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
        )
        self.filters["tojson"] = tojson
        self.filters = {name: _guarded_filter(name, f) for name, f in self.filters.items()}
        self.filters[LOOP_GUARD] = _loop_guard
        self.filters[CONCAT_GUARD] = _concat_guard
        self.filters[OPERAND_GUARD] = _operand_guard
        self.tests = {name: _guarded_test(name, test) for name, test in self.tests.items()}
        self.globals["raise_exception"] = raise_exception
        self.globals["strftime_now"] = strftime_now
        self.globals["dict"] = TemplateDict()
        self.globals["namespace"] = TemplateNamespace
        self.globals["range"] = safe_range
        self.globals["lipsum"] = bounded_lipsum
        self.finalize = self._finalize_output

    @staticmethod
    def _finalize_output(value: Any) -> Any:
        check_printable(value, "output '{{ … }}'")
        return value

    # -- parsing: bounds on the source, static refusals and guard insertion
    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tokens = check_template_source(self, source, DEFAULT_LIMITS)
        parser = Parser(self, source, name, filename)
        parser.stream = TokenStream(iter(tokens), name, filename)  # lexed once, by the check
        try:
            tree = parser.parse()
        except RecursionError:  # a nesting the token scan does not count (``not not … x``)
            raise StaticRefusal(
                "nesting depth", "nested deeper than the parser can follow", parser.stream.current.lineno
            ) from None
        check_tree_depth(tree, DEFAULT_LIMITS)
        return _Guard().visit(tree)

    # -- runtime hooks: every one is a step
    def getattr(self, obj: Any, attribute: str) -> Any:
        _step(f"attribute '{attribute}'")
        if isinstance(attribute, str) and attribute.startswith("_"):
            raise SandboxRefusal(f"attribute '{attribute}'", "underscore attribute access is refused")
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _step(_item_construct(argument))
        if isinstance(argument, str) and argument.startswith("_"):
            try:
                return obj[argument]
            except (TypeError, LookupError):
                raise SandboxRefusal(f"item '{argument}'", "underscore attribute access is refused") from None
        check_comparable(argument, "item")  # a container key is hashed (or printed into an error)
        return super().getitem(obj, argument)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _step(f"operator '{operator}'")
        _binop_precheck(operator, left, right)
        result = super().call_binop(context, operator, left, right)
        check_result(result, f"operator '{operator}'")
        return result

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        name = _callable_name(__obj)
        _step(f"call '{name}'")
        _call_precheck(__obj, args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        if isinstance(result, Iterator):
            return bounded_iterator(result, f"call '{name}'")
        check_result(result, f"call '{name}'")
        return result

    # -- rendering under a budget
    def render(
        self, template: jinja2.Template, context: dict[str, Any], limits: Limits = DEFAULT_LIMITS
    ) -> str:
        """Render ``template`` with ``context`` under ``limits``; the output size is
        checked chunk by chunk as it is produced."""
        messages = context.get("messages")
        budget = Budget(limits, len(messages) if isinstance(messages, (list, tuple)) else 0)
        token = _budget.set(budget)
        try:
            out: list[str] = []
            size = 0
            chunks = template.root_render_func(template.new_context(context))
            for chunk in chunks:
                size += len(chunk)
                if size > limits.max_chars:
                    line = template.get_corresponding_lineno(chunks.gi_frame.f_lineno)  # where it paused
                    raise SandboxRefusal(
                        "output", f"rendered output exceeds {limits.max_chars:,} characters", line
                    )
                out.append(chunk)
            return "".join(out)
        finally:
            _budget.reset(token)
            budget.close()
