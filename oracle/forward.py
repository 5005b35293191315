"""The Qwen2 / Qwen3 forward pass: token ids in, next-token logits out.

For each new token (a whole prompt at once in ``prefill``, one token in ``step``):

    x = token_embd[id]
    for each layer:
        h  = rms_norm(x) * attn_norm
        q, k, v = h Wqᵀ (+ bq), h Wkᵀ (+ bk), h Wvᵀ (+ bv)      biases: qwen2 only
        q, k = rms_norm(q) * q_norm, rms_norm(k) * k_norm      per head: qwen3 only
        q, k = rope(q, pos), rope(k, pos)                       NeoX pairing (oracle.rope)
        x  = x + attention(q, cached k, cached v) Woᵀ           causal GQA (oracle.attention)
        h  = rms_norm(x) * ffn_norm
        x  = x + (silu(h Wgᵀ) * (h Wuᵀ)) Wdᵀ                    SwiGLU
    logits = (rms_norm(x) * output_norm) Wₒᵀ                   Wₒ = token_embd when tied

A ``trace`` (``oracle.trace.Recorder``) passed to ``prefill`` is shown the named
intermediates as they are computed — llama.cpp's graph tensor names: ``inp_embd``,
per layer ``attn_norm``, ``Qcur``/``Kcur`` (after the QK-norm and RoPE), ``Vcur``,
``kqv_out``, ``ffn_inp``, ``ffn_norm``, ``ffn_out``, ``l_out``, then ``result_norm``
and ``result_output``. It only looks; nothing is computed differently.

Weights are read from the GGUF and dequantized lazily (``oracle.weights``; with a
``store``, once per machine: ``oracle.weights_store``);
hyper-parameters come from ``oracle.dispatch``, and ``oracle.load_checks`` holds the
file to them before anything runs. Attention is the definition's result computed in
blocks (``oracle.attention_blocked``). Everything is float32 numpy:
matrix products go to BLAS, and a prompt is processed as one [T, n_embd] block —
there is no Python loop over tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from oracle import attention_blocked, rope
from oracle.dispatch import dispatch
from oracle.gguf import GGUFFile, open_gguf
from oracle.kv_cache import ContextOverflow, KVCache
from oracle.load_checks import check_runnable, check_token_ids
from oracle.trace import NO_TRACE, Recorder
from oracle.weights import DEFAULT_BUDGET_BYTES, Weights
from oracle.weights_store import WeightsStore

__all__ = ["ContextOverflow", "Model"]


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """Scale ``x`` to unit root-mean-square over its last axis, then by ``weight``."""
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(ms + np.float32(eps)) * weight


def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x) = x / (1 + exp(-x)), computed in one new buffer.

    For x < -88.7, exp(-x) overflows float32 to inf and x / inf = -0: the true
    limit (silu(x) -> 0), so the overflow is expected and not reported.
    """
    s = np.negative(x)
    with np.errstate(over="ignore"):
        np.exp(s, out=s)
    s += np.float32(1.0)
    return np.divide(x, s, out=s)


