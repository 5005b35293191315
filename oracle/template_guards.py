"""The checks a sandboxed template's operators, calls, filters and tests pass before they run.

``oracle.template_sandbox`` routes every operator (``+ * ** %``), call, filter and
test through these. Each reads its arguments — never the result, which may be a
C-level computation that cannot be interrupted once started — and refuses, naming
the construct, what would exceed ``oracle.template_bounds.Limits``: an integer
argument larger than ``max_chars``, a power or product wider than ``max_int_bits``,
a repetition, concatenation, join, replacement or split past the size bounds, text
a filter would build (estimated from its input and arguments), elements a
comparing filter or test would visit. ``range``, ``lipsum`` and ``strftime_now``
are replaced by bounded versions of themselves.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sized
from typing import Any

import jinja2
import jinja2.runtime
import jinja2.utils

from oracle.template_bounds import (
    SandboxRefusal,
    bounded_iterator,
    check_comparable,
    check_result,
    format_size,
    printf_size,
    step_size,
    walk,
)
from oracle.template_bounds import limits as _limits
from oracle.template_bounds import step as _step
from oracle.template_env import TemplateDict, TemplateNamespace, strftime_now

# ---------------------------------------------------------------------------
# operators and calls


def check_int_arguments(args: Iterable[Any], construct: str) -> None:
    """Integer arguments bound the work of width/count/indent parameters."""
    limit = _limits().max_chars
    for arg in args:
        if isinstance(arg, int) and not isinstance(arg, bool) and abs(arg) > limit:
            raise SandboxRefusal(construct, f"integer argument {arg} exceeds the size bound ({limit:,})")


def binop_precheck(op: str, left: Any, right: Any) -> None:
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


def callable_name(obj: Any) -> str:
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


def call_precheck(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    name = callable_name(obj)
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
# bounded globals


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


_STRFTIME_WIDTH = re.compile(r"%[-_0^#EO]*\d")
STRFTIME_EXPANSION = 32  # characters one conversion can print, at most (%c, a long weekday name)


def bounded_strftime_now(format: str) -> str:
    """transformers' ``strftime_now``; a conversion with a width (``%9999Y``, a glibc
    extension) or a format too long for the output bound is refused before it runs."""
    if isinstance(format, str):
        if _STRFTIME_WIDTH.search(format):
            raise SandboxRefusal("call 'strftime_now'", "a width in a strftime conversion is refused")
        if len(format) * STRFTIME_EXPANSION > _limits().max_chars:
            raise SandboxRefusal("call 'strftime_now'", f"format of {len(format):,} characters is too long")
    return strftime_now(format)


bounded_strftime_now.__name__ = "strftime_now"


# ---------------------------------------------------------------------------
# filters and tests

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


def guarded_filter(name: str, func: Any) -> Any:
    """``func`` behind a step, an argument check before, and a size check after (an
    iterator result is bounded item by item, whoever consumes it)."""
    construct = f"filter '{name}'"
    leading = 2 if getattr(func, "jinja_pass_arg", None) else 1  # (context,) value

    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _step(construct)
        check_int_arguments((*args[leading:], *kwargs.values()), construct)
        if len(args) >= leading:
            step_size(args[leading - 1], construct)  # the filter reads its input
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


def guarded_test(name: str, func: Any) -> Any:
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


def item_construct(argument: Any) -> str:
    """``item 'role'`` for a short string or number key; a large or nested key is not
    printed into the refusal (its text may be what is being bounded)."""
    if isinstance(argument, (str, int)) and not isinstance(argument, bool) and len(str(argument)) <= 40:
        return f"item {argument!r}"
    return "item"
