"""The state stages' independent references, recorded beside the oracle's.

The state snapshots' ``reference`` is the oracle's own one-shot prefill. Beside it, at every
judged point (an incremental case's last position; every turn of a conversation) the
point carries ``references``, per library:

* ``hf`` — transformers (float32, eager attention, on the GGUF's dequantized weights:
  the logits snapshot's ``exact`` reference), its own KV cache a ``DynamicCache``;
* ``llamacpp`` — llama.cpp on the same GGUF through llama-cpp-python in process (the
  ``quantized`` reference), its own KV cache.

and per library, in the snapshots' top-k form (``state_cases.reference_record``):

* ``played`` — the last position's logits after the case was played on the library's
  KV cache: the chunks appended one after the other (``state_incremental``), or per turn
  the cache cut back to ``keep`` tokens and the rest of the render fed on top of it
  (``state_conversation``) — what an engine's session is asked to do;
* ``one_shot`` — the library's one-shot prefill of the point's ids;
* ``played_vs_one_shot`` and ``oracle_vs_one_shot`` — measured on the full rows when
  recorded (``logit_metrics.compare_full``, every token of the vocabulary): the
  library's own incremental-vs-full noise, and the oracle's distance to the library.

``agreement`` reads the snapshots only: it holds the oracle's recorded reference to both
records of each library by that library's class of the logits stage (``hf`` ↔ ``exact``,
``llamacpp`` ↔ ``quantized``: ``specgate.checks.state.judge_record``), the played record to
the one-shot one too, and gathers the measured values (``python -m
specgate.stages.state_references`` prints them as README's table). Recorded by
``python -m specgate.stages.state_cases MODEL`` with the oracle's reference (``add``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from specgate.checks import logit_metrics, logits, state
from specgate.upkeep import corpus, snapshots

#: Each reference library, the logits class it is the reference of, and what it is.
LIBRARIES = {
    "hf": ("exact", "transformers"),
    "llamacpp": ("quantized", "llama.cpp"),
}
#: The state snapshots: the stage, and its judged points' steps.
SNAPSHOTS = ("state_incremental", "state_conversation")
#: What each library's record was played with, for the provenance.
PLAYED = {
    "hf": (
        "transformers float32 forward (eager attention) on the GGUF's weights dequantized by gguf-py, "
        "loaded as the logits snapshot's; played: the case's chunks fed one after the other on one "
        "DynamicCache (the forward's cache argument), or per turn the cache cropped to keep tokens "
        "(DynamicCache.crop) and the rest of the render fed; one_shot: the point's ids from an empty cache"
    ),
    "llamacpp": (
        "llama.cpp through llama-cpp-python in process (the suite's reference context: every position's "
        "logits kept, SPECGATE_LLAMA_THREADS threads); played: the case's chunks each one Llama.eval on "
        "one context, or per turn the KV from keep on removed (llama_memory_seq_rm through the context's "
        "kv_cache_seq_rm) and the rest of the render evaluated; one_shot: Llama.reset then one eval"
    ),
}
PACKAGES = ("transformers", "torch", "llama-cpp-python")

Step = tuple[int, list[int]]  # (tokens the cache keeps, ids fed on top)


def steps(stage: str, case: Mapping[str, Any]) -> list[Step]:
    """What a case plays: per chunk (its start, its ids) or per turn (``keep``, the rest)."""
    if stage == "state_incremental":
        out, at = [], 0
        for size in case["chunks"]:
            out.append((at, list(case["ids"][at : at + size])))
            at += size
        return out
    return [(t["keep"], list(t["ids"][t["keep"] :])) for t in case["turns"]]


def points(stage: str, case: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The judged points of a case, each with its ``ids`` and ``reference``: the case itself
    (an incremental case's last position), or each turn; the played rows answer the last
    step (incremental) or every step (conversation)."""
    return [case] if stage == "state_incremental" else list(case["turns"])


def _played_rows(stage: str, rows: list[np.ndarray]) -> list[np.ndarray]:
    return rows[-1:] if stage == "state_incremental" else rows


def _measure(reference: np.ndarray, got: np.ndarray) -> dict[str, float]:
    cmp = logit_metrics.compare_full(reference[None], got[None], tie_margin=0.0)
    return {"kl": float(f"{cmp.kl_mean:.3g}"), "max_abs_dlogit": float(f"{cmp.max_abs_dlogit:.3g}")}


def add(
    model: Any,
    built: Mapping[str, Mapping[str, Any]],
    oracle_row: Callable[[Sequence[int]], np.ndarray],
    engines: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Record each library's ``references`` into every judged point of ``built`` (stage ->
    cases, as ``state_cases.record`` builds them), one library's weights at a time;
    ``oracle_row(ids)`` is the oracle's one-shot row the point's ``reference`` records.
    The provenance's descriptions, per library."""
    if engines is None:
        from impl.hf.engine import HFEngine
        from impl.llamacpp.engine import LlamaCppEngine

        engines = {"hf": HFEngine(), "llamacpp": LlamaCppEngine()}
    for name, engine in engines.items():
        one_shots: dict[tuple[int, ...], np.ndarray] = {}

        def one_shot(ids: Sequence[int], engine: Any = engine, memo: dict = one_shots) -> np.ndarray:
            key = tuple(ids)
            if key not in memo:
                memo[key] = np.asarray(engine.logits(model, list(ids))[-1], dtype=np.float32)
            return memo[key]

        for stage, cases in built.items():
            for case in cases.values():
                rows = engine.played_logits(model, steps(stage, case))
                for point, row in zip(points(stage, case), _played_rows(stage, rows), strict=True):
                    row = np.asarray(row, dtype=np.float32)
                    full = one_shot(point["ids"])
                    point.setdefault("references", {})[name] = {
                        "played": state_record(row),
                        "one_shot": state_record(full),
                        "played_vs_one_shot": _measure(full, row),
                        "oracle_vs_one_shot": _measure(full, oracle_row(point["ids"])),
                    }
        engine.release_forward(model)
    return {name: PLAYED[name] for name in engines}


