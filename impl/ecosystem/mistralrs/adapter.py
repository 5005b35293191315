"""specgate adapter for mistral.rs (PyPI `mistralrs`, a Rust inference engine with its own
GGUF loader, tokenizer, chat-template engine, forward pass and sampler): a `cmd:` engine
speaking `specgate-jsonl/1` (PROTOCOL.md) over stdio.

Standalone on purpose: stdlib + `mistralrs` only (and the shared loop `../jsonl_engine.py`,
stdlib itself). The model is the request's GGUF, loaded with `Runner(Which.GGUF(folder,
file))` on its first request (one model at a time: a new one replaces it), with a chat
template that passes a one-message conversation through unchanged (`jinja_explicit`), so
that a chat request's prompt is exactly the text the adapter sends.

What mistral.rs's Python API offers, and what the adapter therefore answers:
- `encode`: `Runner.tokenize_text(text, add_special_tokens=False)` (no BOS). It always
  matches special tokens in the text and has no switch to leave them as text: with
  `parse_special=false` the adapter answers only when the ids it got hold no special
  token (`detokenize_text` with and without `skip_special_tokens` agree), else refuses;
- `decode`: `Runner.detokenize_text(ids, skip_special_tokens=False)`. It answers text, not
  bytes: the text is sent as its UTF-8 bytes (a piece that is part of a character comes
  back as U+FFFD, which is mistral.rs's answer);
- `logits` (class `quantized`: it runs the GGUF's quantized weights): a chat request on the
  prompt with `max_tokens=1`, `temperature=0`, `logprobs` and `top_logprobs=k` (the
  request's `top_k`, 1024 when it asks for the full array). mistral.rs reports log-probs
  only for the tokens it generates, so only the prompt's last position is answered: the
  answer is the protocol's named form (`unnamed`), the other positions left empty, and
  nothing claimed about candidates outside the named top-k;
- `generate` (greedy only): a plain-text completion request on the prompt with
  `temperature=0`, `stop_seqs` and `max_tokens` gives the text and the finish reason; the
  same request through the chat API, with `logprobs` (whose candidates carry ids), gives
  the generated ids, the top-1 of each step (completions report no log-probs; a chat
  reply's text has its leading whitespace trimmed, so it is not the stream's bytes). A
  sampled request is refused: mistral.rs draws from its own generator
  (`Runner(seed=...)`), which cannot take specgate's draws. Penalties other than none are
  refused: the request has no `penalty_last_n` window;
- prompts travel as text: the ids are spelled with `detokenize_text` and sent only when
  `tokenize_text` gives them back exactly (else refused), and each response's
  `usage.prompt_tokens` must be their number;
- `session` (the `session_*` ops, PROTOCOL.md 4.7), through mistral.rs's prefix cache:
  its Python API has no KV-session op, but every request reuses the KV of the longest
  prompt prefix it holds in its device prefix cache (`Runner(prefix_cache_n=16)`, the
  default: the last 16 sequences) and prefills only the rest. A session is therefore the
  ids the adapter holds; `session_append` sends the whole session as one `logits` request
  (the last position's top-k: the session's KV is mistral.rs's cached prefix plus what
  this request prefills), `session_truncate` drops the adapter's ids past `n` (the next
  request shares only the first `n` with the cached sequence: mistral.rs must not reuse
  KV past them), `session_close` forgets them. What is gated is the engine's own cache
  reuse: a prompt that extends, or cuts back and extends, a cached one must give a fresh
  prefill's logits. The prefix's text round-trips like every prompt (else refused);
- not offered (n/a): `render` — the Python API renders a model's chat template only inside
  a chat request and exposes neither the prompt nor its ids (`tokenize_text` takes plain
  text); `sample` — it samples only from its own forward's logits; `metadata`, `split`,
  `trace` — no such API. A model without weights (a vocab-only GGUF) is refused:
  mistral.rs loads a tokenizer only with its model.

A Rust panic inside mistral.rs (pyo3's `PanicException`) is answered as an `engine` error.

    python impl/ecosystem/mistralrs/adapter.py
"""

from __future__ import annotations

import base64
import math
import os
import struct
import sys
import tempfile
from array import array
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local GGUFs only: never the Hugging Face hub
# mistral.rs logs to the process's stdout (file descriptor 1), where only protocol lines may
# go: the protocol keeps a copy of it, and descriptor 1 becomes stderr before mistral.rs loads.
sys.stdout = open(os.dup(1), "w", encoding="utf-8", buffering=1)  # noqa: SIM115 (the process's lifetime)
os.dup2(2, 1)
import mistralrs  # noqa: E402

