"""llama.cpp's built-in chat formatting: ``llama_chat_apply_template``.

It is not a Jinja engine. It looks at the model's ``tokenizer.chat_template`` for
tell-tale substrings (``<|im_start|>`` → ChatML, ``<｜Assistant｜>`` → DeepSeek, …)
and formats ``(role, content)`` pairs with a hand-written C++ formatter for that
family. Tools, tool calls, reasoning fields and template kwargs
(``enable_thinking``) cannot be passed through this API at all, and the bos token
a template prints is left to tokenization. The render gate shows exactly where
that departs from the model's own template — which is the point of running it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

from impl.protocol import Unsupported


def model_template(llm: Any) -> bytes:
    """The model's ``tokenizer.chat_template`` as llama.cpp reads it from the GGUF."""
    import llama_cpp

    template = llama_cpp.llama_model_chat_template(llm.model, None)
    if not template:
        raise Unsupported("llama.cpp reports no tokenizer.chat_template for this model")
    return template


def apply_template(template: bytes, messages: Sequence[dict[str, Any]], add_generation_prompt: bool) -> str:
    import llama_cpp

    # Keep the encoded strings alive for the duration of the call.
    encoded = [
        (str(m.get("role", "")).encode("utf-8"), str(m.get("content") or "").encode("utf-8"))
        for m in messages
    ]
    chat = (llama_cpp.llama_chat_message * len(encoded))(
        *(llama_cpp.llama_chat_message(r, c) for r, c in encoded)
    )
    size = 2 * sum(len(r) + len(c) for r, c in encoded) + 1024
    for _ in range(2):
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_chat_apply_template(
            template, chat, len(encoded), add_generation_prompt, buf, size
        )
        if n < 0:
            raise Unsupported("llama_chat_apply_template does not recognise this model's chat template")
        if n <= size:
            return buf.raw[:n].decode("utf-8")
        size = n + 1  # the buffer was too small; n is the length needed
    raise Unsupported(f"llama_chat_apply_template kept asking for a larger buffer ({size} bytes)")
