"""The value encoding of the JSON-lines process protocol (PROTOCOL.md), shared by
the client (``impl.process.client``) and the server (``impl.process.server``).

JSON has no byte strings, no float arrays and only string object keys, while the
adapter protocol passes all three. One rule per kind keeps the wire text-only and
lossless, so an engine in any language can speak it with its JSON library and a
base64 codec:

  bytes                      -> {"$bytes": "<base64>"}
  numpy array (numeric)      -> {"$array": {"dtype": "float32", "shape": [..], "b64": "<base64, little-endian>"}}
  dict with non-string keys  -> {"$dict": [[key, value], ...]}
  tuple                      -> list

Floats travel as JSON numbers (Python's shortest round-trip repr, so exact);
non-finite floats use the literals ``NaN``, ``Infinity``, ``-Infinity``.

A call's arguments become request fields by the op's table (``impl.ops``):
``request_fields`` (the client) and ``call_arguments`` (the server) are inverses.
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import numpy as np

from impl.bounds import check_top_k
from impl.named_logprobs import NamedLogprobs
from impl.ops import VERSION, Op
from impl.protocol import EngineError, ModelRef

PROTOCOL = VERSION  # "specgate-jsonl/1", the handshake schema's
_DTYPES = ("float32", "float64", "float16", "int32", "int64", "uint8", "bool")


class WireError(ValueError):
    """A message that does not follow PROTOCOL.md."""


def encode_value(value: Any) -> Any:
    """A JSON-able form of ``value`` following the rules in the module docstring."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, np.ndarray):
        if value.dtype.name not in _DTYPES:
            raise WireError(f"cannot send an array of dtype {value.dtype}")
        data = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<"))
        return {
            "$array": {
                "dtype": value.dtype.name,
                "shape": list(value.shape),
                "b64": base64.b64encode(data.tobytes()).decode("ascii"),
            }
        }
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: encode_value(v) for k, v in value.items()}
        return {"$dict": [[encode_value(k), encode_value(v)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return [encode_value(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def decode_value(value: Any) -> Any:
    """Inverse of ``encode_value``."""
    if isinstance(value, list):
        return [decode_value(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1 and "$bytes" in value:
        try:
            return base64.b64decode(value["$bytes"], validate=True)
        except (ValueError, TypeError) as exc:
            raise WireError(f"bad $bytes value: {exc}") from exc
    if len(value) == 1 and "$array" in value:
        spec = value["$array"]
        try:
            dtype = np.dtype(spec["dtype"]).newbyteorder("<")
            if spec["dtype"] not in _DTYPES:
                raise WireError(f"unsupported $array dtype {spec['dtype']!r}")
            raw = base64.b64decode(spec["b64"], validate=True)
            return np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("=")).reshape(spec["shape"])
        except (KeyError, ValueError, TypeError) as exc:
            raise WireError(f"bad $array value: {exc}") from exc
    if len(value) == 1 and "$dict" in value:
        try:
            return {_hashable(decode_value(k)): decode_value(v) for k, v in value["$dict"]}
        except (ValueError, TypeError) as exc:
            raise WireError(f"bad $dict value: {exc}") from exc
    return {k: decode_value(v) for k, v in value.items()}


def top_k_logits(logits: np.ndarray, k: int) -> dict[str, Any]:
    """The compact ``logits`` answer: per position the ``k`` highest logits (by
    descending value), their ids, and the log-sum-exp over the whole vocabulary.

    A full ``[n, n_vocab]`` float32 array for a 512-token prompt is 300 MB; with
    k = 1024 this is ~4 MB and keeps what the gates use: exact logits (hence exact log-probs, since
    log p = logit - lse) of every candidate that matters."""
    x = np.asarray(logits, dtype=np.float32)
    k = min(k, x.shape[1])
    top = np.argpartition(-x, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(x, top, axis=1), axis=1, kind="stable")
    ids = np.take_along_axis(top, order, axis=1).astype(np.int32)
    x64 = x.astype(np.float64)
    peak = x64.max(axis=1, keepdims=True)
    lse = (peak + np.log(np.exp(x64 - peak).sum(axis=1, keepdims=True)))[:, 0]
    return {"n_vocab": int(x.shape[1]), "ids": ids, "logits": np.take_along_axis(x, ids, axis=1), "lse": lse}


def expand_top_k(answer: dict[str, Any], n_vocab: int | None = None) -> np.ndarray | NamedLogprobs:
    """A ``[n, n_vocab]`` float32 array from a ``top_k`` answer: the top-k logits
    exactly; every other id gets the same value, chosen so that the row's
    log-sum-exp equals the engine's. Softmax, top-1 and the log-probs of the top-k
    are therefore the engine's own; the tail is its mass spread evenly. An answer
    with ``unnamed`` (the engine could not name every candidate; ids of -1 are empty
    slots) is kept as it is: ``NamedLogprobs``, the rest an unnamed remainder.

    The declared ``n_vocab`` is checked (against the model's ``n_vocab`` when given,
    and against ``impl.bounds``) before anything of that size is allocated."""
    try:
        check_top_k(answer, 0, n_vocab)
    except EngineError as exc:
        raise WireError(str(exc)) from None
    try:
        n_vocab, ids = int(answer["n_vocab"]), np.asarray(answer["ids"], dtype=np.int64)
        values, lse = (
            np.asarray(answer["logits"], dtype=np.float64),
            np.asarray(answer["lse"], dtype=np.float64),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise WireError(f"bad top_k logits answer: {exc}") from exc
    if ids.ndim != 2 or values.shape != ids.shape or lse.shape != (ids.shape[0],):
        raise WireError(
            f"bad top_k logits answer: shapes ids {ids.shape}, logits {values.shape}, lse {lse.shape}"
        )
    if ids.size and (ids.min() < (-1 if answer.get("unnamed") else 0) or ids.max() >= n_vocab):
        raise WireError(f"top_k ids outside the vocabulary of {n_vocab}")
    if answer.get("unnamed"):  # the engine named only these: no claim about the rest
        return NamedLogprobs(n_vocab, ids, values - lse[:, None], str(answer["unnamed"]))
    k = ids.shape[1]
    if k > n_vocab:
        raise WireError(f"top_k has {k} candidates per row, more than n_vocab {n_vocab}")
    if not (np.isfinite(values).all() and np.isfinite(lse).all()):
        raise WireError("top_k logits and lse must be finite (NaN or Infinity found)")
    top_mass = np.exp(values - lse[:, None]).sum(axis=1)
    rest = np.maximum(1.0 - top_mass, 1e-30) / max(n_vocab - k, 1)
    out = np.empty((ids.shape[0], n_vocab), dtype=np.float32)  # float32 from the start: half the memory
    out[:] = (lse + np.log(rest))[:, None]
    np.put_along_axis(out, ids, values.astype(np.float32), axis=1)
    return out


def request_fields(op: Op, named: dict[str, Any]) -> dict[str, Any]:
    """The request fields of a call's arguments by name (``Op.bind``), each in the form
    its schema gives; an optional argument left at None is not sent."""
    missing = [a.name for a in op.arguments if a.required and a.name not in named]
    if missing:
        raise TypeError(f"{op.name}: missing argument {', '.join(map(repr, missing))}")
    return {
        a.name: to_wire(a.kind, named[a.name])
        for a in op.arguments
        if a.required or named.get(a.name) is not None
    }


def to_wire(kind: str, value: Any) -> Any:
    """One argument on the wire, by its ``impl.ops.Argument.kind``."""
    if kind == "model":
        return model_to_wire(value)
    if kind == "ints":
        return [int(i) for i in value]
    if kind == "vector":
        return encode_value(np.asarray(value))
    if kind == "number":
        return float(value)
    if kind == "list":
        return encode_value(list(value))
    return encode_value(value)


def call_arguments(op: Op, request: dict[str, Any]) -> dict[str, Any]:
    """The inverse of ``request_fields``: a (schema-valid) request's arguments by name,
    decoded, the schema's default for an optional field not sent."""
    named = {}
    for a in op.arguments:
        if a.name not in request:
            if a.required:
                raise WireError(f"op {op.name!r} needs field {a.name!r}")
            named[a.name] = copy.deepcopy(a.default)
        elif a.kind == "model":
            named[a.name] = model_from_wire(request[a.name])
        else:
            named[a.name] = decode_value(request[a.name])
    return named


def _hashable(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key


def model_to_wire(model: ModelRef) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": model.id,
        "gguf": str(model.gguf),
        "sha256": model.sha256,
        "role": model.role,
        "weights": bool(model.weights),
        "loader": model.loader,
    }
    for name in ("tokenizer_json", "tokenizer_config", "tiktoken"):
        if getattr(model, name) is not None:
            out[name] = str(getattr(model, name))
    return out


def model_from_wire(data: Any) -> ModelRef:
    if not isinstance(data, dict) or not {"id", "gguf", "sha256"} <= set(data):
        raise WireError(f"a model must be an object with id, gguf and sha256; got {str(data)[:200]}")

    def path(name: str) -> Path | None:
        return Path(data[name]) if data.get(name) else None

    return ModelRef(
        id=data["id"],
        gguf=Path(data["gguf"]),
        sha256=data["sha256"],
        role=data.get("role", "user"),
        tokenizer_json=path("tokenizer_json"),
        tokenizer_config=path("tokenizer_config"),
        tiktoken=path("tiktoken"),
        weights=_optional(data, "weights", bool),
        loader=_optional(data, "loader", str) or "transformers",
    )


def _optional(data: dict[str, Any], name: str, kind: type) -> Any:
    """``data[name]`` if present (None if not), refused unless it is a ``kind``
    (fields later protocol versions added: older clients leave them out)."""
    value = data.get(name)
    if value is not None and not isinstance(value, kind):
        raise WireError(f"a model's {name!r} must be a {kind.__name__}; got {str(value)[:200]}")
    return value


def dumps(message: dict[str, Any]) -> str:
    """One protocol line (no newline inside: JSON escapes control characters)."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))
