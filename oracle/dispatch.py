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
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from oracle.gguf import GGUFFile

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


def _require(gguf: GGUFFile, key: str) -> Any:
    if key not in gguf.metadata:
        raise UnsupportedModel(f"{gguf.path}: required metadata key {key!r} is missing")
    return gguf.metadata[key]


def _hparams(gguf: GGUFFile, arch: str, n_vocab: int) -> Hparams | None:
    prefix = f"{arch}."
    if f"{prefix}block_count" not in gguf.metadata:
        if gguf.tensors:
            raise UnsupportedModel(f"{gguf.path}: {arch} file has tensors but no {prefix}block_count")
        return None
    n_embd = int(_require(gguf, prefix + "embedding_length"))
    n_head = int(_require(gguf, prefix + "attention.head_count"))
    n_head_kv = int(gguf.get(prefix + "attention.head_count_kv", n_head))
    if n_head <= 0 or n_head_kv <= 0 or n_head % n_head_kv:
        raise UnsupportedModel(
            f"{gguf.path}: head_count {n_head} is not a multiple of head_count_kv {n_head_kv}"
        )
    head_dim = int(gguf.get(prefix + "attention.key_length", n_embd // n_head))
    return Hparams(
        n_layer=int(_require(gguf, prefix + "block_count")),
        n_embd=n_embd,
        n_ff=int(_require(gguf, prefix + "feed_forward_length")),
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        rope_base=float(gguf.get(prefix + "rope.freq_base", 10000.0)),
        rms_eps=float(_require(gguf, prefix + "attention.layer_norm_rms_epsilon")),
        n_ctx=int(_require(gguf, prefix + "context_length")),
        n_vocab=n_vocab,
        tied_embeddings=("output.weight" not in gguf.tensors) if gguf.tensors else None,
    )


def _special(gguf: GGUFFile, tokens: list[str]) -> SpecialTokens:
    def token_id(key: str) -> int | None:
        value = gguf.get(f"tokenizer.ggml.{key}_token_id")
        if value is None:
            return None
        if not 0 <= int(value) < len(tokens):
            raise UnsupportedModel(
                f"{gguf.path}: tokenizer.ggml.{key}_token_id {value} is outside the vocabulary"
            )
        return int(value)

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
        add_bos=bool(gguf.get("tokenizer.ggml.add_bos_token", False)),
    )


def dispatch(gguf: GGUFFile) -> ModelSpec:
    """Read what the pipeline needs to know about a model, or refuse it by name."""
    arch = gguf.get("general.architecture")
    if arch is None:
        raise UnsupportedModel(f"{gguf.path}: general.architecture is missing")
    if arch not in SUPPORTED_ARCHITECTURES + VOCAB_ONLY_ARCHITECTURES:
        raise UnsupportedModel(
            f"{gguf.path}: unsupported architecture {arch!r}; specgate's oracle implements "
            f"{', '.join(SUPPORTED_ARCHITECTURES)} (and {', '.join(VOCAB_ONLY_ARCHITECTURES)} vocabularies)"
        )
    tokens = _require(gguf, "tokenizer.ggml.tokens")
    hparams = _hparams(gguf, arch, len(tokens))
    if arch in VOCAB_ONLY_ARCHITECTURES and gguf.tensors:
        raise UnsupportedModel(f"{gguf.path}: {arch!r} is supported for its vocabulary only, not its weights")
    merges = gguf.get("tokenizer.ggml.merges", [])
    return ModelSpec(
        architecture=arch,
        hparams=hparams,
        special=_special(gguf, tokens),
        tokenizer={
            "model": gguf.get("tokenizer.ggml.model"),
            "pre": gguf.get("tokenizer.ggml.pre"),
            "n_tokens": len(tokens),
            "n_merges": len(merges),
            "has_chat_template": "tokenizer.chat_template" in gguf.metadata,
        },
    )
