"""The bounds a chat template runs under, and the checks that enforce them *before* work is done.

A C-level operation — ``str()`` of a nested object, ``json.dumps``, ``'%2000000000s' % x``,
comparing or hashing two deep structures, Python's own compiler — cannot be
interrupted once started, so every bound here is checked on the *inputs* of such an
operation, by code that is itself bounded:

* ``walk`` estimates what printing (or comparing, hashing) a value would cost,
  visiting at most ``Limits.max_items`` elements and ``Limits.max_value_depth``
  levels — a namespace of namespaces doubled forty times is refused after 100,000
  visits, not expanded to 2**40; it also refuses to print objects whose text is
  Python internals (functions, classes, generators: module paths and addresses);
* ``printf_size`` / ``format_size`` read a format string's widths, precisions and
  the arguments its fields print, so ``'{0:{1}}'.format('x', '2000000000')`` is
  refused before the 2 GB string exists;
* ``check_template_source`` bounds a template before jinja2 parses it: its size in
  characters and tokens, and the nesting of its blocks and brackets (jinja2's
  parser recurses per level and Python's compiler refuses more than 20 nested
  loops); ``check_tree_depth`` bounds the parsed tree before it is compiled;
* ``Budget`` bounds a render's steps, wall time and resident-memory growth.

Refusals are ``SandboxRefusal``s naming the construct; ``StaticRefusal``s (found
before rendering) also carry the template line.
"""

from __future__ import annotations

import contextvars
import ctypes
import os
import re
import string
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import jinja2
import jinja2.nodes as nodes
import jinja2.runtime
import jinja2.utils
from jinja2.lexer import Token
from jinja2.sandbox import MAX_RANGE


@dataclass(frozen=True)
class Limits:
    """Bounds on one template: its source, and one render.

    ``max_chars`` (8 M characters ≈ 2 M tokens) is far beyond any Qwen context, so
    no real prompt meets it. Work scales with the conversation, so the step and time
    budgets are a base plus an allowance per message. Steps count work, not calls
    (``MACRO_CALL_STEPS``, ``CHARS_PER_STEP``), so the step budget alone bounds CPU
    time: 500,000 steps are ~0.3 s of CPU here, whether spent on loop iterations or on
    macro calls (two million calls once took 29 s on a slower machine). Real renders
    are far inside: 350 messages with 20 tools take 3,700-6,000 steps through the
    Qwen2.5, DeepSeek-R1 and Qwen3 templates (~50 ms), four messages of 7 MB ~27,000,
    the render gate's conversations at most 342. The time budget (``0.5 s + 5 ms`` a
    message) stops a hostile template sooner on a fast machine; without it every
    hostile template of the corpus is stopped by a budget counted in work within
    0.4 s of CPU here (tests/oracle/test_template_hostile_bounds.py), so which budget
    fires first may depend on the machine, the bound does not.

    ``max_items`` and ``max_value_depth`` bound what one walk of a value (before it
    is printed, compared or hashed) may visit: ~0.1 s at the bound. Memory growth
    during a render is held to ``max_memory_bytes`` (128 MB, checked every few
    hundred steps and after every large value; one operation builds at most one
    bounded value before the next check), so a hostile template's peak stays under
    256 MB (the hostile corpus peaks at 131 MB above where the render started).

    The source bounds are far above every real template and low enough that compiling
    a template at the bound takes a fraction of a second. The templates the suite
    renders (Qwen2.5, Qwen3, DeepSeek-R1-Distill) are 2-4 KB, 337-645 tokens, with
    blocks nested 4-5 deep, brackets 2 and expression trees 11-18 levels; the largest
    published Qwen template is ~10 KB (~1,600 tokens). jinja2 compiles ~30,000 tokens
    a second (an ``elif`` chain ~10,000), so 6,000 tokens compile well under a second.
    """

    max_chars: int = 8_000_000
    max_steps: int = 500_000
    max_seconds: float = 0.5
    steps_per_message: int = 5_000
    seconds_per_message: float = 0.005
    max_int_bits: int = 100_000
    max_items: int = 100_000
    max_value_depth: int = 200
    max_range: int = MAX_RANGE  # jinja2's own sandbox bound, kept for parity
    max_lipsum_words: int = 100_000
    max_memory_bytes: int = 128 * 2**20  # memory growth during one render
    max_slow_filter_chars: int = 1_000_000  # input of a filter working per character in Python
    max_template_chars: int = 256 * 1024
    max_template_tokens: int = 6_000
    max_block_depth: int = 16  # Python refuses a 21st nested loop in one function
    max_bracket_depth: int = 32
    max_tree_depth: int = 50  # jinja2's optimizer is cubic in a chain's depth (95 levels: 1 s)


