"""A Python adapter (``--impl module:Class``) cannot move the judge or turn a run green
(issue 38): it runs in a process of its own (``impl.registry.served``), judged as the
same engine under ``cmd:``.

* an adapter that patches ``oracle.rope.apply_rope`` when it loads leaves the judge's
  oracle as it was (in process, the diagnosis and the shrinking used the patched one);
* an adapter raising ``SystemExit(0)`` or ``KeyboardInterrupt`` on every case: each case
  is ``error`` with the adapter's message, the run exits 1 and writes every report (it
  used to exit 0 with only the JUnit file, or 2 with no report);
* an adapter answering an endless iterator: an ``error``, the run's peak bounded (5.8 GB
  in process).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import oracle.rope
from impl.registry import resolve
from specgate.plugin import model_missing
from specgate.supply import models as model_cache
from tests.engines.parity_run import run_parity

ADAPTER = "tests.engines.patching_adapter"
VOCAB = "qwen3-vocab"
CASES = "6"
GB = 1 << 30


def test_a_patching_adapter_leaves_the_judges_oracle_alone() -> None:
    original = oracle.rope.apply_rope
    engine = resolve(f"{ADAPTER}:PatchingEngine")
    try:
        assert "encode" in engine.capabilities  # loaded (and patched) wherever it runs
    finally:
        engine.close()
    assert oracle.rope.apply_rope is original, "the adapter patched the judge's reference"


@pytest.fixture
def vocab() -> None:
    if VOCAB not in model_cache.cached_models():
        model_missing(f"{VOCAB}; run: specgate models fetch {VOCAB}")


@pytest.mark.parametrize(
    ("engine", "said"),
    [
        ("ExitingEngine", "SystemExit"),
        ("InterruptingEngine", "KeyboardInterrupt"),
        ("EndlessEngine", "iterator"),
    ],
)
def test_an_escaping_adapter_errs_its_cases_and_fails_the_run(
    tmp_path: Path, vocab: None, engine: str, said: str
) -> None:
    run = run_parity(tmp_path, f"{ADAPTER}:{engine}", "encode", VOCAB, "--max-cases", CASES, timeout=600,
                     measure=True)  # fmt: skip
    print(f"{engine}: exit {run.status}, peak {run.peak_bytes / 2**20:.0f} MB")
    assert run.status == 1, run.output[-3000:]
    outcomes = run.outcomes("encode")
    assert outcomes and set(outcomes) == {"error"}, outcomes
    assert all(said in c["message"] for c in run.report["cases"] if c["stage"] == "encode"), run.report[
        "cases"
    ][0]
    reports = tmp_path / "reports"
    for pattern in ("parity-*.md", "parity-*.json", "parity-*.html"):
        assert list(reports.glob(pattern)), f"no {pattern} written: {sorted(reports.iterdir())}"
    assert run.peak_bytes is not None and run.peak_bytes < 2 * GB
