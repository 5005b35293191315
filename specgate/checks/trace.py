"""Trace: the first point of the forward pass where an engine parts from the reference.

The engine answers named intermediates (``oracle.trace``: llama.cpp's graph tensor
names) of one forward pass over a prompt; the reference's are in the snapshot. The
walk localizes by bisection, a few engine requests whatever the depth:

1. ``inp_embd``, ``l_out`` at a few probe layers (a quarter, half, three quarters and
   the last) and ``result_norm``: the first probe that departs bounds the layer;
2. ``l_out`` of every layer between the last matching probe and it: the first
   departing layer L;
3. the points of layer L in the order the forward computes them: the first that
   departs is the verdict (its siblings that depart too are named).

When every probe matches, ``result_output`` (the logits) is asked at the recorded
positions only (a 512-token prompt's logits are 311 MB; the logits gate judges them all).

A point is compared per position by its relative error ‖Δ‖ / ‖ref‖ (L2 over the
point's columns), so one tolerance serves the 0.5B model's residual stream (values
in the thousands) and a tiny model's (values near 1). Tolerances are per conformance
class and point kind, measured (``EXACT_REL``, ``QUANTIZED_REL`` below).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from oracle.trace import HEADED, LAYER_POINTS, split_point
from specgate.checks.logit_metrics import all_finite

# exact: an f32 engine against transformers' float32 forward on the same dequantized
# weights. Measured, the oracle against the trace snapshots (every point of every layer):
# worst 3.0e-5 on qwen2.5-coder-0.5b (kqv_out-0; 7e-6 elsewhere), 1.5e-6 on the 27 tiny
# models (ffn_out-2 of tiny-qwen3-f32). ≈ 3x the worst, one value for every point.
EXACT_REL = 1e-4
# quantized: against llama.cpp's own intermediates (cb_eval). llama.cpp quantizes the
# activations of quantized matmuls to Q8 blocks and keeps the KV cache in f16, so its
# intermediates differ from float32 math by more. Measured, llama.cpp against
# transformers (the snapshots' "llamacpp_vs_hf"), worst per kind over every layer of the
# 0.5B model and the 27 tiny ones; tolerance ≈ 2x that. Per layer: the 0.5B's l_out stays
# at 0.017-0.025 over its 24 layers (its residual's large components dominate); the tiny
# models' grows by ~0.005 per layer (tiny-qwen3-q4_k 0.014, 0.021, 0.023) — at most 0.024
# at their last layer, within the same bound.
QUANTIZED_REL: dict[str, float] = {
    "inp_embd": 1e-3,  # 0 (llama.cpp's get_rows dequantizes exactly); the f16 record rounds by ≤ 3e-4
    "attn_norm": 0.06,  # 0.029 (0.5B, layer 20)
    "Qcur": 0.06,  # 0.027 (0.5B, layer 4)
    "Kcur": 0.2,  # 0.096 (0.5B, layer 21)
    "Vcur": 0.4,  # 0.196 (0.5B, layer 16)
    "kqv_out": 0.4,  # 0.196 (0.5B, layer 16: the f16 V cache and Vcur's own difference)
    "ffn_inp": 0.05,  # 0.023 (0.5B, layer 1)
    "ffn_norm": 0.06,  # 0.031 (0.5B, layer 22)
    "ffn_out": 0.12,  # 0.057 (0.5B, layer 23)
    "l_out": 0.05,  # 0.025 (0.5B, layer 0)
    "result_norm": 0.07,  # 0.035 (0.5B)
    "result_output": 0.06,  # 0.026 (0.5B), at the union of both references' top-16 columns
}

CLASSES: dict[str, str] = {"exact": "transformers", "quantized": "llama.cpp"}
RECORD: dict[str, str] = {"exact": "hf", "quantized": "llamacpp"}


def tolerance(conformance_class: str, point: str) -> float:
    kind, _ = split_point(point)
    return EXACT_REL if conformance_class == "exact" else QUANTIZED_REL[kind]


@dataclass
class PointDiff:
    """One point compared: its worst per-position relative error and where Δ sits."""

    point: str
    rel: float  # max over positions of ‖Δ_t‖ / ‖ref_t‖
    tol: float
    max_abs: float
    positions: list[int] = field(default_factory=list)  # positions over the tolerance
    heads: list[int] = field(default_factory=list)  # heads carrying ≥ 10% of the largest |Δ| there
    dims: list[int] = field(default_factory=list)  # dims (within a head, for headed points) likewise
    shape_problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.shape_problem is None and self.rel <= self.tol

    def describe(self, layer: str = "") -> str:
        """``Kcur-0 (layer 0), positions 1–7, heads 0–1, dims 0–15; relative error 0.83 vs tol 1e-4 (max |Δ| 2.1)``."""
        if self.shape_problem:
            return f"{self.point}{layer}: {self.shape_problem}"
        where = [f"positions {ranges(self.positions)}"]
        if self.heads:
            where.append(f"heads {ranges(self.heads)}")
        if self.dims:
            where.append(f"dims {ranges(self.dims)}")
        return (
            f"{self.point}{layer}, {', '.join(where)}; relative error {self.rel:.3g} vs tol {self.tol:g} "
            f"(max |Δ| {self.max_abs:.3g})"
        )


def ranges(values: Sequence[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``"0–2, 5, 7–8"``."""
    out: list[str] = []
    for v in sorted(values):
        if out and int(out[-1].rsplit("–", 1)[-1]) == v - 1:
            out[-1] = f"{out[-1].split('–')[0]}–{v}"
        else:
            out.append(str(v))
    return ", ".join(out[:8]) + (" …" if len(out) > 8 else "")


