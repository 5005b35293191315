"""Model dispatch: ``general.architecture`` → hyper-parameters and special tokens.

Only the Qwen family is supported, and it is refused by name otherwise: guessing
hyper-parameters for an unknown architecture produces a model that runs and
prints garbage, which is worse than an error.

Two details engines get wrong:
  * ``head_dim`` comes from ``<arch>.attention.key_length`` when present. Qwen3
    decouples it from ``n_embd / n_head`` (e.g. Qwen3-0.6B: 1024 / 16 = 64, but
    key_length = 128); only in its absence is the quotient used.
  * Embeddings are tied when the file has no ``output.weight``: the output
    projection then reuses ``token_embd.weight``.

Every value is read through ``oracle.metadata``: a wrong type or a value out of range
(a NaN epsilon, a negative block count) is a ``GGUFError`` naming the key; what is
well-formed but not implemented (or missing) is an ``UnsupportedModel``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from oracle.gguf import GGUFFile
from oracle.metadata import (
    UINT32_MAX,
    metadata_error,
    read_bool,
    read_float,
    read_int,
    read_str,
    read_strings,
)

SUPPORTED_ARCHITECTURES = ("qwen2", "qwen3")
VOCAB_ONLY_ARCHITECTURES = ("qwen35",)  # tokenizer-stage vocabularies without a forward


class UnsupportedModel(ValueError):
    """The GGUF is well-formed but not a model this oracle implements."""


@dataclass(frozen=True)
class Hparams:
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    rope_base: float
    rms_eps: float
    n_ctx: int
    n_vocab: int
    tied_embeddings: bool | None  # None: a vocab-only file has no tensors to tell


@dataclass(frozen=True)
class SpecialTokens:
    bos: int | None
    eos: int
    im_start: int | None
    im_end: int  # the chat turn terminator; falls back to eos when the vocab lacks it
    pad: int | None
    add_bos: bool


@dataclass(frozen=True)
class ModelSpec:
    architecture: str
    hparams: Hparams | None  # None for vocab-only files without hyper-parameters
    special: SpecialTokens
    tokenizer: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {
            "architecture": self.architecture,
            "hparams": asdict(self.hparams) if self.hparams else {"n_vocab": self.tokenizer["n_tokens"]},
            "special": asdict(self.special),
            "tokenizer": self.tokenizer,
        }


# Bounds on hyper-parameters: far beyond any real model, tight enough that a corrupt
# value is refused at load instead of becoming a huge allocation or a garbage run.
MAX_LAYERS = 4096
MAX_WIDTH = 1 << 20  # embedding / feed-forward length
MAX_HEADS = 4096
MAX_HEAD_DIM = 1 << 16
MAX_CONTEXT = 1 << 31
MAX_RMS_EPS = 1.0


def _require(gguf: GGUFFile, key: str) -> str:
    """``key`` itself, once it is known to be present (a missing one is refused by name)."""
    if key not in gguf.metadata:
        raise UnsupportedModel(f"{gguf.path}: required metadata key {key!r} is missing")
    return key


def _hparams(gguf: GGUFFile, arch: str, n_vocab: int) -> Hparams | None:
    prefix = f"{arch}."
    if f"{prefix}block_count" not in gguf.metadata:
        if gguf.tensors:
            raise UnsupportedModel(f"{gguf.path}: {arch} file has tensors but no {prefix}block_count")
        return None
    n_embd = read_int(gguf, _require(gguf, prefix + "embedding_length"), 1, MAX_WIDTH)
    n_head = read_int(gguf, _require(gguf, prefix + "attention.head_count"), 1, MAX_HEADS)
    n_head_kv = read_int(gguf, prefix + "attention.head_count_kv", 1, MAX_HEADS, default=n_head)
    if n_head % n_head_kv:
        raise UnsupportedModel(
            f"{gguf.path}: head_count {n_head} is not a multiple of head_count_kv {n_head_kv}"
        )
    return Hparams(
        n_layer=read_int(gguf, _require(gguf, prefix + "block_count"), 1, MAX_LAYERS),
        n_embd=n_embd,
        n_ff=read_int(gguf, _require(gguf, prefix + "feed_forward_length"), 1, MAX_WIDTH),
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=_head_dim(gguf, prefix, n_embd, n_head),
        rope_base=read_float(gguf, prefix + "rope.freq_base", positive=True, default=10000.0),
        rms_eps=read_float(
            gguf, _require(gguf, prefix + "attention.layer_norm_rms_epsilon"), positive=True, hi=MAX_RMS_EPS
        ),
        n_ctx=read_int(gguf, _require(gguf, prefix + "context_length"), 1, MAX_CONTEXT),
        n_vocab=n_vocab,
        tied_embeddings=("output.weight" not in gguf.tensors) if gguf.tensors else None,
    )


def _head_dim(gguf: GGUFFile, prefix: str, n_embd: int, n_head: int) -> int:
    """``attention.key_length``, else n_embd / n_head — which must then divide exactly.

    The forward uses one head size for keys and values, so a ``value_length`` that
    differs from it is refused rather than run with the wrong shapes."""
    key_length = read_int(gguf, prefix + "attention.key_length", 1, MAX_HEAD_DIM)
    if key_length is None and n_embd % n_head:
        raise metadata_error(
            gguf,
            prefix + "embedding_length",
            f"is {n_embd}, not a multiple of {prefix}attention.head_count {n_head}, "
            f"and {prefix}attention.key_length is absent: no head size",
        )
    head_dim = n_embd // n_head if key_length is None else key_length
    value_length = read_int(gguf, prefix + "attention.value_length", 1, MAX_HEAD_DIM, default=head_dim)
    if value_length != head_dim:
        raise UnsupportedModel(
            f"{gguf.path}: {prefix}attention.value_length {value_length} differs from the key head size "
            f"{head_dim}; the oracle implements equal key and value heads"
        )
    return head_dim


def _special(gguf: GGUFFile, tokens: list[str]) -> SpecialTokens:
    def token_id(key: str) -> int | None:
        full = f"tokenizer.ggml.{key}_token_id"
        value = read_int(gguf, full, 0, UINT32_MAX)
        if value is not None and value >= len(tokens):
            raise UnsupportedModel(f"{gguf.path}: {full} {value} is outside the vocabulary")
        return value

    def lookup(text: str) -> int | None:
        try:
            return tokens.index(text)
        except ValueError:
            return None

    eos = token_id("eos")
    if eos is None:
        raise UnsupportedModel(
            f"{gguf.path}: tokenizer.ggml.eos_token_id is missing; no stop token to generate with"
        )
    im_end = lookup("<|im_end|>")
    return SpecialTokens(
        bos=token_id("bos"),
        eos=eos,
        im_start=lookup("<|im_start|>"),
        im_end=eos if im_end is None else im_end,
        pad=token_id("padding"),
        add_bos=read_bool(gguf, "tokenizer.ggml.add_bos_token", default=False),
    )


def dispatch(gguf: GGUFFile) -> ModelSpec:
    """Read what the pipeline needs to know about a model, or refuse it by name. Read once
    per parsed file: a ``Model`` is made per session where sessions are played with knobs
    (``specgate.diagnose.state``), and each reading scans the vocabulary for the chat
    tokens (~1.6 ms at 151,936 tokens; 1.4 s of a state diagnosis' 3.4 s)."""
    return gguf.derived("dispatch", read_spec)


def read_spec(gguf: GGUFFile) -> ModelSpec:
    """``dispatch`` itself, read from the header each time it is called."""
    arch = read_str(gguf, "general.architecture")
    if arch is None:
        raise UnsupportedModel(f"{gguf.path}: general.architecture is missing")
    if arch not in SUPPORTED_ARCHITECTURES + VOCAB_ONLY_ARCHITECTURES:
        raise UnsupportedModel(
            f"{gguf.path}: unsupported architecture {arch!r}; specgate's oracle implements "
            f"{', '.join(SUPPORTED_ARCHITECTURES)} (and {', '.join(VOCAB_ONLY_ARCHITECTURES)} vocabularies)"
        )
    tokens = read_strings(gguf, _require(gguf, "tokenizer.ggml.tokens"), min_length=1)
    hparams = _hparams(gguf, arch, len(tokens))
    if arch in VOCAB_ONLY_ARCHITECTURES and gguf.tensors:
        raise UnsupportedModel(f"{gguf.path}: {arch!r} is supported for its vocabulary only, not its weights")
    merges = read_strings(gguf, "tokenizer.ggml.merges", default=[])
    return ModelSpec(
        architecture=arch,
        hparams=hparams,
        special=_special(gguf, tokens),
        tokenizer={
            "model": read_str(gguf, "tokenizer.ggml.model"),
            "pre": read_str(gguf, "tokenizer.ggml.pre"),
            "n_tokens": len(tokens),
            "n_merges": len(merges),
            "has_chat_template": read_str(gguf, "tokenizer.chat_template") is not None,
        },
    )