class Model:
    """A Qwen2/Qwen3 model with a KV cache.

    ``prefill(ids)`` appends a block of tokens after the ``n_past`` already
    processed and returns logits for each of them; ``step(id)`` does the same for
    one token. ``truncate(n)`` keeps the first ``n`` positions; ``reset()`` empties
    the cache (a new, unrelated sequence).
    """

    def __init__(
        self,
        gguf: GGUFFile,
        budget_bytes: int = DEFAULT_BUDGET_BYTES,
        n_ctx: int | None = None,
        store: WeightsStore | None = None,
    ) -> None:
        spec = dispatch(gguf)
        self.hparams = hp = check_runnable(gguf, spec)  # names every missing or misshapen tensor
        self.architecture = spec.architecture
        self.weights = Weights(gguf, budget_bytes, store)
        self.output_name = "token_embd.weight" if hp.tied_embeddings else "output.weight"
        self.n_ctx = hp.n_ctx if n_ctx is None else min(n_ctx, hp.n_ctx)
        self.cache = KVCache(hp.n_layer, hp.n_head_kv, hp.head_dim, self.n_ctx)
        self.trace: Recorder = NO_TRACE
        self.outputs: np.ndarray | None = None  # the positions ``prefill`` projects to logits (None: all)

    @classmethod
    def from_gguf(cls, gguf_file: GGUFFile | str | Path, **kwargs: Any) -> Model:
        gguf = gguf_file if isinstance(gguf_file, GGUFFile) else open_gguf(gguf_file)
        return cls(gguf, **kwargs)  # type: ignore[arg-type]

    @property
    def n_past(self) -> int:
        return self.cache.n_past

    def reset(self) -> None:
        self.cache.reset()

    def truncate(self, n: int) -> None:
        """Forget every position from ``n`` on (``KVCache.truncate``)."""
        self.cache.truncate(n)

    def prefill(
        self, ids: Sequence[int], trace: Recorder = NO_TRACE, outputs: Sequence[int] | None = None
    ) -> np.ndarray:
        """Process ``ids`` after the cached tokens; float32 logits [len(ids), n_vocab].
        ``trace`` is shown the named intermediates (``oracle.trace``). With ``outputs``
        (indices into ``ids``, negative from the end) only those positions are projected
        to logits, [len(outputs), n_vocab] — a decode loop reads its prompt's last one;
        every position still enters the KV cache."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        check_token_ids(ids, self.hparams.n_vocab)
        self.cache.check_room(ids.size)
        self.trace = trace
        self.outputs = None if outputs is None else np.arange(ids.size)[np.asarray(outputs, dtype=np.int64)]
        try:
            return self._forward(ids)
        finally:
            self.trace, self.outputs = NO_TRACE, None

    def step(self, token_id: int) -> np.ndarray:
        """Process one token after the cached ones; float32 logits [n_vocab]."""
        return self.prefill([token_id])[0]

    # -- the network -------------------------------------------------------------

    def _forward(self, ids: np.ndarray) -> np.ndarray:
        hp, w = self.hparams, self.weights
        positions = np.arange(self.n_past, self.n_past + ids.size)
        cos, sin = rope.rope_angles(positions, hp.head_dim, hp.rope_base)
        x = w.rows("token_embd.weight", ids)  # a new array: the residual stream, updated in place
        self.trace("inp_embd", x)
        for i in range(hp.n_layer):
            x += self._attention_block(i, x, positions, cos, sin)
            self.trace(f"ffn_inp-{i}", x)
            x += self._ffn_block(i, x)
            self.trace(f"l_out-{i}", x)
        self.cache.advance(ids.size)
        x = rms_norm(x, w.get("output_norm.weight"), hp.rms_eps)
        self.trace("result_norm", x)
        logits = w.matmul(x if self.outputs is None else x[self.outputs], self.output_name)
        self.trace("result_output", logits)
        return logits

    def _linear(self, x: np.ndarray, layer: int, name: str) -> np.ndarray:
        """x Wᵀ + b for ``blk.<layer>.<name>.weight`` (and its ``.bias`` when the architecture has one)."""
        prefix = f"blk.{layer}.{name}"
        y = self.weights.matmul(x, prefix + ".weight")
        if prefix + ".bias" in self.weights:
            y = y + self.weights.get(prefix + ".bias")
        return y

    def _heads(self, y: np.ndarray, n_heads: int) -> np.ndarray:
        """[T, n_heads * head_dim] -> [n_heads, T, head_dim]."""
        return y.reshape(y.shape[0], n_heads, self.hparams.head_dim).transpose(1, 0, 2)

    def _qk_norm(self, layer: int, q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Qwen3 normalizes every query and key head (over head_dim) before RoPE."""
        if self.architecture != "qwen3":
            return q, k
        w, eps = self.weights, self.hparams.rms_eps
        return (rms_norm(q, w.get(f"blk.{layer}.attn_q_norm.weight"), eps),
                rms_norm(k, w.get(f"blk.{layer}.attn_k_norm.weight"), eps))  # fmt: skip

    def _attention_block(
        self, i: int, x: np.ndarray, positions: np.ndarray, cos: np.ndarray, sin: np.ndarray
    ) -> np.ndarray:
        hp = self.hparams
        h = rms_norm(x, self.weights.get(f"blk.{i}.attn_norm.weight"), hp.rms_eps)
        self.trace(f"attn_norm-{i}", h)
        q = self._heads(self._linear(h, i, "attn_q"), hp.n_head)
        k = self._heads(self._linear(h, i, "attn_k"), hp.n_head_kv)
        v = self._heads(self._linear(h, i, "attn_v"), hp.n_head_kv)
        q, k = self._qk_norm(i, q, k)
        q, k = rope.apply_rope(q, cos, sin), rope.apply_rope(k, cos, sin)
        self.trace.heads(f"Qcur-{i}", q)
        self.trace.heads(f"Kcur-{i}", k)
        self.trace.heads(f"Vcur-{i}", v)
        keys, values = self.cache.append(i, k, v)
        out = attention_blocked.attention(q, keys, values, positions)  # [n_head, T, head_dim]
        out = out.transpose(1, 0, 2).reshape(x.shape[0], hp.n_head * hp.head_dim)
        self.trace(f"kqv_out-{i}", out)
        return self.weights.matmul(out, f"blk.{i}.attn_output.weight")

    def _ffn_block(self, i: int, x: np.ndarray) -> np.ndarray:
        w = self.weights
        h = rms_norm(x, w.get(f"blk.{i}.ffn_norm.weight"), self.hparams.rms_eps)
        self.trace(f"ffn_norm-{i}", h)
        gate, up = w.matmul(h, f"blk.{i}.ffn_gate.weight"), w.matmul(h, f"blk.{i}.ffn_up.weight")
        h = silu(gate)
        h *= up
        out = w.matmul(h, f"blk.{i}.ffn_down.weight")
        self.trace(f"ffn_out-{i}", out)
        return out