def compare(point: str, ref: np.ndarray, got: Any, tol: float, head_dim: int) -> PointDiff:
    """``got`` against ``ref`` ([positions, columns]) by per-position relative L2 error."""
    got = np.asarray(got, dtype=np.float32)
    if got.shape != ref.shape:
        return PointDiff(point, np.inf, tol, np.inf,
                         shape_problem=f"shape {list(got.shape)}, reference {list(ref.shape)}")  # fmt: skip
    if not all_finite(got):
        bad = np.flatnonzero(~np.isfinite(got).all(-1)).tolist()
        return PointDiff(point, np.inf, tol, np.inf, positions=bad,
                         shape_problem=f"non-finite values at positions {ranges(bad)}")  # fmt: skip
    delta = got.astype(np.float64) - ref
    norms = np.linalg.norm(ref, axis=-1)
    floor = max(
        float(norms.max()) * 1e-6, 1e-30
    )  # a zero row (none in practice) is judged against the others
    rel_t = np.linalg.norm(delta, axis=-1) / np.maximum(norms, floor)
    diff = PointDiff(point, float(rel_t.max(initial=0.0)), tol, float(np.abs(delta).max(initial=0.0)))
    if diff.ok:
        return diff
    diff.positions = np.flatnonzero(rel_t > tol).tolist()
    bad = np.abs(delta[diff.positions])  # [P, columns]
    kind, _ = split_point(point)
    if kind in HEADED and head_dim and bad.shape[-1] % head_dim == 0:
        per = bad.reshape(bad.shape[0], -1, head_dim)
        diff.heads = np.flatnonzero(per.max(axis=(0, 2)) >= 0.1 * diff.max_abs).tolist()
        diff.dims = np.flatnonzero(per[:, diff.heads].max(axis=(0, 1)) >= 0.1 * diff.max_abs).tolist()
    else:
        diff.dims = np.flatnonzero(bad.max(axis=0) >= 0.1 * diff.max_abs).tolist()
    return diff


