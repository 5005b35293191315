"""Chat templates: the model's own ``tokenizer.chat_template`` rendered to a prompt.

The model was trained on one exact arrangement of marker strings; the template
stored in its GGUF (or its ``tokenizer_config.json``) is the only authority on that
arrangement. Rendering must therefore match transformers'
``apply_chat_template(tokenize=False)`` byte for byte:

1. The messages are normalized as transformers does: keys whose value is ``None``
   are dropped (``content=None`` becomes *undefined* to the template), values are
   reduced to plain JSON data, and a message carrying reasoning under any of
   ``reasoning_content`` / ``thinking`` / ``reasoning`` gets it under both
   ``thinking`` (first key) and ``reasoning_content`` (last key).
2. The context is ``messages``, ``tools``, ``documents`` (``None`` when not given),
   ``add_generation_prompt``, the tokenizer's special-token strings (``bos_token``,
   ``eos_token``, … — here read from the GGUF's token ids) and any extra keyword
   (``enable_thinking``), which override special tokens of the same name.
3. The template runs in ``oracle.template_sandbox`` — transformers' environment
   (``oracle.template_env``) plus bounds on steps, time and size.

A template that cannot compile or render is *refused*: ``TemplateRefusal`` names
the construct and the template line. The template is checked once when loaded by
rendering a canary conversation, so a broken template fails before any prompt is
built. There is never a silent fallback: the generic ChatML renderer is used only
for a model that has no template at all, and then with a visible notice
(``ChatMLFallbackNotice`` warning, ``ChatTemplate.is_fallback``).

Multi-turn engines reuse their KV cache by appending only what a new turn adds;
``delta`` computes that addition and refuses (``NotAppendOnly``) when the template
re-renders history differently, as Qwen3's does when it drops past reasoning.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import jinja2

from oracle.metadata import Source as Metadata
from oracle.metadata import read_str, read_strings, read_token_id
from oracle.template_sandbox import DEFAULT_LIMITS, Limits, SandboxRefusal, StaticRefusal, TemplateSandbox

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
SPECIAL_TOKEN_KEYS = {
    "bos_token": "tokenizer.ggml.bos_token_id",
    "eos_token": "tokenizer.ggml.eos_token_id",
    "unk_token": "tokenizer.ggml.unknown_token_id",
    "pad_token": "tokenizer.ggml.padding_token_id",
}
CANARY = (
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi there."},
    {"role": "user", "content": "How are you?"},
)
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
NO_TEMPLATE_NOTICE = "Notice: this model has no tokenizer.chat_template; using the generic ChatML renderer"


class TemplateRefusal(Exception):
    """The template cannot be compiled or rendered. Never answered with another prompt.

    ``construct`` names what failed (``filter 'splitlines'``, ``attribute '__class__'``,
    ``raise_exception``, …), ``line`` is the template line (``None`` only when the
    failure is outside template code), ``source_line`` that line's text, and
    ``template_message`` the text a template passed to ``raise_exception``.
    """

    def __init__(
        self, construct: str, detail: str, line: int | None, source: str, template_message: str | None = None
    ) -> None:
        self.construct, self.detail, self.line = construct, detail, line
        lines = source.splitlines()
        self.source_line = lines[line - 1].strip() if line and 0 < line <= len(lines) else ""
        self.template_message = template_message
        super().__init__(refusal_message(self))


def refusal_message(refusal: TemplateRefusal) -> str:
    where = f"template line {refusal.line}" if refusal.line else "outside the template"
    snippet = refusal.source_line if len(refusal.source_line) <= 120 else refusal.source_line[:117] + "..."
    at = f": {snippet}" if snippet else ""
    return (
        f"chat template refused — {refusal.construct}: {refusal.detail} ({where}{at}); "
        "no generic ChatML prompt is substituted"
    )


class NotAppendOnly(Exception):
    """Rendering the longer conversation changed text already rendered for the history:
    ``offset`` is the first character where ``past`` (the history's render) and ``new``
    (the longer conversation's) differ."""

    def __init__(self, message: str, offset: int = 0, past: str = "", new: str = "") -> None:
        super().__init__(message)
        self.offset, self.past, self.new = offset, past, new


class ChatMLFallbackNotice(UserWarning):
    """The model has no chat template; prompts are generic ChatML."""


# ---------------------------------------------------------------------------
# compiling, and turning jinja2's failures into refusals that name line and construct

_ENVIRONMENT: TemplateSandbox | None = None
#: Compiled templates, least recently used first, at most ``COMPILED_LIMIT`` of them: a
#: model has one template, but the differential search feeds generated ones without end.
COMPILED_LIMIT = 64
_compiled: OrderedDict[tuple[int, str], jinja2.Template] = OrderedDict()


def environment() -> jinja2.Environment:
    """The one sandboxed environment every template compiles in."""
    global _ENVIRONMENT
    if _ENVIRONMENT is None:
        _ENVIRONMENT = TemplateSandbox()
    return _ENVIRONMENT


def compile_template(source: str) -> jinja2.Template:
    """Compile ``source`` (the last ``COMPILED_LIMIT`` cached), or raise ``TemplateRefusal``."""
    env = environment()
    key = (id(env), source)
    if key in _compiled:
        _compiled.move_to_end(key)
        return _compiled[key]
    try:
        compiled = env.from_string(source)
    except StaticRefusal as exc:
        raise TemplateRefusal(exc.construct, exc.detail, exc.lineno, source) from None
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateRefusal(
            _syntax_construct(exc.message or ""), exc.message or "syntax error", exc.lineno, source
        ) from None
    except (SyntaxError, RecursionError, MemoryError) as exc:  # the source bounds should prevent these
        raise TemplateRefusal(
            "compile", f"{type(exc).__name__} while compiling: {exc}", None, source
        ) from None
    _compiled[key] = compiled
    while len(_compiled) > COMPILED_LIMIT:
        _compiled.popitem(last=False)
    return compiled


def _syntax_construct(message: str) -> str:
    for pattern, kind in (
        (r"No filter named '([^']+)'", "filter"),
        (r"No test named '([^']+)'", "test"),
        (r"unknown tag '([^']+)'", "tag"),
    ):
        if m := re.search(pattern, message):
            return f"{kind} '{m.group(1)}'"
    return "syntax"


def _usage_line(source: str, construct: str) -> int | None:
    """The first template line using filter/test ``name`` (jinja2 reports deferred
    unknown-filter errors from the template's prologue, not from their line)."""
    kind, name = construct.split(" ", 1)
    name = re.escape(name.strip("'"))
    pattern = rf"\|\s*{name}\b" if kind == "filter" else rf"\bis\s+(not\s+)?{name}\b"
    for number, text in enumerate(source.splitlines(), 1):
        if re.search(pattern, text):
            return number
    return None


def _template_line(template: jinja2.Template, tb: TracebackType | None) -> int | None:
    """The template line of the innermost template frame in ``tb``.

    Compiled templates are Python code whose globals carry ``__jinja_template__``;
    jinja2 maps their code lines back to template lines (what its traceback
    rewriting uses).
    """
    line = None
    while tb is not None:
        if tb.tb_frame.f_globals.get("__jinja_template__") is template:
            line = template.get_corresponding_lineno(tb.tb_lineno)
        tb = tb.tb_next
    return line


def _runtime_construct(exc: BaseException) -> str:
    message = str(exc)
    if m := re.search(r"has no attribute '([^']+)'", message):
        return f"attribute '{m.group(1)}'"
    if m := re.search(r"'([^']+)' is undefined", message):
        return f"variable '{m.group(1)}'"
    if m := re.search(r"access to attribute '([^']+)'", message):
        return f"attribute '{m.group(1)}'"
    if m := re.search(r"namespace, but got '([^']+)'", message):
        return f"namespace attribute '{m.group(1)}'"
    if isinstance(exc, RecursionError):
        return "recursion"
    return type(exc).__name__


def render_compiled(template: jinja2.Template, source: str, context: dict[str, Any], limits: Limits) -> str:
    """Render, turning every failure into a ``TemplateRefusal`` with its template line."""
    try:
        return environment().render(template, context, limits)
    except SandboxRefusal as exc:
        line = exc.lineno or _template_line(template, exc.__traceback__)
        raise TemplateRefusal(exc.construct, exc.detail, line, source) from None
    except jinja2.TemplateError as exc:
        line = _template_line(template, exc.__traceback__)
        if type(exc) is jinja2.TemplateError:  # raise_exception(message): the template's own refusal
            message = exc.message or ""
            raise TemplateRefusal(
                "raise_exception", message, line, source, template_message=message
            ) from None
        construct = _syntax_construct(str(exc))
        if construct != "syntax":  # an unknown filter/test in a branch: jinja2 defers the error to render
            raise TemplateRefusal(
                construct, str(exc), _usage_line(source, construct) or line, source
            ) from None
        raise TemplateRefusal(_runtime_construct(exc), str(exc), line, source) from None
    except (
        TypeError,
        ValueError,
        LookupError,
        ArithmeticError,
        RecursionError,
        AttributeError,
        MemoryError,
    ) as exc:
        construct = _runtime_construct(exc)
        detail = str(exc) if construct == type(exc).__name__ else f"{type(exc).__name__}: {exc}"
        raise TemplateRefusal(
            construct, detail, _template_line(template, exc.__traceback__), source
        ) from None


def render_template(source: str, context: Mapping[str, Any], limits: Limits = DEFAULT_LIMITS) -> str:
    """Render any template string with ``context`` as given — the construct-conformance
    entry point (transformers' compiled environment, no message preparation)."""
    return render_compiled(compile_template(source), source, dict(context), limits)


# ---------------------------------------------------------------------------
# the conversation as transformers hands it to the template


def plain_data(value: Any) -> Any:
    """What a template may see: JSON scalars, dicts, lists, tuples — anything else
    becomes an inert ``"<TypeName>"`` placeholder (transformers does the same)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {plain_data(k): plain_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_data(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain_data(v) for v in value)
    return f"<{type(value).__name__}>"


def prepare_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Normalize a conversation the way ``apply_chat_template`` does before rendering."""
    if len(messages) == 0:
        raise ValueError("Cannot apply chat template to an empty conversation. Provide at least one message.")
    prepared = []
    for message in messages:
        if not isinstance(message, Mapping):
            raise TypeError(f"Chat messages should be dicts, but got {message!r}.")
        message = plain_data({k: v for k, v in message.items() if v is not None})
        reasoning = next((message[k] for k in REASONING_FIELDS if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        prepared.append(message)
    return prepared


def template_context(
    messages: Sequence[Mapping[str, Any]],
    add_generation_prompt: bool,
    special_tokens: Mapping[str, str],
    tools: Sequence[Mapping[str, Any]] | None = None,
    documents: Sequence[Mapping[str, Any]] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    for tool in tools or ():
        if not isinstance(tool, Mapping):
            raise TypeError(f"Tools should be JSON schemas (dicts), but got {tool!r}.")
    for document in documents or ():
        if not isinstance(document, Mapping):
            raise TypeError("Documents should be a list of dicts with 'title' and 'text' keys!")
    return {
        "messages": prepare_messages(messages),
        "tools": plain_data(list(tools)) if tools is not None else None,
        "documents": plain_data(list(documents)) if documents is not None else None,
        "add_generation_prompt": add_generation_prompt,
        **{**special_tokens, **plain_data(kwargs)},
    }


# ---------------------------------------------------------------------------
# the model's template


class ChatTemplate:
    """A model's chat template, compiled and validated on construction."""

    def __init__(
        self,
        source: str,
        special_tokens: Mapping[str, str] | None = None,
        origin: str = "string",
        limits: Limits = DEFAULT_LIMITS,
        notice: str | None = None,
    ) -> None:
        self.source = source
        self.special_tokens = dict(special_tokens or {})
        self.origin = origin
        self.limits = limits
        self.notice = notice
        self.sha256 = hashlib.sha256(source.encode("utf-8")).hexdigest()
        self._compiled = compile_template(source)
        self.render(list(CANARY), add_generation_prompt=True)  # the canary: refuse now, not mid-conversation

    @property
    def is_fallback(self) -> bool:
        """True when the model had no template and generic ChatML is used."""
        return self.notice is not None

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = False,
        tools: Sequence[Mapping[str, Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> str:
        context = template_context(
            messages, add_generation_prompt, self.special_tokens, tools, documents, **kwargs
        )
        return render_compiled(self._compiled, self.source, context, self.limits)


def special_tokens(metadata: Metadata) -> dict[str, str]:
    """``bos_token``/``eos_token``/… strings: the GGUF's token ids looked up in its vocabulary
    (a wrong-typed id, or one outside the vocabulary, is a ``GGUFError`` naming its key)."""
    tokens = read_strings(metadata, "tokenizer.ggml.tokens", default=[])
    out = {}
    for name, key in SPECIAL_TOKEN_KEYS.items():
        token_id = read_token_id(metadata, key, len(tokens))
        if token_id is not None:
            out[name] = tokens[token_id]
    return out


def _config_template(tokenizer_config: Path | Mapping[str, Any] | None) -> str | None:
    if tokenizer_config is None:
        return None
    config = (
        tokenizer_config
        if isinstance(tokenizer_config, Mapping)
        else json.loads(Path(tokenizer_config).read_text(encoding="utf-8"))
    )
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: the default one renders conversations
        template = next((t["template"] for t in template if t.get("name") == "default"), None)
    return template


def chat_template_for(
    metadata: Metadata,
    tokenizer_config: Path | Mapping[str, Any] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> ChatTemplate:
    """The model's template: GGUF ``tokenizer.chat_template``, else the one in
    ``tokenizer_config.json``, else ChatML with a visible notice. ``metadata`` is the
    GGUF (errors then name its path) or its metadata mapping."""
    tokens = special_tokens(metadata)
    if (source := read_str(metadata, "tokenizer.chat_template")) is not None:
        return ChatTemplate(source, tokens, "gguf:tokenizer.chat_template", limits)
    if (source := _config_template(tokenizer_config)) is not None:
        return ChatTemplate(source, tokens, "tokenizer_config.json:chat_template", limits)
    warnings.warn(NO_TEMPLATE_NOTICE, ChatMLFallbackNotice, stacklevel=2)
    return ChatTemplate(CHATML, tokens, "chatml-fallback", limits, notice=NO_TEMPLATE_NOTICE)


def delta(
    template: ChatTemplate,
    history: Sequence[Mapping[str, Any]],
    new: Sequence[Mapping[str, Any]],
    **kwargs: Any,
) -> str:
    """What appending ``new`` to ``history`` adds to the prompt an engine already holds.

    = render(history + new, add_generation_prompt=True) minus
      render(history, add_generation_prompt=False), valid only when the latter is a
    prefix of the former; otherwise ``NotAppendOnly`` says where they part.
    """
    before = template.render(history, add_generation_prompt=False, **kwargs) if history else ""
    after = template.render([*history, *new], add_generation_prompt=True, **kwargs)
    at = parting(before, after)
    if at is not None:
        raise NotAppendOnly(
            f"the template is not append-only for this conversation: re-rendering the history with the new "
            f"turn changes it at character {at} (history {before[max(0, at - 20) : at + 20]!r} vs "
            f"re-rendered {after[max(0, at - 20) : at + 20]!r})",
            at,
            before,
            after,
        )
    return after[len(before) :]


def parting(past: Sequence[Any], new: Sequence[Any]) -> int | None:
    """Where ``new`` stops extending ``past`` (two strings, or two id lists): None when
    ``past`` is a prefix of ``new``, else the first index where they differ (``len(new)``
    when ``new`` is a proper prefix of ``past``)."""
    n = min(len(past), len(new))
    at = next((i for i in range(n) if past[i] != new[i]), n)
    return None if at == len(past) else at
