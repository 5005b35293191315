"""The logits stage's catalogue: known deviations applied to the oracle's forward pass.

A deviation is a setting of one *knob* of the forward (``oracle.forward``), each a
classic defect of a hand-written Qwen forward:

* ``rope_pairs="interleaved"``  RoPE rotates adjacent pairs (2i, 2i+1) (GPT-J / the RoPE
                                paper) instead of NeoX halves (i, i + d/2)
* ``rope_base=10000``           RoPE with Llama's base 10 000 instead of the GGUF's rope.freq_base
* ``qk_norm=False``             Qwen3's per-head RMSNorm of queries and keys left out
* ``rms_eps=1e-3``              RMSNorm with epsilon 1e-3 instead of the GGUF's (Llama's 1e-5 for
                                the tiny models' 1e-6 moves their logits by ≤ 1.5e-4, within the
                                exact tolerance: an engine with it passes, nothing to diagnose)
* ``bias=False``                Qwen2's q/k/v projection biases left out
* ``gqa="modulo"``              query head h reads kv head h mod n_head_kv instead of h // group
* ``output="token_embd"``       the output projection is the token embedding although the GGUF
                                has its own output.weight (tied embeddings assumed)
* ``swiglu_swapped=True``       silu(up) * gate instead of silu(gate) * up
* ``mask_ahead=1``              the causal mask is off by one: a query also sees the next key
* ``q4_0="interleaved"``        Q4_0 blocks dequantized with their nibbles interleaved (element 2i
                                from byte i's low nibble, 2i+1 from its high one) instead of the 16
                                low nibbles then the 16 high ones

``DeviatedModel`` is the oracle's ``Model`` built from the oracle's own parts (its
``rms_norm``, ``silu``, ``rope``, blocked attention, KV cache and weights) with the knobs
applied; with no knob it computes what the oracle computes (``tests/diagnose/
test_forward_catalogue.py`` holds it to ``oracle.forward.Model``). The oracle itself is
untouched. Knobs compose: two deviations are one forward with both.

A logits answer is *the same* as another when it meets the case's conformance class
against it, as the gate judges (``specgate.checks.logits``): ``exact`` within the
model's max |Δlogit| tolerance (3e-4 on the tiny models), ``quantized`` by KL and top-1
with near ties excused. A deviation *shows* on a case when the oracle with it would fail
that gate; it *explains* an engine's answer when the engine meets the gate with the
deviated oracle as its reference. Inputs are the gate's own: ``{"ids"}``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gguf import quants
from gguf.constants import GGMLQuantizationType as T

from impl.named_logprobs import NamedLogprobs
from oracle import attention_blocked, rope
from oracle.forward import Model, rms_norm, silu
from oracle.weights import Weights
from specgate.checks import logit_metrics
from specgate.checks import logits as logits_check
from specgate.diagnose.tokenizer import Hypothesis, _h

LOGITS_ROWS = ("logits/exact", "logits/quantized")
MAX_POSITIONS = 16  # positions of a prompt compared (evenly spaced, first and last included)
TOP_K = 64  # the reference's top-k kept per position, as in the snapshots
MAX_MODELS = 4  # deviated forwards of one model kept built (a dequantizing one holds its own weights)
#: answers of one model kept (the two classes' rows ask the same forwards): the first ones
#: asked, never evicted — the rows ask them again in the same order, for which evicting
#: the oldest would evict each just before it is asked again (``oracle.weights``' reason).
#: On the 0.5B an answer is 16 x 151,936 float32 (9.7 MB): a case's deviations, ~10 of them.
MAX_ANSWER_BYTES = 128 << 20


# ---------------------------------------------------------------------------
# the forward with knobs


def apply_rope_interleaved(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """RoPE over adjacent pairs (2i, 2i+1), rotated by the same angles as NeoX's pair i."""
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = odd * cos + even * sin
    return out


