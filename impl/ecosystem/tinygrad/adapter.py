"""specgate adapter for tinygrad's LLM app (PyPI `tinygrad`, `python -m tinygrad.llm`: a
pure-Python engine with its own GGUF reader, tokenizer, forward pass and sampler, not
llama.cpp): a `cmd:` engine speaking `specgate-jsonl/1` (PROTOCOL.md) over stdio.

Standalone on purpose: stdlib + `tinygrad` only (and the shared loop `../jsonl_engine.py`,
stdlib itself). The tokenizer is the one `tinygrad.llm` builds for a chat:
`SimpleTokenizer.from_gguf_kv(kv)` on the key-values of `tinygrad.llm.gguf.gguf_load(gguf)`
(tinygrad's own GGUF reader), built once per model (one model at a time).

What its tokenizer offers, and what the adapter therefore answers:
- `encode`: `SimpleTokenizer.encode(text)` (no BOS: it adds none). It always matches every
  non-normal token of the vocabulary (control and user-defined) in the text and has no
  switch to leave them as text: with `parse_special=false` the adapter answers only when
  the ids it got hold no such token (by the GGUF's `tokenizer.ggml.token_type`), else
  refuses;
- `decode`: `SimpleTokenizer.decode(ids)`. It answers text (its bytes decoded with
  `errors='replace'`): the text is sent as its UTF-8 bytes, so a piece that is part of a
  character comes back as U+FFFD, which is tinygrad's answer. An id outside the
  vocabulary raises `KeyError` inside tinygrad: an `engine` error naming it;
- a model whose `tokenizer.ggml.pre` tinygrad does not know (e.g. `deepseek-r1-qwen`) is
  refused with tinygrad's own message.
- not offered (n/a): `render` (tinygrad renders the GGUF's template with the stock
  `jinja2` package, which the `hf_jinja` row gates), `split` (no pre-tokenizer pieces in
  its API), `logits` (its forward returns the sampled token, never the logits), `generate`
  (not wired yet: tinygrad's CPU backend compiles its kernels with `clang`, which a stock
  machine lacks, "no usable devices", and its LLVM path fails on Debian's libLLVM-15:
  README.md), `sample` (it samples only its own forward's
  logits), `metadata`, `trace`, sessions.

    python impl/ecosystem/tinygrad/adapter.py
"""

from __future__ import annotations

import base64
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

from tinygrad.llm.cli import SimpleTokenizer
from tinygrad.llm.gguf import gguf_load

# The adapter runs as a script: its parent folder (impl/ecosystem/) holds the shared
# specgate-jsonl/1 loop, jsonl_engine.py (stdlib only).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from jsonl_engine import BadRequest, Refusal, serve

OPS = ["encode", "decode"]
NORMAL = 1  # tokenizer.ggml.token_type of a normal token; tinygrad matches every other type as text

_loaded: dict[str, Any] = {}


def tokenizer(model: dict[str, Any]) -> tuple[SimpleTokenizer, frozenset[int]]:
    """tinygrad's tokenizer of the request's GGUF and the ids it matches as special
    (built on first use; one model at a time)."""
    gguf = Path(model["gguf"])
    if _loaded.get("gguf") == str(gguf):
        return _loaded["tokenizer"], _loaded["special"]
    if not gguf.is_file():
        raise BadRequest(f"missing GGUF {gguf}")
    _loaded.clear()
    kv, _tensors = gguf_load(str(gguf))
    try:
        tok = SimpleTokenizer.from_gguf_kv(kv)
    except ValueError as exc:  # tinygrad's own "Invalid tokenizer preset '...'"
        raise Refusal(f"tinygrad.llm cannot build this model's tokenizer: {exc}") from None
    special = frozenset(i for i, kind in enumerate(kv["tokenizer.ggml.token_type"]) if kind != NORMAL)
    _loaded.update(gguf=str(gguf), tokenizer=tok, special=special)
    return tok, special


def encode(request: dict[str, Any]) -> list[int]:
    tok, special = tokenizer(request["model"])
    ids = [int(i) for i in tok.encode(request["text"])]
    if not request["parse_special"] and any(i in special for i in ids):
        raise Refusal(
            "tinygrad's SimpleTokenizer.encode always matches special tokens (no parse_special=false "
            "switch), and this text holds one"
        )
    return ids


def decode(request: dict[str, Any]) -> dict[str, str]:
    tok, _special = tokenizer(request["model"])
    ids = [int(i) for i in request["ids"]]
    try:
        text = tok.decode(ids)
    except KeyError as exc:  # inside tinygrad: not the request's missing field
        raise RuntimeError(
            f"SimpleTokenizer.decode raised KeyError {exc} (an id it has no piece for)"
        ) from None
    return {"$bytes": base64.b64encode(text.encode("utf-8")).decode("ascii")}


HANDLERS = {"encode": encode, "decode": decode}


def main() -> int:
    return serve(
        {"engine": "tinygrad.llm", "version": version("tinygrad"), "capabilities": OPS},
        HANDLERS,
    )


if __name__ == "__main__":
    sys.exit(main())
