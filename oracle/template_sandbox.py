"""The jinja2 environment chat templates run in: transformers' configuration, plus bounds.

Chat templates arrive inside downloaded model files, so a template is untrusted
code. transformers renders them in an ``ImmutableSandboxedEnvironment`` with
``trim_blocks``, ``lstrip_blocks``, the ``loopcontrols`` extension, a
``{% generation %}`` tag, its own ``tojson`` (no HTML escaping, non-ASCII kept),
``raise_exception``, ``strftime_now``, a restricted ``dict`` and a ``namespace``
that rejects underscore names. That configuration is reproduced here exactly, so
every template a real model ships renders to the same bytes.

jinja2's sandbox stops attribute escapes, but it does not bound work: a template
may loop ``range(100000)`` inside ``range(100000)``, double a string forty times
or compute ``9**9**9``. Because a C-level operation (a big-integer power, a
gigabyte string) cannot be interrupted once started, the bounds are enforced
*before* each expensive primitive and at every step the template takes:

* a static pass over the parsed template refuses dunder names, ``include`` /
  ``import`` / ``extends``, and wraps every ``for`` iterable and every ``~``
  concatenation in guards (an AST rewrite, so the generated code cannot skip them);
* every attribute access, call, filter, intercepted operator (``+ * ** %``) and loop
  iteration is a *step*: the step count and the wall clock are checked against the
  render's budget (a base plus an allowance per message, see ``Limits``);
* operator and call arguments are checked before the operation runs (no string,
  list or output longer than ``Limits.max_chars``; no integer argument larger than
  that; no integer result wider than ``Limits.max_int_bits``).

Where transformers' sandbox merely *hides* an unsafe attribute (it returns an
undefined value that prints as an empty string), this environment refuses: a
template that reaches for ``__class__`` is hostile, and saying so is the point.
"""

from __future__ import annotations

import contextvars
import functools
import json
import math
import re
import time
from collections.abc import Iterable, Iterator, Sized
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes as nodes
import jinja2.runtime
import jinja2.utils
from jinja2.sandbox import MAX_RANGE, ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer


@dataclass(frozen=True)
class Limits:
    """Bounds on one render.

    ``max_chars`` (8 M characters ≈ 2 M tokens) is far beyond any Qwen context, so
    no real prompt meets it. Work scales with the conversation, so the step and time
    budgets are a base plus an allowance per message: rendering 350 messages with
    tools through Qwen3's template takes ~130 ms and ~60k steps here, well inside
    ``0.5 s + 350 x 5 ms``, while a hostile template given a three-message canary is
    stopped after 0.5 s — a refusal well inside a second.
    """

    max_chars: int = 8_000_000
    max_steps: int = 2_000_000
    max_seconds: float = 0.5
    steps_per_message: int = 20_000
    seconds_per_message: float = 0.005
    max_int_bits: int = 100_000
    max_items: int = 100_000
    max_range: int = MAX_RANGE  # jinja2's own sandbox bound, kept for parity
    max_lipsum_words: int = 100_000


class SandboxRefusal(Exception):
    """A bound or a security rule stopped the template. ``construct`` names what;
    ``lineno`` is the template line when known where the refusal is raised (else
    it is read from the traceback)."""

    def __init__(self, construct: str, detail: str, lineno: int | None = None) -> None:
        super().__init__(f"{construct}: {detail}")
        self.construct = construct
        self.detail = detail
        self.lineno = lineno


class Budget:
    """The work one render of ``n_messages`` may do: steps and wall-clock time."""

    def __init__(self, limits: Limits, n_messages: int = 0) -> None:
        self.limits = limits
        self.steps = 0
        self.max_steps = limits.max_steps + limits.steps_per_message * n_messages
        self.seconds = limits.max_seconds + limits.seconds_per_message * n_messages
        self.deadline = time.monotonic() + self.seconds

    def step(self, construct: str) -> None:
        self.steps += 1
        if self.steps > self.max_steps:
            raise SandboxRefusal(construct, f"render step budget exceeded ({self.max_steps:,} steps)")
        if time.monotonic() > self.deadline:
            raise SandboxRefusal(construct, f"render time budget exceeded ({self.seconds:.2f} s)")


_budget: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("template_budget", default=None)
DEFAULT_LIMITS = Limits()


def _step(construct: str) -> None:
    budget = _budget.get()
    if budget is not None:
        budget.step(construct)


def _limits() -> Limits:
    budget = _budget.get()
    return budget.limits if budget is not None else DEFAULT_LIMITS


# ---------------------------------------------------------------------------
# size checks, run before a value is built or printed


