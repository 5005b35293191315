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
  hostile-handshake  the handshake's name and version are that text (with NUL and ESC
                     bytes); encode: an error holding it; render and decode: answers
                     holding it; split: a refusal holding it; sample: a crash after
                     writing it to stderr
  trace-KIND [SIZE]  trace: every point asked, of the model's own widths (read from the
                     GGUF), then spoiled by KIND: ``big`` (the first point SIZE bytes of
                     float32 wide), ``nan`` / ``inf`` (one value), ``width`` (one column
                     more), ``rows`` (one row more), ``missing`` (the last point left
                     out), ``extra`` (SIZE points never asked added), ``huge`` (a
                     declared shape of 10^12 columns over the same data),
                     ``negative`` (a declared shape of [-1, width])
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


def gguf_numbers(gguf: str) -> dict[str, int]:
    """The GGUF header's integer keys and the length of tokenizer.ggml.tokens (as
    ``n_vocab``), read with the stdlib only."""
    found: dict[str, int] = {}
    with open(gguf, "rb") as f:
        magic, _version, _tensors, count = struct.unpack("<4sIQQ", f.read(24))
        assert magic == b"GGUF"
        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
        ints = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 10: "<Q", 11: "<q"}

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
            elif kind in ints:
                return struct.unpack(ints[kind], f.read(sizes[kind]))[0]
            else:
                f.seek(sizes[kind], 1)
            return None

        for _ in range(count):
            key = string().decode("utf-8")
            (kind,) = struct.unpack("<I", f.read(4))
            n = skip(kind)
            if key == "tokenizer.ggml.tokens":
                found["n_vocab"] = int(n or 0)
            elif n is not None and kind != 9:
                found[key.split(".", 1)[-1]] = int(n)
    if "n_vocab" not in found:
        raise SystemExit("no tokenizer.ggml.tokens")
    return found


def n_vocab_of(gguf: str) -> int:
    return gguf_numbers(gguf)["n_vocab"]


def trace_width(point: str, numbers: dict[str, int]) -> int:
    """A point's columns (PROTOCOL.md section 4.6) from the GGUF's hparams."""
    kind = point.rsplit("-", 1)[0] if point[-1].isdigit() else point
    n_embd, n_head = numbers["embedding_length"], numbers["attention.head_count"]
    head_dim = numbers.get("attention.key_length", n_embd // n_head)
    widths = {
        "Qcur": n_head * head_dim,
        "kqv_out": n_head * head_dim,
        "Kcur": numbers.get("attention.head_count_kv", n_head) * head_dim,
        "Vcur": numbers.get("attention.head_count_kv", n_head) * head_dim,
        "result_output": numbers["n_vocab"],
    }
    return widths.get(kind, n_embd)


def trace(kind: str, size: int, request: dict) -> dict:
    numbers = gguf_numbers(request["model"]["gguf"])
    rows = len(request.get("positions") or request["ids"])
    points: dict[str, dict] = {}
    for k, point in enumerate(request["points"]):
        extra_row = kind == "rows" and k == 0
        width = trace_width(point, numbers) + (kind == "width" and k == 0)
        if kind == "big" and k == 0:
            width = max(size // (4 * rows), 1)
        values = [0.5] * ((rows + extra_row) * width)
        if k == 0 and kind in ("nan", "inf"):
            values[width + 1] = float(kind)
        points[point] = array("float32", "f", [rows + extra_row, width], values)
        if kind == "huge" and k == 0:
            points[point]["$array"]["shape"] = [rows, 10**12]
        if kind == "negative" and k == 0:
            points[point]["$array"]["shape"] = [-1, width]
    if kind == "missing":
        points.pop(request["points"][-1])
    if kind == "extra":
        for k in range(size):
            points[f"l_out-{1000 + k}"] = array("float32", "f", [rows, 1], [0.0] * rows)
    return {"result": {"points": points}}


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
    if mode == "hostile-handshake":
        if op == "encode":
            return {"error": {"type": "engine", "message": HOSTILE + "\x00"}}
        if op in ("render", "decode"):
            return {"result": HOSTILE + "\x00"}
        if op == "split":
            return {"error": {"type": "unsupported", "message": HOSTILE}}
        if op == "sample":
            sys.stderr.write(HOSTILE + "\x00\n")
            sys.stderr.flush()
            sys.exit(3)
    if mode.startswith("trace-") and op == "trace":
        return trace(mode.removeprefix("trace-"), size, request)
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
        "hostile-handshake": ["split", "encode", "decode", "render", "sample"],
    }.get(mode, ["trace"] if mode.startswith("trace-") else ["logits"])
    hello = {
        "protocol": "specgate-jsonl/1",
        "engine": "hostile",
        "version": "1",
        "capabilities": capabilities,
        **({"classes": ["exact"]} if mode.startswith("trace-") else {}),
    }
    if mode == "hostile-handshake":
        hello.update(engine=HOSTILE + "\x00", version=HOSTILE + "\x00\x07")
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
