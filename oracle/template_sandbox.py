"""The environment chat templates run in: transformers' configuration, plus bounds.

Chat templates arrive inside downloaded model files, so a template is untrusted
code. ``oracle.template_env`` reproduces the environment transformers renders them
in (so every template a real model ships renders to the same bytes);
``TemplateSandbox`` is that environment with the work it may do bounded.

jinja2's sandbox stops attribute escapes, but it does not bound work: a template
may loop ``range(100000)`` inside ``range(100000)``, double a string forty times,
compute ``9**9**9`` or print a namespace of namespaces doubled forty times. Because
a C-level operation (a big-integer power, a gigabyte string, ``str`` of a nested
object, comparing two deep lists, Python's own compiler) cannot be interrupted once
started, the bounds are enforced *before* each expensive primitive and at every step
the template takes (the limits and measures are in ``template_bounds``, the checks
each operator, call, filter and test runs first in ``template_guards``):

* before parsing, the source is bounded in characters, tokens and nesting of blocks
  and brackets; after parsing, in expression depth — so jinja2's recursive parser and
  Python's compiler never see a template they would fail on;
* a static pass over the parsed template refuses dunder names, ``include`` /
  ``import`` / ``extends``, and routes every ``for`` iterable, every ``~``
  concatenation, every comparison operand and every computed dict key through
  guards (an AST rewrite, so the generated code cannot skip them);
* every attribute access, call, filter, intercepted operator (``+ * ** %``) and loop
  iteration is a *step* — a macro call several, an operation on a long string or list
  one more per kilobyte it reads or builds, so steps count work, not calls: the step
  count, the wall clock and the growth of resident memory are checked against the
  render's budget (see ``Limits``);
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

from collections.abc import Iterator
from typing import Any

import jinja2
import jinja2.nodes as nodes
import jinja2.runtime
from jinja2.lexer import TokenStream
from jinja2.parser import Parser
from jinja2.visitor import NodeTransformer

from oracle.template_bounds import (
    CHARS_PER_STEP,
    DEFAULT_LIMITS,
    MACRO_CALL_STEPS,
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
    step_size,
    walk,
)
from oracle.template_bounds import limits as _limits
from oracle.template_bounds import step as _step
from oracle.template_env import TransformersEnvironment
from oracle.template_guards import (
    binop_precheck,
    bounded_lipsum,
    bounded_strftime_now,
    call_precheck,
    callable_name,
    guarded_filter,
    guarded_test,
    item_construct,
    safe_range,
)

__all__ = ["DEFAULT_LIMITS", "Limits", "SandboxRefusal", "StaticRefusal", "TemplateSandbox"]


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
    if size >= CHARS_PER_STEP:
        _step("operator '~'", size // CHARS_PER_STEP)
    return "".join(map(str, operands))


def _operand_guard(value: Any, construct: str) -> Any:
    """A comparison operand or dict key: comparing or hashing it is bounded work."""
    check_comparable(value, construct)
    return value


class TemplateSandbox(TransformersEnvironment):
    """transformers' chat-template environment with step, time, memory and size bounds."""

    intercepted_binops = frozenset({"+", "*", "**", "%"})

    def __init__(self) -> None:
        super().__init__()
        self.filters = {name: guarded_filter(name, f) for name, f in self.filters.items()}
        self.filters[LOOP_GUARD] = _loop_guard
        self.filters[CONCAT_GUARD] = _concat_guard
        self.filters[OPERAND_GUARD] = _operand_guard
        self.tests = {name: guarded_test(name, test) for name, test in self.tests.items()}
        self.globals["strftime_now"] = bounded_strftime_now
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
        _step(item_construct(argument))
        if isinstance(argument, str) and argument.startswith("_"):
            try:
                return obj[argument]
            except (TypeError, LookupError):
                raise SandboxRefusal(f"item '{argument}'", "underscore attribute access is refused") from None
        check_comparable(argument, "item")  # a container key is hashed (or printed into an error)
        result = super().getitem(obj, argument)
        step_size(result, item_construct(argument))  # a slice is a copy
        return result

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _step(f"operator '{operator}'")
        step_size(left, f"operator '{operator}'")
        step_size(right, f"operator '{operator}'")
        binop_precheck(operator, left, right)
        result = super().call_binop(context, operator, left, right)
        check_result(result, f"operator '{operator}'")
        return result

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        name = callable_name(__obj)
        _step(f"call '{name}'", MACRO_CALL_STEPS if isinstance(__obj, jinja2.runtime.Macro) else 1)
        for value in (getattr(__obj, "__self__", None), *args, *kwargs.values()):
            step_size(value, f"call '{name}'")  # what the call reads
        call_precheck(__obj, args, kwargs)
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