def measure(value: Any, limit: int, indent: int = 0) -> int:
    """Characters ``str(value)`` (or ``json.dumps(value, indent=indent)``) would take,
    approximately, stopping once past ``limit``.

    Containers are walked with every shared reference counted again, as ``str`` would
    print it, so ``[x, x]`` nested forty deep is caught before ``str`` runs; with an
    ``indent`` each element also pays ``indent`` per nesting level, as JSON does. A
    value of more than ``Limits.max_items`` elements counts as over the limit.
    """
    max_items = _limits().max_items
    total = 0
    stack = [(value, 0)]
    items = 0
    while stack:
        item, depth = stack.pop()
        items += 1
        if items > max_items:
            return limit + 1
        total += indent * depth
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            total += 2 + 4 * len(item)
            stack += [(k, depth + 1) for k in item]
            stack += [(v, depth + 1) for v in item.values()]
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += 2 + 2 * len(item)
            stack += [(x, depth + 1) for x in item]
        elif isinstance(item, range):
            total += 2 + 8 * len(item)
        else:
            total += 8
        if total > limit:
            return total
    return total


def check_size(value: Any, construct: str) -> None:
    limit = _limits().max_chars
    if measure(value, limit) > limit:
        raise SandboxRefusal(construct, f"value larger than the output bound ({limit:,} characters)")


def check_int_arguments(args: Iterable[Any], construct: str) -> None:
    """Integer arguments bound the work of width/count/indent parameters."""
    limit = _limits().max_chars
    for arg in args:
        if isinstance(arg, int) and not isinstance(arg, bool) and abs(arg) > limit:
            raise SandboxRefusal(construct, f"integer argument {arg} exceeds the size bound ({limit:,})")


# A width or precision of 7+ digits (or ``*``, read from the arguments) in a printf
# conversion, or of 7+ digits in a ``str.format`` replacement field's spec.
_FORMAT_WIDTH = re.compile(r"%[-#0 +]*(?:\*|\d{7,}|\d*\.(?:\*|\d{7,}))|\{[^{}]*:[^{}]*\d{7,}")


def check_format_string(fmt: str, construct: str) -> None:
    """``'%999999999s' % x`` and ``'{:>999999999}'.format(x)`` allocate before any check."""
    if _FORMAT_WIDTH.search(fmt):
        raise SandboxRefusal(construct, "format width or precision too large (or '*')")


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
            if isinstance(n, int) and len(seq) * max(n, 0) > limits.max_chars:
                raise SandboxRefusal(
                    construct, f"repetition to {len(seq) * n:,} items exceeds the size bound"
                )
    elif op == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
        if len(left) + len(right) > limits.max_chars:
            raise SandboxRefusal(construct, "concatenation exceeds the size bound")
    elif op == "%" and isinstance(left, str):
        check_format_string(left, construct)


def _callable_name(obj: Any) -> str:
    if isinstance(obj, jinja2.runtime.Macro):
        return obj.name
    return getattr(obj, "__name__", type(obj).__name__)


