"""Serve any adapter over the JSON-lines process protocol (PROTOCOL.md) on stdin/stdout.

``specgate engine --impl NAME`` runs this, so the oracle, transformers and
llama.cpp can be driven as external processes: the test suite uses it to exercise
``--impl 'cmd:...'`` end to end, and an engine author can use it as a live
reference speaking exactly the protocol their own engine must speak.

The protocol owns the process's real stdout. Anything else printed to file
descriptor 1 (a library's progress output, a stray ``print``) is redirected to
stderr, where it cannot corrupt the stream and the client keeps it for error
messages.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import traceback
from collections.abc import Iterable, Iterator
from typing import IO, Any

import numpy as np

from impl import bounds
from impl.ops import OPS
from impl.process import schema, wire
from impl.protocol import TRACE_KINDS, Engine, Unsupported


def claim_stdout() -> IO[str]:
    """A private text stream on the original stdout; fd 1 then points at stderr."""
    sys.stdout.flush()
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(proto_fd, "w", encoding="utf-8", newline="\n", buffering=1)


def handle(engine: Engine, request: dict[str, Any]) -> dict[str, Any]:
    """One request object -> one response object (never raises for a bad request)."""
    rid = request.get("id")
    op = request.get("op")
    if op not in OPS:
        return _error(rid, "bad_request", f"unknown op {op!r}; known: {', '.join(OPS)}")
    if op not in engine.ops:
        return _error(rid, "unsupported", f"{engine.name} does not offer {op!r}")
    request_problem = schema.request_problem(request)
    if request_problem:
        return _error(rid, "bad_request", request_problem)
    try:
        named = wire.call_arguments(OPS[op], request)
    except wire.WireError as exc:
        return _error(rid, "bad_request", str(exc))
    try:
        result = OPS[op].invoke(engine, named)
        if isinstance(result, Iterator):  # a generator for a list: consumed with a bound
            result = list(itertools.islice(result, MAX_ITEMS + 1))
            if len(result) > MAX_ITEMS:
                return _error(rid, "engine", f"{engine.name} answered an iterator of more than "
                              f"{MAX_ITEMS:,} items")  # fmt: skip
    except Unsupported as exc:
        return _error(rid, "unsupported", str(exc))
    except BaseException as exc:  # SystemExit, KeyboardInterrupt from the adapter: its error
        traceback.print_exc(file=sys.stderr)
        return _error(rid, "engine", f"{type(exc).__name__}: {exc}")
    if op == "trace" and isinstance(result, dict):  # float32 arrays, whatever the adapter computed in
        result = {"points": {k: np.asarray(v, dtype=np.float32) for k, v in result.items()}}
    top_k = (
        request.get("top_k")
        if op in ("logits", "session_append", "conversation_turn", "batch_logits")
        else None
    )
    if op in ("session_append", "conversation_turn") and isinstance(result, dict) and "logits" in result:
        try:  # the last position's row, as a one-row logits result (PROTOCOL.md 4.7, 4.8)
            row = np.asarray(result["logits"], dtype=np.float32)
        except (TypeError, ValueError) as exc:
            return _error(rid, "engine", f"{engine.name} answered logits that are no numeric array: {exc}")
        row = row.reshape(1, -1) if row.ndim == 1 else row
        logits = (
            {"top_k": wire.top_k_logits(row, top_k)}
            if isinstance(top_k, int) and top_k > 0 and row.ndim == 2 and row.size
            else row
        )
        result = {**result, "logits": logits}
    elif isinstance(top_k, int) and top_k > 0 and isinstance(result, np.ndarray) and result.ndim == 2:
        result = {"top_k": wire.top_k_logits(result, top_k)}
    fields = {k: v for k, v in request.items() if k not in ("id", "op")}
    most = bounds.answer_items(
        op, fields, None
    )  # counted before encoding and the schema walk it (8 s for 5 M ids)
    if bounds.value_items(result, most) > most:
        return _error(rid, "engine", f"{engine.name} answered more than {most:,} JSON values, the most an answer "
                      f"to this {op} request can need (impl.bounds)")  # fmt: skip
    try:
        encoded = wire.encode_value(result)
    except wire.WireError as exc:
        return _error(rid, "engine", f"result cannot be sent: {exc}")
    result_problem = schema.result_problem(op, encoded)
    if result_problem:  # what this server sends follows the protocol, or is reported as the engine's failure
        return _error(rid, "engine", f"{engine.name} answered a result of the wrong shape: {result_problem}")
    return {"id": rid, "result": encoded}


#: The most items taken from an adapter's iterator answer (no list answer of a request
#: the gates make is longer: one id per byte of the longest text, ``impl.bounds``).
MAX_ITEMS = 1 << 22


def implemented_ops(engine: Engine) -> list[str]:
    """The ops ``engine`` answers, in the protocol's order (the handshake's ``ops``)."""
    return [op for op in OPS if op in engine.ops]


def _error(rid: Any, kind: str, message: str) -> dict[str, Any]:
    return {"id": rid, "error": {"type": kind, "message": message}}


def serve(engine: Engine, stdin: Iterable[bytes] | None = None, stdout: IO[str] | None = None) -> int:
    """Serve ``engine`` (an adapter; ``specgate engine --impl X`` resolves ``X``) until stdin closes."""
    out = stdout if stdout is not None else claim_stdout()
    src = stdin if stdin is not None else sys.stdin.buffer
    hello = {
        "protocol": wire.PROTOCOL,
        "engine": engine.name,
        "version": engine.version(),
        "capabilities": sorted(engine.capabilities),
        "classes": sorted(engine.classes),
        "ops": implemented_ops(engine),
    }
    if engine.offers("trace"):
        hello["trace_points"] = [k for k in TRACE_KINDS if k in engine.trace_points]
    if hello_problem := schema.problem("handshake.schema.json", hello, where="handshake"):
        print(f"specgate engine: {engine.name}: {hello_problem}", file=sys.stderr)
        return 1
    out.write(wire.dumps(hello) + "\n")
    out.flush()
    try:
        for raw in src:
            line = raw.decode("utf-8", errors="replace").strip()
            if not line:
                continue
            try:
                request = json.loads(line)
                if not isinstance(request, dict):
                    raise ValueError("a request must be a JSON object")
            except ValueError as exc:
                response = _error(None, "bad_request", f"malformed request line: {exc}")
            else:
                if request.get("op") == "shutdown":
                    break
                response = handle(engine, request)
            out.write(wire.dumps(response) + "\n")
            out.flush()
    finally:
        engine.close()
    return 0
