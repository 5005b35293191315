"""Mutant engines: the oracle with one planted forward-pass bug each, served over
PROTOCOL.md — the bugs authors of forward passes make. The trace gate must locate each
at its layer and point (``tests/engines/test_trace_mutants.py``).

    python tests/engines/mutants/forward_bugs.py BUG[,BUG]

BUG is one of ``PLANTS`` (the RoPE pairing bug is ``rope_interleaved.py``, shared
with the logits mutant test, planted here too as ``rope_interleaved``); several, comma
separated, are planted together. The logits diagnoses (``tests/diagnose/
test_forward_diagnoses.py``) name each:

* ``rope_base``         RoPE with base 10 000 (Llama's) instead of the GGUF's rope.freq_base
* ``qk_norm_missing``   Qwen3's per-head RMSNorm of queries and keys left out
* ``rms_eps``           RMSNorm with epsilon 1e-3 instead of the GGUF's (1e-6 here)
* ``bias_missing``      Qwen2's q/k/v projection biases left out
* ``gqa_order``         query head h reads kv head h mod n_head_kv instead of h // group
* ``swiglu_swapped``    silu(up) * gate instead of silu(gate) * up
* ``q4_0_interleaved``  Q4_0 blocks dequantized with the nibbles interleaved (element 2i from
                        the low nibble of byte i, 2i+1 from its high one) instead of all
                        low nibbles then all high ones
* ``mask_off_by_one``   the causal mask lets a query see the key one position after it
* ``tied_output``       the logits projected with token_embd although the GGUF has output.weight

and look-alikes no diagnosis may name:

* ``rope_base_500000``  RoPE with base 500 000 (Llama 3's): a RoPE bug, not the 10 000 one
* ``logit_noise``       the right logits plus Gaussian noise (σ = 3e-3, ten times the exact
                        tolerance of the tiny models): an engine off by float noise, no defect
* ``random_logits``     seeded Gaussian logits and no forward at all: a cheap engine that fails
                        every logits case (the memory tests of the diagnosis and the shrinking
                        on the 0.5B model, ``tests/diagnose/test_diagnosis_memory.py``)
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np


def rope_base(value: float = 10_000.0) -> None:
    from oracle import forward, rope

    angles = rope.rope_angles
    forward.rope.rope_angles = lambda positions, head_dim, base: angles(positions, head_dim, value)


def rope_base_500000() -> None:
    rope_base(500_000.0)


def rope_interleaved() -> None:
    from rope_interleaved import plant  # the sibling script (this file's folder is on sys.path)

    plant()


def tied_output() -> None:
    from oracle.forward import Model

    init = Model.__init__

    def tied(self: Model, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)  # type: ignore[arg-type]
        self.output_name = "token_embd.weight"

    Model.__init__ = tied  # type: ignore[method-assign]


def logit_noise() -> None:
    from oracle.forward import Model

    prefill = Model.prefill
    rng = np.random.default_rng(0)

    def noisy(self: Model, ids: object, *args: object, **kwargs: object) -> np.ndarray:
        logits = prefill(self, ids, *args, **kwargs)  # type: ignore[arg-type]
        return logits + rng.normal(0.0, 3e-3, logits.shape).astype(np.float32)

    Model.prefill = noisy  # type: ignore[method-assign]


def qk_norm_missing() -> None:
    from oracle.forward import Model

    Model._qk_norm = lambda self, layer, q, k: (q, k)


def rms_eps() -> None:
    from oracle import forward

    norm = forward.rms_norm
    forward.rms_norm = lambda x, weight, eps: norm(x, weight, 1e-3)


def bias_missing() -> None:
    from oracle.forward import Model

    def linear(self: Model, x: np.ndarray, layer: int, name: str) -> np.ndarray:
        return self.weights.matmul(x, f"blk.{layer}.{name}.weight")

    Model._linear = linear


def gqa_order() -> None:
    from oracle import attention_blocked

    attend = attention_blocked.attend

    def wrong_groups(q: np.ndarray, k: np.ndarray, v: np.ndarray, q_positions: np.ndarray) -> np.ndarray:
        n_head, n_kv = q.shape[0], k.shape[0]
        group = n_head // n_kv
        # the correct code gives head h the kv head h // group; this one h % n_kv
        order = np.array([h for kv in range(n_kv) for h in range(n_head) if h % n_kv == kv])
        out = attend(q[order], k, v, q_positions)
        back = np.empty_like(out)
        back[order] = out
        assert group >= 1
        return back

    attention_blocked.attend = wrong_groups


def swiglu_swapped() -> None:
    from oracle import forward
    from oracle.forward import Model

    def ffn(self: Model, i: int, x: np.ndarray) -> np.ndarray:
        w = self.weights
        h = forward.rms_norm(x, w.get(f"blk.{i}.ffn_norm.weight"), self.hparams.rms_eps)
        self.trace(f"ffn_norm-{i}", h)
        gate, up = w.matmul(h, f"blk.{i}.ffn_gate.weight"), w.matmul(h, f"blk.{i}.ffn_up.weight")
        out = w.matmul(forward.silu(up) * gate, f"blk.{i}.ffn_down.weight")
        self.trace(f"ffn_out-{i}", out)
        return out

    Model._ffn_block = ffn


def q4_0_interleaved() -> None:
    from gguf import quants
    from gguf.constants import GGMLQuantizationType as T

    dequantize = quants.dequantize

    def wrong(data: np.ndarray, qtype: T) -> np.ndarray:
        out = dequantize(data, qtype)
        if qtype != T.Q4_0:
            return out
        blocks = out.reshape(-1, 2, 16)  # [low nibbles 0..15, high nibbles 16..31] per block
        return blocks.transpose(0, 2, 1).reshape(out.shape)

    quants.dequantize = wrong


def mask_off_by_one() -> None:
    from oracle import attention, attention_blocked

    attention.causal_mask = lambda q_positions, n_keys: np.arange(n_keys)[None, :] <= q_positions[:, None] + 1
    attend = attention_blocked.attend

    def blocks(q: np.ndarray, k: np.ndarray, v: np.ndarray, q_positions: np.ndarray) -> np.ndarray:
        out = np.empty_like(q)  # as the oracle's blocks, each also given the key after its last query
        for start in range(0, q.shape[1], attention_blocked.QUERY_BLOCK):
            block = slice(start, start + attention_blocked.QUERY_BLOCK)
            n_keys = int(q_positions[block][-1]) + 2
            out[:, block] = attend(q[:, block], k[:, :n_keys], v[:, :n_keys], q_positions[block])
        return out

    attention_blocked.attention = blocks


def random_logits() -> None:
    from oracle.forward import Model

    def garbage(self: Model, ids: object, *args: object, **kwargs: object) -> np.ndarray:
        rng = np.random.default_rng(len(ids))  # type: ignore[arg-type]
        return rng.standard_normal((len(ids), self.hparams.n_vocab), dtype=np.float32)  # type: ignore[arg-type]

    Model.prefill = garbage  # type: ignore[method-assign]


PLANTS: dict[str, Callable[[], None]] = {
    f.__name__: f
    for f in (rope_base, qk_norm_missing, rms_eps, bias_missing, gqa_order, swiglu_swapped, q4_0_interleaved,
              mask_off_by_one, rope_interleaved, tied_output, rope_base_500000, logit_noise, random_logits)
}  # fmt: skip


if __name__ == "__main__":
    from impl.process.server import serve
    from impl.registry import resolve

    bugs = sys.argv[1].split(",") if len(sys.argv) == 2 else []
    if not bugs or not set(bugs) <= set(PLANTS):
        print(f"usage: forward_bugs.py {{{'|'.join(PLANTS)}}}[,…]", file=sys.stderr)
        sys.exit(4)
    for bug in bugs:
        PLANTS[bug]()
    sys.exit(serve(resolve("oracle")))
