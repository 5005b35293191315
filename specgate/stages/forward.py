"""The stages of the forward pass and after it: logits, trace (judged in two
conformance classes), sample (the sampler chain; no model) and generate (greedy
streams with stop strings, two classes). A replay on a new input judges with the
gate's own comparison (``specgate.checks.<stage>``), the oracle's answer standing in
for the recorded references. Their cases are built from the references by
``specgate.stages.forward_cases`` (one prompt's case at a time: the recorders hold one
reference's weights at a time), ``sample_cases`` and ``generate_cases``."""

from __future__ import annotations

from typing import Any

from impl.protocol import CONFORMANCE_CLASSES  # PROTOCOL.md, "Conformance classes"
from specgate.stages.base import Stage, Verdict
from specgate.stages.forward_cases import logits_case, trace_case
from specgate.stages.generate_cases import generate_cases
from specgate.stages.sample_cases import DRAW_MARGIN, sample_cases


def _claimed(engine: Any, conformance_class: str) -> None:
    from specgate.outcomes.gate import not_applicable

    if conformance_class not in engine.classes:
        not_applicable(f"{engine.name} does not claim the {conformance_class!r} conformance class")


def replay_logits(
    engine: Any, oracle: Any, model: Any, inp: dict[str, Any], conformance_class: str
) -> Verdict:
    """The logits gate of one class, the oracle's logits standing in for both references
    (every position recorded, top-64 as in the snapshots)."""
    import numpy as np

    from specgate.checks import logit_metrics, logits
    from specgate.outcomes.gate import call

    _claimed(engine, conformance_class)
    ids = list(inp["ids"])
    positions = list(range(len(ids)))
    # the oracle's [T, n_vocab] logits kept as the snapshots keep them (top-64, a few
    # positions at a time) and let go before the engine's answer arrives: one such
    # matrix alive at a time, not two (issue 38: 5.2 GB for 512 ids on the 0.5B)
    expected = np.asarray(oracle.logits(model, ids), dtype=np.float32)
    record = logit_metrics.topk_record(expected, positions, 64)
    expected_top = [int(np.argmax(row)) for row in expected]
    del expected
    got = logits.answer(call(engine, "logits", model, ids))
    case = {"ids": ids, "positions": positions, "hf": record, "llamacpp": record}
    failure = logits.well_formed(case, got)
    if failure is None:
        failure, _ = logits.check(conformance_class, model.id, case, got)
    top = lambda a: [int(np.argmax(row)) for row in a]  # noqa: E731 — the answers, in brief
    answer = (top(got) if got.ndim == 2 else list(got.shape)) if isinstance(got, np.ndarray) else "named"
    return Verdict("fail" if failure else "pass", failure or "", {"top1": answer}, {"top1": expected_top})


def replay_sample(engine: Any, oracle: Any, model: Any, inp: dict[str, Any], _cls: str = "") -> Verdict:
    """A logit vector through the sampler chain (``{"logits": {n_vocab, ids, values},
    "params", "r"}``), as the sample gate judges it: candidate sets and probabilities
    after every step, then the draw (not compared when r lies within ``DRAW_MARGIN``
    of a cumulative boundary, where float32 and float64 sums may part)."""
    from specgate.checks import sample
    from specgate.outcomes.gate import call

    logits = sample.logits_of(inp)
    expected = oracle.sample(logits, inp["params"], inp["r"])
    got = call(engine, "sample", logits, inp["params"], inp["r"])
    case = {**sample.summarize(expected), "r": inp["r"], "token": expected.get("token")}
    if expected["chain"][-1:] != ["greedy"] and case["token"] is not None:
        _, margin = sample.expected_draw(expected["ids"], expected["probs"], inp["r"])
        case["token"] = case["token"] if margin > DRAW_MARGIN else None
    failure = sample.compare(case, got)
    brief = lambda result: {"n": len(result["ids"]), "token": result.get("token")}  # noqa: E731
    return Verdict("fail" if failure else "pass", failure or "", brief(got), brief(expected))


def replay_generate(
    engine: Any, oracle: Any, model: Any, inp: dict[str, Any], conformance_class: str
) -> Verdict:
    """A greedy generation with stop strings (``{"prompt", "params"}``), as the generate
    gate judges a stop case (``specgate.checks.generate.check``) with the oracle's stream
    as the reference: exact bytes, finish reason and id count where the streams agree,
    the engine's stop logic replayed on its own tokens where they part at a near tie."""
    from specgate.checks import generate
    from specgate.outcomes.gate import call

    _claimed(engine, conformance_class)
    ref = generate.well_formed(oracle.generate(model, inp["prompt"], {**inp["params"], "top_candidates": 2}))
    got = generate.well_formed(call(engine, "generate", model, inp["prompt"], inp["params"]))
    case = {
        **inp,
        "reference": {"ids": list(ref["ids"]), "margins": generate.margins(ref["steps"])},
        "expected": {"bytes": ref["bytes"], "finish_reason": ref["finish_reason"], "n_ids": len(ref["ids"])},
    }
    failure, _ = generate.check(case, got, conformance_class, model)
    brief = lambda r: {"bytes": r["bytes"], "finish_reason": r["finish_reason"], "ids": r["ids"]}  # noqa: E731
    return Verdict("fail" if failure else "pass", failure or "", brief(got), brief(ref))


LOGITS = Stage(
    "logits", capability="logits", snapshot="logits", classes=CONFORMANCE_CLASSES, replay=replay_logits,
    case_input=lambda case, _constructs: {"ids": list(case["ids"])}, build=logits_case,
)  # fmt: skip
#: The sampler's cases are replayed only from reproducer files (the search writes them): no case_input.
SAMPLE = Stage("sample", capability="sample", snapshot="sample", replay=replay_sample, build=sample_cases)
#: Generate reproducers come from the search (stop-string cases); recorded cases are not replayed.
GENERATE = Stage(
    "generate", capability="generate", snapshot="generate", classes=CONFORMANCE_CLASSES, replay=replay_generate,
    build=generate_cases,
)  # fmt: skip
TRACE = Stage("trace", capability="trace", snapshot="trace", classes=CONFORMANCE_CLASSES, build=trace_case)