class SandboxRefusal(Exception):
    """A bound or a security rule stopped the template. ``construct`` names what;
    ``lineno`` is the template line when known where the refusal is raised (else
    it is read from the traceback)."""

    def __init__(self, construct: str, detail: str, lineno: int | None = None) -> None:
        super().__init__(f"{construct}: {detail}")
        self.construct = construct
        self.detail = detail
        self.lineno = lineno


class StaticRefusal(SandboxRefusal):
    """Refused before rendering anything; ``lineno`` is the template line."""


DEFAULT_LIMITS = Limits()


# ---------------------------------------------------------------------------
# the render budget: steps, time, memory


_MALLINFO2_FIELDS = (
    "arena",
    "ordblks",
    "smblks",
    "hblks",
    "hblkhd",
    "usmblks",
    "fsmblks",
    "uordblks",
    "fordblks",
)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (*_MALLINFO2_FIELDS, "keepcost")]


def _find_mallinfo2() -> Any:
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2  # glibc >= 2.33
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _Mallinfo2
    return mallinfo2


_MALLINFO2 = _find_mallinfo2()


def _malloc_in_use() -> int | None:
    """Bytes malloc has handed out and not had back (glibc), None elsewhere. Unlike
    resident memory it grows when a render reuses memory the process already holds."""
    if _MALLINFO2 is None:
        return None
    info = _MALLINFO2()
    return info.uordblks + info.hblkhd


def _resident_bytes(statm_fd: int | None) -> int | None:
    """Current resident memory (Linux ``/proc/self/statm``); None where unavailable."""
    if statm_fd is None:
        return None
    return int(os.pread(statm_fd, 128, 0).split()[1]) * _PAGE_SIZE


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
MEMORY_CHECK_EVERY = 256  # steps; a read of /proc/self/statm costs ~10 µs
BIG_RESULT = 1 << 16  # characters or items: a result this large checks memory at once
# A step is one unit of work (see ``Limits``): an access, call, filter, test, intercepted
# operator or loop iteration is one; a macro call costs as much as ~30 loop iterations
# (jinja2 builds a frame and a context), so it counts ``MACRO_CALL_STEPS``; an operation
# reading or building a string or list counts a step per ``CHARS_PER_STEP`` characters
# or items more.
MACRO_CALL_STEPS = 32
CHARS_PER_STEP = 1024


