"""The CI sample: every engine folder of ``impl/ecosystem/`` gated on its ``[ci]`` sample —
one model (and its `[ci]` stages, when given), ``max_cases`` cases per stage (``--max-cases N``: spread evenly over each
(stage, model) row, deterministic) — in a subprocess pytest run, as the ecosystem
session would. An adapter that rots (crashes at the handshake, speaks the wrong
protocol, answers nothing but errors and refusals) fails here; an engine that is not
installed fails with the installer's message (``nox -s live`` installs them first,
recording each outcome in ``reports/ecosystem-install.json``).

The full table is ``nox -s ecosystem``'s job, not CI's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specgate import ecosystem
from specgate.supply.models import PROJECT_ROOT
from tests.ecosystem.engines import EXITS_AT_ONCE, ORACLE, engine_folder

INSTALL_STATUS = PROJECT_ROOT / "reports" / "ecosystem-install.json"
#: Seconds one engine's sample may take (a hang costs this much, then fails).
SAMPLE_BUDGET = 420.0
ENGINES = ecosystem.discover()


def installer_message(spec: ecosystem.EngineSpec) -> str:
    """Why ``spec`` is not installed, as its installer said (``nox -s live`` records it)."""
    try:
        recorded = json.loads(INSTALL_STATUS.read_text(encoding="utf-8")).get(spec.key)
    except (OSError, ValueError):
        recorded = None
    if recorded is None:
        return f"no install recorded; run `python -m specgate.ecosystem install --engines {spec.key}`"
    return f"{recorded['status']}: {recorded['message']}"


def sample_run(spec: ecosystem.EngineSpec, tmp_path: Path) -> ecosystem.EngineRun:
    export_dir = tmp_path / "export"
    problems = ecosystem.export_tokenizers(set(spec.ci_models), export_dir)
    assert not problems, problems
    return ecosystem.run_engine(
        spec,
        ecosystem.Install("already installed"),
        tmp_path / "runs",
        SAMPLE_BUDGET,
        sample=True,
        export_dir=export_dir,
        extra=["--shrink-budget", "0"],
    )


def test_every_engine_folder_is_found() -> None:
    assert "llama_cpp_server" in [f.name for f in ENGINES]


def test_every_engine_toml_loads_and_states_its_cost_or_why_it_cannot_run() -> None:
    specs = [ecosystem.EngineSpec.load(folder) for folder in ENGINES]  # a bad key: one line, here
    assert len(specs) >= 10
    assert not [
        s.key for s in specs if s.cost is None and s.unavailable is None and s.key != "llama_cpp_server"
    ]


@pytest.mark.slow
@pytest.mark.parametrize("folder", ENGINES, ids=[f.name for f in ENGINES])
def test_engine_answers_its_ci_sample(folder: Path, tmp_path: Path) -> None:
    spec = ecosystem.EngineSpec.load(folder)
    if spec.unavailable:
        pytest.skip(f"{spec.name} cannot run here (a row saying so in the table): {spec.unavailable}")
    found = ecosystem.installed_version(spec)
    if found != spec.version:
        pytest.fail(
            f"{spec.name}: {spec.package}=={spec.version} is not installed (found {found}): {installer_message(spec)}",
            pytrace=False,
        )
    row = sample_run(spec, tmp_path)
    problem = ecosystem.sample_problem(row)
    assert problem is None, problem
    # The sample is the sample: at most max_cases per (stage, model) row.
    for payload in row.reports:
        for line in payload["matrix"]:
            assert sum(line[o] for o in ecosystem.OUTCOMES) <= spec.ci_max_cases, line


def test_the_sample_check_passes_an_adapter_that_answers(tmp_path: Path) -> None:
    spec = ecosystem.EngineSpec.load(engine_folder(tmp_path / "engines", "oracle_through_protocol", ORACLE))
    row = sample_run(spec, tmp_path)
    assert ecosystem.sample_problem(row) is None
    counts = row.counts()
    assert set(counts) == {"split", "encode"}
    assert all(sum(c.values()) == 3 for c in counts.values()), counts


def test_an_adapter_that_exits_at_once_fails_the_sample(tmp_path: Path) -> None:
    spec = ecosystem.EngineSpec.load(engine_folder(tmp_path / "engines", "broken", EXITS_AT_ONCE))
    row = sample_run(spec, tmp_path)
    problem = ecosystem.sample_problem(row)
    # The gate run stops at the failed handshake, naming it; the row says so.
    assert problem is not None, row
    # the run's report says the engine did not start (specgate.run.startup), and the row quotes it
    assert problem.startswith("broken: error: specgate: the engine") and "did not start" in problem, problem
    assert "exited (or closed stdout) before answering the handshake (exit status 3)" in problem