def _call_precheck(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    name = _callable_name(obj)
    construct = f"call '{name}'"
    check_int_arguments((*args, *kwargs.values()), construct)
    owner = getattr(obj, "__self__", None)
    limit = _limits().max_chars
    if isinstance(owner, str):
        if name == "join" and args and isinstance(args[0], (list, tuple)):
            size = sum(measure(a, limit) for a in args[0]) + len(owner) * max(len(args[0]) - 1, 0)
            if size > limit:
                raise SandboxRefusal(construct, "joined string exceeds the size bound")
        elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
            count = owner.count(args[0]) if args[0] else len(owner) + 1
            if len(args) > 2 and isinstance(args[2], int) and args[2] >= 0:
                count = min(count, args[2])
            if len(owner) + count * max(len(args[1]) - len(args[0]), 0) > limit:
                raise SandboxRefusal(construct, "replacement result exceeds the size bound")
        elif name == "expandtabs" and args and isinstance(args[0], int) and len(owner) * args[0] > limit:
            raise SandboxRefusal(construct, "expanded string exceeds the size bound")
    format_of = getattr(getattr(obj, "__wrapped__", None), "__self__", None)  # jinja2's wrapped str.format
    if name in ("format", "format_map") and isinstance(format_of, str):
        check_format_string(format_of, construct)


# ---------------------------------------------------------------------------
# the static pass: refuse, then rewrite loops and concatenations to go through guards

LOOP_GUARD = "sandbox_loop_guard"
CONCAT_GUARD = "sandbox_concat_guard"


def _is_dunder(name: Any) -> bool:
    return isinstance(name, str) and name.startswith("__")


class _Guard(NodeTransformer):
    """Refuses what can only be hostile and routes loops and ``~`` through guards."""

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
        node.iter = nodes.Filter(node.iter, LOOP_GUARD, [], [], None, None).set_lineno(node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        node = self.generic_visit(node)
        operands = nodes.List(node.nodes).set_lineno(node.lineno)
        return nodes.Filter(operands, CONCAT_GUARD, [], [], None, None).set_lineno(node.lineno)

    def _no_loading(self, node: nodes.Node) -> nodes.Node:
        tag = type(node).__name__.lower().replace("fromimport", "from-import")
        raise _static_refusal(node, f"tag '{tag}'", "loading other templates is not available")

    visit_Include = visit_Import = visit_FromImport = visit_Extends = _no_loading


class StaticRefusal(SandboxRefusal):
    """Refused before rendering anything; ``lineno`` is the template line."""


def _static_refusal(node: nodes.Node, construct: str, detail: str) -> StaticRefusal:
    return StaticRefusal(construct, detail, node.lineno)


def _loop_guard(iterable: Any) -> Iterator[Any]:
    for item in iterable:
        _step("for loop")
        yield item


def _concat_guard(operands: list[Any]) -> str:
    size = sum(measure(x, _limits().max_chars) for x in operands)
    if size > _limits().max_chars:
        raise SandboxRefusal("operator '~'", "concatenation exceeds the size bound")
    return "".join(map(str, operands))


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


def strftime_now(format: str) -> str:
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


# Filters whose output grows with the *whole* input value (they print or join it);
# only these pay for measuring a container argument.
PRINTING_FILTERS = frozenset(
    {"join", "string", "tojson", "pprint", "format", "xmlattr", "urlize", "indent", "center", "wordwrap"}
)


def check_result(value: Any, construct: str) -> None:
    """A cheap bound on a freshly built value: its length, not a walk."""
    limits = _limits()
    if isinstance(value, str) and len(value) > limits.max_chars:
        raise SandboxRefusal(
            construct, f"string longer than the output bound ({limits.max_chars:,} characters)"
        )
    if isinstance(value, (list, tuple)) and len(value) > limits.max_items:
        raise SandboxRefusal(construct, f"list longer than the item bound ({limits.max_items:,})")


def _guarded_filter(name: str, func: Any) -> Any:
    """``func`` behind a step, an argument check before and a size check after."""
    construct = f"filter '{name}'"
    leading = 2 if getattr(func, "jinja_pass_arg", None) else 1  # (context,) value

    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _step(construct)
        check_int_arguments((*args[leading:], *kwargs.values()), construct)
        if name in PRINTING_FILTERS and len(args) >= leading:
            if name == "join" and not isinstance(args[leading - 1], (str, Sized)):
                args = (
                    *args[: leading - 1],
                    list(args[leading - 1]),
                    *args[leading:],
                )  # count what is joined
            value = args[leading - 1]
            limit = _limits().max_chars
            indent = kwargs.get(
                "indent", args[leading + 1] if name == "tojson" and len(args) > leading + 1 else 0
            )
            indent = indent if isinstance(indent, int) and name == "tojson" else 0
            size = measure(value, limit, indent) if not isinstance(value, Iterator) else 0
            if name == "join" and isinstance(value, Sized):
                sep = kwargs.get("d", args[leading] if len(args) > leading else "")
                size += len(str(sep)) * len(value)
            if size > limit:
                raise SandboxRefusal(construct, f"result larger than the output bound ({limit:,} characters)")
            if name == "format" and isinstance(value, str):
                check_format_string(value, construct)
        result = func(*args, **kwargs)
        check_result(result, construct)
        return result

    return guarded


class TemplateSandbox(ImmutableSandboxedEnvironment):
    """transformers' chat-template environment with step, time and size bounds."""

    intercepted_binops = frozenset({"+", "*", "**", "%"})

    def __init__(self) -> None:
        super().__init__(
            trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
        )
        self.filters["tojson"] = tojson
        self.filters = {name: _guarded_filter(name, f) for name, f in self.filters.items()}
        self.filters[LOOP_GUARD] = _loop_guard
        self.filters[CONCAT_GUARD] = _concat_guard
        self.globals["raise_exception"] = raise_exception
        self.globals["strftime_now"] = strftime_now
        self.globals["dict"] = TemplateDict()
        self.globals["namespace"] = TemplateNamespace
        self.globals["range"] = safe_range
        self.globals["lipsum"] = bounded_lipsum
        self.finalize = self._finalize_output

    @staticmethod
    def _finalize_output(value: Any) -> Any:
        check_size(value, "output '{{ … }}'")
        return value

    # -- parsing: static refusals and guard insertion
    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        return _Guard().visit(tree)

    # -- runtime hooks: every one is a step
    def getattr(self, obj: Any, attribute: str) -> Any:
        _step(f"attribute '{attribute}'")
        if isinstance(attribute, str) and attribute.startswith("_"):
            raise SandboxRefusal(f"attribute '{attribute}'", "underscore attribute access is refused")
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _step(f"item {argument!r}")
        if isinstance(argument, str) and argument.startswith("_"):
            try:
                return obj[argument]
            except (TypeError, LookupError):
                raise SandboxRefusal(f"item '{argument}'", "underscore attribute access is refused") from None
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
        check_result(result, f"call '{name}'")
        return result

    # -- rendering under a budget
    def render(
        self, template: jinja2.Template, context: dict[str, Any], limits: Limits = DEFAULT_LIMITS
    ) -> str:
        """Render ``template`` with ``context`` under ``limits``; the output size is
        checked chunk by chunk as it is produced."""
        messages = context.get("messages")
        token = _budget.set(Budget(limits, len(messages) if isinstance(messages, (list, tuple)) else 0))
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