def q4_0_interleaved(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 dequantized with the nibbles interleaved: the spec's element j < 16 is byte j's
    low nibble and 16 + j its high one; this reads element 2j from the low, 2j+1 from the high."""
    return blocks.reshape(-1, 2, 16).transpose(0, 2, 1).reshape(blocks.shape)


class DeviatedWeights(Weights):
    """The oracle's weights with a deviated dequantization of one tensor type."""

    def __init__(self, gguf: Any, budget_bytes: int, q4_0: str | None) -> None:
        super().__init__(gguf, budget_bytes)
        self.q4_0 = q4_0

    def _deviate(self, name: str, w: np.ndarray) -> np.ndarray:
        if self.q4_0 == "interleaved" and self.gguf.tensors[name].ggml_type == T.Q4_0:
            return q4_0_interleaved(np.asarray(w, dtype=np.float32))
        return w

    def get(self, name: str) -> np.ndarray:
        if name in self._cache:
            return self._cache[name]
        w = np.ascontiguousarray(self._deviate(name, self.gguf.dequantize(name)), dtype=np.float32)
        if self.cached_bytes + w.nbytes <= self.budget_bytes:
            self._cache[name] = w
            self.cached_bytes += w.nbytes
        return w

    def rows(self, name: str, ids: np.ndarray) -> np.ndarray:
        if name in self._cache or not self.q4_0:
            return super().rows(name, ids)
        info = self.gguf.tensors[name]
        raw = self.gguf.tensor_bytes(name).reshape(info.shape[0], -1)[ids]
        return self._deviate(name, quants.dequantize(raw, T(info.ggml_type)).astype(np.float32))

    def matmul(self, x: np.ndarray, name: str) -> np.ndarray:
        if not self.q4_0:
            return super().matmul(x, name)
        return (self.get(name) @ x.T).T  # no streaming: a deviated row is a whole block's permutation


class DeviatedModel(Model):
    """The oracle's forward with the knobs of a deviation applied (none: the oracle's own)."""

    def __init__(self, gguf: Any, knobs: Mapping[str, Any], weights: Weights | None = None) -> None:
        super().__init__(gguf)
        self.knobs = dict(knobs)
        if weights is not None:  # the plain weights, shared by the deviations that do not dequantize
            self.weights = weights
        hp = self.hparams
        self.hparams = dataclasses.replace(
            hp,
            rope_base=float(knobs.get("rope_base", hp.rope_base)),
            rms_eps=float(knobs.get("rms_eps", hp.rms_eps)),
        )
        if knobs.get("q4_0"):
            self.weights = DeviatedWeights(gguf, self.weights.budget_bytes, knobs["q4_0"])
        if knobs.get("output") == "token_embd":
            self.output_name = "token_embd.weight"

    def logits_at(self, ids: Sequence[int], positions: Sequence[int]) -> np.ndarray:
        """float32 logits [len(positions), n_vocab] of a fresh prompt ``ids`` at ``positions``."""
        self.reset()
        self.keep = np.asarray(positions, dtype=np.int64)
        try:
            return self.prefill(ids)
        finally:
            self.reset()

    def _forward(self, ids: np.ndarray) -> np.ndarray:
        hp, w = self.hparams, self.weights
        positions = np.arange(self.n_past, self.n_past + ids.size)
        cos, sin = rope.rope_angles(positions, hp.head_dim, hp.rope_base)
        x = w.rows("token_embd.weight", ids)
        for i in range(hp.n_layer):
            x += self._attention_block(i, x, positions, cos, sin)
            x += self._ffn_block(i, x)
        self.cache.advance(ids.size)
        x = rms_norm(x[self.keep], w.get("output_norm.weight"), hp.rms_eps)  # only the rows compared
        return w.matmul(x, self.output_name)

    def _linear(self, x: np.ndarray, layer: int, name: str) -> np.ndarray:
        if self.knobs.get("bias", True):
            return super()._linear(x, layer, name)
        return self.weights.matmul(x, f"blk.{layer}.{name}.weight")

    def _qk_norm(self, layer: int, q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return super()._qk_norm(layer, q, k) if self.knobs.get("qk_norm", True) else (q, k)

    def _attention_block(
        self, i: int, x: np.ndarray, positions: np.ndarray, cos: np.ndarray, sin: np.ndarray
    ) -> np.ndarray:
        hp = self.hparams
        h = rms_norm(x, self.weights.get(f"blk.{i}.attn_norm.weight"), hp.rms_eps)
        q = self._heads(self._linear(h, i, "attn_q"), hp.n_head)
        k = self._heads(self._linear(h, i, "attn_k"), hp.n_head_kv)
        v = self._heads(self._linear(h, i, "attn_v"), hp.n_head_kv)
        q, k = self._qk_norm(i, q, k)
        turn = apply_rope_interleaved if self.knobs.get("rope_pairs") == "interleaved" else rope.apply_rope
        q, k = turn(q, cos, sin), turn(k, cos, sin)
        keys, values = self.cache.append(i, k, v)
        out = self._attend(q, keys, values, positions)
        out = out.transpose(1, 0, 2).reshape(x.shape[0], hp.n_head * hp.head_dim)
        return self.weights.matmul(out, f"blk.{i}.attn_output.weight")

    def _attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, positions: np.ndarray) -> np.ndarray:
        ahead = int(self.knobs.get("mask_ahead", 0))
        if ahead:  # the definition's attention with the mask moved: a query sees `ahead` later keys
            n_keys = k.shape[1]
            group = q.shape[0] // k.shape[0]
            k, v = self._kv_for_heads(k, group), self._kv_for_heads(v, group)
            scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]).astype(q.dtype)
            allowed = np.arange(n_keys)[None, :] <= positions[:, None] + ahead
            scores = scores + np.where(allowed, 0, -np.inf).astype(q.dtype)
            scores -= scores.max(axis=-1, keepdims=True)
            p = np.exp(scores)
            return (p / p.sum(axis=-1, keepdims=True)) @ v
        if self.knobs.get("gqa") == "modulo":  # head h reads kv head h mod n_kv: regroup, attend, restore
            n_kv = k.shape[0]
            order = np.argsort(np.arange(q.shape[0]) % n_kv, kind="stable")
            out = np.empty_like(q)
            out[order] = attention_blocked.attention(q[order], k, v, positions)
            return out
        return attention_blocked.attention(q, k, v, positions)

    def _kv_for_heads(self, kv: np.ndarray, group: int) -> np.ndarray:
        if self.knobs.get("gqa") == "modulo":
            return np.tile(kv, (group, 1, 1))
        return np.repeat(kv, group, axis=0)

    def _ffn_block(self, i: int, x: np.ndarray) -> np.ndarray:
        if not self.knobs.get("swiglu_swapped"):
            return super()._ffn_block(i, x)
        w = self.weights
        h = rms_norm(x, w.get(f"blk.{i}.ffn_norm.weight"), self.hparams.rms_eps)
        gate, up = w.matmul(h, f"blk.{i}.ffn_gate.weight"), w.matmul(h, f"blk.{i}.ffn_up.weight")
        return w.matmul(silu(up) * gate, f"blk.{i}.ffn_down.weight")


