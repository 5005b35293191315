"""Every forward diagnosis of the catalogue names its planted bug, and a look-alike is
not diagnosed.

Each engine is ``tests/engines/mutants/forward_bugs.py BUG`` — the oracle with one
classic forward-pass bug monkeypatched in (written there independently of the
catalogue's knobs), served as a real ``cmd:`` process — gated on the logits stage of a
tiny model in both conformance classes. The report's groups (the JSON and the Markdown
as shown) must carry the expected diagnoses, each with its evidence — the count of
failing cases it reproduces and the measured distance — and none of the forbidden ones.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specgate.diagnose.forward import CATALOGUE
from specgate.plugin import model_missing
from specgate.supply import models as model_cache
from tests.diagnose.planted import evidence_parts
from tests.engines.parity_run import ParityRun, run_parity, script_impl

ENGINE = Path(__file__).resolve().parents[1] / "engines" / "mutants" / "forward_bugs.py"
CAUSE = {h.name: h.cause for h in CATALOGUE}

pytestmark = pytest.mark.slow  # a parity run each, ~30 s on the loaded machine
#: the 512-token prompt (152k logits × 512 over the pipe) only where a bug shows differently on it:
#: the mask, whose blocks of 64 queries must each see the key after their last one
LONG_PROMPT_LEFT_OUT = ((), ("-k", "not long_code_512"))

#: planted bugs, tiny model, the diagnoses that must name them in the exact class (and the
#: quantized one where given), the ones that must not appear in either class
PLANTED = [
    ("rope_interleaved", "tiny-qwen2-f32", {"rope_interleaved"}, {"rope_interleaved"}, {"rope_base_10000"}),
    ("rope_base", "tiny-qwen3-f32", {"rope_base_10000"}, {"rope_base_10000"}, {"rope_interleaved"}),
    ("qk_norm_missing", "tiny-qwen3-f32", {"qk_norm_missing"}, {"qk_norm_missing"}, {"rms_eps_1e-3"}),
    # epsilon 1e-3 moves the tiny models' logits by ~0.01: beyond the exact tolerance, within the quantized one
    ("rms_eps", "tiny-qwen2-f32", {"rms_eps_1e-3"}, set(), set()),
    ("bias_missing", "tiny-qwen2-f32", {"bias_missing"}, {"bias_missing"}, set()),
    ("gqa_order", "tiny-qwen2-f32", {"gqa_modulo"}, {"gqa_modulo"}, set()),
    ("tied_output", "tiny-qwen2-f32", {"tied_output"}, {"tied_output"}, set()),
    ("swiglu_swapped", "tiny-qwen3-f32", {"swiglu_swapped"}, {"swiglu_swapped"}, set()),
    ("mask_off_by_one", "tiny-qwen3-f32", {"mask_off_by_one"}, {"mask_off_by_one"}, set()),
    ("q4_0_interleaved", "tiny-qwen2-q4_0", {"q4_0_interleaved"}, {"q4_0_interleaved"}, set()),
    # two bugs in one forward: the missing bias alone reproduces the single-token case (RoPE does not
    # turn position 0) and nothing else; contradicted by the other cases, it must not be named
    ("rope_interleaved,bias_missing", "tiny-qwen2-f32", set(), set(), {"bias_missing", "rope_interleaved"}),
    # look-alikes: another RoPE base (Llama 3's 500 000), and the right logits plus float noise
    ("rope_base_500000", "tiny-qwen3-f32", set(), set(), set(CAUSE)),
    ("logit_noise", "tiny-qwen2-f32", set(), set(), set(CAUSE)),
]


def unescaped(markdown: str) -> str:
    """The Markdown as shown: its backslash escapes read as the characters they escape."""
    return re.sub(r"\\(.)", r"\1", markdown)


def diagnoses(run: ParityRun, stage: str) -> dict[str, dict]:
    """The groups showing in ``stage`` by the catalogue names their diagnosis carries (``a+b``
    for a pair). One cause is one group: a bug of both conformance classes is one group whose
    ``stages`` name both, its evidence one part per class (``evidence_parts``)."""
    out = {}
    for g in run.report["groups"]:
        if stage not in (g.get("stages") or [g["stage"]]) or not g.get("diagnosis"):
            continue
        named = [n for n, cause in CAUSE.items() if cause in g["diagnosis"]]
        out["+".join(sorted(named, key=list(CAUSE).index))] = g
    return out


def test_every_forward_hypothesis_of_the_catalogue_is_planted_here() -> None:
    named = {
        n for _, _, exact, quantized, _ in PLANTED for key in (*exact, *quantized) for n in key.split("+")
    }
    assert named == set(CAUSE)


@pytest.mark.parametrize(
    ("bugs", "model", "exact", "quantized", "not_named"), PLANTED, ids=[p[0] for p in PLANTED]
)
def test_a_planted_forward_bug_is_diagnosed_by_name(
    tmp_path: Path, bugs: str, model: str, exact: set[str], quantized: set[str], not_named: set[str]
) -> None:
    if model not in model_cache.cached_tiny_models():
        model_missing(f"{model} (run: specgate models tiny)")
    run = run_parity(
        tmp_path, script_impl(ENGINE, bugs), "logits", model,
        "--shrink-budget", "0", "--diagnose-budget", "600", *LONG_PROMPT_LEFT_OUT[bugs != "mask_off_by_one"],
        files=("specgate/gates/test_logits.py",),
    )  # fmt: skip
    assert run.status == 1, run.output[-3000:]
    markdown = unescaped(next((tmp_path / "reports").glob("parity-*.md")).read_text(encoding="utf-8"))
    for stage, named in (("logits/exact", exact), ("logits/quantized", quantized)):
        found = diagnoses(run, stage)
        signatures = [g["signature"] for g in run.report["groups"]]
        assert set(found) == named, f"{bugs} {stage}: diagnosed {sorted(found)}; groups: {signatures}"
        assert not {n for key in found for n in key.split("+")} & not_named
        failing = sum(1 for c in run.report["cases"] if c["stage"] == stage and c["outcome"] == "fail")
        for group in found.values():
            shown = [row for row in group["shows_in"] if stage in row["stages"]]
            assert len(shown) == 1, group["shows_in"]
            part = f"{shown[0]['count']} of {failing} failing {stage} cases of {model} equal "
            evidence = next((e for e in evidence_parts(group["evidence"]) if e.startswith(part)), "")
            assert evidence, f"no evidence part starting {part!r}: {group['evidence']}"
            assert " the oracle's logits (which agree with transformers) when it " in evidence
            if stage == "logits/exact":
                m = re.search(r"max \|Δlogit\| ≤ ([\d.e-]+)\): measured max \|Δlogit\| ([\d.e+-]+), "
                              r"against the spec'd oracle ([\d.e+-]+)$", evidence)  # fmt: skip
                assert m, evidence
                tol, to_deviated, to_spec = map(float, m.groups())
                assert to_deviated <= tol < to_spec, evidence
            else:
                m = re.search(r"measured worst mean KL ([\d.e+-]+), top-1 ([\d.]+); against the spec'd oracle "
                              r"mean KL ([\d.e+-]+)$", evidence)  # fmt: skip
                assert m, evidence
                kl, top1, kl_spec = map(float, m.groups())
                assert kl <= 0.02 < kl_spec and top1 >= 0.95, evidence
            assert f"**Diagnosis:** {group['evidence']}." in markdown
    if not exact and not quantized:  # nothing diagnosed: the failures stay grouped by their messages
        assert not any(g.get("diagnosis") for g in run.report["groups"])
        assert run.report["groups"] and "**Diagnosis:**" not in markdown
