"""Hand reproductions of the divergences the render gate found in llama.cpp's built-in
(non-Jinja) chat templates, with llama-cpp-python's low-level API only (no specgate): the
GGUF loaded vocab-only, its template from `llama_model_chat_template(model, None)`, the
prompt from `llama_chat_apply_template`. Prints one line per divergence; exit 0 when every
one still reproduces, 1 when one no longer does, 2 when a model file is not cached.

    python impl/ecosystem/llama_cpp_builtin_template/confirm.py
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

import llama_cpp

# This runs as a script: its parent folder (impl/ecosystem/) holds the shared
# report of the confirm scripts, divergences.py (stdlib only).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from divergences import report

CACHE = Path(
    os.environ.get("SPECGATE_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specgate"
)


def apply(model_id: str, messages: list[tuple[str, str]], add_generation_prompt: bool) -> str:
    """llama.cpp's built-in rendering of ``messages`` ((role, content) pairs) for the model."""
    gguf = CACHE / "models" / model_id / f"{model_id}.gguf"
    if not gguf.exists():
        print(f"missing {gguf} (fetch it with `specgate models fetch {model_id}`)")
        sys.exit(2)
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(gguf).encode(), params)
    template = llama_cpp.llama_model_chat_template(model, None)
    chat = (llama_cpp.llama_chat_message * len(messages))()
    encoded = [(role.encode(), content.encode()) for role, content in messages]
    for slot, (role, content) in zip(chat, encoded, strict=True):
        slot.role, slot.content = role, content
    needed = llama_cpp.llama_chat_apply_template(
        template, chat, len(messages), add_generation_prompt, ctypes.create_string_buffer(1), 0
    )
    if needed < 0:
        return f"llama_chat_apply_template returned {needed}"
    buf = ctypes.create_string_buffer(needed + 1)
    written = llama_cpp.llama_chat_apply_template(
        template, chat, len(messages), add_generation_prompt, buf, needed + 1
    )
    llama_cpp.llama_model_free(model)
    return buf.raw[:written].decode("utf-8")


QUESTION = [("user", "What is the capital of France?")]


def main() -> int:
    llama_cpp.llama_backend_init()
    rows = [
        (
            "Qwen2.5: no default system prompt when the conversation has none "
            "(render group, qwen2.5-coder-0.5b-instruct 01_single_user)",
            apply("qwen2.5-coder-0.5b-instruct", QUESTION, True),
            # transformers 5.24.0 apply_chat_template(tokenize=False, add_generation_prompt=True)
            # (snapshots/qwen2.5-coder-0.5b-instruct/render.json, case 01_single_user/gen)
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
        ),
        (
            "DeepSeek-R1-Distill: the prompt does not start with the template's BOS text "
            "(render group, deepseek-r1-distill-qwen-7b-vocab 01_single_user)",
            apply("deepseek-r1-distill-qwen-7b-vocab", QUESTION, True),
            # transformers 5.24.0 (snapshots/deepseek-r1-distill-qwen-7b-vocab/render.json, 01_single_user/gen)
            "<｜begin▁of▁sentence｜><｜User｜>What is the capital of France?<｜Assistant｜>",
        ),
        (
            "DeepSeek-R1-Distill: a system message comes first without the BOS text "
            "(render group, deepseek-r1-distill-qwen-7b-vocab 02_system_user)",
            apply(
                "deepseek-r1-distill-qwen-7b-vocab",
                [("system", "You are a terse assistant."), ("user", "Hi!")],
                True,
            ),
            # transformers 5.24.0 (snapshots/deepseek-r1-distill-qwen-7b-vocab/render.json, 02_system_user/gen)
            "<｜begin▁of▁sentence｜>You are a terse assistant.<｜User｜>Hi!<｜Assistant｜>",
        ),
        (
            "Qwen3: the <think> block of an earlier assistant turn is kept "
            "(render group, qwen3-vocab 10_think_in_history)",
            apply(
                "qwen3-vocab",
                [
                    ("user", "What is 17*3?"),
                    ("assistant", "<think>\n17*3 = 51\n</think>\n\n51"),
                    ("user", "And 17*4?"),
                ],
                False,
            ),
            # transformers 5.24.0 (snapshots/qwen3-vocab/render.json, case 10_think_in_history/no-gen)
            "<|im_start|>user\nWhat is 17*3?<|im_end|>\n<|im_start|>assistant\n51<|im_end|>\n"
            "<|im_start|>user\nAnd 17*4?<|im_end|>\n",
        ),
    ]
    return report(rows, "llama.cpp", "transformers")


if __name__ == "__main__":
    sys.exit(main())
