"""The suite's two tiers (noxfile.py): ``nox -s tests`` runs the fast one, ``nox -s live``
the slow one. Every test is in exactly one, and a test that asks for a live reference
is in the slow one even when its author forgot the marker."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from tests.child_pytest import planted_pytest, run_pytest

ROOT = Path(__file__).resolve().parents[2]


def tier_expressions() -> tuple[str, str]:
    """The two ``-m`` expressions, read from the noxfile (the sessions' own source)."""
    text = (ROOT / "noxfile.py").read_text(encoding="utf-8")
    fast = re.search(r'^FAST_TIER = "([^"]+)"$', text, re.M)
    live = re.search(r'^LIVE_TIER = "([^"]+)"$', text, re.M)
    assert fast and live, "noxfile.py defines FAST_TIER and LIVE_TIER"
    return fast.group(1), live.group(1)


def test_every_combination_of_markers_is_in_exactly_one_tier():
    from _pytest.mark.expression import Expression

    fast, live = (Expression.compile(e) for e in tier_expressions())
    markers = ["live", "slow", "gate"]
    for present in itertools.product([False, True], repeat=len(markers)):
        has = {m for m, p in zip(markers, present, strict=True) if p}

        def matcher(name: str, /, **_kwargs: object) -> bool:
            return name in has  # noqa: B023 (evaluated right here)

        assert fast.evaluate(matcher) != live.evaluate(matcher), f"markers {sorted(has)}"


PLANTED = """
def test_asks_for_a_reference(reference):
    pass

def test_plain():
    pass
"""


@pytest.mark.parametrize("tier", [0, 1], ids=["fast", "live"])
def test_a_test_asking_for_a_reference_is_in_the_live_tier_without_a_marker(tmp_path, tier):
    (tmp_path / "test_planted.py").write_text(PLANTED, encoding="utf-8")
    proc = planted_pytest(tmp_path, "--collect-only", "-q", "-m", tier_expressions()[tier], str(tmp_path))
    collected = re.findall(r"::(test_\w+)", proc.stdout)
    expected = [["test_plain"], ["test_asks_for_a_reference"]][tier]
    assert collected == expected, proc.stdout[-2000:] + proc.stderr[-2000:]


MISSING = """
from specgate.plugin import setup_missing

def test_needs_something_absent():
    setup_missing("the widget is not installed", remedy="nox -s live installs it")
"""


@pytest.mark.parametrize("live_references", [False, True], ids=["partial local run", "a tier"])
def test_something_missing_fails_a_tier_and_skips_a_partial_run(tmp_path, live_references):
    """Both tiers run with --live-references after installing and fetching everything: there a
    missing model, reference or engine is a broken setup, never a quiet skip."""
    (tmp_path / "test_missing.py").write_text(MISSING, encoding="utf-8")
    proc = planted_pytest(tmp_path, "-rs", str(tmp_path), *(["--live-references"] if live_references else []))
    out = proc.stdout + proc.stderr
    if live_references:
        assert proc.returncode == 1 and "1 failed" in out, out[-2000:]
        assert "the widget is not installed (nox -s live installs it)" in out, out[-2000:]
    else:
        assert proc.returncode == 0 and "1 skipped" in out, out[-2000:]
        assert re.search(r"^SKIPPED \[1\] \S+: the widget is not installed$", out, re.M), out[-2000:]


def collected(tier: str | None, *paths: str) -> list[str]:
    """The node ids ``-m tier`` selects among this checkout's ``paths`` (all without a tier)."""
    proc = run_pytest("--collect-only", "-q", *paths, *(["-m", tier] if tier else []))
    assert proc.returncode in (0, 5), proc.stdout[-2000:] + proc.stderr[-2000:]  # 5: none selected
    return [line for line in proc.stdout.splitlines() if "::" in line]


def test_a_real_models_forward_gate_cases_are_the_slow_tiers_and_a_tiny_models_the_fast_ones():
    """``FORWARD_GATE_STAGES`` (conftest.py): the forward stages' cases on a real model are
    gated in the slow tier, on a tiny model in the fast one; the other stages' cases of a
    real model stay fast. None is lost: the two tiers' cases are every case, once."""
    paths = (
        "specgate/gates/test_logits.py",
        "specgate/gates/test_state.py",
        "specgate/gates/test_metadata.py",
    )
    fast, live = (collected(e, *paths) for e in tier_expressions())
    every = collected(None, *paths)
    assert sorted(fast + live) == sorted(every)

    def real(ids: list[str], stage: str) -> list[str]:
        return [i for i in ids if f"::{stage}[" in i and "[tiny-" not in i]

    for stage in ("test_logits", "test_state_reuse", "test_state_incremental"):
        assert real(live, stage) and real(live, stage) == real(every, stage), stage
        assert not real(fast, stage), stage
        assert [i for i in fast if f"::{stage}[tiny-" in i], stage  # the tiny models' are fast
    assert real(fast, "test_metadata") == real(every, "test_metadata") != []
