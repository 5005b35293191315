"""Hugging Face tokenizers as an encode/decode reference.

Where the model ships a ``tokenizer.json`` it is loaded as is
(``tokenizers.Tokenizer.from_file``) — including its NFC normalizer, which the GGUF
pipeline does not apply (a recorded reference disagreement, not a bug of either).
Otherwise transformers builds the tokenizer from the GGUF itself
(``AutoTokenizer.from_pretrained(dir, gguf_file=...)``, ~20 s for a 150k vocabulary;
the adapter keeps it for the session).

``parse_special=False`` sets ``encode_special_tokens``: tokens marked special are
then encoded as text, while added tokens not marked special (``<tool_call>``,
``<think>``) are still matched — the same split llama.cpp makes between control
and user-defined tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from impl.protocol import ModelRef, Unsupported


def from_gguf(model: ModelRef) -> Any:
    """The transformers tokenizer transformers builds from the GGUF itself (~20 s for a
    150k vocabulary): the adapter loads it once and shares it with the render stage."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(model.gguf.parent), gguf_file=model.gguf.name)
    except Exception as exc:  # transformers refuses GGUF architectures it cannot convert
        raise Unsupported(f"transformers cannot build a tokenizer from {model.gguf.name}: {exc}") from exc


def load(model: ModelRef, gguf_tokenizer: Callable[[], Any]) -> Any:
    """The ``tokenizers.Tokenizer`` for ``model``: its ``tokenizer.json``, else the backend
    of ``gguf_tokenizer()`` (the session's one ``from_gguf`` tokenizer)."""
    from tokenizers import Tokenizer

    if model.tokenizer_json is not None:
        return Tokenizer.from_file(str(model.tokenizer_json))
    return gguf_tokenizer().backend_tokenizer


def or_refusal(load: Callable[[], Any]) -> Any:
    """``load()``, with a refusal kept as a value so a session asks transformers only once."""
    try:
        return load()
    except Unsupported as exc:
        return exc


def unwrap(loaded: Any) -> Any:
    if isinstance(loaded, Unsupported):
        raise Unsupported(str(loaded))
    return loaded


def encode(tok: Any, text: str, parse_special: bool) -> list[int]:
    tok.encode_special_tokens = not parse_special
    return list(tok.encode(text, add_special_tokens=False).ids)


def decode(tok: Any, ids: Sequence[int]) -> bytes:
    """HF decodes to ``str``: bytes of an incomplete UTF-8 sequence come back as U+FFFD."""
    return tok.decode(list(ids), skip_special_tokens=False).encode("utf-8")


def piece(tok: Any, token: int) -> bytes:
    """One token's bytes, which ``decode`` cannot give for a piece of a UTF-8 character:
    an added token's content, else the byte-level BPE token mapped back through GPT-2's
    byte table (the inverse of the ``ByteLevel`` pre-tokenizer's)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    text = tok.id_to_token(token)
    if text is None:
        raise Unsupported(f"transformers' tokenizer has no token {token}")
    if token in tok.get_added_tokens_decoder():
        return text.encode("utf-8")
    table = {c: b for b, c in bytes_to_unicode().items()}
    return bytes(table[c] for c in text)
