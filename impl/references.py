"""Single-purpose references: CPython ``regex`` for the pre-tokenizer split and
tiktoken for tiktoken-shipped vocabularies."""

from __future__ import annotations

from impl.protocol import Engine


class RegexSplitter(Engine):
    name = "regex"
    is_reference = True


class TiktokenEngine(Engine):
    name = "tiktoken"
    is_reference = True
