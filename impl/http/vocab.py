"""A GGUF's vocabulary as servers spell it: what maps a server's text answers back to
ids (llama-cpp-python names candidates and takes prompts as text) and sizes the
``logits`` rows."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=4)
def pieces(gguf_path: Path, controls: bool = False) -> list[bytes]:
    """Each id's bytes as llama.cpp renders it: control tokens empty, or with
    ``controls`` their own text."""
    from oracle.byte_level import from_standin
    from oracle.gguf import open_gguf

    meta = open_gguf(gguf_path, header_only=True).metadata
    tokens, types = meta["tokenizer.ggml.tokens"], meta.get("tokenizer.ggml.token_type")
    out = []
    for i, tok in enumerate(tokens):
        kind = int(types[i]) if types is not None else 1
        if kind == 3:
            out.append(tok.encode("utf-8") if controls else b"")
        else:
            out.append(tok.encode("utf-8") if kind == 4 else from_standin(tok))
    return out


def texts(gguf_path: Path) -> list[str]:
    """Each id's text as llama-cpp-python names it: its piece decoded, errors ignored."""
    return [p.decode("utf-8", errors="ignore") for p in pieces(gguf_path)]


@lru_cache(maxsize=4)
def _text_index(gguf_path: Path) -> dict[str, int | None]:
    """Text -> id, for texts exactly one id produces. A text several ids share (all
    control tokens read as ""; ``b" \\xe8"`` reads as " " like the space token) is
    ``None``: the server keeps one value under it, and which id it belongs to is lost."""
    index: dict[str, int | None] = {}
    for i, text in enumerate(texts(gguf_path)):
        index[text] = None if text in index else i
    return index


def unique_id(gguf_path: Path, text: str) -> int | None:
    """The one id whose text is ``text``, or None (no id, or several)."""
    return _text_index(gguf_path).get(text)