# The adapter runs as a script: its parent folder (impl/ecosystem/) holds the shared
# specgate-jsonl/1 loop, jsonl_engine.py (stdlib only).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from jsonl_engine import BadRequest, Refusal, serve  # noqa: E402

OPS = ["encode", "decode", "logits", "generate", "session"]
#: The candidates asked per position when the request asks for the full logits array.
FULL_ARRAY_K = 1024
#: A chat template that renders a one-message conversation as its content, unchanged.
PASS_THROUGH = "{{ messages[0]['content'] }}"
GREEDY_BELOW = 1e-6  # PROTOCOL.md 4.4: temperature < 1e-6 is the argmax
#: mistral.rs's argmax (a temperature below 1e-7), no penalty.
GREEDY = {"model": "specgate", "temperature": 0.0, "repetition_penalty": 1.0}

_loaded: dict[str, Any] = {}


def runner(model: dict[str, Any]) -> mistralrs.Runner:
    """The Runner of the request's model (loaded on first use; one model at a time)."""
    gguf = Path(model["gguf"])
    if not model.get("weights", model.get("role") == "full-weights"):
        raise Refusal(f"mistral.rs loads a tokenizer only with its model's weights: {model['id']} has none")
    if _loaded.get("gguf") == str(gguf):
        return _loaded["runner"]
    if not gguf.is_file():
        raise BadRequest(f"missing GGUF {gguf}")
    _loaded.clear()  # drop the previous model before loading the next
    with tempfile.TemporaryDirectory(prefix="specgate-mistralrs-") as folder:  # read while loading
        template = Path(folder) / "pass_through.jinja"
        template.write_text(PASS_THROUGH, encoding="utf-8")
        loaded = mistralrs.Runner(
            which=mistralrs.Which.GGUF(quantized_model_id=str(gguf.parent), quantized_filename=gguf.name),
            token_source="none",
            jinja_explicit=str(template),
        )
    _loaded.update(gguf=str(gguf), runner=loaded)
    return loaded


def encode(request: dict[str, Any]) -> list[int]:
    engine = runner(request["model"])
    ids = [int(i) for i in engine.tokenize_text(request["text"], False, None)]
    if not request["parse_special"] and engine.detokenize_text(ids, True) != engine.detokenize_text(
        ids, False
    ):
        raise Refusal(
            "mistral.rs's tokenize_text always matches special tokens (no parse_special=false switch), "
            "and this text holds one"
        )
    return ids


def decode(request: dict[str, Any]) -> dict[str, str]:
    text = runner(request["model"]).detokenize_text([int(i) for i in request["ids"]], False)
    return {"$bytes": base64.b64encode(text.encode("utf-8")).decode("ascii")}


def prompt_text(engine: mistralrs.Runner, ids: list[int]) -> str:
    """The text mistral.rs tokenizes into exactly ``ids`` (or a refusal)."""
    text = engine.detokenize_text(ids, False)
    again = [int(i) for i in engine.tokenize_text(text, False, None)]
    if again != ids:
        k = next(
            (j for j, (a, b) in enumerate(zip(ids, again, strict=False)) if a != b), min(len(ids), len(again))
        )
        raise Refusal(
            f"mistral.rs takes prompts as text, and its tokenization of its own detokenized text changes "
            f"the ids at index {k} ({ids[k : k + 3]} -> {again[k : k + 3]})"
        )
    return text


def chat(engine: mistralrs.Runner, ids: list[int], **params: Any) -> Any:
    """A greedy chat request on the prompt ``ids`` (through the pass-through template), with
    log-probs: its choice."""
    request = mistralrs.ChatCompletionRequest(
        messages=[{"role": "user", "content": prompt_text(engine, ids)}], logprobs=True, **GREEDY, **params
    )
    return answered(engine.send_chat_completion_request(request), len(ids), "chat")


def complete(engine: mistralrs.Runner, ids: list[int], **params: Any) -> Any:
    """A greedy plain-text completion of the prompt ``ids``: its choice."""
    request = mistralrs.CompletionRequest(prompt=prompt_text(engine, ids), **GREEDY, **params)
    return answered(engine.send_completion_request(request), len(ids), "completion")


def answered(response: Any, n_ids: int, api: str) -> Any:
    """The response's choice, once its prompt is checked to be the ``n_ids`` ids sent."""
    if response.usage.prompt_tokens != n_ids:
        raise BadRequest(
            f"the {api} request's prompt was {response.usage.prompt_tokens} tokens, not the {n_ids} ids "
            f"sent (the adapter's prompt, not mistral.rs's forward)"
        )
    return response.choices[0]


