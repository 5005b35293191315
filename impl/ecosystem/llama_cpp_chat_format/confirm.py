"""Hand reproductions of the divergences the render gate found in llama-cpp-python's own
chat formatter, with its public API only (no specgate): `Jinja2ChatFormatter` built as
`Llama.__init__` builds it from a GGUF (a vocab-only `Llama`: the model's
`tokenizer.chat_template`, the text of its EOS and BOS tokens). Prints one line per
divergence; exit 0 when every one still reproduces, 1 when one no longer does, 2 when a
model file is not cached.

    python impl/ecosystem/llama_cpp_chat_format/confirm.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from llama_cpp import Llama
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

# This runs as a script: its parent folder (impl/ecosystem/) holds the shared
# report of the confirm scripts, divergences.py (stdlib only).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from divergences import report

CACHE = Path(
    os.environ.get("SPECGATE_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specgate"
)


def formatter(model_id: str, add_generation_prompt: bool) -> Jinja2ChatFormatter:
    """The formatter `Llama(model_path=...)` builds for this model (llama_cpp/llama.py)."""
    gguf = CACHE / "models" / model_id / f"{model_id}.gguf"
    if not gguf.exists():
        print(f"missing {gguf} (fetch it with `specgate models fetch {model_id}`)")
        sys.exit(2)
    llm = Llama(model_path=str(gguf), vocab_only=True, verbose=False)
    eos = llm._model.token_get_text(llm.token_eos())
    bos = llm._model.token_get_text(llm.token_bos())
    return Jinja2ChatFormatter(
        template=llm.metadata["tokenizer.chat_template"],
        eos_token=eos,
        bos_token=bos,
        add_generation_prompt=add_generation_prompt,
    )


def rendered(
    model_id: str, add_generation_prompt: bool, messages: list[dict[str, Any]], **kwargs: Any
) -> str:
    """The formatter's prompt, or the exception it raised (type: message)."""
    try:
        return formatter(model_id, add_generation_prompt)(messages=messages, **kwargs).prompt
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a timezone",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]},
    },
}


def main() -> int:
    rows = [
        (
            "thinking alias: the assistant's `thinking` is not given to the template as reasoning_content "
            "(render group, qwen3-vocab 14_thinking_alias)",
            rendered(
                "qwen3-vocab",
                False,
                [
                    {"role": "user", "content": "Pick a colour."},
                    {"role": "assistant", "content": "Blue.", "thinking": "Any colour will do."},
                ],
            ),
            # transformers 5.24.0 apply_chat_template(tokenize=False) with qwen3-vocab's template
            # (specgate's snapshot snapshots/qwen3-vocab/render.json, case 14_thinking_alias/no-gen)
            "<|im_start|>user\nPick a colour.<|im_end|>\n<|im_start|>assistant\n<think>\n"
            "Any colour will do.\n</think>\n\nBlue.<|im_end|>\n",
        ),
        (
            "content None kept: a tool-call message with content None renders where transformers "
            "(which drops None keys) raises (render group, deepseek-r1-distill 19_tool_call_content_none)",
            rendered(
                "deepseek-r1-distill-qwen-7b-vocab",
                True,
                [
                    {"role": "user", "content": "Time in UTC?"},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "type": "function",
                                "function": {"name": "get_time", "arguments": '{"tz": "UTC"}'},
                            }
                        ],
                    },
                    {"role": "tool", "content": "12:00"},
                ],
                tools=[TIME_TOOL],
            ),
            # transformers 5.24.0 apply_chat_template(tokenize=False, tools=[...]) raises
            # (snapshots/deepseek-r1-distill-qwen-7b-vocab/render.json, 19_tool_call_content_none/gen)
            "UndefinedError: 'dict object' has no attribute 'content'",
        ),
    ]
    return report(rows, "llama-cpp-python", "transformers")


if __name__ == "__main__":
    sys.exit(main())
