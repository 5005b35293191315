"""The state snapshots' independent references (``specgate.stages.state_references``), read
from the committed snapshots alone (no model, torch or llama.cpp): at every judged point the
oracle's recorded reference agrees with transformers' (``exact``) and llama.cpp's
(``quantized``) — each library's row played on its own KV cache and its one-shot row — by
the logits stage's own check of that class; each library's played row is within its class
of its own one-shot row; README's table is the measured values; and a wrong oracle row is
caught, at the point it is wrong."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specgate.checks import logit_metrics, logits, state
from specgate.stages import state_cases, state_references
from specgate.upkeep import snapshots

ROOT = Path(__file__).resolve().parents[2]


def stored(model_id: str) -> dict[str, Any]:
    return {stage: snapshots.read(model_id, stage)["cases"] for stage in state_references.SNAPSHOTS}


@pytest.mark.parametrize("model_id", state_cases.MODELS)
def test_the_oracle_agrees_with_transformers_and_llama_cpp_at_every_judged_point(
    model_id: str, record_property: Any
) -> None:
    found = state_references.agreement(model_id, stored(model_id))
    assert not found["failures"], (
        f"{model_id}: {len(found['failures'])} failures, first: {found['failures'][0]}"
    )
    assert found["points"] >= 8
    for name, (conformance_class, _) in state_references.LIBRARIES.items():
        for what, values in found["worst"][name].items():
            record_property(f"{model_id} {name} {what}", values)
        # the library's own incremental-vs-full noise, measured on every token of the vocabulary
        noise = found["worst"][name]["played_vs_one_shot (full rows)"]
        if conformance_class == "exact":
            assert noise["max_abs_dlogit"] <= logits.exact_tolerance(model_id), (model_id, name, noise)
        else:
            assert noise["kl"] <= logits.QUANTIZED_KL_MEAN, (model_id, name, noise)


def test_every_judged_point_records_both_libraries_played_and_one_shot() -> None:
    for model_id in state_cases.MODELS:
        for stage, cases in stored(model_id).items():
            for case_id, case in cases.items():
                for point in state_references.points(stage, case):
                    refs = point["references"]
                    assert sorted(refs) == sorted(state_references.LIBRARIES), (model_id, case_id)
                    for recorded in refs.values():
                        assert sorted(recorded) == [
                            "one_shot",
                            "oracle_vs_one_shot",
                            "played",
                            "played_vs_one_shot",
                        ]
    provenance = snapshots.read(state_cases.MODELS[0], "state_conversation")["provenance"]
    assert set(state_references.LIBRARIES) <= set(provenance["references"])
    assert {"transformers", "llama-cpp-python", "torch"} <= set(provenance["packages"])
    assert provenance["command"].startswith("python -m specgate.stages.state_cases ")


def test_readme_s_state_table_is_the_snapshots_measured_values() -> None:
    rows = {m: state_references.agreement(m, stored(m)) for m in snapshots.available("state_incremental")}
    assert state_references.table(rows) in (ROOT / "README.md").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------
# a wrong oracle row is caught


def perturbed(record: dict[str, Any], change: Any) -> dict[str, Any]:
    """``record`` with its top-k log-probabilities changed by ``change(ids, logprobs)``."""
    ids, lp, lse = logit_metrics.parse_record(record)
    ids, lp = change(ids.copy(), lp.copy())
    return {
        "top_ids": [" ".join(map(str, row)) for row in ids],
        "top_logprobs": [" ".join(f"{v:.7g}" for v in row) for row in lp],
        "lse": list(lse),
    }


def first_points(model_id: str) -> list[dict[str, Any]]:
    cases = stored(model_id)
    turns = next(iter(cases["state_conversation"].values()))["turns"]
    return [next(iter(cases["state_incremental"].values())), turns[-1]]


def raise_top(ids: np.ndarray, lp: np.ndarray, by: float) -> tuple[np.ndarray, np.ndarray]:
    lp[0, 0] += by
    return ids, lp


def reversed_order(ids: np.ndarray, lp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return ids[:, ::-1], lp  # the top id gets the k-th probability and back


@pytest.mark.parametrize("model_id", state_cases.MODELS)
def test_a_wrong_oracle_row_fails_the_class_of_each_library(model_id: str) -> None:
    tol = logits.exact_tolerance(model_id)
    for point in first_points(model_id):
        refs = point["references"]
        for form in ("played", "one_shot"):
            # off by 3x the exact tolerance on the top token: transformers catches it
            off = perturbed(point["reference"], lambda i, lp: raise_top(i, lp, 3 * tol))
            failure, _ = state.judge_record("exact", model_id, point["ids"], refs["hf"][form], off)
            assert failure is not None and "|Δ" in failure, failure
            # the order of the top candidates reversed: both classes catch it
            wrong = perturbed(point["reference"], reversed_order)
            for name, (conformance_class, _) in state_references.LIBRARIES.items():
                failure, _ = state.judge_record(
                    conformance_class, model_id, point["ids"], refs[name][form], wrong
                )
                assert failure is not None, (model_id, name, form)
                assert "top-1" in failure, failure


@pytest.mark.parametrize("model_id", state_cases.MODELS)
def test_a_wrong_oracle_row_is_named_at_its_point(model_id: str) -> None:
    cases = copy.deepcopy(stored(model_id))
    case_id, case = next(iter(cases["state_conversation"].items()))
    case["turns"][-1]["reference"] = perturbed(case["turns"][-1]["reference"], reversed_order)
    found = state_references.agreement(model_id, cases)
    where = f"state_conversation/{case_id} turn {len(case['turns'])}, "
    wrong = {line.split(": ")[0] for line in found["failures"]}
    assert wrong == {
        f"{where}{name}, oracle vs {form}"
        for name in state_references.LIBRARIES
        for form in ("played", "one-shot")
    }, found["failures"]
    assert all(re.search("top-1", line) for line in found["failures"])