def last_top(model: dict[str, Any], ids: list[int], k: int) -> list[tuple[int, float]]:
    """The top ``k`` (id, log-prob) of the prompt's last position, by descending log-prob:
    a one-token greedy chat request with ``top_logprobs``. Log-probs of probabilities that
    underflowed float32 are -inf: left out."""
    choice = chat(runner(model), ids, max_tokens=1, top_logprobs=k)
    top = choice.logprobs.content[0].top_logprobs
    named = [(int(t.token), float(t.logprob)) for t in top if math.isfinite(t.logprob)]
    return sorted(named, key=lambda pair: -pair[1])


def last_position_top_k(named: list[tuple[int, float]], n_rows: int, gguf: str) -> dict[str, Any]:
    """The protocol's top-k form (PROTOCOL.md 4.3) of ``n_rows`` positions of which only the
    last holds ``named`` (its (id, log-prob) candidates; every other slot -1, empty). The
    values are log-probabilities (logit - lse), so lse is 0."""
    width = max(len(named), 1)
    slots = array("i", [-1]) * (width * n_rows)
    values = array("f", [0.0]) * (width * n_rows)
    last = width * (n_rows - 1)
    for j, (token, logprob) in enumerate(named):
        slots[last + j], values[last + j] = token, logprob
    return {
        "n_vocab": n_vocab(gguf),
        "ids": packed(slots, "int32", [n_rows, width]),
        "logits": packed(values, "float32", [n_rows, width]),
        "lse": packed(array("d", [0.0]) * n_rows, "float64", [n_rows]),
    }


def logits(request: dict[str, Any]) -> dict[str, Any]:
    ids = [int(i) for i in request["ids"]]
    k = int(request.get("top_k") or 0) or FULL_ARRAY_K
    named = last_top(request["model"], ids, k)
    # one row per position asked when the prompt's last is among them (its row last), else one per id
    positions = request.get("positions")
    n_rows = len(positions) if positions and positions[-1] == len(ids) - 1 else len(ids)
    top_k = last_position_top_k(named, n_rows, request["model"]["gguf"])
    top_k["unnamed"] = (
        f"mistral.rs reports log-probs only for the tokens it generates (its top {k}, by id): "
        f"only the prompt's last position is asked, the other {n_rows - 1} rows are left unnamed"
    )
    return {"top_k": top_k}


def packed(values: array, dtype: str, shape: list[int]) -> dict[str, Any]:
    """PROTOCOL.md section 5's ``$array``: little-endian, C order, base64."""
    if sys.byteorder != "little":
        values = array(values.typecode, values)
        values.byteswap()
    return {
        "$array": {"dtype": dtype, "shape": shape, "b64": base64.b64encode(values.tobytes()).decode("ascii")}
    }


@cache
def n_vocab(gguf: str) -> int:
    """The length of ``tokenizer.ggml.tokens`` in the GGUF (v2/v3) header, the vocabulary
    size (mistral.rs's Python API does not report it)."""
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    with open(gguf, "rb") as f:
        magic, _version, _n_tensors, n_kv = struct.unpack("<4sIQQ", f.read(24))
        if magic != b"GGUF":
            raise BadRequest(f"{gguf} is not a GGUF file")

        def string() -> bytes:
            (n,) = struct.unpack("<Q", f.read(8))
            return f.read(n)

        def skip(kind: int) -> None:
            if kind == 8:
                string()
            elif kind == 9:
                inner, count = struct.unpack("<IQ", f.read(12))
                for _ in range(count):
                    skip(inner)
            else:
                f.seek(sizes[kind], 1)

        for _ in range(n_kv):
            key = string()
            (kind,) = struct.unpack("<I", f.read(4))
            if key == b"tokenizer.ggml.tokens" and kind == 9:
                return int(struct.unpack("<IQ", f.read(12))[1])
            skip(kind)
    raise BadRequest(f"{gguf} has no tokenizer.ggml.tokens")


