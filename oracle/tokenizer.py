"""The tokenizer, built from GGUF metadata alone: text <-> token ids.

Encode runs three stages, in this order::

    special-token scan  ->  pre-tokenizer rule (tokenizer.ggml.pre)  ->  byte-level BPE

and decode maps ids back to the bytes they stand for. Everything comes from the
GGUF: ``tokenizer.ggml.tokens`` (id -> stand-in string), ``.merges`` (rank order),
``.token_type`` (3 = control, 4 = user-defined), ``.pre``, ``.model``.

The load refuses what it cannot reproduce exactly — a tokenizer model other than
``gpt2``, an unknown or missing pre-tokenizer rule, an empty merge list, a
vocabulary missing any of the 256 byte tokens — with a ``TokenizerError`` naming the
value. Values of the wrong type or length (a ``token_type`` array longer than the
vocabulary, a merge without its space, an empty-string control token, an eos id
outside the vocabulary) are ``GGUFError``s naming the key (``oracle.metadata``).

Semantics gated by specgate (those of the GGUF pipeline, i.e. llama.cpp):

* no Unicode normalization (HF's tokenizer.json applies NFC; a GGUF does not);
* ``parse_special`` is explicit. With it, every control and user-defined token is
  matched in the text; without it, control tokens are plain text but user-defined
  tokens (``<tool_call>``, ``<think>``) are still matched, as llama.cpp does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from oracle import bpe, bpe_fast
from oracle.byte_level import BYTE_TO_CHAR, from_standin, to_standin
from oracle.gguf import GGUFFile, open_gguf
from oracle.metadata import (
    metadata_error,
    read_floats,
    read_ints,
    read_str,
    read_strings,
    read_token_id,
)
from oracle.pretokenize import RULES, Rule, split
from oracle.special import SpecialScanner
from oracle.utf8 import complete_utf8_prefix_len

NORMAL, CONTROL, USER_DEFINED = 1, 3, 4
# llama.cpp's token types: 0 undefined, 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
MAX_TOKEN_TYPE = 6
# A byte-level BPE vocabulary decodes only these types to their text; llama.cpp's
# token_to_piece gives every other type (the [PAD<id>] fillers are "unused") no bytes.
DECODED_TYPES = (NORMAL, CONTROL, USER_DEFINED)
CHATML_FALLBACKS = ("<|im_start|>", "<|im_end|>")
CACHE_LIMIT = 1 << 17  # pieces remembered; cleared when full, enough for ~1 MB of mixed text

__all__ = ["Tokenizer", "TokenizerError", "Utf8Stream", "complete_utf8_prefix_len"]


class TokenizerError(ValueError):
    """The GGUF's tokenizer cannot be reproduced exactly; the message says why."""


def check_merges(gguf: GGUFFile, merges: list[str]) -> None:
    """Every merge is two non-empty symbols joined by one space (``"Ġ t"``)."""
    bad = next((i for i, m in enumerate(merges) if " " not in m[1:-1]), None)
    if bad is not None:
        raise metadata_error(
            gguf, "tokenizer.ggml.merges", f"entry {bad} is {merges[bad]!r}; expected two symbols and a space"
        )


def refuse_empty_special(gguf: GGUFFile, specials: dict[str, int]) -> None:
    """A control or user-defined token (or the eos fallback) must have text: an empty
    marker would match at every position of every input."""
    if "" in specials:
        raise metadata_error(
            gguf,
            "tokenizer.ggml.tokens",
            f"entry {specials['']} is an empty string but is a special token "
            "(control, user-defined or eos); a special token must have text",
        )


def token_types(gguf: GGUFFile, tokens: list[str]) -> list[int]:
    """Each token's type from ``tokenizer.ggml.token_type`` (all normal when absent)."""
    types = read_ints(gguf, "tokenizer.ggml.token_type", 0, MAX_TOKEN_TYPE, length=len(tokens))
    return [NORMAL] * len(tokens) if types is None else types.tolist()


def special_tokens(
    gguf: GGUFFile, tokens: list[str], types: list[int]
) -> tuple[dict[str, int], dict[str, int]]:
    """(control, user-defined) tokens by text, from the token types.

    Some converters mark the ChatML markers and eos as normal tokens; they are still
    protocol markers, so they count as control tokens. Real metadata wins: only what
    is not typed yet is added."""
    control = {tokens[i]: i for i, t in enumerate(types) if t == CONTROL}
    user_defined = {tokens[i]: i for i, t in enumerate(types) if t == USER_DEFINED}
    eos = read_token_id(gguf, "tokenizer.ggml.eos_token_id", len(tokens))
    index = {tok: i for i, tok in enumerate(tokens)}
    for text in [*CHATML_FALLBACKS, None if eos is None else tokens[eos]]:
        if text in index and text not in control and text not in user_defined:
            control[text] = index[text]
    refuse_empty_special(gguf, {**control, **user_defined})
    return control, user_defined