# ---------------------------------------------------------------------------
# answers and their comparison


@dataclass
class Answer:
    """Logits at the compared positions of one prompt: an array [P, n_vocab], or the
    named log-probabilities of an engine that names only its top candidates."""

    model_id: str
    ids: list[int]
    rows: np.ndarray | NamedLogprobs
    _record: dict[str, Any] | None = None

    @property
    def record(self) -> dict[str, Any]:
        """The answer as a reference: its top-k per position (``logit_metrics.topk_record``)."""
        if self._record is None:
            assert isinstance(self.rows, np.ndarray)
            self._record = topk_record(self.rows, TOP_K)
        return self._record


def topk_record(rows: np.ndarray, k: int) -> dict[str, Any]:
    """``logit_metrics.topk_record`` of every row, its top-k found by a partial sort (the
    full sort of 152k logits per row took most of a diagnosis' time)."""
    logp, lse = logit_metrics.log_softmax(rows)
    part = np.argpartition(-logp, k, axis=-1)[:, :k]
    # the gate's order: by log-probability, then by id (a stable sort of -logp)
    top = np.array([row[np.lexsort((row, -lp[row]))] for row, lp in zip(part, logp, strict=True)])
    values = np.take_along_axis(logp, top, axis=-1)
    digits = logit_metrics.SIGNIFICANT_DIGITS
    return {
        "top_ids": [" ".join(map(str, row)) for row in top.tolist()],
        "top_logprobs": [" ".join(f"{v:.{digits}g}" for v in row) for row in values],
        "lse": [float(f"{v:.{digits}g}") for v in lse],
    }


def positions_of(ids: Sequence[int]) -> list[int]:
    return logit_metrics.record_positions(len(ids), MAX_POSITIONS)


