"""Where inside a chat template an engine's rendering departs, from its answer alone.

The render catalogue (``specgate.diagnose.render``) names a cause only when a planted
deviation reproduces the engine exactly. This localizes any failing ``render`` case to
the template construct that produced the first character where the engine's text
departs from the reference's: the template is parsed in the oracle's own sandbox
(``oracle.template_sandbox``, bounds and guards included), every output node's children
— literal text and ``{{ … }}`` expressions — are bracketed by private-use marker
characters carrying their index, every ``{% for %}`` marks its start and each iteration,
and the modified tree is compiled by the same environment and rendered with the same
context. Stripping the markers gives the text and, for every offset, the construct
(and the loop iterations) that produced it; the stripped text must equal the plain
render, or the line says ``not localized`` — never a wrong construct.

Output inside a macro, ``{% set %}`` block, ``{% filter %}`` or ``{% call %}`` body is
not marked (a caller may trim or measure it): its text is put down to the expression
that prints it. ``localize_render`` gives the line; ``localize_render_group`` puts a
group's first case to the engine again (``specgate.run.triage.localize_groups``), and
``cause_of`` reads the construct off a line (the groups of one construct merge on it).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import jinja2.nodes as nodes

from oracle.template import template_context
from oracle.template_sandbox import TemplateSandbox

OPEN = 0x100000  # construct i's output opens with chr(OPEN + i) (plane 16, private use)
CLOSE = "\U0010fffd"  # ... and closes with this
LOOP = 0xF0000  # loop j starts with chr(LOOP + 2j), each of its iterations with chr(LOOP + 2j + 1) (plane 15)
MAX_MARKS = 0xFFFD // 2  # constructs (and loops) a template may have for the markers to fit
MARKERS = re.compile("[\U000f0000-\U0010ffff]")  # planes 15 and 16: the markers (and nothing else allowed)
SNIPPET = 80  # characters of a construct's source shown


@dataclass(frozen=True)
class Block:
    """An enclosing ``{% for %}``/``{% if %}`` (its tag's source text) and, for a loop, its index."""

    tag: str
    loop: int | None = None


@dataclass(frozen=True)
class Construct:
    """One child of an output node: ``literal`` text (its text) or an ``expression`` (its
    ``{{ … }}`` source; ``line``, the line's text, where the lexer's count of ``{{ … }}``
    disagrees with the tree's), its template line and the blocks around it, outermost first."""

    kind: str
    lineno: int
    text: str
    enclosing: tuple[Block, ...]

    def line_of(self, at: int) -> int:
        """The template line of character ``at`` of a literal's text (an expression's own line)."""
        return self.lineno + (self.text.count("\n", 0, at) if self.kind == "literal" else 0)

    def describe(self) -> str:
        if self.kind == "literal":
            return f"the literal text {_quote(self.text, 40)}"
        if self.kind == "expression":
            return f"the output expression {self.text}"
        return f"an output expression of the line {_quote(self.text, SNIPPET)}"  # its {{ … }} not found


@dataclass
class RenderMap:
    """A render with its markers stripped: the text, and for each offset the emission
    (one output of a construct: its index, start offset, loop iterations) that made it."""

    text: str
    constructs: list[Construct]
    emissions: list[tuple[int, int, dict[int, int]]] = field(default_factory=list)
    _starts: list[int] = field(default_factory=list)  # segments of text: start offset ...
    _owners: list[int] = field(default_factory=list)  # ... and the emission that made it (-1: none)

    def at(self, offset: int) -> tuple[Construct, int, dict[int, int]] | None:
        """The construct that made character ``offset``, the offset inside its output, its iterations."""
        k = bisect.bisect_right(self._starts, offset) - 1
        if k < 0 or self._owners[k] < 0:
            return None
        index, start, iterations = self.emissions[self._owners[k]]
        return self.constructs[index], offset - start, iterations


def _tags(env: TemplateSandbox, source: str, begin: str, end: str) -> Iterator[tuple[str, str]]:
    """Each ``{{ … }}`` (or ``{% … %}``) of the source, in order: its first name and its text."""
    text: list[str] | None = None
    for _, kind, value in env.lexer.tokeniter(source, None):
        if kind == begin:
            text = [value]
        elif text is not None:
            text.append(value)
            if kind == end:
                yield next((v for v in text[1:] if v.strip()), ""), re.sub(r"\s+", " ", "".join(text)).strip()
                text = None


def _short(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    close = m.group() if (m := re.search(r"\s*-?[}%]}$", text)) else ""
    return text[: limit - len(close) - 2].rstrip() + " …" + close


def _quote(text: str, limit: int) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")


class _Instrument:
    """Marks a parsed template's output (see the module docstring); ``constructs`` and
    ``loops`` count what it marked."""

    def __init__(self, env: TemplateSandbox, source: str, tree: nodes.Template) -> None:
        self.lines = source.splitlines()
        outputs = [
            c for o in tree.find_all(nodes.Output) for c in o.nodes if not isinstance(c, nodes.TemplateData)
        ]
        shown = [text for _, text in _tags(env, source, "variable_begin", "variable_end")]
        # the k-th {{ … }} of the source is the k-th expression of an output node, in document order
        self.expressions = (
            {id(c): t for c, t in zip(outputs, shown, strict=False)} if len(shown) == len(outputs) else {}
        )
        blocks = [(name, text) for name, text in _tags(env, source, "block_begin", "block_end")]
        self.tags: dict[int, str] = {}
        for kind, names in ((nodes.For, ("for",)), (nodes.If, ("if", "elif"))):
            found, texts = list(tree.find_all(kind)), [t for name, t in blocks if name in names]
            if len(found) == len(texts):
                self.tags.update((id(n), t) for n, t in zip(found, texts, strict=True))
        self.constructs: list[Construct] = []
        self.loops = 0

    def _tag(self, node: nodes.Node, word: str) -> str:
        line = self.lines[node.lineno - 1].strip() if 0 < node.lineno <= len(self.lines) else ""
        return _short(self.tags.get(id(node)) or f"the {{% {word} %}} of the line {line!r}", SNIPPET)

    def body(self, body: list[nodes.Node], enclosing: tuple[Block, ...]) -> list[nodes.Node]:
        out: list[nodes.Node] = []
        for node in body:
            if isinstance(node, nodes.Output):
                node.nodes = [part for child in node.nodes for part in self._mark(child, enclosing)]
            elif isinstance(node, nodes.For):
                loop, tag = self.loops, self._tag(node, "for")
                self.loops += 1
                node.body = [
                    _data(chr(LOOP + 2 * loop + 1), node),
                    *self.body(node.body, (*enclosing, Block(tag, loop))),
                ]
                node.else_ = self.body(node.else_, (*enclosing, Block(f"the {{% else %}} of {tag}")))
                out.append(_data(chr(LOOP + 2 * loop), node))
            elif isinstance(node, nodes.If):
                node.body = self.body(node.body, (*enclosing, Block(self._tag(node, "if"))))
                for branch in node.elif_:
                    branch.body = self.body(branch.body, (*enclosing, Block(self._tag(branch, "elif"))))
                node.else_ = self.body(
                    node.else_, (*enclosing, Block(f"the {{% else %}} of {self._tag(node, 'if')}"))
                )
            elif isinstance(node, nodes.CallBlock) and getattr(node.call, "name", "") == "_render_body":
                node.body = self.body(node.body, enclosing)  # {% generation %}: its body is printed as is
            elif isinstance(node, (nodes.Scope, nodes.ScopedEvalContextModifier, nodes.With, nodes.Block)):
                node.body = self.body(node.body, enclosing)
            out.append(node)  # a macro, {% set %}, {% filter %} or {% call %} body: printed by its caller
        return out

    def _mark(self, child: nodes.Expr, enclosing: tuple[Block, ...]) -> list[nodes.Expr]:
        index = len(self.constructs)
        if isinstance(child, nodes.TemplateData):
            self.constructs.append(Construct("literal", child.lineno, child.data, enclosing))
        else:
            shown = self.expressions.get(id(child))
            line = self.lines[child.lineno - 1].strip() if 0 < child.lineno <= len(self.lines) else ""
            kind = "expression" if shown else "line"
            self.constructs.append(Construct(kind, child.lineno, _short(shown or line, SNIPPET), enclosing))
        return [
            nodes.TemplateData(chr(OPEN + index), lineno=child.lineno),
            child,
            nodes.TemplateData(CLOSE, lineno=child.lineno),
        ]


def _data(text: str, node: nodes.Node) -> nodes.Output:
    return nodes.Output([nodes.TemplateData(text, lineno=node.lineno)], lineno=node.lineno)


@dataclass
class Marked:
    """A template compiled with its output marked: render it as often as needed."""

    template: Any
    constructs: list[Construct]
    loops: int

    def render(self, env: TemplateSandbox, context: Mapping[str, Any]) -> RenderMap:
        """Render with ``context`` and strip the markers into a ``RenderMap`` (raises what
        the render raises)."""
        rendered = env.render(self.template, dict(context))
        out = RenderMap("", self.constructs)
        text: list[str] = []
        size, stack, iterations, position = 0, [-1], [0] * self.loops, 0
        for m in MARKERS.finditer(rendered + CLOSE):  # a closing sentinel flushes the last segment
            if m.start() > position:
                out._starts.append(size)
                out._owners.append(stack[-1])
                text.append(rendered[position : m.start()])
                size += m.start() - position
            position, code = m.end(), ord(m.group())
            if position > len(rendered):
                break
            if m.group() == CLOSE:
                if len(stack) > 1:
                    stack.pop()
            elif code >= OPEN:
                enclosing = self.constructs[code - OPEN].enclosing
                loops = {b.loop: iterations[b.loop] for b in enclosing if b.loop is not None}
                out.emissions.append((code - OPEN, size, loops))
                stack.append(len(out.emissions) - 1)
            else:
                loop, iteration = divmod(code - LOOP, 2)
                iterations[loop] = iterations[loop] + 1 if iteration else 0
        out.text = "".join(text)
        return out


def marked(env: TemplateSandbox, source: str) -> Marked:
    """``source`` parsed by the sandbox (its bounds, refusals and guards), its output marked,
    compiled by the same environment (``ValueError`` for more constructs than markers)."""
    tree = env.parse(source)
    marker = _Instrument(env, source, tree)
    tree.body = marker.body(tree.body, ())
    if max(len(marker.constructs), marker.loops) > MAX_MARKS:
        raise ValueError(f"{len(marker.constructs)} output constructs: more than the markers can number")
    tree.set_environment(env)
    template = env.template_class.from_code(env, env.compile(tree), env.make_globals(None), None)
    return Marked(template, marker.constructs, marker.loops)


def _where(found: tuple[Construct, int, dict[int, int]]) -> str:
    """``the template's line 17, the output expression {{ … }} (inside {% for … %}, iteration 3)``."""
    construct, at, iterations = found
    details = []
    if construct.line_of(at) != construct.lineno:
        details.append(f"the character is on line {construct.line_of(at)}")
    if construct.enclosing:
        blocks = [
            b.tag + (f", iteration {iterations[b.loop]}" if b.loop is not None else "")
            for b in construct.enclosing
        ]
        details.append("inside " + ", ".join(blocks))
    return f"the template's line {construct.lineno}, {construct.describe()}" + (
        f" ({'; '.join(details)})" if details else ""
    )


_ENV: TemplateSandbox | None = None


def localize_render(source: str, context: Mapping[str, Any], got: str) -> str:
    """One line: the construct of ``source`` that produced the first character where the
    engine's text ``got`` departs from the reference's render of ``context``."""
    global _ENV
    env = _ENV = _ENV or TemplateSandbox()
    try:
        reference = env.render(env.from_string(source), dict(context))
    except Exception as exc:
        return f"not localized: the reference refuses this input ({type(exc).__name__}: {str(exc)[:200]})"
    if got == reference:
        return "not localized: the engine's text is the reference's"
    if MARKERS.search(reference):
        return "not localized: the reference's text holds private-use characters of planes 15-16, the markers"
    try:
        marks = marked(env, source).render(env, context)
    except Exception as exc:
        return f"not localized: the marked template does not render ({type(exc).__name__}: {str(exc)[:200]})"
    if marks.text != reference:
        return "not localized: the marked template renders other text than the template"
    d = next((i for i, (a, b) in enumerate(zip(got, reference, strict=False)) if a != b), None)
    if d is not None:
        found = marks.at(d)
        what = f"the first differing character (offset {d}, engine {got[d]!r} vs reference {reference[d]!r})"
    elif len(got) < len(reference):
        d = len(got)
        found = marks.at(d)
        what = (
            f"the engine's text stops at offset {d}, {len(reference) - d} characters short of the reference: "
            f"the missing text {_quote(reference[d:], 20)}"
        )
    else:
        d = len(reference)
        found = marks.at(d - 1) if d else None
        what = (
            f"the engine's text goes on past the reference's end (offset {d}, {len(got) - d} more characters: "
            f"{_quote(got[d:], 20)}): the reference's last character before it"
        )
    if found is None:
        return f"not localized: no construct of the template made the reference's text at offset {d}"
    return f"render: {what} comes from {_where(found)}"


def localize_render_group(engine: Any, inp: Mapping[str, Any], model: Any, cache: dict[Any, Any]) -> str:
    """The localized line of a failing render case (its input ``inp``): the engine asked
    again, its text localized against the model's template (``cache`` keeps the templates)."""
    from impl.protocol import Unsupported
    from specgate.diagnose.render import ask, reference

    if ("render", model.id) not in cache:
        cache["render", model.id] = reference(model)
    template = cache["render", model.id]
    try:
        got = ask(engine, "render", model, inp)
    except Unsupported as exc:
        return f"not localized: the engine refuses this input ({str(exc)[:200]}): no text to compare"
    if "template" in inp:
        return localize_render(inp["template"], inp["context"], got)
    try:
        context = template_context(
            inp["messages"], inp["add_generation_prompt"], template.special_tokens, **inp.get("kwargs", {})
        )
    except (TypeError, ValueError) as exc:
        return f"not localized: the reference refuses this input ({exc})"
    return localize_render(template.source, context, got)


_QUOTE = r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*\""""
_CONSTRUCT = rf"the output expression \{{\{{.*?\}}\}}|the literal text (?:{_QUOTE})|an output expression of the line (?:{_QUOTE})"
_CAUSES = (  # the start of a line, the cause's words before the construct
    ("render: the first differing character", "render: the template's line"),
    ("render: the engine's text stops at", "render: text missing from the template's line"),
    ("render: the engine's text goes on past", "render: extra text after the template's line"),
)


def cause_of(line: str) -> str:
    """The construct a localized render line names, without the case's text, offsets and
    iterations: what groups of one cause share. Empty for a line that localizes nothing."""
    m = re.match(rf"(render: .*?) comes from the template's line (\d+), ({_CONSTRUCT})", line, re.S)
    for start, words in _CAUSES if m else ():
        if m.group(1).startswith(start):
            return f"{words} {m.group(2)}, {m.group(3)}"
    return ""
