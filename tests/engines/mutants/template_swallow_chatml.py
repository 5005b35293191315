"""Mutant engine: a chat template that cannot be rendered is silently replaced by
generic ChatML instead of being refused.

The refusal (a ``raise_exception`` in the template, an unsupported construct) is
swallowed and the conversation rendered as ``<|im_start|>role\\n…<|im_end|>``.
Expected to fail the render gate where the reference refuses.

    python tests/engines/mutants/template_swallow_chatml.py
"""

from __future__ import annotations

import sys
from typing import Any

from impl.process.server import serve
from impl.registry import resolve
from oracle import template


def chatml(messages: Any, add_generation_prompt: bool) -> str:
    """Generic ChatML, as lenient as such fallbacks are (missing content is empty)."""
    turns = "".join(
        f"<|im_start|>{m.get('role', '')}\n{m.get('content') or ''}<|im_end|>\n" for m in messages
    )
    return turns + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def plant() -> None:
    render = template.ChatTemplate.render
    for_model = template.chat_template_for

    def render_or_chatml(
        self: Any,
        messages: Any,
        add_generation_prompt: bool = False,
        tools: Any = None,
        documents: Any = None,
        **kwargs: Any,
    ) -> str:
        try:
            return render(self, messages, add_generation_prompt, tools, documents, **kwargs)
        except template.TemplateRefusal:
            return chatml(messages, add_generation_prompt)

    def chat_template_or_chatml(
        metadata: Any, tokenizer_config: Any = None, *args: Any, **kwargs: Any
    ) -> Any:
        try:
            return for_model(metadata, tokenizer_config, *args, **kwargs)
        except template.TemplateRefusal:
            return template.ChatTemplate(template.CHATML, template.special_tokens(metadata), "chatml")

    template.ChatTemplate.render = render_or_chatml
    template.chat_template_for = chat_template_or_chatml


if __name__ == "__main__":
    plant()
    sys.exit(serve(resolve("oracle")))