def compare(stage: str, reference: Answer, got: Answer) -> tuple[str | None, logit_metrics.Comparison]:
    """The class's verdict on ``got`` with ``reference`` as the reference: (why it fails or
    None, the measured comparison)."""
    n = len(reference.record["lse"])
    case = {"ids": got.ids, "positions": list(range(n)), "hf": reference.record, "llamacpp": reference.record}
    return logits_check.check(stage.partition("/")[2], reference.model_id, case, got.rows)


def same(stage: str, reference: Any, got: Any) -> bool:
    """Whether ``got`` meets the conformance class of ``stage`` against ``reference``."""
    return compare(stage, reference, got)[0] is None


def measured(stage: str, pairs: Sequence[tuple[Any, Any, Any]]) -> str:
    """What the evidence says was measured over (deviated, engine, spec'd oracle) answers."""
    conformance_class = stage.partition("/")[2]
    to_deviated = [compare(stage, deviated, got)[1] for deviated, got, _ in pairs]
    to_spec = [compare(stage, spec, got)[1] for _, got, spec in pairs]
    return class_measured(conformance_class, pairs[0][0].model_id, to_deviated, to_spec)


def class_measured(conformance_class: str, model_id: str, to_deviated: list, to_spec: list) -> str:
    """ "within the <class>'s tolerance …: measured …, against the spec'd oracle …": the
    engine's distance to the deviated oracle beside its distance to the spec'd one, from the
    logits comparisons ``to_deviated`` and ``to_spec`` (forward and state diagnoses alike)."""
    if conformance_class == "exact":
        tol = logits_check.exact_tolerance(model_id)
        return (
            f"within the exact class's tolerance (max |Δlogit| ≤ {tol:g}): measured max |Δlogit| "
            f"{max(c.max_abs_dlogit for c in to_deviated):.3g}, against the spec'd oracle "
            f"{max(c.max_abs_dlogit for c in to_spec):.3g}"
        )
    return (
        f"within the quantized class's bounds (mean KL ≤ {logits_check.QUANTIZED_KL_MEAN:g}, top-1 ≥ "
        f"{logits_check.QUANTIZED_TOP1:g}): measured worst mean KL {max(c.kl_mean for c in to_deviated):.3g}, "
        f"top-1 {min(c.top1_agree_ties_excused for c in to_deviated):.3f}; against the spec'd oracle "
        f"mean KL {max(c.kl_mean for c in to_spec):.3g}"
    )


# ---------------------------------------------------------------------------
# the catalogue module's interface (``specgate.diagnose.diagnoser``)


@dataclass
class ModelForward:
    """One model's deviated forwards (a few kept built), and what the knobs can apply to."""

    model_id: str
    gguf: Any
    architecture: str
    has_bias: bool
    tied: bool
    n_head: int
    n_head_kv: int
    rope_base: float
    rms_eps: float
    has_q4_0: bool
    weights: Weights
    _built: dict[tuple[tuple[str, Any], ...], DeviatedModel] = field(default_factory=dict)
    _answers: dict[tuple[Any, ...], Answer] = field(default_factory=dict)
    _answer_bytes: int = 0

    def answer(self, ids: list[int], knobs: Mapping[str, Any]) -> Answer:
        key = (tuple(ids), tuple(sorted(knobs.items())))
        if key in self._answers:
            return self._answers[key]
        found = Answer(self.model_id, ids, self.model(knobs).logits_at(ids, positions_of(ids)))
        if self._answer_bytes + found.rows.nbytes <= MAX_ANSWER_BYTES:
            self._answers[key] = found
            self._answer_bytes += found.rows.nbytes
        return found

    def model(self, knobs: Mapping[str, Any]) -> DeviatedModel:
        key = tuple(sorted(knobs.items()))
        if key not in self._built:
            if len(self._built) >= MAX_MODELS:
                self._built.pop(next(iter(self._built)))
            shared = None if knobs.get("q4_0") else self.weights
            self._built[key] = DeviatedModel(self.gguf, knobs, shared)
        return self._built[key]