# What usually breaks at a point, when it is the first to depart (informative).
SUSPECTS: dict[str, str] = {
    "inp_embd": "the embedding lookup or the dequantization of token_embd",
    "attn_norm": "RMSNorm (epsilon, weight) or the dequantization of attn_norm",
    "Qcur": "the q projection, its bias (qwen2), the QK-norm (qwen3) or RoPE (pairing, base, positions)",
    "Kcur": "the k projection, its bias (qwen2), the QK-norm (qwen3) or RoPE (pairing, base, positions)",
    "Vcur": "the v projection or its bias (qwen2)",
    "kqv_out": "attention: the causal mask, the 1/√d scale, the softmax or the GQA head mapping",
    "ffn_inp": "the output projection (attn_output) or the residual add",
    "ffn_norm": "RMSNorm (epsilon, weight) of ffn_norm",
    "ffn_out": "the SwiGLU block: silu on the gate (not the up) projection, or the down projection",
    "l_out": "the residual add after the feed-forward block",
    "result_norm": "the output RMSNorm",
    "result_output": "the output projection (output.weight, or token_embd when tied)",
}


def suspect(diff: PointDiff) -> str:
    kind, _ = split_point(diff.point)
    hint = SUSPECTS[kind]
    if kind in ("Qcur", "Kcur") and diff.positions and diff.positions[0] > 0:
        hint = "RoPE: position 0 (no rotation) matches — the pairing, the base or the positions; " + hint
    return hint


@dataclass
class Verdict:
    diverged: PointDiff | None  # None: every point asked matched
    layer: int | None
    matched: list[str]
    also: list[PointDiff]  # other points of the verdict's layer that depart too
    requests: int
    skipped: list[str]  # kinds the engine does not offer

    def malformed(self) -> str | None:
        """One line when the first departing point is not a divergence but a malformed
        answer (wrong shape, NaN or Infinity): outcome ``error`` (PROTOCOL.md section 8),
        still located by the walk."""
        d = self.diverged
        if d is None or d.shape_problem is None:
            return None
        layer = f" (layer {self.layer})" if self.layer is not None else ""
        matched = ", ".join(self.matched) or "nothing"
        return f"trace answer field points.{d.describe(layer)}; first such point, after {matched} matched"

    def message(self) -> str:
        if self.diverged is None:
            return f"every point matches ({', '.join(self.matched)}; {self.requests} requests)"
        d = self.diverged
        layer = f" (layer {self.layer})" if self.layer is not None else ""
        lines = [
            f"first divergence at {d.describe(layer)}",
            f"matching before it: {', '.join(self.matched) or 'nothing was compared before it'}",
        ]
        if self.also:
            lines.append("also departing in this layer: " + "; ".join(
                f"{a.point} ({a.rel:.3g})" for a in self.also))  # fmt: skip
        if self.skipped:
            lines.append(f"not offered by the engine (skipped): {', '.join(self.skipped)}")
        if d.shape_problem is None:
            lines.append(f"look at: {suspect(d)}")
        lines.append(f"({self.requests} trace requests)")
        return "\n  ".join(lines)


#: Rows of ``result_output`` asked at most: a 512-token prompt's logits are 311 MB of
#: float32 (415 MB on the wire); 16 rows are 9.7 MB. The logits gate judges every row.
OUTPUT_ROWS = 16


def spread(n: int, limit: int) -> list[int]:
    """``limit`` of ``range(n)`` evenly spaced, first and last included (all when n ≤ limit)."""
    if n <= limit:
        return list(range(n))
    return sorted({round(i * (n - 1) / (limit - 1)) for i in range(limit)})


