"""A GGUF's tokenizer as Hugging Face files: ``tokenizer.json`` + ``tokenizer_config.json``.

Three of the four vocabularies specgate gates exist only as GGUF, while most tokenizer
libraries (HF ``tokenizers``, and the engines built on them) load ``tokenizer.json``.
``specgate models export ID DIR`` writes those files from the GGUF alone, laid out like
the tokenizer.json Qwen ships (Qwen3-0.6B's is the model followed here):

* ``model`` — byte-level BPE: every normal token in ``vocab`` under its GGUF id, the
  merges in GGUF rank order (pairs), no whole-piece lookup (``ignore_merges: false``:
  llama.cpp always merges, see ``tests/supply/test_derive.py``'s Qwen3.6 case);
* ``pre_tokenizer`` — ``Split`` with the ``tokenizer.ggml.pre`` rule's regex from
  ``corpus/pretokenizer_patterns.json`` (isolated), then ``ByteLevel(use_regex=false)``;
* ``decoder`` — ``ByteLevel``; ``normalizer`` — none: the GGUF pipeline does not
  normalize (Qwen's own tokenizer.json applies NFC);
* ``added_tokens`` — the CONTROL and USER_DEFINED tokens at their GGUF ids (see
  ``bpe_vocab`` for how HF is made to keep those ids), ``special`` exactly when
  llama.cpp treats the token as a control token. HF's
  ``encode_special_tokens`` (transformers' ``split_special_tokens``) then gives
  llama.cpp's ``parse_special=false``: control tokens are text, user-defined ones
  (``<think>``, ``<tool_call>``) are still matched. Where the GGUF's types differ from
  Qwen's file (its FIM and repo tokens are control tokens in the GGUF, unflagged upstream),
  the GGUF wins: the export reproduces the GGUF pipeline, not the upstream file.

The ``[PAD<id>]`` fillers llama.cpp's converter appends up to the embedding size (typed
UNUSED) are left out, as in the upstream tokenizer.json: as added tokens they would be
matched in text (llama.cpp never matches them), and llama.cpp decodes them to nothing,
as HF does an id it does not know. No other id moves: every entry keeps its GGUF id, so
``get_vocab_size()`` may be smaller than the GGUF's vocabulary (the embedding rows).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from impl.datafiles import DATA_ROOT
from oracle.byte_level import BYTE_TO_CHAR
from oracle.gguf import GGUFError, open_gguf
from specgate.supply.models import ModelError

PATTERNS = DATA_ROOT / "corpus" / "pretokenizer_patterns.json"
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
# Tokens llama.cpp treats as control tokens even where a converter typed them NORMAL
# (it re-types end-of-generation markers on load; the oracle does the same).
CHATML_MARKERS = ("<|im_start|>", "<|im_end|>")
SPECIAL_TOKEN_KEYS = ("bos", "eos", "unk", "pad")  # tokenizer.ggml.<kind>_token_id / padding_token_id
FILES = ("tokenizer.json", "tokenizer_config.json")


class ExportError(ModelError):
    """The GGUF's tokenizer cannot be written as tokenizer.json; the message says why."""


@cache
def pretokenizer_patterns() -> dict[str, str]:
    """``tokenizer.ggml.pre`` rule -> the Split regex the model's tokenizer files use."""
    data = json.loads(PATTERNS.read_text(encoding="utf-8"))
    patterns = {rule: p["pattern"] for rule, p in data["patterns"].items()}
    return {**patterns, **{alias: patterns[rule] for alias, rule in data["aliases"].items()}}


@dataclass(frozen=True)
class GGUFVocabulary:
    """The ``tokenizer.*`` keys of a GGUF that the export reads."""

    where: str
    pre: str
    tokens: list[str]
    types: list[int]
    merges: list[str]
    special_ids: dict[str, int]  # "bos"/"eos"/"unk"/"pad" -> id, where the GGUF sets one
    add_bos: bool
    add_eos: bool
    chat_template: str | None
    context_length: int | None


