"""The reference re-checks' drift rules catch a drifted reference and let float noise
pass. Each rule is run on a stored snapshot case against itself (no drift) and against
a copy with one planted change; no live reference is needed."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from specgate.checks import generate as generate_checks
from specgate.checks import logit_metrics
from specgate.checks import logits as logits_checks
from specgate.checks import sample as sample_checks
from specgate.checks.logits import EXACT_MAX_ABS_TINY, QUANTIZED_TIE_MARGIN
from specgate.upkeep import snapshots

MODEL = "tiny-qwen3-f32"


def stored(stage: str) -> dict:
    return json.loads(snapshots.path_for(MODEL, stage).read_text("utf-8"))["cases"]


def full_logits(case: dict, record: str) -> np.ndarray:
    """Logits [T, n_vocab] that reproduce a stored top-k record at its positions: the
    top-k tokens at their logits, the rest of the probability mass spread evenly."""
    ids, logprobs, lse = logit_metrics.parse_record(case[record])
    n_vocab = 151_936
    out = np.zeros((len(case["ids"]), n_vocab), dtype=np.float32)
    for t, position in enumerate(case["positions"]):
        rest = max(1.0 - np.exp(logprobs[t]).sum(), 1e-30)
        out[position] = np.log(rest / (n_vocab - ids.shape[1])) + lse[t]
        out[position, ids[t]] = logprobs[t] + lse[t]
    return out


@pytest.fixture(scope="module")
def logits_case() -> dict:
    return stored("logits")["raw_en"]


def test_logits_drift_passes_the_stored_reference_itself(logits_case):
    hf, llama = full_logits(logits_case, "hf"), full_logits(logits_case, "llamacpp")
    assert logits_checks.logits_drift(MODEL, logits_case, logits_case["ids"], hf, llama) is None


def test_logits_drift_catches_transformers_moving_past_the_tight_tolerance(logits_case):
    hf, llama = full_logits(logits_case, "hf"), full_logits(logits_case, "llamacpp")
    position = logits_case["positions"][-1]
    top = int(logits_case["hf"]["top_ids"][-1].split()[3])
    hf[position, top] += 3 * EXACT_MAX_ABS_TINY
    why = logits_checks.logits_drift(MODEL, logits_case, logits_case["ids"], hf, llama)
    assert why and why.startswith("transformers: max |Δlogit|"), why


def test_logits_drift_catches_llamacpp_changing_its_answer(logits_case):
    hf, llama = full_logits(logits_case, "hf"), full_logits(logits_case, "llamacpp")
    for position in logits_case["positions"]:  # every position's top token loses 20 logits
        llama[position, llama[position].argmax()] -= 20
    why = logits_checks.logits_drift(MODEL, logits_case, logits_case["ids"], hf, llama)
    assert why and why.startswith("llama.cpp:"), why


def test_logits_drift_catches_other_prompt_ids(logits_case):
    hf, llama = full_logits(logits_case, "hf"), full_logits(logits_case, "llamacpp")
    why = logits_checks.logits_drift(MODEL, logits_case, [*logits_case["ids"][:-1], 0], hf, llama)
    assert why and why.startswith("prompt ids differ"), why


@pytest.fixture(scope="module")
def generate_cases() -> dict:
    return stored("generate")


def test_generate_drift_passes_the_stored_cases_themselves(generate_cases):
    drift = generate_checks.generate_drift(MODEL)
    assert all(drift(k, case, copy.deepcopy(case)) is None for k, case in generate_cases.items())


def test_generate_drift_catches_a_stream_parting_where_the_margin_is_wide(generate_cases):
    case = copy.deepcopy(generate_cases["greedy/code"])
    stream, tolerance = (
        case["references"]["transformers"],
        generate_checks.tie_tolerance(MODEL, "transformers"),
    )
    step = next(k for k, m in enumerate(stream["margins"]) if m > tolerance)
    stream["ids"][step] += 1
    why = generate_checks.generate_drift(MODEL)("greedy/code", generate_cases["greedy/code"], case)
    assert why and why.startswith("transformers:") and f"index {step}" in why, why


def test_generate_drift_catches_a_margin_moving_more_than_the_tie_tolerance(generate_cases):
    case = copy.deepcopy(generate_cases["greedy/code"])
    tolerance = generate_checks.tie_tolerance(MODEL, "llamacpp")
    case["references"]["llamacpp"]["margins"][2] += 2 * tolerance
    why = generate_checks.generate_drift(MODEL)("greedy/code", generate_cases["greedy/code"], case)
    assert why and "top-2 margin at step 2 moved" in why, why


def test_generate_drift_catches_a_changed_stop_answer(generate_cases):
    case_id = next(k for k in generate_cases if k.startswith("stop-"))
    case = copy.deepcopy(generate_cases[case_id])
    case["expected"]["n_ids"] += 1
    assert generate_checks.generate_drift(MODEL)(case_id, generate_cases[case_id], case)


def test_exact_drift_catches_any_change():
    case = stored("sample")["crafted-quarters/top-p-exact-0.75"]
    changed = copy.deepcopy(case)
    changed["final"]["top"][0][1] += 1e-9
    assert snapshots.exact("crafted-quarters/top-p-exact-0.75", case, copy.deepcopy(case)) is None
    assert snapshots.exact("crafted-quarters/top-p-exact-0.75", case, changed)


def test_window_drift_passes_the_stored_window_and_catches_a_moved_logit():
    window = sample_checks.stored_windows(stored("sample"))["code"]
    live = sample_checks.logits_of({"logits": window})
    assert sample_checks.window_drift("code", window, live) is None
    live[window["ids"][5]] += 2 * QUANTIZED_TIE_MARGIN
    why = sample_checks.window_drift("code", window, live)
    assert why and f"token {window['ids'][5]}" in why, why
    assert sample_checks.window_drift("gone", None, live) == "window 'gone' is not in the snapshot"


def _scaled(case: dict, record: str, point: str, factor: float) -> dict:
    from impl.process import wire

    changed = copy.deepcopy(case)
    value = np.asarray(wire.decode_value(case[record][point]))
    changed[record][point] = wire.encode_value((value * factor).astype(value.dtype))
    return changed


def test_trace_drift_passes_the_stored_case_and_catches_each_reference_moving():
    from specgate.checks import trace as trace_checks

    (case,) = stored("trace").values()
    assert trace_checks.trace_drift(case, copy.deepcopy(case)) is None
    # float noise well under each class's tolerance passes
    assert trace_checks.trace_drift(case, _scaled(case, "hf", "l_out-1", 1 + 1e-5)) is None
    assert trace_checks.trace_drift(case, _scaled(case, "llamacpp", "l_out-1", 1.01)) is None
    moved = trace_checks.trace_drift(case, _scaled(case, "hf", "l_out-1", 1 + 1e-3))
    assert moved and moved.startswith("transformers: l_out-1, positions 0–7") and "vs tol 0.0001" in moved
    moved = trace_checks.trace_drift(case, _scaled(case, "llamacpp", "Kcur-2", 1.5))
    assert moved and moved.startswith("llama.cpp: Kcur-2, positions 0–7") and "vs tol 0.2" in moved
    other = {**copy.deepcopy(case), "ids": case["ids"][:-1]}
    assert "prompt ids differ" in trace_checks.trace_drift(case, other)