class Budget:
    """The work one render of ``n_messages`` may do: steps, wall-clock time, and how
    far memory may grow — the larger of the growth of the process's resident memory
    and of what malloc has handed out (checked every ``MEMORY_CHECK_EVERY`` steps and
    after every large result; Linux/glibc, elsewhere only the size bounds hold memory
    down). ``close()`` it: it holds ``/proc/self/statm`` open."""

    def __init__(self, limits: Limits, n_messages: int = 0) -> None:
        self.limits = limits
        self.steps = 0
        self._next_memory_check = MEMORY_CHECK_EVERY
        self.max_steps = limits.max_steps + limits.steps_per_message * n_messages
        self.seconds = limits.max_seconds + limits.seconds_per_message * n_messages
        self.deadline = time.monotonic() + self.seconds
        try:
            self._statm: int | None = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self._statm = None
        self.resident_at_start = _resident_bytes(self._statm)
        self.malloc_at_start = _malloc_in_use()

    def close(self) -> None:
        if self._statm is not None:
            os.close(self._statm)
            self._statm = None

    def step(self, construct: str, weight: int = 1) -> None:
        """Count ``weight`` steps of work (see ``Limits``); refuse past a budget."""
        self.steps += weight
        if self.steps > self.max_steps:
            raise SandboxRefusal(construct, f"render step budget exceeded ({self.max_steps:,} steps)")
        if time.monotonic() > self.deadline:
            raise SandboxRefusal(construct, f"render time budget exceeded ({self.seconds:.2f} s)")
        if self.steps >= self._next_memory_check:
            self._next_memory_check = self.steps + MEMORY_CHECK_EVERY
            self.check_memory(construct)

    def memory_growth(self) -> int:
        growth = 0
        if self.resident_at_start is not None:
            growth = _resident_bytes(self._statm) - self.resident_at_start
        if self.malloc_at_start is not None:
            growth = max(growth, _malloc_in_use() - self.malloc_at_start)
        return growth

    def check_memory(self, construct: str) -> None:
        if self.memory_growth() > self.limits.max_memory_bytes:
            raise SandboxRefusal(
                construct,
                f"render memory budget exceeded (memory grew by more than "
                f"{self.limits.max_memory_bytes >> 20} MB)",
            )


_budget: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("template_budget", default=None)


def current_budget() -> Budget | None:
    return _budget.get()


def step(construct: str, weight: int = 1) -> None:
    budget = _budget.get()
    if budget is not None:
        budget.step(construct, weight)


def step_size(value: Any, construct: str) -> None:
    """The work of reading or building ``value``: a step per ``CHARS_PER_STEP``
    characters of a string or items of a list (none for a small one)."""
    if isinstance(value, (str, list, tuple)) and len(value) >= CHARS_PER_STEP:
        step(construct, len(value) // CHARS_PER_STEP)


def limits() -> Limits:
    budget = _budget.get()
    return budget.limits if budget is not None else DEFAULT_LIMITS


def check_result(value: Any, construct: str) -> None:
    """A cheap bound on a freshly built value: its length, not a walk; building it is
    counted as work (``step_size``), and a large one also checks the render's memory at
    once."""
    bounds = limits()
    if isinstance(value, str) and len(value) > bounds.max_chars:
        raise SandboxRefusal(
            construct, f"string longer than the output bound ({bounds.max_chars:,} characters)"
        )
    if isinstance(value, (list, tuple)) and len(value) > bounds.max_items:
        raise SandboxRefusal(construct, f"list longer than the item bound ({bounds.max_items:,})")
    step_size(value, construct)
    if isinstance(value, (str, list, tuple)) and len(value) >= BIG_RESULT and (budget := _budget.get()):
        budget.check_memory(construct)


def bounded_iterator(iterator: Iterator[Any], construct: str) -> Iterator[Any]:
    """``iterator`` with a step per item and at most ``Limits.max_items`` items, so that
    whatever consumes it (``|list``, ``sorted``, ``str.join``) is bounded too."""
    max_items = limits().max_items
    for count, item in enumerate(iterator, 1):
        if count > max_items:
            raise SandboxRefusal(construct, f"more than {max_items:,} items")
        step(construct)
        yield item


# ---------------------------------------------------------------------------
# what printing, comparing or hashing a value would cost


_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))
_SEQUENCES = (list, tuple, set, frozenset, *_VIEWS)


def _namespace_attrs(ns: jinja2.utils.Namespace) -> dict[str, Any]:
    return object.__getattribute__(ns, "_Namespace__attrs")  # what its repr prints


def _kind(value: Any) -> str:
    if isinstance(value, type):
        return "class"
    if callable(value):
        return "function or method"
    return f"'{type(value).__name__}' object"


