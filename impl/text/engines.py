"""Single-purpose references: CPython ``regex`` for the pre-tokenizer split and
tiktoken for tiktoken-shipped vocabularies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from impl.protocol import Engine, ModelRef


class RegexSplitter(Engine):
    name = "regex"
    is_reference = True

    # --- tokenizer stage (split / encode / decode) ------------------------------
    def version(self) -> str:
        from importlib.metadata import version

        return f"regex {version('regex')}"

    def split(self, model: ModelRef, text: str) -> list[str]:
        from impl.text.inputs import split_pattern

        return split_pattern(model).findall(text)


class TiktokenEngine(Engine):
    name = "tiktoken"
    is_reference = True

    # --- tokenizer stage (split / encode / decode) ------------------------------
    def __init__(self) -> None:
        self._encodings: dict[str, Any] = {}

    def version(self) -> str:
        from importlib.metadata import version

        return f"tiktoken {version('tiktoken')}"

    def _encoding(self, model: ModelRef) -> Any:
        from impl.text.inputs import tiktoken_encoding

        if model.id not in self._encodings:
            self._encodings[model.id] = tiktoken_encoding(model)
        return self._encodings[model.id]

    def encode(self, model: ModelRef, text: str, parse_special: bool) -> list[int]:
        enc = self._encoding(model)
        if parse_special:
            return enc.encode(text, allowed_special="all")
        return enc.encode(text, allowed_special=set(), disallowed_special=())

    def decode(self, model: ModelRef, ids: Sequence[int]) -> bytes:
        return self._encoding(model).decode_bytes(list(ids))