def reference(model: Any) -> ModelForward:
    """The model's deviated forwards, on the weights of the oracle's own loaded forward
    (``impl.oracle.loaded_forward_model``): the shrinking that follows and the oracle
    engine read the same float32 copy."""
    from impl.oracle import loaded_forward_model

    plain = loaded_forward_model(model.gguf)
    gguf = plain.weights.gguf
    hp = plain.hparams
    return ModelForward(
        model.id, gguf, plain.architecture, "blk.0.attn_q.bias" in plain.weights, hp.tied_embeddings,
        hp.n_head, hp.n_head_kv, hp.rope_base, hp.rms_eps,
        any(info.ggml_type == T.Q4_0 for info in gguf.tensors.values()), plain.weights,
    )  # fmt: skip


def answer(stage: str, m: ModelForward, inp: Mapping[str, Any], knobs: Mapping[str, Any]) -> Answer:
    return m.answer(list(inp["ids"]), knobs)


def applies(stage: str, m: ModelForward, inp: Mapping[str, Any], knobs: Mapping[str, Any]) -> bool:
    """Whether the deviation exists for this model: QK-norm on Qwen3, biases on Qwen2, a
    GQA mapping with more than one kv head shared by several query heads, an output tensor
    of its own, Q4_0 tensors, an epsilon or base other than the model's."""
    return not (
        (knobs.get("qk_norm") is False and m.architecture != "qwen3")
        or (knobs.get("bias") is False and not m.has_bias)
        or (knobs.get("gqa") and not 1 < m.n_head_kv < m.n_head)
        or (knobs.get("output") and m.tied)
        or (knobs.get("q4_0") and not m.has_q4_0)
        or ("rms_eps" in knobs and knobs["rms_eps"] == m.rms_eps)
        or ("rope_base" in knobs and knobs["rope_base"] == m.rope_base)
    )


def ask(engine: Any, stage: str, model: Any, inp: Mapping[str, Any]) -> Answer:
    """The engine's logits for ``inp`` at the compared positions (an exception where it refuses)."""
    from specgate.outcomes.gate import call, not_applicable

    if stage.partition("/")[2] not in engine.classes:
        not_applicable(f"{engine.name} does not claim the {stage.partition('/')[2]!r} class")
    ids, at = list(inp["ids"]), positions_of(inp["ids"])
    got = logits_check.answer(call(engine, "logits", model, ids, positions=at))
    failure = logits_check.well_formed({"ids": ids, "positions": at}, got)
    if failure:
        raise ValueError(failure)
    rows = logits_check.asked_rows({"positions": at}, got)
    return Answer(model.id, ids, rows if isinstance(rows, NamedLogprobs) else np.ascontiguousarray(rows))


CATALOGUE: tuple[Hypothesis, ...] = tuple(
    h
    for stage in LOGITS_ROWS
    for h in (
        *_h("rope_interleaved", stage,
            "rotates RoPE pairs (2i, 2i+1) (GPT-J style) where Qwen rotates NeoX halves (i, i + d/2)",
            rope_pairs="interleaved"),
        *_h("rope_base_10000", stage,
            "uses RoPE base 10000 (Llama's) instead of the GGUF's rope.freq_base", rope_base=10_000.0),
        *_h("qk_norm_missing", stage,
            "leaves out Qwen3's per-head RMSNorm of queries and keys (attn_q_norm / attn_k_norm)", qk_norm=False),
        *_h("rms_eps_1e-3", stage,
            "uses RMSNorm epsilon 1e-3 instead of the GGUF's layer_norm_rms_epsilon", rms_eps=1e-3),
        *_h("bias_missing", stage, "leaves out Qwen2's q/k/v projection biases", bias=False),
        *_h("gqa_modulo", stage,
            "maps query head h to kv head h mod n_head_kv; GQA shares kv head h // (n_head / n_head_kv)",
            gqa="modulo"),
        *_h("tied_output", stage,
            "projects to the vocabulary with token_embd (tied embeddings) although the GGUF has its own output.weight",
            output="token_embd"),
        *_h("swiglu_swapped", stage,
            "swaps SwiGLU's halves: silu(up) * gate instead of silu(gate) * up", swiglu_swapped=True),
        *_h("mask_off_by_one", stage,
            "has its causal mask off by one position: a query also attends to the next key", mask_ahead=1),
        *_h("q4_0_interleaved", stage,
            "dequantizes Q4_0 with the nibbles interleaved (element 2i from byte i's low nibble, 2i+1 from "
            "its high one) instead of the 16 low nibbles then the 16 high ones", q4_0="interleaved"),
    )
)  # fmt: skip