def probes(n_layer: int) -> list[int]:
    """The layers whose ``l_out`` the first request asks: a quarter, half, three quarters, last."""
    return sorted({max(0, -(-n_layer * q // 4) - 1) for q in (1, 2, 3, 4)})


Fetch = Callable[[list[str], "list[int] | None"], dict[str, Any]]


def walk(
    fetch: Fetch,
    reference: dict[str, np.ndarray],
    n_layer: int,
    head_dim: int,
    conformance_class: str,
    offered: frozenset[str],
    output_positions: list[int] | None = None,
    output_columns: list[int] | None = None,
) -> Verdict:
    """Localize the first departing point. ``fetch(points, positions)`` is one engine
    request; ``reference`` holds every point (``result_output`` at ``output_positions``
    — default: every position — and ``output_columns`` only). ``result_output`` is asked
    at ``OUTPUT_ROWS`` of those positions at most."""
    n_rows = len(reference["result_output"]) if "result_output" in reference else 0
    output_positions = list(range(n_rows)) if output_positions is None else list(output_positions)
    rows = spread(len(output_positions), OUTPUT_ROWS)
    if "result_output" in reference:
        reference = {**reference, "result_output": reference["result_output"][rows]}
    skipped = sorted({split_point(p)[0] for p in reference} - offered)
    requests = 0
    matched: list[str] = []

    def ask(points: list[str], positions: list[int] | None = None) -> list[PointDiff]:
        nonlocal requests
        points = [p for p in points if split_point(p)[0] in offered and p in reference]
        if not points:
            return []
        requests += 1
        got = fetch(points, positions)
        out = []
        for p in points:
            value = np.asarray(got[p], dtype=np.float32)
            if p == "result_output" and output_columns is not None and value.ndim == 2:
                value = value[:, output_columns] if value.shape[-1] > max(output_columns) else value
            out.append(compare(p, reference[p], value, tolerance(conformance_class, p), head_dim))
        return out

    def verdict(
        diff: PointDiff | None, layer: int | None = None, also: list[PointDiff] | None = None
    ) -> Verdict:
        return Verdict(diff, layer, matched, also or [], requests, skipped)

    first = ask(["inp_embd", *(f"l_out-{i}" for i in probes(n_layer)), "result_norm"])
    for d in first:
        if not d.ok:
            break
        matched.append(d.point)
    else:
        last = ask(["result_output"], [output_positions[r] for r in rows])
        bad = [d for d in last if not d.ok]
        matched.extend(d.point for d in last if d.ok)
        return verdict(bad[0] if bad else None)
    if d.point in ("inp_embd", "result_norm"):
        return verdict(d)
    hi = split_point(d.point)[1]
    assert hi is not None
    lo = max([i + 1 for i in probes(n_layer) if i < hi], default=0)
    layer, layer_out = hi, d
    for between in ask([f"l_out-{i}" for i in range(lo, hi)]):
        if not between.ok:
            layer, layer_out = split_point(between.point)[1] or 0, between
            break
        matched.append(between.point)
    inside = ask([f"{kind}-{layer}" for kind in LAYER_POINTS if kind != "l_out"])
    departing = [x for x in inside if not x.ok]
    for x in inside:
        if not x.ok:
            break
        matched.append(x.point)
    if not departing:
        return verdict(layer_out, layer)
    return verdict(departing[0], layer, departing[1:])


def reference_arrays(case: dict[str, Any], conformance_class: str) -> dict[str, np.ndarray]:
    """The snapshot case's reference points for a class, as float64 arrays."""
    from impl.process import wire

    record = case[RECORD[conformance_class]]
    return {p: np.asarray(wire.decode_value(v), dtype=np.float64) for p, v in record.items()}


def trace_drift(stored: dict[str, Any], live: dict[str, Any]) -> str | None:
    """The live references against the stored ones, each by its class's tolerances: a
    snapshot recorded on one CPU meets other last bits on another (transformers: float32
    rounding, far under 1e-4; llama.cpp: its kernels per CPU, under its class's bounds)."""
    if stored["ids"] != live["ids"]:
        return f"prompt ids differ: snapshot {stored['ids']}, live {live['ids']}"
    problems = []
    for conformance_class in ("exact", "quantized"):
        ref = reference_arrays(stored, conformance_class)
        got = reference_arrays(live, conformance_class)
        for point, value in ref.items():
            diff = compare(point, value, got[point], tolerance(conformance_class, point),
                                  stored["head_dim"])  # fmt: skip
            if not diff.ok:
                problems.append(f"{CLASSES[conformance_class]}: {diff.describe()}")
                break
    return "; ".join(problems) or None
