"""A protocol engine that misbehaves on purpose, for the ``cmd`` adapter's tests.

    python tests/engines/fault_engine.py [IMPL]

serves IMPL (default ``oracle``; ``toy`` / ``toy-own-templates`` are the small
adapters below) over
PROTOCOL.md, and injects one fault chosen by environment variables:

  SPECGATE_FAULT       die | hang | garbage | wrong-id | bool-id | float-id | wrong-shape |
                       endless-line | bracket-bomb | flood-stderr | protocol | (unset: no fault)
  SPECGATE_FAULT_AT    the request number (1-based, counted per process) that faults
  SPECGATE_FAULT_ONCE  a file path: fault only if it does not exist yet, then create
                       it — so the restarted engine behaves (a one-off crash)
  SPECGATE_FAULT_BYTES how much ``endless-line`` / ``flood-stderr`` write (default:
                       without end / 8 MiB per request)
  SPECGATE_FAULT_PROTOCOL  the protocol version the ``protocol`` fault's handshake
                       names ("" names none)

``bool-id`` / ``float-id`` answer the toy's encoding of ``a`` (``[97]``) under the id
``true`` / the request's id as a float (``2.0``); ``bracket-bomb`` answers a result of ``SPECGATE_FAULT_BYTES`` bytes of ``[[],[],…]`` (a
line inside the size bound whose parsed lists cost ~60 times its bytes); ``wrong-shape`` answers a string where a result of another type is due;
``endless-line`` starts a stdout line and never ends it (then hangs);
``flood-stderr`` writes to stderr, without a newline, before answering each request
from ``SPECGATE_FAULT_AT`` on. The toy adapter itself exits (status 7) when asked to
encode the text ``die``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from impl.process.server import claim_stdout, serve
from impl.protocol import Engine, Messages, ModelRef, Unsupported
from impl.registry import resolve

MIB = 1 << 20


class ToyEngine(Engine):
    """Byte-level stand-ins for each stage, to exercise the wire without a model."""

    name = "toy"

    def version(self) -> str:
        return "1.0"

    def metadata(self, model: ModelRef) -> dict[str, Any]:
        return {
            "model": model.id,
            "sha256": model.sha256,
            "tokenizer_json": str(model.tokenizer_json),
            "numbers": {1: "one", 2: "two"},
            "scale": np.float32(0.5),
        }

    def render(
        self, model: ModelRef, messages: Messages, add_generation_prompt: bool = True, **kwargs: Any
    ) -> str:
        text = "".join(f"<{m['role']}>{m['content']}\n" for m in messages)
        return text + ("<assistant>" if add_generation_prompt else "") + json.dumps(kwargs, sort_keys=True)

    def render_template(self, template: str, context: dict[str, Any]) -> str:
        return template.replace("{{x}}", str(context.get("x")))

    def split(self, model: ModelRef, text: str) -> list[str]:
        return text.split(" ")

    def encode(self, model: ModelRef, text: str, parse_special: bool) -> list[int]:
        if text == "refuse":
            raise Unsupported("toy refuses the word 'refuse'")
        if text == "boom":
            raise RuntimeError("toy exploded")
        if text == "die":
            print("toy: asked to die", file=sys.stderr, flush=True)
            os._exit(7)
        return list(text.encode("utf-8"))

    def decode(self, model: ModelRef, ids: Sequence[int]) -> bytes:
        return bytes(ids)

    def logits(self, model: ModelRef, ids: Sequence[int]) -> Any:
        if ids[0] != 5:  # ordinary rows: 0.5 * id + position
            return (np.arange(8, dtype=np.float32)[None, :] * 0.5 + np.arange(len(ids))[:, None]).astype(
                np.float32
            )
        out = np.full((len(ids), 8), -np.inf, dtype=np.float32)  # odd values that must survive the wire
        out[:, 0] = np.arange(len(ids), dtype=np.float32) / 3
        out[:, 1] = np.nan
        return out

    def sample(self, logits: Any, params: dict[str, Any], r: float) -> dict[str, Any]:
        top = int(np.argmax(logits))
        step = {"step": "top_k", "ids": [top], "probs": [1.0]}
        return {"steps": [step], "ids": [top], "probs": [1.0], "token": top, "chain": [f"r={r}", *params]}

    def generate(self, model: ModelRef, ids: Sequence[int], params: dict[str, Any]) -> dict[str, Any]:
        data = b"\xe4\xbd"  # an incomplete character: the streamed chunk holds it back
        return {"ids": [*ids, 0], "bytes": data.hex(), "chunks": [], "finish_reason": "length"}

    def trace(
        self,
        model: ModelRef,
        ids: Sequence[int],
        points: Sequence[str],
        positions: Sequence[int] | None = None,
    ) -> dict[str, Any]:
        """Point i at row r: [id, r, i]; ``l_out-9`` answers one row too few (a broken engine)."""
        rows = range(len(ids)) if positions is None else positions
        out = {p: np.array([[ids[r], r, i] for r in rows], dtype=np.float64) for i, p in enumerate(points)}
        if "l_out-9" in out:
            out["l_out-9"] = out["l_out-9"][1:]
        return out

    def session_open(self, model: ModelRef) -> str:
        """Sessions whose last row is [n_past, last id, 0, …]."""
        self.sessions = getattr(self, "sessions", {})
        sid = f"toy{len(self.sessions)}"
        self.sessions[sid] = []
        return sid

    def session_append(self, session: str, ids: Sequence[int]) -> dict[str, Any]:
        held = self.sessions[session]
        held += ids
        row = np.zeros(8, dtype=np.float32)
        row[:2] = len(held), held[-1]
        if held[-1] == 5:  # a broken row: the client must not pass it on
            row[2] = np.nan
        return {"n_past": len(held), "logits": row}

    def session_generate(self, session: str, params: dict[str, Any]) -> dict[str, Any]:
        """Emits the session's last id ``max_tokens`` times (they join the session)."""
        held = self.sessions[session]
        new = [held[-1]] * int(params.get("max_tokens", 1))
        held += new
        return {"n_past": len(held), "generated": {"ids": new, "bytes": "", "finish_reason": "length"}}

    def batch_logits(self, model: ModelRef, prompts: Sequence[Sequence[int]]) -> Any:
        """Per prompt a row [len, last id, 0, …]."""
        return np.array([[len(p), p[-1], *([0.0] * 6)] for p in prompts], dtype=np.float32)

    def session_truncate(self, session: str, n: int) -> int:
        del self.sessions[session][n:]
        return n

    def session_close(self, session: str) -> None:
        del self.sessions[session]

    def conversation_open(self, model: ModelRef, kwargs: dict[str, Any] | None = None) -> str:
        """Conversations whose cache holds one id per message (its content's length)."""
        self.conversations = getattr(self, "conversations", {})
        cid = f"chat{len(self.conversations)}"
        self.conversations[cid] = []
        return cid

    def conversation_turn(
        self,
        conversation: str,
        messages: Sequence[dict[str, Any]],
        system: str | None = None,
        kwargs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        held = self.conversations[conversation]
        held += [len(str(m.get("content", ""))) for m in messages] or [0]
        row = np.zeros(8, dtype=np.float32)
        row[:2] = len(held), held[-1]
        return {"ids": list(held), "logits": row}

    def conversation_close(self, conversation: str) -> None:
        del self.conversations[conversation]


class ToyWithoutRenderTemplate(ToyEngine):
    """Renders its models' own templates only (no ``render_template``)."""

    render_template = Engine.render_template


TARGETS = {"toy": ToyEngine, "toy-own-templates": ToyWithoutRenderTemplate}


def _armed() -> bool:
    once = os.environ.get("SPECGATE_FAULT_ONCE")
    if not once:
        return True
    marker = Path(once)
    if marker.exists():
        return False
    marker.write_text("faulted\n")
    return True


def _write_unended(stream: IO[bytes], total: int | None, fill: bytes) -> None:
    """``total`` bytes (``None``: without end) of ``fill``, never a newline."""
    chunk = fill * MIB
    written = 0
    while total is None or written < total:
        part = chunk if total is None else chunk[: total - written]
        stream.write(part)
        stream.flush()
        written += len(part)


def _fault_bytes(default: int | None) -> int | None:
    raw = os.environ.get("SPECGATE_FAULT_BYTES")
    return int(raw) if raw else default


def faulty(lines: Iterator[bytes], out: IO[str]) -> Iterator[bytes]:
    mode = os.environ.get("SPECGATE_FAULT", "")
    at = int(os.environ.get("SPECGATE_FAULT_AT", "1"))
    for n, raw in enumerate(lines, start=1):
        if mode == "flood-stderr" and n >= at:
            _write_unended(sys.stderr.buffer, _fault_bytes(8 * MIB), b"e")
            yield raw
            continue
        if mode and mode != "protocol" and n == at and _armed():  # "protocol" faults the handshake only
            print(f"fault engine: injecting {mode!r} at request {n}", file=sys.stderr, flush=True)
            if mode == "die":
                os._exit(3)
            if mode == "hang":
                time.sleep(3600)
            request = json.loads(raw)
            if mode == "garbage":
                out.write("{this is not json\n")
            elif mode == "wrong-id":
                out.write(json.dumps({"id": request["id"] + 1000, "result": []}) + "\n")
            elif mode in ("bool-id", "float-id"):
                rid = True if mode == "bool-id" else float(request["id"])
                out.write(json.dumps({"id": rid, "result": [97]}) + "\n")
            elif mode == "bracket-bomb":
                lists = max((_fault_bytes(MIB) or MIB) // 3, 1)
                out.write(f'{{"id": {request["id"]}, "result": [' + "[]," * (lists - 1) + "[]]}\n")
            elif mode == "wrong-shape":
                out.write(json.dumps({"id": request["id"], "result": "a string, not a list"}) + "\n")
            elif mode == "endless-line":
                out.write(f'{{"id": {request["id"]}, "result": "')
                out.flush()
                _write_unended(out.buffer, _fault_bytes(None), b"x")
                time.sleep(3600)
            out.flush()
            continue
        yield raw


def main() -> int:
    spec = sys.argv[1] if len(sys.argv) > 1 else "oracle"
    out = claim_stdout()
    if os.environ.get("SPECGATE_FAULT") == "protocol":
        # A handshake naming another version (or none), written by hand: `specgate engine`
        # itself refuses to send one that does not follow the handshake's schema.
        spoken = os.environ.get("SPECGATE_FAULT_PROTOCOL", "") or None
        hello = {"engine": "toy", "version": "1.0", "capabilities": ["encode"]}
        out.write(json.dumps({"protocol": spoken, **hello} if spoken else hello) + "\n")
        out.flush()
        for _ in sys.stdin:  # answers nothing: the client must not get this far
            pass
        return 0
    return serve(
        TARGETS[spec]() if spec in TARGETS else resolve(spec),
        stdin=faulty(iter(sys.stdin.buffer), out),
        stdout=out,
    )


if __name__ == "__main__":
    sys.exit(main())
