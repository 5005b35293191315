"""Inputs of the single-purpose tokenizer references, kept independent of the oracle.

* The split reference is CPython ``regex`` ``findall`` of the pattern the model's
  tokenizer files ship for its ``tokenizer.ggml.pre`` rule; the patterns are data
  (``corpus/pretokenizer_patterns.json``), not the oracle's scanner.
* The tiktoken reference builds an ``Encoding`` from the ``.tiktoken`` ranks kept
  beside the GGUF, that family's split pattern and its special tokens
  (``corpus/tiktoken_specials.json``).

The rule name is read from the GGUF with a small key/value walk of its own (the
gguf-py reader parses every array and takes ~20 s on a 150k vocabulary).
"""

from __future__ import annotations

import json
import struct
from functools import lru_cache
from pathlib import Path
from typing import Any

from impl.datafiles import DATA_ROOT
from impl.protocol import ModelRef, Unsupported

CORPUS = DATA_ROOT / "corpus"

# GGUF value type -> size in bytes of a scalar; 8 = string, 9 = array.
_SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


def gguf_string(path: Path, key: str) -> str | None:
    """The string value of metadata ``key`` in the GGUF at ``path`` (None if absent)."""
    with open(path, "rb") as f:
        data = f.read(1 << 20)
        if data[:4] != b"GGUF":
            raise Unsupported(f"{path} is not a GGUF file")
        pos = 4 + 4 + 8  # magic, version, n_tensors
        (n_kv,) = struct.unpack_from("<Q", data, pos)
        pos += 8

        def need(n: int) -> None:
            nonlocal data
            while pos + n > len(data):
                more = f.read(max(n, 1 << 22))
                if not more:
                    raise Unsupported(f"{path}: metadata truncated while looking for {key}")
                data += more

        def string() -> str:
            nonlocal pos
            need(8)
            (n,) = struct.unpack_from("<Q", data, pos)
            need(8 + n)
            value = data[pos + 8 : pos + 8 + n].decode("utf-8", errors="replace")
            pos += 8 + n
            return value

        def skip(vtype: int) -> None:
            nonlocal pos
            if vtype == _STRING:
                string()
            elif vtype == _ARRAY:
                need(12)
                elem, count = struct.unpack_from("<IQ", data, pos)
                pos += 12
                if elem in _SCALAR_SIZE:
                    need(count * _SCALAR_SIZE[elem])
                    pos += count * _SCALAR_SIZE[elem]
                else:
                    for _ in range(count):
                        skip(elem)
            else:
                need(_SCALAR_SIZE[vtype])
                pos += _SCALAR_SIZE[vtype]

        for _ in range(n_kv):
            name = string()
            need(4)
            (vtype,) = struct.unpack_from("<I", data, pos)
            pos += 4
            if name == key and vtype == _STRING:
                return string()
            skip(vtype)
    return None


@lru_cache(maxsize=1)  # one file
def _patterns() -> dict[str, Any]:
    return json.loads((CORPUS / "pretokenizer_patterns.json").read_text(encoding="utf-8"))


def pattern_source(pre: str) -> dict[str, str]:
    data = _patterns()
    rule = data["aliases"].get(pre, pre)
    if rule not in data["patterns"]:
        raise Unsupported(
            f"no reference pattern for tokenizer.ggml.pre {pre!r}; known: {sorted(data['patterns'])}"
        )
    return data["patterns"][rule]


@lru_cache(maxsize=16)
def _pre_of(path: Path) -> str | None:
    return gguf_string(path, "tokenizer.ggml.pre")


@lru_cache(maxsize=4)  # one pattern per pre-tokenizer rule
def _compiled(pattern: str) -> Any:
    import regex

    return regex.compile(pattern)


def split_pattern(model: ModelRef) -> Any:
    """The compiled reference pattern for ``model``'s pre-tokenizer rule."""
    pre = _pre_of(model.gguf)
    if pre is None:
        raise Unsupported(f"{model.gguf.name} has no tokenizer.ggml.pre")
    return _compiled(pattern_source(pre)["pattern"])


def tiktoken_encoding(model: ModelRef) -> Any:
    """A tiktoken ``Encoding`` for a model that ships ``.tiktoken`` ranks."""
    if model.tiktoken is None:
        raise Unsupported(f"{model.id} ships no .tiktoken ranks")
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    pre = _pre_of(model.gguf) or ""
    specials = json.loads((CORPUS / "tiktoken_specials.json").read_text(encoding="utf-8"))
    family = data_key(pre)
    if family not in specials:
        raise Unsupported(f"no tiktoken special-token table for {pre!r}")
    table = specials[family]
    return tiktoken.Encoding(
        name=model.id,
        pat_str=pattern_source(pre)["pattern"],
        mergeable_ranks=load_tiktoken_bpe(str(model.tiktoken)),
        special_tokens={tok: table["start_id"] + i for i, tok in enumerate(table["tokens"])},
    )


def data_key(pre: str) -> str:
    """The rule a ``tokenizer.ggml.pre`` value names (aliases resolved)."""
    return _patterns()["aliases"].get(pre, pre)