def generate(request: dict[str, Any]) -> dict[str, Any]:
    params = request["params"]
    if float(params.get("temperature", 0.8)) >= GREEDY_BELOW and int(params.get("top_k", 40)) != 1:
        raise Refusal(
            "mistral.rs samples with its own generator (Runner(seed=...)), which cannot take specgate's "
            "draws: only greedy generation is gated"
        )
    neutral = {"repeat_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}
    if any(float(params.get(name, value)) != value for name, value in neutral.items()):
        raise Refusal(
            "mistral.rs's penalties take no penalty_last_n window: only unpenalized streams are gated"
        )
    stop = [stop_string(s) for s in params.get("stop", [])]
    engine, ids = runner(request["model"]), [int(i) for i in request["ids"]]
    limits = {"max_tokens": int(params.get("max_tokens", 128)), "stop_seqs": stop or None}
    # The stream's text and finish reason: a plain-text completion, the raw continuation (a chat
    # reply's text has its leading whitespace trimmed). Its ids: the same greedy stream through
    # the chat API, the only one with log-probs, whose candidates carry ids.
    text_choice = complete(engine, ids, **limits)
    choice = chat(engine, ids, top_logprobs=1, **limits)
    new = []
    for step in choice.logprobs.content or []:
        best = step.top_logprobs[0]
        if best.logprob != step.logprob:
            raise BadRequest(
                f"a greedy step's token {step.token!r} is not its top candidate (id {best.token}): "
                f"the adapter cannot name its id"
            )
        new.append(int(best.token))
    if text_choice.finish_reason != choice.finish_reason:
        raise BadRequest(
            f"mistral.rs's completion ({text_choice.finish_reason}) and chat ({choice.finish_reason}) "
            f"requests ended one greedy stream differently: the adapter cannot tell its answer"
        )
    text = text_choice.text or ""
    if choice.finish_reason == "length":
        reason = "length"
    elif choice.stop_sequence is not None:
        reason = "stop_string"
    else:
        reason = "stop_token"
        new = new[:-1]  # the stop token: mistral.rs lists it among the log-probs, not in the text
    return {"ids": new, "bytes": text.encode("utf-8").hex(), "text": text, "finish_reason": reason}


def stop_string(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return base64.b64decode(value["$bytes"]).decode("utf-8")
    except (KeyError, TypeError, ValueError):
        raise Refusal("mistral.rs takes stop sequences as text: this one is not UTF-8 text") from None


#: Open sessions: id -> the model and the ids the session holds (its KV is mistral.rs's
#: prefix cache).
_sessions: dict[str, dict[str, Any]] = {}


def session_open(request: dict[str, Any]) -> str:
    runner(request["model"])  # loaded (or refused) now, not at the first append
    name = f"s{len(_sessions) + 1}-{os.urandom(4).hex()}"
    _sessions[name] = {"model": request["model"], "ids": []}
    return name


def session_of(request: dict[str, Any]) -> dict[str, Any]:
    held = _sessions.get(str(request["session"]))
    if held is None:
        raise BadRequest(f"no open session {request['session']!r}")
    return held


def session_append(request: dict[str, Any]) -> dict[str, Any]:
    """The session's ids grown by ``ids``, sent whole: mistral.rs prefills what its prefix
    cache does not hold. The last position's top-k, every candidate named (a session's
    logits must name them all: the top-k form, PROTOCOL.md 4.3)."""
    held = session_of(request)
    ids = held["ids"] + [int(i) for i in request["ids"]]
    if not ids:
        raise BadRequest("session_append with no ids on an empty session")
    k = int(request.get("top_k") or 0) or FULL_ARRAY_K
    named = last_top(held["model"], ids, k)
    if not named:  # never an adapter's filler in its place
        raise RuntimeError("mistral.rs named no candidate with a finite log-prob for the last position")
    held["ids"] = ids
    return {"n_past": len(ids), "logits": {"top_k": last_position_top_k(named, 1, held["model"]["gguf"])}}


def session_truncate(request: dict[str, Any]) -> int:
    held, n = session_of(request), int(request["n"])
    if not 0 <= n <= len(held["ids"]):
        raise BadRequest(f"session_truncate to {n} tokens: the session holds {len(held['ids'])}")
    held["ids"] = held["ids"][:n]
    return n


def session_close(request: dict[str, Any]) -> None:
    _sessions.pop(str(request["session"]), None)


HANDLERS = {
    "encode": encode, "decode": decode, "logits": logits, "generate": generate, "session_open": session_open,
    "session_append": session_append, "session_truncate": session_truncate, "session_close": session_close,
}  # fmt: skip


def main() -> int:
    return serve(
        {
            "engine": "mistral.rs",
            "version": version("mistralrs"),
            "capabilities": OPS,
            "classes": ["quantized"],
        },
        HANDLERS,
        panics_of="mistral.rs",
    )


if __name__ == "__main__":
    sys.exit(main())
