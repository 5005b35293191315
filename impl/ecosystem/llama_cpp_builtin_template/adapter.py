"""specgate adapter for llama.cpp's built-in, non-Jinja chat templates
(`llama_chat_apply_template`, reached through llama-cpp-python's low-level ctypes API):
a `cmd:` engine speaking `specgate-jsonl/1` (PROTOCOL.md) over stdio, stage `render`.

This is what llama.cpp's examples and every binding that does not run Jinja render a
conversation with: llama.cpp recognizes the model's `tokenizer.chat_template` (by
substrings such as `<|im_start|>`) as one of its hand-written formats and formats the
messages itself. The adapter loads the GGUF vocab-only, takes the template with
`llama_model_chat_template(model, None)`, and answers
`llama_chat_apply_template(template, messages, n, add_generation_prompt, buf, len)`.

That API takes a role and a string content per message, nothing else: a message with tool
calls, reasoning, non-string content or other keys, a conversation with tools or documents,
and template kwargs (`enable_thinking`, ...) are refused with that reason. A template
llama.cpp does not recognize (the call returns a negative number) is refused too.
`render_template` is not offered (`"ops": ["render"]`).

Standalone: stdlib + `llama_cpp` only (and the shared loop `../jsonl_engine.py`).

    python impl/ecosystem/llama_cpp_builtin_template/adapter.py
"""

from __future__ import annotations

import ctypes
import sys
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

import llama_cpp

# The adapter runs as a script: its parent folder (impl/ecosystem/) holds the shared
# specgate-jsonl/1 loop, jsonl_engine.py (stdlib only).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from jsonl_engine import BadRequest, Refusal, hello, serve

MESSAGE_KEYS = {"role", "content"}


@cache
def model_template(gguf: str) -> bytes:
    """The GGUF's chat template as llama.cpp reads it (vocab-only load)."""
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(gguf.encode(), params)
    if not model:
        raise BadRequest(f"llama.cpp cannot load {gguf}")
    template = llama_cpp.llama_model_chat_template(model, None)
    if template is None:
        raise Refusal("the GGUF has no chat template (llama.cpp would fall back to chatml)")
    return template


def apply_template(template: bytes, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
    """`llama_chat_apply_template` as llama.cpp's examples call it: once to learn the
    length, again with a buffer that large."""
    keep = [(m["role"].encode(), m["content"].encode()) for m in messages]  # alive during the call
    chat = (llama_cpp.llama_chat_message * len(keep))()
    for slot, (role, content) in zip(chat, keep, strict=True):
        slot.role, slot.content = role, content
    size = 0
    buf = ctypes.create_string_buffer(1)
    needed = llama_cpp.llama_chat_apply_template(template, chat, len(keep), add_generation_prompt, buf, size)
    if needed < 0:
        raise Refusal(
            "llama.cpp does not recognize this chat template (llama_chat_apply_template returned -1)"
        )
    buf = ctypes.create_string_buffer(needed + 1)
    written = llama_cpp.llama_chat_apply_template(
        template, chat, len(keep), add_generation_prompt, buf, needed + 1
    )
    return buf.raw[:written].decode("utf-8", errors="surrogateescape")


def render(request: dict[str, Any]) -> str:
    messages = request["messages"]
    if not messages:
        raise Refusal("an empty conversation cannot be rendered")
    kwargs = {k: v for k, v in (request.get("kwargs") or {}).items() if v is not None}
    if kwargs:
        raise Refusal(f"llama_chat_apply_template takes no template arguments ({', '.join(sorted(kwargs))})")
    for message in messages:
        extra = {k for k, v in message.items() if v is not None} - MESSAGE_KEYS
        if extra:
            raise Refusal(
                f"llama_chat_apply_template takes a role and a content only, not {', '.join(sorted(extra))}"
            )
        if not isinstance(message.get("content"), str):
            raise Refusal("llama_chat_apply_template takes string contents only")
    template = model_template(request["model"]["gguf"])
    return apply_template(template, messages, bool(request.get("add_generation_prompt", True)))


def main() -> int:
    llama_cpp.llama_backend_init()
    return serve(
        hello("llama.cpp llama_chat_apply_template", version("llama-cpp-python"), ["render"]),
        {"render": render},
    )


if __name__ == "__main__":
    sys.exit(main())
