"""The render stage's catalogue: known deviations applied to the oracle's chat templates.

A deviation is a setting of one *knob* of transformers' environment (``oracle.template_env``)
or of what the template is handed: ``tojson`` escaping HTML characters or all non-ASCII,
``trim_blocks``/``lstrip_blocks`` off, booleans printed as JavaScript does, ``strip``'s
argument ignored, the generation prompt dropped, reasoning stripped before the template
sees it — or the default system prompt left out (a post-process: the defect is the block's
absence). ``answer`` renders in a ``DeviatedSandbox`` — the oracle's own sandbox
(``oracle.template_sandbox``) with the knobs set — so the oracle itself is untouched
and, with no knobs, the answer is the oracle's. Inputs are the gate's own:
``{"messages", "add_generation_prompt", "kwargs"}`` through the model's template, or
``{"template", "context"}`` for the construct templates (the ``constructs`` pseudo model).

Only deviations the corpus can tell from correct behaviour are in the catalogue (each is
planted in ``tests/engines/fixable_template.py`` and diagnosed in ``tests/diagnose``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jinja2

from oracle.template import REASONING_FIELDS, template_context
from oracle.template_guards import guarded_filter
from oracle.template_sandbox import TemplateSandbox
from specgate.diagnose.tokenizer import Hypothesis, _h

#: What the oracle (or a deviation of it) answers where the template refuses.
REFUSED = ("refused",)

_HTML_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "'": "\\u0027"}


def _tojson(html: bool, ascii_only: bool) -> Any:
    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: Any = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        out = json.dumps(
            x,
            ensure_ascii=ensure_ascii or ascii_only,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
        )
        if html:  # jinja2's htmlsafe_json_dumps
            for char, escape in _HTML_ESCAPES.items():
                out = out.replace(char, escape)
        return out

    return tojson


class DeviatedSandbox(TemplateSandbox):
    """The oracle's template sandbox with the environment knobs of a deviation set."""

    def __init__(self, knobs: Mapping[str, Any]) -> None:
        super().__init__()
        self.knobs = dict(knobs)
        if knobs.get("blocks_untrimmed"):
            self.trim_blocks = self.lstrip_blocks = False
        if knobs.get("tojson"):
            self.filters["tojson"] = guarded_filter(
                "tojson", _tojson(knobs["tojson"] == "html", knobs["tojson"] == "ascii")
            )
        if knobs.get("strip_args_ignored"):
            self.filters["trim"] = guarded_filter("trim", lambda value, chars=None: str(value).strip())

    def _finalize_output(self, value: Any) -> Any:  # type: ignore[override]
        value = TemplateSandbox._finalize_output(value)
        if self.knobs.get("js_booleans") and isinstance(value, bool):
            return "true" if value else "false"
        return value

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        if (
            __self.knobs.get("strip_args_ignored")
            and isinstance(getattr(__obj, "__self__", None), str)
            and getattr(__obj, "__name__", "") in ("strip", "lstrip", "rstrip")
        ):
            args, kwargs = (), {}
        return super().call(__context, __obj, *args, **kwargs)


@dataclass
class ModelTemplate:
    """A model's chat template (None for the construct pseudo model), with the deviated
    environments and their compiled templates of one diagnosis row."""

    source: str | None
    special_tokens: dict[str, str]
    _default_system: str | None = None
    _compiled: dict[tuple[tuple[str, Any], ...], dict[str, jinja2.Template]] = field(default_factory=dict)
    _envs: dict[tuple[tuple[str, Any], ...], DeviatedSandbox] = field(default_factory=dict)

    def default_system(self) -> str:
        """The block the template renders in front of a conversation that has no system
        message (Qwen2.5's "You are Qwen, …"): what precedes the first user turn's
        ``<|im_start|>`` when a lone user message is rendered; "" when there is none."""
        if self._default_system is None:
            context = template_context([{"role": "user", "content": "\x00"}], False, self.special_tokens)
            out = self.render(self.source or "", context, {})
            at = out.find("<|im_start|>user") if isinstance(out, str) else -1
            self._default_system = out[:at] if at > 0 else ""
        return self._default_system

    def render(self, source: str, context: dict[str, Any], knobs: Mapping[str, Any]) -> Any:
        key = tuple(sorted((k, v) for k, v in knobs.items() if k in ENV_KNOBS))
        env = self._envs.setdefault(key, DeviatedSandbox(dict(key)))
        compiled = self._compiled.setdefault(key, {})
        try:
            if source not in compiled:
                if len(compiled) >= 128:  # construct templates: a row has at most a few hundred
                    compiled.clear()
                compiled[source] = env.from_string(source)
            return env.render(compiled[source], context)
        except Exception:  # the template (or the sandbox) refuses: a refusal is the answer
            return REFUSED


ENV_KNOBS = ("blocks_untrimmed", "tojson", "strip_args_ignored", "js_booleans")


