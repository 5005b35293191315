"""The `specgate-jsonl/1` loop (PROTOCOL.md) shared by the Python adapters under
`impl/ecosystem/`: handshake, one JSON request per stdin line, one JSON answer per stdout
line, the adapter's exceptions mapped onto the protocol's error types.

Standard library only, so each adapter stays standalone apart from its own engine
package. The adapters run as scripts (`python <folder>/adapter.py`), so each puts this
file's folder (its parent folder) on `sys.path` before `import jsonl_engine`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from typing import Any

Handler = Callable[[dict[str, Any]], Any]


class Refusal(Exception):
    """A stated limitation: answered as an `unsupported` error."""


class BadRequest(Exception):
    """The request does not follow PROTOCOL.md: answered as a `bad_request` error."""


def is_rust_panic(exc: BaseException) -> bool:
    """pyo3 raises a Rust panic as `pyo3_runtime.PanicException`, a BaseException
    subclass that the bindings do not export: recognized by its name."""
    return type(exc).__name__ == "PanicException"


def hello(engine: str, version: str, ops: list[str]) -> dict[str, Any]:
    """The handshake of an engine that answers ``ops``, each the capability of its name."""
    return {"engine": engine, "version": version, "capabilities": list(ops), "ops": list(ops)}


def answer(
    request: dict[str, Any],
    handlers: Mapping[str, Handler],
    *,
    prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    panics_of: str | None = None,
) -> dict[str, Any]:
    """The `result` or `error` part of the answer to ``request``: ``prepare`` (if any) turns
    the request into the handler's argument; a Rust panic is an `engine` error naming
    ``panics_of`` when that is given, and is left to end the process otherwise."""
    handler = handlers.get(request.get("op"))
    try:
        if handler is None:
            raise BadRequest(f"unknown op {request.get('op')!r}")
        return {"result": handler(prepare(request) if prepare else request)}
    except Refusal as exc:
        return {"error": {"type": "unsupported", "message": str(exc)}}
    except BadRequest as exc:
        return {"error": {"type": "bad_request", "message": str(exc)}}
    except KeyError as exc:
        return {"error": {"type": "bad_request", "message": f"the request lacks the field {exc}"}}
    except Exception as exc:  # the engine failed on this input
        return {"error": {"type": "engine", "message": f"{type(exc).__name__}: {exc}"}}
    except BaseException as exc:
        if panics_of is None or not is_rust_panic(exc):
            raise
        first_line = (str(exc).splitlines() or [""])[0]
        return {"error": {"type": "engine", "message": f"{panics_of} panicked (Rust panic): {first_line}"}}


def serve(
    hello: dict[str, Any],
    handlers: Mapping[str, Handler],
    *,
    prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    panics_of: str | None = None,
) -> int:
    """Write the handshake (``hello`` after the protocol name), then answer each request
    until `shutdown` or the end of stdin; the exit status (0)."""
    print(json.dumps({"protocol": "specgate-jsonl/1", **hello}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as exc:
            reply = {"id": None, "error": {"type": "bad_request", "message": f"not JSON: {exc}"}}
        else:
            if request.get("op") == "shutdown":
                break
            reply = {
                "id": request.get("id"),
                **answer(request, handlers, prepare=prepare, panics_of=panics_of),
            }
        print(json.dumps(reply, ensure_ascii=False), flush=True)
    return 0