def read_vocabulary(path: Path) -> GGUFVocabulary:
    """The tokenizer of the GGUF at ``path``, refusing what the export cannot reproduce."""
    try:
        g = open_gguf(path, header_only=True)
    except (GGUFError, OSError) as exc:
        raise ExportError(f"{path}: cannot read the GGUF: {exc}") from None
    meta, where = g.metadata, str(path)
    if meta.get("tokenizer.ggml.model") != "gpt2":
        raise ExportError(
            f"{where}: tokenizer.ggml.model is {meta.get('tokenizer.ggml.model')!r}; "
            "export supports 'gpt2' (byte-level BPE)"
        )
    pre = meta.get("tokenizer.ggml.pre")
    if pre not in pretokenizer_patterns():
        raise ExportError(
            f"{where}: tokenizer.ggml.pre is {pre!r}; export supports {', '.join(sorted(pretokenizer_patterns()))}"
        )
    tokens = list(meta.get("tokenizer.ggml.tokens") or [])
    merges = list(meta.get("tokenizer.ggml.merges") or [])
    if not tokens or not merges:
        raise ExportError(f"{where}: tokenizer.ggml.tokens or tokenizer.ggml.merges is missing or empty")
    raw_types = meta.get("tokenizer.ggml.token_type")
    types = [NORMAL] * len(tokens) if raw_types is None else [int(t) for t in raw_types]
    if len(types) != len(tokens):
        raise ExportError(f"{where}: {len(types)} token types for {len(tokens)} tokens")
    special_ids = {}
    for kind in SPECIAL_TOKEN_KEYS:
        key = "tokenizer.ggml.padding_token_id" if kind == "pad" else f"tokenizer.ggml.{kind}_token_id"
        if key in meta and 0 <= int(meta[key]) < len(tokens):
            special_ids[kind] = int(meta[key])
    arch = meta.get("general.architecture")
    context = meta.get(f"{arch}.context_length")
    return GGUFVocabulary(
        where=where,
        pre=pre,
        tokens=tokens,
        types=types,
        merges=merges,
        special_ids=special_ids,
        add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", False)),
        add_eos=bool(meta.get("tokenizer.ggml.add_eos_token", False)),
        chat_template=meta.get("tokenizer.chat_template"),
        context_length=int(context) if context is not None else None,
    )


# -- which token goes where --------------------------------------------------------------


def added_token_flags(vocab: GGUFVocabulary) -> dict[int, bool]:
    """Added token id -> ``special``: CONTROL tokens are special, USER_DEFINED ones are
    not (llama.cpp matches those even without special-token parsing). The ChatML markers
    and the eos token count as control whatever their type, as llama.cpp re-types them."""
    flags = {i: t == CONTROL for i, t in enumerate(vocab.types) if t in (CONTROL, USER_DEFINED)}
    markers = {tok: i for i, tok in enumerate(vocab.tokens) if tok in CHATML_MARKERS}
    promoted = [*markers.values(), vocab.special_ids.get("eos")]
    for i in promoted:
        if i is not None and i not in flags and vocab.types[i] == NORMAL:
            flags[i] = True
    return flags


def bpe_vocab(vocab: GGUFVocabulary, added: dict[int, bool]) -> dict[str, int]:
    """token -> GGUF id for the BPE model: every token but the UNUSED fillers (no merge
    reaches them) and, where HF would number them right, the added tokens.

    HF ``tokenizers`` does not take an added token's id from ``added_tokens``: it uses the
    token's id in the model's vocab if it has one, else numbers it right after the model's
    vocab (its size, then consecutively). That is the layout of Qwen's files (added tokens
    right after the BPE vocab), and it is kept whenever the GGUF has it. Anywhere else
    (a filler before the added tokens, an added token in the middle of the vocab) the
    added tokens go into the model's vocab too, which pins every id to the GGUF's."""
    out: dict[str, int] = {}
    for i, (tok, kind) in enumerate(zip(vocab.tokens, vocab.types, strict=True)):
        if kind == UNUSED and i not in added:
            continue
        if tok in out:
            raise ExportError(f"{vocab.where}: token {tok!r} appears twice (ids {out[tok]} and {i})")
        out[tok] = i
    missing = [b for b, ch in BYTE_TO_CHAR.items() if ch not in out]
    if missing:
        raise ExportError(
            f"{vocab.where}: the vocabulary lacks {len(missing)} of the 256 byte tokens "
            f"(first: byte 0x{missing[0]:02x}); a byte-level BPE needs them all"
        )
    normal = {tok: i for tok, i in out.items() if i not in added}
    if sorted(added) == list(range(len(normal), len(normal) + len(added))):
        return normal  # HF numbers the added tokens exactly as the GGUF does
    return out


