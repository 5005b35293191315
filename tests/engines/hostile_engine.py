"""An engine whose answers follow the protocol's schemas but not what a case can
need — the red-team's hostile answers, as a real process (stdlib only, like a
third-party engine written against PROTOCOL.md):

    python tests/engines/hostile_engine.py MODE [SIZE]

  big-render SIZE    render: SIZE characters (a fence and markup first)
  big-encode SIZE    encode: SIZE ids (all 0)
  n-vocab SIZE       logits: the top-k form declaring n_vocab = SIZE
  width SIZE         logits: full rows of width SIZE
  nan                logits: the top-k form with a NaN logit (n_vocab read from the GGUF)
  deep-handshake SIZE  the handshake nested SIZE lists deep
  big-message SIZE   encode: an ``engine`` error whose message is SIZE characters
  markup             encode: an ``engine`` error whose message is live Markdown, HTML
                     and ANSI escapes; render: a refusal holding the same
"""

from __future__ import annotations

import base64
import json
import struct
import sys

HOSTILE = (
    "```\n## FAKE: all 999 cases passed\n<details><summary>x</summary><img src=x onerror=alert(1)>\n"
    "<!-- `tick` ``` \x1b[31mRED\x1b[0m \x9b2J \u202eevil"
)


def b64(fmt: str, values: list[float]) -> str:
    return base64.b64encode(struct.pack("<" + fmt * len(values), *values)).decode("ascii")


def array(dtype: str, fmt: str, shape: list[int], values: list[float]) -> dict:
    return {"$array": {"dtype": dtype, "shape": shape, "b64": b64(fmt, values)}}


def n_vocab_of(gguf: str) -> int:
    """The length of tokenizer.ggml.tokens, read from the GGUF header (stdlib only)."""
    with open(gguf, "rb") as f:
        magic, _version, _tensors, count = struct.unpack("<4sIQQ", f.read(24))
        assert magic == b"GGUF"
        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

        def string() -> bytes:
            (n,) = struct.unpack("<Q", f.read(8))
            return f.read(n)

        def skip(kind: int) -> int | None:
            if kind == 8:
                string()
            elif kind == 9:
                (inner,) = struct.unpack("<I", f.read(4))
                (n,) = struct.unpack("<Q", f.read(8))
                for _ in range(n):
                    skip(inner)
                return n
            else:
                f.seek(sizes[kind], 1)
            return None

        for _ in range(count):
            key = string()
            (kind,) = struct.unpack("<I", f.read(4))
            n = skip(kind)
            if key == b"tokenizer.ggml.tokens":
                return int(n or 0)
    raise SystemExit("no tokenizer.ggml.tokens")


def top_k(rows: int, n_vocab: int, value: float) -> dict:
    return {
        "top_k": {
            "n_vocab": n_vocab,
            "ids": array("int32", "i", [rows, 1], [0] * rows),
            "logits": array("float32", "f", [rows, 1], [value] * rows),
            "lse": array("float64", "d", [rows], [0.0] * rows),
        }
    }


def answer(mode: str, size: int, request: dict) -> dict:
    op = request["op"]
    if mode == "big-render" and op in ("render", "render_template"):
        return {"result": HOSTILE + "x" * size}
    if mode == "big-encode" and op == "encode":
        return {"result": [0] * size}
    if mode == "big-message" and op == "encode":
        return {"error": {"type": "engine", "message": "head " + "m" * size + " tail"}}
    if mode == "markup" and op == "encode":
        return {"error": {"type": "engine", "message": HOSTILE}}
    if mode == "markup" and op == "render":
        return {"error": {"type": "unsupported", "message": HOSTILE}}
    if op == "logits":
        rows = len(request["ids"])
        if mode == "n-vocab":
            return {"result": top_k(rows, size, 0.0)}
        if mode == "width":
            return {"result": array("float32", "f", [rows, size], [0.0] * (rows * size))}
        if mode == "nan":
            return {"result": top_k(rows, n_vocab_of(request["model"]["gguf"]), float("nan"))}
    return {"error": {"type": "engine", "message": f"hostile engine: no {op} in mode {mode}"}}


def main() -> int:
    mode = sys.argv[1]
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    capabilities = {
        "big-render": ["render"],
        "markup": ["encode", "render"],
        "big-encode": ["encode"],
        "big-message": ["encode"],
    }.get(mode, ["logits"])
    hello = {
        "protocol": "specgate-jsonl/1",
        "engine": "hostile",
        "version": "1",
        "capabilities": capabilities,
    }
    if mode == "deep-handshake":
        sys.stdout.write('{"protocol": "specgate-jsonl/1", "engine": ' + "[" * size + "]" * size + "}\n")
        sys.stdout.flush()
    else:
        print(json.dumps(hello), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("op") == "shutdown":
            break
        sys.stdout.write(json.dumps({"id": request["id"], **answer(mode, size, request)}) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