def walk(
    value: Any,
    construct: str,
    limit: int,
    *,
    indent: int = 0,
    per_item: int = 0,
    printing: bool = False,
) -> int:
    """Characters ``str(value)`` would take (approximately; with ``indent`` per nesting
    level and ``per_item`` per element, as ``json.dumps(indent=…, separators=…)``
    adds), stopping once past ``limit``.

    Containers and namespaces are walked with every shared reference counted again,
    as ``str`` prints it, so ``[x, x]`` nested forty deep is caught before ``str`` —
    or ``==``, or ``hash`` — expands it. More than ``Limits.max_items`` visits or
    ``Limits.max_value_depth`` levels is refused. With ``printing``, an object that is
    not template data (a function, class, generator, cycler…) is refused: its text
    is module paths and memory addresses.
    """
    bounds = limits()
    total = 0
    visits = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        visits += 1
        if visits > bounds.max_items:
            raise SandboxRefusal(
                construct, f"value has more than {bounds.max_items:,} elements (counted as printed)"
            )
        if depth > bounds.max_value_depth:
            raise SandboxRefusal(construct, f"value nested deeper than {bounds.max_value_depth} levels")
        total += indent * depth + per_item
        if isinstance(item, str):
            total += len(item)
        elif item is None or isinstance(item, (bool, float)):
            total += 24
        elif isinstance(item, int):
            total += item.bit_length() // 3 + 2
        elif isinstance(item, jinja2.runtime.Undefined):
            pass
        elif isinstance(item, range):
            total += 24 + 8 * len(item)
        elif isinstance(item, (Mapping, jinja2.utils.Namespace, *_SEQUENCES)):
            if isinstance(item, jinja2.utils.Namespace):
                item = _namespace_attrs(item)
                total += 12
            if len(item) > bounds.max_items:
                raise SandboxRefusal(construct, f"value has more than {bounds.max_items:,} elements")
            if isinstance(item, Mapping):
                total += 2 + 4 * len(item)
                stack += [(k, depth + 1) for k in item]
                stack += [(v, depth + 1) for v in item.values()]
            else:
                total += 2 + 2 * len(item)
                stack += [(x, depth + 1) for x in item]
        elif printing:
            raise SandboxRefusal(
                construct,
                f"printing a {_kind(item)} is refused (its text is module paths and memory addresses)",
            )
        else:
            total += 8
        if total > limit:
            return total
    return total


def check_printable(value: Any, construct: str, limit: int | None = None) -> None:
    """``str(value)`` is template data of at most ``limit`` characters."""
    limit = limit or limits().max_chars
    size = len(value) if type(value) is str else walk(value, construct, limit, printing=True)
    if size > limit:
        raise SandboxRefusal(construct, f"value larger than the output bound ({limit:,} characters)")


def check_comparable(value: Any, construct: str) -> None:
    """Comparing or hashing ``value`` visits a bounded number of elements."""
    if isinstance(value, (Mapping, jinja2.utils.Namespace, *_SEQUENCES)):
        walk(value, construct, limits().max_chars * 8)


# ---------------------------------------------------------------------------
# format strings: the size of what they build, from widths, precisions and arguments

# A printf conversion: %(key) flags width .precision length type
_PRINTF = re.compile(r"%(?:\(([^)]*)\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?([diouxXeEfFgGcrsa%])")


def printf_size(fmt: str, args: Any, construct: str) -> int:
    """Characters ``fmt % args`` would take, at most (checked as it goes)."""
    bounds = limits()
    total = len(fmt)
    positional = args if isinstance(args, tuple) else (args,)
    for index, match in enumerate(_PRINTF.finditer(fmt)):
        if index > bounds.max_items:
            raise SandboxRefusal(construct, f"more than {bounds.max_items:,} format conversions")
        key, width, precision, kind = match.groups()
        if width == "*" or precision == "*":
            raise SandboxRefusal(construct, "a '*' width or precision (read from the arguments) is refused")
        if kind == "%":
            continue
        if key is not None:
            arg = args.get(key, "") if isinstance(args, Mapping) else ""
        else:
            arg = positional[index] if index < len(positional) else ""
        total += int(width or 0) + int(precision or 0) + walk(arg, construct, bounds.max_chars, printing=True)
        if total > bounds.max_chars:
            raise SandboxRefusal(
                construct, f"formatted string exceeds the output bound ({bounds.max_chars:,})"
            )
    return total


