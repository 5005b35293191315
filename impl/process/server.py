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

import json
import os
import sys
import traceback
from collections.abc import Iterable
from typing import IO, Any

import numpy as np

from impl.process import schema, wire
from impl.protocol import Engine, Unsupported
from impl.registry import MissingExtra, UnknownImpl, resolve


def _claim_stdout() -> IO[str]:
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
    if op not in wire.OPS:
        return _error(rid, "bad_request", f"unknown op {op!r}; known: {', '.join(wire.OPS)}")
    _, names = wire.OPS[op]
    if op not in implemented_ops(engine):
        return _error(rid, "unsupported", f"{engine.name} does not offer {op!r}")
    request_problem = schema.request_problem(request)
    if request_problem:
        return _error(rid, "bad_request", request_problem)
    try:
        args = []
        for name in names:
            if name == "model":
                args.append(wire.model_from_wire(request.get("model")))
            elif name == "kwargs":
                args.append(wire.decode_value(request.get("kwargs") or {}))
            elif name == "add_generation_prompt":
                args.append(bool(request.get(name, True)))
            elif name in request:
                args.append(wire.decode_value(request[name]))
            else:
                return _error(rid, "bad_request", f"op {op!r} needs field {name!r}")
    except wire.WireError as exc:
        return _error(rid, "bad_request", str(exc))
    if op == "render":
        *args, kwargs = args
    else:
        kwargs = {}
    try:
        result = getattr(engine, op)(*args, **kwargs)
    except Unsupported as exc:
        return _error(rid, "unsupported", str(exc))
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        return _error(rid, "engine", f"{type(exc).__name__}: {exc}")
    top_k = request.get("top_k") if op == "logits" else None
    if isinstance(top_k, int) and top_k > 0 and isinstance(result, np.ndarray) and result.ndim == 2:
        result = {"top_k": wire.top_k_logits(result, top_k)}
    try:
        encoded = wire.encode_value(result)
    except wire.WireError as exc:
        return _error(rid, "engine", f"result cannot be sent: {exc}")
    result_problem = schema.result_problem(op, encoded)
    if result_problem:  # what this server sends follows the protocol, or is reported as the engine's failure
        return _error(rid, "engine", f"{engine.name} answered a result of the wrong shape: {result_problem}")
    return {"id": rid, "result": encoded}


def implemented_ops(engine: Engine) -> list[str]:
    """The ops of the offered capabilities the adapter implements (``render`` may
    come without ``render_template``)."""
    return [
        op
        for op, (capability, _) in wire.OPS.items()
        if engine.offers(capability) and getattr(type(engine), op, None) is not getattr(Engine, op)
    ]


def _error(rid: Any, kind: str, message: str) -> dict[str, Any]:
    return {"id": rid, "error": {"type": kind, "message": message}}


def serve(impl: str | Engine, stdin: Iterable[bytes] | None = None, stdout: IO[str] | None = None) -> int:
    """Serve ``impl`` (an adapter, or anything ``--impl`` accepts) until stdin closes."""
    out = stdout if stdout is not None else _claim_stdout()
    src = stdin if stdin is not None else sys.stdin.buffer
    try:
        engine = resolve(impl) if isinstance(impl, str) else impl
    except UnknownImpl as exc:
        print(f"specgate engine: {exc}", file=sys.stderr)
        return 4 if isinstance(exc, MissingExtra) else 2
    hello = {
        "protocol": wire.PROTOCOL,
        "engine": engine.name,
        "version": engine.version(),
        "capabilities": sorted(engine.capabilities),
        "classes": sorted(engine.classes),
        "ops": implemented_ops(engine),
    }
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
