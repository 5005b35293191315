"""How the forward stages' cases are built from the references (``Stage.build``): one
case per prompt from transformers' float32 answer (``hf``, the exact class's
reference) and llama.cpp's (``llamacpp``, the quantized class's), with their measured
distance. ``logits_case``: the top-k log-probabilities at the recorded positions;
``trace_case``: every point of the forward pass, ``result_output`` kept at the union
of both references' top columns. The references' outputs are arguments: the recorders
(``tests/references/test_logits.py``, ``test_trace.py``) run the references one at a
time, to keep one model's weights in memory."""

from __future__ import annotations

from typing import Any

import numpy as np

from impl.process import wire
from specgate.checks import logit_metrics
from specgate.checks import trace as trace_checks
from specgate.upkeep.corpus import TOP_K, TRACE_TOP_COLUMNS


def three_digits(metrics: dict[str, float]) -> dict[str, float]:
    """Each measured distance at three significant digits (a snapshot's readable size)."""
    return {k: float(f"{v:.3g}") for k, v in metrics.items()}


def logits_case(
    prompt: dict[str, Any], ids: list[int], positions: list[int], ref_hf: np.ndarray, ref_llama: np.ndarray
) -> dict[str, Any]:
    """One logits case: both references' top-``TOP_K`` records at ``positions`` and their distance."""
    between = logit_metrics.compare_full(ref_hf, ref_llama, tie_margin=0.0)
    return {
        "kind": prompt["kind"],
        "ids": ids,
        "positions": positions,
        "hf": logit_metrics.topk_record(ref_hf, positions, TOP_K),
        "llamacpp": logit_metrics.topk_record(ref_llama, positions, TOP_K),
        "llamacpp_vs_hf": three_digits(between.metrics()),
    }


def record_form(values: dict[str, np.ndarray], columns: list[int], dtype: str) -> dict[str, Any]:
    """A reference's trace as stored: each point in ``dtype`` (``result_output`` at
    ``columns`` only), in the wire's array encoding."""
    out = {}
    for point, value in values.items():
        value = value[:, columns] if point == "result_output" else value
        out[point] = wire.encode_value(np.ascontiguousarray(value, dtype=dtype))
    return out


def top_columns(result_output: np.ndarray, n: int = TRACE_TOP_COLUMNS) -> set[int]:
    """The columns of the ``n`` highest logits at any position."""
    return {int(c) for c in np.argsort(-result_output, axis=-1)[:, :n].ravel()}


def trace_case(
    ids: list[int],
    meta: dict[str, int],
    points: list[str],
    ref_hf: dict[str, Any],
    ref_llama: dict[str, Any],
    columns: list[int] | None = None,
) -> dict[str, Any]:
    """One trace case: both references' points (``meta``: ``n_layer``, ``head_dim``),
    transformers' in float32, llama.cpp's in float16, and their relative distance per point.
    ``result_output`` is kept at the union of both references' top columns — or at
    ``columns`` when given: a re-check reads the live references at the recorded case's
    columns, since which column is the N-th highest where two logits nearly tie is a
    matter of last bits (the 0.5B's chat_short: 94 columns recorded, 96 on another run)."""
    if columns is None:
        columns = sorted(top_columns(ref_hf["result_output"]) | top_columns(ref_llama["result_output"]))
    between = {
        p: trace_checks.compare(p, ref_hf[p].astype(np.float64), ref_llama[p], np.inf, 0).rel for p in points
    }
    return {
        "ids": ids,
        "n_layer": meta["n_layer"],
        "head_dim": meta["head_dim"],
        "output_positions": list(range(len(ids))),
        "output_columns": columns,
        "hf": record_form(ref_hf, columns, "float32"),
        # llama.cpp's own rounding is far above float16's (2^-11 relative; the quantized
        # tolerances are ≥ 1e-2): half the bytes, nothing the gate can see.
        "llamacpp": record_form(ref_llama, columns, "float16"),
        "llamacpp_vs_hf": three_digits(between),
    }