def format_size(fmt: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], construct: str) -> int:
    """Characters ``fmt.format(*args, **kwargs)`` would take, at most. A replacement
    field inside a format spec (``'{0:{1}}'``) is refused: its width would come from
    an argument, unchecked."""
    bounds = limits()
    total = len(fmt)
    auto = 0
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return total  # str.format raises the same error itself
    if len(fields) > bounds.max_items:
        raise SandboxRefusal(construct, f"more than {bounds.max_items:,} format fields")
    for _, field, spec, _ in fields:
        if field is None:
            continue
        if spec and "{" in spec:
            raise SandboxRefusal(construct, "a replacement field inside a format spec is refused")
        head = re.match(r"[^.\[]*", field).group(0)
        if head == "":
            head, auto = str(auto), auto + 1
        arg = args[int(head)] if head.isdigit() and int(head) < len(args) else kwargs.get(head, "")
        total += sum(int(n) for n in re.findall(r"\d+", spec or "")) + walk(
            arg, construct, bounds.max_chars, printing=True
        )
        if total > bounds.max_chars:
            raise SandboxRefusal(
                construct, f"formatted string exceeds the output bound ({bounds.max_chars:,})"
            )
    return total


# ---------------------------------------------------------------------------
# the template source, before and after parsing

BLOCK_TAGS = frozenset({"for", "if", "macro", "call", "filter", "with", "generation", "block", "autoescape"})
_OPENING = {"lparen": 1, "lbracket": 1, "lbrace": 1, "rparen": -1, "rbracket": -1, "rbrace": -1}


def check_template_source(env: jinja2.Environment, source: str, bounds: Limits) -> list[Token]:
    """Refuse a template too large, or nested too deep, for jinja2's recursive parser
    and Python's compiler — before either runs. Reads jinja2's (iterative) lexer's
    tokens, stopping at the first bound crossed; returns them, for the parser (lexing
    is a third of compiling)."""
    if len(source) > bounds.max_template_chars:
        line = source.count("\n", 0, bounds.max_template_chars) + 1
        raise StaticRefusal(
            "template size",
            f"{len(source):,} characters exceed the bound ({bounds.max_template_chars:,}); "
            "real chat templates are under 16 KB",
            line,
        )
    blocks: list[str] = []
    brackets = 0
    tag: str | None = None  # the tag of the {% … %} being read
    assigns = False
    tokens: list[Token] = []
    for count, token in enumerate(env._tokenize(source, None, None), 1):
        tokens.append(token)
        if count > bounds.max_template_tokens:
            raise StaticRefusal(
                "template size", f"more than {bounds.max_template_tokens:,} tokens", token.lineno
            )
        kind = token.type
        if kind in _OPENING:
            brackets = max(brackets + _OPENING[kind], 0)
            if brackets > bounds.max_bracket_depth:
                raise StaticRefusal(
                    "nesting depth", f"brackets nested deeper than {bounds.max_bracket_depth}", token.lineno
                )
        elif kind == "block_begin":
            tag, assigns = "", False
        elif kind == "name" and tag == "":
            tag = token.value
            if tag.startswith("end") and tag[3:] in (*BLOCK_TAGS, "set") and blocks:
                blocks.pop()
        elif kind == "assign" and tag == "set":
            assigns = True
        elif kind == "block_end":
            if tag in BLOCK_TAGS or (tag == "set" and not assigns):  # {% set x %}…{% endset %} is a block
                blocks.append(tag)
                if len(blocks) > bounds.max_block_depth:
                    raise StaticRefusal(
                        "nesting depth",
                        f"tag '{tag}' nested deeper than {bounds.max_block_depth} blocks",
                        token.lineno,
                    )
            tag = None
    return tokens


def check_tree_depth(tree: nodes.Node, bounds: Limits) -> None:
    """Refuse an expression tree deeper than ``Limits.max_tree_depth`` (``1+1+…+1``,
    ``x|f|f|…``): jinja2's code generator and Python's compiler recurse per level."""
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > bounds.max_tree_depth:
            raise StaticRefusal(
                "nesting depth", f"expression nested deeper than {bounds.max_tree_depth} levels", node.lineno
            )
        stack += [(child, depth + 1) for child in node.iter_child_nodes()]
