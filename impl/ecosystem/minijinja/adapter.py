"""specgate adapter for the PyPI `minijinja` package (the Python binding of the Rust
MiniJinja engine): a `cmd:` engine speaking `specgate-jsonl/1` (PROTOCOL.md) over stdio.

Standalone on purpose: stdlib + `minijinja` only (and the shared loop
`../jsonl_engine.py`, stdlib itself). The chat template and the special
tokens come from the GGUF's key-value header, read by the small reader below.

The environment is built from minijinja's public API only: `trim_blocks`,
`lstrip_blocks`, `pycompat` (Python string/dict methods), and `add_global` for the two
functions transformers gives templates (`raise_exception`, `strftime_now`). Nothing of
minijinja's own behaviour is replaced (its `tojson` stays its own): where it differs
from transformers' jinja2, that is what the gates are meant to find. A template
minijinja cannot compile or render is answered `unsupported` with minijinja's message.

    python impl/ecosystem/minijinja/adapter.py
"""

from __future__ import annotations

import base64
import json
import struct
import sys
from datetime import datetime
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any, BinaryIO

import minijinja

# The adapter runs as a script: its parent folder (impl/ecosystem/) holds the shared
# specgate-jsonl/1 loop, jsonl_engine.py (stdlib only).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from jsonl_engine import BadRequest, Refusal, serve

REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")
SPECIAL_TOKEN_KEYS = {
    "bos_token": "tokenizer.ggml.bos_token_id",
    "eos_token": "tokenizer.ggml.eos_token_id",
    "unk_token": "tokenizer.ggml.unknown_token_id",
    "pad_token": "tokenizer.ggml.padding_token_id",
}


# --- a stdlib reader of the GGUF key-value header -------------------------------------------

GGUF_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
GGUF_STRING, GGUF_ARRAY = 8, 9


def _read(f: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise BadRequest(f"{f.name}: the GGUF header ends early")
    return struct.unpack(fmt, data)[0]


def _read_value(f: BinaryIO, kind: int) -> Any:
    if kind in GGUF_SCALARS:
        return _read(f, GGUF_SCALARS[kind])
    if kind == GGUF_STRING:
        return f.read(_read(f, "<Q")).decode("utf-8", errors="surrogateescape")
    if kind == GGUF_ARRAY:
        item_kind, count = _read(f, "<I"), _read(f, "<Q")
        return [_read_value(f, item_kind) for _ in range(count)]
    raise BadRequest(f"{f.name}: unknown GGUF value type {kind}")


@cache
def gguf_metadata(path: str) -> dict[str, Any]:
    """The key-value pairs of a GGUF file (the tensor infos after them are not read)."""
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF":
                raise BadRequest(f"{path}: not a GGUF file")
            _version, _tensors, count = _read(f, "<I"), _read(f, "<Q"), _read(f, "<Q")
            metadata = {}
            for _ in range(count):
                key = f.read(_read(f, "<Q")).decode("utf-8")
                metadata[key] = _read_value(f, _read(f, "<I"))
            return metadata
    except OSError as exc:
        raise BadRequest(f"cannot read the model's GGUF: {exc}") from None


# --- the template environment -----------------------------------------------------------------


class TemplateRaised(Exception):
    """`raise_exception(message)` was called by the template."""


def raise_exception(message: str) -> None:
    raise TemplateRaised(message)


def strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


@cache
def environment() -> minijinja.Environment:
    env = minijinja.Environment(trim_blocks=True, lstrip_blocks=True, pycompat=True, debug=False)
    env.add_global("raise_exception", raise_exception)
    env.add_global("strftime_now", strftime_now)
    return env


def render_source(source: str, context: dict[str, Any]) -> str:
    try:
        return environment().render_str(source, **context)
    except TemplateRaised as exc:
        raise Refusal(f"the template raised: {exc}") from None
    except minijinja.TemplateError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Refusal(f"minijinja cannot render the template: {first_line}") from None


# --- the ops ----------------------------------------------------------------------------------


def model_template(model: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The model's chat template and its special-token strings (PROTOCOL.md section 4.1)."""
    metadata = gguf_metadata(model["gguf"])
    tokens = metadata.get("tokenizer.ggml.tokens") or []
    specials = {
        name: tokens[metadata[key]]
        for name, key in SPECIAL_TOKEN_KEYS.items()
        if key in metadata and 0 <= metadata[key] < len(tokens)
    }
    source = metadata.get("tokenizer.chat_template")
    if source is None and model.get("tokenizer_config"):
        source = json.loads(Path(model["tokenizer_config"]).read_text(encoding="utf-8")).get("chat_template")
        if isinstance(source, list):
            source = next((t["template"] for t in source if t.get("name") == "default"), None)
    if source is None:
        raise Refusal("the model has no chat template (this adapter has no ChatML fallback)")
    return source, specials


def normalized(message: dict[str, Any]) -> dict[str, Any]:
    """transformers' message normalization: null keys dropped, reasoning mirrored."""
    message = {k: v for k, v in message.items() if v is not None}
    reasoning = next((message[k] for k in REASONING_KEYS if message.get(k) is not None), None)
    if reasoning is not None:
        message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
    return message


def render(request: dict[str, Any]) -> str:
    source, specials = model_template(request["model"])
    if not request["messages"]:
        raise Refusal("an empty conversation cannot be rendered")
    kwargs = dict(request.get("kwargs") or {})
    context = {
        "messages": [normalized(m) for m in request["messages"]],
        "tools": kwargs.pop("tools", None),
        "documents": kwargs.pop("documents", None),
        "add_generation_prompt": request.get("add_generation_prompt", True),
        **specials,
        **kwargs,
    }
    return render_source(source, context)


def render_template(request: dict[str, Any]) -> str:
    return render_source(request["template"], request["context"])


HANDLERS = {"render": render, "render_template": render_template}


# --- the specgate-jsonl/1 loop ----------------------------------------------------------------


def from_wire(value: Any) -> Any:
    """A request with PROTOCOL.md section 5's `$bytes` and `$dict` encodings undone."""
    if isinstance(value, list):
        return [from_wire(v) for v in value]
    if not isinstance(value, dict):
        return value
    if value.keys() == {"$bytes"}:
        return base64.b64decode(value["$bytes"])
    if value.keys() == {"$dict"}:
        return {_hashable(from_wire(k)): from_wire(v) for k, v in value["$dict"]}
    if value.keys() == {"$array"}:
        raise Refusal("numeric arrays are not taken by a template engine")
    return {k: from_wire(v) for k, v in value.items()}


def _hashable(key: Any) -> Any:
    return tuple(_hashable(k) for k in key) if isinstance(key, list) else key


def main() -> int:
    return serve(
        {"engine": "minijinja", "version": version("minijinja"), "capabilities": ["render"]},
        HANDLERS,
        prepare=from_wire,
    )


if __name__ == "__main__":
    sys.exit(main())