def merge_pairs(vocab: GGUFVocabulary) -> list[list[str]]:
    """GGUF ``"left right"`` merges as ``[left, right]`` pairs, in rank order."""
    pairs = []
    for rank, merge in enumerate(vocab.merges):
        left, sep, right = merge.partition(" ")
        if not sep or not left or not right:
            raise ExportError(f"{vocab.where}: merge {rank} is {merge!r}, not 'left right'")
        pairs.append([left, right])
    return pairs


# -- the two files -------------------------------------------------------------------------

BYTE_LEVEL = {"add_prefix_space": False, "trim_offsets": False, "use_regex": False}


def _added_token(token_id: int, content: str, special: bool) -> dict[str, Any]:
    return {
        "id": token_id,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": special,
    }


def _post_processor(vocab: GGUFVocabulary) -> dict[str, Any]:
    """What ``add_special_tokens=True`` adds: bos/eos where the GGUF says the tokenizer
    adds them (``tokenizer.ggml.add_bos_token``), otherwise nothing (Qwen's ByteLevel)."""
    bos = vocab.special_ids.get("bos") if vocab.add_bos else None
    eos = vocab.special_ids.get("eos") if vocab.add_eos else None
    if bos is None and eos is None:
        return {"type": "ByteLevel", **BYTE_LEVEL}
    around = [(vocab.tokens[i], i) for i in (bos,) if i is not None]
    after = [(vocab.tokens[i], i) for i in (eos,) if i is not None]

    def template(*sequences: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for seq in sequences:
            items += [{"SpecialToken": {"id": t, "type_id": 0}} for t, _ in around]
            items.append({"Sequence": {"id": seq, "type_id": 0}})
            items += [{"SpecialToken": {"id": t, "type_id": 0}} for t, _ in after]
        return items

    return {
        "type": "TemplateProcessing",
        "single": template("A"),
        "pair": template("A", "B"),
        "special_tokens": {t: {"id": t, "ids": [i], "tokens": [t]} for t, i in [*around, *after]},
    }


def tokenizer_json(vocab: GGUFVocabulary) -> dict[str, Any]:
    """The ``tokenizers`` serialization of the GGUF's tokenizer (see the module docstring)."""
    added = added_token_flags(vocab)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [_added_token(i, vocab.tokens[i], added[i]) for i in sorted(added)],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": pretokenizer_patterns()[vocab.pre]},
                    "behavior": "Isolated",
                    "invert": False,
                },
                {"type": "ByteLevel", **BYTE_LEVEL},
            ],
        },
        "post_processor": _post_processor(vocab),
        "decoder": {"type": "ByteLevel", **BYTE_LEVEL},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": bpe_vocab(vocab, added),
            "merges": merge_pairs(vocab),
        },
    }


def tokenizer_config(vocab: GGUFVocabulary) -> dict[str, Any]:
    """``tokenizer_config.json`` for transformers: the special tokens by name, every added
    token with its ``special`` flag, the BOS/EOS rule and the chat template of the GGUF.
    ``PreTrainedTokenizerFast`` takes tokenizer.json as written (a model-specific class
    could rebuild parts of it, e.g. add Qwen's NFC normalizer)."""
    added = added_token_flags(vocab)

    def named(kind: str) -> str | None:
        i = vocab.special_ids.get(kind)
        return vocab.tokens[i] if i is not None else None

    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": vocab.add_bos,
        "add_eos_token": vocab.add_eos,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(i): {k: v for k, v in _added_token(i, vocab.tokens[i], added[i]).items() if k != "id"}
            for i in sorted(added)
        },
        "bos_token": named("bos"),
        "eos_token": named("eos"),
        "pad_token": named("pad"),
        "unk_token": named("unk"),
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "errors": "replace",
    }
    if vocab.context_length is not None:
        config["model_max_length"] = vocab.context_length
    if vocab.chat_template is not None:
        config["chat_template"] = vocab.chat_template
    return config


def export(gguf: Path, out_dir: Path) -> list[Path]:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` for ``gguf`` into ``out_dir``
    (created if needed; existing files are never overwritten). Returns the paths written."""
    targets = [out_dir / name for name in FILES]
    present = [str(p) for p in targets if p.exists()]
    if present:
        raise ExportError(f"will not overwrite {', '.join(present)}; remove them or choose another DIR")
    vocab = read_vocabulary(gguf)
    contents = (tokenizer_json(vocab), tokenizer_config(vocab))
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for target, content in zip(targets, contents, strict=True):
            target.write_text(json.dumps(content, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise ExportError(f"cannot write into {out_dir}: {exc.strerror or exc}") from None
    return targets
