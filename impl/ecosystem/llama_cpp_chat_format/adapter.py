"""specgate adapter for llama-cpp-python's own chat formatter (PyPI `llama-cpp-python`,
`llama_cpp.llama_chat_format.Jinja2ChatFormatter`): a `cmd:` engine speaking
`specgate-jsonl/1` (PROTOCOL.md) over stdio, stage `render`.

This is what `Llama(model_path=...).create_chat_completion(...)` renders a conversation
with when the GGUF carries a `tokenizer.chat_template`: `Llama.__init__` builds
`Jinja2ChatFormatter(template, eos_token, bos_token)` from the model's metadata and its
vocabulary's token texts. The adapter builds the same, on a vocab-only `Llama`, and
answers `formatter(messages=..., tools=..., **kwargs).prompt`. The formatter's
`add_generation_prompt` is a constructor argument (always true in llama-cpp-python's chat
handlers): a request asking for none gets a formatter built with `False`. The formatter
takes the messages as given (no transformers normalization): where that differs from
transformers, that is what the gates are meant to find. A render that raises (the
template's `raise_exception`, or jinja2 on a message it cannot take) is the formatter
declining the input: `unsupported`, with the exception. `render_template` is not offered:
the formatter renders only a model's conversations (`"ops": ["render"]`).

Standalone: stdlib + `llama_cpp` only (and the shared loop `../jsonl_engine.py`).

    python impl/ecosystem/llama_cpp_chat_format/adapter.py
"""

from __future__ import annotations

import sys
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

from llama_cpp import Llama
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

# The adapter runs as a script: its parent folder (impl/ecosystem/) holds the shared
# specgate-jsonl/1 loop, jsonl_engine.py (stdlib only).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from jsonl_engine import Refusal, hello, serve


@cache
def model_formatters(gguf: str) -> tuple[Jinja2ChatFormatter, Jinja2ChatFormatter]:
    """The formatter `Llama.__init__` builds for this GGUF (with and without the
    generation prompt), from a vocab-only load of it."""
    llm = Llama(model_path=gguf, vocab_only=True, verbose=False)
    template = llm.metadata.get("tokenizer.chat_template")
    if template is None:
        raise Refusal(
            "the GGUF has no tokenizer.chat_template (llama-cpp-python then uses its llama-2 format)"
        )
    # As Llama.__init__ does (llama_cpp/llama.py, 0.3.x): the token texts of BOS and EOS.
    eos_id, bos_id = llm.token_eos(), llm.token_bos()
    eos = llm._model.token_get_text(eos_id) if eos_id != -1 else ""
    bos = llm._model.token_get_text(bos_id) if bos_id != -1 else ""
    return tuple(  # type: ignore[return-value]
        Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos, add_generation_prompt=flag)
        for flag in (True, False)
    )


def render(request: dict[str, Any]) -> str:
    messages = request["messages"]
    if not messages:
        raise Refusal("an empty conversation cannot be rendered")
    with_prompt, without = model_formatters(request["model"]["gguf"])
    formatter = with_prompt if request.get("add_generation_prompt", True) else without
    kwargs = dict(request.get("kwargs") or {})
    try:
        return formatter(messages=messages, **kwargs).prompt
    except Exception as exc:  # raise_exception, or jinja2 failing on the messages as given
        raise Refusal(f"the formatter cannot render it: {type(exc).__name__}: {exc}") from None


def main() -> int:
    return serve(
        hello("llama-cpp-python Jinja2ChatFormatter", version("llama-cpp-python"), ["render"]),
        {"render": render},
    )


if __name__ == "__main__":
    sys.exit(main())
