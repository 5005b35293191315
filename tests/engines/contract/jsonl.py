"""The `specgate-jsonl/1` loop shared by the contract adapters, written from PROTOCOL.md
alone: a handshake line, then one answer line per request line, until stdin closes
or a `shutdown` request arrives. Imports nothing from specgate.

An op handler returns the result (already in wire form) or raises `Refusal`
(answered as an `unsupported` error); any other exception is an `engine` error.
"""

from __future__ import annotations

import base64
import json
import sys
import traceback
from collections.abc import Callable
from typing import Any


class Refusal(Exception):
    """A stated limitation of the engine: answered with error type `unsupported`."""


def serve(hello: dict[str, Any], handlers: dict[str, Callable[[dict[str, Any]], Any]]) -> int:
    out = sys.stdout
    out.write(json.dumps(hello) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as exc:
            answer = {"id": None, "error": {"type": "bad_request", "message": f"not JSON: {exc}"}}
        else:
            if request.get("op") == "shutdown":
                break
            answer = {"id": request.get("id"), **respond(handlers, request)}
        out.write(json.dumps(answer, ensure_ascii=False) + "\n")
        out.flush()
    return 0


def respond(handlers: dict[str, Callable[[dict[str, Any]], Any]], request: dict[str, Any]) -> dict[str, Any]:
    handler = handlers.get(request.get("op"))
    if handler is None:
        return {"error": {"type": "bad_request", "message": f"unknown op {request.get('op')!r}"}}
    try:
        return {"result": handler(decoded(request))}
    except Refusal as exc:
        return {"error": {"type": "unsupported", "message": str(exc)}}
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        return {"error": {"type": "engine", "message": f"{type(exc).__name__}: {exc}"}}


def decoded(value: Any) -> Any:
    """A request with the encodings of PROTOCOL.md section 5 undone (`$bytes` -> bytes,
    `$dict` -> dict; `$array` is refused: these engines take no arrays)."""
    if isinstance(value, list):
        return [decoded(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1 and "$bytes" in value:
        return base64.b64decode(value["$bytes"])
    if len(value) == 1 and "$dict" in value:
        return {_key(decoded(k)): decoded(v) for k, v in value["$dict"]}
    if len(value) == 1 and "$array" in value:
        raise Refusal("numeric arrays are not taken by this engine")
    return {k: decoded(v) for k, v in value.items()}


def _key(key: Any) -> Any:
    return tuple(_key(k) for k in key) if isinstance(key, list) else key
