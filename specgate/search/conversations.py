"""Conversations for the render stage (a model's own chat template).

Roles in any order (the templates refuse some orders — a refusal is an answer
too), tool definitions whose descriptions hold ``<``, ``>``, ``&`` and ``'``,
tool calls with dict or JSON-string arguments and ``None`` content, reasoning
content with surrounding whitespace, documents, ``enable_thinking``, content with
template syntax, special tokens and astral-plane text.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

CONTENT_FRAGMENTS: tuple[str, ...] = (
    "Hi", "What is 2+2?", "4", "ok", " ", "  ", "\n", "\n\n", "\t", "<think>", "</think>", "<think>\nhm\n</think>",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "<tool_response>", "{{ x }}", "{% if %}",
    "{#", "'", '"', "<", ">", "&", "It's", "🙂", "𝔘", "é", "中文", "Ⅸ", "\\n", "null", "True",
)  # fmt: skip

_text = st.lists(
    st.sampled_from(CONTENT_FRAGMENTS) | st.text(st.characters(exclude_categories=("Cs",)), max_size=3),
    max_size=4,
).map("".join)

#: Reasoning with whitespace around it: templates that strip it differ from those that do not.
_reasoning = st.tuples(
    st.sampled_from(["", " ", "\n", "\n\n", " \t"]), _text, st.sampled_from(["", " ", "\n"])
).map("".join)

_DESCRIPTIONS = ("Get <weather> & 'time'", "a > b && c < d", "It's fine", "plain", "")


def _tool_def(name: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.sampled_from(_DESCRIPTIONS).map(
        lambda d: {
            "type": "function",
            "function": {
                "name": name,
                "description": d,
                "parameters": {"type": "object", "properties": {"q": {"type": "string", "description": d}}},
            },
        }
    )


_tool_names = st.sampled_from(["get_weather", "f", "search_<x>"])
_arguments = st.fixed_dictionaries({"q": _text}) | st.fixed_dictionaries({"q": _text}).map(
    lambda d: json.dumps(d, ensure_ascii=False)
)
_tool_call = st.builds(
    lambda name, args: {"type": "function", "function": {"name": name, "arguments": args}},
    _tool_names,
    _arguments,
)


def _message(role: str) -> st.SearchStrategy[dict[str, Any]]:
    base = st.fixed_dictionaries({"role": st.just(role), "content": _text})
    if role != "assistant":
        return base
    with_reasoning = st.fixed_dictionaries(
        {"role": st.just(role), "content": _text, "reasoning_content": _reasoning}
    )
    with_calls = st.fixed_dictionaries(
        {
            "role": st.just(role),
            "content": st.none() | _text,
            "tool_calls": st.lists(_tool_call, min_size=1, max_size=2),
        }
    )
    return base | with_reasoning | with_calls


_messages = st.lists(
    st.sampled_from(["user", "assistant", "system", "tool"]).flatmap(_message), min_size=1, max_size=4
)

_kwargs = st.fixed_dictionaries(
    {},
    optional={
        "tools": st.lists(_tool_names.flatmap(_tool_def), min_size=1, max_size=2),
        "enable_thinking": st.booleans(),
        "documents": st.lists(st.fixed_dictionaries({"title": _text, "text": _text}), min_size=1, max_size=1),
    },
)


def render_inputs() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"messages": _messages, "add_generation_prompt": st.booleans(), "kwargs": _kwargs}
    )
