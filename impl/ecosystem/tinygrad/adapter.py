"""specgate adapter for tinygrad's LLM app (PyPI `tinygrad`, `python -m tinygrad.llm`: a
pure-Python engine with its own GGUF reader, tokenizer, forward pass and sampler, not
llama.cpp): a `cmd:` engine speaking `specgate-jsonl/1` (PROTOCOL.md) over stdio.

Standalone on purpose: stdlib + `tinygrad` only (and the shared loop `../jsonl_engine.py`,
stdlib itself). The tokenizer is the one `tinygrad.llm` builds for a chat:
`SimpleTokenizer.from_gguf_kv(kv)` on the key-values of `tinygrad.llm.gguf.gguf_load(gguf)`
(tinygrad's own GGUF reader); the model is `Transformer.from_gguf(gguf, 4096)`, as
`python -m tinygrad.llm` loads it (its default `--max_context`, its default float16
weights). Both are built on first use, one model at a time.

What its API offers, and what the adapter therefore answers:
- `encode`: `SimpleTokenizer.encode(text)` (no BOS: it adds none). It always matches every
  non-normal token of the vocabulary (control and user-defined) in the text and has no
  switch to leave them as text: with `parse_special=false` the adapter answers only when
  the ids it got hold no such token (by the GGUF's `tokenizer.ggml.token_type`), else
  refuses;
- `decode`: `SimpleTokenizer.decode(ids)`. It answers text (its bytes decoded with
  `errors='replace'`): the text is sent as its UTF-8 bytes, so a piece that is part of a
  character comes back as U+FFFD, which is tinygrad's answer. An id outside the
  vocabulary raises `KeyError` inside tinygrad: an `engine` error naming it;
- `generate` (greedy only, class `quantized`: tinygrad runs the weights as float16):
  `Transformer.generate(ids, temperature=0.0)` ended the way tinygrad's own server ends a
  reply (`cli.py`'s `run_model`): at a token of `SimpleTokenizer.is_end` (the GGUF's eos and
  eot ids; not emitted) or after `max_tokens` tokens. The text is its `stream_decoder`'s
  (`chunks` are its non-empty pieces; the bytes are the text's UTF-8, so a character cut by
  the end is U+FFFD, tinygrad's answer). Each request is prefilled from position 0: the
  adapter clears the prompt-prefix cache (`Transformer._cached_tokens`) that tinygrad's
  server reuses between requests, so no answer depends on the requests before it. Refused:
  a sampled request (tinygrad draws from its own `Tensor.rand`, which cannot take specgate's
  draws), penalties (it has none), stop strings (neither `generate` nor its server takes
  any), a prompt that with `max_tokens` passes the 4096-token context. The forward returns
  the sampled token only, so no `steps` (top candidates: optional in PROTOCOL.md 4.5).
  Its CPU backend compiles kernels with the C compiler `CC` names (default `clang`): the
  adapter points `CC` at the first clang it finds (`CC` when it names a clang, `clang`,
  else the newest `clang-N` on PATH, e.g. Debian's `clang-14`); with none, generate is
  refused saying what to install (Debian's `clang` package; `nox -s ecosystem` installs it
  as root when missing);
- a model whose `tokenizer.ggml.pre` tinygrad does not know (e.g. `deepseek-r1-qwen`) is
  refused with tinygrad's own message; generate on a GGUF without weights is refused.
- not offered (n/a): `render` (tinygrad renders the GGUF's template with the stock
  `jinja2` package, which the `hf_jinja` row gates), `split` (no pre-tokenizer pieces in
  its API), `logits` (its forward returns the sampled token, never the logits), `sample`
  (it samples only its own forward's logits), `metadata`, `trace`, sessions.

    python impl/ecosystem/tinygrad/adapter.py
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any


def find_clang() -> str | None:
    """The clang tinygrad's CPU backend can compile with: ``CC`` when it names a clang on
    PATH, else ``clang``, else the newest ``clang-N`` on PATH (None: there is none)."""
    named = os.environ.get("CC", "")
    if Path(named).name.startswith("clang") and (found := shutil.which(named)):
        return found
    if found := shutil.which("clang"):
        return found
    versions = {}
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        with contextlib.suppress(OSError):
            for entry in Path(folder or ".").iterdir():
                if (m := re.fullmatch(r"clang-(\d+)", entry.name)) and os.access(entry, os.X_OK):
                    versions.setdefault(int(m.group(1)), str(entry))
    return versions[max(versions)] if versions else None


# tinygrad reads CC once (tinygrad/runtime/support/compiler_cpu.py: getenv("CC", "clang"),
# cached): set before tinygrad is imported.
CLANG = find_clang()
if CLANG:
    os.environ["CC"] = CLANG

from tinygrad.llm.cli import SimpleTokenizer  # noqa: E402
from tinygrad.llm.gguf import gguf_load  # noqa: E402
from tinygrad.llm.model import Transformer  # noqa: E402

# The adapter runs as a script: its parent folder (impl/ecosystem/) holds the shared
# specgate-jsonl/1 loop, jsonl_engine.py (stdlib only).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from jsonl_engine import BadRequest, Refusal, serve  # noqa: E402

OPS = ["encode", "decode", "generate"]
NORMAL = 1  # tokenizer.ggml.token_type of a normal token; tinygrad matches every other type as text
MAX_CONTEXT = 4096  # `python -m tinygrad.llm`'s default --max_context
GREEDY_BELOW = 1e-6  # PROTOCOL.md 4.4: temperature < 1e-6 is the argmax
#: PROTOCOL.md 4.4's defaults of the parameters the adapter reads, and the values it can answer.
DEFAULTS = {
    "temperature": 0.8,
    "top_k": 40,
    "repeat_penalty": 1.1,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
}
NEUTRAL = {"repeat_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}
NO_CLANG = (
    "tinygrad.llm compiles its CPU kernels with clang (the C compiler CC names, default 'clang'), "
    "and none is on PATH (looked for CC, clang, clang-N): install Debian's 'clang' package "
    "(apt-get install clang; nox -s ecosystem does it as root when missing)"
)

_loaded: dict[str, Any] = {}


def tokenizer(model: dict[str, Any]) -> tuple[SimpleTokenizer, frozenset[int]]:
    """tinygrad's tokenizer of the request's GGUF and the ids it matches as special
    (built on first use; one model at a time)."""
    gguf = Path(model["gguf"])
    if _loaded.get("gguf") == str(gguf):
        return _loaded["tokenizer"], _loaded["special"]
    if not gguf.is_file():
        raise BadRequest(f"missing GGUF {gguf}")
    _loaded.clear()  # drop the previous model before loading the next
    kv, tensors = gguf_load(str(gguf))
    try:
        tok = SimpleTokenizer.from_gguf_kv(kv)
    except ValueError as exc:  # tinygrad's own "Invalid tokenizer preset '...'"
        raise Refusal(f"tinygrad.llm cannot build this model's tokenizer: {exc}") from None
    special = frozenset(i for i, kind in enumerate(kv["tokenizer.ggml.token_type"]) if kind != NORMAL)
    _loaded.update(
        gguf=str(gguf), tokenizer=tok, special=special, n_vocab=len(kv["tokenizer.ggml.tokens"]),
        weights="token_embd.weight" in tensors,
    )  # fmt: skip
    return tok, special


def transformer(model: dict[str, Any]) -> Transformer:
    """tinygrad's model of the request's GGUF, as `python -m tinygrad.llm` loads it."""
    tokenizer(model)
    if "transformer" not in _loaded:
        if not _loaded["weights"]:
            raise Refusal(f"{model['id']} has no weights (a vocab-only GGUF): tinygrad cannot run it")
        try:
            _loaded["transformer"] = Transformer.from_gguf(_loaded["gguf"], MAX_CONTEXT)[0]
        except KeyError as exc:  # inside tinygrad: a key its loader wants, not the request's field
            raise RuntimeError(f"Transformer.from_gguf raised KeyError {exc}") from None
    return _loaded["transformer"]


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


def greedy_limits(params: dict[str, Any]) -> int:
    """``max_tokens`` of a request tinygrad can answer (greedy, no penalty, no stop string),
    or a refusal naming what it cannot."""
    value = {**DEFAULTS, **params}
    if float(value["temperature"]) >= GREEDY_BELOW and int(value["top_k"]) != 1:
        raise Refusal(
            "tinygrad.llm samples with its own generator (Tensor.rand, Gumbel-max), which cannot take "
            "specgate's draws: only greedy generation is gated"
        )
    if any(float(value[name]) != neutral for name, neutral in NEUTRAL.items()):
        raise Refusal("tinygrad.llm has no repetition, frequency or presence penalty")
    if params.get("stop"):
        raise Refusal(
            "tinygrad.llm has no stop strings: Transformer.generate yields ids until its caller stops, "
            "and its server ends a reply only at an end token or max_tokens"
        )
    return int(params.get("max_tokens", 128))


def generate(request: dict[str, Any]) -> dict[str, Any]:
    max_tokens = greedy_limits(request["params"])
    if CLANG is None:
        raise Refusal(NO_CLANG)
    ids = [int(i) for i in request["ids"]]
    model = transformer(request["model"])
    tok, n_vocab = _loaded["tokenizer"], _loaded["n_vocab"]
    if not ids:
        raise Refusal("tinygrad's Transformer.generate needs at least one prompt id")
    if bad := [i for i in ids if not 0 <= i < n_vocab]:
        raise BadRequest(f"prompt ids {bad[:3]} are outside the vocabulary (0..{n_vocab - 1})")
    if len(ids) + max_tokens > MAX_CONTEXT:
        raise Refusal(
            f"{len(ids)} prompt ids and max_tokens {max_tokens} pass the {MAX_CONTEXT}-token context "
            f"the adapter loads (python -m tinygrad.llm's default)"
        )
    model._cached_tokens = []  # a fresh prefill: no prefix reused from an earlier request
    decoder = tok.stream_decoder()
    new: list[int] = []
    chunks: list[str] = []
    reason = "length"
    if max_tokens > 0:
        with contextlib.closing(model.generate(list(ids), temperature=0.0)) as stream:
            for token in stream:  # as tinygrad's server (cli.py's run_model) ends a reply
                if tok.is_end(token):
                    reason = "stop_token"
                    break
                new.append(int(token))
                chunks.append(decoder(token))
                if len(new) >= max_tokens:
                    break
    chunks.append(decoder())  # the held-back tail (U+FFFD for a cut character)
    text = "".join(chunks)
    return {
        "ids": new,
        "bytes": text.encode("utf-8").hex(),
        "text": text,
        "chunks": [c.encode("utf-8").hex() for c in chunks if c],
        "finish_reason": reason,
    }


HANDLERS = {"encode": encode, "decode": decode, "generate": generate}


def main() -> int:
    return serve(
        {
            "engine": "tinygrad.llm",
            "version": version("tinygrad"),
            "capabilities": OPS,
            "classes": ["quantized"],
        },
        HANDLERS,
    )


if __name__ == "__main__":
    sys.exit(main())