def state_record(row: np.ndarray) -> dict[str, Any]:
    """One row in the snapshots' top-k form (as ``state_cases.reference_record``)."""
    return logit_metrics.topk_record(np.asarray(row, dtype=np.float32)[None], [0], corpus.TOP_K)


# ---------------------------------------------------------------------------
# the snapshots' agreement (reads nothing but the snapshots)

#: The judgements made per library at each point: (what is judged, the reference record's
#: key, the answer record: the oracle's ``reference`` or the library's ``played``).
JUDGED = (
    ("oracle vs played", "played", "reference"),
    ("oracle vs one-shot", "one_shot", "reference"),
    ("played vs one-shot", "one_shot", "played"),
)


def judgements(
    model_id: str, stage: str, cases: Mapping[str, Any]
) -> Iterator[tuple[str, str, str, str | None, Any]]:
    """Per point and library, each of ``JUDGED``: (where, library, what, failure, comparison)."""
    for case_id, case in cases.items():
        for number, point in enumerate(points(stage, case), 1):
            where = case_id if stage == "state_incremental" else f"{case_id} turn {number}"
            refs = point.get("references") or {}
            for name, (conformance_class, _) in LIBRARIES.items():
                if name not in refs:
                    yield where, name, "recorded", f"no {name} reference recorded", None
                    continue
                for what, ref_key, answer_key in JUDGED:
                    answer = point["reference"] if answer_key == "reference" else refs[name][answer_key]
                    failure, cmp = state.judge_record(
                        conformance_class, model_id, point["ids"], refs[name][ref_key], answer
                    )
                    yield where, name, what, failure, cmp


def agreement(model_id: str, snapshots_of: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Over a model's state snapshots (stage -> cases): every failure of ``judgements``
    (``failures``: "stage/where, library, what: why"), and per library the worst
    values — of each judgement by the class's check on the records (``max |Δ|`` in
    log-probabilities over the reference's top-k, mean KL a lower bound), and of the full
    rows measured when recorded (``played_vs_one_shot``, ``oracle_vs_one_shot``)."""
    failures: list[str] = []
    worst: dict[str, dict[str, dict[str, float]]] = {name: {} for name in LIBRARIES}

    def keep(name: str, what: str, values: Mapping[str, float]) -> None:
        slot = worst[name].setdefault(what, {})
        for key, value in values.items():
            slot[key] = max(slot.get(key, 0.0), float(value))

    points_seen = 0
    for stage, cases in snapshots_of.items():
        for where, name, what, failure, cmp in judgements(model_id, stage, cases):
            if failure is not None:
                failures.append(f"{stage}/{where}, {name}, {what}: {failure}")
            if cmp is not None:
                keep(name, f"{what} (check)", {"kl": cmp.kl_mean, "max_abs_dlogit": cmp.max_abs_dlogit})
        for case in cases.values():
            for point in points(stage, case):
                points_seen += 1
                for name, measured in (point.get("references") or {}).items():
                    for what in ("played_vs_one_shot", "oracle_vs_one_shot"):
                        keep(name, f"{what} (full rows)", measured[what])
    return {"failures": failures, "worst": worst, "points": points_seen}


def table(rows: Mapping[str, Mapping[str, Any]]) -> str:
    """README's table: per model and library, the worst full-row values measured when recorded."""
    lines = [
        "| model | library (class) | points | played vs one-shot: worst mean KL | worst max \\|Δlogit\\| "
        "| oracle vs one-shot: worst mean KL | worst max \\|Δlogit\\| |",
        "|---|---|---|---|---|---|---|",
    ]
    for model_id, found in rows.items():
        for name, (conformance_class, library) in LIBRARIES.items():
            w = found["worst"][name]
            played, oracle = w["played_vs_one_shot (full rows)"], w["oracle_vs_one_shot (full rows)"]
            lines.append(
                f"| {model_id} | {library} ({conformance_class}) | {found['points']} | {played['kl']:.2g} "
                f"| {played['max_abs_dlogit']:.2g} | {oracle['kl']:.2g} | {oracle['max_abs_dlogit']:.2g} |"
            )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``python -m specgate.stages.state_references [MODEL ...]``: the agreement of the
    recorded references, from the committed snapshots (no model, torch or llama.cpp)."""
    rows, bad = {}, 0
    for model_id in argv or snapshots.available("state_incremental"):
        found = agreement(model_id, {stage: snapshots.read(model_id, stage)["cases"] for stage in SNAPSHOTS})
        rows[model_id] = found
        for line in found["failures"]:
            print(f"FAIL {model_id}: {line}")
        bad += len(found["failures"])
        for name, values in found["worst"].items():
            for what, v in values.items():
                print(
                    f"{model_id} {name} {what}: worst mean KL {v['kl']:.3g}, max |Δ| {v['max_abs_dlogit']:.3g}"
                )
    print(table(rows))
    print(f"logits bounds: exact max |Δlogit| {logits.EXACT_MAX_ABS_TINY:g} (tiny) / "
          f"{logits.EXACT_MAX_ABS_REAL:g} (real); quantized mean KL {logits.QUANTIZED_KL_MEAN:g}")  # fmt: skip
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