def _stripped_reasoning(messages: Any) -> Any:
    out = []
    for message in messages:
        if isinstance(message, Mapping):
            message = {
                k: v.strip() if k in REASONING_FIELDS and isinstance(v, str) else v
                for k, v in message.items()
            }
        out.append(message)
    return out


def answer(stage: str, m: ModelTemplate, inp: Mapping[str, Any], knobs: Mapping[str, Any]) -> Any:
    """The oracle's rendering of ``inp`` with the deviations ``knobs`` applied (``REFUSED``
    where the template refuses)."""
    if "template" in inp:
        return m.render(inp["template"], dict(inp["context"]), knobs)
    assert m.source is not None
    messages = inp["messages"]
    if knobs.get("reasoning_stripped"):
        messages = _stripped_reasoning(messages)
    generation = inp["add_generation_prompt"] and not knobs.get("no_generation_prompt")
    try:
        context = template_context(messages, generation, m.special_tokens, **inp.get("kwargs", {}))
    except (TypeError, ValueError):
        return REFUSED
    out = m.render(m.source, context, knobs)
    if knobs.get("no_default_system") and isinstance(out, str) and _default_system_shows(m, inp):
        out = _without_default_system(m, out)  # the defect is the block's absence: nothing else changes
    return out


def _default_system_shows(m: ModelTemplate, inp: Mapping[str, Any]) -> bool:
    messages, kwargs = inp["messages"], inp.get("kwargs", {})
    first = messages[0] if messages and isinstance(messages[0], Mapping) else {}
    return bool(m.default_system()) and first.get("role") != "system" and not kwargs.get("tools")


def _without_default_system(m: ModelTemplate, out: str) -> str:
    block = m.default_system()
    return out[len(block) :] if out.startswith(block) else out


def applies(stage: str, m: ModelTemplate, inp: Mapping[str, Any], knobs: Mapping[str, Any]) -> bool:
    """Whether the deviation can show on this input at all: what a template is handed
    exists only for conversations, and a dropped generation prompt needs one asked for."""
    conversation_only = ("no_generation_prompt", "reasoning_stripped", "no_default_system")
    if "template" in inp and any(knobs.get(k) for k in conversation_only):
        return False
    if knobs.get("no_default_system") and ("template" in inp or not _default_system_shows(m, inp)):
        return False
    return not (knobs.get("no_generation_prompt") and not inp.get("add_generation_prompt"))


# ---------------------------------------------------------------------------
# the catalogue

CATALOGUE: tuple[Hypothesis, ...] = (
    *_h(
        "tojson_html_escaped", "render",
        "HTML-escapes in tojson (<, >, &, ' as \\u003c…, jinja2's own tojson); transformers' tojson does not",
        tojson="html",
    ),
    *_h(
        "tojson_ascii", "render",
        "escapes non-ASCII in tojson (ensure_ascii=True); transformers' tojson keeps it",
        tojson="ascii",
    ),
    *_h(
        "blocks_untrimmed", "render",
        "renders without trim_blocks/lstrip_blocks: the newline after a tag and the indent before it stay",
        blocks_untrimmed=True,
    ),
    *_h(
        "js_booleans", "render",
        "prints booleans as JavaScript does (true/false); Jinja prints True/False",
        js_booleans=True,
    ),
    *_h(
        "strip_args_ignored", "render",
        "ignores the argument of strip/lstrip/rstrip/trim: s.strip('\\n') strips all whitespace",
        strip_args_ignored=True,
    ),
    *_h(
        "no_generation_prompt", "render",
        "ignores add_generation_prompt: the assistant header is missing",
        no_generation_prompt=True,
    ),
    *_h(
        "no_default_system", "render",
        "leaves out the template's default system prompt where a conversation has no system message",
        no_default_system=True,
    ),
    *_h(
        "reasoning_stripped", "render",
        "strips the whitespace around a message's reasoning before the template sees it",
        reasoning_stripped=True,
    ),
)  # fmt: skip


def reference(model: Any) -> ModelTemplate:
    """The oracle's template of ``model`` (none for the construct pseudo model)."""
    from specgate.upkeep import corpus

    if model.id == corpus.CONSTRUCTS_MODEL_ID:
        return ModelTemplate(None, {})
    from oracle.gguf import open_gguf
    from oracle.template import chat_template_for

    template = chat_template_for(open_gguf(model.gguf, header_only=True), model.tokenizer_config)
    return ModelTemplate(template.source, template.special_tokens)


def ask(engine: Any, stage: str, model: Any, inp: Mapping[str, Any]) -> Any:
    """The engine's rendering of ``inp`` (an exception where it refuses)."""
    from specgate.outcomes.gate import call

    if "template" in inp:
        return call(engine, "render", inp["template"], inp["context"], method="render_template")
    return call(
        engine, "render", model, inp["messages"], inp["add_generation_prompt"], **inp.get("kwargs", {})
    )
