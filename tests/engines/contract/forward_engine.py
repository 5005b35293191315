"""A forward-pass engine written from PROTOCOL.md alone: Qwen2/Qwen3 in numpy on the
GGUF's weights (read and dequantized with gguf-py), serving `trace` (section 4.6).
Imports nothing from specgate.

    python tests/engines/contract/forward_engine.py

What section 4.6 asks, and how this engine does it: one forward pass over `ids` from
position 0; every point of the table recorded under its name as `[T, columns]`
float32, heads concatenated head-major; the rows of `positions` when given. A point
past the last layer is refused (`unsupported`).
"""

from __future__ import annotations

import base64
import sys
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gguf import GGUFReader, quants
from gguf.constants import GGMLQuantizationType
from jsonl import Refusal, serve

LAYER_KINDS = ("attn_norm", "Qcur", "Kcur", "Vcur", "kqv_out", "ffn_inp", "ffn_norm", "ffn_out", "l_out")


class Model:
    def __init__(self, path: str) -> None:
        reader = GGUFReader(path)
        self.meta = {
            f.name: f.contents() for f in reader.fields.values() if not f.name.startswith("tokenizer.")
        }
        arch = self.arch = self.meta["general.architecture"]
        self.n_layer = int(self.meta[f"{arch}.block_count"])
        self.n_head = int(self.meta[f"{arch}.attention.head_count"])
        self.n_kv = int(self.meta.get(f"{arch}.attention.head_count_kv", self.n_head))
        n_embd = int(self.meta[f"{arch}.embedding_length"])
        self.head_dim = int(self.meta.get(f"{arch}.attention.key_length", n_embd // self.n_head))
        self.eps = float(self.meta[f"{arch}.attention.layer_norm_rms_epsilon"])
        self.base = float(self.meta.get(f"{arch}.rope.freq_base", 10000.0))
        self.w: dict[str, np.ndarray] = {}
        for t in reader.tensors:
            shape = [int(n) for n in reversed(t.shape.tolist())]  # ggml ne -> numpy order
            data = quants.dequantize(np.asarray(t.data), GGMLQuantizationType(int(t.tensor_type)))
            self.w[t.name] = np.asarray(data, dtype=np.float32).reshape(shape)

    def norm(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(self.eps)) * weight

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:
        y = x @ self.w[name + ".weight"].T
        return y + self.w[name + ".bias"] if name + ".bias" in self.w else y

    def rope(self, x: np.ndarray) -> np.ndarray:
        """NeoX pairing (dims i and i + d/2) — x: [T, heads, d]."""
        t, _, d = x.shape
        inv = self.base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        angle = np.outer(np.arange(t, dtype=np.float64), inv)
        cos, sin = np.cos(angle).astype(np.float32)[:, None], np.sin(angle).astype(np.float32)[:, None]
        a, b = x[..., : d // 2], x[..., d // 2 :]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)

    def forward(self, ids: list[int]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        t, d = len(ids), self.head_dim
        x = self.w["token_embd.weight"][ids].copy()
        out["inp_embd"] = x.copy()
        for i in range(self.n_layer):
            p = f"blk.{i}."
            h = self.norm(x, self.w[p + "attn_norm.weight"])
            q = self.linear(h, p + "attn_q").reshape(t, self.n_head, d)
            k = self.linear(h, p + "attn_k").reshape(t, self.n_kv, d)
            v = self.linear(h, p + "attn_v").reshape(t, self.n_kv, d)
            if self.arch == "qwen3":
                q, k = (
                    self.norm(q, self.w[p + "attn_q_norm.weight"]),
                    self.norm(k, self.w[p + "attn_k_norm.weight"]),
                )
            q, k = self.rope(q), self.rope(k)
            group = self.n_head // self.n_kv
            heads = []
            for hq in range(self.n_head):
                scores = q[:, hq] @ k[:, hq // group].T / np.float32(np.sqrt(d))
                scores = np.where(np.tril(np.ones((t, t), bool)), scores, -np.inf)
                e = np.exp(scores - scores.max(-1, keepdims=True))
                heads.append((e / e.sum(-1, keepdims=True)) @ v[:, hq // group])
            kqv = np.stack(heads, axis=1).reshape(t, self.n_head * d)
            out.update({f"attn_norm-{i}": h, f"Qcur-{i}": q.reshape(t, -1), f"Kcur-{i}": k.reshape(t, -1),
                        f"Vcur-{i}": v.reshape(t, -1), f"kqv_out-{i}": kqv})  # fmt: skip
            x = x + kqv @ self.w[p + "attn_output.weight"].T
            out[f"ffn_inp-{i}"] = x
            h = self.norm(x, self.w[p + "ffn_norm.weight"])
            gate, up = h @ self.w[p + "ffn_gate.weight"].T, h @ self.w[p + "ffn_up.weight"].T
            ffn = (gate / (1 + np.exp(-gate)) * up) @ self.w[p + "ffn_down.weight"].T
            x = x + ffn
            out.update({f"ffn_norm-{i}": h, f"ffn_out-{i}": ffn, f"l_out-{i}": x})
        out["result_norm"] = x = self.norm(x, self.w["output_norm.weight"])
        out["result_output"] = x @ self.w.get("output.weight", self.w["token_embd.weight"]).T
        return out


@cache
def load(path: str) -> Model:
    return Model(path)


def array(value: np.ndarray) -> dict[str, Any]:
    value = np.ascontiguousarray(value, dtype="<f4")
    return {
        "$array": {
            "dtype": "float32",
            "shape": list(value.shape),
            "b64": base64.b64encode(value.tobytes()).decode(),
        }
    }


def trace(request: dict[str, Any]) -> Any:
    model = load(request["model"]["gguf"])
    for point in request["points"]:
        kind, _, layer = point.rpartition("-")
        if kind in LAYER_KINDS and int(layer) >= model.n_layer:
            raise Refusal(f"{point}: the model has {model.n_layer} layers")
    values = model.forward([int(i) for i in request["ids"]])
    rows = request.get("positions")
    return {"points": {p: array(values[p] if rows is None else values[p][rows]) for p in request["points"]}}


if __name__ == "__main__":
    hello = {"protocol": "specgate-jsonl/1", "engine": "contract-forward", "version": "1",
             "capabilities": ["trace"], "classes": ["exact"]}  # fmt: skip
    sys.exit(serve(hello, {"trace": trace}))
