"""transformers as the chat-template reference.

``render`` is ``apply_chat_template(messages, tokenize=False, ...)`` on the model's
own tokenizer: built from ``tokenizer_config.json`` + ``tokenizer.json`` where the
model ships them, else by transformers from the GGUF itself
(``AutoTokenizer.from_pretrained(dir, gguf_file=...)``, which reads
``tokenizer.chat_template`` and the bos/eos/pad token strings from the GGUF
metadata; ~20 s for a 150k vocabulary, once per session).

``render_template`` is transformers' compiled environment used directly:
``_compile_jinja_template(template).render(**context)`` — the expected output of
the construct-conformance gate.

A template that fails (its own ``raise_exception``, or a runtime error such as an
undefined attribute) is reported as ``Unsupported`` carrying transformers'
exception type and message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from impl.protocol import ModelRef, Unsupported


def load(model: ModelRef, gguf_tokenizer: Callable[[], Any]) -> Any:
    """The transformers tokenizer whose ``chat_template`` and special tokens are the model's:
    from ``tokenizer_config.json``, else ``gguf_tokenizer()`` (the session's one tokenizer
    built from the GGUF, shared with the tokenizer stage)."""
    from transformers import AutoTokenizer

    if model.tokenizer_config is not None:
        return AutoTokenizer.from_pretrained(str(model.tokenizer_config.parent))
    return gguf_tokenizer()


def _template_errors() -> tuple[type[BaseException], ...]:
    import jinja2

    return (jinja2.TemplateError, TypeError, ValueError, LookupError, ArithmeticError, RecursionError)


def render(tok: Any, messages: Sequence[dict[str, Any]], add_generation_prompt: bool, **kwargs: Any) -> str:
    if tok.chat_template is None:
        raise Unsupported("the model has no chat template (transformers has no fallback)")
    try:
        return tok.apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
        )
    except _template_errors() as exc:
        raise Unsupported(f"{type(exc).__name__}: {exc}") from exc


def render_template(template: str, context: dict[str, Any]) -> str:
    from transformers.utils.chat_template_utils import _compile_jinja_template

    try:
        return _compile_jinja_template(template).render(**context)
    except _template_errors() as exc:
        raise Unsupported(f"{type(exc).__name__}: {exc}") from exc


def template_error(exc: BaseException) -> dict[str, str]:
    """How a reference refusal is stored in a snapshot: exception type and message.

    ``raised_by_template`` is true for ``raise_exception(...)`` (jinja2's base
    ``TemplateError``): that message is the template's own and must surface verbatim
    in any engine's refusal.
    """
    import jinja2

    cause = exc.__cause__ if isinstance(exc, Unsupported) and exc.__cause__ is not None else exc
    return {
        "type": type(cause).__name__,
        "message": str(cause),
        "raised_by_template": type(cause) is jinja2.TemplateError,
    }
