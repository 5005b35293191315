"""llama.cpp's tokenizer through llama-cpp-python's low-level API.

``llama_tokenize`` with ``add_special=False`` (no bos) and ``parse_special`` as
asked; decode is the concatenation of ``llama_token_to_piece`` bytes with
``special=True`` (special tokens render as their text). The high-level
``Llama.detokenize`` is not used: it decodes into a fixed 32-byte buffer per token,
and Qwen vocabularies hold longer tokens (runs of spaces, dashes, ``=``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

from impl.protocol import Unsupported


def encode(llm: Any, text: str, parse_special: bool) -> list[int]:
    return list(llm.tokenize(text.encode("utf-8"), add_bos=False, special=parse_special))


def token_to_piece(llm: Any, token: int) -> bytes:
    import llama_cpp

    vocab = llm._model.vocab
    buf = ctypes.create_string_buffer(64)
    n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, True)
    if n < 0:  # the buffer was too small; -n is the size needed
        buf = ctypes.create_string_buffer(-n)
        n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, True)
    return buf.raw[:n]


def is_control(llm: Any, token: int) -> bool:
    """Whether llama.cpp treats ``token`` as a control token (type 3 in the GGUF)."""
    import llama_cpp

    return bool(llama_cpp.llama_vocab_is_control(llm._model.vocab, token))


def is_special(llm: Any, token: int) -> bool:
    """Whether ``token`` is a control or user-defined token (matched whole by the special scan)."""
    import llama_cpp

    attr = llama_cpp.llama_vocab_get_attr(llm._model.vocab, token)
    return bool(attr & (llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED))


def unused_ids(llm: Any) -> list[int]:
    """The ids llama.cpp types unused (the ``[PAD<id>]`` fillers), in id order."""
    import llama_cpp

    vocab = llm._model.vocab
    return [
        i
        for i in range(llm.n_vocab())
        if llama_cpp.llama_vocab_get_attr(vocab, i) & llama_cpp.LLAMA_TOKEN_ATTR_UNUSED
    ]


def decode(llm: Any, ids: Sequence[int]) -> bytes:
    n_vocab = llm.n_vocab()
    bad = [i for i in ids if not 0 <= i < n_vocab]
    if bad:
        # llama.cpp aborts the whole process on an out-of-range id; refuse instead.
        raise Unsupported(f"llama.cpp cannot decode out-of-range ids {bad[:5]} (vocabulary size {n_vocab})")
    return b"".join(token_to_piece(llm, i) for i in ids)