class Tokenizer:
    def __init__(
        self,
        tokens: Sequence[str],
        merges: Sequence[str],
        rule: Rule,
        control: dict[str, int],
        user_defined: dict[str, int],
        silent: Iterable[int] = (),
    ) -> None:
        self.tokens = list(tokens)
        self.silent = frozenset(silent)  # ids that decode to no bytes (see DECODED_TYPES)
        self.vocab = {tok: i for i, tok in enumerate(self.tokens)}
        self.ranks = {tuple(m.split(" ", 1)): rank for rank, m in enumerate(merges)}
        self.rule = rule
        self.always = SpecialScanner(user_defined)
        self.parsed = SpecialScanner({**control, **user_defined})
        self.cache: dict[str, list[int]] = {}

    @classmethod
    def from_gguf(cls, source: str | Path | GGUFFile) -> Tokenizer:
        gguf = source if isinstance(source, GGUFFile) else open_gguf(source, header_only=True)
        where = str(getattr(gguf, "path", source))

        model = read_str(gguf, "tokenizer.ggml.model")
        if model != "gpt2":
            raise TokenizerError(
                f"{where}: tokenizer.ggml.model is {model!r}; supported: 'gpt2' (byte-level BPE)"
            )
        pre = read_str(gguf, "tokenizer.ggml.pre")
        if pre not in RULES:
            raise TokenizerError(
                f"{where}: tokenizer.ggml.pre is {pre!r}; supported pre-tokenizer rules: {', '.join(sorted(RULES))}"
            )
        tokens = read_strings(gguf, "tokenizer.ggml.tokens")
        if not tokens:
            raise TokenizerError(f"{where}: tokenizer.ggml.tokens is missing or empty")
        merges = read_strings(gguf, "tokenizer.ggml.merges")
        if not merges:
            raise TokenizerError(
                f"{where}: tokenizer.ggml.merges is missing or empty; BPE needs its merge list"
            )
        check_merges(gguf, merges)
        vocab = set(tokens)
        missing = [b for b, ch in BYTE_TO_CHAR.items() if ch not in vocab]
        if missing:
            raise TokenizerError(
                f"{where}: the vocabulary lacks {len(missing)} of the 256 byte tokens "
                f"(first: byte 0x{missing[0]:02x} = {BYTE_TO_CHAR[missing[0]]!r}); byte fallback would be impossible"
            )
        read_floats(gguf, "tokenizer.ggml.scores", length=len(tokens))  # unused by BPE, but must fit

        types = token_types(gguf, tokens)
        control, user_defined = special_tokens(gguf, tokens, types)
        silent = [i for i, t in enumerate(types) if t not in DECODED_TYPES]
        return cls(tokens, merges, RULES[pre], control, user_defined, silent)

    # --- encode -----------------------------------------------------------------

    def split(self, text: str) -> list[str]:
        """Pre-tokenizer pieces of ``text`` (no special-token scan)."""
        return split(text, self.rule)

    def encode(self, text: str, parse_special: bool) -> list[int]:
        """Token ids of ``text``: special tokens (all of them with ``parse_special``,
        else only user-defined ones) become single ids; the text between them is
        pre-tokenized and each piece merged."""
        scanner = self.parsed if parse_special else self.always
        ids: list[int] = []
        for segment, special_id in scanner.segments(text):
            if special_id is not None:
                ids.append(special_id)
                continue
            for piece in split(segment, self.rule):
                piece_ids = self.cache.get(piece)  # looked up here first: most pieces repeat
                ids.extend(piece_ids if piece_ids is not None else self.encode_piece(piece))
        return ids

    def encode_piece(self, piece: str) -> list[int]:
        """BPE ids of one pre-tokenizer piece (memoized: text repeats its words)."""
        ids = self.cache.get(piece)
        if ids is None:
            if len(self.cache) >= CACHE_LIMIT:
                self.cache.clear()
            symbols = list(to_standin(piece.encode("utf-8")))
            ids = self.cache[piece] = bpe.to_ids(bpe_fast.merge(symbols, self.ranks), self.vocab)
        return ids

    # --- decode -----------------------------------------------------------------

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The bytes ``ids`` stand for. Out-of-range ids are skipped, so a corrupt
        sample cannot break a stream, and so are the silent types (unused fillers);
        entries holding real Unicode (not stand-ins) come out as their UTF-8."""
        n = len(self.tokens)
        return from_standin("".join(self.tokens[i] for i in ids if 0 <= i < n and i not in self.silent))


class Utf8Stream:
    """Streams decoded bytes without ever emitting part of a character.

    ``push`` returns the newly complete bytes; an incomplete trailing UTF-8
    sequence waits for the next push. The chunks concatenate to exactly the bytes
    pushed once ``finish`` has returned the held-back tail.
    """

    def __init__(self) -> None:
        self.pending = b""

    def push(self, data: bytes) -> bytes:
        buf = self.pending + data
        cut = complete_utf8_prefix_len(buf)
        self.pending = buf[cut:]
        return buf[:cut]

    def finish(self) -> bytes:
        tail, self.pending = self.pending, b""
        return tail
